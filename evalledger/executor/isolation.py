"""Isolation: what an attempt's command (and a ``run_command`` grader) can see and reach.

``none`` runs the command as the runner, with its environment and file system: no
boundary. ``bwrap`` runs it under bubblewrap (docs/isolation.md):

- the workspace (the sandbox copy) read-write at ``/work``, a private ``/tmp``, the
  system (``/usr``, ``/etc``, the ``/bin``-style links) read-only, with every file the
  system hides from other users (``/etc/shadow``, host keys, ...) masked;
- nothing else of the host: not the task folder and its criteria, the ledger, the run
  folder or the user's home, unless a task's ``binds`` names a path (read-only);
- its own pid, network (``network: none``: only a loopback of its own), IPC, UTS and
  cgroup namespaces; every capability dropped, also for a root runner;
- the task's ``env``, the ``env_passthrough`` names and a minimal PATH/HOME: never the
  runner's whole environment.

Every confined command starts behind a prelude that probes, from inside, what is in
force before the command runs: whether a canary file outside the workspace, the ledger
and the task file are visible, and whether a port the runner listens on answers. Its
one line comes back on fd 3 and becomes the attempt's ``task.isolation`` record; a leak
ends the attempt as ERROR.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Where the workspace is, inside.
WORKSPACE = "/work"
# What an isolated command gets of the runner's environment without asking.
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
             "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
# Top-level links and folders of the system, bound read-only (as links when links).
_SYSTEM = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

# The prelude's arguments: $1..$3 paths that must not be visible, $4 the runner's port
# (0 with the host's network: no probe, its answer would mean nothing), $5 the fd (bash)
# or path (sh) to report on, for sh $6 a pipe to wait on before the command starts (or
# ""), then "--" and the command. In bash (where there is one):
# /dev/tcp connects without a fork, and the report fd is closed before the command
# starts, so it cannot write a report of its own. In plain sh (dash names only fds
# 0-9, and cannot connect): the report goes through /proc, the network is "unprobed",
# and the runner reads the first line only.
_PRELUDE_BASH = r"""
r=""
for p in "$1" "$2" "$3"; do
  if [[ -n $p && -e $p ]]; then r+=" visible"; else r+=" absent"; fi
done
if [[ $4 == 0 ]]; then r+=" unprobed"
elif : 2>/dev/null 9<>"/dev/tcp/127.0.0.1/$4"; then r+=" connected"; else r+=" refused"; fi
echo "$r" >&"$5"
eval "exec $5>&-"
shift 7
exec "$@"
"""
_PRELUDE_SH = r"""
r=""
for p in "$1" "$2" "$3"; do
  if [ -n "$p" ] && [ -e "$p" ]; then r="$r visible"; else r="$r absent"; fi
done
if [ "$4" = 0 ]; then r="$r unprobed"
elif command -v bash >/dev/null 2>&1; then
  if bash -c ": 9<>/dev/tcp/127.0.0.1/$4" 2>/dev/null; then r="$r connected"
  else r="$r refused"; fi
elif command -v nc >/dev/null 2>&1; then
  if nc -w 1 127.0.0.1 "$4" </dev/null >/dev/null 2>&1; then r="$r connected"
  else r="$r refused"; fi
