"""Success criteria, checked against what the command left in its sandbox.

The criteria are described in docs/tasks.md.

Every criterion is evaluated, even after one fails: the report shows them all.
Paths are relative to the sandbox; one that resolves outside it (``..``, an
absolute path, a symlink pointing out) fails with a clear detail and is never
read.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

from evalledger.ledger import CriterionResult
from evalledger.projections import last_error
from evalledger.suite import (
    AgentJudge,
    Criterion,
    ExitCode,
    FileContains,
    FileExists,
    LlmJudge,
    OutputContains,
    RunCommand,
)

from ._judges import JudgeError, Judging, llm_judge
from ._judges import score_of as judge_score
from ._lines import parse_json_object
from ._marks import MARKER_VAR
from ._process import (
    DEFAULT_KILL_GRACE,
    Child,
    Confined,
    Contained,
    end_group,
    kill_group,
    release_pipes,
    spawn,
)
from ._sandbox import copy_workspace
from ._usage import Usage, UsageMeter
from .isolation import Container, Jail

MAX_FILE_BYTES = 64 * 1024 * 1024
_DETAIL_TAIL = 400


class Evidence:
    """What the command left behind, as the criteria see it; ``jail``: how a
    ``run_command`` is confined (as the command was), None for not at all."""

    def __init__(self, sandbox: Path, exit_code: int | None, stdout: str, stderr: str,
                 jail: Jail | Container | None = None) -> None:
        self.sandbox = sandbox
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.jail = jail


def _inside(sandbox: Path, relative: str) -> Path | str:
    """The resolved path, or why it may not be read."""
    if Path(relative).is_absolute():
        return f"{relative} is an absolute path; criteria paths are relative to the sandbox"
    root = sandbox.resolve()
    try:
        target = (root / relative).resolve()
    except (OSError, RuntimeError) as e:  # 3.11 raises RuntimeError on a symlink loop
        return f"{relative} cannot be resolved: {e}"
    if not target.is_relative_to(root):
        return f"{relative} resolves outside the sandbox"
    return target


def _missing(needles: Sequence[str], haystack: str) -> list[str]:
    return [n for n in needles if n not in haystack]


def _contains(
    where: str, text: str, includes: Sequence[str], excludes: Sequence[str]
) -> tuple[bool, str]:
    missing = _missing(includes, text)
    present = [n for n in excludes if n in text]
    if missing:
        return False, f"{where} lacks {missing!r}"
    if present:
        return False, f"{where} contains excluded {present!r}"
    return True, f"{where} has all of {list(includes)!r}" if includes else f"{where} ok"


def _check_file(criterion: FileExists | FileContains, evidence: Evidence) -> tuple[bool, str]:
    try:
        return _check_path(criterion, evidence)
    except (OSError, ValueError) as e:  # a NUL in the path, a name too long, ...
        return False, f"cannot check {criterion.path!r}: {getattr(e, 'strerror', None) or e}"


def _check_path(criterion: FileExists | FileContains, evidence: Evidence) -> tuple[bool, str]:
    target = _inside(evidence.sandbox, criterion.path)
    if isinstance(target, str):
        return False, target
    if isinstance(criterion, FileExists):
        exists = target.exists()
        return exists, f"{criterion.path} {'exists' if exists else 'does not exist'}"
    if not target.is_file():
        return False, f"{criterion.path} is not a file"
    try:
        with target.open("rb") as f:
            text = f.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError as e:
        return False, f"cannot read {criterion.path}: {e.strerror}"
    return _contains(criterion.path, text, criterion.includes, criterion.excludes)


# The details of a run_command the task's timeout stopped: the task is TIMEOUT.
CUT_OFF = "cut off: the task's timeout passed"
NOT_RUN = "not run: the task's timeout had passed"


async def _run_command(
    criterion: RunCommand, evidence: Evidence, env: Mapping[str, str], kill_now: trio.Event | None,
    deadline: float, grace: float,
) -> tuple[bool, str]:
    passed, detail, _ = await _run_command_said(criterion, evidence, env, kill_now, deadline,
                                                grace)
    return passed, detail


# What an agent_judge's stdout keeps: its end, where its verdict line is.
_VERDICT_TAIL = 64 * 1024


async def _run_command_said(
    criterion: RunCommand, evidence: Evidence, env: Mapping[str, str], kill_now: trio.Event | None,
    deadline: float, grace: float, stdout_tail: bytearray | None = None,
) -> tuple[bool, str, str]:
    """A ``run_command``'s pass and detail, and what it printed (its head and tail);
    ``stdout_tail`` collects the end of its stdout alone."""
    jail, name = evidence.jail, None
    if jail is None:
        process = await spawn(criterion.command, cwd=str(evidence.sandbox), env=env,
                              stdin=False)
    elif isinstance(jail, Jail):
        argv = jail.grader(criterion.command, criterion.binds)
        process = await spawn(argv, cwd=str(evidence.sandbox), env=env, stdin=False,
                              kind=Confined)
    else:
        name = f"evalledger-{env[MARKER_VAR]}-grader-{secrets.token_hex(3)}"
        argv = jail.grader(name, criterion.command, criterion.binds, list(env))
        process = await spawn(argv, cwd=str(evidence.sandbox), env=jail.client_env(env),
                              stdin=False, kind=Contained)
    try:
        return await _graded(process, criterion, env, kill_now, deadline, grace, stdout_tail)
    finally:
        if name is not None and (process.returncode is None or process.returncode < 0
                                 or process.returncode == 125):
            assert isinstance(jail, Container)  # killed: its container may run on
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(jail.docker.run, "rm", "-f", name)


async def _graded(process: Child | trio.Process, criterion: RunCommand,
                  env: Mapping[str, str], kill_now: trio.Event | None, deadline: float,
                  grace: float, stdout_tail: bytearray | None = None) -> tuple[bool, str, str]:
    """A started ``run_command`` to its end: whether it passed, its detail, and what it
    printed (``_Kept.text``)."""
    kept = _Kept()

    async def collect(stream: trio.abc.ReceiveStream) -> None:
        tail = stdout_tail if stream is process.stdout else None
        while data := await stream.receive_some(65536):
            kept.add(bytes(data))  # bytes(bytes) is the same object, not a copy
            if tail is not None:
                tail += data
                del tail[:-_VERDICT_TAIL]

    pipes_closed = trio.Event()

    async def collect_both() -> None:
        assert process.stdout is not None and process.stderr is not None
        async with trio.open_nursery() as readers:
            readers.start_soon(collect, process.stdout)
            readers.start_soon(collect, process.stderr)
        pipes_closed.set()

    try:
        with trio.move_on_at(min(trio.current_time() + criterion.timeout, deadline)) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect_both)
                await process.wait()
                kill_group(process.pid)  # leftovers would hold the pipes open
                marker = env.get(MARKER_VAR)
                await release_pipes(pipes_closed, f"{MARKER_VAR}={marker}" if marker else None)
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await end_group(process, grace, kill_now)
    if scope.cancelled_caught:
        if trio.current_time() >= deadline:
            return False, CUT_OFF, ""
        return False, f"timed out after {criterion.timeout:g}s", ""
    said = kept.text()
    passed = process.returncode == criterion.expect_exit_code
    detail = f"exit code {process.returncode}"
    return passed, f"{detail}: {said}" if said and not passed else detail, said


class _Kept:
    """What a ``run_command`` printed, for its detail: its start (where a test runner
    says what failed) and its end (where it sums up), never all of it."""

    def __init__(self) -> None:
        self.head = b""
        self.tail = b""
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = 2 * _DETAIL_TAIL - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-2 * _DETAIL_TAIL:]

    def text(self) -> str:
        """Whole when short; else the first and last ``_DETAIL_TAIL`` characters, each cut
        at a space or line break so no word is cut in half, joined by `` ... ``."""
        head = self.head.decode("utf-8", errors="replace")
        if self.total <= 2 * _DETAIL_TAIL:
            return (head + self.tail.decode("utf-8", errors="replace")).strip()
        tail = self.tail.decode("utf-8", errors="replace")
        first, last = head[:_DETAIL_TAIL], tail[-_DETAIL_TAIL:]
        if (cut := max(first.rfind(" "), first.rfind("\n"))) > _DETAIL_TAIL // 2:
            first = first[:cut]
        if 0 <= (cut := min(i for i in (last.find(" "), last.find("\n"), len(last))
                            if i >= 0)) < _DETAIL_TAIL // 2:
            last = last[cut + 1:]
        return f"{first.strip()} ... {last.strip()}"


async def evaluate(
    criteria: Sequence[Criterion], evidence: Evidence, env: Mapping[str, str],
    kill_now: trio.Event | None = None, deadline: float = math.inf,
    grace: float = DEFAULT_KILL_GRACE, judging: Judging | None = None,
) -> list[CriterionResult]:
    """Check every criterion; never raises for a failing one, only records it (in the
    criteria's order).

    ``deadline`` (trio time) is the task's: checks of what the command left always
    run, a ``run_command`` is cut off there, or not started once it has passed. Under
    isolation every check of the workspace comes before any ``run_command``: a grader
    runs what the agent left (a planted ``conftest.py``), so it could change the files
    the other checks read.
    """
    order = list(range(len(criteria)))
    if evidence.jail is not None:
        order.sort(key=lambda i: isinstance(criteria[i], RunCommand | AgentJudge))
    results: dict[int, CriterionResult] = {}
    for i in order:
        criterion = criteria[i]
        if isinstance(criterion, LlmJudge):
            if trio.current_time() >= deadline:
                results[i] = CriterionResult(type=criterion.type, passed=False,
                                             weight=criterion.weight, detail=NOT_RUN)
            else:
                results[i] = await llm_judge(criterion, i, evidence.sandbox, evidence.stdout,
                                             evidence.stderr, judging or Judging(_unrecorded),
                                             deadline)
            continue
        if isinstance(criterion, AgentJudge):
            results[i] = await _agent_judge(criterion, i, evidence, env, kill_now, deadline,
                                            grace, judging or Judging(_unrecorded))
            continue
        if isinstance(criterion, ExitCode):
            passed = evidence.exit_code == criterion.equals
            detail = f"exit code {evidence.exit_code}, expected {criterion.equals}"
            if not passed and (said := last_error(evidence.stderr)):
                # Why it failed, as it said last (the digest reads this line).
                detail += f"\n{said}"
        elif isinstance(criterion, FileExists | FileContains):
            passed, detail = await trio.to_thread.run_sync(_check_file, criterion, evidence)
        elif isinstance(criterion, OutputContains):
            text = {
                "stdout": evidence.stdout,
                "stderr": evidence.stderr,
                "both": evidence.stdout + "\n" + evidence.stderr,
            }[criterion.stream]
            passed, detail = _contains("output", text, criterion.includes, criterion.excludes)
        elif isinstance(criterion, RunCommand):
            if trio.current_time() >= deadline:
                passed, detail = False, NOT_RUN
            else:
                try:
                    passed, detail = await _run_command(criterion, evidence, env, kill_now,
                                                        deadline, grace)
                except OSError as e:
                    passed, detail = False, f"cannot run {criterion.command!r}: {e}"
        else:  # pragma: no cover - the union is closed; a new member must be handled
            raise TypeError(f"unknown criterion {criterion!r}")
        results[i] = CriterionResult(type=criterion.type, passed=passed,
                                     weight=criterion.weight, detail=detail)
    return [results[i] for i in range(len(criteria))]


async def _unrecorded(*_: object) -> None:
    """Where a judge's calls go when the caller records none (a direct ``evaluate``)."""


async def _agent_judge(criterion: AgentJudge, index: int, evidence: Evidence,
                       env: Mapping[str, str], kill_now: trio.Event | None, deadline: float,
                       grace: float, judging: Judging) -> CriterionResult:
    """The judge command, in a copy of the workspace (what it does there changes nothing
    graded), confined as the command was; its last JSON line is the verdict."""
    def result(passed: bool, detail: str, **extra: object) -> CriterionResult:
        return CriterionResult(type=criterion.type, passed=passed, weight=criterion.weight,
                               detail=detail, **extra)

    if trio.current_time() >= deadline:
        return result(False, NOT_RUN)
    copy = Path(tempfile.mkdtemp(prefix="evalledger-judge-"))
    try:
        await trio.to_thread.run_sync(copy_workspace, evidence.sandbox, copy)
        jail = (dataclasses.replace(evidence.jail, workspace=copy)
                if evidence.jail is not None else None)
        seen = Evidence(copy, evidence.exit_code, evidence.stdout, evidence.stderr, jail=jail)
        command = RunCommand(type="run_command", command=criterion.command,
                             timeout=criterion.timeout, binds=criterion.binds)
        judge_env = {**env, "EVALLEDGER_RUBRIC": criterion.rubric}
        if jail is None:
            judge_env["EVALLEDGER_SANDBOX"] = str(copy)
        stdout = bytearray()
        ran, detail, _ = await _run_command_said(command, seen, judge_env, kill_now,
                                                 deadline, grace, stdout)
    except OSError as e:
        return result(False, f"cannot run the judge: {e}", errored=True)
    finally:
        await trio.to_thread.run_sync(lambda: shutil.rmtree(copy, ignore_errors=True))
    await _book_judge_usage(criterion, index, bytes(stdout), judging)
    if detail in (CUT_OFF, NOT_RUN):
        return result(False, detail)
    # The judge ran in what the agent left, which the agent controls (a CLAUDE.md that
    # tells it how to answer, a json.py on its path): a judge that failed there, or
    # answered no score, may have been made to. Counted as failed, as an llm_judge's
    # answer without a score is; an error only where the runner could not run it.
    if not ran:
        return result(False, f"the judge failed: {detail}: counted as failed")
    lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        score, reason = judge_score(lines[-1] if lines else "")
    except JudgeError as e:
        return result(False, f"{e}: counted as failed")
    passed = score >= criterion.pass_threshold
    said_score = f"score {score:g} (passes at {criterion.pass_threshold:g})"
    return result(passed, f"{said_score}: {reason}" if reason else said_score,
                  score=round(score, 6))


async def _book_judge_usage(criterion: AgentJudge, index: int, stdout: bytes,
                            judging: Judging) -> None:
    """What the judge command said it spent, its usage lines read in its stream format
    and priced as an agent's are: grading's spend, each recorded (a cut-off agent's
    running estimate too, marked, and a floor)."""
    meter = UsageMeter(criterion.stream_format, criterion.model, judging.rates)
    found: list[Usage] = []
    for line in stdout.decode("utf-8", "replace").splitlines():
        data = parse_json_object(line)
        if data is not None:
            found += meter.observe(data)
    found += meter.finish()
    for usage in found:
        call: dict[str, object] = {"judge": "agent_judge", "criterion": index}
        if usage.estimate:
            call["estimate"] = True
        await judging.spent(usage.model, usage.tokens, usage.cost_usd, call,
                            estimate=usage.estimate)


def weighted_score(results: Sequence[CriterionResult]) -> float:
    total = sum(r.weight for r in results)
    return sum(r.weight for r in results if r.passed) / total if total else 0.0
