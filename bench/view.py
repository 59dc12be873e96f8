"""Viewer speed: its pages on a big ledger in a browser and in server time, the HTML
report, memory.

Builds, in a temporary folder, the rebuild bench's data (one run of N tasks with M
output lines each, default 10,000 x 100: ~1,030,000 events) plus 99 small runs
and one run whose single task printed T lines (default 100,000). Then:

- the big run's page in a browser (issue #49): the real server (``evalledger view``,
  hypercorn) on the ledger, headless Chromium through Playwright. The first load (the
  server's first of the page, a fresh browser context: nothing cached) and warm loads
  (the same page again in that context, median of the repeats), each from navigation
  start to the load event and to the first frame drawn with the task table's first
  row, the later of the two quoted (a table filled in after the load event counts);
  beside them the viewer's smallest page (a 404) warm, what any page costs on this
  machine. Targets: first <= 500 ms, warm <= 100 ms. Without Chromium or Playwright:
  one line why, and the rest goes on;
- in this process, through the ASGI app (no network: what is timed is the server's
  work): the server's start (it folds every run once, and compiles its templates);
  ``/`` (100 runs), the big run's page, its task table filtered (one status; two and
  a failure kind), a task page of it, a search of every transcript of it (a rare text
  and a common one), the transcript's first and last page and a search in it, the
  summary API: first request, then the median of repeats. Target: every page under
  300 ms of server time once the server has read the ledger;
- the HTML report of the big run: size and build time;
- peak RSS of a fresh process rendering the transcript page, for T/10 and T lines
  (flat: a page reads 500 lines, whatever the transcript's length).

Run: python bench/view.py [--tasks N] [--lines M] [--transcript T] [--repeats R]
[--no-browser]. Not part of the tests.
"""

from __future__ import annotations

import argparse
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from evalledger.app import report_html
from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
    utc_now,
)
from evalledger.projections import SummaryFold, fold
from evalledger.statuses import FinalStatus
from evalledger.viewer import create_app

sys.path.insert(0, str(Path(__file__).parent))
from rebuild import RUN, build

TARGET_MS = 300.0
BROWSER_TARGETS_MS = (500.0, 100.0)  # first, warm (issue #49)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
LONG_RUN, LONG_KEY = "transcript-run", "default/chatty/00"


def add_small_runs(path: Path, runs: int) -> None:
    with Ledger(path) as ledger:
        for r in range(runs):
            run_id = f"small-{r:03d}"
            keys = [f"default/t{i}/00" for i in range(10)]
            batch: list = [RunStarted(run_id=run_id, planned=keys)]
            for i, key in enumerate(keys):
                batch.append(TaskStarted(run_id=run_id, task_key=key, task_id=f"t{i}"))
                batch += [TaskOutput(run_id=run_id, task_key=key, line=f"l{n}", n=n)
                          for n in range(1, 6)]
                status = FinalStatus.SUCCESS if i % 3 else FinalStatus.FAILURE
                batch.append(TaskCompleted(run_id=run_id, task_key=key, final_status=status,
                                           category=status.category, duration_seconds=1.0))
            batch.append(RunFinished(run_id=run_id, status="completed"))
            ledger.append(batch)


def add_transcript_run(path: Path, lines: int, run_id: str = LONG_RUN) -> None:
    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id=run_id, planned=[LONG_KEY]),
                       TaskStarted(run_id=run_id, task_key=LONG_KEY, task_id="chatty")])
        ts = utc_now()
        for start in range(1, lines + 1, 10_000):
            ledger.append([TaskOutput.encoded(run_id, LONG_KEY, ts, "stdout",
                                              f"line {n} needle-{n % 997}", n, False)
                           for n in range(start, min(lines, start + 9_999) + 1)])
        ledger.append([TaskCompleted(run_id=run_id, task_key=LONG_KEY,
                                     final_status=FinalStatus.SUCCESS, category="succeeded"),
                       RunFinished(run_id=run_id, status="completed")])


def timed(client: TestClient, url: str, repeats: int) -> tuple[float, float]:
    """Milliseconds of the first request, and the median of the repeats after it."""
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code, response.text[:200])
    return times[0], statistics.median(times[1:])


RSS_PROBE = """
import sys
from starlette.testclient import TestClient
from evalledger.viewer import create_app
with TestClient(create_app(sys.argv[1])) as client:
    for url in ("/runs/{run}/tasks/{key}", "/runs/{run}/tasks/{key}?before=-1"):
        assert client.get(url).status_code == 200
# VmHWM, not ru_maxrss: a forked child inherits its parent's high-water mark there.
print([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1])
"""


