"""A client for GitHub's runner scale set protocol: the Actions service a pool can use instead
of the REST runner endpoints (issue 34).

Why a package of its own: a scale-set pool gets its demand from a long-poll *message session*
(``statistics.totalAssignedJobs``) and its runners' JIT configs from the scale set, so it needs
neither an inbound webhook nor REST budget per runner. The protocol is GitHub's, documented by
its public Go client; this package speaks it with the project's bounded ``requests`` transport
(``runnerpool.github.transport``: a deadline per call, a size cap per answer, the slow-host gate)
and raises only ``runnerpool.github.errors.GitHubError`` subclasses, as the REST client does.

``connection``: registration token -> ``POST {api}/actions/runner-registration`` -> the Actions
service URL and an admin token, refreshed before it expires. ``client``: runner groups, scale
sets, JIT configs, runners. ``session``: the message session (create with the conflict retry,
refresh, delete), polling, acknowledging, acquiring jobs. ``demand``: the pure rules (desired
runners from statistics, which messages are new). ``types``/``errors``: shapes and failures.
``wire``: one request with retries and backoff on top of the bounded transport.

Provenance: facts (paths, bodies, status codes, retry rules) read from github.com/actions/scaleset
at 6ce0259 (client.go, session_client.go, common_client.go, types.go, errors.go,
listener/listener.go, internal/testserver/server.go) and actions/actions-runner-controller
cmd/ghalistener/listener/listener.go at c6e4c94a (session conflict: 409, retried every 30 s,
10 attempts). No code was copied.

Not wired yet: nothing in the operator imports this package so far (see the scale-set notes).
"""
