"""A JIT runner that never started goes from GitHub when its pod goes: the collection covers it.

``generate-jitconfig`` makes the runner on GitHub (offline) before any runner process runs, so a
pod deleted before its runner started leaves an offline runner of its name behind.  The runner
managers already delete every offline, idle runner of a pool whose pod is gone
(``lifecycle.runners_to_collect``); these tests pin that this includes the JIT runner, and that
a JIT runner whose pod still waits to start is left alone.
"""

from __future__ import annotations

from runnerpool.domain import Scope
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.types import JitRequest
from runnerpool.runners.lifecycle import runners_to_collect

SCOPE = Scope(repository="octo-org/hello")
POD = "ci-x2k4p"


def generated() -> FakeGitHubClient:
    github = FakeGitHubClient()
    github.generate_jitconfig(SCOPE, JitRequest(name=POD, labels=("team/ci",)))
    return github


def test_a_jit_runner_whose_pod_is_gone_is_collected() -> None:
    github = generated()

    [collected] = runners_to_collect(github.list_runners(SCOPE), pod_names=[])

    assert (collected.name, collected.status) == (POD, "offline")


def test_a_jit_runner_whose_pod_has_not_started_yet_is_kept() -> None:
    github = generated()

    assert runners_to_collect(github.list_runners(SCOPE), pod_names=[POD]) == []
