"""Run folders of the old harness, read as events (``evalledger import``).

The layout and every field are in docs/import.md (from the harness's own docs and
code, across its versions; any field may be missing in an old file). In short: a run
folder holds ``run.json``; each attempt is ``<variant>/<task_id>/<NN>/task.json``
(task ids may contain ``/``); a folder below it with its own ``run.json`` is a run of
its own.

A run folder becomes what a run records: ``run.started`` (marked ``imported`` with
the folder and with run.json's own totals), its skipped files, per attempt
``task.started`` (marked with the file and its content hash), the file itself as one
``task.event`` (nothing it says is lost), ``task.usage`` per model (the agent's, then
grading's: its judges and simulated user, what the old harness called eval overhead)
and ``task.completed``, then ``run.finished``.

Event ids are UUIDv5s of where the event comes from (the run id, the file's path in
the run folder, its content hash), not of the ledger it goes into: importing twice
adds nothing, into any ledger, and a file that changed since it was imported is told
apart from one that did not. Reading is pure: ``read_run`` returns events; the
caller appends them.

A folder to import is input from anywhere, so nothing in it is trusted: files are
read only through ``evalledger._files`` (regular files, no links followed, nothing
blocking, at most ``max_file_bytes`` each), and every event comes back already in
stored form, so what the ledger cannot store (a name with a newline or an escape
code, a lone surrogate, JSON nested deeper than it serialises) is found here, per
file or per run, and said with its reason, never raised from the append.

Invariant: ``read_run`` raises nothing but ``NotImportable`` for anything a folder
holds; every event it returns can be appended.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from evalledger._bounds import MAX_SECONDS, MAX_TOKENS, MAX_USD
from evalledger._files import NotRead, TooBig, read_regular, walk
from evalledger._text import UNSAFE_IN_NAMES as _UNSAFE
from evalledger.errors import EvalledgerError
from evalledger.ledger import (
    AnyEvent,
    CriterionResult,
    EventRow,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskEmitted,
    TaskSkipped,
    TaskStarted,
    TaskUsage,
    TokenCounts,
)
from evalledger.statuses import FinalStatus, RunStatus

if TYPE_CHECKING:
    from evalledger.projections import RunSummary

FORMAT = "coder_eval"
# Fixed: event ids must come out the same on every machine, in every ledger.
NAMESPACE = uuid.UUID("0d6b1f5e-2c44-5a3e-9f61-7a1d3c9e8b20")
# The old harness's default pass threshold of a criterion score.
PASS_THRESHOLD = 0.9
# The most a file may hold to be read (``--max-file-bytes``): a task.json with its
# whole transcript runs to tens of MB, a run.json of tens of thousands of rows too.
MAX_FILE_BYTES = 64 << 20
# What a run id or a task folder's name may be: one folder's name (reports are written
# to ``<out>/<run_id>/``), at most what a file name can hold.
MAX_NAME_BYTES = 255
_SURROGATE = re.compile("[\ud800-\udfff]")
FOLDER_LINK = "a symbolic link to a folder (not entered)"
# How the old harness begins the reason of a task left out on purpose (its SkippedTask).
DELIBERATE_SKIP = "skip: true"
# What run.json says of its whole run, across versions (docs/import.md): kept with the
# imported run (run.started.imported.totals) and compared with what the ledger counts.
TOTALS = ("tasks_run", "tasks_succeeded", "tasks_failed", "tasks_error", "tasks_not_graded",
          "tasks_cost_incomplete", "tasks_unpriced", "cost_complete", "total_cost_usd",
          "agent_cost_usd", "eval_overhead_cost_usd")
# Two costs closer than this agree (run.json's are sums of floats).
COST_TOLERANCE = 5e-7
# The most an imported score may say (a fraction, in any real file): past it, as past
# the bounds of ``_bounds``, its file is not imported (summed, such numbers overflow a
# float, which broke every later read of the run).
MAX_SCORE = 1e9
# The longest task key import-events takes (``ledger._transfer``): a run imported here
# can be exported and imported into another ledger.
MAX_KEY_CHARS = 1024
# A replicate's folder: ASCII digits only. str.isdigit() also takes '²' (which int()
# refuses) and Arabic-Indic '\u0660\u0661' (which int() reads as 1: one more name
# for replicate 01).
_REPLICATE = re.compile("[0-9]+")


class NotImportable(EvalledgerError):
    """A run folder left out whole; ``str(error)`` says why, on one line."""


@dataclass(frozen=True)
class Problem:
    """A file that could not be imported as a result, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class RunFolder:
    """A run folder whose names the ledger can store, with its run.json read."""

    folder: Path
    run_id: str
    summary: dict[str, Any]
    """run.json's object; empty when there is none to read."""
    problem: Problem | None
    """Why run.json was not read (``skipped``) or is not a JSON object (``unfinished``)."""
    read: bool
    """False when run.json was not read at all (a link, a FIFO, too big...)."""


