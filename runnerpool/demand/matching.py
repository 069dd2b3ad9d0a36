"""Which pools a job counts for.

A job counts for a pool when the pool's scope holds the job's repository (the repository
itself, or its owner organization, on the same GitHub host) and the pool's runners carry
every label of the job's ``runs-on``. GitHub compares labels case-insensitively, so this
does too.

A pool's runners carry: ``self-hosted``; the OS and architecture labels the runner adds
itself (``Linux``, plus ``X64``/``ARM64``/``ARM`` from the ``kubernetes.io/arch`` its runner
pods are placed by, through ``spec.nodeSelector`` or ``spec.template``: ``pods.labels``;
``X64`` without one); the pool's own ``<namespace>/<pool>``; and ``spec.labels``.

**One pool per namespace counts a queued job** (:func:`counting_pool`, applied per namespace by
:func:`recording_pools`), however many could take it: a ``runs-on: [self-hosted]`` job would
otherwise scale every pool of the organization up. Among a namespace's autoscaling pools the
job matches (and, for a webhook delivery, whose secret signed it; for a poll, whose own
credential listed it), the one that counts it is, in this order:

1. a pool that may have runners before one refused them (``status.refused``: its namespace is
   not enabled, its runner group or scope is not found, its credential is refused, ...): the
   refused pool makes no runner, so a job it counted would wait for ever while a sibling that
   could run it stays at 0; a refused pool still counts a job no other pool of its namespace
   matches (it runs once the pool is fixed);
2. a repository pool before an organization pool: GitHub routes a job to an idle
   repository-level runner first, then to the organization's ("routing precedence for
   self-hosted runners");
3. the most specific label set: the pool whose registered labels exceed the job's by the
   fewest, so a plain job does not wake the pool kept for ``gpu`` jobs;
4. ``name``, the stable tie-break: every replica and every poll choose alike.

**Never across namespaces**: a namespace is a tenant, and what one tenant's pools count must
not depend on which pools another tenant creates. A pool ``aaa-thief/app`` naming team-a's
repository and labels, with no credential at all, once counted team-a's job instead of
team-a's pool because its name sorted first. Now each namespace whose pools have their own
evidence of the job counts it once; two tenants that really both serve one repository with
the same labels each scale up for its job (one runner too many, which GitHub then leaves
idle until it goes), the price of neither being able to starve the other
(docs/security.md, "A tenant takes another's demand").

Once a job is in progress or has ended, the pools it concerns hear of it
(:func:`recording_pools`): the pool whose runner took it counts it busy, any other that
counted it while queued sees it end (``rules.apply``), and each namespace's counting pool
records it ended, so that a late ``queued`` delivery is not counted (a poll tells every
matching pool: what it no longer lists, a pool ends). The rule picks who scales up; it does
not pick the runner: GitHub gives the job to whichever matching runner is idle first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from runnerpool import api, status
from runnerpool.domain import api_url_key, resolve_api_url
from runnerpool.github.jobs import Job
from runnerpool.pods import labels
from runnerpool.pods.spec_memo import SpecMemo

__all__ = [
    "counting_pool",
    "job_matches",
    "job_scope_keys",
    "listed_repositories",
    "organization_scope_key",
    "pool_scope_keys",
    "recording_pools",
    "registered_labels",
    "repository_scope_keys",
    "scope_holds",
]


def registered_labels(pool: api.RunnerPool) -> frozenset[str]:
    """The labels GitHub lists for the pool's runners, lower-cased (``pods.labels.registered``:
    the runner's own, ``self-hosted``, OS and architecture, and the operator's).

    Remembered per spec (``SpecMemo``): every candidate pool of every webhook delivery is asked
    twice, and merging the template's node placement costs about 6 µs a time."""
    return _REGISTERED.get(pool, (), lambda: frozenset(label.lower() for label in labels.registered(pool)))


#: ``registered_labels``' memo.
_REGISTERED: SpecMemo[frozenset[str]] = SpecMemo()


def scope_keys(pool: api.RunnerPool, api_url: str) -> list[str]:
    """What the pool's scope is found under: its GitHub host (``api_url``, the pool's resolved
    one: ``GitHubSettings.api_url_of``) and repository or organization; for an enterprise
    pool, each repository it lists (see :func:`scope_holds`).

    A job's candidates are the pools under one of :func:`job_scope_keys` (an index lookup,
    not a scan of every pool); :func:`job_matches` still has the last word.
    """
    host = api_url_key(api_url)
    if pool.spec.repository is not None:
        return [f"{host} repo:{pool.spec.repository.lower()}"]
    if pool.spec.organization is not None:
        return [f"{host} org:{pool.spec.organization.lower()}"]
    listed = pool.spec.autoscaling.repositories if pool.spec.autoscaling else []
    return [f"{host} repo:{repo.lower()}" for repo in listed]


