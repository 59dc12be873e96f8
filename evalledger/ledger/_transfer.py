"""Carrying events between ledgers: NDJSON export and import, and merging a ledger.

An event's identity is its ``event_id``: appending one a ledger already holds adds
nothing (``Ledger.append``), so importing the same file twice, or merging the same
ledger twice, adds nothing. Events keep their ids, envelopes and payload text; only
their ``seq`` and ``hash`` are the destination's (the chain is one per ledger). An
event id the ledger holds with other content is refused, never dropped in silence.

Invariant (provenance): a transfer commits in batches, and each batch carries, in the
same transaction, one ``run.merged`` per run that gained events in it: the source, the
first and last source seq of the batch's rows of that run, and how many of them were
new here. A transfer stopped at any moment (SIGKILL, a full disk) leaves whole
batches, each accounted for, and every foreign ``run.started`` with the ``run.merged``
that names its source (what ``verify`` looks for). Running it again adds the rest
with its own provenance: the ``events`` of a run's ``run.merged`` rows add up to
exactly the events it gained.

An export ends with a trailer line: how many event lines it holds and the SHA-256 of
their bytes. A file is imported only whole: ``ExportFile.check`` reads it once and
refuses it (a line that is not an event, over the size or nesting limit, an event id
held with other content, events for a run this ledger recorded itself, no trailer, a
count or digest that does not match) before anything is appended; then ``rows`` reads
it again for appending, comparing it chunk by chunk with what was checked. Memory stays
flat in the file's size.

Snapshots are not carried: their ``through_seq`` counts the source's rows, and the
destination snapshots finished runs itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evalledger._bounds import MAX_SECONDS, MAX_TOKENS, MAX_USD
from evalledger._text import UNSAFE_IN_NAMES
from evalledger.errors import EvalledgerError

from ._lines import line_count
from ._rows import EventRow, EventType, stored_id, text_id
from ._store import _first_error, translate_errors
from ._tokens import TokenCounts

if TYPE_CHECKING:
    from types import TracebackType

    from ._events import AnyEvent, RunMerged
    from ._store import Ledger

_str = json.JSONEncoder(ensure_ascii=False).encode
# tuple.__new__ skips the NamedTuple's Python-level __new__ (every line of a file).
_new_row = tuple.__new__

# A batch: the rows one transaction commits with their provenance. Its size changes
# neither merge's nor import's throughput (bench/transfer.py: the same CPU time at
# 5,000, 20,000 and 50,000 rows); bigger batches write fewer run.merged rows (one per
# run and batch: 0.01% of the rows here), smaller ones hold the write lock a shorter
# time (a run writing the same ledger waits it out) and need less WAL (about 7 MB).
BATCH = 10_000
# ... and at most this many bytes of payload, so a file of large events does not fill
# memory before a batch is appended.
BATCH_BYTES = 64 * 1024 * 1024
# The longest line import-events takes by default (--max-line-bytes), measured: a
# run.started lists every planned key and its definition hash (141 bytes a task with
# keys of 30 characters: 16 MiB holds a suite of about 115,000 tasks); an output line
# is cut at 64 KiB by the runner (352 KB once JSON-escaped, if all control characters).
# docs/cli.md says so.
MAX_LINE_BYTES = 16 * 1024 * 1024
# Nesting past this is refused with one line: the parser the ledger reads payloads back
# with (pydantic-core) stops at about 200 levels, so nothing deeper can be stored.
MAX_DEPTH = 200
# Lines hashed, and compared with the check, per chunk of the second reading.
_CHUNK_LINES = 1000
_CHUNK_BYTES = 16 * 1024 * 1024


def ndjson(row: EventRow) -> str:
    """One event as one line: the envelope, then the stored payload text spliced in whole
    (what ``evalledger events`` prints and ``import-events`` reads back byte for byte).

    Raises:
        InvalidEvent: a field of its envelope is not text (a row written into the file
            by hand: an id stored as a BLOB of another size than an id's), named as
            ``verify`` names it.
    """
    if not (type(row.event_id) is str and type(row.run_id) is str and type(row.type) is str
            and type(row.ts) is str and (row.task_key is None or type(row.task_key) is str)):
        from ._errors import InvalidEvent
        from ._verify import _storage_classes

        raise InvalidEvent(f"event seq {row.seq} does not validate: "
                           f"{_storage_classes(row)}; run `evalledger verify`")
    return (
        f'{{"seq":{row.seq},"event_id":{_str(row.event_id)},"run_id":{_str(row.run_id)},'
        f'"task_key":{_str(row.task_key)},"type":{_str(row.type)},"ts":{_str(row.ts)},'
        f'"payload":{row.payload}}}'
    )


class BadLine(EvalledgerError, ValueError):
    """An events file that cannot be imported: names the line (when one is at fault) and
    why. Raised by the check, before anything is appended; while appending, only when
    the file or the ledger changed since."""


class Conflict(EvalledgerError, ValueError):
    """An event arrived whose id the ledger holds with other content: refused, and the
    batch it came in rolled back."""


# -- export ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trailer:
    """The last line of an export: ``{"trailer":{"events":N,"ledger_id":ID,"sha256":H}}``."""

    events: int
    """How many event lines come before it."""
    sha256: str
    """SHA-256 (hex) of those lines' bytes, each with its newline."""
    ledger_id: str | None
    """The ``meta.ledger_id`` of the ledger exported from."""

    def line(self) -> str:
        return json.dumps({"trailer": {"events": self.events, "ledger_id": self.ledger_id,
                                       "sha256": self.sha256}}, separators=(",", ":"))


def export_lines(ledger: Ledger, run_ids: Iterable[str]) -> Generator[bytes, None, None]:
    """An export of the runs, line by line (UTF-8, each ending in a newline): every event
    but snapshots, a run after the other, in ledger order; then the trailer."""
    digest = hashlib.sha256()
    count = 0
    for run_id in run_ids:
        for row in ledger.rows(run_id, stored=True):
            _whole(ledger, row)
            if row.type != EventType.RUN_SNAPSHOT:
                line = (ndjson(row) + "\n").encode()
                digest.update(line)
                count += 1
                yield line
    yield (Trailer(count, digest.hexdigest(), ledger.ledger_id or None).line() + "\n").encode()


# -- one line --------------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
# A type this version does not know is kept (docs/events.md, "Unknown types") when it
# has the shape of one: dotted lower-case words.
_TYPE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_NNN = re.compile(r"\d{2,}")
_RUN_LEVEL = frozenset({EventType.RUN_STARTED, EventType.RUN_RESUMED, EventType.RUN_FINISHED,
                        EventType.RUN_SNAPSHOT, EventType.RUN_MERGED, EventType.TASK_SKIPPED})


def _check_envelope(event_id: object, run_id: object, task_key: object, type_: object,
                    ts: object) -> str | None:
    """What is wrong with an envelope, or None. The limits are what the ledger itself
    writes (docs/cli.md, import-events): a run id names a folder, a task key three."""
    if not (isinstance(event_id, str) and _UUID.fullmatch(event_id)):
        return f"event_id {_short(event_id)} is not a UUID (lower-case, with hyphens)"
    if not (isinstance(run_id, str) and isinstance(type_, str)
            and (task_key is None or isinstance(task_key, str))):
        return ("the envelope is incomplete (run_id and type are text, task_key text or "
                "null)")
    if (wrong := _names_wrong(run_id, task_key, type_)) is not None:
        return wrong
    if not (isinstance(ts, str) and _TS.fullmatch(ts) and _second_exists(ts[:19])):
        return (f"ts {_short(ts)} is not a UTC time as the ledger writes them "
                "(2026-11-29T21:35:12.123456Z)")
    return None


@lru_cache(maxsize=65536)  # a file holds few runs and keys, each on many lines
def _names_wrong(run_id: str, task_key: str | None, type_: str) -> str | None:
    if not _name_ok(run_id, 255):
        return (f"run_id {_short(run_id)} is not a run id (1 to 255 characters, no control, "
                "line-separator or bidi character, no slash or backslash, not . or ..)")
    if len(type_) > 64 or not _TYPE.fullmatch(type_):
        return f"type {_short(type_)} is not an event type"
    if task_key is None:
        if type_.startswith("task.") and type_ != EventType.TASK_SKIPPED:
            return f"a {type_} event needs a task_key"
        return None
    parts = task_key.split("/")
    if (len(task_key) > 1024 or len(parts) < 3 or not _NNN.fullmatch(parts[-1])
            or not all(_name_ok(p, 255) for p in parts)):
        return (f"task_key {_short(task_key)} is not a task key (VARIANT/TASK/NN, no "
                "control, line-separator or bidi character, no backslash, no empty, . or .. "
                "part)")
    if type_ in _RUN_LEVEL:
        return f"a {type_} event is run-level: its task_key must be null"
    return None


def _name_ok(name: str, limit: int) -> bool:
    # What the legacy importer refuses too (UNSAFE_IN_NAMES: a newline frames the hash
    # chain, an escape sequence would reach a terminal, a bidi override shows a name as
    # another), and no backslash.
    return (0 < len(name) <= limit and name not in (".", "..") and "/" not in name
            and "\\" not in name and not UNSAFE_IN_NAMES.search(name))


@lru_cache(maxsize=4096)
def _second_exists(second: str) -> bool:
    """Whether ``2026-02-30T10:00:00`` (digits where digits go) is a real moment."""
    try:
        datetime.fromisoformat(second)
    except ValueError:
        return False
    return True


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


# A number a float may not hold: a three-digit exponent, or 200 digits in a row (with
# an exponent under 100, 1.8e308 needs 209 before the point). pydantic-core reads 1e400
# as inf even with allow_inf_nan=False: stored, it is `Infinity` (not JSON) or null.
_HUGE = re.compile(r"[eE]\+?[0-9]{3}|[0-9]{200}")


def _json(text: str, number: int) -> Any:
    try:
        # pydantic-core's parser, not json.loads: it stops at a fixed depth with an
        # error (json.loads recurses until Python's stack runs out) and is 2x faster.
        obj = _from_json()(text, allow_inf_nan=False)
    except ValueError as e:
        if "recursion limit" in str(e):
            raise BadLine(f"line {number}: JSON nested deeper than {MAX_DEPTH} "
                          "levels") from None
        raise BadLine(f"line {number}: not JSON ({e})") from None
    if _HUGE.search(text) and (where := _infinite(obj, "")) is not None:
        raise BadLine(f"line {number}: the number at {where or 'the top'} is past a float's "
                      "range (it reads as infinity)")
    return obj


def _infinite(value: Any, where: str) -> str | None:
    """Where in ``value`` (a path, ``payload.data.x``) a float is not finite, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    if isinstance(value, dict):
        items: Iterable[tuple[object, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _infinite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


@cache
def _from_json() -> Callable[..., Any]:
    from pydantic_core import from_json

    return from_json


@cache
def _codec() -> tuple[Callable[[EventRow], AnyEvent], Callable[[AnyEvent], str]]:
    from ._events import decode_row, encode_payload

    return decode_row, encode_payload


def parse_line(line: str, number: int) -> tuple[EventRow, int]:
    """An NDJSON line back into a row (no seq or hash: the destination's) and the seq it
    had where it came from. The payload text is taken as written when it is the payload
    of a line as ``ndjson`` writes it and canonical; else it is re-encoded canonically.

    Raises:
        BadLine: not JSON, nested too deep, not an event, an envelope the ledger would
            not write, or a payload that does not fit its type.
    """
    row, seq, _ = _parse(line, number)
    return row, seq


def _parse(line: str, number: int) -> tuple[EventRow, int, bool]:
    """``parse_line``, and whether the line is exactly what ``ndjson`` makes of its row."""
    obj = _json(line, number)
    if not isinstance(obj, dict) or not isinstance(obj.get("payload"), dict):
        raise BadLine(f"line {number}: not an event (no payload object)")
    get = obj.get
    event_id, run_id, task_key, type_, ts, seq = (
        get("event_id"), get("run_id"), get("task_key"), get("type"), get("ts"), get("seq"))
    if type(seq) is not int or seq < 1:
        raise BadLine(f"line {number}: seq {_short(seq)} is not a positive integer (the "
                      "event's seq in the ledger it was exported from)")
    if (wrong := _check_envelope(event_id, run_id, task_key, type_, ts)) is not None:
        raise BadLine(f"line {number}: {wrong}")
    body = line.rstrip("\r\n")
    text = _payload_text(body)
    row = _new_row(EventRow, (event_id, run_id, task_key, type_, ts, text or "", None, None))
    # What ndjson() writes; the id, type and ts checked above need no escaping.
    exact = text is not None and body == (
        f'{{"seq":{seq},"event_id":"{event_id}","run_id":{_str(run_id)},'
        f'"task_key":{_str(task_key)},"type":"{type_}","ts":"{ts}","payload":{text}}}')
    if not exact:
        # Not as export writes it (fields in another order, spaces): the payload's text
        # cannot be cut from the line.
        row = row._replace(payload=json.dumps(obj["payload"], ensure_ascii=False,
                                              sort_keys=True, separators=(",", ":")))
    decode_row, encode_payload = _codec()
    try:
        event = decode_row(row)
        canonical = encode_payload(event)
    except ValueError as e:  # pydantic's ValidationError, its serialiser's errors
        why = _first_error(e) if hasattr(e, "errors") else str(e)  # type: ignore[arg-type]
        raise BadLine(f"line {number}: {type_} does not validate: {why}") from None
    if type_ in _SUMMED and (wrong := _out_of_range(event)) is not None:
        raise BadLine(f"line {number}: {type_} {wrong}")
    if canonical != row.payload:
        return row._replace(payload=canonical), seq, False
    return row, seq, exact


# The events whose durations, costs and tokens reads add up.
_SUMMED = frozenset({EventType.TASK_COMPLETED, EventType.TASK_USAGE, EventType.TASK_GRADED})


def _out_of_range(event: AnyEvent) -> str | None:
    """What of a duration, cost or token count ``event`` holds is past its bound, or None."""
    for name, most in (("duration_seconds", MAX_SECONDS), ("cost_usd", MAX_USD)):
        value = getattr(event, name, None)
        if value is not None and abs(value) > most:
            return f"{name} {value:g} is past {most:g}: no attempt takes or costs that"
    tokens = getattr(event, "tokens", None)
    if isinstance(tokens, TokenCounts):
        for name, count in tokens:
            if abs(count) > MAX_TOKENS:
                return f"{name} {count} is past 2**53"
    return None


def _trusted(line: str) -> tuple[EventRow, int]:
    """A line ``_parse`` found exact, read again unchanged: its row, not validated again."""
    obj = _from_json()(line)
    body = line.rstrip("\r\n")
    return _new_row(EventRow, (obj["event_id"], obj["run_id"], obj["task_key"], obj["type"],
                               obj["ts"], _payload_text(body) or "", None, None)), obj["seq"]


def _payload_text(body: str) -> str | None:
    """The payload's text as it stands in a line ``ndjson`` wrote: the last field."""
    at = body.find(',"payload":')
    return body[at + len(',"payload":'):-1] if at >= 0 and body.endswith("}") else None


# -- a file ----------------------------------------------------------------------------------


class Readable(Protocol):
    """What an export is read from: a binary file, or a gzip one."""

    def readline(self, size: int = -1, /) -> bytes: ...

    def __enter__(self) -> Readable: ...

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None, /) -> object: ...


class ExportFile:
    """An export read back for ``import-events``.

    Args:
        open_binary: opens the file for reading bytes (decompressing it if need be);
            called once per reading.
        max_line_bytes: the longest line taken (its newline not counted).
    """

    def __init__(self, open_binary: Callable[[], Readable], *,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._open = open_binary
        self.max_line_bytes = max_line_bytes
        # Invariant: after check(), per chunk of the reading, in order: the running
        # SHA-256 of the event lines at its end (rows() compares its own with it), and
        # whether every line of it is exactly as export writes it (then rows() needs
        # not validate those lines again).
        self._marks: list[tuple[str, bool]] = []
        self.trailer: Trailer | None = None

    def _chunks(self) -> Iterator[list[tuple[int, bytes]]]:
        """The file's lines (number, bytes with their newline) in chunks, the same
        chunks on every reading of the same bytes."""
        chunk: list[tuple[int, bytes]] = []
        size = 0
        number = 0
        with self._open() as stream:
            while line := stream.readline(self.max_line_bytes + 2):
                number += 1
                if line.isspace():
                    # Refused at the first: a file of them (100 MiB of newlines packs into
                    # 100 KB of gzip) took 90 s of CPU a line at a time.
                    raise BadLine(f"line {number} is blank: an export holds no blank line")
                if len(line.rstrip(b"\r\n")) > self.max_line_bytes:
                    raise BadLine(f"line {number} is longer than {self.max_line_bytes:,} "
                                  "bytes (--max-line-bytes)")
                chunk.append((number, line))
                size += len(line)
                if len(chunk) >= _CHUNK_LINES or size >= _CHUNK_BYTES:
                    yield chunk
                    chunk, size = [], 0
        yield chunk

    def _lines(self) -> Iterator[tuple[int, str | None, bytes]]:
        """(number, text or None for the trailer, bytes) for every line, the trailer
        checked to be the last; after each chunk, (0, its mark, b"")."""
        digest = hashlib.sha256()
        trailer_at = 0
        for chunk in self._chunks():
            for number, raw in chunk:
                if trailer_at:
                    raise BadLine(f"line {number}: after the trailer (line {trailer_at}): "
                                  "one export a file, ending with its trailer")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise BadLine(f"line {number}: not UTF-8 ({e.reason} at byte "
                                  f"{e.start})") from None
                if text.startswith('{"trailer":'):
                    trailer_at = number
                    yield number, None, raw
                    continue
                digest.update(raw)
                yield number, text, raw
            yield 0, digest.copy().hexdigest(), b""

    def check(self, ledger: Ledger | None) -> Trailer:
        """Read the whole file once and say why it cannot be imported into ``ledger`` (None:
        a ledger not made yet, which holds nothing), appending nothing.

        Returns:
            its trailer.

        Raises:
            BadLine: the first reason, naming the line when one is at fault.
            OSError, EOFError: the file cannot be read (a truncated .gz).
        """
        count = 0
        trailer: Trailer | None = None
        marks: list[tuple[str, bool]] = []
        exact = True
        pending: list[tuple[int, EventRow]] = []
        # Run id -> the first line bringing an event of it the ledger lacks.
        new_at: dict[str, int] = {}
        # Run id -> the seq and line of its event read last.
        last_seq: dict[str, tuple[int, int]] = {}
        with _Seen() as seen:
            for number, text, raw in self._lines():
                if number == 0:
                    marks.append((text or "", exact))
                    exact = True
                    continue
                if text is None:
                    trailer = _trailer(raw.decode("utf-8"), number)
                    continue
                count += 1
                row, seq, as_written = _parse(text, number)
                # An export lists a run's events in the order its ledger holds them: a
                # file in another order would append them so (a verdict before its start).
                before = last_seq.get(row.run_id)
                if before is not None and seq <= before[0]:
                    raise BadLine(
                        f"line {number}: seq {seq} of run {row.run_id} comes after seq "
                        f"{before[0]} (line {before[1]}): an export lists each run's events "
                        "in the order its ledger holds them")
                last_seq[row.run_id] = (seq, number)
                exact = exact and as_written
                pending.append((number, row))
                if len(pending) >= 900:
                    _check_held(ledger, pending, seen, new_at)
                    pending = []
            _check_held(ledger, pending, seen, new_at)
        if trailer is None:
            raise BadLine("the file is empty: not even the trailer every export ends with"
                          if count == 0 else
                          "no trailer at its end: the file was cut short, or is not an "
                          "export (`evalledger export` ends every export with one)")
        if trailer.events != count:
            raise BadLine(f"its trailer counts {trailer.events} events, the file holds "
                          f"{count}: the file was cut or changed")
        if trailer.sha256 != marks[-1][0]:
            raise BadLine("its events do not match the trailer's sha256: the file was "
                          "changed after it was exported")
        if ledger is not None and (local := local_runs(ledger, new_at)):
            run_id = min(local, key=new_at.__getitem__)
            raise BadLine(f"line {new_at[run_id]}: {_LOCAL.format(run_id=run_id)}")
        self._marks, self.trailer = marks, trailer
        return trailer

    def rows(self) -> Iterator[tuple[EventRow, int]]:
        """The file's events with their source seqs, for appending, after ``check``.

        Raises:
            BadLine: a chunk of the file is not what ``check`` read (it changed since):
                before any of that chunk is given.
        """
        marks = iter(self._marks)
        held: list[tuple[int, str]] = []
        for number, text, _ in self._lines():
            if number == 0:
                digest, exact = next(marks, ("", False))
                if text != digest:
                    where = f"at line {held[0][0]}" if held else "at its end"
                    raise BadLine(f"the file changed {where} while it was being imported")
                for n, line in held:
                    yield _trusted(line) if exact else parse_line(line, n)
                held = []
            elif text is not None:
                held.append((number, text))


def _trailer(text: str, number: int) -> Trailer:
    obj = _json(text, number)
    body = obj.get("trailer") if isinstance(obj, dict) else None
    events = body.get("events") if isinstance(body, dict) else None
    sha = body.get("sha256") if isinstance(body, dict) else None
    ledger_id = body.get("ledger_id") if isinstance(body, dict) else None
    if not (isinstance(events, int) and not isinstance(events, bool) and events >= 0
            and isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)
            and (ledger_id is None or (isinstance(ledger_id, str) and _UUID.fullmatch(ledger_id)))
            and len(obj) == 1):
        raise BadLine(f"line {number}: not a trailer "
                      '({"trailer":{"events":N,"ledger_id":ID,"sha256":HEX}})')
    return Trailer(events, sha, ledger_id)


class _Seen:
    """Event ids met so far in a file, with a digest of their content: two lines of one
    id must agree. In a private temporary SQLite database (memory stays flat: SQLite
    moves it to a temporary file as it grows), deleted when closed.

    Raises:
        LedgerIOError: that database cannot grow (the temp folder is full).
    """

    def __init__(self) -> None:
        self._conn = sqlite3.connect("", isolation_level=None)
        with self._translate():
            self._conn.execute("CREATE TABLE seen (event_id TEXT PRIMARY KEY, digest BLOB, "
                               "line INTEGER) WITHOUT ROWID")

    def __enter__(self) -> _Seen:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._conn.close()

    def _translate(self) -> AbstractContextManager[None]:
        return translate_errors(Path(tempfile.gettempdir()) / "(event ids of the file)")

    def add(self, rows: list[tuple[int, EventRow]]) -> None:
        with self._translate():
            self._add(rows)

    def _add(self, rows: list[tuple[int, EventRow]]) -> None:
        mine: dict[str, tuple[bytes, int]] = {}
        for number, row in rows:
            digest = _content_digest(row)
            earlier = mine.get(row.event_id)
            if earlier is None:
                mine[row.event_id] = (digest, number)
            elif earlier[0] != digest:
                raise BadLine(_twice(number, row.event_id, earlier[1]))
        ids = list(mine)
        marks = ",".join("?" * len(ids))
        for event_id, digest, line in self._conn.execute(
                f"SELECT event_id, digest, line FROM seen WHERE event_id IN ({marks})", ids):
            if digest != mine[event_id][0]:
                raise BadLine(_twice(mine.pop(event_id)[1], event_id, line))
            del mine[event_id]
        self._conn.execute("BEGIN")
        self._conn.executemany("INSERT INTO seen VALUES (?, ?, ?)",
                               [(i, d, n) for i, (d, n) in mine.items()])
        self._conn.execute("COMMIT")


def _twice(number: int, event_id: str, first: int) -> str:
    return f"line {number}: event {event_id} is also on line {first}, with other content"


def _content_digest(row: EventRow) -> bytes:
    text = "\n".join((row.run_id, row.task_key or "\0", row.type, row.ts, row.payload))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


_FIELDS = ("run_id", "task_key", "type", "ts", "payload")
_LOCAL = ("run {run_id} was recorded in this ledger (it has no run.merged): events for it "
          "are not taken from a file")


# A stored payload as the text the chain hashes (a chunk of lines is stored compressed:
# ``_lines``), which is what a carried event holds.
_PAYLOAD = "CASE WHEN typeof(payload) = 'blob' THEN evalledger_unpack(payload) ELSE payload END"
_PAYLOAD_E = _PAYLOAD.replace("payload", "e.payload")


def _stored(ledger: Ledger, event_ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """The stored envelope and payload of those of ``event_ids`` the ledger holds."""
    found: dict[str, tuple[Any, ...]] = {}
    for i in range(0, len(event_ids), 900):
        chunk = [stored_id(event_id) for event_id in event_ids[i : i + 900]]
        _, rows = ledger.query(
            f"SELECT event_id, run_id, task_key, type, ts, {_PAYLOAD} FROM events "
            f"WHERE event_id IN ({','.join('?' * len(chunk))})", chunk)
        found.update((text_id(r[0]), r[1:]) for r in rows)
    return found


# Rows a statement compares with the stored ones (6 parameters each).
_COMPARE_CHUNK = 500


def _held(ledger: Ledger, rows: list[EventRow]) -> dict[str, bool]:
    """For those of ``rows`` whose id the ledger holds: whether it holds other content.
    Compared by SQLite, in C: a transfer run again meets every event it carried."""
    found: dict[str, bool] = {}
    for i in range(0, len(rows), _COMPARE_CHUNK):
        chunk = rows[i : i + _COMPARE_CHUNK]
        _, pairs = ledger.query(
            "WITH v (i, r, k, t, s, p) AS (VALUES "
            f"{','.join(['(?, ?, ?, ?, ?, ?)'] * len(chunk))}) "
            "SELECT v.i, e.run_id IS NOT v.r OR e.task_key IS NOT v.k OR e.type IS NOT v.t "
            f"OR e.ts IS NOT v.s OR {_PAYLOAD_E} IS NOT v.p FROM v JOIN events e "
            "ON e.event_id = v.i",
            list(chain.from_iterable((stored_id(row[0]), *row[1:6]) for row in chunk)))
        found.update((text_id(event_id), bool(other)) for event_id, other in pairs)
    return found


def _differs(row: EventRow, stored: tuple[Any, ...]) -> str | None:
    """Which fields of ``row`` differ from the stored event of its id, or None."""
    if row[1:6] == stored:  # nearly always: one comparison in C
        return None
    return ", ".join(name for name, mine, theirs in zip(_FIELDS, row[1:6], stored, strict=True)
                     if mine != theirs)


def _unlike(ledger: Ledger, held: list[tuple[EventRow, int]]) -> list[str]:
    """The ids of ``held`` (rows with the seq the ledger holds their id at) whose stored
    content is other. Looked up by seq (the rowid), compared by SQLite: a transfer run
    again meets every event it carried."""
    unlike: list[str] = []
    for i in range(0, len(held), _COMPARE_CHUNK):
        chunk = held[i : i + _COMPARE_CHUNK]
        _, rows = ledger.query(
            "WITH v (q, i, r, k, t, s, p) AS (VALUES "
            f"{','.join(['(?, ?, ?, ?, ?, ?, ?)'] * len(chunk))}) "
            "SELECT v.i FROM v JOIN events e ON e.seq = v.q WHERE e.event_id IS NOT v.i "
            "OR e.run_id IS NOT v.r OR e.task_key IS NOT v.k OR e.type IS NOT v.t "
            f"OR e.ts IS NOT v.s OR {_PAYLOAD_E} IS NOT v.p",
            [value for row, seq in chunk
             for value in (seq, stored_id(row[0]), *row[1:6])])
        unlike += [text_id(r[0]) for r in rows]
    return unlike


def _check_held(ledger: Ledger | None, rows: list[tuple[int, EventRow]], seen: _Seen,
                new_at: dict[str, int]) -> None:
    """Refuse a line whose id the ledger or an earlier line holds with other content, or
    a run.started the ledger lacks that claims to have been recorded in it; note the
    first line of each run the ledger lacks."""
    if not rows:
        return
    seen.add(rows)
    held = _held(ledger, [row for _, row in rows]) if ledger is not None else {}
    for number, row in rows:
        other = held.get(row.event_id)
        if other is None:
            if ledger is not None and _claims(row, ledger.ledger_id):
                raise BadLine(f"line {number}: {_CLAIM.format(run_id=row.run_id)}")
            if row.type not in (EventType.RUN_SNAPSHOT, EventType.RUN_MERGED):  # not imported
                new_at.setdefault(row.run_id, number)
        elif other:
            assert ledger is not None
            which = _differs(row, _stored(ledger, [row.event_id])[row.event_id])
            raise BadLine(f"line {number}: event {row.event_id} is already in the ledger "
                          f"with another {which}")


# A run.started records the ledger its run was recorded in; verify holds every run that
# names this ledger to have begun after it was made, and counts it as recorded here. A
# run from elsewhere naming it (forged, or recorded in a copy of this file) would make
# this ledger fail verify for good, and pass for one of its own.
_CLAIM = ("run {run_id}'s run.started says it was recorded in this ledger (its ledger id), "
          "which does not hold it: a run from elsewhere cannot be one recorded here")


def _claims(row: EventRow, ledger_id: str) -> bool:
    """Whether ``row`` is a run.started that names ``ledger_id`` as its ledger."""
    if row.type != EventType.RUN_STARTED or not ledger_id:
        return False
    payload = json.loads(row.payload)
    return isinstance(payload, dict) and payload.get("ledger_id") == ledger_id


def claims_here(source: Ledger, into: Ledger) -> str | None:
    """Why ``into`` cannot take ``source``'s runs, or None: a run.started of ``source``
    that ``into`` lacks names ``into``'s ledger id (``_CLAIM``). Checked before a merge
    appends anything; by SQLite, one row per run."""
    _, rows = source.query(
        "SELECT event_id, run_id, seq FROM events WHERE task_key IS NULL "
        "AND type = ? AND CASE WHEN json_valid(payload) THEN "
        "json_extract(payload, '$.ledger_id') END = ? ORDER BY seq",
        [EventType.RUN_STARTED, into.ledger_id])
    claimed = {text_id(event_id): (run_id, seq) for event_id, run_id, seq in rows}
    held = _stored(into, list(claimed))
    for event_id, (run_id, seq) in claimed.items():
        if event_id not in held:
            return f"seq {seq}: {_CLAIM.format(run_id=run_id)}"
    return None


def local_runs(ledger: Ledger, run_ids: Iterable[str], *, until_seq: int | None = None
               ) -> set[str]:
    """Which of ``run_ids`` this ledger recorded itself (as of ``until_seq``): runs with a
    ``run.started`` and no ``run.merged``. Every run that came by ``merge`` or
    ``import-events`` has a ``run.merged``, committed with its first events."""
    limit = until_seq if until_seq is not None else 2**62
    local = set()
    for run_id in run_ids:
        _, rows = ledger.query(
            "SELECT EXISTS (SELECT 1 FROM events WHERE task_key IS NULL AND type = ? AND "
            "run_id = ? AND seq <= ?), EXISTS (SELECT 1 FROM events WHERE task_key IS NULL "
            "AND type = ? AND run_id = ? AND seq <= ?)",
            [EventType.RUN_STARTED, run_id, limit, EventType.RUN_MERGED, run_id, limit])
        started, merged = rows[0]
        if started and not merged:
            local.add(run_id)
    return local


# -- appending -------------------------------------------------------------------------------


@dataclass
class Transfer:
    """What an import or a merge did."""

    read: int = 0
    added: int = 0
    merged: int = 0
    """run.merged rows written: one per run and batch that gained events."""
    runs: dict[str, list[int]] = field(default_factory=dict)
    """Run id -> the source seqs of its events read (first, last)."""


def append_all(ledger: Ledger, rows: Iterable[tuple[EventRow, int]], *, source: str,
               source_ledger: str | None, refuse_local: bool = False,
               batch_rows: int = BATCH) -> Transfer:
    """Append what ``ledger`` lacks of ``rows`` (with their source seqs), in their order,
    in batches, each with the ``run.merged`` rows accounting for it (module docstring).

    Args:
        refuse_local: refuse events a run this ledger recorded itself lacks
            (``local_runs``), checked in each batch's transaction.
        batch_rows: rows a batch holds at most (and ``BATCH_BYTES`` of payload).

    Raises:
        Conflict: an event's id is held with other content (that batch is rolled back).
        BadLine: with ``refuse_local``, an event for a local run (that batch too).
    """
    done = Transfer()
    batch: list[tuple[EventRow, int]] = []
    size = 0

    def flush() -> None:
        accounted: list[tuple[str, int]] = []

        def account(seqs: list[int], before: int) -> list[RunMerged]:
            merged = _account(ledger, batch, seqs, before, source=source,
                              source_ledger=source_ledger, refuse_local=refuse_local)
            accounted[:] = [(m.run_id, m.events) for m in merged]
            return merged

        ledger.append_then([row for row, _ in batch], account)
        done.added += sum(n for _, n in accounted)
        done.merged += len(accounted)
        batch.clear()

    for row, seq in rows:
        if row.type in (EventType.RUN_SNAPSHOT, EventType.RUN_MERGED):
            continue  # derived, and about the source's seqs
        count = line_count(row)  # events counted as lines: a chunk holds several
        done.read += count
        span = done.runs.setdefault(row.run_id, [seq - count + 1, seq])
        if seq > span[1]:
            span[1] = seq
        if seq - count + 1 < span[0]:
            span[0] = seq - count + 1
        batch.append((row, seq))
        size += len(row.payload)
        if len(batch) >= batch_rows or size >= BATCH_BYTES:
            flush()
            size = 0
    if batch:
        flush()
    return done


def _account(ledger: Ledger, batch: list[tuple[EventRow, int]], seqs: list[int],
             before: int, *, source: str, source_ledger: str | None,
             refuse_local: bool) -> list[RunMerged]:
    """The ``run.merged`` rows for a batch just inserted (in its transaction): per run
    that gained events, its source seqs in the batch and how many were new."""
    from ._events import RunMerged

    spans: dict[str, list[int]] = {}
    new: dict[str, int] = {}
    first_of: dict[int, EventRow] = {}
    held: list[tuple[EventRow, int]] = []
    for (row, source_seq), seq in zip(batch, seqs, strict=True):
        # A chunk of k lines (stored at its last) is k events, from source_seq - k + 1.
        count = line_count(row)
        span = spans.setdefault(row.run_id, [source_seq - count + 1, source_seq])
        if source_seq > span[1]:
            span[1] = source_seq
        if source_seq - count + 1 < span[0]:
            span[0] = source_seq - count + 1
        if seq <= before:
            held.append((row, seq))
        elif (first := first_of.get(seq)) is None:
            first_of[seq] = row
            new[row.run_id] = new.get(row.run_id, 0) + count
        elif (which := _differs(row, first[1:6])) is not None:
            raise Conflict(f"event {row.event_id} (seq {source_seq} in {source}) appears "
                           f"twice there with another {which}")
    if held and (unlike := _unlike(ledger, held)):
        row, source_seq = next((r, s) for r, s in batch if r.event_id in set(unlike))
        which = _differs(row, _stored(ledger, [row.event_id])[row.event_id])
        raise Conflict(f"event {row.event_id} (seq {source_seq} in {source}) is already in "
                       f"the ledger with another {which}")
    if refuse_local and (local := local_runs(ledger, new, until_seq=before)):
        raise BadLine(_LOCAL.format(run_id=min(local)))
    return [RunMerged(run_id=run_id, source=source, source_ledger=source_ledger,
                      source_seqs=spans[run_id], events=n) for run_id, n in new.items()]


def rows_of(ledger: Ledger) -> Generator[tuple[EventRow, int], None, None]:
    """Every row of the ledger, in seq order, with its seq: what a merge reads. A
    duration, cost or token count past its bound is refused as import-events refuses it
    (a ledger that verifies may hold one: written by hand, or by an older runner).

    Raises:
        InvalidEvent: a row's payload is not text, or holds such a number.
    """
    for row in ledger.rows(stored=True):
        _whole(ledger, row)
        if row.type in _SUMMED and (wrong := _out_of_range(row.decode())) is not None:
            from ._store import _invalid

            raise _invalid(ledger.path, row, ValueError(wrong))
        yield row, row.seq or 0


def _whole(ledger: Ledger, row: EventRow) -> None:
    """A row whose payload is not text (a chunk of lines whose frame does not
    decompress: damaged or forged) is never carried: named, as a replay names it.

    Raises:
        InvalidEvent: the row's payload is not text.
    """
    if type(row.payload) is not str:
        from ._store import _invalid

        raise _invalid(ledger.path, row, ValueError(
            f"its payload is stored as {type(row.payload).__name__}, not text"))
