"""``run_batch`` end to end: real subprocesses, a real ledger file, real cancellation.

Every command is a small Python script written to ``tmp_path`` and run as
``[sys.executable, script, ...]``. What a test checks is what the ledger recorded
(and, for process handling, what ``/proc`` says), never mocks.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from evalledger.executor import BatchConfig, Callbacks, run_batch
from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskCompleted,
    TaskEmitted,
    TaskInterrupted,
    TaskOutput,
    TaskSkipped,
    TaskStarted,
    verify,
)
from evalledger.options import RunOptions
from evalledger.pricing import DEFAULT_RATES
from evalledger.statuses import Category, FinalStatus, RunStatus
from evalledger.suite import ResolvedTask, Skipped
from tests.processes import still_alive
from tests.waiting import PATIENCE

from .batches import RUN, config, events, make_task, of_type, py, run, script

OK = "import sys\nprint('done')\n"

# argv: where to write "start end" (wall-clock times), a pause, and optionally how many
# tasks must have started (a file each in the same folder) before this one may end:
# then the tasks really overlap, however the machine schedules them.
TIMES = """\
import os, sys, time
out, pause = sys.argv[1], float(sys.argv[2])
together = int(sys.argv[3]) if len(sys.argv) > 3 else 0
start = time.time()
open(out + ".started", "w").close()
folder = os.path.dirname(out)
give_up = time.monotonic() + 30
while sum(n.endswith(".started") for n in os.listdir(folder)) < together:
    if time.monotonic() > give_up:
        break  # the batch never ran them together: the test fails on the overlap
    time.sleep(0.002)
time.sleep(pause)
end = time.time()
with open(out + ".tmp", "w") as f:
    f.write(f"{start} {end}")
os.replace(out + ".tmp", out)
"""

# argv: folder for pid files, a name. Records its own pid and a grandchild's (same
# process group), then sleeps. With IGNORE_TERM set, both ignore SIGTERM, and note
# each one they get in "<pid file>.term".
SLEEPER = """\
import os, signal, subprocess, sys, time
folder, name = sys.argv[1], sys.argv[2]
def record(path, pid):
    with open(path + ".tmp", "w") as f:
        f.write(str(pid))
    os.replace(path + ".tmp", path)
def ignore_term(path):
    signal.signal(signal.SIGTERM, lambda *_: open(path + ".term", "a").close())
if os.environ.get("IGNORE_TERM"):
    ignore_term(os.path.join(folder, name + ".child"))
