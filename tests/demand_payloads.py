"""GitHub ``workflow_job`` objects for the demand tests, in GitHub's real shapes.

The job object is the REST description's example (tests/data/github/run-jobs.json, the same
object a ``workflow_job`` delivery carries under ``workflow_job``); the delivery wraps it as
GitHub's webhook documentation describes: ``action`` (= the job's status), ``workflow_job``,
``repository`` (with ``full_name`` and its API ``url``), ``organization`` for an organization's
repository, ``sender``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "github"
API = "https://api.github.com"


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / name).read_text())["body"])


def job_object(
    job_id: int,
    status: str,
    labels: list[str],
    *,
    repository: str = "octo-org/hello-world",
    runner: str | None = None,
    created: str = "2030-01-20T17:42:00Z",
    started: str | None = None,
    completed: str | None = None,
    run_id: int = 29679449,
    api: str = API,
) -> dict[str, Any]:
    job: dict[str, Any] = copy.deepcopy(fixture("run-jobs.json")["jobs"][0])
    job.update(
        id=job_id,
        run_id=run_id,
        run_url=f"{api}/repos/{repository}/actions/runs/{run_id}",
        url=f"{api}/repos/{repository}/actions/jobs/{job_id}",
        status=status,
        labels=labels,
        created_at=created,
        started_at=started or created,
        completed_at=completed,
        conclusion="success" if status == "completed" else None,
        runner_name=runner,
        runner_id=7 if runner else None,
        steps=[] if status == "queued" else job["steps"],
    )
    return job


def delivery(
    job: dict[str, Any], *, repository: str = "octo-org/hello-world", api: str = API
) -> dict[str, Any]:
    owner, _, name = repository.partition("/")
    return {
        "action": job["status"],
        "workflow_job": job,
        "repository": {
            "id": 1296269,
            "name": name,
            "full_name": repository,
            "private": False,
            "owner": {"login": owner, "id": 1, "type": "Organization"},
            "url": f"{api}/repos/{repository}",
            "html_url": f"https://github.com/{repository}",
        },
        "organization": {"login": owner, "id": 1, "url": f"{api}/orgs/{owner}"},
        "sender": {"login": "octocat", "id": 583231, "type": "User"},
    }
