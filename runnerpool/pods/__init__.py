"""Runner pods the operator creates itself: one pod is one ephemeral runner, owned by its pool.

A Deployment cannot know which of its pods holds a job, so any scale-down or rollout of one
may kill a busy runner.  The operator can: it creates pods here (``template``, ``scaling``,
``expectations``: pure rules; ``step``: the reconciler's creates) and retires
them only through the runner managers' busy-safe path (``runnerpool.runners.retirement``).
"""
