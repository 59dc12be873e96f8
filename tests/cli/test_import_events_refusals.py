"""What ``import-events`` refuses, each with one line naming why (and the line), and
nothing appended: an event id held with other content, events for a run this ledger
recorded itself, envelopes the ledger would not write, lines over the size or nesting
limit, and files that are not a whole export (no trailer, a count or digest that does
not match, cut short, empty)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from evalledger.app._repository import write_snapshot
from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.ledger._events import new_event_id
from evalledger.statuses import FinalStatus

from .helpers import assert_one_line_error, evalledger

RUN = "r"
KEY = "default/t/00"
SUCCEEDED = {"final_status": FinalStatus.SUCCESS.value,
             "category": FinalStatus.SUCCESS.category.value}


def record(db: Path) -> None:
    """One finished run, recorded in ``db`` as a run records it."""
    with Ledger(db) as ledger:
        ledger.append([RunStarted(run_id=RUN, ledger_id=ledger.ledger_id, planned=[KEY])])
        ledger.append([TaskStarted(run_id=RUN, task_key=KEY, task_id="t")])
        ledger.append([TaskOutput(run_id=RUN, task_key=KEY, line=f"line {i}", n=i)
                       for i in range(3)])
        ledger.append([TaskCompleted(run_id=RUN, task_key=KEY, final_status=FinalStatus.FAILURE,
                                     category=FinalStatus.FAILURE.category)])
        ledger.append([RunFinished(run_id=RUN, status="completed")])
        write_snapshot(ledger, RUN)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    db = tmp_path / "source.db"
    record(db)
    return db


def export_lines(db: Path) -> list[str]:
    """The run's export, its trailer left out."""
    out = db.parent / "export.ndjson"
    assert evalledger(db.parent, db, "export", RUN, "-o", str(out)).returncode == 0
    *lines, trailer = out.read_text(encoding="utf-8").splitlines()
    assert trailer.startswith('{"trailer":')
    return lines


def write_export(path: Path, lines: list[str], *, events: int | None = None) -> Path:
    """An export of ``lines`` with a trailer that matches them (or counts ``events``):
    only the fault a test puts in a line is wrong with it."""
    body = "".join(line + "\n" for line in lines)
    with Ledger(path.parent / "source.db", read_only=True) as ledger:
        ledger_id = ledger.ledger_id
    trailer = {"trailer": {"events": len(lines) if events is None else events,
                           "ledger_id": ledger_id,
                           "sha256": hashlib.sha256(body.encode()).hexdigest()}}
    path.write_text(body + json.dumps(trailer, separators=(",", ":")) + "\n",
                    encoding="utf-8")
    return path


def changed(line: str, **fields: object) -> str:
    event = json.loads(line)
    payload = fields.pop("payload", None)
    event.update(fields)
    if payload is not None:
        event["payload"].update(payload)
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def count(db: Path) -> int | None:
    if not db.exists():
        return None
    with Ledger(db, read_only=True) as ledger:
        return ledger.count()


def refused(db: Path, file: Path, *args: str) -> str:
    """The one-line error of importing ``file`` into ``db``, which it left as it was."""
    before = count(db)
    error = assert_one_line_error(evalledger(db.parent, db, "import-events", str(file), *args))
    assert "nothing was imported" in error
    assert count(db) == before
    return error


def line_of(lines: list[str], type_: str) -> int:
    return next(i for i, line in enumerate(lines) if json.loads(line)["type"] == type_)


# -- against what the ledger holds -------------------------------------------------------------


def test_an_event_id_held_with_other_content_is_refused(source: Path, tmp_path: Path) -> None:
    """It was dropped, and still counted as added."""
    lines = export_lines(source)
    target = tmp_path / "target.db"
    assert evalledger(tmp_path, target, "import-events",
                      str(write_export(tmp_path / "first.ndjson", lines))).returncode == 0
    at = line_of(lines, "task.completed")
    forged = [*lines[:at], changed(lines[at], payload=SUCCEEDED),
              *lines[at + 1:]]
    error = refused(target, write_export(tmp_path / "forged.ndjson", forged))
    event_id = json.loads(lines[at])["event_id"]
    assert f"line {at + 1}: event {event_id} is already in the ledger with another payload" in error


