"""The pure demand rules: which pools a job counts for, how demand changes, how pools scale."""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api
from runnerpool.demand import matching, rules
from runnerpool.demand.matching import counting_pool, job_matches, recording_pools, registered_labels
from runnerpool.demand.runner_names import RunnerNames
from runnerpool.github.jobs import Job, parse_delivery
from runnerpool.pods import labels, template
from runnerpool.pods.spec_memo import SpecMemo
from runnerpool.settings import GitHubSettings
from tests.demand_payloads import API, delivery, job_object

T0 = datetime(2030, 1, 20, 17, 0, tzinfo=UTC)


def pool(
    name: str = "gpu",
    namespace: str = "ci",
    *,
    autoscaling: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> api.RunnerPool:
    body: dict[str, Any] = {"repository": "octo-org/hello-world", **spec}
    if autoscaling is not None:
        body["autoscaling"] = autoscaling
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": body,
            "status": status or {},
        }
    )


def job(job_id: int, status: str, labels: list[str] | None = None, **kw: Any) -> Job:
    repository = kw.pop("repository", "octo-org/hello-world")
    base = kw.get("api", API)
    labels = ["self-hosted"] if labels is None else labels
    return parse_delivery(
        delivery(
            job_object(job_id, status, labels, repository=repository, **kw), repository=repository, api=base
        )
    )


# ------------------------------------------------------------------ matching


def test_registered_labels_are_what_its_runners_register_with() -> None:
    assert registered_labels(pool(labels=["GPU"])) == {"self-hosted", "linux", "x64", "ci/gpu", "gpu"}
    arm = pool(nodeSelector={"kubernetes.io/arch": "arm64"})
    assert "arm64" in registered_labels(arm) and "x64" not in registered_labels(arm)


def test_registered_labels_are_worked_out_once_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every candidate pool of every webhook delivery is asked, with a new parse after each
    status write: an equal spec is not merged again; a changed one is."""
    merged: list[str] = []
    real = template.node_placement
    monkeypatch.setattr(template, "node_placement", lambda p: merged.append(p.name) or real(p))
    monkeypatch.setattr(matching, "_REGISTERED", SpecMemo())
    for _ in range(3):  # a new parse each time, as after each write of the pool
        assert "arm64" in registered_labels(pool(nodeSelector={"kubernetes.io/arch": "arm64"}))
    assert merged == ["gpu"]
    assert "x64" in registered_labels(pool())
    assert merged == ["gpu", "gpu"]


def matches_with_the_operators_default(pool: api.RunnerPool, job: Job) -> bool:
    """``job_matches`` with the pool's URL as the operator resolves it (``--github-api-url`` = API)."""
    return job_matches(pool, job, GitHubSettings(api_url=API).api_url_of(pool))


def _arch_affinity(*terms: list[str]) -> dict[str, Any]:
    """A template's required node affinity: one term per list, each allowing those architectures."""
    selector_terms = [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": values}]}
        for values in terms
    ]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": selector_terms}}
    return {"spec": {"affinity": {"nodeAffinity": required}}}


@pytest.mark.parametrize(
    ("spec", "arches"),
    [
        # Documented as "any pod field": arm64 through the template's nodeSelector is arm64.
        pytest.param(
            {"template": {"spec": {"nodeSelector": {"kubernetes.io/arch": "arm64"}}}},
            {"arm64"},
            id="template-node-selector",
        ),
        # The template's nodeSelector merges over spec.nodeSelector, as on the pods.
        pytest.param(
            {
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "template": {"spec": {"nodeSelector": {"kubernetes.io/arch": "arm64"}}},
            },
            {"arm64"},
            id="template-over-spec",
        ),
        pytest.param({"template": _arch_affinity(["arm64"])}, {"arm64"}, id="affinity"),
        # Either architecture: which one a runner gets is unknown, so it takes jobs for both.
        pytest.param({"template": _arch_affinity(["amd64", "arm64"])}, {"x64", "arm64"}, id="either"),
        pytest.param({"template": _arch_affinity(["amd64"], ["arm64"])}, {"x64", "arm64"}, id="either-term"),
        pytest.param({}, {"x64"}, id="default"),
    ],
)
def test_the_architecture_label_is_where_the_runner_pods_are_placed(
    spec: dict[str, Any], arches: set[str]
) -> None:
    placed = pool(autoscaling={"maxReplicas": 5}, **spec)
    assert registered_labels(placed) & {"x64", "arm64", "arm"} == arches
    for label, wanted in (("ARM64", "arm64" in arches), ("X64", "x64" in arches)):
        assert matches_with_the_operators_default(placed, job(1, "queued", ["self-hosted", label])) is wanted


