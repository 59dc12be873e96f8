"""Resume partition, fingerprint drift and the resume plan, on hand-written runs.

The partition: every planned key lands on exactly one side; kept means the
latest attempt reached a final status; interrupted, crashed (started, then
nothing) and never-started keys run again; ``retry_errors`` re-runs the ``error``
category. Drift: run-level options (operational ones ignored) and per-key
definition hashes, changed / added / removed.
"""

from __future__ import annotations

from typing import Any

import pytest

from evalledger.ledger import (
    AnyEvent,
    Fingerprint,
    Ledger,
    OpaqueEvent,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskOutput,
    TaskUsage,
)
from evalledger.options import RunOptions
from evalledger.projections import (
    Drift,
    ResumeFold,
    ResumeRefused,
    ResumeRequest,
    SummaryFold,
    compute_drift,
    fingerprint,
    fold,
    plan_resume,
)
from evalledger.statuses import FinalStatus, RunStatus
from evalledger.suite import ResolvedTask, TaskSet

from .builders import RUN, completed, interrupted, key, started


def replay(ledger: Ledger, events: list[AnyEvent], run_id: str = RUN) -> ResumeFold:
    """Append ``events``, then rebuild the resume fold from the ledger."""
    ledger.append(events)
    return fold(ResumeFold(run_id), ledger.events(run_id, types=ResumeFold.TYPES))


# -- compute_drift ---------------------------------------------------------------------------


def test_identical_fingerprints_have_no_drift() -> None:
    fp = Fingerprint(options={"timeout": 60, "tags": ["a"]}, tasks={key(0): "h0"})
    drift = compute_drift(fp, fp)
    assert drift == Drift()
    assert not drift.any
    assert drift.lines() == []


def test_option_change_is_reported_with_its_before_and_now_values() -> None:
    stored = Fingerprint(options={"timeout": 60, "repeats": 1, "tags": ["a"]})
    now = Fingerprint(options={"timeout": 120, "repeats": 1, "tags": ["a"], "model": "m2"})
    drift = compute_drift(stored, now)
    assert drift.any
    # An option that appeared (or disappeared) compares against None.
    assert drift.options == {"model": (None, "m2"), "timeout": (60, 120)}
    assert drift.lines() == ['option model: null → "m2"', "option timeout: 60 → 120"]
    assert compute_drift(now, stored).options == {"model": ("m2", None), "timeout": (120, 60)}


OPERATIONAL_OPTIONS = RunOptions.operational()


def test_how_a_run_executes_is_operational() -> None:
    expected = {"max_parallel", "out", "cwd", "preservation_mode", "max_cost_usd", "kill_grace",
                "executor", "ray_address", "require_isolation", "no_grade", "retries",
                "allow_unconfined",
                "retry_backoff", "max_infra_failures"}
    assert expected == OPERATIONAL_OPTIONS


@pytest.mark.parametrize("option", sorted(OPERATIONAL_OPTIONS))
def test_operational_options_never_drift(option: str) -> None:
    stored = Fingerprint(options={option: "before", "timeout": 60}, tasks={key(0): "h0"})
    changed = Fingerprint(options={option: "after", "timeout": 60}, tasks={key(0): "h0"})
    dropped = Fingerprint(options={"timeout": 60}, tasks={key(0): "h0"})
    for now in (changed, dropped):
        drift = compute_drift(stored, now)
        assert not drift.any, drift
        assert drift.lines() == []
    # ... while a real option next to it still does.
    both = Fingerprint(options={option: "after", "timeout": 61}, tasks={key(0): "h0"})
    assert compute_drift(stored, both).options == {"timeout": (60, 61)}


