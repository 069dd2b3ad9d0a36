"""Each JIT pod's own Secret: created empty, filled by the token scheduler, emptied once used.

A JIT pod (``spec.registration: jit``) names its Secret in ``naming.JIT_SECRET_ANNOTATION``
(``runnerpool.pods.registration``). On every pass over the pool's pods, for each such pod:

* no Secret yet: create it empty, owned by the pod (garbage collection deletes it with the
  pod) and labelled managed-by (the Secret informers cache only those);
* empty and never filled: ask the token scheduler to fill it (``secret_updater.jit``), which
  asks GitHub for one runner named after the pod; asking again for the same pod is free;
* the pod's register init container has ended well (or the pod is going): empty it. A JIT
  config left in the API is a runner anyone allowed to read the namespace's Secrets could
  start first. The key stays, with no value: the kubelet keeps refreshing the pod's Secret
  volume and would report a missing key as a failed mount. The runner id the scheduler wrote
  beside the config stays too, so an emptied Secret is never filled again.

Each write happens only when the cache shows it is needed: a converged pool writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.domain import PoolRef, TokenFailure
from runnerpool.github.types import DEFAULT_RUNNER_GROUP_ID, JitRequest
from runnerpool.pods import state
from runnerpool.reads import Reads
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.writes import Write, Writes

__all__ = ["EMPTIED", "JitJobs", "JitSecrets", "jit_request", "jit_secret", "registered", "secret_name"]

log = logging.getLogger(__name__)

#: The merge patch that empties a used JIT Secret (the key stays, with no value).
EMPTIED: dict[str, Any] = {"data": {naming.JIT_SECRET_KEY: ""}}


class JitJobs(Protocol):
    """The part of ``secret_updater.jit.JitFiller`` the reconciler drives."""

    def fill(self, pool: PoolRef, secret: str, pod_uid: str, request: JitRequest) -> None: ...
    def forget_pod(self, namespace: str, pod_uid: str) -> None: ...
    def stop(self, namespace: str, name: str) -> None: ...
    def failure(self, namespace: str, name: str) -> TokenFailure | None: ...


def jit_request(
    pool: api.RunnerPool, labels: Iterable[str], runner_group_id: int | None = None
) -> JitRequest:
    """What the pool's runners are made with (``runner_group_id``: the pool's runner group, when
    its gate found it; GitHub's default group otherwise); each pod's own asks with the pod's name."""
    return JitRequest(
        name=pool.name,
        labels=tuple(labels),
        runner_group_id=runner_group_id if runner_group_id is not None else DEFAULT_RUNNER_GROUP_ID,
        work_folder=naming.WORK_DIR,
    )


def secret_name(pod: Mapping[str, Any]) -> str | None:
    """The pod's own JIT Secret; ``None`` for a token-mode pod."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(naming.JIT_SECRET_ANNOTATION)
    return str(name) if name else None


def registered(pod: Mapping[str, Any]) -> bool:
    """The pod's register init container has ended with success: it has copied its config."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    register: Mapping[str, Any] = next(
        (c for c in statuses if c.get("name") == naming.REGISTER_CONTAINER), {}
    )
    terminated = (register.get("state") or {}).get("terminated") or {}
    return bool(terminated) and terminated.get("exitCode") == 0


def jit_secret(pod: Mapping[str, Any], name: str, pool: str) -> dict[str, Any]:
    """An empty Secret owned by ``pod``, cached (managed-by) and marked with its pool."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: pool},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
    }


def _filled(secret: Mapping[str, Any]) -> bool:
    return bool((secret.get("data") or {}).get(naming.JIT_SECRET_KEY))


def _ever_filled(secret: Mapping[str, Any]) -> bool:
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    return naming.JIT_RUNNER_ID_ANNOTATION in annotations


def _owned_by(secret: Mapping[str, Any], uid: str) -> bool:
    refs = (secret.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


class JitSecrets:
    def __init__(self, cache: Reads, kube: Kube, jobs: JitJobs) -> None:
        self._cache = cache
        self._kube = kube
        self._jobs = jobs

    def converge(
        self,
        ref: PoolRef,
        request: JitRequest,
        pods: Iterable[Mapping[str, Any]],
        writes: Writes,
    ) -> None:
        """Create, fill and empty the JIT Secrets of ``pods`` (``request``: the pool's, named per pod)."""
        for pod in pods:
            name = secret_name(pod)
            if name is not None:
                self._converge_one(ref, request, pod, name, writes)

    def _converge_one(
        self,
        ref: PoolRef,
        request: JitRequest,
        pod: Mapping[str, Any],
        name: str,
        writes: Writes,
    ) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        namespace = ref.namespace
        secret = self._cache.get_secret(namespace, name)
        if secret is not None and not _owned_by(secret, uid):
            log.warning("pool %s: Secret %s is not pod %s's; leaving it", ref.key, name, meta["name"])
            return
        if registered(pod) or not state.active(pod):
            # Used, or going: no runner may be made for it, and a config left is one too many.
            self._jobs.forget_pod(namespace, uid)
            if secret is not None and _filled(secret):
                self._empty(namespace, name, writes)
            return
        if secret is None:
            try:
                secret = self._kube.create(SECRETS, namespace, jit_secret(pod, name, ref.name))
                writes.add(Write.JIT_SECRET_CREATED)
            except ApiException as err:
                if err.status != 409:  # 409: the cache has not caught up with an earlier create
                    raise
                return
        if not _filled(secret) and not _ever_filled(secret):
            self._jobs.fill(ref, name, uid, replace(request, name=str(meta["name"])))

    def _empty(self, namespace: str, name: str, writes: Writes) -> None:
        try:
            self._kube.patch(SECRETS, namespace, name, EMPTIED)
        except ApiException as err:
            if err.status != 404:  # 404: gone with its pod
                raise
            return
        writes.add(Write.JIT_SECRET_EMPTIED)
