"""Why an attempt did not succeed, in one line a person reads at a glance.

An attempt's ``error_message`` says it all (docs/results.md): each failed criterion as
``type: detail``, joined by ``; ``, where a ``run_command``'s detail carries the test
runner's own words (``exit code 1: ===== FAILURES ===== ...``); or a timeout, a budget,
a stall, an error; and, when the agent's model API gave up under it, ``(the agent's
model API failed: ...)``. Its digest keeps what a person looks for: the model API's
failure first (it is why), else the first failed criterion with the line of its detail
that says what failed (``E   AssertionError: ...``, an exception's last line, a
``FAILED ... - why`` line), banners, separator rules and temporary paths left out:
``run_command ✗ AssertionError: 2 is not None (+1 more)``.

What ``show`` and ``run`` print in a terminal, run.md's task table, the viewer's task
table and a task's header, and ``TaskDiff.why``; the message itself is in the ledger,
in ``show``'s and ``run``'s output through a pipe, run.md's "Errors in full" and the
task's page.

Pure: text in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from evalledger.statuses import FailureClass

_API = re.compile(r"\(the agent's model API failed: (.*)\)\s*$", re.DOTALL)
_EXIT = re.compile(r"^exit code -?\d+: ", re.DOTALL)
# A line that only separates (=====, -----, ^^^^ under a traceback's code), or a rule
# of one repeated character with words inside (===== 1 failed in 0.12s =====).
_RULE = re.compile(r"^[\s=\-_*~#^.]*$|^\s*([=\-_*#~+])\1{3,}")
# A path under a temporary folder: the sandbox's, pytest's; shown by its last part.
_TEMP = re.compile(r"(?:/private)?/(?:tmp|var/tmp|var/folders)/\S*?/?([^/\s:'\"]+)(?=[\s:'\",)]|$)")
# The lines that say what failed, best first.
_TELLING = (
    re.compile(r"^E\s+(\S.*)$"),                                    # pytest's assertion
    re.compile(r"^FAILED \S+ - (.+)$"),                             # pytest's summary line
    re.compile(r"^((?:[\w.]+\.)?\w*(?:Error|Exception|Failure)\b.*)$"),  # a raise's last line
    re.compile(r"^(.*\b(?:assert|expected|not found|No such file)\b.*)$", re.IGNORECASE),
)
LIMIT = 160


def error_digest(error_message: str | None, *, limit: int = LIMIT,
                 failure_class: str | None = None) -> str:
    """``error_message`` in one line of at most ``limit`` characters ("" for none).

    ``failure_class``: the attempt's. The executor notes the model API's failure at the
    message's end and classes the attempt ``infra``; where the class is not that, such a
    note is only a criterion's detail ending so (an agent's output can say anything) and
    is read as such.
    """
    if not error_message or not error_message.strip():
        return ""
    text = error_message.strip()
    if failure_class == FailureClass.INFRA and (api := _API.search(text)):
        return _fit(f"model API failed: {_line(api.group(1))}", limit)
    parts = _criteria(text)
    kind, detail = parts[0]
    reason = _reason(detail)
    said = f"{kind} \u2717 {reason}" if kind else reason
    if len(parts) > 1:
        more = f" (+{len(parts) - 1} more)"
        return _fit(said, limit - len(more)) + more
    return _fit(said, limit)


def last_error(text: str) -> str | None:
    """The last line of a command's output that says what went wrong (an exception's
    last line, an ``Error: ...``), cleaned; None when no line does. What a command that
    failed said last of why: an agent's ``APIConnectionError: Connection error.`` sits
    at the bottom of its stderr."""
    for raw in reversed(text.splitlines()[-200:]):
        line = _clean(raw)
        if line and _ERROR_LINE.match(line):
            return _fit(line, LIMIT)
    return None


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b.*|^(?:error|fatal)\b.*",
                         re.IGNORECASE)


# The kinds of failure, by cause (``failure_kinds``; docs/results.md, "Failure kinds").
MODEL_API = "model API"
AGENT_CRASHED = "agent crashed"
TESTS_FAILED = "tests failed"
TESTS_EDITED = "tests edited"
TIMED_OUT = "timed out"
LIMIT_HIT = "limit hit"
INFRA = "infra"
# What a criterion's failure says of its cause: the agent's command ended other than
# expected; the task's tests (a command that grades) failed. Any other criterion's type
# is its own kind (``file_exists``: the answer is not where it should be).
_CAUSES = {"exit_code": AGENT_CRASHED, "run_command": TESTS_FAILED}
_LIMITS = frozenset({"TOKEN_BUDGET_EXCEEDED", "COST_BUDGET_EXCEEDED", "LIMIT_EXCEEDED"})


def failure_kinds(status: str | None, error_message: str | None, *,
                  failure_class: str | None = None,
                  flags: Sequence[str] = ()) -> tuple[str, ...]:
    """What an attempt that did not succeed failed of, by cause, best first:

    - ``model API``: its agent's model API gave up under it (its ``failure_class`` and
      message read as ``error_digest`` reads them), then ``infra``;
    - ``infra``: what runs the agent failed (an error, a stall, a sandbox not built);
    - ``timed out``; ``limit hit`` (a budget, a limit of the host);
    - ``tests edited``: a scan flagged it (``flags``) for editing its tests;
    - for a ``FAILURE``, each failed criterion's cause: ``agent crashed`` (its command
      ended other than expected: ``exit_code``), ``tests failed`` (``run_command``),
      else the criterion's type (``file_exists``, ``output_contains``...).

    Empty for a success, an attempt not graded and one not finished. What the viewer's
    bar of failure kinds counts and its ``kind`` filter matches: a task whose agent
    crashed and whose tests failed is of both kinds.
    """
    if status in (None, "SUCCESS", "NOT_GRADED"):
        return ()
    text = (error_message or "").strip()
    kinds = [MODEL_API] if failure_class == FailureClass.INFRA and _API.search(text) else []
    if failure_class == FailureClass.INFRA:
        kinds.append(INFRA)
    elif status == "TIMEOUT":
        kinds.append(TIMED_OUT)
    elif status in _LIMITS:
        kinds.append(LIMIT_HIT)
    if "tests-edited" in flags:
        kinds.append(TESTS_EDITED)
    if status == "FAILURE" and failure_class != FailureClass.INFRA:
        kinds += [_CAUSES.get(kind, kind) for kind, _ in _criteria(text) if kind]
    if not kinds:
        kinds.append(status)
    return tuple(dict.fromkeys(kinds))


def _criteria(text: str) -> list[tuple[str, str]]:
    """The message's failed criteria as (type, detail); one untyped part when it names
    none (a timeout, an error, a budget)."""
    return [(m.group(1), m.group(2)) if (m := _CRITERION.match(part)) else ("", part)
            for part in _SPLIT.split(text)]


# The criterion types (suite/_models.py): "; " then one of these and ": " starts another.
_TYPES = "exit_code|file_exists|file_contains|output_contains|run_command|llm_judge|agent_judge"
_SPLIT = re.compile(rf"; (?=(?:{_TYPES}): )")
_CRITERION = re.compile(rf"^({_TYPES}): (.*)$", re.DOTALL)


def _reason(detail: str) -> str:
    """The line of a detail that says what failed; its first real line else."""
    said = _EXIT.sub("", detail, count=1)
    lines = [_clean(line) for line in said.splitlines()]
    lines = [line for line in lines if line and not _RULE.match(line)]
    for pattern in _TELLING:
        for line in lines:
            if found := pattern.match(line):
                return found.group(1).strip()
    # No line says it: its first (which check, how) and its last (where a tool sums up).
    if len(lines) > 1:
        return f"{lines[0]} … {lines[-1]}"
    return lines[0] if lines else _clean(detail)


def _line(text: str) -> str:
    lines = [_clean(line) for line in text.splitlines()]
    return next((line for line in lines if line and not _RULE.match(line)), "")


def _clean(line: str) -> str:
    return " ".join(_TEMP.sub("\u2026/\\1", line).split())


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "\u2026"
