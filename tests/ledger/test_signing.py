"""Signed runs (ledger/_signing.py): what a run's own processes sealed is read; what
anyone else appended, however well chained, is named by verify and left out of reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    EventRow,
    Ledger,
    RunFinished,
    RunResumed,
    RunStarted,
    Signer,
    TaskGraded,
    TaskUsage,
    verify,
)
from evalledger.options import RunOptions
from evalledger.statuses import RunStatus
from tests.ledger.sealing import (
    PASSED,
    RUN,
    commit,
    completed,
    opening,
    output,
    started,
    statuses,
)


def test_a_run_its_batch_sealed_reads_whole_and_verifies(tmp_path: Path) -> None:
    signer = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, signer, opening(signer))
        commit(ledger, signer, started("t"))
        # Lines alone: no seal yet, the next one covers them.
        ledger.append(signer.sealed([EventRow.of(output("t", n)) for n in range(3)]))
        commit(ledger, signer, completed("t"), RunFinished(run_id=RUN, status="completed"))
        report = ledger.seal_report(RUN)
        assert report.signed and not report.ignored and not report.problems
        assert report.keys == ((signer.key_id, "batch", 2),)
        assert verify(ledger, seal_rows=True).ok
        assert statuses(ledger) == {"t": "FAILURE"}


def test_a_forged_success_after_the_run_finished_is_named_and_left_out(
        tmp_path: Path) -> None:
    """The reproduction: a correctly chained task.completed SUCCESS appended after
    run.finished was believed by show, report, runs, diff and SQL, and verify said OK."""
    signer = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, signer, opening(signer))
        commit(ledger, signer, started("t"))
        commit(ledger, signer, completed("t"), RunFinished(run_id=RUN, status="completed"))
        (forged,) = ledger.append([completed("t", **PASSED)])
        assert statuses(ledger) == {"t": "FAILURE"}
        found = verify(ledger)
        assert not found.ok
        assert found.seals == [f"run {RUN}: seq {forged}: task.completed is not sealed by "
                               "the run's key: not written by the process that ran it"]


def test_a_forged_seal_does_not_vouch_and_the_true_ones_still_do(tmp_path: Path) -> None:
    """A forger copies the runner's last seal after its own event: the chain of the key
    no longer verifies at its newest seal, and each is checked in turn."""
    signer = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, signer, opening(signer))
        commit(ledger, signer, started("t"))
        seal = next(r for r in reversed(list(ledger.rows(RUN))) if r.type == "run.signed")
        forged, _ = ledger.append([completed("t", **PASSED), EventRow(
            "forged-seal", RUN, None, "run.signed", seal.ts, seal.payload)])
        commit(ledger, signer, completed("t", attempt=2))
        assert statuses(ledger) == {"t": "FAILURE"}
        report = ledger.seal_report(RUN)
        assert report.ignored == {forged}
        assert [what for _, what in report.problems] == [
            f"run.signed by key {signer.key_id} does not verify: what it seals was "
            "changed, or it is forged"]


def test_a_batch_opened_while_the_run_was_still_sealing_is_not_the_runs(
        tmp_path: Path) -> None:
    """The agent, mid-run, opens a batch of its own (a run.resumed with its key) and
    seals a SUCCESS with it; the real batch goes on sealing after it."""
    runner, agent = Signer(RUN), Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, runner, opening(runner))
        commit(ledger, runner, started("t"))
        fake = commit(ledger, agent, RunResumed(run_id=RUN, public_key=agent.public_key),
                      completed("t", **PASSED))
        commit(ledger, runner, completed("t"), RunFinished(run_id=RUN, status="completed"))
        assert statuses(ledger) == {"t": "FAILURE"}
        report = ledger.seal_report(RUN)
        assert set(fake[:2]) <= report.ignored
        assert any("opened while another batch of the run was still sealing" in what
                   for _, what in report.problems)
        assert [kind for _, kind, _ in report.keys] == ["batch"]


def test_a_later_batch_and_a_regrade_are_the_runs_and_a_regrade_seals_gradings_only(
        tmp_path: Path) -> None:
    first, second, regrade = Signer(RUN), Signer(RUN), Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, first, opening(first))
        commit(ledger, first, started("t"))  # then the process died: no run.finished
        commit(ledger, second, RunResumed(run_id=RUN, public_key=second.public_key))
        commit(ledger, second, started("t", 2))
        commit(ledger, second, completed("t", 2), RunFinished(run_id=RUN, status="completed"))
        ledger.append(regrade.sealed([EventRow.of(TaskUsage(run_id=RUN, task_key="t",
                                                            role="grader"))]))
        commit(ledger, regrade, TaskGraded(run_id=RUN, task_key="t", grades="g",
                                           criteria_from="recorded", criteria_hash="h",
                                           workspace_hash="w", **PASSED))
        report = ledger.seal_report(RUN)
        assert not report.ignored and not report.problems, report
        assert [kind for _, kind, _ in report.keys] == ["batch", "batch", "regrade"]
        assert verify(ledger, seal_rows=True).ok
        # A regrade's key sealing a verdict of a batch counts for nothing.
        (bad, _) = commit(ledger, Signer(RUN), completed("t", 3, **PASSED))
        report = ledger.seal_report(RUN)
        assert bad in report.ignored
        assert statuses(ledger) == {"t": "FAILURE"}


def test_an_event_the_runner_sealed_and_someone_edited_is_left_out(tmp_path: Path) -> None:
    """Triggers dropped, a FAILURE rewritten to SUCCESS and the chain re-hashed from
    there (what verify alone cannot see without an anchor): the seal no longer holds."""
    import sqlite3
    from contextlib import closing

    from evalledger.ledger._chain import GENESIS, chain_rows

    signer = Signer(RUN)
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        commit(ledger, signer, opening(signer))
        (done, _) = commit(ledger, signer, completed("t"))
        rows = list(ledger.rows())
    edited = [r._replace(payload=r.payload.replace('"FAILURE"', '"SUCCESS"').replace(
        '"failed"', '"succeeded"')) if r.seq == done else r for r in rows]
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TRIGGER events_no_delete")
        conn.execute("DELETE FROM events")
        conn.executemany("INSERT INTO events (seq, event_id, run_id, task_key, type, ts, "
                         "payload, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         chain_rows(GENESIS, 1, edited))
        conn.commit()
    with Ledger(db) as ledger:
        assert statuses(ledger) == {}
        assert done in ledger.seal_report(RUN).ignored


def test_a_line_put_among_the_sealed_ones_is_found_by_a_deep_verify(tmp_path: Path) -> None:
    signer = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, signer, opening(signer))
        commit(ledger, signer, started("t"))
        ledger.append(signer.sealed([EventRow.of(output("t", 0))]))
        (forged,) = ledger.append([EventRow.of(output("t", 1))])  # not the runner's
        commit(ledger, signer, output("t", 2), completed("t"))
        assert verify(ledger).ok  # reads never look at output lines' seals
        found = verify(ledger, seal_rows=True)
        assert not found.ok
        # The seal after it no longer matches the rows before it (which of them is not
        # the runner's, it cannot say: the rows it names are where to look).
        assert f"run {RUN}: seq {forged + 3}: the 2 other rows of the run this seal covers " \
               "were changed, or rows were put among them" in found.seals, found.seals


def test_a_run_recorded_before_signing_reads_as_before(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append([RunStarted(run_id=RUN, planned=["t"]), started("t"), completed("t")])
        ledger.append([completed("t", 2, **PASSED)])
        assert not ledger.seal_report(RUN).signed
        assert statuses(ledger) == {"t": "SUCCESS"}
        assert verify(ledger).ok


# A step: the runner commits some events (sealed), or someone else appends one.
_STEP = st.one_of(
    st.tuples(st.just("runner"), st.lists(st.sampled_from(["started", "output", "usage",
                                                             "completed"]),
                                          min_size=1, max_size=4)),
    st.tuples(st.just("forger"), st.sampled_from(["started", "output", "completed",
                                                  "finished"])),
)


def _event(kind: str, n: int) -> AnyEvent:
    if kind == "started":
        return started("t", n)
    if kind == "output":
        return output("t", n)
    if kind == "usage":
        return TaskUsage(run_id=RUN, task_key="t", input_tokens=n)
    if kind == "finished":
        return RunFinished(run_id=RUN, status=RunStatus.COMPLETED)
    return completed("t", n, **PASSED)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, max_size=12))
def test_reads_leave_out_exactly_the_sealed_types_the_runner_did_not_write(
        tmp_path_factory: object, steps: list[tuple[str, object]]) -> None:
    """The model: every event of a sealed type someone else appended is left out by
    reads and named by verify, and nothing the runner wrote is."""
    import tempfile

    sealed_kinds = {"started", "completed", "finished"}
    with tempfile.TemporaryDirectory() as folder, Ledger(Path(folder) / "l.db") as ledger:
        signer = Signer(RUN)
        commit(ledger, signer, opening(signer))
        forged: set[int] = set()
        n = 0
        for who, what in steps:
            if who == "runner":
                kinds = list(what)  # type: ignore[call-overload]
                events = [_event(kind, n + i) for i, kind in enumerate(kinds)]
                n += len(kinds)
                ledger.append(signer.sealed([EventRow.of(e) for e in events]))
            else:
                (seq,) = ledger.append([_event(str(what), n)])
                n += 1
                if what in sealed_kinds:
                    forged.add(seq)
        report = ledger.seal_report(RUN)
        assert report.ignored == forged
        assert {seq for seq, _ in report.problems} == forged
        assert verify(ledger).ok == (not forged)
        read = {e.seq for e in ledger.events(RUN)}
        assert not read & forged


def test_a_task_event_after_the_run_finished_is_named_in_any_run(tmp_path: Path) -> None:
    """The ordering rule, for runs recorded before signing too: no batch writes a task
    event after its run.finished; a resume opens a batch of its own first. (A run a
    transfer carried in is left to its seals: a transfer appends in any order.)"""
    from evalledger.ledger import RunMerged

    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append([RunStarted(run_id=RUN, planned=["t"]), started("t"), completed("t"),
                       RunFinished(run_id=RUN, status=RunStatus.COMPLETED)])
        (late,) = ledger.append([completed("t", 2, **PASSED)])
        ledger.append([RunResumed(run_id=RUN), started("t", 4), completed("t", 4)])
        found = verify(ledger)
        assert found.seals == [f"run {RUN}: seq {late}: task.completed after the run's "
                               "run.finished, with no run.resumed since: no batch of the "
                               "run wrote it"]
        ledger.append([RunMerged(run_id=RUN, events=1, source="x.db")])
        assert verify(ledger).ok


def test_a_regrade_forged_while_the_run_is_running_counts_for_nothing(tmp_path: Path) -> None:
    """Found in review: a new key sealing only gradings counted as a regrade whenever
    it came; the agent's, mid-run, made its SUCCESS the default grade set."""
    from evalledger.ledger import RunGraded

    runner, agent = Signer(RUN), Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, runner, opening(runner))
        commit(ledger, runner, started("t"))
        graded = commit(ledger, agent, TaskGraded(
            run_id=RUN, task_key="t", grades="g", criteria_from="recorded",
            criteria_hash="h", workspace_hash="w", **PASSED), RunGraded(
            run_id=RUN, grades="g", complete=True, criteria_from="recorded", graded=1))
        commit(ledger, runner, completed("t"), RunFinished(run_id=RUN, status="completed"))
        report = ledger.seal_report(RUN)
        assert set(graded[:2]) <= report.ignored
        assert [kind for _, kind, _ in report.keys] == ["batch"]
        assert any("a regrade (key" in what and "while a batch of the run was running" in what
                   for _, what in report.problems)


