"""Parsing and dumping of the RunnerPool models, without an API server.

The operator reads objects the API server hands it and writes status back with
``model_dump(by_alias=True, exclude_none=True)``; these tests pin that the two
directions agree with the Kubernetes JSON shape and with each other.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from runnerpool import api, naming
from tests.test_crd_validation import INVALID_SPECS

FULL_OBJECT: dict[str, Any] = {
    "apiVersion": "runnerpool.dev/v1alpha1",
    "kind": "RunnerPool",
    "metadata": {
        "name": "ci",
        "namespace": "builds",
        "uid": "0c2e7c1a-1111-2222-3333-444455556666",
        "generation": 3,
        "resourceVersion": "12345",
        "finalizers": ["runnerpool.dev/deregister-runners"],
    },
    "spec": {
        "organization": "octo-org",
        "replicas": 2,
        "labels": ["gpu"],
        "credentialSecretName": "github-app",
        "githubApiUrl": "https://ghe.example.com/api/v3",
        "runnerImage": "registry.example.com/runner:1",
        "env": [
            {"name": "A", "value": "1"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 2}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "ci", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}],
        "serviceAccountName": "runner",
        "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
        "workVolume": {"emptyDir": {"medium": "Memory"}},
        "recreateDeadline": "24h",
        "busyGracePeriod": "2h",
        "registration": "jit",
        "terminationGracePeriodSeconds": 7300,
    },
    "status": {
        "observedGeneration": 3,
        "replicas": 2,
        "readyReplicas": 1,
        "selector": "runnerpool.dev/pool=ci",
        "tokenExpiresAt": "2030-01-02T03:04:05Z",
        "runners": {"online": 1, "busy": 1, "offline": 0},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "RunnersStarting",
                "message": "1 of 2 runners ready",
                "lastTransitionTime": "2030-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
    },
}


def test_names_and_helpers() -> None:
    assert api.API_VERSION == "runnerpool.dev/v1alpha1"
    assert naming.token_secret_name("ci") == "runner-token-ci"
    assert naming.pool_runner_label("builds", "ci") == "builds/ci"


def test_full_object_round_trips_in_kubernetes_shape() -> None:
    pool = api.RunnerPool.model_validate(FULL_OBJECT)
    assert pool.spec.organization == "octo-org"
    assert pool.spec.credential_secret_name == "github-app"
    assert pool.spec.env[1].value_from == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert pool.spec.resources is not None and pool.spec.resources.limits == {"cpu": 2}
    assert pool.status.token_expires_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert pool.status.conditions[0].observed_generation == 3
    assert pool.model_dump(by_alias=True, exclude_none=True) == FULL_OBJECT


def test_metadata_helpers() -> None:
    pool = api.RunnerPool.model_validate(FULL_OBJECT)
    assert (pool.name, pool.namespace, pool.uid) == ("ci", "builds", FULL_OBJECT["metadata"]["uid"])
    assert pool.generation == 3
    assert pool.finalizers == [naming.POOL_FINALIZER]
    assert not pool.deleting
    deleting = api.RunnerPool.model_validate(
        {**FULL_OBJECT, "metadata": {**FULL_OBJECT["metadata"], "deletionTimestamp": "2030-01-01T00:00:00Z"}}
    )
    assert deleting.deleting


def test_metadata_helpers_on_a_bare_object() -> None:
    pool = api.RunnerPool(spec=api.RunnerPoolSpec(repository="o/r"))
    assert (pool.name, pool.namespace, pool.uid, pool.generation) == ("", "", "", 0)
    assert pool.finalizers == [] and not pool.deleting
    assert pool.api_version == api.API_VERSION and pool.kind == api.KIND


def test_spec_defaults() -> None:
    spec = api.RunnerPoolSpec.model_validate({"repository": "octo-org/hello"})
    assert spec.replicas == 1
    assert spec.credential_secret_name == naming.DEFAULT_CREDENTIAL_SECRET
    assert spec.labels == [] and spec.env == [] and spec.tolerations == []
    assert spec.node_selector == {} and spec.volumes == [] and spec.volume_mounts == []
    assert spec.github_api_url is None and spec.runner_image is None and spec.work_volume is None
    assert spec.recreate_deadline is None and spec.resources is None
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["replicas"] == 1 and dumped["credentialSecretName"] == naming.DEFAULT_CREDENTIAL_SECRET
    assert "organization" not in dumped and "githubApiUrl" not in dumped


def test_status_defaults() -> None:
    status = api.RunnerPool(spec=api.RunnerPoolSpec(repository="o/r")).status
    assert (status.replicas, status.ready_replicas, status.conditions) == (0, 0, [])
    assert status.runners is None and status.selector is None and status.token_expires_at is None
    assert api.RunnerCounts() == api.RunnerCounts(online=0, busy=0, offline=0)


def test_python_names_and_aliases_both_populate() -> None:
    by_alias = api.RunnerPoolSpec.model_validate({"repository": "o/r", "credentialSecretName": "x"})
    by_name = api.RunnerPoolSpec(repository="o/r", credential_secret_name="x")
    assert by_alias == by_name


def test_unknown_fields_are_ignored() -> None:
    spec = api.RunnerPoolSpec.model_validate({"repository": "o/r", "futureField": 1})
    assert "futureField" not in spec.model_dump(by_alias=True)


def test_timestamps_are_rfc3339_utc_seconds() -> None:
    local = timezone(timedelta(hours=2))
    condition = api.Condition(
        type="Ready", status="True", last_transition_time=datetime(2030, 1, 1, 2, 0, 0, 999_999, tzinfo=local)
    )
    assert condition.last_transition_time == datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert condition.model_dump(by_alias=True)["lastTransitionTime"] == "2030-01-01T00:00:00Z"
    assert condition.model_dump(by_alias=True, mode="json")["lastTransitionTime"] == "2030-01-01T00:00:00Z"
    naive = api.RunnerPoolStatus(token_expires_at=datetime(2030, 1, 1))  # naive means UTC
    assert naive.model_dump(by_alias=True)["tokenExpiresAt"] == "2030-01-01T00:00:00Z"


def test_condition_defaults_to_now_in_whole_seconds() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    condition = api.Condition(type="Ready", status="Unknown")
    assert condition.last_transition_time.microsecond == 0
    assert before <= condition.last_transition_time <= datetime.now(UTC)
    assert (condition.reason, condition.message, condition.observed_generation) == ("", "", None)
    with pytest.raises(ValidationError):
        api.Condition(type="Ready", status="Maybe")  # type: ignore[arg-type]


# The API server words these itself; the models raise their own pydantic errors for them.
_SERVER_WORDING = ("Too long", "should be", "Duplicate value", "Required value", "Unsupported value",
                   "must have at most", "spec.labels[0]", "spec.runnerImage")  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [pytest.param(spec, fragment, id=case) for case, spec, fragment in INVALID_SPECS],
)
def test_models_reject_what_the_api_server_rejects(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as caught:
        api.RunnerPoolSpec.model_validate(spec)
    if not any(word in fragment for word in _SERVER_WORDING):
        assert fragment in str(caught.value)


def test_pool_name_rule_is_mirrored() -> None:
    spec = {"repository": "o/r"}
    api.RunnerPool.model_validate({"metadata": {"name": "p" * api.MAX_POOL_NAME_LENGTH}, "spec": spec})
    with pytest.raises(ValidationError, match=r"metadata\.name may have at most"):
        api.RunnerPool.model_validate(
            {"metadata": {"name": "p" * (api.MAX_POOL_NAME_LENGTH + 1)}, "spec": spec}
        )


@pytest.mark.parametrize(
    "spec",
    [
        {"repository": "octo/hello.world_2-x"},
        {"repository": "a/b"},
        {"repository": "o" * 39 + "/" + "r" * 100},
        {"organization": "a"},
        {"organization": "octo-org-2"},
        {"organization": "o" * 39},
        {"repository": "o/r", "replicas": 0, "recreateDeadline": "1h30m15s"},
        {"repository": "o/r", "labels": ["linux", "x64", "gpu.big"], "credentialSecretName": "a.b-c"},
        {"repository": "o/r", "githubApiUrl": "https://ghe.example.com"},
        {"repository": "o/r", "resources": {"limits": {"cpu": "1.5", "memory": "1e9", "x": "-2Ki"}}},
        {"repository": "o/r", "tolerations": [{"operator": "Exists"}]},
    ],
)
def test_models_accept_valid_specs(spec: dict[str, Any]) -> None:
    api.RunnerPoolSpec.model_validate(spec)


@pytest.mark.parametrize(
    ("repository", "ok"),
    [("o" * 39 + "/r", True), ("o" * 40 + "/r", False), ("o/" + "r" * 100, True), ("o/" + "r" * 101, False)],
)
def test_repository_part_lengths(repository: str, ok: bool) -> None:
    if ok:
        api.RunnerPoolSpec(repository=repository)
    else:
        with pytest.raises(ValidationError, match="at most 39 characters and the name at most 100"):
            api.RunnerPoolSpec(repository=repository)


def test_map_lists_reject_duplicate_keys() -> None:
    with pytest.raises(ValidationError, match="duplicate"):
        api.RunnerPoolSpec(repository="o/r", env=[api.EnvVar(name="A", value="1"), api.EnvVar(name="A")])
    with pytest.raises(ValidationError, match="duplicate"):
        api.RunnerPoolSpec(repository="o/r", volumes=[{"name": "v", "emptyDir": {}}, {"name": "v"}])
    ready = {"type": "Ready", "status": "True"}
    with pytest.raises(ValidationError, match="duplicate"):
        api.RunnerPoolStatus.model_validate({"conditions": [ready, ready]})


def test_cel_string_quoting_survives_backslashes_and_quotes() -> None:
    assert api.cel_string(r"^\S+$") == r"'^\\S+$'"
    assert api.cel_string("it's") == r"'it\'s'"


@pytest.mark.parametrize(
    ("container_mode", "registration", "resolved"),
    [
        (None, None, api.REGISTRATION_TOKEN),
        (None, "token", api.REGISTRATION_TOKEN),
        (None, "jit", api.REGISTRATION_JIT),
        ("kubernetes", None, api.REGISTRATION_JIT),
        ("kubernetes", "jit", api.REGISTRATION_JIT),
        ("dind", None, api.REGISTRATION_JIT),
        ("dind", "jit", api.REGISTRATION_JIT),
    ],
)
def test_the_registration_mode_follows_the_container_mode_unless_the_pool_says(
    container_mode: str | None, registration: str | None, resolved: str
) -> None:
    """A CRD default cannot read containerMode: the models resolve an unset registration, once."""
    fields = {"containerMode": container_mode, "registration": registration}
    spec = api.RunnerPoolSpec.model_validate(
        {"organization": "octo-org", **{k: v for k, v in fields.items() if v is not None}}
    )
    assert spec.registration_mode == resolved
    assert spec.registers_jit == (resolved == api.REGISTRATION_JIT)
    assert spec.model_dump(by_alias=True, exclude_none=True).get("registration") == registration


@pytest.mark.parametrize("container_mode", ["kubernetes", "dind"])
def test_a_pool_token_is_refused_where_a_job_could_read_it(container_mode: str) -> None:
    with pytest.raises(ValidationError, match=r"Remove spec\.registration"):
        api.RunnerPoolSpec(organization="octo-org", container_mode=container_mode, registration="token")  # type: ignore[arg-type]