def test_a_jit_runner_is_asked_for_with_every_label_it_matches_and_no_guessed_architecture() -> None:
    """A JIT runner has the labels its request names and no others: what matching counts a pool
    for is what the request names, spelled as GitHub does; where the pods may land on either
    architecture the request names neither (its config is made before the pod is scheduled), and
    the pool takes neither architecture's jobs."""
    jit = pool(labels=["GPU"], registration="jit")
    assert labels.registered(jit) == ["self-hosted", "Linux", "X64", "ci/gpu", "GPU"]
    assert registered_labels(jit) == {label.lower() for label in labels.registered(jit)}

    either = pool(
        registration="jit", autoscaling={"maxReplicas": 5}, template=_arch_affinity(["amd64", "arm64"])
    )
    assert labels.registered(either) == ["self-hosted", "Linux", "ci/gpu"]
    assert not matches_with_the_operators_default(either, job(1, "queued", ["self-hosted", "X64"]))


@pytest.mark.parametrize(
    ("labels", "matches"),
    [
        (["self-hosted"], True),
        (["self-hosted", "gpu"], True),
        (["Self-Hosted", "Linux", "X64", "GPU"], True),  # GitHub compares case-insensitively
        (["self-hosted", "ci/gpu"], True),
        (["self-hosted", "gpu", "big-disk"], False),  # one label the pool lacks
        (["ubuntu-latest"], False),  # a GitHub-hosted runner's job
        (["self-hosted", "ARM64"], False),
        (["self-hosted", "other-ns/gpu"], False),
        ([], False),  # runner group only: nothing says it wants this pool
    ],
)
def test_a_job_counts_where_the_pool_has_all_its_labels(labels: list[str], matches: bool) -> None:
    assert matches_with_the_operators_default(pool(labels=["gpu"]), job(1, "queued", labels)) is matches


def test_a_job_counts_only_in_its_own_scope_and_host() -> None:
    org_pool = pool(repository=None, organization="Octo-Org")
    assert matches_with_the_operators_default(org_pool, job(1, "queued", repository="octo-org/any-repo"))
    assert not matches_with_the_operators_default(org_pool, job(1, "queued", repository="other-org/any-repo"))
    assert matches_with_the_operators_default(pool(repository="Octo-Org/Hello-World"), job(1, "queued"))
    assert not matches_with_the_operators_default(pool(repository="octo-org/other"), job(1, "queued"))
    ghes = pool(githubApiUrl="https://ghe.example.com/api/v3")
    assert not matches_with_the_operators_default(ghes, job(1, "queued"))
    assert matches_with_the_operators_default(ghes, job(1, "queued", api="https://ghe.example.com/api/v3"))


# ------------------------------------------------------------------ demand


#: The pool's runners: its pods' names. "gpu-2-xyz12" would pass a name-prefix test but is
#: another pool's ("gpu-2") runner.
OURS = frozenset({"gpu-abcde"})


def auto(**kw: Any) -> dict[str, Any]:
    return {"maxReplicas": 10, **kw}


def test_states_only_move_forward() -> None:
    demand, moved = rules.apply(None, [job(1, "queued"), job(2, "queued")], T0, runners=OURS)
    assert (demand.queued, demand.busy, len(moved)) == (2, 0, 2)
    runner = "gpu-abcde"
    demand, _ = rules.apply(demand, [job(1, "in_progress", runner=runner)], T0, runners=OURS)
    assert (demand.queued, demand.busy) == (1, 1)
    demand, _ = rules.apply(demand, [job(1, "completed", runner=runner)], T0, runners=OURS)
    assert (demand.queued, demand.busy) == (1, 0)
    # A late in_progress or queued delivery of job 1 cannot bring it back.
    again, moved = rules.apply(
        demand, [job(1, "queued"), job(1, "in_progress", runner=runner)], T0, runners=OURS
    )
    assert again == demand and moved == []


