"""The pure rules of a scale-set pool's demand: how many runners, and which messages are new.

Why pure: the session runnable (not built yet) and its tests must agree on them without HTTP.

* **Desired runners** = ``clamp(totalAssignedJobs + minIdle, min, max)``. ``totalAssignedJobs``
  is what GitHub has assigned to the scale set and not finished (waiting plus running), always
  current on every answer; counting job messages instead goes wrong, since an answer carries at
  most 50 of them and a job can be assigned, cancelled and assigned again.
* **New messages**: the service delivers a message again until it is acknowledged, so within a
  session a message whose id is not above the last one processed was processed already (its
  acknowledgement was lost) and must not count again. Each session starts at 0, as upstream's
  listener does: a new session handles again what the last one recorded but did not
  acknowledge, which its handling makes harmless (absolute statistics, a set of busy runners).
"""

from __future__ import annotations

from dataclasses import dataclass

from runnerpool.scaleset.types import Message, Statistics

__all__ = ["Cursor", "desired_runners", "is_new"]


def desired_runners(statistics: Statistics, minimum: int, maximum: int, min_idle: int = 0) -> int:
    """``clamp(totalAssignedJobs + min_idle, minimum, maximum)``; a maximum below the minimum
    yields the minimum (the spec's validation refuses it; this rule does not crash on it)."""
    wanted = statistics.total_assigned_jobs + max(0, min_idle)
    return max(minimum, min(maximum, wanted))


def is_new(message: Message, last_message_id: int) -> bool:
    return message.message_id > last_message_id


@dataclass(frozen=True)
class Cursor:
    """Where a session stands: the last message processed and the latest statistics.

    ``advance`` is the only way forward: it returns the cursor after a message, or the same
    cursor for a redelivered one (whose statistics are older than those already seen). A
    message without statistics keeps those seen before."""

    last_message_id: int = 0
    statistics: Statistics | None = None

    def advance(self, message: Message) -> Cursor:
        if not is_new(message, self.last_message_id):
            return self
        return Cursor(message.message_id, message.statistics or self.statistics)
