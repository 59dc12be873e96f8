"""Reading and running commands fed bad or unusual input.

The product rule: bad input is one ``Error:`` line on stderr and exit code 2, never
a traceback, and nothing already in the ledger is lost or changed. Scenarios run
in-process through click's CliRunner (fast; an unexpected exception is turned
into a traceback on stderr so the one-line check catches it); those that need a
real process (a read-only mount, a closed pipe, a parent shell) start one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import pytest

import evalledger as evalledger_package
from evalledger.ledger import (
    Ledger,
    OpaqueEvent,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.statuses import FinalStatus, RunStatus

from ..needs import root, unavailable
from .helpers import (
    COMMAND,
    PATIENCE,
    Result,
    _env,
    assert_one_line_error,
    edited_by_hand,
    evalledger,
    no_hang,
    write_task,
)


def invoke(db: Path, *args: str) -> Result:
    """``evalledger --ledger DB ARGS`` in-process; an escaped exception shows as a traceback."""
    return evalledger(Path.cwd(), db, *args)


def record(ledger: Ledger, run_id: str, keys: dict[str, FinalStatus], *,
           finished: bool = True, host: dict | None = None) -> None:
    events: list = [RunStarted(run_id=run_id, planned=list(keys), host=host or {})]
    for key, status in keys.items():
        events += [
            TaskStarted(run_id=run_id, task_key=key, task_id=key.split("/")[1]),
            TaskOutput(run_id=run_id, task_key=key, line=f"working on {key}", n=1),
            TaskCompleted(run_id=run_id, task_key=key, final_status=status,
                          category=status.category, duration_seconds=1.0,
                          weighted_score=1.0 if status == "SUCCESS" else 0.0),
        ]
    if finished:
        events.append(RunFinished(run_id=run_id, status=RunStatus.COMPLETED))
    ledger.append(events)


@pytest.fixture
def one_run(tmp_path: Path) -> Path:
    db = tmp_path / "one.db"
    with Ledger(db) as ledger:
        record(ledger, "only-run", {"default/a/00": FinalStatus.SUCCESS,
                                    "default/b/00": FinalStatus.FAILURE})
    return db


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    db = tmp_path / "two.db"
    with Ledger(db) as ledger:
        record(ledger, "run-1", {"default/a/00": FinalStatus.SUCCESS})
        record(ledger, "run-2", {"default/b/00": FinalStatus.FAILURE})
    return db


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


# -- the ledger must survive what the user points at it -----------------------------------------


@pytest.mark.parametrize("spelling", ["same", "other"])
def test_report_output_onto_its_own_ledger_is_refused(
    one_run: Path, tmp_path: Path, spelling: str
) -> None:
    """`report -o LEDGER` overwrote the ledger with Markdown (exit 0): every event lost."""
    before = one_run.read_bytes()
    target = one_run if spelling == "same" else tmp_path / ".." / tmp_path.name / one_run.name
    result = evalledger(tmp_path, one_run, "report", "latest", "-o", str(target))
    assert_one_line_error(result)
    assert one_run.read_bytes() == before
    assert invoke(one_run, "verify").returncode == 0


def test_resume_without_a_ledger_file_creates_none(tmp_path: Path) -> None:
    """`resume` opened the ledger read-write, so a mistyped --ledger created a new one."""
    db = tmp_path / "typo.db"
    result = invoke(db, "resume", "latest")
    assert_one_line_error(result)
    assert not db.exists(), "resume of nothing created a ledger file"


@pytest.mark.parametrize("command", ["resume", "run"])
def test_a_one_byte_file_is_not_turned_into_a_ledger(tmp_path: Path, command: str) -> None:
    """SQLite takes a 1-byte file (`echo > notes`) as empty: it was rewritten into a ledger."""
    notes = tmp_path / "notes"
    notes.write_bytes(b"\n")
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    args = ["resume", "latest"] if command == "resume" else ["run", str(tmp_path / "tasks")]
    result = evalledger(tmp_path, notes, *args)
    assert_one_line_error(result)
    assert notes.read_bytes() == b"\n"


def test_verify_notices_a_corrupt_index(tmp_path: Path) -> None:
    """An index page overwritten on disk: verify said OK (exit 0) while `runs` could not
    read the file ("database disk image is malformed")."""
    db = tmp_path / "c.db"
    with Ledger(db) as ledger:
        for i in range(3):
            record(ledger, f"r{i}", {f"default/t{j}/00": FinalStatus.SUCCESS for j in range(30)})
    with closing(sqlite3.connect(db)) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'events_by_run_type'"
        ).fetchone()[0]
    with db.open("r+b") as f:
        f.seek((root - 1) * page_size + 8)
        f.write(random.Random(7).randbytes(page_size - 16))
    damaged = invoke(db, "sql", "SELECT count(*) FROM events INDEXED BY events_by_run_type "
                     "WHERE run_id = 'r1' AND type = 'task.started'")
    assert damaged.returncode == 2, damaged  # the file really is damaged
    result = invoke(db, "verify")
    assert "Traceback" not in result.stderr
    assert result.returncode == 1, result  # readable enough to check: damage found
    assert result.stdout.startswith("FAILED: "), result.stdout


# -- naming runs --------------------------------------------------------------------------------


def test_an_empty_run_name_is_an_error(one_run: Path) -> None:
    """`show ""` matched every run as a prefix, so with one run it silently showed it."""
    assert_one_line_error(invoke(one_run, "show", ""))


def test_run_id_latest_is_refused(tmp_path: Path) -> None:
    """`--run-id latest` was accepted: `show latest` then means another run."""
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    db = tmp_path / "l.db"
    assert_one_line_error(evalledger(tmp_path, db, "run", str(tmp_path / "tasks"),
                                     "--run-id", "latest"))


# -- runs, events -------------------------------------------------------------------------------


def test_runs_limit_beyond_sqlite_integers_is_not_a_traceback(one_run: Path) -> None:
    """OverflowError: Python int too large to convert to SQLite INTEGER."""
    result = invoke(one_run, "runs", "--limit", str(10**20))
    # Refused as out of range, before SQLite sees it.
    assert "--limit" in assert_one_line_error(result)


def test_events_empty_task_filter_is_not_dropped(one_run: Path) -> None:
    """`--task ""` is honoured without --type (nothing) but ignored with a lifecycle --type
    (every task's events came out)."""
    plain = invoke(one_run, "events", "latest", "--task", "")
    typed = invoke(one_run, "events", "latest", "--task", "", "--type", "task.completed")
    assert (plain.returncode, plain.stdout) == (typed.returncode, typed.stdout)
    assert "default/a/00" not in typed.stdout


def test_events_type_that_nothing_has_is_an_error(one_run: Path) -> None:
    """A mistyped type (`task.complete`) printed nothing and exited 0."""
    error = assert_one_line_error(invoke(one_run, "events", "latest", "--type", "task.complete"))
    assert "task.complete" in error


def test_events_unknown_types_stored_in_the_ledger_are_printed(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    with Ledger(db) as ledger:
        record(ledger, "r", {"default/a/00": FinalStatus.SUCCESS}, finished=False)
        ledger.append([
            OpaqueEvent(run_id="r", task_key=None, type="run.future", payload={"x": 1}),
            OpaqueEvent(run_id="r", task_key="default/a/00", type="task.future", payload={}),
            RunFinished(run_id="r", status=RunStatus.COMPLETED),
        ])
    result = invoke(db, "events", "r", "--type", "run.future", "--type", "task.output",
                    "--type", "task.future")
    assert result.returncode == 0, result
    assert [line.split('"type":"')[1].split('"')[0] for line in result.stdout.splitlines()] == [
        "task.output", "run.future", "task.future"
    ]
    assert invoke(db, "show", "r").returncode == 0
    assert invoke(db, "verify").returncode == 0


def test_events_follow_negative_interval_is_a_usage_error(tmp_path: Path) -> None:
    """ValueError: sleep length must be non-negative (a traceback)."""
    db = tmp_path / "f.db"
    with Ledger(db) as ledger:
        record(ledger, "open", {}, finished=False,
               host={"hostname": socket.gethostname(), "pid": _dead_pid()})
    with no_hang():
        result = evalledger(tmp_path, db, "events", "open", "--follow", "--interval", "-1")
    assert_one_line_error(result)


def test_events_follow_ends_when_the_runs_process_is_gone(tmp_path: Path) -> None:
    """A run cut off by a crash never records run.finished: --follow waited forever, though
    `resume` already knows (by pid, on this host) that nobody is writing it."""
    db = tmp_path / "f.db"
    with Ledger(db) as ledger:
        record(ledger, "crashed", {"default/a/00": FinalStatus.SUCCESS}, finished=False,
               host={"hostname": socket.gethostname(), "pid": _dead_pid()})
    with no_hang():
        result = evalledger(tmp_path, db, "events", "crashed", "--follow")
    assert "Hung" not in result.stderr, "events --follow of a crashed run never returned"
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr
    assert len(result.out_lines) == 4


# -- sql -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("statement", [
    "ATTACH DATABASE '{new}' AS other",
    "VACUUM INTO '{new}'",
])
def test_sql_creates_no_files(one_run: Path, tmp_path: Path, statement: str) -> None:
    """The read-only `sql` made new files: ATTACH exited 0 leaving an empty file, and the
    refused VACUUM INTO left one too."""
    new = tmp_path / "made-by-sql.db"
    before = one_run.read_bytes()
    result = invoke(one_run, "sql", statement.format(new=new))
    assert_one_line_error(result)
    assert not new.exists()
    assert one_run.read_bytes() == before