def test_a_job_taken_by_another_pools_runner_no_longer_counts_here() -> None:
    demand, _ = rules.apply(None, [job(1, "queued")], T0, runners=OURS)
    demand, _ = rules.apply(demand, [job(1, "in_progress", runner="gpu-2-xyz12")], T0, runners=OURS)
    assert (demand.queued, demand.busy) == (0, 0)


def test_a_job_started_on_a_runner_github_does_not_name_is_busy_only_where_it_was_queued() -> None:
    """GitHub sometimes sends ``in_progress`` without ``runner_name`` (garm#19); counted busy in
    every pool it matched, in every namespace, it kept each a runner too many until it ended."""
    elsewhere, _ = rules.apply(None, [job(7, "in_progress", runner=None)], T0, runners=OURS)
    assert (elsewhere.queued, elsewhere.busy) == (0, 0)
    late, _ = rules.apply(elsewhere, [job(7, "queued")], T0, runners=OURS)
    assert late.queued == 0, "it has started: a late queued delivery does not count it"
    counted, _ = rules.apply(None, [job(7, "queued")], T0, runners=OURS)
    started, _ = rules.apply(counted, [job(7, "in_progress", runner=None)], T0, runners=OURS)
    assert (started.queued, started.busy) == (0, 1), "the pool that counted it sees it leave the queue"


def test_states_that_want_no_runner_are_not_tracked() -> None:
    demand, _ = rules.apply(None, [job(1, "waiting")], T0, runners=OURS)
    assert demand.jobs == {}


def test_completed_jobs_are_forgotten_after_a_while() -> None:
    demand, _ = rules.apply(None, [job(1, "completed")], T0, runners=OURS)
    assert "1" in demand.jobs
    later, _ = rules.apply(demand, [job(2, "queued")], T0 + rules.COMPLETED_TTL, runners=OURS)
    assert set(later.jobs) == {"2"}


def test_more_active_jobs_than_the_status_may_hold_keep_the_oldest_queued_and_every_busy_one() -> None:
    """A large organization's backlog: past ``api.MAX_TRACKED_JOBS`` the demand was invalid, and
    every write of the pool's demand (deliveries and polls alike) was refused from then on."""
    busy = job(1, "in_progress", runner=next(iter(OURS)))
    demand, _ = rules.apply(None, [busy], T0, runners=OURS)
    backlog = [job(i, "queued") for i in range(2, api.MAX_TRACKED_JOBS + 2)]
    demand, _ = rules.apply(demand, backlog, T0 + timedelta(seconds=1), runners=OURS)
    newer = [job(i, "queued") for i in range(api.MAX_TRACKED_JOBS + 2, api.MAX_TRACKED_JOBS + 10)]

    demand, _ = rules.apply(demand, newer, T0 + timedelta(seconds=2), runners=OURS)

    assert len(demand.jobs) == api.MAX_TRACKED_JOBS
    assert (demand.busy, demand.queued) == (1, api.MAX_TRACKED_JOBS - 1)
    assert "1" in demand.jobs and "2" in demand.jobs, "the busy job and the oldest queued stay"
    assert str(api.MAX_TRACKED_JOBS + 9) not in demand.jobs, "the newest queued wait for room"


def test_repair_ends_tracked_jobs_a_poll_no_longer_sees_after_the_grace() -> None:
    demand, _ = rules.apply(None, [job(1, "queued"), job(2, "queued")], T0, runners=OURS)
    grace = timedelta(seconds=60)
    soon, _ = rules.repair(
        demand,
        [job(2, "queued")],
        ["octo-org/hello-world"],
        now=T0 + timedelta(seconds=5),
        grace=grace,
        runners=OURS,
    )
    assert soon.queued == 2, "a job just queued may not be listed yet"
    late, _ = rules.repair(
        demand,
        [job(2, "queued"), job(3, "queued")],
        ["octo-org/hello-world"],
        now=T0 + grace,
        grace=grace,
        runners=OURS,
    )
    assert (late.queued, late.jobs["1"].state) == (2, "completed")
    unpolled, _ = rules.repair(demand, [], ["octo-org/other"], now=T0 + grace, grace=grace, runners=OURS)
    assert unpolled.queued == 2, "only repositories that were polled say anything"


