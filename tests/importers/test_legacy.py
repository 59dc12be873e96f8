"""The legacy importer (``evalledger.importers.legacy``, as ``evalledger import`` runs it):
old-harness run folders, built from the field list of docs/import.md (both token shapes,
a nested sub-run, a malformed file, a file without final_status, an unpriced model, a
version that differs on one task), into a real ledger; the summary is checked against
what the files imply. Then hostile folders, as real files and real processes: links, a
FIFO, /dev/zero, a sparse 1 GiB file, names with a newline, ``../`` or an escape code,
and content the ledger cannot store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalledger.importers.legacy import key_of, read_run
from evalledger.ledger import Ledger, TaskCompleted, TaskEmitted, TaskStarted
from tests.cli.helpers import COMMAND, PATIENCE, Result, _env, evalledger

from .old_runs import RUN, good_and_hostile, summary, task_json, write, write_old_runs


@pytest.fixture
def old_runs(tmp_path: Path) -> Path:
    return write_old_runs(tmp_path)


def test_an_old_run_is_imported_with_the_counts_its_files_imply(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    result = evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    assert result.returncode == 1, result  # two files could not be imported: said, exit 1
    assert f"{RUN}: imported 8 attempt(s), 2 unfinished" in result.stdout
    assert "inner-run: imported 1 attempt(s), 0 unfinished" in result.stdout
    assert "default/bad/00/task.json: not JSON" in result.stderr
    assert "default/nostatus/00/task.json: no final_status" in result.stderr

    s = summary(db, RUN)
    assert (s["tasks_planned"], s["tasks_run"], s["tasks_unfinished"]) == (10, 8, 2)
    assert (s["tasks_succeeded"], s["tasks_failed"], s["tasks_error"],
            s["tasks_ungraded"]) == (2, 3, 2, 1)
    assert s["status"] == "completed"
    assert (s["started_at"], s["finished_at"]) == ("2026-03-01T10:00:00.000000Z",
                                                   "2026-03-01T10:30:00.000000Z")
    assert s["max_parallel"] == 4
    assert [k["path"] for k in s["skipped_tasks"]] == ["tasks/broken.yaml"]
    # A missing price stays missing: the totals are floors, never booked as $0.
    assert s["cost_complete"] is False
    assert s["total_cost_usd"] == pytest.approx(0.01 * 4 + 0.02 + 0.5)  # t3: no price
    unpriced = {m["model"] for m in s["usage_by_model"] if not m["cost_complete"]}
    assert unpriced == {"mystery-model", "m-b"}
    # Both token shapes: the old one's input_tokens is the uncached slice.
    rows = {r["task_key"]: r for r in s["tasks"]}
    assert rows["default/t1/00"]["tokens"] == {"input_tokens": 100, "output_tokens": 20,
                                               "cache_write_tokens": 5,
                                               "cache_read_tokens": 7}
    assert rows["default/t1/01"]["tokens"]["input_tokens"] == 100
    assert rows["default/t1/01"]["tokens"]["cache_read_tokens"] == 0
    assert rows["default/suite/row-1/00"]["task_id"] == "suite/row-1"
    assert rows["default/crashed/00"]["final_status"] == "ERROR"
    assert rows["default/crashed/00"]["error_message"] == "docker build failed"
    assert rows["default/t1/00"]["tags"] == ["smoke"]
    assert rows["default/bad/00"]["final_status"] is None  # unfinished
    # A version that differs on one task is drift; the rest agree.
    assert s["version_drift"]["cli_version"] == {"1.0.0": 6, "2.0.0": 1}
    assert s["version_consensus"]["coder_eval"] == "0.9.1"

    with Ledger(db, read_only=True) as ledger:
        events = list(ledger.events(RUN))
    completed = {e.task_key: e for e in events if isinstance(e, TaskCompleted)}
    assert completed["default/suite/row-1/00"].imported == {"error_category": "agent_crash"}
    assert [c.passed for c in completed["default/t1/00"].criteria] == [True]
    started = [e for e in events if isinstance(e, TaskStarted)]
    assert {e.imported["source"] for e in started if e.imported} >= {
        "default/t1/00/task.json", "run.json#default/crashed/00"}
    # The file itself is kept whole: fields this reader does not map are not lost.
    [kept] = [e for e in events if isinstance(e, TaskEmitted)
              and e.data["imported_from"] == "default/t1/00/task.json"]
    assert kept.data["record"]["some_future_field"] == {"kept": True}
    # Every reader sees it: the SQL views too.
    sql = evalledger(old_runs.parent, db, "sql", "SELECT count(*) FROM task_results WHERE "
                     f"run_id = '{RUN}'", "--format", "json")
    assert json.loads(sql.stdout) == {"count(*)": 8}
    assert evalledger(old_runs.parent, db, "verify", "--deep").returncode == 0


def test_a_second_import_adds_nothing_and_a_changed_file_is_named(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    with Ledger(db, read_only=True) as ledger:
        before = ledger.count()
    again = evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    assert f"{RUN}: imported 0 attempt(s), 2 unfinished, 8 already imported" in again.stdout
    assert "(0 events)" in again.stdout
    with Ledger(db, read_only=True) as ledger:
        assert ledger.count() == before

    write(old_runs / RUN, "default/t4/00/task.json", task_json("t4", "FAILURE"))
    changed = evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    assert ("changed since it was imported (kept as imported): "
            f"{old_runs / RUN / 'default/t4/00/task.json'}") in changed.stderr
    assert summary(db, RUN)["tasks_succeeded"] == 2  # as imported
    with Ledger(db, read_only=True) as ledger:
        assert ledger.count() == before


def test_event_ids_come_from_the_files_not_the_ledger(old_runs: Path, tmp_path: Path) -> None:
    ids = []
    for name in ("a.db", "b.db"):
        evalledger(tmp_path, tmp_path / name, "import", str(old_runs / RUN), "--tz", "UTC")
        with Ledger(tmp_path / name, read_only=True) as ledger:
            ids.append([e.event_id for e in ledger.events(RUN) if e.type != "run.snapshot"])
    assert ids[0] == ids[1] and len(ids[0]) > 20


def test_times_without_an_offset_are_read_in_the_zone_given(old_runs: Path) -> None:
    run = read_run(old_runs / RUN, tz=__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    assert run.events[0].ts == "2026-03-01T09:00:00.000000Z"  # UTC+1 in March


def test_a_native_run_of_the_same_id_is_not_overwritten(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    suite = old_runs.parent / "suite"
    write(suite, "t.yaml", "command: 'true'\n")
    assert evalledger(old_runs.parent, db, "run", str(suite), "--run-id", RUN).returncode == 0
    result = evalledger(old_runs.parent, db, "import", str(old_runs / RUN))
    assert result.returncode == 1
    assert f"{RUN}: not imported from" in result.stderr and "(not imported)" in result.stderr
    assert summary(db, RUN)["tasks_planned"] == 1


@pytest.mark.parametrize(("relative", "key"), [
    ("default/t1/00/task.json", ("default", "t1", 0)),
    ("v2/suite/row/07/task.json", ("v2", "suite/row", 7)),
    ("default/t1/task.json", ("default", "t1", 0)),
    # Only ASCII digits name a replicate: isdigit() takes '²', which int() refuses, and
    # int() reads Arabic-Indic digits, which made one more name for replicate 01.
    ("v/t/\u00b2/task.json", ("v", "t/\u00b2", 0)),
    ("v/t/\u0660\u0661/task.json", ("v", "t/\u0660\u0661", 0)),
])
def test_keys_come_from_the_folder_layout(relative: str, key: tuple[str, str, int]) -> None:
    assert key_of(Path(relative)) == key


def test_imported_runs_show_in_the_viewer(old_runs: Path) -> None:
    from starlette.testclient import TestClient

    from evalledger.viewer import create_app

    db = old_runs.parent / "l.db"
    evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client:
        assert RUN in client.get("/").text
        api = client.get(f"/api/runs/{RUN}/summary").json()
        assert api["tasks_run"] == 8 and api["tasks_unfinished"] == 2
        page = client.get(f"/runs/{RUN}/tasks/default/suite/row-1/00")
        assert page.status_code == 200 and "agent crashed" in page.text


# -- hostile folders: only regular files are read, names the ledger cannot store ----------

# The old reader took 23.5 GB for a task.json linked to /dev/zero before the kernel
# killed it. The CLI runs here with its address space capped at 1 GiB, so a reader
# that reads without a bound fails with a MemoryError instead of taking the machine.
# Its peak memory is the kernel's VmHWM of its own address space, written as it exits:
# wait4's ru_maxrss also counts the forking parent's high-water mark (this pytest
# process, 300 MiB late in a whole run), carried over the exec.
_CAPPED = """\
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
hwm, sys.argv = sys.argv[1], ['evalledger', *sys.argv[2:]]
try:
    runpy.run_module('evalledger.cli', run_name='__main__')
