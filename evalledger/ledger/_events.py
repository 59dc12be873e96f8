"""Events: one frozen pydantic model per fact, past tense, tagged by ``type``.

An event is an envelope (``event_id``, ``run_id``, ``task_key``, ``type``, ``ts``,
and ``seq`` once stored) plus a payload: every other field of its model. The
ledger stores the envelope in columns and the payload as canonical JSON (sorted
keys, no whitespace), so the text that is hashed is the text that is stored.

Invariant: every type this version knows is a member of ``Event``, the
discriminated union, and ``EVENT_ADAPTER`` validates them all. A row whose type is
not known (written by a newer evalledger) is read back as an ``OpaqueEvent``:
kept, replayed, skipped by projections, never an error.

Event ids are time-ordered, UUIDv7-style: the ``event_id`` UNIQUE index then
grows at its right edge. With random UUID4 ids every insert lands on a random
B-tree page, which measured 3-4x slower for batched appends.
"""

from __future__ import annotations

import json
import threading
import time
from random import getrandbits as _random_bits
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationInfo,
    model_validator,
)
from pydantic_core import to_json

from evalledger.options import RunOptions
from evalledger.statuses import Category, FailureClass, FinalStatus, RunStatus

from ._packed import PATTERN as _PACKED
from ._rows import EventRow, EventType
from ._tokens import TokenCounts, counts_of
from ._upcast import UPCASTERS, upcast

ENVELOPE_FIELDS = frozenset({"seq", "event_id", "run_id", "task_key", "type", "ts"})


_id_lock = threading.Lock()
# Invariant: _prefix is the text of _last_ms ("tttttttt-tttt-7"), kept with it so
# that the common case (many ids in one millisecond) formats only the tail.
_last_ms = 0
_prefix = ""
_counter = 0


def _set_ms(ms: int) -> None:
    global _last_ms, _prefix
    h = f"{ms:012x}"
    _last_ms, _prefix = ms, f"{h[:8]}-{h[8:]}-7"


def _step() -> None:
    """Move to the next id's millisecond and counter. Call it holding ``_id_lock``."""
    global _counter
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        _set_ms(ms)
        _counter = _random_bits(8)  # a random start, with room to count up
    else:
        _counter += 1
        if _counter > 0xFFF:
            _set_ms(_last_ms + 1)
            _counter = 0


def new_event_id() -> str:
    """A UUIDv7 (RFC 9562) string: 48 bits of Unix milliseconds, then randomness.

    Within one process ids are strictly increasing: ``rand_a`` (12 bits) serves as a
    counter inside a millisecond, so a burst of appends still hits the index's
    right edge.
    """
    with _id_lock:
        _step()
        prefix, counter = _prefix, _counter
    # Uniqueness, not secrecy, is what an event id needs: the PRNG (seeded from the
    # OS, re-seeded in forked children) is 10x cheaper than os.urandom per id.
    tail = _random_bits(62)
    # %-formatting: measured a third faster than the f-string here (the hot path).
    return "%s%03x-%04x-%012x" % (prefix, counter, 0x8000 | tail >> 48, tail & 0xFFFF_FFFF_FFFF)  # noqa: UP031


def new_event_ids(count: int) -> list[str]:
    """``count`` ids for one read's worth of events, as ``new_event_id`` would give them,
    for the price of one: one lock, one clock read, one random tail shared by all (the
    counter in ``rand_a`` tells them apart; the tail tells processes apart)."""
    global _counter
    if count <= 0:
        return []
    ids: list[str] = []
    with _id_lock:
        _step()
        tail = _random_bits(62)
        rest = "-%04x-%012x" % (0x8000 | tail >> 48, tail & 0xFFFF_FFFF_FFFF)  # noqa: UP031
        while True:
            take = min(0x1000 - _counter, count - len(ids))
            prefix = _prefix
            ids += [f"{prefix}{c:03x}{rest}" for c in range(_counter, _counter + take)]
            _counter += take - 1
            if len(ids) == count:
                return ids
            _set_ms(_last_ms + 1)
            _counter = 0


