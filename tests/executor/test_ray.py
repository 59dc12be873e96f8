"""``--executor ray`` against real Ray: a local Ray the run starts, and a two-node cluster
(``ray.cluster_utils.Cluster``) on this machine that the tests start once per module and
share, held by a helper process (``ray_cluster.py``) so that no Ray state lives in the
test process.

The driver is always a real ``evalledger`` process (Ray keeps per-process state, and
Ctrl-C and SIGKILL need a process boundary). Where Ray is not installed the tests
skip with the reason; CI sets ``EVALLEDGER_REQUIRE_RAY=1`` and then they fail instead.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalledger.ledger import Ledger, TaskCompleted, TaskInterrupted, TaskUsage

from ..cli.helpers import assert_one_line_error, evalledger, events, of_type
from ..needs import unavailable
from ..processes import marked
from ..viewer.suites import write_suite
from ..waiting import PATIENCE, wait_until

# The slow tier: a Ray cluster per module, drivers that start a local Ray.
pytestmark = pytest.mark.slow

SMOKE = Path(__file__).resolve().parents[2] / "examples" / "smoke"
# Ray notices a dead driver, starts a local cluster or ends a worker on its own clock,
# which a loaded machine (two copies of the suite on two cores) stretches well past the
# suite's usual patience.
RAY_PATIENCE = 4 * PATIENCE


def _ray_or_skip() -> Any:
    try:
        import ray
    except ImportError:
        unavailable("RAY", "Ray is not installed (pip install 'evalledger[ray]')")
    return ray


@dataclass
class RayPlace:
    """Where Ray keeps its files for this module, and the environment drivers need."""

    temp: Path

    def env(self, tmpdir: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "EVALLEDGER_LEDGER"}
        env.update(RAY_TMPDIR=str(self.temp), RAY_AUTH_MODE="disabled", TMPDIR=str(tmpdir),
                   RAY_USAGE_STATS_ENABLED="0", **PATIENT_RAY)
        return env


# Two copies of the suite at once keep two cores busy with eight workers, docker and a
# browser: a raylet can go unheard for longer than Ray's default 15 s of health checks
# (GCS then declares its node dead: NodeDiedError), or a worker lose GCS for over 60 s.
# Ray's own settings, for every process of the clusters these tests start.
PATIENT_RAY = {"RAY_health_check_failure_threshold": "40",
               "RAY_health_check_timeout_ms": "30000",
               "RAY_gcs_rpc_server_reconnect_timeout_s": "300"}


@pytest.fixture(scope="module")
def ray_place() -> Iterator[RayPlace]:
    _ray_or_skip()
    # Short: Ray's socket paths live under it (a Unix socket path holds 107 bytes).
    temp = Path(tempfile.mkdtemp(prefix="evl-ray-", dir="/tmp"))
    try:
        yield RayPlace(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@dataclass
class TwoNodes:
    """A head and one more node, one CPU each, held by a helper process (ray_cluster.py)."""

    host: subprocess.Popen[str]
    address: str
    place: RayPlace

    def _ask(self, command: dict[str, Any]) -> Any:
        assert self.host.stdin is not None and self.host.stdout is not None
        self.host.stdin.write(json.dumps(command) + "\n")
        self.host.stdin.flush()
        line = self.host.stdout.readline()
        assert line, "the cluster's process ended"
        return json.loads(line)

    def add_node(self, **settings: Any) -> str:
        return str(self._ask({"add": settings}))

    def remove_node(self, node_id: str) -> None:
        self._ask({"remove": node_id})

    def node_ids(self) -> set[str]:
        return set(self._ask({"nodes": True}))

    def batch_folder(self, token: str) -> Path:
        """Where a batch keeps its files on every node (the workers' TMPDIR)."""
        return self.place.temp / "workers" / f"evalledger-ray-{token}"


@pytest.fixture(scope="module")
def two_nodes(ray_place: RayPlace) -> Iterator[TwoNodes]:
    workers_temp = ray_place.temp / "workers"
    workers_temp.mkdir(exist_ok=True)
    host = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("ray_cluster.py"))],
        env=ray_place.env(workers_temp), text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert host.stdout is not None
        started = json.loads(host.stdout.readline() or "null")
        assert started, "the cluster did not start"
        yield TwoNodes(host, started["address"], ray_place)
    finally:
        assert host.stdin is not None
        host.stdin.close()  # the cluster shuts down at end of input
        try:
            host.wait(60)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()


