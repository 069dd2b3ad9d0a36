"""Every name the operator puts on objects, in one place: labels, annotations, finalizers,
the names of the objects it makes, keys and container names.

They are the operator's contract with the cluster (selectors, a Pod's disruption budget,
``kubectl`` one-liners in docs/operating.md, an upgrade that must recognise what an earlier
version made), so each is written once, here, below everything else; this module imports
nothing of the operator.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "APP_PRIVATE_KEY_KEY",
    "ARC_APP_PRIVATE_KEY_KEY",
    "ARC_PAT_KEY",
    "BUSY_ANNOTATIONS",
    "BUSY_DISRUPTION_BUDGET",
    "BUSY_LABEL",
    "BUSY_VALUE",
    "CA_MOUNT_DIR",
    "CA_VOLUME",
    "CONFIG_MOUNT_DIR",
    "CONFIG_VOLUME",
    "CREDENTIAL_FINALIZER",
    "CREDENTIAL_LABEL",
    "CREDENTIAL_LOST_ANNOTATION",
    "CREDENTIAL_SELECTOR",
    "CREDENTIAL_VALUE",
    "CREDENTIAL_VOLUMES",
    "DEFAULT_CREDENTIAL_SECRET",
    "GENERATED_NAME_SUFFIX",
    "HOOKS_JOB_POD_LABEL",
    "JIT_MOUNT_DIR",
    "JIT_RUNNER_ID_ANNOTATION",
    "JIT_SECRET_ANNOTATION",
    "JIT_SECRET_KEY",
    "JIT_SECRET_PREFIX",
    "JIT_SECRET_SUFFIX",
    "JIT_VOLUME",
    "JOB_PODS_DISRUPTION_BUDGET",
    "MANAGED_BY_LABEL",
    "MANAGED_BY_SELECTOR",
    "MANAGED_BY_VALUE",
    "MAY_HAVE_RUNNERS_ANNOTATION",
    "NAMESPACE_BUDGETS",
    "NAMESPACE_CLUSTER_ROLE",
    "OPERATOR_MOUNT_PATHS",
    "OPERATOR_PREFIX",
    "OPERATOR_VOLUMES",
    "PAT_KEY",
    "POOL_FINALIZER",
    "POOL_LABEL",
    "POOL_RUNNER_ENV",
    "REGISTER_CONTAINER",
    "REQUIRE_JOB_CONTAINER_ENV",
    "RESERVED_ENV",
    "RESERVED_ENV_PREFIX",
    "RUNNER_ACCOUNT_PREFIX",
    "RUNNER_CONTAINER",
    "SECRET_CREDENTIAL_KEYS",
    "TEMPLATE_HASH_LABEL",
    "TOKEN_EXPIRY_ANNOTATION",
    "TOKEN_ISSUED_ANNOTATION",
    "TOKEN_MOUNT_DIR",
    "TOKEN_SECRET_KEY",
    "TOKEN_SECRET_PREFIX",
    "TOKEN_VOLUME",
    "WORK_DIR",
    "WORK_VOLUME",
    "disruption_budget_name",
    "is_pool_runner_label",
    "jit_secret_name",
    "pool_runner_label",
    "runner_account_name",
    "runner_pod_name_pattern",
    "runner_pod_prefix",
    "token_secret_name",
    "without_drawn_names",
    "without_runner_pod_names",
]

# -- finalizers -----------------------------------------------------------------------------------

#: On every RunnerPool: its runners are deregistered on GitHub before it goes.
POOL_FINALIZER = "runnerpool.dev/deregister-runners"
#: On a credential Secret while a pool that is not yet finalized needs it.
CREDENTIAL_FINALIZER = "runnerpool.dev/credential-in-use"
#: On the RoleBindings that enable the operator in a namespace, while a pool there still has to
#: deregister (``runnerpool.binding_protection``).
BINDING_FINALIZER = "runnerpool.dev/pools-in-namespace"

# -- labels and annotations -----------------------------------------------------------------------

#: The prefix of every label and annotation key the operator owns (a pod template may not set them).
OPERATOR_PREFIX = "runnerpool.dev/"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "runnerpool-operator"
#: What the operator's own children are listed and watched by.
MANAGED_BY_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
#: On a credential Secret (a user's: never managed-by) while a pool needs it, with the finalizer of
#: the same name: the operator caches only the Secrets it owns and those carrying this label.
CREDENTIAL_LABEL = "runnerpool.dev/credential-in-use"
CREDENTIAL_VALUE = "true"
CREDENTIAL_SELECTOR = f"{CREDENTIAL_LABEL}={CREDENTIAL_VALUE}"
#: The pool a child belongs to (its name; the namespace is the child's own).
POOL_LABEL = "runnerpool.dev/pool"
#: Which pod template a runner pod was made from: a rollout replaces the others.
TEMPLATE_HASH_LABEL = "runnerpool.dev/template-hash"
#: Set while GitHub lists the pod's runner as busy; the disruption budget selects on it.
BUSY_LABEL = "runnerpool.dev/busy"
BUSY_VALUE = "true"
#: What the cluster autoscaler and Karpenter read before they drain a node, set while busy.
BUSY_ANNOTATIONS = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
}
#: On the token Secret: when the registration token in it expires (RFC 3339).
TOKEN_EXPIRY_ANNOTATION = "runnerpool.dev/token-expires-at"
#: On a JIT pod: the name of its own JIT config Secret (drawn before the pod is created, since
#: the pod's name is the API server's and its volume must name the Secret).
JIT_SECRET_ANNOTATION = "runnerpool.dev/jit-secret"
#: On a JIT Secret once the secret updater filled it: GitHub's id of the pod's runner. It stays
#: when the Secret is emptied, so an emptied Secret is never filled again (a second runner).
JIT_RUNNER_ID_ANNOTATION = "runnerpool.dev/jit-runner-id"
#: On a JIT pool once a JIT config was issued for one of its pods, so it may have registered a
#: runner on GitHub: its finalizer must then deregister, or wait for a lost credential a bounded
#: time (``runnerpool.deregistration``). Set once, never removed.
MAY_HAVE_RUNNERS_ANNOTATION = "runnerpool.dev/may-have-runners"
#: On the token Secret from the first token the secret updater writes into it; emptying the
#: Secret leaves it: the pool may have registered runners (``runnerpool.deregistration``).
TOKEN_ISSUED_ANNOTATION = "runnerpool.dev/token-issued"
#: On a deleted pool: when its finalizer first found its credential unusable (RFC 3339); the
#: pool is let go ``--credential-lost-wait`` seconds later, deregistered or not.
CREDENTIAL_LOST_ANNOTATION = "runnerpool.dev/credential-lost-at"

# -- objects, keys and containers -----------------------------------------------------------------

#: deploy/'s ClusterRole that a RoleBinding in a runner namespace enables the operator with
#: (deploy/rbac/namespace_cluster_role.yaml); the chart's is ``<release>-namespace``, which it
#: hands the operator as ``--namespace-role`` (``runnerpool.settings``).
NAMESPACE_CLUSTER_ROLE = "runnerpool-operator-namespace"

#: The key of the registration token in a pool's token Secret.
TOKEN_SECRET_KEY = "runnertoken"
#: The key of the pod's JIT config in its JIT Secret.
JIT_SECRET_KEY = "jitconfig"
#: The credential Secret a pool reads when its spec names none.
DEFAULT_CREDENTIAL_SECRET = "runnerpool-github-cred"
#: The one PodDisruptionBudget per namespace that covers every pool's busy runner pods.
BUSY_DISRUPTION_BUDGET = "runnerpool-busy-runners"
#: The one PodDisruptionBudget per namespace that covers the pods the container hooks make for
#: ``containerMode: kubernetes`` jobs (``HOOKS_JOB_POD_LABEL``).
JOB_PODS_DISRUPTION_BUDGET = "runnerpool-job-pods"
#: The label the container hooks (actions/runner-container-hooks, k8s) put on every pod they
#: make for a job, the job pod and each container step's: its value is the runner pod's name.
#: Such a pod exists only while its job runs.
HOOKS_JOB_POD_LABEL = "runner-pod"
#: The budgets a namespace of pools may have (``runnerpool.children`` builds them).
NAMESPACE_BUDGETS = (BUSY_DISRUPTION_BUDGET, JOB_PODS_DISRUPTION_BUDGET)
#: The runner pod's runner container.
RUNNER_CONTAINER = "runner"
#: The runner pod's init container that registers its runner (runnerpool.pods.registration).
REGISTER_CONTAINER = "register"
#: The runner pod's volumes: the registration token (a Secret, mounted only in the register
#: container), the runner's own configuration it hands over, and the job work directory,
#: and where the containers mount them.
TOKEN_VOLUME = "runner-token"
JIT_VOLUME = "runner-jitconfig"
CONFIG_VOLUME = "runner-config"
#: In containerMode: kubernetes the work volume is an ephemeral claim, named ``<pod>-work``:
#: the claim the container hooks mount into job pods when ACTIONS_RUNNER_CLAIM_NAME is unset,
#: so the name is part of the hooks' contract.
WORK_VOLUME = "work"
#: spec.githubServerTLS: the pool's CA bundle, in both containers (runnerpool.pods.connection).
CA_VOLUME = "runner-github-ca"
CA_MOUNT_DIR = "/runner-github-ca"
TOKEN_MOUNT_DIR = "/runner-token"
JIT_MOUNT_DIR = "/runner-jitconfig"
CONFIG_MOUNT_DIR = "/runner-config"
WORK_DIR = "/runner/_work"
#: What a pool's spec.template may not name: the operator's volumes and where it mounts them.
OPERATOR_VOLUMES = (TOKEN_VOLUME, JIT_VOLUME, CONFIG_VOLUME, WORK_VOLUME, CA_VOLUME)
OPERATOR_MOUNT_PATHS = (TOKEN_MOUNT_DIR, JIT_MOUNT_DIR, CONFIG_MOUNT_DIR, WORK_DIR, CA_MOUNT_DIR)
#: The keys of a pool's credential Secret that hold a secret (``runnerpool.github.credentials``):
#: a personal access token, a GitHub App's private key.
PAT_KEY = "token"
APP_PRIVATE_KEY_KEY = "app-private-key"
#: Those two under the names an ARC credential Secret gives them (read unchanged).
ARC_PAT_KEY = "github_token"
ARC_APP_PRIVATE_KEY_KEY = "github_app_private_key"
SECRET_CREDENTIAL_KEYS = (PAT_KEY, APP_PRIVATE_KEY_KEY, ARC_PAT_KEY, ARC_APP_PRIVATE_KEY_KEY)
#: The volumes that hold a credential: the pool's registration token, a pod's JIT config, and the
#: runner's own configuration (its RSA key).  No container of a template and no spec.volumeMounts
#: may mount them, whatever the path: only the operator's register container (and, for its
#: configuration, the runner container) does.
CREDENTIAL_VOLUMES = (TOKEN_VOLUME, JIT_VOLUME, CONFIG_VOLUME)
#: Env of the runner container that only the operator sets: the entrypoint's RUNNER_* settings
#: (scope, labels, token file, work directory, busy grace) and the names below.
RESERVED_ENV_PREFIX = "RUNNER_"
RESERVED_ENV = ("POD_NAME", "POD_NAMESPACE", "GITHUB_URL")
#: ``RUNNER_*`` variables the pool may set all the same: the runner image's documented wait for
#: the Docker daemon (dind), and the runner's own settings for running as root (a template with
#: ``runAsUser: 0``) and for where setup actions cache their tools.
POOL_RUNNER_ENV = ("RUNNER_DOCKER_WAIT_SECONDS", "RUNNER_ALLOW_RUNASROOT", "RUNNER_TOOL_CACHE")
#: The runner's setting that makes a job without ``container:`` fail rather than run in the runner
#: container. In containerMode kubernetes that container holds the runner account's token, so the
#: operator sets it to "true" there, whatever the pool's env or template say (pods/kubernetes_mode.py).
REQUIRE_JOB_CONTAINER_ENV = "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER"


#: What the names of the operator's credential Secrets begin with (a pool's token Secret, a pod's
#: JIT Secret): a pool's own volumes may not name such a Secret.
TOKEN_SECRET_PREFIX = "runner-token-"
JIT_SECRET_PREFIX = "runner-jit-"


def token_secret_name(pool: str) -> str:
    return f"{TOKEN_SECRET_PREFIX}{pool}"


#: The start of every kubernetes-mode runner account's name (:func:`runner_account_name`).
RUNNER_ACCOUNT_PREFIX = "runnerpool-runner-"


def runner_account_name(pool: str) -> str:
    """The ServiceAccount, Role and RoleBinding (one name) of a kubernetes-mode pool's runners."""
    return f"{RUNNER_ACCOUNT_PREFIX}{pool}"