# The formatted second, kept while it is current: strftime per event was 3.4 us, a
# few percent of a short task's cost in the executor.
_second: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """Now as ISO-8601 UTC with microseconds and a ``Z``: sorts as text."""
    global _second
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    second, prefix = _second
    if seconds != second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second = (seconds, prefix)
    return f"{prefix}.{nanos // 1000:06d}Z"


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _canonical_object(value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    # From JSON means from the ledger, where payloads are stored canonical already:
    # sorting again is wasted work on every replay.
    return value if info.mode == "json" else _canonical(value)


# A free-form JSON object, its keys sorted at every level when the event is built.
# With the payload fields of every model declared in alphabetical order, this makes
# pydantic's own JSON serialiser emit canonical JSON directly: the append path
# never re-sorts (that cost ~2.5 us an event; the whole insert costs ~5 us).
JsonObject = Annotated[dict[str, Any], AfterValidator(_canonical_object)]

def _absent(value: object) -> bool:
    return value is None


def _empty(value: object) -> bool:
    return not value


def _false(value: object) -> bool:
    return value is False


def _agent(value: object) -> bool:
    return value == "agent"


def _no_tokens(value: object) -> bool:
    # Most attempts (every command that is not an agent) use none: 90 bytes a completion.
    return isinstance(value, TokenCounts) and not value.total


# Where an event came from when it was not recorded by a run but imported (from the
# old harness's run folders): left out of the payload when None, as every native event
# has it.
Imported = Annotated[JsonObject | None, Field(exclude_if=_absent)]

# A large snapshot value, compressed (see _packed).
Packed = Annotated[str, StringConstraints(pattern=_PACKED)]

# Envelope text goes into the hash chain "\n"-framed (see _chain), so no newlines.
_Line = Annotated[str, StringConstraints(min_length=1, pattern=r"^[^\n\r]*$")]


class _Event(BaseModel):
    """The envelope every event shares.

    Invariant (tested): payload fields, the ones after the envelope, are declared
    in alphabetical order in every subclass and every nested model.
    """

    # No inf or NaN: canonical JSON has no spelling for them (they would be stored
    # as null, and a live fold would disagree with the rebuild).
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    event_id: _Line = Field(default_factory=new_event_id)
    run_id: _Line
    task_key: _Line | None = None
    ts: _Line = Field(default_factory=utc_now)
    # Assigned by the ledger on append; None on an event that was never stored.
    seq: int | None = None


class _TaskEvent(_Event):
    task_key: _Line  # narrowed: task events always have one


class CriterionResult(BaseModel):
    """One success criterion's result (items of ``task.completed.criteria``)."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    detail: str = ""
    """What was found (``exit code 1, expected 0``, ``add.py does not exist``)."""
    errored: Annotated[bool, Field(exclude_if=_false)] = False
    """``true``: it could not be checked (a judge's API failed, or answered nothing
    readable): the attempt is ``ERROR``, never a verdict. Left out when ``false``."""
    passed: bool
    """Whether the criterion passed."""
    score: Annotated[float | None, Field(exclude_if=_absent)] = None
    """A judge's score, 0 to 1 (the samples' mean). Left out for other criteria."""
    spread: Annotated[float | None, Field(exclude_if=_absent)] = None
    """With several samples: the standard deviation of their scores (the judge's
    variance). Left out otherwise."""
    type: str
    """The criterion's ``type``."""
    weight: float = 1.0
    """The criterion's weight."""


class Fingerprint(BaseModel):
    """What drift is measured against: run-level options and one hash per task key."""

    model_config = ConfigDict(frozen=True)

    options: JsonObject = {}
    """The run's options (``RunOptions``, as in ``config``)."""
    tasks: JsonObject = {}
    """Task key → ``definition_hash``, for every task defined."""


class RunStarted(_Event):
    """``evalledger run`` begins, before any task. Appended only if the run id is not
    taken (no ``run.started`` or ``run.resumed`` of that id)."""

    type: Literal[EventType.RUN_STARTED] = EventType.RUN_STARTED
    batch_token: str | None = None
    """The batch's random token: every attempt's ``EVALLEDGER_ATTEMPT`` starts with it.
    What a later batch kills if this batch's process died (see
    [ledger.md](ledger.md#dead-batches))."""
    config: RunOptions = RunOptions()
    """The run's options, ``RunOptions`` (see
    [cli.md](cli.md#run-options-recorded-in-runstarted)): ``cwd``, ``exclude_tags``,
    ``experiment``, ``max_cost_usd``, ``max_parallel``, ``out``, ``paths``,
    ``preservation_mode``, ``pricing``, ``repeats``, ``tags``, ``timeout``. Paths are
    absolute."""
    experiment_id: str | None = None
    """The experiment file's ``experiment_id``, if any."""
    fingerprint: Fingerprint = Fingerprint()
    """What drift is measured against: ``{options, tasks}`` (see
    [Fingerprint](#nested-objects))."""
    host: JsonObject = {}
    """The recording process: ``hostname``, ``user``, ``platform``, ``python``,
    ``evalledger`` (version), ``cwd``, ``pid``; ``limits``: how task limits are enforced
    outside docker (``cgroup v1`` or ``rlimits``, docs/isolation.md); ``folder_reads``:
    ``fanotify`` when what attempts under isolation ``none`` open of their task folder
    is seen (``task.completed``'s ``folder_reads``), else left out; ``prices``: the
    maintained rate card usage was priced by (``genai-prices 0.2.5``: its release's
    data), under the ``pricing`` file's rates."""
    imported: Imported = None
    """Only on an imported run: ``{format: "coder_eval", source: <the run folder>,
    framework_version}`` (see [import.md](import.md))."""
    ledger_id: str | None = None
    """The ledger's ``meta.ledger_id`` when the run started: ``verify`` fails if they
    differ later, unless the run came from another ledger (a ``run.merged`` of the run
    follows it)."""
    max_parallel: int = 1
    """Tasks at once."""
    planned: list[str] = []
    """Every task key of the run, in dispatch order."""
    public_key: str | None = None
    """The batch's signing key (ed25519, raw, base64url): every event that decides a
    verdict is sealed with it by a ``run.signed`` (see [ledger.md](ledger.md#signed-runs)).
    None: a run recorded before signing, or imported."""
    sandbox_root: str | None = None
    """The batch's sandbox folder (in the temp folder): removed by a later batch if this
    one's process died, and only when the folder proves it is that batch's (its marker
    file names the batch's token and pid: docs/ledger.md, "Dead batches")."""
    unpriced_models: list[str] = []
    """Models named by tasks that have no price on the rate card (a ``claude-code`` or
    ``opencode`` task's model is not: the agent reports its cost)."""


