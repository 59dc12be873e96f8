"""``evalledger search``: what it prints for people, pipes and programs, and its exit
codes (0 found, 1 nothing found, 2 a bad request)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import evalledger
from tests.cli.helpers import Result, assert_one_line_error, edited_by_hand, spawn, write_task
from tests.cli.helpers import evalledger as cli
from tests.cli.terminal import in_terminal

LONG = "x" * 400 + " the Needle here " + "y" * 400


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("search-cli")
    (folder / "out.txt").write_text(f"first needle\n\x1b[2Jescaped NEEDLE\n{LONG}\n",
                                    encoding="utf-8")
    write_task(folder / "tasks" / "t.yaml", f"cat {folder / 'out.txt'}; echo 'needle too' >&2")
    db = folder / "l.db"
    assert cli(folder, db, "run", str(folder / "tasks")).returncode == 0
    return db


def test_a_pipe_gets_a_tab_separated_line_a_hit_nothing_cut(ledger: Path) -> None:
    done = cli(ledger.parent, ledger, "search", "needle")
    assert done.returncode == 0, done.stderr
    run_id = evalledger.list_runs(ledger=ledger)[0]["run_id"]
    rows = [tuple(line.split("\t")) for line in done.out_lines]
    # In the ledger's order: the two streams are read apart, so either may come first.
    assert [int(r[3]) for r in rows] == sorted(int(r[3]) for r in rows)
    found = [(r[0], r[1], r[2], r[4], r[5]) for r in rows]
    assert [f for f in found if f[3] == "stdout"] == [
        (run_id, "default/t/00", "1", "stdout", "first needle"),
        (run_id, "default/t/00", "1", "stdout", "\\x1b[2Jescaped NEEDLE"),
        (run_id, "default/t/00", "1", "stdout", LONG)]
    assert [f for f in found if f[3] == "stderr"] == [
        (run_id, "default/t/00", "1", "stderr", "needle too")]
    assert done.stderr == "4 lines hold 'needle' in 1 run\n"


def test_json_is_what_the_python_api_finds(ledger: Path) -> None:
    done = cli(ledger.parent, ledger, "search", "NEEDLE", "latest", "--json", "--limit", "2")
    assert done.returncode == 0
    assert [json.loads(line) for line in done.out_lines] == [
        hit.as_json() for hit in evalledger.search("NEEDLE", ledger=ledger, limit=2).hits]
    assert done.stderr == "2 lines hold 'NEEDLE' in 1 run; stopped at --limit 2 (more may)\n"


def test_nothing_found_is_exit_1_and_a_bad_request_exit_2(ledger: Path) -> None:
    done = cli(ledger.parent, ledger, "search", "haystack")
    assert (done.returncode, done.stdout, done.stderr) == (
        1, "", "no line holds 'haystack' in 1 run\n")
    done = cli(ledger.parent, ledger, "search", "needle", "no-such-run")
    assert done.returncode == 2 and "no-such-run" in done.stderr
    assert "Traceback" not in done.stderr
    done = cli(ledger.parent, ledger, "search", "")
    assert done.returncode == 2 and "search for what" in done.stderr


def test_the_largest_limit_it_takes_is_a_limit_like_any_other(ledger: Path) -> None:
    # --limit takes up to 2**63 - 1; one row more than that overflowed islice: a traceback.
    done = cli(ledger.parent, ledger, "search", "needle", "--limit", str(2**63 - 1))
    assert "Traceback" not in done.stderr
    assert (done.returncode, done.stderr) == (0, "4 lines hold 'needle' in 1 run\n")


def test_a_damaged_chunk_of_lines_is_one_line_and_no_traceback_after_it(
    ledger: Path, tmp_path: Path,
) -> None:
    damaged = tmp_path / "l.db"
    shutil.copy(ledger, damaged)
    edited_by_hand(damaged, "UPDATE events SET payload = zeroblob(200) WHERE seq = "
                            "(SELECT min(seq) FROM events WHERE type = 'task.lines')")
    # A real process: the reader left open was closed when collected, after the ledger,
    # and its traceback ("Exception ignored in: <generator object Ledger.cursor>") came
    # after the one-line error, at exit.
    proc = spawn(tmp_path, damaged, "search", "needle")
    out, err = proc.communicate(timeout=60)
    error = assert_one_line_error(Result(proc.returncode, out, err))
    assert "does not validate" in error and "Exception ignored" not in err


def test_a_terminal_shows_each_runs_hits_under_it_a_long_line_around_its_match(
        ledger: Path) -> None:
    code, lines = in_terminal(ledger.parent, "--ledger", str(ledger), "search", "NEEDLE HERE",
                              columns=400)
    run_id = evalledger.list_runs(ledger=ledger)[0]["run_id"]
    shown = [line for line in lines if line.strip()]
    assert code == 0
    assert shown[0] == f"run {run_id}"
    hit = shown[1]
    assert hit.startswith("  default/t/00 #1 seq ")
    # 120 characters each side of the match ("Needle here"), each cut marked.
    assert hit.endswith(" stdout: …" + "x" * 115 + " the Needle here " + "y" * 119 + "…")
    assert shown[2] == "1 line holds 'NEEDLE HERE' in 1 run"