def test_task_keys_changed_added_and_removed_sorted_and_worded() -> None:
    stored = Fingerprint(
        options={"timeout": 60},
        tasks={key(3): "h3", key(1): "h1", key(2): "h2", key(0): "h0", key(5): "h5"},
    )
    now = Fingerprint(
        options={"timeout": 90},
        tasks={key(0): "h0", key(3): "h3-edited", key(1): "h1-edited", key(9): "h9",
               key(4): "h4"},
    )
    drift = compute_drift(stored, now)
    assert drift.any
    assert drift.changed == [key(1), key(3)]
    assert drift.added == [key(4), key(9)]
    assert drift.removed == [key(2), key(5)]
    assert drift.lines() == [
        "option timeout: 60 → 90",
        f"task {key(1)}: definition changed",
        f"task {key(3)}: definition changed",
        f"task {key(4)}: new",
        f"task {key(9)}: new",
        f"task {key(2)}: no longer defined",
        f"task {key(5)}: no longer defined",
    ]


def test_only_task_changes_still_count_as_drift() -> None:
    stored = Fingerprint(tasks={key(0): "h0"})
    assert compute_drift(stored, Fingerprint(tasks={key(0): "h0*"})).any
    assert compute_drift(stored, Fingerprint(tasks={})).any
    assert compute_drift(Fingerprint(), Fingerprint(tasks={key(0): "h0"})).any


def test_drift_is_measured_from_the_latest_resume_fingerprint(ledger: Ledger) -> None:
    first = Fingerprint(options={"timeout": 60}, tasks={key(0): "a"})
    second = Fingerprint(options={"timeout": 90}, tasks={key(0): "b"})
    state = replay(ledger, [
        RunStarted(run_id=RUN, planned=[key(0)], fingerprint=first,
                   config=RunOptions(paths=["x"])),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
        RunResumed(run_id=RUN, to_run=[key(0)], fingerprint=second),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ])
    assert state.found
    assert state.config == RunOptions(paths=["x"])
    assert state.fingerprint == second
    assert not compute_drift(state.fingerprint, second).any
    assert compute_drift(state.fingerprint, first).lines() == [
        "option timeout: 90 → 60", f"task {key(0)}: definition changed"
    ]


def _edited(task: ResolvedTask, **fields: Any) -> ResolvedTask:
    # A fresh model: model_copy would carry the cached hashes of the original along.
    return ResolvedTask.model_validate({**task.model_dump(), **fields})


class Recorded:
    """Hands compute_drift the definitions "task.started recorded", by hash."""

    def __init__(self, *tasks: ResolvedTask) -> None:
        self.by_hash = {t.definition_hash: t.definition() for t in tasks}
        self.asked: list[set[str]] = []

    def __call__(self, hashes: Any) -> dict[str, dict[str, Any]]:
        self.asked.append(set(hashes))
        return {h: self.by_hash[h] for h in hashes if h in self.by_hash}


def test_a_changed_field_is_named_with_its_value_then_and_now() -> None:
    then = _edited(_task(0), timeout=20.0, env={"MODE": "a"}, prompt="p" * 100)
    now = _edited(then, timeout=30.0, env={"MODE": "b", "NEW": "1"}, prompt="q" * 100,
                  success_criteria=[{"type": "exit_code", "equals": 2}])
    stored = fingerprint(RECORDED, [then])
    drift = compute_drift(stored, fingerprint(RECORDED, [now]), tasks=[now],
                          recorded=Recorded(then))
    assert drift.changed == [key(0)]
    assert drift.lines() == [
        f'task {key(0)}: env.MODE: "a" → "b"',
        f'task {key(0)}: env.NEW: null → "1"',
        f'task {key(0)}: prompt: "{"p" * 58}… → "{"q" * 58}…',  # cut at 60
        f"task {key(0)}: success_criteria[0].equals: 0 → 2",
        f"task {key(0)}: timeout: 20 → 30",
    ]


