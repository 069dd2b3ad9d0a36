"""GitHub behind one small interface, split by job.

``types`` and ``errors``: what a call returns or raises. ``protocol``: the ``GitHubClient``
interface the controllers depend on. ``pygithub``: the PyGithub transport, with its ETag page
cache (``pages``), answer parsing (``parse``), error translation (``translate``), budget
metrics (``metrics``) and the log filter that keeps tokens out of PyGithub's log
(``redact``). ``credentials``: from a credential Secret to a client, one per Secret.
``fake``: an in-memory ``GitHubClient`` for tests, checked by mypy like the rest.

Kept import-free so that importing the types does not load PyGithub.
"""
