"""A workflow job in the shape GitHub gives it, reduced to what demand (``runnerpool.demand``) needs.

The ``workflow_job`` webhook payload and ``GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs``
describe a job with the same object, so one parser serves the receiver and the poller.
Only three states matter here: ``queued`` (a runner is wanted), ``in_progress`` (a runner
has it) and ``completed``. GitHub's other states (``waiting`` for an environment approval,
``requested``, ``pending`` on a concurrency group) want no runner yet and are not tracked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerpool.domain import JobState, parse_rfc3339

__all__ = ["STATE_RANK", "ActiveJobs", "InvalidJob", "Job", "JobState", "parse_delivery", "parse_job"]


#: States only move forward; a late or repeated delivery of an earlier state changes nothing.
STATE_RANK: dict[str, int] = {"queued": 0, "in_progress": 1, "completed": 2}


class InvalidJob(ValueError):  # noqa: N818 - reads as "this is an invalid job"
    """The object is not a workflow job as GitHub documents it."""


@dataclass(frozen=True)
class Job:
    id: int
    state: JobState | None  # None: a state that wants no runner yet (waiting, pending, ...)
    labels: tuple[str, ...]
    repository: str  # owner/name
    api_url: str  # the REST base the job's repository lives on (github.com or a GHES host)
    runner_name: str | None = None
    workflow: str | None = None  # the workflow's name (``workflow_name``): a metric label
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    #: A queued delivery too old to count (``demand.replays.stale_for``): it only has a poll of
    #: its repository confirm the job (``demand.rules``).
    unconfirmed: bool = False


@dataclass(frozen=True)
class ActiveJobs:
    """A repository's queued and running jobs, as one poll saw them."""

    jobs: tuple[Job, ...]
    #: Requests that counted against the budget (not the free 304s).
    spent: int


#: The ``action`` of a delivery for a job a protection rule holds (an environment's reviewers).
_WAITING = "waiting"


def parse_job(item: Any, repository: str, api_url: str) -> Job:
    """Parse one job object; ``repository`` and ``api_url`` come from the payload or the poller."""
    if not isinstance(item, dict):
        raise InvalidJob("workflow_job is not an object")
    job_id = item.get("id")
    if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
        raise InvalidJob("workflow_job.id is missing or not a positive integer")
    status = item.get("status")
    if not isinstance(status, str):
        raise InvalidJob(f"workflow_job {job_id}: status is missing")
    labels = item.get("labels")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise InvalidJob(f"workflow_job {job_id}: labels is not a list of strings")
    runner = item.get("runner_name")
    workflow = item.get("workflow_name")
    state: JobState | None = status if status in STATE_RANK else None  # type: ignore[assignment]
    return Job(
        id=job_id,
        state=state,
        labels=tuple(labels),
        repository=repository,
        api_url=api_url.rstrip("/"),
        runner_name=runner if isinstance(runner, str) and runner else None,
        workflow=workflow if isinstance(workflow, str) and workflow else None,
        created_at=parse_rfc3339(item.get("created_at")),
        started_at=parse_rfc3339(item.get("started_at")),
        completed_at=parse_rfc3339(item.get("completed_at")),
    )


def parse_delivery(payload: Any) -> Job:
    """The job of a ``workflow_job`` delivery; the repository comes from ``repository``, its
    state from ``action``, as GitHub documents it ("the job state is included in the webhook
    payload as the action property"): a job with an environment is delivered ``queued`` while
    its object still says ``status: waiting``. ``action: waiting`` (a protection rule holds
    the job) wants no runner yet; a delivery without a known action falls back to ``status``."""
    if not isinstance(payload, dict):
        raise InvalidJob("the delivery is not a JSON object")
    repo = payload.get("repository")
    if not isinstance(repo, dict):
        raise InvalidJob("the delivery has no repository")
    full_name, url = repo.get("full_name"), repo.get("url")
    if not isinstance(full_name, str) or "/" not in full_name or not isinstance(url, str):
        raise InvalidJob("repository.full_name or repository.url is missing")
    # repository.url is "<api base>/repos/<owner>/<name>": the base says which GitHub it is.
    base, sep, _ = url.rpartition("/repos/")
    if not sep:
        raise InvalidJob("repository.url does not look like <api>/repos/<owner>/<name>")
    job = parse_job(payload.get("workflow_job"), full_name, base)
    action = payload.get("action")
    if action == _WAITING:
        return dataclasses.replace(job, state=None)
    return dataclasses.replace(job, state=action) if action in STATE_RANK else job
