"""``spec.template`` on the runner pod: what it adds and changes, what stays the operator's, and
that a changed template rolls the pods (its hash changes) while an unchanged one does not.

Pure functions of the pool (``runnerpool.pods.template`` and ``runnerpool.pods.merge``); what the
API server makes of the template (its rules, Pod Security) is in ``test_pod_template_server``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from runnerpool import api, naming
from runnerpool.pods import merge, security, template
from runnerpool.pods.spec_memo import SpecMemo

API_URL = "https://api.github.com"
IMAGE = "img:1"

#: What platform teams put in a runner pod template, all at once.
FULL_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "labels": {"azure.workload.identity/use": "true", "team": "ci"},
        "annotations": {"iam.gke.io/gcp-service-account": "ci@project.iam.gserviceaccount.com"},
    },
    "spec": {
        "serviceAccountName": "ci-runner",
        "imagePullSecrets": [{"name": "registry"}],
        "priorityClassName": "ci",
        "runtimeClassName": "gvisor",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ci"]}]}
                    ]
                }
            }
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
        "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["git.internal"]}],
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "ci", "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [{"name": "warm-cache", "image": "busybox:1", "command": ["true"]}],
        "containers": [
            {
                "name": naming.RUNNER_CONTAINER,
                "image": "registry.example.com/runner:2",
                "imagePullPolicy": "Always",
                "env": [{"name": "HTTP_PROXY", "value": "http://proxy:3128"}],
                "envFrom": [{"configMapRef": {"name": "ci-env"}}],
                "resources": {"limits": {"memory": "4Gi"}},
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
            },
            {"name": "proxy", "image": "envoy:1", "ports": [{"containerPort": 3128}]},
        ],
        "volumes": [{"name": "cache", "emptyDir": {}}],
    },
}


def pool(**spec: Any) -> api.RunnerPool:
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": "ci", "namespace": "team", "uid": "pool-uid"},
            "spec": {"organization": "octo-org", **spec},
        }
    )


def pod(**spec: Any) -> dict[str, Any]:
    return template.runner_pod(pool(**spec), IMAGE, API_URL)


def container(body: dict[str, Any], name: str = naming.RUNNER_CONTAINER) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in body["spec"]["containers"] if c["name"] == name)
    return found


def names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


# -- what a template adds and changes -------------------------------------------------------------


def test_a_template_adds_labels_annotations_and_pod_fields_to_the_runner_pod() -> None:
    body = pod(template=FULL_TEMPLATE)
    meta, spec = body["metadata"], body["spec"]
    assert meta["labels"]["azure.workload.identity/use"] == "true"
    assert meta["labels"][naming.POOL_LABEL] == "ci" and naming.TEMPLATE_HASH_LABEL in meta["labels"]
    assert meta["annotations"] == FULL_TEMPLATE["metadata"]["annotations"]
    for field in (
        "imagePullSecrets",
        "priorityClassName",
        "runtimeClassName",
        "affinity",
        "topologySpreadConstraints",
        "dnsConfig",
        "hostAliases",
    ):
        assert spec[field] == FULL_TEMPLATE["spec"][field], field
    # The template's init containers run after the operator's register container.
    register, *others = spec["initContainers"]
    assert register["name"] == naming.REGISTER_CONTAINER
    assert others == FULL_TEMPLATE["spec"]["initContainers"]
    assert names(spec["containers"]) == [naming.RUNNER_CONTAINER, "proxy"]
    assert container(body, "proxy") == FULL_TEMPLATE["spec"]["containers"][1]
    assert names(spec["volumes"]) == [naming.TOKEN_VOLUME, naming.CONFIG_VOLUME, naming.WORK_VOLUME, "cache"]
    assert spec["restartPolicy"] == "OnFailure"
    assert spec["terminationGracePeriodSeconds"] == template.termination_grace_seconds(pool())


def test_the_runner_container_takes_the_templates_image_env_mounts_and_resources() -> None:
    body = pod(
        env=[{"name": "FROM_SPEC", "value": "1"}],
        resources={"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
        template=FULL_TEMPLATE,
    )
    runner = container(body)
    assert runner["image"] == "registry.example.com/runner:2"
    assert runner["imagePullPolicy"] == "Always"
    assert runner["envFrom"] == [{"configMapRef": {"name": "ci-env"}}]
    env = names(runner["env"])
    assert env[: len(env) - 2] == names(container(pod())["env"]), "the operator's env comes first"
    assert env[-2:] == ["FROM_SPEC", "HTTP_PROXY"]
    assert runner["resources"] == {"requests": {"cpu": "500m"}, "limits": {"memory": "4Gi"}}
    assert names(runner["volumeMounts"], "mountPath") == [naming.CONFIG_MOUNT_DIR, naming.WORK_DIR, "/cache"]
    # The register init container is made from the merged runner container.
    register = body["spec"]["initContainers"][0]
    assert register["image"] == runner["image"] and register["securityContext"] == runner["securityContext"]
    assert {e["name"] for e in runner["env"]} <= {e["name"] for e in register["env"]}
    assert runner["securityContext"] == security.runner_security_context()


def test_maps_merge_key_by_key_and_other_lists_are_replaced() -> None:
    tolerations = [{"key": "old", "operator": "Exists"}]
    body = pod(nodeSelector={"arch": "amd64"}, tolerations=tolerations, template=FULL_TEMPLATE)
    assert body["spec"]["nodeSelector"] == {"arch": "amd64", "disk": "ssd"}
    assert body["spec"]["tolerations"] == FULL_TEMPLATE["spec"]["tolerations"]


def test_the_node_placement_demand_matching_reads_is_the_runner_pods() -> None:
    """Demand matching reads the runners' architecture from ``node_placement``; it must place
    them where the pods really go, template and all."""
    for spec in (
        {},
        {"nodeSelector": {"arch": "amd64"}},
        {"nodeSelector": {"arch": "amd64"}, "template": FULL_TEMPLATE},
    ):
        body = pod(**spec)
        placed = template.node_placement(pool(**spec))
        assert placed == {k: body["spec"][k] for k in ("nodeSelector", "affinity") if k in body["spec"]}


def test_a_named_item_of_the_template_merges_into_the_pods_item_of_that_name() -> None:
    over = {
        "spec": {
            "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "shared"}}],
            "containers": [{"name": naming.RUNNER_CONTAINER, "env": [{"name": "FROM_SPEC", "value": "2"}]}],
        }
    }
    body = pod(
        volumes=[{"name": "cache", "emptyDir": {}}],
        volumeMounts=[{"name": "cache", "mountPath": "/cache"}],
        env=[{"name": "FROM_SPEC", "value": "1"}],
        template=over,
    )
    [cache] = [v for v in body["spec"]["volumes"] if v["name"] == "cache"]
    assert cache == {"name": "cache", "emptyDir": {}, "persistentVolumeClaim": {"claimName": "shared"}}
    values = [e.get("value") for e in container(body)["env"] if e["name"] == "FROM_SPEC"]
    assert values == ["2"], "merged by name, not added twice"


def test_a_template_may_loosen_the_restricted_security_defaults() -> None:
    root = {
        "spec": {
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "containers": [
                {"name": naming.RUNNER_CONTAINER, "securityContext": {"allowPrivilegeEscalation": True}}
            ],
        }
    }
    body = pod(template=root)
    assert body["spec"]["securityContext"] == {
        **security.pod_security_context(),
        "runAsUser": 0,
        "runAsNonRoot": False,
    }
    assert container(body)["securityContext"] == {
        "allowPrivilegeEscalation": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_service_account_named_by_the_template_gets_its_token_mounted() -> None:
    assert pod()["spec"]["automountServiceAccountToken"] is False
    named = pod(template={"spec": {"serviceAccountName": "ci-runner"}})["spec"]
    assert named["serviceAccountName"] == "ci-runner" and "automountServiceAccountToken" not in named
    both = {"spec": {"serviceAccountName": "ci-runner", "automountServiceAccountToken": False}}
    assert pod(template=both)["spec"]["automountServiceAccountToken"] is False


def test_without_a_template_the_pod_is_the_operators_alone() -> None:
    operators = template.pod_template(pool(), IMAGE, API_URL)
    assert merge.apply_template(operators, None) == operators
    assert merge.apply_template(operators, api.PodTemplate()) == operators
    assert "annotations" not in pod()["metadata"]


def test_the_template_given_is_not_changed_by_the_merge() -> None:
    given = copy.deepcopy(FULL_TEMPLATE)
    first = pod(template=given)
    first["spec"]["containers"][1]["image"] = "changed"
    assert given == FULL_TEMPLATE
    assert container(pod(template=given), "proxy")["image"] == "envoy:1"


# -- what stays the operator's ----------------------------------------------------------------------

#: Everything of the operator's a template could try to set, past the CRD's rules.
OPERATORS_PARTS: dict[str, Any] = {
    "metadata": {
        "labels": {naming.POOL_LABEL: "other", naming.MANAGED_BY_LABEL: "me", naming.BUSY_LABEL: "true"},
        "annotations": {"karpenter.sh/do-not-disrupt": "true"},
        "name": "fixed",
        "ownerReferences": [{"kind": "Other"}],
    },
    "spec": {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 1,
        "volumes": [
            {"name": naming.TOKEN_VOLUME, "emptyDir": {}},
            {"name": naming.WORK_VOLUME, "emptyDir": {}},
        ],
        "containers": [
            {
                "name": naming.RUNNER_CONTAINER,
                "env": [{"name": "RUNNER_LABELS", "value": "x"}, {"name": "POD_NAME", "value": "x"}],
                "volumeMounts": [{"name": "other", "mountPath": naming.WORK_DIR}],
            }
        ],
    },
}


def test_the_operators_own_parts_are_never_taken_from_a_template() -> None:
    operators = template.pod_template(pool(), IMAGE, API_URL)
    assert merge.merge_pod(operators, OPERATORS_PARTS) == operators


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"metadata": {"name": "x"}}, "spec.template.metadata.name is the operator's"),
        ({"metadata": {"generateName": "x-"}}, "spec.template.metadata.generateName is the operator's"),
        ({"metadata": {"namespace": "x"}}, "spec.template.metadata.namespace is the operator's"),
        ({"metadata": {"ownerReferences": [{}]}}, "spec.template.metadata.ownerReferences is the operator's"),
        ({"metadata": {"labels": {naming.POOL_LABEL: "x"}}}, "spec.template.metadata.labels must not set"),
        (
            {"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}}},
            "spec.template.metadata.annotations must not set",
        ),
        ({"spec": {"restartPolicy": "Never"}}, "spec.template.spec.restartPolicy is the operator's"),
        (
            {"spec": {"terminationGracePeriodSeconds": 30}},
            "set spec.terminationGracePeriodSeconds instead",
        ),
        (
            {"spec": {"volumes": [{"name": naming.WORK_VOLUME}]}},
            "spec.template.spec.volumes must not be named",
        ),
        (
            {"spec": {"containers": [{"name": "runner", "env": [{"name": "GITHUB_URL"}]}]}},
            "containers[runner].env must not set RUNNER_* variables",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "runner", "volumeMounts": [{"name": "v", "mountPath": "/runner-token"}]}
                    ]
                }
            },
            "containers[runner].volumeMounts must not use mountPath",
        ),
    ],
)
def test_the_models_refuse_a_template_that_sets_the_operators_parts(
    over: dict[str, Any], message: str
) -> None:
    """The same rules as the CRD's (``test_pod_template_server`` sends them to the API server)."""
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("*", r"\*")):
        pool(template=over)


