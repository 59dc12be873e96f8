"""Sandboxes: a fresh folder per attempt, holding a copy of the task's ``workdir``.

Preservation modes (docs/cli.md) decide where the sandbox lives and what is kept:

- ``none``: a temporary folder, deleted when the task ends;
- ``move-on-write`` (default): a temporary folder, moved to
  ``<out>/<run_id>/artifacts/<task_key>/`` when the task ends;
- ``direct-write``: the task runs in that artifacts folder itself.

Temporary sandboxes are numbered folders under one per-batch root in the system
temp dir (never inside the user's project: an agent running ``git`` there must
not find the user's repository). An earlier attempt's artifacts for the same key
are replaced.

Everything here is blocking file-system work. The runner calls it through
``trio.to_thread``, except the two cases that are a single syscall (an empty
sandbox made, an empty sandbox removed): a thread hop costs more than they do,
and for short tasks that was a measured share of the executor's overhead.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import stat
import subprocess
from pathlib import Path

from evalledger.options import PreservationMode


class BuildFailed(Exception):
    """The sandbox could not be prepared (BUILD_FAILED)."""


_numbers = itertools.count(1)


def is_trivial(workdir: str | None, mode: PreservationMode) -> bool:
    """True when ``prepare`` is one ``mkdir``: cheap enough for the event loop."""
    return workdir is None and mode != "direct-write"


def prepare(
    workdir: str | None, mode: PreservationMode, artifacts: Path, root: Path
) -> Path:
    """Create the sandbox for one attempt (under ``root`` unless direct-write) and
    copy ``workdir`` into it.

    Raises:
        BuildFailed: the workdir is missing or cannot be copied.
    """
    try:
        if mode == "direct-write":
            if artifacts.exists():
                remove_tree(artifacts)
            artifacts.parent.mkdir(parents=True, exist_ok=True)
            sandbox = artifacts
            sandbox.mkdir()
        else:
            sandbox = root / str(next(_numbers))
            sandbox.mkdir()
        if workdir is not None:
            source = Path(workdir)
            if not source.is_dir():
                raise BuildFailed(f"workdir {source} is not a folder")
            shutil.copytree(source, sandbox, symlinks=True, dirs_exist_ok=True,
                            ignore=_sockets)
    except BuildFailed:
        raise
    except (OSError, shutil.Error) as e:
        raise BuildFailed(f"cannot prepare the sandbox from {workdir}: {e}") from e
    except RecursionError as e:  # copytree recurses once per level
        raise BuildFailed(f"cannot prepare the sandbox from {workdir}: the tree is too "
                          "deep to copy") from e
    return sandbox


def try_remove_empty(sandbox: Path) -> bool:
    """Remove the sandbox if it is empty (one syscall); False if it is not."""
    try:
        sandbox.rmdir()
    except OSError:
        return False
    return True


def finish(sandbox: Path, mode: PreservationMode, artifacts: Path) -> Path | None:
    """Keep or delete the sandbox per the mode; return where the artifacts are, if kept."""
    if mode == "direct-write":
        return artifacts
    if mode == "none":  # the runner tried the empty case (one rmdir) already
        remove_tree(sandbox, ignore_errors=True)
        return None
    if artifacts.exists():
        remove_tree(artifacts)
    artifacts.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(sandbox), str(artifacts))
    return artifacts


def remove_tree(root: Path, *, ignore_errors: bool = False) -> None:
    """``shutil.rmtree``, also for a tree too deep for it.

    On Python 3.11 ``shutil.rmtree`` recurses once per level: a command that leaves
    a tree 1,500 folders deep makes it raise RecursionError. ``rm -rf`` walks any
    depth, and like rmtree works through directory descriptors, so a symlink
    swapped in meanwhile is never followed out of the tree.

    Raises:
        OSError: the tree could not be removed (unless ``ignore_errors``).
    """
    try:
        shutil.rmtree(root, ignore_errors=ignore_errors)
    except RecursionError:
        done = subprocess.run(["rm", "-rf", "--", str(root)], capture_output=True, text=True,
                              check=False)
        if done.returncode and not ignore_errors:
            raise OSError(f"cannot remove {root}: {done.stderr.strip()}") from None


def _sockets(folder: str, names: list[str]) -> set[str]:
    """Sockets cannot be copied, and mean nothing in a copy (git's fsmonitor leaves one)."""
    ignored = set()
    for name in names:
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(os.path.join(folder, name)).st_mode):
                ignored.add(name)
    return ignored