else r="$r unprobed"; fi
echo "$r" >"$5"
if [ -n "$6" ]; then read -r _ <"$6"; fi
shift 7
exec "$@"
"""
PROBE_NAMES = ("canary", "ledger", "task_file", "network")


def prelude_sh(probe: Sequence[str], wait: str = "") -> list[str]:
    """The plain-sh prelude's argv, the command to follow (``probe``: three paths, the
    port, the path to report to; ``wait``: a pipe to read a line from first)."""
    return ["/bin/sh", "-c", _PRELUDE_SH, "evalledger-probe", *probe, wait, "--"]


class IsolationUnavailable(Exception):
    """The asked isolation cannot run here (the reason is the message)."""


@dataclass(frozen=True)
class Bwrap:
    """bubblewrap as found on this machine: its path and version, and the arguments
    that make the system visible read-only with its secrets masked."""

    path: str
    version: str
    system: tuple[str, ...]
    # The system's bash (it runs the probes cheaper and better than sh), if any.
    bash: str | None = None
    # Whether it takes ``--size`` (bubblewrap 0.8 and later): a /tmp of a bounded size.
    sizes: bool = True

    def argv(self, command: str | list[str], workspace: Path, *, network: str,
             binds: Sequence[str] = (), probe: Sequence[str] | None = None,
             tmp: int | None = None, mounts: Sequence[tuple[str, str]] = ()) -> list[str]:
        """The argv that runs ``command`` confined, the workspace at ``/work``.

        ``binds`` are host paths bound read-only at the same path, ``mounts`` host paths
        bound read-only where each says. With ``probe`` (the prelude's arguments: three
        paths, a port, an fd) the prelude runs first. ``tmp``: the size of its ``/tmp``
        (a tmpfs, in the host's memory) in bytes. ``network``: ``host`` shares the
        host's; any other (``none``, ``gateway``) gives it a loopback of its own.
        """
        args = [self.path, "--die-with-parent", "--unshare-all"]
        if network == "host":
            args.append("--share-net")
        args += ["--cap-drop", "ALL", *self.system, "--proc", "/proc", "--dev", "/dev",
                 *(["--size", str(tmp)] if tmp and self.sizes else []),
                 "--tmpfs", "/tmp", "--bind", str(workspace), WORKSPACE]
        for path in binds:
            args += ["--ro-bind", path, path]
        for host, inside in mounts:
            args += ["--ro-bind", host, inside]
        args += ["--chdir", WORKSPACE, "--"]
        inner = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if probe is None:
            return args + inner
        if self.bash:
            return [*args, self.bash, "-c", _PRELUDE_BASH, "evalledger-probe", *probe, "", "--",
                    *inner]
        *paths, port, fd = probe  # sh: the report goes through /proc (fds 0-9 only)
        return [*args, *prelude_sh([*paths, port, f"/proc/self/fd/{fd}"]), *inner]


# What ``bwrap()`` and ``docker()`` found, by name: each is tried once per process.
_found: dict[str, Bwrap | Docker | IsolationUnavailable] = {}


def known_bwrap() -> Bwrap | Docker | IsolationUnavailable | None:
    """What ``bwrap()`` found, if it was asked already in this process (no blocking)."""
    return _found.get("bwrap")


def bwrap() -> Bwrap:
    """bubblewrap, checked once per process by running it (user namespaces may be off);
    blocking the first time.

    Raises:
        IsolationUnavailable: it is not installed or cannot make a sandbox here.
    """
    found = _once("bwrap", _find_bwrap)
    assert isinstance(found, Bwrap)
    return found


def _once(name: str, find: Callable[[], Bwrap | Docker]) -> Bwrap | Docker:
    """What ``find`` found the first time it was asked in this process, or the same
    ``IsolationUnavailable`` again (a missing tool does not appear mid-run)."""
    if name not in _found:
        try:
            _found[name] = find()
        except IsolationUnavailable as e:
            _found[name] = e
    found = _found[name]
    if isinstance(found, IsolationUnavailable):
        raise found
    return found


def _find_bwrap() -> Bwrap:
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable("bubblewrap runs only on Linux")
    path = shutil.which("bwrap")
    if path is None:
        raise IsolationUnavailable("bwrap is not installed (Debian: apt install bubblewrap)")
    version = _output([path, "--version"]) or "bubblewrap"
    bash = next((p for p in ("/usr/bin/bash", "/bin/bash") if os.access(p, os.X_OK)), None)
    found = Bwrap(path, version, _system_args(), bash,
                  sizes="--size" in _output([path, "--help"]))
    with tempfile.TemporaryDirectory(prefix="evalledger-bwrap-") as empty:
        done = _trial("bwrap", found.argv(["/bin/true"], Path(empty), network="none"))
    if done.returncode:
        raise IsolationUnavailable(f"bwrap cannot make a sandbox here: {_said(done)}")
    return found


def _trial(what: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run to see whether ``what`` works here.

    Raises:
        IsolationUnavailable: it could not even run.
    """
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise IsolationUnavailable(f"{what} cannot run: {e}") from e


def _said(done: subprocess.CompletedProcess[str]) -> str:
    """The last line a failed command wrote on stderr (or its exit code)."""
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def _output(argv: list[str]) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              check=False).stdout.strip()
    return ""


