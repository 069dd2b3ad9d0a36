"""A replayed delivery changes nothing: deliveries older than ``STALE_AFTER`` are dropped.

``X-GitHub-Delivery`` is not signed, so whoever captured one signed ``queued`` delivery (from
a proxy's log, or GitHub's "Recent Deliveries" page of a repository they administer) can send
it again under new delivery ids, and the signature still verifies. Within the same job the
states only move forward (``rules.apply``), and an ended job is remembered as completed for
``rules.COMPLETED_TTL`` (10 minutes); past that, a replayed ``queued`` would count the job
again and hold a runner until polling ends it, over and over.

So a delivery's age is read from the job itself: the latest of its ``created_at``,
``started_at`` and ``completed_at`` (GitHub's times, inside the signed body). A ``queued`` or
``in_progress`` delivery older than ``STALE_AFTER`` (5 minutes) changes nothing. Together with
the 10 minutes a completed job is remembered, that covers every replay:

* within 5 minutes of the job's latest time, a job that has ended is still remembered
  (it ended after that time, and is kept 10 minutes from then), so the replay is an earlier
  state and changes nothing (``rules.apply``);
* later, the delivery is stale.

The 5 minutes between the two leave room for the operator's clock to differ from GitHub's
(up to 2.5 minutes either way). ``completed`` deliveries are never stale: they only end a
job; but one older than ``STALE_AFTER`` for a job the pool does not track is not recorded
(``ended_long_ago``, in ``rules.apply``). A delivery without times (not GitHub's shape) is not
judged by age.

What a real delivery loses: one GitHub sends more than 5 minutes late (GitHub's incidents; a
redelivery from the UI of an old one) is not counted from the webhook, and polling counts
the job instead at its next poll (``--demand-poll-interval``, 30 s by default). A job that
waited for an environment's approval may carry its creation time when it is queued: it is
counted by the poll too: where the pool does not poll the job's repository anyway (an
organization pool that does not list it), the late ``queued`` delivery is kept there
unconfirmed, not counted, so that the next poll lists that repository and confirms the job or
ends it (``rules``). A replay then costs a few status writes and a poll per
``rules.COMPLETED_TTL`` at most, and no runner.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runnerpool.github.jobs import Job

__all__ = ["STALE_AFTER", "ended_long_ago", "stale_for"]

STALE_AFTER = timedelta(minutes=5)


def ended_long_ago(job: Job, now: datetime) -> bool:
    """Whether a job that is over for a pool which does not track it needs no remembering: its
    latest time is more than ``STALE_AFTER`` old, so any replay of an earlier state of it is
    stale too. Recording it anyway was a write per replayed ``completed`` delivery, however
    old, and a flood of them pushed the real completed jobs out of the pool's record."""
    times = [at for at in (job.created_at, job.started_at, job.completed_at) if at is not None]
    return bool(times) and now - max(times) > STALE_AFTER


def stale_for(job: Job, now: datetime) -> str | None:
    """Why the delivery of ``job`` is too old to change anything; ``None`` when it is not."""
    if job.state not in ("queued", "in_progress"):
        return None
    times = [at for at in (job.created_at, job.started_at, job.completed_at) if at is not None]
    if not times:
        return None
    latest = max(times)
    if now - latest <= STALE_AFTER:
        return None
    minutes = int((now - latest).total_seconds() // 60)
    return f"its latest time is {minutes} minutes old, more than {int(STALE_AFTER.total_seconds() // 60)}"
