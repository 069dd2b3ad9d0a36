"""The runner pod a pool wants: a pure function of the pool.

Every pod carries the hash of the template it was made from (``naming.TEMPLATE_HASH_LABEL``), the
way a Deployment's ReplicaSets carry ``pod-template-hash``: a pod whose label differs from
the pool's current hash is outdated and is replaced by the rollout rules
(``runnerpool.pods.scaling``, ``runnerpool.runners.retirement``).  The hash covers the whole
pod template (labels and spec, the operator's own defaults included, the pool's
``spec.template`` merged on by ``runnerpool.pods.merge``), so an operator
upgrade that changes the pod rolls the pools too, and it is computed from canonical JSON
so that the same pool always gives the same hash, in every process.

Busy pods are marked by the runner managers (``naming.BUSY_LABEL`` plus the cluster autoscaler's
and Karpenter's do-not-disrupt annotations) and the namespace's PodDisruptionBudget
(``runnerpool.children.disruption_budget``) selects
exactly the marked pods and allows no disruption of them: the eviction API (``kubectl drain``,
the cluster autoscaler, Karpenter) refuses to evict a busy runner and lets an idle one go.
What bypasses the eviction API (a pod or its namespace deleted, a drain with eviction
disabled, a node shutdown) signals the pod directly: the runner image's entrypoint then lets
a busy runner finish its job for ``spec.busyGracePeriod`` (``RUNNER_BUSY_GRACE_SECONDS``),
and the pod's ``terminationGracePeriodSeconds`` is longer, so the kubelet does not kill it first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from runnerpool import api, children, naming
from runnerpool.domain import parse_duration, web_url_for
from runnerpool.pods import connection, dind, kubernetes_mode, merge, registration, security
from runnerpool.pods.spec_memo import SpecMemo

__all__ = [
    "busy_grace_seconds",
    "busy_marked",
    "node_placement",
    "pod_spec",
    "pod_template",
    "runner_labels",
    "runner_pod",
    "template_hash",
    "termination_grace_seconds",
]

_HASH_LENGTH = 10

WORK_DIR = naming.WORK_DIR
_WORK_VOLUME = naming.WORK_VOLUME


def pod_template(pool: api.RunnerPool, default_image: str, default_api_url: str) -> dict[str, Any]:
    """Labels and spec of the pool's runner pods, without the hash that names this template."""
    operators = {
        "metadata": {"labels": children.selector_labels(pool)},
        "spec": pod_spec(pool, default_image, children.api_url(pool, default_api_url)),
    }
    # The register init container is made from the merged runner container: a template's image,
    # env (a proxy) or mounts (a CA bundle) reach config.sh too.
    merged = merge.apply_template(operators, pool.spec.template)
    merged["spec"] = kubernetes_mode.jobs_in_pods_of_their_own(pool, merged["spec"])
    # containerMode dind: the daemon goes before the register container, so that dockerd warms
    # up while config.sh registers (a template may merge into it by name, within dind's rules).
    merged["spec"] = dind.with_daemon_first(
        pool.spec, registration.with_register_container(pool, merged["spec"]), **_daemon_context()
    )
    return merged


def template_hash(template: dict[str, Any]) -> str:
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:_HASH_LENGTH]


def wanted_hash(pool: api.RunnerPool, default_image: str, default_api_url: str) -> str:
    """The hash of the pool's current template, computed once per parsed spec.

    Every pass of the reconciler and every runner-manager round asks for it (nine times per
    pool while it starts), and building and hashing the template was a tenth of the operator's
    CPU at N=100.  The template is a function of the spec alone (with the pool's name and the
    key's defaults), so an equal spec means the same template.  Parsed pools are frozen and new
    per resourceVersion (``runnerpool.reads``): the reconciler and the runner managers ask with
    the parses of different versions, and every status write makes another, so a memo by
    identity alone missed every other time (py-spy at N=300: 0.7 ms CPU per pool).  It compares
    by identity first, then by value (pydantic's ``==``, about 1 µs against 50 µs a hash).
    """
    return _HASHES.get(
        pool,
        (default_image, default_api_url),
        lambda: template_hash(pod_template(pool, default_image, default_api_url)),
    )