def test_a_rejected_forged_batch_does_not_cancel_the_real_resume(tmp_path: Path) -> None:
    """Found in review: the overlap rule counted a batch it had itself rejected, so a
    forged batch that sealed once more after the real resume opened made the resume's
    events ignored."""
    first, agent, second = Signer(RUN), Signer(RUN), Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, first, opening(first))
        commit(ledger, first, started("t"))
        commit(ledger, agent, RunResumed(run_id=RUN, public_key=agent.public_key))
        commit(ledger, first, completed("t"))  # the real batch goes on: the agent's is not
        # the real batch died here; a real resume, then the agent seals once more
        commit(ledger, second, RunResumed(run_id=RUN, public_key=second.public_key))
        commit(ledger, agent, completed("t", 9, **PASSED))
        (done, _) = commit(ledger, second, completed("t", 2))
        report = ledger.seal_report(RUN)
        assert [kind for _, kind, _ in report.keys] == ["batch", "batch"]
        assert done not in report.ignored
        assert statuses(ledger) == {"t": "FAILURE"}


@pytest.mark.parametrize("payload", [
    "[]", '{"key":"AAAAAAAA","k":1,"sig":"x","public_key":"A"}',
    '{"key":"AAAAAAAA","k":1,"m":18446744073709551616,"rest":"' + "A" * 43 + '","sig":"'
    + "B" * 86 + '"}', '{"key":5,"k":"1","sig":[]}', '"text"'])
