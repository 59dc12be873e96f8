"""``evalledger verify`` end to end: real ``evalledger`` processes and click's CliRunner.

Every scenario runs both ways: in a real process of its own running the entry point
(``evalledger.cli.main``, what ``python -m evalledger.cli`` and the console script
call), with the real exit status, stdout and stderr; and ``CliRunner`` in-process
with ``catch_exceptions=False`` so an unexpected exception fails the test instead of
passing as exit code 1. The processes are forked from a server that imported the
package once (``helpers.EntryPoint``), so each costs milliseconds, not a new
interpreter. The console script itself, interpreter and all, gets its own smoke test.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalledger
from evalledger.cli import cli
from evalledger.ledger import (
    SCHEMA_VERSION,
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.ledger._chain import chain_rows
from evalledger.ledger._rows import EventRow, text_hash, text_id
from evalledger.statuses import Category, FinalStatus, RunStatus

from .helpers import EntryPoint

SCRIPT = Path(sys.executable).parent / "evalledger"
APPEND_ONLY = "events are append-only"
BROKEN = re.compile(r"^hash chain broken at seq (\d+)", re.MULTILINE)

# The ledger written by ``_make_ledger``: seq -> type.
LAYOUT = {
    1: "run.started",
    2: "task.started",
    3: "task.output",
    4: "task.output",
    5: "task.completed",
    6: "run.finished",
}
OUTPUT_SEQ = 3  # a task.output row in the middle of the chain


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str


Invoke = Callable[..., Outcome]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "EVALLEDGER_LEDGER"}


@pytest.fixture(scope="module")
def entry_point(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryPoint]:
    server = EntryPoint(tmp_path_factory.mktemp("entry-point"))
    yield server
    server.close()


@pytest.fixture(params=["process", "runner"])
def invoke(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Invoke:
    """Run ``evalledger ARGS...`` one way or the other; same Outcome either way."""
    monkeypatch.delenv("EVALLEDGER_LEDGER", raising=False)

    if request.param == "process":
        entry_point = request.getfixturevalue("entry_point")

        def run(*args: str, env: dict[str, str] | None = None) -> Outcome:
            done = entry_point(*args, cwd=tmp_path, env={**_clean_env(), **(env or {})})
            return Outcome(done.returncode, done.stdout, done.stderr)

        return run

    def run_in_process(*args: str, env: dict[str, str] | None = None) -> Outcome:
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(
            cli, list(args), prog_name="evalledger", env=env, catch_exceptions=False
        )
        return Outcome(result.exit_code, result.stdout, result.stderr)

    return run_in_process


def _make_ledger(path: Path) -> None:
    run = "run-1"
    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id=run, planned=["t1"])])
        ledger.append(
            [
                TaskStarted(run_id=run, task_key="t1", task_id="t1"),
                TaskOutput(run_id=run, task_key="t1", line="hello", n=1),
                TaskOutput(run_id=run, task_key="t1", line="world", n=2),
                TaskCompleted(
                    run_id=run,
                    task_key="t1",
                    category=Category.SUCCEEDED,
                    final_status=FinalStatus.SUCCESS,
                    exit_code=0,
                ),
            ]
        )
        ledger.append([RunFinished(run_id=run, status=RunStatus.COMPLETED)])
        assert {r.seq: r.type for r in ledger.rows()} == LAYOUT


@pytest.fixture
def ledger_file(db_path: Path) -> Path:
    _make_ledger(db_path)
    return db_path


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _payload(path: Path, seq: int) -> dict:
    with closing(_raw(path)) as conn:
        return json.loads(
            conn.execute("SELECT payload FROM events WHERE seq = ?", [seq]).fetchone()[0]
        )


def _canonical(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _tamper(path: Path, sql: str, params: list | tuple = (), drop: str | None = None) -> None:
    with closing(_raw(path)) as conn:
        if drop is not None:
            conn.execute(f"DROP TRIGGER {drop}")
        conn.execute(sql, params)


def _last_hash(path: Path) -> str:
    with closing(_raw(path)) as conn:
        return str(text_hash(
            conn.execute("SELECT hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()[0]))


def _verify(invoke: Invoke, path: Path) -> Outcome:
    return invoke("--ledger", str(path), "verify")


def _assert_no_traceback(out: Outcome) -> None:
    assert "Traceback" not in out.stdout + out.stderr


# -- intact -----------------------------------------------------------------------------------


def test_intact_ledger_is_ok(invoke: Invoke, ledger_file: Path) -> None:
    content = ledger_file.read_bytes()

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 0, out
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    assert lines[0].startswith(f"OK: {ledger_file}: 6 events, schema version {SCHEMA_VERSION}")
    assert lines[0].endswith(f"last hash {_last_hash(ledger_file)}")
    assert out.stderr == ""
    assert ledger_file.read_bytes() == content, "verify wrote to the ledger"


def test_empty_ledger_is_ok(invoke: Invoke, db_path: Path) -> None:
    Ledger(db_path).close()

    out = _verify(invoke, db_path)

    assert out.exit_code == 0, out
    assert out.stdout.startswith(f"OK: {db_path}: 0 events")
    assert out.stdout.rstrip().endswith("last hash " + "0" * 64)


def test_ledger_from_environment(invoke: Invoke, ledger_file: Path) -> None:
    out = invoke("verify", env={"EVALLEDGER_LEDGER": str(ledger_file)})
    assert out.exit_code == 0, out
    assert out.stdout.startswith(f"OK: {ledger_file}:")


def test_default_ledger_in_working_directory(invoke: Invoke, tmp_path: Path) -> None:
    _make_ledger(tmp_path / "evalledger.db")
    out = invoke("verify")
    assert out.exit_code == 0, out
    assert out.stdout.startswith("OK: evalledger.db: 6 events")


# -- tampering --------------------------------------------------------------------------------


def test_edited_payload_breaks_its_link(invoke: Invoke, ledger_file: Path) -> None:
    forged = _payload(ledger_file, OUTPUT_SEQ) | {"line": "forged"}
    _tamper(
        ledger_file,
        "UPDATE events SET payload = ? WHERE seq = ?",
        [_canonical(forged), OUTPUT_SEQ],
        drop="events_no_update",
    )
    # Still a valid task.output: only the hash gives it away.
    with Ledger(ledger_file, read_only=True) as ledger:
        assert [e.line for e in ledger.events(types=["task.output"])] == ["forged", "world"]

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    _assert_no_traceback(out)
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"FAILED: {ledger_file}: 6 events")
    assert BROKEN.findall(out.stdout) == [str(OUTPUT_SEQ)]
    assert any(line.startswith(f"hash chain broken at seq {OUTPUT_SEQ}:") for line in lines), (
        out.stdout
    )
    assert "trigger events_no_update is missing: events can be changed" in lines
    assert not any("events_no_delete" in line for line in lines)
    assert "does not validate" not in out.stdout
    assert "gap in seq" not in out.stdout


def test_edit_refused_while_trigger_is_in_place(invoke: Invoke, ledger_file: Path) -> None:
    forged = _payload(ledger_file, OUTPUT_SEQ) | {"line": "forged"}
    with pytest.raises(sqlite3.IntegrityError, match=APPEND_ONLY):
        _tamper(
            ledger_file,
            "UPDATE events SET payload = ? WHERE seq = ?",
            [_canonical(forged), OUTPUT_SEQ],
        )
    assert _payload(ledger_file, OUTPUT_SEQ)["line"] == "hello"

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 0, out
    assert out.stdout.startswith("OK: ")


@pytest.mark.parametrize("seq", [1, 3, 5])
def test_deleted_row_leaves_a_gap(invoke: Invoke, ledger_file: Path, seq: int) -> None:
    _tamper(ledger_file, "DELETE FROM events WHERE seq = ?", [seq], drop="events_no_delete")

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    _assert_no_traceback(out)
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"FAILED: {ledger_file}: 5 events")
    assert f"gap in seq: {seq - 1} is followed by {seq + 1}" in lines
    # The next row was chained to the deleted one, so its link breaks too.
    assert BROKEN.findall(out.stdout) == [str(seq + 1)]
    assert "trigger events_no_delete is missing: events can be deleted" in lines
    assert not any("events_no_update" in line for line in lines)


def test_deleted_row_with_trigger_in_place_is_refused(invoke: Invoke, ledger_file: Path) -> None:
    with pytest.raises(sqlite3.IntegrityError, match=APPEND_ONLY):
        _tamper(ledger_file, "DELETE FROM events WHERE seq = 3")
    out = _verify(invoke, ledger_file)
    assert out.exit_code == 0, out


def test_missing_triggers_alone_fail_verify(invoke: Invoke, ledger_file: Path) -> None:
    with closing(_raw(ledger_file)) as conn:
        conn.execute("DROP TRIGGER events_no_update")
        conn.execute("DROP TRIGGER events_no_delete")

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    assert out.stdout.startswith("FAILED: ")
    assert BROKEN.findall(out.stdout) == []
    assert "trigger events_no_update is missing: events can be changed" in out.stdout
    assert "trigger events_no_delete is missing: events can be deleted" in out.stdout


def test_payload_that_does_not_validate(invoke: Invoke, ledger_file: Path) -> None:
    broken = _payload(ledger_file, OUTPUT_SEQ)
    del broken["n"]
    _tamper(
        ledger_file,
        "UPDATE events SET payload = ? WHERE seq = ?",
        [_canonical(broken), OUTPUT_SEQ],
        drop="events_no_update",
    )

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    _assert_no_traceback(out)
    lines = out.stdout.splitlines()
    invalid = [line for line in lines if "does not validate" in line]
    assert len(invalid) == 1, out.stdout
    # pydantic puts the union's tag in front of the field: "task.output.n: Field required".
    assert re.fullmatch(
        rf"seq {OUTPUT_SEQ}: payload does not validate: (task\.output\.)?n: Field required",
        invalid[0],
    ), invalid[0]
    assert BROKEN.findall(out.stdout) == [str(OUTPUT_SEQ)]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(
    "payload",
    ["not json", "", "[]", '{"line": 1, "n": "x"}'],
    ids=["text", "empty", "array", "wrong-types"],
)
def test_garbage_payload_is_reported(invoke: Invoke, ledger_file: Path, payload: str) -> None:
    _tamper(
        ledger_file,
        "UPDATE events SET payload = ? WHERE seq = ?",
        [payload, OUTPUT_SEQ],
        drop="events_no_update",
    )

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    _assert_no_traceback(out)
    assert re.search(rf"^seq {OUTPUT_SEQ}: payload does not validate", out.stdout, re.MULTILINE)


def test_blob_payload_is_reported(invoke: Invoke, ledger_file: Path) -> None:
    _tamper(
        ledger_file,
        "UPDATE events SET payload = X'7b7d' WHERE seq = ?",  # the bytes of "{}"
        [OUTPUT_SEQ],
        drop="events_no_update",
    )

    out = _verify(invoke, ledger_file)

    _assert_no_traceback(out)
    assert out.exit_code == 1, out
    assert re.search(rf"^seq {OUTPUT_SEQ}: payload does not validate", out.stdout, re.MULTILINE)


# -- cannot be opened -------------------------------------------------------------------------


def _not_a_database(path: Path) -> None:
    path.write_text("just some text, not SQLite\n")


def _missing(path: Path) -> None:
    pass


def _foreign(path: Path) -> None:
    with closing(_raw(path)) as conn:
        conn.execute("CREATE TABLE foo (x)")


def _too_new(path: Path) -> None:
    _make_ledger(path)
    with closing(_raw(path)) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")


def _directory(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize(
    "make",
    [_not_a_database, _missing, _foreign, _too_new, _directory],
    ids=["not-a-database", "missing", "foreign", "too-new", "directory"],
)
def test_unopenable_ledger_exits_2(invoke: Invoke, db_path: Path, make: Callable) -> None:
    make(db_path)
    existed = db_path.exists()

    out = _verify(invoke, db_path)

    assert out.exit_code == 2, out
    _assert_no_traceback(out)
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("Error:")
    assert str(db_path) in lines[0]
    assert db_path.exists() == existed, "verify created or removed the ledger path"


# -- version ----------------------------------------------------------------------------------


def test_version(invoke: Invoke) -> None:
    out = invoke("--version")
    assert out.exit_code == 0, out
    assert evalledger.__version__ == version("evalledger")
    assert out.stdout.strip() == f"evalledger, version {evalledger.__version__}"


def test_console_script(ledger_file: Path, tmp_path: Path) -> None:
    """The ``evalledger`` entry point installed next to the interpreter, as a user runs it."""
    if not SCRIPT.is_file():
        pytest.skip(f"no console script next to {sys.executable}")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            cwd=tmp_path,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = run("--version")
    assert (done.returncode, done.stdout.strip()) == (
        0,
        f"evalledger, version {evalledger.__version__}",
    )
    done = run("--ledger", str(ledger_file), "verify")
    assert done.returncode == 0, done
    assert done.stdout.startswith("OK: ")
    done = run("--ledger", str(tmp_path / "missing.db"), "verify")
    assert done.returncode == 2, done
    assert done.stderr.startswith("Error: no ledger at ")
    assert "Traceback" not in done.stderr


# -- rows stored as evalledger never stores them ----------------------------------------------


def _edit_behind_triggers(path: Path, *statements: str, params: list | tuple = ()) -> None:
    """Run ``statements`` with the append-only triggers dropped, then put them back exactly
    as they were: only the edit itself is left for verify to find."""
    with closing(_raw(path)) as conn:
        triggers = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name").fetchall()
        for name in ("events_no_update", "events_no_delete"):
            conn.execute(f"DROP TRIGGER {name}")
        for statement in statements:
            conn.execute(statement, params)
        for (sql,) in triggers:
            conn.execute(sql)


def _rechain(path: Path, seq: int, payload: str) -> None:
    """Store ``payload`` at ``seq`` and recompute every hash from there on: a chain that
    is valid on its own, around a payload evalledger never wrote."""
    with closing(_raw(path)) as conn:
        rows = conn.execute(
            "SELECT event_id, run_id, task_key, type, ts, payload FROM events WHERE seq >= ? "
            "ORDER BY seq", [seq]).fetchall()
        prev = text_hash(
            conn.execute("SELECT hash FROM events WHERE seq = ?", [seq - 1]).fetchone()[0])
    edited = [EventRow(text_id(r[0]), *r[1:5], payload if i == 0 else r[5])
              for i, r in enumerate(rows)]
    statements = [f"UPDATE events SET payload = {_quote(p)}, hash = x'{h.hex()}' WHERE seq = {s}"
                  for s, *_, p, h in chain_rows(prev, seq, edited)]
    _edit_behind_triggers(path, *statements)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _problems(out: Outcome) -> list[str]:
    """The lines after the verdict."""
    return out.stdout.splitlines()[1:]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("column", ["run_id", "event_id", "task_key", "type", "ts", "hash"])
def test_an_envelope_column_stored_as_a_blob_is_one_line_not_a_traceback(
    invoke: Invoke, ledger_file: Path, column: str,
) -> None:
    with Ledger(ledger_file, read_only=True) as ledger:
        [row] = ledger.rows(after_seq=OUTPUT_SEQ - 1, until_seq=OUTPUT_SEQ)
    text = getattr(row, column)
    _edit_behind_triggers(ledger_file, f"UPDATE events SET {column} = ? WHERE seq = ?",
                          params=[text.encode(), OUTPUT_SEQ])

    out = _verify(invoke, ledger_file)

    _assert_no_traceback(out)
    assert out.exit_code == 1, out
    assert out.stdout.startswith("FAILED: ")
    # The bytes are the text that was hashed: the chain holds, the storage class is all.
    said = {"event_id": "event_id is stored as a BLOB of 36 bytes: evalledger stores an id "
                        "as text, or a UUID as its 16 bytes",
            "hash": "hash is stored as a BLOB of 64 bytes: evalledger stores its 32"}
    assert _problems(out) == [f"seq {OUTPUT_SEQ}: " + said.get(
        column, f"{column} is stored as BLOB, not TEXT: evalledger stores text")]


def test_analyze_is_not_tampering(invoke: Invoke, ledger_file: Path) -> None:
    with closing(_raw(ledger_file)) as conn:
        conn.execute("ANALYZE")
        conn.execute("PRAGMA optimize")
        assert conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone()[0]

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 0, out
    assert len(out.stdout.splitlines()) == 1, out.stdout


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(
    "rewrite",
    [lambda obj: json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False),
     lambda obj: json.dumps(dict(reversed(obj.items())), separators=(",", ":"),
                            ensure_ascii=False),
     lambda obj: _canonical(obj)[:-1] + "," + _canonical(dict([max(obj.items())]))[1:]],
    ids=["indented", "keys-unsorted", "duplicate-key"],
)
@pytest.mark.parametrize("seq", [OUTPUT_SEQ, 5], ids=["task.output", "task.completed"])
@pytest.mark.parametrize("deep", [False, True], ids=["plain", "deep"])
def test_a_rechained_non_canonical_payload_is_caught(
    invoke: Invoke, ledger_file: Path, rewrite: Callable[[dict], str], seq: int, deep: bool,
) -> None:
    payload = rewrite(_payload(ledger_file, seq))
    _rechain(ledger_file, seq, payload)
    with Ledger(ledger_file, read_only=True) as ledger:  # still a valid event
        assert [e.seq for e in ledger.events()] == list(LAYOUT)

    out = invoke("--ledger", str(ledger_file), "verify", *(["--deep"] if deep else []))

    _assert_no_traceback(out)
    assert out.exit_code == 1, out
    assert [p for p in _problems(out) if not p.startswith("deep: ")] == [
        f"seq {seq}: payload is not canonical JSON (keys sorted, no spaces): evalledger did "
        "not write it so"]


def test_a_task_output_spelling_out_its_defaults_is_canonical(
    invoke: Invoke, ledger_file: Path,
) -> None:
    """Older ledgers wrote ``"stream":"stdout"`` on every output line: still canonical."""
    _rechain(ledger_file, OUTPUT_SEQ, '{"line":"hello","n":1,"stream":"stdout",'
                                      '"truncated":false}')
    out = _verify(invoke, ledger_file)
    assert out.exit_code == 0, out


def _ledger_with_snapshots(path: Path) -> dict[str, int]:
    """A finished run recorded in this ledger (its run.started names it), with its
    snapshots; seq -> type of its facts."""
    from evalledger.app._repository import write_snapshot

    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id="run-1", planned=["t1"], ledger_id=ledger.ledger_id)])
        ledger.append([
            TaskStarted(run_id="run-1", task_key="t1", task_id="t1"),
            TaskOutput(run_id="run-1", task_key="t1", line="hello", n=1),
            TaskCompleted(run_id="run-1", task_key="t1", category=Category.SUCCEEDED,
                          final_status=FinalStatus.SUCCESS, exit_code=0),
            RunFinished(run_id="run-1", status=RunStatus.COMPLETED),
        ])
        assert write_snapshot(ledger, "run-1")
        return {r.seq or 0: r.type for r in ledger.rows() if r.type != "run.snapshot"}


@pytest.mark.parametrize("deep", [False, True], ids=["plain", "deep"])
def test_an_invalid_payload_under_snapshots_exits_1(
    invoke: Invoke, db_path: Path, deep: bool,
) -> None:
    layout = _ledger_with_snapshots(db_path)
    [completed] = [s for s, t in layout.items() if t == "task.completed"]
    _rechain(db_path, completed, '{"category":"succeeded","final_status":"NO SUCH STATUS"}')

    out = invoke("--ledger", str(db_path), "verify", *(["--deep"] if deep else []))

    _assert_no_traceback(out)
    assert out.exit_code == 1, out
    assert out.stderr == ""
    assert re.search(rf"^seq {completed}: payload does not validate: ", out.stdout, re.MULTILINE)
    assert "snapshot: run run-1: its snapshots were not checked: " in out.stdout


# -- meta.created_at --------------------------------------------------------------------------


def _set_created_at(path: Path, value: str) -> None:
    with closing(_raw(path)) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'created_at'", [value])


def _first_started_ts(path: Path) -> datetime:
    with closing(_raw(path)) as conn:
        ts = conn.execute("SELECT ts FROM events WHERE type = 'run.started' ORDER BY seq"
                          ).fetchone()[0]
    return datetime.fromisoformat(ts)


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("value", ["not a time", "2026-13-45T00:00:00.000000Z",
                                   "2026-11-29T21:35:12", "2026-11-29T21:35:12+02:00", ""])
def test_a_garbage_created_at_is_reported(invoke: Invoke, ledger_file: Path, value: str) -> None:
    _set_created_at(ledger_file, value)
    out = _verify(invoke, ledger_file)
    assert out.exit_code == 1, out
    assert _problems(out) == [f"schema: meta.created_at {value!r} is not an ISO-8601 UTC time"]


def test_a_created_at_after_the_first_run_recorded_here_is_reported(
    invoke: Invoke, db_path: Path,
) -> None:
    _ledger_with_snapshots(db_path)
    began = _first_started_ts(db_path)
    # Later than the run it holds, yet within a minute of the ledger's first migration.
    later = _utc_text(began + timedelta(seconds=30))
    _set_created_at(db_path, later)

    out = _verify(invoke, db_path)

    assert out.exit_code == 1, out
    [line] = _problems(out)
    assert line.startswith(f"schema: meta.created_at is {later}, after the first run recorded "
                           "here began (seq 1, "), line


def test_a_back_dated_created_at_is_reported(invoke: Invoke, db_path: Path) -> None:
    _ledger_with_snapshots(db_path)
    _set_created_at(db_path, "2001-01-01T00:00:00.000000Z")

    out = _verify(invoke, db_path)

    assert out.exit_code == 1, out
    [line] = _problems(out)
    assert line.startswith("schema: meta.created_at is 2001-01-01T00:00:00.000000Z, but the "
                           "ledger's first migration was recorded at "), line


@pytest.mark.parametrize("when", ["back-dated", "after the first run"])
def test_a_changed_created_at_is_reported_by_verify_since_last_too(
    invoke: Invoke, db_path: Path, when: str,
) -> None:
    """`verify --since last` walks only what came after the anchor: a created_at moved
    since the last check passed it (meta is in no anchored prefix)."""
    _ledger_with_snapshots(db_path)
    assert _verify(invoke, db_path).exit_code == 0
    value = ("2001-01-01T00:00:00.000000Z" if when == "back-dated"
             else _utc_text(_first_started_ts(db_path) + timedelta(seconds=30)))
    _set_created_at(db_path, value)

    out = invoke("--ledger", str(db_path), "verify", "--since", "last")

    assert out.exit_code == 1, out
    [line] = _problems(out)
    assert line.startswith(f"schema: meta.created_at is {value}, "), line


def test_runs_merged_from_an_older_ledger_are_older_than_it_and_fine(
    invoke: Invoke, tmp_path: Path,
) -> None:
    older, newer = tmp_path / "older.db", tmp_path / "newer.db"
    _ledger_with_snapshots(older)
    with Ledger(newer) as ledger:  # made after every event of `older`
        assert datetime.fromisoformat(ledger.db["meta"].get("created_at")["value"]) > (
            _first_started_ts(older))
        ledger.append([RunStarted(run_id="here", ledger_id=ledger.ledger_id)])

    merged = invoke("--ledger", str(newer), "merge", str(older))
    assert merged.exit_code == 0, merged

    out = _verify(invoke, newer)
    assert out.exit_code == 0, out


# -- checkpoint -o ----------------------------------------------------------------------------


def _checkpoint_on_a_full_disk(ledger_file: Path, output: Path) -> subprocess.CompletedProcess:
    """``evalledger checkpoint -o OUTPUT`` in a process that cannot write more than 64 bytes
    into any file (RLIMIT_FSIZE: a write past it fails with EFBIG, as on a full disk)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    # The ledger held open here, so its -shm is there already: the limit bites only on
    # the checkpoint.
    with Ledger(ledger_file, read_only=True):
        return subprocess.run(
            [sys.executable, "-m", "evalledger.cli", "--ledger", str(ledger_file),
             "checkpoint", "-o", str(output)],
            cwd=output.parent, env={**_clean_env(), "PYTHONDONTWRITEBYTECODE": "1"},
            preexec_fn=limit, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "over-a-checkpoint"])
