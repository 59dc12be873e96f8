"""evalledger._files on real files: what is read, what is refused before it is opened,
a file swapped between the look and the open, a size that lies, a walk that stays out
of links."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from evalledger._files import NotRead, TooBig, read_regular, walk


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100_000)
    assert read_regular(tmp_path / "f", 100_000) == b"x" * 100_000
    (tmp_path / "empty").write_bytes(b"")
    assert read_regular(tmp_path / "empty", 10) == b""


def test_a_file_one_byte_over_the_limit_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 101)
    with pytest.raises(TooBig, match=r"101 bytes \(101 bytes\): over the 100 bytes limit"):
        read_regular(tmp_path / "f", 100)


@pytest.mark.parametrize(("make", "reason"), [
    (lambda p: p.symlink_to("/dev/zero"), "a symbolic link (not followed)"),
    (lambda p: p.symlink_to(p.parent / "missing"), "a symbolic link (not followed)"),
    (lambda p: os.mkfifo(p), "a FIFO (not opened)"),
    (lambda p: p.mkdir(), "a folder"),
], ids=["link", "broken-link", "fifo", "folder"])
def test_what_is_not_a_regular_file_is_never_opened(tmp_path: Path, make: Callable[[Path], object],
                                                    reason: str) -> None:
    make(tmp_path / "task.json")
    with pytest.raises(NotRead) as refused:
        read_regular(tmp_path / "task.json", 1 << 20)
    assert str(refused.value) == reason


def test_a_device_and_a_socket_are_never_opened(tmp_path: Path) -> None:
    with pytest.raises(NotRead, match=r"^a device \(not opened\)$"):
        read_regular(Path("/dev/zero"), 1 << 20)
    listening = socket.socket(socket.AF_UNIX)
    try:
        listening.bind(str(tmp_path / "s"))
        with pytest.raises(NotRead, match=r"^a socket \(not opened\)$"):
            read_regular(tmp_path / "s", 1 << 20)
    finally:
        listening.close()


def test_a_file_swapped_after_the_look_is_not_read(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The window between lstat and open, made to happen: another file renamed over the
    one that was looked at. The descriptor then holds another inode: refused."""
    path = tmp_path / "task.json"
    path.write_bytes(b'{"a": 1}')
    (tmp_path / "other").write_bytes(b'{"secret": 1}')
    real_open = os.open

    def swap_then_open(name: str | os.PathLike[str], flags: int, *args: int) -> int:
        os.replace(tmp_path / "other", path)
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(NotRead, match="replaced by another file"):
        read_regular(path, 1 << 20)


def test_a_link_swapped_in_after_the_look_is_not_followed(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "task.json"
    path.write_bytes(b"{}")
    real_open = os.open

    def link_then_open(name: str | os.PathLike[str], flags: int, *args: int) -> int:
        path.unlink()
        path.symlink_to("/dev/zero")
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", link_then_open)
    with pytest.raises(NotRead, match=r"^a symbolic link \(not followed\)$"):
        read_regular(path, 1 << 20)


def test_a_size_that_lies_still_reads_no_more_than_the_limit() -> None:
    """/proc files say 0 bytes and hold more: what is read is bounded, not the size."""
    status = Path("/proc/self/status")
    assert os.lstat(status).st_size == 0
    assert len(read_regular(status, 1 << 20)) > 100
    with pytest.raises(TooBig, match="grew past the 100 bytes limit"):
        read_regular(status, 100)


def test_the_walk_stays_out_of_links_and_names_what_it_cannot_list(tmp_path: Path) -> None:
    (tmp_path / "top/a/b").mkdir(parents=True)
    (tmp_path / "top/a/b/task.json").write_text("{}")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/task.json").write_text("{}")
    (tmp_path / "top/a/link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "top/a/file-link").symlink_to(tmp_path / "elsewhere/task.json")
    unlisted: list[tuple[Path, str]] = []
    listings = list(walk(tmp_path / "top", lambda path, why: unlisted.append((path, why))))
    assert [listing.path.relative_to(tmp_path).as_posix() for listing in listings] == [
        "top", "top/a", "top/a/b"]
    assert listings[1].links == ["link"] and list(listings[1].files) == ["file-link"]
    assert list(listings[2].files) == ["task.json"]
    assert not unlisted
    list(walk(tmp_path / "missing", lambda path, why: unlisted.append((path, why))))
    assert unlisted == [(tmp_path / "missing",
                         "cannot list the folder: No such file or directory")]
