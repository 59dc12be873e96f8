"""Resource limits of an attempt's processes (docs/isolation.md, "Limits").

A task's ``limits`` bound what its command may take of the host: memory, processes,
CPU, the workspace's disk and the private ``/tmp``. How each is enforced depends on
what the runner may do here (``enforcement()`` says, and ``run.started`` records it):

- **cgroup v1** (a root runner on a host that mounts the memory, pids and cpu
  controllers, as here): every attempt runs in a cgroup of its own under the runner's,
  which bounds all its processes together; the kernel's counters say whether a limit
  was hit (an OOM kill, a fork refused).
- **rlimits** otherwise: memory bounds each process's data (``RLIMIT_DATA``: what it
  allocates, not what it reserves, so a JIT's address space is free); processes and
  CPU are not bounded (``RLIMIT_NPROC`` counts every process of the runner's user, not
  the attempt's); a hit is the command's own error, not seen by the runner. cgroup v2
  is not used yet: a process cannot be in a cgroup that hands controllers down, so the
  runner would have to move itself into a leaf first.

Under either, the disk is bounded per file by ``RLIMIT_FSIZE`` and as a whole by the
runner watching the workspace's size; ``/tmp`` is a tmpfs of the ``tmp`` size under
bwrap and docker (under none it is the host's own). docker enforces its own flags
(``--memory``, ``--pids-limit``, ``--cpus``) and reports an OOM kill.

The cgroups are pooled per process and reused: making and removing one costs about
250 us of kernel time, more than a no-op attempt's whole overhead. Each attempt reads
the counters before and after, so a reused cgroup's past does not count.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import logging
import os
import resource
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path

from evalledger.suite import ResolvedLimits as Bounds

log = logging.getLogger("evalledger.executor")

# The v1 controllers an attempt's cgroup is made in, by what each bounds.
_CONTROLLERS = ("memory", "pids", "cpu")
_PREFIX = "evalledger-"
# cpu.cfs_period_us: a CPU's worth of time per 100 ms period.
_PERIOD = 100_000
# What memory an emptied cgroup may still be charged with and be handed out again (page
# cache its attempt read is reclaimed at need; files left in a tmpfs are not).
_LEFT_CHARGE = 16 << 20


@dataclass
class Cgroup:
    """One pooled cgroup: its folder in each v1 hierarchy, the limits written in it, and
    the hit counters as they were when its attempt started."""

    folders: dict[str, Path]
    written: dict[str, str] = field(default_factory=dict)
    _before: tuple[int, int] | None = None
    _fds: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Its folders' name (the same in every hierarchy), as /proc/PID/cgroup ends."""
        return next(iter(self.folders.values())).name

    def procs(self, bounds: Bounds) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join: memory and
        pids, and cpu when ``bounds`` has a quota (each join costs ~60 us of the kernel's)."""
        return [str(folder / "cgroup.procs") for controller, folder in self.folders.items()
                if controller != "cpu" or bounds.cpus]

    def join(self, pid: int, bounds: Bounds) -> None:
        """Put process ``pid`` in it (what it starts from then on is in it too), through
        fds kept open: opening a cgroup's file costs several times writing to it."""
        for controller, folder in self.folders.items():
            if controller != "cpu" or bounds.cpus:
                key = f"{controller}/join"
                fd = self._fds.get(key)
                if fd is None:
                    fd = self._fds[key] = os.open(folder / "cgroup.procs",
                                                  os.O_WRONLY | os.O_CLOEXEC)
                os.write(fd, b"%d" % pid)

    def apply(self, bounds: Bounds) -> None:
        """Write ``bounds`` (what differs from what is there), and take the counters its
        attempt's hits count from."""
        memory = str(bounds.memory) if bounds.memory else "-1"
        quota = str(max(1000, round(bounds.cpus * _PERIOD))) if bounds.cpus else "-1"
        self._write("memory", "memory.limit_in_bytes", memory)
        if (self.folders["memory"] / "memory.memsw.limit_in_bytes").exists():
            # Swap too, else a limit only moves memory to swap. Raised first is the
            # rule (memsw >= memory): written after, it is lowered after.
            self._write("memory", "memory.memsw.limit_in_bytes", memory)
        self._write("pids", "pids.max", str(bounds.pids) if bounds.pids else "max")
        if "cpu" in self.folders:
            self._write("cpu", "cpu.cfs_period_us", str(_PERIOD))
            self._write("cpu", "cpu.cfs_quota_us", quota)
        self._before = self._counters()

    def _write(self, controller: str, name: str, value: str) -> None:
        key = f"{controller}/{name}"
        if self.written.get(key) == value:
            return
        path = self.folders[controller] / name
        try:
            path.write_text(value)
        except OSError:
            if name != "memory.limit_in_bytes":
                raise
            # Lowered under what memsw allows, or raised over it: the other first.
            swap = self.folders["memory"] / "memory.memsw.limit_in_bytes"
            if not swap.exists():
                raise
            swap.write_text(value)
            path.write_text(value)
            self.written["memory/memory.memsw.limit_in_bytes"] = value
        self.written[key] = value

    def _counters(self) -> tuple[int, int]:
        """(OOM kills, forks refused) so far: the kernel's, never reset."""
        return (_field(self._read("memory", "memory.oom_control"), "oom_kill"),
                _field(self._read("pids", "pids.events"), "max"))

    def _read(self, controller: str, name: str) -> str:
        """A file of the cgroup, read through an fd kept open (read twice an attempt:
        opening it each time cost more than reading); "" when it cannot be read."""
        key = f"{controller}/{name}"
        try:
            fd = self._fds.get(key)
            if fd is None:
                fd = self._fds[key] = os.open(self.folders[controller] / name,
                                              os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(fd, 65536, 0).decode()
        except OSError:
            return ""

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def hits(self, bounds: Bounds) -> list[str]:
        """What the attempt hit since ``apply``, in words."""
        before = self._before or (0, 0)
        kills, refused = (now - then for now, then in zip(self._counters(), before,
                                                           strict=True))
        found = []
        if kills:
            found.append(f"memory: {_size(bounds.memory)} limit hit, the kernel killed "
                         f"{kills} process{'es' if kills > 1 else ''} for it")
        if refused:
            found.append(f"pids: {bounds.pids} processes at once, a fork was refused "
                         f"{refused} time{'s' if refused > 1 else ''}")
        return found

    def empty(self) -> bool:
        """Kill whatever of the attempt is left in it (what escaped its group); True if
        nothing was (a process killed takes a moment to leave)."""
        pids = self._members()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    def charged(self) -> int:
        """Bytes of memory charged to it now."""
        text = self._read("memory", "memory.usage_in_bytes").strip()
        return int(text) if text.isdigit() else 0

    def _members(self) -> list[int]:
        # Every process joins every hierarchy at once: one of them lists them all. Opened
        # each time: v1 keeps the list an open file read first for a second (stale).
        try:
            listed = (next(iter(self.folders.values())) / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in listed.split()]

    def remove(self) -> None:
        self.close()
        for folder in self.folders.values():
            with contextlib.suppress(OSError):
                folder.rmdir()


def _field(text: str, name: str) -> int:
    """A counter of a cgroup's flat-keyed file (``name value`` lines); 0 when absent."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def _size(n: int | None) -> str:
    if n is None:
        return "no"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


class Pool:
    """This process's cgroups, made on demand and handed out one attempt at a time."""

    def __init__(self, homes: dict[str, Path]) -> None:
        self.homes = homes  # the runner's own cgroup folder in each hierarchy
        self._free: list[Cgroup] = []
        # Given back with processes still inside, killed: free once they are gone.
        self._draining: list[Cgroup] = []
        self._numbers = itertools.count(1)
        self._sweep()

    def take(self, bounds: Bounds) -> Cgroup | None:
        """A cgroup holding ``bounds``, for one attempt; None when one cannot be made."""
        if self._draining:
            drained = [c for c in self._draining if c.empty()]
            self._draining = [c for c in self._draining if c not in drained]
            for done in drained:
                self.give(done)
        cgroup = self._free.pop() if self._free else self._make()
        if cgroup is None:
            return None
        try:
            cgroup.apply(bounds)
        except OSError as e:
            log.warning("could not set an attempt's cgroup limits: %s", e)
            cgroup.remove()
            return None
        return cgroup

    def give(self, cgroup: Cgroup) -> None:
        """Back, once its attempt is over; what is left inside is killed, and it is
        handed out again once nothing is. One still charged with memory its processes
        left (files in /dev/shm or a tmpfs /tmp: not reclaimable without swap) is
        removed instead (its charge moves to the runner's): the next attempt would
        start with less than its limit."""
        if not cgroup.empty():
            self._draining.append(cgroup)
        elif cgroup.charged() > _LEFT_CHARGE:
            cgroup.remove()
        else:
            self._free.append(cgroup)

    def close(self) -> None:
        for cgroup in (*self._free, *self._draining):
            cgroup.empty()
            cgroup.remove()
        self._free.clear()
        self._draining.clear()

    def _make(self) -> Cgroup | None:
        name = f"{_PREFIX}{os.getpid()}-{next(self._numbers)}"
        made: dict[str, Path] = {}
        try:
            for controller, home in self.homes.items():
                (home / name).mkdir()
                made[controller] = home / name
        except OSError as e:
            log.warning("could not make a cgroup for an attempt: %s", e)
            Cgroup(made).remove()
            return None
        return Cgroup(made)

    def _sweep(self) -> None:
        """Remove what runners that are gone left (a SIGKILL skips ``close``): their
        attempts' processes killed first."""
        for home in self.homes.values():
            with contextlib.suppress(OSError):
                for entry in os.scandir(home):
                    pid = _owner(entry.name)
                    if pid is not None and not _alive(pid):
                        left = Cgroup({"memory": Path(entry.path)})
                        left.empty()
                        left.remove()


def _owner(name: str) -> int | None:
    if not name.startswith(_PREFIX):
        return None
    pid, _, _ = name.removeprefix(_PREFIX).partition("-")
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def cgroup_homes(mountinfo: str = "/proc/self/mountinfo",
                 membership: str = "/proc/self/cgroup") -> dict[str, Path] | None:
    """This process's own cgroup folder in each v1 hierarchy of ``_CONTROLLERS`` (cpu
    optional), where it may make cgroups; None where it may not (not root, no v1
    memory and pids controllers, mounted read-only)."""
    try:
        mounts = Path(mountinfo).read_text().splitlines()
        mine = Path(membership).read_text().splitlines()
    except OSError:
        return None
    where: dict[str, Path] = {}
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup" or fields[3] != "/":
            continue
        for option in tail[2].split(","):
            if option in _CONTROLLERS:
                where[option] = Path(fields[4])
    paths: dict[str, str] = {}
    for line in mine:
        _, names, path = line.split(":", 2)
        for name in names.split(","):
            paths[name] = path
    homes = {c: where[c] / paths[c].lstrip("/") for c in _CONTROLLERS
             if c in where and c in paths}
    if "memory" not in homes or "pids" not in homes:
        return None
    if not all(os.access(home, os.W_OK) and os.access(home / "cgroup.procs", os.W_OK)
               for home in homes.values()):
        return None
    return homes


_pool: list[Pool | None] = []


def pool() -> Pool | None:
    """This process's pool of cgroups, found the first time (None: rlimits only)."""
    if not _pool:
        homes = cgroup_homes()
        found = Pool(homes) if homes else None
        if found is not None:
            atexit.register(found.close)
        _pool.append(found)
    return _pool[0]


def enforcement() -> str:
    """How limits are enforced here, outside docker: ``cgroup v1`` or ``rlimits``."""
    return "cgroup v1" if pool() is not None else "rlimits"


def prefix(bounds: Bounds, cgroup: Cgroup | None) -> str:
    """Shell lines that put the shell in ``cgroup`` and set the rlimits ``bounds`` call
    for, before anything of the command runs; a join that fails ends it (exit 125)."""
    lines = [f"echo $$ >'{path}' || exit 125"
             for path in (cgroup.procs(bounds) if cgroup else ())]
    if bounds.disk:
        lines.append(f"ulimit -f {-(-bounds.disk // 512)} || exit 125")
    if cgroup is None and bounds.memory:
        lines.append(f"ulimit -d {-(-bounds.memory // 1024)} || exit 125")
    return "".join(line + "\n" for line in lines)


def confine(pid: int, bounds: Bounds, cgroup: Cgroup | None) -> None:
    """Bound a started process from outside, as ``prefix``'s lines do from inside: into
    ``cgroup``, with the rlimits. For an argv under ``none``, where a shell in front
    would cost a process more per attempt: what it starts in the microseconds before
    (a program still loading) is outside; ``none`` is no boundary. A shell command runs
    behind ``prefix`` (its own shell applies it), as bwrap does: bound before it starts.

    Raises:
        OSError: the cgroup could not take it (a process that has ended already is
            left alone: nothing of it is left to bound).
    """
    try:
        if cgroup is not None:
            cgroup.join(pid, bounds)
        if not hasattr(resource, "prlimit"):
            return  # not Linux: no rlimits set from outside (and no isolation either)
        if bounds.disk:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (bounds.disk, bounds.disk))
        if cgroup is None and bounds.memory:
            resource.prlimit(pid, resource.RLIMIT_DATA, (bounds.memory, bounds.memory))
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise


def wrap(command: str | list[str], lines: str) -> list[str] | str:
    """``command`` behind ``prefix``'s lines: a shell command gets them in front (no
    process more), an argv (bwrap's) runs behind a shell that runs them."""
    if not lines:
        return command
    if isinstance(command, str):
        return lines + command
    return ["/bin/sh", "-c", lines + 'exec "$@"', "evalledger-limits", *command]


def disk_usage(root: Path) -> int:
    """Bytes the workspace takes on disk, by ``_workspace_diff.walk``'s bounded walk;
    links are not followed. A file counts its blocks or its size, whichever is more: a
    sparse file counts all it would take written out (its blocks alone counted a
    thousand files of a gigabyte, holding nothing, as nothing)."""
    from evalledger._workspace_diff import walk

    total = 0
    for top, folders, files in walk(root):
        for name in (*folders, *files):
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(top, name))
                if not stat.S_ISLNK(info.st_mode):
                    total += max(info.st_blocks * 512,
                                 info.st_size if stat.S_ISREG(info.st_mode) else 0)
    return total


def docker_flags(bounds: Bounds) -> list[str]:
    """``docker run``'s flags for ``bounds`` (``/tmp`` is set with the mounts)."""
    flags: list[str] = []
    if bounds.memory:
        flags += ["--memory", str(bounds.memory), "--memory-swap", str(bounds.memory)]
    if bounds.pids:
        flags += ["--pids-limit", str(bounds.pids)]
    if bounds.cpus:
        # docker refuses more CPUs than the host has, or less than a hundredth of one.
        cpus = min(max(bounds.cpus, 0.01), float(os.cpu_count() or 1))
        flags += ["--cpus", f"{cpus:g}"]
    if bounds.disk:
        flags += ["--ulimit", f"fsize={bounds.disk}"]
    return flags


def size_text(n: int | None) -> str:
    return _size(n)

