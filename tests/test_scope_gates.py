"""The checks before a pool may have runners, against the real API server: the namespace's
``--allow`` rules (no GitHub call at all when they refuse) and the pool's runner group."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from kubernetes import client

from runnerpool import naming
from runnerpool.domain import Scope
from runnerpool.fakes import FakeRunnerJobs, FakeSecretUpdater
from runnerpool.github.errors import Unavailable
from runnerpool.github.fake import FakeGitHubClient, FakeGitHubClients
from runnerpool.github.types import RunnerGroup
from runnerpool.reconciler import Reconciler
from runnerpool.settings import QueueSettings, Settings, TenantSettings
from runnerpool.tenants import parse_allow_rule
from tests.github_mocks import github
from tests.pools import LiveReader, create_pool, fill_token, pool_events, pool_manifest
from tests.reconcilers import make_reconciler

__all__ = ["github"]

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

FUTURE = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reconciler(
    api_client: client.ApiClient,
    tokens: FakeSecretUpdater,
    runners: FakeRunnerJobs,
    *,
    allow: tuple[str, ...] = (),
    github_client: FakeGitHubClient | None = None,
) -> Reconciler:
    return make_reconciler(
        api_client,
        tokens=tokens,
        runners=runners,
        settings=Settings(
            queue=QueueSettings(status_coalesce=0.0),
            tenants=TenantSettings(allow=tuple(parse_allow_rule(rule) for rule in allow) or None),
        ),
        github=FakeGitHubClients(github_client or FakeGitHubClient()),
    )


def _pool(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found = LiveReader(api_client).get_pool(namespace, name)
    assert found is not None
    return found


def _condition(pool: dict[str, Any], type_: str) -> tuple[str, str, str]:
    cond = next(c for c in pool["status"]["conditions"] if c["type"] == type_)
    return cond["status"], cond["reason"], cond["message"]


def test_a_pool_outside_the_allow_rules_gets_a_condition_and_no_runner_and_no_github_call(
    api_client: client.ApiClient, namespace: str, github: responses.RequestsMock
) -> None:
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = _reconciler(api_client, tokens, runners, allow=("team-*=org:acme",))
    create_pool(api_client, namespace, pool_manifest("rogue", org="other-org", replicas=2))

    result = reconciler(f"{namespace}/rogue")

    assert result.requeue_after is None, "only a new operator setting can change the answer"
    pool = _pool(api_client, namespace, "rogue")
    status, reason, message = _condition(pool, "ScopeAllowed")
    assert (status, reason) == ("False", "ScopeNotAllowed")
    assert f"pools of namespace {namespace} register runners at organization other-org" in message
    assert "add org:other-org to an --allow rule" in message
    assert _condition(pool, "Ready")[:2] == ("False", "ScopeNotAllowed")
    assert pool["status"]["observedGeneration"] == 1
    assert [(kind, why) for kind, why, _ in pool_events(api_client, namespace)] == [
        ("Warning", "ScopeNotAllowed")
    ]
    assert tokens.started == [] and runners.started == [], "no token job, no runner manager"
    reader = LiveReader(api_client)
    assert reader.get_secret(namespace, naming.token_secret_name("rogue")) is None
    assert reader.list_pods(namespace, "rogue") == []
    assert not pool["metadata"].get("finalizers"), "nothing to deregister: deletion is immediate"
    assert len(github.calls) == 0

    reconciler(f"{namespace}/rogue")
    assert len(pool_events(api_client, namespace)) == 1, "the refusal is told once"


def test_a_pool_the_rules_allow_says_so_and_starts(api_client: client.ApiClient, namespace: str) -> None:
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = _reconciler(api_client, tokens, runners, allow=(f"{namespace}=org:acme",))
    create_pool(api_client, namespace, pool_manifest("ours", repo="acme/tools"))

    reconciler(f"{namespace}/ours")

    pool = _pool(api_client, namespace, "ours")
    assert _condition(pool, "ScopeAllowed")[:2] == ("True", "ScopeAllowed")
    assert [ref.scope.repository for ref in tokens.started] == ["acme/tools"]


@pytest.mark.parametrize(
    "url", ["https://metadata.internal/api/v3", "https://api.github.com:8443", "https://10.0.0.7"]
)
def test_a_pool_naming_a_github_host_not_allowed_gets_a_condition_and_no_github_call(
    api_client: client.ApiClient, namespace: str, github: responses.RequestsMock, url: str
) -> None:
    """No --allow rules at all: the host allow-list still holds (default: api.github.com)."""
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = _reconciler(api_client, tokens, runners)
    create_pool(api_client, namespace, pool_manifest("probe", org="acme", githubApiUrl=url))

    reconciler(f"{namespace}/probe")

    pool = _pool(api_client, namespace, "probe")
    status, reason, message = _condition(pool, "ScopeAllowed")
    assert (status, reason) == ("False", "GitHubHostNotAllowed")
    assert "api.github.com:443" in message and "--github-api-host" in message
    assert _condition(pool, "Ready")[:2] == ("False", "GitHubHostNotAllowed")
    assert tokens.started == [] and runners.started == [], "no token job, no runner manager"
    assert len(github.calls) == 0


def test_without_allow_rules_no_pool_gets_the_condition(api_client: client.ApiClient, namespace: str) -> None:
    reconciler = _reconciler(api_client, FakeSecretUpdater(), FakeRunnerJobs())
    create_pool(api_client, namespace, pool_manifest("free", org="anything"))
    reconciler(f"{namespace}/free")
    types = {c["type"] for c in _pool(api_client, namespace, "free")["status"]["conditions"]}
    assert "ScopeAllowed" not in types and "RunnerGroupReady" not in types


def test_a_runner_group_must_exist_and_admit_the_pools_repositories(
    api_client: client.ApiClient, namespace: str
) -> None:
    github_client = FakeGitHubClient()
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)
    autoscaling = {"maxReplicas": 3, "minReplicas": 1, "repositories": ["ml", "web"]}
    manifest = pool_manifest("gpu", org="octo-org", runnerGroup="GPU", autoscaling=autoscaling)
    create_pool(api_client, namespace, manifest)
    scope = Scope(organization="octo-org")

    github_client.groups[scope] = [RunnerGroup(id=1, name="Default", visibility="all", default=True)]
    missing = reconciler(f"{namespace}/gpu")
    pool = _pool(api_client, namespace, "gpu")
    status, reason, message = _condition(pool, "RunnerGroupReady")
    assert (status, reason) == ("False", "RunnerGroupNotFound")
    assert "octo-org has no runner group 'GPU'" in message and "(groups: Default)" in message
    assert _condition(pool, "Ready")[:2] == ("False", "RunnerGroupNotFound")
    assert missing.requeue_after is not None and missing.requeue_after >= 60
    assert tokens.started == [] and LiveReader(api_client).list_pods(namespace, "gpu") == []

    github_client.groups[scope].append(RunnerGroup(id=7, name="GPU", visibility="selected", default=False))
    github_client.members[(scope, 7)] = ["octo-org/ml"]
    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)  # a fresh cache
    reconciler(f"{namespace}/gpu")
    status, reason, message = _condition(_pool(api_client, namespace, "gpu"), "RunnerGroupReady")
    assert (status, reason) == ("False", "RepositoryNotAllowed")
    assert "admits selected repositories only, and not octo-org/web" in message
    assert tokens.started == []

    github_client.members[(scope, 7)].append("octo-org/web")
    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)
    reconciler(f"{namespace}/gpu")
    fill_token(api_client, namespace, "gpu", "tok", FUTURE)
    reconciler(f"{namespace}/gpu")
    pool = _pool(api_client, namespace, "gpu")
    assert _condition(pool, "RunnerGroupReady")[:2] == ("True", "RunnerGroupFound")
    pods = LiveReader(api_client).list_pods(namespace, "gpu")
    assert len(pods) == 1
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert (env["RUNNER_ORG"], env["RUNNER_GROUP"]) == ("octo-org", "GPU")
    reasons = [why for _, why, _ in pool_events(api_client, namespace)]
    assert reasons.count("RunnerGroupNotFound") == 1 and reasons.count("RepositoryNotAllowed") == 1
    assert "RunnerGroupFound" in reasons, "the recovery is news"


def test_a_runner_group_github_cannot_tell_of_keeps_the_pools_runners_looked_after(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A 502 on the group listing with nothing cached (the operator restarted, or another
    replica took the lead) stopped the pool's runner manager and emptied its token: its busy
    pods went unmarked, evictable mid-job, and registering pods lost their token. No answer is
    not GitHub saying the group is gone: no new pod meanwhile, but the jobs run on."""
    github_client = FakeGitHubClient()
    scope = Scope(organization="octo-org")
    github_client.groups[scope] = [RunnerGroup(id=7, name="GPU", visibility="all", default=False)]
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    create_pool(api_client, namespace, pool_manifest("gpu", org="octo-org", runnerGroup="GPU", replicas=2))
    _reconciler(api_client, tokens, runners, github_client=github_client)(f"{namespace}/gpu")
    fill_token(api_client, namespace, "gpu", "tok", FUTURE)
    _reconciler(api_client, tokens, runners, github_client=github_client)(f"{namespace}/gpu")
    assert len(LiveReader(api_client).list_pods(namespace, "gpu")) == 2

    github_client.groups_failure = Unavailable(
        "GET /orgs/octo-org/actions/runner-groups: HTTP 502 Bad Gateway", status=502
    )
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        "runnerpool.dev", "v1alpha1", namespace, "runnerpools", "gpu", {"spec": {"replicas": 3}}
    )
    # The new leader: its own cache, no job running yet; a runner's mark refused meanwhile.
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    refused = "marking busy runner pods was refused: 422 Invalid: runner pods keep their labels"
    runners.marks_refused[f"{namespace}/gpu"] = refused
    result = _reconciler(api_client, tokens, runners, github_client=github_client)(f"{namespace}/gpu")

    status, reason, _ = _condition(_pool(api_client, namespace, "gpu"), "RunnerGroupReady")
    assert (status, reason) == ("False", "GitHubUnavailable")
    assert result.requeue_after is not None and result.requeue_after >= 60
    assert [ref.name for ref in runners.started] == ["gpu"], "the runner manager marks the busy pods"
    assert runners.stopped == [] and tokens.stopped == [] and tokens.emptied == [], "the jobs run on"
    assert len(LiveReader(api_client).list_pods(namespace, "gpu")) == 2, "no new pod meanwhile"
    assert ("Warning", "BusyMarkRefused", refused) in pool_events(api_client, namespace)

    github_client.groups_failure = None
    _reconciler(api_client, tokens, runners, github_client=github_client)(f"{namespace}/gpu")
    assert _condition(_pool(api_client, namespace, "gpu"), "RunnerGroupReady")[:2] == (
        "True",
        "RunnerGroupFound",
    )
    assert len(LiveReader(api_client).list_pods(namespace, "gpu")) == 3


