"""What the ``network: gateway`` tests share (test_gateway.py, test_egress.py): a probe
run inside a bwrap or docker sandbox."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from ..needs import root


def confined_python(backend: str, request: pytest.FixtureRequest
                    ) -> tuple[str, dict[str, Any]]:
    """The interpreter a probe runs by inside ``backend`` (bwrap: the runner's, bound in;
    docker: the test image's), and the task keys that put it there."""
    if backend == "bwrap":
        request.getfixturevalue("bwrap")
        python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
        return python, {"isolation": "bwrap"}
    root("network: gateway under docker (entering a container's network namespace)")
    images = request.getfixturevalue("docker_images")
    return "/usr/bin/python3", {"isolation": "docker", "image": images["python"]}