def jit_secret_name(pool: str, suffix: str) -> str:
    """A JIT pod's Secret: ``runner-jit-<pool>-<suffix>``, the suffix drawn per pod
    (:data:`JIT_SECRET_SUFFIX`)."""
    return f"{JIT_SECRET_PREFIX}{pool}-{suffix}"


#: What ``pods.registration`` draws for a JIT Secret's suffix: ``secrets.token_hex(5)``.
JIT_SECRET_SUFFIX = "[0-9a-f]{10}"


def runner_pod_prefix(pool: str) -> str:
    """The ``generateName`` of a pool's runner pods: ``<pool>-`` and five random characters."""
    return f"{pool}-"


#: What the API server appends to a ``generateName``: five of its consonants and digits. It cuts
#: a longer prefix to 58 characters first; a pool's name has at most 35 (``api``'s
#: ``MAX_POOL_NAME_LENGTH``), so its pods are named ``<pool>-`` and these five, exactly.
GENERATED_NAME_SUFFIX = "[a-z0-9]{5}"


def runner_pod_name_pattern(pool: str) -> re.Pattern[str]:
    """What pool ``pool``'s runner pods, and so their runners, are named (``fullmatch`` it).

    The suffix's fixed length keeps the pools of one namespace apart, where a prefix alone
    would not: pool ``a``'s ``a-x1y2z`` is not pool ``a-x1y2z``'s (``a-x1y2z-`` and five more),
    and pool ``a-b``'s ``a-b-x1y2z`` is not pool ``a``'s. Pools of one name in two namespaces
    have one pattern: the name does not tell them apart."""
    return re.compile(re.escape(runner_pod_prefix(pool)) + GENERATED_NAME_SUFFIX)


