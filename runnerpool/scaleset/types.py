"""The scale set protocol's shapes (``types.go`` of actions/scaleset), only the fields used.

Pydantic models with the wire's camelCase names as aliases: one declaration parses an answer
(unknown fields ignored, as Go's decoder ignores them) and serialises a request body. Times the
operator does not decide on (``queueTime`` and the like) are not modelled.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_RUNNER_GROUP",
    "JitConfig",
    "JobMessage",
    "JobMessageType",
    "Label",
    "Message",
    "MessageSkip",
    "RunnerGroup",
    "RunnerReference",
    "RunnerScaleSet",
    "RunnerSetting",
    "Session",
    "Statistics",
]

#: The runner group every scope has, by the name the service knows it by.
DEFAULT_RUNNER_GROUP = "default"


class _Wire(BaseModel):
    """Field names in Python, aliases on the wire; both accepted when parsing.

    ``defer_build``: a model's validator is built when it first parses, not at import. An
    operator without scale-set pools never parses one, and building the eleven at start-up
    cost it about 40 ms of CPU (a twentieth of its start-up)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_defaults(cls, data: Any) -> Any:
        """A JSON ``null`` is the field's default, as Go's decoder leaves a null at the zero
        value: the service sends ``"runnerName": null`` on a job nobody runs yet, and refusing
        it would refuse the whole message (a required field stays required)."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class Label(_Wire):
    """A scale set label: its name is a ``System`` label; more labels are ``User`` labels."""

    name: str
    type: str = "System"


class RunnerSetting(_Wire):
    disable_update: bool = Field(default=False, alias="disableUpdate")
    #: Left out of a body while None (the service's default); the listener asks for True.
    ephemeral: bool | None = None


class Statistics(_Wire):
    """What the service says about the scale set's jobs and runners, on every answer."""

    total_available_jobs: int = Field(default=0, alias="totalAvailableJobs")
    total_acquired_jobs: int = Field(default=0, alias="totalAcquiredJobs")
    #: Waiting plus running jobs assigned to this scale set: what to scale on.
    total_assigned_jobs: int = Field(default=0, alias="totalAssignedJobs")
    total_running_jobs: int = Field(default=0, alias="totalRunningJobs")
    total_registered_runners: int = Field(default=0, alias="totalRegisteredRunners")
    total_busy_runners: int = Field(default=0, alias="totalBusyRunners")
    total_idle_runners: int = Field(default=0, alias="totalIdleRunners")


class RunnerGroup(_Wire):
    id: int
    name: str
    size: int = 0
    is_default: bool = Field(default=False, alias="isDefaultGroup")


class RunnerScaleSet(_Wire):
    """A scale set; ``id`` 0 in a body to create (the service picks it)."""

    id: int = 0
    name: str = ""
    runner_group_id: int = Field(default=0, alias="runnerGroupId")
    runner_group_name: str = Field(default="", alias="runnerGroupName")
    labels: tuple[Label, ...] = ()
    runner_setting: RunnerSetting = Field(default_factory=RunnerSetting, alias="RunnerSetting")
    runner_jit_config_url: str = Field(default="", alias="runnerJitConfigUrl")
    statistics: Statistics | None = None

    def body(self) -> dict[str, object]:
        """The request body: wire names, no zero id, labels typed (``System`` by default, as
        the Go client fills them in), and the name as the one label when none are given."""
        labels = self.labels or (Label(name=self.name),)
        data = self.model_copy(update={"labels": labels}).model_dump(
            by_alias=True, exclude_none=True, exclude={"statistics"}
        )
        if not self.id:
            del data["id"]
        return data


class RunnerReference(_Wire):
    id: int
    name: str
    runner_scale_set_id: int = Field(default=0, alias="runnerScaleSetId")


class JitConfig(_Wire):
    """A runner made by the scale set and the config ``run.sh --jitconfig`` takes; a secret
    until the runner has consumed it, so ``repr`` leaves it out."""

    runner: RunnerReference
    encoded_jit_config: str = Field(alias="encodedJITConfig", repr=False)


class Session(_Wire):
    """A message session: the queue to poll and the token to poll it with (secret)."""

    session_id: str = Field(alias="sessionId")
    owner_name: str = Field(default="", alias="ownerName")
    runner_scale_set: RunnerScaleSet | None = Field(default=None, alias="runnerScaleSet")
    message_queue_url: str = Field(alias="messageQueueUrl")
    message_queue_access_token: str = Field(alias="messageQueueAccessToken", repr=False)
    statistics: Statistics | None = None


class JobMessageType(enum.StrEnum):
    AVAILABLE = "JobAvailable"
    ASSIGNED = "JobAssigned"
    STARTED = "JobStarted"
    COMPLETED = "JobCompleted"


class JobMessage(_Wire):
    """One entry of a message's ``body``; which fields are set depends on ``message_type``
    (``acquire_job_url`` on ``JobAvailable``, runner and ``result`` on started/completed)."""

    message_type: str = Field(alias="messageType")
    runner_request_id: int = Field(default=0, alias="runnerRequestId")
    repository_name: str = Field(default="", alias="repositoryName")
    owner_name: str = Field(default="", alias="ownerName")
    job_id: str = Field(default="", alias="jobId")
    job_display_name: str = Field(default="", alias="jobDisplayName")
    workflow_run_id: int = Field(default=0, alias="workflowRunId")
    request_labels: tuple[str, ...] = Field(default=(), alias="requestLabels")
    acquire_job_url: str = Field(default="", alias="acquireJobUrl")
    runner_id: int = Field(default=0, alias="runnerId")
    runner_name: str = Field(default="", alias="runnerName")
    result: str = ""


class MessageSkip(enum.StrEnum):
    """Why a queue message with a readable id carries nothing to act on: it is acknowledged and
    passed over, since one left in the queue comes back on every poll and holds up all later
    ones (the scale set's demand would stop for good)."""

    UNKNOWN_TYPE = "a message type this client does not know"
    BROKEN_BODY = "a body that is not a JSON list of job messages"


class Message(_Wire):
    """One answer of the queue: its id (to acknowledge and to pass as ``lastMessageId``), the
    statistics, and the job messages of its body, in order (unknown types skipped).

    ``statistics`` None: the answer had none (the Go client accepts that too); the last ones
    seen still hold. ``skipped``: why the message carries nothing to act on (no jobs then)."""

    message_id: int
    statistics: Statistics | None = None
    jobs: tuple[JobMessage, ...] = ()
    skipped: MessageSkip | None = None

    def of(self, kind: JobMessageType) -> tuple[JobMessage, ...]:
        return tuple(job for job in self.jobs if job.message_type == kind)