def test_repair_ends_at_once_a_job_an_earlier_poll_listed() -> None:
    """GitHub lists a job until it completes: listed once and gone now, it has ended.

    Waiting out the grace for it kept a pool that polls (no webhook) a runner too many for a
    minute after every job (the demand benchmark's back-to-0 of 62 s).
    """
    demand, _ = rules.apply(
        None, [job(1, "queued"), job(2, "in_progress", runner="gpu-abcde")], T0, runners=OURS
    )
    after, _ = rules.repair(
        demand,
        [],
        ["octo-org/hello-world"],
        now=T0 + timedelta(seconds=30),
        grace=timedelta(seconds=60),
        runners=OURS,
        listed_before={"1", "2"},
    )
    assert (after.queued, after.busy) == (0, 0)
    assert {key: j.state for key, j in after.jobs.items()} == {"1": "completed", "2": "completed"}


def test_repair_ends_of_a_repository_that_answers_404_only_the_jobs_a_poll_listed() -> None:
    """404: deleted, or hidden from the credential while its deliveries come; only a job an earlier
    poll listed shows the repository was visible, and so went since."""
    demand, _ = rules.apply(None, [job(1, "queued"), job(2, "queued")], T0, runners=OURS)
    grace = timedelta(seconds=60)
    after, _ = rules.repair(
        demand,
        [],
        [],
        now=T0 + 10 * grace,
        grace=grace,
        runners=OURS,
        listed_before={"1"},
        hidden=["Octo-Org/Hello-World"],
    )
    assert {key: j.state for key, j in after.jobs.items()} == {"1": "completed", "2": "queued"}


def test_a_busy_job_ends_once_its_runners_pod_is_gone_though_no_poll_goes_through() -> None:
    """GitHub sometimes shows a finished ephemeral runner's job in progress for long, or never
    sends ``completed`` (actions/runner#4309); with the poll refused (403, nothing polled) the job
    counted busy for ever, and the pool kept a runner too many."""
    theirs = "gpu-2-xyz12"
    demand, _ = rules.apply(None, [job(1, "in_progress", runner="gpu-abcde")], T0, runners=OURS)
    demand, _ = rules.apply(demand, [job(2, "queued")], T0, runners=OURS)
    demand, _ = rules.apply(demand, [job(2, "in_progress", runner=None)], T0, runners=OURS)
    grace = timedelta(seconds=60)

    def refused_poll(at: datetime, runners: Container[str]) -> dict[str, str]:
        after, _ = rules.repair(demand, [], [], now=at, grace=grace, runners=runners)
        return {key: j.state for key, j in after.jobs.items()}

    pod_gone = frozenset({theirs})
    assert refused_poll(T0 + grace / 2, pod_gone)["1"] == "in_progress", "a pod the cache may not show yet"
    assert refused_poll(T0 + grace, OURS)["1"] == "in_progress", "its pod is there: still running"
    assert refused_poll(T0 + grace, pod_gone) == {"1": "completed", "2": "in_progress"}, (
        "a job whose runner GitHub did not name keeps to the age limit"
    )
    by_name = RunnerNames("gpu")
    assert refused_poll(T0 + grace, by_name)["1"] == "in_progress", "names alone cannot tell a pod gone"


def test_a_job_past_githubs_own_limits_ends_though_no_poll_goes_through() -> None:
    """GitHub cancels a self-hosted job queued 24 hours and ends one running 5 days: tracked
    past that, a job whose end was never heard of has ended."""
    demand, _ = rules.apply(None, [job(1, "queued")], T0, runners=OURS)
    demand, _ = rules.apply(demand, [job(2, "in_progress", runner="gpu-abcde")], T0, runners=OURS)
    for at, states in [
        (T0 + timedelta(hours=24) - timedelta(seconds=1), {"1": "queued", "2": "in_progress"}),
        (T0 + timedelta(hours=24), {"1": "completed", "2": "in_progress"}),
        (T0 + timedelta(days=5), {"1": "completed", "2": "completed"}),
    ]:
        after, _ = rules.repair(demand, [], [], now=at, grace=timedelta(seconds=60), runners=OURS)
        assert {key: j.state for key, j in after.jobs.items()} == states, at


# ------------------------------------------------------------------ one pool counts a queued job