@pytest.mark.parametrize("statement", [
    "SELECT 1; SELECT 2",
    "SELECT 1; DELETE FROM events",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA user_version = 7",
    "SELECT ?",
    "SELECT * FROM no_such_table",
])
def test_sql_odd_statements_are_one_line_errors(one_run: Path, statement: str) -> None:
    before = one_run.read_bytes()
    assert_one_line_error(invoke(one_run, "sql", statement))
    assert one_run.read_bytes() == before
    assert invoke(one_run, "verify").returncode == 0


def test_sql_pragma_query_only_off_does_not_unlock_writes(one_run: Path) -> None:
    assert invoke(one_run, "sql", "PRAGMA query_only = 0").returncode == 0
    assert_one_line_error(invoke(one_run, "sql", "DELETE FROM events"))
    with Ledger(one_run, read_only=True) as ledger:
        assert ledger.count() == 8


# -- ledgers that are not ledgers ---------------------------------------------------------------


def _zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def _random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(1).randbytes(8192))


def _truncated(path: Path) -> None:
    whole = path.with_suffix(".whole")
    with Ledger(whole) as ledger:
        record(ledger, "r", {"default/a/00": FinalStatus.SUCCESS})
    path.write_bytes(whole.read_bytes()[: 3 * 4096 + 100])


