"""What a ``containerMode: kubernetes`` pool's runners may do through the Kubernetes API.

The runner container hooks create each job's pod through the API as the runner pod's
ServiceAccount, and check before every command that they hold exactly their
``requiredPermissions`` (a SelfSubjectAccessReview each: less and they refuse to start).
Those rules ship once, as ClusterRole :data:`RUNNER_HOOKS_CLUSTER_ROLE`
(deploy/rbac/runner_hooks_cluster_role.yaml and the chart, holding :data:`HOOK_RULES`); a pool in
that mode gets a ServiceAccount and a RoleBinding of its own, in its namespace, that grant the
ClusterRole there only (``runnerpool.children``: both named ``naming.runner_account_name(pool)``,
labelled and controlled by the pool, so they go with it; a pool that leaves the mode has them
deleted at once).  The operator creates no Role: it binds the shipped one.
docs/kubernetes-mode.md says what the binding lets a runner do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HOOK_RULES", "RBAC_GROUP", "RUNNER_HOOKS_CLUSTER_ROLE"]

RBAC_GROUP = "rbac.authorization.k8s.io"
#: The shipped ClusterRole each kubernetes-mode pool's RoleBinding names.
RUNNER_HOOKS_CLUSTER_ROLE = "runnerpool-runner-hooks"

#: What actions/runner-container-hooks check they hold, resource by resource: the job pod
#: (create, read its phase and node, delete), exec into it for each step, its logs, Secrets for
#: a job container's registry credentials and a step's environment; and Jobs, which only the
#: k8s flavour the actions-runner image ships at ``api.KUBERNETES_HOOK`` (hooks 0.7, the one a
#: work volume claim uses) checks for and runs container steps as. The k8s-novolume flavour
#: (hooks 0.8) runs them as pods and checks the first four only. Jobs give a runner nothing
#: it does not have already: it may create pods in the namespace, and a Job only makes pods.
HOOK_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "create", "delete"]},
)