def _driver(place: RayPlace, cwd: Path, db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "evalledger.cli", "--ledger", str(db), *args], cwd=cwd,
        env=place.env(cwd / "tmp"), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def _stop(process: subprocess.Popen[str]) -> None:
    """Kill a driver if it still runs, and close its pipes (not left to the collector)."""
    if process.poll() is None:
        process.kill()
    if process.stdout is not None and not process.stdout.closed:
        process.communicate(timeout=60)
    process.wait(60)


def _finish(process: subprocess.Popen[str], timeout: float = 2 * RAY_PATIENCE
            ) -> tuple[int, str]:
    """Wait for a driver; its exit code and stderr (what was read of it already too).
    The bound is for a hang: a local Ray's start and a batch on a machine running
    three suites took over 120 s."""
    _, err = process.communicate(timeout=timeout)
    return process.returncode, _read_so_far.pop(process.pid, "") + err


_read_so_far: dict[int, str] = {}


def _stderr_so_far(process: subprocess.Popen[str]) -> str:
    """What the driver wrote on stderr until now, without blocking."""
    assert process.stderr is not None
    os.set_blocking(process.stderr.fileno(), False)
    chunk = os.read(process.stderr.fileno(), 65536) if _readable(process) else b""
    _read_so_far[process.pid] = _read_so_far.get(process.pid, "") + chunk.decode()
    return _read_so_far[process.pid]


def _readable(process: subprocess.Popen[str]) -> bool:
    assert process.stderr is not None
    return bool(select.select([process.stderr], [], [], 0)[0])


def _task(path: Path, command: str | list[str], **fields: Any) -> None:
    data: dict[str, Any] = {"command": command, "timeout": 60, **fields}
    data.setdefault("success_criteria", [{"type": "exit_code", "equals": 0}])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


CUT_OFF = {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5",
           "usage": {"input_tokens": 1000, "output_tokens": 100}, "content": []}}


# Prints "waiting", then holds until the file named by $GATE exists. SIGTERM (a graceful
# stop) leaves a file $GATE.<pid>.term behind, so a test can tell it from a SIGKILL.
GATED = ["python3", "-c", "import os, signal, sys, time\n"
         "def term(*_):\n"
         "    open(f\"{os.environ['GATE']}.{os.getpid()}.term\", 'w').close()\n"
         "    sys.exit(0)\n"
         "signal.signal(signal.SIGTERM, term)\n"
         "print('waiting', flush=True)\n"
         "while not os.path.exists(os.environ['GATE']): time.sleep(0.05)\nprint('released')"]


def _marked(token: str) -> list[int]:
    """Processes on this machine (every node of the test cluster) carrying the batch's
    mark: its attempts', and a local Ray's."""
    return marked(f"EVALLEDGER_ATTEMPT={token}", prefix=True)


def _token(db: Path, run_id: str) -> str:
    with Ledger(db, read_only=True) as ledger:
        opening = next(iter(ledger.events(run_id, types={"run.started"})))
    token = getattr(opening, "batch_token", None)
    assert token
    return token


def _output_of(db: Path, run_id: str, key: str) -> list[str]:
    try:
        with Ledger(db, read_only=True) as ledger:
            return [e.line for e in ledger.events(run_id, types={"task.output"})
                    if e.task_key == key]
    except Exception:
        return []


def _verified(cwd: Path, db: Path) -> None:
    result = evalledger(cwd, db, "verify")
    assert result.returncode == 0, result


def _ready(tmp_path: Path) -> Path:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return tmp_path


# ---------------------------------------------------------------------------- parity


def _fold(db: Path, cwd: Path, run_id: str) -> dict[str, Any]:
    evs = events(db, run_id)
    report = json.loads((cwd / "runs" / run_id / "run.json").read_text(encoding="utf-8"))
    summary = {k: report[k] for k in (
        "status", "tasks_planned", "tasks_run", "tasks_succeeded", "tasks_failed",
        "tasks_error", "tasks_ungraded", "total_cost_usd", "cost_complete")}
    return {
        "statuses": {e.task_key: e.final_status for e in of_type(evs, "task.completed")},
        "types": collections.Counter(e.type for e in evs),
        "lines": collections.Counter((e.task_key, e.stream) for e in of_type(evs, "task.output")),
        "usage": sorted((e.task_key, e.model, e.input_tokens, e.output_tokens, e.cost_usd)
                        for e in of_type(evs, "task.usage")),
        "summary": summary,
    }