child = '''
import os, signal, sys, time
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, lambda *_: open(sys.argv[1] + ".term", "a").close())
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
'''
record(os.path.join(folder, name + ".child"), os.getpid())
subprocess.Popen([sys.executable, "-c", child, os.path.join(folder, name + ".grandchild")])
time.sleep(60)
"""


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    points = [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals]
    points.sort(key=lambda p: (p[0], p[1]))  # an end at the same instant goes first
    best = current = 0
    for _, delta in points:
        current += delta
        best = max(best, current)
    return best


def read_intervals(folder: Path) -> list[tuple[float, float]]:
    out = []
    for path in sorted(folder.iterdir()):
        if path.suffix in (".tmp", ".started"):
            continue
        start, end = map(float, path.read_text().split())
        out.append((start, end))
    return out


# -- concurrency ---------------------------------------------------------------------------


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_max_parallel_bounds_the_processes_running_at_once(
    tmp_path: Path, ledger: Ledger
) -> None:
    times = tmp_path / "times"
    times.mkdir()
    timer = script(tmp_path, "timer", TIMES)
    # The first four (dispatched first) end only once all four have started: if the
    # batch runs four at once, four overlap; the rest come and go as slots free up.
    tasks = [make_task(f"t{i:02d}", py(timer, times / f"t{i:02d}", 0.02, 4 if i < 4 else 0))
             for i in range(40)]

    result = run(ledger, tasks, config(tmp_path, max_parallel=4))

    assert result.status == RunStatus.COMPLETED
    assert len(result.completed) == 40
    assert {c.final_status for c in result.completed} == {FinalStatus.SUCCESS}
    intervals = read_intervals(times)
    assert len(intervals) == 40
    assert max_overlap(intervals) == 4
    assert len(of_type(events(ledger), TaskCompleted)) == 40
    assert verify(ledger).ok


def test_max_parallel_one_runs_strictly_one_at_a_time(tmp_path: Path, ledger: Ledger) -> None:
    times = tmp_path / "times"
    times.mkdir()
    timer = script(tmp_path, "timer", TIMES)
    tasks = [make_task(f"t{i}", py(timer, times / f"t{i}", 0.02)) for i in range(10)]

    result = run(ledger, tasks, config(tmp_path, max_parallel=1))

    assert [c.task_key for c in result.completed] == [t.task_key for t in tasks]
    intervals = sorted(read_intervals(times))
    assert len(intervals) == 10
    assert max_overlap(intervals) == 1
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert end <= start


def test_the_kept_workspaces_are_their_owners_alone(tmp_path: Path, ledger: Ledger) -> None:
    """The artifacts folder was 755: any local user could read (and run) what the
    agents left; a folder of mode 700 lets no one but the runner's user in."""
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o755)
    run(ledger, [make_task("t", [sys.executable, "-c", "open('kept', 'w').write('x')"])],
        config(tmp_path))
    artifacts = out / RUN / "artifacts"
    assert (artifacts / "default" / "t" / "00" / "kept").read_text() == "x"
    assert artifacts.stat().st_mode & 0o777 == 0o700


# -- the run's own events ------------------------------------------------------------------


def test_run_started_records_plan_fingerprint_host_and_options(
    tmp_path: Path, ledger: Ledger
) -> None:
    ok = script(tmp_path, "ok", OK)
    tasks = [make_task(n, py(ok)) for n in ("a", "b", "c")]
    cfg = config(tmp_path, max_parallel=3, experiment_id="exp-1", paths=["suite"],
                 tags=["smoke"])

    run(ledger, tasks, cfg)

    evs = events(ledger)
    started = of_type(evs, RunStarted)
    assert len(started) == 1
    assert evs[0] == started[0]
    payload = started[0]
    assert payload.planned == [t.task_key for t in tasks]
    assert payload.fingerprint.tasks == {t.task_key: t.definition_hash for t in tasks}
    assert payload.fingerprint.options == cfg.options.model_dump(mode="json")
    assert payload.config == cfg.options
    assert (payload.config.paths, payload.config.tags) == (["suite"], ["smoke"])
    assert payload.max_parallel == 3
    assert payload.experiment_id == "exp-1"
    assert payload.host["pid"] == os.getpid()
    assert payload.host["python"] == sys.version.split()[0]
    for key in ("hostname", "platform", "evalledger", "cwd", "user"):
        assert key in payload.host
    finished = evs[-1]
    assert isinstance(finished, RunFinished)
    assert finished.status == RunStatus.COMPLETED
    assert len(of_type(evs, RunFinished)) == 1
    assert [e.seq for e in evs] == sorted(e.seq for e in evs)


def test_task_started_carries_the_resolved_definition(tmp_path: Path, ledger: Ledger) -> None:
    ok = script(tmp_path, "ok", OK)
    task = make_task("a", py(ok), tags=["smoke", "x"], model="m1")

    run(ledger, [task], config(tmp_path))

    [started] = of_type(events(ledger), TaskStarted)
    assert started.task_key == "default/a/00"
    assert started.task_id == "a"
    assert started.variant_id == "default"
    assert started.replicate_index == 0
    assert started.attempt == 1
    assert started.tags == ["smoke", "x"]
    assert started.definition == task.definition()
    assert started.definition_hash == task.definition_hash


