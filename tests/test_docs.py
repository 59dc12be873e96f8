"""The contract in docs/ against the code: what the code defines, the docs must name.

In the spirit of sqlite-utils' test_docs.py. Every list checked here is taken from
the code (click commands and their options, event models, view columns,
statuses, summary fields, task-file keys), so a field, option or type added later
without a word in docs/ fails here without anyone editing this file; and where
the docs list things in a table, a row the code no longer has fails too.

Cheap: files are read and a fresh ledger is made in a temporary folder; no
subprocesses.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, get_args

import click
import pytest
from pydantic import BaseModel

import evalledger.ledger
from evalledger.cli import cli
from evalledger.cli._errors import (
    EXIT_INFRA_STOPPED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TASKS_FAILED,
    EXIT_USAGE,
)
from evalledger.executor import DEFAULT_KILL_GRACE, MAX_LINE
from evalledger.hosts import host_info
from evalledger.ledger import (
    DEFAULT_BUSY_TIMEOUT,
    EVENT_TYPES,
    SCHEMA_VERSION,
    CriterionResult,
    EventType,
    Fingerprint,
    Ledger,
    LedgerError,
    RunStarted,
    TaskOutput,
    TaskStarted,
    TokenCounts,
    chunked,
)
from evalledger.ledger._events import ENVELOPE_FIELDS
from evalledger.options import MAX_REPEATS, RunOptions
from evalledger.projections import RunDiff, RunSummary, SkippedFile, TaskDiff, TaskRow
from evalledger.projections._diff import Change
from evalledger.statuses import Category, FinalStatus, RunStatus
from evalledger.suite import (
    DEFAULT_TIMEOUT,
    TASK_ID_PATTERN,
    Budget,
    Criterion,
    ExperimentFile,
    ResolvedTask,
    StreamFormat,
    TaskFile,
    Variant,
)

from .cli.helpers import command_paths

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "evalledger"

HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SEPARATOR_ROW = re.compile(r"^\|[\s:|-]+\|$")


# -- reading the docs -------------------------------------------------------------------------


@functools.cache
def lines(name: str) -> tuple[str, ...]:
    return tuple((DOCS / name).read_text(encoding="utf-8").splitlines())


@functools.cache
def headings(name: str) -> tuple[tuple[int, int, str], ...]:
    """``(line index, level, title)`` of every heading outside fenced code blocks."""
    found = []
    fenced = False
    for i, line in enumerate(lines(name)):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((i, len(match[1]), match[2]))
    return tuple(found)


def section(name: str, title: str) -> str:
    """The text under the one heading titled exactly ``title``, its subsections included."""
    found = [(i, level) for i, level, t in headings(name) if t == title]
    assert len(found) == 1, f"docs/{name} should have one heading {title!r}, has {len(found)}"
    start, level = found[0]
    end = next((i for i, lv, _ in headings(name) if i > start and lv <= level), len(lines(name)))
    return "\n".join(lines(name)[start:end])


def rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (header rows included)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not SEPARATOR_ROW.match(line.strip())
    ]


def first_cells(text: str) -> set[str]:
    """The first cell of every table row that names something in code: `name`."""
    return {row[0].strip("`") for row in rows(text) if re.fullmatch(r"`[^`]+`", row[0])}


def missing(names: Iterable[object], text: str) -> list[str]:
    """The names that ``text`` does not mention as code (`name`)."""
    return sorted(n for n in map(str, names) if f"`{n}`" not in text)


def slug(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def payload_fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields) - ENVELOPE_FIELDS - {"type"}


def doc_names() -> list[str]:
    return sorted(p.name for p in DOCS.glob("*.md"))


# -- the docs as a whole ----------------------------------------------------------------------


def test_every_doc_the_code_cites_exists() -> None:
    cited: dict[str, set[str]] = {}
    quoted: set[tuple[str, str]] = set()
    for source in PACKAGE.rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        for name in re.findall(r"docs/([\w-]+\.md)", text):
            cited.setdefault(name, set()).add(str(source.relative_to(ROOT)))
        # docs/tasks.md ("What a task emits"), docs/cli.md, "run"
        quoted |= set(re.findall(r'docs/([\w-]+\.md)(?:\s*\(|,\s*)"([^"]+)"', text))
    assert {"tasks.md", "events.md", "ledger.md", "results.md", "cli.md"} <= set(cited)
    absent = {name: sorted(where) for name, where in cited.items() if not (DOCS / name).is_file()}
    assert not absent, f"cited by the code but missing from docs/: {absent}"
    for name, part in sorted(quoted):
        titles = [t.lower() for _, _, t in headings(name)]
        assert any(part.lower() in t for t in titles), f"docs/{name} has no section {part!r}"


def test_the_index_lists_every_doc() -> None:
    index = "\n".join(lines("README.md"))
    for name in doc_names():
        if name != "README.md":
            assert f"]({name})" in index, f"docs/README.md does not link {name}"


def test_the_readme_points_at_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^## Documentation$", readme, re.MULTILINE)
    targets = re.findall(r"\]\((docs/[^)\s#]*)", readme)
    assert targets, "README.md does not link docs/"
    assert all((ROOT / t).exists() for t in targets), targets


@pytest.mark.parametrize("name", doc_names())
def test_links_resolve(name: str) -> None:
    text = "\n".join(lines(name))
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        file = (DOCS / path).resolve() if path else DOCS / name
        assert file.exists(), f"docs/{name} links {target}: no such file"
        if anchor and file.suffix == ".md" and file.parent == DOCS:
            anchors = {slug(t) for _, _, t in headings(file.name)}
            assert anchor in anchors, f"docs/{name} links {target}: no such section"


# -- events.md --------------------------------------------------------------------------------


def test_every_event_type_has_a_section_naming_its_payload() -> None:
    assert set(EVENT_TYPES) == {t.value for t in EventType}
    for type_, model in EVENT_TYPES.items():
        text = section("events.md", f"`{type_}`")
        fields = payload_fields(model)
        assert not missing(fields, text), f"{type_}: fields not documented"
        assert first_cells(text) <= fields, f"{type_}: documented fields it does not have"


def test_events_md_documents_no_type_the_code_lacks() -> None:
    documented = {t.strip("`") for _, level, t in headings("events.md")
                  if level == 2 and re.fullmatch(r"`[a-z]+\.[a-z_]+`", t)}
    assert documented == set(EVENT_TYPES)


def test_recorded_definition_and_host() -> None:
    started = section("events.md", "`task.started`")
    # `ray` is where an attempt may run, not what it is: outside the definition.
    assert not missing(set(ResolvedTask.model_fields) - {"task_key", "replicate_index", "ray",
                                                         "agent_version_command"},
                       started)
    assert not missing(host_info(), section("events.md", "`run.started`"))


def test_envelope_and_nested_objects() -> None:
    envelope = section("events.md", "The envelope")
    assert not missing(ENVELOPE_FIELDS | {"type"}, envelope)
    nested = section("events.md", "Nested objects")
    for model in (TokenCounts, CriterionResult, Fingerprint):
        assert not missing(model.model_fields, nested), model.__name__


# -- cli.md -----------------------------------------------------------------------------------


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None, name
        command = found
    return command


def _option_names(command: click.Command) -> set[str]:
    return {
        name
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for name in (*param.opts, *param.secondary_opts)
    }


def _names_option(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


COMMANDS = command_paths(cli)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_option_and_argument_is_documented(path: tuple[str, ...]) -> None:
    command = _command(path)
    text = section("cli.md", f"`evalledger {' '.join(path)}`")
    options = _option_names(command)
    # `--ledger` after a command is the global option, documented once (Global options).
    assert not [o for o in sorted(options - {"--ledger"}) if not _names_option(text, o)]
    for param in command.params:
        if isinstance(param, click.Argument):
            assert param.human_readable_name in text, param.human_readable_name
        if isinstance(param.type, click.Choice) and not getattr(param, "hidden", False):
            assert not missing(param.type.choices, text), param.name
    # The other way round: an option in the table that the command does not have.
    for row in rows(text):
        if row[0].startswith("`-"):
            named = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", row[0]))
            assert named <= options, f"documented, but not options: {named - options}"


def test_cli_md_documents_no_command_the_code_lacks() -> None:
    documented = {
        tuple(match[1].split())
        for _, _, title in headings("cli.md")
        if (match := re.fullmatch(r"`evalledger ([a-z -]+)`", title))
    }
    assert documented == set(COMMANDS)


def test_global_options() -> None:
    text = section("cli.md", "Global options")
    assert not [o for o in sorted(_option_names(cli)) if not _names_option(text, o)]


def test_exit_codes() -> None:
    table = rows(section("cli.md", "Exit codes"))
    assert {int(r[0]) for r in table if r[0].isdigit()} == {
        EXIT_OK, EXIT_TASKS_FAILED, EXIT_USAGE, EXIT_INFRA_STOPPED, EXIT_INTERRUPTED,
    }


def _shown_default(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '`""`'
    if value == []:
        return "`[]`"
    return str(value)


def test_every_run_option_is_documented_with_default_and_kind() -> None:
    table = {r[0].strip("`"): r for r in rows(section("cli.md", "Run options recorded in "
                                                               "`run.started`"))}
    header = table.pop("field")
    default, operational = header.index("default"), header.index("operational")
    assert set(table) == set(RunOptions.model_fields)
    for name, info in RunOptions.model_fields.items():
        assert _shown_default(info.default) in table[name][default], name
        documented = table[name][operational] == "yes"
        assert documented == (name in RunOptions.operational()), name


# -- results.md -------------------------------------------------------------------------------


def test_statuses_and_categories() -> None:
    text = section("results.md", "Final statuses and categories")
    table = {r[0].strip("`"): r[1].strip("`") for r in rows(text) if r[0].startswith("`")}
    assert table == {s.value: s.category.value for s in FinalStatus}
    assert not missing(Category, text)
    assert not missing(RunStatus, section("results.md", "Run statuses"))


def nested_models(model: type[BaseModel]) -> set[type[BaseModel]]:
    """``model`` and every model its fields hold, at any depth (lists and optionals too)."""
    found = {model}
    pending = [info.annotation for info in model.model_fields.values()]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found |= nested_models(annotation)
        else:
            pending += get_args(annotation)
    return found


def test_every_summary_field_is_documented() -> None:
    text = section("results.md", "`run.json`")
    models = nested_models(RunSummary)
    assert {TaskRow, SkippedFile, TokenCounts} <= models
    for model in models:
        assert not missing(model.model_fields, text), model.__name__
    tabled = set().union(*(m.model_fields for m in models if m is not TokenCounts))
    assert first_cells(text) <= tabled, "documented fields that run.json does not have"


def test_resume_and_drift_name_every_option() -> None:
    text = section("results.md", "Resume and drift")
    assert not missing(RunOptions.model_fields, text)
    operational = section("results.md", "Operational options")
    assert first_cells(operational) == RunOptions.operational()


def test_diff() -> None:
    text = section("results.md", "Diff")
    assert not missing(get_args(Change), text)
    assert not missing(set(TaskDiff.model_fields) | set(RunDiff.model_fields), text)


# -- tasks.md ---------------------------------------------------------------------------------


def _criteria() -> tuple[type[BaseModel], ...]:
    union = get_args(Criterion)[0]
    return get_args(union)


def test_every_task_file_key_is_documented() -> None:
    keys = section("tasks.md", "Task file keys")
    assert first_cells(keys) == set(TaskFile.model_fields)
    assert not missing(Budget.model_fields, section("tasks.md", "Budget keys"))
    assert not missing(ExperimentFile.model_fields, section("tasks.md", "Experiment file keys"))
    assert not missing(set(Variant.model_fields) - set(TaskFile.model_fields),
                       section("tasks.md", "Variant keys"))
    criteria = section("tasks.md", "Success criteria")
    for model in _criteria():
        assert not missing(model.model_fields, criteria), model.__name__
        (type_,) = get_args(model.model_fields["type"].annotation)
        assert f"`{type_}`" in criteria, type_
    assert not missing(get_args(StreamFormat), "\n".join(lines("tasks.md")))


def test_task_file_rules() -> None:
    text = "\n".join(lines("tasks.md"))
    assert f"`{TASK_ID_PATTERN}`" in section("tasks.md", "Task ids and file names")
    assert "`<variant_id>/<task_id>/<NN>`" in section("tasks.md", "Task keys")
    timeout = next(r for r in rows(section("tasks.md", "Task file keys")) if r[0] == "`timeout`")
    assert f"`{DEFAULT_TIMEOUT:g}`" in " ".join(timeout)
    assert f"1 to {MAX_REPEATS}" in text
    for title in ("Resolution order", "Skipped and left-out files", "The sandbox"):
        section("tasks.md", title)


def test_what_a_task_emits() -> None:
    text = section("tasks.md", "What a task emits")
    assert f"{MAX_LINE // 1024} KiB" in text
    for name in ("task.output", "task.event", "task.usage", "truncated", "native",
                 "claude-code", "Invalid UTF-8"):
        assert name in text, name
    grace = section("tasks.md", "Timeouts and process groups")
    assert f"{DEFAULT_KILL_GRACE:g} seconds" in grace


def test_every_environment_variable_is_documented() -> None:
    def variables(folder: str) -> set[str]:
        return {
            name
            for source in (PACKAGE / folder).glob("*.py")
            for name in re.findall(r'"(EVALLEDGER_[A-Z_]+)"', source.read_text(encoding="utf-8"))
        }

    task_env = variables("executor")
    assert "EVALLEDGER_PROMPT" in task_env
    assert not missing(task_env, section("tasks.md", "Environment variables"))
    assert not missing(variables("cli"), section("cli.md", "Global options"))


# -- ledger.md --------------------------------------------------------------------------------


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "l.db") as ledger:
        yield ledger


def test_every_view_column_is_documented(fresh: Ledger) -> None:
    views = section("ledger.md", "SQL views")
    for view in ("runs", "task_attempts", "task_results", "task_grades", "task_flags",
                 "run_pass_rates", "model_pass_rates"):
        columns, _ = fresh.query(f"SELECT * FROM {view} LIMIT 0")
        assert columns, view
        assert not missing(columns, views), view
    for view in ("runs", "task_attempts"):
        columns, _ = fresh.query(f"SELECT * FROM {view} LIMIT 0")
        assert first_cells(section("ledger.md", f"`{view}`")) == set(columns), view
    same = [fresh.query(f"SELECT * FROM {v} LIMIT 0")[0] for v in ("task_attempts",
                                                                   "task_results")]
    assert same[0] == same[1], "docs say task_results has the columns of task_attempts"


def test_schema_is_documented(fresh: Ledger) -> None:
    text = "\n".join(lines("ledger.md"))
    columns, _ = fresh.query("SELECT * FROM events LIMIT 0")
    assert first_cells(section("ledger.md", "The `events` table")) == set(columns)
    _, objects = fresh.query(
        "SELECT name FROM sqlite_master WHERE type IN ('index', 'trigger', 'table', 'view') "
        "AND name NOT LIKE 'sqlite_autoindex%' AND name NOT LIKE '%sqlite_migrations%'"
    )
    assert not missing([name for (name,) in objects], text)
    _, keys = fresh.query("SELECT key FROM meta")
    assert not missing([key for (key,) in keys], section("ledger.md", "`meta`"))
    migrations = section("ledger.md", "Schema versions and migrations")
    _, applied = fresh.query("SELECT name FROM _sqlite_migrations ORDER BY id")
    assert not missing([name for (name,) in applied], migrations)
    assert f"The current version is {SCHEMA_VERSION}." in migrations
    assert f"{DEFAULT_BUSY_TIMEOUT:g} seconds" in section("ledger.md", "Concurrency")


def test_every_ledger_error_is_documented() -> None:
    errors = [
        name for name in evalledger.ledger.__all__
        if isinstance(obj := getattr(evalledger.ledger, name), type)
        and issubclass(obj, LedgerError) and obj is not LedgerError
    ]
    assert errors
    assert not missing(errors, "\n".join(lines("ledger.md")))


def _code_block(text: str, language: str) -> str:
    match = re.search(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert match, f"no {language} block"
    return match[1]


def test_the_documented_chain_check_works(tmp_path: Path) -> None:
    """The auditor's snippet in ledger.md recomputes the chain the ledger writes, and
    finds an edit made behind the triggers' back."""
    path = tmp_path / "audit.db"
    with Ledger(path) as ledger:
        ledger.append([
            RunStarted(run_id="r1", planned=["default/t/00"]),
            TaskStarted(run_id="r1", task_key="default/t/00", task_id="t"),
            TaskOutput(run_id="r1", task_key="default/t/00", line="héllo ✓ \"quoted\"", n=1),
            TaskOutput(run_id="r1", task_key="default/t/00", line="0.00001", n=2),
        ])
        # A chunk of lines, stored compressed, then a row after it.
        ledger.append(chunked([TaskOutput(run_id="r1", task_key="default/t/00",
                                          line=f"line {n} ✓", n=n) for n in range(3, 103)]))
        ledger.append([TaskOutput(run_id="r1", task_key="default/t/00", line="last", n=103)])
        assert ledger.db.execute("SELECT typeof(payload) FROM events WHERE seq = 104"
                                 ).fetchone() == ("blob",)
    namespace: dict[str, Any] = {}
    exec(_code_block(section("ledger.md", "The hash chain"), "python"), namespace)
    first_broken_link = namespace["first_broken_link"]
    assert first_broken_link(path) is None
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER events_no_update")
    db.execute("""UPDATE events SET payload = '{"line":"edited","n":1,"stream":"stdout",'
                  || '"truncated":false}' WHERE seq = 3""")
    db.commit()
    db.close()
    assert first_broken_link(path) == 3


def test_the_chunk_query_gives_each_line_its_seq(tmp_path: Path) -> None:
    """ledger.md's SQL over a chunk's lines gives what ``Ledger.rows`` gives."""
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append([RunStarted(run_id="r1", planned=["default/t/00"])])
        ledger.append(chunked([TaskOutput(run_id="r1", task_key="default/t/00",
                                          line=f"line {n}", n=n) for n in range(1, 40)]))
        sql = _code_block(section("ledger.md", "Lines in chunks"), "sql")
        _, rows = ledger.query(sql, ["r1", "default/t/00"])
        assert rows == [(row.seq, json.loads(row.payload)["line"])
                        for row in ledger.rows("r1", types=["task.output"])]
        assert [seq for seq, _ in rows] == list(range(2, 41))


def test_the_example_queries_run(fresh: Ledger) -> None:
    queries = _code_block(section("ledger.md", "Example queries"), "sql")
    statements = [s for s in queries.split(";\n") if s.strip()]
    assert len(statements) >= 2
    for statement in statements:
        fresh.query(statement)