class RunResumed(_Event):
    """``evalledger resume`` begins. Appended only if nobody started or resumed the run
    since the resume read it."""

    type: Literal[EventType.RUN_RESUMED] = EventType.RUN_RESUMED
    added: list[str] = []
    """Task keys defined since the run began: they join the run with this resume (also
    in ``to_run``)."""
    batch_token: str | None = None
    """This resume's batch token, as in ``run.started``."""
    drift: JsonObject = {}
    """``{}`` when nothing drifted; else ``{"lines": [...]}``, one human-readable line per
    difference (``option timeout: 20 → 30``, ``task K: timeout: 20 → 30``,
    ``task K: env.MODE: "a" → "b"``, ``task K: definition changed`` when the earlier
    definition was never recorded, ``task K: new``, ``task K: no longer defined``; older
    resumes wrote ``->``)."""
    fingerprint: Fingerprint = Fingerprint()
    """The fingerprint now: the run's options as this resume runs them, and the hash of
    every task defined now. Later drift is measured against it."""
    host: JsonObject = {}
    """The recording process, as in ``run.started``."""
    max_parallel: int = 1
    """Tasks at once for this resume."""
    public_key: str | None = None
    """This resume's signing key, as in ``run.started``."""
    rerun: list[str] = []
    """The ``--rerun`` patterns (task keys or globs) asked to run again."""
    rerun_failed: bool = False
    """``--rerun-failed``: keys in the failed category ran again."""
    retry_errors: bool = False
    """``--retry-errors``: keys in the error category ran again."""
    sandbox_root: str | None = None
    """This resume's sandbox folder, as in ``run.started``."""
    to_run: list[str] = []
    """The task keys this resume runs."""


class TaskSkipped(_Event):
    """A task file that could not be used (or says ``skip: true``), once per file after
    ``run.started``; not written by a resume. Run-level: ``task_key`` is null."""

    type: Literal[EventType.TASK_SKIPPED] = EventType.TASK_SKIPPED
    deliberate: bool = False
    """True when the file says ``skip: true`` (left out on purpose, reason
    ``skip: true``); false when it could not be used."""
    path: str
    """The task file."""
    reason: str
    """Why it could not be used, one line (``unknown key 'tiemout'``)."""


class TaskStarted(_TaskEvent):
    """An attempt is dispatched."""

    type: Literal[EventType.TASK_STARTED] = EventType.TASK_STARTED
    attempt: int = 1
    """1 for the first attempt of this key in the run; each resume that runs the key
    again adds 1."""
    definition: JsonObject = {}
    """The resolved task: ``task_id``, ``variant_id``, ``source``, ``command`` and each
    of ``description``, ``tags``, ``prompt``, ``workdir``, ``env``, ``timeout``,
    ``model``, ``stream_format``, ``budget``, ``success_criteria``, ``expect``,
    ``isolation``, ``network``, ``env_passthrough``, ``binds``, ``image``,
    ``dockerfile``, ``stall_timeout``, ``stall_action``, ``max_output``, ``limits``
    (all five, when any is not at its default), ``gateway`` (its providers) and
    ``allow_domains`` the task sets to other than its default
    (before 0.2 the first ten were recorded at their defaults too; ``retries`` and
    ``agent_version_command``, like ``ray``, are how it runs, not what it is: never
    recorded here; see
    [tasks.md](tasks.md#the-resolved-definition))."""
    definition_hash: str = ""
    """sha256 (hex) of what the definition evaluates: independent of where the suite
    sits on disk and of ``description``, ``tags`` and ``expect`` (earlier versions
    hashed those too)."""
    imported: Imported = None
    """Only on an imported attempt: ``{source: <its file, relative to the run folder>,
    sha256: <the file's content hash>}``."""
    replicate_index: int = 0
    """The ``NN`` of the task key, from 0."""
    tags: list[str] = []
    """The task's tags."""
    task_id: str
    """The task id."""
    variant_id: str = "default"
    """The variant (``default`` without an experiment)."""


_new_tuple = tuple.__new__

# The same escaping pydantic-core applies (ensure_ascii off); tested equal.
_json_string = json.encoder.encode_basestring


class TaskOutput(_TaskEvent):
    """One line a command printed that is not a JSON object (any stderr line, most
    stdout lines). The one type whose payload leaves out fields equal to their default
    (``stream`` stdout, ``truncated`` false): it is nearly every row of a ledger, and
    those two were half of its payload."""

    type: Literal[EventType.TASK_OUTPUT] = EventType.TASK_OUTPUT
    line: str
    """The line, without its newline."""
    n: int
    """Line number within the attempt, from 1, stdout and stderr together."""
    stream: Literal["stdout", "stderr"] = "stdout"
    """``stderr``; left out for ``stdout`` (older ledgers may spell it out)."""
    truncated: bool = False
    """``true``: the line was over 64 KiB and was cut there; left out when ``false``."""

    @staticmethod
    def encoded(
        run_id: str, task_key: str, ts: str, stream: str, line: str, n: int, truncated: bool,
        event_id: str | None = None,
    ) -> EventRow:
        """This event in stored form, without building the model (the hot path)."""
        payload = output_payload(line, n, stream, truncated)
        # tuple.__new__ skips the NamedTuple's Python-level __new__: half the cost.
        return _new_tuple(EventRow, (event_id or new_event_id(), run_id, task_key,
                                     EventType.TASK_OUTPUT, ts, payload, None, None))


def output_payload(line: str, n: int, stream: str, truncated: bool) -> str:
    """The canonical payload of a ``task.output``: what the runner stores for a line, and
    what verify expects an output line to read back as."""
    payload = f'{{"line":{_json_string(line)},"n":{n}'
    if stream != "stdout":
        payload += f',"stream":"{stream}"'
    return payload + (',"truncated":true}' if truncated else "}")


