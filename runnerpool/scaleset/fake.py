"""A ``ViewSink`` for tests: keeps every view published, in order, and fails on request.

Why: the listener's promise is about order (a message's view is written before the message is
acknowledged) and about failures (an unwritten view leaves the message to be delivered again);
a test sees both through ``published`` and ``fail_next``, and waits for a view with
``wait_for`` (a condition, no sleeps). Never imported by the operator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from runnerpool.scaleset.listener import ScaleSetView

__all__ = ["FakeSink", "SinkWriteError"]


class SinkWriteError(Exception):
    """The write ``fail_next`` asked for."""


class FakeSink:
    def __init__(self, on_publish: Callable[[str, str, ScaleSetView], None] | None = None) -> None:
        #: Called with each view before it is kept (or refused): tests check order there.
        self.on_publish = on_publish
        self._cond = threading.Condition()
        self._fail = 0
        self.published: list[tuple[str, str, ScaleSetView]] = []
        self.refused: list[tuple[str, str, ScaleSetView]] = []

    def publish(self, namespace: str, name: str, view: ScaleSetView) -> None:
        if self.on_publish is not None:
            self.on_publish(namespace, name, view)
        with self._cond:
            if self._fail > 0:
                self._fail -= 1
                self.refused.append((namespace, name, view))
                self._cond.notify_all()
                raise SinkWriteError(f"status write of {namespace}/{name} refused (fail_next)")
            self.published.append((namespace, name, view))
            self._cond.notify_all()

    def fail_next(self, n: int = 1) -> None:
        with self._cond:
            self._fail = n

    def views(self, namespace: str, name: str) -> list[ScaleSetView]:
        with self._cond:
            return [view for ns, n, view in self.published if (ns, n) == (namespace, name)]

    def latest(self, namespace: str, name: str) -> ScaleSetView | None:
        found = self.views(namespace, name)
        return found[-1] if found else None

    def wait_for(
        self,
        namespace: str,
        name: str,
        predicate: Callable[[ScaleSetView], bool],
        timeout: float = 10.0,
        *,
        latest: bool = False,
    ) -> ScaleSetView:
        """The first view published (so far or from now) that ``predicate`` accepts; with
        ``latest``, once the latest view does."""

        def found() -> ScaleSetView | None:
            mine = [v for ns, n, v in self.published if (ns, n) == (namespace, name)]
            return next((v for v in (mine[-1:] if latest else mine) if predicate(v)), None)

        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None, timeout):
                last = [v for ns, n, v in self.published if (ns, n) == (namespace, name)][-1:]
                raise AssertionError(f"no view of {namespace}/{name} as wanted in {timeout} s; last: {last}")
            view = found()
            assert view is not None
            return view

    def wait_refused(self, n: int = 1, timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.refused) >= n, timeout):
                raise AssertionError(f"{len(self.refused)} writes refused in {timeout} s, not {n}")
