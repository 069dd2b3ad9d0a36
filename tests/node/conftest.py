"""Runner pods on the real test node, built by the real operator process.

The operator, the fake GitHub (on the node's bridge inside the seal) and the helpers are
the e2e suite's (``tests/e2e/conftest.py``); ``operator`` here is its ``node_operator``.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import (
    _gc_probe,
    credentials,
    fake_github,
    gc_follows_pools,
    node_operator,
    node_pool,
    operator_credentials,
    pytest_runtest_makereport,
    start_operator,
)
from testworld.simulator import OperatorProcess

__all__ = [
    "_gc_probe",
    "credentials",
    "fake_github",
    "gc_follows_pools",
    "node_operator",
    "node_pool",
    "operator_credentials",
    "pytest_runtest_makereport",
    "start_operator",
]


@pytest.fixture
def operator(node_operator: OperatorProcess, credentials: str) -> OperatorProcess:
    return node_operator
