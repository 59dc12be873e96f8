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
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
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
        return conn.execute("SELECT hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()[0]


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
