"""What a test needs of the machine beyond the ``test`` extra, and what happens without it.

Where something is missing the test skips with one line saying what and how to get it.
CI has everything, and there a skip would hide a test that never ran: each family has a
switch, ``EVALLEDGER_REQUIRE_<NAME>=1``, that turns its skip into a failure (``.ci/run``
sets them all, and ``EVALLEDGER_NO_SKIPS=1``, which fails the session on any skip or
xfail left: see ``conftest.py``).

The families: ``BROWSER`` (Debian's Chromium, Playwright, axe-core), ``RAY`` (the
``ray`` extra), ``BWRAP``, ``DOCKER``, ``AGENTS`` (the pinned agent CLIs),
``UNPRIVILEGED`` (a test that runs a batch as the user nobody, from a root runner),
``ROOT`` (mounts, ``chattr``, namespaces, giving files away: what only root may do) and
``CGROUPS`` (cgroup v1 memory and pids hierarchies the runner may write: limits).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

FAMILIES = ("BROWSER", "RAY", "BWRAP", "DOCKER", "AGENTS", "UNPRIVILEGED", "ROOT", "CGROUPS")
# The user an unprivileged runner runs as, from a root one (``setpriv``).
NOBODY = 65534


def required(family: str) -> bool:
    """Whether this run requires ``family`` (its switch is set)."""
    assert family in FAMILIES, family
    return os.environ.get(f"EVALLEDGER_REQUIRE_{family}") == "1"


def unavailable(family: str, reason: str) -> NoReturn:
    """Skip saying ``reason``; fail instead where the run requires ``family``."""
    if required(family):
        pytest.fail(f"{reason} (EVALLEDGER_REQUIRE_{family}=1)", pytrace=False)
    pytest.skip(reason)


def root(what: str) -> None:
    """Go on only as root: ``what`` (e.g. "mounting a tmpfs") needs it."""
    if os.geteuid() != 0:
        unavailable("ROOT", f"{what} needs root")
