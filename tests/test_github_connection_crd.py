"""spec.githubServerTLS and spec.proxy, as the API server takes them (issue 31, GHES bullet).

Against kube-apiserver: the rules (exactly one CA source, a proxy URL without credentials in
it, at least one proxy) are CEL, which only the API server runs.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runnerpool import api

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

GHES = "https://ghe.example.com/api/v3"


def _create(api_client: client.ApiClient, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {"organization": "octo-org", "githubApiUrl": GHES, **spec},
    }
    created = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, body
    )
    return cast(dict[str, Any], created)


def test_a_ca_from_a_config_map_and_a_proxy_with_credentials_round_trip(
    api_client: client.ApiClient, namespace: str
) -> None:
    tls = {"certificateFrom": {"configMapKeyRef": {"name": "ghes-ca", "key": "ca.crt"}}}
    proxy = {
        "http": {"url": "http://proxy.corp:3128"},
        "https": {"url": "http://proxy.corp:3128", "credentialSecretRef": "proxy-login"},
        "noProxy": [".svc", "10.0.0.0/8"],
    }
    created = _create(api_client, namespace, "ghes", githubServerTLS=tls, proxy=proxy)
    assert created["spec"]["githubServerTLS"] == tls
    assert created["spec"]["proxy"] == proxy
    parsed = api.RunnerPool.model_validate(created).spec
    assert parsed.github_server_tls is not None
    assert parsed.github_server_tls.certificate_from.source == (
        "ConfigMap",
        api.KeyRef(name="ghes-ca", key="ca.crt"),
    )
    assert parsed.proxy is not None and parsed.proxy.https is not None
    assert parsed.proxy.https.credential_secret_ref == "proxy-login"


def test_a_ca_from_a_secret_is_accepted(api_client: client.ApiClient, namespace: str) -> None:
    tls = {"certificateFrom": {"secretKeyRef": {"name": "ghes-ca", "key": "ca.pem"}}}
    assert _create(api_client, namespace, "secret-ca", githubServerTLS=tls)["spec"]["githubServerTLS"] == tls


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        (
            "githubServerTLS",
            {"certificateFrom": {}},
            "set exactly one of configMapKeyRef or secretKeyRef",
        ),
        (
            "githubServerTLS",
            {
                "certificateFrom": {
                    "configMapKeyRef": {"name": "a", "key": "ca.crt"},
                    "secretKeyRef": {"name": "b", "key": "ca.crt"},
                }
            },
            "set exactly one of configMapKeyRef or secretKeyRef",
        ),
        ("proxy", {"noProxy": [".svc"]}, "spec.proxy: set http, https or both"),
        (
            "proxy",
            {"https": {"url": "http://alice:secret@proxy.corp:3128"}},
            "credentials go in credentialSecretRef",
        ),
        ("proxy", {"http": {"url": "socks5://proxy.corp:1080"}}, "spec.proxy URLs are http://host:port"),
        ("proxy", {"http": {"url": "http://p:3128"}, "noProxy": ["a b"]}, "spec.proxy.noProxy entries"),
        (
            "githubServerTLS",
            {"certificateFrom": {"secretKeyRef": {"name": "runner-token-ci", "key": "token"}}},
            "must not name the operator's credential Secrets",
        ),
        (
            "proxy",
            {"https": {"url": "http://proxy.corp:3128", "credentialSecretRef": "runner-jit-ci-abcde"}},
            "must not name the operator's credential Secrets",
        ),
    ],
    ids=[
        "no-ca-source",
        "two-ca-sources",
        "no-proxy-at-all",
        "credentials-in-url",
        "socks",
        "space-in-no-proxy",
        "ca-from-the-token-secret",
        "proxy-login-from-a-jit-secret",
    ],
)
def test_a_wrong_ca_or_proxy_is_refused_with_what_to_fix(
    api_client: client.ApiClient, namespace: str, field: str, value: Any, fragment: str
) -> None:
    with pytest.raises(ApiException) as caught:
        _create(api_client, namespace, "bad", **{field: value})
    assert caught.value.status == 422, caught.value.body
    assert fragment in str(json.loads(caught.value.body or "{}").get("message", ""))
