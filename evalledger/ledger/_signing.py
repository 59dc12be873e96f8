"""Signed runs: which of a run's events the process that ran it wrote.

Under ``isolation: none`` the command under test runs as the runner's user and can
append to the ledger: a correctly chained row is easy to make. A signature is not. Each
batch (``run``, ``resume``) and each ``regrade`` holds an ed25519 key in its memory only
and seals what it writes:

- after each commit holding an event of ``SEALED_TYPES``, in the same transaction, a
  ``run.signed`` covering those ``k`` events and the ``m`` other rows of the run it
  wrote since its previous seal (``rest``: their digest);
- one key's seals form a chain, ``D_0 = sha256("evalledger.seal" run_id key)`` and
  ``D_i = sha256(D_(i-1) k m sha256(covered) rest)``, and each signs its ``D_i``: the
  newest valid seal of a key vouches for every seal before it, so a reader checks one
  signature per key, not one per commit.

``Seals`` reads a run's rows in seq order and says which events of ``SEALED_TYPES`` no
valid seal covers (the ones a read ignores, and ``verify`` names when they are of
``SEALED_TYPES``). A key counts when its seals cover a ``run.started``/``run.resumed``
(a batch's) or only gradings (a regrade's: it may seal nothing else); a batch opened
while an earlier batch of the run still sealed afterwards is a forgery of an open batch
and counts for nothing. What a seal cannot prove is said in docs/ledger.md: a process
that can read the runner's memory (ptrace: root, or the same user where Yama allows it)
signs as the runner; a whole forged batch after the run finished is a batch of its own,
shown with its key.
"""

from __future__ import annotations

import base64
import hashlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._rows import EventRow, EventType

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
    )

# What decides a verdict, an attempt's number or a run's status: unsealed in a signed
# run, verify names it and every read ignores it.
SEALED_TYPES = frozenset({
    EventType.RUN_STARTED, EventType.RUN_RESUMED, EventType.RUN_FINISHED,
    EventType.TASK_STARTED, EventType.TASK_COMPLETED, EventType.TASK_GRADED,
    EventType.RUN_GRADED,
})
_OPENINGS = frozenset({EventType.RUN_STARTED, EventType.RUN_RESUMED})
_GRADINGS = frozenset({EventType.TASK_GRADED, EventType.RUN_GRADED})
# What the process running a run never writes (a scan's findings, a merge's account):
# no seal covers them, and they may come at any time.
# Snapshots have seals of their own (``Signer.seal_snapshots``): derived data, large,
# checked one at a time when a read uses one, never all on every read.
_NOT_THE_RUNNERS = frozenset({EventType.TASK_FLAGGED, EventType.RUN_MERGED,
                              EventType.RUN_SNAPSHOT})
_NO_REST = bytes(32)
KEY_ID_LENGTH = 8


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: object) -> bytes:
    if not isinstance(text, str):
        raise TypeError("not base64 text")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def row_digest(event_id: str, run_id: str, task_key: str | None, type_: str, ts: str,
               payload: str) -> bytes:
    """One row's digest, over the columns the chain hashes (``_chain``), seq and hash
    left out: a seal still holds when an export moves the run to another ledger."""
    return hashlib.sha256(
        f"{event_id}\n{run_id}\n{task_key or ''}\n{type_}\n{ts}\n{payload}".encode()).digest()


_UNCHAINED = frozenset({EventType.RUN_SIGNED, EventType.RUN_SNAPSHOT})


def _snapshots_message(run_id: str, digests: Sequence[bytes]) -> bytes:
    return b"evalledger.snapshots\n" + run_id.encode() + b"\n" + b"".join(digests)


def snapshot_vouched(run_id: str, row: EventRow, seal: EventRow | None,
                     keys: dict[str, bytes]) -> bool:
    """Whether ``seal`` (the run's first ``run.signed`` after the snapshot ``row``) is a
    seal of snapshots by one of ``keys`` (the run's batches) vouching for ``row``."""
    import json

    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if seal is None or seal.seq is None or row.seq is None:
        return False
    try:
        value = json.loads(seal.payload)
        digests = [_unb64(str(d)) for d in value["snapshots"]]
        public = keys[str(value["key"])]
        sig = _unb64(str(value["sig"]))
    except (ValueError, KeyError, TypeError):
        return False
    place = len(digests) - (seal.seq - row.seq)  # the commit's rows come right before it
    if not 0 <= place < len(digests) or digests[place] != row_digest(*row[:6]):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(
            sig, _snapshots_message(run_id, digests))
    except (InvalidSignature, ValueError):
        return False
    return True