def test_the_mixed_suite_on_a_local_ray_ends_as_it_does_here(
    ray_place: RayPlace, tmp_path: Path
) -> None:
    cwd = _ready(tmp_path)
    suite = tmp_path / "suite"
    shutil.copytree(SMOKE, suite / "smoke")
    write_suite(suite / "mixed", regress=False)
    db = tmp_path / "l.db"
    paths = [str(suite / "smoke" / "experiment.yaml")]
    here = evalledger(cwd, db, "run", "-e", *paths, "--run-id", "here", "-j", "4")
    assert here.returncode == 0, here  # the smoke suite fails on purpose, as it expects
    mixed_here = evalledger(cwd, db, "run", str(suite / "mixed"), "--run-id", "mixed-here")
    assert mixed_here.returncode == 1, mixed_here
    # Default: a local Ray started for the run.
    code, err = _finish(_driver(ray_place, cwd, db, "run", "-e", *paths, "--run-id",
                                     "there", "-j", "4", "--executor", "ray"))
    assert code == 0, err
    assert "Traceback" not in err, err
    code, err = _finish(_driver(ray_place, cwd, db, "run", str(suite / "mixed"),
                                     "--run-id", "mixed-there", "--executor", "ray"))
    # Exit 1 is the suite's failures, said in run.json; without it, the driver failed.
    assert code == 1 and (cwd / "runs" / "mixed-there" / "run.json").is_file(), err
    for local, remote in (("here", "there"), ("mixed-here", "mixed-there")):
        a, b = _fold(db, cwd, local), _fold(db, cwd, remote)
        assert a == b
        assert a["statuses"] and a["types"]["task.output"]
    # The local Ray each run started is gone with its run: nothing carries the mark.
    for run_id in ("there", "mixed-there"):
        token = _token(db, run_id)
        wait_until(lambda token=token: not _marked(token),  # type: ignore[misc]
                   f"nothing left of {run_id}'s Ray", timeout=RAY_PATIENCE)
    # The sandboxes came back: what the agent wrote is in the artifacts.
    assert (cwd / "runs" / "there" / "artifacts" / "baseline" / "add-numbers" / "00"
            / "add.py").is_file()
    with Ledger(db, read_only=True) as ledger:
        infos = [e.environment_info for e in ledger.events("there", types={"task.completed"})]
        payloads = [row.payload for run in ("there", "mixed-there")
                    for row in ledger.rows(run)]
    assert all(info.get("ray_node_id") for info in infos)
    # What workers encoded is stored as canonical JSON, as what this process encodes.
    assert all(json.dumps(json.loads(p), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False) == p for p in payloads)
    _verified(cwd, db)


# ------------------------------------------------------------------------- two nodes


def _usage_lines(count: int, tokens: int, cost: float) -> list[str]:
    """A command printing ``count`` usage lines, 50 ms apart."""
    line = json.dumps({"type": "usage", "model": "m", "input_tokens": tokens,
                       "output_tokens": 0, "cost_usd": cost})
    return ["python3", "-c", f"import time\nfor _ in range({count}):\n"
            f"    print({line!r}, flush=True)\n    time.sleep(0.05)"]


def test_task_and_run_budgets_hold_on_ray_as_here(two_nodes: TwoNodes, tmp_path: Path) -> None:
    cwd = _ready(tmp_path)
    suite = tmp_path / "budgets"
    # One at a time: a live token budget stops the first, then two priced tasks spend
    # past the run's --max-cost and the fourth is never dispatched.
    _task(suite / "a-tokens.yaml", _usage_lines(40, 1000, 0.0), budget={"max_tokens": 2500},
          ray={"num_cpus": 0})
    for name in ("b1", "b2", "b3"):
        _task(suite / f"{name}.yaml", _usage_lines(1, 10, 0.01), ray={"num_cpus": 0})
    db = tmp_path / "l.db"
    args = ["run", str(suite), "-j", "1", "--max-cost", "0.015"]
    here = evalledger(cwd, db, *args, "--run-id", "b-here")
    assert here.returncode == 1, here
    code, err = _finish(_driver(two_nodes.place, cwd, db, *args, "--run-id", "b-there",
                                "--executor", "ray", "--ray-address", two_nodes.address))
    assert code == 1, err
    a, b = _fold(db, cwd, "b-here"), _fold(db, cwd, "b-there")
    # How many usage lines one read holds before the stop varies with the load, here and
    # there alike: the outcome is what must be the same.
    assert (a["statuses"], a["summary"]) == (b["statuses"], b["summary"])
    assert a["statuses"] == {"default/a-tokens/00": "TOKEN_BUDGET_EXCEEDED",
                             "default/b1/00": "SUCCESS", "default/b2/00": "SUCCESS"}
    assert a["summary"]["status"] == "budget_stopped"
    _verified(cwd, db)


