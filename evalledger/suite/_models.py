"""The task and experiment files' models (docs/tasks.md) and the resolved task a batch
runs: every field, its type, its default and what it may hold, declared once.

A field's docstring is its description in ``evalledger schema`` and the README
(``_reference`` reads it from this source). What a resolved definition's hash covers
(``evaluated``: everything but ``ANNOTATIONS``) is said here too; reading the files,
resolving them and the words a file that fails is told are ``_tasks``'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from evalledger._values import Count, Number
from evalledger.options import MAX_REPEATS, MAX_RETRIES, Isolation
from evalledger.statuses import FinalStatus

TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
TASK_SUFFIXES = (".yaml", ".yml")

DEFAULT_TIMEOUT = 600.0
# A task's max_output by default: 50 MB of one attempt's lines recorded (the output of
# a long agent session is a few MB; a runaway loop printing is what this stops).
DEFAULT_MAX_OUTPUT = 50_000_000


class _Strict(BaseModel):
    # No inf or NaN: JSON has no spelling for them, so the ledger would record null.
    # A field's docstring is its description in `evalledger schema` and the README,
    # read from the source there (``_reference``): pydantic's use_attribute_docstrings
    # read it at import, 90 ms of every `run` and `resume`.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _not_empty(command: str | list[str]) -> str | list[str]:
    if not (command.strip() if isinstance(command, str) else command and command[0].strip()):
        raise ValueError("the command is empty")
    return command



Command = Annotated[str | list[str], AfterValidator(_not_empty)]


# -- success criteria ----------------------------------------------------------------------


class _Criterion(_Strict):
    weight: Number = Field(default=1.0, gt=0)
    """Its share of the weighted score."""


class ExitCode(_Criterion):
    """The command's exit code."""

    type: Literal["exit_code"]
    equals: Count = 0
    """The exit code that passes."""


class FileExists(_Criterion):
    """A path exists in the sandbox."""

    type: Literal["file_exists"]
    path: str = Field(min_length=1)
    """Relative to the sandbox; one resolving outside it fails the criterion."""


class FileContains(_Criterion):
    """A file in the sandbox holds every text of ``includes`` and none of ``excludes``."""

    type: Literal["file_contains"]
    path: str = Field(min_length=1)
    """Relative to the sandbox; one resolving outside it fails the criterion."""
    includes: list[str] = []
    """Texts that must all be in it."""
    excludes: list[str] = []
    """Texts that must not be in it."""


class OutputContains(_Criterion):
    """What the command printed holds every text of ``includes`` and none of ``excludes``."""

    type: Literal["output_contains"]
    includes: list[str] = []
    """Texts that must all be in the output."""
    excludes: list[str] = []
    """Texts that must not be in it."""
    stream: Literal["stdout", "stderr", "both"] = "both"
    """Which output is read (its last 16 MiB)."""