def opening_key(run_id: str, opening: EventRow, seal: EventRow | None) -> bytes | None:
    """The raw key a batch's opening (its ``run.started`` / ``run.resumed``, carrying
    ``public_key``) announces, when ``seal`` (the row right after it) is that key's
    first seal and covers the opening alone, validly signed; else None. One signature:
    what a read checks a snapshot's batch by without checking the whole run."""
    import json

    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if seal is None or seal.seq is None or opening.seq is None or seal.seq != opening.seq + 1:
        return None
    try:
        announced = json.loads(opening.payload)["public_key"]
        value = json.loads(seal.payload)
        raw = _unb64(str(announced))
        if (value.get("public_key") != announced or value.get("k") != 1
                or value.get("m", 0) != 0 or len(raw) != 32):
            return None
        chain = _link(_first_link(run_id, raw), 1, 0,
                      hashlib.sha256(row_digest(*opening[:6])).digest(), _NO_REST)
        Ed25519PublicKey.from_public_bytes(raw).verify(_unb64(str(value["sig"])), chain)
    except (ValueError, KeyError, TypeError, InvalidSignature):
        return None
    return raw


def _first_link(run_id: str, public_key: bytes) -> bytes:
    return hashlib.sha256(b"evalledger.seal\n" + run_id.encode() + b"\n" + public_key).digest()


def _link(previous: bytes, k: int, m: int, covered: bytes, rest: bytes) -> bytes:
    return hashlib.sha256(previous + k.to_bytes(8, "big") + m.to_bytes(8, "big")
                          + covered + rest).digest()


class Signer:
    """The key of one batch or regrade of one run, in this process's memory only, and
    the chain of its seals so far."""

    def __init__(self, run_id: str) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        self.run_id = run_id
        self._key: Ed25519PrivateKey = Ed25519PrivateKey.generate()
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public_key = _b64(raw)
        self.key_id = self.public_key[:KEY_ID_LENGTH]
        self._chain = _first_link(run_id, raw)
        self._announced = False
        self._rest = hashlib.sha256()
        self._m = 0

    def seal(self, rows: Iterable[EventRow]) -> EventRow | None:
        """The ``run.signed`` to append right after ``rows`` in the same transaction, or
        None when they hold no event of a covered type (their other rows of the run are
        covered by the next seal)."""
        covered = hashlib.sha256()
        k = 0
        for row in rows:
            if row.run_id != self.run_id or row.type in _UNCHAINED:
                continue
            digest = row_digest(*row[:6])
            if row.type in SEALED_TYPES:
                covered.update(digest)
                k += 1
            else:
                self._rest.update(digest)
                self._m += 1
        if k == 0:
            return None
        m = self._m
        rest = self._rest.digest() if m else _NO_REST
        self._chain = _link(self._chain, k, m, covered.digest(), rest)
        from ._events import RunSigned

        event = RunSigned(
            run_id=self.run_id, key=self.key_id, k=k, m=m, rest=_b64(rest) if m else None,
            public_key=None if self._announced else self.public_key,
            sig=_b64(self._key.sign(self._chain)))
        self._announced = True
        self._rest, self._m = hashlib.sha256(), 0
        return EventRow.of(event)

    def seal_snapshots(self, rows: Sequence[EventRow]) -> EventRow:
        """The seal of a commit of snapshots (``rows``, all of this run): each one's
        digest, signed apart from the chain."""
        from ._events import RunSigned

        digests = [row_digest(*row[:6]) for row in rows]
        return EventRow.of(RunSigned(
            run_id=self.run_id, key=self.key_id, snapshots=[_b64(d) for d in digests],
            sig=_b64(self._key.sign(_snapshots_message(self.run_id, digests)))))

    def sealed(self, rows: Sequence[EventRow]) -> list[EventRow]:
        """``rows`` and their seal after them, if they need one."""
        seal = self.seal(rows)
        return [*rows, seal] if seal is not None else list(rows)


@dataclass(eq=False)
class _Seal:
    seq: int
    k: int
    m: int
    covered: bytes
    rest: bytes
    sig: bytes
    seqs: list[int]
    types: set[str]
    finished: int | None = None  # the seq of a run.finished it covers


