"""The viewer's pages over what a new user meets in the first hour (``scenes``): an agent
interrupted and resumed, ANSI colour, an experiment of two models run twice, an old run
imported last; and a run written while the pages are read."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalledger.app._reports import changed_files
from evalledger.ledger import (
    Ledger,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.projections import SummaryFold, fold
from evalledger.statuses import FinalStatus
from evalledger.viewer import create_app
from tests.cli.helpers import evalledger, write_tasks

from .scenes import AGENT_KEY, FIRST, IMPORTED, SECOND, Scenes


@pytest.fixture(scope="module")
def client(scenes: Scenes) -> Iterator[TestClient]:
    with TestClient(create_app(scenes.db, interval=0.05), follow_redirects=False) as opened:
        yield opened


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start):page.index(end, page.index(start))]


# -- 7: one order, newest by start time -------------------------------------------------------


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_runs_page_and_latest_follow_the_ledgers_own_order(
    client: TestClient, scenes: Scenes
) -> None:
    with Ledger(scenes.db, read_only=True) as ledger:
        order, latest = ledger.run_ids(), ledger.resolve_run("latest")
    listed = [r["run_id"] for r in client.get("/api/runs").json()["runs"]]
    assert listed == order[::-1]
    assert client.get("/api/runs/latest").json()["run_id"] == latest


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_old_run_imported_last_is_not_the_latest(client: TestClient) -> None:
    listed = [r["run_id"] for r in client.get("/api/runs").json()["runs"]]
    assert listed == [SECOND, FIRST, IMPORTED]
    assert client.get("/api/runs/latest").json()["run_id"] == SECOND


# -- 10: a page per planned key, running and not started apart --------------------------------


@pytest.fixture
def half_run(tmp_path: Path) -> Path:
    """A run recorded on another machine (so, for all this one knows, running): ``a``
    started, ``b`` not."""
    db = tmp_path / "ledger.db"
    with Ledger(db) as ledger:
        ledger.append([RunStarted(run_id="half", planned=["default/a/00", "default/b/00"],
                                  host={"hostname": "elsewhere.example", "pid": 4242}),
                       TaskStarted(run_id="half", task_key="default/a/00", task_id="a"),
                       TaskOutput(run_id="half", task_key="default/a/00", line="busy", n=1)])
    return db


def test_a_task_not_started_yet_has_a_page_and_reads_apart_from_a_running_one(
    half_run: Path
) -> None:
    with TestClient(create_app(half_run)) as client:
        page = client.get("/runs/half").text
        assert re.search(r'data-task="default/a/00".*?>RUNNING<', page, re.S)
        assert re.search(r'data-task="default/b/00".*?>NOT STARTED<', page, re.S)
        assert "UNFINISHED" not in page
        assert "(1 running, 1 not started)" in page
        waiting = client.get("/runs/half/tasks/default/b/00")
        assert waiting.status_code == 200
        assert "NOT STARTED" in waiting.text and "this page follows it" in waiting.text
        assert 'data-tail="' in waiting.text  # it follows the key live
        running = client.get("/runs/half/tasks/default/a/00").text
        assert ">RUNNING<" in running and ">busy<" in running
        assert client.get("/runs/half/tasks/default/zzz/00").status_code == 404


# -- 11: compare two runs from the UI; diff rows link both sides -------------------------------


def test_two_runs_picked_on_the_runs_page_land_on_their_diff(client: TestClient) -> None:
    runs = client.get("/").text
    assert '<form id="compare"' in runs and 'action="/compare"' in runs
    assert f'name="run" value="{FIRST}" form="compare"' in runs
    for pair in ([FIRST, SECOND], [SECOND, FIRST]):  # the older run is the "before" side
        answer = client.get("/compare", params={"run": pair})
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/diff/{FIRST}/{SECOND}"
    one = client.get("/compare", params={"run": FIRST})
    assert one.status_code == 200 and "Pick two runs: 1 was picked" in one.text
    assert client.get("/compare", params={"run": ["nope", FIRST]}).status_code == 404


def test_a_run_page_offers_the_previous_run_of_its_experiment(client: TestClient) -> None:
    page = client.get(f"/runs/{SECOND}").text
    assert f'href="/diff/{FIRST}/{SECOND}"' in page
    assert "compare with the previous run of this experiment" in page
    assert f'<option value="{FIRST}" selected>' in page  # and a menu of the others
    assert "previous run" not in client.get(f"/runs/{FIRST}").text  # it has none


def test_diff_rows_link_the_task_in_both_runs(client: TestClient) -> None:
    page = client.get(f"/diff/{FIRST}/{SECOND}").text
    row = _section(page, 'data-task="alpha/flip/00"', "</tr>")
    assert f'href="/runs/{FIRST}/tasks/alpha/flip/00"' in row
    assert f'href="/runs/{SECOND}/tasks/alpha/flip/00"' in row
    for url in re.findall(r'href="(/runs/[^"]+/tasks/[^"]+)"', page):
        assert client.get(url).status_code == 200, url


def test_a_diff_pairs_the_variants_it_is_told_to_and_offers_the_choice(
        client: TestClient) -> None:
    """#49, point 3: in the viewer too, runs pair by task across variants named apart:
    ``?variants=A=B`` (the form on the page sets it), as ``diff --variants``."""
    plain = {t["task_key"]: t for t in client.get(f"/api/diff/{FIRST}/{SECOND}").json()[
        "tasks"]}
    crossed = client.get(f"/api/diff/{FIRST}/{SECOND}",
                         params=[("variants", "alpha=beta"), ("variants", "beta=alpha")])
    assert crossed.status_code == 200
    body = crossed.json()
    assert body["variants"] == {"alpha": "beta", "beta": "alpha"}
    assert (body["variants_a"], body["variants_b"]) == (["alpha", "beta"], ["alpha", "beta"])
    rows = {t["task_key"]: t for t in body["tasks"]}
    assert rows.keys() == plain.keys()  # B's keys, each with A's of the other variant
    for key, row in rows.items():
        variant, _, rest = key.partition("/")
        other = ("beta" if variant == "alpha" else "alpha") + "/" + rest
        assert (row["before"], row["after"]) == (plain[other]["before"], plain[key]["after"])
    page = client.get(f"/diff/{FIRST}/{SECOND}", params=[("variants", "alpha=beta"),
                                                         ("variants", "beta=alpha")]).text
    form = _section(page, '<form class="pairing', "</form>")
    assert re.findall(r'<option value="([^"]+)" selected>', form) == ["alpha=beta", "beta=alpha"]
    assert "variant <span class=\"mono\">alpha</span> of exp-1 paired with" in page
    refused = client.get(f"/api/diff/{FIRST}/{SECOND}", params={"variants": "gamma=beta"})
    assert refused.status_code == 400
    assert "a variant of run A (alpha, beta)" in refused.json()["error"]


# -- 12: a conversation by default, one section per attempt ----------------------------------


def test_an_agents_task_reads_as_a_conversation_with_its_attempts_apart(
    client: TestClient
) -> None:
    page = client.get(f"/runs/{FIRST}/tasks/{AGENT_KEY}").text
    assert "view: <b>conversation</b>" in page
    marks = [m.start() for m in re.finditer(r'<h3 class="attempt-mark"', page)]
    assert len(marks) == 2
    first, second = (_section(page, 'id="conversation-attempt-1"', 'id="conversation-attempt-2"'),
                     page[marks[1]:])
    assert "interrupted" in first[:300] and "SUCCESS" in second[:300]
    # The first attempt stopped at the gate; only the second goes on to the fix.
    assert "waiting for the gate" in first and "Fixing the test" not in first
    assert "Fixing the test" in second and "waiting for the gate" not in second
    raw = client.get(f"/runs/{FIRST}/tasks/{AGENT_KEY}", params={"view": "raw"}).text
    assert raw.count('class="attempt-mark"') == 2
    # A page that starts inside an attempt marks none (the row before it is of the same).
    lines = client.get(f"/api/runs/{FIRST}/transcript/{AGENT_KEY}").json()["lines"]
    later = client.get(f"/runs/{FIRST}/tasks/{AGENT_KEY}",
                       params={"view": "raw", "after": lines[-3]["seq"]}).text
    assert 'class="attempt-mark"' not in later
    # Each step says when it came, from its attempt's start (what came before it in that
    # attempt took the time its title names); thinking is open (what the agent meant is
    # read beside what it did), its size said: it folds with a click.
    for section in (first, second):
        at = [_seconds(m) for m in re.findall(r'class="muted at" title="[^"]*">at ([^<]+)<',
                                              section)]
        assert len(at) >= 2 and at == sorted(at), at
    assert at[-1] > 0.05  # the second attempt's agent says each message 50 ms apart
    assert re.search(r'<details class="thinking" open><summary><span class="label">thinking'
                     r'</span> <span class="muted">36 characters</span></summary>The test '
                     r'expects 6', second)


def _seconds(shown: str) -> float:
    """A ``duration`` as seconds (``4.2s``, ``1m 05s``)."""
    if shown.endswith("s") and "m" not in shown:
        return float(shown[:-1])
    minutes, seconds = shown.split("m")
    return int(minutes) * 60 + int(seconds.strip().rstrip("s"))


# -- 14: an imported run says so; its task page is no wall of JSON ----------------------------


def test_an_imported_run_is_marked_and_its_record_reads_as_fields(client: TestClient) -> None:
    assert re.search(rf'data-run="{IMPORTED}".*?>imported<', client.get("/").text, re.S)
    run = client.get(f"/runs/{IMPORTED}").text
    assert '<span class="pill imported">imported</span>' in run
    assert "not run here" in run
    assert client.get(f"/api/runs/{IMPORTED}").json()["imported"]["format"] == "coder_eval"
    task = client.get(f"/runs/{IMPORTED}/tasks/default/parse/00").text
    assert "<th>final_status</th>" in task and "<th>iterations</th>" in task
    assert "imported from" in task and "default/parse/00/task.json" in task
    assert '"final_status": "FAILURE"' not in html.unescape(task)  # no JSON line of it
    assert "imported" not in _section(client.get(f"/runs/{FIRST}").text, "<h1>", "</h1>")


# -- 19: numbers said with what they are of ----------------------------------------------------


def test_pass_rates_say_how_many_were_graded(client: TestClient) -> None:
    page = client.get(f"/runs/{SECOND}").text
    # alpha: 2 succeeded, 2 failed, 1 ungraded: never "50.0% of 5".
    # Each with its 95% interval (one replicate a task in a variant: Wilson's).
    assert "2 of 4 graded (50.0% [15.0%, 85.0%]), 1 ungraded" in page and "of 5<" not in page
    # The run's: its variants share task ids, so its interval is clustered by task.
    i = client.get(f"/api/runs/{SECOND}/summary").json()["pass_rate_interval"]
    assert (i["low"], i["high"]) != (0.215, 0.785)  # Wilson's, as if 8 independent keys
    assert (f"4 of 8 graded (50.0% [{i['low']:.1%}, {i['high']:.1%}]), 2 ungraded"
            in page)  # the pass rate card
    tags = _section(page, "<h2>Tags</h2>", "</table>")
    assert re.search(r">docs<.*?no graded tasks", tags, re.S)
    assert "no graded tasks, 2 ungraded" in page  # the tag chart
    assert "0.0% of 0" not in page


def test_the_duration_histogram_has_axes(client: TestClient) -> None:
    chart = _section(client.get(f"/runs/{SECOND}").text, 'aria-label="task durations"',
                     "</svg>")
    assert chart.count("<line ") >= 2  # an axis each way, and their ticks
    assert ">duration</text>" in chart and ">tasks</text>" in chart


def test_a_difference_the_variants_define_is_not_flagged_as_drift(client: TestClient) -> None:
    environment = _section(client.get(f"/runs/{SECOND}").text, "<h2>Environment</h2>",
                           "</table>")
    assert "model differs" not in environment and 'class="drift"' not in environment
    assert "one per variant" in environment


def test_a_model_that_differs_within_a_variant_is_still_drift(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    keys = ["a/t/00", "a/u/00", "b/t/00"]
    events: list = [RunStarted(run_id="r", planned=keys)]
    for key, model in zip(keys, ["m1", "m2", "m3"], strict=True):
        variant = key.split("/")[0]
        events += [TaskStarted(run_id="r", task_key=key, task_id=key[2], variant_id=variant),
                   TaskCompleted(run_id="r", task_key=key, final_status=FinalStatus.SUCCESS,
                                 category="succeeded", environment_info={"model": model})]
    with Ledger(db) as ledger:
        ledger.append(events)
    with TestClient(create_app(db)) as client:
        assert "model differs" in client.get("/runs/r").text


def test_a_task_that_changed_many_files_pages_them(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks", {"many": {
        "command": "for i in $(seq 100 304); do echo $i > f$i.py; done",
        "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "ledger.db"
    done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "many")
    assert done.returncode == 0, done.stderr
    with TestClient(create_app(db)) as client:
        first = client.get("/runs/many/tasks/default/many/00").text
        second = client.get("/runs/many/tasks/default/many/00", params={"files": 2}).text
    assert "205 added, 0 removed, 0 modified; files 1\u2013200 of the 205 changed shown" in first
    assert first.count('<details class="file') == 200 and "files=2#files-changed" in first
    assert "f100.py" in first and "f300.py" not in first
    assert "files 201\u2013205 of the 205 changed shown" in second
    assert second.count('<details class="file') == 5 and "f304.py" in second
    assert "files=1#files-changed" in second and "files=3" not in second


def test_the_report_shows_what_each_failed_tasks_agent_changed(tmp_path: Path) -> None:
    start = tmp_path / "start"
    start.mkdir()
    (start / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    tasks = write_tasks(tmp_path / "tasks", {
        name: {"command": command, "workdir": str(start),
               "success_criteria": [{"type": "exit_code"}]}
        for name, command in (("breaks", "sed -i 's/a + b/a - b/' calc.py; exit 1"),
                              ("fine", "echo '# ok' >> calc.py"))})
    db = tmp_path / "ledger.db"
    done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r", "--out",
                      str(tmp_path / "runs"))
    assert done.returncode == 1, done.stderr
    report = (tmp_path / "runs" / "r" / "report.html").read_text(encoding="utf-8")
    broke = _section(report, "default/breaks/00</span></summary>", "</section>\n</details>")
    assert "Files changed" in broke and "0 added, 0 removed, 1 modified" in broke
    # Its diff, in Python's colours, folded under the file's name.
    assert '<span class="d-del">-    <span class="hl-k">return</span> a + b</span>' in broke
    assert '<span class="d-add">+    <span class="hl-k">return</span> a - b</span>' in broke
    fine = _section(report, "default/fine/00</span></summary>", "</details>")
    assert "Files changed" not in fine  # it succeeded: the viewer has it
    # Diffs fill so much of a report: the files after are named, their diffs left out.
    with Ledger(db, read_only=True) as ledger:
        summary = fold(SummaryFold("r"), ledger.events("r", types=SummaryFold.TYPES)).summary()
        roomy, tight = changed_files(ledger, summary), changed_files(ledger, summary, room=10)
    assert roomy["default/breaks/00"].files[0].diff
    (left,) = tight["default/breaks/00"].files
    assert left.diff == () and left.note.startswith("its diff left out")


def test_the_headline_has_its_spaces_and_run_ids_do_not_break(client: TestClient) -> None:
    page = client.get(f"/runs/{SECOND}").text
    assert re.search(r"models</span>\s+· started", page)
    assert f'<span class="mono id">{SECOND}</span>' in page
    assert re.search(r'<td class="id"><a href="/runs/exp-1">', client.get("/").text)


# -- 20: a moment before the run existed -------------------------------------------------------


def test_a_moment_before_the_run_began_says_so(client: TestClient) -> None:
    first = client.get(f"/api/runs/{SECOND}").json()["first_seq"]
    page = client.get(f"/runs/{SECOND}", params={"at": 5})
    assert page.status_code == 404
    assert f"run {SECOND} did not exist yet at event 5: its first event is {first}" in page.text
    assert f'href="/runs/{SECOND}?at={first}"' in page.text
    assert "0 of 0" not in page.text and "planned" not in page.text
    api = client.get(f"/api/runs/{SECOND}/summary", params={"at": 5})
    assert api.status_code == 404 and "did not exist yet" in api.json()["error"]
    assert client.get(f"/runs/{SECOND}", params={"at": first}).status_code == 200


# -- 21: an agent's usage over time is a curve ------------------------------------------------


def _heights(chart: str) -> list[float]:
    path = re.search(r'<path d="([^"]+)"', chart)
    assert path, chart
    points = re.findall(r"L ([\d.]+) ([\d.]+)", path[1])
    return sorted({float(y) for _, y in points})


def test_an_agents_usage_over_time_rises_with_its_messages(client: TestClient) -> None:
    page = client.get(f"/runs/{FIRST}/tasks/{AGENT_KEY}").text
    attempt = _section(page, 'id="attempt-2"', "</section>")
    chart = _section(attempt, "<h3>Usage over time</h3>", "</svg>")
    # Three messages, each reporting its usage as it came: three rises from zero.
    assert len(_heights(chart)) >= 4
    cut_short = _section(page, 'id="attempt-1"', "</section>")
    assert "<h3>Usage over time</h3>" in cut_short  # an interrupted one has its messages too


# -- 22 and 23: colour shown as colour, safely; the report's tails --------------------------


def test_ansi_colour_is_shown_as_spans_and_nothing_else_gets_through(
    client: TestClient
) -> None:
    page = client.get(f"/runs/{FIRST}/tasks/alpha/colours/00").text
    assert '<span class="a-b a-fg2">PASS</span>' in page
    assert '<span class="a-fg1">FAIL</span>' in page
    assert '<span class="a-fg3">orange</span>' in page  # 256-colour 208: the nearest
    assert '<span class="a-u">underlined</span>' in page
    assert "&lt;b&gt;not bold&lt;/b&gt; &amp; &lt;script&gt;x()&lt;/script&gt;" in page
    assert "\\x1b]0;title\\x07" in page and "\\x1b[2J" in page  # not colour: spelled out
    assert "\x1b" not in page and "\x07" not in page
    agent = client.get(f"/runs/{FIRST}/tasks/{AGENT_KEY}").text
    assert '<span class="a-fg2">1 passed</span>' in agent  # in a tool's result too


def test_the_report_opens_what_a_task_link_names_and_reads_the_conversation(
    client: TestClient, scenes: Scenes
) -> None:
    report = (scenes.out / FIRST / "report.html").read_text(encoding="utf-8")
    assert report == client.get(f"/runs/{FIRST}/report.html").text
    links = re.findall(r'<a href="#(t-\d+)">', report)
    assert links and all(f'<details id="{target}" open>' in report for target in links)
    tail = _section(report, f"{AGENT_KEY}</span></summary>", "</details>")
    assert "assistant: I will run the tests first." in tail
    assert "\u2192 Bash: pytest -q" in tail and "result: success, $0.0421, 3 turns" in tail
    assert "{&#34;type&#34;" not in tail and '{"type"' not in html.unescape(tail)
    colours = _section(report, "alpha/colours/00</span></summary>", "</details>")
    assert '<span class="a-fg1">FAIL</span>' in colours and "\x1b" not in report


def _tail(db: Path) -> list[str]:
    from evalledger.app import report_html

    with Ledger(db, read_only=True) as ledger:
        page = report_html(ledger, fold(SummaryFold("r"), ledger.events("r")).summary())
    return re.findall(r'<span class="ln-stdout">(.*?)</span>',
                      html.unescape(_section(page, '<pre class="tail">', "</pre>")))


def test_a_reports_tail_keeps_whole_lines(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    key = "default/chatty/00"
    lines = [f"{n:03d} " + "x" * 146 for n in range(30)]  # 150 characters each
    with Ledger(db) as ledger:
        ledger.append([RunStarted(run_id="r", planned=[key]),
                       TaskStarted(run_id="r", task_key=key, task_id="chatty"),
                       *[TaskOutput(run_id="r", task_key=key, line=text, n=i + 1)
                         for i, text in enumerate(lines)]])
    # 20 lines asked, 2,000 characters: the newest 13 whole lines fit, none cut.
    assert _tail(db) == lines[-13:]
    with Ledger(db) as ledger:  # a newest line longer than the tail: its end, said so
        ledger.append([TaskOutput(run_id="r", task_key=key, n=31,
                                  line=json.dumps({"k": "v" * 3000}))])
    [shown] = _tail(db)
    assert shown.startswith("[1,009 characters before] \u2026") and shown.endswith('v"}')


def test_output_left_out_past_max_output_reads_as_a_note_between_head_and_tail(
    tmp_path: Path,
) -> None:
    tasks = write_tasks(tmp_path / "tasks", {"loud": {
        "command": "seq 1 5000", "max_output": 200,
        "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "ledger.db"
    done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "loud")
    assert done.returncode == 0, done.stderr
    with TestClient(create_app(db)) as client:
        page = client.get("/runs/loud/tasks/default/loud/00", params={"view": "raw"}).text
    rows = re.findall(r'<tr class="ln-(\w+)"[^>]*><td class="num">(\d+)</td>'
                      r'<td class="num">1</td><td>\w+</td><td class="text">([^<]*)</td>', page)
    notes = [i for i, (stream, _, _) in enumerate(rows) if stream == "note"]
    assert len(notes) == 1, rows[:3]
    head, note, tail = rows[:notes[0]], rows[notes[0]], rows[notes[0] + 1:]
    assert [text for _, _, text in head] == [str(i) for i in range(1, len(head) + 1)]
    assert [text for _, _, text in tail][-1] == "5000"
    assert note[1] == str(len(head) + 1)  # where the cut began
    omitted = 5000 - len(head) - len(tail)
    assert f"… {omitted:,} lines (" in html.unescape(note[2]) and "past max_output (200 bytes)" \
        in html.unescape(note[2])


def test_a_narrow_spread_of_durations_has_ticks_that_read_apart() -> None:
    """Durations of 3.21 s to 3.24 s: the axis said ``3.2s 3.2s 3.2s`` (issue #49)."""
    from evalledger.render._charts import histogram

    ticks = re.findall(r">([^<>]*s)</text>", str(histogram([3.21, 3.22, 3.24], "durations")))
    assert ticks == ["3.21s", "3.23s", "3.24s"]
    # A wide spread keeps one decimal; one value alone, its one tick.
    assert re.findall(r">([^<>]*s)</text>", str(histogram([1.0, 9.0], "d"))) == [
        "1.0s", "5.0s", "9.0s"]
    assert re.findall(r">([^<>]*s)</text>", str(histogram([2.5, 2.5], "d"))) == ["2.5s"]


# -- #49, point 4: what a search found reads as the conversation reads ------------------------


def test_a_search_hit_in_an_agents_transcript_reads_as_its_conversation(
        client: TestClient) -> None:
    """Hits were escaped JSON under unlabeled columns: a hit in an agent's event is shown
    as its page's conversation shows it (the words, marked), the columns named; the
    JSON twin says the same (``said``, ``shown``) beside the raw line."""
    page = client.get(f"/runs/{FIRST}/search", params={"q": "WRONG: 2 + 3"}).text
    assert "<th>what</th><th>text</th>" in page
    rows = re.findall(r'<tr class="ln-json said-assistant">.*?</tr>', page)
    assert len(rows) == 2, rows  # the agent of each of the run's two variants
    for row in rows:
        assert "<td>assistant</td>" in row and "&#34;" not in row and '"type"' not in row
        assert re.search(r"<td class=\"text\">assistant: The test is <mark>wrong: 2 \+ 3"
                         r"</mark> is 5\. Fixing the test\.</td>", row), row
    found = client.get(f"/api/runs/{FIRST}/search", params={"q": "wrong: 2 + 3"}).json()
    lines = [line for task in found["tasks"] for line in task["lines"]]
    assert len(lines) == 2
    for line in lines:
        assert (line["stream"], line["said"]) == ("json", "assistant")
        assert line["shown"] == "assistant: The test is wrong: 2 + 3 is 5. Fixing the test."
        assert line["data"]["type"] == "assistant"  # the raw event is still there
    # A plain output line has nothing to read it as: shown as it is.
    plain = client.get(f"/api/runs/{FIRST}/search", params={"q": "waiting for the gate"}).json()
    assert {(ln["stream"], ln["said"]) for t in plain["tasks"] for ln in t["lines"]} == {
        ("stdout", None)}


# -- #49, point 5: the verdict leads to the tool result the agent saw fail -----------------


FAILING_AGENT = """import json
def say(line):
    print(json.dumps(line), flush=True)
say({"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5", "content": [
    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}}]}})
say({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1",
     "is_error": True, "content": "FAILED test_a.py::test_one - assert 1 == 2"}]}})
say({"type": "assistant", "message": {"id": "m2", "model": "claude-sonnet-4-5", "content": [
    {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "ls"}}]}})
say({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t2",
     "content": "test_a.py"}]}})
say({"type": "result", "subtype": "success", "is_error": False, "result": "Done.",
     "total_cost_usd": 0.001, "num_turns": 2, "usage": {"input_tokens": 5,
     "output_tokens": 5}})
raise SystemExit(1)
"""


def test_a_failed_attempts_verdict_links_the_tool_result_its_agent_saw_fail(
        tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(FAILING_AGENT, encoding="utf-8")
    tasks = write_tasks(tmp_path / "tasks", {"fails": {
        "command": f"python3 {tmp_path / 'agent.py'}", "stream_format": "claude-code",
        "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r").returncode == 1
    with TestClient(create_app(db, interval=0.05)) as client:
        page = client.get("/runs/r/tasks/default/fails/00").text
        [link] = re.findall(r'<p class="to-failing"><a href="\?after=(\d+)#seq-(\d+)">', page)
        after, seq = map(int, link)
        assert after == seq - 1
        raw = client.get("/api/runs/r/transcript/default/fails/00").json()["lines"]
        [failed] = [line for line in raw if line["data"] and "FAILED" in line["text"]]
        assert seq == failed["seq"]  # the failing result, not the later one that passed
        linked = client.get("/runs/r/tasks/default/fails/00", params={"after": after}).text
        assert re.search(rf'<div class="msg m-user" data-seq="{seq}" id="seq-{seq}">', linked)
        assert "FAILED test_a.py::test_one" in linked
        assert client.get("/api/runs/r/tasks/default/fails/00").json()[
            "failing_results"] == {"1": seq}
