"""Kubernetes Events for the transitions users care about.

The Python client has no event recorder (client-go's ``record`` package has no
counterpart), so this is a minimal one: it creates ``v1`` Events and, like
client-go's correlator, folds a repeat of the same reason and message on the
same object into a count on the existing Event instead of writing a new one.
Messages are written by the operator's own code, or quote the API server's message about
an object the operator made (a refused runner pod, whose spec holds no credential: the token
is a mounted Secret file); they never carry a token.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool.api_errors import describe, is_namespace_terminating
from runnerpool.domain import rfc3339, utcnow
from runnerpool.runtime.kube import EVENTS, Kube

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
_COMPONENT = "runnerpool-operator"


class EventRecorder(Protocol):
    """Whatever tells users about an object with Kubernetes Events (tests pass a list)."""

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None: ...


class KubeEventRecorder:
    """Writes Events; a failure to record is logged, never raised into a reconcile."""

    def __init__(self, kube: Kube, max_remembered: int = 4096) -> None:
        self._kube = kube
        self._seen: dict[tuple[str, str, str, str], tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._max = max_remembered

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        namespace = meta["namespace"]
        key = (meta["uid"], type_, reason, message)
        now = rfc3339(utcnow())
        with self._lock:
            known = self._seen.get(key)
        try:
            if known is not None:
                name, count = known
                self._kube.patch(EVENTS, namespace, name, {"count": count + 1, "lastTimestamp": now})
                self._remember(key, name, count + 1)
                return
            name = f"{meta['name']}.{uuid.uuid4().hex[:12]}"
            self._kube.create(
                EVENTS,
                namespace,
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion"),
                        "kind": obj.get("kind"),
                        "name": meta["name"],
                        "namespace": namespace,
                        "uid": meta["uid"],
                    },
                    "type": type_,
                    "reason": reason,
                    "message": message,
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": {"component": _COMPONENT},
                    "reportingComponent": _COMPONENT,
                },
            )
            self._remember(key, name, 1)
        except ApiException as err:
            if known is not None and err.status == 404:
                with self._lock:
                    self._seen.pop(key, None)
            # A namespace being deleted takes no new Events: expected, not worth a warning.
            level = logging.DEBUG if is_namespace_terminating(err) else logging.WARNING
            log.log(
                level,
                "could not record event %s on %s/%s: %s",
                reason,
                namespace,
                meta["name"],
                describe(err),
            )

    def _remember(self, key: tuple[str, str, str, str], name: str, count: int) -> None:
        with self._lock:
            if len(self._seen) >= self._max and key not in self._seen:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = (name, count)