READERS = [
    ("runs",), ("show", "latest"), ("events", "latest"), ("report", "latest"),
    ("diff", "latest", "latest"), ("sql", "SELECT count(*) FROM events"), ("verify",),
]


@pytest.mark.parametrize("make", [_zero_bytes, _random_bytes, _truncated],
                         ids=["zero-bytes", "random-bytes", "truncated"])
def test_reading_a_damaged_file_is_one_line_and_leaves_it_alone(
    tmp_path: Path, make: object
) -> None:
    db = tmp_path / "bad.db"
    make(db)  # type: ignore[operator]
    before = db.read_bytes()
    for args in READERS:
        error = assert_one_line_error(invoke(db, *args))
        assert str(db) in error, (args, error)
    assert db.read_bytes() == before


@pytest.mark.parametrize(("payload", "text"), [("not json", "json"), ("[1]", "1"), ("5", "5")])
def test_a_transcript_line_written_by_hand_is_one_line_in_scan_and_search(
    one_run: Path, payload: str, text: str,
) -> None:
    # The transcript regrade's output_contains reads too (attempt_lines), and a search
    # that finds its text in it: a traceback.
    edited_by_hand(one_run, "UPDATE events SET payload = ? WHERE type = 'task.output'",
                   payload)
    before = one_run.read_bytes()
    for args in [("scan", "latest"), ("search", text)]:
        error = assert_one_line_error(invoke(one_run, *args))
        assert "(task.output) does not validate" in error, args
    assert one_run.read_bytes() == before


def test_an_event_id_written_by_hand_as_no_id_is_one_line_in_events_and_export(
    one_run: Path, tmp_path: Path,
) -> None:
    # A BLOB of another size than an id's: `events` and `export` put its bytes in JSON,
    # a traceback (TypeError: Object of type bytes is not JSON serializable).
    edited_by_hand(one_run, "UPDATE events SET event_id = x'00' WHERE seq = 2")
    before = one_run.read_bytes()
    for args in [("events", "latest"), ("export", "latest", "-o", str(tmp_path / "e.jsonl"))]:
        error = assert_one_line_error(invoke(one_run, *args))
        assert error == ("Error: event seq 2 does not validate: event_id is stored as a "
                         "BLOB of 1 bytes: evalledger stores an id as text, or a UUID as its "
                         "16 bytes; run `evalledger verify`"), args
    assert one_run.read_bytes() == before


