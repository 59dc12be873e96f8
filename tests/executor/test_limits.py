"""Resource limits (docs/isolation.md, "Limits"): real attempts that take too much memory,
too many processes or too much disk end LIMIT_EXCEEDED, the agent's failure, under none
and bwrap (a cgroup each, here) and docker (its own flags); the building blocks below."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import evalledger as evalledger_package
from evalledger.executor import _limits
from evalledger.suite import ResolvedLimits

from ..cli.helpers import evalledger, events, of_type
from ..cli.helpers import write_tasks as write
from ..needs import NOBODY, unavailable
from ..needs import root as root_


def write_tasks(folder: Path, tasks: dict[str, dict[str, object]],
                success_criteria: list[dict[str, object]]) -> Path:
    return write(folder, {name: {**keys, "success_criteria": success_criteria}
                          for name, keys in tasks.items()})

# A shell holding ~300 MB in a variable: busybox's sh and dash alike.
HOG = "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo held ${#x}"
# The same in a subshell: the kernel kills that child, the shell above it exits 1.
CHILD_HOG = f"({HOG}); exit 1"
FORKS = "for i in $(seq 1 40); do sleep 3 & done; wait; echo forked"
FILLS = "head -c 3000000 /dev/zero > a; head -c 3000000 /dev/zero > b; sleep 30; echo filled"


@pytest.fixture
def cgroups() -> dict[str, Path]:
    """This runner's cgroup folders, or a skip saying why limits fall back to rlimits
    here; CI (root, cgroup v1) sets ``EVALLEDGER_REQUIRE_CGROUPS=1``."""
    homes = _limits.cgroup_homes()
    if homes is None:
        unavailable("CGROUPS", "no cgroup v1 memory and pids hierarchy this user may write")
    return homes


def _keys(request: pytest.FixtureRequest, isolation: str) -> dict[str, str]:
    if isolation == "bwrap":
        request.getfixturevalue("bwrap")
    if isolation == "docker":
        return {"isolation": "docker", "image": request.getfixturevalue("docker_images")["busybox"]}
    return {"isolation": isolation}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("isolation", ["none", "bwrap", "docker"])
def test_each_limit_hit_ends_its_attempt_as_limit_exceeded(
    tmp_path: Path, isolation: str, request: pytest.FixtureRequest, cgroups: dict[str, Path]
) -> None:
    """Memory, processes and disk past the task's limits: each attempt ends
    LIMIT_EXCEEDED, the agent's failure, saying which limit. One at a time (``-j 1``),
    so the attempt after them reuses their cgroup: within its limits, it succeeds."""
    keys = _keys(request, isolation)
    exit_code = [{"type": "exit_code"}]
    tasks = write_tasks(tmp_path / "tasks", {
        "a-memory": {"command": HOG, "limits": {"memory": "100MiB"}, **keys},
        "a-child": {"command": CHILD_HOG, "limits": {"memory": "100MiB"}, **keys},
        "b-pids": {"command": FORKS, "limits": {"pids": 20}, **keys},
        "c-disk": {"command": FILLS, "limits": {"disk": "4MB"}, "timeout": 60, **keys},
        "d-within": {"command": "echo fine", **keys},
    }, success_criteria=exit_code)
    db = tmp_path / "ledger.db"
    ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "limits", "-j", "1")
    assert ran.returncode == 1, ran.stderr
    done = {e.task_key.split("/")[1]: e for e in of_type(events(db, "limits"), "task.completed")}
    said = {name: (e.final_status, e.failure_class) for name, e in done.items()}
    hit = ("LIMIT_EXCEEDED", "agent")
    expected = {"a-memory": hit, "a-child": hit, "b-pids": hit, "c-disk": hit,
                "d-within": ("SUCCESS", None)}
    if isolation == "docker":
        # A fork past --pids-limit fails inside the container: the command's failure,
        # which docker does not report (docs/isolation.md).
        expected["b-pids"] = ("FAILURE", "agent")
    assert said == expected, done
    for name in ("a-memory", "a-child"):
        assert done[name].error_message.startswith("memory: 100 MiB limit hit, the kernel")
    assert done["c-disk"].error_message.startswith("disk: the workspace takes")
    assert done["c-disk"].duration_seconds < 20  # stopped when seen, not at its end
    if isolation != "docker":
        assert done["b-pids"].error_message.startswith("pids: 20 processes at once")
    mine = [p for home in cgroups.values() for p in home.glob(f"evalledger-{os.getpid()}-*")]
    assert all(not (p / "cgroup.procs").read_text().strip() for p in mine)


def test_bwrap_gives_its_command_a_tmp_of_the_limits_size(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``limits.tmp`` sizes the private /tmp (a tmpfs, in the host's memory): past it a
    write fails inside, the command's own failure."""
    keys = _keys(request, "bwrap")
    tasks = write_tasks(tmp_path / "tasks", {
        "small": {"command": "head -c 3000000 /dev/zero > /tmp/a && echo wrote",
                  "limits": {"tmp": "1MiB"}, **keys},
        "roomy": {"command": "head -c 3000000 /dev/zero > /tmp/a && echo wrote", **keys},
    }, success_criteria=[{"type": "exit_code"}])
    db = tmp_path / "ledger.db"
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "tmp").returncode == 1
    done = {e.task_key.split("/")[1]: e.final_status
            for e in of_type(events(db, "tmp"), "task.completed")}
    assert done == {"small": "FAILURE", "roomy": "SUCCESS"}


