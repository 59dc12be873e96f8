"""Whole-run event streams drawn by Hypothesis, each with the plain model of what it holds.

A stream is what a real ledger holds for one run (and, half of the time, a second run
interleaved with it in the same file): ``run.started`` with planned keys
``default/t{i}/00``; sessions of task attempts (``task.started`` with attempt 1, 2, ...,
``task.usage`` deltas priced or not, output lines, then a ``task.completed`` (now and
then recorded twice), a ``task.interrupted`` or nothing at all, as after a crash);
``run.finished`` or not at the end of a session, ``run.resumed`` at the start of the
next; ``task.skipped`` files and events of types from the future sprinkled in.

While it draws, the strategy records its decisions in a plain model (key -> list of
attempts, the costs, the run-level events): what a test expects is computed from that
model, never by calling the projection under test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    OpaqueEvent,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskCompleted,
    TaskEmitted,
    TaskInterrupted,
    TaskIsolation,
    TaskOutput,
    TaskSkipped,
    TaskStarted,
    TaskUsage,
    TokenCounts,
)
from evalledger.statuses import Category, FinalStatus, RunStatus

MAX_TASKS = 8
MAX_ATTEMPTS = 3
KEYS = [f"default/t{i}/00" for i in range(MAX_TASKS)]
TOKEN_KINDS = tuple(TokenCounts.model_fields)
FUTURE_TYPES = ("future.thing", "future.other")

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the model -------------------------------------------------------------------------------


@dataclass
class Attempt:
    number: int
    # A FinalStatus (task.completed), "interrupted" (task.interrupted) or None (nothing).
    outcome: FinalStatus | str | None
    costs: list[float | None] = field(default_factory=list)
    # Each usage's role, beside its cost.
    roles: list[str] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    completed_cost: float | None = None
    # A task.completed of it said cost_complete false though its usage was all priced
    # (an imported TIMEOUT: spend never reported).
    gap: bool = False


@dataclass
class RunModel:
    run_id: str
    # planned, every run.resumed.to_run and the started keys, each once.
    planned: set[str] = field(default_factory=set)
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # The run-level lifecycle events, in order: what status/finished_at derive from.
    lifecycle: list[RunStarted | RunResumed | RunFinished] = field(default_factory=list)
    max_parallel: int = 1
    n_started: int = 0
    events: list[AnyEvent] = field(default_factory=list)

    def latest(self, key: str) -> Attempt | None:
        tries = self.attempts.get(key, [])
        return max(tries, key=lambda a: a.number) if tries else None

    def latest_final(self, key: str) -> Attempt | None:
        finals = [a for a in self.attempts.get(key, []) if isinstance(a.outcome, FinalStatus)]
        return max(finals, key=lambda a: a.number) if finals else None

    def finals(self) -> dict[str, Attempt]:
        out = {}
        for key in self.attempts:
            final = self.latest_final(key)
            if final is not None:
                out[key] = final
        return out

    def all_usage(self) -> Iterator[tuple[str, Attempt]]:
        for key, tries in self.attempts.items():
            for attempt in tries:
                yield key, attempt

    def expected_status(self) -> tuple[str, str | None]:
        """(status, finished_at) from the latest run.finished / run.resumed."""
        for event in reversed(self.lifecycle):
            if isinstance(event, RunFinished):
                return event.status.value, event.ts
            if isinstance(event, RunResumed):
                return "running", None
        return "running", None


@dataclass
class Scenario:
    runs: list[RunModel]
    # Every event of every run, in the order they are appended.
    events: list[AnyEvent]
    # Sizes of the append batches (their sum is len(events)).
    batches: list[int]


# -- the strategy ----------------------------------------------------------------------------


def envelope(run_id: str) -> dict[str, str]:
    """Envelope fields. Explicit uuid4 event ids: the default ones draw from the
    ``random`` module, which Hypothesis does not want used inside strategies."""
    return {"event_id": str(uuid.uuid4()), "run_id": run_id}



def _interleave(draw: Any, lanes: list[list[Any]]) -> list[Any]:
    """Merge the lanes in a drawn order, each lane's own order kept."""
    lanes = [list(lane) for lane in lanes if lane]
    out: list[Any] = []
    while lanes:
        i = draw(st.integers(0, len(lanes) - 1)) if len(lanes) > 1 else 0
        out.append(lanes[i].pop(0))
        if not lanes[i]:
            lanes.pop(i)
    return out


