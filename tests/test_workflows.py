"""What the GitHub workflows may do, checked here since no GitHub is reachable (actionlint checks
their syntax and shell in ``make lint``).

- Every action runs at a commit, not a tag: a tag can be moved to other code by whoever controls
  the action's repository, and the release job holds ``packages: write`` and an OIDC token.
- Every job says what it may do (``permissions``); only the signing jobs get an OIDC token.
- Everything the release pushes is signed (keyless, by digest) and comes with an SBOM and
  provenance, so a user can check what they pull came from this repository's release.
- Pull requests run the README's test command, through the same script as any other CI.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
RELEASE = REPO / ".github" / "workflows" / "release.yml"
CI = REPO / ".github" / "workflows" / "ci.yml"

#: action -> why it may stay on a tag. Empty: every action is pinned.
UNPINNED_ALLOWED: dict[str, str] = {}

PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?P<rest>.*)$")
Obj = dict[str, Any]


def load(path: Path) -> Obj:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def uses_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]


def steps_using(job: Obj, action: str) -> list[Obj]:
    return [s for s in job.get("steps", []) if s.get("uses", "").startswith(f"{action}@")]


def runs(job: Obj) -> str:
    return "\n".join(s.get("run", "") for s in job.get("steps", []))


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_action_is_pinned_to_a_commit(path: Path) -> None:
    lines = uses_lines(path)
    assert lines, f"{path.name} uses no action?"
    for line in lines:
        if line.split("uses:", 1)[1].strip().startswith("./"):
            continue  # an action of this repository: same commit as the workflow
        found = PINNED.match(line)
        assert found, f"{path.name}: cannot read {line.strip()!r}"
        if found["action"] in UNPINNED_ALLOWED:
            continue
        assert re.fullmatch(r"[0-9a-f]{40}", found["ref"]), f"{path.name}: {line.strip()} is not on a commit"
        # The version the commit is, for people and for Renovate's updates of the pin.
        version = re.fullmatch(r"\s+# v\d+\.\d+\.\d+", found["rest"])
        assert version, f"{path.name}: {line.strip()} says no version"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_job_says_what_it_may_do(path: Path) -> None:
    workflow = load(path)
    assert workflow["permissions"] == {"contents": "read"}, "the default for jobs that say nothing"
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, f"{path.name}: job {name} has no permissions"
        if job["permissions"].get("id-token") == "write":
            assert "cosign sign" in runs(job), (
                f"{path.name}: job {name} has an OIDC token it never signs with"
            )


def signed_digest(job: Obj) -> str:
    """The digest the job's cosign step signs (never a tag: a tag can be moved after the push)."""
    (sign,) = [s for s in job["steps"] if "cosign sign" in s.get("run", "")]
    assert re.fullmatch(r'cosign sign --yes "\$\w+@\$DIGEST"', sign["run"].strip())
    assert steps_using(job, "sigstore/cosign-installer")
    assert [s["uses"] for s in job["steps"] if s.get("uses", "").startswith("docker/login-action@")], (
        "cosign pushes the signature with Docker's credentials"
    )
    return str(sign["env"]["DIGEST"])


def test_the_release_signs_and_attests_every_image_it_pushes() -> None:
    job = load(RELEASE)["jobs"]["images"]
    assert job["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    (build,) = steps_using(job, "docker/build-push-action")
    assert build["with"]["push"] is True
    assert build["with"]["sbom"] is True, "an SBOM attestation beside each image"
    assert build["with"]["provenance"] == "mode=max", "a provenance attestation beside each image"
    # The index the build pushed: every tag and both architectures are that one digest.
    assert signed_digest(job) == f"${{{{ steps.{build['id']}.outputs.digest }}}}"


def test_the_release_signs_the_chart_it_pushes() -> None:
    job = load(RELEASE)["jobs"]["chart"]
    assert job["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    (push,) = [s for s in job["steps"] if "helm push" in s.get("run", "")]
    assert signed_digest(job) == f"${{{{ steps.{push['id']}.outputs.digest }}}}"


def test_pull_requests_run_the_readme_test_command() -> None:
    workflow = load(CI)
    # PyYAML reads the key `on` as True.
    assert workflow[True] == {"pull_request": None, "push": {"branches": ["main"]}}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    # The same script as any CI: `.ci/run` ends in the README's test command.
    ci_run = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci_run[-1] == "make test"
    assert re.search(r"^make test\s+# run the tests", (REPO / "README.md").read_text(), re.MULTILINE)
    assert re.search(r"(^|\s)\.ci/run$", runs(job), re.MULTILINE)


def test_pull_requests_run_on_the_readme_python_and_go() -> None:
    """The README's floors, so CI proves what it promises a newcomer."""
    readme = (REPO / "README.md").read_text()
    python = re.search(r"Python ≥ (\d+\.\d+)", readme)
    go = re.search(r"Go ≥ (\d+\.\d+(?:\.\d+)?)", readme)
    assert python and go
    (job,) = load(CI)["jobs"].values()
    (setup_python,) = steps_using(job, "actions/setup-python")
    (setup_go,) = steps_using(job, "actions/setup-go")
    assert setup_python["with"]["python-version"] == python[1]
    assert setup_go["with"]["go-version"] == go[1]
    assert job["runs-on"].startswith("ubuntu-")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_readme_go_floor_builds_every_pinned_tool_without_fetching_a_toolchain() -> None:
    """A go.mod asking for a newer Go than the README's makes the go command fetch a toolchain,
    which GOTOOLCHAIN=local or a module mirror without toolchains refuses: the README said 1.25
    while promtool's go.mod asked for 1.26.7."""
    found = re.search(r"Go ≥ (\d+\.\d+(?:\.\d+)?)", (REPO / "README.md").read_text())
    assert found
    floor = _version(found[1])
    wanted = {
        str(mod.relative_to(REPO)): _version(directive[1])
        for mod in (REPO / "testworld").rglob("go.mod")
        if (directive := re.search(r"^go (\S+)$", mod.read_text(), re.MULTILINE))
    }
    assert len(wanted) >= 4, wanted
    assert {mod: version for mod, version in wanted.items() if version > floor} == {}
