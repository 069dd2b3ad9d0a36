"""The webhook receiver's own rules: its runners told by name, its flags (issue 30), and the
operator's copy of the pools' own webhook secrets that it reads."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.cli import parser, settings_from
from runnerpool.conditions import Stamp
from runnerpool.demand import rules
from runnerpool.demand.runner_names import RunnerNames
from runnerpool.demand.secret import MAX_POOL_SECRET_BYTES, MAX_POOL_SECRET_LINES, STALE_COPY_FOR, PoolSecrets
from runnerpool.demand.secret_mirror import (
    BUDGET,
    MAX_DATA_KEY_LENGTH,
    MirroredSecrets,
    SecretMirror,
    entry_bytes,
    fair_share,
    mirror_key,
)
from runnerpool.demand.signature import sign
from runnerpool.demand.verification import MAX_KEYS_PER_ROUTE, Route, Verifier
from runnerpool.domain import WebhookSecretProblem
from runnerpool.github.jobs import Job
from runnerpool.reads import ParsedPool
from runnerpool.reasons import Reason
from runnerpool.runtime.kube import Kube, Resource
from runnerpool.secret_reads import SecretReads
from runnerpool.settings import OPERATOR, WEBHOOK_RECEIVER
from runnerpool.status import webhook_secret_condition
from runnerpool.webhook_component import operator_webhook_parts
from tests.helpers import wait_for


def test_a_pools_runner_names_are_its_own_and_no_longer_named_pools() -> None:
    """``a-x1y2z`` is pool a's runner, never pool a-x1y2z's, whose runners are one suffix longer."""
    assert "a-x1y2z" in RunnerNames("a")
    assert "a-x1y2z" not in RunnerNames("a-x1y2z")
    assert "a-x1y2z-b7c8d" in RunnerNames("a-x1y2z")
    assert "a-x1y2z-b7c8d" not in RunnerNames("a")
    assert "a-X1Y2Z" not in RunnerNames("a"), "the API server draws lower-case letters and digits"
    assert "b-x1y2z" not in RunnerNames("a")


def test_a_job_in_progress_on_another_pools_runner_ends_for_this_pool() -> None:
    """What the receiver records without reading pods: the job counts busy only where its runner is."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    queued = Job(
        id=7, state="queued", repository="acme/app", labels=("self-hosted",), api_url="https://api.github.com"
    )
    taken = Job(
        id=7,
        state="in_progress",
        repository="acme/app",
        labels=("self-hosted",),
        api_url="https://api.github.com",
        runner_name="b-q2w3e",
    )
    mine, _ = rules.apply(None, [queued], now, runners=RunnerNames("a"))
    after, _ = rules.apply(mine, [taken], now, runners=RunnerNames("a"))
    assert (after.queued, after.busy, after.jobs["7"].state) == (0, 0, "completed")
    theirs, _ = rules.apply(None, [taken], now, runners=RunnerNames("b"))
    assert theirs.busy == 1


def test_the_component_flag_and_the_mirror() -> None:
    assert settings_from(parser().parse_args([])).component == OPERATOR
    receiver = settings_from(
        parser().parse_args(["--component", "webhook-receiver", "--webhook-secret-mirror", "ops/hooks"])
    )
    assert receiver.component == WEBHOOK_RECEIVER
    assert receiver.demand.mirror == ("ops", "hooks")
    assert settings_from(parser().parse_args(["--webhook-secret-mirror", ""])).demand.mirror is None
    with pytest.raises(SystemExit):
        parser().parse_args(["--webhook-secret-mirror", "no-namespace"])
    with pytest.raises(SystemExit):
        parser().parse_args(["--component", "everything"])


def test_mirror_keys_split_back_whatever_the_key_holds() -> None:
    """Namespaces and Secret names hold no ``_``: the first two split the key back."""
    key = mirror_key("team-a", api.WebhookSecretRef(name="hooks.v2", key="secret_2.txt"))
    assert key == "team-a_hooks.v2_secret_2.txt"
    assert key.split("_", 2) == ["team-a", "hooks.v2", "secret_2.txt"]


def test_mirror_keys_fit_a_secrets_data_key_whatever_the_names() -> None:
    """One pool's long Secret name and key must not make the mirror's patch fail (422) for
    every tenant: a key longer than a Secret allows becomes the namespace and a digest."""
    longest = api.WebhookSecretRef(name="n" * 253, key="k" * 253)
    key = mirror_key("team-a", longest)
    assert len(key) <= MAX_DATA_KEY_LENGTH and key.startswith("team-a_")
    assert key == mirror_key("team-a", api.WebhookSecretRef(name="n" * 253, key="k" * 253))
    assert key != mirror_key("team-a", api.WebhookSecretRef(name="n" * 253, key="k" * 252))
    assert key != mirror_key("team-b", longest)


