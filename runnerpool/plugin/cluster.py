"""The cluster as the plugin's user sees it: their kubeconfig, their permissions.

Every read is one request with the user's identity; a refusal becomes a ``PluginError`` that
names the verb and resource and the role that grants it (``errors.forbidden``). Objects come
back as plain dicts, the form the API server sends.

The token Secrets are read as metadata only (``PartialObjectMetadataList``): the plugin needs
their expiry annotation, never the registration token in them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from runnerpool import api, naming
from runnerpool.plugin.errors import PluginError, forbidden

__all__ = ["Cluster", "Login", "connect"]

_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


@dataclass(frozen=True)
class Login:
    """Which kubeconfig and context, as kubectl's own flags name them (``None``: kubectl's default)."""

    kubeconfig: str | None = None
    context: str | None = None


def _context_namespace(login: Login) -> str:
    """The namespace of the context in use, as kubectl picks it (``default`` when it names none)."""
    contexts, current = config.list_kube_config_contexts(config_file=login.kubeconfig)
    if login.context is not None:  # the client has loaded it already: it exists
        current = next(c for c in contexts if c.get("name") == login.context)
    return str(((current or {}).get("context") or {}).get("namespace") or "default")


def connect(login: Login) -> Cluster:
    """An API client from the kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``)."""
    try:
        api_client = config.new_client_from_config(config_file=login.kubeconfig, context=login.context)
        namespace = _context_namespace(login)
    except (ConfigException, OSError) as err:
        raise PluginError(f"no usable kubeconfig ({err}); pass --kubeconfig or --context") from None
    return Cluster(api_client, namespace)


class Cluster:
    """Reads with the user's identity; ``namespace``: the kubeconfig context's namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self._api = api_client
        self.namespace = namespace
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)

    @property
    def server(self) -> str:
        return str(self._api.configuration.host)

    def close(self) -> None:
        self._api.close()

    # -- reads ------------------------------------------------------------------------------------

    def pools(self, namespace: str | None) -> list[dict[str, Any]]:
        """The RunnerPools of ``namespace``, or of every namespace (``None``)."""
        if namespace is None:
            found = self._call(
                "list",
                api.PLURAL,
                None,
                self._custom.list_cluster_custom_object,
                api.GROUP,
                api.VERSION,
                api.PLURAL,
            )
        else:
            found = self._call(
                "list",
                api.PLURAL,
                namespace,
                self._custom.list_namespaced_custom_object,
                api.GROUP,
                api.VERSION,
                namespace,
                api.PLURAL,
            )
        return list(found.get("items") or [])

    def pool(self, namespace: str, name: str) -> dict[str, Any]:
        found = self._call(
            "get",
            api.PLURAL,
            namespace,
            self._custom.get_namespaced_custom_object,
            api.GROUP,
            api.VERSION,
            namespace,
            api.PLURAL,
            name,
            missing=f'runnerpool "{name}" not found in namespace "{namespace}" '
            f"(kubectl runnerpool list -n {namespace})",
        )
        return dict(found)

    def pool_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        """The pool's runner pods, selected as the operator selects them."""
        selector = f"{naming.MANAGED_BY_SELECTOR},{naming.POOL_LABEL}={pool}"
        return self._items("list", "pods", namespace, self._core.list_namespaced_pod, label_selector=selector)

    def events(self, namespace: str, kind: str) -> list[dict[str, Any]]:
        """The namespace's Events about objects of ``kind``."""
        return self._items(
            "list",
            "events",
            namespace,
            self._core.list_namespaced_event,
            field_selector=f"involvedObject.kind={kind}",
        )

    def token_secrets(self, namespace: str | None) -> list[dict[str, Any]] | None:
        """The metadata of the operator's Secrets (token Secrets among them); ``None`` when the
        user may not list Secrets (the built-in view role): the pools' status says the same."""
        kwargs: dict[str, Any] = {
            "label_selector": naming.MANAGED_BY_SELECTOR,
            "_headers": {"Accept": _METADATA_ONLY},
        }
        try:
            if namespace is None:
                return self._items(
                    "list", "secrets", None, self._core.list_secret_for_all_namespaces, **kwargs
                )
            return self._items(
                "list", "secrets", namespace, self._core.list_namespaced_secret, namespace, **kwargs
            )
        except PluginError:
            return None

    def secret_data(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """A Secret's data, decoded (``None``: no such Secret); ``ValueError`` for a value that is not
        base64-encoded UTF-8, as ``ClientCache`` expects of its reader."""
        try:
            found = self._call(
                "get", "secrets", namespace, self._core.read_namespaced_secret, name, namespace
            )
        except _NotFoundError:
            return None
        data = found.get("data") or {}
        return {key: base64.b64decode(value, validate=True).decode() for key, value in data.items()}

    def config_map_data(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """A ConfigMap's data (``None``: no such ConfigMap): a pool's spec.githubServerTLS bundle."""
        try:
            found = self._call(
                "get", "configmaps", namespace, self._core.read_namespaced_config_map, name, namespace
            )
        except _NotFoundError:
            return None
        return dict(found.get("data") or {})

    # -- plumbing ---------------------------------------------------------------------------------

    def _items(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        call: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        if namespace is not None and not args:
            args = (namespace,)
        found = self._call(verb, resource, namespace, call, *args, **kwargs)
        return list(found.get("items") or [])

    def _call(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        call: Callable[..., Any],
        *args: Any,
        missing: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One request, its answer as the API server's JSON; refusals and outages as ``PluginError``."""
        try:
            response = call(*args, _preload_content=False, **kwargs)
        except ApiException as err:
            raise self._explain(err, verb, resource, namespace, missing) from None
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise PluginError(
                f"cannot reach the Kubernetes API server at {self.server} ({type(err).__name__}); "
                "check the kubeconfig's server and the network"
            ) from None
        answer = json.loads(response.data)
        return answer if isinstance(answer, dict) else {}

    def _explain(
        self, err: ApiException, verb: str, resource: str, namespace: str | None, missing: str | None
    ) -> Exception:
        message = _server_message(err)
        if err.status == 403:
            return forbidden(verb, resource, namespace, message)
        if err.status == 401:
            return PluginError(
                f"the Kubernetes API server at {self.server} did not accept the kubeconfig's "
                "credentials (HTTP 401); log in again or pick another --context"
            )
        if err.status == 404:
            if resource == api.PLURAL and not _names_an_object(err):
                return PluginError(
                    f"the API server does not serve {api.PLURAL}.{api.GROUP}: is the operator's CRD "
                    "installed (kubectl apply -k deploy/ or the Helm chart)?"
                )
            return PluginError(missing) if missing is not None else _NotFoundError(message)
        return PluginError(f"the Kubernetes API server answered {err.status} to {verb} {resource}: {message}")


class _NotFoundError(Exception):
    """A 404 the caller turns into ``None`` (a Secret that does not exist)."""


def _status(err: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _server_message(err: ApiException) -> str:
    """The API server's ``Status.message`` (it names the user and what they may not do)."""
    return str(_status(err).get("message") or err.reason or "")


def _names_an_object(err: ApiException) -> bool:
    """A 404 about one object (it does not exist) rather than about its kind (not served)."""
    return bool((_status(err).get("details") or {}).get("name"))