def test_one_event_id_twice_in_a_file_with_other_content_is_refused(
        source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    at = line_of(lines, "task.completed")
    last = json.loads(lines[-1])["seq"]  # in order: only its id is the fault
    twice = [*lines, changed(lines[at], payload=SUCCEEDED, seq=last + 1)]
    error = refused(tmp_path / "target.db", write_export(tmp_path / "twice.ndjson", twice))
    assert f"line {len(twice)}: event" in error and f"also on line {at + 1}" in error


def test_events_for_a_run_this_ledger_recorded_are_refused(source: Path, tmp_path: Path) -> None:
    """A task.completed appended into a run recorded here changed its result."""
    lines = export_lines(source)
    at = line_of(lines, "task.completed")
    extra = changed(lines[at], event_id=new_event_id(), seq=99,
                    payload={**SUCCEEDED, "attempt": 2})
    error = refused(source, write_export(tmp_path / "more.ndjson", [*lines, extra]))
    assert f"line {len(lines) + 1}: run {RUN} was recorded in this ledger" in error


def test_its_own_export_imports_into_a_ledger_as_nothing_new(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    before = count(source)
    again = evalledger(tmp_path, source, "import-events",
                       str(write_export(tmp_path / "own.ndjson", lines)))
    assert again.returncode == 0, again
    assert f"0 of {len(lines)} events added" in again.stdout
    assert count(source) == before


def test_a_run_merged_here_takes_more_of_its_events_from_a_file(
        source: Path, tmp_path: Path) -> None:
    """Not local: its events came from elsewhere (run.merged), so may the rest."""
    lines = export_lines(source)
    target = tmp_path / "target.db"
    cut = line_of(lines, "run.finished")
    assert evalledger(tmp_path, target, "import-events",
                      str(write_export(tmp_path / "part.ndjson", lines[:cut]))).returncode == 0
    rest = evalledger(tmp_path, target, "import-events",
                      str(write_export(tmp_path / "all.ndjson", lines)))
    assert rest.returncode == 0, rest
    assert f"1 of {len(lines)} events added" in rest.stdout


# -- envelopes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "says"), [
    ("ts", "not a time", "is not a UTC time"),
    ("ts", "2026-02-30T10:00:00.000000Z", "is not a UTC time"),
    ("ts", "2026-01-01T10:00:00+01:00", "is not a UTC time"),
    ("event_id", "../../etc/passwd", "is not a UUID"),
    ("event_id", "01A2B3C4-0000-7000-8000-000000000000", "is not a UUID"),
    ("run_id", "../escape", "is not a run id"),
    ("run_id", "r\x1b[31m", "is not a run id"),
    # What `import` refuses in a name: a bidi override, a line separator, an isolate.
    ("run_id", "run1\u202egnp.exe", "is not a run id"),
    ("run_id", "r\u2028x", "is not a run id"),
    ("task_key", "default/t\u2066/00", "is not a task key"),
    ("task_key", "default/../00", "is not a task key"),
    ("task_key", "default/t\n/00", "is not a task key"),
    ("type", "Robert'); DROP TABLE events;--", "is not an event type"),
    ("seq", "7", "is not a positive integer"),
])
def test_an_envelope_the_ledger_would_not_write_is_refused(
        source: Path, tmp_path: Path, field: str, value: str, says: str) -> None:
    lines = export_lines(source)
    at = line_of(lines, "task.output")
    bad = [*lines[:at], changed(lines[at], **{field: value}), *lines[at + 1:]]
    error = refused(tmp_path / "target.db", write_export(tmp_path / "bad.ndjson", bad))
    assert f"line {at + 1}: " in error and says in error