def test_a_last_seq_written_by_hand_at_sqlites_limit_is_one_line_to_a_writer(
    one_run: Path, tmp_path: Path,
) -> None:
    # The next seq past 2**63 - 1: OverflowError, a traceback out of `run` and `merge`.
    edited_by_hand(one_run, "UPDATE events SET seq = 9223372036854775807 WHERE seq = "
                            "(SELECT max(seq) FROM events)")
    before = one_run.read_bytes()
    tasks = tmp_path / "tasks"
    write_task(tasks / "t.yaml", "echo hi")
    error = assert_one_line_error(invoke(one_run, "run", str(tasks), "--run-id", "next"))
    assert error.endswith(": its last seq, 9223372036854775807, leaves no room for 2 "
                          "event(s) more (SQLite counts to 9223372036854775807); run "
                          "`evalledger verify`"), error
    assert one_run.read_bytes() == before


@pytest.mark.parametrize("kind", ["FIFO", "device"])
def test_a_ledger_path_that_is_no_regular_file_is_said_so(
    one_run: Path, tmp_path: Path, kind: str
) -> None:
    # `--ledger /dev/null`: readers said "no ledger at /dev/null", writers "disk I/O
    # error", and left /dev/null-journal behind (as root); a FIFO the same.
    folder = tmp_path / "here"
    folder.mkdir()
    path = folder / "l.db"
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to(os.devnull)
    for args in [("runs",), ("show", "latest"), ("merge", str(one_run))]:
        error = assert_one_line_error(invoke(path, *args))
        assert error == f"Error: {path} is a {kind}, not a ledger file", args
    assert [p.name for p in folder.iterdir()] == ["l.db"]


