"""What a run was asked to do: one typed, frozen model (docs/cli.md, "run").

``evalledger run`` builds a ``RunOptions`` once from its command line; it is
recorded whole in ``run.started.config`` and fingerprinted; ``resume`` reads it
back from there and resolves the same tasks again. The defaults below are the
only ones: the command line leaves an option unset and the model fills it in.

Some options change how a run executes, not what it evaluates: moving the
reports, more parallelism, a raised budget. They are marked ``Operational`` on
their field, and drift (``projections._resume.compute_drift``) ignores them.

Invariant (tested, as for every model nested in an event): fields are declared in
alphabetical order, so pydantic writes canonical JSON without sorting.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

PreservationMode = Literal["none", "move-on-write", "direct-write"]
ExecutorKind = Literal["local", "ray"]
# What an attempt's command can see and reach (docs/isolation.md): a task's key, and
# ``run --isolation`` over every task. Declared once, here: the task files' models, the
# run's options and the command line's choices are this.
Isolation = Literal["auto", "none", "bwrap", "docker"]
# Every replicate is resolved up front: a typo of a few zeros must not eat the memory.
MAX_REPEATS = 10_000
# Retries of infrastructure failures: a few cover a flaky API or node; more hide a fault.
MAX_RETRIES = 20


class Operational:
    """Field marker: the option changes how a run executes, never what it evaluates."""

    def __repr__(self) -> str:
        return "Operational()"


_OPERATIONAL = Operational()


# Typed for the code that needs a default outside a run (the executor's helpers): the
# fields below use these, so each knob still has exactly one default.
DEFAULT_KILL_GRACE = 2.0
# Seconds before the first retry of an infrastructure failure (then twice as long each time).
DEFAULT_RETRY_BACKOFF = 1.0
DEFAULT_PRESERVATION_MODE: PreservationMode = "move-on-write"


class RunOptions(BaseModel):
    """The options of one run, as recorded in ``run.started`` (paths made absolute)."""

    # extra="ignore": a run recorded by a newer evalledger, with options this one does
    # not know, can still be read and shown (resuming it reports them as drift).
    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    allow_unconfined: Annotated[bool, _OPERATIONAL] = False
    """Run a task whose isolation cannot run here with none (saying so) instead of
    refusing to start (and, should it stop running mid-run, instead of failing the
    attempt as an infrastructure ERROR)."""
    cwd: Annotated[str, _OPERATIONAL] = ""
    """The folder ``run`` was started in."""
    exclude_tags: list[str] = []
    """Drop tasks with ANY of these tags."""
    executor: Annotated[ExecutorKind, _OPERATIONAL] = "local"
    """Where attempts run: this machine, or a Ray cluster (the ledger stays here)."""
    experiment: str | None = None
    """The experiment file (absolute), if the run has one."""
    isolation: Isolation | None = None
    """The isolation of every task, overriding task files (docs/isolation.md)."""
    kill_grace: Annotated[float, _OPERATIONAL] = Field(default=DEFAULT_KILL_GRACE, gt=0)
    """Seconds a task's processes get between SIGTERM and SIGKILL when it is ended."""
    max_cost_usd: Annotated[float | None, _OPERATIONAL] = Field(default=None, gt=0)
    """Stop dispatching once the run has spent this many USD (a resume may raise it)."""
    max_infra_failures: Annotated[int | None, _OPERATIONAL] = Field(default=None, ge=1)
    """Stop dispatching after this many infrastructure failures in a row (none: never)."""
    max_parallel: Annotated[int, _OPERATIONAL] = Field(default=4, ge=1)
    """Tasks at once."""
    model: str | None = None
    """The model every task uses, overriding task files and variants."""
    no_grade: Annotated[bool, _OPERATIONAL] = False
    """Run the commands only: no criterion is checked, every attempt that ran ends
    ``NOT_GRADED`` pending a ``regrade`` (its workspace kept for it)."""
    out: Annotated[str, _OPERATIONAL] = "runs"
    """Reports and artifacts go to ``<out>/<run_id>/``."""
    paths: list[str] = []
    """Task files or folders of them (absolute)."""
    preservation_mode: Annotated[PreservationMode, _OPERATIONAL] = DEFAULT_PRESERVATION_MODE
    """What happens to each task's sandbox: deleted, moved to the artifacts, or run there."""
    pricing: str | None = None
    """A YAML rate card (absolute path) adding model prices."""
    ray_address: Annotated[str | None, _OPERATIONAL] = None
    """With the Ray executor: the cluster to join (``auto`` or an address); none starts
    a local Ray for the run."""
    repeats: int | None = Field(default=None, ge=1, le=MAX_REPEATS)
    """Replicates per task, overriding the experiment and its variants."""
    require_isolation: Annotated[bool, _OPERATIONAL] = False
    """Refuse to start when a task's isolation cannot run here: what a run does anyway
    unless ``allow_unconfined`` (kept for the runs and scripts that name it)."""
    retries: Annotated[int | None, _OPERATIONAL] = Field(default=None, ge=0, le=MAX_RETRIES)
    """Tries again after an infrastructure failure, overriding task files."""
    retry_backoff: Annotated[float, _OPERATIONAL] = Field(default=DEFAULT_RETRY_BACKOFF, ge=0)
    """Seconds before the first retry of a task; each next one waits twice as long."""
    sample: int | None = Field(default=None, ge=1)
    """Run only this many of the tasks found (every variant and replicate of each),
    chosen by ``seed``: a reproducible subset."""
    seed: int | None = None
    """What chose the sample (recorded, so a resume resolves the same subset)."""
    shard: str | None = Field(default=None, pattern=r"^[1-9][0-9]*/[1-9][0-9]*$")
    """``K/N``: run only the K-th of N disjoint shares of the task keys (by a hash of
    each key, the same on every machine); the shards of one run id merge into it."""
    stall_timeout: float | None = Field(default=None, gt=0)
    """Seconds without output after which an attempt is stalled, overriding task files."""
    tags: list[str] = []
    """Keep only tasks with ANY of these tags (none: keep all)."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds per task, overriding task files."""

    @classmethod
    def operational(cls) -> frozenset[str]:
        """Names of the options that are never drift."""
        return frozenset(
            name for name, info in cls.model_fields.items()
            if any(isinstance(m, Operational) for m in info.metadata)
        )

    @classmethod
    def default(cls, name: str) -> object:
        """The default of one option, for help texts: defaults live only here."""
        return cls.model_fields[name].default


__all__ = [
    "DEFAULT_KILL_GRACE",
    "DEFAULT_PRESERVATION_MODE",
    "DEFAULT_RETRY_BACKOFF",
    "ExecutorKind",
    "Operational",
    "PreservationMode",
    "RunOptions",
]
