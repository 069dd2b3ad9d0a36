"""The Kubernetes API calls the operator makes, sent over ``ApiClient`` without the generated
API classes.

Written by hand on purpose: the kubernetes client (v37) decorates each of the ~800 methods of
its generated API classes with pydantic's ``validate_call``, and building those classes cost
the operator most of its start-up (``CoreV1Api`` 0.66 s CPU and +21 MiB, ``AppsV1Api`` 0.27 s
and +20 MiB, ``CustomObjectsApi`` 0.07 s and +15 MiB on the bench machine) for a dozen calls
on plain dicts.  This module keeps the client's own pieces (its configuration for the host,
TLS, auth and headers; ``ApiException`` for errors) and only states, per resource, the path the
generated method would have used.  One-shot calls go out on ``transport.Transport`` (kept-alive
``http.client`` connections: half the client CPU of a request through urllib3); watches and
the informers' lists, and configurations the transport leaves alone (a proxy, say), through the
client's REST client and its urllib3 pool (``raw``).

Every call takes and returns wire-format dicts (camelCase), as the informer caches hold them.
Patches are strategic merge patches for built-in kinds and JSON merge patches for custom
objects (what the generated methods chose for a dict body); a list body is a JSON patch.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from runnerpool import api
from runnerpool.runtime.transport import Transport, supports

__all__ = [
    "CONFIG_MAPS",
    "DEFAULT_REQUEST_TIMEOUT",
    "EVENTS",
    "LEASES",
    "MERGE_PATCH",
    "NAMESPACES",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "ROLE_BINDINGS",
    "RUNNER_POOLS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "STRATEGIC_MERGE_PATCH",
    "Kube",
    "Resource",
    "retry_on_conflict",
    "set_request_timeout",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

_AUTH = ["BearerToken"]

#: Seconds a Kubernetes API call may wait for the server (to connect, and between two reads)
#: unless ``set_request_timeout`` said otherwise (``--api-timeout``). Without one, a call to a
#: server that stopped answering held its worker for ever. Per attempt: the client's own
#: retries (three) each get it again.
DEFAULT_REQUEST_TIMEOUT = 15.0
_TIMEOUT_ATTRIBUTE = "runnerpool_request_timeout"
#: Where an ``ApiClient`` keeps its ``Transport`` (``False``: its configuration needs urllib3).
_TRANSPORT_ATTRIBUTE = "runnerpool_transport"
_TRANSPORT_LOCK = threading.Lock()
#: ``raw``'s timeout when its caller gives none: the client's.
_CLIENTS_TIMEOUT: Any = object()


def _transport_of(api_client: ApiClient) -> Transport | None:
    """The one ``Transport`` of ``api_client`` (made on first use), or ``None``
    when its configuration needs the client's urllib3 path (``transport.supports``)."""
    found = getattr(api_client, _TRANSPORT_ATTRIBUTE, None)
    if found is None:
        with _TRANSPORT_LOCK:
            found = getattr(api_client, _TRANSPORT_ATTRIBUTE, None)
            if found is None:
                found = Transport(api_client.configuration) if supports(api_client.configuration) else False
                setattr(api_client, _TRANSPORT_ATTRIBUTE, found)
    return found if isinstance(found, Transport) else None


def set_request_timeout(api_client: ApiClient, seconds: float) -> ApiClient:
    """The one place the operator's API calls get their timeout: every ``Kube`` over
    ``api_client`` uses it (watches excepted: the server ends them, and they say their own)."""
    setattr(api_client, _TIMEOUT_ATTRIBUTE, seconds)
    return api_client


@dataclass(frozen=True)
class Resource:
    """One kind's REST path: ``group_version`` is ``v1`` for the core group, ``apps/v1`` etc."""

    group_version: str
    plural: str
    namespaced: bool = True

    @property
    def patch_type(self) -> str:
        # Custom resources (a group with a dot) have no strategic merge patch; built-in kinds do.
        custom = "." in self.group_version.partition("/")[0]
        return MERGE_PATCH if custom else STRATEGIC_MERGE_PATCH

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str = "") -> str:
        root = "/api/" if "/" not in self.group_version else "/apis/"
        out = root + self.group_version
        if namespace is not None and self.namespaced:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        if name is not None:
            out += f"/{name}"
        if subresource:
            out += f"/{subresource}"
        return out