def test_reading_commands_on_an_empty_ledger(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    Ledger(db).close()
    assert invoke(db, "runs", "--json").stdout == ""
    assert invoke(db, "runs").returncode == 0
    for args in READERS[1:5]:
        assert "no runs in" in assert_one_line_error(invoke(db, *args))
    assert invoke(db, "sql", "SELECT count(*) FROM task_results").stdout.split() == ["count(*)",
                                                                                      "0"]
    assert invoke(db, "verify").returncode == 0


# -- diff, report ------------------------------------------------------------------------------


def test_diff_of_a_run_with_itself_and_of_disjoint_runs(two_runs: Path) -> None:
    same = invoke(two_runs, "diff", "run-1", "run-1", "--json")
    assert same.returncode == 0, same
    assert '"unchanged": 1' in same.stdout
    apart = invoke(two_runs, "diff", "run-1", "run-2")
    assert apart.returncode == 0, apart  # no regression: nothing to fail on
    assert ("0 regression, 0 fix, 0 changed, 0 not run, 1 added, 1 removed, 0 unchanged"
            in apart.stdout)


def test_report_into_a_missing_folder_is_one_line(one_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "run.md"
    assert "run.md" in assert_one_line_error(invoke(one_run, "report", "latest", "-o",
                                                    str(target)))
    assert not (tmp_path / "no").exists()


# -- run and resume: what they leave behind when they refuse ------------------------------------


def test_run_that_cannot_open_its_ledger_leaves_no_report_folder(tmp_path: Path) -> None:
    """`runs/<run_id>/` was made before the ledger was opened: each refused run left one."""
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    (tmp_path / "a-dir.db").mkdir()
    result = evalledger(tmp_path, tmp_path / "a-dir.db", "run", str(tmp_path / "tasks"))
    assert "directory" in assert_one_line_error(result)
    assert not any((tmp_path / "runs").glob("*")), list((tmp_path / "runs").glob("*"))


def test_run_on_an_immutable_ledger_names_no_run(tmp_path: Path) -> None:
    """Root ignores chmod, so the file is made immutable: `run` printed a run id on stdout
    (for a run that was never recorded) before failing, and left its report folder."""
    if shutil.which("chattr") is None:
        unavailable("ROOT", "no chattr here (e2fsprogs)")
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        record(ledger, "earlier", {"default/a/00": FinalStatus.SUCCESS})
    before = db.read_bytes()
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        unavailable("ROOT", "chattr +i is refused here (it needs root)")
    try:
        result = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"))
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert "read-only" in assert_one_line_error(result)
    assert result.stdout == ""
    assert not (tmp_path / "runs").exists()  # not even an empty --out folder
    assert db.read_bytes() == before


def test_resume_of_an_unknown_run(one_run: Path) -> None:
    before = one_run.read_bytes()
    assert "no run 'nope'" in assert_one_line_error(invoke(one_run, "resume", "nope"))
    assert one_run.read_bytes() == before


def test_read_commands_work_on_a_ledger_in_a_read_only_folder(tmp_path: Path) -> None:
    """A WAL ledger in a read-only folder (an archive, a read-only mount) could not be read
    at all: every reading command said "cannot open ...: unable to open database file",
    because SQLite wants to create the -shm file beside it."""
    folder = tmp_path / "archive"
    folder.mkdir()
    db = folder / "l.db"
    with Ledger(db) as ledger:
        record(ledger, "r", {"default/a/00": FinalStatus.SUCCESS})
    assert sorted(p.name for p in folder.iterdir()) == ["l.db"]
    if shutil.which("unshare") is None or subprocess.run(
        ["unshare", "-m", "true"], capture_output=True
    ).returncode != 0:
        unavailable("ROOT", "cannot make a read-only mount here (it needs root and unshare)")
    # One process (a mount namespace needs one) runs every command in-process.
    script = 'mount --bind -o ro "$1" "$1" || exit 99; shift; exec "$@"'
    commands = [["verify"], ["runs", "--json"], ["show", "r"]]
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(folder), sys.executable, "-c",
         READ_ONLY_READER, str(db), json.dumps(commands)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=PATIENCE,
    )
    if done.returncode == 99:
        unavailable("ROOT", "cannot make a read-only mount here (it needs root)")
    assert done.returncode == 0, done.stderr
    outcomes = json.loads(done.stdout)
    assert [o["args"] for o in outcomes] == commands
    for outcome in outcomes:
        assert outcome["exit_code"] == 0, outcome


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("wal", [None, b""], ids=["no -wal", "an empty -wal"])
def test_an_archive_no_one_may_write_is_read_by_a_user_who_does_not_own_it(
    wal: bytes | None,
) -> None:
    """A ledger in a folder and a file without write bits, read by another user (not
    root, whom no mode bit stops): every command said "read-only here: attempt to write
    a readonly database" (SQLite could make no -shm file), and read nothing. Copied with
    its empty -wal (``cp l.db*`` of a ledger at rest), "unable to open database file"."""
    root("becoming the user nobody")
    if shutil.which("setpriv") is None:
        unavailable("UNPRIVILEGED", "setpriv (util-linux) is needed to become another user")
    # Right under /tmp, as the isolation tests do: pytest keeps its folders to their owner.
    folder = Path(tempfile.mkdtemp(prefix="evalledger-archive-", dir="/tmp"))
    try:
        shutil.copytree(Path(evalledger_package.__file__).parent, folder / "lib" / "evalledger")
        archive = folder / "archive"
        archive.mkdir()
        db = archive / "l.db"
        with Ledger(db) as ledger:
            record(ledger, "r", {"default/a/00": FinalStatus.SUCCESS})
        if wal is not None:
            Path(f"{db}-wal").write_bytes(wal)
        db.chmod(0o444)
        for path in (archive, folder, folder / "lib"):
            path.chmod(0o555)
        env = {"PATH": os.environ["PATH"], "HOME": str(folder), "LANG": "C.UTF-8",
               "PYTHONPATH": str(folder / "lib")}
        become = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        done = subprocess.run(
            [*become, sys.executable, "-c", READ_ONLY_READER, str(db),
             json.dumps([["verify"], ["runs", "--json"], ["show", "r"]])],
            cwd=folder, env=env, capture_output=True, text=True, timeout=PATIENCE)
        if done.returncode and "ModuleNotFoundError" in done.stderr + done.stdout:
            unavailable("UNPRIVILEGED", f"nobody cannot run this Python ({sys.executable})")
        assert done.returncode == 0, done.stderr
        for outcome in json.loads(done.stdout):
            assert outcome["exit_code"] == 0, outcome
    finally:
        for path in (folder, folder / "lib", folder / "archive"):
            with contextlib.suppress(OSError):
                path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)