class _Grader(_Criterion):
    """A criterion that runs a command on what the agent left."""

    binds: list[str] = []
    """Files or folders of the task's (relative to the file naming them) the command may
    read under isolation, at their own paths; it sees nothing else of the task folder."""

    @model_serializer(mode="wrap")
    def _recorded(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without binds, recorded (and hashed) as before binds existed.
        fields: dict[str, Any] = dump(self)
        if not fields.get("binds"):
            fields.pop("binds", None)
        return fields


class RunCommand(_Grader):
    """A command run in the sandbox afterwards (a test suite, say) exits as expected."""

    type: Literal["run_command"]
    command: Command
    """A string runs with /bin/sh -c, a list is the argv."""
    timeout: Number = Field(default=60.0, gt=0)
    """Seconds; the task's own timeout also cuts it off."""
    expect_exit_code: Count = 0
    """The exit code that passes."""


class LlmJudge(_Criterion):
    """A model judges the work against a rubric (docs/tasks.md, "Judges"): each of
    ``samples`` calls answers a score from 0 to 1; the criterion passes when the
    majority of samples (or their mean) reaches ``pass_threshold``."""

    type: Literal["llm_judge"]
    model: str = Field(min_length=1)
    """The judge's model, as its API names it (priced from the rate card)."""
    rubric: str = Field(min_length=1)
    """What the work is judged against."""
    api: Literal["anthropic", "openai"] | None = None
    """Anthropic's Messages API or an OpenAI-compatible chat endpoint; default:
    ``anthropic`` for a ``claude`` model, else ``openai``. Base URL and key come from
    the runner's environment (``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``,
    ``OPENAI_BASE_URL``/``OPENAI_API_KEY``), never from the task."""
    files: list[str] = []
    """Files of the workspace shown to the judge (each its first 64 KiB)."""
    transcript: bool = False
    """Show the judge what the command printed (its last 16 KiB)."""
    diff: bool = False
    """Show the judge the workspace's changes against the task's ``workdir``."""
    samples: int = Field(default=1, ge=1, le=20)
    """Calls made; with more than one, the spread of their scores is recorded."""
    aggregate: Literal["majority", "mean"] = "majority"
    """How the samples' scores become one verdict."""
    temperature: Number = Field(default=0.0, ge=0, le=2)
    """The sampling temperature asked for."""
    pass_threshold: Number = Field(default=0.5, ge=0, le=1)
    """The score that passes."""
    timeout: Number = Field(default=60.0, gt=0)
    """Seconds per call (a 429's wait and retries come on top; the task's own timeout
    cuts everything off)."""
    max_tokens: int = Field(default=1024, ge=16, le=65536)
    """The longest answer asked for."""


# How a command's stdout JSON lines are read (docs/tasks.md, "Usage and cost").
StreamFormat = Literal["native", "claude-code", "codex", "gemini", "opencode", "auto"]


class AgentJudge(_Grader):
    """A command (often an agent) judges the work: it runs in a copy of the workspace with
    the rubric in ``EVALLEDGER_RUBRIC``, and its last JSON line on stdout is the verdict
    (``{"score": 0.8, "reason": "..."}`` or ``{"pass": true}``)."""

    type: Literal["agent_judge"]
    command: Command
    """A string runs with /bin/sh -c, a list is the argv."""
    rubric: str = Field(min_length=1)
    """What the work is judged against."""
    pass_threshold: Number = Field(default=0.5, ge=0, le=1)
    """The score that passes."""
    timeout: Number = Field(default=300.0, gt=0)
    """Seconds; the task's own timeout also cuts it off."""
    stream_format: StreamFormat = "auto"
    """How the judge's stdout is read for what it spent, as a task's (an agent CLI's
    stream: its usage is grading's spend, recorded and priced as an agent's)."""
    model: str | None = None
    """The model the judge uses: it prices usage lines that carry no cost."""


Criterion = Annotated[
    ExitCode | FileExists | FileContains | OutputContains | RunCommand | LlmJudge | AgentJudge,
    Field(discriminator="type"),
]


class Budget(_Strict):
    max_tokens: Count | None = Field(default=None, gt=0)
    """Past this many tokens the task is stopped: TOKEN_BUDGET_EXCEEDED."""
    max_cost_usd: Number | None = Field(default=None, gt=0)
    """Past this many USD the task is stopped: COST_BUDGET_EXCEEDED."""


# The limits a task's attempt runs under by default (docs/isolation.md, "Limits"): room
# for a coding agent and its tools, not for a runaway loop to take the host.
DEFAULT_LIMITS = {"memory": 4 << 30, "pids": 1024, "cpus": None, "disk": 10 << 30,
                  "tmp": 1 << 30}


class Limits(_Strict):
    """What one attempt's processes may take of the host; a hit ends the attempt as
    LIMIT_EXCEEDED, the agent's failure (docs/isolation.md, "Limits")."""

    memory: ByteSize | None = Field(default=None, gt=0)
    """Memory of all its processes together (bytes, or "512MiB"; default 4GiB)."""
    pids: Count | None = Field(default=None, gt=0)
    """Processes and threads at once (default 1024)."""
    cpus: Number | None = Field(default=None, gt=0)
    """CPUs' worth of time (1.5: one and a half; default: no bound)."""
    disk: ByteSize | None = Field(default=None, gt=0)
    """What the workspace may grow to, and any one file (default 10GiB)."""
    tmp: ByteSize | None = Field(default=None, gt=0)
    """The size of its private /tmp, under bwrap and docker (default 1GiB)."""
    output: ByteSize | None = Field(default=None, gt=0)
    """The same as max_output: the most of its output the ledger records."""


class ResolvedLimits(_Strict):
    """A task's limits with the defaults applied (``output`` is its ``max_output``)."""

    memory: int | None = DEFAULT_LIMITS["memory"]
    pids: int | None = DEFAULT_LIMITS["pids"]
    cpus: float | None = DEFAULT_LIMITS["cpus"]
    disk: int | None = DEFAULT_LIMITS["disk"]
    tmp: int | None = DEFAULT_LIMITS["tmp"]


class RayResources(_Strict):
    """What one attempt asks of a Ray cluster (``--executor ray``; ignored locally)."""

    num_cpus: Number = Field(default=1, ge=0)
    """CPUs the attempt holds on its node (fractions allowed; 0: none)."""
    num_gpus: Number = Field(default=0, ge=0)
    """GPUs the attempt holds on its node."""
    memory: Count | None = Field(default=None, gt=0)
    """Bytes of memory reserved for the attempt (a scheduling promise, not a limit)."""
    resources: dict[str, Number] | None = None
    """Custom Ray resources by name, such as ``{docker: 1}``."""

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for name, amount in (value or {}).items():
            if name in _RAY_BUILTIN_RESOURCES:
                raise ValueError(f"resources: {name} is set with its own key "
                                 f"({_RAY_BUILTIN_RESOURCES[name]})")
            if amount < 0:
                raise ValueError(f"resources: {name} must be 0 or more")
            # Ray refuses finer fractions (it counts in ten-thousandths).
            if amount != round(amount, 4):
                raise ValueError(f"resources: {name} is finer than 0.0001")
        return value

    @field_validator("num_cpus", "num_gpus")
    @classmethod
    def _whole_ten_thousandths(cls, value: float) -> float:
        if value != round(value, 4):
            raise ValueError("finer than 0.0001 (Ray counts in ten-thousandths)")
        return value


_RAY_BUILTIN_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory",
                          "object_store_memory": "not per task"}