def test_a_sidecar_may_use_any_env_and_mount_the_work_volume() -> None:
    sidecar = {
        "name": "docker",
        "env": [{"name": "RUNNER_X", "value": "1"}],
        "volumeMounts": [{"name": naming.WORK_VOLUME, "mountPath": naming.WORK_DIR}],
    }
    body = pod(template={"spec": {"containers": [sidecar]}})
    assert container(body, "docker") == sidecar


def test_every_env_var_the_operator_sets_in_the_runner_container_is_refused_in_a_template() -> None:
    """A new operator env var (another mode, another setting) must be one a template cannot set."""
    for spec in ({}, {"repository": "octo-org/hello", "organization": None}):
        body = template.runner_pod(
            api.RunnerPool.model_validate(
                {
                    "metadata": {"name": "ci", "namespace": "team"},
                    "spec": {"organization": "octo-org", **spec},
                }
            ),
            IMAGE,
            API_URL,
        )
        for env in container(body)["env"]:
            assert api.operator_env(env["name"]), f"{env['name']} may be set by a template"


# -- the hash: a changed template rolls the pods, an unchanged one does not ----------------------------


def test_a_changed_template_changes_the_hash_and_an_unchanged_one_does_not() -> None:
    def hash_of(**spec: Any) -> str:
        return template.wanted_hash(pool(**spec), IMAGE, API_URL)

    base = hash_of(template=FULL_TEMPLATE)
    assert base != hash_of(), "adding a template rolls the pods"
    assert base == hash_of(template=copy.deepcopy(FULL_TEMPLATE))
    reordered = {"spec": dict(reversed(FULL_TEMPLATE["spec"].items())), "metadata": FULL_TEMPLATE["metadata"]}
    assert base == hash_of(template=reordered), "the same template in another key order"
    assert base == hash_of(template=FULL_TEMPLATE, replicas=5), "only the pod template counts"
    changed = copy.deepcopy(FULL_TEMPLATE)
    changed["spec"]["containers"][1]["image"] = "envoy:2"
    relabelled = copy.deepcopy(FULL_TEMPLATE)
    relabelled["metadata"]["labels"]["team"] = "platform"
    annotated = copy.deepcopy(FULL_TEMPLATE)
    annotated["metadata"]["annotations"]["x"] = "y"
    hashes = [hash_of(template=t) for t in (changed, relabelled, annotated)]
    assert base not in hashes and len(set(hashes)) == len(hashes)


