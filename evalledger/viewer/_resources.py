"""What each of the viewer's resources is: one typed model per resource, which a route
renders as an HTML page or as JSON (Datasette's shape: the data once, two renderings).

The app's data functions (``_app._Views``: ``runs``, ``run``, ``tasks``, ``task``,
``transcript``, ``summary``, ``search``, ``search_every``, ``diff``, ``compare``) parse
a request and return one of these; the ``/api`` route returns ``json_response()``, the
page route renders a template from the same value. Every page is drawn from resources
(the run page from its run and its task table, a task page from its task and its
transcript), and every field a page reads is in the JSON too: the query it was asked,
the keys running, what the page says beside the summary (liveness, the tasks not
started, the fields the variants define, the previous run). Only how a page draws it
(charts, links, the conversation's layout) is the page's own.

JSON: pydantic, as everything the viewer shows is already a pydantic model of the
projections (``RunSummary``, ``TaskRow``, ``RunDiff``); the bytes are those
Starlette's ``JSONResponse`` writes for the dumped value, except where the contract
says a value is a file (``/summary`` is ``run.json``) or a model's own JSON (a diff).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer
from starlette.responses import JSONResponse, RedirectResponse, Response

from evalledger.agents import FinalResult
from evalledger.app import Attempt, Found, Line, RunFound, WorkspaceChanges
from evalledger.projections import (
    Comparison,
    RunDiff,
    RunHeadline,
    RunSummary,
    TagStats,
    TaskDiff,
    TaskRow,
)
from evalledger.render import Neighbours, TableQuery, per_summary, render_json


class Resource(BaseModel):
    """A resource's data, as both renderings read it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    def json_response(self) -> Response:
        return JSONResponse(self.model_dump(mode="json"))


class ListedRun(RunHeadline):
    """A run as the runs listing shows it: its headline with the status shown (running,
    cut off, ...: not the fold's) and whether it was imported."""

    imported: bool


class RunList(Resource):
    """``/`` and ``/api/runs``: a page of runs, newest first, filtered."""

    seq: int
    """The ledger's last event as read."""
    total: int
    page: int
    pages: int
    runs: list[ListedRun]
    q: str = ""
    """The text asked for (an id, experiment or model holds it), lower case."""
    status: str = ""
    """The status asked for."""


class RunView(Resource):
    """``/runs/RUN`` (its head) and ``/api/runs/RUN``: a run now or as of ``?at=``."""

    run_id: str
    status_shown: str
    first_seq: int
    last_seq: int
    imported: dict[str, Any] | None
    summary: RunSummary
    tags: list[TagStats]
    at: int | None = None
    """The event it is shown as of (``?at=``); None: now."""
    running: frozenset[str] = frozenset()
    """The keys with an attempt running (then)."""
    liveness: dict[str, tuple[float, bool]] = {}
    """Per key running now: seconds since it last produced anything, and whether it is
    stalled (none as of ``?at=``)."""
    not_started: int = 0
    """Its tasks with no attempt yet."""
    variant_bound: frozenset[str] = frozenset()
    """The drifted environment fields its variants define: not drift."""
    previous: str | None = None
    """The run before it that ran the same thing (the same experiment; without one, a
    task key in common): what the page offers to compare with first."""
    others: list[str] = []
    """The other runs the page offers to compare with, newest first (the first 100)."""

    @field_serializer("running", "variant_bound")
    def _sorted(self, keys: frozenset[str]) -> list[str]:
        return sorted(keys)

    def json_response(self) -> Response:
        body = self.model_dump(mode="json", exclude={"summary"})
        # The summary as run.json writes it (what /summary serves as a file), given to
        # the response as it is: dumped by pydantic, its thousands of rows would be
        # walked once more (measured: 55 -> 71 ms of CPU a request at 2,000 tasks).
        body["summary"] = json.loads(render_json(self.summary))
        return JSONResponse({name: body[name] for name in type(self).model_fields
                             if name in body})


class TaskTable(Resource):
    """The run page's task table and ``/api/runs/RUN/tasks``: a page of its rows,
    filtered and sorted as the query asks."""

    total: int
    page: int
    pages: int
    tasks: list[TaskRow]
    query: TableQuery
    """What was asked (a page's links repeat it)."""
    listed: str
    """The query (its filters and order, not its page) as one URL parameter's value: how
    a task page opened from this table knows it (``?list=``)."""


