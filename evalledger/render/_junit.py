"""A run summary as JUnit XML, for CI systems (docs/cli.md, "report").

One ``<testsuite>`` per variant, one ``<testcase>`` per task key (its
``classname`` the variant, its ``name`` the task id and replicate). A key in the
``failed`` category carries a ``<failure>``, one in the ``error`` category an
``<error>``, an unfinished or ungraded one ``<skipped>``; each says the final status and
message. The counts in the attributes are the summary's: failures add up to
``tasks_failed``, errors to ``tasks_error``.

Pure: the same summary always gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Collection
from xml.etree import ElementTree as ET

from evalledger._text import visible
from evalledger.projections import RunSummary, TaskRow
from evalledger.statuses import Category

_SKIPPED = frozenset({None, Category.UNGRADED})


def _text(value: str) -> str:
    # XML 1.0 cannot hold most control characters at all, escaped or not.
    return visible(value, newlines=True)


def _case(row: TaskRow) -> ET.Element:
    case = ET.Element("testcase", {
        "classname": row.variant_id,
        "name": f"{row.task_id}/{row.replicate_index:02d}",
        "time": f"{row.duration_seconds or 0.0:.3f}",
    })
    status = row.final_status.value if row.final_status else "UNFINISHED"
    message = _text(f"{status}: {row.error_message}" if row.error_message else status)
    if row.category == Category.FAILED:
        ET.SubElement(case, "failure", {"type": status, "message": message}).text = message
    elif row.category == Category.ERROR:
        ET.SubElement(case, "error", {"type": status, "message": message}).text = message
    elif row.category is None:
        ET.SubElement(case, "skipped", {"message": "unfinished: the run did not finish it"})
    elif row.category == Category.UNGRADED:
        ET.SubElement(case, "skipped", {"message": "NOT_GRADED: the task has no success "
                                        "criteria"})
    return case


def render_junit(summary: RunSummary) -> str:
    """The summary as a JUnit XML document (UTF-8 text, ending in a newline)."""
    suites = ET.Element("testsuites", {
        "name": _text(summary.run_id),
        "tests": str(len(summary.tasks)),
        "failures": str(summary.tasks_failed),
        "errors": str(summary.tasks_error),
        "skipped": str(_count(summary.tasks, _SKIPPED)),
        "time": f"{summary.duration_seconds or 0.0:.3f}",
    })
    variants: dict[str, list[TaskRow]] = {}
    for row in summary.tasks:
        variants.setdefault(row.variant_id, []).append(row)
    suites.extend(_suite(variant, rows, summary.started_at)
                  for variant, rows in sorted(variants.items()))
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def _suite(variant: str, rows: list[TaskRow], started_at: str | None) -> ET.Element:
    """One variant's ``<testsuite>``: its counts, then one ``<testcase>`` per task key."""
    suite = ET.Element("testsuite", {
        "name": variant,
        "tests": str(len(rows)),
        "failures": str(_count(rows, {Category.FAILED})),
        "errors": str(_count(rows, {Category.ERROR})),
        "skipped": str(_count(rows, _SKIPPED)),
        "time": f"{sum(r.duration_seconds or 0.0 for r in rows):.3f}",
    })
    if started_at:
        suite.set("timestamp", started_at)
    suite.extend(_case(row) for row in rows)
    return suite


def _count(rows: list[TaskRow], categories: Collection[Category | None]) -> int:
    return sum(1 for r in rows if r.category in categories)