costs = st.one_of(
    st.none(),
    st.floats(min_value=0, max_value=5, allow_nan=False, allow_infinity=False),
    st.integers(0, 3000).map(lambda c: c / 1000),
)
token_counts = st.integers(0, 5000)


def _attempt_events(draw: Any, model: RunModel, key: str, number: int) -> list[AnyEvent]:
    """One attempt of ``key``: started, usage and output, then an outcome (or nothing)."""
    run_id = model.run_id
    index = KEYS.index(key)
    events: list[AnyEvent] = [
        TaskStarted(
            **envelope(run_id), task_key=key, task_id=f"t{index}", variant_id="default",
            replicate_index=0, attempt=number, tags=["smoke"] if index % 2 else [],
            definition={"command": f"run t{index}"}, definition_hash=f"h{index}",
        )
    ]
    model.n_started += 1
    # What confined it, when its task asked for isolation (the views show it per key).
    backend = draw(st.sampled_from([None, None, "bwrap", "docker", "none"]))
    if backend is not None:
        events.append(TaskIsolation(
            **envelope(run_id), task_key=key, attempt=number, backend=backend,
            asked="bwrap" if backend == "none" else None,
            image="sha256:ab" if backend == "docker" else None))
    outcome = draw(
        st.one_of(st.sampled_from(list(FinalStatus)), st.just("interrupted"), st.none())
    )
    attempt = Attempt(number=number, outcome=outcome)
    n_line = 0
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            n_line += 1
            events.append(
                TaskOutput(**envelope(run_id), task_key=key, line=f"line {n_line}", n=n_line,
                           stream=draw(st.sampled_from(["stdout", "stderr"])))
            )
        if draw(st.booleans()):
            n_line += 1
            events.append(
                TaskEmitted(**envelope(run_id), task_key=key, data={"type": "thinking"}, n=n_line)
            )
        tokens = {kind: draw(token_counts) for kind in TOKEN_KINDS}
        cost = draw(costs)
        role = draw(st.sampled_from(["agent", "agent", "grader"]))
        events.append(
            TaskUsage(**envelope(run_id), task_key=key, cost_usd=cost, role=role,
                      model=draw(st.sampled_from([None, "m-small", "m-large"])), **tokens)
        )
        attempt.costs.append(cost)
        attempt.roles.append(role)
        for kind, n in tokens.items():
            attempt.tokens[kind] += n
    if isinstance(outcome, FinalStatus):
        attempt.gap = draw(st.integers(0, 7)) == 0
        priced = None not in attempt.costs
        attempt.completed_cost = (
            sum(c for c in attempt.costs if c is not None) if priced else None
        )
        # Now and then the same attempt is recorded completed twice (a hand-merged
        # ledger, a retried write with a new id): the last record is the one that counts.
        outcomes = [outcome] + ([draw(st.sampled_from(list(FinalStatus)))]
                                if draw(st.integers(0, 9)) == 0 else [])
        for status in outcomes:
            events.append(
                TaskCompleted(
                    **envelope(run_id), task_key=key, attempt=number, final_status=status,
                    category=status.category, cost_usd=attempt.completed_cost,
                    cost_complete=priced and not attempt.gap,
                    tokens=TokenCounts(**attempt.tokens),
                    duration_seconds=draw(st.integers(0, 600)) / 10,
                    weighted_score=1.0 if status is FinalStatus.SUCCESS else 0.5,
                    exit_code=0 if status is FinalStatus.SUCCESS else 1,
                    error_message="boom" if status.category is Category.ERROR else None,
                    environment_info={
                        "python": draw(st.sampled_from(["3.11.9", "3.12.4"])),
                        "evalledger": "0.1.0",
                        "exit_code": 0,
                    },
                )
            )
        attempt.outcome = outcomes[-1]
    elif outcome == "interrupted":
        events.append(TaskInterrupted(**envelope(run_id), task_key=key, reason="interrupted"))
    model.attempts.setdefault(key, []).append(attempt)
    model.planned.add(key)
    return events