SECRETS = Resource("v1", "secrets")
CONFIG_MAPS = Resource("v1", "configmaps")
PODS = Resource("v1", "pods")
EVENTS = Resource("v1", "events")
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
POD_DISRUPTION_BUDGETS = Resource("policy/v1", "poddisruptionbudgets")
RUNNER_POOLS = Resource(api.API_VERSION, api.PLURAL)
SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "rolebindings")
LEASES = Resource("coordination.k8s.io/v1", "leases")


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def _query(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Snake-case keyword arguments (as ``Watch`` and the informer pass them) as query pairs."""
    out: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        out.append((_camel(key), str(value).lower() if isinstance(value, bool) else str(value)))
    return out


class Kube:
    """Create, patch, delete and list over one ``ApiClient`` (its pool, auth and user agent)."""

    def __init__(self, api_client: ApiClient, *, at_most: float | None = None) -> None:
        """``at_most``: a shorter timeout per attempt for this caller's calls than the client's."""
        self.api_client = api_client
        self.timeout: float = getattr(api_client, _TIMEOUT_ATTRIBUTE, DEFAULT_REQUEST_TIMEOUT)
        if at_most is not None:
            self.timeout = min(self.timeout, at_most)
        self._transport = _transport_of(api_client)

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return self._json("GET", resource.path(namespace, name))

    def get_if_there(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object as the API server has it now; ``None`` once it is gone (404)."""
        try:
            return self.get(resource, namespace, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create(
        self, resource: Resource, namespace: str, body: Mapping[str, Any], **query: Any
    ) -> dict[str, Any]:
        return self._json("POST", resource.path(namespace), body=body, query=query)

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any] | list[dict[str, Any]],
        *,
        subresource: str = "",
        patch_type: str | None = None,
    ) -> dict[str, Any]:
        if patch_type is None:
            patch_type = JSON_PATCH if isinstance(body, list) else resource.patch_type
        return self._json(
            "PATCH", resource.path(namespace, name, subresource), body=body, content_type=patch_type
        )

    def replace(
        self, resource: Resource, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT: the whole object, refused (409) unless its resourceVersion is still the server's."""
        return self._json("PUT", resource.path(namespace, name), body=body)

    def delete(
        self, resource: Resource, namespace: str, name: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return self._json("DELETE", resource.path(namespace, name), body=body or {})

    def list_items(self, resource: Resource, namespace: str | None, **query: Any) -> list[dict[str, Any]]:
        """The items of one list call (no paging: for the few objects a selector picks)."""
        return list(self._json("GET", resource.path(namespace), query=query).get("items") or [])

    def list_paged(
        self, resource: Resource, namespace: str | None, *, page: int = 500, **query: Any
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list no selector keeps small (all RoleBindings of a cluster), read
        ``page`` at a time (``limit`` and ``continue``), so no answer grows with the cluster."""
        token: str | None = None
        while True:
            paged = {**query, "limit": page, "continue": token}
            answer = self._json("GET", resource.path(namespace), query=paged)
            yield from answer.get("items") or []
            token = (answer.get("metadata") or {}).get("continue") or None
            if token is None:
                return

    def lister(self, resource: Resource) -> _Lister:
        """A list function for ``SharedInformer`` and ``Watch`` (keyword arguments as the
        generated ``list_*`` methods take them, ``namespace`` included; answers the raw
        response, as they do with ``_preload_content=False``)."""
        return _Lister(self, resource)

    def raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Any = _CLIENTS_TIMEOUT,
    ) -> Any:
        """The urllib3 response of one request, unread; non-2xx raise ``ApiException``.

        ``timeout`` as the kubernetes client takes it (``None``: none); by default the client's
        (``set_request_timeout``)."""
        if timeout is _CLIENTS_TIMEOUT:
            timeout = self.timeout
        request = self.api_client.param_serialize(
            method,
            path,
            query_params=_query(query or {}) or None,
            header_params=_json_headers(body, content_type),
            body=body,
            auth_settings=_AUTH,
        )
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def _json(self, method: str, path: str, **request: Any) -> dict[str, Any]:
        """One request answered with a JSON object: on the lean ``Transport`` when the
        configuration allows it, else through the client's urllib3 pool (``raw``, whose
        ``query``, ``body`` and ``content_type`` keywords ``request`` holds)."""
        if self._transport is None:
            response = self.raw(method, path, **request)
            try:
                data = response.data
            finally:
                response.release_conn()
        else:
            data = self._send(method, path, request)
        answer: dict[str, Any] = json.loads(data) if data else {}
        return answer

    def _send(self, method: str, path: str, request: Mapping[str, Any]) -> bytes:
        """``raw``'s request on the ``Transport`` (``request``: its ``query``, ``body`` and
        ``content_type`` keywords, each optional): the headers the client would send (default
        ones last, as ``param_serialize`` merges them; cookie; bearer token), the answer's body."""
        assert self._transport is not None
        client = self.api_client
        query, body = request.get("query"), request.get("body")
        headers = {**_json_headers(body, request.get("content_type")), **client.default_headers}
        if client.cookie:
            headers["Cookie"] = client.cookie
        for auth in client.configuration.auth_settings().values():
            if auth["value"]:
                headers[auth["key"]] = auth["value"]
        payload = None if body is None else json.dumps(body).encode()
        pairs = _query(query or {})
        target = f"{path}?{urlencode(pairs)}" if pairs else path
        answer = self._transport.request(method, target, headers, payload, self.timeout)
        if not 200 <= answer.status <= 299:
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return answer.data


def _json_headers(body: Any, content_type: str | None) -> dict[str, str]:
    """JSON answers asked for; a body sent as JSON unless ``content_type`` names a patch type."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    return headers


class _Lister:
    """``list_*``-shaped: ``(**kwargs) -> urllib3 response``; ``watch=True`` makes it a watch."""

    def __init__(self, kube: Kube, resource: Resource) -> None:
        self._kube = kube
        self._resource = resource

    def __call__(self, **kwargs: Any) -> Any:
        kwargs.pop("_preload_content", None)
        # A watch waits for events as long as the server keeps it open (its timeoutSeconds).
        timeout = kwargs.pop("_request_timeout", None if kwargs.get("watch") else _CLIENTS_TIMEOUT)
        path = self._resource.path(kwargs.pop("namespace", None))
        return self._kube.raw("GET", path, query=kwargs, timeout=timeout)


T = TypeVar("T")


def retry_on_conflict(write: Callable[[bool], T], attempts: int) -> T:
    """client-go's ``RetryOnConflict``: ``write(first)`` reads (its caller's copy when
    ``first``, the server's after a conflict), decides and writes; a 409 calls it again at once,
    and the last attempt's 409 is raised (to the work queue's retry)."""
    for attempt in range(attempts - 1):
        try:
            return write(attempt == 0)
        except ApiException as err:
            if err.status != 409:
                raise
    return write(attempts == 1)
