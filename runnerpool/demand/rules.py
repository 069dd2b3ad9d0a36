"""What a job's news does to a pool's ``status.demand``: pure functions, no I/O.

Rules:

* states only move forward (queued -> in_progress -> completed); a late delivery of an
  earlier state, or a repeat, changes nothing;
* a job in progress on a runner of another pool (or a runner the operator does not own) is
  done as far as this pool is concerned: it wants no runner here any more. So is one in
  progress on a runner GitHub does not name, unless the pool tracks it already (then it
  leaves the queue and counts busy: whose runner took it is unknown). A pool's runners
  register under their pod's name, so ``runners`` (the names of the pool's pods, from the
  informer cache) says which are ours; a name prefix cannot, since pool ``a``'s pods
  ``a-x1y2z`` look like pool ``a-x1y2z``'s;
* completed jobs are remembered for ``COMPLETED_TTL`` so that a late ``queued`` cannot
  resurrect them, then forgotten; past ``api.MAX_TRACKED_JOBS`` the oldest completed go
  first, then the newest queued (``_pruned``);
* polling (``repair``) sees every active job of a repository: a tracked job it no longer
  sees ended while its delivery was lost. If an earlier poll listed it, it has ended now
  (GitHub lists a job until it completes); a job known only from a delivery may just not
  be listed yet, so it ends only once it has not changed for ``grace``;
* a ``queued`` delivery too old to count (``replays.stale_for``: a redelivery, a job held for
  an environment's approval) is kept *unconfirmed* on a pool that does not poll its repository
  anyway (``matching.listed_repositories``): not counted, it has the next poll list the
  repository, which confirms the job (listed: counted from then on) or ends it (not listed).
  An organization pool that lists no repositories lost such a job for good. While polls of
  the repository are refused it stays, not counted, until GitHub's own limit (``MAX_AGE``). A
  replay costs a few status writes (recorded, ended, forgotten) and a poll per
  ``COMPLETED_TTL`` at most, and no runner; a flood of them is pruned before any real job;
* a repository that answers the poll 404 (``hidden``) was deleted, or the credential cannot
  see it: a private repository a GitHub App is not installed on, a PAT without the repo scope,
  whose deliveries still come. Only a job an earlier poll listed ends (the repository was
  visible then, so it went since); one known from deliveries alone is kept, as when a poll is
  refused (403), since ending it would leave a queued job unserved;
* a tracked job a poll does not show also ends once it cannot be active any more
  (``_outlived``): in progress on one of the pool's runners whose pod is gone, once it has not
  changed for ``grace`` (an ephemeral runner runs one job; GitHub sometimes shows a finished
  one's job in progress for long, or never sends ``completed``, actions/runner#4309), or past
  GitHub's own limits (``MAX_AGE``). With the poll refused (403) or the repository hidden (404),
  such a job was counted for ever, and the pool kept a runner too many. Only a poll applies
  this: its writer knows the pool's pods, where the receiver tells runners by name alone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable
from datetime import datetime, timedelta

from runnerpool import api
from runnerpool.demand.replays import ended_long_ago
from runnerpool.github.jobs import STATE_RANK, Job, JobState

__all__ = ["COMPLETED_TTL", "Transition", "apply", "delivered", "repair"]

COMPLETED_TTL = timedelta(minutes=10)
ACTIVE = ("queued", "in_progress")
#: How long a job may stay in a state on GitHub: a job for self-hosted runners is cancelled
#: after 24 hours in the queue, and runs 5 days at most. Counted from when the operator learnt
#: of the state, which is never before GitHub's clock started.
MAX_AGE: dict[JobState, timedelta] = {"queued": timedelta(hours=24), "in_progress": timedelta(days=5)}


class Transition:
    """A job that moved forward in one pool: what the metrics observe."""

    __slots__ = ("job", "state")

    def __init__(self, job: Job, state: JobState) -> None:
        self.job, self.state = job, state


def _state_for(job: Job, runners: Container[str], tracked: bool) -> JobState | None:
    """The state ``job`` has for the pool whose runners are ``runners`` (``tracked``: the pool
    tracks it already).

    GitHub sometimes sends ``in_progress`` without ``runner_name`` (garm#19). Counted busy on
    every pool it matches, such a job kept each of them, in every namespace, a runner too many
    for its whole length. A pool that tracks it (counted it queued) still sees it leave the
    queue; for any other it is done, as a job on another pool's runner is, so a late
    ``queued`` cannot bring it back.
    """
    if job.state != "in_progress":
        return job.state
    if not job.runner_name:
        return "in_progress" if tracked else "completed"
    return "in_progress" if job.runner_name in runners else "completed"


def _counted(demand: api.Demand) -> api.Demand:
    states = [job.state for job in demand.jobs.values() if not _unconfirmed(job)]
    return api.Demand(
        queued=states.count("queued"),
        busy=states.count("in_progress"),
        jobs=demand.jobs,
        first_delivery_at=demand.first_delivery_at,
    )


def _unconfirmed(job: api.TrackedJob) -> bool:
    """Queued as far as a late delivery says, and no poll has listed it (``apply``). Only a
    queued one: an older operator, which knows no such flag, may have moved it on since."""
    return bool(job.unconfirmed) and job.state == "queued"


def _pruned(jobs: dict[str, api.TrackedJob], now: datetime) -> dict[str, api.TrackedJob]:
    """At most ``api.MAX_TRACKED_JOBS`` (the CRD's bound: over it the status is invalid, and
    every write of the pool's demand, deliveries and polls alike, was refused): completed jobs
    past their ``COMPLETED_TTL`` go, then the unconfirmed (a flood of replays must not push a
    real job out), then the oldest completed, then the newest queued. A pool
    runs at most ``api.MAX_REPLICAS`` runners, half the bound, so its count is at its maximum
    either way; a queued job left out comes back with its next delivery or poll once there is
    room. The jobs in progress, what keeps busy runners counted, go last (oldest first)."""
    kept = {
        key: job
        for key, job in jobs.items()
        if job.state != "completed" or now - job.updated_at < COMPLETED_TTL
    }
    kinds: tuple[tuple[Callable[[api.TrackedJob], bool], bool], ...] = (
        (_unconfirmed, True),
        (lambda job: job.state == "completed", False),
        (lambda job: job.state == "queued", True),
        (lambda job: job.state == "in_progress", False),
    )
    for kind, newest_first in kinds:
        over = len(kept) - api.MAX_TRACKED_JOBS
        if over <= 0:
            break
        ranked = sorted(
            ((job.updated_at, key) for key, job in kept.items() if kind(job)), reverse=newest_first
        )
        for _, key in ranked[:over]:
            del kept[key]
    return kept


def apply(
    demand: api.Demand | None, jobs: Iterable[Job], now: datetime, *, runners: Container[str]
) -> tuple[api.Demand, list[Transition]]:
    """``demand`` after ``jobs`` (all known to match the pool whose runner names are
    ``runners``), and the transitions made."""
    tracked = dict((demand or api.Demand()).jobs)
    moved: list[Transition] = []
    for job in jobs:
        key = str(job.id)
        old = tracked.get(key)
        state = _state_for(job, runners, old is not None and not _unconfirmed(old))
        if state is None or (state == "completed" and old is None and ended_long_ago(job, now)):
            continue
        if old is not None and (job.unconfirmed or not _confirms(old, state)):
            continue
        runner = job.runner_name if state == "in_progress" else (old.runner if old else None)
        tracked[key] = api.TrackedJob(
            state=state,
            repository=job.repository,
            runner=runner,
            updated_at=now,
            unconfirmed=True if job.unconfirmed else None,
        )
        if not job.unconfirmed:
            moved.append(Transition(job, state))
    first = demand.first_delivery_at if demand else None
    return _counted(api.Demand(jobs=_pruned(tracked, now), first_delivery_at=first)), moved


def _confirms(old: api.TrackedJob, state: JobState) -> bool:
    """Whether news of ``state`` (a poll's, or a delivery young enough to count) changes the
    tracked ``old``: a later state, or the same one of a job known only unconfirmed."""
    rank, before = STATE_RANK[state], STATE_RANK[old.state]
    return rank > before or (rank == before and _unconfirmed(old))


def _outlived(job: api.TrackedJob, now: datetime, grace: timedelta, runners: Container[str]) -> bool:
    """Whether an active tracked ``job`` has ended whatever its news said (the module's rules).

    A job with no runner named (``_state_for``) keeps to the age limit: whose runner took it is
    unknown. One whose runner is not the pool's was never tracked in progress here. Where
    ``runners`` tells by name alone (``runner_names.RunnerNames``), a pod's going shows nothing,
    and the job keeps to the age limit too.
    """
    age = now - job.updated_at
    if age >= MAX_AGE[job.state]:
        return True
    return (
        job.state == "in_progress" and job.runner is not None and job.runner not in runners and age >= grace
    )


def repair(
    demand: api.Demand | None,
    seen: Iterable[Job],
    polled: Iterable[str],
    *,
    now: datetime,
    grace: timedelta,
    runners: Container[str],
    listed_before: Collection[str] = (),
    hidden: Iterable[str] = (),
) -> tuple[api.Demand, list[Transition]]:
    """Apply what a poll of the repositories ``polled`` saw, and end what it no longer sees.

    ``listed_before``: ids (as strings) of jobs an earlier poll listed as active; ``hidden``:
    repositories that answered 404, of which only those jobs end (the module's rules).
    """
    seen = list(seen)
    updated, moved = apply(demand, seen, now, runners=runners)
    visible = {str(job.id) for job in seen}
    repos = {repo.lower() for repo in polled}
    gone = {repo.lower() for repo in hidden}
    jobs = dict(updated.jobs)
    for key, job in jobs.items():
        if job.state not in ACTIVE or key in visible:
            continue
        repo, listed = job.repository.lower(), key in listed_before
        # A job known only unconfirmed (``apply``) is as good as listed: its delivery was
        # minutes old, and the poll that does not show it is GitHub's word that it is not queued.
        listed = listed or _unconfirmed(job)
        unlisted = (repo in repos and (listed or now - job.updated_at >= grace)) or (repo in gone and listed)
        if unlisted or _outlived(job, now, grace, runners):
            jobs[key] = job.model_copy(update={"state": "completed", "updated_at": now, "unconfirmed": None})
    return _counted(api.Demand(jobs=jobs, first_delivery_at=updated.first_delivery_at)), moved


def poll_refused(demand: api.Demand, problem: api.Problem | None) -> api.Demand:
    """``demand`` with the poll's refusal (``None``: the poll went through) recorded."""
    if demand.poll_problem == problem:
        return demand
    return demand.model_copy(update={"poll_problem": problem})


def same(a: api.Demand | None, b: api.Demand) -> bool:
    """Equal as stored: a write that changes nothing is not sent."""
    return (a or api.Demand()) == b


def delivered(demand: api.Demand | None, now: datetime) -> api.Demand:
    """``demand`` marked with the first verified delivery for the pool's scope, if not yet."""
    demand = demand or api.Demand()
    if demand.first_delivery_at is not None:
        return demand
    return demand.model_copy(update={"first_delivery_at": now})