def test_annotations_alone_are_no_drift_even_against_an_old_fingerprint() -> None:
    then = _task(0)
    now = _edited(then, description="new words", tags=["x"], expect="failure")
    assert not compute_drift(fingerprint(RECORDED, [then]), fingerprint(RECORDED, [now]),
                             tasks=[now], recorded=Recorded(then)).any
    # A run recorded before annotations left the hash stored the whole definition's hash:
    # unchanged, it matches the legacy hash; edited, the recorded definition tells.
    old = Fingerprint(options=RECORDED.model_dump(mode="json"),
                      tasks={key(0): then.legacy_hash})
    assert not compute_drift(old, fingerprint(RECORDED, [then]), tasks=[then]).any
    recorded = Recorded()
    recorded.by_hash = {then.legacy_hash: then.definition()}
    assert not compute_drift(old, fingerprint(RECORDED, [now]), tasks=[now],
                             recorded=recorded).any
    edited = _edited(now, timeout=5.0)
    assert compute_drift(old, fingerprint(RECORDED, [edited]), tasks=[edited],
                         recorded=recorded).lines() == [f"task {key(0)}: timeout: 600 → 5"]


def test_a_key_whose_earlier_definition_was_not_recorded_says_definition_changed() -> None:
    then, now = _task(0), _edited(_task(0), command="false")
    recorded = Recorded()  # no attempt with that definition ever started
    drift = compute_drift(fingerprint(RECORDED, [then]), fingerprint(RECORDED, [now]),
                          tasks=[now], recorded=recorded)
    assert drift.lines() == [f"task {key(0)}: definition changed"]
    assert recorded.asked == [{then.definition_hash}]
    # Nothing is read when no hash changed.
    quiet = Recorded()
    compute_drift(fingerprint(RECORDED, [then]), fingerprint(RECORDED, [then]), tasks=[then],
                  recorded=quiet)
    assert quiet.asked == []


def test_a_field_a_recorded_definition_lacks_had_its_default() -> None:
    # Recorded by a version that had no such field: at its default now, it did not change.
    then = _task(0)
    older = {k: v for k, v in then.definition().items() if k != "stream_format"}
    now = _edited(then, timeout=9.0)
    recorded = Recorded()
    recorded.by_hash = {then.definition_hash: older}
    drift = compute_drift(fingerprint(RECORDED, [then]), fingerprint(RECORDED, [now]),
                          tasks=[now], recorded=recorded)
    assert drift.lines() == [f"task {key(0)}: timeout: 600 → 9"]


# -- the partition ---------------------------------------------------------------------------


def test_partition_of_a_crashed_run(ledger: Ledger) -> None:
    planned = [key(i) for i in range(6)]
    state = replay(ledger, [
        RunStarted(run_id=RUN, planned=planned, max_parallel=3),
        started(key(0)), completed(key(0), FinalStatus.SUCCESS),
        started(key(1)), completed(key(1), FinalStatus.FAILURE),
        started(key(2)), completed(key(2), FinalStatus.ERROR),
        started(key(3)), interrupted(key(3)),
        started(key(4)),  # then the process died: no completion, no interruption
        # key(5) never started
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ])
    part = state.partition()
    assert part.run_id == RUN
    assert part.kept == [key(0), key(1), key(2)]
    assert part.to_run == [key(3), key(4), key(5)]
    assert part.attempts == {key(0): 1, key(1): 1, key(2): 1, key(3): 1, key(4): 1}

    retry = state.partition(retry_errors=True)
    assert retry.kept == [key(0), key(1)]
    assert retry.to_run == [key(2), key(3), key(4), key(5)]
    assert retry.attempts == part.attempts


@pytest.mark.parametrize("status", list(FinalStatus))
def test_retry_errors_moves_exactly_the_error_category(ledger: Ledger, status: FinalStatus) -> None:
    state = replay(ledger, [
        RunStarted(run_id=RUN, planned=[key(0)]),
        started(key(0)), completed(key(0), status),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ])
    assert state.partition().kept == [key(0)]
    is_error = status in (FinalStatus.ERROR, FinalStatus.BUILD_FAILED, FinalStatus.STALLED)
    retry = state.partition(retry_errors=True)
    assert retry.to_run == ([key(0)] if is_error else [])
    assert retry.kept == ([] if is_error else [key(0)])