class TaskEmitted(_TaskEvent):
    """A JSON object line the command printed on stdout, kept whole (``type: task.event``)."""

    type: Literal[EventType.TASK_EVENT] = EventType.TASK_EVENT
    data: JsonObject
    """The JSON object the command printed, whole (keys sorted)."""
    n: int
    """Line number within the attempt, as for ``task.output``."""


class TaskLines(_TaskEvent):
    """Consecutive lines of one attempt in one row (a chunk): what the runner writes for
    each read of a command's output from schema 17 on, stored compressed
    ([ledger.md](ledger.md#lines-in-chunks)). Readers give it as the ``task.output`` and
    ``task.event`` rows it holds, each with its own seq: a chunk of ``k`` lines stored at
    ``seq`` holds the lines ``seq - k + 1`` to ``seq``."""

    type: Literal[EventType.TASK_LINES] = EventType.TASK_LINES
    lines: Annotated[list[tuple[_Line, JsonObject]], Field(min_length=1, max_length=1024)]
    """Each line as ``[ts, payload]``: when it was read, and the payload its own row has
    (a ``task.event``'s when it holds ``data``, else a ``task.output``'s)."""

    @model_validator(mode="after")
    def _lines_fit_their_types(self) -> TaskLines:
        from ._lines import MAX_BYTES

        # No more than a reader takes back (a frame that claims more is refused).
        if len(text := to_json(self.lines)) > MAX_BYTES:
            raise ValueError(f"a chunk holds at most {MAX_BYTES:,} bytes of lines, not "
                             f"{len(text):,}")
        for ts, payload in self.lines:
            type_ = EventType.TASK_EVENT if "data" in payload else EventType.TASK_OUTPUT
            decode_row(EventRow(self.event_id, self.run_id, self.task_key, type_, ts,
                                to_json(payload).decode()))
        return self


class TaskUsage(_TaskEvent):
    """Usage was reported (see [tasks.md](tasks.md#usage-and-cost))."""

    type: Literal[EventType.TASK_USAGE] = EventType.TASK_USAGE
    cache_read_tokens: int = 0
    """Tokens read from a prompt cache."""
    cache_write_tokens: int = 0
    """Tokens written to a prompt cache."""
    call: Annotated[JsonObject | None, Field(exclude_if=_absent)] = None
    """A model call the [gateway](gateway.md#what-is-recorded) passed on (``via``:
    ``gateway``): ``provider``, ``api``, ``path``, ``status``, ``streamed``,
    ``latency_seconds``, ``seconds``, ``request_id``, ``cut``, ``broken``. On a judge's
    usage (role
    ``grader``): the call it paid for: ``api``,
    ``criterion`` (its index), ``sample``, ``status`` (the HTTP status, or ``timeout``,
    ``unreachable``), ``tries``, ``retried`` (why each try before the answer failed, e.g.
    ``HTTP 429``, ``cannot reach it: ...``; left out when the first try answered),
    ``latency_seconds``, ``prompt_sha256`` and
    ``request_bytes``, ``response`` (its text, at most 4,096 characters),
    ``response_sha256`` and ``response_bytes``. Never a key. Left out otherwise."""
    cost_usd: float | None = None
    """The cost of this usage in USD. **null means unpriced**: the model has no rate.
    Never booked as 0."""
    estimate: Annotated[bool, Field(exclude_if=_false)] = False
    """``true``: a running estimate, not a total the agent reported: a ``claude-code``
    attempt ended (timed out, stopped by a budget, interrupted, ...) before a result line
    covered its messages, so their usage is summed and priced from the rate card (see
    [tasks.md](tasks.md#usage-and-cost)). Left out when ``false``, as in every usage
    recorded before this field. It counts in every total like any other usage, and makes
    its attempt's cost a floor (``cost_complete`` false)."""
    input_tokens: int = 0
    """Input tokens."""
    model: str | None = None
    """The model, as the command or the task named it."""
    output_tokens: int = 0
    """Output tokens."""
    role: Annotated[_Line, Field(exclude_if=_agent)] = "agent"
    """Whose spend it is: ``agent``, the task's own command (left out of the payload when
    ``agent``, as in every usage recorded before this field); ``grader``, what grading it
    cost (a judge, an evaluator; an import books the old harness's judge and
    simulated-user spend so, see [import.md](import.md#what-is-recorded)). A role this
    version does not know is kept and summed under its name."""

    @property
    def tokens(self) -> TokenCounts:
        return counts_of(self)


def _check_category(category: Category, status: FinalStatus) -> None:
    """A verdict's category is its status's, always (``task.completed``, ``task.graded``)."""
    if category != status.category:
        raise ValueError(f"category {category} does not match final_status {status}")


