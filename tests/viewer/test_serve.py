"""``evalledger view`` as a real process: it listens, prints its URL, serves, stops on Ctrl-C."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalledger.cli import cli
from evalledger.viewer._serve import is_loopback

from ..waiting import PATIENCE
from .serving import start, stop
from .suites import Suite


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_view_serves_until_ctrl_c(suite: Suite) -> None:
    process, url = start("--ledger", str(suite.db), "view", "--port", "0")
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url)
        with urllib.request.urlopen(url, timeout=PATIENCE) as response:
            assert response.status == 200
            assert "run-a" in response.read().decode()
        # An open event stream does not hold the server up when it stops.
        stream = urllib.request.urlopen(url + "api/stream", timeout=PATIENCE)
        assert stream.readline().startswith(b"event: hello")
    finally:
        assert stop(process) == 0


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_view_on_another_host_needs_the_printed_token(suite: Suite) -> None:
    process, url = start("--ledger", str(suite.db), "view", "--host", "0.0.0.0",
                          "--port", "0")
    try:
        token = re.search(r"\?token=([\w-]{20,})$", url)
        assert token, url
        bare = url.split("?")[0].replace("0.0.0.0", "127.0.0.1")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bare, timeout=PATIENCE)
        assert refused.value.code == 403
        with urllib.request.urlopen(f"{bare}?token={token.group(1)}",
                                    timeout=PATIENCE) as response:
            assert response.status == 200
    finally:
        assert stop(process) == 0


def test_view_of_a_missing_ledger_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--ledger", str(tmp_path / "none.db"), "view"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: no ledger at {tmp_path / 'none.db'}: give --ledger PATH, or set EVALLEDGER_LEDGER"]
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("192.168.1.5", False), ("example.org", False), ("::", False),
])
def test_which_hosts_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
