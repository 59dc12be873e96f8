"""``verify``'s check of derived data: every stored snapshot against a replay.

A snapshot is believed by every rebuild (``_repository``); this check is what makes
that safe to believe: each snapshot a rebuild of this version would read is compared
with a replay of its run's events up to its ``through_seq``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalledger.ledger import EventType
from evalledger.ledger._packed import PATTERN, PackedError, is_packed, unpacked
from evalledger.ledger._queries import (
    SnapshotHead,
    payload_at,
    snapshot_heads,
    snapshotted_runs,
)
from evalledger.projections._snapshots import SnapshotKind, as_json, snapshot_kinds

if TYPE_CHECKING:
    from evalledger.ledger import AnyEvent, Ledger
    from evalledger.ledger._lite import LiteEvent
    from evalledger.projections import Fold


@dataclass
class SnapshotCheck:
    """Every snapshot a rebuild of this version would read, compared with a replay of its
    run's events up to its ``through_seq``: a check of derived data for
    ``evalledger.ledger.verify(checks=[...])``, which calls it inside its read transaction.

    The replay reads what rebuilds read (the lifecycle rows, through the covering index,
    partially decoded) and folds each run once, in seq order, stopping at each snapshot's
    ``through_seq``. ``deep`` replays through the full event models instead (every field
    validated), as the Python API's typed events are: slower, and independent of the
    partial decoding that rebuilds use.
    """

    deep: bool = False
    after_seq: int = 0
    """Check only the snapshots stored after this seq (``verify --since``)."""
    runs: int = 0
    checked: int = 0
    ignored: int = 0
    """Snapshots of another fold version (or an unknown kind): no rebuild uses them."""
    problems: list[str] = field(default_factory=list)
    vouched: set[int] = field(default_factory=set)
    """Seqs of snapshots stored exactly as this version writes them (verify's ``Check``
    protocol: their payloads are valid and canonical, not parsed again)."""

    def __call__(self, ledger: Ledger) -> list[str]:
        """Check every run that has snapshots; one line per problem found."""
        last = ledger.last_seq()
        for run_id in snapshotted_runs(ledger, after_seq=self.after_seq):
            if isinstance(run_id, str):  # else stored as a BLOB: verify names the row
                self._check_run(ledger, run_id, last)
        return [f"snapshot: {p}" for p in self.problems]

    def _check_run(self, ledger: Ledger, run_id: str, last: int) -> None:
        from evalledger.ledger import LedgerError
        from evalledger.projections import ResumeFold, SummaryFold

        heads = [h for h in snapshot_heads(ledger, run_id) if h.seq > self.after_seq]
        if not heads:
            return
        self.runs += 1
        kinds = snapshot_kinds(SummaryFold(run_id), ResumeFold(run_id))
        known = {id(h) for h in heads
                 if h.kind in kinds and kinds[h.kind].version == h.fold_version}
        self.ignored += len(heads) - len(known)
        # One fold at a time, each over its own read of the run (a 100,000-task run's
        # summary fold is 80 MB, its resume fold 20): of fresh folds, the one whose
        # state the kind is, then the snapshots made from it. What each finds is said
        # in the order of the run's snapshots, as one replay of both would say it.
        found: list[tuple[int, str]] = []  # (the snapshot's place among heads, what)
        unread: str | None = None
        for state in ("summary_fold", "resume_fold"):
            kinds = snapshot_kinds(SummaryFold(run_id), ResumeFold(run_id))
            fold = kinds[state].fold
            mine = [(at, h) for at, h in enumerate(heads)
                    if id(h) in known and kinds[h.kind].fold is fold]
            if not mine:
                continue
            read = ledger.events if self.deep else ledger.lite_events
            replay = read(run_id, types=type(fold).TYPES)
            try:
                self._compare(_Replay(replay, fold), mine, kinds, run_id, ledger, last,
                              found)
            except LedgerError as e:  # an event that does not decode (verify lists it)
                unread = unread or str(e).removeprefix(f"{ledger.path}: ").removesuffix(
                    "; run `evalledger verify`")
            finally:
                close = getattr(replay, "close", None)
                if close is not None:
                    close()
            del kinds, fold  # before the next fold is made
        self.problems += [line for _, line in sorted(found, key=lambda f: f[0])]
        if unread is not None:
            self.problems.append(f"run {run_id}: its snapshots were not checked: {unread}")

    def _compare(self, replay: _Replay, heads: list[tuple[int, SnapshotHead]],
                 kinds: dict[str, SnapshotKind], run_id: str, ledger: Ledger, last: int,
                 found: list[tuple[int, str]]) -> None:
        """Each snapshot of ``heads`` (in ``through_seq`` order, each with its place
        among the run's) against its fold as it stands at its ``through_seq``; what
        differs into ``found``."""
        for at, head in heads:
            where = (f"run {run_id}: the {head.kind} snapshot at seq {head.seq} "
                     f"(through seq {head.through_seq})")
            if head.through_seq >= head.seq:  # past the ledger's end too: seq <= last
                beyond = f": the ledger ends at seq {last}" if head.through_seq > last else ""
                found.append((at, f"{where} claims events that come after it{beyond}"))
                self.checked += 1
                continue
            replay.fold_through(head.through_seq)
            if not self._same(ledger, head, kinds[head.kind], run_id):
                found.append((at, f"{where} differs from a full replay of the run"))
            self.checked += 1

    def _same(self, ledger: Ledger, head: SnapshotHead, made: SnapshotKind,
              run_id: str) -> bool:
        """Whether the stored snapshot holds what ``made`` makes now. First as text:
        the canonical JSON of the value, written a task key at a time, against the
        stored value's text, unpacked as it is read (neither held whole, nor the
        models it is made from: a 100,000-task run's summary is 44 MB of JSON). A
        packed value is its JSON as msgspec wrote it, so it holds the value only as
        those very bytes (the same data spelled otherwise inside a frame, ``true`` for
        ``1`` or keys twice, is no snapshot this code writes). What differs as text in
        a plain value is compared as data (a payload in another spelling, which verify
        names apart, or a float msgspec spells ``1e+20`` where the ledger has
        ``1e20``)."""
        payload = payload_at(ledger, head.seq)
        stored = _stored_value(head, payload)
        if stored is not None and _QUOTED_PACKED.fullmatch(stored):
            try:
                same = _equal(unpacked(stored), made.written())
            except PackedError:
                return False
            # Valid and canonical as stored: one JSON string, of base64 (nothing escaped).
            if same and not self.deep:
                self.vouched.add(head.seq)
            return same
        if not self.deep and stored is not None and _equal((stored.encode(),),
                                                           made.written()):
            # Canonical as written, unless a float is spelled 1e+20 (msgspec) where the
            # ledger's spelling is 1e20 (pydantic-core): then verify reads it whole.
            if not _EXPONENT.search(stored):
                self.vouched.add(head.seq)
            return True
        data = self._value(payload, run_id)
        return data is not None and not is_packed(data) and as_json(made.make()) == data

    def _value(self, payload: Any, run_id: str) -> Any:
        """The snapshot's ``value`` as JSON data; None when the payload is not a snapshot
        (verify names the row)."""
        if self.deep:
            from evalledger.ledger import EventRow, RunSnapshot

            try:
                event = EventRow("-", run_id, None, EventType.RUN_SNAPSHOT, "-",
                                 payload).decode()
            except ValueError:
                return None
            return as_json(event.value) if isinstance(event, RunSnapshot) else None
        from pydantic_core import from_json

        try:
            data = from_json(payload)
        except ValueError:
            return None
        return data.get("value") if isinstance(data, dict) else None


_EXPONENT = re.compile(r"\de\+")
# A packed value as a payload stores it: a JSON string of the packed form, quotes and all.
_QUOTED_PACKED = re.compile('"' + PATTERN.removeprefix("^").removesuffix("$") + '"')


def _stored_value(head: SnapshotHead, payload: object) -> str | None:
    """The text of the stored value, when the payload is ``head``'s canonical fields and
    then it (else None: compared as data, and verify's row check names the spelling)."""
    start = _head_text(head)
    if not isinstance(payload, str) or not payload.startswith(start) or payload[-1:] != "}":
        return None
    return payload[len(start):-1]


def _head_text(head: SnapshotHead) -> str:
    """A snapshot's canonical payload up to its value."""
    import msgspec

    kind = msgspec.json.encode(head.kind).decode()
    return (f'{{"fold_version":{head.fold_version},"kind":{kind},'
            f'"through_seq":{head.through_seq},"value":')


def _equal(stored: Iterable[bytes], written: Iterable[bytes]) -> bool:
    """Whether two streams of bytes hold the same bytes, read side by side (neither
    held whole); False when the value cannot be written as JSON at all."""
    import msgspec

    left, right = iter(stored), iter(written)
    a = b = memoryview(b"")
    try:
        while True:
            while not a and (piece := next(left, None)) is not None:
                a = memoryview(piece)
            while not b and (piece := next(right, None)) is not None:
                b = memoryview(piece)
            if not a or not b:
                return not a and not b
            n = min(len(a), len(b))
            if a[:n] != b[:n]:
                return False
            a, b = a[n:], b[n:]
    except (TypeError, msgspec.EncodeError):
        return False


class _Replay:
    """A run's events folded into a fold as far as asked, never further."""

    def __init__(self, events: Iterator[LiteEvent | AnyEvent], fold: Fold) -> None:
        self.fold = fold
        self._events = events
        # Invariant: the next event not yet folded (None: the run's events are all read).
        self._pending = next(events, None)

    def fold_through(self, seq: int) -> None:
        while self._pending is not None and (self._pending.seq or 0) <= seq:
            self.fold.apply(self._pending)
            self._pending = next(self._events, None)