@dataclass
class _Key:
    key_id: str
    public: bytes | None = None
    seals: list[_Seal] = field(default_factory=list)
    opened_at: int | None = None  # the seq of the seal covering its run.started/resumed


@dataclass(frozen=True)
class SealReport:
    """What ``Seals`` found in a run: the rows reads ignore, and what ``verify`` says."""

    signed: bool
    """Whether the run records a signing key at all (runs before signing do not)."""
    ignored: frozenset[int]
    """The seqs of covered-type events no valid seal vouches for."""
    problems: tuple[tuple[int, str], ...]
    """``(seq, what)`` for each unsealed event of a sealed type and each bad seal."""
    keys: tuple[tuple[str, str, int], ...]
    """``(key id, "batch" | "regrade", seq of its first seal)`` of every key that counts."""
    unannounced: bool
    """Some seal is by a key no seal fed announced (a read that started from a snapshot
    meets a key announced before it: it checks the whole run instead)."""


class Seals:
    """Feed a run's rows in seq order (only ``SEALED_TYPES`` and ``run.signed`` are
    looked at), then ``report()``."""

    def __init__(self, run_id: str, *, rest: bool = False, signed: bool = False,
                 ended: bool = False) -> None:
        """``rest``: check each seal's other rows too (``verify``: fed every row of the
        run); reads look only at the events they believe or ignore. ``signed``: the run
        is known to be signed (its ``run.started`` may not be among the rows: a read
        that starts from a sealed snapshot feeds what came after it). ``ended``: the
        run had ended before the first row fed (a batch seals its snapshots after its
        run.finished): a regrade may come first."""
        self.run_id = run_id
        self._check_rest = rest
        # The other rows since the last seal: their seqs, and their digests end to end
        # (32 bytes each): a run of 10 million output lines is 400 MB here, not 2 GB.
        self._rest_seqs = array("q")
        self._rest_digests = bytearray()
        self._pending: list[tuple[int, str, bytes]] = []  # (seq, type, digest)
        self._keys: dict[str, _Key] = {}
        self._dropped: list[tuple[int, str]] = []  # unsealed: (seq, type)
        self._problems: list[tuple[int, str]] = []
        self._started_signed = signed
        self._first_opening = not signed
        self._ended = ended
        # The seqs of run.started rows that name a shard (``--shard``), and whether the
        # run's first did: the shards of one run run at once, on several machines.
        self._shard_openings: set[int] = set()
        self._sharded = False
        self._seen_started = False

    def feed(self, seq: int, event_id: str, task_key: str | None, type_: str, ts: str,
             payload: str) -> None:
        if type_ == EventType.RUN_SIGNED:
            self._seal(seq, payload)
        elif type_ in SEALED_TYPES:
            if type_ == EventType.RUN_STARTED:
                if '"shard":"' in payload:
                    self._shard_openings.add(seq)
                    self._sharded = self._sharded or not self._seen_started
                self._seen_started = True
            if self._first_opening and type_ == EventType.RUN_STARTED:
                self._first_opening = False
                self._started_signed = run_signed(payload)
            self._pending.append(
                (seq, type_, row_digest(event_id, self.run_id, task_key, type_, ts, payload)))
        elif self._check_rest and type_ not in _NOT_THE_RUNNERS:
            self._rest_seqs.append(seq)
            self._rest_digests += row_digest(event_id, self.run_id, task_key, type_, ts,
                                             payload)

    def _seal(self, seq: int, payload: str) -> None:
        parsed = _parsed_seal(payload)
        if parsed is None:
            self._problems.append((seq, "run.signed is malformed"))
            return
        if isinstance(parsed, str):
            return  # a seal of snapshots: outside the chain (snapshot_vouched)
        key_id, k, m, sig, rest, public = parsed
        key = self._keys.setdefault(key_id, _Key(key_id))
        if self._check_rest:
            self._rest_sealed(seq, key, m, rest)
        if public is not None:
            if key.public is not None or not key_id_of(public).startswith(key_id):
                self._problems.append((seq, f"run.signed announces key {key_id} again, or "
                                            "a key of another id"))
                return
            key.public = public
        # The commit's own covered events are the last k before its seal: a commit is
        # one transaction, nothing can come between its rows.
        covered, before = self._pending[-k:], self._pending[:-k]
        self._pending = []
        self._dropped.extend((s, t) for s, t, _ in before)
        if len(covered) < k:
            self._problems.append((seq, f"run.signed covers {k} events but only "
                                        f"{len(covered)} precede it unsealed"))
            self._dropped.extend((s, t) for s, t, _ in covered)
            return
        types = {t for _, t, _ in covered}
        if key.opened_at is None and types & _OPENINGS:
            key.opened_at = next(s for s, t, _ in covered if t in _OPENINGS)
        finished = [s for s, t, _ in covered if t == EventType.RUN_FINISHED]
        key.seals.append(_Seal(seq, k, m, hashlib.sha256(b"".join(d for _, _, d in covered))
                               .digest(), rest, sig, [s for s, _, _ in covered], types,
                               finished[-1] if finished else None))

    def _rest_sealed(self, seq: int, key: _Key, m: int, rest: bytes) -> None:
        """The last ``m`` other rows before the seal are the ones it sealed; between two
        seals of one key, the process wrote every row of the run."""
        seqs, digests = self._rest_seqs, self._rest_digests
        self._rest_seqs, self._rest_digests = array("q"), bytearray()
        before = seqs[:-m] if m else seqs
        if len(seqs) < m or (m and hashlib.sha256(digests[-32 * m:]).digest() != rest):
            self._problems.append((seq, f"the {m} other rows of the run this seal covers "
                                        "were changed, or rows were put among them"))
        if key.seals:
            self._problems.extend(
                (s, "a row of the run among the sealed ones that no seal covers: not "
                    "written by the process that ran it") for s in before)

    def report(self) -> SealReport:
        problems = list(self._problems)
        ignored: set[int] = set()
        for seq, type_ in [*self._dropped, *((s, t) for s, t, _ in self._pending)]:
            ignored.add(seq)
            if type_ in SEALED_TYPES:
                problems.append((seq, f"{type_} is not sealed by the run's key: not "
                                      "written by the process that ran it"))
        valid = {key.key_id: _valid_seals(self.run_id, key, problems)
                 for key in self._keys.values()}
        kinds = self._kinds(valid, problems)
        counted: list[tuple[str, str, int]] = []
        for key in self._keys.values():
            kind = kinds.get(key.key_id)
            good = {id(seal) for seal in valid[key.key_id]}
            for seal in key.seals:
                if kind is None or id(seal) not in good or (
                        kind == "regrade" and not seal.types <= _GRADINGS):
                    ignored.update(seal.seqs)
            if kind is not None:
                counted.append((key.key_id, kind, key.seals[0].seq))
        counted.sort(key=lambda c: c[2])
        unannounced = any(key.public is None for key in self._keys.values())
        if not self._started_signed:
            # A run recorded before signing (or imported from one): nothing to hold it to.
            return SealReport(False, frozenset(), tuple(sorted(self._problems)),
                              tuple(counted), unannounced)
        return SealReport(True, frozenset(ignored), tuple(sorted(problems)), tuple(counted),
                          unannounced)

    def _kinds(self, valid: dict[str, list[_Seal]],
               problems: list[tuple[int, str]]) -> dict[str, str]:
        """Each key that counts: ``batch`` or ``regrade``. Batches in the order they
        opened, each against the batches that counted before it."""
        kinds: dict[str, str] = {}
        batches: list[_Key] = []  # counted, in opening order
        for key in sorted((k for k in self._keys.values() if k.opened_at is not None
                           and valid[k.key_id]), key=lambda k: k.opened_at or 0):
            opened = key.opened_at or 0
            # A batch opened while an earlier one went on sealing is not the run's: two
            # processes never run one run at once (a resume waits for it to end or die),
            # but the shards of a sharded run do, each opening with its run.started.
            if not (key.opened_at in self._shard_openings and self._sharded) and any(
                    any(seal.seq > opened for seal in valid[other.key_id])
                    for other in batches):
                problems.append((opened, f"a batch (key {key.key_id}) opened while another "
                                         "batch of the run was still sealing: not the run's"))
                continue
            kinds[key.key_id] = "batch"
            batches.append(key)
        for key in self._keys.values():
            mine = valid[key.key_id]
            if key.opened_at is not None or not mine:
                continue
            if not all(seal.types <= _GRADINGS for seal in mine):
                problems.append((mine[0].seq, f"key {key.key_id} seals a batch's events but "
                                              "opened no batch"))
            elif self._run_over(batches, valid, mine[0].seq):
                kinds[key.key_id] = "regrade"
            else:
                problems.append((mine[0].seq, f"a regrade (key {key.key_id}) while a batch of "
                                              "the run was running: not the run's"))
        return kinds

    def _run_over(self, batches: list[_Key], valid: dict[str, list[_Seal]], at: int) -> bool:
        """Whether the run had ended by ``at``: its latest batch opened before then had
        sealed its run.finished (a regrade grades a run that ended)."""
        before = [key for key in batches if (key.opened_at or 0) < at]
        if not before:
            return self._ended
        latest = before[-1]
        return any(seal.finished is not None and seal.seq < at
                   for seal in valid[latest.key_id])