def test_checkpoint_writes_whole_or_not_at_all(
    ledger_file: Path, tmp_path: Path, existing: bool,
) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    output = folder / "today.json"
    before = '{"ledger_id": "an older checkpoint, kept whole"}\n'
    if existing:
        output.write_text(before)

    done = _checkpoint_on_a_full_disk(ledger_file, output)

    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"Error: {output}: "), line
    assert [p.name for p in folder.iterdir()] == (["today.json"] if existing else [])
    if existing:
        assert output.read_text() == before


def test_checkpoint_refuses_to_write_over_the_ledger(invoke: Invoke, ledger_file: Path) -> None:
    content = ledger_file.read_bytes()
    out = invoke("--ledger", str(ledger_file), "checkpoint", "-o", str(ledger_file))
    assert out.exit_code == 2, out
    assert "is the ledger itself" in out.stderr
    assert ledger_file.read_bytes() == content


# -- since: what is new since the last check that found the ledger intact ---------------------


def _append_run(path: Path, run: str) -> None:
    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id=run, planned=["t1"], ledger_id=ledger.ledger_id),
                       TaskStarted(run_id=run, task_key="t1", task_id="t1"),
                       TaskOutput(run_id=run, task_key="t1", line="again", n=1)])


def test_since_last_reads_only_what_came_after_the_last_intact_check(
        invoke: Invoke, ledger_file: Path) -> None:
    first = _verify(invoke, ledger_file)
    assert first.exit_code == 0, first
    _append_run(ledger_file, "run-2")

    out = invoke("--ledger", str(ledger_file), "verify", "--since", "last")

    assert out.exit_code == 0, out
    assert out.stdout.startswith(f"OK: {ledger_file}: 3 events after seq 6 (verified up to "
                                 "there at "), out.stdout
    assert out.stdout.rstrip().endswith(f"last hash {_last_hash(ledger_file)}")
    # The check went on from the anchor: the next one starts where it ended.
    again = invoke("--ledger", str(ledger_file), "verify", "--since", "last")
    assert " 0 events after seq 9 " in again.stdout, again


