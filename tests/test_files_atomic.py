"""Files written whole or not at all (``evalledger._files``), on a real full file system.

A small tmpfs is mounted for the full-disk cases (root only; skipped elsewhere): a
write that runs out of room there is the real ENOSPC, not a mock of it.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalledger._files import atomic_file, same_file, write_atomic
from tests.cli.helpers import assert_one_line_error, evalledger, write_task
from tests.needs import unavailable


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if made.returncode != 0:
        unavailable("ROOT", f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(path: Path) -> None:
    """Write ``path`` until the disk is full."""
    with open(path, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_write_that_fills_the_disk_leaves_the_previous_file_whole(small_disk: Path) -> None:
    target = small_disk / "report.md"
    write_atomic(target, "the previous report\n")
    with pytest.raises(OSError) as full:
        write_atomic(target, "x" * 200_000)
    assert full.value.errno == errno.ENOSPC
    assert full.value.filename == str(target)
    assert target.read_text() == "the previous report\n"
    assert _listing(small_disk) == ["report.md"]  # no temporary file left


def test_a_write_that_fails_midway_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "export.ndjson"
    with pytest.raises(RuntimeError), atomic_file(target) as out:
        out.write(b"half of it\n")
        raise RuntimeError("the source failed")
    assert _listing(tmp_path) == []


def test_a_whole_write_replaces_the_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.json"
    target.write_text("old")
    with atomic_file(target) as out:
        out.write(b"new")
        assert target.read_text() == "old"  # not visible until whole
    assert target.read_text() == "new"
    assert _listing(tmp_path) == ["checkpoint.json"]


def test_a_fifo_is_written_as_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    write_atomic(fifo, "through the pipe\n")
    assert reader.communicate(timeout=30)[0] == b"through the pipe\n"
    assert _listing(tmp_path) == ["pipe"]


def test_the_ledger_and_its_companions_are_the_same_file(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    (tmp_path / "link").symlink_to(ledger)
    for path in (ledger, tmp_path / "l.db-wal", tmp_path / "l.db-shm", tmp_path / "link",
                 tmp_path / "sub" / ".." / "l.db"):
        assert same_file(path, ledger), path
    assert not same_file(tmp_path / "l.db.bak", ledger)


def test_report_o_on_a_full_disk_is_one_line_and_leaves_the_previous_report(
    tmp_path: Path, small_disk: Path
) -> None:
    write_task(tmp_path / "tasks" / "t.yaml",
               ["python3", "-c", "print('a long line of output ' * 3000)"])
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", "tasks", "--run-id", "r").returncode == 0
    target = small_disk / "report.html"
    target.write_text("the previous report\n")
    _fill(small_disk / "filler")
    result = evalledger(tmp_path, db, "report", "r", "--format", "html", "-o", str(target))
    assert str(target) in assert_one_line_error(result)
    assert target.read_text() == "the previous report\n"
    assert _listing(small_disk) == ["filler", "report.html"]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("command", [
    ("export", "latest", "-o", "{db}"), ("checkpoint", "-o", "{db}-wal"),
    ("report", "latest", "-o", "{db}"), ("run", "tasks", "--junit-xml", "{db}"),
], ids=["export -o", "checkpoint -o", "report -o", "run --junit-xml"])
def test_an_output_file_is_never_the_ledger(tmp_path: Path, command: tuple[str, ...]) -> None:
    """export -o truncated the ledger through a descriptor of its own while a connection
    to it was open; checkpoint -o and --junit-xml wrote over it."""
    write_task(tmp_path / "tasks" / "t.yaml", "echo hi")
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", "tasks").returncode == 0
    before = db.read_bytes()
    result = evalledger(tmp_path, db, *(part.format(db=db) for part in command))
    assert "is the ledger itself" in assert_one_line_error(result)
    assert db.read_bytes() == before
    assert evalledger(tmp_path, db, "verify").returncode == 0