def _system_args() -> tuple[str, ...]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.isdir("/etc"):
        args += ["--ro-bind", "/etc", "/etc"]
        for hidden in hidden_from_others("/etc"):
            # A folder the system keeps from others is replaced by an empty one, a file
            # by an empty file: what an unprivileged user of the host would see, nothing.
            args += (["--tmpfs", hidden] if os.path.isdir(hidden)
                     else ["--ro-bind", "/dev/null", hidden])
    return tuple(args)


def hidden_from_others(root: str) -> list[str]:
    """Paths under ``root`` that other users cannot read (``/etc/shadow``, ssh host
    keys, ``/etc/ssl/private``): a runner that is root would otherwise show them
    inside (the owner's bits apply to it without any capability)."""
    hidden: list[str] = []
    for top, folders, files in os.walk(root):
        kept = []
        for name in folders + files:
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if not mode & stat.S_IROTH:
                hidden.append(path)
            elif name in folders:
                kept.append(name)
        folders[:] = kept
    return hidden


# Where a sandbox of ``network: gateway`` finds the gateway's socket (and the egress
# proxy's, with ``allow_domains``) and the forwarder that is its only way out
# (docs/gateway.md, "Isolation").
GATEWAY_SOCKET = "/run/evalledger/gateway.sock"
EGRESS_SOCKET = "/run/evalledger/egress.sock"
FORWARDER = "/run/evalledger/forwarder.py"


@dataclass(frozen=True)
class Bridge:
    """What ``network: gateway`` binds into a sandbox: the gateway's unix socket, the
    port its forwarder listens on inside (the gateway's own, in the agent's base URLs),
    the runner's interpreter that runs the forwarder (with its standard library), and
    with ``allow_domains`` the egress proxy's socket and port."""

    socket: str
    port: int
    python: str
    prefix: str
    egress: tuple[str, int] | None = None

    def mounts(self) -> list[tuple[str, str]]:
        forwarder = str(Path(__file__).with_name("_forwarder.py"))
        found = [(self.socket, GATEWAY_SOCKET), (forwarder, FORWARDER)]
        if self.egress is not None:
            found.append((self.egress[0], EGRESS_SOCKET))
        # The system's own folders are bound already; an interpreter elsewhere (pyenv,
        # a venv's base) is bound where it is.
        if not self.prefix.startswith(("/usr/", "/bin/", "/lib")):
            found.append((self.prefix, self.prefix))
        return found

    def _routes(self, inside: bool) -> list[str]:
        """The forwarder's ``SOCKET PORT`` pairs: the sockets' paths inside the sandbox
        (``inside``) or on the host (a forwarder entering a container's namespace)."""
        routes = [GATEWAY_SOCKET if inside else self.socket, str(self.port)]
        if self.egress is not None:
            routes += [EGRESS_SOCKET if inside else self.egress[0], str(self.egress[1])]
        return routes

    def enter(self, pid: int) -> list[str]:
        """The argv of a forwarder on the host serving inside the network namespace of
        process ``pid`` (a container's)."""
        return [self.python, "-I", "-S", str(Path(__file__).with_name("_forwarder.py")),
                "--netns", f"/proc/{pid}/ns/net", *self._routes(inside=False)]

    def wrap(self, command: str | list[str]) -> list[str]:
        inner = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        return [self.python, "-I", "-S", FORWARDER, *self._routes(inside=True), "--",
                *inner]