# What a task file that names no isolation gets: the strongest backend that runs here.
# ``EVALLEDGER_ISOLATION`` sets another default for a machine (a user's own trusted
# agents, a test suite whose commands live outside their workspaces).
DEFAULT_ISOLATION = "auto"
ISOLATION_VARIABLE = "EVALLEDGER_ISOLATION"
Network = Literal["none", "host", "gateway"]
# The model APIs a task's agent may call through the gateway (docs/gateway.md).
GatewayProvider = Literal["anthropic", "openai", "gemini"]
GATEWAY_PROVIDERS: tuple[GatewayProvider, ...] = ("anthropic", "openai", "gemini")
# An ``allow_domains`` entry: a host name or address, or ``*.`` and a domain, and a port.
_LABEL = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
_ALLOWED_DOMAIN = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*(:[0-9]{{1,5}})?")
# What a stall does (docs/tasks.md, "Stalls and retries").
StallAction = Literal["kill", "warn"]

# How a task may be expected to end instead of succeeding: a category (``failed``,
# ``error``) or one final status of those categories, lowercase.
Expectation = Literal["failed", "failure", "timeout", "token_budget_exceeded",
                      "cost_budget_exceeded", "limit_exceeded", "error", "build_failed"]


def meets(expect: str | None, status: FinalStatus) -> bool:
    """Whether an attempt that ended ``status`` ended as its ``expect`` says: with none,
    success (or running ungraded) is what is expected."""
    if expect is None:
        return status.category.value in ("succeeded", "ungraded")
    return expect in (status.value.lower(), status.category.value)


# Fields that name, label or judge a task without changing what runs or how it is
# graded: left out of the definition hash, so editing them is no drift (docs/results.md).
ANNOTATIONS = frozenset({"description", "tags", "expect"})


# -- files ---------------------------------------------------------------------------------


