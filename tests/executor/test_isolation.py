"""Isolation with real bubblewrap: an adversarial agent suite, run under ``bwrap`` (every
attack fails, and the probes say what was in force) and under ``none`` (the same
attacks succeed: the suite can tell the difference); the building blocks below it.

Each attack is a task whose criteria pass only if the attack worked, given the paths
an attacker would have to guess (the victim's home, the task folder, the ledger) in
its ``env``.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import evalledger as evalledger_package
from evalledger._workspace_diff import WorkspaceUnfit
from evalledger.executor._limits import cgroup_homes
from evalledger.executor._sandbox import remove_tree
from evalledger.executor.isolation import (
    Bwrap,
    Jail,
    check_fit,
    hash_tree,
    hidden_from_others,
    leaks,
    make_canary,
    read_probes,
)
from evalledger.ledger import Ledger, verify

from ..cli.helpers import evalledger, events, of_type, write_tasks
from ..needs import NOBODY, unavailable
from ..needs import root as root_
from ..processes import alive
from ..waiting import PATIENCE, left_after, wait_until

GONE_WITHIN = 5.0
SECRET = "VICTIM PRIVATE KEY"


class Service:
    """A TCP service on 127.0.0.1 that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def wait_reached(self, within: float = PATIENCE) -> None:
        """Until a connection was accepted (its accept may lag its connect: by over 10 s
        once, with two copies of the suite on two cores)."""
        wait_until(lambda: self.connections, "a connection to the service", timeout=within)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except ConnectionAbortedError:  # reached, and gone before its accept
                self.connections += 1
                continue
            except OSError:
                if self.sock.fileno() == -1:  # closed: the test is over
                    return
                continue  # a transient failure (EINTR, out of descriptors): not an end

            self.connections += 1
            conn.close()


@pytest.fixture
def service() -> Iterator[Service]:
    served = Service()
    yield served
    served.sock.close()


ATTACKS = {
    "read-ssh": ('cat "$VICTIM/.ssh/id_ed25519" > loot', [SECRET]),
    "write-outside": ('echo pwned > "$OUTSIDE/pwned" && echo wrote > loot', ["wrote"]),
    "read-criteria": ('cat "$TASKS_DIR/read-criteria.yaml" > loot', ["success_criteria"]),
    "read-helper": ('cat "$TASKS_DIR/helper.sh" > loot; echo "exit 0" > "$TASKS_DIR/helper.sh"',
                    ["HELPER"]),
    "open-ledger": ('head -c 15 "$LEDGER" > loot', ["SQLite format 3"]),
    "reach-service": ("if command -v bash; then bash -c ': 3<>/dev/tcp/127.0.0.1/'\"$PORT\"; "
                      "else nc -w 1 127.0.0.1 \"$PORT\" </dev/null; fi && echo reached > loot",
                      ["reached"]),
    "see-processes": ('test -d "/proc/$HOST_PID" && echo seen > loot', ["seen"]),
    # What the forgery of "Why" needs: the ledger, writable (not written: the contrast
    # run below must leave it whole).
    "forge": ('test -w "$LEDGER" && echo forged > loot', ["forged"]),
}
# Outlives its attempt unless isolation ends it: found afterwards by its argument.
DAEMON = 'setsid env -i /bin/sh -c "exec sleep 299.$DAEMON_MARK" </dev/null >/dev/null 2>&1 &'


def suite(root: Path, isolation: dict[str, str], service: Service
          ) -> tuple[Path, dict[str, str]]:
    """The attacks as task files in ``root/tasks``, and the victim's files beside them."""
    victim = root / "victim" / ".ssh"
    victim.mkdir(parents=True)
    (victim / "id_ed25519").write_text(SECRET + "\n")
    (victim / "id_ed25519").chmod(0o600)
    if os.geteuid() == 0:  # another user's key, as root would find it
        os.chown(victim / "id_ed25519", 4242, 4242)
    (root / "outside").mkdir()
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "helper.sh").write_text("# HELPER: what grades the task\ntest -f solved\n")
    mark = str(os.getpid() * 1000 + len(str(root)))
    env = {"VICTIM": str(root / "victim"), "OUTSIDE": str(root / "outside"),
           "TASKS_DIR": str(tasks), "LEDGER": str(root / "ledger.db"),
           "PORT": str(service.port), "HOST_PID": str(os.getpid()), "DAEMON_MARK": mark}
    for name, (command, loot) in ATTACKS.items():
        criteria = [{"type": "file_contains", "path": "loot", "includes": loot}]
        if name == "read-helper":
            criteria.append({"type": "run_command",
                             "command": 'sh "$EVALLEDGER_TASK_DIR/helper.sh"',
                             "binds": ["helper.sh"]})
        (tasks / f"{name}.yaml").write_text(yaml.safe_dump({
            "command": f"{DAEMON}\n{command}", "env": env, **isolation,
            "timeout": 60, "success_criteria": criteria}))
    return tasks, env


