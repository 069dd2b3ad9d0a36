"""A pool being converted, and the fields of its source that did not carry over."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runnerpool import api

__all__ = ["ConvertError", "Converted", "Draft", "Unmapped"]


#: The runner's variables each containerMode sets (runnerpool.pods.kubernetes_mode, .dind).
_MODE_ENV = {
    "kubernetes": (
        "ACTIONS_RUNNER_CONTAINER_HOOKS",
        "ACTIONS_RUNNER_POD_NAME",
        "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER",
        "ACTIONS_RUNNER_CLAIM_NAME",
    ),
    "dind": ("DOCKER_HOST",),
}


class ConvertError(ValueError):
    """Input that yields no pool (not YAML, no runner definition, no scope): exit 2."""


@dataclass(frozen=True)
class Unmapped:
    """A source field with no RunnerPool counterpart, and what to do instead."""

    path: str
    advice: str

    def line(self) -> str:
        return f"# not mapped: {self.path}: {self.advice}"


@dataclass(frozen=True)
class Converted:
    """One RunnerPool manifest (validated) and what its source said that it does not."""

    source: str
    manifest: dict[str, Any]
    unmapped: tuple[Unmapped, ...]


@dataclass
class Draft:
    """The parts of a RunnerPool as a converter fills them in: spec, the template's metadata,
    its pod spec and its runner container, assembled into one manifest at the end."""

    source: str
    name: str
    namespace: str | None
    spec: dict[str, Any] = field(default_factory=dict)
    pod_metadata: dict[str, Any] = field(default_factory=dict)
    pod: dict[str, Any] = field(default_factory=dict)
    runner: dict[str, Any] = field(default_factory=dict)
    unmapped: list[Unmapped] = field(default_factory=list)
    #: Where in the source a spec field came from, for a field dropped after it was set.
    origins: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Pod names carry the pool's name, so a RunnerPool's is short; a longer one is cut."""
        if len(self.name) > api.MAX_POOL_NAME_LENGTH:
            cut = self.name[: api.MAX_POOL_NAME_LENGTH].rstrip("-.")
            self.drop(
                "metadata.name",
                f"{self.name} is longer than {api.MAX_POOL_NAME_LENGTH} characters (pod names carry "
                f"it); the pool is {cut}",
            )
            self.name = cut

    def drop(self, path: str, advice: str) -> None:
        self.unmapped.append(Unmapped(path, advice))

    def set(self, key: str, value: Any, origin: str | None = None) -> None:
        """A spec field, when the source says anything (empty lists and maps say nothing)."""
        if value is not None and value not in ([], {}):
            self.spec[key] = value
            if origin is not None:
                self.origins[key] = origin

    def add_env(self, path: str, env: Iterable[Mapping[str, Any]]) -> None:
        """Environment variables of the runner, less those only the operator sets and those its
        containerMode sets (a copy in spec.env would override the operator's choice)."""
        mode = str(self.spec.get("containerMode") or "")
        for var in env:
            name = str(var.get("name") or "")
            if api.operator_env(name):
                self.drop(f"{path}[{name}]", "the operator sets this variable from the pool; remove it")
            elif name in _MODE_ENV.get(mode, ()):
                self.drop(f"{path}[{name}]", f"containerMode: {mode} sets it (docs/{mode}.md)")
            else:
                self.spec.setdefault("env", []).append(dict(var))

    def manifest(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name}
        if self.namespace:
            metadata["namespace"] = self.namespace
        spec = dict(self.spec)
        pod = dict(self.pod)
        if self.runner:
            pod["containers"] = [{"name": "runner", **self.runner}, *pod.get("containers", [])]
        template = {k: v for k, v in (("metadata", self.pod_metadata), ("spec", pod)) if v}
        if template:
            spec["template"] = template
        return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": metadata, "spec": spec}

    def _settle_kubernetes_mode(self) -> None:
        """What containerMode: kubernetes keeps for the operator: the runners' ServiceAccount
        (the hooks' Role is bound to it) and the work volume (the job pods mount it)."""
        if self.spec.get("containerMode") != api.KUBERNETES_MODE:
            return
        own = "containerMode: kubernetes: the operator makes the runners' ServiceAccount"
        for key in ("serviceAccountName", "serviceAccount", "automountServiceAccountToken"):
            if self.pod.pop(key, None) is not None or self.spec.pop(key, None) is not None:
                self.drop(self.origins.get(key, key), own)
        if self.spec.pop("workVolume", None) is not None:
            self.drop(
                self.origins.get("workVolume", "workVolume"),
                "containerMode: kubernetes: the job pods mount the work volume the hooks expect; "
                "spec.kubernetesMode.workVolumeClaim sets it",
            )

    def result(self) -> Converted:
        self._settle_kubernetes_mode()
        return Converted(self.source, self.manifest(), tuple(self.unmapped))