def peak_rss_mib(path: Path, run_id: str) -> float:
    code = RSS_PROBE.replace("{run}", run_id).replace("{key}", LONG_KEY)
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=True)
    return int(done.stdout.split()[-1]) / 1024


@contextmanager
def viewer(path: Path) -> Iterator[str]:
    """``evalledger view`` over ``path`` as a real process (hypercorn, as a user runs it);
    yields its URL once it listens (it has read the ledger then), stops it with Ctrl-C."""
    process = subprocess.Popen([sys.executable, "-m", "evalledger.cli", "--ledger", str(path),
                                "view", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 300)
        found = re.search(r"http://\S+", process.stdout.readline() if ready else "")
        assert found, "evalledger view printed no URL"
        yield found.group(0).rstrip("/")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        finally:
            process.kill()


@dataclass
class Load:
    """One page load, in milliseconds from navigation start."""

    loaded: float
    """To the load event's end."""
    table: float
    """To the end of the first frame drawn with the task table's first row in the page."""

    @property
    def shown(self) -> float:
        """When the page is there to read: both."""
        return max(self.loaded, self.table)


# Installed in every page before its own script: at each frame, whether the task table
# has a row yet; once one has, the next frame's start is when that one was drawn. It
# reads no layout (which would force the work it measures).
WATCH = """(() => {
  const marks = window.evalledgerBench = {};
  function frame() {
    if (document.querySelector('#tasks tbody tr') === null) {
      requestAnimationFrame(frame);
      return;
    }
    requestAnimationFrame(() => { marks.table = performance.now(); });
  }
  requestAnimationFrame(frame);
})();"""
MEASURED = """() => { const nav = performance.getEntriesByType('navigation')[0];
  const table = window.evalledgerBench && window.evalledgerBench.table;
  return nav !== undefined && nav.loadEventEnd > 0 && table !== undefined
         && [nav.loadEventEnd, table]; }"""


def load(page: Any, url: str) -> Load:
    """One load of ``url`` in ``page``, timed by the page itself. Nothing is asked of the
    page until it has loaded and had time to draw: Playwright's own script, which it
    evaluates in a page on the first question, would be timed too (18 ms in a trace)."""
    page.goto(url, wait_until="load")
    for _ in range(200):
        time.sleep(0.1)
        measured = page.evaluate(MEASURED)
        if measured:
            loaded, table = measured
            return Load(loaded=loaded, table=table)
    raise AssertionError(f"{url}: no task table drawn in 20 s")


@dataclass
class InBrowser:
    """The run page in a browser: its first load, the warm ones after it, what the
    viewer's smallest page (a 404: the same stylesheet and script, no run) takes warm on
    this machine, and the page's size."""

    first: Load
    warm: list[Load]
    floor: list[float]
    """The smallest page's warm loads, to the load event."""
    html_bytes: int


def in_browser(base: str, repeats: int) -> InBrowser | str:
    """The run page of the viewer at ``base`` in headless Chromium (``no_browser`` said
    it is there): its first load in a fresh context, then ``repeats`` loads of it again
    in that context; or why it could not be measured."""
    from playwright.sync_api import Error, sync_playwright

    url, missing = f"{base}/runs/{RUN}", f"{base}/runs/no-such-run"
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except Error as e:
            return f"Chromium did not start: {str(e).splitlines()[0]}"
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.add_init_script(WATCH)
            page = context.new_page()
            first = load(page, url)
            size = page.evaluate(SIZE)
            warm = [load(page, url) for _ in range(repeats)]
            floor = []
            for _ in range(repeats + 1):
                page.goto(missing, wait_until="load")
                floor.append(page.evaluate(LOADED))
            return InBrowser(first, warm, floor[1:], size)
        finally:
            browser.close()


SIZE = "performance.getEntriesByType('navigation')[0].decodedBodySize"
LOADED = "performance.getEntriesByType('navigation')[0].loadEventEnd"


def no_browser() -> str | None:
    """Why the run page cannot be measured in a browser here; None: it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[test]')"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


def browser_lines(path: Path, tasks: int, repeats: int) -> list[str]:
    """What the bench prints of the big run's page in a browser."""
    missing = no_browser()
    if missing is not None:
        return [f"run page in a browser: not measured: {missing}"]
    with viewer(path) as base:
        measured = in_browser(base, repeats)
    if isinstance(measured, str):
        return [f"run page in a browser: not measured: {measured}"]
    first, warm = measured.first, measured.warm
    return [
        f"run page of {tasks:,} tasks in a browser: first {first.shown:.0f} ms, "
        f"warm {statistics.median(w.shown for w in warm):.0f} ms "
        f"(targets <= {BROWSER_TARGETS_MS[0]:.0f} / <= {BROWSER_TARGETS_MS[1]:.0f} ms)",
        f"  load event: first {first.loaded:.0f} ms, warm "
        f"{statistics.median(w.loaded for w in warm):.0f} ms; task table shown: first "
        f"{first.table:.0f} ms, warm {statistics.median(w.table for w in warm):.0f} ms "
        f"(median of {repeats}); its HTML {measured.html_bytes:,} bytes",
        f"  the viewer's smallest page (a 404), warm: "
        f"{statistics.median(measured.floor):.0f} ms to its load event (this machine's floor)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--transcript", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-browser", action="store_true",
                        help="skip the run page in a browser")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalledger-bench-view-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        path, _ = build(root, args.tasks, args.lines, files=False)
        add_small_runs(path, 99)
        add_transcript_run(path, args.transcript)
        with Ledger(path, read_only=True) as ledger:
            events, runs = ledger.count(), len(ledger.run_ids())
        print(f"ledger: {events:,} events, {runs} runs "
              f"(built in {time.perf_counter() - start:.1f}s)")

        if not args.no_browser:  # its own server: the first load is that server's first
            for line in browser_lines(path, args.tasks, args.repeats):
                print(line)

        app = create_app(path)
        start = time.perf_counter()
        with TestClient(app) as client:
            loaded = (time.perf_counter() - start) * 1000
            print(f"server's start (its first read of the ledger, its templates compiled): "
                  f"{loaded:,.0f} ms")
            worst = 0.0
            pages = [
                (f"/ ({runs} runs)", "/"),
                (f"run page ({args.tasks:,} tasks)", f"/runs/{RUN}"),
                ("run page, tasks filtered and sorted",
                 f"/runs/{RUN}?outcome=failed&sort=duration&dir=desc&page=3"),
                ("run page, two statuses and a failure kind",
                 f"/runs/{RUN}?outcome=failed,error&kind=TIMEOUT&page=2"),
                ("a task page of the big run", f"/runs/{RUN}/tasks/default/t01234/00"),
                (f"search every transcript of {args.tasks:,} tasks (a rare text)",
                 f"/runs/{RUN}/search?q=line+7+of+task+9999"),
                ("search every transcript (a common text: the first 500)",
                 f"/runs/{RUN}/search?q=line+7+"),
                (f"task page, first of {args.transcript:,} lines",
                 f"/runs/{LONG_RUN}/tasks/{LONG_KEY}"),
                ("task page, last page", f"/runs/{LONG_RUN}/tasks/{LONG_KEY}?before=-1"),
                ("task page, a search", f"/runs/{LONG_RUN}/tasks/{LONG_KEY}?q=needle-996"),
                ("summary API (run.json)", f"/api/runs/{RUN}/summary"),
            ]
            for name, url in pages:
                first, then = timed(client, url, args.repeats)
                worst = max(worst, then)
                print(f"{name + ':':44} first {first:7.1f} ms, then {then:6.1f} ms (median)")
            print(f"slowest page once read: {worst:.1f} ms (target < {TARGET_MS:.0f} ms)")

        with Ledger(path, read_only=True) as ledger:
            summary = fold(SummaryFold(RUN), ledger.events(RUN, types=SummaryFold.TYPES)
                           ).summary()
            start = time.perf_counter()
            html = report_html(ledger, summary)
            took = time.perf_counter() - start
        print(f"report.html of {args.tasks:,} tasks: {len(html.encode()) / 1e6:.1f} MB "
              f"in {took:.2f} s")

        # Two ledgers that differ only in the transcript's length.
        short, long = root / "short.db", root / "long.db"
        add_transcript_run(short, args.transcript // 10)
        add_transcript_run(long, args.transcript)
        small, big = peak_rss_mib(short, LONG_RUN), peak_rss_mib(long, LONG_RUN)
        print(f"peak RSS rendering a transcript: {args.transcript // 10:,} lines {small:.1f} MiB, "
              f"{args.transcript:,} lines {big:.1f} MiB (ratio {big / small:.2f})")


if __name__ == "__main__":
    main()
