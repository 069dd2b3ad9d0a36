"""Whether the platform team enabled the operator in a namespace, as the API server says.

Cluster-wide the operator only reads (deploy/rbac/cluster_role.yaml). What it writes in a runner
namespace (pods, token Secrets, the busy runners' budget, a runner account) it may write only
where a RoleBinding there grants it the shipped ClusterRole ``runnerpool-operator-namespace``
(deploy/rbac/namespace_cluster_role.yaml; the chart's ``<release>-namespace``, passed as
``--namespace-role``), made by the platform team: the chart's ``runnerNamespaces``,
deploy/runner-namespace, or the one line :meth:`NamespaceAccess.enable_line` gives. A pool
elsewhere must get no pod, no token and no GitHub call, and say why; finding out from a 403 at
its first write would come after its token job had asked GitHub.

So the reconciler asks first (:meth:`NamespaceAccess.check`, a gate before anything is made):
one SelfSubjectAccessReview per thing the operator needs in every runner namespace (create
pods, list and watch its Secrets and runner pods). Every authenticated user may ask those (the built-in
``system:basic-user`` role): the check needs no permission of its own, and it answers with the
operator's real permissions (a Role, a ClusterRoleBinding made by hand, ``--namespaced``'s bindings
count too), not with a guess from the RoleBindings it could list.

Answers are cached per namespace. One that is not enabled is asked again after ``recheck``
seconds (``first_recheck`` the first time: its RoleBinding may be on its way), so enabling it
makes its pools go on without a restart; one that is, after
``enabled_recheck`` seconds, and at once after a 403 from a write (:meth:`forget`), so a
RoleBinding taken away is noticed too.

An enabled namespace gets the operator's Secret and pod informers (``NamespaceWatch``:
``runnerpool.watches`` says why they are per namespace), and the gate opens only once they
hold their first list, so no pass takes "not cached yet" for "absent"; a namespace no longer
enabled has them stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool import conditions
from runnerpool.hook_access import RBAC_GROUP, RUNNER_HOOKS_CLUSTER_ROLE
from runnerpool.naming import NAMESPACE_CLUSTER_ROLE
from runnerpool.reasons import Reason
from runnerpool.runtime.kube import Kube, Resource

__all__ = [
    "ENABLED_RECHECK",
    "FIRST_RECHECK",
    "NAMESPACE_CLUSTER_ROLE",
    "RECHECK",
    "Access",
    "NamespaceAccess",
    "NamespaceNotSyncedError",
    "NamespaceWatch",
]

log = logging.getLogger(__name__)

#: deploy/'s ServiceAccount, named in the line when the operator cannot learn its own.
DEFAULT_ACCOUNT = "runnerpool-system:runnerpool-operator"
#: Seconds until a namespace that is not enabled is asked about again.
RECHECK = 30.0
#: The same, the first time it is refused: a platform team applies a namespace's RoleBinding
#: and its pools together, and a pool that came first (or a check the authorizer's cache
#: answered before it held the new binding) waited 30 s for nothing.
FIRST_RECHECK = 5.0
#: Seconds until an enabled namespace is asked about again (a 403 asks at once).
ENABLED_RECHECK = 300.0
#: Seconds an enabling waits for the namespace's Secret informers' first list.
SYNC_TIMEOUT = 10.0

SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io/v1", "selfsubjectaccessreviews", namespaced=False
)
SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io/v1", "selfsubjectreviews", namespaced=False)
_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Needed:
    """One thing the operator must be allowed in a runner namespace (a SelfSubjectAccessReview)."""

    verb: str
    resource: str
    group: str = ""
    name: str = ""

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}" + (f"/{self.name}" if self.name else "")


#: What the operator needs in every runner namespace before a pool there may start: the first
#: write of every pool, its Secret and pod informers, and ``bind`` on the runner hooks' ClusterRole.
#: The last is what only the platform team can give: a namespace admin may bind ``edit`` or
#: ``admin`` to the operator's account (they hold those), which covers pods and Secrets, and so
#: enabled the operator in their own namespace without anyone's consent; ``bind`` is in neither,
#: and RBAC lets no one grant what they do not hold. Every shipped namespace role has it.
NEEDED: tuple[Needed, ...] = (
    Needed("create", "pods"),
    Needed("list", "secrets"),
    Needed("watch", "secrets"),
    Needed("list", "pods"),
    Needed("watch", "pods"),
    Needed("bind", "clusterroles", RBAC_GROUP, RUNNER_HOOKS_CLUSTER_ROLE),
)


class NamespaceWatch(Protocol):
    """The per-namespace informers (``runnerpool.runtime.informers.InformerSet``)."""

    def watch_namespace(self, namespace: str, timeout: float) -> bool: ...
    def unwatch_namespace(self, namespace: str) -> bool: ...


class NamespaceNotSyncedError(RuntimeError):
    """An enabled namespace whose informers have not listed yet: the queue retries."""


@dataclass(frozen=True)
class Access:
    """The answer for one namespace: ``enabled``, the condition's message, and (not enabled)
    the seconds until it is asked again."""

    enabled: bool
    message: str
    recheck: float | None = None

    def condition(self, stamp: conditions.Stamp) -> dict[str, Any]:
        """The pool's ``NamespaceEnabled`` condition."""
        reason = Reason.NAMESPACE_ENABLED if self.enabled else Reason.NAMESPACE_NOT_ENABLED
        return stamp.condition(conditions.NAMESPACE_ENABLED, self.enabled, reason, self.message)