def daemons(mark: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"299.{mark}".encode() in cmdline and alive(int(pid)):
            found.append(int(pid))
    return found


def wait_for_no_daemons(mark: str) -> list[int]:
    """The daemons of ``mark`` still running after up to ``GONE_WITHIN`` seconds."""
    return left_after(lambda: daemons(mark), GONE_WITHIN, every=0.05)


def test_every_attack_fails_under_isolation_and_the_probes_say_so(
    tmp_path: Path, isolated: dict[str, str], service: Service
) -> None:
    tasks, env = suite(tmp_path, isolated, service)
    result = evalledger(tmp_path, Path(env["LEDGER"]), "run", str(tasks), "--run-id", "attacks",
                        "-j", "4")
    assert result.returncode == 1, result.stderr
    all_attacks_failed(tmp_path, tasks, env, isolated, service, uid=os.getuid())




@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_every_attack_fails_when_an_unprivileged_user_runs_the_batch(
    open_folder: Path, isolated: dict[str, str], service: Service
) -> None:
    """The same suite, the runner an unprivileged user (nobody; in the docker group for
    docker): bwrap then makes its namespaces without any privilege, docker runs the
    containers as that user. Where the suite runs unprivileged already, the test above
    is this one."""
    root_("becoming the user nobody (unprivileged, the test above is this one)")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to become another user")
    root = open_folder
    tasks, env = suite(root, isolated, service)
    # Its own copy of the package (the checkout may lie in root's home), the venv's
    # interpreter and libraries (.ci/run makes its folder traversable).
    shutil.copytree(Path(evalledger_package.__file__).parent, root / "lib" / "evalledger")
    for path in (root, *(p for p in root.rglob("*") if not p.is_relative_to(root / "victim"))):
        os.lchown(path, NOBODY, NOBODY)
    groups = ([f"--groups={grp.getgrnam('docker').gr_gid}"]
              if isolated["isolation"] == "docker" else ["--clear-groups"])
    become = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", *groups, "--"]
    user_env = {"PATH": os.environ["PATH"], "HOME": str(root), "TMPDIR": str(root),
                "PYTHONPATH": str(root / "lib"), "LANG": "C.UTF-8"}
    can = subprocess.run([*become, sys.executable, "-c",
                          "import subprocess, sys, evalledger.cli; "
                          "subprocess.run([sys.executable, '-c', ''], check=True)"],
                         env=user_env, capture_output=True, text=True, check=False)
    if can.returncode:
        said = (can.stderr.strip().splitlines() or ["?"])[-1]
        unavailable("UNPRIVILEGED", f"nobody cannot run this Python ({sys.executable}): {said}")
    result = subprocess.run(
        [*become, sys.executable, "-m", "evalledger.cli", "--ledger", env["LEDGER"], "run",
         str(tasks), "--run-id", "attacks", "-j", "4"],
        cwd=root, env=user_env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 1, result.stderr
    all_attacks_failed(root, tasks, env, isolated, service, uid=NOBODY)


def all_attacks_failed(root: Path, tasks: Path, env: dict[str, str],
                       isolated: dict[str, str], service: Service, *, uid: int) -> None:
    """Every attack of ``suite`` failed, its record says why, nothing outlived it."""
    db = Path(env["LEDGER"])
    evs = events(db, "attacks")
    completed = {e.task_key: e for e in of_type(evs, "task.completed")}
    assert len(completed) == len(ATTACKS)
    for key, done in completed.items():
        assert done.final_status == "FAILURE", (key, done.error_message)
        assert done.workspace_hash is not None
    records = of_type(evs, "task.isolation")
    assert len(records) == len(ATTACKS)
    for record in records:
        assert record.backend == isolated["isolation"] and record.network == "none"
        assert record.uid == uid
        assert record.probes == {"canary": "absent", "ledger": "absent",
                                 "task_file": "absent", "network": "refused"}
    assert not (root / "outside" / "pwned").exists()
    assert service.connections == 0
    # The helper the agent tried to rewrite is intact, and graded it: it ran, and failed.
    assert "HELPER" in (tasks / "helper.sh").read_text()
    helper = completed["default/read-helper/00"].criteria[1]
    assert (helper.passed, helper.detail) == (False, "exit code 1")
    # Nothing of any attempt outlived it, no container either: no later forgery is possible.
    assert wait_for_no_daemons(env["DAEMON_MARK"]) == []
    assert containers(evs) == []
    with Ledger(db, read_only=True) as ledger:
        assert verify(ledger).ok


def containers(evs: list) -> list[str]:
    """The containers (running or not) of the batch that recorded ``evs``."""
    if shutil.which("docker") is None:
        return []
    token = of_type(evs, "run.started")[0].batch_token
    listed = subprocess.run(["docker", "ps", "-aq", "--filter",
                             f"label=evalledger.batch={token}"],
                            capture_output=True, text=True)
    if listed.returncode != 0 and "Cannot connect to the Docker daemon" in listed.stderr:
        return []  # a client without its daemon: no container of any batch exists
    listed.check_returncode()
    return listed.stdout.split()


def test_the_same_attacks_succeed_without_isolation(
    tmp_path: Path, bwrap: Bwrap, service: Service
) -> None:
    """What makes the test above able to fail: with ``none`` they work."""
    tasks, env = suite(tmp_path, {"isolation": "none"}, service)
    db = Path(env["LEDGER"])
    try:
        result = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "attacks", "-j", "4")
        assert result.returncode in (0, 1), result.stderr
        completed = {e.task_key: e for e in of_type(events(db, "attacks"), "task.completed")}
        worked = {key.split("/")[1] for key, e in completed.items()
                  if e.final_status == "SUCCESS"}
        expected = set(ATTACKS) - ({"read-ssh"} if os.geteuid() else set())
        assert worked == expected, {k: e.error_message for k, e in completed.items()}
        assert (tmp_path / "outside" / "pwned").exists()
        service.wait_reached()
        if cgroup_homes() is None:
            assert daemons(env["DAEMON_MARK"]) != []  # escaped: the hole isolation closes
        else:  # its cgroup held it all the same: ended with its attempt (limits)
            assert wait_for_no_daemons(env["DAEMON_MARK"]) == []
        assert of_type(events(db, "attacks"), "task.isolation") == []
    finally:
        for pid in daemons(env["DAEMON_MARK"]):
            os.kill(pid, 9)


# -- the building blocks ---------------------------------------------------------------


def test_hidden_from_others_lists_what_other_users_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "open.conf").write_text("x")
    (tmp_path / "shadow").write_text("x")
    (tmp_path / "shadow").chmod(0o640)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "key").write_text("x")  # inside a hidden folder: the folder is masked
    (tmp_path / "link").symlink_to("shadow")
    assert sorted(hidden_from_others(str(tmp_path))) == [str(private), str(tmp_path / "shadow")]


