"""The runner pods of a pool with spec.githubServerTLS and spec.proxy (issue 31, GHES bullet).

Both containers (register: config.sh; runner: the listener and the jobs) must trust the pool's
CA and go through its proxy, and a proxy's credentials must reach them from the Secret without
being written into the pod.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api, naming
from runnerpool.pods import connection, template

IMAGE = "runner:1"
GHES = "https://ghe.example.com/api/v3"
CA = {"certificateFrom": {"configMapKeyRef": {"name": "ghes-ca", "key": "ca.pem"}}}


def _pod(**spec: Any) -> dict[str, Any]:
    pool = api.RunnerPool.model_validate(
        {
            "metadata": {"name": "ci", "namespace": "team", "uid": "pool-uid"},
            "spec": {"organization": "octo-org", "githubApiUrl": GHES, **spec},
        }
    )
    return template.runner_pod(pool, IMAGE, GHES)


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod["spec"]
    by_name = {c["name"]: c for c in [*spec["initContainers"], *spec["containers"]]}
    return [by_name[naming.REGISTER_CONTAINER], by_name[naming.RUNNER_CONTAINER]]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_both_containers_mount_the_ca_and_name_it_for_node_and_the_entrypoint() -> None:
    pod = _pod(githubServerTLS=CA)
    assert {
        "name": naming.CA_VOLUME,
        "configMap": {"name": "ghes-ca", "items": [{"key": "ca.pem", "path": "ca.crt"}]},
    } in pod["spec"]["volumes"]
    for container in _containers(pod):
        assert {"name": naming.CA_VOLUME, "mountPath": naming.CA_MOUNT_DIR, "readOnly": True} in container[
            "volumeMounts"
        ]
        env = _env(container)
        assert env["NODE_EXTRA_CA_CERTS"] == connection.CA_FILE == f"{naming.CA_MOUNT_DIR}/ca.crt"
        assert env["RUNNER_CA_FILE"] == connection.CA_FILE


def test_a_ca_in_a_secret_is_mounted_from_the_secret() -> None:
    pod = _pod(githubServerTLS={"certificateFrom": {"secretKeyRef": {"name": "ghes-ca", "key": "ca.pem"}}})
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == naming.CA_VOLUME]
    assert volume == {
        "name": naming.CA_VOLUME,
        "secret": {"secretName": "ghes-ca", "items": [{"key": "ca.pem", "path": "ca.crt"}]},
    }


def test_the_proxy_reaches_both_containers_in_both_cases() -> None:
    pod = _pod(
        proxy={
            "http": {"url": "http://proxy.corp:3128"},
            "https": {"url": "http://proxy.corp:3129"},
            "noProxy": [".svc", "10.0.0.0/8"],
        }
    )
    for container in _containers(pod):
        env = _env(container)
        for name, value in (
            ("http_proxy", "http://proxy.corp:3128"),
            ("https_proxy", "http://proxy.corp:3129"),
            ("no_proxy", ".svc,10.0.0.0/8"),
        ):
            assert env[name] == env[name.upper()] == value


def test_proxy_credentials_come_from_the_secret_and_are_never_in_the_pod() -> None:
    pod = _pod(proxy={"https": {"url": "http://proxy.corp:3128", "credentialSecretRef": "proxy-login"}})
    for container in _containers(pod):
        names = [e["name"] for e in container["env"]]
        env = _env(container)
        user, password = "RUNNER_PROXY_HTTPS_USERNAME", "RUNNER_PROXY_HTTPS_PASSWORD"
        assert env[user] == {"secretKeyRef": {"name": "proxy-login", "key": "username"}}
        assert env[password] == {"secretKeyRef": {"name": "proxy-login", "key": "password"}}
        # $(VAR) expands only to variables defined before it in the list.
        assert names.index(user) < names.index("https_proxy") and names.index(password) < names.index(
            "HTTPS_PROXY"
        )
        assert env["https_proxy"] == env["HTTPS_PROXY"] == f"http://$({user}):$({password})@proxy.corp:3128"
        assert "http_proxy" not in env


def test_a_pool_without_them_keeps_its_pods_and_their_hash() -> None:
    plain = _pod()
    assert naming.CA_VOLUME not in [v["name"] for v in plain["spec"]["volumes"]]
    for container in _containers(plain):
        assert not {"NODE_EXTRA_CA_CERTS", "RUNNER_CA_FILE", "https_proxy", "HTTPS_PROXY"} & set(
            _env(container)
        )
    hashes = {
        p["metadata"]["labels"][naming.TEMPLATE_HASH_LABEL]
        for p in (plain, _pod(githubServerTLS=CA), _pod(proxy={"https": {"url": "http://p:1"}}))
    }
    assert len(hashes) == 3