@dataclass
class LegacyRun:
    """One run folder read: the events to append, and what was left out."""

    run_id: str
    folder: Path
    events: list[EventRow] = field(default_factory=list)
    """In stored form: each was encoded here, so each can be appended."""
    attempts: int = 0
    """Attempts imported with a final status."""
    unfinished: list[Problem] = field(default_factory=list)
    """Files that do not parse, have no final status, or say what the ledger cannot store:
    their keys count as unfinished."""
    skipped: list[Problem] = field(default_factory=list)
    """What was not read: links, FIFOs, devices, sockets, files over the size limit, names
    the ledger cannot store, folders that could not be listed."""
    unchanged: int = 0
    """Files imported before, as they are now: nothing to add."""
    changed: list[str] = field(default_factory=list)
    """Files imported before that differ now: left as imported (the ledger is history)."""


@dataclass(frozen=True)
class _Attempt:
    key: str
    variant_id: str
    task_id: str
    replicate: int
    source: str
    sha256: str
    data: dict[str, Any]
    row: Mapping[str, Any] = field(default_factory=dict)
    """The attempt's run.json row (empty when run.json has none): what the old harness
    summed for it (judge and simulator cost, whether its cost was complete)."""


_Ident = tuple[str, str, str]
"""Where an attempt's events come from (run id, file, content hash): their ids' seed."""
_Usage = tuple[TokenCounts, float | None, str | None]
"""What one model used: its tokens, their cost (None: unknown) and the model's name."""


def find_run_folders(paths: Iterable[Path],
                     unlisted: list[Problem] | None = None) -> list[Path]:
    """Every folder holding a ``run.json`` under ``paths`` (themselves included), nested
    ones too; symbolic links to folders are not entered (``runs/latest`` points into a
    run). ``unlisted`` gets the folders that could not be listed."""
    found: set[Path] = set()
    problems = unlisted if unlisted is not None else []
    for path in paths:
        for listing in walk(path, lambda folder, why: problems.append(Problem(str(folder),
                                                                              why))):
            if "run.json" in listing.files:  # whatever it is: reading it decides
                found.add(listing.path)
    return sorted(found)


def _task_files(run: LegacyRun) -> Iterator[Path]:
    """The run's ``task.json`` entries, relative to it, in name order: not those below a
    nested run's ``run.json``. Links to folders are not entered: named in ``run``."""
    top = run.folder
    for listing in walk(top, lambda folder, why: run.skipped.append(Problem(str(folder),
                                                                            why))):
        if listing.path != top and "run.json" in listing.files:
            listing.folders.clear()  # a nested run: its files are its own
            continue
        run.skipped += [Problem(str(listing.path / name), FOLDER_LINK) for name in listing.links]
        if "task.json" in listing.files and listing.path != top:
            yield listing.path.relative_to(top) / "task.json"


def key_of(relative: Path) -> tuple[str, str, int]:
    """``(variant_id, task_id, replicate)`` from where a ``task.json`` sits in its run:
    ``<variant>/<task_id...>/<NN>/``; a last folder that is not all ASCII digits is part
    of the task id, replicate 0."""
    parts = relative.parent.parts
    variant = parts[0] if len(parts) > 1 else "default"
    rest = parts[1:] if len(parts) > 1 else parts
    if rest and _REPLICATE.fullmatch(rest[-1]) and len(rest) > 1:
        return variant, "/".join(rest[:-1]), int(rest[-1])
    return variant, "/".join(rest) or "task", 0


