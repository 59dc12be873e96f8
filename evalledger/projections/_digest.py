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


# The kind of a failure whose agent's model API gave up under it (``failure_kinds``).
MODEL_API = "model API"


def failure_kinds(status: str | None, error_message: str | None, *,
                  failure_class: str | None = None) -> tuple[str, ...]:
    """What kinds of failure an attempt that did not succeed had, best first: ``model
    API`` when its agent's model API gave up (its ``failure_class`` and message read as
    ``error_digest`` reads them); each failed criterion's type for a ``FAILURE`` (``run_command``,
    ``file_exists``); else its status (``TIMEOUT``, ``ERROR``). Empty for a success, an
    attempt not graded and one not finished.

    What the viewer's bar of failure kinds counts and its ``kind`` filter matches: a
    task whose two criteria failed is of both kinds.
    """
    if status in (None, "SUCCESS", "NOT_GRADED"):
        return ()
    text = (error_message or "").strip()
    kinds = [MODEL_API] if failure_class == FailureClass.INFRA and _API.search(text) else []
    criteria = [kind for kind, _ in _criteria(text) if kind] if status == "FAILURE" else []
    kinds += criteria or [status]
    return tuple(dict.fromkeys(kinds))


def _criteria(text: str) -> list[tuple[str, str]]:
    """The message's failed criteria as (type, detail); one untyped part when it names
    none (a timeout, an error, a budget)."""
    return [(m.group(1), m.group(2)) if (m := _CRITERION.match(part)) else ("", part)
            for part in _SPLIT.split(text)]


# The criterion types (suite/_tasks.py): "; " then one of these and ": " starts another.
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