def test_skipped_files_are_recorded_after_run_started(tmp_path: Path, ledger: Ledger) -> None:
    ok = script(tmp_path, "ok", OK)
    skipped = [Skipped("suite/bad.yaml", "unknown key 'bogus'"),
               Skipped("suite/worse.yaml", "invalid YAML: oops")]

    run(ledger, [make_task("a", py(ok))], config(tmp_path), skipped=skipped)

    evs = events(ledger)
    assert isinstance(evs[0], RunStarted)
    recorded = of_type(evs, TaskSkipped)
    assert [(s.path, s.reason) for s in recorded] == [(s.path, s.reason) for s in skipped]
    assert all(s.run_id == RUN and s.task_key is None for s in recorded)
    assert all(s.seq > evs[0].seq for s in recorded)
    assert isinstance(evs[-1], RunFinished)


def test_an_empty_batch_still_records_start_and_finish(tmp_path: Path, ledger: Ledger) -> None:
    result = run(ledger, [], config(tmp_path), skipped=[Skipped("x.yaml", "broken")])

    assert result.status == RunStatus.COMPLETED
    assert [e.type for e in events(ledger)] == ["run.started", "task.skipped", "run.finished"]


# -- statuses ------------------------------------------------------------------------------


def test_failing_and_broken_tasks_do_not_stop_the_others(tmp_path: Path, ledger: Ledger) -> None:
    ok = script(tmp_path, "ok", OK)
    fail = script(tmp_path, "fail", "import sys\nprint('nope')\nsys.exit(3)\n")
    crash = script(tmp_path, "crash", "raise SystemExit('boom')\n")
    tasks = [
        make_task("ok1", py(ok)),
        make_task("fails", py(fail)),
        make_task("missing-binary", [str(tmp_path / "no-such-program")]),
        make_task("no-workdir", py(ok), workdir=str(tmp_path / "no-such-folder")),
        make_task("crashes", py(crash)),
        make_task("ok2", py(ok)),
    ]

    result = run(ledger, tasks, config(tmp_path, max_parallel=2))

    assert result.status == RunStatus.COMPLETED
    by_key = {c.task_key: c for c in of_type(events(ledger), TaskCompleted)}
    assert set(by_key) == {t.task_key for t in tasks}
    status = {k.split("/")[1]: (c.final_status, c.category) for k, c in by_key.items()}
    assert status == {
        "ok1": (FinalStatus.SUCCESS, Category.SUCCEEDED),
        "ok2": (FinalStatus.SUCCESS, Category.SUCCEEDED),
        "fails": (FinalStatus.FAILURE, Category.FAILED),
        "crashes": (FinalStatus.FAILURE, Category.FAILED),
        "missing-binary": (FinalStatus.ERROR, Category.ERROR),
        "no-workdir": (FinalStatus.BUILD_FAILED, Category.ERROR),
    }
    assert by_key["default/fails/00"].exit_code == 3
    assert by_key["default/missing-binary/00"].error_message
    assert "no-such-program" in by_key["default/missing-binary/00"].error_message
    assert "no-such-folder" in by_key["default/no-workdir/00"].error_message
    assert not of_type(events(ledger), TaskInterrupted)
    assert verify(ledger).ok


# -- callbacks -----------------------------------------------------------------------------


def test_task_completed_is_durable_before_the_callback_sees_it(
    tmp_path: Path, ledger: Ledger, db_path: Path
) -> None:
    ok = script(tmp_path, "ok", OK)
    tasks = [make_task(f"t{i}", py(ok)) for i in range(6)]
    seen: dict[str, bool] = {}

    def on_task_complete(completed: TaskCompleted) -> None:
        # Another connection: only committed rows are visible to it.
        with Ledger(db_path, read_only=True) as reader:
            stored = list(reader.events(RUN, task_key=completed.task_key,
                                        types=["task.completed"]))
        seen[completed.task_key] = [e.event_id for e in stored] == [completed.event_id]

    result = run(ledger, tasks, config(tmp_path, max_parallel=3),
                 Callbacks(on_task_complete=on_task_complete))

    assert len(result.completed) == 6
    assert seen == {t.task_key: True for t in tasks}