class TaskCompleted(_TaskEvent):
    """An attempt reached a final status."""

    type: Literal[EventType.TASK_COMPLETED] = EventType.TASK_COMPLETED
    attempt: int = 1
    """The attempt this completes (as in its ``task.started``)."""
    category: Category
    """``succeeded``, ``failed`` or ``error``; always the category of ``final_status``."""
    cost_complete: bool = True
    """False when some usage of this attempt had no price, when its spend was estimated
    (``task.usage`` with ``estimate: true``: the attempt was cut off before its agent
    reported), or (an imported attempt) when the old harness knew its spend was not all
    recorded (a TIMEOUT: the turn it killed). Either way the run's cost is a floor."""
    cost_usd: float | None = None
    """The attempt's cost in USD, every role's usage together: what had a price (a floor
    when ``cost_complete`` is false: some usage had none, or was estimated); null when
    nothing of it had a price."""
    criteria: list[CriterionResult] = []
    """One [criterion result](#nested-objects) per success criterion, in order. Empty
    when the command never ran."""
    duration_seconds: float = 0.0
    """Wall time of the attempt, sandbox to criteria."""
    environment_info: JsonObject = {}
    """``exit_code``; ``evalledger`` (version), ``python`` and ``platform`` only when
    they differ from the session's ``host`` (``run.started`` / ``run.resumed``: readers
    put them back; recorded on every completion before 0.2, and on every imported one
    as the old harness had them); what the command stated (a version line;
    ``claude_code_version``, ``gemini_cli_version`` from the agent's stream),
    ``agent_version`` (what ``agent_version_command`` printed), ``stream_format`` (the
    one ``auto`` found), ``unread_format`` (a ``native`` task whose lines are an
    agent's: the format that would read them; its cost is unknown) and ``model`` when it
    used any; with ``--executor ray``, ``ray_node_id``, ``hostname`` and the node's
    ``evalledger``, ``python`` and ``platform``: where the attempt ran."""
    error_message: Annotated[str | None, Field(exclude_if=_absent)] = None
    """Why it did not succeed: failed criteria's details, ``timed out after 20s``, a
    budget message, the sandbox or runner error. Left out when there is none."""
    exit_code: int | None = None
    """The command's exit code (-N when killed by signal N); null when it never ran."""
    failure_class: Annotated[FailureClass | None, Field(exclude_if=_absent)] = None
    """Who failed, when it did not succeed: ``agent``, ``infra`` or ``grader``
    ([results.md](results.md#failure-classes)). Left out when it succeeded or nothing
    judged it; an attempt recorded before classes has its status's class."""
    final_status: FinalStatus
    """One of the [final statuses](results.md#final-statuses-and-categories)."""
    folder_reads: Annotated[list[str], Field(exclude_if=_empty)] = []
    """Files of its task's folder (relative to it) that a process of the attempt opened
    while its command ran, first seen first, at most 50: the task file, criteria,
    hidden tests read without a word printed. Seen only where the runner watches (the
    session's ``host.folder_reads`` says ``fanotify``: a root runner holding attempts
    in cgroups) and the attempt ran under isolation ``none`` (see
    [isolation.md](isolation.md#reads-of-the-task-folder)). Left out when empty."""
    grade_pending: Annotated[bool, Field(exclude_if=_false)] = False
    """``true``: the run did not grade (``run --no-grade``); the attempt is
    ``NOT_GRADED`` until a ``regrade`` grades it. Left out when ``false``."""

    imported: Imported = None
    """Only on an imported attempt: ``{error_category}`` when the old file had one."""
    kept_hash: Annotated[str | None, Field(exclude_if=_absent)] = None
    """When the preservation mode keeps the workspace (in the run's
    ``artifacts/<task_key>/``): its sha256 as it was kept (computed as
    ``workspace_hash``): what the attempt left, since criteria that run code
    (``run_command``, ``agent_judge``) grade a copy of it. What ``regrade`` grades again,
    and refuses once it differs. Left out otherwise."""
    tokens: Annotated[TokenCounts, Field(exclude_if=_no_tokens)] = TokenCounts()
    """The attempt's token totals ([TokenCounts](#nested-objects)); left out when every
    count is 0 (the views read 0)."""
    weighted_score: float = 0.0
    """Passed weight / total weight of the criteria, 0 to 1."""
    workspace_hash: Annotated[str | None, Field(exclude_if=_absent)] = None
    """Only under isolation: sha256 of the workspace as the command left it, taken
    before the criteria ran: what was graded (names, kinds, modes and contents; see
    [isolation.md](isolation.md#what-is-recorded))."""
    @model_validator(mode="after")
    def _category_matches_status(self) -> TaskCompleted:
        _check_category(self.category, self.final_status)
        return self


class TaskGraded(_TaskEvent):
    """An attempt graded again, from its kept workspace (``regrade``): a verdict of the
    grade set ``grades``. Its ``task.completed`` (the run's own verdict, grade set
    ``original``) and any earlier grade stay as they were."""

    type: Literal[EventType.TASK_GRADED] = EventType.TASK_GRADED
    attempt: int = 1
    """The attempt graded (as in its ``task.completed``)."""
    category: Category
    """Always the category of ``final_status``."""
    cost_usd: float | None = 0.0
    """What this grading cost: its judges' calls (each its own ``task.usage`` of role
    ``grader``), summed; null when some call had no price. 0 without judges."""
    criteria: list[CriterionResult] = []
    """One [criterion result](#nested-objects) per criterion of this grading, in order."""
    criteria_from: _Line
    """Where the criteria came from: ``tasks`` (the run's task files as they were when
    it regraded), ``recorded`` (the attempt's own, as its ``task.started`` recorded
    them), ``criteria:<file>`` or ``tasks:<path>``."""
    criteria_hash: str
    """sha256 of the criteria's definitions (canonical JSON): two gradings with the
    same hash judged by the same rules."""
    error_message: str | None = None
    """Why it did not succeed under this grading (as ``task.completed`` says it)."""
    final_status: FinalStatus
    """The attempt's status under this grading. What grading cannot change (the
    sandbox failed, the runner erred, a budget or the timeout stopped the command)
    stays the status ``task.completed`` recorded."""
    grades: _Line
    """The grade set's name (``regrade --name``)."""
    tokens: TokenCounts = TokenCounts()
    """The tokens this grading's judges used ([TokenCounts](#nested-objects))."""
    weighted_score: float = 0.0
    """Passed weight / total weight of these criteria, 0 to 1."""
    workspace_hash: str
    """sha256 of the kept workspace this grading read: its ``task.completed``'s
    ``kept_hash``."""

    @model_validator(mode="after")
    def _category_matches_status(self) -> TaskGraded:
        _check_category(self.category, self.final_status)
        return self