def without_drawn_names(prefix: str, suffix: str) -> Callable[[str], str]:
    """A redaction for ``api_errors.describe``: every quoted name of ``prefix`` and a drawn
    ``suffix`` (a pattern) told as ``"<prefix>*"``. The API server's message of a refused create
    names the object, and its name is drawn anew for each attempt; masked, one cause reads the
    same every time: one Event counting the attempts, one condition message, no status write."""
    pattern = re.compile(rf'"{re.escape(prefix)}{suffix}"')
    return lambda text: pattern.sub(f'"{prefix}*"', text)


def without_runner_pod_names(pool: str) -> Callable[[str], str]:
    """``without_drawn_names`` for pool ``pool``'s runner pods (``"p-x7k2q"`` as ``"p-*"``): the
    one masking of a refused create and of a refused busy mark, which the cluster words alike."""
    return without_drawn_names(runner_pod_prefix(pool), GENERATED_NAME_SUFFIX)


def disruption_budget_name(pool: str) -> str:
    """The per-pool budget of operator versions before 0.3 (the shared one replaced it)."""
    return f"runnerpool-{pool}-busy"


def pool_runner_label(namespace: str, pool: str) -> str:
    """GitHub label that ties a runner to its pool: namespaces make pool names unique."""
    return f"{namespace}/{pool}"


def is_pool_runner_label(label: str) -> bool:
    """Whether ``label`` is some pool's ``pool_runner_label``: the CRD refuses ``/`` in
    ``spec.labels``, so only the operator's own label has one."""
    return "/" in label
