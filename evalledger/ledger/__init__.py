"""The event store: schema, append, replay and integrity checks.

Imports neither trio nor click: the executor and the CLI build on this, never the
other way round.

The names below are imported when first used (PEP 562): most of them need
pydantic, and a command that only lists runs should not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalledger._lazy import attributes as _attributes

if TYPE_CHECKING:
    from ._anchor import Anchor as Anchor
    from ._chain import GENESIS as GENESIS
    from ._chain import link_hash as link_hash
    from ._errors import AppendOnlyViolation as AppendOnlyViolation
    from ._errors import BadAnchor as BadAnchor
    from ._errors import InvalidEvent as InvalidEvent
    from ._errors import LedgerError as LedgerError
    from ._errors import LedgerGone as LedgerGone
    from ._errors import LedgerIOError as LedgerIOError
    from ._errors import LedgerLocked as LedgerLocked
    from ._errors import LedgerNotFound as LedgerNotFound
    from ._errors import LedgerReadOnly as LedgerReadOnly
    from ._errors import LedgerTooNew as LedgerTooNew
    from ._errors import NotALedger as NotALedger
    from ._errors import NotUtf8 as NotUtf8
    from ._errors import QueryInterrupted as QueryInterrupted
    from ._errors import RunConflict as RunConflict
    from ._errors import RunNotFound as RunNotFound
    from ._events import EVENT_ADAPTER as EVENT_ADAPTER
    from ._events import EVENT_TYPES as EVENT_TYPES
    from ._events import AnyEvent as AnyEvent
    from ._events import CriterionResult as CriterionResult
    from ._events import Event as Event
    from ._events import Evidence as Evidence
    from ._events import Fingerprint as Fingerprint
    from ._events import OpaqueEvent as OpaqueEvent
    from ._events import RefusedGrade as RefusedGrade
    from ._events import RunFinished as RunFinished
    from ._events import RunGraded as RunGraded
    from ._events import RunMerged as RunMerged
    from ._events import RunResumed as RunResumed
    from ._events import RunSigned as RunSigned
    from ._events import RunSnapshot as RunSnapshot
    from ._events import RunStarted as RunStarted
    from ._events import TaskCompleted as TaskCompleted
    from ._events import TaskEgress as TaskEgress
    from ._events import TaskEmitted as TaskEmitted
    from ._events import TaskFlagged as TaskFlagged
    from ._events import TaskGraded as TaskGraded
    from ._events import TaskInterrupted as TaskInterrupted
    from ._events import TaskIsolation as TaskIsolation
    from ._events import TaskLines as TaskLines
    from ._events import TaskOutput as TaskOutput
    from ._events import TaskOutputTruncated as TaskOutputTruncated
    from ._events import TaskSkipped as TaskSkipped
    from ._events import TaskStalled as TaskStalled
    from ._events import TaskStarted as TaskStarted
    from ._events import TaskUsage as TaskUsage
    from ._events import new_event_id as new_event_id
    from ._events import new_event_ids as new_event_ids
    from ._events import utc_now as utc_now
    from ._lines import as_lines as as_lines
    from ._lines import chunked as chunked
    from ._page_queries import attempt_starts as attempt_starts
    from ._page_queries import completion_environments as completion_environments
    from ._page_queries import result_lines as result_lines
    from ._page_queries import run_imported as run_imported
    from ._page_queries import task_lifecycle as task_lifecycle
    from ._page_queries import transcript_row_before as transcript_row_before
    from ._page_queries import transcript_rows as transcript_rows
    from ._page_queries import transcript_tail as transcript_tail
    from ._page_queries import usage_lines as usage_lines
    from ._queries import has_task as has_task
    from ._queries import has_type as has_type
    from ._queries import imported_runs as imported_runs
    from ._queries import run_seq_span as run_seq_span
    from ._queries import task_activity as task_activity
    from ._queries import touched_since as touched_since
    from ._rows import EventRow as EventRow
    from ._rows import EventType as EventType
    from ._schema import MIGRATIONS as MIGRATIONS
    from ._signing import SEALED_TYPES as SEALED_TYPES
    from ._signing import SealReport as SealReport
    from ._signing import Seals as Seals
    from ._signing import Signer as Signer
    from ._sqlite_utils import Database as Database
    from ._store import DEFAULT_BUSY_TIMEOUT as DEFAULT_BUSY_TIMEOUT
    from ._store import Ledger as Ledger
    from ._store import pick_run as pick_run
    from ._tokens import NO_TOKENS as NO_TOKENS
    from ._tokens import TokenCounts as TokenCounts
    from ._transfer import MAX_LINE_BYTES as MAX_LINE_BYTES
    from ._transfer import ndjson as ndjson
    from ._verify import VerifyReport as VerifyReport
    from ._verify import verify as verify
    from ._verify import verify_events as verify_events
    from ._version import SCHEMA_VERSION as SCHEMA_VERSION

_WHERE = {
    "Anchor": "_anchor",
    "GENESIS": "_chain",
    "link_hash": "_chain",
    "AppendOnlyViolation": "_errors",
    "BadAnchor": "_errors",
    "InvalidEvent": "_errors",
    "LedgerError": "_errors",
    "LedgerGone": "_errors",
    "LedgerIOError": "_errors",
    "LedgerLocked": "_errors",
    "LedgerNotFound": "_errors",
    "LedgerReadOnly": "_errors",
    "LedgerTooNew": "_errors",
    "NotALedger": "_errors",
    "NotUtf8": "_errors",
    "QueryInterrupted": "_errors",
    "RunConflict": "_errors",
    "RunNotFound": "_errors",
    "EVENT_ADAPTER": "_events",
    "EVENT_TYPES": "_events",
    "NO_TOKENS": "_tokens",
    "AnyEvent": "_events",
    "CriterionResult": "_events",
    "Event": "_events",
    "EventRow": "_rows",
    "EventType": "_rows",
    "Fingerprint": "_events",
    "OpaqueEvent": "_events",
    "RunFinished": "_events",
    "RunGraded": "_events",
    "RefusedGrade": "_events",
    "Evidence": "_events",
    "RunResumed": "_events",
    "RunMerged": "_events",
    "RunSigned": "_events",
    "SealReport": "_signing",
    "Signer": "_signing",
    "RunSnapshot": "_events",
    "RunStarted": "_events",
    "TaskCompleted": "_events",
    "TaskEgress": "_events",
    "TaskEmitted": "_events",
    "TaskFlagged": "_events",
    "TaskGraded": "_events",
    "TaskInterrupted": "_events",
    "TaskIsolation": "_events",
    "TaskLines": "_events",
    "TaskOutputTruncated": "_events",
    "TaskStalled": "_events",
    "TaskOutput": "_events",
    "TaskSkipped": "_events",
    "TaskStarted": "_events",
    "TaskUsage": "_events",
    "TokenCounts": "_tokens",
    "new_event_id": "_events",
    "new_event_ids": "_events",
    "utc_now": "_events",
    "as_lines": "_lines",
    "chunked": "_lines",
    "SCHEMA_VERSION": "_version",
    "DEFAULT_BUSY_TIMEOUT": "_store",
    "Ledger": "_store",
    "pick_run": "_store",
    "VerifyReport": "_verify",
    "verify": "_verify",
    "verify_events": "_verify",
    "has_task": "_queries",
    "has_type": "_queries",
    "ndjson": "_transfer",
    "MIGRATIONS": "_schema",
    "Database": "_sqlite_utils",
    "MAX_LINE_BYTES": "_transfer",
    "attempt_starts": "_page_queries",
    "completion_environments": "_page_queries",
    "result_lines": "_page_queries",
    "run_imported": "_page_queries",
    "task_lifecycle": "_page_queries",
    "transcript_row_before": "_page_queries",
    "transcript_rows": "_page_queries",
    "transcript_tail": "_page_queries",
    "usage_lines": "_page_queries",
    "imported_runs": "_queries",
    "run_seq_span": "_queries",
    "task_activity": "_queries",
    "touched_since": "_queries",
    "SEALED_TYPES": "_signing",
    "Seals": "_signing",
}


__getattr__ = _attributes(__name__, _WHERE)


__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "GENESIS",
    "MAX_LINE_BYTES",
    "MIGRATIONS",
    "NO_TOKENS",
    "SCHEMA_VERSION",
    "SEALED_TYPES",
    "Anchor",
    "AnyEvent",
    "AppendOnlyViolation",
    "BadAnchor",
    "CriterionResult",
    "Database",
    "Event",
    "EventRow",
    "EventType",
    "Evidence",
    "Fingerprint",
    "InvalidEvent",
    "Ledger",
    "LedgerError",
    "LedgerGone",
    "LedgerIOError",
    "LedgerLocked",
    "LedgerNotFound",
    "LedgerReadOnly",
    "LedgerTooNew",
    "NotALedger",
    "NotUtf8",
    "OpaqueEvent",
    "QueryInterrupted",
    "RefusedGrade",
    "RunConflict",
    "RunFinished",
    "RunGraded",
    "RunMerged",
    "RunNotFound",
    "RunResumed",
    "RunSigned",
    "RunSnapshot",
    "RunStarted",
    "SealReport",
    "Seals",
    "Signer",
    "TaskCompleted",
    "TaskEgress",
    "TaskEmitted",
    "TaskFlagged",
    "TaskGraded",
    "TaskInterrupted",
    "TaskIsolation",
    "TaskLines",
    "TaskOutput",
    "TaskOutputTruncated",
    "TaskSkipped",
    "TaskStalled",
    "TaskStarted",
    "TaskUsage",
    "TokenCounts",
    "VerifyReport",
    "as_lines",
    "attempt_starts",
    "chunked",
    "completion_environments",
    "has_task",
    "has_type",
    "imported_runs",
    "link_hash",
    "ndjson",
    "new_event_id",
    "new_event_ids",
    "pick_run",
    "result_lines",
    "run_imported",
    "run_seq_span",
    "task_activity",
    "task_lifecycle",
    "touched_since",
    "transcript_row_before",
    "transcript_rows",
    "transcript_tail",
    "usage_lines",
    "utc_now",
    "verify",
    "verify_events",
]
