"""What a new user hit in an afternoon (issue 11, item 5), and safe text on every surface.

Each test is the repro of one report, run for real: in-process where the CLI is
the point, as a process where a pipe, a terminal or a signal is.
"""

from __future__ import annotations

import errno
import json
import os
import pty
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from evalledger.app._reports import write_text
from evalledger.executor._criteria import _Kept
from evalledger.hosts import host_info
from evalledger.ledger import Ledger, LedgerIOError, RunStarted, TaskStarted, TaskUsage
from evalledger.ledger._store import translate_errors

from .helpers import (
    COMMAND,
    _env,
    assert_one_line_error,
    evalledger,
    write_task,
)
from .terminal import read_terminal

HOSTILE = "red \x1b[31mALERT\x1b[0m \x1b]0;owned\x07 and\nsecond line"


def _hostile_task(folder: Path) -> Path:
    script = folder / "hostile.py"
    script.write_text(f"import sys\nprint({HOSTILE!r})\nprint({HOSTILE!r}, file=sys.stderr)\n"
                      "print('{\"type\": \"step\", \"ok\": true}')\nsys.exit(1)\n",
                      encoding="utf-8")
    return write_task(folder / "tasks" / "hostile.yaml", ["python3", str(script)], criteria=[
        {"type": "exit_code", "equals": 0},
        {"type": "run_command", "command": f"printf {json.dumps(HOSTILE)}; exit 3"}])


