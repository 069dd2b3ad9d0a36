"""The secret updater's JIT fills: one runner per pod, leftovers replaced, outages backed off per pool.

GitHub is the in-process fake (``runnerpool.github.fake``, GitHub's codes: a name in use is a 409);
the scheduler is never started, so each job is run by hand, in this thread.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from runnerpool.domain import Scope
from runnerpool.github.credentials import ClientCache
from runnerpool.github.errors import BadCredentials, NotFound, NotSent, RateLimited, Unavailable
from runnerpool.github.translate import untrusted
from runnerpool.github.types import JitConfig, JitRequest, Runner
from runnerpool.naming import JIT_RUNNER_ID_ANNOTATION, JIT_SECRET_KEY
from runnerpool.reasons import Reason
from runnerpool.runners.leftovers import delete_leftover_runner
from runnerpool.scaleset.errors import ScaleSetNotFound
from secret_updater.jit import JitSecretUpdater, ScaleSetJit, SecretWrites
from tests.test_secret_updater_tokens import POOL, Harness, harness

__all__ = ["harness"]

SCOPE = Scope(organization="octo-org")
LABELS = ("team-a/build", "gpu")


def _request(pod: str) -> JitRequest:
    return JitRequest(name=pod, labels=LABELS, work_folder="/runner/_work")


def _run(h: Harness, uid: str) -> None:
    job = h.scheduler.get_job(f"jit/{uid}")
    assert job is not None, f"no JIT job for {uid}"
    job.func(*job.args, **job.kwargs)


def _jobs(h: Harness) -> list[str]:
    return sorted(j.id for j in h.scheduler.get_jobs() if j.id.startswith("jit/"))


@pytest.fixture
def jit(harness: Harness) -> Harness:
    return harness


def test_a_pod_gets_one_runner_named_after_it_in_its_secret(jit: Harness) -> None:
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))  # asked again: free
    assert _jobs(jit) == ["jit/uid-1"]

    _run(jit, "uid-1")

    [(scope, request)] = jit.github.jit_requests
    assert (scope, request.name, request.labels, request.runner_group_id) == (SCOPE, "build-abcde", LABELS, 1)
    [(namespace, secret, body)] = jit.patches
    assert (namespace, secret) == ("team-a", "runner-jit-build-1")
    [runner] = jit.github.runners[SCOPE]
    assert body == {
        "metadata": {"annotations": {JIT_RUNNER_ID_ANNOTATION: str(runner.id)}},
        "stringData": {JIT_SECRET_KEY: "jit-" + str(SCOPE) + "-build-abcde"},
    }
    # Done: no job left, and asking again for the same pod asks GitHub nothing.
    assert _jobs(jit) == []
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    assert _jobs(jit) == []


def test_a_leftover_runner_of_the_pods_name_is_deleted_and_asked_again(jit: Harness) -> None:
    jit.github.runners[SCOPE] = [
        Runner(id=5, name="build-abcde", status="offline", busy=False, labels=LABELS)
    ]
    jit.updater.jit.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))

    _run(jit, "uid-1")

    assert jit.github.deleted == [(SCOPE, 5)]
    assert len(jit.github.jit_requests) == 2
    [runner] = jit.github.runners[SCOPE]
    assert runner.id != 5 and runner.name == "build-abcde"
    assert len(jit.patches) == 1


def test_a_busy_runner_of_that_name_is_left_alone_and_reported(jit: Harness) -> None:
    jit.github.runners[SCOPE] = [Runner(id=5, name="build-abcde", status="online", busy=True, labels=LABELS)]
    jit.updater.jit.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))

    _run(jit, "uid-1")

    assert jit.github.deleted == [] and jit.patches == []
    failure = jit.updater.jit.failure("team-a", "build")
    assert failure is not None and failure.reason == "JitRunnerNameInUse"


def test_a_runner_of_that_name_without_the_pools_label_is_another_tenants_and_left_alone(
    jit: Harness,
) -> None:
    """Pod names carry no namespace: team-b's pool "build" can have a runner of this name."""
    theirs = Runner(id=5, name="build-abcde", status="online", busy=False, labels=("team-b/build", "gpu"))
    jit.github.runners[SCOPE] = [theirs]
    jit.updater.jit.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))

    _run(jit, "uid-1")

    assert jit.github.deleted == [] and jit.patches == []
    assert jit.github.runners[SCOPE] == [theirs]
    failure = jit.updater.jit.failure("team-a", "build")
    assert failure is not None and failure.reason == "JitRunnerNameInUse"
    assert "another pool's" in failure.message