class RefusedGrade(BaseModel):
    """An attempt a ``regrade`` could not grade, and why (items of ``run.graded.refused``)."""

    model_config = ConfigDict(frozen=True)

    reason: _Line
    """Why (``its workspace is gone``, ``its workspace changed since it was kept``)."""
    task_key: _Line
    """The attempt's task key (its counted attempt)."""


class RunGraded(_Event):
    """A ``regrade`` of the run ended: its grade set, what it covered and what it refused.
    A grade set is complete when one of its ``run.graded`` says so: the whole run was
    asked (no ``--only``) and nothing was refused. Readers show the latest complete
    grade set by default."""

    type: Literal[EventType.RUN_GRADED] = EventType.RUN_GRADED
    complete: bool
    """Every counted attempt of the run has a verdict of this set (none refused, no
    ``--only``)."""
    criteria_from: _Line
    """As on each ``task.graded``."""
    graded: int
    """How many ``task.graded`` this regrade appended."""
    grades: _Line
    """The grade set's name."""
    only: list[str] = []
    """The ``--only`` patterns, when some were given."""
    refused: list[RefusedGrade] = []
    """The attempts it refused (a workspace missing or changed), each with its reason."""


class Evidence(BaseModel):
    """Where a scanner's rule matched (items of ``task.flagged.evidence``)."""

    model_config = ConfigDict(frozen=True)

    excerpt: str
    """The matched line (at most 300 characters around the match), or for a workspace
    rule the path and what happened to it (``tests/test_add.py: deleted``)."""
    seq: int | None = None
    """The transcript line's seq (``task.output`` or ``task.event``); null for a
    workspace rule."""


class TaskFlagged(_TaskEvent):
    """A scanner's rule matched an attempt's transcript or workspace (``evalledger
    scan``): a finding, appended beside the verdicts, never changing one."""

    type: Literal[EventType.TASK_FLAGGED] = EventType.TASK_FLAGGED
    attempt: int = 1
    """The attempt scanned (as in its ``task.started``)."""
    evidence: list[Evidence] = []
    """Where it matched: up to 5 places, the first ones."""
    matches: int = 0
    """How many places matched in all."""
    rule: _Line
    """The rule's name (``criteria-read``, ``git-history``, ``network``,
    ``tests-edited``, ``grader-shadowed``, ``exit-patched``, ``folder-read``, or a
    ``--rules`` file's)."""
    why: str = ""
    """What the rule looks for, as its definition says."""


class TaskInterrupted(_TaskEvent):
    """An attempt was cancelled (Ctrl-C, SIGTERM, SIGHUP, an error elsewhere in the batch)
    before a final status."""

    type: Literal[EventType.TASK_INTERRUPTED] = EventType.TASK_INTERRUPTED
    reason: str = "interrupted"
    """``cancelled`` (Ctrl-C, a signal, the batch stopping), the exception that stopped
    the attempt (``KeyboardInterrupt: ...``), ``worker lost: ...`` (a Ray worker or
    node gone under it: an infrastructure failure, which ``retries`` try again), or
    ``runner lost: ...`` (appended by ``resume``: the run's process died with the attempt
    started, its end never recorded; what its lines show it spent is booked with it)."""


class TaskOutputTruncated(_TaskEvent):
    """An attempt printed more than its task's ``max_output``
    ([tasks.md](tasks.md#recorded-output)): the lines from ``from_n`` on were not
    recorded (their usage and budget still counted) except the last ones, its tail,
    recorded after this event with their own ``n``. Recorded once the attempt's
    output ended, before its ``task.completed``."""

    type: Literal[EventType.TASK_OUTPUT_TRUNCATED] = EventType.TASK_OUTPUT_TRUNCATED
    attempt: int = 1
    """The attempt (as in its ``task.started``)."""
    from_n: int
    """The ``n`` of the first line not recorded."""
    limit_bytes: int
    """The task's ``max_output``: the bytes (UTF-8, a newline each) recorded before."""
    omitted_bytes: int
    """What the lines not recorded held, in bytes (UTF-8, a newline each)."""
    omitted_lines: int
    """How many lines (output lines and JSON events) were not recorded."""
    tail_from_n: int | None = None
    """The ``n`` of the first line of the tail recorded after this event; null when none
    is (the last line alone was over the tail's size)."""


class TaskStalled(_TaskEvent):
    """An attempt produced nothing (no output line, JSON event or usage) for its
    ``stall_timeout`` ([tasks.md](tasks.md#stalls-and-retries)). With ``action: kill``
    its command is then ended and the attempt is ``STALLED``; with ``warn`` it goes on
    (and a later stall of it is recorded again)."""

    type: Literal[EventType.TASK_STALLED] = EventType.TASK_STALLED
    action: Literal["kill", "warn"] = "kill"
    """``kill`` (the command is then ended and the attempt is ``STALLED``) or ``warn`` (it
    goes on; a later silence is recorded again)."""
    attempt: int = 1
    """The attempt (as in its ``task.started``)."""
    idle_seconds: float
    """How long it had been silent: its ``stall_timeout``, or a little more."""
    last_at: str
    """When that last event was recorded (ISO 8601 UTC)."""
    last_n: int = 0
    """The ``n`` of its last output line or JSON event (0: it printed nothing)."""
    last_seq: int | None = None
    """The ``seq`` of its last event before the stall (its ``task.started`` when it
    printed nothing); null when the ledger could not be read where it ran (a Ray worker
    on another machine)."""