#: ``wanted_hash``'s memo, by the default image and API URL besides the spec.
_HASHES: SpecMemo[str] = SpecMemo()


def runner_pod(pool: api.RunnerPool, default_image: str, default_api_url: str) -> dict[str, Any]:
    """A new runner pod of the pool: ``<pool>-<5 random>``, controlled by the pool.

    A JIT pod names its own Secret (in its volume and in an annotation), outside the template
    hash: every pod of a template has the same hash, and its own Secret.
    """
    template = pod_template(pool, default_image, default_api_url)
    annotations = dict(template["metadata"].get("annotations") or {})
    spec = template["spec"]
    jit_secret = registration.jit_secret_name(pool)
    if jit_secret is not None:
        annotations[naming.JIT_SECRET_ANNOTATION] = jit_secret
        spec = registration.with_jit_secret(spec, jit_secret)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": naming.runner_pod_prefix(pool.name),
            "namespace": pool.namespace,
            # The memo's: a burst's pods hash one template once, not once each.
            "labels": {
                **template["metadata"]["labels"],
                naming.TEMPLATE_HASH_LABEL: wanted_hash(pool, default_image, default_api_url),
            },
            # The pool's template may add annotations (runnerpool.pods.merge); a JIT pod has its own.
            **({"annotations": annotations} if annotations else {}),
            "ownerReferences": [children.owner_reference(pool)],
        },
        "spec": spec,
    }


def busy_marked(pod: Mapping[str, Any]) -> bool:
    """The pod carries the operator's busy mark (the disruption budget selects it)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(naming.BUSY_LABEL) == naming.BUSY_VALUE


def runner_labels(pool: api.RunnerPool) -> list[str]:
    """The pool's own label first, so its runners can always be found on GitHub."""
    own = naming.pool_runner_label(pool.namespace, pool.name)
    return [own, *(label for label in pool.spec.labels if label != own)]


def _env(pool: api.RunnerPool, github_api_url: str) -> list[dict[str, Any]]:
    scope = pool.scope
    scope_env = {"enterprise": "RUNNER_ENTERPRISE", "organization": "RUNNER_ORG", "repository": "RUNNER_REPO"}
    fixed: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "RUNNER_POOL_NAME", "value": pool.name},
        {"name": scope_env[scope.kind], "value": scope.name},
        *_runner_group_env(pool),
        {"name": "RUNNER_LABELS", "value": ",".join(runner_labels(pool))},
        {"name": "GITHUB_URL", "value": web_url_for(github_api_url)},
        {"name": "RUNNER_WORKDIR", "value": WORK_DIR},
        {"name": "RUNNER_BUSY_GRACE_SECONDS", "value": str(busy_grace_seconds(pool))},
        *registration.runner_env(pool),
        *connection.env(pool),
    ]
    return fixed + [e.model_dump(by_alias=True, exclude_none=True) for e in pool.spec.env]


def _runner_group_env(pool: api.RunnerPool) -> list[dict[str, Any]]:
    """``RUNNER_GROUP`` (``config.sh --runnergroup``) only for a pool that names a group, so the
    pods (and template hash) of every other pool stay as they were."""
    group = pool.spec.runner_group
    return [] if group is None else [{"name": "RUNNER_GROUP", "value": group}]


def busy_grace_seconds(pool: api.RunnerPool) -> int:
    """How long the entrypoint lets a signalled busy runner finish its job (``spec.busyGracePeriod``)."""
    return int(parse_duration(pool.spec.busy_grace_period).total_seconds())


def termination_grace_seconds(pool: api.RunnerPool) -> int:
    """SIGTERM to SIGKILL: the pool's own, or the busy grace plus time for the runner to stop."""
    if pool.spec.termination_grace_period_seconds is not None:
        return pool.spec.termination_grace_period_seconds
    return busy_grace_seconds(pool) + api.BUSY_EXIT_MARGIN_SECONDS


