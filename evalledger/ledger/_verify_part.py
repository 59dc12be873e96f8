"""One part of ``verify``'s walk over the rows, in a process of its own.

``python -m evalledger.ledger._verify_part LEDGER DEV:INO LO HI`` checks the rows
``LO < seq <= HI`` and prints its findings as JSON (``_verify._Part``). DEV:INO is the
file verify reads: a file put in the ledger's place meanwhile is refused (exit 3), and
verify checks that part itself, in its own read of the file it began with. ``verify``
starts one per CPU beyond its own for a large ledger: a row's link needs only the
stored hash before it.
"""

from __future__ import annotations

import sys

from ._store import Ledger, _file_id
from ._verify import _check_part


def main(argv: list[str]) -> None:
    path, file, lo, hi = argv
    with Ledger(path, read_only=True) as ledger:
        # Opened, then compared: a swap between the two is caught; one before the open is.
        if ":".join(map(str, _file_id(path) or ())) != file:
            sys.exit(3)
        part = _check_part(ledger, int(lo), int(hi), None)
    sys.stdout.buffer.write(part.to_json())


if __name__ == "__main__":
    main(sys.argv[1:])
