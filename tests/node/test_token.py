"""The runner user (uid 1001, as in the real image) can read the token the operator mounts.

On a real kubelet a Secret volume with mode 0440 is owned root:root unless the pod sets an
fsGroup: the register init container, running as uid 1001, then gets "Permission denied" and
never registers.
"""

from __future__ import annotations

import base64
import copy
import uuid
from typing import Any

from kubernetes import client

from runnerpool import naming
from runnerpool.pods import registration
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.pools import create_pool
from testworld.node.images import RUNNER_UID
from testworld.simulator import OperatorProcess

POD_TIMEOUT = 60.0


def _token(core: client.CoreV1Api, namespace: str, pool: str) -> str | None:
    secret = core.read_namespaced_secret(naming.token_secret_name(pool), namespace)
    data = secret.data or {}
    return None if naming.TOKEN_SECRET_KEY not in data else str(data[naming.TOKEN_SECRET_KEY])


def test_the_runner_user_reads_the_mounted_token(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    create_pool(api_client, namespace, node_pool("token", replicas=1))
    core = client.CoreV1Api(api_client)
    pod = wait_for(
        lambda: core.list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}=token").items,
        POD_TIMEOUT,
        message="the pool's runner pod",
    )[0]
    wait_for(lambda: _token(core, namespace, "token"), POD_TIMEOUT, message="a token in the pool's Secret")

    # The operator's own pod, its register init container run with another command (who am I,
    # and the token file) as the pod's one container.
    spec: dict[str, Any] = copy.deepcopy(api_client.sanitize_for_serialization(pod.spec))
    spec["restartPolicy"] = "Never"
    register = next(c for c in spec.pop("initContainers") if c["name"] == registration.REGISTER_CONTAINER)
    register["command"] = ["bash", "-c", 'id -u; cat "$RUNNER_TOKEN_FILE"']
    register["name"] = naming.RUNNER_CONTAINER
    spec["containers"] = [register]
    name = f"token-probe-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})

    def finished() -> str | None:
        phase = core.read_namespaced_pod(name, namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, POD_TIMEOUT, message=f"pod {name} to finish")
    log = core.read_namespaced_pod_log(name, namespace, container=naming.RUNNER_CONTAINER)
    secret = core.read_namespaced_secret(naming.token_secret_name("token"), namespace)
    token = base64.b64decode(secret.data[naming.TOKEN_SECRET_KEY]).decode()
    assert phase == "Succeeded", f"the register container's user could not read the token; pod log:\n{log}"
    assert log.split() == [str(RUNNER_UID), token]
