"""``evalledger import``'s command line: a folder without runs is one line, ``--dry-run``
appends nothing, ``--max-file-bytes`` is a size and its documented default the reader's.
What the importer makes of the folders is tests/importers/test_legacy.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.importers.old_runs import (
    RUN,
    good_and_hostile,
    summary,
    task_json,
    write,
    write_old_runs,
)

from .helpers import evalledger


@pytest.fixture
def old_runs(tmp_path: Path) -> Path:
    return write_old_runs(tmp_path)


def test_dry_run_appends_nothing(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    result = evalledger(old_runs.parent, db, "import", str(old_runs), "--dry-run")
    assert f"{RUN}: would import 8 attempt(s), 2 unfinished" in result.stdout
    assert not db.exists()


def test_no_run_folder_is_one_line(tmp_path: Path) -> None:
    result = evalledger(tmp_path, tmp_path / "l.db", "import", str(tmp_path))
    assert result.returncode == 2 and "no run.json under" in result.stderr


def test_the_size_limit_is_an_option(tmp_path: Path) -> None:
    root, bad = good_and_hostile(tmp_path)
    write(bad.parent, "task.json", task_json("bad", "SUCCESS", padding="x" * 5000))
    db = tmp_path / "l.db"
    small = evalledger(tmp_path, db, "import", str(root), "--max-file-bytes", "4KiB")
    assert f"  skipped: {bad}: " in small.stderr and "over the 4 KiB limit" in small.stderr
    assert small.returncode == 1
    db.unlink()
    assert evalledger(tmp_path, db, "import", str(root), "--max-file-bytes", "1M").returncode == 0
    assert summary(db, "r1")["tasks_run"] == 2
    bad_size = evalledger(tmp_path, db, "import", str(root), "--max-file-bytes", "lots")
    assert bad_size.returncode == 2 and "is not a size" in bad_size.stderr


def test_the_documented_default_size_limit_is_the_readers() -> None:
    from evalledger.cli._import import _DEFAULT_MAX_FILE, _Size
    from evalledger.importers.legacy import MAX_FILE_BYTES

    assert _Size().convert(_DEFAULT_MAX_FILE, None, None) == MAX_FILE_BYTES
    assert "**64 MiB**" in (Path(__file__).parents[2] / "docs/import.md").read_text()