def test_the_hash_of_one_parsed_pool_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass and runner-manager round asks; a parsed pool is shared until it changes."""
    built: list[str] = []
    real = template.pod_template
    monkeypatch.setattr(template, "pod_template", lambda *a: built.append("x") or real(*a))
    monkeypatch.setattr(template, "_HASHES", SpecMemo())  # what other tests hashed is no concern here
    shared = pool(template=FULL_TEMPLATE)
    first = template.wanted_hash(shared, IMAGE, API_URL)
    assert all(template.wanted_hash(shared, IMAGE, API_URL) == first for _ in range(5))
    assert len(built) == 1
    edited = pool(template={"metadata": {"labels": {"team": "other"}}})
    assert template.wanted_hash(edited, IMAGE, API_URL) != first, "a new spec is hashed again"
    plain = pool()
    assert template.wanted_hash(plain, IMAGE, API_URL) != template.wanted_hash(plain, "img:2", API_URL)
    assert len(built) == 4, "another default image is hashed again too"


# -- the default pod: Pod Security restricted --------------------------------------------------------


def test_the_default_runner_pod_asks_for_no_more_than_restricted_allows() -> None:
    """The API server's own check is in ``test_pod_template_server``; these are the settings."""
    spec = pod()["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1001,
        "runAsGroup": 1001,
        "fsGroup": 1001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container(pod())["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


# -- docs/pod-template.md -------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "pod-template.md"
SAMPLE = REPO / "deploy" / "samples" / "runnerpool_pod_template.yaml"


def test_the_docs_example_is_a_valid_pool_and_the_sample_is_the_same_pool() -> None:
    example = yaml.safe_load(DOC.read_text().split("```yaml\n", 1)[1].split("```", 1)[0])
    parsed = api.RunnerPool.model_validate(example)
    assert parsed.spec.template is not None and template.runner_pod(parsed, IMAGE, API_URL)
    sample = yaml.safe_load(SAMPLE.read_text())
    assert (sample["metadata"], sample["spec"]["repository"]) == (
        example["metadata"],
        example["spec"]["repository"],
    )
    api.RunnerPool.model_validate(sample)


def test_the_docs_name_every_field_a_template_may_not_set() -> None:
    text = DOC.read_text()
    models = (api.TemplateMetadata, api.TemplatePodSpec, api.TemplateContainer)
    for path in [rule.message.split(" ", 1)[0] for model in models for rule in model.rules]:
        field = path.rsplit(".", 1)[-1]
        assert f"{field}`" in text, f"{path} is not in {DOC.name}"
    reserved = (naming.TOKEN_VOLUME, naming.WORK_VOLUME, naming.TOKEN_MOUNT_DIR, naming.WORK_DIR)
    for name in (*reserved, *naming.RESERVED_ENV, naming.RESERVED_ENV_PREFIX):
        assert f"`{name}" in text, name
