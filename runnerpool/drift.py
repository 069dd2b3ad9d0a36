"""Decide whether a live object still matches what the operator wants.

The API server fills in defaults (``imagePullPolicy``, ``terminationMessagePath``,
``fieldRef.apiVersion`` ...), so "equal" would report drift forever and the
operator would write on every reconcile.  What matters is that every field the
operator sets still has the value it set: the desired object must be contained
in the live one.
"""

from __future__ import annotations

from typing import Any


def contains(live: Any, desired: Any) -> bool:
    """True when every field of ``desired`` is present in ``live`` with the same value.

    Lists must have the same length and match item by item, so an extra container
    or volume added by hand counts as drift, while defaulted fields inside an item
    do not. A desired ``None`` is a field that must be absent (a merge patch removes it).
    """
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            live.get(key) is None if value is None else key in live and contains(live[key], value)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    return bool(live == desired)