def test_the_workspace_hash_covers_names_contents_modes_and_links(tmp_path: Path) -> None:
    def tree(name: str) -> Path:
        root = tmp_path / name
        (root / "src").mkdir(parents=True)
        (root / "src" / "a.py").write_text("print(1)\n")
        (root / "link").symlink_to("src/a.py")
        return root

    first = hash_tree(tree("one"))
    assert hash_tree(tree("two")) == first  # where the tree is does not count
    changes = {
        "content": lambda r: (r / "src" / "a.py").write_text("print(2)\n"),
        "mode": lambda r: (r / "src" / "a.py").chmod(0o755),
        "name": lambda r: (r / "src" / "a.py").rename(r / "src" / "b.py"),
        "link": lambda r: ((r / "link").unlink(), (r / "link").symlink_to("src")),
        "empty folder": lambda r: (r / "new").mkdir(),
    }
    for what, change in changes.items():
        root = tree(what.replace(" ", "-"))
        change(root)
        assert hash_tree(root) != first, what


def walked_hash(root: Path) -> str:
    """``hash_tree`` as it was written over ``os.walk`` (before the walk became a loop):
    the hashes ledgers recorded were made so."""
    digest, read = hashlib.sha256(), {}
    for top, folders, files in os.walk(root):
        folders.sort()
        for name in sorted(folders + files):
            path = os.path.join(top, name)
            relative = os.path.relpath(path, root).encode("utf-8", "surrogateescape")
            info = os.lstat(path)
            kind = ("l" if stat.S_ISLNK(info.st_mode) else "d" if stat.S_ISDIR(info.st_mode)
                    else "f" if stat.S_ISREG(info.st_mode) else "o")
            digest.update(b"%s\0%s\0%o\0" % (relative, kind.encode(),
                                             stat.S_IMODE(info.st_mode)))
            if kind == "l":
                digest.update(os.fsencode(os.readlink(path)))
            elif kind == "f":
                inode = (info.st_dev, info.st_ino)
                if inode not in read:
                    read[inode] = hashlib.sha256(Path(path).read_bytes()).digest()
                digest.update(read[inode])
            digest.update(b"\n")
    return digest.hexdigest()


def test_the_workspace_hash_is_the_one_recorded_before_its_walk_became_a_loop(
    tmp_path: Path,
) -> None:
    root = tmp_path / "w"
    for folder in ("a/b/c", "a/b2", "z", "é ü"):
        (root / folder).mkdir(parents=True)
    (root / "a" / "f").write_text("x")
    (root / "a" / "b" / "c" / "g").write_text("y")
    os.link(root / "a" / "f", root / "z" / "hard")
    (root / "a" / "to-z").symlink_to("../z")  # a link to a folder: listed, not entered
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")
    for tree in (root, Path(evalledger_package.__file__).parent):
        assert hash_tree(tree) == walked_hash(tree)