def test_an_interrupted_retry_runs_again_although_an_earlier_attempt_finished(
    ledger: Ledger,
) -> None:
    """Resume is stricter than the summary: the latest attempt decides."""
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0), key(1)]),
        started(key(0)), completed(key(0), FinalStatus.SUCCESS),
        started(key(1)), completed(key(1), FinalStatus.ERROR),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
        RunResumed(run_id=RUN, to_run=[key(0), key(1)]),
        started(key(0), attempt=2), interrupted(key(0)),
        started(key(1), attempt=2),  # crash
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ]
    state = replay(ledger, events)
    part = state.partition()
    assert part.kept == []
    assert part.to_run == [key(0), key(1)]
    assert part.attempts == {key(0): 2, key(1): 2}
    # The summary still counts each key by its latest attempt that reached a final status.
    summary = fold(SummaryFold(RUN), events).summary()
    assert [(r.task_key, r.final_status) for r in summary.tasks] == [
        (key(0), FinalStatus.SUCCESS), (key(1), FinalStatus.ERROR)
    ]
    assert (summary.tasks_run, summary.tasks_succeeded, summary.tasks_error) == (2, 1, 1)


def test_a_retried_error_that_then_succeeds_is_kept(ledger: Ledger) -> None:
    state = replay(ledger, [
        RunStarted(run_id=RUN, planned=[key(0)]),
        started(key(0)), completed(key(0), FinalStatus.BUILD_FAILED),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
        RunResumed(run_id=RUN, to_run=[key(0)]),
        started(key(0), attempt=2), completed(key(0), FinalStatus.SUCCESS, attempt=2),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ])
    for retry_errors in (False, True):
        part = state.partition(retry_errors=retry_errors)
        assert part.kept == [key(0)] and part.to_run == []
        assert part.attempts == {key(0): 2}


def test_planned_keys_come_from_run_started_run_resumed_and_task_started(
    ledger: Ledger,
) -> None:
    state = replay(ledger, [
        RunStarted(run_id=RUN, planned=[key(2), key(0)]),
        started(key(5)), completed(key(5), FinalStatus.SUCCESS),  # never planned
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
        RunResumed(run_id=RUN, to_run=[key(0), key(7)]),  # key(7): added since
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ])
    part = state.partition()
    assert part.kept == [key(5)]
    # First-planned order, each key once.
    assert part.to_run == [key(2), key(0), key(7)]
    assert part.attempts == {key(5): 1}


def test_an_empty_run_and_an_unknown_run(ledger: Ledger) -> None:
    state = replay(ledger, [RunStarted(run_id=RUN, planned=[])])
    assert state.found
    part = state.partition()
    assert (part.kept, part.to_run, part.attempts) == ([], [], {})

    unknown = fold(ResumeFold("nope"), ledger.events())
    assert not unknown.found
    assert unknown.partition().model_dump() == {
        "run_id": "nope", "kept": [], "to_run": [], "attempts": {}
    }