def test_a_malformed_seal_is_named_never_a_traceback(tmp_path: Path, payload: str) -> None:
    signer = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, signer, opening(signer))
        commit(ledger, signer, started("t"))
        (bad,) = ledger.append([EventRow("bad", RUN, None, "run.signed",
                                         "2026-01-01T00:00:00Z", payload)])
        commit(ledger, signer, completed("t"))
        report = ledger.seal_report(RUN)
        assert (bad, "run.signed is malformed") in report.problems
        assert statuses(ledger) == {"t": "FAILURE"}
        assert f"run {RUN}: seq {bad}: run.signed is malformed" in verify(ledger).seals


def test_the_shards_of_a_run_merged_while_one_still_ran_are_all_the_runs(
        tmp_path: Path) -> None:
    """Found in review: shards run at once on several machines; merged in pieces, one
    shard's seals come after the other's opening, and its batch was taken for forged."""
    a, b = Signer(RUN), Signer(RUN)

    def shard(signer: Signer, which: str) -> RunStarted:
        return RunStarted(run_id=RUN, planned=["t", "u"], public_key=signer.public_key,
                          config=RunOptions(shard=which))

    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, a, shard(a, "1/2"))
        commit(ledger, a, started("t"))
        commit(ledger, b, shard(b, "2/2"))
        commit(ledger, b, started("u"), completed("u"))
        commit(ledger, a, completed("t"), RunFinished(run_id=RUN, status="completed"))
        report = ledger.seal_report(RUN)
        assert not report.ignored and not report.problems, report.problems
        assert [kind for _, kind, _ in report.keys] == ["batch", "batch"]

