"""The generated CRD, installed in a real API server, accepts and rejects what it should.

These run against kube-apiserver rather than the models because the CEL rules,
list types and defaults only mean something once the API server compiles them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runnerpool import api, naming

pytestmark = pytest.mark.usefixtures("runnerpool_crd")


def _custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def _pool(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}


def _create(api_client: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return cast(
        dict[str, Any],
        _custom(api_client).create_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, body
        ),
    )


def _get(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return cast(
        dict[str, Any],
        _custom(api_client).get_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, name),
    )


def _call(method: str, api_client: client.ApiClient, namespace: str, name: str, *body: Any) -> dict[str, Any]:
    """Call a CustomObjectsApi method on one RunnerPool; the client types results as object."""
    bound = getattr(_custom(api_client), method)
    return cast(dict[str, Any], bound(api.GROUP, api.VERSION, namespace, api.PLURAL, name, *body))


def _rejection(caught: pytest.ExceptionInfo[ApiException]) -> str:
    assert caught.value.status == 422, caught.value.body
    return str(json.loads(caught.value.body or "{}").get("message", ""))


def _repo(**extra: Any) -> dict[str, Any]:
    return {"repository": "octo-org/hello-world", **extra}


_OPERATOR_ENV = "spec.env must not set RUNNER_* variables (but RUNNER_DOCKER_WAIT_SECONDS, "

INVALID_SPECS: list[tuple[str, dict[str, Any], str]] = [
    (
        "neither-scope",
        {},
        "set exactly one of spec.repository (owner/name), spec.organization or spec.enterprise",
    ),
    ("both-scopes", _repo(organization="octo-org"), "set exactly one of spec.repository"),
    ("org-and-enterprise", {"organization": "octo-org", "enterprise": "big"}, "set exactly one of"),
    ("enterprise-with-slash", {"enterprise": "big/corp"}, "spec.enterprise must be a GitHub enterprise slug"),
    (
        "group-on-a-repository",
        _repo(runnerGroup="gpu"),
        "spec.runnerGroup is for organization and enterprise",
    ),
    ("group-empty", {"organization": "octo-org", "runnerGroup": ""}, "should be at least 1 chars long"),
    ("group-padded", {"organization": "octo-org", "runnerGroup": " gpu"}, "without leading or trailing"),
    ("repo-without-owner", {"repository": "hello-world"}, "spec.repository must be owner/name"),
    ("repo-owner-hyphen", {"repository": "-octo/hello"}, "spec.repository must be owner/name"),
    ("repo-two-slashes", {"repository": "octo/hello/world"}, "spec.repository must be owner/name"),
    ("repo-owner-too-long", {"repository": "o" * 40 + "/x"}, "the owner may have at most 39 characters"),
    ("repo-dot-dot", {"repository": "octo/.."}, "'.' and '..' are not repository names"),
    ("org-double-hyphen", {"organization": "octo--org"}, "must be a GitHub organization login"),
    ("org-trailing-hyphen", {"organization": "octo-"}, "must be a GitHub organization login"),
    ("org-too-long", {"organization": "o" * 40}, "spec.organization: Too long"),
    ("replicas-negative", _repo(replicas=-1), "should be greater than or equal to 0"),
    ("replicas-huge", _repo(replicas=1001), "should be less than or equal to 1000"),
    ("label-empty", _repo(labels=[""]), "spec.labels[0]"),
    ("label-comma", _repo(labels=["gpu,big"]), "must not contain commas or whitespace"),
    ("label-space", _repo(labels=["gpu big"]), "must not contain commas or whitespace"),
    ("label-slash", _repo(labels=["other-ns/other-pool"]), "reserved for the operator"),
    ("label-duplicate", _repo(labels=["gpu", "gpu"]), "Duplicate value"),
    ("labels-too-many", _repo(labels=[f"l{i}" for i in range(33)]), "must have at most 32 items"),
    ("secret-name-upper", _repo(credentialSecretName="My_Secret"), "must be a valid Kubernetes object name"),
    ("api-url-http", _repo(githubApiUrl="http://ghe.example.com/api/v3"), "must be an https:// URL"),
    ("api-url-query", _repo(githubApiUrl="https://ghe.example.com/api/v3?x=1"), "must be an https:// URL"),
    ("image-empty", _repo(runnerImage=""), "spec.runnerImage"),
    ("image-whitespace", _repo(runnerImage="ghcr.io/x/y: latest"), "image reference without whitespace"),
    ("deadline-days", _repo(recreateDeadline="1d"), "spec.recreateDeadline must be a duration"),
    ("deadline-bare-number", _repo(recreateDeadline="90"), "spec.recreateDeadline must be a duration"),
    ("busy-grace-days", _repo(busyGracePeriod="1d"), "spec.busyGracePeriod must be a duration"),
    ("busy-grace-bare-number", _repo(busyGracePeriod="90"), "spec.busyGracePeriod must be a duration"),
    ("busy-grace-over-a-day", _repo(busyGracePeriod="24h1s"), "spec.busyGracePeriod may be at most 24h"),
    (
        "grace-not-above-default-busy-grace",
        _repo(terminationGracePeriodSeconds=300),
        "spec.terminationGracePeriodSeconds must be longer than spec.busyGracePeriod (default 1h)",
    ),
    (
        "grace-equal-to-busy-grace",
        _repo(busyGracePeriod="10m", terminationGracePeriodSeconds=600),
        "remove terminationGracePeriodSeconds (it is then busyGracePeriod plus 90s), raise it, or lower",
    ),
    ("sa-name-invalid", _repo(serviceAccountName="Runner SA"), "must be a valid Kubernetes object name"),
    # A kubernetes-mode pool's runner account reads the namespace's Secrets: another pool's jobs
    # running as it would read every token and credential there.
    *(
        (f"runner-account-{where}", spec, "must not name a kubernetes-mode pool's runner account")
        for where, spec in (
            ("spec", _repo(serviceAccountName="runnerpool-runner-km")),
            ("template", _repo(template={"spec": {"serviceAccountName": "runnerpool-runner-km"}})),
            ("template-alias", _repo(template={"spec": {"serviceAccount": "runnerpool-runner-km"}})),
        )
    ),
    ("toleration-operator", _repo(tolerations=[{"key": "k", "operator": "Maybe"}]), "Unsupported value"),
    ("toleration-effect", _repo(tolerations=[{"key": "k", "effect": "Sometimes"}]), "Unsupported value"),
    (
        "toleration-exists-value",
        _repo(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        "with operator Exists must not set value",
    ),
    ("toleration-no-key", _repo(tolerations=[{"value": "v"}]), "without key must use operator Exists"),
    (
        "toleration-seconds",
        _repo(tolerations=[{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]),
        "tolerationSeconds only applies to effect NoExecute",
    ),
    ("env-name-digit", _repo(env=[{"name": "1ABC", "value": "x"}]), "env var names must be C identifiers"),
    ("env-name-missing", _repo(env=[{"value": "x"}]), "spec.env[0].name: Required value"),
    (
        "env-value-and-from",
        _repo(env=[{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
        "set either value or valueFrom on an env var, not both",
    ),
    # spec.env comes after the operator's env, and the last of a name wins: RUNNER_CONFIG_DIR
    # under the work volume made registration write the runner's credentials where jobs write.
    *(
        (f"env-overrides-{name}", _repo(env=[{"name": name, "value": "/runner/_work/c"}]), _OPERATOR_ENV)
        for name in ("RUNNER_CONFIG_DIR", "RUNNER_WORKDIR", "POD_NAME", "GITHUB_URL")
    ),
    ("volume-without-name", _repo(volumes=[{"emptyDir": {}}]), "spec.volumes[0].name: Required value"),
    (
        "mount-without-path",
        _repo(volumeMounts=[{"name": "cache"}]),
        "spec.volumeMounts[0].mountPath: Required value",
    ),
    ("quantity-garbage", _repo(resources={"requests": {"cpu": "lots"}}), "resource quantities look like"),
    ("container-mode-unknown", _repo(containerMode="docker"), 'Unsupported value: "docker"'),
    (
        "kubernetes-mode-without-container-mode",
        _repo(kubernetesMode={}),
        "spec.kubernetesMode applies to spec.containerMode: kubernetes only",
    ),
    (
        "kubernetes-mode-with-service-account",
        _repo(containerMode="kubernetes", serviceAccountName="mine"),
        "spec.serviceAccountName cannot be set with containerMode: kubernetes",
    ),
    (
        "kubernetes-mode-with-work-volume",
        _repo(containerMode="kubernetes", workVolume={"emptyDir": {}}),
        "spec.workVolume cannot be set with containerMode: kubernetes",
    ),
    (
        "kubernetes-mode-relative-hook",
        _repo(containerMode="kubernetes", kubernetesMode={"hookPath": "k8s/index.js"}),
        "spec.kubernetesMode.hookPath must be an absolute path",
    ),
    (
        "kubernetes-mode-claim-access-mode",
        _repo(
            containerMode="kubernetes", kubernetesMode={"workVolumeClaim": {"accessModes": ["ReadOnlyMany"]}}
        ),
        "Unsupported value",
    ),
    *(
        (
            f"kubernetes-mode-template-{field}",
            _repo(containerMode="kubernetes", template={"spec": {field: value}}),
            "automountServiceAccountToken cannot be set with containerMode: kubernetes",
        )
        for field, value in (
            ("serviceAccountName", "mine"),
            ("serviceAccount", "mine"),
            ("automountServiceAccountToken", False),
        )
    ),
    ("dind-image-without-dind", _repo(dindImage="docker:28-dind"), "set containerMode: dind or remove"),
    ("dind-image-whitespace", _repo(containerMode="dind", dindImage="docker: x"), "spec.dindImage must be"),
    ("registration-unknown", _repo(registration="pat"), "spec.registration: Unsupported value"),
    *(
        (
            f"registration-token-with-{mode}",
            _repo(containerMode=mode, registration="token"),
            "spec.registration: token cannot be used with containerMode: kubernetes or dind: the "
            "pool-wide registration token would be within a job's reach",
        )
        for mode in ("kubernetes", "dind")
    ),
]


def _container(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def _in_template(key: str, name: str, **fields: Any) -> dict[str, Any]:
    """A pool whose template has one container (``key``: containers or initContainers)."""
    return _repo(template={"spec": {key: [_container(name, image="busybox:1", **fields)]}})


_AT_ANOTHER_PATH = "/var/run/elsewhere"
#: A projected volume with one harmless source and the pool's token Secret.
_PROJECTED_TOKEN = {
    "name": "all",
    "projected": {
        "sources": [{"configMap": {"name": "ca"}}, {"secret": {"name": naming.token_secret_name("p")}}]
    },
}
_MOUNT_REFUSED = "volumeMounts must not mount runner-token or runner-jitconfig or runner-config"
_SECRET_REFUSED = "a volume must not name the operator's credential Secrets (runner-token-*, runner-jit-*)"

#: Ways a pool could put a registration credential in a container other than the operator's
#: register container: its volumes by name, at any path, or the credential Secrets themselves.
_ENV_REFUSED = "must not name the operator's credential Secrets (runner-token-*, runner-jit-*)"
_TOKEN_KEY_REF = {"secretKeyRef": {"name": naming.token_secret_name("p"), "key": naming.TOKEN_SECRET_KEY}}
_TOKEN_ENV = [{"name": "T", "valueFrom": _TOKEN_KEY_REF}]
_CONTAINERS, _INITS = "containers", "initContainers"
CREDENTIAL_LEAKS: list[tuple[str, dict[str, Any], str]] = [
    *(
        (
            f"runner-mounts-{volume}-at-another-path",
            _in_template(
                _CONTAINERS, "runner", volumeMounts=[{"name": volume, "mountPath": _AT_ANOTHER_PATH}]
            ),
            f"spec.template.spec.containers[*].{_MOUNT_REFUSED}, at any path",
        )
        for volume in naming.CREDENTIAL_VOLUMES
    ),
    (
        "sidecar-mounts-the-jit-config",
        _in_template(
            _CONTAINERS,
            "proxy",
            volumeMounts=[{"name": naming.JIT_VOLUME, "mountPath": naming.JIT_MOUNT_DIR}],
        ),
        f"spec.template.spec.containers[*].{_MOUNT_REFUSED}",
    ),
    (
        "init-container-mounts-the-token",
        _in_template(
            _INITS, "copy", volumeMounts=[{"name": naming.TOKEN_VOLUME, "mountPath": _AT_ANOTHER_PATH}]
        ),
        f"spec.template.spec.initContainers[*].{_MOUNT_REFUSED}",
    ),
    (
        "volume-mounts-the-token",
        _repo(volumeMounts=[{"name": naming.TOKEN_VOLUME, "mountPath": _AT_ANOTHER_PATH}]),
        f"spec.{_MOUNT_REFUSED}",
    ),
    (
        "volume-mounts-the-config",
        _repo(volumeMounts=[{"name": naming.CONFIG_VOLUME, "mountPath": _AT_ANOTHER_PATH}]),
        f"spec.{_MOUNT_REFUSED}",
    ),
    (
        "volume-named-like-the-token-volume",
        _repo(volumes=[{"name": naming.TOKEN_VOLUME, "emptyDir": {}}]),
        "spec.volumes must not be named runner-token or runner-jitconfig or runner-config or work",
    ),
    (
        "volume-of-the-token-secret",
        _repo(volumes=[{"name": "t", "secret": {"secretName": naming.token_secret_name("other")}}]),
        _SECRET_REFUSED,
    ),
    (
        "work-volume-of-the-token-secret",
        _repo(workVolume={"secret": {"secretName": naming.token_secret_name("p")}}),
        _SECRET_REFUSED,
    ),
    (
        "template-volume-of-a-jit-secret",
        _repo(
            template={
                "spec": {"volumes": [{"name": "j", "secret": {"secretName": "runner-jit-p-0a1b2c3d4e"}}]}
            }
        ),
        _SECRET_REFUSED,
    ),
    *(
        (
            f"{where}projected-volume-of-the-token-secret",
            spec,
            _SECRET_REFUSED,
        )
        for where, spec in (
            ("", _repo(volumes=[_PROJECTED_TOKEN])),
            ("template-", _repo(template={"spec": {"volumes": [_PROJECTED_TOKEN]}})),
        )
    ),
    ("env-of-the-token-secret", _repo(env=_TOKEN_ENV), f"an env var's valueFrom.secretKeyRef {_ENV_REFUSED}"),
    *(
        (
            f"{key}-env-of-the-token-secret",
            _in_template(key, "c", env=_TOKEN_ENV),
            f"valueFrom.secretKeyRef {_ENV_REFUSED}",
        )
        for key in (_CONTAINERS, _INITS)
    ),
    *(
        (
            f"{key}-env-from-a-jit-secret",
            _in_template(key, "c", envFrom=[{"secretRef": {"name": "runner-jit-p-0a1b2c3d4e"}}]),
            f"spec.template.spec.{key}[*].envFrom[].secretRef {_ENV_REFUSED}",
        )
        for key in (_CONTAINERS, _INITS)
    ),
]
INVALID_SPECS += CREDENTIAL_LEAKS

#: The pool's GitHub credential (a PAT, an App's private key) within a job's reach: every place
#: that refuses the operator's credential Secrets refuses the pool's own credential Secret too.
_OWN = "ci-app"
_OWN_REFUSED = "must not name the pool's credential Secret (spec.credentialSecretName)"
_OWN_ENV = [{"name": "GH_TOKEN", "valueFrom": {"secretKeyRef": {"name": _OWN, "key": "token"}}}]
_OWN_PROJECTED = {
    "name": "all",
    "projected": {"sources": [{"configMap": {"name": "ca"}}, {"secret": {"name": _OWN}}]},
}
_ENV_WHERE = "spec.env, and the env and envFrom of spec.template's containers and init containers,"
_VOLUMES_WHERE = "spec.volumes, spec.workVolume and spec.template.spec.volumes"


def _own(**extra: Any) -> dict[str, Any]:
    return _repo(credentialSecretName=_OWN, **extra)


OWN_CREDENTIAL_LEAKS: list[tuple[str, dict[str, Any], str]] = [
    ("env-of-the-pools-credential", _own(env=_OWN_ENV), f"{_ENV_WHERE} {_OWN_REFUSED}"),
    (
        "env-of-the-default-credential",
        _repo(
            env=[
                {
                    "name": "T",
                    "valueFrom": {"secretKeyRef": {"name": naming.DEFAULT_CREDENTIAL_SECRET, "key": "token"}},
                }
            ]
        ),
        f"{_ENV_WHERE} {_OWN_REFUSED}",
    ),
    *(
        (
            f"{key}-env-of-the-pools-credential",
            {**_in_template(key, "c", env=_OWN_ENV), "credentialSecretName": _OWN},
            _OWN_REFUSED,
        )
        for key in (_CONTAINERS, _INITS)
    ),
    *(
        (
            f"{key}-env-from-the-pools-credential",
            {**_in_template(key, "c", envFrom=[{"secretRef": {"name": _OWN}}]), "credentialSecretName": _OWN},
            f"{_ENV_WHERE} {_OWN_REFUSED}",
        )
        for key in (_CONTAINERS, _INITS)
    ),
    (
        "volume-of-the-pools-credential",
        _own(volumes=[{"name": "gh", "secret": {"secretName": _OWN}}]),
        f"{_VOLUMES_WHERE} (secret.secretName, projected.sources[].secret.name) {_OWN_REFUSED}",
    ),
    ("projected-volume-of-the-pools-credential", _own(volumes=[_OWN_PROJECTED]), _OWN_REFUSED),
    ("work-volume-of-the-pools-credential", _own(workVolume={"secret": {"secretName": _OWN}}), _OWN_REFUSED),
    (
        "template-volume-of-the-pools-credential",
        _own(template={"spec": {"volumes": [_OWN_PROJECTED]}}),
        f"{_VOLUMES_WHERE} (secret.secretName, projected.sources[].secret.name) {_OWN_REFUSED}",
    ),
    # The CA bundle's key is mounted in the runner container: the token or the private key as
    # the CA file put it in every job's reach while the pool's registration token lasted.
    *(
        (
            f"ca-is-the-pools-{key}",
            _own(githubServerTLS={"certificateFrom": {"secretKeyRef": {"name": _OWN, "key": key}}}),
            "must not name the token or private key of the pool's credential Secret",
        )
        for key in naming.SECRET_CREDENTIAL_KEYS
    ),
]
INVALID_SPECS += OWN_CREDENTIAL_LEAKS


def test_a_ca_bundle_beside_the_token_in_the_credential_secret_is_accepted(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Only the named key reaches the runners: a CA kept beside the token (common on a GHES)
    is the CA, not the credential, and such stored pools must stay readable."""
    spec = _own(githubServerTLS={"certificateFrom": {"secretKeyRef": {"name": _OWN, "key": "ca.crt"}}})
    created = _create(api_client, namespace, _pool("ca-beside", spec))
    api.RunnerPool.model_validate(created)


