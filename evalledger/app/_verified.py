"""How far a ledger has been verified, kept outside it, and the check that goes on from there.

Every ``evalledger verify`` that finds a ledger intact records an anchor of its last row
("verified through seq N") in this user's state folder (``$EVALLEDGER_STATE_DIR``, else
``$XDG_STATE_HOME/evalledger``, else ``~/.local/state/evalledger``), one file per
ledger file. ``verify --since last`` starts from it: the ledger must still hold that
row with that hash (a rewritten or cut history fails there), then only the rows after
it are read. A run ends by the same check, from that anchor when there is one, else
from the row before its own first event; a check from the anchor moves it on. A full
check holds the ledger to the recorded anchor as to any other: a cut tail shows.

The anchor is only as safe as the folder it is in: a task run with ``isolation:
none`` runs as the user and can reach it (docs/ledger.md, "Verify"). A checkpoint
kept elsewhere (``evalledger checkpoint``) is what an attacker of this machine
cannot rewrite.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from evalledger._files import write_atomic
from evalledger.errors import InvalidRequest
from evalledger.ledger import Anchor, BadAnchor, utc_now

if TYPE_CHECKING:
    from evalledger.ledger import Ledger, VerifyReport

    from ._snapshot_check import SnapshotCheck


def state_dir() -> Path:
    """Where verified-through anchors are kept."""
    if folder := os.environ.get("EVALLEDGER_STATE_DIR"):
        return Path(folder)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "evalledger"


def _anchor_file(ledger: Ledger) -> Path:
    # One per ledger file: copies of a ledger share its id and part ways after the copy.
    where = hashlib.sha256(str(ledger.path.resolve()).encode()).hexdigest()[:16]
    return state_dir() / "verified" / f"{ledger.ledger_id}-{where}.json"


def verified_through(ledger: Ledger) -> Anchor | None:
    """The anchor the last check that found this ledger intact recorded; None when
    there is none (or it cannot be read: the next full check writes it anew)."""
    path = _anchor_file(ledger)
    if not path.exists():
        return None
    try:
        return Anchor.load(path)
    except BadAnchor:
        return None


def check_ledger(ledger: Ledger, *, since: Anchor | str | None = None,
                 anchors: list[Anchor] | None = None, deep: bool = False,
                 ) -> tuple[VerifyReport, SnapshotCheck]:
    """``verify`` with the snapshot check (from ``since`` on, when given: an anchor, an
    anchor's file, or ``last``: where the last check that found this ledger intact got
    to); an intact ledger's last row is recorded as verified through when the check
    covered every row (no ``since``) or went on from the recorded anchor. Returns the
    report and the snapshot check (what it counted).

    Raises:
        InvalidRequest: ``last`` with no record of an earlier check.
        BadAnchor: an anchor's file cannot be read as one.
    """
    from evalledger.ledger import verify

    from ._snapshot_check import SnapshotCheck

    if since == "last":
        since = verified_through(ledger)
        if since is None:
            raise InvalidRequest(f"{ledger.path} has no record of an earlier check that "
                                 "found it intact: run `evalledger verify` once")
    elif isinstance(since, str):
        since = Anchor.load(since)

    snapshots = SnapshotCheck(deep=deep, after_seq=since.seq if since is not None else 0)
    recorded = verified_through(ledger)
    # What an earlier check found here is an anchor like any other: a ledger restored
    # from an older copy, or cut, no longer holds it (delete the record to start anew).
    report = verify(ledger, anchors or [], checks=[snapshots], since=since,
                    recorded=recorded if since is None else None, seal_rows=deep)
    if since is None or since == recorded:
        _record(ledger, report)
    return report, snapshots


def _record(ledger: Ledger, report: VerifyReport) -> None:
    anchor = report.anchor(ledger.ledger_id, utc_now())
    if anchor is None:
        return
    known = verified_through(ledger)
    if known is not None and known.seq >= anchor.seq:
        return  # a concurrent check got further
    path = _anchor_file(ledger)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, anchor.model_dump_json(indent=2) + "\n")
    except OSError:
        pass  # a read-only home: the next check starts from the beginning again


# How many rows written beside a run (a merge, an import) its closing check reads before
# it reads only the run's own: a run must not end with a minute of checking others' rows.
BESIDE = 200_000


def check_after(ledger: Ledger, last_seq: int) -> VerifyReport:
    """A run's closing check: every row after the recorded anchor, or, without one (or
    with one more than ``BESIDE`` rows before the run began), after ``last_seq`` (the
    ledger's last row before the run began; 0: a new ledger, read whole)."""
    since = verified_through(ledger)
    if since is not None and last_seq - since.seq > BESIDE:
        since = None
    if since is None and last_seq > 0:
        since = ledger.anchor(until_seq=last_seq)
    report, _ = check_ledger(ledger, since=since)
    return report


def checkpoint(ledger: Ledger) -> Anchor:
    """An anchor of the ledger as it is now (its id, last seq and hash), stamped now:
    what ``verify --anchor`` later holds the ledger to.

    Raises:
        InvalidRequest: the ledger holds no events yet.
    """
    anchor = ledger.anchor()
    if anchor is None:
        raise InvalidRequest(f"{ledger.path} holds no events yet: nothing to anchor")
    return anchor.model_copy(update={"ts": utc_now()})
