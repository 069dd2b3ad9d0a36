"""The webhook receiver's own rules: its runners told by name, its flags (issue 30)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from runnerpool import api, naming
from runnerpool.cli import parser, settings_from
from runnerpool.demand import rules
from runnerpool.demand.runner_names import RunnerNames
from runnerpool.demand.secret import MAX_POOL_SECRET_BYTES, MAX_POOL_SECRET_LINES, PoolSecrets
from runnerpool.demand.secret_mirror import MAX_DATA_KEY_LENGTH, SecretMirror, mirror_key
from runnerpool.github.jobs import Job
from runnerpool.settings import OPERATOR, WEBHOOK_RECEIVER


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