def test_tasks_run_on_both_nodes(two_nodes: TwoNodes, tmp_path: Path) -> None:
    cwd = _ready(tmp_path)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    # Two tasks that each wait for the other: they run at once, and with one CPU per
    # node and one CPU each, on different nodes.
    meet = ["python3", "-c", "import os, sys, time\nb = os.environ['BARRIER']\n"
            "open(os.path.join(b, str(os.getpid())), 'w').close()\n"
            "while len(os.listdir(b)) < 2: time.sleep(0.05)\nprint('met')"]
    for name in ("left", "right"):
        _task(tmp_path / "tasks" / f"{name}.yaml", meet, env={"BARRIER": str(barrier)},
              ray={"num_cpus": 1})
    db = tmp_path / "l.db"
    code, err = _finish(_driver(two_nodes.place, cwd, db, "run", str(tmp_path / "tasks"),
                                     "--run-id", "both", "-j", "2", "--executor", "ray",
                                     "--ray-address", two_nodes.address))
    assert code == 0, err
    completed = of_type(events(db, "both"), "task.completed")
    assert all(isinstance(e, TaskCompleted) and e.final_status == "SUCCESS" for e in completed)
    nodes = {e.environment_info["ray_node_id"] for e in completed if isinstance(e, TaskCompleted)}
    assert len(nodes) == 2 and nodes <= two_nodes.node_ids()
    _verified(cwd, db)


@pytest.mark.parametrize("isolation", ["bwrap", "docker"])
def test_isolated_attempts_are_confined_on_the_workers_as_here(
    two_nodes: TwoNodes, tmp_path: Path, isolation: str, request: pytest.FixtureRequest
) -> None:
    """Each worker confines its attempts, probes them and records it; the example suite
    ends as it does here (docker: in the test image with a Python), and no container
    is left on the nodes."""
    keys = {"isolation": isolation}
    if isolation == "bwrap":
        request.getfixturevalue("bwrap")
    else:
        keys["image"] = request.getfixturevalue("docker_images")["python"]
    cwd = _ready(tmp_path)
    shutil.copytree(SMOKE, tmp_path / "smoke")
    layer = tmp_path / "smoke" / "confined.yaml"
    layer.write_text(yaml.safe_dump({"experiment_id": "confined", "tasks": ["tasks/"],
                                     "defaults": keys}))
    db = tmp_path / "l.db"
    code, err = _finish(_driver(two_nodes.place, cwd, db, "run", "-e", str(layer),
                                "--run-id", "confined", "-j", "2", "--executor", "ray",
                                "--ray-address", two_nodes.address))
    assert code == 0, err
    evs = events(db, "confined")
    statuses = {e.task_key: e.final_status for e in of_type(evs, "task.completed")}
    assert statuses == {"default/add-numbers/00": "SUCCESS", "default/fizzbuzz/00": "FAILURE",
                        "default/hard-problem/00": "TIMEOUT",
                        "default/reverse-string/00": "SUCCESS"}
    records = of_type(evs, "task.isolation")
    assert len(records) == 4
    assert all(r.backend == isolation and r.probes == {
        "canary": "absent", "ledger": "absent", "task_file": "absent", "network": "refused"}
        for r in records)
    if isolation == "docker":
        token = _token(db, "confined")
        left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=evalledger.batch"],
                              capture_output=True, text=True, check=True).stdout.split()
        labels = [subprocess.run(["docker", "inspect", "--format",
                                  '{{index .Config.Labels "evalledger.batch"}}', c],
                                 capture_output=True, text=True, check=False).stdout.strip()
                  for c in left]
        assert not [label for label in labels if label.startswith(token)]
    _verified(cwd, db)