ORG = {"organization": "octo-org", "repository": None}
AUTO = {"maxReplicas": 5}


@pytest.mark.parametrize(
    ("pools", "labels", "counted_by"),
    [
        # The fewest labels beyond the job's: a plain job leaves the gpu pool alone...
        ([("gpu", "ci", {"labels": ["gpu"]}), ("cpu", "ci", {})], ["self-hosted"], "ci/cpu"),
        # ...and a gpu job can only go there.
        ([("gpu", "ci", {"labels": ["gpu"]}), ("cpu", "ci", {})], ["self-hosted", "gpu"], "ci/gpu"),
        # A repository pool before an organization pool, even a plainer one: GitHub routes to
        # repository-level runners first.
        ([("org", "ci", ORG), ("repo", "ci", {"labels": ["big"]})], ["self-hosted"], "ci/repo"),
        # Between organization pools, the label rule again.
        ([("org-gpu", "ci", {**ORG, "labels": ["gpu"]}), ("org", "ci", ORG)], ["self-hosted"], "ci/org"),
        # Equally specific: the name, whatever the order they come in.
        ([("b", "ci", {}), ("a", "ci", {})], ["self-hosted"], "ci/a"),
        # Arm64 and x64 pools: the job's own architecture label decides; without one, the label rule.
        (
            [("arm", "ci", {"nodeSelector": {"kubernetes.io/arch": "arm64"}}), ("x64", "ci", {})],
            ["self-hosted", "ARM64"],
            "ci/arm",
        ),
        # Nothing to choose from.
        ([], ["self-hosted"], None),
    ],
)
def test_one_pool_counts_a_queued_job(
    pools: list[tuple[str, str, dict[str, Any]]], labels: list[str], counted_by: str | None
) -> None:
    models = [pool(name, namespace, autoscaling=AUTO, **spec) for name, namespace, spec in pools]
    queued = job(1, "queued", labels)
    matching = [
        p for p in models if matches_with_the_operators_default(p, queued)
    ]  # the rule sees only these
    chosen = counting_pool(queued, matching)
    assert (None if chosen is None else f"{chosen.namespace}/{chosen.name}") == counted_by
    assert [f"{p.namespace}/{p.name}" for p in recording_pools(queued, matching)] == (
        [] if counted_by is None else [counted_by]
    )


def test_each_namespace_counts_a_queued_job_once_and_none_takes_it_from_another() -> None:
    """The one-pool rule applies within a namespace (a tenant): another namespace's pool, whatever
    its name, does not decide whether team-a's pools count the job."""
    for thief in ("aaa", "zzz"):
        models = [
            pool("app", "team-a", autoscaling=AUTO),
            pool("plain", "team-a", autoscaling=AUTO, labels=["big"]),
            pool(thief, "aaa-thief", autoscaling=AUTO),
        ]
        counted = [f"{p.namespace}/{p.name}" for p in recording_pools(job(1, "queued"), models)]
        assert sorted(counted) == ["aaa-thief/" + thief, "team-a/app"]


REFUSED = {
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "RunnerGroupNotFound", "message": "no group"},
        {"type": "RunnerGroupReady", "status": "False", "reason": "RunnerGroupNotFound"},
    ]
}


def test_a_pool_refused_runners_leaves_a_queued_job_to_a_sibling_that_can_run_it() -> None:
    """``a-new``'s runner group does not exist: it makes no runner. Counting the job because its
    name sorts first, it left ``b-prod`` at 0 and the job waiting for ever; a repository pool
    refused runners does not outrank a working organization pool either."""
    broken = pool("a-new", autoscaling=AUTO, runnerGroup="does-not-exist", status=REFUSED, **ORG)
    working = pool("b-prod", autoscaling=AUTO, **ORG)
    unreadable = {"conditions": [{"type": "Ready", "status": "False", "reason": "BadCredentials"}]}
    broken_repo = pool("a-repo", autoscaling=AUTO, status=unreadable)
    queued = job(9, "queued")
    assert [p.name for p in recording_pools(queued, [broken, working, broken_repo])] == ["b-prod"]
    # Alone in its namespace, it still counts the job: it runs once the pool is fixed.
    assert [p.name for p in recording_pools(queued, [broken])] == ["a-new"]