finally:
    with open('/proc/self/status') as status, open(hwm, 'w') as out:
        out.write(next(line.split()[1] for line in status if line.startswith('VmHWM:')))
"""


def import_process(cwd: Path, db: Path, *args: str) -> tuple[Result, int]:
    """``evalledger import ARGS`` as a real process (memory capped), and its peak resident
    memory in bytes. A process still running after PATIENCE seconds (a FIFO opened for
    reading blocks forever) is killed and the test fails."""
    with open(cwd / "out.txt", "wb") as out, open(cwd / "err.txt", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", _CAPPED, str(cwd / "hwm.txt"),
                                 "--ledger", str(db), "import", *args],
                                cwd=cwd, env=_env(), stdout=out, stderr=err)
    try:
        returncode = proc.wait(timeout=PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = Result(returncode, (cwd / "out.txt").read_text(), (cwd / "err.txt").read_text())
    return result, int((cwd / "hwm.txt").read_text()) * 1024  # VmHWM is in kB


def assert_skipped_beside_a_good_one(result: Result, db: Path, bad: Path, reason: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result  # something was left out: said, exit 1
    assert "r1: imported 1 attempt(s), 0 unfinished, 1 skipped from" in result.stdout, result
    assert f"  skipped: {bad}: {reason}" in result.err_lines, result.stderr
    s = summary(db, "r1")
    assert (s["tasks_planned"], s["tasks_run"], s["tasks_unfinished"]) == (2, 1, 1)
    with Ledger(db, read_only=True) as ledger:
        assert not any("s3cret" in row.payload for row in ledger.rows("r1"))


def test_a_task_json_linked_to_a_file_outside_is_not_read(tmp_path: Path) -> None:
    root, bad = good_and_hostile(tmp_path)
    bad.symlink_to(tmp_path / "outside.json")
    result, _ = import_process(tmp_path, tmp_path / "l.db", str(root))
    assert_skipped_beside_a_good_one(result, tmp_path / "l.db", bad,
                                     "a symbolic link (not followed)")


def test_a_task_json_linked_to_dev_zero_is_skipped_at_once(tmp_path: Path) -> None:
    root, bad = good_and_hostile(tmp_path)
    bad.symlink_to("/dev/zero")
    result, peak = import_process(tmp_path, tmp_path / "l.db", str(root))
    assert_skipped_beside_a_good_one(result, tmp_path / "l.db", bad,
                                     "a symbolic link (not followed)")
    assert peak < 200 << 20, f"peak memory {peak >> 20} MiB"


def test_a_fifo_in_place_of_a_task_json_is_never_opened(tmp_path: Path) -> None:
    root, bad = good_and_hostile(tmp_path)
    os.mkfifo(bad)  # opened for reading, it would block until a writer came: never
    result, _ = import_process(tmp_path, tmp_path / "l.db", str(root))
    assert_skipped_beside_a_good_one(result, tmp_path / "l.db", bad, "a FIFO (not opened)")


def test_a_fifo_in_place_of_run_json_is_never_opened(tmp_path: Path) -> None:
    root, _ = good_and_hostile(tmp_path)
    (root / "r1/run.json").unlink()
    os.mkfifo(root / "r1/run.json")
    result, _ = import_process(tmp_path, tmp_path / "l.db", str(root))
    assert "Traceback" not in result.stderr and result.returncode == 1, result
    assert "r1: imported 1 attempt(s), 0 unfinished, 1 skipped from" in result.stdout
    assert f"  skipped: {root / 'r1/run.json'}: a FIFO (not opened)" in result.err_lines


def test_a_sparse_1_gib_task_json_is_skipped_in_flat_memory(tmp_path: Path) -> None:
    root, bad = good_and_hostile(tmp_path)
    with open(bad, "wb") as f:
        f.truncate(1 << 30)  # a gigabyte of zeros on no disk space
    result, peak = import_process(tmp_path, tmp_path / "l.db", str(root))
    assert_skipped_beside_a_good_one(
        result, tmp_path / "l.db", bad,
        "1 GiB (1,073,741,824 bytes): over the 64 MiB limit (--max-file-bytes)")
    assert peak < 200 << 20, f"peak memory {peak >> 20} MiB"


def test_a_link_to_a_folder_is_named_and_not_entered(tmp_path: Path) -> None:
    root, bad = good_and_hostile(tmp_path)
    bad.parent.rmdir()
    write(tmp_path / "elsewhere", "00/task.json", task_json("bad", "SUCCESS", secret="s3cret"))
    bad.parent.parent.rmdir()
    (root / "r1/default/bad").symlink_to(tmp_path / "elsewhere")
    (root / "latest").symlink_to(root / "r1")  # the old harness's: outside any run, silent
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "import", str(root))
    assert result.returncode == 1, result
    assert "r1: imported 1 attempt(s), 0 unfinished, 1 skipped from" in result.stdout
    assert result.err_lines == [
        f"  skipped: {root / 'r1/default/bad'}: a symbolic link to a folder (not entered)"]
    with Ledger(db, read_only=True) as ledger:
        assert not any("s3cret" in row.payload for row in ledger.rows("r1"))


def bad_name_runs(tmp_path: Path, folder: str, run_id: str | None) -> Path:
    """``runs/`` holding a good run and one whose folder name or run id is ``bad``."""
    root = tmp_path / "runs"
    write(root / "good", "run.json", {"run_id": "good"})
    write(root / "good", "default/t1/00/task.json", task_json("t1", "SUCCESS"))
    write(root / folder, "run.json", {} if run_id is None else {"run_id": run_id})
    write(root / folder, "default/t1/00/task.json", task_json("t1", "SUCCESS"))
    return root


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("folder", "run_id", "reason"), [
    ("bad\nname", None,
     "the folder's name 'bad\\nname' cannot be a run id: it holds the control character "
     "U+000A"),
    ("dots", "../x", "run.json's run_id '../x' cannot be stored: it holds '/'"),
    ("red", "\x1b[31mred", "run.json's run_id '\\x1b[31mred' cannot be stored: it holds the "
                           "control character U+001B"),
], ids=["newline-folder", "dots-run-id", "ansi-run-id"])
def test_a_run_whose_name_cannot_be_stored_is_skipped_and_the_others_import(
        tmp_path: Path, folder: str, run_id: str | None, reason: str) -> None:
    root = bad_name_runs(tmp_path, folder, run_id)
    db = tmp_path / "l.db"
    result = subprocess.run([*COMMAND, "--ledger", str(db), "import", str(root)], cwd=tmp_path,
                            env=_env(), capture_output=True, text=True, timeout=PATIENCE)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result
    shown = str(root / folder).replace("\n", "\\n")
    assert result.stderr.splitlines() == [f"{shown}: not imported: {reason}"]
    assert result.stdout.startswith("good: imported 1 attempt(s), 0 unfinished from")
    with Ledger(db, read_only=True) as ledger:
        assert [r for (r,) in ledger.query("SELECT DISTINCT run_id FROM events")[1]] == ["good"]
    assert "\x1b" not in result.stdout + result.stderr


@pytest.mark.parametrize(("relative", "content", "reason"), [
    ("default/t/00/task.json", b'{"final_status": "SUCCESS", "note": "\\ud800"}',
     "the ledger cannot store it: it holds a lone surrogate"),
    ("default/t/00/task.json",
     b'{"final_status": "SUCCESS", "x": ' + b"[" * 500 + b"]" * 500 + b"}",
     "the ledger cannot store it: it is nested too deeply"),
    ("default/t\x1b[2J/00/task.json", json.dumps(task_json("t", "SUCCESS")).encode(),
     "the folder name 't\\x1b[2J' cannot be part of a task key: it holds the control "
     "character U+001B"),
    ("run.json", json.dumps({"task_results": [{"task_id": "a\nb", "status": "ERROR"}]}).encode(),
     "'a\\nb' cannot be part of a task key: it holds the control character U+000A"),
    # import-events refuses a backslash in a name: legacy import the same.
    ("default/t\\x/00/task.json", json.dumps(task_json("t", "SUCCESS")).encode(),
     "the folder name 't\\x' cannot be part of a task key: it holds '\\'"),
], ids=["surrogate", "deep", "ansi-task-folder", "newline-row", "backslash-task-folder"])
def test_what_the_ledger_cannot_store_is_named_and_the_rest_imports(
        tmp_path: Path, relative: str, content: bytes, reason: str) -> None:
    root = tmp_path / "runs"
    write(root / "r1", "run.json", {})
    write(root / "r1", "default/good/00/task.json", task_json("good", "SUCCESS"))
    (root / "r1" / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / "r1" / relative).write_bytes(content)
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "import", str(root))
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result
    assert "r1: imported 1 attempt(s)" in result.stdout
    [named] = [line for line in result.err_lines if line.startswith("  ")]
    assert named.endswith(reason) or reason in named, named
    assert summary(db, "r1")["tasks_succeeded"] == 1
    assert evalledger(tmp_path, db, "verify", "--deep").returncode == 0


def test_times_out_of_range_in_the_zone_given_are_no_times(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write(root / "r1", "run.json", {"start_time": "0001-01-01T00:00:00"})
    write(root / "r1", "default/t/00/task.json",
          task_json("t", "SUCCESS", started_at="0001-01-01T00:00:00",
                    completed_at="9999-12-31T23:59:59"))
    db = tmp_path / "l.db"
    # Year 1 east of UTC and year 9999 west of it fall outside what a datetime holds.
    for zone in ("Asia/Tokyo", "America/New_York"):
        result = evalledger(tmp_path, db, "import", str(root), "--tz", zone, "--dry-run")
        assert result.returncode == 0 and "Traceback" not in result.stderr, result


# -- numbers, keys and times the ledger could take but not keep ----------------------------

BIG = 10**400  # JSON holds it; a float does not


def test_a_number_no_float_holds_is_named_never_raised(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    tokens = task_json("t", "SUCCESS", tokens="old")
    tokens["total_token_usage"]["input_tokens"] = BIG
    runs: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
        "duration": ({}, task_json("t", "SUCCESS", duration_seconds=BIG),
                     "  unfinished: {}: duration_seconds 100000... (401 digits) is out of range"
                     " (at most 1e+09)"),
        "tokens": ({}, tokens, "  unfinished: {}: input_tokens 100000... (401 digits) is out of"
                               " range (at most 9007199254740992)"),
        "parallel": ({"max_parallel": BIG}, task_json("t", "SUCCESS"),
                     "{}: not imported: run.json: max_parallel 100000... (401 digits) is out of "
                     "range (at most 9007199254740992)"),
        "replicate": ({"task_results": [{"task_id": "t", "replicate_index": BIG}]},
                      task_json("t", "SUCCESS"),
                      "{}: not imported: run.json: task_results: replicate_index 100000... "
                      "(401 digits) is out of range (at most 9007199254740992)"),
        "cost": ({"total_cost_usd": BIG}, task_json("t", "SUCCESS"),
                 "{}: not imported: run.json: total_cost_usd 100000... (401 digits) is out of "
                 "range (at most 1e+09)"),
        "count": ({"tasks_run": BIG}, task_json("t", "SUCCESS"),
                  "{}: not imported: run.json: tasks_run 100000... (401 digits) is out of "
                  "range (at most 9007199254740992)"),
    }
    expected = []
    for name, (run_json, task, line) in runs.items():
        write(root / name, "run.json", {"run_id": name, **run_json})
        path = write(root / name, "default/t/00/task.json", task)
        expected.append(line.format(path if "unfinished" in line else root / name))
    db = tmp_path / "l.db"
    for dry_run in (["--dry-run"], []):
        result = evalledger(tmp_path, db, "import", str(root), "--tz", "UTC", *dry_run)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 1, result
        assert sorted(result.err_lines) == sorted(expected), result.stderr
    assert evalledger(tmp_path, db, "verify", "--deep").returncode == 0


def test_numbers_past_what_an_attempt_can_say_leave_its_file_out(tmp_path: Path) -> None:
    """Finite each, 1.7e308 twice is inf: such files were imported, then every read of
    their run raised OverflowError."""
    run = tmp_path / "runs/r1"
    write(run, "run.json", {"run_id": "r1"})
    write(run, "default/good/00/task.json", task_json("good", "SUCCESS"))
    usage = {"input_tokens": 1, "total_cost_usd": 1.7e308}
    turn = {"token_usage": {"input_tokens": 2**53, "total_cost_usd": 9e8}}
    bad = {
        "slow": (task_json("slow", "SUCCESS", duration_seconds=1.7e308),
                 "duration_seconds 1.7e+308 is out of range (at most 1e+09)"),
        "slow2": (task_json("slow2", "SUCCESS", duration_seconds=1.7e308),
                  "duration_seconds 1.7e+308 is out of range (at most 1e+09)"),
        "dear": (task_json("dear", "SUCCESS", total_token_usage=usage),
                 "total_cost_usd 1.7e+308 is out of range (at most 1e+09)"),
        "dear2": (task_json("dear2", "SUCCESS", total_token_usage=usage),
                  "total_cost_usd 1.7e+308 is out of range (at most 1e+09)"),
        # In range each, out of range summed.
        "turns": (task_json("turns", "SUCCESS", iterations=[turn, turn]),
                  "the attempt's input_tokens 18014398509481984 is out of range (at most "
                  "9007199254740992)"),
    }
    for name, (data, _) in bad.items():
        write(run, f"default/{name}/00/task.json", data)
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "import", str(run), "--tz", "UTC")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, result
    assert "r1: imported 1 attempt(s), 5 unfinished from" in result.stdout
    assert sorted(result.err_lines) == sorted(
        f"  unfinished: {run / 'default' / name / '00/task.json'}: {why}"
        for name, (_, why) in bad.items())
    s = summary(db, "r1")  # the run reads: show, report
    assert (s["tasks_run"], s["tasks_unfinished"]) == (1, 5)
    assert s["total_cost_usd"] == pytest.approx(0.01)
    assert evalledger(tmp_path, db, "report", "r1").returncode == 0


def test_one_file_per_task_key_the_first_in_name_order(tmp_path: Path) -> None:
    """Folders 001, 01 and 1 all name replicate 1: one attempt of it, not three."""
    run = tmp_path / "runs/r1"
    write(run, "run.json", {"run_id": "r1"})
    for folder, status in (("001", "FAILURE"), ("01", "SUCCESS"), ("1", "SUCCESS")):
        write(run, f"v/t/{folder}/task.json", task_json("t", status))
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "import", str(run), "--tz", "UTC")
    assert result.returncode == 1, result
    assert "r1: imported 1 attempt(s), 0 unfinished, 2 skipped from" in result.stdout
    assert result.err_lines == [
        f"  skipped: {run / 'v/t' / folder / 'task.json'}: its task key 'v/t/01' is already "
        f"that of {run / 'v/t/001/task.json'}" for folder in ("01", "1")]
    s = summary(db, "r1")
    assert (s["tasks_run"], s["tasks_failed"], s["tasks_succeeded"]) == (1, 1, 0)


def test_a_second_name_for_an_imported_file_does_not_change_its_verdict(
        tmp_path: Path) -> None:
    """Changing an imported file is refused; a file beside it under another name of its
    key (1 beside 01) was imported, as a second attempt that flipped the verdict."""
    run = tmp_path / "runs/r1"
    write(run, "run.json", {"run_id": "r1"})
    write(run, "v/t/01/task.json", task_json("t", "FAILURE"))
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "import", str(run), "--tz", "UTC").returncode == 0
    with Ledger(db, read_only=True) as ledger:
        before = ledger.count()
    write(run, "v/t/1/task.json", task_json("t", "SUCCESS"))
    again = evalledger(tmp_path, db, "import", str(run), "--tz", "UTC")
    assert again.returncode == 1, again
    assert again.err_lines == [
        f"  skipped: {run / 'v/t/1/task.json'}: its task key 'v/t/01' is already that of "
        f"{run / 'v/t/01/task.json'}"]
    assert summary(db, "r1")["tasks_failed"] == 1
    # Nor does a run.json row of the key once the imported file is gone.
    for folder in ("01", "1"):
        (run / "v/t" / folder / "task.json").unlink()
    write(run, "run.json", {"run_id": "r1", "task_results": [
        {"task_id": "t", "variant_id": "v", "replicate_index": 1, "status": "SUCCESS"}]})
    assert evalledger(tmp_path, db, "import", str(run), "--tz", "UTC").returncode == 0
    assert summary(db, "r1")["tasks_failed"] == 1
    with Ledger(db, read_only=True) as ledger:
        assert ledger.count() == before


def test_a_task_key_import_events_would_refuse_is_skipped(tmp_path: Path) -> None:
    """A key over 1,024 characters was imported, and its run could then never be carried
    to another ledger: import-events refuses it."""
    run = tmp_path / "runs/r1"
    deep = "/".join(["p" * 200] * 6)
    write(run, "run.json", {"run_id": "r1", "task_results": [
        {"task_id": deep, "variant_id": "w", "status": "ERROR"}]})
    write(run, "v/good/00/task.json", task_json("good", "SUCCESS"))
    path = write(run, f"v/{deep}/00/task.json", task_json("deep", "SUCCESS"))
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "import", str(run), "--tz", "UTC")
    assert result.returncode == 1, result
    assert "r1: imported 1 attempt(s), 0 unfinished, 2 skipped from" in result.stdout
    assert sorted(result.err_lines) == sorted([
        f"  skipped: {path}: its task key is 1,210 characters long: over 1,024",
        f"  skipped: {run}/run.json#w/{deep}/00: its task key is 1,210 characters long: "
        "over 1,024"])
    carried = tmp_path / "r1.ndjson"
    assert evalledger(tmp_path, db, "export", "r1", "-o", str(carried)).returncode == 0
    moved = evalledger(tmp_path, tmp_path / "other.db", "import-events", str(carried))
    assert moved.returncode == 0, moved


def test_a_time_before_year_1000_is_written_with_four_digits(tmp_path: Path) -> None:
    """strftime wrote year 999 as '999-01-01T...', a time import-events refuses."""
    run = tmp_path / "runs/r1"
    write(run, "run.json", {"run_id": "r1", "start_time": "0999-01-01T00:00:00Z"})
    write(run, "v/t/00/task.json", task_json("t", "SUCCESS", started_at="0999-01-01T00:00:00Z",
                                             completed_at="0999-01-01T00:01:00Z"))
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "import", str(run)).returncode == 0
    with Ledger(db, read_only=True) as ledger:
        times = {e.ts for e in ledger.events("r1") if e.type != "run.snapshot"}
    assert times == {"0999-01-01T00:00:00.000000Z", "0999-01-01T00:01:00.000000Z"}
    carried = tmp_path / "r1.ndjson"
    assert evalledger(tmp_path, db, "export", "r1", "-o", str(carried)).returncode == 0
    moved = evalledger(tmp_path, tmp_path / "other.db", "import-events", str(carried))
    assert moved.returncode == 0, moved
