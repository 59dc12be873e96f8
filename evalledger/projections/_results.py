"""What a run summary says: the models of ``run.json``, its headline and its rows.

Apart from the fold that makes them (``_summary``), so a summary stored in a snapshot
can be read back (``show``, ``report``) without building the event models.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from evalledger.ledger._anchor import Anchor
from evalledger.ledger._tokens import NO_TOKENS, TokenCounts
from evalledger.statuses import GRADED, Category, FailureClass, FinalStatus, left_out

from ._intervals import CONFIDENCE, Interval, normal_interval, wilson


def _no_tokens(value: TokenCounts) -> bool:
    return not value.total


def _zero(value: float | None) -> bool:
    return value == 0.0


class TaskRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_key: str
    task_id: str
    variant_id: str
    replicate_index: int
    tags: list[str]
    attempts: int
    final_status: FinalStatus | None
    category: Category | None
    weighted_score: float | None
    duration_seconds: float | None
    tokens: TokenCounts
    """The agent's: what its command used (``grader_tokens``: what grading it did)."""
    cost_usd: float | None
    """Every role's: the agent's and the run's own grading's."""
    cost_complete: bool
    error_message: str | None
    grader_tokens: Annotated[TokenCounts, Field(exclude_if=_no_tokens)] = NO_TOKENS
    """What grading the attempt used (its judges), in the grade set shown: the run's
    own grading's, or a regrade's. Left out when none."""
    grader_cost_usd: Annotated[float | None, Field(exclude_if=_zero)] = 0.0
    """Its cost (in ``cost_usd`` for the run's own grading); null when unpriced."""
    failure_class: FailureClass | None = None
    """Who failed it, when it did not succeed: ``agent``, ``infra`` or ``grader``."""
    isolation: str = "none"
    """What confined the attempt it reports, the one that finished, else the latest
    (docs/isolation.md): ``none``, ``bwrap``, or
    ``none (asked bwrap)`` when the asked isolation could not run."""
    grade_pending: bool = False
    """Run with ``--no-grade`` and not graded since (in the grade set shown)."""
    flags: list[str] = []
    """The rules ``evalledger scan`` flagged the attempt it reports with, sorted."""