def test_a_type_this_version_does_not_know_is_kept(source: Path, tmp_path: Path) -> None:
    """docs/events.md, "Unknown types": kept whole, skipped by projections."""
    lines = export_lines(source)
    newer = {**json.loads(lines[0]), "event_id": new_event_id(), "type": "run.annotated",
             "seq": 50, "payload": {"note": "from a newer evalledger"}}
    target = tmp_path / "target.db"
    done = evalledger(tmp_path, target, "import-events",
                      str(write_export(tmp_path / "newer.ndjson", [*lines, json.dumps(newer)])))
    assert done.returncode == 0, done
    with Ledger(target, read_only=True) as ledger:
        kept = list(ledger.rows(RUN, types=["run.annotated"]))
    assert [json.loads(r.payload) for r in kept] == [{"note": "from a newer evalledger"}]


# -- numbers -----------------------------------------------------------------------------------


def _with_number(line: str, number: str) -> str:
    """``line`` with its placeholder ``"__N__"`` spelled as the JSON number ``number``
    (which json.dumps would write as Infinity, or not at all)."""
    assert '"__N__"' in line
    return line.replace('"__N__"', number)


@pytest.mark.parametrize("number", ["1e400", "-1E+400", "1e0400", "9" * 400 + ".5"])
@pytest.mark.parametrize("where", ["unknown type", "task.event data"])
def test_a_number_past_a_floats_range_is_refused(source: Path, tmp_path: Path, number: str,
                                                 where: str) -> None:
    """1e400 read as inf: in an event of a type this version does not know it was stored
    as `Infinity` (verify failed for good), in a task.event's data as null."""
    lines = export_lines(source)
    at = line_of(lines, "task.output")
    head = json.loads(lines[at])
    if where == "unknown type":
        bad = {**json.loads(lines[0]), "event_id": new_event_id(), "type": "run.annotated",
               "seq": 50, "payload": {"x": "__N__"}}
        lines, path = [*lines, json.dumps(bad)], "payload.x"
    else:
        bad = {**head, "event_id": new_event_id(), "type": "task.event",
               "payload": {"data": {"x": ["__N__"]}, "n": 9}}
        lines, path = [*lines[:at], json.dumps(bad)], "payload.data.x.0"
    lines[-1] = _with_number(lines[-1], number)
    error = refused(tmp_path / "target.db", write_export(tmp_path / "huge.ndjson", lines))
    assert f"line {len(lines)}: the number at {path} is past a float's range" in error