def test_escape_sequences_never_reach_the_terminal(tmp_path: Path) -> None:
    """Task output and criterion details held ANSI/OSC sequences; `run` (its task lines
    and --stream), `show`, `sql` and run.md passed them through raw."""
    _hostile_task(tmp_path)
    db = tmp_path / "l.db"
    run = evalledger(tmp_path, db, "run", "tasks", "--run-id", "h", "--stream")
    assert run.returncode == 1
    for shown in (run.stdout, run.stderr,
                  evalledger(tmp_path, db, "show", "h").stdout,
                  evalledger(tmp_path, db, "sql", "SELECT payload FROM events").stdout,
                  evalledger(tmp_path, db, "sql", "SELECT error_message FROM task_results").stdout,
                  (tmp_path / "runs" / "h" / "run.md").read_text(encoding="utf-8")):
        assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b[31mALERT" in run.stdout  # spelled out, not dropped
    # The task's own JSON line is printed as the JSON it was, not a Python dict.
    assert '[default/hostile/00] {"ok": true, "type": "step"}' in run.stdout
    with Ledger(db, read_only=True) as ledger:  # the ledger keeps the raw text
        assert any(HOSTILE.split("\n")[0] == getattr(e, "line", None) for e in ledger.events("h"))


def test_a_multi_line_detail_keeps_one_line_per_task(tmp_path: Path) -> None:
    """A criterion detail with newlines broke the one-line-per-task output, and the kept
    tail started mid-word without the `FAIL:` header."""
    write_task(tmp_path / "tasks" / "t.yaml", "true", criteria=[{
        "type": "run_command",
        "command": "echo 'FAIL: test_login'; for i in $(seq 300); do printf 'word%s ' $i; done;"
                   " echo; echo '1 failed, 9 passed'; exit 1"}])
    result = evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--run-id", "d")
    [line] = [ln for ln in result.stdout.splitlines() if "default/t/00" in ln]
    assert line.startswith("FAILURE")
    assert "FAIL: test_login" in line
    summary = json.loads((tmp_path / "runs" / "d" / "run.json").read_text())
    detail = summary["tasks"][0]["error_message"]
    assert detail.startswith("run_command: exit code 1: FAIL: test_login\nword1 word2")
    assert detail.endswith("word300 \n1 failed, 9 passed") or detail.endswith(
        "1 failed, 9 passed")
    assert " ... " in detail and " wor ..." not in detail


def test_kept_output_cuts_between_words() -> None:
    kept = _Kept()
    for i in range(1000):
        kept.add(f"w{i} ".encode())
    head, tail = kept.text().split(" ... ")
    assert head.startswith("w0 w1") and head.split()[-1].startswith("w")
    assert tail.endswith("w999")
    assert all(word.startswith("w") and word[1:].isdigit() for word in tail.split())
    short = _Kept()
    short.add(b"  all of it\n")
    assert short.text() == "all of it"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_closed_pipe_is_quiet_and_the_run_is_recorded(tmp_path: Path) -> None:
    """`evalledger run ... | head -1` printed a dozen `callback on_complete failed`
    tracebacks with BrokenPipeError."""
    for i in range(12):
        write_task(tmp_path / "tasks" / f"t{i}.yaml", "echo hi")
    db = tmp_path / "l.db"
    done = subprocess.run(
        f"{' '.join(COMMAND)} --ledger {db} run tasks --run-id piped -j 4 | head -1",
        shell=True, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        check=False)
    assert done.stdout == "piped\n"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert "failed" not in done.stderr, done.stderr
    summary = evalledger(tmp_path, db, "show", "piped", "--json")
    assert json.loads(summary.stdout)["tasks_succeeded"] == 12  # the batch went on


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_run_id_is_its_own_line_above_the_progress_bar(tmp_path: Path) -> None:
    """In a terminal, the first progress frame stayed in the scrollback with the run id
    glued to it."""
    write_task(tmp_path / "tasks" / "t.yaml", "echo hi")
    parent, child = pty.openpty()
    process = subprocess.Popen([*COMMAND, "--ledger", str(tmp_path / "l.db"), "run", "tasks",
                                "--run-id", "tty-run"], cwd=tmp_path, env=_env(),
                               stdin=child, stdout=child, stderr=child)
    os.close(child)
    try:
        seen = read_terminal(parent, process)
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(parent)
    assert seen.startswith(b"tty-run\r\n"), seen[:200]


def test_runs_says_cut_off_and_rounds_costs_for_people(tmp_path: Path) -> None:
    """After a killed run, `runs` printed cost 0.25522700000000004 and status running."""
    db = tmp_path / "l.db"
    gone = subprocess.Popen(["true"])
    gone.wait()
    with Ledger(db) as ledger:
        ledger.append([
            RunStarted(run_id="killed", planned=["default/t/00"],
                       host={**host_info(), "pid": gone.pid}),
            TaskStarted(run_id="killed", task_key="default/t/00", task_id="t"),
            TaskUsage(run_id="killed", task_key="default/t/00", model="m", cost_usd=0.1),
            TaskUsage(run_id="killed", task_key="default/t/00", model="m",
                      cost_usd=0.155227000000000004),
            TaskUsage(run_id="killed", task_key="default/t/00", model="mystery",
                      input_tokens=10, cost_usd=None),
        ])
    table = evalledger(tmp_path, db, "runs").stdout.splitlines()
    [row] = [dict(zip(table[0].split("\t"), line.split("\t"), strict=True))
             for line in table[1:]]
    assert row["status"] == "cut off"
    assert row["cost_usd"] == "\u2265 $0.2552"  # rounded, and a floor shown as one
    [listed] = [json.loads(line) for line in evalledger(tmp_path, db, "runs",
                                                        "--json").stdout.splitlines()]
    assert (listed["status"], listed["cut_off"], listed["cost_complete"]) == (
        "running", True, False)
    assert listed["cost_usd"] == pytest.approx(0.255227)  # exact for programs


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_option_errors_are_one_line(tmp_path: Path) -> None:
    for args, said in ((["run", "--bogus"], "No such option '--bogus'"),
                       (["run", "-j", "0", "x"], "Invalid value for '-j'"),
                       (["show"], "Missing argument 'RUN'"),
                       (["nosuch"], "No such command 'nosuch'")):
        done = subprocess.run([*COMMAND, "--ledger", str(tmp_path / "l.db"), *args],
                              cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"Error: {said}") and "--help`)" in done.stderr


def test_events_of_a_task_the_run_does_not_have_is_an_error(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "t.yaml", "echo hi")
    db = tmp_path / "l.db"
    evalledger(tmp_path, db, "run", "tasks", "--run-id", "e")
    error = assert_one_line_error(evalledger(tmp_path, db, "events", "e", "--task", "nosuch"))
    assert "run e has no task 'nosuch'" in error
    good = evalledger(tmp_path, db, "events", "e", "--task", "default/t/00")
    assert good.returncode == 0 and len(good.stdout.splitlines()) == 3


def test_pricing_overrides_a_built_in_rate(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "t.yaml", "echo '{\"type\": \"usage\", \"model\": "
               "\"claude-sonnet-4-5\", \"input_tokens\": 1000000}'")
    (tmp_path / "prices.yaml").write_text("claude-sonnet-4-5: {input: 1, output: 1}\n")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--run-id", "p",
                        "--pricing", "prices.yaml")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "runs" / "p" / "run.json").read_text())
    assert summary["total_cost_usd"] == pytest.approx(1.0)  # not the built-in $3