def test_a_token_volume_mounted_at_another_path_in_the_runner_container_is_refused(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The path rule alone let this through: the token landed in the container that runs the jobs."""
    runner = _container("runner", volumeMounts=[{"name": naming.TOKEN_VOLUME, "mountPath": _AT_ANOTHER_PATH}])
    with pytest.raises(ApiException) as caught:
        _create(api_client, namespace, _pool("leak", _repo(template={"spec": {"containers": [runner]}})))
    message = _rejection(caught)
    assert "spec.template.spec.containers[0]" in message
    assert "must not mount runner-token or runner-jitconfig or runner-config, at any path" in message
    assert "Mount a volume of your own, named otherwise" in message


def test_volumes_mounts_and_env_of_ones_own_secrets_are_accepted(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Only the operator's credential names are refused: a CA bundle, a projected token of one's own."""
    own = [
        {"name": "ca", "secret": {"secretName": "runner-ca", "defaultMode": 0o444}},
        {
            "name": "mixed",
            "projected": {
                "sources": [
                    {"secret": {"name": "registry-auth"}},
                    {"serviceAccountToken": {"path": "token", "audience": "vault"}},
                ]
            },
        },
    ]
    mounts = [{"name": "ca", "mountPath": "/etc/ca"}, {"name": "mixed", "mountPath": "/etc/mixed"}]
    env = [{"name": "REGISTRY", "valueFrom": {"secretKeyRef": {"name": "registry-auth", "key": "token"}}}]
    env_from = [{"secretRef": {"name": "proxy-settings"}}, {"configMapRef": {"name": "ci"}}]
    spec = _repo(
        volumes=own[:1],
        volumeMounts=mounts[:1],
        env=env,
        template={
            "spec": {
                "volumes": own[1:],
                "containers": [_container("runner", volumeMounts=mounts[1:], env=env, envFrom=env_from)],
                "initContainers": [
                    _container("warm", image="busybox:1", volumeMounts=mounts, env=env, envFrom=env_from)
                ],
            }
        },
    )
    created = _create(api_client, namespace, _pool("own", spec))
    assert created["spec"]["volumes"] == own[:1]
    assert created["spec"]["env"] == env
    assert created["spec"]["template"] == spec["template"], "nothing pruned"
    assert api.RunnerPool.model_validate(created).spec.template is not None


@pytest.mark.parametrize("mode", ["kubernetes", "dind"])
def test_kubernetes_and_dind_pools_register_just_in_time_unless_told(
    api_client: client.ApiClient, namespace: str, mode: str
) -> None:
    """No CRD default: the stored pool says nothing, and the operator reads it as jit."""
    created = _create(api_client, namespace, _pool(f"{mode}-default", _repo(containerMode=mode)))
    assert "registration" not in created["spec"]
    assert api.RunnerPool.model_validate(created).spec.registers_jit
    told = _create(api_client, namespace, _pool(f"{mode}-jit", _repo(containerMode=mode, registration="jit")))
    assert api.RunnerPool.model_validate(told).spec.registration_mode == api.REGISTRATION_JIT


def test_a_template_names_the_account_of_other_pools_and_not_much_else_of_kubernetes_mode(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The operator owns the account only in kubernetes mode: elsewhere a template may set it,
    and a kubernetes-mode template keeps every other pod field."""
    account = {"serviceAccountName": "ci", "automountServiceAccountToken": True}
    plain = _create(api_client, namespace, _pool("plain", _repo(template={"spec": account})))
    assert plain["spec"]["template"]["spec"] == account
    other = {"priorityClassName": "ci", "containers": [{"name": "runner", "image": "mine:1"}]}
    k8s = _create(
        api_client, namespace, _pool("k8s", _repo(containerMode="kubernetes", template={"spec": other}))
    )
    assert k8s["spec"]["template"]["spec"] == other
    with pytest.raises(ValueError, match="automountServiceAccountToken cannot be set"):
        api.RunnerPoolSpec.model_validate(_repo(containerMode="kubernetes", template={"spec": account}))


def test_kubernetes_mode_round_trips_through_the_models(api_client: client.ApiClient, namespace: str) -> None:
    claim = api.WorkVolumeClaim(
        storage_class_name="fast-ssd", storage="20Gi", access_modes=["ReadWriteOncePod"]
    )
    spec = api.RunnerPoolSpec(
        repository="octo-org/hello-world",
        container_mode="kubernetes",
        kubernetes_mode=api.KubernetesMode(work_volume_claim=claim, hook_path="/opt/hooks/index.js"),
    )
    sent = api.RunnerPool(metadata={"name": "k8s"}, spec=spec)
    created = _create(api_client, namespace, sent.model_dump(by_alias=True, exclude_none=True))
    assert created["spec"] == spec.model_dump(by_alias=True, exclude_none=True)
    assert api.RunnerPool.model_validate(created).spec == spec


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [pytest.param(spec, fragment, id=case) for case, spec, fragment in INVALID_SPECS],
)
def test_invalid_spec_is_rejected(
    api_client: client.ApiClient, namespace: str, spec: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ApiException) as caught:
        _create(api_client, namespace, _pool("bad", spec))
    assert fragment in _rejection(caught)


def test_pool_name_length_is_limited(api_client: client.ApiClient, namespace: str) -> None:
    too_long = "p" * (api.MAX_POOL_NAME_LENGTH + 1)
    with pytest.raises(ApiException) as caught:
        _create(api_client, namespace, _pool(too_long, _repo()))
    assert f"metadata.name may have at most {api.MAX_POOL_NAME_LENGTH} characters" in _rejection(caught)
    longest = "p" * api.MAX_POOL_NAME_LENGTH
    assert _create(api_client, namespace, _pool(longest, _repo()))["metadata"]["name"] == longest


@pytest.mark.parametrize(
    "scope",
    [
        {"repository": "octo-org/hello.world_2"},
        {"organization": "octo-org"},
        {"enterprise": "big-corp", "runnerGroup": "GPU runners"},
    ],
    ids=["repo", "org", "enterprise"],
)
def test_valid_pool_gets_defaults(
    api_client: client.ApiClient, namespace: str, scope: dict[str, str]
) -> None:
    created = _create(api_client, namespace, _pool("ok", scope))
    assert created["spec"] == {
        **scope,
        "replicas": 1,
        "credentialSecretName": naming.DEFAULT_CREDENTIAL_SECRET,
        "busyGracePeriod": api.DEFAULT_BUSY_GRACE_PERIOD,
    }
    parsed = api.RunnerPool.model_validate(created)
    assert parsed.spec.replicas == 1
    assert parsed.spec.registration_mode == api.REGISTRATION_TOKEN
    assert parsed.name == "ok" and parsed.namespace == namespace and parsed.generation == 1


def test_full_spec_round_trips_through_the_models(api_client: client.ApiClient, namespace: str) -> None:
    """Every field the models know survives the API server (nothing pruned or renamed)."""
    spec = api.RunnerPoolSpec(
        organization="octo-org",
        runner_group="GPU runners",
        replicas=3,
        labels=["gpu", "big-disk"],
        credential_secret_name="github-app",
        github_api_url="https://ghe.example.com/api/v3",
        runner_image="registry.example.com/runner:1.2.3",
        container_mode="dind",
        dind_image="registry.example.com/docker:28-dind",
        env=[
            api.EnvVar(name="ACTIONS_RUNNER_DEBUG", value="true"),
            # The few RUNNER_* a pool tunes (naming.POOL_RUNNER_ENV): dind's wait for dockerd.
            api.EnvVar(name="RUNNER_DOCKER_WAIT_SECONDS", value="300"),
            api.EnvVar(name="RUNNER_TOOL_CACHE", value="/opt/hostedtoolcache"),
            api.EnvVar(name="NODE", value_from={"fieldRef": {"fieldPath": "spec.nodeName"}}),
        ],
        resources=api.Resources(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": 2}),
        node_selector={"kubernetes.io/arch": "amd64"},
        tolerations=[
            api.Toleration(key="dedicated", operator="Equal", value="ci", effect="NoSchedule"),
            api.Toleration(operator="Exists"),
            api.Toleration(key="node.kubernetes.io/unreachable", effect="NoExecute", toleration_seconds=30),
        ],
        service_account_name="runner",
        volumes=[{"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}}],
        volume_mounts=[{"name": "cache", "mountPath": "/cache", "readOnly": True}],
        work_volume={"ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
        recreate_deadline="1h30m",
        busy_grace_period="24h",
        termination_grace_period_seconds=api.MAX_TERMINATION_GRACE_SECONDS,
    )
    sent = api.RunnerPool(metadata={"name": "full"}, spec=spec)
    created = _create(api_client, namespace, sent.model_dump(by_alias=True, exclude_none=True))
    assert created["spec"] == spec.model_dump(by_alias=True, exclude_none=True)
    assert api.RunnerPool.model_validate(created).spec == spec


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"repository": "octo-org/one"}, {"repository": "octo-org/two"}),
        ({"repository": "octo-org/one"}, {"organization": "octo-org"}),
        ({"organization": "octo-org"}, {"organization": "other-org"}),
        ({"enterprise": "big"}, {"enterprise": "other"}),
        ({"organization": "octo-org"}, {"enterprise": "big"}),
        (
            {"repository": "octo-org/one", "githubApiUrl": "https://ghe.example.com/api/v3"},
            {"repository": "octo-org/one", "githubApiUrl": "https://ghe2.example.com/api/v3"},
        ),
        (
            {"repository": "octo-org/one"},
            {"repository": "octo-org/one", "githubApiUrl": "https://x.example.com"},
        ),
    ],
    ids=[
        "repo-renamed",
        "repo-to-org",
        "org-renamed",
        "enterprise-renamed",
        "org-to-enterprise",
        "another-github",
        "github-named",
    ],
)
def test_scope_is_immutable(
    api_client: client.ApiClient, namespace: str, before: dict[str, str], after: dict[str, str]
) -> None:
    created = _create(api_client, namespace, _pool("fixed", before))
    created["spec"] = {**{k: v for k, v in created["spec"].items() if k not in before}, **after}
    with pytest.raises(ApiException) as caught:
        _call("replace_namespaced_custom_object", api_client, namespace, "fixed", created)
    assert (
        "spec.repository, spec.organization, spec.enterprise and spec.githubApiUrl are immutable"
        in _rejection(caught)
    )


def test_other_fields_stay_mutable(api_client: client.ApiClient, namespace: str) -> None:
    _create(api_client, namespace, _pool("mutable", _repo()))
    patch = {"spec": {"replicas": 4, "labels": ["x"]}}
    patched = _call("patch_namespaced_custom_object", api_client, namespace, "mutable", patch)
    assert patched["spec"]["replicas"] == 4 and patched["spec"]["labels"] == ["x"]
    assert patched["metadata"]["generation"] == 2


def test_scale_subresource_drives_spec_replicas(api_client: client.ApiClient, namespace: str) -> None:
    _create(api_client, namespace, _pool("scaled", _repo(replicas=2)))
    scale = _call("get_namespaced_custom_object_scale", api_client, namespace, "scaled")
    assert scale["spec"]["replicas"] == 2
    _call("patch_namespaced_custom_object_scale", api_client, namespace, "scaled", {"spec": {"replicas": 5}})
    assert _get(api_client, namespace, "scaled")["spec"]["replicas"] == 5
    # The scale subresource reads replicas and selector from status, where the operator puts them.
    status = api.RunnerPoolStatus(replicas=5, selector=f"{naming.POOL_LABEL}=scaled")
    body = {"status": status.model_dump(by_alias=True, exclude_none=True)}
    _call("patch_namespaced_custom_object_status", api_client, namespace, "scaled", body)
    scale = _call("get_namespaced_custom_object_scale", api_client, namespace, "scaled")
    assert scale["status"]["replicas"] == 5
    assert scale["status"]["selector"] == f"{naming.POOL_LABEL}=scaled"


def test_scale_subresource_enforces_replica_bounds(api_client: client.ApiClient, namespace: str) -> None:
    _create(api_client, namespace, _pool("bounded", _repo()))
    with pytest.raises(ApiException) as caught:
        body = {"spec": {"replicas": api.MAX_REPLICAS + 1}}
        _call("patch_namespaced_custom_object_scale", api_client, namespace, "bounded", body)
    assert "should be less than or equal to" in _rejection(caught)


def test_status_is_a_subresource(api_client: client.ApiClient, namespace: str) -> None:
    created = _create(api_client, namespace, {**_pool("stat", _repo()), "status": {"replicas": 7}})
    assert "status" not in created
    created["status"] = {"readyReplicas": 3}
    replaced = _call("replace_namespaced_custom_object", api_client, namespace, "stat", created)
    assert "status" not in replaced
    status = api.RunnerPoolStatus(
        observed_generation=1,
        replicas=1,
        ready_replicas=1,
        token_expires_at=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
        runners=api.RunnerCounts(online=1),
        conditions=[api.Condition(type="Ready", status="True", reason="RunnersOnline", message="1/1")],
    )
    body = {"status": status.model_dump(by_alias=True, exclude_none=True)}
    written = _call("patch_namespaced_custom_object_status", api_client, namespace, "stat", body)
    assert written["metadata"]["generation"] == 1, "a status write must not bump the generation"
    assert api.RunnerPoolStatus.model_validate(written["status"]) == status


def test_tracked_jobs_cost_no_field_ownership_per_job(api_client: client.ApiClient, namespace: str) -> None:
    """The receiver writes one job per delivery into ``status.demand.jobs``: the stored pool
    must not grow ~80 bytes of ``managedFields`` per job (every write re-reads them), and a
    merge patch of one job must still keep the others."""
    _create(api_client, namespace, _pool("tracked", _repo(autoscaling={"maxReplicas": 5})))
    at = "2030-01-02T03:04:05Z"

    def record(number: int) -> dict[str, Any]:
        job = {"state": "queued", "repository": "octo-org/hello-world", "updatedAt": at}
        body = {"status": {"demand": {"queued": number, "jobs": {str(9_000_000 + number): job}}}}
        return _call("patch_namespaced_custom_object_status", api_client, namespace, "tracked", body)

    def ownership(written: dict[str, Any]) -> str:
        return json.dumps(written["metadata"]["managedFields"])

    first = record(1)
    for number in range(2, 41):
        written = record(number)
    assert len(written["status"]["demand"]["jobs"]) == 40, "each patch adds its job to the others"
    assert "9000040" not in ownership(written), "field ownership names each job"
    assert len(ownership(written)) == len(ownership(first))


# ------------------------------------------------------------------ pools that follow demand


def _auto(**autoscaling: Any) -> dict[str, Any]:
    return {"maxReplicas": 5, **autoscaling}


INVALID_AUTOSCALING: list[tuple[str, dict[str, Any], str]] = [
    (
        "min-above-max",
        _repo(autoscaling=_auto(minReplicas=6)),
        "spec.autoscaling.minReplicas must not be above spec.autoscaling.maxReplicas",
    ),
    (
        "min-idle-above-max",
        _repo(autoscaling=_auto(minIdle=6)),
        "spec.autoscaling.minIdle must not be above spec.autoscaling.maxReplicas",
    ),
    ("min-idle-negative", _repo(autoscaling=_auto(minIdle=-1)), "should be greater than or equal to 0"),
    ("max-missing", _repo(autoscaling={"minReplicas": 0}), "spec.autoscaling.maxReplicas: Required value"),
    ("max-zero", _repo(autoscaling=_auto(maxReplicas=0)), "should be greater than or equal to 1"),
    ("min-negative", _repo(autoscaling=_auto(minReplicas=-1)), "should be greater than or equal to 0"),
    ("max-huge", _repo(autoscaling=_auto(maxReplicas=1001)), "should be less than or equal to 1000"),
    (
        "delay-days",
        _repo(autoscaling=_auto(scaleDownDelay="1d")),
        "spec.autoscaling.scaleDownDelay must be a duration",
    ),
    (
        "replicas-above-max",
        _repo(replicas=8, autoscaling=_auto()),
        "spec.replicas is above spec.autoscaling.maxReplicas",
    ),
    (
        "repositories-on-a-repository-pool",
        _repo(autoscaling=_auto(repositories=["other"])),
        "spec.autoscaling.repositories is for organization and enterprise pools",
    ),
    (
        "repositories-with-owner",
        {"organization": "octo-org", "autoscaling": _auto(repositories=["octo-org/x"])},
        "of an organization pool lists repository names without the owner",
    ),
    (
        "enterprise-repositories-without-owner",
        {"enterprise": "big", "autoscaling": _auto(repositories=["x"])},
        "of an enterprise pool lists repositories as owner/name",
    ),
    (
        "repositories-two-slashes",
        {"enterprise": "big", "autoscaling": _auto(repositories=["a/b/c"])},
        "owner/name for an enterprise pool",
    ),
    (
        "webhook-secret-without-name",
        _repo(autoscaling=_auto(webhookSecretRef={"key": "secret"})),
        "spec.autoscaling.webhookSecretRef.name: Required value",
    ),
    (
        "webhook-secret-bad-key",
        _repo(autoscaling=_auto(webhookSecretRef={"name": "hooks", "key": "a/b"})),
        "a Secret key is made of letters, digits",
    ),
    # The webhook secret is copied where the internet-facing receiver reads it.
    (
        "webhook-secret-is-the-default-credential",
        _repo(autoscaling=_auto(webhookSecretRef={"name": "runnerpool-github-cred", "key": "token"})),
        "webhookSecretRef must name a Secret of its own",
    ),
    (
        "webhook-secret-is-the-pools-credential",
        _repo(credentialSecretName="ci-app", autoscaling=_auto(webhookSecretRef={"name": "ci-app"})),
        "webhookSecretRef must name a Secret of its own",
    ),
    (
        "webhook-secret-is-a-token-secret",
        _repo(autoscaling=_auto(webhookSecretRef={"name": "runner-token-ci", "key": "token"})),
        "webhookSecretRef must name a Secret of its own",
    ),
]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [pytest.param(spec, fragment, id=case) for case, spec, fragment in INVALID_AUTOSCALING],
)
def test_contradictory_autoscaling_is_rejected(
    api_client: client.ApiClient, namespace: str, spec: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ApiException) as caught:
        _create(api_client, namespace, _pool("bad", spec))
    assert fragment in _rejection(caught)
    # The models refuse the same specs (structural checks included), so Python cannot build them.
    with pytest.raises(ValueError, match=r".+"):
        api.RunnerPoolSpec.model_validate(spec)


def test_autoscaling_pool_gets_defaults_and_round_trips(api_client: client.ApiClient, namespace: str) -> None:
    created = _create(
        api_client,
        namespace,
        _pool("auto", {"organization": "octo-org", "autoscaling": _auto(repositories=["a"])}),
    )
    assert created["spec"]["autoscaling"] == {
        "minReplicas": 0,
        "maxReplicas": 5,
        "minIdle": 0,
        "scaleDownDelay": api.DEFAULT_SCALE_DOWN_DELAY,
        "repositories": ["a"],
    }
    parsed = api.RunnerPool.model_validate(created).spec.autoscaling
    assert parsed == api.Autoscaling(min_replicas=0, max_replicas=5, repositories=["a"])


def test_a_webhook_secret_ref_gets_its_default_key(api_client: client.ApiClient, namespace: str) -> None:
    spec = _repo(autoscaling=_auto(webhookSecretRef={"name": "hooks"}))
    created = _create(api_client, namespace, _pool("own", spec))
    assert created["spec"]["autoscaling"]["webhookSecretRef"] == {"name": "hooks", "key": "webhook-secret"}
    parsed = api.RunnerPool.model_validate(created).spec.autoscaling
    assert parsed is not None and parsed.webhook_secret_ref == api.WebhookSecretRef(name="hooks")


def test_kubectl_scale_is_refused_while_a_pool_follows_demand(
    api_client: client.ApiClient, namespace: str
) -> None:
    _create(api_client, namespace, _pool("auto", _repo(autoscaling=_auto())))
    with pytest.raises(ApiException) as caught:
        _call(
            "patch_namespaced_custom_object_scale", api_client, namespace, "auto", {"spec": {"replicas": 3}}
        )
    assert "spec.replicas cannot change while spec.autoscaling is set" in _rejection(caught)
    # Bounds may change; so may the mode, and replicas with it.
    patch = {"spec": {"autoscaling": _auto(maxReplicas=9, minReplicas=1)}}
    assert (
        _call("patch_namespaced_custom_object", api_client, namespace, "auto", patch)["spec"]["autoscaling"][
            "minReplicas"
        ]
        == 1
    )
    fixed = {"spec": {"autoscaling": None, "replicas": 4}}
    assert (
        _call("patch_namespaced_custom_object", api_client, namespace, "auto", fixed)["spec"]["replicas"] == 4
    )


def test_demand_status_round_trips(api_client: client.ApiClient, namespace: str) -> None:
    _create(api_client, namespace, _pool("demand", _repo(autoscaling=_auto())))
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    status = api.RunnerPoolStatus(
        desired_replicas=2,
        demand=api.Demand(
            queued=1,
            busy=1,
            jobs={
                "11": api.TrackedJob(state="queued", repository="octo-org/hello-world", updated_at=when),
                "12": api.TrackedJob(
                    state="in_progress", repository="octo-org/hello-world", runner="r-1", updated_at=when
                ),
            },
        ),
    )
    body = {"status": status.model_dump(by_alias=True, exclude_none=True)}
    written = _call("patch_namespaced_custom_object_status", api_client, namespace, "demand", body)
    assert api.RunnerPoolStatus.model_validate(written["status"]) == status


def test_an_idle_buffer_as_large_as_max_is_accepted(api_client: client.ApiClient, namespace: str) -> None:
    created = _create(api_client, namespace, _pool("warm", _repo(autoscaling=_auto(minIdle=5))))
    assert created["spec"]["autoscaling"]["minIdle"] == 5
    parsed = api.RunnerPool.model_validate(created).spec.autoscaling
    assert parsed is not None and parsed.min_idle == 5