@dataclass
class _Answer:
    access: Access
    asked: float
    #: Seconds until it is asked again.
    wait: float


class NamespaceAccess:
    def __init__(
        self,
        kube: Kube,
        *,
        watch: NamespaceWatch | None = None,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = RECHECK,
        first_recheck: float = FIRST_RECHECK,
        enabled_recheck: float = ENABLED_RECHECK,
        role: str = NAMESPACE_CLUSTER_ROLE,
    ) -> None:
        self._kube = kube
        #: The ClusterRole the line binds: the one the install made (``--namespace-role``), or
        #: following the line would bind a role that does not exist and enable nothing.
        self._role = role
        self._watch = watch
        self._clock = clock
        self._recheck = recheck
        self._first_recheck = first_recheck
        self._enabled_recheck = enabled_recheck
        self._lock = threading.Lock()
        self._answers: dict[str, _Answer] = {}
        #: One asker per namespace at a time: the pools of a namespace share its answer.
        self._asking: dict[str, threading.Lock] = {}
        self._account: str | None = None

    def check(self, namespace: str) -> Access:
        """Whether the operator may work in ``namespace`` (cached; see the module docstring).

        Raises what the API server raises for the reviews, and ``NamespaceNotSyncedError``
        when the namespace is enabled but its Secrets and pods are not listed yet.
        """
        with self._lock:
            asking = self._asking.setdefault(namespace, threading.Lock())
        with asking:
            answer = self._answers.get(namespace)
            if answer is None or self._clock() - answer.asked >= answer.wait:
                # Kept before following: objects not listed yet (the follow raises) are waited
                # for again at the next check, not asked about again (six reviews each time).
                answer = self._answers[namespace] = self._answer(namespace, answer)
                self._follow(namespace, answer.access.enabled)
            elif answer.access.enabled:
                self._follow(namespace, True)
        access = answer.access
        if access.enabled:
            return access
        left = max(1.0, answer.asked + answer.wait - self._clock())
        return Access(False, access.message, recheck=left)

    def _answer(self, namespace: str, before: _Answer | None) -> _Answer:
        """Ask; a first refusal (none before, or enabled before) is asked again sooner."""
        access = self._ask(namespace)
        if access.enabled:
            wait = self._enabled_recheck
        elif before is None or before.access.enabled:
            wait = self._first_recheck
        else:
            wait = self._recheck
        return _Answer(access, self._clock(), wait)

    def readable(self, namespace: str) -> bool:
        """May a part beside the reconciler (the webhook secret mirror) read a Secret in
        ``namespace``? :meth:`check`'s answer, asked when none is cached, so that a namespace
        never enabled gets not one refused read; when the review fails, the last answer
        (unknown counts as enabled: the read then says what the API server thinks)."""
        try:
            return self.check(namespace).enabled
        except NamespaceNotSyncedError:
            return True
        except ApiException as err:
            log.debug("cannot ask whether namespace %s is enabled: HTTP %s", namespace, err.status)
            return not self.refused(namespace)

    def enabled(self, namespace: str) -> bool:
        """The last answer for ``namespace``, without asking (``False`` before the first)."""
        with self._lock:
            answer = self._answers.get(namespace)
        return answer is not None and answer.access.enabled

    def refused(self, namespace: str) -> bool:
        """The last answer for ``namespace`` said not enabled (``False`` before the first: not
        known yet, as for every namespace right after a start or a leadership change)."""
        with self._lock:
            answer = self._answers.get(namespace)
        return answer is not None and not answer.access.enabled

    def forget(self, namespace: str) -> None:
        """Ask again at the next check (a write in the namespace was refused: 403)."""
        with self._lock:
            self._answers.pop(namespace, None)

    def let_go(self, namespace: str) -> None:
        """The namespace's last pool is gone: forget its answer and stop its informers. A
        deleted namespace's would retry their refused lists and watches for as long as the process
        runs (three threads a namespace, a log line each retry, at most 30 s apart); a pool made
        there later asks again."""
        with self._lock:
            self._answers.pop(namespace, None)
        if self._watch is not None:
            self._watch.unwatch_namespace(namespace)

    def enable_line(self, namespace: str) -> str:
        """The one command that enables the operator in ``namespace``."""
        return (
            f"kubectl create rolebinding runnerpool-operator -n {namespace} "
            f"--clusterrole={self._role} --serviceaccount={self.account()}"
        )

    def account(self) -> str:
        """``namespace:name`` of the operator's ServiceAccount, as the API server knows it
        (SelfSubjectReview, which anyone may ask); deploy/'s when it is no ServiceAccount."""
        if self._account is None:
            self._account = self._learn_account()
        return self._account

    def _learn_account(self) -> str:
        try:
            review = self._kube.create(SELF_SUBJECT_REVIEWS, "", {"apiVersion": "authentication.k8s.io/v1"})
        except ApiException as err:
            log.info("cannot learn the operator's own account (%s): naming deploy/'s", err.status)
            return DEFAULT_ACCOUNT
        user = str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "")
        if not user.startswith(_SERVICE_ACCOUNT_PREFIX):
            return DEFAULT_ACCOUNT
        return user.removeprefix(_SERVICE_ACCOUNT_PREFIX)

    def _ask(self, namespace: str) -> Access:
        missing = [str(needed) for needed in NEEDED if not self._allowed(namespace, needed)]
        if not missing:
            return Access(
                True,
                f"the operator may create runner pods and read its Secrets and pods in namespace {namespace}",
            )
        message = (
            f"the operator may not {' or '.join(missing)} in namespace {namespace}: it writes only "
            f"where the platform team enabled it; to enable it: {self.enable_line(namespace)}"
        )
        return Access(False, message)

    def _allowed(self, namespace: str, needed: Needed) -> bool:
        attributes = {"namespace": namespace, "verb": needed.verb, "resource": needed.resource}
        if needed.group:
            attributes["group"] = needed.group
        if needed.name:
            attributes["name"] = needed.name
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        review = self._kube.create(SELF_SUBJECT_ACCESS_REVIEWS, "", body)
        return bool((review.get("status") or {}).get("allowed"))

    def _follow(self, namespace: str, enabled: bool) -> None:
        """Start the namespace's Secret and pod informers (and wait for their list), or stop them."""
        if self._watch is None:
            return
        if not enabled:
            self._watch.unwatch_namespace(namespace)
            return
        if not self._watch.watch_namespace(namespace, SYNC_TIMEOUT):
            raise NamespaceNotSyncedError(f"the Secrets and pods of namespace {namespace} are not listed yet")