def test_other_runs_output_usage_and_future_types_do_not_matter(ledger: Ledger) -> None:
    other = "run-2"
    ours: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0), key(1)]),
        started(key(0)),
        TaskOutput(run_id=RUN, task_key=key(0), line="hello", n=1),
        TaskUsage(run_id=RUN, task_key=key(0), input_tokens=5, cost_usd=None),
        OpaqueEvent(run_id=RUN, task_key=key(0), type="future.thing", payload={"x": 1}),
        OpaqueEvent(run_id=RUN, type="future.run_note", payload={}),
        completed(key(0), FinalStatus.SUCCESS),
    ]
    theirs: list[AnyEvent] = [
        RunStarted(run_id=other, planned=[key(0), key(1)]),
        started(key(1), run_id=other), completed(key(1), FinalStatus.SUCCESS, run_id=other),
        started(key(0), attempt=2, run_id=other),  # same key, other run: unfinished there
    ]
    mixed = [ours[0], theirs[0], ours[1], *theirs[1:3], *ours[2:6], theirs[3], ours[6]]
    state = replay(ledger, mixed)
    part = state.partition()
    assert (part.kept, part.to_run, part.attempts) == ([key(0)], [key(1)], {key(0): 1})
    # The same from the events fed directly, and from everything the ledger holds.
    assert fold(ResumeFold(RUN), mixed).partition() == part
    assert fold(ResumeFold(RUN), ledger.events()).partition() == part
    other_part = fold(ResumeFold(other), ledger.events()).partition()
    assert (other_part.kept, other_part.to_run) == ([key(1)], [key(0)])
    assert other_part.attempts == {key(1): 1, key(0): 2}


def test_resume_types_are_what_the_fold_reads() -> None:
    # run.finished tells whether the run may still be going (evalledger.hosts).
    assert frozenset({
        "run.started", "run.resumed", "run.finished", "task.started", "task.completed",
        "task.interrupted",
    }) == ResumeFold.TYPES


def test_the_fold_keeps_who_ran_the_run_last() -> None:
    first = {"hostname": "a", "pid": 1}
    second = {"hostname": "b", "pid": 2}
    events: list[Any] = [RunStarted(run_id=RUN, planned=[key(0)], host=first)]
    state = fold(ResumeFold(RUN), events)
    assert (state.host, state.finished) == (first, False)
    events.append(RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED))
    assert fold(ResumeFold(RUN), events).finished
    events.append(RunResumed(run_id=RUN, to_run=[key(0)], host=second))
    state = fold(ResumeFold(RUN), events)
    assert (state.host, state.finished) == (second, False)



# -- plan_resume -----------------------------------------------------------------------------


def _task(i: int, command: str = "true") -> ResolvedTask:
    return ResolvedTask(
        task_key=key(i), task_id=f"t{i}", variant_id="default", replicate_index=0,
        source=f"/suite/t{i}.yaml", command=command, success_criteria=[{"type": "exit_code"}],
    )


RECORDED = RunOptions(paths=["/suite"], max_parallel=3, max_cost_usd=2.0, cwd="/home")


def _run_of(tasks: list[ResolvedTask], *later: AnyEvent,
            options: RunOptions = RECORDED) -> ResumeFold:
    """A run of ``tasks`` started with ``options``, then ``later``, folded."""
    opening = RunStarted(run_id=RUN, planned=[t.task_key for t in tasks], config=options,
                         fingerprint=fingerprint(options, tasks), max_parallel=3)
    return fold(ResumeFold(RUN), [opening, *later])


class Loader:
    """Hands plan_resume the tasks resolved "now", and records what it was asked."""

    def __init__(self, tasks: list[ResolvedTask]) -> None:
        self.tasks = tasks
        self.asked: list[RunOptions] = []

    def __call__(self, options: RunOptions) -> TaskSet:
        self.asked.append(options)
        return TaskSet(tasks=list(self.tasks))


def test_a_plan_runs_what_is_unfinished_and_keeps_the_rest() -> None:
    tasks = [_task(i) for i in range(4)]
    state = _run_of(
        tasks,
        started(key(0)), completed(key(0)),
        started(key(1)), completed(key(1), FinalStatus.ERROR),
        started(key(2)), interrupted(key(2)),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    )
    load = Loader(tasks)
    plan = plan_resume(state, load=load, spent_usd=0.5)
    assert load.asked == [RECORDED]  # resolved again from what the run recorded
    assert plan.to_run == [key(2), key(3)]
    assert plan.partition.kept == [key(0), key(1)]
    assert plan.skip == {key(0), key(1)}
    assert plan.undefined == []
    assert not plan.drift.any
    assert plan.options == RECORDED
    assert (plan.spent_usd, plan.boundary_seq, plan.run_id) == (0.5, 0, RUN)
    again = plan_resume(state, ResumeRequest(retry_errors=True), load=load, spent_usd=0.5)
    assert again.to_run == [key(1), key(2), key(3)]