def test_a_started_or_ended_job_is_heard_by_every_pool_it_matches() -> None:
    """The pool whose runner took it counts it busy; one that counted it queued sees it end."""
    models = [pool("gpu", labels=["gpu"], autoscaling=AUTO), pool("cpu", autoscaling=AUTO)]
    for state in ("in_progress", "completed"):
        assert recording_pools(job(1, state, runner="gpu-abc"), models) == models
    assert recording_pools(job(1, "waiting"), models) == [], "no runner wanted yet: nothing to record"


def test_a_started_or_ended_job_is_written_only_on_the_pools_it_concerns() -> None:
    """Given which pools a job concerns (tracked there, or run by their runner): those, and each
    namespace's counting pool, which must see it end lest a late queued delivery count it."""
    models = [
        pool("a", autoscaling=AUTO),
        pool("b", autoscaling=AUTO),
        pool("c", autoscaling=AUTO),
        pool("a", "team-b", autoscaling=AUTO),
        pool("z", "team-b", autoscaling=AUTO),
    ]
    runs = {("ci", "c")}
    for state in ("in_progress", "completed"):
        heard = recording_pools(
            job(1, state, runner="c-x1y2z"), models, lambda p: (p.namespace, p.name) in runs
        )
        assert [f"{p.namespace}/{p.name}" for p in heard] == ["ci/a", "ci/c", "team-b/a"]
    assert [p.name for p in recording_pools(job(1, "queued"), models, lambda p: True)] == ["a", "a"]


def test_an_unconfirmed_job_counts_only_once_news_young_enough_confirms_it() -> None:
    """A late ``queued`` delivery is kept unconfirmed (not counted); a poll's listing or a fresh
    delivery confirms it, a later state supersedes it, and it never unmakes what is tracked."""
    late = dataclasses.replace(job(9, "queued"), unconfirmed=True)
    kept, moved = rules.apply(None, [late], T0, runners=())
    assert (kept.queued, moved) == (0, []) and kept.jobs["9"].unconfirmed

    confirmed, _ = rules.apply(kept, [job(9, "queued")], T0, runners=())
    assert confirmed.queued == 1 and not confirmed.jobs["9"].unconfirmed
    started, _ = rules.apply(kept, [job(9, "in_progress", runner="gpu-x1y2z")], T0, runners={"gpu-x1y2z"})
    assert (started.queued, started.busy) == (0, 1)
    again, moved = rules.apply(confirmed, [late], T0, runners=())
    assert again == confirmed and moved == [], "a replay of it changes nothing"


def test_a_flood_of_unconfirmed_jobs_pushes_no_real_one_out_and_counts_no_busy_runner() -> None:
    """Late ``queued`` deliveries of other jobs, as many as the record holds (a replay flood):
    a real job queued after them is kept and counted. A job started on no named runner counts
    busy only where it was counted queued, never where it was only unconfirmed."""
    base = dataclasses.replace(job(1, "queued"), unconfirmed=True)
    flood = [dataclasses.replace(base, id=1000 + n) for n in range(api.MAX_TRACKED_JOBS)]
    demand, _ = rules.apply(None, flood, T0, runners=())
    demand, _ = rules.apply(demand, [job(7, "queued")], T0 + timedelta(seconds=5), runners=())
    assert "7" in demand.jobs and demand.queued == 1 and len(demand.jobs) == api.MAX_TRACKED_JOBS

    started, _ = rules.apply(demand, [job(1000, "in_progress")], T0, runners={"gpu-x1y2z"})
    assert (started.busy, started.jobs["1000"].state) == (0, "completed")


def test_an_unconfirmed_job_an_older_operator_moved_on_counts_as_it_is_now() -> None:
    """An operator that knows no such flag merges only what it changed: the flag stays on a
    job it saw start, which is busy whatever the flag says."""
    late = dataclasses.replace(job(9, "queued"), unconfirmed=True)
    kept, _ = rules.apply(None, [late], T0, runners=())
    moved_on = kept.jobs["9"].model_copy(update={"state": "in_progress", "runner": "gpu-x1y2z"})
    demand, _ = rules.apply(api.Demand(jobs={"9": moved_on}), [], T0, runners={"gpu-x1y2z"})
    assert demand.busy == 1