def test_without_a_cgroup_the_prefix_sets_rlimits_the_shell_keeps(tmp_path: Path) -> None:
    """Where no cgroup can be made (an unprivileged runner), memory bounds each process's
    data and the disk each file: what a real shell behind the prefix then reports."""
    bounds = ResolvedLimits(memory=256 << 20, disk=10 << 20)
    lines = _limits.prefix(bounds, None)
    said = subprocess.run(["/bin/sh", "-c", lines + "ulimit -d; ulimit -f"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert said == [str(256 << 10), str((10 << 20) // 512)]
    assert _limits.prefix(ResolvedLimits(memory=None, disk=None, pids=None, tmp=None), None) == ""


def test_an_argv_command_runs_behind_a_shell_that_applies_the_prefix(tmp_path: Path) -> None:
    """A list command cannot take shell lines in front: it runs behind a shell that
    applies them and then execs it, its arguments whole."""
    lines = _limits.prefix(ResolvedLimits(memory=None, disk=1 << 20), None)
    argv = _limits.wrap(["/bin/sh", "-c", 'ulimit -f; printf "%s|" "$@"', "x", "a b", "*"],
                        lines)
    said = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert said == f"{(1 << 20) // 512}\na b|*|"
    assert _limits.wrap("echo hi", "") == "echo hi"


def test_cgroup_homes_are_read_from_the_mounts_and_membership(tmp_path: Path) -> None:
    """The runner's own folder in each v1 hierarchy, from /proc/self/mountinfo and
    /proc/self/cgroup as the kernel writes them; none without memory and pids."""
    for name in ("memory/runner/a", "pids", "cpu"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "cgroup.procs").touch()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        f"32 31 0:29 / {tmp_path}/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        f"35 31 0:32 / {tmp_path}/memory rw,relatime - cgroup cgroup rw,memory\n"
        f"39 31 0:36 / {tmp_path}/pids rw,relatime - cgroup cgroup rw,pids\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    membership = tmp_path / "cgroup"
    membership.write_text("8:pids:/\n4:memory:/runner/a\n1:cpu:/\n0::/\n")
    assert _limits.cgroup_homes(str(mountinfo), str(membership)) == {
        "memory": tmp_path / "memory/runner/a", "pids": tmp_path / "pids", "cpu": tmp_path / "cpu"}
    membership.write_text("4:memory:/runner/a\n1:cpu:/\n0::/\n")
    assert _limits.cgroup_homes(str(mountinfo), str(membership)) is None


def test_a_task_files_limits_merge_by_key_and_output_is_max_output(tmp_path: Path) -> None:
    """``limits`` merge key by key across an experiment's defaults, the task file and a
    variant; ``output`` is ``max_output``; a task at the default limits is defined (and
    hashed) as before limits existed; ``null`` lifts one."""
    from evalledger.suite import load_tasks

    (tmp_path / "t.yaml").write_text(
        "command: echo\nlimits: {memory: 1GiB, output: 2MB, pids: null}\n")
    (tmp_path / "plain.yaml").write_text("command: echo\n")
    (tmp_path / "exp.yaml").write_text(
        "experiment_id: e\ntasks: [t.yaml, plain.yaml]\ndefaults: {limits: {disk: 1GiB}}\n"
        "variants: [{variant_id: v, limits: {cpus: 1.5}}]\n")
    loaded = {t.task_id: t for t in load_tasks(experiment=tmp_path / "exp.yaml").tasks}
    task = loaded["t"]
    assert task.limits == ResolvedLimits(memory=1 << 30, pids=None, cpus=1.5, disk=1 << 30)
    assert task.max_output == 2_000_000
    (tmp_path / "plain.yaml").write_text("command: echo\nlimits: {}\n")
    (both,) = load_tasks([tmp_path / "plain.yaml"]).tasks
    assert "limits" not in both.definition()
    (tmp_path / "bad.yaml").write_text("command: echo\nmax_output: 5\nlimits: {output: 6}\n")
    skipped = load_tasks([tmp_path / "bad.yaml"]).skipped
    assert [s.reason for s in skipped] and "limits.output and max_output" in skipped[0].reason


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_unprivileged_runner_falls_back_to_rlimits_and_still_bounds_the_disk(
    open_folder: Path,
) -> None:
    """The runner as nobody (no cgroup it may make): ``host.limits`` says rlimits; the
    disk is still watched (LIMIT_EXCEEDED), a file past it cannot be written, and the
    memory bound is each process's own (its allocation fails: the command's failure)."""
    root_("becoming the user nobody")
    root = open_folder
    tasks = write(root / "tasks", {
        "disk": {"command": FILLS, "limits": {"disk": "4MB"}},
        "file": {"command": "head -c 5000000 /dev/zero > big && echo wrote",
                 "limits": {"disk": "1MB"}},
        "memory": {"command": [sys.executable, "-c", "bytearray(300 * 2**20)"],
                   "limits": {"memory": "100MiB"}},
    })
    for name in ("disk", "file", "memory"):
        with (tasks / f"{name}.yaml").open("a") as f:
            f.write("success_criteria: [{type: exit_code}]\n")
    shutil.copytree(Path(evalledger_package.__file__).parent, root / "lib" / "evalledger")
    for path in (root, *root.rglob("*")):
        os.lchown(path, NOBODY, NOBODY)
    become = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    user_env = {"PATH": os.environ["PATH"], "HOME": str(root), "TMPDIR": str(root),
                "PYTHONPATH": str(root / "lib"), "LANG": "C.UTF-8"}
    db = root / "l.db"
    result = subprocess.run(
        [*become, sys.executable, "-m", "evalledger.cli", "--ledger", str(db), "run",
         str(tasks), "--run-id", "r"],
        cwd=root, env=user_env, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode not in (0, 1) and "Permission denied" in result.stderr:
        unavailable("UNPRIVILEGED", f"nobody cannot run this Python: {result.stderr[-200:]}")
    assert result.returncode == 1, result.stderr
    evs = events(db, "r")
    assert of_type(evs, "run.started")[0].host["limits"] == "rlimits"
    done = {e.task_key.split("/")[1]: e for e in of_type(evs, "task.completed")}
    assert done["disk"].final_status == "LIMIT_EXCEEDED"
    # head was stopped at the limit (SIGXFSZ): its file holds no more. A shell's ulimit
    # counts 512-byte blocks: the limit, rounded up to one, which the look at the disk
    # once the command ended finds past the limit.
    kept = root / "runs" / "r" / "artifacts" / "default" / "file" / "00" / "big"
    assert kept.stat().st_size == -(-1_000_000 // 512) * 512
    assert done["file"].final_status == "LIMIT_EXCEEDED"
    assert (done["file"].error_message or "").startswith("disk: the workspace takes")
    assert done["memory"].final_status == "FAILURE"  # MemoryError, the command's own


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_memory_an_attempt_left_charged_is_not_the_next_attempts(
    tmp_path: Path, cgroups: dict[str, Path]
) -> None:
    """A file left in /dev/shm stays charged to the cgroup its writer ran in (nothing
    reclaims it without swap): that cgroup is not handed to the next attempt, which
    holds what its own limit allows."""
    left = Path("/dev/shm") / f"evalledger-test-{os.getpid()}-{tmp_path.name}"
    if not Path("/dev/shm").is_dir():
        unavailable("CGROUPS", "no /dev/shm here")
    tasks = write_tasks(tmp_path / "tasks", {
        "a-leaves": {"command": f"head -c 150000000 /dev/zero > {left}",
                     "limits": {"memory": "200MiB"}},
        "b-holds": {"command": ["python3", "-c", "held = b'x' * (100 << 20)"],
                    "limits": {"memory": "200MiB"}},
    }, success_criteria=[{"type": "exit_code"}])
    try:
        db = tmp_path / "ledger.db"
        ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "shm", "-j", "1")
        done = {e.task_key.split("/")[1]: e.final_status
                for e in of_type(events(db, "shm"), "task.completed")}
        assert done == {"a-leaves": "SUCCESS", "b-holds": "SUCCESS"}, ran.stdout
    finally:
        left.unlink(missing_ok=True)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_sparse_files_count_all_they_would_take_and_a_quick_command_is_looked_at(
        tmp_path: Path) -> None:
    """Sixty files of 9 MB holding nothing took no blocks, so a 10 MiB limit never saw
    them; the grading copy wrote them out (527 MB), and a thousand of a gigabyte filled
    the host. A command that ended within the watch's first second was never looked at
    either. Now both end LIMIT_EXCEEDED (and a copy keeps a file's holes: below)."""
    tasks = write_tasks(tmp_path / "tasks", {
        "sparse": {"command": "for i in $(seq 1 60); do truncate -s 9000000 s$i; done",
                   "limits": {"disk": "10MiB"}, "timeout": 60},
        "quick": {"command": "head -c 6000000 /dev/zero > a; head -c 6000000 /dev/zero > b",
                  "limits": {"disk": "10MiB"},
                  "timeout": 60},
    }, [{"type": "run_command", "command": "du -sk --apparent-size . >&2; exit 1"}])
    db = tmp_path / "l.db"
    done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "sparse")
    assert done.returncode == 1, done.stdout + done.stderr
    completed = {e.task_key: e for e in of_type(events(db, "sparse"), "task.completed")}
    for key in ("default/sparse/00", "default/quick/00"):
        assert completed[key].final_status == "LIMIT_EXCEEDED", completed[key]
        assert (completed[key].error_message or "").startswith("disk: the workspace takes")


def test_a_copy_of_a_workspace_keeps_its_holes(tmp_path: Path) -> None:
    """What a sparse file holds is copied, its holes left holes: the grading copy and
    the artifacts kept on another file system cost what the command wrote."""
    from evalledger.executor._sandbox import copy_workspace

    source = tmp_path / "work"
    source.mkdir()
    with open(source / "sparse", "wb") as f:
        f.write(b"head")
        f.seek(48 << 20)
        f.write(b"middle")
        f.truncate(96 << 20)
    (source / "plain").write_bytes(b"p" * 100_000)
    os.mkfifo(source / "pipe")  # left out (an open of it would wait for ever)
    copy_workspace(source, tmp_path / "copy")
    copied = tmp_path / "copy" / "sparse"
    assert copied.stat().st_size == 96 << 20
    assert copied.stat().st_blocks * 512 < 1 << 20  # not 96 MiB written out
    with open(copied, "rb") as f:
        assert f.read(4) == b"head"
        f.seek(48 << 20)
        assert f.read(6) == b"middle"
    assert (tmp_path / "copy" / "plain").read_bytes() == b"p" * 100_000
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["plain", "sparse"]


def test_a_workspace_kept_on_another_file_system_hashes_as_the_one_left(
        tmp_path: Path) -> None:
    """Kept across file systems, a workspace is copied (``shutil.move``): its FIFO and
    socket were left out of that copy, so its hash (the one its attempt recorded) no
    longer matched and every regrade of it was refused as "changed since it was kept".
    They are made again, never opened."""
    import socket

    from evalledger.executor import _sandbox
    from evalledger.executor.isolation import hash_tree

    source = tmp_path / "work"
    (source / "src").mkdir(parents=True)
    (source / "src" / "a.py").write_text("print(1)\n")
    os.mkfifo(source / "pipe", 0o640)
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(source / "src" / "sock"))
    (source / "link").symlink_to("pipe")
    left = hash_tree(source)
    # What shutil.move does where a rename cannot go (another file system).
    shutil.copytree(source, tmp_path / "kept", symlinks=True,
                    copy_function=_sandbox._copy_file)
    assert hash_tree(tmp_path / "kept") == left
    assert stat.S_ISFIFO((tmp_path / "kept" / "pipe").lstat().st_mode)
    assert stat.S_ISSOCK((tmp_path / "kept" / "src" / "sock").lstat().st_mode)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_fifo_kept_on_another_file_system_is_regraded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path: sandboxes on a tmpfs, the artifacts on the test's own file
    system; the agent leaves a FIFO; a regrade of its attempt is taken."""
    with tmpfs(tmp_path / "scratch", "16m") as scratch:
        tasks = write(tmp_path / "tasks", {"planted": {
            "command": "mkfifo pipe; echo hello > out.txt", "timeout": 20,
            "success_criteria": [{"type": "file_exists", "path": "out.txt"}]}})
        db = tmp_path / "l.db"
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the batch's sandboxes
        done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "kept",
                          "--out", str(tmp_path / "out"))
        monkeypatch.undo()
        assert done.returncode == 0, done.stdout + done.stderr
        again = evalledger(tmp_path, db, "regrade", "kept")
        assert again.returncode == 0, again.stdout + again.stderr
        (graded,) = of_type(events(db, "kept"), "task.graded")
        assert [c.passed for c in graded.criteria] == [True]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_workspace_too_big_to_copy_for_grading_is_the_commands_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grading copy failing for room (the batch's temporary folder full: the command
    filled it) was an infrastructure error, left out of the pass rate and retried: an
    agent's way to turn its failure into one. Now the command's failure, said."""
    with tmpfs(tmp_path / "scratch", "4m") as scratch:
        tasks = write_tasks(tmp_path / "tasks", {"fills": {
            "command": "head -c 3000000 /dev/urandom > a; exit 1", "timeout": 60}},
            [{"type": "run_command", "command": "true"}])
        db = tmp_path / "l.db"
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the batch's sandboxes
        done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "full")
        monkeypatch.undo()
        assert done.returncode == 1, done.stdout + done.stderr
        (completed,) = of_type(events(db, "full"), "task.completed")
        assert completed.final_status == "FAILURE", completed
        assert "could not be copied to be graded" in (completed.error_message or "")
        assert completed.failure_class != "infra"


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """``folder``, made, a tmpfs of ``size`` mounted on it while the block runs (root)."""
    root_("mounting a tmpfs")
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        unavailable("ROOT", f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