class TaskIsolation(_TaskEvent):
    """What confined an attempt's command, as measured from inside before it ran
    ([isolation.md](isolation.md#what-is-recorded)). Recorded for every attempt whose
    task asks for isolation; an attempt without one ran with none, as every attempt
    before this event existed."""

    type: Literal[EventType.TASK_ISOLATION] = EventType.TASK_ISOLATION
    asked: Annotated[str | None, Field(exclude_if=_absent)] = None
    """Only when what ran is not what the task named: the isolation it asked for
    (``auto``: the backend chosen is ``backend``; another that could not run here:
    ``reason`` says why, and ``backend`` is ``none``)."""
    attempt: int = 1
    """The attempt (as in its ``task.started``)."""
    backend: _Line
    """``bwrap`` or ``docker`` (with ``version``), or ``none``."""
    binds: list[str] = []
    """Host paths the command could read (bound read-only at the same path)."""
    image: Annotated[str | None, Field(exclude_if=_absent)] = None
    """Only with ``docker``: the id of the image the command ran in (``sha256:...``)."""
    network: str = "none"
    """``none`` (a loopback of its own), ``host``, or ``gateway`` (a loopback of its own
    whose only way out is the model gateway, and the egress proxy with
    ``allow_domains``)."""
    probes: JsonObject = {}
    """What the prelude found inside before the command started: ``canary``, ``ledger``
    and ``task_file`` (``absent`` or ``visible``), ``network`` (a connect to a port the
    runner listened on: ``refused``, ``connected``, or ``unprobed`` without ``bash``).
    Empty when the sandbox never started."""
    reason: Annotated[str | None, Field(exclude_if=_absent)] = None
    """Why the asked isolation could not run, or what leaked, or that the sandbox never
    started (the attempt is then ERROR); or that the deadline stopped it before its
    probes (a container slow to start: the attempt is TIMEOUT)."""
    uid: int | None = None
    """The runner's user id (the command's on the host; every capability dropped)."""
    version: str | None = None
    """The backend's version (``bubblewrap 0.8.0``, ``docker 20.10.24``: the daemon's)."""
    workspace: str | None = None
    """Where the command found its workspace (``/work``)."""


class TaskEgress(_TaskEvent):
    """A connection an attempt's command asked the egress proxy for, under ``network:
    gateway`` with ``allow_domains`` ([gateway.md](gateway.md#other-hosts-allow_domains)):
    let through to a host the task allows (recorded when it closes, with what it carried)
    or denied (recorded as it is refused). Recorded before the attempt's
    ``task.completed``."""

    type: Literal[EventType.TASK_EGRESS] = EventType.TASK_EGRESS
    allowed: bool
    """It was let through (its host and port are in the task's ``allow_domains``)."""
    attempt: int = 1
    """The attempt (as in its ``task.started``)."""
    host: _Line
    """The host it asked for (lower case, as the command named it: a name or an
    address)."""
    port: int
    """The port it asked for."""
    reason: Annotated[str | None, Field(exclude_if=_absent)] = None
    """Why it was denied (``not in allow_domains``, ``not CONNECT: GET``, ``bad request``),
    or why a connection let through ended early (``cannot connect: ...``)."""
    received_bytes: int = 0
    """Bytes the host sent the command."""
    seconds: float = 0.0
    """How long it was open (0 for a denied one)."""
    sent_bytes: int = 0
    """Bytes the command sent the host."""


class RunFinished(_Event):
    """The batch ended: all dispatched tasks are done, the run budget stopped
    dispatching, or it was interrupted."""

    type: Literal[EventType.RUN_FINISHED] = EventType.RUN_FINISHED
    status: RunStatus
    """``completed``, ``interrupted``, ``budget_stopped`` or ``infra_stopped`` (see
    [results.md](results.md#run-statuses))."""


class RunSnapshot(_Event):
    """A projection of the run through ``through_seq``, so a rebuild folds only what
    came after (docs/events.md). ``kind`` names what ``value`` holds and
    ``fold_version`` the version of the code that made it: a rebuild uses a snapshot
    only when that version is its own, and ``verify --deep`` checks each against a
    full replay. Derived data: deleting every snapshot loses nothing."""

    type: Literal[EventType.RUN_SNAPSHOT] = EventType.RUN_SNAPSHOT
    fold_version: int
    """The version of the code that made it. A rebuild uses only its own version's
    snapshots; any other is ignored and the run replayed from its first event."""
    kind: _Line
    """``summary_fold`` (the summary fold's state), ``resume_fold`` (the resume fold's
    state: planned keys, their attempts and how each ended, the options and
    fingerprint), ``summary`` (the ``run.json`` summary without ``anchor``),
    ``headline`` (its counts alone: what ``evalledger runs`` lists)."""
    through_seq: int
    """The seq of the last event folded into it (the run's ``run.finished``): always
    before the snapshot's own seq."""
    value: JsonObject | Packed
    """The state or summary; a large one packed: the string ``zstd:`` followed by the
    base64 of a zstd frame of its JSON (``evalledger.ledger._packed``). The fold
    states' layout is internal to their ``fold_version``."""