class TaskView(Resource):
    """``/runs/RUN/tasks/KEY`` (its attempts) and ``/api/runs/RUN/tasks/KEY``."""

    run_id: str
    task_key: str
    row: TaskRow | None
    attempts: list[Attempt]
    running: bool = False
    """An attempt of it is running now."""
    run_status: str = ""
    """Its run's status as shown."""
    planned: bool = False
    """Its run plans it (it has a page before it starts)."""
    claims: dict[int, FinalResult] = {}
    """Per attempt, how its agent said the session ended (its last result line)."""
    failing_results: dict[int, int] = {}
    """Per attempt, the seq of the last tool result its conversation marked an error
    (the verdict links to it)."""
    usage_curves: dict[int, list[tuple[str, int]]] = {}
    """Per attempt whose transcript is a conversation: ``(ts, tokens so far)`` each time
    one of its lines moved the running count."""
    neighbours: Neighbours | None = None
    """Where it sits in ``listed`` (None: not among its rows)."""
    listed: TableQuery = TableQuery()
    """The list it was opened from (``?list=``: that task table's query)."""
    changes: WorkspaceChanges | None = None
    """What its agent changed (a page of the files, ``?files=``); None while the run has
    a task running, or before its first attempt."""

    @field_serializer("attempts")
    def _attempts_json(self, attempts: list[Attempt]) -> list[dict[str, Any]]:
        return [{
            "attempt": t.number,
            "started": t.started.model_dump(mode="json"),
            "usage": [u.model_dump(mode="json") for u in t.usage],
            "completed": t.completed.model_dump(mode="json") if t.completed else None,
            "interrupted": t.interrupted.model_dump(mode="json") if t.interrupted else None,
            "isolation": t.isolation.model_dump(mode="json") if t.isolation else None,
        } for t in attempts]


class Transcript(Resource):
    """A page of a task's transcript (``/api/runs/RUN/transcript/KEY``; the task page's
    lines): keyset-paged by seq, ``?after=``, ``?before=``, ``?q=``."""

    more_before: bool
    more_after: bool
    lines: list[Line]
    search: str = ""
    """The text its lines hold (``?q=``)."""
    after: int = 0
    """The seq it begins after (``?after=``)."""

    @property
    def first_seq(self) -> int:
        return self.lines[0].seq if self.lines else 0

    @property
    def last_seq(self) -> int:
        return self.lines[-1].seq if self.lines else 0


class SearchView(Resource):
    """``/runs/RUN/search?q= &after=`` and ``/api/runs/RUN/search``: the run's transcript
    lines after seq ``after`` that hold a text, by task; ``next``: where the search goes
    on (None: it read to the end), having found its ``lines`` or (``timed``) used the
    time a page has."""

    run_id: str
    q: str
    after: int
    lines: int
    next: int | None
    timed: bool
    tasks: list[Found]


class EverySearchView(Resource):
    """``/search?q= &run= &after=`` and ``/api/search``: the transcript lines of every run
    that hold a text, newest run first (from run ``run``'s seq ``after`` on), by run and
    task; ``next_run`` / ``next_after``: where the search goes on (None: it read every
    run), having found its ``lines`` or (``timed``) used the time a page has."""

    q: str
    run: str | None
    after: int
    lines: int
    next_run: str | None
    next_after: int
    timed: bool
    runs: list[RunFound]


class SummaryView(Resource):
    """``/api/runs/RUN/summary`` and the run's downloads: its summary as ``run.json``
    holds it (anchored)."""

    summary: RunSummary

    def json_response(self) -> Response:
        body = per_summary(self.summary, "json", lambda: render_json(self.summary).encode())
        return Response(body, media_type="application/json")


class DiffView(Resource):
    """``/diff/A/B`` and ``/api/diff/A/B``: what changed from one run to another."""

    result: RunDiff
    paired: Comparison
    """The same two runs paired by task: is B better than A, or is it noise
    (``evalledger compare``)."""
    variants_a: list[str] = []
    variants_b: list[str] = []
    """Each run's variants: what ``?variants=A=B`` may pair (``result.variants``: what
    was paired)."""

    def json_response(self) -> Response:
        return JSONResponse({**self.result.model_dump(mode="json"),
                             "paired": self.paired.model_dump(mode="json"),
                             "variants_a": self.variants_a, "variants_b": self.variants_b})

    def tasks_by_change(self) -> list[TaskDiff]:
        """The tasks, regressions first, then fixes, changes, additions, removals."""
        return sorted(self.result.tasks, key=lambda t: (_CHANGE_ORDER[t.change], t.task_key))


class CompareView(Resource):
    """``/compare?run=A&run=B`` and ``/api/compare``: with two runs, where their diff is
    (the older first; the page and its twin redirect there); else the runs to pick two
    from, newest first."""

    runs: list[RunHeadline]
    picked: list[str]
    diff: str | None
    """The diff's page (``/diff/A/B``), once two runs are picked."""

    def json_response(self) -> Response:
        if self.diff is not None:
            return RedirectResponse(f"/api{self.diff}", status_code=303)
        return super().json_response()


_CHANGE_ORDER = {"regression": 0, "fix": 1, "changed": 2, "added": 3, "removed": 4,
                 "unchanged": 5}