@dataclass(frozen=True)
class Jail:
    """How one attempt's commands run under bwrap: the agent's, behind the prelude, and
    its graders' (``run_command``), with the task folder also readable."""

    bwrap: Bwrap
    workspace: Path
    network: str
    binds: tuple[str, ...]
    # A file outside every workspace that no attempt may see (``make_canary``).
    canary: str
    # The size of its /tmp (the task's ``limits.tmp``), in bytes.
    tmp: int | None = None
    # ``auto`` when the task named no backend (recorded as what it asked).
    asked: str | None = None
    # ``network: gateway``: the gateway bridged in, the agent's only way out.
    bridge: Bridge | None = None

    def agent(self, command: str | list[str], hidden: Sequence[str], fd: int) -> list[str]:
        """The agent's argv: the prelude probes (the canary, then ``hidden``: the ledger,
        the task file) and reports on ``fd``, then runs ``command`` (behind the
        gateway's forwarder, with ``network: gateway``)."""
        paths = [self.canary, *hidden, "", ""][:3]
        mounts = self.bridge.mounts() if self.bridge is not None else []
        if self.bridge is not None:
            command = self.bridge.wrap(command)
        return self.bwrap.argv(command, self.workspace, network=self.network,
                               binds=self.binds, probe=[*paths, _port(self.network), str(fd)],
                               tmp=self.tmp, mounts=mounts)

    def grader(self, command: str | list[str], binds: Sequence[str] = ()) -> list[str]:
        """A ``run_command``'s argv: the workspace as the agent left it, and of the task's
        folder only what the criterion names (``binds``), read-only."""
        return self.bwrap.argv(command, self.workspace, network=self.network,
                               binds=(*self.binds, *binds), tmp=self.tmp)

    def record(self) -> dict[str, object]:
        """The static part of the attempt's ``task.isolation``."""
        return {"backend": "bwrap", "version": self.bwrap.version, "network": self.network,
                "binds": list(self.binds), "uid": os.getuid(), "workspace": WORKSPACE,
                **({"asked": self.asked} if self.asked else {})}


def make_canary(folder: Path) -> str:
    """A canary file in ``folder`` (a batch's sandbox root: outside every workspace, and
    removed with it, even after a SIGKILL, by the next batch's sweep)."""
    canary = folder / "canary"
    canary.write_text("evalledger canary: an isolated command must not see this\n")
    return str(canary)


_listeners: list[socket.socket] = []  # kept open for the life of the process


def _port(network: str) -> str:
    """The port the prelude tries: none (0) on the host's network, where it would answer."""
    return "0" if network == "host" else str(probe_port())


@functools.cache
def probe_port() -> int:
    """A port this process listens on, on 127.0.0.1, for every confined attempt's
    prelude to try: never answered (the kernel completes a connect to a listening
    socket on its own), so a command on the host's network finds it open."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    _listeners.append(listener)
    return int(listener.getsockname()[1])


def read_probes(line: str) -> dict[str, str] | None:
    """The prelude's report, by probe name; None when it is not one."""
    words = line.split()
    if len(words) != len(PROBE_NAMES):
        return None
    return dict(zip(PROBE_NAMES, words, strict=True))


def leaks(probes: Mapping[str, str], network: str) -> list[str]:
    """What the probes saw that isolation should have hidden."""
    found = [f"{name} is visible" for name in PROBE_NAMES[:3] if probes.get(name) == "visible"]
    if network != "host" and probes.get("network") == "connected":
        found.append("a port of the runner's host answered")
    return found


def confined_env(task_env: Mapping[str, str], passthrough: Sequence[str],
                 runner_env: Mapping[str, str]) -> dict[str, str]:
    """An isolated command's environment: a minimal base, the ``env_passthrough`` names
    the runner has, then the task's own ``env``."""
    env = dict(_BASE_ENV)
    env.update({name: runner_env[name] for name in passthrough if name in runner_env})
    env.update(task_env)
    return env


# How much of a workspace's contents is read to hash it: past this, a file counts by its
# size and modification time (an agent can leave a 10 TB sparse file, or many links to
# one big file: grading must not wait on reading them).
HASH_BUDGET = 1024 * 1024 * 1024
_SETID = stat.S_ISUID | stat.S_ISGID