class RunMerged(_Event):
    """Events of this run came from somewhere else (``merge``, ``import-events``): which
    ledger or file, which of its seqs, how many were new here."""

    type: Literal[EventType.RUN_MERGED] = EventType.RUN_MERGED
    events: int
    """How many of the batch's events of the run were new here (the others were held
    already)."""
    source: str
    """The other ledger's path, or the export file's."""
    source_ledger: str | None = None
    """The other ledger's ``meta.ledger_id``; for an export, the ``ledger_id`` its
    trailer names."""
    source_seqs: list[int] = []
    """The first and last seq the batch's events of the run had there."""


class RunSigned(_Event):
    """The runner's seal over what it just wrote of the run: the events that decide a
    verdict (``SEALED_TYPES``) in the same commit, and the run's other rows it wrote
    since its last seal, chained to its earlier seals and signed with the batch's key
    (see [ledger.md](ledger.md#signed-runs)). An event of a sealed type no valid seal
    covers was not written by the runner: ``verify`` names it, reads ignore it."""

    type: Literal[EventType.RUN_SIGNED] = EventType.RUN_SIGNED
    k: int = 0
    """How many events of sealed types it covers: the run's last ``k`` of them before it
    (0 on a seal of snapshots)."""
    key: _Line
    """The signing key's id: the first 8 characters of its ``public_key``."""
    m: int = 0
    """How many of the run's other rows it covers: its last ``m`` before it."""
    public_key: str | None = None
    """The whole key, on the first seal it makes (base64url of its 32 raw bytes)."""
    rest: str | None = None
    """sha256 of those ``m`` rows (base64url); None when ``m`` is 0."""
    sig: _Line
    """The ed25519 signature of the chain value (base64url of 64 bytes); on a seal of
    snapshots, of their digests."""
    snapshots: list[str] = []
    """A seal of the snapshots right before it, outside the chain: each one's sha256
    (base64url), in order. A read uses a snapshot of a signed run only when such a seal
    by one of its batches vouches for it."""


class OpaqueEvent(_Event):
    """An event of a type this version does not know: kept whole, skipped by projections."""

    type: _Line
    payload: JsonObject = {}


Event = Annotated[
    RunStarted
    | RunResumed
    | TaskSkipped
    | TaskStarted
    | TaskOutput
    | TaskEmitted
    | TaskLines
    | TaskUsage
    | TaskCompleted
    | TaskInterrupted
    | TaskIsolation
    | TaskEgress
    | TaskStalled
    | TaskOutputTruncated
    | TaskGraded
    | RunGraded
    | TaskFlagged
    | RunFinished
    | RunSnapshot
    | RunMerged
    | RunSigned,
    Field(discriminator="type"),
]
AnyEvent = Event | OpaqueEvent

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

EVENT_TYPES: dict[str, type[_Event]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        RunStarted, RunResumed, TaskSkipped, TaskStarted, TaskOutput, TaskEmitted, TaskLines,
        TaskUsage, TaskCompleted, TaskInterrupted, TaskIsolation, TaskEgress, TaskStalled,
        TaskOutputTruncated, TaskGraded,
        RunGraded,
        TaskFlagged, RunFinished, RunSnapshot, RunMerged, RunSigned,
    )
}

# A dict, not a set: pydantic-core converts a set on every call (measured 2x slower).
_EXCLUDE_ENVELOPE = dict.fromkeys(ENVELOPE_FIELDS, True)


def encode_payload(event: AnyEvent | EventRow) -> str:
    """The canonical payload text: every non-envelope field, keys sorted, no spaces."""
    if isinstance(event, EventRow):
        return event.payload
    if isinstance(event, OpaqueEvent):
        return to_json(event.payload).decode()
    return event.__pydantic_serializer__.to_json(
        event, exclude=_EXCLUDE_ENVELOPE,
        exclude_defaults=type(event) is TaskOutput or type(event) is RunSigned).decode()


_str = json.JSONEncoder(ensure_ascii=False).encode


def decode_row(row: EventRow) -> AnyEvent:
    """Turn a stored row back into a typed event, every field validated.

    A payload of an older shape is upcast first (``_upcast``). The envelope columns
    are spliced in front of the payload object so pydantic validates one JSON document
    in one pass (``validate_json`` is faster than ``json.loads`` followed by a model).

    Raises:
        pydantic.ValidationError: the payload does not fit its type's model.
        ValueError: the payload is not JSON text at all.
    """
    event_id, run_id, task_key, type_, ts, payload, seq, _ = row
    seq = seq or 0
    if not isinstance(payload, str):
        # Only a hand edit can store a non-text payload (a BLOB, a number).
        raise ValueError(f"payload is stored as {type(payload).__name__}, not JSON text")
    if type_ not in EVENT_TYPES:
        return OpaqueEvent(
            seq=seq, event_id=event_id, run_id=run_id, task_key=task_key, type=type_, ts=ts,
            payload=json.loads(payload),
        )
    if type_ in UPCASTERS:  # an old shape is read as the current one (_upcast)
        payload = upcast(type_, payload)
    head = (
        f'{{"seq":{seq},"event_id":{_str(event_id)},"run_id":{_str(run_id)},'
        f'"task_key":{_str(task_key)},"type":{_str(type_)},"ts":{_str(ts)}'
    )
    body = payload.strip()
    text = head + "}" if body == "{}" else head + "," + body[1:]
    return EVENT_ADAPTER.validate_json(text)
