"""When a deleted pool's finalizer may let the pool go without deregistering runners on GitHub.

Deregistering needs the pool's credential. Without this module a pool whose credential Secret
is missing failed its finalizer on every retry, forever, and held its namespace in Terminating,
even when the pool never had a runner to deregister. Two cases now end without GitHub:

**The pool never registered a runner.** A runner registers only with what the operator got
from GitHub for the pool: the pool's registration token (token mode: the pod's register init
container runs ``config.sh`` with it) or a pod's JIT config (JIT mode: GitHub registers the
runner when it issues the config). So "may have runners" is known from the operator's own
acts, recorded where they are written anyway, at no extra write for a token pool: the secret
updater's first token fill also sets ``naming.TOKEN_ISSUED_ANNOTATION`` on the token Secret,
which emptying the Secret (as the deletion starts) leaves, and which lives as long as the pool
(the Secret is the pool's); the reconciler creates no token-mode pod before it sees the token.
A JIT pool is marked on the pool itself (``naming.MAY_HAVE_RUNNERS_ANNOTATION``, one write in its
life) in the first pass that sees one of its pods' JIT Secrets filled, because those Secrets go
with their pods. Metadata, not the status: it survives a restart and a lost or rewritten
status. ``status.runners`` alone would not do: it comes from a listing once an interval, so a
runner that registered and went between two listings never shows there.

What the marks can miss is covered by what the finalizer sees live (:func:`may_have_runners`):
a token in the token Secret, a JIT Secret ever filled (a config issued after the last pass
before the deletion; the finalizer then marks the pool, before the drain takes the pods), a
JIT config the secret updater says it wrote when the finalizer stops the pool's jobs (its write
may have landed a moment before the finalizer reads a cache that does not show it yet), a JIT
pod whose runner container has started (it had its config), a token-mode pod (pools of
operator versions before the marks), runners GitHub listed in ``status.runners``, or a
``TokenReady`` that says the token was issued. The last one is for a
namespace being deleted: its controller deletes the token Secret, with the mark, and the idle
pods, whatever their owner, possibly before the finalizer's first pass, while runners
registered less than a listing ago are not counted yet; the condition, written with the pool's
first pods, stays on the pool. A pool that never had a usable credential never has any of
these: its finalizer goes at once, and the garbage collector takes its children.

**The pool's credential is lost.** A pool that may have runners and whose credential Secret is
missing or unusable (malformed, or one GitHub rejects, refuses, or that cannot see the scope:
:func:`credential_failure`) cannot deregister them and, waiting for that, could never be
deleted. The finalizer records when it first found so (``naming.CREDENTIAL_LOST_ANNOTATION``,
kept across restarts), says so in ``RunnersDeregistered`` (reason ``CredentialLost``) and a
Warning Event naming the runners that may be left (the pool's pods' names: each pod's runner
registers under its pod's name) and how to remove them, and lets the pool go
``--credential-lost-wait`` seconds later, with a ``RunnersLeftOnGitHub`` Event. A credential
that comes back within the wait is used: the finalizer deregisters as usual. A GitHub outage is
not a lost credential: it keeps the finalizer, backing off, as before.

**The pool's pods are stuck Terminating.** The finalizer waits for the pool's pods to go, so
that a runner registering at the last moment is found. A pod on a node that is powered off or
cut off from the API server stays Terminating for as long as the Node object exists: before,
the finalizer waited for it for ever, saying ``Deregistered`` and nothing of the pod. Now a pod
past its deletion time is named with its node in ``RunnersDeregistered`` (reason
``RunnerPodsStuckTerminating``, :func:`stuck_pods`) and a Warning Event, and an hour later the
pool goes without it, once GitHub confirms it has no runner of the pod's name (the rule and
why it is safe: ``runnerpool.runners.lifecycle.STUCK_MARGIN``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from runnerpool import api, children, conditions, naming
from runnerpool.domain import RFC3339, StuckPod, parse_rfc3339
from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import GitHubError
from runnerpool.pods.state import runner_started
from runnerpool.reasons import Reason

__all__ = [
    "credential_failure",
    "left_on_github",
    "lost_since",
    "marked",
    "may_have_runners",
    "stuck_pods",
]

#: GitHub's answers that mean this credential cannot deregister the pool's runners, now or
#: later, until a human acts (not GitHub being down or busy, which is waited out): rejected
#: (401), not allowed (403 that is no rate limit), its App installation gone or its key revoked,
#: blind to the scope (404: deleted, renamed, or never visible to it), the wrong kind (an App
#: on an enterprise).
_UNUSABLE = frozenset(
    {
        Reason.BAD_CREDENTIALS,
        Reason.FORBIDDEN,
        Reason.APP_INSTALLATION_TOKEN_FAILED,
        Reason.ENTERPRISE_NEEDS_PERSONAL_ACCESS_TOKEN,
        Reason.SCOPE_NOT_FOUND,
    }
)


def _annotations(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return (raw.get("metadata") or {}).get("annotations") or {}


def marked(raw: Mapping[str, Any]) -> bool:
    """The (JIT) pool carries the mark: it may have registered a runner."""
    return naming.MAY_HAVE_RUNNERS_ANNOTATION in _annotations(raw)


def may_have_runners(
    raw: Mapping[str, Any],
    *,
    jit: bool,
    token_secret: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    jit_secrets: Iterable[Mapping[str, Any] | None],
) -> bool:
    """Whether the pool may have registered a runner (see the module docstring): the marks, or
    live evidence of a token, a JIT config, a token-mode pod, or runners GitHub listed."""
    if marked(raw):
        return True
    token = token_secret or {}
    issued = naming.TOKEN_ISSUED_ANNOTATION in _annotations(token)
    if issued or (token.get("data") or {}).get(naming.TOKEN_SECRET_KEY):
        return True
    if any(secret is not None and _ever_filled(secret) for secret in jit_secrets):
        return True
    # A JIT pod whose runner started had its config: its init container waits for the config's
    # volume until then. The pod cache says so while the Secret cache may not show the filled
    # Secret yet (its watch reconnecting), and after the fill forgot the pod.
    if any(not jit or runner_started(pod) for pod in pods):
        return True
    status = raw.get("status") or {}
    if any(_says_token_issued(c) for c in status.get("conditions") or ()):
        return True
    listed = status.get("runners") or {}
    return any(int(count or 0) > 0 for count in listed.values())


#: ``TokenReady`` reasons that say the pool's registration token was issued (a JIT pool's
#: ``JitConfigs`` says nothing of its pods' configs).
_TOKEN_ISSUED = frozenset({Reason.TOKEN_ISSUED, Reason.REFRESH_FAILING})


def _says_token_issued(condition: Mapping[str, Any]) -> bool:
    return condition.get("type") == conditions.TOKEN_READY and condition.get("reason") in _TOKEN_ISSUED


def _ever_filled(secret: Mapping[str, Any]) -> bool:
    """A JIT Secret the token scheduler filled (the runner id stays once it is emptied)."""
    return children.jit_filled(dict(secret)) or naming.JIT_RUNNER_ID_ANNOTATION in _annotations(secret)


def credential_failure(err: Exception) -> bool:
    """The credential is missing or cannot deregister here (``_UNUSABLE``), as opposed to GitHub
    failing for a while. The finalizer waits ``--credential-lost-wait`` for a fix, then lets the
    pool go saying which runners may be left: before, only a 401 or a missing Secret counted,
    and a revoked App key, a token that lost admin rights or a deleted repository held the pool,
    and its namespace in Terminating, for ever."""
    if isinstance(err, CredentialError):
        return True
    return isinstance(err, GitHubError) and err.reason in _UNUSABLE


def lost_since(raw: Mapping[str, Any]) -> datetime | None:
    """When the finalizer first found the pool's credential unusable (``None``: it has not)."""
    return parse_rfc3339(_annotations(raw).get(naming.CREDENTIAL_LOST_ANNOTATION))


