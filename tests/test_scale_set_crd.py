"""spec.scaleSet as the API server takes it (issue 34): a pool is a runner scale set from its
creation or never, under a name it keeps, and only with what a scale set uses.

Against kube-apiserver: the rules are CEL (transition rules need the stored object), and each
refusal must say what to change. The Python side of every rule that has one is checked too,
so the operator reads a pool the same way the API server admitted it.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from runnerpool import api

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

SCALING = {"minReplicas": 0, "maxReplicas": 5}


def _body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {"organization": "octo-org", **spec},
    }


def _create(api_client: client.ApiClient, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    created = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, _body(name, **spec)
    )
    return cast(dict[str, Any], created)


def _refusal(call: Any) -> str:
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 422
    return str(refused.value.body)


def test_a_scale_set_pool_round_trips_and_registers_just_in_time(
    api_client: client.ApiClient, namespace: str
) -> None:
    created = _create(
        api_client, namespace, "arc", scaleSet={"name": "linux-x64"}, autoscaling=SCALING, labels=["gpu"]
    )
    assert created["spec"]["scaleSet"] == {"name": "linux-x64"}
    spec = api.RunnerPool.model_validate(created).spec
    assert spec.scale_set is not None and spec.scale_set.name == "linux-x64"
    assert spec.registers_jit, "a scale set's runners take JIT configs from the scale set"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"scaleSet": {"name": "arc"}}, "spec.scaleSet needs spec.autoscaling"),
        (
            {"scaleSet": {"name": "arc"}, "autoscaling": {**SCALING, "repositories": ["app"]}},
            "do not apply to a scale set",
        ),
        (
            {"scaleSet": {"name": "arc"}, "autoscaling": {**SCALING, "webhookSecretRef": {"name": "hooks"}}},
            "do not apply to a scale set",
        ),
        (
            {"scaleSet": {"name": "arc"}, "autoscaling": SCALING, "registration": "token"},
            "token does not apply to a scale set",
        ),
        ({"scaleSet": {"name": "-arc"}, "autoscaling": SCALING}, "spec.scaleSet.name is the label"),
        ({"scaleSet": {"name": "two words"}, "autoscaling": SCALING}, "spec.scaleSet.name is the label"),
    ],
)
def test_what_a_scale_set_cannot_use_is_refused_with_what_to_change(
    api_client: client.ApiClient, namespace: str, spec: dict[str, Any], says: str
) -> None:
    assert says in _refusal(lambda: _create(api_client, namespace, "bad", **spec))
    with pytest.raises(ValidationError, match=says.split(":", maxsplit=1)[0]):
        api.RunnerPool.model_validate(
            {**_body("bad", **spec), "metadata": {"name": "bad", "namespace": "ns"}}
        )


def test_the_name_and_the_kind_of_pool_are_kept_for_life(
    api_client: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    _create(api_client, namespace, "arc", scaleSet={"name": "linux"}, autoscaling=SCALING)
    _create(api_client, namespace, "plain", autoscaling=SCALING)

    def patch(name: str, spec: dict[str, Any]) -> Any:
        return lambda: custom.patch_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name, {"spec": spec}
        )

    assert "spec.scaleSet.name is immutable" in _refusal(patch("arc", {"scaleSet": {"name": "other"}}))
    assert "cannot be added or removed" in _refusal(patch("arc", {"scaleSet": None}))
    assert "cannot be added or removed" in _refusal(patch("plain", {"scaleSet": {"name": "late"}}))
    assert "spec.runnerGroup of a scale set is immutable" in _refusal(patch("arc", {"runnerGroup": "gpu"}))
    patch("plain", {"runnerGroup": "gpu"})()  # a label pool's group may change
    patch("arc", {"autoscaling": {"maxReplicas": 9}})()  # the rest of the pool stays editable
