"""The executor's plumbing on its own: processes started on the loop thread, the
sandbox pool, and the writer's group commit (real processes, folders and ledgers)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import trio

from evalledger.executor._process import Child, spawn
from evalledger.executor._sandbox import MAX_AHEAD, SandboxPool
from evalledger.executor._writer import LINGER, open_writer
from evalledger.ledger import EventRow, Ledger, TaskOutput, TaskStarted

from ..waiting import PATIENCE, wait_until


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    out = b""
    while chunk := await stream.receive_some(65536):
        out += chunk
    return out


def test_spawn_pipes_both_streams_and_stdin_and_waits_on_the_exit(tmp_path: Path) -> None:
    program = ("import sys, os; data = sys.stdin.read(); print(data.upper()); "
               "print('err', file=sys.stderr); print(os.getpid() == os.getpgid(0)); "
               "sys.exit(3)")

    async def main() -> tuple[bytes, bytes, int]:
        child = await spawn([sys.executable, "-c", program], cwd=str(tmp_path),
                            env=dict(os.environ), stdin=True)
        assert isinstance(child, Child) and child.stdin is not None
        await child.stdin.send_all(b"hello")
        await child.stdin.aclose()
        async with trio.open_nursery() as nursery:
            got: dict[str, bytes] = {}

            async def take(name: str, stream: trio.abc.ReceiveStream) -> None:
                got[name] = await _read_all(stream)

            nursery.start_soon(take, "out", child.stdout)
            nursery.start_soon(take, "err", child.stderr)
            status = await child.wait()
        assert child.returncode == status
        return got["out"], got["err"], status

    out, err, code = trio.run(main)
    # A new session: the command leads its own process group (what kills reach).
    assert (out, err, code) == (b"HELLO\nTrue\n", b"err\n", 3)


def test_spawn_without_stdin_gives_the_command_end_of_file(tmp_path: Path) -> None:
    async def main() -> bytes:
        child = await spawn([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"],
                            cwd=str(tmp_path), env=dict(os.environ), stdin=False)
        assert child.stdin is None
        out = await _read_all(child.stdout)
        assert await child.wait() == 0
        return out

    assert trio.run(main) == b"''\n"


def test_a_killed_child_reports_the_signal(tmp_path: Path) -> None:
    async def main() -> int:
        child = await spawn(["sleep", "30"], cwd=str(tmp_path), env=dict(os.environ))
        os.killpg(child.pid, signal.SIGKILL)
        return await child.wait()

    assert trio.run(main) == -signal.SIGKILL


def test_a_missing_command_raises_and_leaves_no_descriptor_open(tmp_path: Path) -> None:
    # Earlier tests' garbage (a Popen's pipes) must not be collected mid-count.
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))

    async def main() -> None:
        with pytest.raises(FileNotFoundError):
            await spawn(["/no/such/command"], cwd=str(tmp_path), env=dict(os.environ))

    trio.run(main)
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_pool_hands_out_empty_folders_made_ahead_and_removes_what_it_is_given(
    tmp_path: Path,
) -> None:
    pool = SandboxPool(tmp_path, ahead=4)
    wait_until(lambda: len(list(tmp_path.iterdir())) == 4, "four sandboxes made ahead")
    first = pool.take()
    assert first is not None and first.parent == tmp_path and not any(first.iterdir())
    (first / "left" / "behind").mkdir(parents=True)  # what a task leaves
    second = pool.take()
    assert second is not None and second != first
    pool.discard(first)
    pool.discard(second)
    pool.close()
    assert list(tmp_path.iterdir()) == []  # given back or never taken: all removed


def test_a_pool_asked_for_any_number_ahead_makes_at_most_max_ahead_and_closes(
    tmp_path: Path,
) -> None:
    # `evalledger run -j 100000000000000000000`: the pool made folders ahead without
    # end (millions, until the disk's inodes ran out) and close() waited on it forever.
    root = tmp_path / "sandboxes"
    root.mkdir()
    pool = SandboxPool(root, ahead=4 * 10**20)
    wait_until(lambda: len(os.listdir(root)) >= MAX_AHEAD, "the sandboxes made ahead")
    made = len(os.listdir(root))
    closing = threading.Thread(target=pool.close)
    closing.start()
    closing.join(PATIENCE)
    hung = closing.is_alive()
    if hung:  # stop the worker: it cannot make a folder in a folder gone
        root.rename(tmp_path / "gone")
        closing.join()
    assert not hung, "close() waited on a worker making folders without end"
    assert made <= MAX_AHEAD
    assert list(root.iterdir()) == []


def test_the_pool_says_none_when_it_is_behind(tmp_path: Path) -> None:
    pool = SandboxPool(tmp_path / "missing", ahead=2)  # it cannot make any
    try:
        assert pool.take() is None  # the runner makes its own sandbox then
    finally:
        pool.close()


def _started(i: int) -> TaskStarted:
    return TaskStarted(run_id="r", task_key=f"default/t{i}/00", task_id=f"t{i}")


def test_events_nobody_waits_for_are_committed_within_the_linger(db_path: Path) -> None:
    committed: list[tuple[float, int]] = []

    async def main() -> float:
        with Ledger(db_path) as ledger:
            async with open_writer(
                ledger, lambda events: committed.append((trio.current_time(), len(events)))
            ) as writer:
                sent = trio.current_time()
                await writer.append(_started(1))
                await writer.append(_started(2))
                with trio.fail_after(PATIENCE):
                    while not committed:
                        await trio.sleep(LINGER / 10)
                return sent

    sent = trio.run(main)
    # One commit for both (the second arrived while the first lingered), and not
    # held back much past the linger (loaded machines are slow: a generous bound).
    assert [n for _, n in committed] == [2]
    assert committed[0][0] - sent < LINGER + 1.0


def test_a_durable_event_is_committed_without_waiting_out_the_linger(db_path: Path) -> None:
    async def main() -> list[int]:
        with Ledger(db_path) as ledger:
            async with open_writer(ledger) as writer:
                await writer.append(_started(1))
                seq = await writer.append_durable(_started(2))
                rows = [r.seq or 0 for r in ledger.rows("r")]
                return [seq, *rows]

    # append_durable returned once its batch (which carried the earlier event) committed.
    assert trio.run(main) == [2, 1, 2]


def test_output_rows_keep_their_given_ids(db_path: Path) -> None:
    row = TaskOutput.encoded("r", "k", "2026-01-01T00:00:00.000000Z", "stdout", "x", 1, False,
                             "01a22e91-67e5-7006-a88d-2d901e4a59b0")
    assert isinstance(row, EventRow) and row.event_id == "01a22e91-67e5-7006-a88d-2d901e4a59b0"
