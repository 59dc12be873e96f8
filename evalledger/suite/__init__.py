"""The suite: task files and experiment files, read, validated and resolved into the
tasks a batch runs (docs/tasks.md).

Depends on the domain modules only (statuses, values); the executor, the projections
and the application layer build on it, never the other way round.
"""

from ._models import DEFAULT_MAX_OUTPUT as DEFAULT_MAX_OUTPUT
from ._models import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ._models import TASK_ID_PATTERN as TASK_ID_PATTERN
from ._models import AgentJudge as AgentJudge
from ._models import Budget as Budget
from ._models import Criterion as Criterion
from ._models import ExitCode as ExitCode
from ._models import ExperimentFile as ExperimentFile
from ._models import FileContains as FileContains
from ._models import FileExists as FileExists
from ._models import Limits as Limits
from ._models import LlmJudge as LlmJudge
from ._models import OutputContains as OutputContains
from ._models import Overrides as Overrides
from ._models import RayResources as RayResources
from ._models import ResolvedLimits as ResolvedLimits
from ._models import ResolvedTask as ResolvedTask
from ._models import RunCommand as RunCommand
from ._models import StreamFormat as StreamFormat
from ._models import TaskFile as TaskFile
from ._models import Variant as Variant
from ._models import content_hash as content_hash
from ._models import evaluated as evaluated
from ._models import meets as meets
from ._reference import json_schema as json_schema
from ._reference import reference_markdown as reference_markdown
from ._tasks import Skipped as Skipped
from ._tasks import TaskLoadError as TaskLoadError
from ._tasks import TaskSet as TaskSet
from ._tasks import load_tasks as load_tasks
from ._tasks import task_files as task_files

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TIMEOUT",
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
