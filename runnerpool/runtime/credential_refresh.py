"""Refresh the API server credential at most twice a minute, not on every call.

The kubernetes client's config loaders (in-cluster and kubeconfig alike) install a
``refresh_api_key_hook`` that the client runs before **every** request.  The hook sets the
whole configuration again, and setting ``host`` scans the process environment for proxies
(``urllib.request.getproxies``): in a pod, where Kubernetes puts two variables per Service of
the namespace into the environment, that scan was one of the largest entries of the
operator's CPU profile (N=100 pools: ~2.7 ms per API call under cProfile, 9 % of the total).

The in-cluster loader itself re-reads its token file only once a minute, and kubelet renews a
projected ServiceAccount token when 80 % of its life (at least an hour) has passed, so the old
token stays valid for many minutes after the new one appears: running the hook every
``interval`` seconds (30) picks up a renewed token long before the old one expires.  Written
here because the client has no setting for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["REFRESH_INTERVAL", "throttle_refresh"]

#: Seconds between two runs of the client's credential refresh hook.
REFRESH_INTERVAL = 30.0


def throttle_refresh(
    configuration: Any, *, interval: float = REFRESH_INTERVAL, clock: Callable[[], float] = time.monotonic
) -> None:
    """Make ``configuration``'s refresh hook (if any) run at most once per ``interval``."""
    if configuration.refresh_api_key_hook is None:
        return
    lock = threading.Lock()
    last: list[float] = []
    hooks = [configuration.refresh_api_key_hook]

    def throttled(config: Any) -> None:
        now = clock()
        with lock:
            if last and now - last[0] < interval:
                return
            last[:] = [now]
            hook = hooks[0]
        hook(config)
        # The loaders' hook installs itself again each time it runs: keep the newest as the
        # one to call, and this wrapper in front of it.
        if config.refresh_api_key_hook is not throttled:
            hooks[0] = config.refresh_api_key_hook or hook
            config.refresh_api_key_hook = throttled

    configuration.refresh_api_key_hook = throttled