class _OneSecret:
    """The by-name reader, holding one Secret's data."""

    def __init__(self, data: dict[str, str], metadata: dict[str, Any] | None = None) -> None:
        self.data, self.metadata = data, metadata or {}

    def get(self, namespace: str, name: str, max_age: float) -> dict[str, Any]:
        return {"metadata": self.metadata, "data": self.data}

    def age(self, namespace: str, name: str) -> float | None:
        return None


def _encoded(lines: list[bytes]) -> dict[str, str]:
    return {"secret": base64.b64encode(b"\n".join(lines)).decode()}


@pytest.mark.parametrize(
    "lines",
    [
        [b"s%d" % i for i in range(MAX_POOL_SECRET_LINES + 1)],
        [b"x" * (MAX_POOL_SECRET_BYTES // 2 + 1)] * 2,
    ],
    ids=["too-many-lines", "too-many-bytes"],
)
def test_a_pools_webhook_secret_past_the_bounds_verifies_nothing_and_says_why(lines: list[bytes]) -> None:
    """Every line is tried as an HMAC key on every delivery anyone sends to the pool."""
    ref = api.WebhookSecretRef(name="hooks", key="secret")
    found = PoolSecrets(_OneSecret(_encoded(lines))).get("team-a", ref)  # type: ignore[arg-type]
    assert found.values == ()
    assert found.problem is not None and f"at most {MAX_POOL_SECRET_LINES} lines" in found.problem


def test_a_rotating_pools_webhook_secret_within_the_bounds_gives_both() -> None:
    ref = api.WebhookSecretRef(name="hooks", key="secret")
    found = PoolSecrets(_OneSecret(_encoded([b"old-secret", b"new-secret"]))).get("team-a", ref)  # type: ignore[arg-type]
    assert found.values == (b"old-secret", b"new-secret") and found.problem is None


class _Pools:
    def __init__(self, *pools: api.RunnerPool) -> None:
        self.pools = pools

    def autoscaling_pools(self, scopes: object = None) -> list[api.RunnerPool]:
        return [pool for pool in self.pools if pool.spec.autoscaling is not None]

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        return [ParsedPool({}, pool) for pool in self.pools if pool.namespace == namespace]


@pytest.mark.parametrize(
    "metadata",
    [{"labels": {naming.CREDENTIAL_LABEL: "true"}}, {"finalizers": [naming.CREDENTIAL_FINALIZER]}],
    ids=["labelled", "finalized"],
)
def test_a_sibling_pools_credential_is_no_webhook_secret_and_never_reaches_the_mirror(
    metadata: dict[str, Any],
) -> None:
    """The CRD refuses a pool naming its own credential Secret as its webhook secret, not a
    sibling pool's: pool hooks naming pool web's PAT would have it copied into the mirror the
    internet-facing receiver reads. The operator marks every Secret a pool uses as its
    credential (runnerpool.credential_protection); such a Secret verifies nothing and is not
    copied, and the pool's condition says why."""
    pat = base64.b64encode(b"ghp_" + b"A" * 36).decode()
    reads = _OneSecret({"token": pat}, metadata)
    ref = api.WebhookSecretRef(name="github-pat", key="token")
    found = PoolSecrets(reads).get("team-a", ref)  # type: ignore[arg-type]
    assert found.values == ()
    assert found.problem is not None and "is a pool's GitHub credential" in found.problem

    hooks = api.RunnerPool.model_validate(
        {
            "metadata": {"name": "hooks", "namespace": "team-a"},
            "spec": {
                "repository": "acme/web",
                "credentialSecretName": "hooks-app",
                "autoscaling": {"maxReplicas": 1, "webhookSecretRef": {"name": "github-pat", "key": "token"}},
            },
        }
    )
    mirror = SecretMirror(_Pools(hooks), PoolSecrets(reads), None, ("ops", "hooks"))  # type: ignore[arg-type]
    assert mirror.wanted() == {}


#: The API server's limit on a Secret's values (``api.MaxSecretSize``).
MAX_SECRET_SIZE = 1024 * 1024
#: A pool's own webhook secret at the per-pool bound: 8 lines, 4 KiB in all.
AT_THE_BOUND = b"\n".join([b"x" * (MAX_POOL_SECRET_BYTES // MAX_POOL_SECRET_LINES)] * MAX_POOL_SECRET_LINES)


class _MirrorSecret:
    """The mirror Secret as the API server keeps it: a patch whose values pass 1 MiB is refused whole."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        return {"data": dict(self.data)}

    def patch(self, resource: Any, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        new = {**self.data, **body["data"]}
        new = {key: value for key, value in new.items() if value is not None}
        if sum(len(base64.b64decode(value)) for value in new.values()) > MAX_SECRET_SIZE:
            raise ApiException(status=422, reason="Unprocessable Entity")  # data: Too long
        self.data = new
        return {}


class _WebhookSecrets:
    """The by-name reader: every Secret of a namespace holds ``values[namespace]`` at its one key."""

    def __init__(self, values: dict[str, bytes]) -> None:
        self.values = values

    def get(self, namespace: str, name: str, max_age: float) -> dict[str, Any]:
        return {"metadata": {}, "data": {"webhook-secret": base64.b64encode(self.values[namespace]).decode()}}

    def age(self, namespace: str, name: str) -> float | None:
        return None


def _own_secret_pool(namespace: str, name: str, key: str = "webhook-secret") -> api.RunnerPool:
    """A pool naming key ``key`` of Secret ``name`` of its namespace as its webhook secret."""
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": f"{name}-{key}", "namespace": namespace},
            "spec": {
                "repository": "acme/app",
                "autoscaling": {"maxReplicas": 1, "webhookSecretRef": {"name": name, "key": key}},
            },
        }
    )


def _in_mirror(kube: _MirrorSecret, pool: api.RunnerPool) -> bool:
    assert pool.spec.autoscaling is not None and pool.spec.autoscaling.webhook_secret_ref is not None
    return mirror_key(pool.namespace, pool.spec.autoscaling.webhook_secret_ref) in kube.data


def _problem(check: Any, pool: api.RunnerPool) -> WebhookSecretProblem | None:
    assert pool.spec.autoscaling is not None and pool.spec.autoscaling.webhook_secret_ref is not None
    return check(pool.namespace, pool.spec.autoscaling.webhook_secret_ref)  # type: ignore[no-any-return]


def _greedy_world() -> tuple[list[api.RunnerPool], list[api.RunnerPool], _WebhookSecrets]:
    """256 pools of namespace greedy, each naming its own Secret at the per-pool bound (over
    1 MiB in all), and one pool each of team-a and team-b with a short secret."""
    greedy = [_own_secret_pool("greedy", f"p{i:03}") for i in range(256)]
    others = [_own_secret_pool("team-a", "web"), _own_secret_pool("team-b", "api")]
    reads = _WebhookSecrets(
        {"greedy": AT_THE_BOUND, "team-a": b"team-a's secret", "team-b": b"team-b's secret"}
    )
    return greedy, others, reads


def test_one_tenant_filling_the_mirror_leaves_out_its_own_secrets_and_nobody_elses() -> None:
    """Pools whose secrets need more than the 1 MiB the API server allows a Secret: the whole
    patch was refused (422), so no tenant's new or rotated secret reached the receiver any
    more, nor was a removed one taken out."""
    greedy, others, reads = _greedy_world()
    kube, woken = _MirrorSecret(), []
    pools = _Pools(*others, *greedy)
    mirror = SecretMirror(pools, PoolSecrets(reads), kube, ("ops", "hooks"), notify=woken.append)  # type: ignore[arg-type]
    mirror.sync()
    assert all(_in_mirror(kube, pool) and _problem(mirror.problem, pool) is None for pool in others)
    left_out = [pool for pool in greedy if not _in_mirror(kube, pool)]
    assert 0 < len(left_out) < 256 - 200, f"{len(left_out)} left out"
    assert sorted(woken) == sorted(pool.key for pool in left_out), "their conditions change"
    problem = _problem(mirror.problem, left_out[0])
    assert problem is not None and problem.reason == Reason.SECRET_NOT_MIRRORED
    assert "namespace greedy need" in problem.cause and "namespace greedy" in problem.fix

    woken.clear()
    reads.values["greedy"] = b"a short secret"  # the tenant shortens its secrets: all of them fit
    mirror.sync()
    assert all(_in_mirror(kube, pool) and _problem(mirror.problem, pool) is None for pool in greedy)
    assert sorted(woken) == sorted(pool.key for pool in left_out), "their conditions change back"


class _ReadsTold(_WebhookSecrets):
    """The by-name reader, noting the namespaces it was asked to read in."""

    def __init__(self, values: dict[str, bytes]) -> None:
        super().__init__(values)
        self.namespaces: set[str] = set()

    def get(self, namespace: str, name: str, max_age: float) -> dict[str, Any]:
        self.namespaces.add(namespace)
        return super().get(namespace, name, max_age)


def test_the_copy_reads_no_secret_where_the_platform_team_did_not_enable_the_operator() -> None:
    """A pool in a namespace not enabled: its Secret was read every interval all the same (a
    refused read and a warning each time), and where the namespace's own admin had bound
    ``edit`` to the operator, copied for the receiver without the platform team."""
    team, stranger = _own_secret_pool("team-a", "web"), _own_secret_pool("stranger", "hooks")
    reads, kube = _ReadsTold({"team-a": b"team-a's secret", "stranger": b"not agreed"}), _MirrorSecret()
    asked: list[str] = []

    def readable(namespace: str) -> bool:
        asked.append(namespace)
        return namespace == "team-a"

    sibling = _own_secret_pool("team-a", "api")
    mirror = SecretMirror(
        _Pools(team, sibling, stranger),
        PoolSecrets(reads),  # type: ignore[arg-type]
        kube,  # type: ignore[arg-type]
        ("ops", "hooks"),
        readable=readable,
    )
    mirror.sync()
    assert _in_mirror(kube, team) and _in_mirror(kube, sibling) and not _in_mirror(kube, stranger)
    assert reads.namespaces == {"team-a"}
    assert sorted(asked) == ["stranger", "team-a"], "asked once a pass per namespace, not per pool"


@pytest.mark.parametrize(
    ("budget", "left_out"),
    [
        (170, set()),
        (120, {"b2"}),
        (90, {"b2", "c2"}),
        (60, {"b1", "b2", "c2"}),
        (10, {"b1", "b2", "c1", "c2"}),
    ],
)
def test_the_namespace_holding_the_most_gives_up_room_first(budget: int, left_out: set[str]) -> None:
    """a holds 10 bytes, b 100, c 60: a namespace loses an entry only while no other holds more."""
    sizes = {"a": {"a1": 10}, "b": {"b1": 50, "b2": 50}, "c": {"c1": 30, "c2": 30}}
    assert fair_share(sizes, budget) == left_out


def test_within_a_namespace_the_largest_secret_goes_first() -> None:
    """One long secret costs fewer pools their copy than many short ones."""
    assert fair_share({"a": {"a1": 5, "a2": 40, "a3": 5}}, 30) == {"a2"}


def test_the_copy_counts_what_the_api_server_stores() -> None:
    """Values under the API server's 1 MiB, whatever the keys: they are stored twice, in
    ``data`` and in ``managedFields``."""
    assert BUDGET < MAX_SECRET_SIZE
    longest = mirror_key("n" * 63, api.WebhookSecretRef(name="n" * 253, key="k" * 253))
    assert entry_bytes(longest, b"s") > 2 * len(longest) + 1


def test_the_operator_with_a_separate_receiver_shows_a_secret_left_out_of_its_copy_on_the_pool() -> None:
    """The check behind the pools' ``WebhookSecretReady`` is the copy's when there is a copy."""
    greedy, others, reads = _greedy_world()
    args = ["--component", "operator", "--webhook-secret-mirror", "ops/hooks"]
    parts = operator_webhook_parts(
        settings_from(parser().parse_args(args)),
        _Pools(*others, *greedy),  # type: ignore[arg-type]
        PoolSecrets(reads),  # type: ignore[arg-type]
        _MirrorSecret(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # no receiver in this process
        notify=lambda pool: None,
        readable=lambda namespace: True,
    )
    assert parts.receiver == [] and [part.leader_only for part in parts.mirror] == [True]
    parts.mirror[0].start()
    try:
        problem = wait_for(lambda: _problem(parts.check, greedy[-1]), timeout=10, message="the first copy")
    finally:
        parts.mirror[0].stop(5.0)
    condition = webhook_secret_condition(
        Stamp(1, datetime(2030, 1, 1, tzinfo=UTC)), problem, "p255", "greedy"
    )
    assert (condition["status"], condition["reason"]) == ("False", "SecretNotMirrored")
    assert condition["message"].endswith("pools naming the same Secret and key share one copy)")
    assert _problem(parts.check, others[0]) is None


@pytest.mark.parametrize("mirror", ["ops/hooks", ""], ids=["separate-receiver", "in-process"])
def test_a_pool_whose_key_its_url_does_not_try_says_so_and_the_others_do_not(mirror: str) -> None:
    """A delivery to /webhook/<namespace>/<secret> is verified with the first 8 keys of that
    Secret by name (``MAX_KEYS_PER_ROUTE``); the pool naming a ninth says so in its condition."""
    pools = [_own_secret_pool("team-a", "hooks", f"k{i}") for i in range(MAX_KEYS_PER_ROUTE + 1)]
    args = ["--component", "operator", "--webhook-secret-mirror", mirror]
    parts = operator_webhook_parts(
        settings_from(parser().parse_args(args)),
        _Pools(*pools),  # type: ignore[arg-type]
        PoolSecrets(_AnyKey(b"team-a's secret")),  # type: ignore[arg-type]
        _MirrorSecret(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # no receiver in this process
        notify=lambda pool: None,
        readable=lambda namespace: True,
    )
    assert [_problem(parts.check, pool) for pool in pools[:-1]] == [None] * MAX_KEYS_PER_ROUTE
    problem = _problem(parts.check, pools[-1])
    assert problem is not None
    condition = webhook_secret_condition(Stamp(1, datetime(2030, 1, 1, tzinfo=UTC)), problem, "p", "hooks")
    assert (condition["status"], condition["reason"]) == ("False", "TooManySecretKeys")
    assert f"not with key k{MAX_KEYS_PER_ROUTE}" in condition["message"]


class _AnyKey(_WebhookSecrets):
    """Every Secret of the namespace holds ``value`` at every key."""

    def __init__(self, value: bytes) -> None:
        super().__init__({})
        self.value = value

    def get(self, namespace: str, name: str, max_age: float) -> dict[str, Any]:
        encoded = base64.b64encode(self.value).decode()
        return {"metadata": {}, "data": {f"k{i}": encoded for i in range(MAX_KEYS_PER_ROUTE + 1)}}


class _MirrorServer(Kube):
    """The API server holding the receiver's copy of the pools' webhook secrets, counting its
    reads; each read raises ``failing`` when set."""

    def __init__(self, data: dict[str, str]) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.data = data
        self.gets = 0
        self.failing: Exception | None = None

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        self.gets += 1
        if self.failing is not None:
            raise self.failing
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"}, "data": self.data}


class _TeamPools:
    """One autoscaling pool in team-a trusting key ``secret`` of its Secret ``hooks``."""

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        raw = {
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {
                "repository": "acme/web",
                "autoscaling": {"maxReplicas": 3, "webhookSecretRef": {"name": "hooks", "key": "secret"}},
            },
        }
        return [ParsedPool(raw, api.RunnerPool.model_validate(raw))]


@pytest.mark.parametrize(
    "failing",
    [
        ApiException(status=429, reason="Too Many Requests"),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
    ids=["throttled", "connection-reset"],
)
def test_forged_deliveries_while_the_mirror_cannot_be_read_read_it_once_and_are_refused(
    failing: Exception,
) -> None:
    """Anyone on the internet may post to /webhook/team-a/hooks with any signature. While the API
    server throttles the receiver (a flood may be why) or cannot be reached, each forged delivery
    read the copy again, twice, and logged twice; a broken connection escaped as a 500."""
    ref = api.WebhookSecretRef(name="hooks", key="secret")
    server = _MirrorServer({mirror_key("team-a", ref): base64.b64encode(b"team-a-secret").decode()})
    server.failing = failing
    verifier = Verifier(lambda: (), _TeamPools(), MirroredSecrets(server, "ops", "hooks"))
    body = b'{"action": "queued"}'
    forged = sign(b"not-the-secret", body)

    verdicts = [verifier(body, forged, Route("team-a", "hooks")) for _ in range(10)]

    assert not any(v.accepted for v in verdicts)
    assert server.gets == 1, "read again no sooner than the retry gap"


class _NoCache:
    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


def test_while_the_secret_cannot_be_read_its_last_copy_verifies_for_five_minutes_at_most() -> None:
    """A blip of the API server must not refuse every delivery; but a secret rotated because it
    leaked must not go on verifying for as long as the API server cannot be reached."""
    now = [1_000.0]
    ref = api.WebhookSecretRef(name="hooks", key="secret")
    server = _MirrorServer({"secret": base64.b64encode(b"team-a-secret").decode()})
    secrets = PoolSecrets(SecretReads(_NoCache(), server, clock=lambda: now[0]), ttl=60.0, retry_gap=0.0)
    assert secrets.get("team-a", ref).values == (b"team-a-secret",)

    server.failing = ApiException(status=503, reason="Service Unavailable")
    now[0] += 61  # past the copy's ttl: read again, and the read fails
    assert secrets.get("team-a", ref).values == (b"team-a-secret",)
    now[0] += STALE_COPY_FOR - 60

    stale = secrets.get("team-a", ref)
    assert stale.values == () and stale.problem is not None and "cannot read Secret" in stale.problem
