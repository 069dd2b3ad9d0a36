"""How a pool's runners reach GitHub: its CA bundle and proxies, in both runner containers.

``spec.githubServerTLS`` mounts the pool's CA bundle (a ConfigMap or Secret key) read-only at
``naming.CA_MOUNT_DIR`` and names it twice: ``NODE_EXTRA_CA_CERTS`` for the Node.js actions
(Node does not read the system store) and ``RUNNER_CA_FILE`` for the entrypoint, which joins it
to the image's public CAs and points ``SSL_CERT_FILE`` at the result for the runner itself
(.NET on OpenSSL), git and curl: ``SSL_CERT_FILE`` replaces the system bundle, so pointing it at
the private CA alone would lose github.com.

``spec.proxy`` becomes ``http_proxy``/``https_proxy``/``no_proxy`` in lower and upper case (the
runner reads the lower case, many tools the upper). A proxy's credentials never appear in the
pod spec: they come from the pool's Secret through ``secretKeyRef`` env vars, and the proxy URL
names them with Kubernetes' ``$(VAR)`` expansion, which resolves when the container starts.

The register container is made from the runner container (``runnerpool.pods.registration``),
so config.sh gets all of it too. A pool that sets neither field gets nothing: its pods, and
their template hash, stay as they were.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api, naming
from runnerpool.domain import with_userinfo

__all__ = ["CA_FILE", "env", "mounts", "volumes"]

CA_FILE = f"{naming.CA_MOUNT_DIR}/ca.crt"
_USERNAME_KEY = "username"
_PASSWORD_KEY = "password"


def volumes(pool: api.RunnerPool) -> list[dict[str, Any]]:
    tls = pool.spec.github_server_tls
    if tls is None:
        return []
    kind, ref = tls.certificate_from.source
    items = [{"key": ref.key, "path": "ca.crt"}]
    if kind == "ConfigMap":
        return [{"name": naming.CA_VOLUME, "configMap": {"name": ref.name, "items": items}}]
    return [{"name": naming.CA_VOLUME, "secret": {"secretName": ref.name, "items": items}}]


def mounts(pool: api.RunnerPool) -> list[dict[str, Any]]:
    if pool.spec.github_server_tls is None:
        return []
    return [{"name": naming.CA_VOLUME, "mountPath": naming.CA_MOUNT_DIR, "readOnly": True}]


def env(pool: api.RunnerPool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if pool.spec.github_server_tls is not None:
        out += [
            {"name": "RUNNER_CA_FILE", "value": CA_FILE},
            {"name": "NODE_EXTRA_CA_CERTS", "value": CA_FILE},
        ]
    proxy = pool.spec.proxy
    if proxy is None:
        return out
    for scheme, server in (("http", proxy.http), ("https", proxy.https)):
        if server is not None:
            out += _proxy_env(scheme, server)
    if proxy.no_proxy:
        out += _both_cases("no_proxy", ",".join(proxy.no_proxy))
    return out


def _proxy_env(scheme: str, server: api.ProxyServer) -> list[dict[str, Any]]:
    if server.credential_secret_ref is None:
        return _both_cases(f"{scheme}_proxy", server.url)
    user, password = (
        f"RUNNER_PROXY_{scheme.upper()}_{key.upper()}" for key in (_USERNAME_KEY, _PASSWORD_KEY)
    )
    secret = server.credential_secret_ref
    return [
        {"name": user, "valueFrom": {"secretKeyRef": {"name": secret, "key": _USERNAME_KEY}}},
        {"name": password, "valueFrom": {"secretKeyRef": {"name": secret, "key": _PASSWORD_KEY}}},
        *_both_cases(f"{scheme}_proxy", with_userinfo(server.url, f"$({user})", f"$({password})")),
    ]


def _both_cases(name: str, value: str) -> list[dict[str, Any]]:
    return [{"name": name, "value": value}, {"name": name.upper(), "value": value}]
