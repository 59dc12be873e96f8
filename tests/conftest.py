"""Shared fixtures: real SQLite files in a temporary folder, never mocks.

Every test gets its own temporary folder, and the system temp folder is pointed
into it (``TMPDIR``, inherited by every process a test starts): sandboxes of a
batch, a helper's scratch files and anything a task leaves behind land in the
test's folder, never in a folder another test or another copy of the suite
searches.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalledger.ledger import Ledger


@pytest.fixture(autouse=True)
def _private_temp(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("tmp", numbered=True)
    monkeypatch.setenv("TMPDIR", str(folder))
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
