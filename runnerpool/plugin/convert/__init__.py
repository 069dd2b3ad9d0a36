"""``kubectl runnerpool convert``: ARC and meows runner definitions turned into RunnerPools.

Written by hand, field by field, because each source says the same thing in its own words:
ARC's summerwind RunnerDeployment and HorizontalRunnerAutoscaler, ARC's gha-runner-scale-set
values (or the AutoscalingRunnerSet they render) and meows' RunnerPool name the scope, the
scaling and the pod differently, and some of their fields have no counterpart here (ARC's
in-container dockerd, meows' Slack notifications). A generic mapping would drop those silently;
this one says, for every field it cannot carry over, what to do instead, and validates each
pool with the operator's own models so what it prints is always a pool the API server accepts.

Pure: text in, manifests and notes out. No cluster, no GitHub (``pyproject.toml``'s contract).
"""
