"""Which pools a job counts for.

A job counts for a pool when the pool's scope holds the job's repository (the repository
itself, or its owner organization, on the same GitHub host) and the pool's runners carry
every label of the job's ``runs-on``. GitHub compares labels case-insensitively, so this
does too.

A pool's runners carry: ``self-hosted``; the OS and architecture labels the runner adds
itself (``Linux``, plus ``X64``/``ARM64``/``ARM`` from the pool's
``kubernetes.io/arch`` node selector, ``X64`` without one); the pool's own
``<namespace>/<pool>``; and ``spec.labels``.
"""

from __future__ import annotations

from runnerpool import api
from runnerpool.domain import api_url_key
from runnerpool.github.jobs import Job
from runnerpool.pods import template

__all__ = ["job_matches", "job_scope_keys", "pool_scope_key", "registered_labels", "scope_holds"]

_ARCH_LABELS = {"amd64": "X64", "arm64": "ARM64", "arm": "ARM"}
ARCH_SELECTOR = "kubernetes.io/arch"


def registered_labels(pool: api.RunnerPool) -> frozenset[str]:
    """The labels GitHub lists for the pool's runners, lower-cased: the runner's own
    (``self-hosted``, OS, architecture) and those the operator registers it with
    (``pods.template.runner_labels``)."""
    arch = _ARCH_LABELS.get(pool.spec.node_selector.get(ARCH_SELECTOR, "amd64"), "X64")
    return frozenset(label.lower() for label in ("self-hosted", "linux", arch, *template.runner_labels(pool)))


def _same_api(pool: api.RunnerPool, job: Job, default_api_url: str) -> bool:
    return api_url_key(pool.spec.github_api_url or default_api_url) == api_url_key(job.api_url)


def pool_scope_key(pool: api.RunnerPool, default_api_url: str) -> str | None:
    """What the pool's scope is found under: its GitHub host and repository or organization.

    A job's candidates are the pools under one of :func:`job_scope_keys` (an index lookup,
    not a scan of every pool); :func:`job_matches` still has the last word.
    """
    host = api_url_key(pool.spec.github_api_url or default_api_url)
    if pool.spec.repository is not None:
        return f"{host} repo:{pool.spec.repository.lower()}"
    if pool.spec.organization is not None:
        return f"{host} org:{pool.spec.organization.lower()}"
    return None


def job_scope_keys(job: Job) -> list[str]:
    """The scope keys of the pools whose scope holds the job's repository (``scope_holds``)."""
    host = api_url_key(job.api_url)
    owner = job.repository.partition("/")[0]
    return [f"{host} repo:{job.repository.lower()}", f"{host} org:{owner.lower()}"]


def scope_holds(pool: api.RunnerPool, repository: str) -> bool:
    """Owner and repository names are case-insensitive on GitHub."""
    if pool.spec.repository is not None:
        return pool.spec.repository.lower() == repository.lower()
    owner = repository.partition("/")[0]
    return pool.spec.organization is not None and pool.spec.organization.lower() == owner.lower()


def job_matches(pool: api.RunnerPool, job: Job, default_api_url: str) -> bool:
    """A job without labels (a runner group only) matches no pool: nothing says it wants ours."""
    if not job.labels or not scope_holds(pool, job.repository) or not _same_api(pool, job, default_api_url):
        return False
    return {label.lower() for label in job.labels} <= registered_labels(pool)