def test_a_lost_node_interrupts_its_task_and_resume_finishes_the_run(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    cwd = _ready(tmp_path)
    gate = tmp_path / "gate"
    victim = two_nodes.add_node(num_cpus=1, resources={"victim": 1})
    # A Claude Code message cut off with the node: 1,100 tokens its stream showed.
    speaks = [GATED[0], GATED[1], f"print({json.dumps(json.dumps(CUT_OFF))}, flush=True)\n"
              + GATED[2]]
    _task(tmp_path / "tasks" / "doomed.yaml", speaks, env={"GATE": str(gate)},
          stream_format="claude-code", ray={"num_cpus": 0, "resources": {"victim": 1}})
    # Pinned to the head: it must not land on the node that goes away.
    _task(tmp_path / "tasks" / "fine.yaml", "echo fine",
          ray={"num_cpus": 0, "resources": {"head": 1}})
    db = tmp_path / "l.db"
    driver = _driver(two_nodes.place, cwd, db, "run", str(tmp_path / "tasks"), "--run-id",
                     "lost", "-j", "2", "--executor", "ray", "--ray-address",
                     two_nodes.address)
    try:
        wait_until(lambda: "waiting" in _output_of(db, "lost", "default/doomed/00")
                   or driver.poll() is not None, "the doomed task's first line",
                   timeout=RAY_PATIENCE)
        token = _token(db, "lost")
        assert _marked(token), "the doomed task runs"
        two_nodes.remove_node(victim)
        code, err = _finish(driver)
    finally:
        _stop(driver)
    assert code == 1, err  # the batch went on and ended; one task did not finish
    evs = events(db, "lost")
    interrupted = of_type(evs, "task.interrupted")
    assert [(e.task_key, e.reason.split(":")[0]) for e in interrupted
            if isinstance(e, TaskInterrupted)] == [("default/doomed/00", "worker lost")]
    # What its stream showed is booked, as an interrupted attempt here books it: a floor.
    assert [(u.task_key, u.tokens.total, u.estimate) for u in of_type(evs, "task.usage")
            if isinstance(u, TaskUsage)] == [("default/doomed/00", 1100, True)]
    assert [e.task_key for e in of_type(evs, "task.completed")] == ["default/fine/00"]
    assert of_type(evs, "run.finished")[0].status == "completed"
    # The lost worker's watchdog ended the task's process on the node that went away.
    wait_until(lambda: not _marked(token), "no process of the batch left", timeout=PATIENCE)
    _verified(cwd, db)
    # A node with the resource comes back; resume runs only the lost task, to its end.
    again = two_nodes.add_node(num_cpus=1, resources={"victim": 1})
    try:
        gate.write_text("go")
        code, err = _finish(_driver(two_nodes.place, cwd, db, "resume", "lost", "--executor",
                                    "ray", "--ray-address", two_nodes.address))
    finally:
        two_nodes.remove_node(again)  # the other tests see two nodes
    assert code == 0, err
    statuses = {e.task_key: e.final_status for e in of_type(events(db, "lost"), "task.completed")}
    assert statuses == {"default/doomed/00": "SUCCESS", "default/fine/00": "SUCCESS"}
    _verified(cwd, db)


def test_with_retries_a_lost_nodes_task_runs_again_on_another_node_in_the_same_run(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    cwd = _ready(tmp_path)
    gate = tmp_path / "gate"
    victim = two_nodes.add_node(num_cpus=1, resources={"victim": 1})
    _task(tmp_path / "tasks" / "doomed.yaml", GATED, env={"GATE": str(gate)},
          ray={"num_cpus": 0, "resources": {"victim": 1}}, retries=2)
    db = tmp_path / "l.db"
    driver = _driver(two_nodes.place, cwd, db, "run", str(tmp_path / "tasks"), "--run-id",
                     "retried", "--retry-backoff", "0", "--executor", "ray", "--ray-address",
                     two_nodes.address)
    again = None
    try:
        wait_until(lambda: "waiting" in _output_of(db, "retried", "default/doomed/00")
                   or driver.poll() is not None, "the doomed task's first line",
                   timeout=RAY_PATIENCE)
        two_nodes.remove_node(victim)
        # The retry waits for a node with the resource; one comes, and the gate is open.
        wait_until(lambda: of_type(events(db, "retried"), "task.interrupted")
                   or driver.poll() is not None, "the lost attempt recorded",
                   timeout=RAY_PATIENCE)
        gate.write_text("go")
        again = two_nodes.add_node(num_cpus=1, resources={"victim": 1})
        code, err = _finish(driver)
    finally:
        _stop(driver)
        if again is not None:
            two_nodes.remove_node(again)  # the other tests see two nodes
    assert code == 0, err
    evs = events(db, "retried")
    [lost] = of_type(evs, "task.interrupted")
    assert isinstance(lost, TaskInterrupted) and lost.reason.startswith("worker lost")
    [done] = of_type(evs, "task.completed")
    assert isinstance(done, TaskCompleted)
    assert (done.attempt, done.final_status) == (2, "SUCCESS")
    assert [e.attempt for e in of_type(evs, "task.started")] == [1, 2]  # type: ignore[attr-defined]
    _verified(cwd, db)


@contextlib.contextmanager
def _gated_batch(two_nodes: TwoNodes, tmp_path: Path, run_id: str, *options: str,
                 stubborn: bool = False) -> Iterator[tuple[Path, subprocess.Popen[str], str]]:
    """A driver whose two tasks (one per node) print "waiting" and hold until the gate
    opens; yields the ledger, the driver and the batch's token once both wait. On the
    way out the gate is opened and a driver still running is killed. ``stubborn``: the
    tasks ignore SIGTERM."""
    gate = tmp_path / "gate"
    command = GATED
    if stubborn:
        command = [*GATED[:2], GATED[2].replace("signal.signal(signal.SIGTERM, term)",
                                                "signal.signal(signal.SIGTERM, signal.SIG_IGN)")]
        assert command != GATED
    for name in ("one", "two"):
        _task(tmp_path / "tasks" / f"{name}.yaml", command, env={"GATE": str(gate)},
              ray={"num_cpus": 1})
    db = tmp_path / "l.db"
    driver = _driver(two_nodes.place, _ready(tmp_path), db, "run", str(tmp_path / "tasks"),
                     "--run-id", run_id, "-j", "2", "--executor", "ray", "--ray-address",
                     two_nodes.address, *options)
    try:
        for key in ("default/one/00", "default/two/00"):
            wait_until(lambda key=key: "waiting" in _output_of(db, run_id, key)  # type: ignore[misc]
                       or driver.poll() is not None, f"{key} waiting", timeout=RAY_PATIENCE)
        assert driver.poll() is None, driver.communicate()
        token = _token(db, run_id)
        assert len(_marked(token)) >= 2
        yield db, driver, token
    finally:
        gate.write_text("go")
        _stop(driver)


def test_ctrl_c_interrupts_the_remote_attempts_and_leaves_no_process(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    with _gated_batch(two_nodes, tmp_path, "stopped") as (db, driver, token):
        driver.send_signal(signal.SIGINT)
        code, err = _finish(driver)
        assert code == 130, err
        assert "Traceback" not in err, err
        # Before exit 130, on every node: nothing the batch started is left. Its folders
        # go too (a worker still closing its attempt may write one last time: waited for).
        assert not _marked(token)
        wait_until(lambda: not two_nodes.batch_folder(token).exists(),
                   "no folder of the batch left", timeout=RAY_PATIENCE)
        # Each was stopped with its grace period (SIGTERM first), not killed outright.
        assert len(list(tmp_path.glob("gate.*.term"))) == 2
    evs = events(db, "stopped")
    assert sorted(e.task_key for e in of_type(evs, "task.interrupted")) == [
        "default/one/00", "default/two/00"]
    assert of_type(evs, "run.finished")[-1].status == "interrupted"
    _verified(tmp_path, db)


def test_ctrl_c_twice_ends_remote_attempts_without_their_grace_period(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    # The agents ignore SIGTERM and have ten minutes of grace: only the second Ctrl-C
    # ends them before that is out. (A minute of grace and 30 s to end were too close on
    # a machine running three copies of the suite: Ray took over 30 s to reach the nodes.)
    with _gated_batch(two_nodes, tmp_path, "hurried", "--kill-grace", "600",
                      stubborn=True) as (db, driver, token):
        driver.send_signal(signal.SIGINT)
        wait_until(lambda: "stopping tasks" in _stderr_so_far(driver), "the first Ctrl-C said",
                   timeout=RAY_PATIENCE)
        driver.send_signal(signal.SIGINT)
        code, err = _finish(driver, timeout=4 * PATIENCE)
        assert code == 130, err
        assert not _marked(token)
    assert of_type(events(db, "hurried"), "run.finished")[-1].status == "interrupted"
    _verified(tmp_path, db)


def _kept_by(folder: Path) -> str:
    """What keeps a node's batch folder: its workers' folders, whether their processes
    and their watchdogs live."""
    said = []
    for entry in sorted(folder.glob("worker-*")):
        pid = entry.name.removeprefix("worker-")
        try:
            program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            state = "gone"
        else:
            state = f"{program.decode(errors='replace')} alive"
        token = f"{folder.name.removeprefix('evalledger-ray-')}-{pid}".encode()
        watchdogs = [p.parent.name for p in Path("/proc").glob("[0-9]*/cmdline")
                     if _reads(p).find(b"_watchdog.py\0" + token + b"\0") >= 0]
        said.append(f"{entry.name} ({state}; watchdog {watchdogs or 'gone'})")
    return ", ".join(said) or "no worker's folder in it"


def _reads(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _raylets_said(temp: Path) -> str:
    """The raylets' log lines about killing or exiting workers (the last ten)."""
    lines = [line for log in temp.glob("ray/session_*/logs/raylet*.out")
             for line in log.read_text(errors="replace").splitlines()
             if "ill" in line or "xit" in line]
    return "raylets: " + " | ".join(lines[-10:])


# Whether the GCS says a job ended, as a worker asks it: of this driver's own job (live),
# and of the job of the driver whose pid is argv[2].
JOB_STATES = r"""
import json, sys, ray
from evalledger.executor.ray._worker import job_is_dead
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
gcs = ray._private.worker.global_worker.gcs_client
jobs = gcs.get_all_job_info(skip_submission_job_info_field=True,
                            skip_is_running_tasks_field=True)
print(json.dumps({
    "own": job_is_dead(gcs, ray.get_runtime_context().get_job_id()),
    "killed": [job_is_dead(gcs, job.hex()) for job, info in jobs.items()
               if info.driver_pid == int(sys.argv[2])]}))
"""


def test_a_killed_driver_leaves_nothing_running_on_the_cluster(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    with _gated_batch(two_nodes, tmp_path, "killed") as (db, driver, token):
        _stop(driver)
        # Ray sees the driver gone and ends its workers; their watchdogs end the attempts
        # and remove the batch's folders.
        wait_until(lambda: not _marked(token), "no process of the batch left",
                   timeout=RAY_PATIENCE)
        # Bounded for a hang: Ray notices a killed driver late on a loaded machine (the
        # final CI run of this stop saw the folder outlast 120 s).
        try:
            wait_until(lambda: not two_nodes.batch_folder(token).exists(),
                       "no folder of the batch left", timeout=2 * RAY_PATIENCE)
        except AssertionError as e:
            raise AssertionError(f"{e}: {_kept_by(two_nodes.batch_folder(token))}; "
                                 f"{_raylets_said(two_nodes.place.temp)}") from None
        # Should Ray miss the driver's death, each worker asks the GCS whether its job
        # ended (and exits): the GCS says so of the killed driver's job, not of a live one.
        asked = subprocess.run([sys.executable, "-c", JOB_STATES, two_nodes.address,
                                str(driver.pid)], env=two_nodes.place.env(tmp_path / "tmp"),
                               capture_output=True, text=True, timeout=RAY_PATIENCE,
                               check=False)
        assert asked.returncode == 0, asked.stderr
        assert json.loads(asked.stdout.splitlines()[-1]) == {"own": False, "killed": [True]}
    _verified(tmp_path, db)
    # The cluster took the next batch as usual: the killed run resumes and finishes.
    code, err = _finish(_driver(two_nodes.place, tmp_path, db, "resume", "killed",
                                "--executor", "ray", "--ray-address", two_nodes.address))
    assert code == 0, err


def test_a_missing_workdir_fails_as_here_and_an_ask_no_node_has_waits_said(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    cwd = _ready(tmp_path)
    _task(tmp_path / "here" / "nowhere.yaml", "true", workdir="no-such-folder")
    here = evalledger(cwd, tmp_path / "l.db", "run", str(tmp_path / "here"), "--run-id", "here")
    assert here.returncode == 1, here
    suite = tmp_path / "there"
    _task(suite / "nowhere.yaml", "true", workdir="no-such-folder")
    _task(suite / "gpu.yaml", "true", ray={"num_gpus": 1})
    db = tmp_path / "l.db"
    driver = _driver(two_nodes.place, cwd, db, "run", str(suite), "--run-id", "there", "-j",
                     "2", "--executor", "ray", "--ray-address", two_nodes.address)
    try:
        wait_until(lambda: [e.task_key for e in of_type(events(db, "there"), "task.completed")]
                   == ["default/nowhere/00"] or driver.poll() is not None, "nowhere ended",
                   timeout=RAY_PATIENCE)
        assert driver.poll() is None  # the GPU task waits for a node with a GPU
        driver.send_signal(signal.SIGINT)
        code, err = _finish(driver)
    finally:
        _stop(driver)
    assert code == 130, err
    assert "no node of the cluster has num_cpus=1, num_gpus=1 now" in err, err
    [local] = of_type(events(db, "here"), "task.completed")
    [remote] = of_type(events(db, "there"), "task.completed")
    assert isinstance(local, TaskCompleted) and isinstance(remote, TaskCompleted)
    assert (remote.final_status, remote.error_message) == (
        local.final_status, local.error_message.replace("/here/", "/there/"))
    assert remote.final_status == "BUILD_FAILED"
    # Never started: nothing recorded for it, and resume would run it.
    assert "default/gpu/00" not in {e.task_key for e in events(db, "there")}
    _verified(cwd, db)


def test_a_killed_driver_takes_its_local_ray_with_it(ray_place: RayPlace, tmp_path: Path) -> None:
    cwd = _ready(tmp_path)
    gate = tmp_path / "gate"
    _task(tmp_path / "tasks" / "held.yaml", GATED, env={"GATE": str(gate)})
    db = tmp_path / "l.db"
    driver = _driver(ray_place, cwd, db, "run", str(tmp_path / "tasks"), "--run-id", "gone",
                     "--executor", "ray")
    try:
        wait_until(lambda: "waiting" in _output_of(db, "gone", "default/held/00")
                   or driver.poll() is not None, "the task's first line", timeout=RAY_PATIENCE)
        token = _token(db, "gone")
        # The attempt and the local Ray's own processes (GCS, raylet, agents, workers).
        assert len(_marked(token)) > 3
        _stop(driver)
        # The batch's watchdog ends them all: Ray itself leaves its agents running. The
        # workers' own watchdogs (never marked) remove what the attempts left on disk.
        wait_until(lambda: not _marked(token), "no process of the batch or its Ray left",
                   timeout=RAY_PATIENCE)
        wait_until(lambda: not list((tmp_path / "tmp").glob("evalledger-*")),
                   "no folder of the batch left", timeout=RAY_PATIENCE)
    finally:
        gate.write_text("go")
        _stop(driver)
    _verified(cwd, db)


# ---------------------------------------------------------------------------- errors


def test_an_unreachable_cluster_is_one_line_and_records_nothing(
    ray_place: RayPlace, tmp_path: Path
) -> None:
    cwd = _ready(tmp_path)
    _task(tmp_path / "tasks" / "t.yaml", "echo hi")
    db = tmp_path / "l.db"
    code, err = _finish(_driver(ray_place, cwd, db, "run", str(tmp_path / "tasks"),
                                     "--executor", "ray", "--ray-address", "127.0.0.1:1"))
    assert code == 2, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("Error: cannot start Ray (127.0.0.1:1)")
    assert not (cwd / "runs").exists() or not any((cwd / "runs").iterdir())


def test_without_ray_installed_the_option_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    _task(tmp_path / "tasks" / "t.yaml", "echo hi")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", str(tmp_path / "tasks"),
                        "--executor", "ray")
    assert "pip install 'evalledger[ray]'" in assert_one_line_error(result)
    assert not (tmp_path / "l.db").exists()


# ---------------------------------------------------------------------------- packing


def test_a_workdir_packs_to_the_same_bytes_whatever_its_times(tmp_path: Path) -> None:
    from evalledger.executor.ray._packing import pack as _pack

    for name in ("a", "b"):
        folder = tmp_path / name
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f.txt").write_text("same", encoding="utf-8")
        (folder / "link").symlink_to("sub/f.txt")
        os.utime(folder / "sub" / "f.txt", (1, 1 if name == "a" else 999_999))
    assert _pack(tmp_path / "a") == _pack(tmp_path / "b")
    (tmp_path / "b" / "sub" / "f.txt").write_text("other", encoding="utf-8")
    assert _pack(tmp_path / "a") != _pack(tmp_path / "b")
    assert _pack(tmp_path / "a", limit=10) is None  # past the limit: not brought back


def test_a_hand_over_cancelled_on_a_worker_never_lands_late() -> None:
    """A budget stop cancels a reader waiting to hand rows over to a full queue: those
    rows must not arrive after what the attempt records next (its task.completed)."""
    import queue
    import threading

    import trio

    from evalledger.executor.ray._worker import _ForwardToDriver as _Forward
    from evalledger.ledger import EventRow

    def row(text: str) -> EventRow:
        return EventRow(text, "r", "default/t/00", "task.output", "ts", "{}")

    out: queue.Queue[object] = queue.Queue(1)
    forward = _Forward(out, {}, threading.Event())

    async def main() -> list[object]:
        await forward.append(row("first"))  # the queue is full now
        with trio.move_on_after(0.3) as waited:
            await forward.append(row("late"))
        assert waited.cancelled_caught
        got = [out.get_nowait()]
        await forward.append(row("next"))
        got.append(out.get_nowait())
        return got

    got = trio.run(main)
    assert [batch[0][0] for batch in got] == ["first", "next"]  # type: ignore[index]
    assert out.empty()