def test_since_last_sees_an_edit_after_the_anchor_and_a_rewrite_before_it(
        invoke: Invoke, ledger_file: Path) -> None:
    assert _verify(invoke, ledger_file).exit_code == 0
    _append_run(ledger_file, "run-2")
    _tamper(ledger_file, "UPDATE events SET ts = '2026-01-01T00:00:00Z' WHERE seq = 8",
            drop="events_no_update")

    out = invoke("--ledger", str(ledger_file), "verify", "--since", "last")

    assert out.exit_code == 1, out
    assert "hash chain broken at seq 8: the row was changed after it was written" in out.stdout
    # Rewriting the verified prefix, its hashes and all, shows at the anchor.
    _tamper(ledger_file, "UPDATE events SET hash = ? WHERE seq = 6", ["f" * 64])
    out = invoke("--ledger", str(ledger_file), "verify", "--since", "last")
    assert out.exit_code == 1, out
    assert f"hash {'f' * 64} where the anchor has" in out.stdout, out.stdout


def test_a_failed_check_records_nothing(invoke: Invoke, ledger_file: Path) -> None:
    _tamper(ledger_file, "UPDATE events SET ts = 'x' WHERE seq = 2", drop="events_no_update")
    assert _verify(invoke, ledger_file).exit_code == 1
    out = invoke("--ledger", str(ledger_file), "verify", "--since", "last")
    assert out.exit_code == 2, out
    assert out.stderr.strip() == (f"Error: {ledger_file} has no record of an earlier check that "
                                  "found it intact: run `evalledger verify` once"), out.stderr