def test_callbacks_get_counts_tasks_and_output(tmp_path: Path, ledger: Ledger) -> None:
    talker = script(
        tmp_path, "talker",
        "import json, sys\n"
        "print('plain line')\n"
        "print(json.dumps({'type': 'note', 'k': 1}))\n"
        "print(json.dumps({'type': 'usage', 'model': 'm', 'input_tokens': 3}))\n"
        "print('to stderr', file=sys.stderr)\n",
    )
    tasks = [make_task(n, py(talker)) for n in ("a", "b")]
    batch_sizes: list[int] = []
    task_starts: list[ResolvedTask] = []
    completed: list[TaskCompleted] = []
    outputs: list[AnyEvent] = []

    run(ledger, tasks, config(tmp_path),
        Callbacks(on_batch_start=batch_sizes.append, on_task_start=task_starts.append,
                  on_task_complete=completed.append, on_output=outputs.append))

    assert batch_sizes == [2]
    assert task_starts == tasks
    assert sorted(c.task_key for c in completed) == [t.task_key for t in tasks]
    assert {type(e) for e in outputs} == {TaskOutput, TaskEmitted}
    for task in tasks:
        mine = [e for e in outputs if e.task_key == task.task_key]
        lines = {(e.stream, e.line) for e in mine if isinstance(e, TaskOutput)}
        assert lines == {("stdout", "plain line"), ("stderr", "to stderr")}
        data = [e.data for e in mine if isinstance(e, TaskEmitted)]
        assert {"type": "note", "k": 1} in data
    # Everything the callback saw is also in the ledger.
    stored = {e.event_id for e in events(ledger)}
    assert all(e.event_id in stored for e in outputs)


