"""Searching transcripts (``evalledger.search``): what real runs printed, found whatever
its case, across runs newest first, each hit where it is and as a person reads it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evalledger
from evalledger.errors import InvalidRequest
from evalledger.ledger import LedgerNotFound, RunNotFound
from tests.agents.transcripts.claude_code import RESULT, TRANSCRIPT
from tests.cli.helpers import evalledger as cli
from tests.cli.helpers import write_task, write_tasks

# What the older run's task prints, a line each: the property below searches it.
WORDS = ["Hello World", "hello again", "ERROR: APIConnectionError: refused", "a.b*c (x)",
         "Größe straße", "stream of consciousness", "ÉCOLE école", "tab\there", "HeLLo"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Two runs: the older prints ``WORDS``; the newer holds a Claude Code session and
    a task whose first attempt stalled and was tried again."""
    folder = tmp_path_factory.mktemp("search")
    (folder / "words.txt").write_text("".join(w + "\n" for w in WORDS), encoding="utf-8")
    write_task(folder / "old" / "words.yaml", f"cat {folder / 'words.txt'}")
    db = folder / "l.db"
    assert cli(folder, db, "run", str(folder / "old")).returncode == 0
    (folder / "session.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in [*TRANSCRIPT, RESULT]), encoding="utf-8")
    write_tasks(folder / "new", {
        "agent": {"command": f"cat {folder / 'session.jsonl'}", "stream_format": "claude-code",
                  "success_criteria": [{"type": "exit_code"}]},
        "stalls": {"command": "echo 'Hello from a stall'; sleep 30", "stall_timeout": 0.3,
                   "retries": 1, "success_criteria": [{"type": "exit_code"}]}})
    assert cli(folder, db, "run", str(folder / "new"), "--retry-backoff", "0").returncode == 1
    old, new = (run["run_id"] for run in evalledger.list_runs(ledger=db)[::-1])
    return db, old, new


def test_hits_are_found_whatever_their_case_newest_run_first(runs: tuple[Path, str, str],
                                                             ) -> None:
    db, old, new = runs
    found = evalledger.search("HELLO", ledger=db)
    assert found.runs == [new, old] and not found.more
    assert [(h.run_id, h.attempt, h.text) for h in found.hits] == [
        (new, 1, "Hello from a stall"), (new, 2, "Hello from a stall"),
        (old, 1, "Hello World"), (old, 1, "hello again"), (old, 1, "HeLLo")]
    assert {h.task_key for h in found.hits} == {"default/stalls/00", "default/words/00"}
    assert [h.kind for h in found.hits] == ["stdout"] * 5
    seqs = [h.seq for h in found.hits if h.run_id == old]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


def test_an_agents_line_is_shown_as_its_conversation(runs: tuple[Path, str, str]) -> None:
    db, _, new = runs
    said = evalledger.search("create add.py", [new], ledger=db).hits
    assert [(h.task_key, h.kind, h.text) for h in said] == [
        ("default/agent/00", "assistant", "assistant: I'll create add.py.")]
    # In no line of the conversation (the init line's permission mode): its JSON text.
    init = evalledger.search("bypassPermissions", [new], ledger=db).hits
    assert len(init) == 1 and init[0].kind == "json"
    assert json.loads(init[0].text)["permissionMode"] == "bypassPermissions"


def test_the_payloads_own_field_names_are_not_searched(runs: tuple[Path, str, str]) -> None:
    db, old, _ = runs
    # Every stored line names its "line"; none of these printed the word but one.
    assert [h.text for h in evalledger.search("line", [old], ledger=db).hits] == []
    assert [h.text for h in evalledger.search("stream", [old], ledger=db).hits] == [
        "stream of consciousness"]


def test_a_limit_stops_the_search_and_says_so(runs: tuple[Path, str, str]) -> None:
    db, old, new = runs
    found = evalledger.search("hello", ledger=db, limit=2)
    assert len(found.hits) == 2 and found.more and found.runs == [new]
    found = evalledger.search("hello", ledger=db, limit=3)
    assert [h.text for h in found.hits][-1] == "Hello World" and found.more
    assert evalledger.search("hello", [old], ledger=db, limit=3).more is False


def test_runs_are_named_as_the_cli_names_them(runs: tuple[Path, str, str],
                                             tmp_path: Path) -> None:
    db, old, new = runs
    assert evalledger.search("hello", ["latest"], ledger=db).runs == [new]
    assert evalledger.search("hello", [old, old], ledger=db).runs == [old]
    with pytest.raises(RunNotFound):
        evalledger.search("hello", ["no-such-run"], ledger=db)
    with pytest.raises(InvalidRequest):
        evalledger.search("", ledger=db)
    with pytest.raises(LedgerNotFound):
        evalledger.search("hello", ledger=tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=200, deadline=None)
@given(st.sampled_from(WORDS).flatmap(
    lambda word: st.tuples(st.integers(0, len(word)), st.integers(1, len(word)))
    .map(lambda ij: word[ij[0]:ij[0] + ij[1]])).filter(bool) | st.text(min_size=1, max_size=4))
def test_what_is_found_is_every_printed_line_that_holds_the_text(
        runs: tuple[Path, str, str], text: str) -> None:
    db, old, _ = runs
    holds = re.compile(re.escape(text), re.IGNORECASE)
    found = evalledger.search(text, [old], ledger=db, limit=len(WORDS) + 1)
    assert [h.text for h in found.hits] == [w for w in WORDS if holds.search(w)]