def repository_scope_keys(api_url: str, repository: str) -> list[str]:
    """The scope keys of the pools whose scope holds ``repository`` (``scope_holds``) on ``api_url``."""
    owner = repository.partition("/")[0]
    return [f"{api_url_key(api_url)} repo:{repository.lower()}", organization_scope_key(api_url, owner)]


def organization_scope_key(api_url: str, organization: str) -> str:
    return f"{api_url_key(api_url)} org:{organization.lower()}"


def job_scope_keys(job: Job) -> list[str]:
    """The scope keys of the pools whose scope holds the job's repository (``scope_holds``)."""
    return repository_scope_keys(job.api_url, job.repository)


def scope_holds(pool: api.RunnerPool, repository: str) -> bool:
    """Owner and repository names are case-insensitive on GitHub.

    An enterprise pool holds the repositories it lists (``owner/name``) and no other: which
    organizations belong to an enterprise is not in a job, nor in a webhook delivery the
    operator can verify per organization, and asking GitHub would cost a call per delivery.
    """
    if pool.spec.repository is not None:
        return pool.spec.repository.lower() == repository.lower()
    if pool.spec.enterprise is not None:
        listed = pool.spec.autoscaling.repositories if pool.spec.autoscaling else []
        return repository.lower() in {repo.lower() for repo in listed}
    owner = repository.partition("/")[0]
    return pool.spec.organization is not None and pool.spec.organization.lower() == owner.lower()


def pool_scope_keys(pool: api.RunnerPool, default_api_url: str) -> list[str]:
    """The old form of :func:`scope_keys`, until ``runnerpool.watches`` passes the resolved URL."""
    return scope_keys(pool, resolve_api_url(pool.spec.github_api_url, default_api_url))


def listed_repositories(pool: api.RunnerPool) -> list[str]:
    """``owner/name`` of the repositories a pool that follows demand polls whatever it tracks:
    its own, or those its ``spec.autoscaling.repositories`` lists (an organization pool names
    them within its organization)."""
    scaling = pool.spec.autoscaling
    if scaling is None:
        return []
    if pool.spec.repository is not None:
        return [pool.spec.repository]
    return [name if "/" in name else f"{pool.spec.organization}/{name}" for name in scaling.repositories]


def job_matches(pool: api.RunnerPool, job: Job, api_url: str) -> bool:
    """Whether ``job`` is one for ``pool`` (``api_url``: the pool's, resolved). A job without
    labels (a runner group only) matches no pool: nothing says it wants ours."""
    same_api = api_url_key(api_url) == api_url_key(job.api_url)
    if not job.labels or not same_api or not scope_holds(pool, job.repository):
        return False
    return {label.lower() for label in job.labels} <= registered_labels(pool)


def _preference(pool: api.RunnerPool, wanted: frozenset[str]) -> tuple[bool, int, int, str, str]:
    """Lower is preferred: pools that may have runners first, then repository pools, then the
    fewest labels beyond the job's."""
    return (
        status.refused(pool),
        0 if pool.spec.repository is not None else 1,
        len(registered_labels(pool) - wanted),
        pool.namespace,
        pool.name,
    )


def counting_pool(job: Job, pools: Iterable[api.RunnerPool]) -> api.RunnerPool | None:
    """The one pool, of ``pools`` (all matching ``job``, all of one namespace: see
    :func:`recording_pools`), that counts the job while it is queued."""
    wanted = frozenset(label.lower() for label in job.labels)
    return min(pools, key=lambda pool: _preference(pool, wanted), default=None)


def recording_pools(
    job: Job, pools: Iterable[api.RunnerPool], concerned: Callable[[api.RunnerPool], bool] | None = None
) -> list[api.RunnerPool]:
    """Of ``pools`` (all matching ``job``), those the job's news is recorded on: for a queued
    job, the counting pool of each namespace among them; none for a state that wants no runner
    yet. For one in progress or ended, all of them; or, given ``concerned`` (whether a pool
    tracks the job or its runner took it), only those and each namespace's counting pool.

    The counting pools hear it even untracked so that a late ``queued`` delivery (GitHub does
    not keep their order) finds the job ended there and is not counted: they are the pools it
    would count in. Every other pool would only add an entry, ended, that nothing reads: with
    N matching pools each job's start and end cost N status writes (``runnerpool.demand.writer``).
    """
    pools = list(pools)
    if job.state is None:
        return []  # a state that wants no runner yet (waiting, pending): nothing to record
    tenants: dict[str, list[api.RunnerPool]] = {}
    for pool in pools:
        tenants.setdefault(pool.namespace, []).append(pool)
    counting = [chosen for own in tenants.values() if (chosen := counting_pool(job, own)) is not None]
    if job.state == "queued":
        return counting
    if concerned is None:
        return pools
    kept = {id(pool) for pool in counting}
    return [pool for pool in pools if id(pool) in kept or concerned(pool)]