def test_a_runner_of_one_pods_name_in_the_way_holds_up_that_pod_alone(jit: Harness) -> None:
    """Its failure backed the whole pool off, and the scheduler runs the pods due together in
    the same order: the pod in the way went first each time, and the others never got a config."""
    theirs = Runner(id=5, name="build-abcde", status="online", busy=False, labels=("team-b/build", "gpu"))
    jit.github.runners[SCOPE] = [theirs]
    for index, name in enumerate(("build-abcde", "build-fghij", "build-klmno")):
        jit.updater.jit.fill(POOL, f"runner-jit-build-{index}", f"uid-{index}", _request(name))

    for index in range(3):
        _run(jit, f"uid-{index}")

    assert sorted(secret for _, secret, _ in jit.patches) == ["runner-jit-build-1", "runner-jit-build-2"]
    assert _jobs(jit) == ["jit/uid-0"], "the pod in the way is asked for again, after its backoff"


def test_a_leftover_with_no_pool_label_at_all_is_still_deleted(jit: Harness) -> None:
    """A scale set's runner keeps no pool label where GitHub has no custom scale-set labels:
    only another pool's label keeps a leftover."""
    jit.github.runners[SCOPE] = [
        Runner(id=5, name="build-abcde", status="offline", busy=False, labels=("gpu",))
    ]
    jit.updater.jit.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))

    _run(jit, "uid-1")

    assert jit.github.deleted == [(SCOPE, 5)] and len(jit.patches) == 1