def hash_tree(root: Path, *, defuse: bool = False) -> str:
    """sha256 of a workspace: every entry's path, kind and permission bits, a file's
    contents, a link's target; in path order, links never followed, each file's
    contents read once however many names it has, at most ``HASH_BUDGET`` bytes in all
    (then size and mtime). What the criteria graded. Walked without recursion, in the
    order ``os.walk`` (top-down, folders sorted) took, so hashes recorded before hash
    the same; a folder that cannot be listed counts by its own entry alone.

    ``defuse``: then take the setuid and setgid bits and write-by-anyone off every file
    and folder (after hashing them): what a confined command left must not become a
    program that runs as the runner (root, say) for whoever reaches the artifacts.

    Raises:
        WorkspaceUnfit: folders nested deeper than ``MAX_DEPTH``, or a path longer than
            ``MAX_RELATIVE_PATH`` bytes below ``root``.
    """
    from evalledger._workspace_diff import walk

    digest = hashlib.sha256()
    read: dict[tuple[int, int], bytes] = {}
    budget = HASH_BUDGET
    for top, folders, files in walk(root):
        for name in sorted(folders + files):
            path = os.path.join(top, name)
            relative = os.path.relpath(path, root).encode("utf-8", "surrogateescape")
            try:
                info = os.lstat(path)
            except OSError:
                continue  # gone meanwhile: the agent's processes are, so nothing is
            kind = ("l" if stat.S_ISLNK(info.st_mode) else "d" if stat.S_ISDIR(info.st_mode)
                    else "f" if stat.S_ISREG(info.st_mode) else "o")
            digest.update(b"%s\0%s\0%o\0" % (relative, kind.encode(),
                                             stat.S_IMODE(info.st_mode)))
            if kind == "l":
                digest.update(os.fsencode(os.readlink(path)))
            elif kind == "f":
                inode = (info.st_dev, info.st_ino)
                if inode not in read:
                    if info.st_size <= budget:
                        budget -= info.st_size
                        read[inode] = _file_digest(path)
                    else:
                        read[inode] = b"size %d mtime %d" % (info.st_size, info.st_mtime_ns)
                digest.update(read[inode])
            digest.update(b"\n")
            if defuse and kind in "fd" and info.st_mode & (_SETID | stat.S_IWOTH):
                with contextlib.suppress(OSError):
                    os.chmod(path, stat.S_IMODE(info.st_mode) & ~(_SETID | stat.S_IWOTH))
    return digest.hexdigest()


def check_fit(root: Path) -> None:
    """Whether the workspace can be graded at all: ``walk``'s bounds, by names alone (no
    file read), before anything copies or hashes it.

    Raises:
        WorkspaceUnfit: as ``walk``.
    """
    # Imported here: the watchdog runs this module in a bare interpreter, where nothing
    # of the package is importable.
    from evalledger._workspace_diff import walk

    for _ in walk(root):
        pass


