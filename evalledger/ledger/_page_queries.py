"""Named read queries for the pages that show one task or one run's detail (the viewer,
the HTML report): a task's lifecycle rows, a page of its transcript, a transcript's
tail, the JSON lines that report usage, the completions' environments.

The only SQL over ``events`` a page needs, kept beside the store that owns the table
and its column list (``_store._COLUMNS``): rename a payload field or a column and the
queries that read it are here to change. Every query is a range scan of an index the
schema has for it (``(run_id, task_key, seq)``, ``(run_id, type, seq)``): a transcript
page is ``LIMIT`` rows after or before a seq (keyset paging), so the last page of a
million-line transcript costs what the first one does.

Rows come back as stored (``EventRow``, or the few columns asked for): decoding them
is the reader's.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, NamedTuple

from evalledger.hosts import attempt_environment, session_environment

from ._lines import widened
from ._queries import json_object
from ._rows import EventRow, EventType, fetched
from ._store import _COLUMNS, Ledger, _invalid, read_as_lines

_OUTPUT_TYPES = (f"('{EventType.TASK_OUTPUT}', '{EventType.TASK_EVENT}', "
                 f"'{EventType.TASK_LINES}')")
# A page shows where output past max_output was left out, among the lines.
_TRANSCRIPT = (f"type IN ('{EventType.TASK_OUTPUT}', '{EventType.TASK_EVENT}', "
               f"'{EventType.TASK_LINES}', '{EventType.TASK_OUTPUT_TRUNCATED}')")
_json_string = json.JSONEncoder(ensure_ascii=False).encode


def task_lifecycle(ledger: Ledger, run_id: str, task_key: str) -> list[EventRow]:
    """A task key's rows that are not its transcript (starts, usage, completions,
    interruptions), in seq order."""
    _, rows = ledger.query(
        f"SELECT {_COLUMNS} FROM events WHERE run_id = ? AND task_key = ? "
        f"AND type NOT IN {_OUTPUT_TYPES} ORDER BY seq", [run_id, task_key])
    return [fetched(row) for row in rows]


class Start(NamedTuple):
    """An attempt's start: its ``task.started`` seq, its number and the task's
    ``stream_format`` (None: native)."""

    seq: int
    attempt: int
    stream_format: str | None


def attempt_starts(ledger: Ledger, run_id: str, task_keys: list[str],
                   ) -> dict[str, list[Start]]:
    """Per key of ``task_keys``, its attempts' starts in seq order (a start that names
    no attempt reads as 1): a range scan of each key's rows."""
    found: dict[str, list[Start]] = {}
    for key in task_keys:
        _, rows = ledger.query(
            "SELECT seq, json_extract(payload, '$.attempt'), "
            "json_extract(payload, '$.definition.stream_format') FROM events "
            "WHERE run_id = ? AND task_key = ? AND type = ? ORDER BY seq",
            [run_id, key, EventType.TASK_STARTED])
        found[key] = [Start(seq, attempt if isinstance(attempt, int) else 1,
                            form if isinstance(form, str) else None)
                      for seq, attempt, form in rows]
    return found


