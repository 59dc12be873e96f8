"""The ledger against a model: a plain Python list of the events appended, in order.

A Hypothesis state machine appends fresh batches, retried batches (already stored
events, in-batch repeats), closes and reopens the file, and reads it through
separate read-only connections; after every step every replay (whole, filtered by
run, task, type set and ``after_seq``) must equal the matching slice of the list,
seqs must run 1..N, and ``verify`` must pass.

Also here: the stored payload is canonical JSON, for generated free-form data and
for one representative event of every type.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from evalledger.ledger import (
    EVENT_TYPES,
    CriterionResult,
    EventRow,
    Evidence,
    Fingerprint,
    Ledger,
    LedgerReadOnly,
    OpaqueEvent,
    RefusedGrade,
    RunFinished,
    RunGraded,
    RunMerged,
    RunResumed,
    RunSigned,
    RunSnapshot,
    RunStarted,
    TaskCompleted,
    TaskEgress,
    TaskEmitted,
    TaskFlagged,
    TaskGraded,
    TaskInterrupted,
    TaskIsolation,
    TaskLines,
    TaskOutput,
    TaskOutputTruncated,
    TaskSkipped,
    TaskStalled,
    TaskStarted,
    TaskUsage,
    TokenCounts,
    _store,
    verify,
)
from evalledger.ledger._events import decode_row, encode_payload
from evalledger.options import RunOptions
from evalledger.statuses import Category, FailureClass, FinalStatus, RunStatus

RUN_IDS = ("run-a", "run-b", "run-c")
TASK_KEYS = ("alpha", "beta", "gamma/1")
OPAQUE_TYPES = ("future.thing", "future.other")
ALL_TYPES = (
    "task.output",
    "task.event",
    "task.usage",
    "task.started",
    "run.finished",
    *OPAQUE_TYPES,
)


def canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# -- strategies ------------------------------------------------------------------------------


def _in_float_gap(x: float) -> bool:
    # See test_float_text_differs_from_python_json: pydantic-core writes floats with
    # a decimal exponent of -5..-9 differently from Python's json module.
    return x != 0 and 1e-9 <= abs(x) < 1e-4


def _unsorted(d: dict[str, Any]) -> dict[str, Any]:
    """The same dict with its keys inserted in reverse order: never already sorted."""
    return dict(sorted(d.items(), reverse=True))


finite_floats = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda x: not _in_float_gap(x)
)
json_scalars = st.none() | st.booleans() | st.integers() | finite_floats | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4).map(_unsorted)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5).map(_unsorted)

run_ids = st.sampled_from(RUN_IDS)
task_keys = st.sampled_from(TASK_KEYS)
counters = st.integers(min_value=0, max_value=10**6)

fresh_events = st.one_of(
    st.builds(
        TaskOutput,
        run_id=run_ids,
        task_key=task_keys,
        line=st.text(max_size=20),
        n=counters,
        stream=st.sampled_from(["stdout", "stderr"]),
        truncated=st.booleans(),
    ),
    st.builds(TaskEmitted, run_id=run_ids, task_key=task_keys, data=json_objects, n=counters),
    st.builds(
        TaskUsage,
        run_id=run_ids,
        task_key=task_keys,
        input_tokens=counters,
        output_tokens=counters,
        cost_usd=st.none() | finite_floats.filter(lambda x: x >= 0),
        model=st.none() | st.sampled_from(["m-small", "m-large"]),
    ),
    st.builds(
        TaskStarted,
        run_id=run_ids,
        task_key=task_keys,
        task_id=st.text(min_size=1, max_size=10),
        attempt=st.integers(min_value=1, max_value=3),
        definition=json_objects,
        tags=st.lists(st.text(max_size=5), max_size=3),
    ),
    st.builds(RunFinished, run_id=run_ids, status=st.sampled_from(list(RunStatus))),
    st.builds(
        OpaqueEvent,
        run_id=run_ids,
        task_key=st.none() | task_keys,
        type=st.sampled_from(OPAQUE_TYPES),
        payload=json_objects,
    ),
)
batches = st.lists(fresh_events, min_size=1, max_size=6)


def _altered(event: Any) -> Any:
    """The same event id with different content, as a buggy retry might send it."""
    return event.model_copy(update={"ts": "1999-01-01T00:00:00.000000Z", "seq": 12345})


# -- the state machine ---------------------------------------------------------------------


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="evalledger-model-"))
        self.path = self.dir / "ledger.db"
        # model[i] is the event stored with seq i + 1, as it was first appended.
        self.model: list[Any] = []
        self.seq_of: dict[str, int] = {}
        self.writer: Ledger | None = None
        self.reader: Ledger | None = None  # a long-lived read-only connection

    @initialize()
    def open_writer(self) -> None:
        self.writer = Ledger(self.path)

    def teardown(self) -> None:
        for opened in (self.writer, self.reader):
            if opened is not None:
                opened.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- model helpers ---------------------------------------------------------------------

    def _expect_append(self, batch: list[Any]) -> list[int]:
        """Seqs the ledger must return for ``batch``; records the new events in the model."""
        expected = []
        for event in batch:
            if event.event_id not in self.seq_of:
                self.model.append(event)
                self.seq_of[event.event_id] = len(self.model)
            expected.append(self.seq_of[event.event_id])
        return expected

    def _slice(
        self,
        run_id: str | None = None,
        task_key: str | None = None,
        types: set[str] | None = None,
        after_seq: int = 0,
    ) -> list[tuple[int, Any]]:
        return [
            (seq, e)
            for seq, e in enumerate(self.model, start=1)
            if seq > after_seq
            and (run_id is None or e.run_id == run_id)
            and (task_key is None or e.task_key == task_key)
            and (types is None or e.type in types)
        ]

    def _check_replay(self, ledger: Ledger, **filters: Any) -> None:
        expected = self._slice(**filters)
        replayed = list(ledger.events(**filters))
        assert [e.seq for e in replayed] == [seq for seq, _ in expected], filters
        for got, (seq, want) in zip(replayed, expected, strict=True):
            assert type(got) is type(want), (seq, got, want)
            assert got.event_id == want.event_id
            assert got.type == want.type
            assert got.run_id == want.run_id
            assert got.task_key == want.task_key
            assert got.model_dump(exclude={"seq"}) == want.model_dump(exclude={"seq"}), seq
        rows = list(ledger.rows(**filters))
        assert [r.seq for r in rows] == [seq for seq, _ in expected], filters
        for row, (_, want) in zip(rows, expected, strict=True):
            assert row.event_id == want.event_id
            assert row.payload == encode_payload(want)

    def _check_all(self, ledger: Ledger) -> None:
        n = len(self.model)
        assert ledger.count() == n
        assert ledger.last_seq() == n
        self._check_replay(ledger)
        assert [e.seq for e in ledger.events()] == list(range(1, n + 1))
        report = verify(ledger)
        # The model appends events in any order: the one thing verify may say of them is
        # that a batch's task event came after its run.finished (the ordering rule).
        late = [line for line in report.seals if "after the run's run.finished" in line]
        assert report.ok or report.problems_total == len(late) == len(report.seals), (
            report.lines())
        assert report.events == n

    # -- rules -----------------------------------------------------------------------------

    @precondition(lambda self: self.writer is not None)
    @rule(batch=batches)
    def append_fresh(self, batch: list[Any]) -> None:
        assert self.writer is not None
        start = len(self.model)
        seqs = self.writer.append(batch)
        assert seqs == list(range(start + 1, start + 1 + len(batch)))
        assert seqs == self._expect_append(batch)

    @precondition(lambda self: self.writer is not None and self.model)
    @rule(data=st.data(), fresh=st.lists(fresh_events, max_size=3))
    def append_with_repeats(self, data: st.DataObject, fresh: list[Any]) -> None:
        assert self.writer is not None
        stored = data.draw(
            st.lists(st.integers(0, len(self.model) - 1), min_size=1, max_size=4), label="stored"
        )
        # Retries of stored events: as first appended, as replayed (seq set), or with
        # altered content; the stored row wins every time.
        replayed = {e.event_id: e for e in self.writer.events()}
        retries = []
        for i in stored:
            original = self.model[i]
            form = data.draw(st.sampled_from(["same", "replayed", "altered"]), label="form")
            retries.append(
                original
                if form == "same"
                else replayed[original.event_id]
                if form == "replayed"
                else _altered(original)
            )
        batch = retries + fresh
        # In-batch repeats: some events of the batch appear a second time.
        echoes = data.draw(st.lists(st.sampled_from(batch), max_size=3), label="echoes")
        batch += [_altered(e) if j % 2 else e for j, e in enumerate(echoes)]
        batch = data.draw(st.permutations(batch), label="order")

        seqs = self.writer.append(batch)
        assert seqs == self._expect_append(batch)

    @precondition(lambda self: self.writer is not None)
    @rule()
    def append_nothing(self) -> None:
        assert self.writer is not None
        assert self.writer.append([]) == []
        assert self.writer.append(iter(())) == []

    @precondition(lambda self: self.writer is not None)
    @rule()
    def close_writer(self) -> None:
        assert self.writer is not None
        self.writer.close()
        self.writer = None

    @precondition(lambda self: self.writer is None)
    @rule()
    def reopen_writer(self) -> None:
        self.writer = Ledger(self.path)

    @precondition(lambda self: self.writer is not None)
    @rule()
    def close_and_reopen(self) -> None:
        assert self.writer is not None
        self.writer.close()
        self.writer = Ledger(self.path)

    @rule()
    def read_through_fresh_reader(self) -> None:
        with Ledger(self.path, read_only=True) as reader:
            self._check_all(reader)
            with pytest.raises(LedgerReadOnly):
                reader.append([RunFinished(run_id="run-a", status=RunStatus.COMPLETED)])

    @precondition(lambda self: self.reader is None)
    @rule()
    def open_long_lived_reader(self) -> None:
        self.reader = Ledger(self.path, read_only=True)

    @precondition(lambda self: self.reader is not None)
    @rule()
    def close_long_lived_reader(self) -> None:
        assert self.reader is not None
        self.reader.close()
        self.reader = None

    @rule(
        data=st.data(),
        run_id=st.none() | st.sampled_from([*RUN_IDS, "run-missing"]),
        task_key=st.none() | st.sampled_from([*TASK_KEYS, "missing"]),
        types=st.none() | st.sets(st.sampled_from([*ALL_TYPES, "task.completed"]), max_size=4),
    )
    def filtered_replay(
        self,
        data: st.DataObject,
        run_id: str | None,
        task_key: str | None,
        types: set[str] | None,
    ) -> None:
        after_seq = data.draw(st.integers(0, len(self.model) + 1), label="after_seq")
        ledger = self.writer or self.reader
        if ledger is None:
            return
        self._check_replay(
            ledger, run_id=run_id, task_key=task_key, types=types, after_seq=after_seq
        )

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        for ledger in (self.writer, self.reader):
            if ledger is None:
                continue
            self._check_all(ledger)
            mid = len(self.model) // 2
            self._check_replay(ledger, run_id="run-a")
            self._check_replay(ledger, task_key="beta")
            self._check_replay(ledger, types={"task.event", "future.thing"})
            # Several types of one run: the merged per-type scans.
            self._check_replay(
                ledger, run_id="run-b", types={"task.output", "task.usage", "run.finished"}
            )
            self._check_replay(ledger, after_seq=mid)
            self._check_replay(ledger, types=set())


# No per-example deadline and no "too slow" health check: both are wall-clock limits a
# loaded machine (two copies of the suite on two cores) can miss.
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

TestLedgerAgainstModel = LedgerMachine.TestCase
TestLedgerAgainstModel.settings = settings(RELAXED, max_examples=20, stateful_step_count=25)


def _bulk(n: int, start: int = 0) -> list[Any]:
    kinds = [
        lambda i: TaskOutput(run_id="run-a", task_key="alpha", line=f"line {i}", n=i),
        lambda i: TaskEmitted(run_id="run-b", task_key="beta", data={"i": i, "z": [i]}, n=i),
        lambda i: TaskUsage(run_id="run-b", task_key="beta", input_tokens=i, cost_usd=None),
    ]
    return [kinds[i % 3](i) for i in range(start, start + n)]


@pytest.mark.parametrize("size", [_store._CHUNK - 1, _store._CHUNK, _store._CHUNK + 1,
                                  2 * _store._CHUNK + 3])
def test_bulk_batches_across_insert_chunks(size: int) -> None:
    """Batches of whole multi-row INSERT chunks plus a remainder, fresh and retried."""
    machine = LedgerMachine()
    try:
        machine.open_writer()
        assert machine.writer is not None
        first = _bulk(size)
        assert machine.writer.append(first) == machine._expect_append(first)
        # A retried bulk batch: stored events, in-batch echoes and new ones mixed,
        # the slow path that inserts only the new rows (again chunked).
        retry = first[::7] + _bulk(size, start=size) + first[:3]
        assert machine.writer.append(retry) == machine._expect_append(retry)
        assert len(machine.model) == 2 * size
        machine.matches_model()
    finally:
        machine.teardown()


# -- canonical payloads --------------------------------------------------------------------


@settings(RELAXED, max_examples=200)
@given(data=json_objects, n=counters, run_id=run_ids, task_key=task_keys)
def test_emitted_payload_is_canonical(
    data: dict[str, Any], n: int, run_id: str, task_key: str
) -> None:
    event = TaskEmitted(run_id=run_id, task_key=task_key, data=data, n=n)
    payload = encode_payload(event)
    assert payload == canonical(payload)
    assert json.loads(payload) == {"data": data, "n": n}
    # The stored text is a fixed point: decoding and encoding again gives it back.
    decoded = decode_row(EventRow(event.event_id, run_id, task_key, event.type, event.ts, payload,
                                  seq=1))
    assert encode_payload(decoded) == payload


@settings(RELAXED, max_examples=100)
@given(payload=json_objects)
def test_opaque_payload_is_canonical(payload: dict[str, Any]) -> None:
    event = OpaqueEvent(run_id="r", type="future.thing", payload=payload)
    text = encode_payload(event)
    assert text == canonical(text)
    assert json.loads(text) == payload


NESTED = _unsorted(
    {
        "zeta": {"y": [3, {"b": None, "a": True}], "x": 1.5},
        "alpha": ["é", "日本", "\u2028", 'tab\tquote"back\\slash'],
        "Mid": -0.0,
        "émoji 😀": {"z": 1e300, "a": 2.5e-12, "m": 10**30},
        "": False,
    }
)

REPRESENTATIVE: dict[str, Any] = {
    "run.started": RunStarted(
        run_id="r",
        imported={"source": "/old/runs/r", "format": "coder_eval"},
        config=RunOptions(paths=["b", "a"], tags=["z", "a"], timeout=1.5, cwd="/ü"),
        experiment_id="exp-ü",
        fingerprint=Fingerprint(options={"zz": 1, "aa": 2}, tasks={"t2": "h2", "t1": "h1"}),
        host=NESTED,
        max_parallel=8,
        planned=["t2", "t1"],
        unpriced_models=["m"],
    ),
    "run.resumed": RunResumed(
        run_id="r",
        drift={"tasks": {"b": "changed", "a": "added"}},
        fingerprint=Fingerprint(options=NESTED),
        max_parallel=2,
        to_run=["b", "a"],
    ),
    "task.skipped": TaskSkipped(run_id="r", path="tasks/ä b.yaml", reason='bad: "yaml"'),
    "task.started": TaskStarted(
        imported={"source": "default/t/00/task.json", "sha256": "ab" * 32},
        run_id="r",
        task_key="k",
        attempt=2,
        definition=NESTED,
        definition_hash="abc",
        replicate_index=3,
        tags=["z", "a"],
        task_id="t",
        variant_id="v",
    ),
    "task.output": TaskOutput(
        run_id="r",
        task_key="k",
        line='\x00\x1f\x7f ü \\ "',
        n=7,
        stream="stderr",
        truncated=True,
    ),
    "task.event": TaskEmitted(run_id="r", task_key="k", data=NESTED, n=0),
    "task.lines": TaskLines(run_id="r", task_key="k", lines=[
        ("2026-01-01T00:00:00.000000Z", {"line": "a é", "n": 1}),
        ("2026-01-01T00:00:01.000000Z", {"data": NESTED, "n": 2})]),
    "task.usage": TaskUsage(
        run_id="r",
        task_key="k",
        cache_read_tokens=1,
        cache_write_tokens=2,
        call={"api": "anthropic", "status": 200},  # left out of the payload when None
        cost_usd=0.125,
        estimate=True,  # left out of the payload when false
        input_tokens=3,
        model="m",
        output_tokens=4,
        role="grader",  # left out of the payload when "agent"
    ),
    "task.completed": TaskCompleted(
        imported={"error_category": "agent_crash"},
        folder_reads=["hidden/test_add.py"],
        run_id="r",
        task_key="k",
        attempt=1,
        category=Category.FAILED,
        cost_complete=False,
        cost_usd=None,
        criteria=[
            CriterionResult(detail="é", passed=False, type="regex", weight=0.5),
            CriterionResult(passed=True, type="exit_code"),
        ],
        duration_seconds=1.25,
        environment_info=NESTED,
        error_message="boom\nline two",
        exit_code=-9,
        final_status=FinalStatus.TIMEOUT,
        tokens=TokenCounts(input_tokens=5, output_tokens=6),
        weighted_score=0.75,
        workspace_hash="ab" * 32,  # left out of the payload when None
        kept_hash="cd" * 32,  # so is this
        grade_pending=True,  # left out when false
        failure_class=FailureClass.AGENT,  # left out when None
    ),
    "task.graded": TaskGraded(
        run_id="r", task_key="k", attempt=2, category=Category.SUCCEEDED, cost_usd=0.25,
        tokens=TokenCounts(input_tokens=7),
        criteria=[CriterionResult(detail="ü", passed=True, type="run_command", weight=2,
                                  score=0.5, spread=0.25, errored=True)],
        criteria_from="criteria:/a/b.yaml", criteria_hash="ef" * 32, error_message=None,
        final_status=FinalStatus.SUCCESS, grades="strict", weighted_score=1.0,
        workspace_hash="cd" * 32),
    "task.flagged": TaskFlagged(
        run_id="r", task_key="k", attempt=2, rule="git-history", why="looked into history",
        matches=7, evidence=[Evidence(seq=12, excerpt="$ git log --oneline ü"),
                             Evidence(excerpt="tests/test_a.py: deleted")]),
    "run.graded": RunGraded(
        run_id="r", complete=False, criteria_from="recorded", graded=3, grades="strict",
        only=["default/a*"], refused=[RefusedGrade(task_key="k2", reason="its workspace is gone")]),
    "task.interrupted": TaskInterrupted(run_id="r", task_key="k", reason="SIGINT"),
    "task.stalled": TaskStalled(run_id="r", task_key="k", action="warn", attempt=2,
                                idle_seconds=30.5, last_at="2026-01-01T00:00:00Z", last_n=7,
                                last_seq=41),
    "task.output_truncated": TaskOutputTruncated(
        run_id="r", task_key="k", attempt=2, from_n=1001, limit_bytes=50_000_000,
        omitted_bytes=7_340_032, omitted_lines=91_003, tail_from_n=92_004),
    "task.isolation": TaskIsolation(
        run_id="r", task_key="k", asked="bwrap", attempt=2, backend="none",
        binds=["/a/b"], image="sha256:" + "cd" * 32, network="host",
        probes={"task_file": "absent", "canary": "visible"},  # sorted when built
        reason="bwrap is not installed", uid=1000, version="bubblewrap 0.8.0",
        workspace="/work"),
    "task.egress": TaskEgress(run_id="r", task_key="k", allowed=True, attempt=2,
                              host="pypi.org", port=443, reason="cannot connect: ü",
                              received_bytes=9, seconds=0.5, sent_bytes=7),
    "run.finished": RunFinished(run_id="r", status=RunStatus.BUDGET_STOPPED),
    "run.snapshot": RunSnapshot(run_id="r", fold_version=3, kind="summary", through_seq=7,
                                value=NESTED),
    "run.merged": RunMerged(run_id="r", events=12, source="/elsewhere/a.db",
                            source_ledger="ledger-ü", source_seqs=[3, 99]),
    "run.signed": RunSigned(run_id="r", key="AAAAAAAA", k=2, m=3, rest="A" * 43,
                            public_key="A" * 43, sig="B" * 86, snapshots=["C" * 43]),
}


def test_representatives_cover_every_event_type() -> None:
    assert set(REPRESENTATIVE) == set(EVENT_TYPES)
    for type_, event in REPRESENTATIVE.items():
        assert type(event) is EVENT_TYPES[type_]


@pytest.mark.parametrize("type_", sorted(EVENT_TYPES))
def test_every_event_type_payload_is_canonical(type_: str, ledger: Ledger) -> None:
    event = REPRESENTATIVE[type_]
    payload = encode_payload(event)
    assert payload == canonical(payload)
    # The payload holds every non-envelope field and nothing else.
    envelope = {"seq", "event_id", "run_id", "task_key", "type", "ts"}
    assert set(json.loads(payload)) == set(type(event).model_fields) - envelope
    # What is stored is exactly that text, and it replays to the same event.
    (seq,) = ledger.append([event])
    (row,) = ledger.rows(stored=True)
    assert row.payload == payload
    (replayed,) = ledger.events(types=[type_])  # seals only when asked for
    assert replayed.seq == seq
    assert replayed.model_dump(exclude={"seq"}) == event.model_dump(exclude={"seq"})
    assert encode_payload(replayed) == payload


@pytest.mark.parametrize("value", [1e-05, 2.5e-06, 1e-07, 9.99e-09, 1e-09])
def test_small_floats_are_stable_though_not_pythons_spelling(value: float) -> None:
    # Documented in _chain: numbers are spelled as pydantic-core writes them, which
    # for exponents -5..-9 differs from Python's json (0.00001 vs 1e-05). What the
    # chain needs holds: the same value always gives the same text, and it round-trips.
    event = TaskEmitted(run_id="r", task_key="k", data={"x": value}, n=0)
    payload = encode_payload(event)
    assert json.loads(payload)["data"]["x"] == value
    assert encode_payload(TaskEmitted(run_id="r", task_key="k", data=json.loads(payload)["data"],
                                      n=0)) == payload