# ``evalledger --ledger DB ARGS`` for each ARGS of a JSON list, in-process; the outcomes
# as JSON on stdout.
READ_ONLY_READER = """\
import json, sys
from click.testing import CliRunner
from evalledger.cli import cli
db, commands = sys.argv[1], json.loads(sys.argv[2])
outcomes = []
for args in commands:
    result = CliRunner().invoke(cli, ["--ledger", db, *args])
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    outcomes.append({"args": args, "exit_code": result.exit_code, "stderr": result.stderr,
                     "exception": repr(escaped) if escaped else None})
print(json.dumps(outcomes))
"""


def test_task_files_with_unusual_names(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    write_task(tasks / "ok.yaml", "echo ok")
    for name in ("with space.yaml", "Upper.yaml", "ünï.yaml", "-dash.yaml"):
        write_task(tasks / name, "echo ok")
    (tasks / "notes.txt").write_text("not a task\n")
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", str(tasks))
    assert result.returncode == 1, result  # skipped files fail the run (--allow-skipped)
    assert "Traceback" not in result.stderr
    assert "4 task file(s) skipped" in result.stdout
    skipped = [line for line in result.err_lines if line.startswith("skipped ")]
    assert len(skipped) == 4, result.stderr
    assert "default/ok/00" in result.stdout
    assert evalledger(tmp_path, db, "verify").returncode == 0



def test_events_into_a_closed_pipe_exits_quietly(one_run: Path, tmp_path: Path) -> None:
    """`evalledger events ... | head` printed "Error: Broken pipe" and exited 2."""
    with Ledger(one_run) as ledger:
        ledger.append([TaskOutput(run_id="only-run", task_key="default/a/00", line="x" * 100,
                                  n=i + 2) for i in range(5000)])
    done = subprocess.run(
        ["sh", "-c", '"$@" | head -n 1 >/dev/null', "sh", *COMMAND, "--ledger", str(one_run),
         "events", "only-run"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
    )
    assert "Error" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_sql_empty_query_and_csv_blobs(one_run: Path) -> None:
    assert "empty" in assert_one_line_error(invoke(one_run, "sql", "  "))
    result = invoke(one_run, "sql", "SELECT x'00ff' AS b, 1 AS n", "--format", "csv")
    assert result.returncode == 0, result
    assert result.out_lines == ["b,n", "00ff,1"]


def test_repeats_are_capped(tmp_path: Path) -> None:
    """`run --repeats 100000000000000000000` resolved every replicate and ran out of memory."""
    write_task(tmp_path / "tasks" / "t.yaml", "true")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", str(tmp_path / "tasks"),
                        "--repeats", "100000000000000000000")
    assert_one_line_error(result)
    assert "--repeats" in result.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_batch_end_sweep_spares_a_parent_that_exported_the_run_id(tmp_path: Path) -> None:
    """Regression: the end-of-batch sweep killed every process whose environment had
    EVALLEDGER_RUN_ID=<run id>, including the user's shell that had exported it."""
    write_task(tmp_path / "tasks" / "t.yaml", "true")
    env = _env(EVALLEDGER_RUN_ID="k3")
    done = subprocess.run(
        ["sh", "-c", '"$@" >/dev/null 2>&1; echo survived', "sh", *COMMAND, "--ledger",
         str(tmp_path / "l.db"), "run", str(tmp_path / "tasks"), "--run-id", "k3"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.stdout.strip() == "survived", (done.returncode, done.stderr)


def test_sql_json_keeps_columns_with_the_same_name(one_run: Path) -> None:
    result = invoke(one_run, "sql", "SELECT 1 AS a, 2 AS a, 3 AS b", "--format", "json")
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == {"a": 1, "a:2": 2, "b": 3}


def test_a_ledger_in_a_missing_folder_is_said_so_by_a_writing_command(tmp_path: Path) -> None:
    """SQLite says only "unable to open database file"; the folder that is missing is
    what a user has to make (or mistyped)."""
    write_task(tmp_path / "tasks" / "t.yaml", "true")
    db = tmp_path / "no-such-folder" / "l.db"
    said = assert_one_line_error(evalledger(tmp_path, db, "run", str(tmp_path / "tasks")))
    assert f"its folder {db.parent} does not exist" in said
    assert not db.parent.exists()
