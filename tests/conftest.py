"""Shared fixtures: real SQLite files in a temporary folder, never mocks.

Every test gets its own temporary folder, and the system temp folder is pointed
into it (``TMPDIR``, inherited by every process a test starts): sandboxes of a
batch, a helper's scratch files and anything a task leaves behind land in the
test's folder, never in a folder another test or another copy of the suite
searches.
"""

from __future__ import annotations

import compileall
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import evalledger
from evalledger.ledger import Ledger

from .needs import unavailable

# No Hypothesis deadline anywhere: the suite runs on a loaded two-core machine, beside a
# second copy of itself, where one example can take 300 ms that takes 3 ms alone. What a
# property claims is never "fast"; speed is measured in bench/. Fifty examples, not a
# hundred, where a test does not say: the default tier runs every hour (each run draws
# anew, and the example database keeps what failed), within about two minutes.
settings.register_profile(
    "evalledger", deadline=None, max_examples=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("evalledger")


# The suite's tasks run this interpreter and scripts of the suite, outside their
# workspaces: they run with none unless they say (a task file's default is auto, the
# strongest isolation that runs here). The tests of auto itself unset this.
os.environ["EVALLEDGER_ISOLATION"] = "none"


# Where bytecode is not written (PYTHONDONTWRITEBYTECODE, as on this project's CI
# machines) every one of the thousand-odd Python processes the suite starts compiled the
# package again, and every xdist worker its test modules: a tenth of the suite's CPU. Only
# the package's and the tests' own bytecode is written (to their __pycache__, which git
# ignores), once; nothing of the user's environment changes otherwise.
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, before any worker starts
        compileall.compile_dir(Path(evalledger.__file__).parent, quiet=2)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core. Most of the suite waits on real subprocesses
    (a grace period, a timeout, a child's start-up), not on the CPU: one worker per core
    left the two cores half idle."""
    return 2 * (os.cpu_count() or 1)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs docker is in the slow tier: it builds images and waits on
    dockerd. The other slow families say so where they are written (``slow``)."""
    for item in items:
        params = getattr(item, "callspec", None)
        if ("docker_images" in getattr(item, "fixturenames", ())
                or (params is not None and "docker" in params.params.values())):
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``EVALLEDGER_NO_SKIPS=1`` (CI) a skipped or xfailed test fails the session:
    there every test must run and pass, and a skip is a test that never ran."""
    if os.environ.get("EVALLEDGER_NO_SKIPS") != "1" or hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {})
    left = [report for kind in ("skipped", "xfailed", "xpassed")
            for report in stats.get(kind, ()) if report.when in ("setup", "call")]
    if left:
        if reporter is not None:
            reporter.write_line(f"EVALLEDGER_NO_SKIPS=1: {len(left)} test(s) skipped or "
                                "xfailed here, where every test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
        unavailable("BWRAP", str(e))


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
        unavailable("DOCKER", str(e))
    return {kind: build(kind) for kind in ("busybox", "python")}


@pytest.fixture(params=["bwrap", "docker"])  # docker: the slow tier
def isolated(request: pytest.FixtureRequest) -> dict[str, str]:
    """The task keys that confine a command, once per backend (the busybox image for
    docker); each skips, or fails in CI, where its backend is missing."""
    if request.param == "bwrap":
        request.getfixturevalue("bwrap")
        return {"isolation": "bwrap"}
    images = request.getfixturevalue("docker_images")
    return {"isolation": "docker", "image": images["busybox"]}


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder any user can reach: right under /tmp, mode 755. Not in the test's own
    folder: pytest keeps the folders above that to their owner (mode 0700, reset when a
    session starts, as a second copy of the suite may at any moment)."""
    folder = Path(tempfile.mkdtemp(prefix="evalledger-open-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