@pytest.mark.parametrize(("shape", "says"), [
    ("deep", "folders nested deeper than 256 levels"),
    ("long", "a path longer than 3072 bytes"),
])
def test_a_workspace_past_the_bounds_is_unfit_not_a_crash(tmp_path: Path, shape: str,
                                                          says: str) -> None:
    folder = os.open(tmp_path, os.O_RDONLY)
    name, levels = ("d", 1100) if shape == "deep" else ("n" * 200, 20)
    os.mkdir("w", dir_fd=folder)
    for step in ["w"] + [name] * levels:
        if step != "w":
            os.mkdir(step, dir_fd=folder)
        inner = os.open(step, os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    os.close(folder)
    try:
        for walk in (hash_tree, check_fit):
            with pytest.raises(WorkspaceUnfit, match=says):
                walk(tmp_path / "w")
    finally:  # deeper than pytest's own clean-up (shutil.rmtree) can go
        remove_tree(tmp_path / "w")


def test_probe_lines_are_read_strictly_and_leaks_named() -> None:
    assert read_probes(" absent absent absent refused") == {
        "canary": "absent", "ledger": "absent", "task_file": "absent", "network": "refused"}
    assert read_probes("absent absent refused") is None
    assert read_probes("") is None
    seen = {"canary": "visible", "ledger": "absent", "task_file": "visible",
            "network": "connected"}
    assert leaks(seen, "none") == ["canary is visible", "task_file is visible",
                                   "a port of the runner's host answered"]
    assert leaks(seen, "host") == ["canary is visible", "task_file is visible"]


def _confined_as(uid: int | None, jail: Jail, command: str) -> tuple[str, str]:
    """Run the agent's argv of ``jail`` (as ``uid``, through setpriv, when given); its
    output and the prelude's report."""
    read, write = os.pipe()
    argv = jail.agent(command, ["", ""], write)
    if uid is not None:
        os.fchown(write, uid, uid)  # the runner's own pipe, as when the user runs it
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    try:
        done = subprocess.run(argv, cwd=jail.workspace, capture_output=True, text=True,
                              timeout=60, pass_fds=(write,), check=False,
                              env={"PATH": "/usr/bin:/bin"})
    finally:
        os.close(write)
    with os.fdopen(read) as report:
        return done.stdout + done.stderr, report.readline()


@pytest.mark.parametrize("as_user", ["runner", "unprivileged"])
def test_a_confined_command_sees_only_its_workspace(
    open_folder: Path, bwrap: Bwrap, as_user: str
) -> None:
    """The same sandbox, made by root and by an unprivileged user (nobody): the canary
    beside the workspace is not there, the workspace is writable, the host's secrets
    and processes are not visible, nothing is writable outside."""
    if as_user == "unprivileged":
        root_("becoming another user")
        uid: int | None = 65534
    else:
        uid = None
    # Readable by anyone on the host: only the sandbox hides it.
    root = open_folder
    workspace = root / "workspace"
    workspace.mkdir()
    if uid is not None:
        os.chown(workspace, uid, uid)
    canary = make_canary(root)
    Path(canary).chmod(0o644)
    jail = Jail(bwrap, workspace, "none", (), canary)
    said, report = _confined_as(uid, jail, (
        f'cat {canary}; echo made > made; touch /usr/x /etc/x 2>/dev/null || echo ro; '
        'cat /etc/shadow 2>/dev/null | head -c 1 | wc -c; ls /proc | grep -c "^[0-9]"; pwd'))
    assert read_probes(report) == {"canary": "absent", "ledger": "absent",
                                   "task_file": "absent", "network": "refused"}
    lines = said.split()
    assert (workspace / "made").read_text() == "made\n"
    assert "ro" in lines and "/work" in lines and "must not see" not in said
    # /etc/shadow reads as nothing; a handful of processes (the sandbox's own) exist.
    counts = [int(x) for x in lines if x.isdigit()]
    assert counts[0] == 0 and counts[1] < 10, said


def test_the_example_suite_ends_the_same_under_none_bwrap_and_docker(
    tmp_path: Path, bwrap: Bwrap, docker_images: dict[str, str]
) -> None:
    """The example agent works inside each: under docker in an image with a Python
    (given by an experiment's defaults, as a user would)."""
    from ..smoke import SMOKE_KEYS, copy_smoke

    smoke = copy_smoke(tmp_path)
    (smoke / "docker.yaml").write_text(yaml.safe_dump({
        "experiment_id": "in-docker", "tasks": ["tasks/"],
        "defaults": {"isolation": "docker", "image": docker_images["python"]}}))
    db = tmp_path / "ledger.db"
    statuses = {}
    for isolation, how in (("none", ["--isolation", "none"]),
                           ("bwrap", ["--isolation", "bwrap"]),
                           ("docker", ["-e", str(smoke / "docker.yaml")])):
        paths = [] if isolation == "docker" else [str(smoke / "tasks")]
        result = evalledger(tmp_path, db, "run", *paths, *how, "--run-id", isolation,
                            "--require-isolation")
        assert result.returncode == 0, result.stdout + result.stderr
        evs = events(db, isolation)
        statuses[isolation] = {e.task_key: e.final_status
                               for e in of_type(evs, "task.completed")}
        backends = [e.backend for e in of_type(evs, "task.isolation")]
        assert backends == ([] if isolation == "none" else [isolation] * 4)
    assert statuses["none"] == statuses["bwrap"] == statuses["docker"] == SMOKE_KEYS
    # Each says what ran it: run.json per task, show and diff in words.
    report = json.loads((tmp_path / "runs" / "bwrap" / "run.json").read_text())
    assert {row["isolation"] for row in report["tasks"]} == {"bwrap"}
    shown = evalledger(tmp_path, db, "show", "docker")
    assert "isolation: docker (4 tasks)" in shown.stderr
    assert "not a security boundary" in evalledger(tmp_path, db, "show", "none").stderr
    compared = evalledger(tmp_path, db, "diff", "none", "bwrap")
    assert compared.returncode == 0, compared.stderr
    assert "isolation differs for 4 task(s): none → bwrap" in compared.stderr
    as_json = json.loads(evalledger(tmp_path, db, "diff", "bwrap", "docker", "--json").stdout)
    assert {t["isolation"] for t in as_json["tasks"]} == {"bwrap → docker"}
    # The SQL views say it too, and which workspace was graded.
    said = evalledger(tmp_path, db, "sql", "SELECT run_id, isolation, count(*), "
                      "count(workspace_hash) FROM task_results GROUP BY 1, 2 ORDER BY 1")
    assert said.out_lines[1:] == ["bwrap\tbwrap\t4\t4", "docker\tdocker\t4\t4",
                                  "none\tnone\t4\t0"]
    # And the viewer, on each attempt: what confined it, and what its probes found.
    from starlette.testclient import TestClient

    from evalledger.viewer import create_app

    with TestClient(create_app(db)) as client:
        page = client.get("/runs/bwrap/tasks/default/add-numbers/00").text
        assert "probes: canary absent, ledger absent, network refused, task_file absent" in page
        assert "bubblewrap" in page
        assert "image <span" in client.get("/runs/docker/tasks/default/add-numbers/00").text
        plain = client.get("/runs/none/tasks/default/add-numbers/00").text
        assert "</span>: not a security boundary" in plain
        api = client.get("/api/runs/bwrap/tasks/default/add-numbers/00").json()
        assert api["attempts"][0]["isolation"]["backend"] == "bwrap"


def test_an_api_key_reaches_a_confined_agent_only_through_env_passthrough(
    tmp_path: Path, isolated: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Claude-Code-shaped agent: it needs ANTHROPIC_API_KEY from the runner's
    environment; the runner's other variables never reach it."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-123")
    monkeypatch.setenv("RUNNER_SECRET", "do-not-leak")
    agent = ('test "$ANTHROPIC_API_KEY" = sk-test-123 && echo key-ok; '
             'test -z "$RUNNER_SECRET" && echo secret-hidden')
    tasks = write_tasks(tmp_path / "tasks", {
        name: {"command": agent, **isolated, "env_passthrough": passthrough,
               "success_criteria": [{"type": "output_contains",
                                     "includes": ["key-ok", "secret-hidden"]}]}
        for name, passthrough in (("with", ["ANTHROPIC_API_KEY"]), ("without", []))})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "keys")
    done = {e.task_key: e for e in of_type(events(db, "keys"), "task.completed")}
    assert done["default/with/00"].final_status == "SUCCESS"
    assert done["default/without/00"].final_status == "FAILURE"
    assert "key-ok" in (done["default/without/00"].error_message or "")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("isolation", ["none", "bwrap", "docker"])
def test_a_stopped_agent_gets_sigterm_first_and_its_death_reads_as_without_isolation(
    tmp_path: Path, isolation: str, request: pytest.FixtureRequest
) -> None:
    """At the timeout SIGTERM reaches the agent, which may clean up within the grace;
    one that dies of it reads exit -15, as without isolation (bwrap and docker say 143)."""
    keys: dict[str, str] = {"isolation": isolation}
    if isolation == "bwrap":
        request.getfixturevalue("bwrap")
    elif isolation == "docker":
        keys["image"] = request.getfixturevalue("docker_images")["busybox"]
    cleanup = ('trap "echo cleaned > cleaned; exit 7" TERM; echo ready; '
               'while :; do sleep 0.05; done')
    tasks = write_tasks(tmp_path / "tasks", {
        name: {"command": command, **keys, "timeout": 3,
               "success_criteria": [{"type": "output_contains", "includes": ["ready"]}]}
        for name, command in (("dies", "echo ready; exec sleep 60"), ("cleans-up", cleanup))})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "stop", "--kill-grace", "20")
    done = {e.task_key: e for e in of_type(events(db, "stop"), "task.completed")}
    assert {k: (e.final_status, e.exit_code) for k, e in done.items()} == {
        "default/dies/00": ("TIMEOUT", -15), "default/cleans-up/00": ("TIMEOUT", 7)}
    kept = tmp_path / "runs" / "stop" / "artifacts" / "default" / "cleans-up" / "00"
    assert (kept / "cleaned").read_text() == "cleaned\n"


