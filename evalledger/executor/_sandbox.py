"""Sandboxes: a fresh folder per attempt, holding a copy of the task's ``workdir``.

Preservation modes (SPEC §8) decide where the sandbox lives and what is kept:

- ``none``: a temporary folder, deleted when the task ends;
- ``move-on-write`` (default): a temporary folder, moved to
  ``<out>/<run_id>/artifacts/<task_key>/`` when the task ends;
- ``direct-write``: the task runs in that artifacts folder itself.

An earlier attempt's artifacts for the same key are replaced. Everything here is
blocking file-system work: the runner calls it through ``trio.to_thread``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Literal

PreservationMode = Literal["none", "move-on-write", "direct-write"]


class BuildFailed(Exception):
    """The sandbox could not be prepared (BUILD_FAILED)."""


def prepare(workdir: str | None, mode: PreservationMode, artifacts: Path) -> Path:
    """Create the sandbox for one attempt and copy ``workdir`` into it.

    Raises:
        BuildFailed: the workdir is missing or cannot be copied.
    """
    try:
        if mode == "direct-write":
            if artifacts.exists():
                shutil.rmtree(artifacts)
            artifacts.parent.mkdir(parents=True, exist_ok=True)
            sandbox = artifacts
            sandbox.mkdir()
        else:
            sandbox = Path(tempfile.mkdtemp(prefix="evalledger-"))
        if workdir is not None:
            source = Path(workdir)
            if not source.is_dir():
                raise BuildFailed(f"workdir {source} is not a folder")
            shutil.copytree(source, sandbox, symlinks=True, dirs_exist_ok=True)
    except BuildFailed:
        raise
    except (OSError, shutil.Error) as e:
        raise BuildFailed(f"cannot prepare the sandbox from {workdir}: {e}") from e
    return sandbox


def finish(sandbox: Path, mode: PreservationMode, artifacts: Path) -> Path | None:
    """Keep or delete the sandbox per the mode; return where the artifacts are, if kept."""
    if mode == "direct-write":
        return artifacts
    if mode == "none":
        shutil.rmtree(sandbox, ignore_errors=True)
        return None
    if artifacts.exists():
        shutil.rmtree(artifacts)
    artifacts.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(sandbox), str(artifacts))
    return artifacts