class TaskSettings(_Strict):
    """Fields that experiment defaults, task files and variants may all set."""

    description: str | None = None
    """What the task is about, for people."""
    tags: list[str] | None = None
    """Labels: --tag / --exclude-tag filter on them; reports group by them."""
    prompt: str | None = None
    """Given to the command on stdin and as $EVALLEDGER_PROMPT."""
    command: Command | None = None
    """Required. A string runs with /bin/sh -c, a list is the argv."""
    workdir: str | None = Field(default=None, min_length=1)
    """A folder, relative to the file naming it, copied into a fresh sandbox."""
    env: dict[str, str] | None = None
    """Environment variables for the command (text or numbers); merged across layers."""
    timeout: Number | None = Field(default=None, gt=0)
    """Seconds, wall clock, for the whole attempt, criteria included (default 600)."""
    stall_timeout: Number | None = Field(default=None, gt=0)
    """Seconds without any output line, JSON event or usage after which the attempt is
    stalled (default: never): a task.stalled is recorded, then stall_action."""
    stall_action: StallAction | None = None
    """What a stall does: kill (default: the attempt ends STALLED, an infra failure; the
    agent's own behind the gateway when no model call of it waited on its API) or warn
    (only the task.stalled event)."""
    max_output: ByteSize | None = Field(default=None, gt=0)
    """The most of one attempt's output the ledger records (bytes: 2000000, or "50MB",
    "1GiB"; default 50MB): past it the attempt runs on, its usage and budget still
    followed; what it prints is counted, its tail kept, and a task.output_truncated
    says so."""
    limits: Limits | None = None
    """What one attempt may take of the host: memory, pids, cpus, disk, tmp, output
    (each merged across layers)."""
    retries: Count | None = Field(default=None, ge=0, le=MAX_RETRIES)
    """Attempts again after an infrastructure failure (a stall, a sandbox that could not
    be built, a command that could not start, a judge's API error), in the same run."""
    model: str | None = None
    """The model the command uses: it prices usage lines that carry no cost."""
    stream_format: StreamFormat | None = None
    """How stdout's JSON lines are read: native (default), claude-code (stream-json),
    codex (exec --json), gemini (stream-json), opencode (run --format json) or auto
    (told by the first line that names one)."""
    agent_version_command: str | None = None
    """A shell command printing the agent's version (``codex --version``): run once per
    batch, in the task's folder, and its first line recorded as ``agent_version`` in
    each attempt's ``environment_info`` (where version drift is found)."""
    budget: Budget | None = None
    """Limits enforced live: max_tokens, max_cost_usd."""
    ray: RayResources | None = None
    """Ray resources per attempt: num_cpus, num_gpus, memory, resources."""
    success_criteria: list[Criterion] | None = None
    """Checks of what the command left; all are evaluated. None: it ends NOT_GRADED."""
    skip: bool | None = None
    """true: the task does not run and is listed as skipped."""
    expect: Expectation | None = None
    """How the task is meant to end instead of succeeding: a category or a status. It
    counts as it ends; ending so does not make the exit code 1, succeeding does."""
    isolation: Isolation | None = None
    """What the command can see: auto (default: the strongest backend that runs here,
    bwrap; none only with --allow-unconfined), none (the runner's whole machine, no
    boundary), bwrap (its workspace at /work, the system read-only, nothing else) or
    docker (its workspace at /work in a container of the task's image)."""
    image: str | None = Field(default=None, min_length=1)
    """With isolation docker: the image the command runs in (present here: no registry
    is asked)."""
    dockerfile: str | None = Field(default=None, min_length=1)
    """With isolation docker, instead of image: a Dockerfile (relative to the file naming
    it), built with its folder as the context, once per content."""
    network: Network | None = None
    """Under isolation: none (default: a loopback of its own), host (the host's) or
    gateway (a loopback of its own whose only way out is the model gateway)."""
    env_passthrough: list[str] | None = None
    """Under isolation: names of the runner's environment variables the command gets
    (an API key); it gets no other. Merged across layers."""
    binds: dict[str, str] | None = None
    """Paths the command may read, by the name of a variable that holds the path (relative
    to the file naming it); under isolation bound read-only at the same path. Merged
    across layers."""
    gateway: bool | list[GatewayProvider] | None = None
    """The agent calls its model API through evalledger's gateway: true (every provider:
    anthropic, openai, gemini) or the providers it may call. Its base URLs and keys are
    set to the gateway's and a per-attempt token; its usage is what the APIs answered."""
    allow_domains: list[str] | None = None
    """With network gateway: other hosts the command may reach through evalledger's
    proxy (HTTPS_PROXY; CONNECT only), each connection recorded: pypi.org (port 443),
    *.pythonhosted.org (any host under it), host:PORT (that port instead)."""

    @field_validator("allow_domains")
    @classmethod
    def _domain_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        names = [name.strip().lower().rstrip(".") for name in value]
        for name, given in zip(names, value, strict=True):
            if not _ALLOWED_DOMAIN.fullmatch(name):
                raise ValueError(f"allow_domains: {given!r} is no host name (pypi.org, "
                                 "*.pythonhosted.org, host:8443)")
        return sorted(set(names))

    @field_validator("env_passthrough")
    @classmethod
    def _variable_names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or ():
            _check_variable_name(name)
        return value

    @field_validator("binds")
    @classmethod
    def _bind_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, path in (value or {}).items():
            _check_variable_name(name)
            if not path or "\0" in path:
                raise ValueError(f"binds: {name}: not a path")
        return value

    @field_validator("expect", mode="before")
    @classmethod
    def _expect_any_case(cls, value: Any) -> Any:
        # Statuses are printed in capitals (TIMEOUT): either spelling is meant the same.
        return value.lower() if isinstance(value, str) else value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_are_text(cls, value: Any) -> Any:
        # YAML turns `N: 3` into an int; an environment only holds text. A date,
        # a list or binary has no one obvious spelling: the user should quote it.
        if not isinstance(value, dict):
            return value
        env = {}
        for name, v in value.items():
            _check_variable_name(name)
            if v is None:
                v = ""
            elif isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{name}: {v} is not a finite number")
            elif isinstance(v, bool | int | float):
                v = json.dumps(v)
            elif not isinstance(v, str):
                raise ValueError(f"{name}: expected text or a number, got {type(v).__name__} "
                                 f"(quote the value)")
            if "\0" in v:
                raise ValueError(f"{name}: an environment value cannot hold a NUL character")
            env[name] = v
        return env


