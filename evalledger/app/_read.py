"""Reading a ledger from Python: a run's summary, the runs a ledger holds (as Inspect's
``read_eval_log`` and ``list_eval_logs``). What ``show``, ``report --format json`` and
``runs --format json`` print, as values.

Each opens the ledger read-only (never creating one: a missing file is
``LedgerNotFound``) and names a run as the CLI does: an id, a unique prefix of one, or
``latest``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalledger.ledger import Ledger

from . import DEFAULT_LEDGER

if TYPE_CHECKING:
    from evalledger.projections import Comparison, RunSummary

    from ._regrade import RegradeOutcome


def summary(run: str = "latest", *, ledger: Path | str = DEFAULT_LEDGER,
            grades: str | None = None, count_infra: bool = False) -> RunSummary:
    """The run's summary, every task row included, anchored to the ledger as run.json is
    (``RunSummary.anchor``): what ``report RUN --format json`` prints. Read from the
    run's snapshot when it has a current one, else replayed from its events.

    ``grades``: judged by that grade set of a ``regrade`` (default: the run's default
    grade set); ``count_infra``: infrastructure failures counted in the pass rates.

    Raises:
        LedgerNotFound: no ledger at ``ledger``.
        RunNotFound: no run answers to ``run``, or a prefix names several.
        UnknownGrades: the run has no grade set ``grades``.
    """
    with Ledger(ledger, read_only=True) as opened:
        return _anchored(opened, run, grades, count_infra)


def list_runs(*, ledger: Path | str = DEFAULT_LEDGER,
              limit: int | None = None) -> list[dict[str, Any]]:
    """The ledger's runs, newest first by start time, each as ``runs --format json``
    prints it: the columns of the ``runs`` SQL view, and ``cut_off`` (the run stopped
    without a ``run.finished`` and nothing runs it now: resume it). ``limit``: the
    newest that many (None: all).

    Raises:
        LedgerNotFound: no ledger at ``ledger``.
    """
    from ._repository import listed_runs as listed

    with Ledger(ledger, read_only=True) as opened:
        return [{**run.columns, "cut_off": run.cut_off}
                for run in listed(opened, sys.maxsize if limit is None else limit)]


def compare(run_a: str, run_b: str | None = None, *, ledger: Path | str = DEFAULT_LEDGER,
            variants: tuple[str, str] | None = None, baseline: str | None = None,
            confidence: float = 0.95, seed: int = 0, grades: str | None = None,
            grades_b: str | None = None, count_infra: bool = False) -> list[Comparison]:
    """Run B against run A, task by task (``compare``'s comparisons, as ``compare
    --json`` prints them): one comparison of their tasks, or of two ``variants``; or,
    with ``baseline``, one per other variant of B against that variant of A. ``run_b``
    None: A against itself (its variants, or its grade sets with ``grades_b``).

    Raises:
        LedgerNotFound: no ledger at ``ledger``.
        RunNotFound: no run answers to ``run_a`` or ``run_b``.
        InvalidRequest: nothing to compare, or a ``baseline`` a run lacks.
    """
    from evalledger.errors import InvalidRequest

    if run_b is None and not (variants or baseline or grades_b):
        raise InvalidRequest("compare what? give run B, two variants, a baseline variant "
                             "or a second grade set")
    if variants and baseline:
        raise InvalidRequest("give two variants or a baseline variant, not both")
    with Ledger(ledger, read_only=True) as opened:
        a = _anchored(opened, run_a, grades, count_infra)
        b = a if run_b is None and grades_b is None else _anchored(
            opened, run_b or run_a, grades_b or grades, count_infra)
    return compared(a, b, variants, baseline, confidence, seed)


def compared(a: RunSummary, b: RunSummary, variants: tuple[str, str] | None,
             baseline: str | None, confidence: float, seed: int) -> list[Comparison]:
    """``compare`` of two summaries read already."""
    from evalledger.errors import InvalidRequest
    from evalledger.projections import compare_runs, compare_to_baseline

    if not baseline:
        return [compare_runs(a, b, confidence=confidence, seed=seed, variants=variants)]
    if baseline not in {v.variant_id for v in a.variants}:
        raise InvalidRequest(f"{a.run_id} has no variant {baseline!r}")
    others = [v.variant_id for v in b.variants if b is not a or v.variant_id != baseline]
    if not others:
        raise InvalidRequest(f"{b.run_id} has no variant but {baseline!r} to compare with it")
    return compare_to_baseline(a, b, baseline, others, confidence=confidence, seed=seed)


def _anchored(ledger: Ledger, run: str, grades: str | None, count_infra: bool) -> RunSummary:
    """The run's summary as ``report --format json`` prints it: anchored to the ledger."""
    from ._repository import load_summary

    run_id = ledger.resolve_run(run)
    return load_summary(ledger, run_id, grades=grades,
                        count_infra=count_infra).anchored(ledger.anchor(run_id))


def regrade(run: str = "latest", *, ledger: Path | str = DEFAULT_LEDGER,
            criteria: Path | str | None = None, from_tasks: Path | str | None = None,
            recorded: bool = False, only: tuple[str, ...] = (), name: str | None = None,
            max_parallel: int = 4) -> RegradeOutcome:
    """Grade the run's counted attempts again, appending a grade set (``regrade``):
    by a file of ``criteria``, by the criteria of the task files at ``from_tasks``, by
    the criteria each attempt recorded (``recorded``), else by the run's task files as
    they are now; ``only`` some task keys or ids (globs); the set named ``name``.

    Raises:
        EvalledgerError: no such run, a run still going, criteria that cannot be read,
            a ledger error. Nothing is appended then.
    """
    from ._regrade import RegradeRequest, grade_again

    return grade_again(ledger, run, RegradeRequest(
        name=name, criteria=Path(criteria) if criteria is not None else None,
        from_tasks=Path(from_tasks) if from_tasks is not None else None, only=only,
        recorded=recorded, max_parallel=max_parallel))