def test_resume_after_the_suite_moved(tmp_path: Path) -> None:
    """`resume` after the suite folder moved had no way to point at the new place."""
    old, new = tmp_path / "suite", tmp_path / "moved"
    write_task(old / "ok.yaml", "echo ok")
    task = write_task(old / "needs-data.yaml", "cat input.txt")
    task.write_text(task.read_text() + "workdir: data\n")  # missing: BUILD_FAILED
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", str(old), "--run-id", "m").returncode == 1
    old.rename(new)
    (new / "data").mkdir()
    (new / "data" / "input.txt").write_text("here now\n")
    lost = evalledger(tmp_path, db, "resume", "m", "--retry-errors")
    assert "resume --relocate OLD=NEW" in lost.stderr
    moved = evalledger(tmp_path, db, "resume", "m", "--retry-errors", "--strict",
                       "--relocate", f"{old}={new}")
    assert moved.returncode == 0, moved.stderr  # moving the suite is not drift
    assert "drift" not in moved.stderr
    again = evalledger(tmp_path, db, "resume", "m", "--strict")  # the new place is kept
    assert "nothing to resume" in again.stdout, again.stderr
    assert assert_one_line_error(evalledger(
        tmp_path, db, "resume", "m", "--relocate", f"{tmp_path / 'nowhere'}={new}"))


def test_write_errors_name_the_file() -> None:
    """With --out on a full disk the error named no path."""
    with pytest.raises(OSError) as failed:
        write_text(Path("/dev/full"), "x" * 100_000)
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == "/dev/full"


def test_a_report_that_cannot_be_written_leaves_the_previous_one_whole(tmp_path: Path) -> None:
    """A full --out disk left an empty run.json behind (found by bench/campaign.py): a
    report is written beside its place and renamed over it, or not at all."""
    report = tmp_path / "run.json"
    write_text(report, '{"old": true}\n')
    # A process that may not grow a file past 64 bytes: the write fails with EFBIG, as a
    # full disk fails with ENOSPC, after the temporary file was made.
    child = subprocess.run([sys.executable, "-c", (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from evalledger.app._reports import write_text\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))\n"
        "try:\n"
        "    write_text(Path(sys.argv[1]), 'x' * 100_000)\n"
        "except OSError as e:\n"
        "    print(e.filename)\n"
        "    sys.exit(3)\n"), str(report)], capture_output=True, text=True, timeout=60)
    assert child.returncode == 3, child.stderr
    assert child.stdout.strip() == str(report)
    assert report.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_junit_xml_on_a_full_disk_is_one_line_naming_it(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "t.yaml", "echo hi")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--junit-xml", "/dev/full")
    assert "/dev/full" in assert_one_line_error(result)


def test_a_full_disk_names_the_temp_folder_too(tmp_path: Path) -> None:
    """With TMPDIR full, the error blamed the ledger file alone (SQLite's temporary
    files for big transactions and sorts live in the temp folder)."""
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    with pytest.raises(LedgerIOError) as translated, translate_errors(tmp_path / "l.db"):
        raise full
    assert "or the temp folder" in str(translated.value)
    assert str(tmp_path / "l.db") in str(translated.value)


@pytest.fixture(autouse=True)
def _no_stray_sigpipe() -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it


def test_no_ledger_names_its_absolute_path_its_missing_folder_and_how_to_name_one(
    tmp_path: Path,
) -> None:
    """#49: `no ledger at evalledger.db` gave no absolute path, no --ledger or
    EVALLEDGER_LEDGER hint, and a missing folder in --ledger was not named; a mistyped
    command gets a suggestion."""
    from .helpers import evalledger

    done = evalledger(tmp_path, None, "show", "latest")
    assert done.returncode == 2
    assert done.stderr == (f"Error: no ledger at {tmp_path / 'evalledger.db'}: give --ledger "
                           "PATH, or set EVALLEDGER_LEDGER\n")
    gone = evalledger(tmp_path, tmp_path / "nowhere" / "l.db", "show", "latest")
    assert f"(there is no folder {tmp_path / 'nowhere'})" in gone.stderr
    typo = evalledger(tmp_path, None, "runn")
    assert "No such command 'runn'. Did you mean `run`?" in typo.stderr
