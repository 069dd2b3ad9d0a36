"""The audit log is read while kube-apiserver writes it: a half-written line is not an event yet."""

from __future__ import annotations

import json
from pathlib import Path

from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane


def _event(n: int) -> str:
    return json.dumps({"kind": "Event", "auditID": str(n), "verb": "update"}) + "\n"


def test_a_half_written_last_line_is_left_for_the_next_read(tmp_path: Path) -> None:
    plane = ControlPlane()
    plane.workdir = tmp_path  # a plane never started: only its log is read
    log = plane.audit_log
    whole = _event(1) + _event(2)
    third = _event(3)
    log.write_text(whole + third[:25])

    assert [e["auditID"] for e in plane.audit_events()] == ["1", "2"]
    assert audit.end_of_complete_events(log) == len(whole)

    with log.open("a") as f:
        f.write(third[25:])
    resumed = audit.complete_events(log, offset=len(whole))
    assert [e["auditID"] for e in resumed] == ["3"]
    assert audit.end_of_complete_events(log) == len(whole) + len(third)


def test_a_log_not_written_yet_has_no_events(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    assert list(audit.complete_events(log)) == []
    assert audit.end_of_complete_events(log) == 0


def test_the_mark_finds_the_last_newline_beyond_one_read_back(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    big = json.dumps({"kind": "Event", "auditID": "big", "pad": "x" * 10_000}) + "\n"
    log.write_text(big + "{" + "y" * 9_000)
    assert audit.end_of_complete_events(log) == len(big)
