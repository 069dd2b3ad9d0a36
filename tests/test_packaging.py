"""What ``pip install .`` ships: the operator packages only, and only what they import.

The wheel is built offline from the checkout (``--no-index --no-build-isolation``: the test
extra pins a setuptools that reads this pyproject), so no packet leaves the machine.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_no_test_world_and_needs_no_test_dependency(tmp_path: Path) -> None:
    offline = ["--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", *offline, "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob("runnerpool_operator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())

    top_level = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"runnerpool", "secret_updater"}
    assert "runnerpool/cli.py" in names and "secret_updater/updater.py" in names
    runtime = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert not [r for r in runtime if r.lower().startswith(("pyyaml", "pytest", "responses"))], runtime


def test_the_image_lock_pins_every_runtime_dependency_in_range() -> None:
    """deploy/images/operator/requirements.lock: what the image installs (``--no-deps``, then
    ``pip check``). A dependency added to pyproject without a new lock would fail the release's
    build; a range narrowed past the lock would ship a version the operator refuses."""
    lock = (ROOT / "deploy" / "images" / "operator" / "requirements.lock").read_text().splitlines()
    pins = dict(line.split("==") for line in lock if line and not line.startswith("#"))
    assert all(name == canonicalize_name(name) for name in pins), "python -m generators.requirements_lock"
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dependency in map(Requirement, dependencies):
        name = canonicalize_name(dependency.name)
        assert name in pins, f"{name} is not in the lock: python -m generators.requirements_lock"
        assert dependency.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {dependency}"
    assert not {"pytest", "ruff", "mypy", "responses", "hypothesis"} & set(pins), "test tools in the image"