def test_since_a_checkpoint_file(invoke: Invoke, ledger_file: Path, tmp_path: Path) -> None:
    assert invoke("--ledger", str(ledger_file), "checkpoint", "-o",
                  str(tmp_path / "cp.json")).exit_code == 0
    _append_run(ledger_file, "run-2")
    out = invoke("--ledger", str(ledger_file), "verify", "--since", str(tmp_path / "cp.json"))
    assert out.exit_code == 0, out
    assert ": 3 events after seq 6 " in out.stdout, out.stdout


def test_a_tail_cut_after_an_intact_check_fails_the_next_full_verify(
        invoke: Invoke, ledger_file: Path) -> None:
    """Without an anchor of your own, a cut tail is a valid chain: the record of the last
    check that found the ledger intact is one (kept outside the ledger)."""
    assert _verify(invoke, ledger_file).exit_code == 0
    with closing(_raw(ledger_file)) as conn:
        trigger = conn.execute("SELECT sql FROM sqlite_master "
                               "WHERE name = 'events_no_delete'").fetchone()[0]
        conn.execute("DROP TRIGGER events_no_delete")
        conn.execute("DELETE FROM events WHERE seq >= 5")
        conn.execute(trigger)

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    assert "anchor: seq 6 (" in out.stdout and "the ledger ends at seq 4: its tail was cut" in (
        out.stdout), out.stdout


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("seq", [2**70, 2**63, -1])
@pytest.mark.parametrize("option", ["--anchor", "--since"])
def test_an_anchor_whose_seq_no_ledger_can_hold_is_one_line_not_a_traceback(
    invoke: Invoke, ledger_file: Path, tmp_path: Path, seq: int, option: str
) -> None:
    with Ledger(ledger_file, read_only=True) as ledger:
        anchor = ledger.anchor()
    assert anchor is not None
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**anchor.model_dump(), "seq": seq}))

    out = invoke("--ledger", str(ledger_file), "verify", option, str(forged))

    assert out.exit_code == 2, out
    _assert_no_traceback(out)
    [line] = out.stderr.splitlines()
    assert line.startswith(f"Error: {forged}: not an anchor") and "seq" in line


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("column", ["payload", "run_id", "ts"])
def test_text_that_is_not_utf8_is_named_by_its_row_and_the_walk_goes_on(
    invoke: Invoke, ledger_file: Path, column: str
) -> None:
    _tamper(ledger_file, f"UPDATE events SET {column} = CAST(x'7b22ff227d' AS TEXT) "
                         "WHERE seq = 3", drop="events_no_update")

    out = _verify(invoke, ledger_file)

    assert out.exit_code == 1, out
    _assert_no_traceback(out)
    assert f"seq 3: payload does not validate: {column} is not UTF-8 text" in out.stdout
    assert "hash chain broken at seq 3" in out.stdout
    assert "hash chain broken at seq 4" not in out.stdout  # the rows after it: intact
