"""Task and experiment files (docs/tasks.md): load, validate, resolve into runnable tasks.

Resolution order, later wins: built-in defaults → experiment ``defaults`` → task
file → variant → command-line overrides. A file that fails to load or validate is
not fatal: it becomes a ``Skipped`` entry (path and reason) that the executor
records as ``task.skipped``, and the rest of the batch runs.

Every resolved task has a task key ``<variant_id>/<task_id>/<NN>`` and a hash of
its resolved definition, which is what drift detection compares later. The hash
leaves out what only names, labels or judges a task's outcome (``ANNOTATIONS``:
description, tags, expect): editing those changes nothing a run evaluates.

A file that fails says why in words about the file: the key it got wrong (and the
known key it was probably meant to be), or that its name is not a task id.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import random
import re
import types
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from evalledger._values import load_yaml
from evalledger.errors import EvalledgerError
from evalledger.options import Isolation

from ._models import (
    DEFAULT_ISOLATION,
    DEFAULT_LIMITS,
    GATEWAY_PROVIDERS,
    ISOLATION_VARIABLE,
    TASK_ID_PATTERN,
    TASK_SUFFIXES,
    ExperimentFile,
    Overrides,
    ResolvedTask,
    TaskFile,
    TaskSettings,
    Variant,
    _Grader,
)


@dataclass(frozen=True)
class Skipped:
    """A task file that could not be used, and why (recorded as ``task.skipped``);
    ``deliberate``: it says ``skip: true``, not a mistake."""

    path: str
    reason: str
    deliberate: bool = False


@dataclass
class TaskSet:
    """What loading produced: tasks to run, files that were skipped, experiment settings."""

    tasks: list[ResolvedTask] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    experiment_id: str | None = None
    max_parallel: int | None = None
    # Paths that no longer exist, with ``load_tasks(missing_ok=True)`` (a resume).
    missing: list[str] = field(default_factory=list)
    # Tasks (task file and variant) the tag filters left out.
    filtered_out: int = 0
    # Task ids a sample left out.
    sampled_out: int = 0


class TaskLoadError(EvalledgerError):
    """The request itself is unusable (no such path, a broken experiment file)."""


def _read_yaml(path: Path, what: str = "task fields") -> dict[str, Any]:
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping of {what} at the top level")
    return data


_ID_RULE = "lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"


def _describe(error: ValidationError, model: type[BaseModel]) -> str:
    """A file's validation errors in words about the file, one clause each."""
    parts = []
    for item in error.errors():
        loc = item["loc"]
        where = ".".join(str(p) for p in loc)
        if item["type"] == "extra_forbidden":
            known = _keys_at(model, loc[:-1])
            parts.append(f"unknown key {where!r}{_did_you_mean(str(loc[-1]), known)}")
        elif item["type"] == "union_tag_invalid":
            tag = str(item.get("ctx", {}).get("tag", item["input"]))
            tags = _tags_at(model, loc)
            hint = _did_you_mean(tag, tags) or f" (one of {', '.join(sorted(tags))})"
            parts.append(f"{where}: unknown type {tag!r}{hint}")
        elif (item["type"] == "string_pattern_mismatch"
              and item.get("ctx", {}).get("pattern") == TASK_ID_PATTERN):
            parts.append(f"{where}: {item['input']!r} is not a valid id ({_ID_RULE})")
        else:
            parts.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "; ".join(parts)