# The largest count a seal may claim: far past any run, and within _link's 8 bytes.
_MOST = 2**62


def _parsed_seal(payload: str) -> tuple[str, int, int, bytes, bytes, bytes | None] | str | None:
    """A chain seal's ``(key id, k, m, sig, rest, announced key)``, ``"snapshots"`` for
    a seal of snapshots, None when it is no seal this version writes (forged or damaged:
    named by verify, never a traceback)."""
    import json

    try:
        value = json.loads(payload)
        if not isinstance(value, dict):
            return None
        if value.get("snapshots"):
            return "snapshots"
        key_id, k, m = value["key"], value.get("k", 0), value.get("m", 0)
        sig = _unb64(value["sig"])
        rest = _unb64(value["rest"]) if m else _NO_REST
        public = value.get("public_key")
        raw = _unb64(public) if public is not None else None
    except (ValueError, KeyError, TypeError, AttributeError):  # binascii.Error included
        return None
    if not (isinstance(key_id, str) and type(k) is int and type(m) is int
            and 1 <= k < _MOST and 0 <= m < _MOST and len(rest) == 32 and len(sig) == 64
            and (raw is None or len(raw) == 32)):
        return None
    return key_id, k, m, sig, rest, raw


def key_id_of(raw: bytes) -> str:
    """A key's id: the first characters of its base64url form."""
    return _b64(raw)[:KEY_ID_LENGTH]


