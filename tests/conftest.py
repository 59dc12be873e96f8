"""Shared fixtures: real SQLite files in a temporary folder, never mocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evalledger.ledger import Ledger


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a ledger file goes; the file does not exist yet."""
    return tmp_path / "evalledger.db"


@pytest.fixture
def ledger(db_path: Path) -> Iterator[Ledger]:
    """A fresh read-write ledger on a real file."""
    with Ledger(db_path) as opened:
        yield opened
