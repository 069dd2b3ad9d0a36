"""The webhook receiver's admission policy is generated from the models and kept up to date:
a field added to the status is guarded without anyone remembering the policy (its effect on a
real API server: tests/test_webhook_receiver_rbac.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from generators import receiver_policy
from runnerpool import api


def test_the_committed_policy_matches_the_models() -> None:
    assert receiver_policy.main(["--check"]) == 0, f"run `{receiver_policy.COMMAND}`"


def test_every_status_field_but_demand_is_guarded() -> None:
    fields = {info.alias or name for name, info in api.RunnerPoolStatus.model_fields.items()}
    policy = yaml.safe_load(receiver_policy.DEFAULT_OUTPUT.read_text())
    guarded = {v["message"].rsplit("status.", 1)[1] for v in policy["spec"]["validations"]}
    assert guarded == fields - {"demand"}
    assert {"conditions", "scaleSet", "runners", "replicas", "selector"} <= guarded


def test_a_stale_policy_is_reported(tmp_path: Path) -> None:
    target = tmp_path / "policy.yaml"
    assert receiver_policy.main(["--output", str(target)]) == 0
    target.write_text(target.read_text().replace("status.conditions", "status.condition"))
    assert receiver_policy.main(["--check", "--output", str(target)]) == 1