def _check_variable_name(name: Any) -> None:
    if not isinstance(name, str) or not name or "=" in name or "\0" in name:
        raise ValueError(f"{name!r} cannot be an environment variable name")


class TaskFile(TaskSettings):
    """A task file (``*.yaml``): one task, run once per variant and replicate."""

    task_id: str | None = Field(default=None, pattern=TASK_ID_PATTERN)
    """Default: the file name without .yaml / .yml; either must match the pattern."""


class Variant(TaskSettings):
    """One configuration every task runs in; it may set any task field."""

    variant_id: str = Field(pattern=TASK_ID_PATTERN)
    """Names the variant in task keys: ``<variant_id>/<task_id>/<NN>``."""
    repeats: Count | None = Field(default=None, ge=1, le=MAX_REPEATS)
    """Replicates per task in this variant (default: the experiment's)."""


class ExperimentFile(_Strict):
    """An experiment file (``-e``): which tasks, in which variants, how many times."""

    experiment_id: str = Field(pattern=TASK_ID_PATTERN)
    """Names the experiment in reports."""
    tasks: list[str] = Field(min_length=1)
    """Task files or folders, relative to this file."""
    repeats: Count = Field(default=1, ge=1, le=MAX_REPEATS)
    """Replicates per task per variant."""
    max_parallel: Count | None = Field(default=None, ge=1)
    """Tasks at once (default 4; -j overrides)."""
    defaults: TaskSettings = TaskSettings()
    """Task fields every task starts from (a task file overrides them)."""
    variants: list[Variant] = Field(default=[Variant(variant_id="default")], min_length=1)
    """The variants (default: one, named default)."""

    @field_validator("variants")
    @classmethod
    def _unique_variant_ids(cls, variants: list[Variant]) -> list[Variant]:
        ids = [v.variant_id for v in variants]
        if duplicated := sorted({i for i in ids if ids.count(i) > 1}):
            raise ValueError(f"duplicate variant_id {', '.join(duplicated)}")
        return variants


class Overrides(_Strict):
    """Command-line options: the last word on every task."""

    timeout: Number | None = Field(default=None, gt=0)
    stall_timeout: Number | None = Field(default=None, gt=0)
    retries: Count | None = Field(default=None, ge=0, le=MAX_RETRIES)
    repeats: Count | None = Field(default=None, ge=1, le=MAX_REPEATS)
    model: str | None = None
    isolation: Isolation | None = None


# -- resolved tasks ------------------------------------------------------------------------


