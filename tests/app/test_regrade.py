"""``regrade`` on real runs: the workspaces the run kept graded again, each verdict one
more event, every earlier verdict still readable by its grade set's name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunGraded,
    RunStarted,
    TaskCompleted,
    TaskGraded,
    TaskStarted,
    verify,
)
from evalledger.projections import SummaryFold, fold
from evalledger.statuses import RunStatus
from tests.cli.helpers import (
    assert_one_line_error,
    evalledger,
    events,
    of_type,
    run_json,
    write_tasks,
)

# Three tasks: two write what they are asked for, one writes the wrong thing.
TASKS = {
    name: {"command": f"printf '{text}' > out.txt; echo wrote {name}",
           "success_criteria": [{"type": "file_contains", "path": "out.txt",
                                 "includes": ["hello"]}],
           "timeout": 20}
    for name, text in (("a", "hello world"), ("b", "hello"), ("c", "goodbye"))
}
STRICT = [{"type": "file_contains", "path": "out.txt", "includes": ["hello world"]},
          {"type": "output_contains", "includes": ["wrote"]}]


def statuses(db: Path, run_id: str, *extra: str) -> dict[str, str]:
    shown = evalledger(db.parent, db, "show", run_id, "--json", *extra)
    assert shown.returncode == 0, shown.stderr
    return {row["task_key"].split("/")[1]: row["final_status"]
            for row in json.loads(shown.stdout)["tasks"]}


def verified(db: Path) -> None:
    for args in (["verify"], ["verify", "--deep"]):
        done = evalledger(db.parent, db, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)


@pytest.fixture
def graded_run(tmp_path: Path) -> tuple[Path, Path]:
    """A finished run of TASKS (a, b succeed; c fails), its tasks folder and ledger."""
    tasks = write_tasks(tmp_path / "tasks", TASKS)
    db = tmp_path / "ledger.db"
    ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r")
    assert ran.returncode == 1, ran.stderr  # c fails
    return tasks, db


def test_a_changed_criteria_file_regraded_appends_a_verdict_per_attempt_and_keeps_both(
    graded_run: tuple[Path, Path],
) -> None:
    tasks, db = graded_run
    before = events(db, "r")
    assert statuses(db, "r") == {"a": "SUCCESS", "b": "SUCCESS", "c": "FAILURE"}
    # The suite's criteria get stricter; the run is graded again by them, not re-run:
    # by default, by its task files as they are now.
    write_tasks(tasks, {n: {**t, "success_criteria": STRICT} for n, t in TASKS.items()})
    done = evalledger(db.parent, db, "regrade", "r", "--name", "strict")
    assert done.returncode == 0, done.stderr
    assert "grade set strict of run r (complete): 3 graded, 0 refused" in done.stdout
    assert "FAILURE               default/b/00  (was SUCCESS)" in done.out_lines
    after = events(db, "r")
    assert after[:len(before)] == before  # nothing recorded before changed
    graded = of_type(after, "task.graded")
    assert len(graded) == 3 and all(isinstance(g, TaskGraded) for g in graded)
    assert {g.task_key.split("/")[1]: g.final_status for g in graded} == {
        "a": "SUCCESS", "b": "FAILURE", "c": "FAILURE"}
    assert len({g.criteria_hash for g in graded}) == 1
    assert all(g.criteria_from == "tasks" for g in graded)
    [ended] = of_type(after, "run.graded")
    assert isinstance(ended, RunGraded) and ended.complete and ended.graded == 3
    # The stdout of the attempt was there to grade: output_contains passed for a.
    by_task = {g.task_key.split("/")[1]: g for g in graded}
    assert [c.passed for c in by_task["a"].criteria] == [True, True]
    # The new default, and the old verdicts by name.
    assert statuses(db, "r") == {"a": "SUCCESS", "b": "FAILURE", "c": "FAILURE"}
    assert statuses(db, "r", "--grades", "original") == {
        "a": "SUCCESS", "b": "SUCCESS", "c": "FAILURE"}
    assert statuses(db, "r", "--grades", "strict") == statuses(db, "r")
    shown = evalledger(db.parent, db, "show", "r")
    assert shown.out_lines[0].startswith("run r completed (grades: strict): 3/3 run, 1 succeeded")
    report = json.loads(evalledger(db.parent, db, "report", "r", "--format", "json",
                                   "--grades", "original").stdout)
    assert (report["grades"], report["grade_sets"]) == ("original", ["original", "strict"])
    compared = evalledger(db.parent, db, "diff", "r", "r", "--grades", "original",
                          "--grades-b", "strict")
    assert compared.returncode == 1  # b regressed under the stricter grading
    assert "1 regression" in compared.stdout
    with Ledger(db, read_only=True) as ledger:
        _, rows = ledger.query("SELECT task_key, grades, final_status FROM task_grades "
                               "ORDER BY task_key")
    assert rows == [("default/a/00", "strict", "SUCCESS"), ("default/b/00", "strict", "FAILURE"),
                    ("default/c/00", "strict", "FAILURE")]
    # --recorded: each attempt's own criteria, as it recorded them: the run's verdicts,
    # now the latest complete grade set.
    again = evalledger(db.parent, db, "regrade", "r", "--recorded", "--name", "as-run")
    assert "FAILURE               default/c/00" in again.out_lines
    assert statuses(db, "r") == {"a": "SUCCESS", "b": "SUCCESS", "c": "FAILURE"}
    verified(db)


def test_a_regrade_writes_the_runs_report_files_again_as_report_makes_them(
    graded_run: tuple[Path, Path],
) -> None:
    """#47: after a regrade run.json, run.md and report.html still said the old grades
    (documented as what `report` makes, byte for byte)."""
    tasks, db = graded_run
    folder = db.parent / "runs" / "r"
    assert json.loads((folder / "run.json").read_text())["grades"] == "original"
    write_tasks(tasks, {n: {**t, "success_criteria": STRICT} for n, t in TASKS.items()})
    done = evalledger(db.parent, db, "regrade", "r", "--name", "strict")
    assert done.returncode == 0, done.stderr
    assert f"reports: {folder / 'run.json'}" in done.stdout
    written = json.loads((folder / "run.json").read_text())
    assert written["grades"] == "strict"
    assert {row["task_key"].split("/")[1]: row["final_status"] for row in written["tasks"]} == {
        "a": "SUCCESS", "b": "FAILURE", "c": "FAILURE"}
    for fmt, name in (("json", "run.json"), ("md", "run.md"), ("html", "report.html")):
        made = evalledger(db.parent, db, "report", "r", "--format", fmt)
        assert made.returncode == 0, made.stderr
        assert (folder / name).read_text() == made.stdout, name


def test_a_subset_regraded_leaves_the_others_verdicts_and_is_not_the_default(
    graded_run: tuple[Path, Path], tmp_path: Path,
) -> None:
    _, db = graded_run
    strict = tmp_path / "strict.yaml"
    strict.write_text(json.dumps(STRICT), encoding="utf-8")
    done = evalledger(tmp_path, db, "regrade", "r", "--criteria", str(strict), "--only", "b",
                      "--name", "part")
    assert done.returncode == 0, done.stderr
    assert "grade set part of run r (partial): 1 graded, 0 refused" in done.stdout
    assert statuses(db, "r") == {"a": "SUCCESS", "b": "SUCCESS", "c": "FAILURE"}  # original
    assert statuses(db, "r", "--grades", "part") == {
        "a": "SUCCESS", "b": "FAILURE", "c": "FAILURE"}
    # --from-tasks: another folder's tasks, by task id.
    other = write_tasks(tmp_path / "other", {n: {**t, "success_criteria": STRICT}
                                             for n, t in TASKS.items()})
    moved = evalledger(tmp_path, db, "regrade", "r", "--from-tasks", str(other), "--only", "a",
                       "--name", "moved")
    assert "SUCCESS               default/a/00" in moved.out_lines
    # The same name again, over the whole run: now complete, and the default.
    again = evalledger(tmp_path, db, "regrade", "r", "--criteria", str(strict), "--name", "part")
    assert "(complete): 3 graded" in again.stdout
    assert statuses(db, "r") == {"a": "SUCCESS", "b": "FAILURE", "c": "FAILURE"}
    verified(db)


def test_a_workspace_gone_or_changed_is_refused_named_and_the_set_stays_partial(
    graded_run: tuple[Path, Path],
) -> None:
    _, db = graded_run
    artifacts = db.parent / "runs" / "r" / "artifacts" / "default"
    shutil.rmtree(artifacts / "a" / "00")
    (artifacts / "b" / "00" / "out.txt").write_text("hello, edited", encoding="utf-8")
    done = evalledger(db.parent, db, "regrade", "r", "--name", "again")
    assert done.returncode == 1
    assert done.err_lines == [
        f"refused default/a/00: its workspace is gone ({artifacts / 'a' / '00'})",
        f"refused default/b/00: its workspace changed since it was kept ({artifacts / 'b' / '00'})",
    ]
    assert "grade set again of run r (partial): 1 graded, 2 refused" in done.stdout
    assert statuses(db, "r") == {"a": "SUCCESS", "b": "SUCCESS", "c": "FAILURE"}
    [ended] = of_type(events(db, "r"), "run.graded")
    assert isinstance(ended, RunGraded) and not ended.complete
    assert [r.task_key for r in ended.refused] == ["default/a/00", "default/b/00"]


def test_a_run_without_grading_is_pending_until_a_regrade_grades_it(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks", TASKS)
    db = tmp_path / "ledger.db"
    ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "agents", "--no-grade")
    assert ran.returncode == 0, ran.stderr
    assert "0 succeeded, 0 failed, 0 error, 3 ungraded" in ran.stdout
    completions = of_type(events(db, "agents"), "task.completed")
    assert all(isinstance(c, TaskCompleted) and c.grade_pending and c.criteria == []
               and c.final_status == "NOT_GRADED" and c.kept_hash for c in completions)
    assert "NOT_GRADED (pending)" in evalledger(tmp_path, db, "show", "agents").stdout
    assert run_json(tmp_path, "agents")["tasks"][0]["grade_pending"] is True
    done = evalledger(tmp_path, db, "regrade", "agents")
    assert done.returncode == 0, done.stderr
    assert "grade set regrade-1 of run agents (complete): 3 graded" in done.stdout
    assert statuses(db, "agents") == {"a": "SUCCESS", "b": "SUCCESS", "c": "FAILURE"}
    refused = evalledger(tmp_path, db, "run", str(tasks), "--no-grade",
                         "--preservation-mode", "none")
    assert "cannot go with --preservation-mode none" in assert_one_line_error(refused)
    verified(db)


def test_a_run_that_arrived_from_elsewhere_is_regraded_only_with_criteria_given_here(
    graded_run: tuple[Path, Path], tmp_path: Path,
) -> None:
    _, db = graded_run
    exported = tmp_path / "r.ndjson"
    assert evalledger(tmp_path, db, "export", "r", "-o", str(exported)).returncode == 0
    other = tmp_path / "other.db"
    assert evalledger(tmp_path, other, "import-events", str(exported)).returncode == 0
    refused = evalledger(tmp_path, other, "regrade", "r")
    assert "came from elsewhere" in assert_one_line_error(refused)
    with Ledger(other, read_only=True) as ledger:
        assert not list(ledger.events("r", types={"task.graded", "run.graded"}))


def test_an_unknown_grade_set_or_a_bad_name_is_one_line(graded_run: tuple[Path, Path]) -> None:
    _, db = graded_run
    shown = evalledger(db.parent, db, "show", "r", "--grades", "nope")
    assert assert_one_line_error(shown) == (
        "Error: run r has no grade set 'nope' (it has: original)")
    named = evalledger(db.parent, db, "regrade", "r", "--name", "original")
    assert "the run's own grading" in assert_one_line_error(named)


def test_a_regrade_grades_under_the_isolation_the_command_had(
    tmp_path: Path, bwrap: object,
) -> None:
    """Under bwrap a grader sees the workspace at /work, as the run's own did; graded
    unconfined, the same criterion fails."""
    tasks = write_tasks(tmp_path / "tasks", {"jailed": {
        "command": "echo hi > out.txt", "isolation": "bwrap", "timeout": 20,
        "success_criteria": [{"type": "run_command", "command": 'test "$PWD" = /work'}]}})
    db = tmp_path / "ledger.db"
    ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "j")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    done = evalledger(tmp_path, db, "regrade", "j", "--name", "again")
    assert done.returncode == 0, done.stderr
    assert statuses(db, "j", "--grades", "again") == {"jailed": "SUCCESS"}


def test_the_summary_of_a_grade_set_is_the_same_live_replayed_and_from_a_snapshot(
    graded_run: tuple[Path, Path], tmp_path: Path,
) -> None:
    """On the real ledger (the property test draws them): a regrade's snapshot, a full
    replay and the fold fed live agree for every grade set."""
    _, db = graded_run
    strict = tmp_path / "strict.yaml"
    strict.write_text(json.dumps(STRICT), encoding="utf-8")
    evalledger(tmp_path, db, "regrade", "r", "--criteria", str(strict), "--name", "s")
    from evalledger.app._repository import load_fold

    with Ledger(db, read_only=True) as ledger:
        assert verify(ledger).ok
        replayed = fold(SummaryFold("r"), ledger.events("r"))
        snapshotted = load_fold(ledger, SummaryFold, "r")
    for grades in ("original", "s", None):
        assert replayed.summary(grades) == snapshotted.summary(grades)


def test_a_run_whose_task_files_are_gone_is_regraded_only_as_asked(
    graded_run: tuple[Path, Path],
) -> None:
    tasks, db = graded_run
    shutil.rmtree(tasks)
    refused = evalledger(db.parent, db, "regrade", "r")
    assert "task files do not load now" in assert_one_line_error(refused)
    assert "--recorded" in refused.stderr
    done = evalledger(db.parent, db, "regrade", "r", "--recorded")
    assert done.returncode == 0, done.stderr
    assert "grade set regrade-1 of run r (complete): 3 graded" in done.stdout


def test_a_forged_task_key_that_leads_out_of_the_artifacts_is_refused(
    graded_run: tuple[Path, Path],
) -> None:
    """A row appended by hand naming ``../..``: never hashed, copied or graded."""
    from evalledger.statuses import FinalStatus

    _, db = graded_run
    key = "../../../etc"
    with Ledger(db) as ledger:
        ledger.append([
            TaskStarted(run_id="r", task_key=key, task_id="etc", definition_hash="h",
                        definition={"command": "true", "success_criteria": [
                            {"type": "file_exists", "path": "passwd"}]}),
            TaskCompleted(run_id="r", task_key=key, final_status=FinalStatus.SUCCESS,
                          category=FinalStatus.SUCCESS.category, kept_hash="00" * 32)])
    done = evalledger(db.parent, db, "regrade", "r", "--recorded")
    # The run is signed: rows its own batch did not seal are no attempt of it at all.
    assert done.returncode == 0, done
    assert key not in done.stdout + "\n".join(done.err_lines)
    checked = evalledger(db.parent, db, "verify")
    assert checked.returncode == 1
    assert "task.started is not sealed by the run's key" in checked.stdout
    # Of a run recorded before signing (nothing to hold it to), such a row is refused.
    with Ledger(db) as ledger:
        opening = next(e for e in ledger.events("r") if isinstance(e, RunStarted))
        ledger.append([opening.model_copy(update={
            "run_id": "old", "event_id": "old-start", "public_key": None, "seq": None}),
            TaskStarted(run_id="old", task_key=key, task_id="etc", definition_hash="h",
                        definition={"command": "true", "success_criteria": [
                            {"type": "file_exists", "path": "passwd"}]}),
            TaskCompleted(run_id="old", task_key=key, final_status=FinalStatus.SUCCESS,
                          category=FinalStatus.SUCCESS.category, kept_hash="00" * 32),
            RunFinished(run_id="old", status=RunStatus.COMPLETED)])
    done = evalledger(db.parent, db, "regrade", "old", "--recorded")
    assert done.returncode == 1
    assert f"refused {key}: its task key is no folder name under the run's artifacts" in (
        done.err_lines)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_what_grading_cannot_change_stays_and_what_the_agent_planted_does_not_veto_it(
    tmp_path: Path,
) -> None:
    """A command its timeout stopped stays TIMEOUT under any criteria (every criterion
    of it was "not run": that proves nothing of the command); a FIFO or socket the
    agent left is not copied, and does not stop its attempt from being graded."""
    tasks = write_tasks(tmp_path / "tasks", {
        "slow": {"command": "sleep 30", "timeout": 1,
                 "success_criteria": [{"type": "run_command", "command": "true"}]},
        "planted": {"command": "mkfifo pipe; echo hello > out.txt", "timeout": 20,
                    "success_criteria": [{"type": "file_exists", "path": "out.txt"}]}})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "t")
    assert statuses(db, "t") == {"slow": "TIMEOUT", "planted": "SUCCESS"}
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(json.dumps([{"type": "output_contains", "excludes": ["x"]}]))
    done = evalledger(tmp_path, db, "regrade", "t", "--criteria", str(lenient))
    assert done.returncode == 0, done.stderr
    assert statuses(db, "t") == {"slow": "TIMEOUT", "planted": "SUCCESS"}
    graded = {g.task_key: g for g in of_type(events(db, "t"), "task.graded")}
    assert [c.passed for c in graded["default/slow/00"].criteria] == [True]


@pytest.mark.parametrize("isolation", ["none", "bwrap"])
def test_graders_write_in_a_copy_and_the_kept_workspace_is_what_the_attempt_left(
    tmp_path: Path, isolation: str, request: pytest.FixtureRequest,
) -> None:
    """A run_command that rewrites what it grades (a planted conftest.py restoring the
    tests, say) changes nothing kept: the artifacts, their hash and every regrade see
    what the attempt left."""
    if isolation == "bwrap":
        request.getfixturevalue("bwrap")
    tasks = write_tasks(tmp_path / "tasks", {"fix": {
        "command": "echo bad > out.txt", "timeout": 20, "isolation": isolation,
        "success_criteria": [
            {"type": "file_contains", "path": "out.txt", "includes": ["bad"]},
            {"type": "run_command", "command": "echo good > out.txt; grep -q good out.txt"}]}})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "k")
    assert statuses(db, "k") == {"fix": "SUCCESS"}
    kept = tmp_path / "runs" / "k" / "artifacts" / "default" / "fix" / "00" / "out.txt"
    assert kept.read_text() == "bad\n"
    done = evalledger(tmp_path, db, "regrade", "k", "--recorded")
    assert "(complete): 1 graded, 0 refused" in done.stdout, done.stderr
    assert kept.read_text() == "bad\n"
