"""Runner pods the operator creates itself: one pod is one ephemeral runner, owned by its pool.

A Deployment cannot know which of its pods holds a job, so any scale-down or rollout of one
may kill a busy runner.  The operator can: it creates pods here (``template``, ``scaling``,
``expectations``, ``adoption``: pure rules; ``step``: the reconciler's writes) and retires
them only through the runner managers' busy-safe path (``runnerpool.runners.retirement``).
"""
