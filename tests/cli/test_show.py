"""What ``run``, ``show`` and run.md say about a run a person reads: the line of an error
that matters (never cut at a fixed width, never a literal ``\\n``), the task files that
were skipped, `--ledger` after the command, and one word for a run whose process is gone.

A real `evalledger run` of real task files (one fails with a long traceback, one file
is broken), then real `show`, `runs` and `report` processes, in a pipe and in a terminal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalledger.hosts import host_info
from evalledger.ledger import Ledger, RunStarted, TaskStarted

from .helpers import COMMAND, PATIENCE, _env, write_task
from .terminal import in_terminal

# A check whose traceback runs far past 200 characters before the line that matters.
CHECK = """
def add(a, b):
    return a + b

def check(depth):
    if depth:
        return check(depth - 1)
    assert add(2, 3) == 6, "add(2, 3) == 6"

check(12)
"""
LAST_LINE = "AssertionError: add(2, 3) == 6"
FAILING = "default/adds/00"


@dataclass
class Made:
    cwd: Path
    db: Path
    run: subprocess.CompletedProcess[str]


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=3 * PATIENCE, check=False)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    cwd = tmp_path_factory.mktemp("show")
    write_task(cwd / "tasks" / "adds.yaml", "true", criteria=[
        {"type": "run_command", "command": [sys.executable, "-c", CHECK]}])
    write_task(cwd / "tasks" / "fine.yaml", "true")
    (cwd / "tasks" / "broken.yaml").write_text("command: [unclosed\n", encoding="utf-8")
    db = cwd / "l.db"
    run = cli(cwd, "--ledger", str(db), "run", "tasks", "--run-id", "r1")
    assert run.returncode == 1, run.stderr
    return Made(cwd, db, run)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_run_through_a_pipe_prints_the_errors_digest(made: Made) -> None:
    """A task's line says what failed in one line, as a terminal does (#49): the whole
    message is in the ledger, `show --json` and the reports."""
    with Ledger(made.db, read_only=True) as ledger:
        _, [(message,)] = ledger.query(
            "SELECT error_message FROM task_results WHERE task_key = ?", [FAILING])
    assert len(message) > 200 and message.rstrip().endswith(LAST_LINE)  # cut, it was lost
    [line] = [line for line in made.run.stdout.splitlines() if FAILING in line]
    assert line.rstrip().endswith(f"run_command \u2717 {LAST_LINE}"), line
    assert "\\n" not in line and "Traceback" not in line, line


def test_show_through_a_pipe_prints_the_whole_error(made: Made) -> None:
    shown = cli(made.cwd, "--ledger", str(made.db), "show", "r1")
    assert shown.returncode == 0, shown.stderr
    [row] = [line.split("\t") for line in shown.stdout.splitlines() if line.startswith(FAILING)]
    assert row[-1].startswith("run_command: exit code 1: Traceback") and row[-1].endswith(
        LAST_LINE), row


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_show_in_a_terminal_prints_the_line_that_matters(made: Made) -> None:
    code, lines = in_terminal(made.cwd, "--ledger", str(made.db), "show", "r1", columns=200)
    assert code == 0, lines
    text = "\n".join(lines)
    assert LAST_LINE in text and "\\n" not in text, text
    assert "run_command ✗ " + LAST_LINE in text  # the line that says what failed
    full = "\n".join(in_terminal(made.cwd, "--ledger", str(made.db), "show", "r1",
                                 "--full-errors", columns=200)[1])
    # Below the table, the message whole, its lines as they were.
    assert f'\n  File "<string>", line 8, in check\n{LAST_LINE}\n' in full, full


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_run_md_has_the_last_line_and_no_literal_newline(made: Made) -> None:
    md = (made.cwd / "runs" / "r1" / "run.md").read_text(encoding="utf-8")
    [row] = [line for line in md.splitlines() if line.startswith(f"| {FAILING} ")]
    assert row.endswith(f"| run_command ✗ {LAST_LINE} |"), row
    assert "\\n" not in md
    # The whole traceback, as it was, below the table.
    assert '  File "<string>", line 8, in check' in md.split("## Errors in full", 1)[1]


def test_show_names_the_skipped_task_files(made: Made) -> None:
    broken = f"skipped {made.cwd / 'tasks' / 'broken.yaml'}: invalid YAML"
    assert broken in made.run.stderr  # as `run` says it
    shown = cli(made.cwd, "--ledger", str(made.db), "show", "r1")
    assert "; 1 task file(s) skipped;" in shown.stdout.splitlines()[0], shown.stdout
    [said] = [line for line in shown.stderr.splitlines() if line.startswith("skipped ")]
    assert said.startswith(broken), shown.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_ledger_after_the_command_is_the_ledger_before_it(made: Made) -> None:
    before = cli(made.cwd, "--ledger", str(made.db), "show", "r1", "--json")
    after = cli(made.cwd, "show", "--ledger", str(made.db), "r1", "--json")
    assert after.returncode == 0, after.stderr
    assert after.stdout == before.stdout
    # And for every command that reads a ledger: the option is the same one.
    for args in (["runs"], ["events", "r1"], ["verify"], ["report", "r1"]):
        moved = cli(made.cwd, *args, "--ledger", str(made.db))
        assert moved.returncode == 0, (args, moved.stderr)
        assert moved.stdout == cli(made.cwd, "--ledger", str(made.db), *args).stdout, args


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_run_whose_process_is_gone_is_cut_off_in_show_runs_and_report(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        ledger.append([
            RunStarted(run_id="killed", planned=["default/t/00"],
                       host={**host_info(), "pid": gone.pid}),
            TaskStarted(run_id="killed", task_key="default/t/00", task_id="t"),
        ])
    show = cli(tmp_path, "--ledger", str(db), "show", "killed")
    assert show.stdout.startswith("run killed cut off: "), show.stdout
    runs = cli(tmp_path, "--ledger", str(db), "runs")
    assert runs.stdout.splitlines()[1].split("\t")[4] == "cut off", runs.stdout
    report = cli(tmp_path, "--ledger", str(db), "report", "killed")
    assert "- Status: **cut off**" in report.stdout, report.stdout
    # run.json keeps the ledger's word, byte for byte as `run` would write it.
    as_json = cli(tmp_path, "--ledger", str(db), "report", "killed", "--format", "json")
    assert json.loads(as_json.stdout)["status"] == "running"


# -- a run too long to print -------------------------------------------------------------------


def _big_run(db: Path, tasks: int, *, finished: bool = True) -> list[str]:
    """A run of ``tasks`` keys (every third FAILURE, the rest SUCCESS), snapshotted as a
    finished run is; its keys in task order."""
    from evalledger.app._repository import write_snapshot
    from evalledger.ledger import RunFinished, TaskCompleted
    from evalledger.statuses import FinalStatus, RunStatus

    keys = [f"default/t{i:03d}/00" for i in range(tasks)]
    events: list = [RunStarted(run_id="big", planned=keys)]
    for i, key in enumerate(keys):
        status = FinalStatus.FAILURE if i % 3 == 0 else FinalStatus.SUCCESS
        events += [TaskStarted(run_id="big", task_key=key, task_id=f"t{i:03d}"),
                   TaskCompleted(run_id="big", task_key=key, final_status=status,
                                 category=status.category, exit_code=0,
                                 error_message="wrong answer" if i % 3 == 0 else None)]
    if finished:
        events.append(RunFinished(run_id="big", status=RunStatus.COMPLETED))
    with Ledger(db) as ledger:
        ledger.append(events)
        if finished:
            write_snapshot(ledger, "big")
    return keys


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("finished", [True, False], ids=["from the snapshot", "folded"])
def test_show_prints_a_page_of_a_long_run_and_says_so(tmp_path: Path, finished: bool) -> None:
    db = tmp_path / "l.db"
    keys = _big_run(db, 30, finished=finished)

    page = cli(tmp_path, "--ledger", str(db), "show", "big", "--limit", "7")
    whole = cli(tmp_path, "--ledger", str(db), "show", "big", "--limit", "0")

    assert page.returncode == whole.returncode == 0, (page, whole)
    rows = [line.split("\t")[0] for line in page.stdout.splitlines() if line.startswith("default/")]
    assert rows == keys[:7]
    assert [line.split("\t")[0] for line in whole.stdout.splitlines()
            if line.startswith("default/")] == keys
    # What is said of the whole run is the same: counts, cost, what confined its tasks.
    assert page.stdout.splitlines()[0] == whole.stdout.splitlines()[0]
    assert "isolation: none (30 tasks)" in page.stderr and "isolation: none (30 tasks)" in (
        whole.stderr)
    assert "7 of 30 task rows shown (--limit 0: all of them)" in page.stderr
    assert "task rows shown" not in whole.stderr


def test_pass_at_k_says_which_tasks_it_left_out(tmp_path: Path) -> None:
    """D5 (#47): an infrastructure failure dropped a replicate of t1, so pass@3 is over
    t0 alone; without saying so it read as pass@k falling as k rose."""
    from evalledger.ledger import RunFinished
    from evalledger.statuses import FinalStatus, RunStatus

    from ..projections.builders import completed, started
    from .helpers import evalledger

    outcomes = {"t0": [FinalStatus.SUCCESS] * 3,
                "t1": [FinalStatus.FAILURE, FinalStatus.SUCCESS, FinalStatus.ERROR]}
    keys = [f"default/{t}/{i:02d}" for t in outcomes for i in range(3)]
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        events = [RunStarted(run_id="r", planned=keys)]
        for k in keys:
            status = outcomes[k.split("/")[1]][int(k.split("/")[2])]
            extra = {"failure_class": "infra"} if status is FinalStatus.ERROR else {}
            events += [started(k, run_id="r"), completed(k, status, run_id="r", **extra)]
        ledger.append([*events, RunFinished(run_id="r", status=RunStatus.COMPLETED)])
    shown = evalledger(tmp_path, db, "show", "r")
    assert ("pass@3 of default leaves out 1 task(s) with fewer than 3 graded replicates: t1"
            in shown.stdout), shown.stdout


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_wide_variants_table_is_stacked_on_a_narrow_terminal(tmp_path: Path) -> None:
    """#49: on a 100-column terminal the 18 columns of the variants table (pass@k,
    pass^k) were squeezed to cells reading ``go…`` and ``$0…``; there it is turned, a
    column per variant and a line per figure, every value whole, and it is one row per
    variant where it fits."""
    db = _variants_run(tmp_path, ["gold-standard-prompt", "terse"])
    code, narrow = in_terminal(tmp_path, "--ledger", str(db), "show", "r", "--limit", "1",
                               columns=100)
    assert code == 0, narrow
    table = narrow[:narrow.index(next(ln for ln in narrow if "status" in ln))]
    assert "\u2026" not in "\n".join(table), table
    [head] = [line for line in table if line.startswith("variant ")]
    assert "gold-standard-prompt" in head and "terse" in head, table
    [rate] = [line for line in table if line.startswith("pass@3 [95%]")]
    assert rate.count("100.0% [100.0%, 100.0%]") == 2, rate  # both variants, whole
    code, wide = in_terminal(tmp_path, "--ledger", str(db), "show", "r", "--limit", "1",
                             columns=400)
    assert code == 0 and sum("pass^3" in line for line in wide) == 1, wide  # one header


def test_variants_too_many_to_turn_are_shown_one_after_another(tmp_path: Path) -> None:
    """Eight variants do not fit 100 columns even as columns: each is a block of its
    own, a line per figure."""
    names = [f"variant-number-{i}" for i in range(8)]
    code, lines = in_terminal(tmp_path, "--ledger", str(_variants_run(tmp_path, names)),
                              "show", "r", "--limit", "1", columns=100)
    assert code == 0, lines
    table = lines[:lines.index(next(ln for ln in lines if "status" in ln))]
    assert "\u2026" not in "\n".join(table), table
    heads = [line for line in table if line.startswith("variant ")]
    assert [h.split()[-1] for h in heads] == names, table
    assert sum(line.startswith("pass@3 [95%]") for line in table) == 8


def _variants_run(tmp_path: Path, variants: list[str]) -> Path:
    """A finished run ``r`` of two tasks of three replicates in each variant, one
    replicate of three failing."""
    from evalledger.ledger import RunFinished
    from evalledger.statuses import FinalStatus, RunStatus

    from ..projections.builders import completed, started

    keys = [f"{variant}/t{t}/{i:02d}" for variant in variants for t in range(2)
            for i in range(3)]
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        events: list = [RunStarted(run_id="r", planned=keys)]
        for n, k in enumerate(keys):
            status = FinalStatus.SUCCESS if n % 3 else FinalStatus.FAILURE
            events += [started(k, run_id="r", variant_id=k.split("/")[0]),
                       completed(k, status, run_id="r")]
        ledger.append([*events, RunFinished(run_id="r", status=RunStatus.COMPLETED)])
    return db


def test_an_agents_usage_read_as_native_is_named_unread_not_stopped_mid_turn(
    tmp_path: Path,
) -> None:
    """A native task whose command printed Claude Code's result (its spend) ended well:
    the cost is a floor because its stream was not read as Claude Code's, and the line
    says so and how to have it read, not that an attempt stopped mid-turn (issue #49)."""
    from tests.agents.transcripts.claude_code import RESULT

    from .helpers import evalledger

    said = tmp_path / "said.jsonl"
    said.write_text(json.dumps(RESULT) + "\n", encoding="utf-8")
    write_task(tmp_path / "tasks" / "agent.yaml", f"cat {said}")
    db = tmp_path / "l.db"
    ran = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"))
    assert ran.returncode == 0, ran
    show = evalledger(tmp_path, db, "show", "latest")
    floor = [line for line in show.stdout.splitlines() if line.startswith("cost is a floor")]
    assert floor == ["cost is a floor: spend unread: 1 task printed claude-code usage under "
                     "stream_format: native (name it: stream_format: claude-code)"], show.stdout
    assert "mid-turn" not in show.stdout + ran.stdout
    summary = json.loads(evalledger(tmp_path, db, "report", "latest", "--format",
                                    "json").stdout)
    assert (summary["spend_unread"], summary["tasks_cost_incomplete"]) == ({"claude-code": 1}, 1)


def test_a_crashed_agent_reads_as_what_it_said_last_not_its_exit_code(tmp_path: Path) -> None:
    """Its stderr's last error line is the exit_code criterion's detail and the task's
    digest; the bar's kind says the agent crashed."""
    from evalledger.projections import failure_kinds
    from tests.cli.helpers import evalledger

    crash = ("import sys; print('working'); sys.stderr.write('Traceback (most recent call "
             "last):\\n  File \"agent.py\", line 9\\nopenai.APIConnectionError: "
             "Connection error.\\n'); sys.exit(1)")
    write_task(tmp_path / "tasks" / "crash.yaml", [sys.executable, "-c", crash],
               criteria=[{"type": "exit_code", "equals": 0},
                         {"type": "file_exists", "path": "answer.txt"}])
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", str(tmp_path / "tasks")).returncode == 1
    code, lines = in_terminal(tmp_path, "--ledger", str(db), "show", "latest", columns=200)
    assert code == 0
    assert any("exit_code \u2717 openai.APIConnectionError: Connection error. (+1 more)"
               in line for line in lines), lines
    (row,) = json.loads(evalledger(tmp_path, db, "show", "latest", "--json").stdout)["tasks"]
    assert failure_kinds(row["final_status"], row["error_message"],
                         failure_class=row["failure_class"]) == ("agent crashed", "file_exists")