def test_a_large_finite_number_is_kept(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    newer = {**json.loads(lines[0]), "event_id": new_event_id(), "type": "run.annotated",
             "seq": 50, "payload": {"x": "__N__", "y": "__N__"}}
    target = tmp_path / "target.db"
    file = write_export(tmp_path / "large.ndjson",
                        [*lines, _with_number(json.dumps(newer), "1e300")])
    assert evalledger(tmp_path, target, "import-events", str(file)).returncode == 0
    with Ledger(target, read_only=True) as ledger:
        kept = list(ledger.rows(RUN, types=["run.annotated"]))
    assert [json.loads(r.payload) for r in kept] == [{"x": 1e300, "y": 1e300}]
    assert evalledger(tmp_path, target, "verify").returncode == 0


@pytest.mark.parametrize(("payload", "says"), [
    ({"duration_seconds": 1.7e308}, "duration_seconds 1.7e+308 is past 1e+09"),
    ({"duration_seconds": -2e9}, "duration_seconds -2e+09 is past 1e+09"),
    ({"cost_usd": 1.7e308}, "cost_usd 1.7e+308 is past 1e+09"),
    ({"tokens": {"input_tokens": 2**53 + 1}}, f"input_tokens {2**53 + 1} is past 2**53"),
])
def test_a_duration_cost_or_token_count_no_attempt_has_is_refused(
        source: Path, tmp_path: Path, payload: dict[str, object], says: str) -> None:
    """Two finite durations of 1.7e308 were imported, and every read of the run then
    ended in OverflowError (their sum)."""
    lines = export_lines(source)
    at = line_of(lines, "task.completed")
    bad = [*lines[:at], changed(lines[at], payload=payload), *lines[at + 1:]]
    error = refused(tmp_path / "target.db", write_export(tmp_path / "big.ndjson", bad))
    assert f"line {at + 1}: task.completed {says}" in error


def test_a_run_claiming_to_have_been_recorded_here_is_refused(source: Path,
                                                              tmp_path: Path) -> None:
    """A run.started naming the destination's ledger id, back-dated, was imported: verify
    failed for good (the ledger "began after" it), and the run counted as recorded here."""
    target = tmp_path / "target.db"
    with Ledger(target) as ledger:
        here = ledger.ledger_id
    lines = export_lines(source)
    at = line_of(lines, "run.started")
    forged = [*lines[:at], changed(lines[at], ts="2024-01-01T10:00:00.000000Z",
                                   payload={"ledger_id": here}), *lines[at + 1:]]
    error = refused(target, write_export(tmp_path / "forged.ndjson", forged))
    assert f"line {at + 1}: run {RUN}'s run.started says it was recorded in this ledger" in error
    assert evalledger(tmp_path, target, "verify").returncode == 0


# -- limits ------------------------------------------------------------------------------------


def test_a_line_over_the_limit_is_refused_naming_it(source: Path, tmp_path: Path) -> None:
    """A 50 MB line was taken; the runner itself cuts output lines at 64 KiB."""
    lines = export_lines(source)
    at = line_of(lines, "task.output")
    long = changed(lines[at], payload={"line": "x" * (2 * 1024 * 1024)})
    file = write_export(tmp_path / "long.ndjson", [*lines[:at], long, *lines[at + 1:]])
    error = refused(tmp_path / "target.db", file, "--max-line-bytes", str(1024 * 1024))
    assert f"line {at + 1} is longer than 1,048,576 bytes (--max-line-bytes)" in error
    # Within a higher limit the same file imports.
    done = evalledger(tmp_path, tmp_path / "target.db", "import-events", str(file),
                      "--max-line-bytes", str(4 * 1024 * 1024))
    assert done.returncode == 0, done


def test_a_line_over_the_default_limit_is_refused(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    at = line_of(lines, "task.output")
    huge = changed(lines[at], payload={"line": "x" * (17 * 1024 * 1024)})
    error = refused(tmp_path / "target.db",
                    write_export(tmp_path / "huge.ndjson", [*lines[:at], huge]))
    assert f"line {at + 1} is longer than 16,777,216 bytes" in error


def test_json_nested_too_deep_is_one_line(source: Path, tmp_path: Path) -> None:
    """It was a RecursionError traceback."""
    lines = export_lines(source)
    at = line_of(lines, "task.output")
    head = json.loads(lines[at])
    nested = '{"a":' * 5000 + "1" + "}" * 5000
    deep = (f'{{"seq":{head["seq"]},"event_id":"{new_event_id()}","run_id":"{RUN}",'
            f'"task_key":"{KEY}","type":"task.event","ts":"{head["ts"]}",'
            f'"payload":{{"data":{nested},"n":9}}}}')
    error = refused(tmp_path / "target.db",
                    write_export(tmp_path / "deep.ndjson", [*lines[:at], deep]))
    assert f"line {at + 1}: JSON nested deeper than 200 levels" in error


# -- whole files -------------------------------------------------------------------------------


def test_a_file_without_its_trailer_is_refused(source: Path, tmp_path: Path) -> None:
    """An export cut at a line boundary imported with exit 0 as if complete."""
    lines = export_lines(source)
    file = tmp_path / "cut.ndjson"
    file.write_text("".join(line + "\n" for line in lines[:-2]), encoding="utf-8")
    assert "no trailer at its end" in refused(tmp_path / "target.db", file)


def test_a_trailer_that_counts_otherwise_is_refused(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    file = write_export(tmp_path / "count.ndjson", lines[:-1], events=len(lines))
    error = refused(tmp_path / "target.db", file)
    assert f"its trailer counts {len(lines)} events, the file holds {len(lines) - 1}" in error


def test_a_file_changed_after_its_export_is_refused(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    file = write_export(tmp_path / "changed.ndjson", lines)
    text = file.read_text(encoding="utf-8")
    file.write_text(text.replace('"line 0"', '"line 9"'), encoding="utf-8")
    assert "do not match the trailer's sha256" in refused(tmp_path / "target.db", file)


def test_a_file_cut_inside_a_line_is_refused(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    whole = write_export(tmp_path / "whole.ndjson", lines).read_bytes()
    file = tmp_path / "cut.ndjson"
    # Into the last event's line: a disk that filled while the export was written.
    file.write_bytes(whole[: whole.rindex(b"\n", 0, whole.rindex(b'{"trailer"')) - 20])
    error = refused(tmp_path / "target.db", file)
    assert f"line {len(lines)}: not JSON" in error


def test_a_compressed_export_cut_short_is_refused(source: Path, tmp_path: Path) -> None:
    packed = gzip.compress(write_export(tmp_path / "e.ndjson", export_lines(source)).read_bytes())
    file = tmp_path / "cut.ndjson.gz"
    file.write_bytes(packed[: len(packed) // 2])
    assert "cannot be read" in refused(tmp_path / "target.db", file)


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    """A 0-byte export left by a full disk imported with exit 0."""
    file = tmp_path / "empty.ndjson"
    file.write_bytes(b"")
    assert "the file is empty" in refused(tmp_path / "target.db", file)


def test_a_line_after_the_trailer_is_refused(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    file = write_export(tmp_path / "two.ndjson", lines)
    with file.open("a", encoding="utf-8") as f:
        f.write(lines[0] + "\n")
    error = refused(tmp_path / "target.db", file)
    assert f"line {len(lines) + 2}: after the trailer (line {len(lines) + 1})" in error


def test_a_file_of_blank_lines_is_refused_at_the_first(tmp_path: Path) -> None:
    """100 KB of gzip (100 MiB of newlines) took 90 s of CPU, a line at a time, to be
    found empty."""
    file = tmp_path / "blank.ndjson.gz"
    with gzip.open(file, "wb", compresslevel=9) as packed:
        for _ in range(20):
            packed.write(b"\n" * (1 << 20))
    assert "line 1 is blank: an export holds no blank line" in refused(tmp_path / "t.db", file)


def test_a_blank_line_in_an_export_is_refused_naming_it(source: Path, tmp_path: Path) -> None:
    lines = export_lines(source)
    file = write_export(tmp_path / "blank.ndjson", lines)
    text = file.read_text(encoding="utf-8").split("\n")
    file.write_text("\n".join([*text[:2], " \r", *text[2:]]), encoding="utf-8")
    assert "line 3 is blank" in refused(tmp_path / "target.db", file)


def test_a_file_whose_name_is_not_utf8_is_imported_its_name_escaped(
        source: Path, tmp_path: Path) -> None:
    """A name from a tarball or an attachment: run.merged could not record it (a
    PydanticSerializationError traceback)."""
    file = Path(os.fsdecode(bytes(tmp_path) + b"/export-\xff.ndjson"))
    write_export(file, export_lines(source))
    target = tmp_path / "target.db"
    done = evalledger(tmp_path, target, "import-events", str(file))
    assert done.returncode == 0, done
    with Ledger(target, read_only=True) as ledger:
        merged = [json.loads(r.payload) for r in ledger.rows(RUN, types=["run.merged"])]
    assert [m["source"] for m in merged] == [f"{tmp_path.resolve()}/export-\\xff.ndjson"]
    assert evalledger(tmp_path, target, "verify").returncode == 0


def test_a_refused_import_makes_no_ledger(source: Path, tmp_path: Path) -> None:
    file = tmp_path / "empty.ndjson"
    file.write_bytes(b"")
    refused(tmp_path / "new.db", file)
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("how", ["reversed", "one line twice", "two swapped"])
def test_a_file_out_of_its_ledgers_order_is_refused(source: Path, tmp_path: Path,
                                                    how: str) -> None:
    """A reversed export (its trailer made again) imported, a verdict before its start."""
    lines = export_lines(source)
    if how == "reversed":
        lines, bad = lines[::-1], 2
    elif how == "one line twice":
        lines, bad = [*lines[:3], lines[2], *lines[3:]], 4
    else:
        lines, bad = [lines[0], lines[2], lines[1], *lines[3:]], 3
    file = write_export(tmp_path / "order.ndjson", lines)
    error = refused(tmp_path / "target.db", file)
    assert f"line {bad}: seq" in error and f"of run {RUN} comes after seq" in error