def test_a_run_cut_off_after_its_last_task_has_work_for_an_empty_batch() -> None:
    tasks = [_task(0)]
    cut_off = _run_of(tasks, started(key(0)), completed(key(0)))
    plan = plan_resume(cut_off, load=Loader(tasks), spent_usd=0.0)
    assert (plan.to_run, plan.finished, plan.has_work) == ([], False, True)
    ended = _run_of(tasks, started(key(0)), completed(key(0)),
                    RunFinished(run_id=RUN, status=RunStatus.COMPLETED))
    plan = plan_resume(ended, load=Loader(tasks), spent_usd=0.0)
    assert (plan.to_run, plan.finished, plan.has_work) == ([], True, False)


def test_a_plan_takes_new_parallelism_and_budget_without_drift() -> None:
    tasks = [_task(0)]
    state = _run_of(tasks)
    plan = plan_resume(state, ResumeRequest(max_parallel=8, max_cost_usd=5.0),
                       load=Loader(tasks), spent_usd=0.0)
    assert (plan.options.max_parallel, plan.options.max_cost_usd) == (8, 5.0)
    assert not plan.drift.any  # how a run executes is not what it evaluates


def test_a_budget_raised_by_an_earlier_resume_holds() -> None:
    tasks = [_task(0)]
    raised = RECORDED.model_copy(update={"max_cost_usd": 9.0})
    state = _run_of(tasks, RunResumed(run_id=RUN, to_run=[key(0)],
                                      fingerprint=fingerprint(raised, tasks)))
    plan = plan_resume(state, load=Loader(tasks), spent_usd=3.0)
    assert plan.options.max_cost_usd == 9.0


def test_a_spent_budget_refuses_while_there_is_work_left() -> None:
    tasks = [_task(0), _task(1)]
    state = _run_of(tasks, started(key(0)), completed(key(0)))
    with pytest.raises(ResumeRefused, match=r"already spent \$2\.5000 of its \$2\.0000"):
        plan_resume(state, load=Loader(tasks), spent_usd=2.5)
    raised = ResumeRequest(max_cost_usd=3.0)
    assert plan_resume(state, raised, load=Loader(tasks), spent_usd=2.5).to_run == [key(1)]
    # Nothing left to run: nothing to refuse.
    done = _run_of(tasks, started(key(0)), completed(key(0)), started(key(1)), completed(key(1)))
    assert plan_resume(done, load=Loader(tasks), spent_usd=2.5).to_run == []


def test_drift_is_reported_and_refused_under_strict() -> None:
    tasks = [_task(0), _task(1)]
    state = _run_of(tasks)
    now = [_task(0, command="false"), _task(2)]  # t0 edited, t1 deleted, t2 new
    plan = plan_resume(state, load=Loader(now), spent_usd=0.0)
    assert plan.drift.lines() == [
        f"task {key(0)}: definition changed", f"task {key(2)}: new",
        f"task {key(1)}: no longer defined",
    ]
    assert plan.to_run == [key(0), key(2)]  # the new task joins the run
    assert plan.added == [key(2)]
    assert plan.undefined == [key(1)]  # should run, cannot
    with pytest.raises(ResumeRefused, match="drifted since it started") as refused:
        plan_resume(state, ResumeRequest(strict=True), load=Loader(now), spent_usd=0.0)
    assert refused.value.drift == plan.drift


