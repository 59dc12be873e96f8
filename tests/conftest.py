"""Shared fixtures: real SQLite files in a temporary folder, never mocks.

Every test gets its own temporary folder, and the system temp folder is pointed
into it (``TMPDIR``, inherited by every process a test starts): sandboxes of a
batch, a helper's scratch files and anything a task leaves behind land in the
test's folder, never in a folder another test or another copy of the suite
searches.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from evalledger.ledger import Ledger

# No Hypothesis deadline anywhere: the suite runs on a loaded two-core machine, beside a
# second copy of itself, where one example can take 300 ms that takes 3 ms alone. What a
# property claims is never "fast"; speed is measured in bench/.
settings.register_profile(
    "evalledger", deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("evalledger")


@pytest.fixture(autouse=True)
def _private_temp(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("tmp", numbered=True)
    monkeypatch.setenv("TMPDIR", str(folder))
    # Verified-through anchors (app/_verified.py): each test's own, never the user's.
    monkeypatch.setenv("EVALLEDGER_STATE_DIR", str(folder / "state"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a ledger file goes; the file does not exist yet."""
    return tmp_path / "evalledger.db"


@pytest.fixture
def ledger(db_path: Path) -> Iterator[Ledger]:
    """A fresh read-write ledger on a real file."""
    with Ledger(db_path) as opened:
        yield opened


@pytest.fixture
def bwrap() -> object:
    """bubblewrap as the executor finds it, or a skip with the reason; CI sets
    ``EVALLEDGER_REQUIRE_BWRAP=1`` and then the test fails instead."""
    from evalledger.executor.isolation import IsolationUnavailable
    from evalledger.executor.isolation import bwrap as find

    try:
        return find()
    except IsolationUnavailable as e:
        if os.environ.get("EVALLEDGER_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bubblewrap is required here (EVALLEDGER_REQUIRE_BWRAP=1): {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def docker_images() -> dict[str, str]:
    """The test images by kind (``busybox``, ``python``: tests/docker_images.py), built
    from this machine's files; or a skip saying why there is no docker. CI sets
    ``EVALLEDGER_REQUIRE_DOCKER=1`` and then the test fails instead."""
    from evalledger.executor.isolation import IsolationUnavailable, docker

    from .docker_images import build

    try:
        docker()
    except IsolationUnavailable as e:
        if os.environ.get("EVALLEDGER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker is required here (EVALLEDGER_REQUIRE_DOCKER=1): {e}")
        pytest.skip(str(e))
    return {kind: build(kind) for kind in ("busybox", "python")}


@pytest.fixture(params=["bwrap", "docker"])
def isolated(request: pytest.FixtureRequest) -> dict[str, str]:
    """The task keys that confine a command, once per backend (the busybox image for
    docker); each skips, or fails in CI, where its backend is missing."""
    if request.param == "bwrap":
        request.getfixturevalue("bwrap")
        return {"isolation": "bwrap"}
    images = request.getfixturevalue("docker_images")
    return {"isolation": "docker", "image": images["busybox"]}
