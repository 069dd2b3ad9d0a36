"""What the operator imports before any pool needs GitHub (issue 23: start-up CPU).

PyGithub, PyJWT and ``cryptography`` cost about a sixth of the operator's start-up CPU and
are needed only once a pool asks for a client (or /metrics is served over HTTPS): the
console script's modules must not import them. A fresh interpreter, as the console script
starts, so that nothing this test session imported counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Imported by the first client (or the HTTPS metrics certificate), never at start-up; aiohttp
#: by the first scale-set long poll (runnerpool/scaleset/poller.py).
DEFERRED = ("github", "jwt", "cryptography", "aiohttp", "yarl", "multidict")

PROBE = """
import json, sys
from runnerpool import cli, operator  # everything the console script loads before it runs
at_start = sorted({name.split(".")[0] for name in sys.modules})
from runnerpool.github.credentials import client_from_secret_data
client_from_secret_data({"token": "ghp_startup_imports"})
after_client = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"at_start": at_start, "after_client": after_client}))
"""


def test_github_libraries_wait_for_the_first_client() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    imported = json.loads(probe.stdout)

    assert [name for name in DEFERRED if name in imported["at_start"]] == []
    assert {"github", "jwt"} <= set(imported["after_client"]), "the first client imports PyGithub"


SCALE_SET_PROBE = """
import json
from pydantic import BaseModel
from runnerpool import cli, operator  # everything the console script loads before it runs
from runnerpool.scaleset import types
models = [v for v in vars(types).values() if isinstance(v, type) and issubclass(v, BaseModel)]
print(json.dumps({m.__name__: m.__pydantic_complete__ for m in models}))
"""


def test_scale_set_wire_models_are_built_when_they_first_parse() -> None:
    """Their validators cost an operator without scale-set pools ~40 ms of start-up CPU."""
    probe = subprocess.run(
        [sys.executable, "-c", SCALE_SET_PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    built = json.loads(probe.stdout)

    assert "Message" in built and "RunnerScaleSet" in built, built
    assert [name for name, complete in built.items() if complete] == []


ELECTION_PROBE = """
import json, sys
from kubernetes import client
from runnerpool import cli, operator  # everything the console script loads before it runs
from runnerpool.runtime.leader import LeaderElector
from runnerpool.settings import LeaderElectionSettings
LeaderElector(client.ApiClient(), LeaderElectionSettings(enabled=True, namespace="ns", identity="me"))
print(json.dumps(sorted(name for name in sys.modules if name.startswith("kubernetes.client.api."))))
"""


def test_leader_election_builds_no_generated_api_class() -> None:
    """``CoordinationV1Api`` alone cost ~27 ms of start-up CPU (its methods' validators)."""
    probe = subprocess.run(
        [sys.executable, "-c", ELECTION_PROBE], capture_output=True, text=True, check=True, timeout=120
    )

    assert json.loads(probe.stdout) == []
