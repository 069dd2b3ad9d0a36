"""The runner pod's security contexts: Pod Security ``restricted`` unless the pool's template says otherwise.

A namespace that enforces ``pod-security.kubernetes.io/enforce: restricted`` refuses a pod that
may run as root, escalate privileges, keep Linux capabilities or run without a seccomp profile.
Runners run whatever workflow code a repository pushes, so the default pod gives it as little
as the runner needs: the runner image's own user (``runner``, uid and gid 1001 in
actions-runner, and in the test world's stand-in image), no privilege escalation (sudo in the
image stops working), no capabilities, the container runtime's default seccomp profile.  A
template can loosen any of it (``runnerpool.pods.merge``), e.g. ``runAsUser: 0`` for an image
with another user, or a privileged Docker daemon sidecar.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RUNNER_GID", "RUNNER_UID", "pod_security_context", "runner_security_context"]

#: The runner image's user ("runner", 1001:1001 in actions-runner).
RUNNER_UID = 1001
#: Its group. As the pod's fsGroup it owns the token volume: a Secret file with mode 0440 is
#: otherwise root:root and the runner gets "Permission denied".
RUNNER_GID = 1001


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNNER_UID,
        "runAsGroup": RUNNER_GID,
        "fsGroup": RUNNER_GID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def runner_security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
