"""A runner GitHub refuses as outdated, told by its container's termination message.

GitHub stops sending jobs to a runner that is more than 30 days behind an actions/runner
release when it cannot update itself (the runner image registers with ``--disableupdate``:
a pod's runner must not replace itself). The runner learns it when its listener asks for
work: GitHub answers 403, and the runner prints "An error occurred: Runner version v2.320.0
is deprecated and cannot receive messages." (actions/runner#1991, #2246, #3658; with the
broker, "Error: Forbidden Runner version ..." #4613) and exits: 7 with
``ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1`` (the runner image sets it), 0
without. So the exit code alone does not say it, and a custom image may not set the
variable: the runner image's entrypoint writes the runner's last lines to the container's
termination message, and this module reads GitHub's words there. Every pod of the pool
would fail the same way until the image is updated, so the start backoff
(`runnerpool.pods.start_backoff`) counts such a pod as failed at start whatever its exit
code, and the pool reports ``RunnerVersionOutdated``: if its pod was never marked busy, since a
job in a busy one can write these words itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["refused_version"]

_REFUSED = re.compile(
    r"Runner version v?(?P<version>\d+(?:\.\d+)*) is deprecated and cannot receive messages"
)


def refused_version(terminated: Mapping[str, Any]) -> str | None:
    """The runner version GitHub refused, from a container's ``state.terminated`` (its
    ``message``); ``None``: the message does not say GitHub refused it as outdated."""
    found = _REFUSED.search(str(terminated.get("message") or ""))
    return found["version"] if found else None