def test_callbacks_that_raise_are_logged_and_ignored(
    tmp_path: Path, ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    ok = script(tmp_path, "ok", OK)
    tasks = [make_task(f"t{i}", py(ok)) for i in range(4)]

    def boom(*_: object) -> None:
        raise RuntimeError("callback exploded")

    with caplog.at_level(logging.ERROR, logger="evalledger.executor"):
        result = run(ledger, tasks, config(tmp_path, max_parallel=2),
                     Callbacks(on_batch_start=boom, on_task_start=boom,
                               on_task_complete=boom, on_output=boom))

    assert result.status == RunStatus.COMPLETED
    assert len(result.completed) == 4
    assert {c.final_status for c in result.completed} == {FinalStatus.SUCCESS}
    evs = events(ledger)
    assert len(of_type(evs, TaskCompleted)) == 4
    assert evs[-1].type == "run.finished" and evs[-1].status == RunStatus.COMPLETED
    logged = [r for r in caplog.records if r.exc_info and "callback exploded" in str(r.exc_info[1])]
    # batch start, 4 task starts, 4 completions, and each task's "done" line.
    assert len(logged) >= 1 + 4 + 4 + 4
    assert verify(ledger).ok


# -- run-level budget ----------------------------------------------------------------------


def test_run_cost_budget_stops_dispatching(tmp_path: Path, ledger: Ledger) -> None:
    spender = script(
        tmp_path, "spender",
        "import json\nprint(json.dumps({'type': 'usage', 'model': 'm', 'input_tokens': 10,"
        " 'cost_usd': 1.0}))\n",
    )
    tasks = [make_task(f"t{i}", py(spender)) for i in range(5)]

    result = run(ledger, tasks, config(tmp_path, max_parallel=1, max_cost_usd=1.5))

    assert result.status == RunStatus.BUDGET_STOPPED
    evs = events(ledger)
    assert isinstance(evs[-1], RunFinished)
    assert evs[-1].status == RunStatus.BUDGET_STOPPED
    started = [e.task_key for e in of_type(evs, TaskStarted)]
    # 1.0 spent after the first task is under 1.5; 2.0 after the second is over.
    assert started == [t.task_key for t in tasks[:2]]
    assert [c.task_key for c in of_type(evs, TaskCompleted)] == started
    for task in tasks[2:]:
        assert not [e for e in evs if e.task_key == task.task_key]
    assert sum(c.cost_usd for c in result.completed) == pytest.approx(2.0)


def test_no_run_budget_runs_everything(tmp_path: Path, ledger: Ledger) -> None:
    spender = script(
        tmp_path, "spender",
        "import json\nprint(json.dumps({'type': 'usage', 'model': 'm', 'cost_usd': 1.0}))\n",
    )
    tasks = [make_task(f"t{i}", py(spender)) for i in range(3)]

    result = run(ledger, tasks, config(tmp_path, max_parallel=1, max_cost_usd=100.0))

    assert result.status == RunStatus.COMPLETED
    assert len(result.completed) == 3


# -- resume --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resume:
    """A resume as the batch reads it (``executor.Resume``), made by hand: the batch
    takes any object of that shape (``plan_resume``'s plan is the one the app hands it)."""

    skip: frozenset[str] = frozenset()
    attempts: Mapping[str, int] = field(default_factory=dict)
    drift_record: Mapping[str, Any] = field(default_factory=dict)
    spent_usd: float = 0.0
    boundary_seq: int | None = None
    added: tuple[str, ...] = ()
    rerun: tuple[str, ...] = ()
    rerun_failed: bool = False
    retry_errors: bool = False


def test_resume_records_run_resumed_and_runs_only_the_rest(
    tmp_path: Path, ledger: Ledger
) -> None:
    ok = script(tmp_path, "ok", OK)
    tasks = [make_task(n, py(ok)) for n in ("a", "b", "c")]
    run(ledger, tasks, config(tmp_path))
    first_seq = ledger.last_seq()
    a, b, c = (t.task_key for t in tasks)
    batch_sizes: list[int] = []

    result = run(
        ledger, tasks, config(tmp_path, max_parallel=2, timeout=99.0),
        Callbacks(on_batch_start=batch_sizes.append),
        resume=Resume(skip=frozenset({a, c}), attempts={b: 1}, drift_record={"changed": []}),
    )

    assert result.status == RunStatus.COMPLETED
    assert batch_sizes == [1]
    later = [e for e in ledger.events(RUN, after_seq=first_seq) if e.type != "run.snapshot"]
    assert len(of_type(events(ledger), RunStarted)) == 1
    resumed = later[0]
    assert isinstance(resumed, RunResumed)
    assert resumed.to_run == [b]
    assert resumed.max_parallel == 2
    assert resumed.drift == {"changed": []}
    assert resumed.fingerprint.tasks == {t.task_key: t.definition_hash for t in tasks}
    assert resumed.fingerprint.options["timeout"] == 99.0
    [started] = of_type(later, TaskStarted)
    [completed] = of_type(later, TaskCompleted)
    assert (started.task_key, started.attempt) == (b, 2)
    assert (completed.task_key, completed.attempt) == (b, 2)
    assert {e.task_key for e in later if e.task_key} == {b}
    assert isinstance(later[-1], RunFinished)
    assert later[-1].status == RunStatus.COMPLETED
    assert verify(ledger).ok


def test_resume_with_nothing_left_to_run(tmp_path: Path, ledger: Ledger) -> None:
    ok = script(tmp_path, "ok", OK)
    tasks = [make_task("a", py(ok))]
    run(ledger, tasks, config(tmp_path))
    first_seq = ledger.last_seq()

    result = run(ledger, tasks, config(tmp_path),
                 resume=Resume(skip=frozenset({tasks[0].task_key})))

    assert result.completed == []
    later = [e for e in ledger.events(RUN, after_seq=first_seq) if e.type != "run.snapshot"]
    assert [e.type for e in later] == ["run.resumed", "run.finished"]
    assert later[0].to_run == []


# -- cancellation --------------------------------------------------------------------------


def interrupted_keys(evs: Sequence[AnyEvent]) -> set[str]:
    return {e.task_key for e in of_type(evs, TaskInterrupted)}


def recorded_pids(folder: Path) -> dict[str, int]:
    return {
        p.name: int(p.read_text()) for p in folder.iterdir()
        if p.suffix in (".child", ".grandchild")
    }


def grandchildren(folder: Path) -> int:
    return sum(p.suffix == ".grandchild" for p in folder.iterdir())


async def cancel_when(
    scope: trio.CancelScope, ready: Callable[[], bool], *, limit: float = PATIENCE
) -> None:
    with trio.fail_after(limit):
        while not ready():
            await trio.sleep(0.01)
    scope.cancel()


def run_and_cancel(
    ledger: Ledger,
    tasks: Sequence[ResolvedTask],
    cfg: BatchConfig,
    ready: Callable[[], bool],
    callbacks: Callbacks | None = None,
) -> float:
    """Run the batch, cancel its scope from another task once ``ready()``; seconds taken."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as scope:
                nursery.start_soon(cancel_when, scope, ready)
                await run_batch(ledger, tasks, cfg, callbacks)
            assert scope.cancelled_caught

    began = time.monotonic()
    trio.run(main)
    return time.monotonic() - began


@pytest.fixture
def sleepers(tmp_path: Path) -> tuple[Path, list[ResolvedTask]]:
    """Six tasks that record their pid and a grandchild's, then sleep for a minute."""
    pids = tmp_path / "pids"
    pids.mkdir()
    sleeper = script(tmp_path, "sleeper", SLEEPER)
    return pids, [make_task(f"t{i}", py(sleeper, pids, f"t{i}")) for i in range(6)]


def test_cancelling_the_scope_ends_every_process_and_finishes_the_run(
    tmp_path: Path, ledger: Ledger, sleepers: tuple[Path, list[ResolvedTask]]
) -> None:
    pids, tasks = sleepers

    elapsed = run_and_cancel(ledger, tasks, config(tmp_path, max_parallel=3),
                             lambda: grandchildren(pids) >= 3)

    evs = events(ledger)
    started = [e for e in evs if isinstance(e, TaskStarted)]
    assert len(started) == 3  # the limit held: three running, three waiting
    assert not of_type(evs, TaskCompleted)  # nothing reached a final status
    for start in started:
        ends = [e for e in evs if e.task_key == start.task_key and e.seq > start.seq
                and isinstance(e, TaskCompleted | TaskInterrupted)]
        assert len(ends) == 1, start.task_key
        assert isinstance(ends[0], TaskInterrupted)
        assert ends[0].reason == "cancelled"
        assert ends[0].seq < evs[-1].seq  # before run.finished
    started_keys = {s.task_key for s in started}
    for task in tasks:
        if task.task_key not in started_keys:
            assert not [e for e in evs if e.task_key == task.task_key]
    assert isinstance(evs[-1], RunFinished)
    assert evs[-1].status == RunStatus.INTERRUPTED
    assert len(of_type(evs, RunFinished)) == 1
    recorded = recorded_pids(pids)
    assert len(recorded) == 6  # 3 children, 3 grandchildren
    assert still_alive(list(recorded.values()), PATIENCE) == []
    assert elapsed < PATIENCE  # not the minute the sleepers sleep
    assert verify(ledger).ok


def test_move_on_after_interrupts_a_running_batch(
    tmp_path: Path, ledger: Ledger, sleepers: tuple[Path, list[ResolvedTask]]
) -> None:
    pids, tasks = sleepers

    async def expire_when_running(scope: trio.CancelScope) -> None:
        # The deadline is moved up to "now" once the three tasks run their grandchildren.
        with trio.fail_after(PATIENCE):
            while grandchildren(pids) < 3:
                await trio.sleep(0.01)
        scope.deadline = trio.current_time()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.move_on_after(PATIENCE) as scope:
                nursery.start_soon(expire_when_running, scope)
                await run_batch(ledger, tasks[:3], config(tmp_path, max_parallel=3))
            assert scope.cancelled_caught

    trio.run(main)

    evs = events(ledger)
    assert len(of_type(evs, TaskStarted)) == 3
    assert interrupted_keys(evs) == {t.task_key for t in tasks[:3]}
    assert not of_type(evs, TaskCompleted)
    assert isinstance(evs[-1], RunFinished)
    assert evs[-1].status == RunStatus.INTERRUPTED
    assert len(recorded_pids(pids)) == 6
    assert still_alive(list(recorded_pids(pids).values()), PATIENCE) == []
    assert verify(ledger).ok


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch,
    sleepers: tuple[Path, list[ResolvedTask]],
) -> None:
    monkeypatch.setenv("IGNORE_TERM", "1")
    pids, tasks = sleepers
    marks: dict[str, float] = {}

    def ready() -> bool:
        if grandchildren(pids) < 1:
            return False
        marks["cancel"] = time.monotonic()
        return True

    elapsed = run_and_cancel(ledger, tasks[:1], config(tmp_path, kill_grace=0.3), ready)

    evs = events(ledger)
    assert evs[-1].status == RunStatus.INTERRUPTED
    assert interrupted_keys(evs) == {tasks[0].task_key}
    assert not of_type(evs, TaskCompleted)
    recorded = recorded_pids(pids)
    assert len(recorded) == 2
    assert still_alive(list(recorded.values()), PATIENCE) == []
    # SIGKILL came once the grace (0.3 s) was over, not after their minute of sleep.
    assert time.monotonic() - marks["cancel"] >= 0.3
    assert elapsed < PATIENCE