def test_a_container_the_deadline_stops_before_it_is_up_is_a_timeout(
    tmp_path: Path, docker_images: dict[str, str]
) -> None:
    """Starting a container takes hundreds of ms: a task whose timeout passes first
    timed out (its record says it was stopped before its probes); a sandbox that
    cannot start at all (an image without a shell) is an ERROR that says so."""
    tasks = write_tasks(tmp_path / "tasks", {
        name: {"command": "echo hi", "isolation": "docker", "image": docker_images["busybox"],
               "success_criteria": [{"type": "exit_code"}], **keys}
        for name, keys in (("slow", {"timeout": 0.05}),
                           ("broken", {"command": ["/no/such/program"]}))})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "starts")
    evs = events(db, "starts")
    done = {e.task_key: e for e in of_type(evs, "task.completed")}
    records = {e.task_key: e for e in of_type(evs, "task.isolation")}
    assert done["default/slow/00"].final_status == "TIMEOUT"
    slow = records["default/slow/00"]
    if slow.probes:
        # A warm daemon can bring the container up while the stopped client is ended:
        # its probes reached the pipe before it closed, and were read from it.
        assert slow.reason is None, slow
    else:
        assert slow.reason == "stopped before docker reported its probes", slow
    # The prelude ran (probes reported), then the exec failed: the command's own exit.
    assert done["default/broken/00"].final_status == "FAILURE"
    assert done["default/broken/00"].exit_code == 127
    assert containers(evs) == []


