"""The chart's values for the operator's own GitHub CA bundle and proxy (issue 31, GHES bullet).

What the operator's Python honours: ``REQUESTS_CA_BUNDLE`` (a file) and ``HTTP(S)_PROXY`` /
``NO_PROXY``; the proxy's credentials must come from the Secret at start, never into the
rendered manifest (``helm template`` output ends up in CI logs and GitOps repositories).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.test_chart import container, deployment, helm, template

__all__ = ["helm"]  # the session fixture, used by name

VALUES = {
    "githubServerTLS": {"configMapName": "ghes-ca", "key": "bundle.pem"},
    "proxy": {
        "https": "http://proxy.corp:3128",
        "noProxy": [".svc", "10.0.0.0/8"],
        "credentialSecretName": "proxy-login",
    },
}


def test_the_operator_trusts_the_ca_and_goes_through_the_proxy(helm: Path) -> None:
    objects = template(helm, VALUES)
    operator = container(objects)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in operator["env"]}
    assert env["REQUESTS_CA_BUNDLE"] == "/etc/runnerpool/github-ca/ca.crt"
    assert {"name": "github-ca", "mountPath": "/etc/runnerpool/github-ca", "readOnly": True} in operator[
        "volumeMounts"
    ]
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "github-ca",
        "configMap": {"name": "ghes-ca", "items": [{"key": "bundle.pem", "path": "ca.crt"}]},
    } in volumes
    assert env["RUNNERPOOL_PROXY_PASSWORD"] == {"secretKeyRef": {"name": "proxy-login", "key": "password"}}
    names = [e["name"] for e in operator["env"]]
    assert names.index("RUNNERPOOL_PROXY_PASSWORD") < names.index("HTTPS_PROXY")
    assert (
        env["HTTPS_PROXY"]
        == "http://$(RUNNERPOOL_PROXY_USERNAME):$(RUNNERPOOL_PROXY_PASSWORD)@proxy.corp:3128"
    )
    assert env["NO_PROXY"] == ".svc,10.0.0.0/8"
    assert "HTTP_PROXY" not in env


def test_by_default_the_operator_has_neither(helm: Path) -> None:
    rendered = yaml.safe_dump(deployment(template(helm)))
    for name in ("REQUESTS_CA_BUNDLE", "HTTPS_PROXY", "NO_PROXY", "github-ca"):
        assert name not in rendered