def shown(text: str) -> str:
    """``text`` safe to print as part of one line: each character a name may not hold
    (a newline, an escape code, a lone surrogate...) written as its escape."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def quoted(name: str, most: int = 60) -> str:
    """A name for a message: escaped as ``shown`` does, quoted, cut after ``most``."""
    text = shown(name)
    return f"'{text[:most]}...'" if len(text) > most else f"'{text}'"


def name_problem(name: str) -> str | None:
    """Why the ledger cannot take ``name`` as a run id or one folder of a task key, or
    None: empty, ``.`` or ``..``, a ``/`` or ``\\``, a character of ``_UNSAFE``, or longer
    than a file name may be."""
    if not name:
        return "it is empty"
    if name in (".", ".."):
        return f"it is '{name}'"
    if "/" in name:
        return "it holds '/'"
    if "\\" in name:  # import-events refuses it too: a separator where paths are Windows'
        return "it holds '\\'"
    if unsafe := _UNSAFE.search(name):
        code = ord(unsafe.group())
        return (f"it holds the control character U+{code:04X}" if code < 0xD800 else
                f"it holds a lone surrogate U+{code:04X}: not UTF-8 text")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    return None


def _run_id_problem(run_id: str) -> str | None:
    # `latest` names the newest run in every command: a run of that id could not be named.
    return "it is reserved ('latest' names the newest run)" if run_id == "latest" else (
        name_problem(run_id))


def load_run(folder: Path, *, max_file_bytes: int = MAX_FILE_BYTES) -> RunFolder:
    """The run folder ``folder`` with its run.json read, its run id that of run.json
    (``run_id``), else the folder's name.

    Raises:
        NotImportable: the folder's name or the run id cannot be stored, or the folder's
            path is not UTF-8 text.
    """
    resolved = folder.resolve()  # "." names the folder it is in
    if problem := _run_id_problem(resolved.name):
        raise NotImportable(f"the folder's name {quoted(resolved.name)} cannot be a run id: "
                            f"{problem}")
    if _SURROGATE.search(str(resolved)):
        raise NotImportable("its path is not UTF-8 text: the ledger cannot record where it "
                            "came from")
    path = folder / "run.json"
    summary: dict[str, Any] = {}
    problem_of: Problem | None = None
    read = True
    try:
        data, error = _parse(read_regular(path, max_file_bytes))
    except NotRead as e:
        data, error, read = None, _not_read(e), False
    if isinstance(data, dict):
        summary = data
    elif error is None:
        error = "not a JSON object"
    if error is not None:
        problem_of = Problem(str(path), error)
    run_id = summary.get("run_id")
    if not (isinstance(run_id, str) and run_id):
        return RunFolder(folder, resolved.name, summary, problem_of, read)
    if problem := _run_id_problem(run_id):
        raise NotImportable(f"run.json's run_id {quoted(run_id)} cannot be stored: {problem}")
    return RunFolder(folder, run_id, summary, problem_of, read)


def _not_read(error: NotRead) -> str:
    return f"{error} (--max-file-bytes)" if isinstance(error, TooBig) else str(error)


def read_run(folder: Path | RunFolder, *, tz: tzinfo | None = None,
             known: Mapping[str, str] | None = None,
             max_file_bytes: int = MAX_FILE_BYTES) -> LegacyRun:
    """The events of the run folder ``folder``. ``tz``: what naive timestamps are in (the
    old harness wrote local time without an offset; default: this machine's zone).
    ``known``: file -> content hash of what an earlier import appended; those files add
    nothing now (and say so if they changed). ``max_file_bytes``: a file larger than
    this is not read (named in ``skipped``).

    Raises:
        NotImportable: the run's names cannot be stored (see ``load_run``), or what
            run.json says of the whole run cannot.
    """
    source = folder if isinstance(folder, RunFolder) else load_run(
        folder, max_file_bytes=max_file_bytes)
    known = known or {}
    summary = source.summary
    run = LegacyRun(run_id=source.run_id, folder=source.folder)
    if source.problem is not None:
        (run.unfinished if source.read else run.skipped).append(source.problem)
    keys: set[str] = set()
    # Invariant: each key is one file's, the one imported before, else the first in
    # name order. Folders 1, 01 and 001 name one replicate (so do t/task.json and
    # t/00/task.json); a second file of a key would add an attempt to it, or turn an
    # imported one's verdict past the "changed since it was imported" check.
    owners = {_key(*key_of(Path(source))): source for source in known
              if not source.startswith("run.json#")}
    try:
        rows = _rows(summary.get("task_results"))
    except NotImportable as e:
        raise NotImportable(f"run.json: task_results: {e}") from e
    attempts = _file_attempts(run, known, keys, owners, max_file_bytes, rows)
    attempts += _row_attempts(run, rows, known, keys, owners)

    tz = tz or _local_zone()
    started = _time(summary.get("start_time"), tz)
    attempts.sort(key=lambda a: (_time(a.data.get("started_at"), tz) or started or "", a.key))
    first = (started or _first_started(attempts, tz)
             or _file_time(run.folder / "run.json"))
    run.events = _run_started(run.run_id, run.folder, summary, sorted(keys), first)
    last = _add_attempts(run, attempts, _tags(rows), tz, first)
    ended = _time(summary.get("end_time"), tz)
    run.events += _stored(lambda: [RunFinished(
        event_id=_id(run.run_id, "run.json", "run.finished"), run_id=run.run_id,
        ts=max(ended or last, last), status=RunStatus.COMPLETED)])
    return run


def _first_started(attempts: Iterable[_Attempt], tz: tzinfo) -> str | None:
    """When the first attempt that says when it started did (``attempts`` in order)."""
    return next((t for a in attempts if (t := _time(a.data.get("started_at"), tz))), None)


def _tags(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Task key -> the tags its run.json row lists (task.json files have none)."""
    return {k: r["tags"] for k, r in rows.items() if isinstance(r.get("tags"), list)}


def _run_started(run_id: str, folder: Path, summary: Mapping[str, Any], planned: list[str],
                 first: str) -> list[EventRow]:
    """``run.started`` and the run's skipped files, stored.

    Raises:
        NotImportable: what run.json says of the whole run cannot be stored.
    """
    framework = summary.get("framework_version")
    try:
        return _stored(lambda: [RunStarted(
            event_id=_id(run_id, "run.json", "run.started"), run_id=run_id, ts=first,
            planned=planned, max_parallel=_int(summary.get("max_parallel"), 1, "max_parallel"),
            imported=_clean({"format": FORMAT, "source": str(folder.resolve()),
                             "framework_version": framework if isinstance(framework, str)
                             else None, "totals": old_totals(summary) or None}),
        ), *_skipped(run_id, summary.get("skipped_tasks"), first)])
    except NotImportable as e:
        raise NotImportable(f"run.json: {e}") from e


def _add_attempts(run: LegacyRun, attempts: Iterable[_Attempt], tags: Mapping[str, list[Any]],
                  tz: tzinfo, first: str) -> str:
    """Add each attempt's events to ``run``; one the ledger cannot store is unfinished,
    with why. Returns the time of the last event added (``first`` when none was)."""
    last = first
    for attempt in attempts:
        try:
            made = _stored(partial(_attempt_events, run.run_id, attempt, tags.get(attempt.key),
                                   tz, first))
        except NotImportable as e:
            run.unfinished.append(Problem(_where(run.folder, attempt.source), str(e)))
            continue
        run.events += made
        last = max(last, made[-1].ts)
        run.attempts += 1
    return last


def old_totals(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The totals run.json states about its run, those its version has (``TOTALS``).

    Raises:
        NotImportable: a cost over ``MAX_USD`` or a count over ``MAX_TOKENS``.
    """
    return {name: value for name in TOTALS
            if isinstance(value := summary.get(name), bool)
            or _number(value, name, MAX_USD if name.endswith("_usd") else MAX_TOKENS)
            is not None}


def differences(totals: Mapping[str, Any], summary: RunSummary) -> list[str]:
    """What the ledger counts differently from an imported run.json's own ``totals``, one
    phrase each (``tasks_cost_incomplete 1 (run.json 2)``); none when they agree.

    Costs are compared to the millionth of a dollar. run.json's ``total_cost_usd`` is
    the agent's and grading's together where it also states ``agent_cost_usd``; an
    older one, without it, may state the agent's alone, and agreeing with that is
    agreeing."""
    said: list[str] = []
    by_role = summary.cost_by_role
    agent, grader = by_role.get("agent", 0.0), by_role.get("grader", 0.0)

    def cost(name: str, ours: float, theirs: object) -> None:
        if isinstance(theirs, int | float) and not isinstance(theirs, bool) and (
                abs(ours - theirs) > COST_TOLERANCE):
            said.append(f"{name} {_usd(ours)} (run.json {_usd(theirs)})")

    total = totals.get("total_cost_usd")
    if ("agent_cost_usd" not in totals and isinstance(total, int | float)
            and abs(total - agent) <= COST_TOLERANCE):
        total = None
    cost("cost", summary.total_cost_usd, total)
    cost("agent cost", agent, totals.get("agent_cost_usd"))
    cost("grader cost", grader, totals.get("eval_overhead_cost_usd"))
    for name, ours, theirs in (
        ("tasks_run", summary.tasks_run, "tasks_run"),
        ("tasks_succeeded", summary.tasks_succeeded, "tasks_succeeded"),
        ("tasks_failed", summary.tasks_failed, "tasks_failed"),
        ("tasks_error", summary.tasks_error, "tasks_error"),
        ("tasks_ungraded", summary.tasks_ungraded, "tasks_not_graded"),
        ("tasks_cost_incomplete", summary.tasks_cost_incomplete, "tasks_cost_incomplete"),
        ("tasks_cost_incomplete", summary.tasks_cost_incomplete, "tasks_unpriced"),
    ):
        value = totals.get(theirs)
        if isinstance(value, int) and not isinstance(value, bool) and value != ours:
            said.append(f"{name} {ours} (run.json {'' if theirs == name else theirs + ' '}"
                        f"{value})")
    return said


def _usd(value: float) -> str:
    """Dollars to the millionth, as a difference between two totals needs them."""
    whole, _, cents = f"{value:,.6f}".partition(".")
    return f"${whole}.{cents.rstrip('0').ljust(2, '0')}"


def _where(folder: Path, source: str) -> str:
    """A file of the run as a user finds it: ``run.json#KEY`` stays as it is written."""
    name, hash_, key = source.partition("#")
    return str(folder / name) + hash_ + key


def _stored(make: Callable[[], list[AnyEvent]]) -> list[EventRow]:
    """The events ``make`` builds, in stored form, or why the ledger cannot store them.

    Raises:
        NotImportable: one would not build or encode (JSON nested deeper than the
            models and the serialiser go, a lone surrogate, a field its model refuses).
    """
    try:
        return [EventRow.of(event) for event in make()]
    # pydantic's errors are ValueErrors; OverflowError: a number no float holds, should
    # one get past _number.
    except (ValueError, RecursionError, OverflowError) as e:
        raise NotImportable(f"the ledger cannot store it: {_why_unstorable(e)}") from e


def _why_unstorable(error: Exception) -> str:
    text = str(error)
    if "surrogates not allowed" in text:
        return "it holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
    if isinstance(error, RecursionError) or "depth exceeded" in text:
        return "it is nested too deeply"
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        return shown(f"{'.'.join(map(str, first['loc']))}: {first['msg']}")
    return shown(text.splitlines()[0] if text else type(error).__name__)


def _file_attempts(run: LegacyRun, known: Mapping[str, str], keys: set[str],
                   owners: dict[str, str], max_file_bytes: int,
                   rows: Mapping[str, dict[str, Any]]) -> list[_Attempt]:
    """The run's task.json files that are results and new; the rest said in ``run``.
    Every key seen goes into ``keys`` (a file that is not a result, or was not read,
    still counts as planned and unfinished); ``owners``: key -> the file it is, those
    imported before, and each key's first file here added to them."""
    attempts = []
    for relative in _task_files(run):
        path = run.folder / relative
        source = relative.as_posix()
        variant, task_id, replicate = key_of(relative)
        key = _key(variant, task_id, replicate)
        if (why := _key_problem(relative, key)) is not None:
            run.skipped.append(Problem(str(path), why))
            continue
        owner = owners.setdefault(key, source)
        if owner != source and source not in known:
            run.skipped.append(Problem(str(path), f"its task key {quoted(key)} is already that of "
                                                  f"{shown(_where(run.folder, owner))}"))
            continue
        keys.add(key)
        try:
            raw = read_regular(path, max_file_bytes)
        except NotRead as e:
            run.skipped.append(Problem(str(path), _not_read(e)))
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if source in known:
            if known[source] == digest:
                run.unchanged += 1
            else:
                run.changed.append(str(path))
            continue
        data, error = _parse(raw)
        error = error or _not_a_result(data)
        if error is not None:
            run.unfinished.append(Problem(str(path), error))
            continue
        attempts.append(_Attempt(key, variant, task_id, replicate, source, digest, data,
                                 rows.get(key, {})))
    return attempts


def _key(variant: str, task_id: str, replicate: int) -> str:
    return f"{variant}/{task_id}/{replicate:02d}"


def _key_problem(relative: Path, key: str) -> str | None:
    """Why the task.json at ``relative`` cannot be imported under ``key``, or None."""
    bad = next(((part, p) for part in relative.parent.parts if (p := name_problem(part))),
               None)
    if bad is not None:
        return f"the folder name {quoted(bad[0])} cannot be part of a task key: {bad[1]}"
    return _long_key(key)


def _long_key(key: str) -> str | None:
    return (f"its task key is {len(key):,} characters long: over {MAX_KEY_CHARS:,}"
            if len(key) > MAX_KEY_CHARS else None)


def _not_a_result(data: object) -> str | None:
    """Why a parsed task.json is not a result (the old resume would run it again)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    status = data.get("final_status")
    if _status(status) is None:
        return "no final_status" if status is None else f"unknown final_status {status!r}"
    return None


def _row_attempts(run: LegacyRun, rows: dict[str, dict[str, Any]], known: Mapping[str, str],
                  keys: set[str], owners: Mapping[str, str]) -> list[_Attempt]:
    """Rows of batch-level failures have no task.json: the row is all there is. A key a
    file has (one imported before and gone since too: ``owners``) is that file's."""
    attempts = []
    for key, row in sorted(rows.items()):
        if key in keys or key in owners or not _status(row.get("status")):
            continue
        source = f"run.json#{key}"
        variant, _, rest = key.partition("/")
        task_id, _, nn = rest.rpartition("/")
        bad = next(((part, p) for part in [variant, *task_id.split("/")]
                    if (p := name_problem(part))), None)
        why = (f"{quoted(bad[0])} cannot be part of a task key: {bad[1]}" if bad is not None
               else _long_key(key))
        if why is not None:
            run.skipped.append(Problem(_where(run.folder, shown(source)), why))
            continue
        keys.add(key)
        if source in known:
            run.unchanged += 1
            continue
        attempts.append(_Attempt(key, variant, task_id, int(nn), source, "", _row_as_file(row),
                                 row))
    return attempts


def _skipped(run_id: str, entries: object, ts: str) -> list[AnyEvent]:
    # The old harness prefixes the reason of a task that opted out with "skip: true"
    # ("skip: true (task_id='t')"); a file that failed to load has its exception there.
    return [
        TaskSkipped(event_id=_id(run_id, "run.json", f"task.skipped.{i}"), run_id=run_id,
                    ts=ts, path=str(skipped.get("path") or "?"), reason=reason,
                    deliberate=reason.startswith(DELIBERATE_SKIP))
        for i, skipped in enumerate(entries if isinstance(entries, list) else [])
        if isinstance(skipped, dict)
        for reason in [str(skipped.get("reason") or "skipped by the old harness")]
    ]


def _attempt_events(run_id: str, attempt: _Attempt, tags: list[Any] | None, tz: tzinfo,
                    fallback: str) -> list[AnyEvent]:
    """What one attempt records: ``task.started``, the file itself as ``task.event``,
    ``task.usage`` per model (the agent's, then grading's) and ``task.completed``.
    ``fallback``: when it started, if its file does not say."""
    data = attempt.data
    ident = (run_id, attempt.source, attempt.sha256)
    started = _time(data.get("started_at"), tz) or fallback
    completed = _time(data.get("completed_at"), tz) or started
    model = _model_used(data)
    usages = _usage(data, model)
    graders = _grader_usage(data, attempt.row)
    events: list[AnyEvent] = [
        _task_started(attempt, ident, started, tags, model),
        # The file itself, whole: whatever this reader does not map is still here.
        TaskEmitted(event_id=_id(*ident, "task.event"), run_id=run_id, task_key=attempt.key,
                    ts=started, n=1, data={"imported_from": attempt.source, "record": data}),
    ]
    events += [TaskUsage(
        event_id=_id(*ident, f"task.usage.{i}"), run_id=run_id, task_key=attempt.key,
        ts=completed, model=used, cost_usd=cost, **dict(counts))
        for i, (counts, cost, used) in enumerate(usages)]
    events += [TaskUsage(
        event_id=_id(*ident, f"task.usage.grader.{i}"), run_id=run_id,
        task_key=attempt.key, ts=completed, model=used, cost_usd=cost, role="grader",
        **dict(counts))
        for i, (counts, cost, used) in enumerate(graders)]
    events.append(_task_completed(attempt, ident, max(completed, started), model,
                                  usages + graders))
    return events


def _model_used(data: Mapping[str, Any]) -> str | None:
    return data.get("model_used") if isinstance(data.get("model_used"), str) else None


def _task_started(attempt: _Attempt, ident: _Ident, ts: str, tags: list[Any] | None,
                  model: str | None) -> TaskStarted:
    data = attempt.data
    definition = _clean({"agent_type": data.get("agent_type"), "model": model,
                         "task_description": data.get("task_description")})
    return TaskStarted(
        event_id=_id(*ident, "task.started"), run_id=ident[0], task_key=attempt.key,
        ts=ts, task_id=attempt.task_id, variant_id=attempt.variant_id,
        replicate_index=attempt.replicate, attempt=1,
        tags=[str(t) for t in tags or []], definition=definition,
        definition_hash=hashlib.sha256(
            json.dumps(definition, sort_keys=True).encode()).hexdigest(),
        imported=_clean({"source": attempt.source, "sha256": attempt.sha256 or None}),
    )


def _task_completed(attempt: _Attempt, ident: _Ident, ts: str, model: str | None,
                    used: list[_Usage]) -> TaskCompleted:
    """The attempt's outcome, with the tokens and cost of everything it used."""
    data = attempt.data
    status = _status(data.get("final_status", data.get("status")))
    assert status is not None  # only results become attempts (_not_a_result)
    costs = [cost for _, cost, _ in used]
    tokens = sum((counts for counts, _, _ in used), TokenCounts())
    # Each turn's usage is in range; what a file of many sums to must be too.
    for name, count in tokens:
        _number(count, f"the attempt's {name}", MAX_TOKENS)
    cost = _number(_total_cost(costs), "the attempt's cost_usd", MAX_USD)
    details: dict[str, Any] = (data["error_details"]
                               if isinstance(data.get("error_details"), dict) else {})
    return TaskCompleted(
        event_id=_id(*ident, "task.completed"), run_id=ident[0], task_key=attempt.key,
        ts=ts, attempt=1, final_status=status, category=status.category,
        duration_seconds=_float(data.get("duration_seconds", data.get("duration")),
                                "duration_seconds", MAX_SECONDS) or 0.0,
        weighted_score=_float(data.get("weighted_score"), "weighted_score", MAX_SCORE) or 0.0,
        criteria=_criteria(data.get("success_criteria_results")),
        error_message=_text(data.get("error_message")),
        environment_info=_environment(data, model),
        tokens=tokens,
        cost_usd=cost,
        cost_complete=None not in costs and not _spend_lost(attempt.row, status),
        imported=_clean({"error_category": details.get("error_category",
                                                       data.get("error_category"))}) or None,
    )


def _total_cost(costs: list[float | None]) -> float | None:
    """The attempt's cost. No usage in the file at all: the cost is unknown, not $0.
    Spend the old harness lost (``_spend_lost``) leaves what was priced as a floor."""
    return None if None in costs or not costs else round(sum(c for c in costs if c), 10)


def _environment(data: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    environment = dict(data["environment_info"]) if isinstance(
        data.get("environment_info"), dict) else {}
    if model:
        environment.setdefault("model", model)
    return environment


def _usage(data: dict[str, Any], model: str | None) -> list[_Usage]:
    """Per model: the tokens and cost of its turns (a turn with tokens and no price
    makes the model's cost unknown, never $0); else the file's totals."""
    turns = data.get("iterations", data.get("turns"))
    by_model: dict[str | None, tuple[TokenCounts, float | None]] = {}
    for turn in turns if isinstance(turns, list) else []:
        if not isinstance(turn, dict) or not isinstance(turn.get("token_usage"), dict):
            continue
        used = turn.get("model_used") if isinstance(turn.get("model_used"), str) else model
        _book(by_model, used, *_tokens(turn["token_usage"]))
    if by_model:
        return [(c, cost, m) for m, (c, cost) in by_model.items()]
    if isinstance(data.get("total_token_usage"), dict):
        counts, cost = _tokens(data["total_token_usage"])
        if counts.total or cost is not None:  # no tokens and no price: nothing was used
            return [(counts, cost, model)]
    return []


def _book(by_model: dict[str | None, tuple[TokenCounts, float | None]], model: str | None,
          counts: TokenCounts, cost: float | None) -> None:
    """Add one turn's or one judge's usage to its model's: tokens without a price make the
    model's cost unknown (None), never $0."""
    before, spent = by_model.get(model, (TokenCounts(), 0.0))
    unpriced = cost is None and counts.total > 0
    by_model[model] = (before + counts,
                       None if spent is None or unpriced else spent + (cost or 0.0))


def _grader_usage(data: dict[str, Any], row: Mapping[str, Any]) -> list[_Usage]:
    """What grading the attempt cost (the old harness's eval overhead), per model: its
    judges' ``token_usage`` (success and post-failure criteria: both were paid for),
    else its run.json row's ``judge_cost_usd``; and its simulated user (dialog mode):
    the tokens of ``simulation``, priced by the row's ``simulator_cost_usd``. A judge
    with tokens and no price is unpriced, as an agent's turn is."""
    judges = _judge_results(data)
    out = _judge_usage(judges)
    if not judges and (judge := _float(row.get("judge_cost_usd"), "judge_cost_usd",
                                            MAX_USD)) is not None:
        out.append((TokenCounts(), judge, None))
    return out + _simulator_usage(data, row)


def _judge_results(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The criteria results that record what their judge used."""
    return [result
            for name in ("success_criteria_results", "post_failure_criteria_results")
            for result in _list(data.get(name))
            if isinstance(result, dict) and isinstance(result.get("token_usage"), dict)]


def _judge_usage(judges: list[dict[str, Any]]) -> list[_Usage]:
    by_model: dict[str | None, tuple[TokenCounts, float | None]] = {}
    for result in judges:
        counts, cost = _tokens(result["token_usage"])
        if counts.total or cost is not None:
            used = result.get("model") if isinstance(result.get("model"), str) else None
            _book(by_model, used, counts, cost)
    return [(c, cost, m) for m, (c, cost) in by_model.items()]


def _simulator_usage(data: Mapping[str, Any], row: Mapping[str, Any]) -> list[_Usage]:
    """The simulated user's tokens (task.json) and cost (its run.json row), if either."""
    simulation = data.get("simulation")
    if not isinstance(simulation, dict):
        simulation = {}
    counts = TokenCounts(
        input_tokens=_int(simulation.get("simulator_input_tokens"), 0, "simulator_input_tokens"),
        output_tokens=_int(simulation.get("simulator_output_tokens"), 0,
                           "simulator_output_tokens"))
    cost = _float(row.get("simulator_cost_usd"), "simulator_cost_usd", MAX_USD)
    if not (counts.total or cost is not None):
        return []
    model = simulation.get("simulator_model")
    return [(counts, cost, model if isinstance(model, str) else None)]


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _spend_lost(row: Mapping[str, Any], status: FinalStatus) -> bool:
    """Whether the old harness knew the attempt's cost to be incomplete though each usage
    it recorded had a price: its row says ``cost_complete: false``; without that flag (an
    older run.json), a TIMEOUT: the harness killed the agent mid-turn, and the spend of
    that turn was never reported."""
    flag = row.get("cost_complete")
    return flag is False if isinstance(flag, bool) else status is FinalStatus.TIMEOUT


def _tokens(usage: dict[str, Any]) -> tuple[TokenCounts, float | None]:
    """A TokenUsage of either shape. Older files have only ``input_tokens``, the
    uncached slice; newer ones also derive ``input_tokens`` as all three input buckets
    summed, so ``uncached_input_tokens`` wins where it is present."""
    uncached = "uncached_input_tokens" if "uncached_input_tokens" in usage else "input_tokens"
    counts = TokenCounts(
        input_tokens=_int(usage.get(uncached), 0, uncached),
        output_tokens=_int(usage.get("output_tokens"), 0, "output_tokens"),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens"), 0,
                                "cache_creation_input_tokens"),
        cache_read_tokens=_int(usage.get("cache_read_input_tokens"), 0,
                               "cache_read_input_tokens"),
    )
    return counts, _float(usage.get("total_cost_usd"), "total_cost_usd", MAX_USD)


def _criteria(results: object) -> list[CriterionResult]:
    out = []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict):
            continue
        score = _float(result.get("score"), "score", MAX_SCORE)
        threshold = _float(result.get("pass_threshold"), "pass_threshold", MAX_SCORE)
        detail = next((str(result[k]) for k in ("details", "error", "description")
                       if result.get(k)), "")
        out.append(CriterionResult(
            type=str(result.get("criterion_type") or result.get("result_kind") or "criterion"),
            passed=score is not None and score >= (PASS_THRESHOLD if threshold is None
                                                   else threshold),
            detail=detail))
    return out


def _rows(rows: object) -> dict[str, dict[str, Any]]:
    """run.json's per-task rows by task key."""
    out = {}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("task_id"), str):
            variant = row.get("variant_id") if isinstance(row.get("variant_id"), str) else None
            # null in old rows
            replicate = _int(row.get("replicate_index"), 0, "replicate_index")
            out[_key(variant or "default", row["task_id"], replicate)] = row
    return out


def _row_as_file(row: dict[str, Any]) -> dict[str, Any]:
    """A run.json row in the shape of a task.json (its field names differ). The agent's
    cost is ``agent_cost_usd`` where the row has it: its ``total_cost_usd`` then holds
    grading's too, which is booked apart (``_grader_usage``)."""
    usage = {k: row.get(k) for k in ("input_tokens", "output_tokens", "total_cost_usd",
                                     "cache_creation_input_tokens", "cache_read_input_tokens")}
    if "agent_cost_usd" in row:
        usage["total_cost_usd"] = row["agent_cost_usd"]
    return _clean({"task_id": row.get("task_id"), "final_status": row.get("status"),
                   "weighted_score": row.get("weighted_score"),
                   "duration_seconds": row.get("duration"), "model_used": row.get("model_used"),
                   "error_message": row.get("error_message"),
                   "error_category": row.get("error_category"),
                   "total_token_usage": _clean(usage) or None})


def _status(value: object) -> FinalStatus | None:
    if not isinstance(value, str):
        return None
    try:
        return FinalStatus(value.upper())
    except ValueError:
        return None


def _time(value: object, tz: tzinfo) -> str | None:
    """An ISO-8601 time as the ledger writes it (UTC, microseconds, ``Z``); naive times
    are in ``tz``."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=tz)
        return _utc(moment)
    except (ValueError, OverflowError):  # year 1 east of UTC, year 9999 west of it
        return None


def _file_time(path: Path) -> str:
    try:
        # A link's own time, never where it points; one no datetime holds: the epoch.
        return _utc(datetime.fromtimestamp(os.lstat(path).st_mtime, UTC))
    except (OSError, ValueError, OverflowError):
        return _utc(datetime.fromtimestamp(0, UTC))


def _utc(moment: datetime) -> str:
    """``moment`` as the ledger writes a time: UTC, microseconds, ``Z``.

    A year before 1000 is written with its zeros (``0999-...``), not refused: it is
    still the time the file says, and with four digits it is a time the ledger holds
    (import-events takes it) and sorts as text. strftime's ``%Y`` wrote ``999-...``.
    """
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _local_zone() -> tzinfo:
    zone = datetime.now().astimezone().tzinfo
    assert zone is not None
    return zone


def _int(value: object, default: int, name: str) -> int:
    """The count ``value`` says (a float cut to a whole number), or ``default`` when it
    says none: missing, not a number, negative, NaN.

    Raises:
        NotImportable: it is over ``MAX_TOKENS``.
    """
    number = _number(value, name, MAX_TOKENS)
    return int(number) if number is not None and number >= 0 else default


def _float(value: object, name: str, most: float) -> float | None:
    """The number ``value`` says, or None when it says none (missing, not a number, NaN).

    Raises:
        NotImportable: its size is over ``most``.
    """
    number = _number(value, name, most)
    return None if number is None else float(number)


def _number(value: object, name: str, most: float) -> int | float | None:
    """``value`` as it is, if it is a number and not NaN or infinite; else None.

    Raises:
        NotImportable: its size is over ``most`` (``name`` says which field it is).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # An int is compared as it is, exactly: made a float (as math.isfinite makes it), one
    # of 400 digits raises OverflowError.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if abs(value) > most:
        raise NotImportable(f"{name} {_said(value)} is out of range (at most {_said(most)})")
    return value


def _said(number: float) -> str:
    """A number for a message, short: a 400-digit one is not written out."""
    if isinstance(number, float):
        return f"{number:g}"
    if number.bit_length() > 14_000:  # str() refuses an int past 4,300 digits
        return "a number of thousands of digits"
    digits = str(abs(number))
    sign = "-" if number < 0 else ""
    return f"{sign}{digits}" if len(digits) <= 20 else (
        f"{sign}{digits[:6]}... ({len(digits)} digits)")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _clean(mapping: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if v is not None}


def _id(*parts: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "\0".join(parts)))


def _parse(raw: bytes) -> tuple[Any, str | None]:
    try:
        # NaN and Infinity (Python's json writes them) have no place in canonical JSON.
        return json.loads(raw.decode("utf-8"), parse_constant=lambda _: None), None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        return None, f"not JSON: {e}"