def _file_digest(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").digest()
    except OSError as e:  # unreadable: recorded as such, not skipped
        return f"unreadable: {e.strerror}".encode()


def exposed(task_source: str, ledger: str | None, workdir: str | None,
            dockerfile: str | None, binds: Sequence[str] = (), out: str | None = None,
            sandboxes: str | None = None) -> list[str]:
    """What a task would hand its confined command though isolation hides it: the task
    file (its criteria) or the ledger inside the workdir copied into the workspace, or
    inside the folder a Dockerfile builds its image from; and a folder of its ``binds``
    that holds the task file, the ledger, the run's ``--out`` folder (every run's kept
    artifacts) or the batch's sandboxes (the other attempts' workspaces), or lies in
    ``--out``: bound read-only, all of it is the command's to read and copy out."""
    found = []
    for what, folder in (("workdir", workdir),
                         ("dockerfile's folder", dockerfile and os.path.dirname(dockerfile))):
        if not folder:
            continue
        for name, path in (("task file", task_source), ("ledger", ledger)):
            if path and Path(path).resolve().is_relative_to(Path(folder).resolve()):
                found.append(f"the {what} holds the {name}")
    for bind in binds:
        bound = Path(bind).resolve()
        for name, path in (("task file", task_source), ("ledger", ledger),
                           ("run's --out folder", out), ("batch's sandboxes", sandboxes)):
            if path and Path(path).resolve().is_relative_to(bound):
                found.append(f"binds {bind} holds the {name}")
        if out and bound.is_relative_to(Path(out).resolve()):
            found.append(f"binds {bind} is in the run's --out folder")
    return found


# -- docker ----------------------------------------------------------------------------

# Where a container finds its probe report's pipe, and the pipe it waits on before its
# command starts (both bound from the runner's side).
PROBE_PATH = "/.evalledger-probe"
GO_PATH = "/.evalledger-go"
# Of the runner's environment, what the docker CLI itself needs to reach the same daemon
# as every other docker call of the runner (its config, context, host, TLS): given to
# the CLI, never forwarded into a container.
CLI_SETTINGS = ("DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_HOST", "DOCKER_CERT_PATH",
                "DOCKER_TLS_VERIFY", "XDG_RUNTIME_DIR")


def cli_settings(runner_env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The runner's docker settings, for a ``docker run`` client: its config named by an
    absolute path (the command's HOME is /tmp, where a config is anyone's to plant)."""
    found = {name: runner_env[name] for name in CLI_SETTINGS if name in runner_env}
    found.setdefault("DOCKER_CONFIG", os.path.join(
        runner_env.get("HOME") or os.path.expanduser("~"), ".docker"))
    return tuple(sorted(found.items()))
# The label every container of a batch carries: what a watchdog removes by.
BATCH_LABEL = "evalledger.batch"
# In a batch's folder: it started containers (its watchdog looks for them).
DOCKER_MARK = ".evalledger-docker"


@dataclass(frozen=True)
class Docker:
    """The docker CLI and the version of the daemon it reaches."""

    path: str
    version: str

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.path, *args], capture_output=True, text=True,
                              timeout=timeout, check=False)


def docker() -> Docker:
    """docker, checked once per process (blocking the first time): the CLI and a daemon
    it can reach.

    Raises:
        IsolationUnavailable: no docker, or no daemon answering.
    """
    found = _once("docker", _find_docker)
    assert isinstance(found, Docker)
    return found


def known_docker() -> Bwrap | Docker | IsolationUnavailable | None:
    """What ``docker()`` found, if it was asked already in this process (no blocking)."""
    return _found.get("docker")


def _find_docker() -> Docker:
    if not sys.platform.startswith("linux"):
        # The runner's process handling (pidfds, passing fds, its signals) is Linux's.
        raise IsolationUnavailable("isolation docker needs a Linux runner today")
    path = shutil.which("docker")
    if path is None:
        raise IsolationUnavailable("docker is not installed (Debian: apt install docker.io)")
    done = _trial("docker", [path, "version", "--format", "{{.Server.Version}}"])
    if done.returncode or not done.stdout.strip():
        raise IsolationUnavailable(f"docker has no daemon to talk to: {_said(done)}")
    return Docker(path, f"docker {done.stdout.strip()}")


_images: dict[str, str] = {}


def image_id(found: Docker, image: str | None, dockerfile: str | None) -> str:
    """The id of the image a task names, or of the one its Dockerfile builds (tagged by
    the content hash of the Dockerfile's folder, built once: a later run finds it).

    Raises:
        IsolationUnavailable: the image is not there, or the build failed.
    """
    if dockerfile is not None:
        folder = Path(dockerfile).parent
        tag = f"evalledger-task:{hash_tree(folder)[:16]}"
        if tag not in _images and found.run("image", "inspect", tag).returncode:
            built = found.run("build", "-q", "-t", tag, "-f", dockerfile, str(folder),
                              timeout=3600)
            if built.returncode:
                raise IsolationUnavailable(f"docker build of {dockerfile} failed: "
                                           f"{_said(built)}")
        image = tag
    assert image is not None
    if image not in _images:
        done = found.run("image", "inspect", "--format", "{{.Id}}", image)
        if done.returncode:
            raise IsolationUnavailable(f"no docker image {image!r} here (no registry is "
                                       "asked: build or load it first)")
        _images[image] = done.stdout.strip()
    return _images[image]


@dataclass(frozen=True)
class Container:
    """How one attempt's commands run in containers: the agent's, behind the prelude,
    and its graders', each a container of its own on the workspace."""

    docker: Docker
    image: str  # its id
    workspace: Path
    network: str
    binds: tuple[str, ...]
    canary: str
    batch: str  # the batch's token, a label of every container
    settings: tuple[tuple[str, str], ...] = ()  # ``cli_settings`` of the runner
    # ``docker run``'s flags for the task's limits, and the size of its /tmp.
    limits: tuple[str, ...] = ()
    tmp: int | None = None
    # ``network: gateway``: the gateway bridged in (by a forwarder on the host that
    # enters the container's network namespace).
    bridge: Bridge | None = None

    def client_env(self, command_env: Mapping[str, str]) -> dict[str, str]:
        """The ``docker run`` client's environment: the command's (it forwards those
        values by name) and the runner's docker settings (never forwarded)."""
        return {**command_env, **dict(self.settings)}

    def _argv(self, name: str, command: str | list[str], *, stdin: bool,
              env: Sequence[str], mounts: Sequence[str], prelude: Sequence[str] = (),
              pipes: Sequence[tuple[str, str]] = (), keep: bool = False) -> list[str]:
        inner = [*prelude, *(["/bin/sh", "-c", command] if isinstance(command, str)
                             else command)]
        # The task's limits bound the agent's container; a grader's is bounded as under
        # bwrap and none: by nothing of the agent's.
        limits, tmp = (self.limits, self.tmp) if keep else ((), None)
        args = [self.docker.path, "run", *([] if keep else ["--rm"]), "--init", "--name", name,
                "--label", f"{BATCH_LABEL}={self.batch}",
                "--network", "host" if self.network == "host" else "none",
                "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                "--read-only", "--tmpfs", f"/tmp:exec{f',size={tmp}' if tmp else ''}",
                *limits, "--user", f"{os.getuid()}:{os.getgid()}",
                *_mount(str(self.workspace), WORKSPACE), "-w", WORKSPACE,
                # What runs is ours (the prelude, the command), never the image's own
                # ENTRYPOINT with ours as its arguments.
                "--entrypoint", inner[0]]
        if stdin:
            args.append("-i")
        for path in (*self.binds, *mounts):
            args += _mount(path, path, readonly=True)
        for host, inside in pipes:
            args += _mount(host, inside)
        # By name only: the values reach the container from the CLI's environment, never
        # through its argv (which any process of the host can read). Not PATH: the
        # image's own is the one that finds its programs.
        for variable in env:
            if variable != "PATH" and variable not in CLI_SETTINGS:
                args += ["-e", variable]
        return [*args, self.image, *inner[1:]]

    def agent(self, name: str, command: str | list[str], hidden: Sequence[str], report: str,
              go: str, *, stdin: bool, env: Sequence[str]) -> list[str]:
        """The agent's argv: the prelude probes, writes its line to the pipe at ``report``
        (bound at ``PROBE_PATH``), then waits for a line on the pipe ``go`` (bound at
        ``GO_PATH``), which the runner writes once it has read the report: the command
        starts only after, so it can neither take the report nor write one of its own."""
        paths = [self.canary, *hidden, "", ""][:3]
        # Kept once it exits (the runner removes it): whether the kernel killed it for
        # its memory limit is known only from the container's state.
        return self._argv(name, command, stdin=stdin, env=env, mounts=(),
                          prelude=prelude_sh([*paths, _port(self.network), PROBE_PATH],
                                             GO_PATH),
                          pipes=((report, PROBE_PATH), (go, GO_PATH)), keep=True)

    def grader(self, name: str, command: str | list[str], binds: Sequence[str],
               env: Sequence[str]) -> list[str]:
        return self._argv(name, command, stdin=False, env=env, mounts=binds)

    def record(self) -> dict[str, object]:
        return {"backend": "docker", "version": self.docker.version, "image": self.image,
                "network": self.network, "binds": list(self.binds), "uid": os.getuid(),
                "workspace": WORKSPACE}


def _mount(host: str, inside: str, *, readonly: bool = False) -> list[str]:
    """A bind mount's ``--mount``: its fields as CSV (what docker parses them with), so a
    path holding ':' or ',' stays one path (``-v`` splits at every ':')."""
    fields = ["type=bind", f"source={host}", f"target={inside}"]
    line = io.StringIO()
    csv.writer(line, lineterminator="\n").writerow([*fields, *(["readonly"] if readonly else [])])
    return ["--mount", line.getvalue().removesuffix("\n")]


def remove_containers(batch: str) -> int:
    """Remove every container of a batch (by its label), running or not: what a killed
    runner left (a container outlives the CLI that started it). Quiet without docker."""
    path = shutil.which("docker")
    if path is None:
        return 0
    try:
        listed = subprocess.run([path, "ps", "-aq", "--filter", f"label={BATCH_LABEL}={batch}"],
                                capture_output=True, text=True, timeout=60, check=False)
        ids = listed.stdout.split()
        if ids:
            subprocess.run([path, "rm", "-f", *ids], capture_output=True, timeout=120,
                           check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(ids)