def run_signed(payload: object) -> bool:
    """Whether a ``run.started`` payload announces a signing key: a signed run."""
    import json

    if not isinstance(payload, str):
        return False
    try:
        value = json.loads(payload)
    except ValueError:
        return False
    return isinstance(value, dict) and isinstance(value.get("public_key"), str)


def _valid_seals(run_id: str, key: _Key, problems: list[tuple[int, str]]) -> list[_Seal]:
    """The key's seals whose signatures hold: all of them when the newest does (one
    check), else each in turn, the chain carried past the ones that do not."""
    if key.public is None:
        problems.extend((s.seq, f"run.signed by key {key.key_id}, which no seal announced")
                        for s in key.seals)
        return []
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    public = Ed25519PublicKey.from_public_bytes(key.public)
    first = _first_link(run_id, key.public)
    chain = first
    for seal in key.seals:
        chain = _link(chain, seal.k, seal.m, seal.covered, seal.rest)
    try:
        public.verify(key.seals[-1].sig, chain)
        return list(key.seals)
    except InvalidSignature:
        pass
    valid: list[_Seal] = []
    chain = first
    for seal in key.seals:
        candidate = _link(chain, seal.k, seal.m, seal.covered, seal.rest)
        try:
            public.verify(seal.sig, candidate)
        except InvalidSignature:
            problems.append((seal.seq, f"run.signed by key {key.key_id} does not verify: "
                                       "what it seals was changed, or it is forged"))
            continue
        valid.append(seal)
        chain = candidate
    return valid


def seal_report(rows: Iterable[tuple[int, str, str | None, str, str, str]],
                run_id: str, *, signed: bool = False, ended: bool = False) -> SealReport:
    """``Seals`` over ``(seq, event_id, task_key, type, ts, payload)`` rows of one run.
    ``signed``: the run is known to be signed (its ``run.started`` may not be among
    ``rows``: a read that starts from a sealed snapshot feeds what came after it)."""
    seals = Seals(run_id, signed=signed, ended=ended)
    for row in rows:
        seals.feed(*row)
    return seals.report()
