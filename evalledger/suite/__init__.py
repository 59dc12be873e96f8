"""The suite: task files and experiment files, read, validated and resolved into the
tasks a batch runs (docs/tasks.md).

Depends on the domain modules only (statuses, values); the executor, the projections
and the application layer build on it, never the other way round.
"""

from ._reference import json_schema as json_schema
from ._reference import reference_markdown as reference_markdown
from ._tasks import DEFAULT_MAX_OUTPUT as DEFAULT_MAX_OUTPUT
from ._tasks import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ._tasks import MAX_REPEATS as MAX_REPEATS
from ._tasks import TASK_ID_PATTERN as TASK_ID_PATTERN
from ._tasks import AgentJudge as AgentJudge
from ._tasks import Budget as Budget
from ._tasks import Criterion as Criterion
from ._tasks import ExitCode as ExitCode
from ._tasks import ExperimentFile as ExperimentFile
from ._tasks import FileContains as FileContains
from ._tasks import FileExists as FileExists
from ._tasks import Limits as Limits
from ._tasks import LlmJudge as LlmJudge
from ._tasks import OutputContains as OutputContains
from ._tasks import Overrides as Overrides
from ._tasks import RayResources as RayResources
from ._tasks import ResolvedLimits as ResolvedLimits
from ._tasks import ResolvedTask as ResolvedTask
from ._tasks import RunCommand as RunCommand
from ._tasks import Skipped as Skipped
from ._tasks import StreamFormat as StreamFormat
from ._tasks import TaskFile as TaskFile
from ._tasks import TaskLoadError as TaskLoadError
from ._tasks import TaskSet as TaskSet
from ._tasks import Variant as Variant
from ._tasks import content_hash as content_hash
from ._tasks import evaluated as evaluated
from ._tasks import load_tasks as load_tasks
from ._tasks import meets as meets
from ._tasks import task_files as task_files

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TIMEOUT",
    "MAX_REPEATS",
    "TASK_ID_PATTERN",
    "AgentJudge",
    "Budget",
    "Criterion",
    "ExitCode",
    "ExperimentFile",
    "FileContains",
    "FileExists",
    "Limits",
    "LlmJudge",
    "OutputContains",
    "Overrides",
    "RayResources",
    "ResolvedLimits",
    "ResolvedTask",
    "RunCommand",
    "Skipped",
    "StreamFormat",
    "TaskFile",
    "TaskLoadError",
    "TaskSet",
    "Variant",
    "content_hash",
    "evaluated",
    "json_schema",
    "load_tasks",
    "meets",
    "reference_markdown",
    "task_files",
]