def test_a_sandbox_that_cannot_start_is_an_error_saying_so(tmp_path: Path, bwrap: Bwrap) -> None:
    """A bind to a path that is not there: bwrap refuses to start, says why on stderr
    (recorded), and the attempt is ERROR, not the command's failure."""
    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": "echo hi", "isolation": "bwrap", "binds": {"GONE": "no/such/folder"},
        "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "broken")
    evs = events(db, "broken")
    (done,) = of_type(evs, "task.completed")
    assert done.final_status == "ERROR"
    assert done.error_message.startswith("the isolated command never started: bwrap exited 1")
    assert any("no/such/folder" in e.line for e in of_type(evs, "task.output"))


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_isolation_missing_here_is_refused_or_run_as_none_and_said(tmp_path: Path) -> None:
    """No bwrap on the PATH (as on a machine without it, or macOS): the run is refused
    in one line before anything is recorded (it ran unconfined with a warning: a task
    that asked for a boundary ran with none); with --allow-unconfined it runs with none,
    says so, and each attempt's record says what was asked."""
    import sys

    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": "echo ran", "isolation": "bwrap",
        "success_criteria": [{"type": "output_contains", "includes": ["ran"]}]}})
    (tmp_path / "bin").mkdir()  # a PATH with nothing on it
    db = tmp_path / "ledger.db"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db),
                               "run", str(tasks), *args], cwd=tmp_path, text=True,
                              capture_output=True, env={**os.environ,
                                                        "PATH": str(tmp_path / "bin")},
                              timeout=120, check=False)

    for refused in (run("--run-id", "strict"), run("--run-id", "strict", "--require-isolation"),
                    run("--run-id", "strict", "--allow-unconfined", "--require-isolation")):
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines() == [
            "Error: isolation bwrap is not available: bwrap is not installed (Debian: apt "
            "install bubblewrap); 1 task(s) ask for it (--allow-unconfined runs them with "
            "none: no boundary)"]
    assert not db.exists() or events(db, "strict") == []
    ran = run("--run-id", "lenient", "--allow-unconfined")
    assert ran.returncode == 0, ran.stderr
    assert "warning: isolation bwrap is not available" in ran.stderr
    assert "isolation: none (asked bwrap) (1 task); none is not a security boundary" in ran.stderr
    (record,) = of_type(events(db, "lenient"), "task.isolation")
    assert (record.backend, record.asked) == ("none", "bwrap")
    assert record.reason == "bwrap is not installed (Debian: apt install bubblewrap)"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_task_naming_no_isolation_runs_under_the_strongest_that_runs_here(
    tmp_path: Path, bwrap: Bwrap
) -> None:
    """A task file's default is auto: here bwrap, recorded as asked auto; defined and
    hashed as before auto (alike with isolation: none). Where no bwrap is on the PATH
    the run is refused in one line naming both ways out; --allow-unconfined runs it
    with none and says so; ``EVALLEDGER_ISOLATION`` sets a machine's default."""
    import sys

    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": "test ! -e \"$HOME_HERE\" && echo ran", "env": {"HOME_HERE": str(tmp_path)},
        "success_criteria": [{"type": "output_contains", "includes": ["ran"]}]}})
    db = tmp_path / "ledger.db"
    (tmp_path / "bin").mkdir()  # a PATH with nothing on it

    def run(*args: str, path: str = os.environ["PATH"],
            **env: str) -> subprocess.CompletedProcess[str]:
        without = {k: v for k, v in os.environ.items() if k != "EVALLEDGER_ISOLATION"}
        return subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db),
                               "run", str(tasks), *args], cwd=tmp_path, text=True,
                              capture_output=True, env={**without, "PATH": path, **env},
                              timeout=120, check=False)

    ran = run("--run-id", "auto")
    assert ran.returncode == 0, ran.stderr
    assert "isolation: bwrap (asked auto) (1 task)" in ran.stderr
    (record,) = of_type(events(db, "auto"), "task.isolation")
    assert (record.backend, record.asked, record.probes["task_file"]) == ("bwrap", "auto", "absent")
    (started,) = of_type(events(db, "auto"), "task.started")
    assert "isolation" not in started.definition
    explicit = write_tasks(tmp_path / "none", {"t": {**yaml.safe_load(
        (tasks / "t.yaml").read_text()), "isolation": "none"}})
    from evalledger.suite import load_tasks
    assert load_tasks([explicit]).tasks[0].definition_hash == started.definition_hash

    refused = run("--run-id", "refused", path=str(tmp_path / "bin"))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "Error: no isolation runs here (isolation auto: bwrap is not installed (Debian: apt "
        "install bubblewrap)); 1 task(s) ask for it (--allow-unconfined runs them with "
        "none: no boundary; or give them isolation: none)"]
    lenient = run("--run-id", "lenient", "--allow-unconfined", path=str(tmp_path / "bin"))
    assert lenient.returncode == 1, lenient.stderr  # unconfined, it sees the folder
    (record,) = of_type(events(db, "lenient"), "task.isolation")
    assert (record.backend, record.asked) == ("none", "auto")
    machine = run("--run-id", "machine", path=str(tmp_path / "bin"), EVALLEDGER_ISOLATION="none")
    assert machine.returncode == 1 and "none is not a security boundary" in machine.stderr
    bogus = run("--run-id", "bogus", EVALLEDGER_ISOLATION="sandbox")
    assert bogus.returncode == 2 and "EVALLEDGER_ISOLATION='sandbox' is not an isolation" \
        in bogus.stderr, bogus.stderr


# An executor-level batch (no app check before it: what a Ray worker meets) of one task
# asking for bwrap, in a process whose PATH holds no bwrap.
_UNCONFINED = """
import sys
import trio
from evalledger.executor import BatchConfig, run_batch
from evalledger.ledger import Ledger
from evalledger.options import RunOptions
from tests.executor.batches import make_task
allowed = sys.argv[2] == "allowed"
with Ledger(sys.argv[1]) as ledger:
    task = make_task("t", ["/bin/echo", "ran"], isolation="bwrap")
    config = BatchConfig(run_id="r", options=RunOptions(out=sys.argv[3],
                                                        allow_unconfined=allowed))
    trio.run(run_batch, ledger, [task], config)
"""


