"""How the plugin prints: kubectl's tables and ages, so its output reads like ``kubectl get``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

__all__ = ["NONE", "human_duration", "since", "table", "until"]

#: What kubectl prints for an absent value.
NONE = "<none>"


def human_duration(seconds: float) -> str:
    """kubectl's ``HumanDuration``: ``45s``, ``5m30s``, ``45m``, ``3h20m``, ``30h``, ``3d4h``, ``120d``."""
    total = max(0, int(seconds))
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if total < 120:
        return f"{total}s"
    if minutes < 10:
        return _pair(minutes, "m", total % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return _pair(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _pair(days, "d", hours % 24, "h")
    if days < 365 * 2:
        return f"{days}d"
    return _pair(days // 365, "y", days % 365, "d")


def _pair(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


def since(when: datetime | None, now: datetime) -> str:
    """An age as kubectl prints one (``AGE``, ``LAST SEEN``)."""
    return NONE if when is None else human_duration((now - when).total_seconds())


def until(when: datetime | None, now: datetime) -> str:
    """A deadline from now: ``in 58m``, or ``expired 3m ago``."""
    if when is None:
        return NONE
    left = (when - now).total_seconds()
    return f"in {human_duration(left)}" if left > 0 else f"expired {human_duration(-left)} ago"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns three spaces apart, headers in capitals, the last column unpadded."""
    cells = [[h.upper() for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("   ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)