# Notes when SIGTERM came and, until SIGKILL ends it, the time every 20 ms: the last
# note is when it died, give or take one beat.
TERM_DEAF = """
import os, signal, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: (folder / "term").write_text(repr(time.monotonic())))
(folder / "ready").write_text(str(os.getpid()))
while True:
    (folder / "beat.tmp").write_text(repr(time.monotonic()))
    os.replace(folder / "beat.tmp", folder / "beat")
    time.sleep(0.02)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_kill_grace_of_the_options_is_the_one_waited(
    tmp_path: Path, ledger: Ledger
) -> None:
    """Regression: BatchConfig had a kill_grace of its own (default 2.0) beside the
    options': a library caller setting RunOptions(kill_grace=5.0) had 5.0 recorded in
    run.started and SIGKILL sent after 2 s. The options are now the only source."""
    folder = tmp_path / "notes"
    folder.mkdir()
    task = make_task("deaf", py(script(tmp_path, "deaf", TERM_DEAF), folder), timeout=600)
    cfg = BatchConfig(run_id=RUN, options=RunOptions(out=str(tmp_path / "out"),
                                                     kill_grace=5.0))
    assert cfg.kill_grace == 5.0
    run_and_cancel(ledger, [task], cfg, lambda: (folder / "ready").exists())

    [started] = of_type(events(ledger), RunStarted)
    assert started.config.kill_grace == 5.0
    pid = int((folder / "ready").read_text())
    assert still_alive([pid], PATIENCE) == []
    termed = float((folder / "term").read_text())
    last_beat = float((folder / "beat").read_text())
    # Alive through the grace period after SIGTERM: far past the old 2 s (the margin is
    # for a loaded machine, where the handler and the beats run late), never beyond it.
    assert 3.5 < last_beat - termed < 5.5


def test_the_pricing_file_of_the_options_prices_the_batch(
    tmp_path: Path, ledger: Ledger
) -> None:
    """Regression, as for kill_grace: RunOptions(pricing=FILE) was recorded, but only the
    CLI read the file; a library caller's batch priced with the built-in card alone."""
    prices = tmp_path / "prices.yaml"
    prices.write_text("house-model: {input: 2, output: 8}\n", encoding="utf-8")
    line = json.dumps({"type": "usage", "model": "house-model", "input_tokens": 500_000,
                       "output_tokens": 125_000})
    task = make_task("priced", [sys.executable, "-c", f"print({line!r})"])
    cfg = config(tmp_path, pricing=str(prices))
    result = run(ledger, [task], cfg)
    [done] = result.completed
    assert done.cost_usd == pytest.approx(2.0) and done.cost_complete
    # An explicit card still wins; a file that cannot be read fails at once.
    assert config(tmp_path, pricing=str(prices), rates=DEFAULT_RATES).rate_card is DEFAULT_RATES
    with pytest.raises(ValueError, match="pricing file"):
        config(tmp_path, pricing=str(tmp_path / "missing.yaml"))


