"""The viewer's web app: Starlette routes over one ``LedgerState``.

Each resource (the runs, a run, its task table, its summary, a task, a page of its
transcript, a search, a diff, a comparison's pick) has one data function here returning
its typed model (``_resources``); its ``/api/...`` route is that function rendered as
JSON, and a page renders the same values (Datasette's shape: a request's parameters are
parsed and its rows paged once). Every page names the resources it is drawn from
(``_page``), so each has its JSON twin. Nothing here counts anything the projections do not. The app
only reads: the ledger is opened read-only, and there is no route that writes.

Security: everything a task printed is untrusted. Templates escape it, and every
response carries a Content-Security-Policy that allows scripts and styles from
the app itself only (its own, inline in its pages, by their hashes), so nothing in
the data can run. The app answers only requests whose ``Host`` names it (``_hosts``:
no other site's page reads the ledger through DNS rebinding); bound to another host
than loopback, it also requires a random token (in the URL once, then a cookie). A
query parameter out of its range is a 400 with the reason (``_params``), never a 500.

Speed (issue #49: a 10,000-task run's page, first <= 500 ms, warm <= 100 ms in a
browser; ``bench/view.py``): templates are compiled before the first request; a page
holds its stylesheet and script (nothing else to fetch before it is drawn); the task
table is paged (``TASKS_PER_PAGE``); what is made from a summary is made once per
summary (``render.per_summary``); and a run that is not running answers 304 to a
browser holding its page or JSON (``_conditional``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evalledger.agents import parser_for
from evalledger.app import (
    Attempt,
    EverySearch,
    Line,
    Past,
    Reading,
    RunSearch,
    TranscriptPage,
    attempt_at,
    attempts,
    claimed_success,
    report_html,
    row_before,
    search_run,
    search_runs,
    snapshot_summary,
    summary_at,
    transcript,
    usage_curves,
    variant_bound,
    workspace_changes,
)
from evalledger.ledger import LedgerError
from evalledger.projections import RunSummary, TaskRow, compare_runs, diff_runs
from evalledger.render import (
    CLAIMED,
    STATIC,
    AttemptMark,
    TableQuery,
    compile_templates,
    conversation,
    neighbours,
    not_started,
    p_value_line,
    per_summary,
    power_line,
    render_junit,
    render_markdown,
    render_page,
    run_charts,
    runs_cost_pass,
    script,
    segment,
    stylesheet,
    summary_tags,
    usage_chart,
    with_marks,
)
from evalledger.statuses import ShownStatus

from ._hosts import HostGate, HostRule
from ._params import BadParameter, choice, table_query, variant_pairs, whole
from ._resources import (
    CompareView,
    DiffView,
    EverySearchView,
    ListedRun,
    Resource,
    RunList,
    RunView,
    SearchView,
    SummaryView,
    TaskTable,
    TaskView,
    Transcript,
)
from ._state import LedgerState, RunState, pages

RUNS_PER_PAGE = 50
# About a screenful of the table's box (80% of a 900 px window shows 23 rows): the rows
# are most of what a browser lays out of a run's page (100 of them were 1,200 of its
# 1,600 elements; bench/view.py).
TASKS_PER_PAGE = 25
LINES_PER_PAGE = 500
# A run-wide search shows this many matching lines at most (the first, in seq order).
SEARCH_LINES = 500
# ... and reads for about this long, then says where it stopped (a page stays fast).
SEARCH_SECONDS = 0.2
MAX_LINES_PER_PAGE = 5000
# A run's status as the runs page shows it (and filters by it).
RUN_STATUSES = tuple(s.value for s in ShownStatus)
# Scripts and styles from the app itself only: its own, served inline in each page (a
# page is drawn without waiting on another request), are allowed by their hashes
# (``_policy``), so no other inline script or style runs, whatever the data holds.
CSP = ("default-src 'none'; script-src 'self' {script}; style-src 'self' {style}; "
       "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")
# A downloaded report.html is one file with its stylesheet inline and no script.
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"
TOKEN_COOKIE = "evalledger_token"
# A response with an entity tag: the browser may keep it, and asks whether it is current
# each time (a 304 is the answer when it is).
REVALIDATE = "private, no-cache"
_TIME_TRAVEL_CACHE = 32
# Runs the run page offers to compare with (newest first); any other by URL.
COMPARE_CHOICES = 100


def create_app(ledger_path: str | Path, *, token: str | None = None,
               host: str = "127.0.0.1", allow_hosts: Iterable[str] = (),
               interval: float = 0.25, keepalive: float = 15.0) -> Starlette:
    """The viewer over one ledger file.

    Args:
        ledger_path: the ledger; opened read-only, never written.
        token: when given, every request must carry it (``?token=`` once, then a cookie).
        host, allow_hosts: where the server listens, and other names it is reached by:
            a request whose ``Host`` names neither (nor loopback, on loopback) is
            refused (see ``_hosts``).
        interval: seconds between two reads of what was appended.
        keepalive: seconds of quiet after which an event stream sends a comment (so a
            client, or a proxy, sees it is alive).
    """
    state = LedgerState(Path(ledger_path), interval=interval)
    views = _Views(state, keepalive)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(state.load)
        # Before the first request too: its page is not kept waiting on Jinja's compiler.
        await anyio.to_thread.run_sync(compile_templates)
        async with anyio.create_task_group() as group:
            group.start_soon(state.follow)
            try:
                yield
            finally:
                state.close_subscribers()
                group.cancel_scope.cancel()

    routes = [
        # Each page, and the resources it is drawn from: each has its JSON twin below.
        Route("/", _page(views.runs_page, views.runs)),
        Route("/runs/{run_id}", _page(views.run_page, views.run, views.tasks,
                                      validator=views.validator)),
        *(Route(f"/runs/{{run_id}}/{name}", _page(views.download, views.summary))
          for name in ("run.json", "run.md", "report.html", "junit.xml")),
        Route("/runs/{run_id}/tasks/{task_key:path}",
              _page(views.task_page, views.task, views.transcript)),
        Route("/runs/{run_id}/search", _page(views.search_page, views.search)),
        Route("/diff/{run_a}/{run_b}", _page(views.diff_page, views.diff)),
        Route("/compare", _page(views.compare_page, views.compare)),
        Route("/search", _page(views.search_every_page, views.search_every)),
        # The JSON twin of each resource: the same data function, rendered as JSON.
        Route("/api/runs", _as_json(views.runs)),
        Route("/api/runs/{run_id}", _as_json(views.run, validator=views.validator)),
        Route("/api/runs/{run_id}/summary", _as_json(views.summary, validator=views.validator)),
        Route("/api/runs/{run_id}/tasks", _as_json(views.tasks, validator=views.validator)),
        Route("/api/runs/{run_id}/tasks/{task_key:path}", _as_json(views.task)),
        Route("/api/runs/{run_id}/transcript/{task_key:path}", _as_json(views.transcript)),
        Route("/api/runs/{run_id}/search", _as_json(views.search)),
        Route("/api/search", _as_json(views.search_every)),
        Route("/api/diff/{run_a}/{run_b}", _as_json(views.diff)),
        Route("/api/compare", _as_json(views.compare)),
        Route("/api/stream", views.stream),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    rule = HostRule.listening_on(host, allow_hosts)  # before anything runs: a bad name raises
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: views.error, LedgerError: views.error,
                                        BadParameter: views.error})
    app.state.ledger = state
    gated: ASGIApp = _TokenGate(app, token) if token else app
    return _Headers(HostGate(gated, rule), _policy())  # type: ignore[return-value]


def _policy() -> str:
    """The Content-Security-Policy of the app's responses: ``CSP``, with the hashes of the
    stylesheet and script its pages hold inline."""
    return CSP.format(script=_hashed(script()), style=_hashed(stylesheet()))


def _hashed(text: str) -> str:
    """A CSP source allowing the inline element whose text is ``text`` and no other."""
    digest = hashlib.sha256(text.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


class _Views:
    """The route handlers. Async: they read the folds on the event loop thread, where the
    follower changes them; every SQLite read goes to a worker thread."""

    def __init__(self, state: LedgerState, keepalive: float) -> None:
        self.state = state
        self.keepalive = keepalive
        # Names this server in its validators: another process (a restart, another
        # ledger, other templates) never answers 304 to what this one served.
        self._epoch = secrets.token_hex(8)
        self._past: OrderedDict[tuple[str, int], Past] = OrderedDict()
        self._bound: OrderedDict[tuple[str, int], frozenset[str]] = OrderedDict()

    # -- helpers -------------------------------------------------------------------------

    def _run(self, request: Request) -> RunState:
        spec = request.path_params["run_id"]
        run = self.state.run(spec)
        if run is None:
            raise HTTPException(404, f"no run {spec!r} in {self.state.path.name}")
        return run

    def _at(self, request: Request, run: RunState) -> int | None:
        """``?at=``: an event number (one past the last means now).

        Raises:
            HTTPException: 404, the run did not exist yet at that event.
        """
        at = whole(request.query_params, "at", None)
        if at is not None and at < run.first_seq:
            raise _NotYet(run.run_id, at, run.first_seq)
        return at

    async def _anchored(self, run: RunState, summary: RunSummary,
                        at: int | None) -> RunSummary:
        """``summary`` as ``run.json`` holds it: with the anchor read from the ledger."""
        anchor = await self._read(lambda ledger: ledger.anchor(run.run_id, until_seq=at))
        # The same anchored copy while the anchor is the same: what is made from it (the
        # summary API's JSON) is then made once.
        key = ("anchored", None if anchor is None else anchor.model_dump_json())
        return per_summary(summary, key, lambda: summary.anchored(anchor))

    async def _folded(self, run: RunState, at: int | None) -> Past:
        if at is None or at >= self.state.seq:
            if not run.has_summary and run.shown_status is not ShownStatus.RUNNING:
                # A run that is over: its summary read from its snapshot in a worker
                # thread (a 100,000-task run's takes 0.9 s; built on the event loop from
                # its fold, 1.9 s in which no other page is served).
                seq, through = run.last_seq, self.state.seq
                read = await self._read(snapshot_summary, run.run_id, until_seq=through)
                if read is not None:
                    run.adopt(read, seq)
            return Past(run.summary(), run.running)
        key = (run.run_id, at)
        if key not in self._past:
            self._past[key] = await self._read(summary_at, run.run_id, at)
            while len(self._past) > _TIME_TRAVEL_CACHE:
                self._past.popitem(last=False)
        self._past.move_to_end(key)
        return self._past[key]

    async def _variant_bound(self, run: RunState, summary: RunSummary,
                             at: int | None) -> frozenset[str]:
        """The drifted environment fields that the run's variants define (not drift)."""
        if not summary.version_drift or len(summary.variants) < 2:
            return frozenset()
        key = (run.run_id, at if at is not None else run.last_seq)
        if key not in self._bound:
            self._bound[key] = await self._read(variant_bound, summary, at)
            while len(self._bound) > _TIME_TRAVEL_CACHE:
                self._bound.popitem(last=False)
        return self._bound[key]

    def validator(self, request: Request) -> str | None:
        """An entity tag for what a run's page or JSON answers ``request``; None while the
        run is running (an idle time changes with the clock) or unknown.

        A run that is not running is drawn from the folds as read up to ``seq`` and from
        the URL alone (its page shows ``seq`` too), so the same ``seq`` and URL answer
        the same bytes: a browser that holds them is told 304, and nothing is read or
        rendered again until something is appended to the ledger.
        """
        run = self.state.run(request.path_params["run_id"])
        if run is None or run.shown_status is ShownStatus.RUNNING:
            return None
        said = f"{self._epoch} {self.state.seq} {request.url.path}?{request.url.query}"
        return f'"{hashlib.blake2b(said.encode(), digest_size=16).hexdigest()}"'

    async def _read(self, query: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            with self.state.readers.ledger() as ledger:
                return query(ledger, *args, **kwargs)

        return await anyio.to_thread.run_sync(call)

    def _page(self, template: str, **context: Any) -> HTMLResponse:
        # ``seq``: how far the folds had read when the page was made. A live page compares
        # it with the stream's hello: a change folded in between (before the page
        # subscribed) is no notice it will ever get, so it refreshes once.
        return HTMLResponse(render_page(template, mode="app", ledger_name=self.state.path.name,
                                   seq=self.state.seq, **context))

    # -- data: one function per resource, rendered as a page or as JSON by its route -------

    async def runs(self, request: Request) -> RunList:
        """The runs, newest first, filtered by ``?q=`` (an id, experiment or model holds
        it) and ``?status=``, a page of them (``?page=``)."""
        params = request.query_params
        q = params.get("q", "").strip().lower()
        status = choice(params, "status", RUN_STATUSES)
        page = whole(params, "page", 1, low=1)
        found = [(run, shown) for run, shown in
                 ((run, run.shown_status) for run in self.state.newest_first())
                 if (not status or shown == status) and (not q or _mentions(run, q))]
        start = (page - 1) * RUNS_PER_PAGE
        listed = [ListedRun.model_construct(**{**dict(run.headline()), "status": shown,
                                               "imported": run.imported is not None})
                  for run, shown in found[start:start + RUNS_PER_PAGE]]
        return RunList.model_construct(seq=self.state.seq, total=len(found), page=page,
                                       pages=pages(len(found), RUNS_PER_PAGE), runs=listed,
                                       q=q, status=status)

    async def run(self, request: Request, *, anchored: bool = True) -> RunView:
        """A run now, or as of ``?at=``, with what its page says of it; ``anchored``: its
        summary as ``run.json`` holds it (the JSON's; the page shows no anchor and reads
        none)."""
        run = self._run(request)
        at = self._at(request, run)
        past = await self._folded(run, at)
        summary = past.summary
        bound = await self._variant_bound(run, summary, at)
        if anchored:
            summary = await self._anchored(run, summary, at)
        previous = self.state.previous(run)
        return RunView.model_construct(
            run_id=run.run_id, status_shown=run.shown_status if at is None else summary.status,
            first_seq=run.first_seq, last_seq=run.last_seq, imported=run.imported,
            summary=summary, tags=summary_tags(summary), at=at, running=past.running,
            liveness=run.liveness() if at is None else {},
            not_started=not_started(summary), variant_bound=bound,
            previous=previous.run_id if previous else None,
            others=[r.run_id for r in self.state.newest_first()
                    if r is not run][:COMPARE_CHOICES])

    async def tasks(self, request: Request) -> TaskTable:
        """A page of a run's task table (now, or as of ``?at=``), as ``?outcome= &tag=
        &variant= &q= &sort= &dir= &page=`` ask (``TableQuery``)."""
        table = table_query(request.query_params)
        run = self._run(request)
        rows = await self._rows(table, run,
                                (await self._folded(run, self._at(request, run))).summary)
        start = (table.page - 1) * TASKS_PER_PAGE
        return TaskTable.model_construct(
            total=len(rows), page=table.page, pages=pages(len(rows), TASKS_PER_PAGE),
            tasks=rows[start:start + TASKS_PER_PAGE], query=table, listed=table.as_list())

    async def summary(self, request: Request) -> SummaryView:
        """A run's summary as ``run.json`` holds it (now, or as of ``?at=``)."""
        run = self._run(request)
        at = self._at(request, run)
        summary = (await self._folded(run, at)).summary
        return SummaryView.model_construct(summary=await self._anchored(run, summary, at))

    async def task(self, request: Request) -> TaskView:
        """A task of a run, as its page shows it: its row and its attempts, what each
        attempt's agent said of how it ended and its usage over time, where it sits in
        the list it was opened from (``?list=``: that table's query; the whole table,
        failures first, without) and what its agent changed (``?files=``: a page of the
        files). A key the run plans has one before it starts; 404 for a key the run does
        not know."""
        task = await self._attempts(await self._task(request))
        listed = table_query(dict(parse_qsl(request.query_params.get("list", ""))))
        run = self._run(request)
        rows = await self._rows(listed, run, (await self._folded(run, None)).summary)
        # Read once no task of the run is running (as the page always has).
        changes = (await self._read(workspace_changes, task.run_id, task.task_key,
                                    page=whole(request.query_params, "files", 1, low=1))
                   if task.attempts and not run.running else None)
        return task.model_copy(update={"neighbours": neighbours(rows, task.task_key),
                                       "listed": listed, "changes": changes})

    async def _task(self, request: Request) -> TaskView:
        """``task``'s row and attempts alone: what a live page's tail reads each time."""
        run = self._run(request)
        key = request.path_params["task_key"]
        tries: list[Attempt] = await self._read(attempts, run.run_id, key)
        row = run.summary_fold.row(key)
        planned = key in run.summary_fold.planned
        if not tries and row is None and not planned:
            raise HTTPException(404, f"run {run.run_id} has no task {key!r}")
        return TaskView.model_construct(
            run_id=run.run_id, task_key=key, row=row, attempts=tries,
            running=key in run.running, run_status=run.shown_status, planned=planned)

    async def _attempts(self, task: TaskView) -> TaskView:
        """``task`` with what its attempts' transcripts say besides their lines: each
        one's usage over time and its agent's last word on how it ended."""
        if not any(parser_for(t.stream_format) for t in task.attempts):  # nothing to read
            return task
        reading: Reading = await self._read(
            usage_curves, task.run_id, task.task_key, task.attempts)
        return task.model_copy(update={"usage_curves": reading.curves,
                                       "claims": reading.finals,
                                       "failing_results": reading.failing})

    async def transcript(self, request: Request, task: TaskView | None = None, *,
                         limit: int | None = None) -> Transcript:
        """A page of a task's transcript: ``?after=``/``?before=`` a seq, ``?q=`` text,
        ``?limit=`` lines; ``task``: the task's attempts, when the caller has them;
        ``limit``: the caller's own page size instead of ``?limit=`` (the task page's:
        its links do not carry one)."""
        params = request.query_params
        after, before = _lines_after(request), _lines_before(request)
        if limit is None:
            limit = whole(params, "limit", LINES_PER_PAGE, low=1, high=MAX_LINES_PER_PAGE)
        search = params.get("q", "")
        if task is None:
            run_id, key = self._run(request).run_id, request.path_params["task_key"]
            tries = await self._read(attempts, run_id, key)
        else:
            run_id, key, tries = task.run_id, task.task_key, task.attempts
        page: TranscriptPage = await self._read(
            transcript, run_id, key, tries,
            search=search or None, after=after, before=before, limit=limit)
        return Transcript.model_construct(
            more_before=page.more_before, more_after=page.more_after, lines=page.lines,
            search=search, after=after)

    async def search(self, request: Request) -> SearchView:
        """The transcript lines of a run after ``?after=`` that hold ``?q=`` (the first
        ``SEARCH_LINES``, read for ``SEARCH_SECONDS`` at most), by task; nothing is read
        for an empty ``q``."""
        run = self._run(request)
        q = request.query_params.get("q", "")
        after = whole(request.query_params, "after", 0)
        found = (await self._read(search_run, run.run_id, q, after=after,
                                  limit=SEARCH_LINES, seconds=SEARCH_SECONDS)
                 if q else RunSearch([], 0))
        return SearchView.model_construct(run_id=run.run_id, q=q, after=after,
                                          lines=found.lines, next=found.after,
                                          timed=found.timed, tasks=found.tasks)

    async def search_every(self, request: Request) -> EverySearchView:
        """The transcript lines of every run that hold ``?q=``, newest run first, from
        ``?run=``'s seq ``?after=`` on (the first ``SEARCH_LINES``, read for
        ``SEARCH_SECONDS`` at most); nothing is read for an empty ``q``."""
        q = request.query_params.get("q", "")
        order = [r.run_id for r in self.state.newest_first()]
        start = request.query_params.get("run") or None
        if start is not None:
            run = self.state.run(start)
            if run is None:
                raise HTTPException(404, f"no run {start!r} in {self.state.path.name}")
            start = run.run_id
        after = whole(request.query_params, "after", 0)
        if start is None:  # ``after`` is a seq of the run it goes on in: none, it starts anew
            after = 0
        found = (await self._read(search_runs, order[order.index(start):]
                                  if start in order else order, q, after=after,
                                  limit=SEARCH_LINES, seconds=SEARCH_SECONDS)
                 if q else EverySearch([], 0))
        return EverySearchView.model_construct(
            q=q, run=start, after=after, lines=found.lines, next_run=found.next_run,
            next_after=found.next_after, timed=found.timed, runs=found.runs)

    async def diff(self, request: Request) -> DiffView:
        """What changed from run A to run B (``/diff/A/B``), by their summaries now."""
        runs = []
        for name in ("run_a", "run_b"):
            run = self.state.run(request.path_params[name])
            if run is None:
                raise HTTPException(404, f"no run {request.path_params[name]!r}")
            runs.append(run.summary())
        pairs = variant_pairs(request.query_params.getlist("variants"),
                              [v.variant_id for v in runs[0].variants],
                              [v.variant_id for v in runs[1].variants])
        # The bootstrap's resamples take a few milliseconds: off the event loop.
        paired = await anyio.to_thread.run_sync(compare_runs, runs[0], runs[1])
        return DiffView.model_construct(
            result=diff_runs(runs[0], runs[1], pairs), paired=paired,
            variants_a=[v.variant_id for v in runs[0].variants],
            variants_b=[v.variant_id for v in runs[1].variants])

    # -- pages -----------------------------------------------------------------------------

    async def runs_page(self, request: Request) -> Response:
        fragment = choice(request.query_params, "fragment", ("live",))
        listing = await self.runs(request)
        context = dict(runs=listing.runs, total=listing.total, page=listing.page,
                       pages=listing.pages, q=listing.q, status=listing.status)
        if fragment == "live":
            return self._page("_runs_table.html", **context)
        live = _local(str(request.url.include_query_params(fragment="live")))
        return self._page("runs.html", live_url=live, statuses=RUN_STATUSES,
                          cost_pass=runs_cost_pass(listing.runs), **context)

    async def run_page(self, request: Request) -> Response:
        fragment = choice(request.query_params, "fragment", ("live",))
        table = await self.tasks(request)  # first: a bad table query is a 400, whatever the run
        view = await self.run(request, anchored=False)
        summary = view.summary
        context = dict(
            summary=summary, status=view.status_shown, charts=run_charts(summary),
            rows=table.tasks, table=table.query, total_rows=table.total, pages=table.pages,
            listed=table.listed, tags=view.tags, at=view.at, first_seq=view.first_seq,
            last_seq=view.last_seq, running=view.running, liveness=view.liveness,
            not_started=view.not_started, variant_bound=view.variant_bound,
            imported=view.imported, previous=view.previous, others=view.others,
        )
        if fragment == "live":
            return self._page("_run_live.html", **context)
        live = _local(str(request.url.include_query_params(fragment="live")))
        return self._page("run.html", live_url=live, **context)

    async def search_page(self, request: Request) -> Response:
        view = await self.search(request)
        return self._page("search.html", found=view)

    async def search_every_page(self, request: Request) -> Response:
        view = await self.search_every(request)
        return self._page("search_every.html", found=view)

    async def compare(self, request: Request) -> CompareView:
        """``/compare?run=A&run=B``: the diff of two runs, the older first (as the runs
        page's boxes and the run page's menu ask for it); with any other number of runs,
        the runs to pick two from."""
        picked = []
        for spec in request.query_params.getlist("run"):
            if not spec:
                continue
            run = self.state.run(spec)
            if run is None:
                raise HTTPException(404, f"no run {spec!r} in {self.state.path.name}")
            if run not in picked:
                picked.append(run)
        if len(picked) == 2:
            order = self.state.order
            older, newer = sorted(picked, key=lambda r: order.index(r.run_id)
                                  if r.run_id in order else len(order))
            return CompareView.model_construct(
                runs=[], picked=[r.run_id for r in picked],
                diff=f"/diff/{segment(older.run_id)}/{segment(newer.run_id)}")
        return CompareView.model_construct(
            runs=[r.headline() for r in self.state.newest_first()],
            picked=[r.run_id for r in picked], diff=None)

    async def compare_page(self, request: Request) -> Response:
        view = await self.compare(request)
        if view.diff is not None:
            return RedirectResponse(view.diff, status_code=303)
        return self._page("compare.html", runs=view.runs, picked=view.picked)

    async def download(self, request: Request) -> Response:
        """The run's summary as a file: ``run.json``, ``run.md``, ``junit.xml`` or the
        self-contained ``report.html``."""
        view = await self.summary(request)
        summary = view.summary
        name = request.url.path.rsplit("/", 1)[-1]
        headers = {"Content-Disposition": f'inline; filename="{summary.run_id}-{name}"'}
        if name == "run.json":
            response = view.json_response()
            response.headers.update(headers)
            return response
        if name == "run.md":
            return PlainTextResponse(render_markdown(summary), media_type="text/markdown",
                                     headers=headers)
        if name == "junit.xml":
            return Response(render_junit(summary), media_type="application/xml",
                            headers=headers)
        page = await self._read(report_html, summary)
        return HTMLResponse(page,
                            headers={**headers, "Content-Security-Policy": REPORT_CSP})

    async def task_page(self, request: Request) -> Response:
        params = request.query_params
        fragment = choice(params, "fragment", ("attempts", "tail"))
        asked = choice(params, "view", ("raw", "conversation"))
        if fragment == "attempts":  # a live page's attempts: the neighbours read no more
            return self._page("_attempts.html",
                              **_attempt_context(await self._attempts(await self._task(
                                  request))))
        task = await (self._task(request) if fragment == "tail" else self.task(request))
        page = await self.transcript(request, task, limit=LINES_PER_PAGE)
        # A conversation by default wherever an attempt's agent has a parser (agents).
        readable = any(parser_for(t.stream_format) for t in task.attempts)
        default = "conversation" if readable else "raw"
        view = asked if readable and asked else default
        if fragment == "tail":
            return self._tail(page, task.attempts, view)
        here = f"/runs/{segment(task.run_id)}/tasks/{segment(task.task_key)}"
        rows = await self._marked(task, page)
        return self._page(
            "task.html", run_id=task.run_id, task_key=task.task_key, page=page,
            search=page.search, view=view, shown_view="" if view == default else view,
            here=here, readable=readable, rows=rows,
            marks=[r.number for r in rows if isinstance(r, AttemptMark)],
            items=(conversation(rows, task.attempts, from_start=not page.more_before,
                                to_end=not page.more_after)
                   if view == "conversation" else []),
            follow=not page.search and not page.more_after, after_seq=page.after,
            tail_url=url_with(f"{here}?fragment=tail", view=view),
            attempts_url=f"{here}?fragment=attempts", planned=task.planned,
            nav=task.neighbours, listed=task.listed, changes=task.changes,
            **_attempt_context(task),
        )

    async def _rows(self, table: TableQuery, run: RunState,
                    summary: RunSummary) -> list[TaskRow]:
        """The rows ``table`` keeps; for ``claimed``, those whose agent said it ended well
        (read from the transcripts, once per summary)."""
        if CLAIMED not in table.outcomes:
            return table.rows_of(summary)
        claimed = await self._read(lambda ledger: per_summary(
            summary, "claimed_success", lambda: claimed_success(ledger, run.run_id)))
        return table.rows_of(summary, claimed)

    def _tail(self, page: Transcript, tries: list[Attempt], view: str) -> Response:
        """What a live task page appends: the rows after the last one it shows."""
        after = page.after
        rows = with_marks(page.lines, tries, attempt_at(tries, after)
                          if after else None)
        response = self._page("_lines.html" if view == "raw" else "_conversation.html",
                              rows=rows, items=conversation(rows, tries, from_start=not after,
                                                                 to_end=not page.more_after))
        response.headers["X-Last-Seq"] = str(page.last_seq or after)
        response.headers["X-More"] = "1" if page.more_after else "0"
        return response

    async def _marked(self, task: TaskView,
                      page: Transcript) -> list[Line | AttemptMark]:
        """The page's lines with attempt marks: the attempt of the row before the page
        (a page inside an attempt repeats no mark) is read when there is one."""
        before_page = (await self._read(row_before, task.run_id, task.task_key,
                                        page.first_seq)
                       if page.more_before else None)
        return with_marks(page.lines, task.attempts, None if before_page is None
                          else attempt_at(task.attempts, before_page))

    async def diff_page(self, request: Request) -> Response:
        view = await self.diff(request)
        return self._page("diff.html", result=view.result, tasks=view.tasks_by_change(),
                          paired=view.paired, p_value_line=p_value_line(view.paired),
                          power_line=power_line(view.paired), variants_a=view.variants_a,
                          variants_b=view.variants_b)

    async def error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            status, message = exc.status_code, exc.detail
        else:  # a parameter out of range is the request's fault; a ledger error is ours
            status, message = (400 if isinstance(exc, BadParameter) else 503), str(exc)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        links = exc.links if isinstance(exc, _NotYet) else []
        return HTMLResponse(render_page("error.html", mode="app",
                                        ledger_name=self.state.path.name,
                                        status_code=status, message=message, links=links),
                            status_code=status)

    async def stream(self, request: Request) -> Response:
        """Server-sent events: a ``change`` whenever something was appended."""

        async def events() -> AsyncIterator[str]:
            async with self.state.subscribe() as changes:
                yield f"event: hello\ndata: {json.dumps({'seq': self.state.seq})}\n\n"
                while True:
                    with anyio.move_on_after(self.keepalive) as waiting:
                        try:
                            change = await changes.receive()
                        except anyio.EndOfStream:
                            return  # the server is stopping
                    if waiting.cancelled_caught:
                        yield ": still here\n\n"
                        continue
                    yield f"event: change\ndata: {json.dumps(change.message())}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})


def _attempt_context(task: TaskView) -> dict[str, Any]:
    """What the task page's attempts draw from ``task``: the running pill (the page's
    filters take a set of running keys), the claims, the usage charts, the definitions."""
    tries, curves = task.attempts, task.usage_curves
    return dict(
        row=task.row, tries=tries, running={task.task_key} if task.running else frozenset(),
        run_status=task.run_status, finals=task.claims, failing=task.failing_results,
        usage_charts={t.number: usage_chart(t, curves.get(t.number)) for t in tries
                      if t.usage or curves.get(t.number)},
        definitions={t.number: json.dumps(t.started.definition, indent=2,
                                          ensure_ascii=False, sort_keys=True)
                     for t in tries},
    )


class _NotYet(HTTPException):
    """``?at=`` names an event from before the run existed: nothing to show but that."""

    def __init__(self, run_id: str, at: int, first_seq: int) -> None:
        super().__init__(404, f"run {run_id} did not exist yet at event {at}: its first "
                              f"event is {first_seq}")
        base = f"/runs/{segment(run_id)}"
        self.links = [(f"{base}?at={first_seq}", f"the run as it began (event {first_seq})"),
                      (base, "the run now")]


Validator = Callable[[Request], str | None]


def _as_json(data: Callable[[Request], Awaitable[Resource]], *,
             validator: Validator | None = None) -> Callable[[Request], Awaitable[Response]]:
    """A route answering a resource's data as JSON (``validator``: see ``_conditional``)."""

    async def answer(request: Request) -> Response:
        return (await data(request)).json_response()

    async def endpoint(request: Request) -> Response:
        return await _conditional(request, answer, validator)

    endpoint.resource = data  # type: ignore[attr-defined]  # which data it answers (tests)
    return endpoint


def _page(page: Callable[[Request], Awaitable[Response]],
          *data: Callable[..., Awaitable[Resource]], validator: Validator | None = None,
          ) -> Callable[[Request], Awaitable[Response]]:
    """A route answering ``page``, drawn from the resources ``data`` return (each one's
    JSON twin is its ``_as_json`` route; ``validator``: see ``_conditional``)."""

    async def endpoint(request: Request) -> Response:
        return await _conditional(request, page, validator)

    endpoint.resources = data  # type: ignore[attr-defined]  # what it is drawn from (tests)
    return endpoint


async def _conditional(request: Request, answer: Callable[[Request], Awaitable[Response]],
                       validator: Validator | None) -> Response:
    """``answer(request)`` with its entity tag (``validator``'s; None: it has none), which
    the browser keeps and asks about each time (``no-cache``); 304 Not Modified when the
    request names that tag already (``If-None-Match``), and nothing else is done.

    The tag is taken before the answer is made: if the ledger moves on meanwhile, the
    answer is newer than its tag says, and the next request is answered in full."""
    tag = validator(request) if validator is not None else None
    if tag is not None and tag in _named(request.headers.get("if-none-match", "")):
        return Response(status_code=304, headers={"ETag": tag, "Cache-Control": REVALIDATE})
    response = await answer(request)
    if tag is not None and response.status_code == 200:
        response.headers["ETag"] = tag
        response.headers["Cache-Control"] = REVALIDATE
    return response


def _named(header: str) -> set[str]:
    """The entity tags an ``If-None-Match`` names, weak ones as strong (RFC 9110: it
    compares weakly). Its ``*`` is not one: a tag is only ever given with a page that
    was answered, so a request that would be refused (a 400) is never told 304."""
    return {t.strip().removeprefix("W/") for t in header.split(",")}


def _mentions(run: RunState, q: str) -> bool:
    """Whether ``q`` (lower case) is in the run's id, experiment or a model's name."""
    head = run.headline()
    return any(q in (text or "").lower() for text in
               (head.run_id, head.experiment_id, *head.models))


def _same_token(given: str, token: str) -> bool:
    """Whether a request's token is the viewer's, in constant time: compared as UTF-8
    (compare_digest refuses a str beyond ASCII, and any caller may send one)."""
    return secrets.compare_digest(given.encode("utf-8", "surrogateescape"),
                                  token.encode("utf-8"))


def url_with(url: str, **query: str) -> str:
    """``url`` with the query parameters that have a value added."""
    extra = "&".join(f"{k}={v}" for k, v in query.items() if v)
    return f"{url}&{extra}" if extra else url


def _lines_after(request: Request) -> int:
    """``?after=SEQ``: the transcript page after that event (0: the first page)."""
    return whole(request.query_params, "after", 0)


def _lines_before(request: Request) -> int | None:
    """``?before=SEQ``: the page before that event; -1 (or 0): the last page."""
    return whole(request.query_params, "before", None, low=-1)


def _local(url: str) -> str:
    """A URL of this app as a path and query (the page fetches it from its own origin)."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


class _Headers:
    """Security headers on every response (unless a route set its own policy)."""

    def __init__(self, app: ASGIApp, policy: str) -> None:
        self.app = app
        self.policy = policy.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", self.policy))
                headers += [(b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"no-referrer"),
                            (b"x-frame-options", b"DENY")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class _TokenGate:
    """Every request must carry the token: ``?token=`` (then kept in a cookie) or the cookie."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and _same_token(given, self.token):
            await self.app(scope, receive, _setting_cookie(send, self.token))
            return
        cookie = request.cookies.get(TOKEN_COOKIE)
        if cookie is not None and _same_token(cookie, self.token):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "this viewer needs its access token: open the URL `evalledger view` printed",
            status_code=403)
        await response(scope, receive, send)


def _setting_cookie(send: Send, token: str) -> Callable[[Message], Awaitable[None]]:
    async def with_cookie(message: Message) -> None:
        if message["type"] == "http.response.start":
            cookie = f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"set-cookie", cookie.encode())]}
        await send(message)

    return with_cookie