def test_a_jit_pool_makes_its_runners_in_its_runner_group(
    api_client: client.ApiClient, namespace: str
) -> None:
    github_client = FakeGitHubClient()
    scope = Scope(organization="octo-org")
    github_client.groups[scope] = [
        RunnerGroup(id=1, name="Default", visibility="all", default=True),
        RunnerGroup(id=7, name="GPU", visibility="all", default=False),
    ]
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)
    create_pool(
        api_client, namespace, pool_manifest("gpu", org="octo-org", runnerGroup="GPU", registration="jit")
    )

    reconciler(f"{namespace}/gpu")  # the pod
    reconciler(f"{namespace}/gpu")  # its Secret, and the fill asked for

    [(_, _, request)] = tokens.jit.fills
    assert request.runner_group_id == 7
    assert tokens.started == []


def test_a_pool_naming_no_group_is_refused_when_the_default_group_refuses_the_public_repositories_it_serves(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Its runners go to the scope's default group, and GitHub's default for an enterprise's
    Default group is "Allow public repositories" off: the pool was Ready and its runners sat
    idle while the public repository's jobs queued. A group look-up that fails refuses nothing:
    the pool named no group."""
    scope = Scope(organization="octo-org")
    github_client = FakeGitHubClient(public={"octo-org/site", "octo-org/api"})
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    autoscaling = {"maxReplicas": 3, "minReplicas": 1, "repositories": ["site", "api"]}
    create_pool(api_client, namespace, pool_manifest("web", org="octo-org", autoscaling=autoscaling))

    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)  # no groups: a 404
    reconciler(f"{namespace}/web")
    pool = _pool(api_client, namespace, "web")
    assert "RunnerGroupReady" not in {c["type"] for c in pool["status"]["conditions"]}
    assert len(tokens.started) == 1, "a failed look-up of a group the pool never named refused it"

    closed = RunnerGroup(id=1, name="Default", visibility="all", default=True, allows_public=False)
    github_client.groups[scope] = [closed, RunnerGroup(id=7, name="GPU", visibility="all", default=False)]
    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)  # a fresh cache
    reconciler(f"{namespace}/web")
    pool = _pool(api_client, namespace, "web")
    status, reason, message = _condition(pool, "RunnerGroupReady")
    assert (status, reason) == ("False", "RepositoryNotAllowed")
    assert "runner group 'Default' of octo-org admits no public repository" in message
    assert "octo-org/api, octo-org/site are public" in message
    assert _condition(pool, "Ready")[:2] == ("False", "RepositoryNotAllowed")

    github_client.groups[scope] = [RunnerGroup(id=1, name="Default", visibility="all", default=True)]
    reconciler = _reconciler(api_client, tokens, runners, github_client=github_client)
    reconciler(f"{namespace}/web")
    pool = _pool(api_client, namespace, "web")
    assert "RunnerGroupReady" not in {c["type"] for c in pool["status"]["conditions"]}
    assert _condition(pool, "Ready")[1] != "RepositoryNotAllowed"


@pytest.mark.parametrize(
    ("public", "inherited_closed", "refused"),
    [
        ({"octo-org/site"}, False, False),  # it still serves octo-org/api
        ({"octo-org/site", "octo-org/api"}, False, True),
        ({"octo-org/site", "octo-org/api"}, True, False),  # the enterprise's Default is not its own
    ],
    ids=["one of two public", "both public", "an inherited default closed"],
)
def test_a_pool_naming_no_group_is_refused_only_when_the_default_group_serves_none_of_its_repositories(
    api_client: client.ApiClient, namespace: str, public: set[str], inherited_closed: bool, refused: bool
) -> None:
    """Such pools worked before this check for the repositories the group admits: refused
    whole, they lost those too. And an organization's listing shows its enterprise's shared
    groups beside its own: its own Default is where its runners go."""
    scope = Scope(organization="octo-org")
    github_client = FakeGitHubClient(public=public)
    own = RunnerGroup(id=1, name="Default", visibility="all", default=True, allows_public=inherited_closed)
    shared = RunnerGroup(
        id=2, name="Default", visibility="all", default=True, allows_public=False, inherited=True
    )
    github_client.groups[scope] = [shared, own] if inherited_closed else [own]
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    autoscaling = {"maxReplicas": 3, "minReplicas": 1, "repositories": ["site", "api"]}
    create_pool(api_client, namespace, pool_manifest("web", org="octo-org", autoscaling=autoscaling))

    _reconciler(api_client, tokens, runners, github_client=github_client)(f"{namespace}/web")

    types = {c["type"]: c["reason"] for c in _pool(api_client, namespace, "web")["status"]["conditions"]}
    assert (types.get("RunnerGroupReady") == "RepositoryNotAllowed") is refused
    assert (tokens.started == []) is refused