def test_kill_now_after_cancel_skips_the_grace_period(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch,
    sleepers: tuple[Path, list[ResolvedTask]],
) -> None:
    monkeypatch.setenv("IGNORE_TERM", "1")
    pids, tasks = sleepers
    kill_now = trio.Event()
    marks: dict[str, float] = {}

    async def first_then_second_ctrl_c(scope: trio.CancelScope) -> None:
        with trio.fail_after(PATIENCE):
            while grandchildren(pids) < 2:
                await trio.sleep(0.01)
        scope.cancel()  # the first Ctrl-C: SIGTERM, which all four note and ignore
        with trio.fail_after(PATIENCE):
            while len(list(pids.glob("*.term"))) < 4:
                await trio.sleep(0.01)
        marks["kill"] = time.monotonic()
        kill_now.set()  # the second Ctrl-C, in the middle of the grace period

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as scope:
                nursery.start_soon(first_then_second_ctrl_c, scope)
                await run_batch(ledger, tasks[:2],
                                config(tmp_path, max_parallel=2, kill_grace=PATIENCE),
                                kill_now=kill_now)
            marks["end"] = time.monotonic()

    trio.run(main)

    assert still_alive(list(recorded_pids(pids).values()), PATIENCE) == []
    evs = events(ledger)
    assert evs[-1].status == RunStatus.INTERRUPTED
    assert interrupted_keys(evs) == {t.task_key for t in tasks[:2]}
    # Without kill_now the SIGTERM-deaf children would be waited on for the whole grace.
    assert marks["end"] - marks["kill"] < PATIENCE / 2


