"""Pools that follow demand: queued and busy jobs in, a desired replica count out.

The pieces, each with one job:

* ``jobs``: the workflow job as GitHub describes it (webhook ``workflow_job`` payloads and
  the REST job listing share one shape).
* ``matching``: which pools a job counts for (scope and runner labels).
* ``signature``, ``deliveries``, ``secret``, ``receiver``: the webhook endpoint - verified,
  size-limited, each delivery counted once.
* ``rules`` (pure) and ``writer`` (writes): demand per pool in ``status.demand``, written
  by whichever operator replica learnt of a job, so a delivery to either replica counts.
* ``polling``: the repair for lost deliveries and the whole mechanism without a webhook.

The scaling decision itself is not here: the reconciler makes it from the pool's
``status.demand`` with the pure rules of ``runnerpool.autoscaling``.
"""