class ResolvedTask(_Strict):
    """One runnable replicate of one task in one variant: all defaults applied."""

    task_key: str
    task_id: str
    variant_id: str
    replicate_index: int
    source: str
    description: str = ""
    tags: list[str] = []
    prompt: str | None = None
    command: Command
    workdir: str | None = None
    env: dict[str, str] = {}
    timeout: float = DEFAULT_TIMEOUT
    stall_timeout: float | None = None
    stall_action: StallAction = "kill"
    max_output: int = DEFAULT_MAX_OUTPUT
    limits: ResolvedLimits = ResolvedLimits()
    # How often an infrastructure failure is tried again: not what the task is.
    retries: int = 0
    model: str | None = None
    stream_format: StreamFormat = "native"
    # How the agent's version is found, not what the task is: outside the definition.
    agent_version_command: str | None = None
    budget: Budget = Budget()
    # Where it may run, not what it is: outside the definition (no drift).
    ray: RayResources = RayResources()
    # None at all: the task runs and ends NOT_GRADED (docs/results.md).
    success_criteria: list[Criterion] = []
    expect: Expectation | None = None
    isolation: Isolation = "none"
    network: Network = "none"
    env_passthrough: list[str] = []
    binds: dict[str, str] = {}
    image: str | None = None
    dockerfile: str | None = None
    gateway: list[GatewayProvider] = []
    allow_domains: list[str] = []

    def definition(self) -> dict[str, Any]:
        """What the task *is*, as ``task.started`` records it: everything but where it
        sits in the run, each key at its default left out (``complete`` puts them back:
        a no-op task's definition is half defaults)."""
        return {name: value for name, value in self._hashed_definition().items()
                if _FIRST_DEFAULTS.get(name, _REQUIRED) != value}

    def _hashed_definition(self) -> dict[str, Any]:
        # The definition as versions before 0.2 recorded it, and as the hash covers it:
        # the keys added since the first version only when not at their default (a task
        # without them hashes as before they existed).
        left_out = {"task_key", "replicate_index", "ray", "retries", "agent_version_command"}
        left_out.update(name for name in _LATER_KEYS
                        if getattr(self, name) == ResolvedTask.model_fields[name].default)
        if self.isolation in ("auto", "none"):
            # Each has been the default of a task that names none: alike, as before auto.
            left_out.add("isolation")
        return self.model_dump(mode="json", exclude=left_out)

    @cached_property
    def definition_hash(self) -> str:
        """Hash of what the task evaluates, independent of where the suite sits on disk
        and of its ``ANNOTATIONS``: moving a folder of tasks or editing a description is
        not drift; editing a prompt, a command or a criterion is."""
        return content_hash(evaluated(self._hashed_definition()))

    @cached_property
    def legacy_hash(self) -> str:
        """The hash as versions that hashed the annotations too computed it: what the
        fingerprints of runs they recorded hold (drift accepts either)."""
        return content_hash(comparable(self._hashed_definition()))


# Keys a definition holds only when not at their default (``ResolvedTask.definition``).
_LATER_KEYS = ("expect", "isolation", "network", "env_passthrough", "binds", "image",
               "dockerfile", "stall_timeout", "stall_action", "max_output", "limits",
               "gateway", "allow_domains")

_REQUIRED = object()

# The first version's keys with a default, as JSON: ``definition`` leaves out those at
# it, ``complete`` puts them back.
_FIRST_DEFAULTS: dict[str, Any] = {
    "description": "", "tags": [], "prompt": None, "workdir": None, "env": {},
    "timeout": DEFAULT_TIMEOUT, "model": None, "stream_format": "native",
    "budget": {"max_cost_usd": None, "max_tokens": None}, "success_criteria": [],
}


def complete(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A definition as ``task.started`` recorded it, with the keys left out at their
    default put back: what it was hashed as (any version's record)."""
    return {**_FIRST_DEFAULTS, **definition}


def comparable(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A definition (resolved now, or as ``task.started`` recorded it) as drift compares
    it: without ``source``, its ``workdir`` and ``binds`` relative to the task file's
    folder."""
    compared = dict(definition)
    home = Path(compared.pop("source", "") or ".").parent
    for name in ("workdir", "dockerfile"):
        if isinstance(compared.get(name), str):
            compared[name] = os.path.relpath(compared[name], home)
    if isinstance(binds := compared.get("binds"), dict):
        compared["binds"] = {name: os.path.relpath(path, home) if isinstance(path, str)
                             else path for name, path in binds.items()}
    if isinstance(criteria := compared.get("success_criteria"), list):
        compared["success_criteria"] = [
            {**c, "binds": [os.path.relpath(p, home) if isinstance(p, str) else p
                            for p in c["binds"]]}
            if isinstance(c, dict) and isinstance(c.get("binds"), list) else c
            for c in criteria]
    return compared


def evaluated(definition: Mapping[str, Any]) -> dict[str, Any]:
    """``comparable(definition)`` without its ``ANNOTATIONS``: what the hash covers."""
    return {k: v for k, v in comparable(definition).items() if k not in ANNOTATIONS}


def content_hash(value: Any) -> str:
    """sha256 of canonical JSON: the same content always gives the same hash."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