def test_cancel_while_recording_skipped_files_still_finishes_the_run(
    tmp_path: Path, ledger: Ledger
) -> None:
    ok = script(tmp_path, "ok", OK)
    scope = trio.CancelScope()

    class CancelOnIteration(list):
        """Stands in for a Ctrl-C arriving while skipped files are being recorded."""

        def __iter__(self):  # type: ignore[no-untyped-def]
            scope.cancel()
            return super().__iter__()

    skipped = CancelOnIteration([Skipped("bad.yaml", "broken")])

    async def main() -> None:
        with scope:
            await run_batch(ledger, [make_task("a", py(ok))], config(tmp_path),
                            skipped=skipped)

    trio.run(main)

    evs = events(ledger)
    assert isinstance(evs[0], RunStarted)
    assert isinstance(evs[-1], RunFinished)
    assert evs[-1].status == RunStatus.INTERRUPTED


def test_a_task_finished_before_the_cancel_keeps_its_result(
    tmp_path: Path, ledger: Ledger, sleepers: tuple[Path, list[ResolvedTask]]
) -> None:
    pids, tasks = sleepers
    ok = script(tmp_path, "ok", OK)
    quick = make_task("quick", py(ok))
    done: list[str] = []

    run_and_cancel(
        ledger, [quick, tasks[0]], config(tmp_path, max_parallel=2),
        lambda: bool(done) and grandchildren(pids) >= 1,
        Callbacks(on_task_complete=lambda c: done.append(c.task_key)),
    )

    evs = events(ledger)
    assert done == [quick.task_key]
    [completed] = of_type(evs, TaskCompleted)
    assert completed.task_key == quick.task_key
    assert completed.final_status == FinalStatus.SUCCESS
    assert interrupted_keys(evs) == {tasks[0].task_key}
    assert evs[-1].status == RunStatus.INTERRUPTED
    assert still_alive(list(recorded_pids(pids).values()), PATIENCE) == []
    row = ledger.db.execute("SELECT payload FROM events WHERE type = 'run.finished'").fetchone()
    assert json.loads(row[0]) == {"status": "interrupted"}
