"""Workflow runs and jobs as the fake keeps them, and the JSON GitHub shows for them.

One queued job makes one workflow run holding that single job, which is all a runner
pool can observe: a ``workflow_job`` with ``runs-on`` labels waits for a runner, runs on
one, and completes.  The shapes (``Job``, ``Workflow Run`` with its ``Minimal
Repository`` and ``Simple User``) follow GitHub's description in
``tests/data/github/openapi-runners.json``; fields with nothing to say carry the
description's example values.  The lifecycle lives in `state.GitHubState`, under its lock.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from testworld.fakegithub.scopes import Scope

JobStatus = Literal["queued", "in_progress", "completed"]
Conclusion = Literal["success", "failure", "cancelled"]

WORKFLOW_ID = 159038
WORKFLOW_PATH = ".github/workflows/ci.yml"

# ``Minimal Repository`` URL fields, relative to the repository's API URL.
_REPO_LINKS = {
    "archive_url": "/{archive_format}{/ref}",
    "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}",
    "commits_url": "/commits{/sha}",
    "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}",
    "contributors_url": "/contributors",
    "deployments_url": "/deployments",
    "downloads_url": "/downloads",
    "events_url": "/events",
    "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}",
    "git_tags_url": "/git/tags{/sha}",
    "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}",
    "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}",
    "keys_url": "/keys{/key_id}",
    "labels_url": "/labels{/name}",
    "languages_url": "/languages",
    "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers",
    "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers",
    "subscription_url": "/subscription",
    "tags_url": "/tags",
    "teams_url": "/teams",
    "trees_url": "/git/trees{/sha}",
}
_USER_LINKS = {
    "events_url": "/events{/privacy}",
    "followers_url": "/followers",
    "following_url": "/following{/other_user}",
    "gists_url": "/gists{/gist_id}",
    "organizations_url": "/orgs",
    "received_events_url": "/received_events",
    "repos_url": "/repos",
    "starred_url": "/starred{/owner}{/repo}",
    "subscriptions_url": "/subscriptions",
}


@dataclass(frozen=True)
class Bases:
    """Where links point: the API base (``http://127.0.0.1:P/api/v3``) and the web base."""

    api: str
    web: str


@dataclass
class Job:
    """One ``workflow_job`` and the single-job run it belongs to.

    ``assigned_to`` is the runner GitHub has offered the job to; the job shows that
    runner (and goes ``in_progress``) only once the runner has started it.
    ``renewed_at`` is when its runner last renewed the job's lock (its start counts as
    one); ``annotations`` are what GitHub shows on the job's page (a lost runner's).
    """

    id: int
    run_id: int
    run_number: int
    repo: Scope
    labels: list[str]
    duration_s: float
    name: str
    workflow_name: str
    created_at: float
    status: JobStatus = "queued"
    conclusion: Conclusion | None = None
    started_at: float | None = None
    completed_at: float | None = None
    assigned_to: int | None = None
    runner_id: int | None = None
    runner_name: str | None = None
    runner_group_id: int | None = None
    renewed_at: float | None = None
    annotations: list[str] = field(default_factory=list)
    #: The job's steps for a runner process: one line of shell the stand-in run.sh runs as the
    #: job (as the runner user, in the runner container) instead of sleeping ``duration_s``.
    script: str | None = None
    #: What the job's steps wrote to ``$GITHUB_STEP_SUMMARY`` (GitHub shows it on the run's page).
    summary: str = ""

    @property
    def updated_at(self) -> float:
        return self.completed_at or self.started_at or self.created_at

    @property
    def head_sha(self) -> str:
        return hashlib.sha1(f"{self.repo.key}:{self.run_id}".encode()).hexdigest()

    def wants(self, runner_labels: list[str]) -> bool:
        """GitHub's match: every ``runs-on`` label is one of the runner's, ignoring case."""
        have = {label.lower() for label in runner_labels}
        return all(label.lower() in have for label in self.labels)


def timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_id(kind: str, number: int) -> str:
    return base64.b64encode(f"0{len(kind)}:{kind}{number}".encode()).decode()


def _number(name: str) -> int:
    """A stable id for a repository or owner, so repeated listings agree."""
    return int(hashlib.sha1(name.lower().encode()).hexdigest()[:7], 16)


def user_json(bases: Bases, login: str) -> dict[str, Any]:
    number = _number(login)
    url = f"{bases.api}/users/{login}"
    return {
        "avatar_url": f"{bases.web}/images/error/{login}.gif",
        "gravatar_id": "",
        "html_url": f"{bases.web}/{login}",
        "id": number,
        "login": login,
        "node_id": _node_id("User", number),
        "site_admin": False,
        "type": "Organization",
        "url": url,
        **{key: url + suffix for key, suffix in _USER_LINKS.items()},
    }


def repository_json(bases: Bases, repo: Scope) -> dict[str, Any]:
    """The ``Minimal Repository`` a workflow run embeds."""
    owner, name = repo.name.split("/")
    number = _number(repo.name)
    url = f"{bases.api}/repos/{repo.name}"
    return {
        "id": number,
        "node_id": _node_id("Repository", number),
        "name": name,
        "full_name": repo.name,
        "owner": user_json(bases, owner),
        "private": True,
        "html_url": f"{bases.web}/{repo.name}",
        "description": None,
        "fork": False,
        "url": url,
        **{key: url + suffix for key, suffix in _REPO_LINKS.items()},
    }


def job_json(bases: Bases, job: Job) -> dict[str, Any]:
    """The ``Job`` shape of ``GET /repos/{owner}/{repo}/actions/jobs/{job_id}``."""
    repo_url = f"{bases.api}/repos/{job.repo.name}"
    return {
        "id": job.id,
        "run_id": job.run_id,
        "run_url": f"{repo_url}/actions/runs/{job.run_id}",
        "run_attempt": 1,
        "node_id": _node_id("WorkflowJob", job.id),
        "head_sha": job.head_sha,
        "head_branch": "main",
        "url": f"{repo_url}/actions/jobs/{job.id}",
        "html_url": f"{bases.web}/{job.repo.name}/actions/runs/{job.run_id}/job/{job.id}",
        "status": job.status,
        "conclusion": job.conclusion,
        "created_at": timestamp(job.created_at),
        # GitHub reports a queued job's started_at as its creation time.
        "started_at": timestamp(job.started_at or job.created_at),
        "completed_at": None if job.completed_at is None else timestamp(job.completed_at),
        "name": job.name,
        "steps": [],
        "check_run_url": f"{repo_url}/check-runs/{job.id}",
        "labels": list(job.labels),
        "runner_id": job.runner_id,
        "runner_name": job.runner_name,
        "runner_group_id": job.runner_group_id,
        "runner_group_name": None if job.runner_group_id is None else "Default",
        "workflow_name": job.workflow_name,
    }


def run_json(bases: Bases, job: Job) -> dict[str, Any]:
    """The ``Workflow Run`` shape of ``GET /repos/{owner}/{repo}/actions/runs``."""
    repo_url = f"{bases.api}/repos/{job.repo.name}"
    run_url = f"{repo_url}/actions/runs/{job.run_id}"
    repository = repository_json(bases, job.repo)
    return {
        "id": job.run_id,
        "name": job.workflow_name,
        "node_id": _node_id("WorkflowRun", job.run_id),
        "check_suite_id": job.run_id,
        "check_suite_node_id": _node_id("CheckSuite", job.run_id),
        "head_branch": "main",
        "head_sha": job.head_sha,
        "path": f"{WORKFLOW_PATH}@main",
        "run_number": job.run_number,
        "run_attempt": 1,
        "display_title": job.name,
        "event": "push",
        "status": job.status,
        "conclusion": job.conclusion,
        "workflow_id": WORKFLOW_ID,
        "url": run_url,
        "html_url": f"{bases.web}/{job.repo.name}/actions/runs/{job.run_id}",
        "pull_requests": [],
        "created_at": timestamp(job.created_at),
        "updated_at": timestamp(job.updated_at),
        "run_started_at": timestamp(job.created_at),
        "jobs_url": f"{run_url}/jobs",
        "logs_url": f"{run_url}/logs",
        "check_suite_url": f"{repo_url}/check-suites/{job.run_id}",
        "artifacts_url": f"{run_url}/artifacts",
        "cancel_url": f"{run_url}/cancel",
        "rerun_url": f"{run_url}/rerun",
        "workflow_url": f"{repo_url}/actions/workflows/{WORKFLOW_ID}",
        "head_commit": {
            "id": job.head_sha,
            "tree_id": hashlib.sha1(job.head_sha.encode()).hexdigest(),
            "message": job.name,
            "timestamp": timestamp(job.created_at),
            "author": {"name": "Octo Cat", "email": "octocat@github.com"},
            "committer": {"name": "GitHub", "email": "noreply@github.com"},
        },
        "repository": repository,
        "head_repository": repository,
    }
