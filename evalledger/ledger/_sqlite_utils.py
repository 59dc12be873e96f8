"""sqlite-utils, imported without pandas and numpy.

sqlite-utils imports pandas and numpy when they are installed, to convert their values
on insert; evalledger never inserts either, and scipy (a dependency) always brings
numpy. Imported with sqlite-utils, the two cost ``verify`` 0.25 s of start-up and 45 MB
of its peak memory. Each is hidden only while sqlite-utils imports and only when not
imported already: the statistics that need numpy import it as usual afterwards.
"""

from __future__ import annotations

import sys

_hidden = [name for name in ("pandas", "numpy") if name not in sys.modules]
for _name in _hidden:
    sys.modules[_name] = None  # type: ignore[assignment]  # import raises ImportError
try:
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations
finally:
    for _name in _hidden:
        if sys.modules.get(_name, 0) is None:
            del sys.modules[_name]

__all__ = ["Database", "Migrations"]
