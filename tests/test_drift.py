"""What counts as drift of a child: every field the operator sets, with its value; a field it
sets to ``None`` must be absent (a budget of an earlier version loses its ``maxUnavailable``)."""

from __future__ import annotations

from runnerpool import children
from runnerpool.drift import contains


def test_defaults_the_api_server_adds_are_no_drift_and_a_changed_value_is() -> None:
    assert contains({"a": 1, "defaulted": "x"}, {"a": 1})
    assert not contains({"a": 2}, {"a": 1})
    assert not contains({"items": [{"a": 1}, {"a": 2}]}, {"items": [{"a": 1}]}), "an extra item"


def test_a_field_wanted_none_is_drift_while_it_is_there() -> None:
    assert contains({}, {"gone": None})
    assert contains({"gone": None}, {"gone": None})
    assert not contains({"gone": 0}, {"gone": None})


def test_the_busy_budget_of_an_earlier_version_drifts_and_the_current_one_does_not() -> None:
    wanted = children.disruption_budget("ns")["spec"]
    selector = wanted["selector"]
    assert not contains({"maxUnavailable": 0, "selector": selector}, wanted)
    assert contains({"minAvailable": children.BUSY_MIN_AVAILABLE, "selector": selector}, wanted)