def _placement(spec: api.RunnerPoolSpec) -> dict[str, Any]:
    """The runner pod's fields that the pool's fixed fields choose its nodes with."""
    pod: dict[str, Any] = {}
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations]
    return pod


def node_placement(pool: api.RunnerPool) -> dict[str, Any]:
    """``nodeSelector`` and ``affinity`` of the pool's runner pods, as the pods have them: the
    fixed fields with ``spec.template`` merged on by the pods' own rule (``merge``). Demand
    matching reads the runners' architecture from it (``runnerpool.demand.matching``): a pool
    put on arm64 nodes through its template registers ARM64 runners. Only these fields are
    built, not the whole pod, of only these fields of the template: matching asks for every
    candidate pool of every delivery (dumping a full template cost 50 µs a look)."""
    over = pool.spec.template.spec if pool.spec.template is not None else None
    taken = {} if over is None else over.model_dump(by_alias=True, exclude_none=True, include=_PLACED)
    merged = merge.merge_pod({"metadata": {}, "spec": _placement(pool.spec)}, {"spec": taken})
    return {key: merged["spec"][key] for key in ("nodeSelector", "affinity") if key in merged["spec"]}


#: ``node_placement``'s fields of a template's pod spec: by their JSON names (a pass-through
#: field's key) and their Python names (should the model come to declare them).
_PLACED = {"nodeSelector", "node_selector", "affinity"}


def _work_mount() -> dict[str, Any]:
    return {"name": _WORK_VOLUME, "mountPath": WORK_DIR}


def _daemon_context() -> dict[str, Any]:
    """What ``runnerpool.pods.dind`` needs of the pod: the work mount it shares, the socket's group."""
    return {"work_mount": _work_mount(), "socket_group": security.RUNNER_GID}


def pod_spec(pool: api.RunnerPool, default_image: str, github_api_url: str) -> dict[str, Any]:
    """The runner pod's spec; ``runnerpool.pods.template`` wraps it into the pool's pods.

    The runner container runs the jobs and never mounts a registration credential: the
    register init container (``runnerpool.pods.registration``) hands it its runner's own
    configuration.
    """
    spec = pool.spec
    container: dict[str, Any] = {
        "name": naming.RUNNER_CONTAINER,
        "image": spec.runner_image or default_image,
        "args": registration.runner_args(),
        "env": _env(pool, github_api_url),
        "securityContext": security.runner_security_context(),
        "volumeMounts": [
            *registration.runner_mounts(),
            _work_mount(),
            *connection.mounts(pool),
            *spec.volume_mounts,
        ],
    }
    if spec.resources is not None:
        container["resources"] = spec.resources.model_dump(by_alias=True, exclude_none=True)
    pod: dict[str, Any] = {
        # One pod, one runner, one job: the ephemeral runner exits 0 after its job, which ends
        # the pod (Succeeded) and the runner managers replace it.  A failure (say config.sh
        # could not reach GitHub) restarts the init container with the kubelet's backoff; a
        # runner container that restarts after its runner started exits 0 at once (entrypoint.sh).
        "restartPolicy": "OnFailure",
        "securityContext": security.pod_security_context(),
        "containers": [container],
        "volumes": [
            *registration.volumes(pool),
            {"name": _WORK_VOLUME, **(spec.work_volume or {"emptyDir": {}})},
            *connection.volumes(pool),
            *spec.volumes,
        ],
    }
    pod["terminationGracePeriodSeconds"] = termination_grace_seconds(pool)
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    else:
        # Runners run untrusted workflow code; they get no API credentials unless asked for.
        pod["automountServiceAccountToken"] = False
    pod.update(_placement(spec))
    # At most one of them changes the pod: a pool has one containerMode.
    return kubernetes_mode.shape(pool, dind.with_docker_daemon(spec, pod, **_daemon_context()))