@pytest.mark.slow  # a batch in a process of its own, each
@pytest.mark.parametrize("allowed", [False, True])
def test_an_isolation_gone_once_the_run_started_is_an_error_unless_allowed(
    tmp_path: Path, allowed: bool,
) -> None:
    """Checked before the run starts locally; a worker (or a machine that lost it)
    found out only at the attempt, and ran the command with none."""
    (tmp_path / "bin").mkdir()
    db = tmp_path / "ledger.db"
    done = subprocess.run(
        [sys.executable, "-c", _UNCONFINED, str(db), "allowed" if allowed else "refused",
         str(tmp_path / "out")], cwd=Path(evalledger_package.__file__).parents[1],
        env={**os.environ, "PATH": str(tmp_path / "bin")}, capture_output=True, text=True,
        timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    evs = events(db, "r")
    (completed,) = of_type(evs, "task.completed")
    (record,) = of_type(evs, "task.isolation")
    if allowed:
        assert (completed.final_status, record.backend) == ("SUCCESS", "none")
        assert any(e.line == "ran" for e in of_type(evs, "task.output"))
    else:
        assert (completed.final_status, completed.failure_class) == ("ERROR", "infra")
        assert completed.error_message == (
            "isolation bwrap is not available here: bwrap is not installed (Debian: apt "
            "install bubblewrap) (--allow-unconfined runs it with none)")
        assert (record.backend, record.asked) == ("bwrap", "bwrap")
        assert not of_type(evs, "task.output")  # the command never ran


def test_what_a_task_would_hand_its_confined_command_is_refused_and_setid_bits_defused(
    tmp_path: Path, bwrap: Bwrap
) -> None:
    """A workdir holding the task file (its criteria) is a leak before anything runs;
    what a confined command leaves is kept without setuid, setgid or write-by-anyone
    bits (a program that would run as the runner); the host's network is not probed."""
    tasks = write_tasks(tmp_path / "tasks", {
        "leaky": {"command": "echo ran", "isolation": "bwrap", "workdir": ".",
                  "success_criteria": [{"type": "exit_code"}]},
        "setid": {"command": "cp /usr/bin/true prog && chmod 6755 prog && touch open "
                             "&& chmod 0777 open && mkdir dir && chmod 1777 dir",
                  "isolation": "bwrap", "network": "host", "workdir": "data",
                  "success_criteria": [{"type": "exit_code"}]}})
    (tasks / "data").mkdir()
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "handed")
    evs = events(db, "handed")
    done = {e.task_key: e for e in of_type(evs, "task.completed")}
    records = {e.task_key: e for e in of_type(evs, "task.isolation")}
    assert done["default/leaky/00"].final_status == "ERROR"
    assert done["default/leaky/00"].error_message == (
        "isolation leaked: the workdir holds the task file")
    assert records["default/leaky/00"].reason == done["default/leaky/00"].error_message
    assert not any(e.task_key == "default/leaky/00" for e in of_type(evs, "task.output"))
    assert done["default/setid/00"].final_status == "SUCCESS"
    assert records["default/setid/00"].probes["network"] == "unprobed"
    kept = tmp_path / "runs" / "handed" / "artifacts" / "default" / "setid" / "00"
    modes = {name: stat.S_IMODE((kept / name).stat().st_mode) for name in ("prog", "open", "dir")}
    assert modes == {"prog": 0o755, "open": 0o775, "dir": 0o1775}


