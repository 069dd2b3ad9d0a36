"""``kubectl runnerpool``: a platform team's view of pools, as the operator and GitHub see them.

A kubectl plugin (the console script ``kubectl-runnerpool``, found on ``PATH`` by kubectl): it
lists pools with their counts and token expiry, lists a pool's runners as GitHub lists them
next to their pods, says why a pool is not ready, and removes a pool's offline runners from
GitHub. It runs with the user's kubeconfig and permissions, reads a pool's credential Secret
the way the operator does (``runnerpool.github.credentials``) and talks to GitHub through the
operator's one client interface, one listing per command.

The operator never imports this package (``pyproject.toml``'s import-linter contracts); the
plugin reads the API models and names and uses the GitHub client, never a controller.
Kept import-free, like ``runnerpool.github``.
"""