def left_on_github(pool: api.RunnerPool, pod_names: Iterable[str], api_url: str) -> str:
    """Which runners may be left on GitHub, and how to remove them (names only, no secret);
    ``api_url``: the pool's GitHub API."""
    names = sorted(pod_names)
    prefix = naming.runner_pod_prefix(pool.name)
    which = f"runner(s) {', '.join(names)}" if names else f"any runner named {prefix}*"
    base = api_url.rstrip("/")
    scale_set = pool.spec.scale_set
    also = (
        f"; so may runner scale set {scale_set.name}: remove it in the runner groups' settings"
        if scale_set is not None
        else ""
    )
    return (
        f"{which} may be left on GitHub in {pool.scope.path}: remove them in its settings "
        f"(Actions > Runners) or with DELETE {base}/{pool.scope.path}/actions/runners/RUNNER_ID "
        f"(GET {base}/{pool.scope.path}/actions/runners lists their ids){also}"
    )


def stuck_pods(stuck: Sequence[StuckPod], *, let_go: bool) -> str:
    """What ``RunnersDeregistered`` and its Event say of pods stuck Terminating (names and nodes,
    never more): whether the pool waits for them, until when, and how they go for good."""
    which = ", ".join(f"{pod.name} on node {pod.node or '(none)'}" for pod in stuck)
    how = (
        "they go when their node comes back, or once its Node object is deleted (a node gone for good); "
        "a runner that ignored its stop goes when the kubelet kills it, at the end of the grace its pod "
        "was first deleted with (a shorter grace asked later does not cut that short)"
    )
    if let_go:
        return (
            f"no runner of this pool is registered; let go while pod(s) {which} are still Terminating, "
            f"over an hour past their deletion time: GitHub has no runner of them; {how}"
        )
    until = max(pod.given_up_at for pod in stuck)
    return (
        f"no runner of this pool is registered; pod(s) {which} are still Terminating past their "
        "deletion time: their node does not answer (powered off, or cut off from the API server), a "
        "finalizer holds them, or their runner ignored its stop; the pool goes without them from "
        f"{until:{RFC3339}} if GitHub still has no runner of their names; {how}"
    )