def test_binds_that_hold_the_ledger_the_criteria_or_the_runs_are_refused(
    tmp_path: Path, bwrap: Bwrap
) -> None:
    """A ``binds`` folder holding the run's --out folder handed every earlier run's kept
    artifacts to the command (read-only, still readable) while the probes said the
    ledger and the task folder were absent."""
    (tmp_path / "runs" / "earlier").mkdir(parents=True)
    tasks = write_tasks(tmp_path / "tasks", {
        "wide": {"command": "echo ran", "isolation": "bwrap",
                 "binds": {"DATA": str(tmp_path)}, "success_criteria": [{"type": "exit_code"}]},
        "inside": {"command": "echo ran", "isolation": "bwrap",
                   "binds": {"OLD": str(tmp_path / "runs" / "earlier")},
                   "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "bound")
    evs = events(db, "bound")
    done = {e.task_key: e for e in of_type(evs, "task.completed")}
    assert {k: (d.final_status, d.error_message) for k, d in done.items()} == {
        "default/wide/00": ("ERROR", f"isolation leaked: binds {tmp_path} holds the task "
                                     f"file, binds {tmp_path} holds the ledger, binds "
                                     f"{tmp_path} holds the run's --out folder"),
        "default/inside/00": ("ERROR", f"isolation leaked: binds {tmp_path}/runs/earlier "
                                       "is in the run's --out folder")}
    assert not of_type(evs, "task.output")  # nothing ran


def test_a_confined_grader_sees_of_the_task_folder_only_what_its_binds_name(
    tmp_path: Path, isolated: dict[str, str]
) -> None:
    """What the agent left runs inside a grader (a planted ``conftest.py``): the grader
    finds the helper its criterion binds, and neither the other criteria's hidden files
    nor the task file; a criterion binding the whole task folder is refused."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "helper.sh").write_text("exit 0\n")
    (tasks / "hidden_tests.py").write_text("SECRET\n")
    looks = ('sh "$EVALLEDGER_TASK_DIR/helper.sh" && test ! -e "$EVALLEDGER_TASK_DIR/'
             'hidden_tests.py" && test ! -e "$EVALLEDGER_TASK_DIR/graded.yaml"')
    write_tasks(tasks, {
        "graded": {"command": "echo ran", **isolated, "success_criteria": [
            {"type": "run_command", "command": looks, "binds": ["helper.sh"]}]},
        "wide": {"command": "echo ran", **isolated, "success_criteria": [
            {"type": "run_command", "command": "true", "binds": ["."]}]}})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "graders")
    done = {e.task_key: e for e in of_type(events(db, "graders"), "task.completed")}
    assert done["default/graded/00"].final_status == "SUCCESS", done["default/graded/00"]
    assert (done["default/wide/00"].final_status, done["default/wide/00"].error_message) == (
        "ERROR", f"isolation leaked: binds {tasks} holds the task file")


def test_a_container_runs_our_command_not_its_images_entrypoint_and_cannot_forge_its_probes(
    tmp_path: Path, docker_images: dict[str, str]
) -> None:
    """An image built from a task's dockerfile, with an ENTRYPOINT that would fail: the
    prelude and the command run all the same. A command that writes a clean report to
    the probe's pipe changes nothing: the runner read the prelude's before it started.
    A bind exposing the task folder is a leak, refused before anything runs."""
    image = tmp_path / "image"
    image.mkdir()
    (image / "Dockerfile").write_text(f'FROM {docker_images["busybox"]}\n'
                                      'ENTRYPOINT ["/bin/false"]\n')
    forge = 'for i in 1 2 3; do echo " absent absent absent refused" > /.evalledger-probe; done'
    tasks = write_tasks(tmp_path / "tasks", {
        name: {"command": f"{forge}; echo ran", "isolation": "docker",
               "dockerfile": "../image/Dockerfile",
               "success_criteria": [{"type": "output_contains", "includes": ["ran"]}], **keys}
        for name, keys in (("built", {}), ("forger", {"binds": {"TASKS": "."}}))})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "built", "--require-isolation")
    evs = events(db, "built")
    done = {e.task_key: e for e in of_type(evs, "task.completed")}
    records = {e.task_key: e for e in of_type(evs, "task.isolation")}
    assert done["default/built/00"].final_status == "SUCCESS"
    assert records["default/built/00"].image.startswith("sha256:")
    assert records["default/built/00"].probes["task_file"] == "absent"
    assert done["default/forger/00"].final_status == "ERROR"
    assert records["default/forger/00"].reason == (
        f"isolation leaked: binds {tmp_path / 'tasks'} holds the task file")
    assert containers(evs) == []


def test_a_changed_dockerfile_builds_a_new_image_and_an_odd_bind_path_stays_whole(
    tmp_path: Path, docker_images: dict[str, str]
) -> None:
    """A dockerfile's image is tagged by its folder's contents: changed between two
    runs, it is built anew (the record names the new image; the command runs in it). A
    bind whose path holds ':' and ',' (which ``-v`` would split) arrives as one path."""
    image = tmp_path / "image"
    image.mkdir()
    odd = tmp_path / "data:1,2"
    odd.mkdir()
    (odd / "in.txt").write_text("odd-ok\n")
    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": 'echo "mark=$MARK"; cat "$ODD/in.txt"', "isolation": "docker",
        "dockerfile": "../image/Dockerfile", "binds": {"ODD": "../data:1,2"},
        "success_criteria": [{"type": "output_contains", "includes": ["odd-ok"]}]}})
    db = tmp_path / "ledger.db"
    images = {}
    for mark in ("1", "2"):
        (image / "Dockerfile").write_text(f'FROM {docker_images["busybox"]}\nENV MARK={mark}\n')
        result = evalledger(tmp_path, db, "run", str(tasks), "--run-id", f"mark{mark}",
                            "--require-isolation")
        assert result.returncode == 0, result.stdout + result.stderr
        evs = events(db, f"mark{mark}")
        assert [e.final_status for e in of_type(evs, "task.completed")] == ["SUCCESS"]
        assert f"mark={mark}" in [e.line for e in of_type(evs, "task.output")]
        (record,) = of_type(evs, "task.isolation")
        images[mark] = record.image
    assert images["1"] != images["2"]


def test_a_report_its_reader_had_no_turn_to_read_is_recorded_all_the_same(
    tmp_path: Path, bwrap: Bwrap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine a command can end, and its pipes close, before the probe
    reader runs at all (seen beside a second copy of the suite: ERROR "never
    started"). The report is in the pipe all the same: recorded, and the attempt ends
    as its command did. Here the reader never gets its turn before the attempt ends."""
    import trio

    from evalledger.executor import _runner

    read = _runner.read_probes

    async def starved(*args: object) -> None:
        await trio.sleep(600)  # cancelled when the attempt ends, as a starved task is
        await read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_runner, "read_probes", starved)
    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": "exit 3", "isolation": "bwrap", "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "ledger.db"
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "starved")
    evs = events(db, "starved")
    (done,) = of_type(evs, "task.completed")
    (record,) = of_type(evs, "task.isolation")
    assert (done.final_status, done.exit_code) == ("FAILURE", 3), done.error_message
    assert record.probes == {"canary": "absent", "ledger": "absent", "task_file": "absent",
                             "network": "refused"}