def test_an_outage_backs_the_whole_pool_off_then_fills_every_pod(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = jit.github.generate_jitconfig

    def down(scope: Scope, request: JitRequest) -> Any:
        calls.append(request.name)
        raise Unavailable("HTTP 503")

    monkeypatch.setattr(jit.github, "generate_jitconfig", down)
    jit_updater = jit.updater.jit
    for i in range(3):
        jit_updater.fill(POOL, f"runner-jit-build-{i}", f"uid-{i}", _request(f"build-{i}"))

    for i in range(3):
        _run(jit, f"uid-{i}")

    # One call failed; the pool's other pods waited instead of asking.
    assert calls == ["build-0"]
    failure = jit_updater.failure("team-a", "build")
    assert failure is not None and failure.reason == "GitHubUnavailable"
    assert jit.notified == [("team-a", "build")]
    waits = {jit.scheduler.get_job(f"jit/uid-{i}").next_run_time for i in range(3)}  # type: ignore[union-attr]
    assert len(waits) == 1 and min(waits) > jit.clock.now

    monkeypatch.setattr(jit.github, "generate_jitconfig", real)
    jit.clock.advance(timedelta(minutes=5))
    for i in range(3):
        _run(jit, f"uid-{i}")

    assert sorted(secret for _, secret, _ in jit.patches) == [f"runner-jit-build-{i}" for i in range(3)]
    assert jit_updater.failure("team-a", "build") is None


def test_once_a_failing_pools_backoff_ends_one_pod_asks_github_for_all(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its pods are all due when the backoff ends, and run on several threads: each passed the
    check while the first one's call was out, so a retry cost a call per thread, and the pool's
    backoff grew by as many tries. Here the others run while the first one's call is out."""
    calls: list[str] = []
    jit_updater = jit.updater.jit

    def down(scope: Scope, request: JitRequest) -> Any:
        calls.append(request.name)
        if len(calls) == 2:  # the retry's call is out: the other pods' jobs run meanwhile
            for i in (1, 2):
                _run(jit, f"uid-{i}")
        raise Unavailable("HTTP 503")

    monkeypatch.setattr(jit.github, "generate_jitconfig", down)
    for i in range(3):
        jit_updater.fill(POOL, f"runner-jit-build-{i}", f"uid-{i}", _request(f"build-{i}"))
    _run(jit, "uid-0")
    first_retry = jit.scheduler.get_job("jit/uid-0").next_run_time  # type: ignore[union-attr]
    jit.clock.now = first_retry

    _run(jit, "uid-0")

    assert calls == ["build-0", "build-0"], "one call a retry for the whole pool"
    second_retry = jit.scheduler.get_job("jit/uid-0").next_run_time  # type: ignore[union-attr]
    assert second_retry - first_retry <= timedelta(seconds=10), "the second try's backoff, not a later one's"


def test_a_failed_fill_is_no_longer_the_pools_once_no_pod_waits_for_a_config(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: a pool following demand whose pod's fill failed in an outage, and whose
    pod then went (its job ended elsewhere), said TokenReady False GitHubUnavailable, and so was
    passed over by the demand of its own jobs, until its next pod got a config: maybe never.
    The pool's backoff stays: its next pod still waits for it."""

    def down(scope: Scope, request: JitRequest) -> Any:
        raise Unavailable("HTTP 503")

    monkeypatch.setattr(jit.github, "generate_jitconfig", down)
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-0", "uid-0", _request("build-0"))
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-1"))
    _run(jit, "uid-0")
    assert jit_updater.failure("team-a", "build") is not None

    jit_updater.forget_pod("team-a", "uid-0")
    assert jit_updater.failure("team-a", "build") is not None, "another pod still waits"
    jit.notified.clear()
    jit_updater.forget_pod("team-a", "uid-1")

    assert jit_updater.failure("team-a", "build") is None
    assert jit.notified == [("team-a", "build")], "the pool's status is written again"
    jit_updater.fill(POOL, "runner-jit-build-2", "uid-2", _request("build-2"))
    job = jit.scheduler.get_job("jit/uid-2")
    assert job is not None and job.next_run_time > jit.clock.now, "the next pod waits for the backoff"


def _refused_credentials(jit: Harness, monkeypatch: pytest.MonkeyPatch, uid: str) -> JitSecretUpdater:
    """The pool's pod ``uid`` asked for a config with credentials GitHub refuses (401)."""

    def refused(scope: Scope, request: JitRequest) -> Any:
        raise BadCredentials("HTTP 401")

    monkeypatch.setattr(jit.github, "generate_jitconfig", refused)
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-1", uid, _request("build-1"))
    _run(jit, uid)
    failure = jit_updater.failure("team-a", "build")
    assert failure is not None and failure.reason == Reason.BAD_CREDENTIALS
    return jit_updater


def test_credentials_github_refuses_stay_the_pools_failure_with_no_pod_waiting(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They need a human: cleared with the last pod, the pool's next job went to it again (not to
    a sibling pool that works) and waited for its backoff before the fill failed once more."""
    jit_updater = _refused_credentials(jit, monkeypatch, "uid-0")
    jit_updater.forget_pod("team-a", "uid-0")

    failure = jit_updater.failure("team-a", "build")
    assert failure is not None and failure.reason == Reason.BAD_CREDENTIALS

    # The user fixes the Secret: with no pod waiting, the pool's next pass tells the updater.
    jit_updater.follow(POOL)
    assert jit_updater.failure("team-a", "build") is not None, "the same credentials: still refused"
    jit.notified.clear()
    jit_updater.follow(replace(POOL, credentials_version=POOL.credentials_version + "-fixed"))
    assert jit_updater.failure("team-a", "build") is None
    assert jit.notified == [("team-a", "build")], "the pool's status is written again"


def test_a_pod_forgotten_before_its_run_gets_no_runner(jit: Harness) -> None:
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    jit_updater.forget_pod("team-a", "uid-1")
    jit_updater.fill(POOL, "runner-jit-build-2", "uid-2", _request("build-fghij"))
    jit_updater.stop("team-a", "build")

    assert _jobs(jit) == []
    assert jit.github.jit_requests == []


def test_the_operators_stop_ends_every_jit_job_too(jit: Harness) -> None:
    """``stop_all`` (the scheduler's runnable stopping on a lost Lease or SIGTERM) leaves no
    JIT job behind on the scheduler it does not own, so no runner is made after it."""
    jit.updater.start(POOL)
    jit.updater.jit.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    assert _jobs(jit) == ["jit/uid-1"]

    jit.updater.stop_all()

    assert jit.scheduler.get_jobs() == []
    assert jit.github.jit_requests == []


def test_no_jit_config_in_the_logs(jit: Harness, caplog: pytest.LogCaptureFixture) -> None:
    refusing = [True]

    def patch(namespace: str, name: str, body: dict[str, Any]) -> None:
        if refusing[0]:
            raise RuntimeError(f"refused {body}")  # an error that repeats the body it was given
        jit.patches.append((namespace, name, body))

    caplog.set_level(logging.DEBUG)
    clients = ClientCache(lambda ns, name: {"token": "ghp_x"}, factory=lambda data, url: jit.github)
    jit_updater = JitSecretUpdater(
        SecretWrites(clients, patch, lambda ns, name: None, jit.scheduler, delete_leftover_runner),
        clock=jit.clock,
    )
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")
    failure = jit_updater.failure("team-a", "build")
    assert failure is not None and failure.reason == "TokenSecretPatchFailed"

    # Tried again: the runner the lost write was for is a leftover by then, and replaced.
    refusing[0] = False
    jit.clock.advance(timedelta(minutes=5))
    _run(jit, "uid-1")

    [(_, _, body)] = jit.patches
    assert len(jit.github.deleted) == 1
    assert jit_updater.failure("team-a", "build") is None
    assert body["stringData"][JIT_SECRET_KEY] not in caplog.text


def test_a_pool_stopped_during_a_failing_call_is_not_asked_again(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    jit_updater = jit.updater.jit

    def stopped_meanwhile(scope: Scope, request: JitRequest) -> Any:
        jit_updater.stop("team-a", "build")  # the pool is deleted while GitHub is slow to fail
        raise Unavailable("HTTP 503")

    monkeypatch.setattr(jit.github, "generate_jitconfig", stopped_meanwhile)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))

    _run(jit, "uid-1")

    assert _jobs(jit) == []
    assert jit_updater.failure("team-a", "build") is None
    assert jit.notified == []


def test_a_runner_made_for_a_pool_stopped_during_the_call_is_deleted_not_left_on_github(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's finalizer stops its jobs while generate-jitconfig is on its way, and GitHub
    has registered the runner when it answers: the config goes nowhere, and with the pool's
    runner manager stopped too, nothing else would ever delete that runner."""
    jit_updater, made = jit.updater.jit, jit.github.generate_jitconfig

    def stopped_meanwhile(scope: Scope, request: JitRequest) -> Any:
        config = made(scope, request)
        jit_updater.stop("team-a", "build")  # the finalizer's pass, while the answer travels back
        return config

    monkeypatch.setattr(jit.github, "generate_jitconfig", stopped_meanwhile)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert jit.patches == [], "no Secret written for a pod whose pool is gone"
    assert [r.name for r in jit.github.runners.get(SCOPE, [])] == [], "the runner made for it is deleted"


def test_a_runner_github_made_before_a_timeout_of_a_pool_stopped_meanwhile_is_deleted(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub registered the runner but its answer never came back (a deadline, a reset), and
    the pool was deleted meanwhile: the failure was dropped with the pool, and its finalizer,
    told of no runner, let it go without GitHub. The runner stayed registered."""
    jit_updater, made = jit.updater.jit, jit.github.generate_jitconfig

    def made_then_lost(scope: Scope, request: JitRequest) -> Any:
        made(scope, request)
        jit_updater.stop("team-a", "build")
        raise Unavailable("POST generate-jitconfig: no answer within the deadline")

    monkeypatch.setattr(jit.github, "generate_jitconfig", made_then_lost)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert [r.name for r in jit.github.runners.get(SCOPE, [])] == [], "left registered on GitHub"


@pytest.mark.parametrize(
    ("error", "told"),
    [
        (Unavailable("no answer within the deadline", reason=Reason.GITHUB_DEADLINE_EXCEEDED), True),
        (Unavailable("HTTP 502", status=502), True),
        (RateLimited("HTTP 503", retry_after=120, status=503), True),  # a 5xx asking for a long wait
        (RateLimited("HTTP 403", retry_after=60, status=403), False),
        (NotFound("HTTP 404", status=404), False),
        (NotSent("not sent: the host is held slow", reason=Reason.GITHUB_HOST_SLOW), False),
        (untrusted("POST generate-jitconfig", OSError("certificate verify failed")), False),
    ],
    ids=["deadline", "502", "503 retry-after", "rate limit", "404", "not sent", "certificate untrusted"],
)
def test_stop_tells_of_a_runner_a_failed_call_may_have_made(
    jit: Harness, monkeypatch: pytest.MonkeyPatch, error: Exception, told: bool
) -> None:
    """A call that got no answer may have made the runner: a deleted pool's finalizer must ask
    GitHub. A refusal (a 4xx) made none, nor did a request that never left (a pool whose TLS
    never worked must still go at once), and the pool goes without GitHub."""

    def failing(scope: Scope, request: JitRequest) -> Any:
        raise error

    monkeypatch.setattr(jit.github, "generate_jitconfig", failing)
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert jit_updater.stop("team-a", "build") is told


def test_stop_says_whether_a_config_was_written_that_the_caches_may_not_show_yet(jit: Harness) -> None:
    """A deleted pool's finalizer stops the pool's jobs, then decides from its caches whether the
    pool may have runners; a write that landed a moment before may not show there yet."""
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    assert jit_updater.stop("team-a", "build") is False, "nothing written: no runner made"

    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert jit_updater.stop("team-a", "build") is True
    assert jit_updater.stop("team-a", "build") is True, "said again until the pool's mark is written"
    jit_updater.marked("team-a", "build")
    assert jit_updater.stop("team-a", "build") is False, "the mark says it now"


def test_stop_tells_of_a_runner_whose_config_write_failed_and_waits_for_its_retry(jit: Harness) -> None:
    """Nothing ever shows that runner in a Secret: the pool's stop is the one place that knows."""
    jit_updater, write = jit.updater.jit, jit.updater.jit._patch_secret

    def refused(namespace: str, name: str, body: dict[str, Any]) -> object:
        raise RuntimeError("the API server is restarting")

    jit_updater._patch_secret = refused  # type: ignore[method-assign]
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")
    assert [r.name for r in jit.github.runners[SCOPE]] == ["build-abcde"] and jit.patches == []
    jit_updater._patch_secret = write  # type: ignore[method-assign]

    assert jit_updater.stop("team-a", "build") is True


def test_a_pod_gone_with_its_secret_before_any_pass_saw_it_end_is_not_filled_again(jit: Harness) -> None:
    """An unscheduled pod is deleted at once, its JIT Secret with it, and no pass sees it end to
    forget its fill. Each retry made a runner, failed its write with 404, deleted the last runner
    as a leftover and failed the pool's TokenReady, every few minutes while the pool lived."""
    jit_updater = jit.updater.jit

    def gone(namespace: str, name: str, body: dict[str, Any]) -> object:
        raise ApiException(status=404, reason="Not Found")

    jit_updater._patch_secret = gone  # type: ignore[method-assign]
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert _jobs(jit) == [], "asked again for a pod that is gone"
    assert jit_updater.failure("team-a", "build") is None, "the pool's TokenReady failed for it"
    assert jit.github.runners.get(SCOPE, []) == [], "the runner made for it is left on GitHub"


def test_a_pool_stopped_while_its_config_is_written_loses_the_runner_and_is_told(jit: Harness) -> None:
    """The finalizer's pass comes between the fill's last look and its write landing in the
    cache. Before, the write went on, the finalizer saw no filled Secret and let the pool go
    without GitHub, and the runner stayed registered for good."""
    jit_updater, write = jit.updater.jit, jit.updater.jit._patch_secret
    told: list[bool] = []

    def finalizer_meanwhile(namespace: str, name: str, body: dict[str, Any]) -> object:
        told.append(jit_updater.stop("team-a", "build"))
        return write(namespace, name, body)

    jit_updater._patch_secret = finalizer_meanwhile  # type: ignore[method-assign]
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert told == [True], "the finalizer learns that a config is landing, and asks GitHub"
    assert [r.name for r in jit.github.runners.get(SCOPE, [])] == [], "the runner made for it is deleted"
    assert _jobs(jit) == [] and jit_updater.failure("team-a", "build") is None


def test_a_config_written_as_the_operator_stops_leading_keeps_its_runner(jit: Harness) -> None:
    """The Lease lost (or SIGTERM) while a fill's write was in flight: the write landed, and the
    fill deleted the runner as if its pool had gone. The new leader saw a filled Secret and never
    filled it again: the pod started with the config of a deleted runner."""
    jit_updater, write = jit.updater.jit, jit.updater.jit._patch_secret

    def stopping_meanwhile(namespace: str, name: str, body: dict[str, Any]) -> object:
        jit_updater.stop_all()
        return write(namespace, name, body)

    jit_updater._patch_secret = stopping_meanwhile  # type: ignore[method-assign]
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert [r.name for r in jit.github.runners.get(SCOPE, [])] == ["build-abcde"]
    [(_, secret, body)] = jit.patches
    assert secret == "runner-jit-build-1" and body["stringData"][JIT_SECRET_KEY]


def test_a_runner_made_as_the_operator_stops_leading_is_deleted_not_written(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub answered after the Lease was lost: no write from a process that no longer leads
    (it would race the new leader's own fill of that Secret), and no runner left behind."""
    jit_updater, made = jit.updater.jit, jit.github.generate_jitconfig

    def stopping_meanwhile(scope: Scope, request: JitRequest) -> Any:
        config = made(scope, request)
        jit_updater.stop_all()
        return config

    monkeypatch.setattr(jit.github, "generate_jitconfig", stopping_meanwhile)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert jit.patches == []
    assert [r.name for r in jit.github.runners.get(SCOPE, [])] == []


def test_a_runner_made_as_the_operator_stops_leading_is_deleted_but_not_the_next_leaders_of_its_name(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next leader filled the same pod meanwhile: its 409 replaced this runner with its own
    of the same name. Deleted by name, that one went too, and the pod's config named a runner
    GitHub no longer had."""
    jit_updater, made = jit.updater.jit, jit.github.generate_jitconfig

    def replaced_by_the_next_leader(scope: Scope, request: JitRequest) -> Any:
        config = made(scope, request)
        jit_updater.stop_all()
        jit.github.runners[scope] = [r for r in jit.github.runners[scope] if r.id != config.runner_id]
        made(scope, request)
        return config

    monkeypatch.setattr(jit.github, "generate_jitconfig", replaced_by_the_next_leader)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert jit.patches == []
    (kept,) = jit.github.runners[SCOPE]
    assert kept.name == "build-abcde" and not any(runner_id == kept.id for _, runner_id in jit.github.deleted)


def test_a_fill_that_failed_as_the_operator_stopped_leading_leaves_the_runner_to_the_next_leader(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its answer lost after the Lease was lost, the old leader removed "its" runner by name
    once the call timed out: by then the new leader had filled the same pod, and the runner of
    that name was the new leader's. The next leader's fill meets a leftover as a 409 instead."""
    jit_updater, made = jit.updater.jit, jit.github.generate_jitconfig

    def lost_as_leadership_ends(scope: Scope, request: JitRequest) -> Any:
        made(scope, request)
        jit_updater.stop_all()
        jit.github.runners[scope] = []  # the next leader's fill of the same pod: a 409, the
        made(scope, request)  # leftover replaced by its own runner of that name
        raise Unavailable("POST generate-jitconfig: no answer within the deadline")

    monkeypatch.setattr(jit.github, "generate_jitconfig", lost_as_leadership_ends)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")

    assert [r.name for r in jit.github.runners.get(SCOPE, [])] == ["build-abcde"], "the new leader's runner"


def _made_then_stopped(jit: Harness, monkeypatch: pytest.MonkeyPatch, **runner: Any) -> None:
    """GitHub makes the pod's runner (as ``runner`` says), and the pool is deleted meanwhile."""
    jit_updater, made = jit.updater.jit, jit.github.generate_jitconfig

    def stopped_meanwhile(scope: Scope, request: JitRequest) -> Any:
        config = made(scope, request)
        jit.github.runners[scope] = [replace(r, **runner) for r in jit.github.runners[scope]]
        jit_updater.stop("team-a", "build")
        return config

    monkeypatch.setattr(jit.github, "generate_jitconfig", stopped_meanwhile)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-abcde"))
    _run(jit, "uid-1")


def _down(scope: Scope, name: str) -> Any:
    raise Unavailable("GET /orgs/octo-org/actions/runners: HTTP 503")


def _leftover_jobs(jit: Harness) -> list[Any]:
    return [job for job in jit.scheduler.get_jobs() if job.id.startswith("jit-leftover/")]


def test_a_leftover_whose_delete_fails_is_tried_again_with_backoff_until_it_is_gone(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outage that slowed GitHub's answer fails the removal too. Before, the failure was
    dropped (the pod's pool was no longer known) and the runner stayed registered for good."""
    looked_up = jit.github.runners_named
    monkeypatch.setattr(jit.github, "runners_named", _down)
    _made_then_stopped(jit, monkeypatch)
    [job] = _leftover_jobs(jit)
    first = job.next_run_time
    assert first > jit.clock.now
    job.func(*job.args)  # still down: later again, and later than the first time
    [job] = _leftover_jobs(jit)
    assert job.next_run_time - jit.clock.now > first - jit.clock.now

    monkeypatch.setattr(jit.github, "runners_named", looked_up)  # GitHub is back
    job.func(*job.args)

    assert jit.github.runners[SCOPE] == [], "deleted"
    assert _leftover_jobs(jit) == []


def test_a_leftover_running_a_job_is_tried_again_until_github_has_removed_it(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its pod ran it before the removal: busy runners are never deleted; an ephemeral one is
    gone from GitHub after its job, and the next try finds none."""
    _made_then_stopped(jit, monkeypatch, busy=True, status="online")
    assert [r.name for r in jit.github.runners[SCOPE]] == ["build-abcde"] and jit.github.deleted == []
    [job] = _leftover_jobs(jit)

    jit.github.runners[SCOPE] = []  # its job done, GitHub removed it
    job.func(*job.args)

    assert _leftover_jobs(jit) == [] and jit.github.deleted == []


def test_a_leftover_is_tried_for_a_day_then_left_to_githubs_own_clean_up(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jit.github, "runners_named", _down)  # for good
    _made_then_stopped(jit, monkeypatch)
    [job] = _leftover_jobs(jit)
    jit.clock.advance(timedelta(hours=23))
    job.func(*job.args)
    assert _leftover_jobs(jit), "tried again within the day"

    jit.clock.advance(timedelta(hours=1))
    job.func(*job.args)

    assert _leftover_jobs(jit) == []


def _scale_set_updater(h: Harness, from_scale_set: ScaleSetJit) -> JitSecretUpdater:
    """A JIT updater whose scale-set pools' configs come from ``from_scale_set``."""
    return JitSecretUpdater(
        SecretWrites(
            h.updater.jit._clients,
            lambda ns, name, body: h.patches.append((ns, name, body)),
            lambda ns, name: None,
            h.scheduler,
            delete_leftover_runner,
            from_scale_set,
        )
    )


def test_a_scale_set_runner_gets_its_config_from_the_scale_set_not_from_rest(jit: Harness) -> None:
    """A scale-set pool's pod: the config comes from the scale set (the Actions service, no REST
    budget); REST's generate-jitconfig is never asked."""
    asked: list[tuple[str, JitRequest]] = []

    def from_scale_set(pool: Any, request: JitRequest) -> JitConfig:
        asked.append((pool.key, request))
        return JitConfig(runner_id=77, encoded="scale-set-config")

    updater = _scale_set_updater(jit, from_scale_set)
    request = JitRequest(name="arc-abcde", labels=(), work_folder="/runner/_work", scale_set_id=9)
    updater.fill(POOL, "runner-jit-arc-1", "uid-9", request)
    _run(jit, "uid-9")
    assert asked == [(POOL.key, request)]
    assert jit.github.jit_requests == [], "no REST generate-jitconfig"
    [(_, secret, body)] = jit.patches
    assert secret == "runner-jit-arc-1"
    assert body["stringData"] == {JIT_SECRET_KEY: "scale-set-config"}
    assert body["metadata"]["annotations"] == {JIT_RUNNER_ID_ANNOTATION: "77"}


def test_a_queued_fill_asked_for_with_a_new_scale_set_id_asks_that_one_at_once(jit: Harness) -> None:
    """The scale set was deleted on GitHub and made again under a new id, which the reconciler
    now asks with: a pod whose fill began under the old id kept asking for it at every retry
    (a 404 for good), and the backoff the old id earned held the pool's pods back meanwhile."""
    asked: list[int | None] = []

    def from_scale_set(pool: Any, request: JitRequest) -> JitConfig:
        asked.append(request.scale_set_id)
        if request.scale_set_id == 9:
            raise ScaleSetNotFound("POST generatejitconfig: HTTP 404", status=404)
        return JitConfig(runner_id=77, encoded="scale-set-config")

    updater = _scale_set_updater(jit, from_scale_set)
    old = JitRequest(name="arc-abcde", labels=(), work_folder="/runner/_work", scale_set_id=9)
    updater.fill(POOL, "runner-jit-arc-1", "uid-9", old)
    _run(jit, "uid-9")
    assert asked == [9] and jit.patches == []
    assert updater.failure(POOL.namespace, POOL.name) is not None  # backing off

    updater.fill(POOL, "runner-jit-arc-1", "uid-9", old)  # the same id again: nothing changes
    updater.fill(POOL, "runner-jit-arc-1", "uid-9", replace(old, scale_set_id=10))
    _run(jit, "uid-9")
    assert asked == [9, 10]
    [(_, secret, body)] = jit.patches
    assert secret == "runner-jit-arc-1" and body["stringData"] == {JIT_SECRET_KEY: "scale-set-config"}
    assert _jobs(jit) == [] and updater.failure(POOL.namespace, POOL.name) is None


def test_a_pool_whose_credentials_were_fixed_asks_with_them_at_once(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token pool's job tries fixed or rotated credentials at once (its ref changes); a JIT
    pod kept waiting for the backoff its pool earned with the bad ones, up to 5 minutes."""
    real = jit.github.generate_jitconfig
    jit_updater = _refused_credentials(jit, monkeypatch, "uid-1")
    job = jit.scheduler.get_job("jit/uid-1")
    assert job is not None and job.next_run_time > jit.clock.now

    monkeypatch.setattr(jit.github, "generate_jitconfig", real)
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-1"))  # the same: it waits
    assert jit.scheduler.get_job("jit/uid-1").next_run_time > jit.clock.now  # type: ignore[union-attr]
    fixed = replace(POOL, credentials_version=POOL.credentials_version + "-fixed")
    jit_updater.fill(fixed, "runner-jit-build-1", "uid-1", _request("build-1"))

    job = jit.scheduler.get_job("jit/uid-1")
    assert job is not None and job.next_run_time <= jit.clock.now, "asked at once"
    _run(jit, "uid-1")
    assert [secret for _, secret, _ in jit.patches] == ["runner-jit-build-1"]


def test_calls_the_client_held_back_unsent_do_not_lengthen_a_jit_pools_backoff(
    jit: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for tokens: a rate-gate refusal or a slow host's refusal asked GitHub nothing, so it is
    no try; counted, each doubled the pool's wait for its pods' configs."""
    held = [
        RateLimited("HTTP 429", retry_after=0.5, status=429, held_back=True),
        NotSent("not sent: the host is held slow", reason=Reason.GITHUB_HOST_SLOW, held_back=True),
    ] * 3

    def refused(scope: Scope, request: JitRequest) -> Any:
        raise held.pop(0)

    monkeypatch.setattr(jit.github, "generate_jitconfig", refused)
    jit_updater = jit.updater.jit
    jit_updater.fill(POOL, "runner-jit-build-1", "uid-1", _request("build-1"))
    waits = []
    for _ in range(6):
        _run(jit, "uid-1")
        job = jit.scheduler.get_job("jit/uid-1")
        assert job is not None
        waits.append((job.next_run_time - jit.clock.now).total_seconds())
        jit.clock.now = job.next_run_time

    assert all(wait <= 5 for wait in waits), f"the first try's backoff each time: {waits}"
