"""One part of ``verify``'s walk over the rows, in a process of its own.

``python -m evalledger.ledger._verify_part LEDGER LO HI`` checks the rows
``LO < seq <= HI`` and prints its findings as JSON (``_verify._Part``). ``verify``
starts one per CPU beyond its own for a large ledger: a row's link needs only the
stored hash before it.
"""

from __future__ import annotations

import sys

from ._store import Ledger
from ._verify import _check_part


def main(argv: list[str]) -> None:
    path, lo, hi = argv
    with Ledger(path, read_only=True) as ledger:
        part = _check_part(ledger, int(lo), int(hi), None)
    sys.stdout.buffer.write(part.to_json())


if __name__ == "__main__":
    main(sys.argv[1:])
