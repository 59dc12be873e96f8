"""Run folders of the old harness, read as events (``evalledger import``).

The layout and every field are in docs/import.md (from the harness's own docs and
code, across its versions; any field may be missing in an old file). In short: a run
folder holds ``run.json``; each attempt is ``<variant>/<task_id>/<NN>/task.json``
(task ids may contain ``/``); a folder below it with its own ``run.json`` is a run of
its own.

A run folder becomes what a run records: ``run.started`` (marked ``imported`` with
the folder), its skipped files, per attempt ``task.started`` (marked with the file
and its content hash), the file itself as one ``task.event`` (nothing it says is
lost), ``task.usage`` per model and ``task.completed``, then ``run.finished``.

Event ids are UUIDv5s of where the event comes from (the run id, the file's path in
the run folder, its content hash), not of the ledger it goes into: importing twice
adds nothing, into any ledger, and a file that changed since it was imported is told
apart from one that did not. Reading is pure: ``read_run`` returns events; the
caller appends them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

from evalledger.ledger import (
    AnyEvent,
    CriterionResult,
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

FORMAT = "coder_eval"
# Fixed: event ids must come out the same on every machine, in every ledger.
NAMESPACE = uuid.UUID("0d6b1f5e-2c44-5a3e-9f61-7a1d3c9e8b20")
# The old harness's default pass threshold of a criterion score.
PASS_THRESHOLD = 0.9


@dataclass(frozen=True)
class Problem:
    """A file that could not be imported as a result, and why."""

    path: str
    reason: str


@dataclass
class LegacyRun:
    """One run folder read: the events to append, and what was left out."""

    run_id: str
    folder: Path
    events: list[AnyEvent] = field(default_factory=list)
    attempts: int = 0
    """Attempts imported with a final status."""
    unfinished: list[Problem] = field(default_factory=list)
    """Files that do not parse or have no final status: their keys count as unfinished."""
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


def find_run_folders(paths: Iterable[Path]) -> list[Path]:
    """Every folder holding a ``run.json`` under ``paths`` (themselves included), nested
    ones too; symbolic links are not followed (``runs/latest`` points into a run)."""
    found: set[Path] = set()
    for path in paths:
        for folder, _, files in os.walk(path):  # never into a link to a folder
            if "run.json" in files:
                found.add(Path(folder))
    return sorted(found)


def _task_files(folder: Path) -> Iterator[Path]:
    """The run's ``task.json`` files: not those below a nested run's ``run.json``."""
    top = str(folder)
    for parent, names, files in os.walk(top):  # never into a link to a folder
        if parent != top and "run.json" in files:
            names[:] = []  # a nested run: its files are its own
            continue
        names.sort()
        if "task.json" in files and parent != top:
            yield Path(parent, "task.json")


def key_of(relative: Path) -> tuple[str, str, int]:
    """``(variant_id, task_id, replicate)`` from where a ``task.json`` sits in its run:
    ``<variant>/<task_id...>/<NN>/``; a last folder that is not all digits is part of the
    task id, replicate 0."""
    parts = relative.parent.parts
    variant = parts[0] if len(parts) > 1 else "default"
    rest = parts[1:] if len(parts) > 1 else parts
    if rest and rest[-1].isdigit() and len(rest) > 1:
        return variant, "/".join(rest[:-1]), int(rest[-1])
    return variant, "/".join(rest) or "task", 0


def run_id_of(folder: Path) -> str:
    """The run id of a run folder: its run.json's ``run_id``, else the folder's name."""
    summary, _ = _load_json(folder / "run.json")
    run_id = summary.get("run_id") if isinstance(summary, dict) else None
    return run_id if isinstance(run_id, str) and run_id else folder.name


def read_run(folder: Path, *, tz: tzinfo | None = None,
             known: Mapping[str, str] | None = None) -> LegacyRun:
    """The events of the run folder ``folder``. ``tz``: what naive timestamps are in (the
    old harness wrote local time without an offset; default: this machine's zone).
    ``known``: file -> content hash of what an earlier import appended; those files add
    nothing now (and say so if they changed)."""
    known = known or {}
    summary, summary_error = _load_json(folder / "run.json")
    if not isinstance(summary, dict):
        summary = {}
    run = LegacyRun(run_id=run_id_of(folder), folder=folder)
    if summary_error:
        run.unfinished.append(Problem(str(folder / "run.json"), summary_error))
    keys: set[str] = set()
    attempts = _file_attempts(run, folder, known, keys)
    rows = _rows(summary.get("task_results"))
    attempts += _row_attempts(run, rows, known, keys)
    tags = {k: r.get("tags") for k, r in rows.items() if isinstance(r.get("tags"), list)}

    tz = tz or _local_zone()
    started = _time(summary.get("start_time"), tz)
    attempts.sort(key=lambda a: (_time(a.data.get("started_at"), tz) or started or "", a.key))
    first = started or next((t for a in attempts if (t := _time(a.data.get("started_at"), tz))),
                            None) or _file_time(folder / "run.json")
    run.events.append(RunStarted(
        event_id=_id(run.run_id, "run.json", "run.started"), run_id=run.run_id, ts=first,
        planned=sorted(keys), max_parallel=_int(summary.get("max_parallel"), 1),
        imported=_clean({"format": FORMAT, "source": str(folder.resolve()),
                         "framework_version": summary.get("framework_version")}),
    ))
    run.events += _skipped(run.run_id, summary.get("skipped_tasks"), first)
    last = first
    for attempt in attempts:
        made = _attempt_events(run.run_id, attempt, tags.get(attempt.key), tz, first)
        run.events += made
        last = max(last, made[-1].ts)
        run.attempts += 1
    ended = _time(summary.get("end_time"), tz)
    run.events.append(RunFinished(event_id=_id(run.run_id, "run.json", "run.finished"),
                                  run_id=run.run_id, ts=max(ended or last, last),
                                  status=RunStatus.COMPLETED))
    return run


def _file_attempts(run: LegacyRun, folder: Path, known: Mapping[str, str],
                   keys: set[str]) -> list[_Attempt]:
    """The run's task.json files that are results and new; the rest said in ``run``.
    Every key seen goes into ``keys`` (a file that is not a result still counts as
    planned and unfinished)."""
    attempts = []
    for path in _task_files(folder):
        relative = path.relative_to(folder)
        variant, task_id, replicate = key_of(relative)
        key = f"{variant}/{task_id}/{replicate:02d}"
        keys.add(key)
        raw = path.read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        source = relative.as_posix()
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
        attempts.append(_Attempt(key, variant, task_id, replicate, source, digest, data))
    return attempts


def _not_a_result(data: object) -> str | None:
    """Why a parsed task.json is not a result (the old resume would run it again)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    status = data.get("final_status")
    if _status(status) is None:
        return "no final_status" if status is None else f"unknown final_status {status!r}"
    return None


def _row_attempts(run: LegacyRun, rows: dict[str, dict[str, Any]], known: Mapping[str, str],
                  keys: set[str]) -> list[_Attempt]:
    """Rows of batch-level failures have no task.json: the row is all there is."""
    attempts = []
    for key, row in sorted(rows.items()):
        if key in keys or not _status(row.get("status")):
            continue
        keys.add(key)
        source = f"run.json#{key}"
        if source in known:
            run.unchanged += 1
            continue
        variant, _, rest = key.partition("/")
        task_id, _, nn = rest.rpartition("/")
        attempts.append(_Attempt(key, variant, task_id, int(nn), source, "", _row_as_file(row)))
    return attempts


def _skipped(run_id: str, entries: object, ts: str) -> list[AnyEvent]:
    return [
        TaskSkipped(event_id=_id(run_id, "run.json", f"task.skipped.{i}"), run_id=run_id,
                    ts=ts, path=str(skipped.get("path") or "?"),
                    reason=str(skipped.get("reason") or "skipped by the old harness"))
        for i, skipped in enumerate(entries if isinstance(entries, list) else [])
        if isinstance(skipped, dict)
    ]


def _attempt_events(run_id: str, attempt: _Attempt, tags: list[Any] | None, tz: tzinfo,
                    fallback: str) -> list[AnyEvent]:
    data = attempt.data
    ident = (run_id, attempt.source, attempt.sha256)
    started = _time(data.get("started_at"), tz) or fallback
    duration = _float(data.get("duration_seconds", data.get("duration")))
    completed = _time(data.get("completed_at"), tz) or started
    status = _status(data.get("final_status", data.get("status")))
    assert status is not None
    model = data.get("model_used") if isinstance(data.get("model_used"), str) else None
    definition = _clean({"agent_type": data.get("agent_type"), "model": model,
                         "task_description": data.get("task_description")})
    usages = _usage(data, model)
    total = TokenCounts()
    for counts, _, _ in usages:
        total = total + counts
    costs = [cost for _, cost, _ in usages]
    details: dict[str, Any] = (data["error_details"]
                               if isinstance(data.get("error_details"), dict) else {})
    environment = dict(data["environment_info"]) if isinstance(
        data.get("environment_info"), dict) else {}
    if model:
        environment.setdefault("model", model)
    score = _float(data.get("weighted_score"))
    events: list[AnyEvent] = [
        TaskStarted(
            event_id=_id(*ident, "task.started"), run_id=run_id, task_key=attempt.key,
            ts=started, task_id=attempt.task_id, variant_id=attempt.variant_id,
            replicate_index=attempt.replicate, attempt=1,
            tags=[str(t) for t in tags or []], definition=definition,
            definition_hash=hashlib.sha256(
                json.dumps(definition, sort_keys=True).encode()).hexdigest(),
            imported=_clean({"source": attempt.source, "sha256": attempt.sha256 or None}),
        ),
        # The file itself, whole: whatever this reader does not map is still here.
        TaskEmitted(event_id=_id(*ident, "task.event"), run_id=run_id, task_key=attempt.key,
                    ts=started, n=1, data={"imported_from": attempt.source, "record": data}),
    ]
    for i, (counts, cost, used) in enumerate(usages):
        events.append(TaskUsage(
            event_id=_id(*ident, f"task.usage.{i}"), run_id=run_id, task_key=attempt.key,
            ts=completed, model=used, cost_usd=cost, **dict(counts)))
    events.append(TaskCompleted(
        event_id=_id(*ident, "task.completed"), run_id=run_id, task_key=attempt.key,
        ts=max(completed, started), attempt=1, final_status=status, category=status.category,
        duration_seconds=duration or 0.0, weighted_score=score or 0.0,
        criteria=_criteria(data.get("success_criteria_results")),
        error_message=_text(data.get("error_message")),
        environment_info=environment, tokens=total,
        # No usage in the file at all: the cost is unknown, not $0.
        cost_usd=None if None in costs or not costs else round(sum(c for c in costs if c), 10),
        cost_complete=None not in costs,
        imported=_clean({"error_category": details.get("error_category",
                                                       data.get("error_category"))}) or None,
    ))
    return events


def _usage(data: dict[str, Any], model: str | None,
           ) -> list[tuple[TokenCounts, float | None, str | None]]:
    """Per model: the tokens and cost of its turns (a turn with tokens and no price
    makes the model's cost unknown, never $0); else the file's totals."""
    turns = data.get("iterations", data.get("turns"))
    by_model: dict[str | None, tuple[TokenCounts, float | None]] = {}
    if isinstance(turns, list):
        for turn in turns:
            if not isinstance(turn, dict) or not isinstance(turn.get("token_usage"), dict):
                continue
            used = turn.get("model_used") if isinstance(turn.get("model_used"), str) else model
            counts, cost = _tokens(turn["token_usage"])
            before, spent = by_model.get(used, (TokenCounts(), 0.0))
            unpriced = cost is None and counts.total > 0
            by_model[used] = (before + counts,
                              None if spent is None or unpriced else spent + (cost or 0.0))
    if by_model:
        return [(c, cost, m) for m, (c, cost) in by_model.items()]
    if isinstance(data.get("total_token_usage"), dict):
        counts, cost = _tokens(data["total_token_usage"])
        if counts.total or cost is not None:  # no tokens and no price: nothing was used
            return [(counts, cost, model)]
    return []


def _tokens(usage: dict[str, Any]) -> tuple[TokenCounts, float | None]:
    """A TokenUsage of either shape. Older files have only ``input_tokens``, the
    uncached slice; newer ones also derive ``input_tokens`` as all three input buckets
    summed, so ``uncached_input_tokens`` wins where it is present."""
    uncached = usage.get("uncached_input_tokens", usage.get("input_tokens"))
    counts = TokenCounts(
        input_tokens=_int(uncached, 0), output_tokens=_int(usage.get("output_tokens"), 0),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens"), 0),
        cache_read_tokens=_int(usage.get("cache_read_input_tokens"), 0),
    )
    return counts, _float(usage.get("total_cost_usd"))


def _criteria(results: object) -> list[CriterionResult]:
    out = []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict):
            continue
        score = _float(result.get("score"))
        threshold = _float(result.get("pass_threshold"))
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
            replicate = _int(row.get("replicate_index"), 0)  # null in old rows
            out[f"{variant or 'default'}/{row['task_id']}/{replicate:02d}"] = row
    return out


def _row_as_file(row: dict[str, Any]) -> dict[str, Any]:
    """A run.json row in the shape of a task.json (its field names differ)."""
    usage = {k: row.get(k) for k in ("input_tokens", "output_tokens", "total_cost_usd",
                                     "cache_creation_input_tokens", "cache_read_input_tokens")}
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
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _file_time(path: Path) -> str:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        stamp = 0.0
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _local_zone() -> tzinfo:
    zone = datetime.now().astimezone().tzinfo
    assert zone is not None
    return zone


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value) if math.isfinite(value) and value >= 0 else default


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


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


def _load_json(path: Path) -> tuple[Any, str | None]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        return None, f"cannot read: {e.strerror or e}"
    return _parse(raw)
