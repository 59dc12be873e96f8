"""``_workspace_diff``: a workspace against the folder it started from, read as an
adversary's tree (real files, links and FIFOs in a temporary folder): the files a page
lists (``compare``) and the unified diff a judge reads (``unified_diff``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evalledger import _workspace_diff
from evalledger._workspace_diff import MOST_BYTES, compare, unified_diff
from tests.needs import unavailable


def test_added_removed_modified_and_unchanged(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    (before / "same.txt").write_text("same\n")
    (after / "same.txt").write_text("same\n")
    (before / "edit.py").write_text("a = 1\nb = 2\n")
    (after / "edit.py").write_text("a = 1\nb = 3\n")
    (before / "gone.txt").write_text("x\n")
    (after / "sub").mkdir()
    (after / "sub" / "new.py").write_text("print(1)\n")
    changes = compare(before, after)
    assert [(f.path, f.kind) for f in changes.files] == [
        ("edit.py", "modified"), ("gone.txt", "removed"), ("sub/new.py", "added")]
    assert changes.unchanged == 1
    assert [line for kind, line in changes.files[0].diff if kind in ("add", "del")] == [
        "-b = 2", "+b = 3"]


def test_links_fifos_binaries_and_large_files_are_named_never_read(tmp_path: Path) -> None:
    after = tmp_path / "after"
    after.mkdir()
    (after / "secret").symlink_to("/etc/passwd")
    (after / "etc").symlink_to("/etc")  # a folder: named, not entered
    os.mkfifo(after / "pipe")  # opened, it would wait for a writer forever
    (after / "blob.bin").write_bytes(b"\0\1\2" * 10)
    (after / "big.txt").write_bytes(b"x" * (MOST_BYTES + 1))
    changes = compare(None, after)
    shown = {f.path: (f.kind, f.note, f.diff) for f in changes.files}
    assert shown == {
        "secret": ("added", "a link to /etc/passwd (not followed)", ()),
        "etc": ("added", "a link to /etc (not followed)", ()),
        "blob.bin": ("added", "binary", ()),
        "big.txt": ("added", "larger than 1 MiB", ())}  # the FIFO is no file: left out
    assert "root:" not in repr(changes)


def test_a_large_tree_is_paged(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    for i in range(25):
        (before / f"f{i:02}.txt").write_text("old\n")
        (after / f"f{i:02}.txt").write_text("new\n" if i % 2 else "old\n")
        (after / f"n{i:02}.txt").write_text("added\n")
    pages = [compare(before, after, page=n, most=10) for n in (1, 2, 3, 4)]
    assert [len(p.files) for p in pages] == [10, 10, 10, 7]  # 12 modified + 25 added
    assert [p.start for p in pages] == [0, 10, 20, 30] and pages[3].more == 0
    assert pages[0].more == 27 and {p.changed for p in pages} == {37}
    assert pages[0].kinds == {"added": 25, "removed": 0, "modified": 12}
    assert pages[0].unchanged == 13
    listed = [f.path for p in pages for f in p.files]
    assert listed == sorted(listed) and len(set(listed)) == 37
    past = compare(before, after, page=9, most=10)  # past the last page: the last
    assert (past.page, past.start, [f.path for f in past.files]) == (
        4, 30, [f.path for f in pages[3].files])


UNREADABLE = """
import sys
from pathlib import Path
from evalledger._workspace_diff import compare
changes = compare(Path(sys.argv[1]), Path(sys.argv[2]))
print(sorted((f.path, f.kind, f.note) for f in changes.files))
"""


def test_a_file_the_agent_made_unreadable_is_named_so(tmp_path: Path) -> None:
    """An agent may take a file's read permission away: the comparison names it, and
    neither the task page nor the report is lost to it."""
    # As root every file is readable: the comparison runs as nobody there, over trees
    # nobody can walk (pytest's own folders are root's alone).
    as_root = os.geteuid() == 0
    with tempfile.TemporaryDirectory(dir="/tmp" if as_root else None) as folder:
        top = Path(folder) if as_root else tmp_path
        top.chmod(0o755)
        before, after = top / "before", top / "after"
        before.mkdir()
        after.mkdir()
        for root in (before, after):
            (root / "locked.txt").write_text("one\n")
            root.chmod(0o755)
        (after / "locked.txt").write_text("two\n")
        (after / "new.txt").write_text("x\n")
        (before / "locked.txt").chmod(0o644)
        for path in (after / "locked.txt", after / "new.txt"):
            path.chmod(0)
        command = [sys.executable, "-c", UNREADABLE, str(before), str(after)]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
        if as_root:
            # Its own copy of the package (the checkout may lie in root's home), the
            # venv's interpreter (.ci/run makes its folder traversable).
            package = Path(_workspace_diff.__file__).parent
            shutil.copytree(package, top / "lib" / "evalledger")
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                       *command]
            env["PYTHONPATH"] = str(top / "lib")
            can = subprocess.run([*command[:4], sys.executable, "-c",
                                  "import evalledger._workspace_diff"],
                                 env=env, capture_output=True, text=True, check=False)
            if can.returncode:
                unavailable("UNPRIVILEGED", f"nobody cannot run this Python ({sys.executable})")
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted([
        ("locked.txt", "modified", "unreadable (Permission denied)"),
        ("new.txt", "added", "unreadable (Permission denied)")]))


def test_a_tree_the_agent_made_too_deep_is_said_so_not_a_traceback(tmp_path: Path) -> None:
    """report.html crashed on a 1,100-deep tree (os.walk recursing once per level)."""
    kept = tmp_path / "kept"
    folder = kept
    kept.mkdir()
    for _ in range(300):  # past the bound, short of any path limit
        folder = folder / "d"
        folder.mkdir()
    changes = compare(None, kept)
    assert changes.why_not == ("its workspace cannot be shown: folders nested deeper than "
                               "256 levels")
    assert changes.files == []


# -- what a judge reads ------------------------------------------------------------------------


def _judged(original: Path | None, kept: Path, most_chars: int = 64 * 1024) -> str:
    return unified_diff(original, kept, most_chars=most_chars, file_bytes=64 * 1024)


def test_a_judge_reads_one_unified_diff_of_the_text_files(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    for root in (before, after):
        (root / "sub").mkdir(parents=True)
        (root / ".git").mkdir()
        (root / "same.txt").write_text("same\n")
    (before / "sub" / "mod.py").write_text("x = 1\n")
    (after / "sub" / "mod.py").write_text("x = 2\ny = 3")  # no newline at its end
    (before / "gone.txt").write_text("gone\n")
    (after / "new.md").write_text("new\n")
    (after / ".git" / "HEAD").write_text("elsewhere\n")  # never shown
    (after / "bin.dat").write_bytes(b"\xff\xfe\x00")  # no text: left out
    (after / "link").symlink_to("/etc/passwd")  # never followed
    os.mkfifo(after / "fifo")  # never waited on
    assert _judged(before, after) == (
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n"
        "--- /dev/null\n+++ b/new.md\n@@ -0,0 +1 @@\n+new\n"
        "--- a/sub/mod.py\n+++ b/sub/mod.py\n@@ -1 +1,2 @@\n-x = 1\n+x = 2\n+y = 3\n")
    assert _judged(None, after).count("--- /dev/null") == 3  # every text file is new
    assert _judged(after, after) == "(no changes)"


def test_a_judges_diff_is_cut_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x" * 5000 + "\n")
    said = _judged(None, tmp_path, most_chars=1024)
    assert said.endswith("\n(diff cut at 1 KiB)") and len(said) < 1100