class SkippedFile(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    reason: str
    deliberate: bool = False
    """It says ``skip: true``: left out on purpose, not broken."""



class ModelUsage(BaseModel):
    """What one model used in a run: every usage report of every attempt."""

    model_config = ConfigDict(frozen=True)

    model: str | None
    """As reported (None: a usage line that named no model)."""
    tokens: TokenCounts
    cost_usd: float
    """The priced part: a floor when ``cost_complete`` is false."""
    cost_complete: bool
    """False when some of this model's usage had no price."""
    estimated: bool = False
    """True when some of its usage is an estimate (an attempt cut off before its agent
    reported its totals, read from its messages as they came): its tokens and cost are
    a floor, priced as they are."""

    @property
    def whole(self) -> bool:
        """Its cost is all of it: every usage priced, none an estimate."""
        return self.cost_complete and not self.estimated



class RoleUsage(BaseModel):
    """What one role's usage came to in a run: the agent's own, or grading's."""

    model_config = ConfigDict(frozen=True)

    role: str
    """``agent`` (the task's own command) or ``grader`` (a judge's, an evaluator's); a
    role a newer writer names is listed under its name."""
    tokens: TokenCounts
    cost_usd: float
    """The priced part: a floor when ``cost_complete`` is false."""
    cost_complete: bool
    """False when some of this role's usage had no price."""



class VariantStats(BaseModel):
    """One variant's results: the per-variant table of ``show``, ``run.md`` and the viewer."""

    model_config = ConfigDict(frozen=True)

    variant_id: str
    tasks: int
    """Task keys of the variant the run planned (every replicate of every task), started
    or not: ``tasks_run`` of them ended."""
    tasks_run: int
    tasks_succeeded: int
    tasks_failed: int
    tasks_error: int
    tasks_ungraded: int
    pass_rate: float
    """Succeeded over graded (succeeded + failed + error), infrastructure failures left
    out unless ``infra_counted``."""
    mean_score: float | None
    """Mean weighted score of the graded keys (infrastructure failures left out, as for
    every rate here)."""
    score_stderr: float | None
    """Standard error of that mean, clustered by task id (the replicates of a task are
    not independent); with one replicate per task, stdev / sqrt(n). None below two
    task ids."""
    pass_at_k: dict[str, float]
    """k -> the unbiased pass@k of Chen et al. (2021), averaged over the variant's task
    ids that have at least k finished replicates; k = 1 .. the most replicates."""
    cost_usd: float
    cost_complete: bool
    mean_duration_seconds: float | None
    pass_at_k_stderr: dict[str, float] = {}
    """k -> the standard error of pass@k over its task ids (k with two or more)."""
    pass_at_k_left_out: dict[str, list[str]] = {}
    """k -> the task ids pass@k left out: fewer than k graded replicates (an
    infrastructure failure dropped one). Only the k that left some out."""
    pass_rate_stderr: float | None = None
    """The pass rate's standard error clustered by task id, where a task has several
    graded replicates; None otherwise."""
    pass_hat_k: dict[str, float] = {}
    """k -> pass^k: the chance that k replicates of a task *all* pass (unbiased:
    ``C(c, k) / C(n, k)``), averaged as pass@k is. Consistency, where pass@k is reach."""
    flaky_tasks: list[str] = []
    """Task ids whose graded replicates disagree: some succeeded, some did not."""
    tokens_total: int = 0
    """Every token of every attempt of the variant's keys."""
    tasks_infra: int = 0
    """Graded keys whose reported attempt failed for its infrastructure's sake."""
    infra_counted: bool = False
    """Whether the rates count those (``--count-infra``); by default they leave them out."""

    @property
    def graded(self) -> int:
        """What the rates are taken over: the graded keys, less infrastructure failures
        unless they are counted."""
        infra = 0 if self.infra_counted else self.tasks_infra
        return self.tasks_succeeded + self.tasks_failed + self.tasks_error - infra

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_rate_interval(self) -> Interval:
        """At 95%: clustered by task where tasks have replicates (the normal interval
        of ``pass_rate_stderr``), else Wilson's (``wilson`` for another level)."""
        return _rate_interval(self.pass_rate, self.pass_rate_stderr, self.tasks_succeeded,
                              self.graded)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score_interval(self) -> Interval | None:
        """The mean score ± z·its clustered standard error, at 95%."""
        return self.score_interval_at(CONFIDENCE)

    def score_interval_at(self, confidence: float) -> Interval | None:
        if self.mean_score is None or self.score_stderr is None:
            return None
        # A weighted score lies in [0, 1]: so does its interval.
        return normal_interval(self.mean_score, self.score_stderr, confidence, low=0.0,
                               high=1.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_at_k_interval(self) -> dict[str, Interval]:
        """k -> pass@k ± z·its standard error over task ids, in [0, 1], at 95%."""
        return self.pass_at_k_interval_at(CONFIDENCE)

    def pass_at_k_interval_at(self, confidence: float) -> dict[str, Interval]:
        return {k: normal_interval(self.pass_at_k[k], se, confidence, low=0.0, high=1.0)
                for k, se in self.pass_at_k_stderr.items() if k in self.pass_at_k}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_success(self) -> float | None:
        """The variant's cost over its succeeded keys; None without one."""
        return per_success(self.cost_usd, self.tasks_succeeded)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_per_success(self) -> float | None:
        return per_success(self.tokens_total, self.tasks_succeeded)


def per_success(total: float, succeeded: int) -> float | None:
    """What each success cost, all attempts' spend included; None without a success."""
    return round(total / succeeded, 6) if succeeded else None



class Listed:
    """Marks a ``RunHeadline`` field that ``evalledger runs`` lists (a column of the
    ``runs`` SQL view, or what one is made from): a headline snapshot without one is
    not used, the run is folded instead (``_rebuild.HEADLINE_KEYS``, kept as text there
    so that listing runs imports no model; a test checks it against these marks)."""


LISTED = Listed()


class RunHeadline(BaseModel):
    """A run in one line: the counts of ``RunSummary``, without its per-task rows."""

    model_config = ConfigDict(frozen=True)

    run_id: Annotated[str, LISTED]
    experiment_id: Annotated[str | None, LISTED]
    status: Annotated[str, LISTED]
    started_at: Annotated[str | None, LISTED]
    finished_at: Annotated[str | None, LISTED]
    duration_seconds: float | None
    max_parallel: int
    tasks_planned: Annotated[int, LISTED]
    tasks_run: Annotated[int, LISTED]
    tasks_succeeded: Annotated[int, LISTED]
    tasks_failed: Annotated[int, LISTED]
    tasks_error: Annotated[int, LISTED]
    tasks_ungraded: Annotated[int, LISTED]
    tasks_unfinished: int
    pass_rate: float
    tokens: TokenCounts
    total_cost_usd: Annotated[float, LISTED]
    """The run's cost (``cost_usd`` in the ``runs`` view)."""
    cost_complete: Annotated[bool, LISTED]
    models: list[str]
    usage_by_role: list[RoleUsage]
    """Per role, ``agent`` first: what the agent spent, and what grading it cost
    (``grader_cost_usd`` in the ``runs`` view; a headline snapshot from before roles
    lacks it and is used all the same)."""
    grades: str = "original"
    """The grade set whose verdicts these counts are: ``original`` (the run's own
    grading) or a ``regrade``'s name. By default the latest complete one."""
    tasks_infra: int = 0
    """Task keys whose reported attempt the runner saw fail for its infrastructure's
    sake (``statuses.left_out``: a stall, a sandbox, a process that could not start, a
    judge's API): counted in error, and left out of every rate (``pass_rate``, its
    interval, the variants') unless ``infra_counted``."""
    infra_counted: bool = False
    """Whether the rates count infrastructure failures (``--count-infra``)."""
    pass_rate_stderr: float | None = None
    """The pass rate's standard error clustered by task id, where a task has several
    graded replicates (they are not independent trials); None otherwise."""

    @classmethod
    def listed(cls) -> frozenset[str]:
        """The fields marked ``LISTED``: what a headline snapshot must hold to be used."""
        return frozenset(name for name, field in cls.model_fields.items()
                         if LISTED in field.metadata)

    @property
    def cost_by_role(self) -> dict[str, float]:
        """Role -> its priced cost (``agent``, ``grader``): they add up to the total."""
        return {r.role: r.cost_usd for r in self.usage_by_role}

    @property
    def graded(self) -> int:
        """What the pass rate is taken over: the graded keys, less infrastructure failures
        unless they are counted."""
        infra = 0 if self.infra_counted else self.tasks_infra
        return self.tasks_succeeded + self.tasks_failed + self.tasks_error - infra

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_rate_interval(self) -> Interval:
        """At 95%, as a variant's: clustered by task where tasks have replicates, else
        Wilson's over the graded keys."""
        return _rate_interval(self.pass_rate, self.pass_rate_stderr, self.tasks_succeeded,
                              self.graded)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_success(self) -> float | None:
        """The run's cost (every attempt's, grading's too) over its succeeded keys."""
        return per_success(self.total_cost_usd, self.tasks_succeeded)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_success_by_role(self) -> dict[str, float]:
        """Role -> its cost over the succeeded keys: the agent's and grading's apart."""
        if not self.tasks_succeeded:
            return {}
        return {r.role: round(r.cost_usd / self.tasks_succeeded, 6) for r in self.usage_by_role}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_per_success(self) -> float | None:
        return per_success(self.tokens.total, self.tasks_succeeded)



class RunSummary(RunHeadline):
    """Everything ``run.json`` says about a run. Rebuildable from the ledger alone.

    The headline's fields come first, declared once in ``RunHeadline``; then what only
    the whole summary holds."""

    tasks_token_budget_exceeded: int
    tasks_cost_budget_exceeded: int
    tasks_flagged: int = 0
    """Task keys whose reported attempt a scan flagged (``flags`` on their rows)."""
    grade_sets: list[str] = ["original"]
    """Every grade set of the run: ``original`` first, then each regrade's name in the
    order of their latest ``run.graded``."""
    skipped_tasks: list[SkippedFile]
    tasks_cost_incomplete: int
    tasks_by_isolation: dict[str, int] = {}
    """How many task keys that ran each isolation confined (their latest attempts): what
    the isolation line of ``show`` and run.md says, without reading every row."""
    spend_unread: dict[str, int] = {}
    """Per agent stream format (``claude-code``...), the task keys whose latest attempt
    printed that agent's usage while its task's ``stream_format`` was ``native``: what
    it spent was not read (among ``tasks_cost_incomplete``; name the format to have it
    read). Empty: none."""
    model_calls: dict[str, int] = {}
    """The agents' model calls through the [gateway](gateway.md), by how each was
    answered: its HTTP status (``200``; ``400`` for one the gateway refused past a
    budget; ``429``, ``529``...) or ``timeout``, ``unreachable``, ``broken`` (its answer
    began, then its connection was lost). An agent's client that
    retried a failed call made a call of each try: every one is counted. Empty: no call
    went through the gateway."""
    usage_by_model: list[ModelUsage]
    variants: list[VariantStats]
    version_consensus: dict[str, Any]
    version_drift: dict[str, dict[str, int]]
    fingerprint_drift: list[dict[str, Any]]
    tasks: list[TaskRow]
    signing_keys: list[str] = []
    """The public key of each batch that ran the run (``run.started``, then each
    ``run.resumed``), in order: what its events are sealed with (see docs/ledger.md,
    "Signed runs"). Empty for a run recorded before signing."""
    anchor: Anchor | None = None
    """The ledger's id and the seq and hash of the run's last lifecycle event when the
    report was made: ``verify --anchor run.json`` checks the ledger still holds it.
    Set by whoever reads the ledger (a fold has no hashes); None in a bare fold."""

    def anchored(self, anchor: Anchor | None) -> RunSummary:
        return self.model_copy(update={"anchor": anchor})

    @property
    def broken_files(self) -> list[SkippedFile]:
        """Task files that could not be used (not those that say ``skip: true``)."""
        return [k for k in self.skipped_tasks if not k.deliberate]

    @property
    def unpriced(self) -> list[ModelUsage]:
        """The models some of whose usage had no price, with what they used."""
        return [m for m in self.usage_by_model if not m.cost_complete]

    @property
    def unreported(self) -> bool:
        """Whether the cost is a floor for want of spend, not of a price: every usage had
        one, but some attempt said its cost was incomplete all the same (an imported
        TIMEOUT: the old harness killed the agent mid-turn and never learnt what that
        turn used)."""
        return not self.cost_complete and not self.unpriced

    @model_validator(mode="after")
    def _buckets_add_up(self) -> RunSummary:
        buckets = (self.tasks_succeeded, self.tasks_failed, self.tasks_error,
                   self.tasks_ungraded)
        if sum(buckets) != self.tasks_run:
            raise ValueError(f"buckets {'+'.join(map(str, buckets))} do not add up to "
                             f"tasks_run {self.tasks_run}")
        return self


class TagStats(BaseModel):
    """Results of the task keys that carry one tag."""

    model_config = ConfigDict(frozen=True)

    tag: str
    tasks: int
    tasks_run: int
    tasks_succeeded: int
    pass_rate: float
    """Succeeded over graded keys with the tag."""
    tasks_graded: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_rate_interval(self) -> Interval:
        """Wilson's, at 95%."""
        return wilson(self.tasks_succeeded, self.tasks_graded, CONFIDENCE)


def tag_stats(summary: RunSummary) -> list[TagStats]:
    """Pass rate per tag, by the summary's rows (a key counts under each of its tags;
    infrastructure failures are left out of the rates as the summary leaves them)."""
    tally: dict[str, list[int]] = {}
    for row in summary.tasks:
        for tag in dict.fromkeys(row.tags):
            counts = tally.setdefault(tag, [0, 0, 0, 0])
            counts[0] += 1
            counts[1] += row.category is not None
            counts[2] += row.category == Category.SUCCEEDED
            counts[3] += row.category in GRADED and (
                summary.infra_counted or not left_out(row.category, row.failure_class))
    return [
        TagStats(tag=tag, tasks=n, tasks_run=run, tasks_succeeded=ok,
                 pass_rate=round(ok / graded, 6) if graded else 0.0, tasks_graded=graded)
        for tag, (n, run, ok, graded) in sorted(tally.items())
    ]


def _rate_interval(rate: float, stderr: float | None, succeeded: int, graded: int
                   ) -> Interval:
    """A pass rate's 95% interval: normal with its clustered standard error where tasks
    have replicates, else Wilson's."""
    if stderr is None:
        return wilson(succeeded, graded, CONFIDENCE)
    return normal_interval(rate, stderr, CONFIDENCE, low=0.0, high=1.0)
