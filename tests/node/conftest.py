"""Runner pods on the real test node, built by the real operator process.

The operator and the fake GitHub are the e2e suite's (``tests/e2e/conftest.py``), except
that the fake listens on the node's bridge address so pods reach it, and the operator's
default runner image is the test image imported into the node.  Pools made with
``node_pool`` tolerate the node's taint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import (
    _gc_probe,
    credentials,
    gc_follows_pools,
    pytest_runtest_makereport,
    start_operator,
)
from tests.e2e.runners import GOOD_PAT, ORG, OTHER_REPO, REPO
from tests.pools import pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.node import seal
from testworld.node.node import NODE_TOLERATION, Node
from testworld.simulator import OperatorProcess

__all__ = ["_gc_probe", "credentials", "gc_follows_pools", "pytest_runtest_makereport", "start_operator"]


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """As in the e2e suite, but on the node's bridge address, where runner pods reach it.

    Served under ``/api/v3`` as GitHub Enterprise Server is: the stand-in config.sh, like the
    real one, derives the API from the web URL it is given that way for any host but github.com.
    """
    with FakeGitHub(
        host=seal.NODE_IP, api_prefix="/api/v3", scopes=[REPO, OTHER_REPO, ORG], tokens=[GOOD_PAT]
    ) as fake:
        yield fake


@pytest.fixture
def operator(start_operator: Any, node: Node, credentials: str) -> OperatorProcess:
    """The operator process; pools that name no image get the node's runner test image."""
    started: OperatorProcess = start_operator("--runner-image", node.runner_image.reference)
    return started


def node_pool(name: str, *, replicas: int = 1, **spec: Any) -> dict[str, Any]:
    """A repository pool whose pods may run on the (tainted) test node."""
    return pool_manifest(name, repo=REPO, replicas=replicas, tolerations=[NODE_TOLERATION], **spec)
