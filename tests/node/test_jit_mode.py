"""JIT mode on a real node: each pod registers with a runner config of its own, never a pool token.

The operator creates each pod's Secret empty, its secret updater fills it from the fake GitHub's
generate-jitconfig, the kubelet mounts it into the register init container only, and the
operator empties it once that container has ended; the runner container runs
``run.sh --jitconfig``.
"""

from __future__ import annotations

import base64

from kubernetes import client

from runnerpool import api, naming
from tests.e2e.runners import REPO, get_pool, pool_runners
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, queue_jobs, registered_pods, replacement_pod, wait_busy, wait_done
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

JOB_SECONDS = 2.0


def _jit_secrets(core: client.CoreV1Api, namespace: str) -> dict[str, client.V1Secret]:
    return {
        s.metadata.name: s
        for s in core.list_namespaced_secret(namespace).items
        if s.metadata.name.startswith("runner-jit-")
    }


def _own_secret(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    return str(core.read_namespaced_pod(pod, namespace).metadata.annotations[naming.JIT_SECRET_ANNOTATION])


def test_a_jit_pool_runs_a_job_and_leaves_no_runner_when_deleted(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    gc_follows_pools: None,
) -> None:
    create_pool(api_client, namespace, node_pool("jit", replicas=1, registration="jit"))
    core = client.CoreV1Api(api_client)
    [pod] = registered_pods(core, fake_github, namespace, "jit", 1)

    # No pool token anywhere; the pod's own config is emptied once its register container ended.
    assert (
        core.list_namespaced_secret(
            namespace, field_selector=f"metadata.name={naming.token_secret_name('jit')}"
        ).items
        == []
    )
    secret_name = _own_secret(core, namespace, pod)
    wait_for(
        lambda: (
            not base64.b64decode(
                (core.read_namespaced_secret(secret_name, namespace).data or {}).get(naming.JIT_SECRET_KEY)
                or ""
            )
        ),
        START_TIMEOUT,
        message=f"Secret {secret_name} to be emptied",
    )

    # runs-on as users write it: a JIT runner has self-hosted only if the operator asked for it.
    job_id = fake_github.queue_job(
        REPO, ["self-hosted", naming.pool_runner_label(namespace, "jit")], JOB_SECONDS
    )
    done = wait_done(fake_github, [job_id])[job_id]
    assert (done["conclusion"], done["runner_name"]) == ("success", pod)
    replacement_pod(core, fake_github, namespace, "jit", pod)

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "jit"
    )
    wait_for(lambda: get_pool(api_client, namespace, "jit") is None, START_TIMEOUT, message="the pool to go")
    wait_for(
        lambda: not core.list_namespaced_pod(namespace).items, START_TIMEOUT, message="every pod to be gone"
    )
    assert pool_runners(fake_github, REPO, namespace, "jit") == []
    # Each pod's Secret went with its pod (garbage collection: the pod owns it).
    wait_for(
        lambda: not _jit_secrets(core, namespace),
        START_TIMEOUT,
        message="the JIT Secrets to go with their pods",
    )


def test_a_jit_pool_scales_down_to_one_runner(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    create_pool(api_client, namespace, node_pool("jitdown", replicas=2, registration="jit"))
    core = client.CoreV1Api(api_client)
    pods = registered_pods(core, fake_github, namespace, "jitdown", 2)
    assert len({_own_secret(core, namespace, p) for p in pods}) == 2

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "jitdown", {"spec": {"replicas": 1}}
    )

    [kept] = registered_pods(core, fake_github, namespace, "jitdown", 1)
    assert kept in pods
    wait_for(
        lambda: {r["name"] for r in pool_runners(fake_github, REPO, namespace, "jitdown")} == {kept},
        START_TIMEOUT,
        message="one runner left on GitHub",
    )


def test_a_jit_pool_rolls_out_a_changed_spec_after_the_busy_runner_s_job(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    """A changed spec rolls a JIT pool as a token pool: the busy pod finishes its job first,
    and the new pod registers with a config of its own."""
    create_pool(api_client, namespace, node_pool("jitroll", replicas=1, registration="jit"))
    core = client.CoreV1Api(api_client)
    [old] = registered_pods(core, fake_github, namespace, "jitroll", 1)
    [job_id] = queue_jobs(fake_github, namespace, "jitroll", 1, 8 * JOB_SECONDS)
    assert wait_busy(core, fake_github, namespace, [job_id]) == [old]

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP,
        api.VERSION,
        namespace,
        api.PLURAL,
        "jitroll",
        {"spec": {"env": [{"name": "ROLL", "value": "1"}]}},
    )

    done = wait_done(fake_github, [job_id])[job_id]
    assert (done["conclusion"], done["runner_name"]) == ("success", old)
    new = replacement_pod(core, fake_github, namespace, "jitroll", old)
    runner = next(c for c in core.read_namespaced_pod(new, namespace).spec.containers if c.name == "runner")
    assert {"ROLL": "1"}.items() <= {e.name: e.value for e in runner.env}.items()
    wait_for(
        lambda: {r["name"] for r in pool_runners(fake_github, REPO, namespace, "jitroll")} == {new},
        START_TIMEOUT,
        message="only the new pod's runner left on GitHub",
    )