def test_strict_after_a_resume_measures_and_says_since_that_resume() -> None:
    then = [_task(0)]
    middle = [_edited(then[0], timeout=30.0)]
    state = _run_of(then, RunResumed(run_id=RUN, to_run=[key(0)], ts="2026-12-01T10:00:00Z",
                                     fingerprint=fingerprint(RECORDED, middle)))
    now = [_edited(then[0], timeout=40.0)]
    with pytest.raises(ResumeRefused) as refused:
        plan_resume(state, ResumeRequest(strict=True), load=Loader(now), spent_usd=0.0,
                    recorded=Recorded(middle[0]))
    assert str(refused.value).startswith(
        f"run {RUN} drifted since its last resume, at 2026-12-01T10:00:00Z: 1 difference(s)")
    assert refused.value.drift.lines() == [f"task {key(0)}: timeout: 30 → 40"]


def test_an_imported_run_cannot_be_resumed() -> None:
    state = fold(ResumeFold(RUN), [
        RunStarted(run_id=RUN, planned=[key(0)], imported={"format": "coder_eval",
                                                           "source": "/old/runs/r1"}),
        started(key(0)), completed(key(0), FinalStatus.FAILURE),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ])
    load = Loader([])
    with pytest.raises(ResumeRefused, match=r"^run run-1 was imported \(from /old/runs/r1\): "
                                            r"its tasks were defined by the old harness"):
        plan_resume(state, load=load, spent_usd=0.0)
    assert load.asked == []
    # The fold's snapshot keeps it.
    assert ResumeFold.restore(RUN, state.state()).imported == state.imported


def test_a_run_still_running_is_refused_before_its_tasks_are_read() -> None:
    tasks = [_task(0)]
    load = Loader(tasks)
    with pytest.raises(ResumeRefused, match="still running \\(pid 4242 on this host\\)"):
        plan_resume(_run_of(tasks), load=load, spent_usd=0.0, running_pid=4242)
    assert load.asked == []


def test_a_run_without_run_started_cannot_be_resumed() -> None:
    state = fold(ResumeFold(RUN), [started(key(0))])
    with pytest.raises(ResumeRefused, match=r"has no run\.started event"):
        plan_resume(state, load=Loader([]), spent_usd=0.0)


def test_rerun_failed_and_rerun_patterns_choose_finished_keys_again() -> None:
    tasks = [_task(i) for i in range(4)]
    state = _run_of(
        tasks,
        started(key(0)), completed(key(0)),
        started(key(1)), completed(key(1), FinalStatus.FAILURE),
        started(key(2)), completed(key(2), FinalStatus.TIMEOUT),
        started(key(3)), completed(key(3), FinalStatus.ERROR),
    )
    load = Loader(tasks)
    assert plan_resume(state, load=load, spent_usd=0.0).to_run == []
    failed = plan_resume(state, ResumeRequest(rerun_failed=True), load=load, spent_usd=0.0)
    assert failed.to_run == [key(1), key(2)]
    named = plan_resume(state, ResumeRequest(rerun=["default/t0/*"]), load=load, spent_usd=0.0)
    assert named.to_run == [key(0)]
    every = plan_resume(state, ResumeRequest(rerun=["*"], retry_errors=True), load=load,
                        spent_usd=0.0)
    assert every.to_run == [key(i) for i in range(4)]
    with pytest.raises(ResumeRefused, match="matches no task key"):
        plan_resume(state, ResumeRequest(rerun=["other/*"]), load=load, spent_usd=0.0)


def test_a_model_given_at_resume_changes_the_definitions() -> None:
    tasks = [_task(0)]
    state = _run_of(tasks)

    def load(options: RunOptions) -> TaskSet:
        return TaskSet(tasks=[t.model_copy(update={"model": options.model}) for t in tasks])

    plan = plan_resume(state, ResumeRequest(model="claude-haiku-4-5"), load=load, spent_usd=0.0)
    assert plan.options.model == "claude-haiku-4-5"
    assert plan.drift.options == {"model": (None, "claude-haiku-4-5")}