def run_imported(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """Where the run came from, when it was imported (its first ``run.started``'s
    ``imported``)."""
    _, rows = ledger.query(
        f"SELECT {json_object('$.imported')} FROM events WHERE run_id = ? "
        "AND task_key IS NULL AND type = ? ORDER BY seq LIMIT 1",
        [run_id, EventType.RUN_STARTED])
    return json.loads(rows[0][0]) if rows and rows[0][0] is not None else None


def transcript_rows(
    ledger: Ledger, run_id: str, task_key: str | None, *, after: int | None = None,
    before: int | None = None, limit: int = 500, search: str | None = None,
    through: int | None = None,
) -> tuple[list[EventRow], bool]:
    """Up to ``limit`` transcript rows of a task (output lines and JSON events) in seq
    order, and whether there are more beyond them (after the page, or before it when
    paging backwards); ``task_key`` None: of every task of the run.

    ``after``: the rows after that seq (0 or None: from the first); ``before``: the rows
    before that seq (``-1`` or 0: the last rows); ``through``: none after that seq.
    ``search`` keeps only rows whose text holds it, whatever its case.
    """
    backwards = before is not None
    rows = _transcript(ledger, run_id, task_key, after=0 if backwards else after or 0,
                       before=before if before is not None and before > 0 else None,
                       through=through, backwards=backwards, holding=search or None)
    if search:
        holds = _holding(search, ledger)
        rows = (row for row in rows if holds(row))
    # One row more than asked says whether there are more; islice takes no more than
    # sys.maxsize (`search --limit 9223372036854775807`: a traceback).
    found = list(islice(rows, min(limit + 1, sys.maxsize)))
    more = len(found) > limit
    found = found[:limit]
    if backwards:
        found.reverse()
    return found, more


def _holding(text: str, ledger: Ledger) -> Callable[[EventRow], bool]:
    """Whether what a row shows holds ``text``, whatever its case: an output line's
    words, an event's data (as JSON spells it), never the payload's own field names
    (``line``, ``stream``). First the payload as JSON spells the text (cheap, and true
    of every row that holds it), then the one field read out of the rows that pass."""
    plain = re.compile(re.escape(text), re.IGNORECASE)
    spelled = _spelled(text)

    def holds(row: EventRow) -> bool:
        if not spelled.search(row.payload):
            return False
        if row.type == EventType.TASK_OUTPUT:
            return plain.search(str(_object(ledger, row).get("line", ""))) is not None
        if row.type == EventType.TASK_EVENT:
            data = _json_string_of(_object(ledger, row).get("data"))
            return spelled.search(data) is not None
        return False

    return holds


def _spelled(text: str) -> re.Pattern[str]:
    """``text`` as a payload's JSON spells it, whatever its case."""
    return re.compile(re.escape(_json_string(text)[1:-1]), re.IGNORECASE)


# The characters that re's IGNORECASE holds equal to an ASCII letter (i, k, s): a row
# holding one may match an ASCII text that SQLite's LIKE, ASCII-only, finds no case of.
_FOLDS_TO_ASCII = "*[\u0130\u0131\u212a\u017f]*"
# SQLite refuses a LIKE pattern over 50,000 bytes (SQLITE_MAX_LIKE_PATTERN_LENGTH); a
# text this long is searched in Python alone.
_LIKE_LONGEST = 10_000


def _like(text: str) -> str | None:
    """A LIKE pattern (escaped with ``\\``) of the payloads that spell ``text``: a search
    SQLite makes before a row is read into Python; None where LIKE cannot be trusted to
    find every case of it (a text beyond ASCII: LIKE folds the case of ASCII only), or
    would refuse it (longer than SQLite takes a pattern to be)."""
    spelled = _json_string(text)[1:-1]
    if not spelled.isascii() or len(spelled) > _LIKE_LONGEST:
        return None
    return "%" + re.sub(r"([\\%_])", r"\\\1", spelled) + "%"


def _json_string_of(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _transcript(ledger: Ledger, run_id: str, task_key: str | None, *, after: int = 0,
                before: int | None = None, through: int | None = None,
                backwards: bool = False, holding: str | None = None,
                ) -> Iterator[EventRow]:
    """The transcript rows (lines, JSON events, where output was cut) of a task, or of
    every task of the run, with ``after < seq < before`` and ``seq <= through``, in seq
    order or newest first: one range scan of an index, each chunk given as its lines
    (``_lines``: a chunk stored past the bound may hold lines inside it).

    ``holding``: only the stored rows whose payload spells that text, whatever its case,
    may be given (the caller checks each line): the rest are passed over by SQLite, or
    before a chunk is taken apart into its lines. A chunk's text holds each line's
    payload as it is, so one that holds no match holds no line that does."""
    where, params = ["run_id = ?", _TRANSCRIPT, "seq > ?"], [run_id, after]
    if task_key is not None:
        where.insert(1, "task_key = ?")
        params.insert(1, task_key)
    spelled = _spelled(holding) if holding else None
    if holding and (like := _like(holding)) is not None:
        where.append("(typeof(payload) = 'blob' OR payload LIKE ? ESCAPE '\\' "
                     f"OR payload GLOB '{_FOLDS_TO_ASCII}')")
        params.append(like)
    bounds = [x for x in (before - 1 if before else None, through) if x is not None]
    high = min(bounds) if bounds else None
    if (wide := widened(high)) is not None:
        where.append("seq <= ?")
        params.append(wide)
    rows = ledger.cursor(f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} "
                         f"ORDER BY seq {'DESC' if backwards else 'ASC'}", params)
    stored: Iterator[EventRow] = map(fetched, rows)
    if spelled is not None:  # a payload left as bytes does not decompress: decoding names it
        stored = (row for row in stored
                  if type(row.payload) is not str or spelled.search(row.payload))
    # The query keeps the transcript's types: a chunk holds only lines.
    yield from read_as_lines(ledger.path, stored, None, after, high, backwards=backwards)


def transcript_row_before(ledger: Ledger, run_id: str, task_key: str, seq: int) -> int | None:
    """The seq of the task's transcript row just before ``seq`` (None: there is none)."""
    row = next(_transcript(ledger, run_id, task_key, before=seq, backwards=True), None)
    return row.seq if row is not None else None


def transcript_tail(ledger: Ledger, run_id: str, task_key: str, after: int,
                    limit: int) -> list[EventRow]:
    """The task's last ``limit`` transcript rows after seq ``after``, newest first;
    Claude Code's partial-message lines (``stream_event``) left out: the lines after
    them hold each message whole, and a tail of them would show nothing."""
    return list(islice((row for row in _transcript(ledger, run_id, task_key, after=after,
                                                   backwards=True)
                        if not (row.type == EventType.TASK_EVENT
                                and '"type":"stream_event"' in row.payload)), limit))


def usage_lines(ledger: Ledger, run_id: str,
                task_key: str) -> list[tuple[int, str, Any, bool]]:
    """``(seq, ts, data, erred)`` of the task's JSON lines that mention ``"usage"`` at all
    (the ones a conversation's running usage can move on) or an error (``erred``: a
    tool's result marked one, maybe), in seq order; ``data`` is the line's object as
    stored (None where a forged row holds no object there)."""
    return [(row.seq or 0, row.ts, _data(row.payload), "error" in row.payload)
            for row in ledger.rows(run_id, task_key=task_key, types=[EventType.TASK_EVENT])
            if '"usage"' in row.payload or "error" in row.payload]


def result_lines(ledger: Ledger, run_id: str) -> list[tuple[str, int, Any]]:
    """``(task_key, seq, data)`` of the run's JSON lines an agent ends a session or a turn
    with (Claude Code's and Gemini CLI's ``result``, Codex's ``turn.completed`` and
    ``turn.failed``), in seq order: what each attempt's agent said of how it ended."""
    return [(row.task_key or "", row.seq or 0, _data(row.payload))
            for row in ledger.rows(run_id, types=[EventType.TASK_EVENT])
            if '"type":"result"' in row.payload or '"type":"turn.' in row.payload]


def _data(payload: str) -> Any:
    """A ``task.event`` payload's ``data`` when it is an object (None where a forged row
    holds something else there)."""
    try:
        data = json.loads(payload).get("data")
    except (ValueError, AttributeError):
        return None
    return data if isinstance(data, dict) else None


def completion_environments(ledger: Ledger, run_id: str, until_seq: int | None = None,
                            ) -> list[tuple[str, int, dict[str, Any]]]:
    """``(task_key, attempt, environment_info)`` of each of the run's completions up to
    ``until_seq``, in seq order (an attempt not recorded reads as 1; no info as {}),
    with what each left to its session put back (``hosts.attempt_environment``)."""
    _, rows = ledger.query(
        "SELECT type, task_key, json_extract(payload, '$.attempt'), "
        f"CASE WHEN type = ? THEN {json_object('$.environment_info')} "
        f"ELSE {json_object('$.host')} END, "
        "json_type(payload, '$.imported') IS NOT NULL FROM events "
        "WHERE run_id = ? AND type IN (?, ?, ?) AND seq <= ? ORDER BY seq",
        [EventType.TASK_COMPLETED, run_id, EventType.TASK_COMPLETED, EventType.RUN_STARTED,
         EventType.RUN_RESUMED, until_seq if until_seq is not None else 2**62])
    found, session = [], {}
    for type_, key, attempt, info, imported in rows:
        value = json.loads(info) if info else {}
        if type_ != EventType.TASK_COMPLETED:
            session = session_environment(value)
            continue
        found.append((key, attempt if isinstance(attempt, int) else 1,
                      attempt_environment(value, session, bool(imported))))
    return found


def attempt_lines(ledger: Ledger, run_id: str, task_key: str, after_seq: int,
                  until_seq: int | None) -> Iterator[tuple[int, str, str]]:
    """An attempt's transcript (the key's rows in ``after_seq < seq <= until_seq``) as
    (seq, stream, text): each line as printed, a JSON event as its JSON text on stdout.
    What a regrade's ``output_contains`` and a scan's rules read."""
    for row in ledger.rows(run_id, task_key=task_key,
                           types=(EventType.TASK_OUTPUT, EventType.TASK_EVENT),
                           after_seq=after_seq, until_seq=until_seq):
        payload = _object(ledger, row)
        if row.type == EventType.TASK_EVENT:
            yield row.seq or 0, "stdout", json.dumps(payload.get("data"), ensure_ascii=False)
        else:
            yield row.seq or 0, str(payload.get("stream", "stdout")), str(payload.get("line", ""))


def _object(ledger: Ledger, row: EventRow) -> dict[str, Any]:
    """A row's payload as a JSON object, or ``InvalidEvent`` naming the row: a row written
    into the file by hand was never validated (a traceback in `scan`, `regrade` and
    `search`)."""
    try:
        payload = json.loads(row.payload)
    except (TypeError, ValueError, RecursionError) as e:
        raise _invalid(ledger.path, row, ValueError(f"payload is not JSON ({e})")) from e
    if not isinstance(payload, dict):
        raise _invalid(ledger.path, row, ValueError("payload is not a JSON object"))
    return payload