def _did_you_mean(word: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _members(annotation: Any) -> list[Any]:
    """The types a field's annotation allows, ``Annotated`` and ``None`` left out."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for a in get_args(annotation) if a is not type(None) for m in _members(a)]
    return [annotation]


def _step(annotations: list[Any], part: str | int) -> list[Any]:
    """Where one step of an error's location leads, from the types allowed here."""
    found: list[Any] = []
    for annotation in annotations:
        origin, args = get_origin(annotation), get_args(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if part in annotation.model_fields:
                found += _members(annotation.model_fields[str(part)].annotation)
            elif "type" in annotation.model_fields and part in get_args(
                    annotation.model_fields["type"].annotation):
                found.append(annotation)  # a discriminated union's member, by its tag
        elif origin is list and isinstance(part, int):
            found += _members(args[0])
        elif origin is dict:
            found += _members(args[1])
    return found


def _walk(model: type[BaseModel], loc: Sequence[str | int]) -> list[Any]:
    here: list[Any] = [model]
    for part in loc:
        here = _step(here, part)
    return here


def _keys_at(model: type[BaseModel], loc: Sequence[str | int]) -> set[str]:
    """The keys known where an error's location points, in a file read as ``model``."""
    return {name for m in _walk(model, loc)
            if isinstance(m, type) and issubclass(m, BaseModel) for name in m.model_fields}


def _tags_at(model: type[BaseModel], loc: Sequence[str | int]) -> set[str]:
    """The ``type`` tags a discriminated union accepts where ``loc`` points."""
    return {str(tag) for m in _walk(model, loc)
            if isinstance(m, type) and issubclass(m, BaseModel) and "type" in m.model_fields
            for tag in get_args(m.model_fields["type"].annotation)}


def task_files(paths: Iterable[str | Path], missing: list[str] | None = None) -> list[Path]:
    """Every task file named or found under the given paths, sorted within folders.

    Raises:
        TaskLoadError: a path does not exist (unless ``missing`` collects such paths).
    """
    found: dict[str, Path] = {}  # by real path: a file named twice is loaded once
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for p in sorted(_candidates(path)):
                if p.is_file():
                    found.setdefault(os.path.realpath(p), p)
        elif path.is_file():
            found.setdefault(os.path.realpath(path), path)
        elif missing is not None:
            missing.append(str(path))
        else:
            raise TaskLoadError(f"no such task file or folder: {path}")
    return list(found.values())


def _candidates(folder: Path) -> Iterator[Path]:
    """Files below ``folder`` named like task files, hidden ones left out.

    Hidden folders (.git, .venv) hold no task files, only surprises, and can be
    big: they are not even walked.
    """
    for top, folders, files in os.walk(folder):
        folders[:] = [f for f in folders if not f.startswith(".")]
        for name in files:
            if not name.startswith(".") and name.endswith(TASK_SUFFIXES):
                yield Path(top, name)


def _merge(*layers: TaskSettings | None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        for name in layer.model_fields_set:
            value = getattr(layer, name)
            if name in ("env", "binds") and value is not None:
                merged[name] = {**merged.get(name, {}), **value}
            elif name == "limits" and value is not None:
                merged[name] = {**merged.get(name, {}),
                                **value.model_dump(exclude_unset=True)}
            elif name == "env_passthrough" and value is not None:
                merged[name] = list(dict.fromkeys([*merged.get(name, []), *value]))
            elif name in TaskSettings.model_fields:
                merged[name] = value
    return merged


def load_tasks(
    paths: Sequence[str | Path] = (),
    *,
    experiment: str | Path | None = None,
    include_tags: Iterable[str] = (),
    exclude_tags: Iterable[str] = (),
    overrides: Overrides | None = None,
    missing_ok: bool = False,
    sample: tuple[int, int] | None = None,
    shard: tuple[int, int] | None = None,
) -> TaskSet:
    """Load task files (and an experiment file), resolve them into runnable tasks.

    Args:
        paths: task files or folders of them (searched recursively for *.yaml/*.yml).
        experiment: an experiment file; its ``tasks`` are resolved relative to it and
            added to ``paths``.
        include_tags: keep only tasks with ANY of these tags (none given: keep all).
        exclude_tags: drop tasks with ANY of these tags.
        overrides: command-line options, applied last.
        missing_ok: a path that does not exist is listed in ``missing``, not an
            error (a resume, after a finished task's file was deleted).
        sample: ``(n, seed)``: keep ``n`` of the task ids found (every variant and
            replicate of each), chosen by ``seed``; the same files and seed always
            choose the same tasks.
        shard: ``(k, n)``: keep the task keys whose hash is ``k - 1`` modulo ``n``: n
            disjoint shares that together are every key, the same on every machine.

    Raises:
        TaskLoadError: a path does not exist, or the experiment file is unusable.
    """
    result = TaskSet()
    reading = _Reading(overrides=overrides or Overrides(), include=set(include_tags),
                       exclude=set(exclude_tags))
    search = [Path(p) for p in paths]
    if experiment is not None:
        search += reading.use_experiment(Path(experiment), result)
    for path in task_files(search, result.missing if missing_ok else None):
        reading.add(path, result)
    if sample is not None:
        _keep_sample(result, *sample)
    if shard is not None:
        _keep_shard(result, *shard)
    return result


def in_shard(task_key: str, k: int, n: int) -> bool:
    """Whether ``task_key`` is in shard ``k`` of ``n`` (from 1): by a hash of the key, so
    every machine splits a suite the same way, whatever order it found the files in."""
    digest = hashlib.sha256(task_key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % n == k - 1


@dataclass
class _Reading:
    """What ``load_tasks`` applies to every task file it reads."""

    overrides: Overrides
    include: set[str]
    exclude: set[str]
    exp: ExperimentFile | None = None
    exp_home: Path | None = None
    experiment_file: Path | None = None
    variants: list[Variant] = field(default_factory=lambda: [Variant(variant_id="default")])
    seen_ids: dict[str, str] = field(default_factory=dict)

    def use_experiment(self, path: Path, result: TaskSet) -> list[Path]:
        """Apply the experiment file at ``path`` (its defaults, variants, repeats) to every
        task file read from now on; return the task paths it lists, relative to it.

        Raises:
            TaskLoadError: the experiment file is unusable.
        """
        self.exp = _read_experiment(path)
        self.exp_home, self.experiment_file = path.parent, path.resolve()
        self.variants = self.exp.variants
        result.experiment_id, result.max_parallel = self.exp.experiment_id, self.exp.max_parallel
        return [path.parent / p for p in self.exp.tasks]

    def add(self, path: Path, result: TaskSet) -> None:
        """Resolve one task file into ``result``: its tasks, or why it was skipped."""
        if path.resolve() == self.experiment_file:
            return  # an experiment file beside its tasks is not one
        if not _is_text(str(path)):
            # The ledger records paths as text; this one cannot be, faithfully.
            result.skipped.append(Skipped(_printable(str(path)), "the path is not valid "
                                          "UTF-8: rename the file or its folder"))
            return
        try:
            per_variant = self._resolve_file(path)
        except (ValueError, ValidationError) as e:
            # All variants or none: a file that fails in one variant is skipped whole.
            result.skipped.append(Skipped(str(path), _reason(e, TaskFile)))
            return
        if (marked := self._marked_skip(per_variant)) is not None:
            result.skipped.append(Skipped(str(path), f"skip: true{marked}", deliberate=True))
        for resolved in filter(None, per_variant):  # the variants that do not skip it
            if self._wanted(resolved[0].tags):
                result.tasks.extend(resolved)
            else:
                result.filtered_out += 1

    def _resolve_file(self, path: Path) -> list[list[ResolvedTask] | None]:
        """The file's tasks in each variant (None: the variant skips it).

        Raises:
            ValueError, ValidationError: the file is unusable, or its task id is taken.
        """
        task_file, task_id = _read_task_file(path)
        if task_id in self.seen_ids:
            raise ValueError(f"duplicate task_id {task_id!r} (first in "
                             f"{self.seen_ids[task_id]})")
        self.seen_ids[task_id] = str(path)
        per_variant = [
            _resolve(path, task_id, task_file, self.exp, self.exp_home, variant,
                     self.overrides)
            for variant in self.variants
        ]
        _hash_all(per_variant)
        return per_variant

    def _marked_skip(self, per_variant: list[list[ResolvedTask] | None]) -> str | None:
        """What follows ``skip: true`` in the file's skip reason (which variants, when only
        some of an experiment's skip it); None when no variant skips it."""
        marked = [v.variant_id for v, r in zip(self.variants, per_variant, strict=True)
                  if r is None]
        if not marked:
            return None
        some = self.exp is not None and len(marked) < len(self.variants)
        return f" (variant {', '.join(marked)})" if some else ""

    def _wanted(self, tags: Iterable[str]) -> bool:
        """Whether the tag filters keep a task with these tags."""
        found = set(tags)
        return bool((not self.include or found & self.include) and not found & self.exclude)


def _reason(error: ValueError | ValidationError, model: type[BaseModel] = BaseModel) -> str:
    return _describe(error, model) if isinstance(error, ValidationError) else str(error)


def _read_experiment(path: Path) -> ExperimentFile:
    """Raises:
        TaskLoadError: the experiment file is unusable (the run cannot go on without it).
    """
    try:
        return ExperimentFile.model_validate(_read_yaml(path, "experiment fields"))
    except (ValueError, ValidationError) as e:
        raise TaskLoadError(f"experiment file {path}: {_reason(e, ExperimentFile)}") from e


def _read_task_file(path: Path) -> tuple[TaskFile, str]:
    """The file and its task id (the stem unless it names one).

    Raises:
        ValueError, ValidationError: the file is unusable (it is skipped, with the reason).
    """
    data = _read_yaml(path)
    if "experiment_id" in data and ("variants" in data or "tasks" in data):
        # Its keys would each be "unknown": say what the file is instead.
        raise ValueError("this is an experiment file, not a task file: run it with "
                         f"`evalledger run -e {path.name}`")
    task_file = TaskFile.model_validate(data)
    task_id = task_file.task_id or path.stem
    if task_file.task_id is None and not re.fullmatch(TASK_ID_PATTERN, task_id):
        raise ValueError(f"the file name is not a valid task id: {task_id!r} ({_ID_RULE}); "
                         "rename the file or set task_id")
    return task_file, task_id


def _hash_all(per_variant: list[list[ResolvedTask] | None]) -> None:
    """Hash every definition now, not mid-run: text the ledger cannot store (a lone
    surrogate such as "\ud800") fails here, as the file's skip."""
    for resolved in per_variant:
        for task in resolved or ():
            _ = task.definition_hash


def _keep_sample(result: TaskSet, n: int, seed: int) -> None:
    ids = sorted({t.task_id for t in result.tasks})
    chosen = set(random.Random(seed).sample(ids, min(n, len(ids))))
    result.sampled_out = len(ids) - len(chosen)
    result.tasks = [t for t in result.tasks if t.task_id in chosen]


def _keep_shard(result: TaskSet, k: int, n: int) -> None:
    result.tasks = [t for t in result.tasks if in_shard(t.task_key, k, n)]


def _absolute(path: Path) -> str:
    try:
        return str(path.resolve())  # as before: the definition hash depends on it
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError on 3.11)
        return os.path.abspath(path)


def _is_text(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes, kept by Python as surrogates
        return False
    return True


def _printable(path: str) -> str:
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _resolve(
    path: Path,
    task_id: str,
    task_file: TaskFile,
    exp: ExperimentFile | None,
    exp_home: Path | None,
    variant: Variant,
    overrides: Overrides,
) -> list[ResolvedTask] | None:
    """The task file's replicates in ``variant``, every layer applied; None when the
    layers say ``skip: true``.

    Raises:
        ValueError: no layer gives the task a command.
    """
    defaults = exp.defaults if exp else None
    settings = _merge(defaults, task_file, variant)
    # A relative workdir is relative to the file that set it.
    exp_dir = exp_home if exp_home is not None else path.parent
    layers = ((defaults, exp_dir), (task_file, path.parent), (variant, exp_dir))
    _anchor_workdir(settings, layers)
    _anchor_workdir(settings, layers, "dockerfile")
    _anchor_binds(settings, layers)
    _anchor_criterion_binds(settings, layers)
    if settings.pop("skip", None):
        return None
    settings.update(_overridden(overrides))
    _complete(settings)
    workdir = settings.pop("workdir", None)
    given = {k: v for k, v in settings.items() if v is not None}
    repeats = overrides.repeats or variant.repeats or (exp.repeats if exp else 1)
    source = str(path.resolve())
    return [
        ResolvedTask(
            task_key=f"{variant.variant_id}/{task_id}/{i:02d}",
            task_id=task_id,
            variant_id=variant.variant_id,
            replicate_index=i,
            source=source,
            workdir=workdir,
            **given,
        )
        for i in range(repeats)
    ]


def _complete(settings: dict[str, Any]) -> None:
    """Every layer merged: the defaults that depend on the machine or on other keys
    put in, ``limits`` and ``gateway`` in their resolved shape.

    Raises:
        ValueError: a key the task needs is missing, or two keys disagree.
    """
    if settings.get("isolation") is None:
        settings["isolation"] = default_isolation()
    if settings.get("command") is None:
        raise ValueError("command: a task needs a command")
    if settings.get("isolation") == "docker" and not (settings.get("image")
                                                      or settings.get("dockerfile")):
        raise ValueError("isolation docker: the task needs an image or a dockerfile")
    _resolve_limits(settings)
    gateway = settings.get("gateway")
    if isinstance(gateway, bool):
        settings["gateway"] = list(GATEWAY_PROVIDERS) if gateway else []
    elif gateway is not None:
        settings["gateway"] = [p for p in GATEWAY_PROVIDERS if p in gateway]
    if settings.get("network") == "gateway" and not settings.get("gateway"):
        raise ValueError("network: gateway: the task calls no API through the gateway "
                         "(give it gateway: true, or the providers it calls)")
    if settings.get("allow_domains") and settings.get("network") != "gateway":
        raise ValueError("allow_domains: only with network: gateway (the proxy to them is "
                         "the gateway's)")


def _resolve_limits(settings: dict[str, Any]) -> None:
    """``limits`` as a ``ResolvedLimits`` (each key not given at its default), its
    ``output`` as ``max_output``."""
    limits = settings.pop("limits", None)
    if limits is None:
        return
    output = limits.pop("output", None)
    if output is not None:
        if settings.get("max_output") not in (None, output):
            raise ValueError("limits.output and max_output are the same limit: set one")
        settings["max_output"] = output
    if limits:
        settings["limits"] = {**DEFAULT_LIMITS, **limits}


def _anchor_workdir(settings: dict[str, Any],
                    layers: Iterable[tuple[TaskSettings | None, Path]],
                    name: str = "workdir") -> None:
    """Make ``settings``' workdir (or another path key) absolute, from the folder of the
    last layer that set it (``layers``: each with that folder, in order)."""
    for layer, home in layers:
        if layer is not None and name in layer.model_fields_set:
            # A symlink loop is the sandbox's BUILD_FAILED, with the copy's error, not a crash.
            value = getattr(layer, name)
            settings[name] = value and _absolute(home / value)


def _anchor_binds(settings: dict[str, Any],
                  layers: Iterable[tuple[TaskSettings | None, Path]]) -> None:
    """Make each of ``settings``' binds absolute, from the folder of the layer that set it."""
    if not settings.get("binds"):
        return
    binds: dict[str, str] = {}
    for layer, home in layers:
        if layer is not None and layer.binds:
            binds.update({name: _absolute(home / path) for name, path in layer.binds.items()})
    settings["binds"] = binds


def _anchor_criterion_binds(settings: dict[str, Any],
                            layers: Iterable[tuple[TaskSettings | None, Path]]) -> None:
    """Make each ``run_command``'s and ``agent_judge``'s binds absolute, from the folder
    of the layer that set the criteria."""
    home = None
    for layer, folder in layers:
        if layer is not None and "success_criteria" in layer.model_fields_set:
            home = folder
    criteria = settings.get("success_criteria") or []
    if home is None or not any(isinstance(c, _Grader) and c.binds for c in criteria):
        return
    settings["success_criteria"] = [
        c.model_copy(update={"binds": [_existing(home / b) for b in c.binds]})
        if isinstance(c, _Grader) and c.binds else c for c in criteria]


def _existing(path: Path) -> str:
    """``path`` absolute, when there is something there to bind.

    Raises:
        ValueError: there is not (a typo must not fail the agent's attempts)."""
    if not os.path.lexists(path):
        raise ValueError(f"success_criteria: binds {path} does not exist")
    return _absolute(path)


def default_isolation() -> str:
    """The isolation of a task no layer names: ``EVALLEDGER_ISOLATION``, else ``auto``.

    Raises:
        ValueError: the variable names no isolation.
    """
    value = os.environ.get(ISOLATION_VARIABLE) or DEFAULT_ISOLATION
    if value not in get_args(Isolation):
        raise ValueError(f"{ISOLATION_VARIABLE}={value!r} is not an isolation (one of "
                         f"{', '.join(get_args(Isolation))})")
    return value


def _overridden(overrides: Overrides) -> dict[str, Any]:
    """The task fields the command line sets (``--timeout``, ``--model``, ``--isolation``)."""
    return {name: value for name in ("timeout", "stall_timeout", "retries", "model",
                                     "isolation")
            if (value := getattr(overrides, name)) is not None}