def _noise(draw: Any, model: RunModel) -> list[AnyEvent]:
    """Events a projection must step over or merely list: skipped files, future types."""
    out: list[AnyEvent] = []
    for i in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            path, reason = f"tasks/bad{len(model.skipped)}.yaml", f"invalid: field {i}"
            model.skipped.append((path, reason))
            out.append(TaskSkipped(**envelope(model.run_id), path=path, reason=reason))
        else:
            out.append(
                OpaqueEvent(
                    **envelope(model.run_id),
                    task_key=draw(st.none() | st.sampled_from(KEYS)),
                    type=draw(st.sampled_from(FUTURE_TYPES)),
                    payload={"answer": draw(st.integers(0, 99)), "note": "from the future"},
                )
            )
    return out


@st.composite
def run_streams(draw: Any, run_id: str) -> RunModel:
    model = RunModel(run_id=run_id)
    planned = KEYS[: draw(st.integers(0, MAX_TASKS))]
    model.max_parallel = draw(st.integers(1, 4))
    started = RunStarted(
        **envelope(run_id), planned=planned, max_parallel=model.max_parallel,
        experiment_id=draw(st.none() | st.just("exp-1")), config={"paths": ["tasks/"]},
    )
    model.planned.update(planned)
    model.lifecycle.append(started)
    events: list[AnyEvent] = [started]
    for session in range(draw(st.integers(1, 3))):
        if session:
            to_run = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=4))
            model.max_parallel = draw(st.integers(1, 4))
            drift = draw(st.just({}) | st.just({"lines": ["task default/t0/00: new"]}))
            resumed = RunResumed(
                **envelope(run_id), to_run=to_run, max_parallel=model.max_parallel, drift=drift
            )
            model.planned.update(to_run)
            model.lifecycle.append(resumed)
            events.append(resumed)
        # Mostly planned keys; now and then one nobody planned (it still counts as planned).
        pool = sorted(model.planned) if model.planned and draw(st.booleans()) else KEYS
        lanes: list[list[AnyEvent]] = []
        for key in draw(st.lists(st.sampled_from(pool), unique=True, max_size=MAX_TASKS)):
            done = len(model.attempts.get(key, []))
            lane: list[AnyEvent] = []
            for _ in range(draw(st.integers(0, min(2, MAX_ATTEMPTS - done)))):
                number = len(model.attempts.get(key, [])) + 1
                lane += _attempt_events(draw, model, key, number)
            lanes.append(lane)
        lanes += [[e] for e in _noise(draw, model)]
        events += _interleave(draw, lanes)
        status = draw(st.none() | st.sampled_from(list(RunStatus)))
        if status is not None:
            finished = RunFinished(**envelope(run_id), status=status)
            model.lifecycle.append(finished)
            events.append(finished)
    model.events = events
    return model


@st.composite
def scenarios(draw: Any) -> Scenario:
    runs = [draw(run_streams("run-a"))]
    if draw(st.booleans()):
        runs.append(draw(run_streams("run-b")))
    events = _interleave(draw, [r.events for r in runs])
    batches: list[int] = []
    left = len(events)
    while left:
        size = draw(st.integers(1, min(left, 40)))
        batches.append(size)
        left -= size
    return Scenario(runs=runs, events=events, batches=batches)
