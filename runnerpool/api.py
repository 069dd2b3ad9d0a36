"""The RunnerPool custom resource, as pydantic models.

These models are the single source of truth for the resource: the operator
parses and writes objects with them, and ``generators.crd`` turns their JSON
schema into the CRD that the API server validates against.  Every validation
rule is therefore written once, as a :class:`Rule` that carries both the CEL
expression the API server evaluates and a Python predicate that mirrors it, so
objects built in Python fail the same way ``kubectl apply`` would.

Transition rules (those using ``oldSelf``) have no Python mirror: a model only
ever sees one version of an object.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, Self, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from runnerpool import naming
from runnerpool.domain import RFC3339, Connection, JobState, ProxyRef, Scope, parse_duration, pool_key
from runnerpool.naming import DEFAULT_CREDENTIAL_SECRET

GROUP = "runnerpool.dev"
VERSION = "v1alpha1"
KIND = "RunnerPool"
PLURAL = "runnerpools"
SINGULAR = "runnerpool"
API_VERSION = f"{GROUP}/{VERSION}"

DEFAULT_RUNNER_IMAGE = "runnerpool-runner:0.1.0"  # built from deploy/images/runner; publish and override
#: The Docker daemon beside the runner in containerMode dind (Docker's official image, as ARC's).
DEFAULT_DIND_IMAGE = "docker:28-dind"
#: How the runner's jobs reach containers: ``dind`` puts a Docker daemon in each runner pod,
#: ``kubernetes`` (``KUBERNETES_MODE``) runs them in pods of their own through the container
#: hooks.  A new mode is one more word in this Literal.
ContainerModeName = Literal["dind", "kubernetes"]
CONTAINER_MODES: tuple[str, ...] = get_args(ContainerModeName)
#: An enum in the schema (pydantic writes a one-value Literal as ``const``, which a
#: structural schema cannot hold).
ContainerMode = Annotated[
    ContainerModeName, WithJsonSchema({"type": "string", "enum": list(CONTAINER_MODES)})
]

# Pods of a pool are named "<pool>-<5 random>" (generateName).  The kubelet cuts pod
# hostnames (which the runner reports to GitHub as its name) at 63 characters.  Pods
# adopted from the Deployment of earlier versions are named
# "runnerpool-<pool>-<replicaset hash, up to 10>-<5 random>" (the pool name plus 28
# characters): past 35 the cut would eat their random suffix, so the limit stays.
MAX_POOL_NAME_LENGTH = 35
MAX_REPLICAS = 1000
#: How long a busy runner's job may go on after its pod is told to stop, unless the pool says.
DEFAULT_BUSY_GRACE_PERIOD = "1h"
#: The longest busyGracePeriod: a day, short enough that a stuck pod does not hold a node for ever.
MAX_BUSY_GRACE_SECONDS = 86400
#: What a pod's terminationGracePeriodSeconds adds to its busy grace: once the grace has run out
#: the runner cancels its job (the real listener gives its worker 60 s for that), reports it
#: and exits, before the kubelet's SIGKILL.
BUSY_EXIT_MARGIN_SECONDS = 90
#: A day of busy grace plus an hour for the runner to stop.
MAX_TERMINATION_GRACE_SECONDS = MAX_BUSY_GRACE_SECONDS + 3600


# --------------------------------------------------------------------------------------
# Rules shared by Python validation and the CRD


@dataclass(frozen=True)
class Rule:
    """One validation rule, stated once for the API server (CEL) and for Python.

    ``check`` is ``None`` for transition rules, which need the previous object.
    ``message`` should tell the user what to change, since kubectl shows it verbatim.
    """

    cel: str
    message: str
    check: Callable[[Any], bool] | None = None
    field_path: str | None = None

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        return out


def cel_string(text: str) -> str:
    """Quote text as a CEL string literal (regexes need their backslashes kept)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(cel_string(item) for item in items) + "]"


def regex_rule(regex: str, message: str) -> Rule:
    """A rule that a string matches ``regex`` entirely.

    CEL's ``matches`` searches, so every regex here is anchored; Python uses
    ``fullmatch`` so that a trailing newline cannot slip past ``$``.
    """
    compiled = re.compile(regex)
    return Rule(
        cel=f"self.matches({cel_string(regex)})",
        message=message,
        check=lambda value: compiled.fullmatch(value) is not None,
    )


#: Off only inside :func:`rules_skipped`.
_RULES_ON: ContextVar[bool] = ContextVar("runnerpool_rules_on", default=True)


@contextlib.contextmanager
def rules_skipped() -> Iterator[None]:
    """Validate without the rules (:class:`Rule`), the schema's types and bounds still checked.

    For one parse only: that of a pool being deleted, stored under an older CRD whose rules it
    no longer meets (``runnerpool.reads.parse_pool``), so that its finalizer can run. Refused
    outright, such a pool could never deregister its runners nor be deleted, and its namespace
    would stay Terminating."""
    token = _RULES_ON.set(False)
    try:
        yield
    finally:
        _RULES_ON.reset(token)


def _run_rules(rules: Sequence[Rule], value: Any) -> None:
    if not _RULES_ON.get():
        return
    for rule in rules:
        if rule.check is not None and not rule.check(value):
            raise ValueError(rule.message)


class Cel:
    """``Annotated`` marker attaching rules to a scalar or list type.

    It works nested (inside ``| None``, list items, dict values), where a
    ``Field(json_schema_extra=...)`` would be ignored.
    """

    __slots__ = ("rules", "schema")

    def __init__(self, *rules: Rule, schema: dict[str, Any] | None = None) -> None:
        self.rules = rules
        # Extra schema keys for what pydantic cannot express on the type, such as a
        # maxLength on an int-or-string that CEL cost estimation needs.
        self.schema = schema or {}

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        rules = self.rules

        def validate(value: Any) -> Any:
            _run_rules(rules, value)
            return value

        return core_schema.no_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out.update(self.schema)
        out.setdefault("x-kubernetes-validations", []).extend(r.to_schema() for r in self.rules)
        return out


@dataclass(frozen=True)
class ListType:
    """``Annotated`` marker for ``x-kubernetes-list-type``.

    The API server rejects duplicates in ``set`` and ``map`` lists; Python does the
    same so a model never holds something the server would refuse.
    """

    kind: Literal["atomic", "set", "map"]
    keys: tuple[str, ...] = ()

    def _identity(self, item: Any) -> Any:
        if self.kind == "set":
            return item
        if isinstance(item, BaseModel):
            item = item.model_dump(by_alias=True)
        return tuple(item.get(key) for key in self.keys)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        def validate(items: list[Any]) -> list[Any]:
            if self.kind != "atomic":
                seen: set[Any] = set()
                for item in items:
                    identity = self._identity(item)
                    if identity in seen:
                        raise ValueError(f"duplicate entry {identity!r}")
                    seen.add(identity)
            return items

        return core_schema.no_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out["x-kubernetes-list-type"] = self.kind
        if self.keys:
            out["x-kubernetes-list-map-keys"] = list(self.keys)
        return out


@dataclass(frozen=True)
class AtomicMap:
    """``Annotated`` marker for ``x-kubernetes-map-type: atomic`` on a map with free keys.

    The API server tracks field ownership (``metadata.managedFields``) per key of a granular
    map: a map keyed by job id made every stored pool carry ~80 bytes of ownership per job,
    and every write re-decode and re-diff it. Atomic, the map is one field to the field
    manager; merge patches still merge into it key by key (RFC 7386 does not read the schema),
    so writers keep sending only what changed.
    """

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out["x-kubernetes-map-type"] = "atomic"
        return out


@dataclass(frozen=True)
class OpaqueObject:
    """``Annotated`` marker for a Kubernetes object kept as a plain dict.

    Core types such as Volume are large and versioned with the cluster; the
    operator passes them through untouched, so the CRD preserves them as they
    are and only insists on the keys the operator itself relies on.
    """

    required: tuple[str, ...] = ()
    descriptions: tuple[tuple[str, str], ...] = ()
    #: Schemas of optional nested fields a validation rule reads (CEL sees only declared fields).
    declared: tuple[tuple[str, JsonSchemaValue], ...] = field(default=(), hash=False, compare=False)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        def validate(value: dict[str, Any]) -> dict[str, Any]:
            for key in self.required:
                if not isinstance(value.get(key), str) or not value[key]:
                    raise ValueError(f"{key} is required and must be a non-empty string")
            return value

        return core_schema.no_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if self.required:
            out["required"] = list(self.required)
            described = dict(self.descriptions)
            out["properties"] = {
                key: {"type": "string", "minLength": 1, "description": described.get(key, key)}
                for key in self.required
            }
        if self.declared:
            out.setdefault("properties", {}).update(dict(self.declared))
        return out


def _to_kube_time(value: datetime) -> datetime:
    """Normalise to what the API server stores (metav1.Time: UTC, whole seconds).

    Without this, a condition built in Python would differ from the same
    condition read back, and the operator would keep rewriting unchanged status.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


def _rfc3339(value: datetime) -> str:
    return _to_kube_time(value).strftime(RFC3339)


# Serialised as a string even in python mode, so a plain model_dump() can go
# straight into a JSON patch body.
Timestamp = Annotated[datetime, AfterValidator(_to_kube_time), PlainSerializer(_rfc3339, return_type=str)]
OpaqueDict = Annotated[dict[str, Any], OpaqueObject()]


# --------------------------------------------------------------------------------------
# Field rules

GITHUB_LOGIN = r"[A-Za-z0-9](-?[A-Za-z0-9])*"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
GO_DURATION = r"^([0-9]+(h|m|s))+$"
LABEL_FORBIDDEN = r"[,\s]"
QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$"

Repository = Annotated[
    str,
    StringConstraints(max_length=140),
    Cel(
        regex_rule(
            rf"^{GITHUB_LOGIN}/[A-Za-z0-9._-]+$",
            "spec.repository must be owner/name, e.g. octo-org/hello-world "
            "(owner: letters, digits, single hyphens; name: letters, digits, '.', '_', '-')",
        ),
        Rule(
            cel="self.indexOf('/') <= 39 && size(self) - self.indexOf('/') <= 101",
            message="spec.repository: the owner may have at most 39 characters and the name at most 100",
            check=lambda v: v.find("/") <= 39 and len(v) - v.find("/") <= 101,
        ),
        Rule(
            cel="!self.endsWith('/.') && !self.endsWith('/..')",
            message="spec.repository: '.' and '..' are not repository names",
            check=lambda v: not v.endswith(("/.", "/..")),
        ),
    ),
]
Organization = Annotated[
    str,
    StringConstraints(max_length=39),
    Cel(
        regex_rule(
            rf"^{GITHUB_LOGIN}$",
            "spec.organization must be a GitHub organization login: letters, digits and single "
            "hyphens, not starting or ending with a hyphen",
        )
    ),
]
Enterprise = Annotated[
    str,
    StringConstraints(max_length=100),
    Cel(
        regex_rule(
            rf"^{GITHUB_LOGIN}$",
            "spec.enterprise must be a GitHub enterprise slug (as in "
            "https://github.com/enterprises/<slug>): letters, digits and single hyphens",
        )
    ),
]
#: GitHub shows runner group names as typed; config.sh takes one as a single argument.
RUNNER_GROUP_NAME = r"^\S(.*\S)?$"
RunnerGroupName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=100),
    Cel(
        regex_rule(
            RUNNER_GROUP_NAME,
            "spec.runnerGroup is a runner group's name as GitHub shows it, without leading or "
            "trailing whitespace",
        )
    ),
]
RunnerLabel = Annotated[
    str,
    StringConstraints(min_length=1, max_length=100),
    Cel(
        Rule(
            cel=f"!self.matches({cel_string(LABEL_FORBIDDEN)})",
            message="runner labels must not contain commas or whitespace (the runner takes them "
            "as one comma-separated list)",
            check=lambda v: re.search(LABEL_FORBIDDEN, v) is None,
        ),
        Rule(
            cel="!self.contains('/')",
            message="runner labels must not contain '/': labels of the form <namespace>/<pool> "
            "are reserved for the operator to identify pools",
            check=lambda v: "/" not in v,
        ),
    ),
]
DnsSubdomain = Annotated[
    str,
    StringConstraints(max_length=253),
    Cel(
        regex_rule(
            DNS1123_SUBDOMAIN,
            "must be a valid Kubernetes object name: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit",
        )
    ),
]
#: A key of a Secret's data, as the API server allows them.
SecretKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    Cel(
        regex_rule(
            r"^[-._a-zA-Z0-9]+$",
            "a Secret key is made of letters, digits, '-', '_' and '.'",
        )
    ),
]
GithubApiUrl = Annotated[
    str,
    StringConstraints(max_length=2048),
    Cel(
        regex_rule(
            r"^https://[^\s/?#]+(/[^\s?#]*)?$",
            "spec.githubApiUrl must be an https:// URL without query or fragment, "
            "e.g. https://ghe.example.com/api/v3",
        )
    ),
]
ImageReference = Annotated[
    str,
    StringConstraints(min_length=1, max_length=512),
    Cel(regex_rule(r"^\S+$", "spec.runnerImage must be an image reference without whitespace")),
]
#: No pod of a pool runs as a kubernetes-mode pool's runner account: the operator binds it to a
#: Role that reads the namespace's Secrets (the container hooks need it), so a token pool naming
#: it would hand its jobs every token and credential Secret there (docs/kubernetes-mode.md).
_NOT_A_RUNNER_ACCOUNT = Cel(
    Rule(
        cel=f"!self.startsWith({cel_string(naming.RUNNER_ACCOUNT_PREFIX)})",
        message=f"must not name a kubernetes-mode pool's runner account ({naming.RUNNER_ACCOUNT_PREFIX}*): "
        "it may read the namespace's Secrets; name an account of your own",
        check=lambda name: not str(name).startswith(naming.RUNNER_ACCOUNT_PREFIX),
    )
)
PodAccountName = Annotated[str, StringConstraints(max_length=253), _NOT_A_RUNNER_ACCOUNT]
DindImageReference = Annotated[
    str,
    StringConstraints(min_length=1, max_length=512),
    Cel(regex_rule(r"^\S+$", "spec.dindImage must be an image reference without whitespace")),
]
GoDuration = Annotated[
    str,
    StringConstraints(max_length=32),
    Cel(
        regex_rule(
            GO_DURATION,
            "spec.recreateDeadline must be a duration made of hours, minutes and seconds, "
            "e.g. 24h, 90m or 1h30m",
        )
    ),
]
#: A runner scale set's name: the label workflows target with ``runs-on``, unique within the
#: runner group (GitHub's runner scale set names; ARC's runnerScaleSetName).
SCALE_SET_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
ScaleSetName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=100),
    Cel(
        regex_rule(
            SCALE_SET_NAME,
            "spec.scaleSet.name is the label workflows target (runs-on): letters, digits, '.', '_' "
            "and '-', starting with a letter or digit",
        )
    ),
]
ScaleDownDelay = Annotated[
    str,
    StringConstraints(max_length=32),
    Cel(
        regex_rule(
            GO_DURATION,
            "spec.autoscaling.scaleDownDelay must be a duration made of hours, minutes and seconds, "
            "e.g. 5m, 90s or 1h",
        )
    ),
]
BusyGracePeriod = Annotated[
    str,
    StringConstraints(max_length=32),
    Cel(
        regex_rule(
            GO_DURATION,
            "spec.busyGracePeriod must be a duration made of hours, minutes and seconds, "
            "e.g. 1h, 30m, 6h30m or 0s",
        ),
        Rule(
            cel=f"duration(self) <= duration('{MAX_BUSY_GRACE_SECONDS}s')",
            message=f"spec.busyGracePeriod may be at most {MAX_BUSY_GRACE_SECONDS // 3600}h",
            check=lambda v: parse_duration(v).total_seconds() <= MAX_BUSY_GRACE_SECONDS,
        ),
    ),
]
RepositoryName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=140),
    Cel(
        regex_rule(
            rf"^({GITHUB_LOGIN}/)?[A-Za-z0-9._-]+$",
            "spec.autoscaling.repositories lists repository names (letters, digits, '.', '_', '-'): "
            "without the owner for an organization pool (hello-world), owner/name for an "
            "enterprise pool (octo-org/hello-world)",
        )
    ),
]
EnvName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256),
    Cel(
        regex_rule(
            r"^[A-Za-z_][A-Za-z0-9_]*$",
            "env var names must be C identifiers: letters, digits and '_', not starting with a digit",
        )
    ),
]
Quantity = Annotated[
    int | str,
    Cel(
        Rule(
            cel=f"string(self).matches({cel_string(QUANTITY)})",
            message="resource quantities look like 2, 500m, 1.5, 512Mi or 4Gi",
            check=lambda v: len(str(v)) <= 64 and re.fullmatch(QUANTITY, str(v)) is not None,
        ),
        schema={"maxLength": 64},
    ),
]


# --------------------------------------------------------------------------------------
# Credentials stay in the operator's register container (runnerpool.pods.registration)

_CREDENTIAL_VOLUMES = naming.CREDENTIAL_VOLUMES
_CREDENTIAL_SECRET_PREFIXES = (naming.TOKEN_SECRET_PREFIX, naming.JIT_SECRET_PREFIX)
#: Most sources of a projected volume the rules read (CEL needs the worst case bounded).
MAX_PROJECTED_SOURCES = 32


def _name_schema(description: str) -> JsonSchemaValue:
    return {"type": "string", "maxLength": 253, "description": description}


def _open_object(description: str, **properties: JsonSchemaValue) -> JsonSchemaValue:
    """A core/v1 object kept whole, of which the rules read only ``properties``."""
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": description,
        "properties": properties,
    }


_CREDENTIAL_SECRETS = f"{naming.TOKEN_SECRET_PREFIX}*, {naming.JIT_SECRET_PREFIX}*"
_NOT_OURS = f"not one of the operator's credential Secrets ({_CREDENTIAL_SECRETS})"
#: Where a pod gets a Secret, it is neither the pool's GitHub credential nor the operator's own.
_NOT_A_CREDENTIAL = f"not the pool's credential Secret (spec.credentialSecretName) nor {_NOT_OURS}"
_SECRET_NAME = _name_schema(f"The Secret in the pool's namespace; {_NOT_A_CREDENTIAL}.")
#: What of a core/v1 Volume names a Secret: ``secret.secretName`` and ``projected.sources[].secret.name``.
SECRET_VOLUME_SOURCE_SCHEMA = _open_object(
    "A Secret as a volume (core/v1 SecretVolumeSource).",
    secretName=_SECRET_NAME,
)
PROJECTED_VOLUME_SOURCE_SCHEMA = _open_object(
    "Sources projected into one volume (core/v1 ProjectedVolumeSource).",
    sources={
        "type": "array",
        "maxItems": MAX_PROJECTED_SOURCES,
        "description": f"The projected sources, at most {MAX_PROJECTED_SOURCES}.",
        "items": _open_object(
            "One projected source (core/v1 VolumeProjection).",
            secret=_open_object(
                "A Secret's keys (core/v1 SecretProjection).",
                name=_SECRET_NAME,
            ),
        ),
    },
)


def _credential_secret(name: object) -> bool:
    """A Secret the operator keeps a registration credential in (a pool's token, a pod's JIT config)."""
    return isinstance(name, str) and name.startswith(_CREDENTIAL_SECRET_PREFIXES)


def _credential_secret_cel(name: str) -> str:
    return "(" + " || ".join(f"{name}.startsWith({cel_string(p)})" for p in _CREDENTIAL_SECRET_PREFIXES) + ")"


#: A CEL expression of a Secret's name (``_credential_secret_cel``, ``_own_credential_cel``) that
#: holds when the name is refused where the expression is used.
_RefusedCel = Callable[[str], str]


def _own_credential_cel(name: str) -> str:
    """CEL, at spec level: ``name`` is the pool's own credential Secret."""
    return f"{name} == self.credentialSecretName"


def _as_dict(value: Any) -> dict[str, Any]:
    """A core/v1 object as the wire has it (a template's items are models, spec.volumes dicts)."""
    return value if isinstance(value, dict) else value.model_dump(by_alias=True)


def _volume_secret_names(volume: dict[str, Any]) -> list[object]:
    """The Secrets a core/v1 Volume or VolumeSource (a dict) mounts: ``secret.secretName`` and
    ``projected.sources[].secret.name``, the fields the volume rules read."""
    secret = volume.get("secret") or {}
    sources = (volume.get("projected") or {}).get("sources") or ()
    return [secret.get("secretName"), *((source.get("secret") or {}).get("name") for source in sources)]


def _volume_names_cel(volume: str, refused: _RefusedCel) -> str:
    """CEL mirror of :func:`_volume_secret_names`: the volume ``volume`` mounts a refused Secret."""
    return (
        f"(has({volume}.secret) && has({volume}.secret.secretName) "
        f"&& {refused(f'{volume}.secret.secretName')}) "
        f"|| (has({volume}.projected) && has({volume}.projected.sources) && {volume}.projected.sources"
        f".exists(s, has(s.secret) && has(s.secret.name) && {refused('s.secret.name')}))"
    )


#: A volume of the pool (spec.volumes, spec.template.spec.volumes) that names the token or a JIT
#: Secret would put it where the operator does not: in the runner container, where jobs run.
_CREDENTIAL_SECRET_VOLUME_RULE = Rule(
    cel=f"!({_volume_names_cel('self', _credential_secret_cel)})",
    message=f"a volume must not name the operator's credential Secrets ({_CREDENTIAL_SECRETS}) "
    "in secret.secretName or projected.sources[].secret.name: they hold "
    "registration credentials that only the operator's register container mounts, and anything that "
    "reads one can register runners of its own for the pool's repository or organization; mount a "
    "Secret of your own, named otherwise",
    check=lambda v: not any(_credential_secret(name) for name in _volume_secret_names(_as_dict(v))),
)


#: What of a core/v1 EnvVarSource and EnvFromSource names a Secret.
ENV_VAR_SOURCE_SCHEMA = _open_object(
    "Source for the value (a core/v1 EnvVarSource: secretKeyRef, configMapKeyRef, fieldRef or "
    "resourceFieldRef).",
    secretKeyRef=_open_object("A key of a Secret (core/v1 SecretKeySelector).", name=_SECRET_NAME),
)
ENV_FROM_SOURCE_SCHEMA = _open_object(
    "A source of variables (core/v1 EnvFromSource).",
    secretRef=_open_object("A Secret's keys as variables (core/v1 SecretEnvSource).", name=_SECRET_NAME),
)
_IN_ENV = (
    f"must not name the operator's credential Secrets ({_CREDENTIAL_SECRETS}): they hold "
    "registration credentials that only the operator's register container reads, and a job could "
    "read them in the environment; use a Secret of your own, named otherwise"
)


def _secret_ref(source: dict[str, Any] | None, key: str) -> object:
    return ((source or {}).get(key) or {}).get("name")


def _env_secret_cel(env: str, refused: _RefusedCel) -> str:
    """CEL: the env var ``env`` takes its value from a refused Secret (``valueFrom.secretKeyRef``)."""
    ref = f"{env}.valueFrom.secretKeyRef"
    return f"has({env}.valueFrom) && has({ref}) && has({ref}.name) && {refused(f'{ref}.name')}"


def _env_from_secret_cel(source: str, refused: _RefusedCel) -> str:
    """CEL: the envFrom source ``source`` takes its variables from a refused Secret (``secretRef``)."""
    return f"has({source}.secretRef) && has({source}.secretRef.name) && {refused(f'{source}.secretRef.name')}"


#: An env var (spec.env, a template container's env) whose valueFrom names a credential Secret.
_CREDENTIAL_SECRET_ENV_RULE = Rule(
    cel=f"!({_env_secret_cel('self', _credential_secret_cel)})",
    message=f"an env var's valueFrom.secretKeyRef {_IN_ENV}",
    check=lambda e: not _credential_secret(_secret_ref(e.value_from, "secretKeyRef")),
)


def _credential_env_from_rule(path: str) -> Rule:
    """A rule that a container's envFrom names no credential Secret."""
    return Rule(
        cel="!has(self.envFrom) || self.envFrom.all(f, "
        f"!({_env_from_secret_cel('f', _credential_secret_cel)}))",
        message=f"{path}.envFrom[].secretRef {_IN_ENV}",
        check=lambda c: not any(_credential_secret(_secret_ref(f, "secretRef")) for f in c.env_from or ()),
    )


EnvVarSourceDict = Annotated[dict[str, Any], WithJsonSchema(ENV_VAR_SOURCE_SCHEMA)]


def _credential_mounts_rule(path: str) -> Rule:
    """A rule that a container (or spec.volumeMounts, ``path``) mounts no credential volume, at any path."""
    return Rule(
        cel="!has(self.volumeMounts) || self.volumeMounts.all(m, "
        f"!(m.name in {cel_list(_CREDENTIAL_VOLUMES)}))",
        message=f"{path}.volumeMounts must not mount {' or '.join(_CREDENTIAL_VOLUMES)}, at any "
        "path: they hold the pool's registration token, the pod's JIT config and the runner's own "
        "credentials, which only the operator's register container (and, for its configuration, "
        "its runner container) mounts; a job could read them anywhere else. Mount a volume of "
        "your own, named otherwise",
        check=lambda c: not any(m.name in _CREDENTIAL_VOLUMES for m in c.volume_mounts or ()),
    )


# --------------------------------------------------------------------------------------
# Models


class KubeModel(BaseModel):
    """Base for all API models: camelCase on the wire, snake_case in Python.

    Unknown fields are ignored so that an operator older than the CRD installed
    in the cluster still reads the objects it understands.  Frozen: the informer cache
    parses each pool once and every reader shares the model (``runnerpool.reads``), so
    nobody may change what the next reader sees (make a changed one with ``model_copy``).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        _run_rules(type(self).rules, self)
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        target = handler.resolve_ref_schema(out)
        # Class docstrings explain the code to developers; users get field descriptions.
        target.pop("description", None)
        if cls.rules:
            target["x-kubernetes-validations"] = [rule.to_schema() for rule in cls.rules]
        return out


class Condition(KubeModel):
    type: str = Field(
        max_length=316, description="Kind of condition, e.g. Ready or TokenValid (one per type)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds.")
    reason: str = Field(
        default="", max_length=1024, description="Machine-readable CamelCase reason for the last change."
    )
    message: str = Field(default="", max_length=32768, description="Human-readable detail.")
    last_transition_time: Timestamp = Field(
        default_factory=lambda: _to_kube_time(datetime.now(UTC)),
        description="When status last changed (RFC 3339).",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation of the pool this condition was computed from."
    )


class RunnerCounts(KubeModel):
    online: int = Field(
        default=0, ge=0, description="Runners of this pool GitHub reports as online and idle."
    )
    busy: int = Field(default=0, ge=0, description="Runners of this pool currently running a job.")
    offline: int = Field(
        default=0, ge=0, description="Runners of this pool GitHub still lists but reports as offline."
    )


def operator_env(name: str) -> bool:
    """An env var of the runner container that only the operator sets (``RUNNER_*`` but the
    few the pool may tune, ``naming.POOL_RUNNER_ENV``)."""
    runner = name.startswith(naming.RESERVED_ENV_PREFIX) and name not in naming.POOL_RUNNER_ENV
    return runner or name in naming.RESERVED_ENV


def _not_operator_env_cel(name: str) -> str:
    """CEL mirror of ``not operator_env(name)``."""
    return (
        f"!({name}.startsWith({cel_string(naming.RESERVED_ENV_PREFIX)}) "
        f"&& !({name} in {cel_list(naming.POOL_RUNNER_ENV)})) "
        f"&& !({name} in {cel_list(naming.RESERVED_ENV)})"
    )


def _operator_env_rule(path: str, cel: str, check: Callable[[Any], bool]) -> Rule:
    """A rule that the runner container's env from ``path`` sets none of the operator's variables:
    the pool's entries come after the operator's, and the last of a name wins (RUNNER_CONFIG_DIR
    under the work volume would put the runner's credentials where jobs write)."""
    return Rule(
        cel=cel,
        message=f"{path} must not set {naming.RESERVED_ENV_PREFIX}* variables (but "
        f"{', '.join(naming.POOL_RUNNER_ENV)}) or {', '.join(naming.RESERVED_ENV)}: the operator sets "
        "them from the pool (scope, spec.labels, "
        "spec.busyGracePeriod, the token and work directory); use another name or spec.labels",
        check=check,
    )


class EnvVar(KubeModel):
    """Typed enough to validate names; ``valueFrom`` is passed through to the pod as is."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!(has(self.value) && has(self.valueFrom))",
            message="set either value or valueFrom on an env var, not both",
            check=lambda e: e.value is None or e.value_from is None,
        ),
        _CREDENTIAL_SECRET_ENV_RULE,
        _operator_env_rule(
            "spec.env", _not_operator_env_cel("self.name"), lambda e: not operator_env(e.name)
        ),
    )

    name: EnvName = Field(
        description="Name of the environment variable in the runner container; "
        f"{naming.RESERVED_ENV_PREFIX}* (but {', '.join(naming.POOL_RUNNER_ENV)}) and "
        f"{', '.join(naming.RESERVED_ENV)} are the operator's."
    )
    value: str | None = Field(default=None, description="Literal value.")
    value_from: EnvVarSourceDict | None = Field(
        default=None,
        description="Source for the value (a core/v1 EnvVarSource: secretKeyRef, configMapKeyRef, "
        f"fieldRef or resourceFieldRef); a secretKeyRef names neither "
        f"spec.credentialSecretName nor a {_CREDENTIAL_SECRETS} Secret.",
    )


class Resources(KubeModel):
    requests: Annotated[dict[str, Quantity], Field(max_length=16)] = Field(
        default_factory=dict,
        description="Minimum resources for the runner container, e.g. {cpu: 500m, memory: 1Gi}.",
    )
    limits: Annotated[dict[str, Quantity], Field(max_length=16)] = Field(
        default_factory=dict,
        description="Maximum resources for the runner container, e.g. {cpu: 2, memory: 4Gi}.",
    )


class Toleration(KubeModel):
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
            message="a toleration with operator Exists must not set value",
            check=lambda t: t.operator != "Exists" or not t.value,
        ),
        Rule(
            cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
            message="a toleration without key must use operator Exists",
            check=lambda t: bool(t.key) or t.operator == "Exists",
        ),
        Rule(
            cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="tolerationSeconds only applies to effect NoExecute",
            check=lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
        ),
    )

    key: str | None = Field(
        default=None, max_length=316, description="Taint key to tolerate; empty means every key."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists matches any value; Equal (the default) matches value exactly."
    )
    value: str | None = Field(
        default=None, max_length=63, description="Taint value to match when operator is Equal."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty means every effect."
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="For NoExecute: how long the pod stays bound after the taint appears.",
    )


_OPERATOR_VOLUMES = naming.OPERATOR_VOLUMES
VolumeDict = Annotated[
    dict[str, Any],
    OpaqueObject(
        required=("name",),
        descriptions=(("name", "Volume name, referenced by volumeMounts."),),
        declared=(("secret", SECRET_VOLUME_SOURCE_SCHEMA), ("projected", PROJECTED_VOLUME_SOURCE_SCHEMA)),
    ),
    Cel(
        Rule(
            cel=f"!(self.name in {cel_list(_OPERATOR_VOLUMES)})",
            message=f"spec.volumes must not be named {' or '.join(_OPERATOR_VOLUMES)}: they are the "
            "operator's registration token, JIT config, runner configuration and work volumes "
            "(spec.workVolume changes the work volume)",
            check=lambda v: v.get("name") not in _OPERATOR_VOLUMES,
        ),
        _CREDENTIAL_SECRET_VOLUME_RULE,
    ),
]
#: ``spec.workVolume``: a volume source, which names a Secret as any volume does.
WorkVolumeDict = Annotated[
    dict[str, Any],
    OpaqueObject(
        declared=(("secret", SECRET_VOLUME_SOURCE_SCHEMA), ("projected", PROJECTED_VOLUME_SOURCE_SCHEMA))
    ),
    Cel(_CREDENTIAL_SECRET_VOLUME_RULE),
]
VolumeMountDict = Annotated[
    dict[str, Any],
    OpaqueObject(
        required=("name", "mountPath"),
        descriptions=(
            ("name", "Name of the volume to mount."),
            ("mountPath", "Path in the runner container."),
        ),
    ),
    Cel(
        Rule(
            cel=f"!(self.name in {cel_list(_CREDENTIAL_VOLUMES)})",
            message=f"spec.volumeMounts must not mount {' or '.join(_CREDENTIAL_VOLUMES)}: they hold "
            "the pool's registration token, the pod's JIT config and the runner's own credentials, "
            "which only the operator's register container mounts; a job in the runner container "
            "could read them. Mount a volume of your own, named otherwise",
            check=lambda m: m.get("name") not in _CREDENTIAL_VOLUMES,
        )
    ),
]


DEFAULT_SCALE_DOWN_DELAY = "5m"


DEFAULT_WEBHOOK_SECRET_KEY = "webhook-secret"


class WebhookSecretRef(KubeModel):
    """A key of a Secret in the pool's namespace: the pool's own webhook secret (demand/secret.py)."""

    name: DnsSubdomain = Field(description="Secret in the pool's namespace that holds the webhook secret.")
    key: SecretKey = Field(
        default=DEFAULT_WEBHOOK_SECRET_KEY,
        description="Key of the Secret whose value is the webhook secret; one secret per line, so "
        "during a rotation the old and the new one both verify.",
    )


#: A Secret the operator reads for the pool and its runners get too (a CA bundle, a proxy
#: login): one of the operator's credential Secrets there would put the pool's registration
#: credential in the runner container, where jobs run.
OwnSecretName = Annotated[
    DnsSubdomain,
    Cel(
        Rule(
            cel=f"!{_credential_secret_cel('self')}",
            message=f"must not name the operator's credential Secrets ({_CREDENTIAL_SECRETS}): "
            "the runners get this Secret's value, and a registration credential lets anyone who "
            "reads it register runners of their own; name a Secret of your own",
            check=lambda name: not _credential_secret(name),
        )
    ),
]


class KeyRef(KubeModel):
    """One key of a ConfigMap or Secret in the pool's namespace."""

    name: DnsSubdomain = Field(description="Name of the object in the pool's namespace.")
    key: SecretKey = Field(description="Key of the object's data.")


class SecretKeyRef(KeyRef):
    """One key of a Secret in the pool's namespace that the runners get too."""

    name: OwnSecretName = Field(description=f"Name of the Secret in the pool's namespace; {_NOT_OURS}.")


class CertificateFrom(KubeModel):
    """Where the CA bundle is: exactly one of a ConfigMap key or a Secret key (ARC's shape)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="has(self.configMapKeyRef) != has(self.secretKeyRef)",
            message="spec.githubServerTLS.certificateFrom: set exactly one of configMapKeyRef "
            "or secretKeyRef",
            check=lambda c: (c.config_map_key_ref is None) != (c.secret_key_ref is None),
        ),
    )

    config_map_key_ref: KeyRef | None = Field(
        default=None, description="ConfigMap key holding the PEM CA bundle (one or more certificates)."
    )
    secret_key_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the PEM CA bundle (one or more certificates)."
    )

    @property
    def source(self) -> tuple[Literal["ConfigMap", "Secret"], KeyRef]:
        """The kind of object and its key (the model's rule guarantees exactly one)."""
        if self.config_map_key_ref is not None:
            return "ConfigMap", self.config_map_key_ref
        if self.secret_key_ref is not None:
            return "Secret", self.secret_key_ref
        raise ValueError("certificateFrom names no ConfigMap and no Secret")


class GithubServerTLS(KubeModel):
    """The CA that signed GitHub Enterprise Server's certificate (runnerpool/connection.py)."""

    certificate_from: CertificateFrom = Field(
        description="The PEM CA bundle trusted for GitHub, in addition to the public CAs: by the "
        "operator's calls for this pool, and by its runners (NODE_EXTRA_CA_CERTS, SSL_CERT_FILE)."
    )


ProxyUrl = Annotated[
    str,
    StringConstraints(max_length=2048),
    Cel(
        regex_rule(
            r"^https?://[^\s/?#@]+/?$",
            "spec.proxy URLs are http://host:port or https://host:port, without a path or "
            "credentials (credentials go in credentialSecretRef)",
        )
    ),
]
NoProxyEntry = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    Cel(regex_rule(r"^[^\s,]+$", "spec.proxy.noProxy entries are host names, domains or addresses")),
]


class ProxyServer(KubeModel):
    """One proxy: its URL and the Secret with its credentials, if it asks for any."""

    url: ProxyUrl = Field(description="The proxy, e.g. http://proxy.example.com:3128.")
    credential_secret_ref: OwnSecretName | None = Field(
        default=None,
        description="Secret in the pool's namespace with keys username and password for the "
        "proxy; they go into the proxy URL as they are (percent-encode ':', '@', '/' and '%'); "
        f"{_NOT_OURS}.",
    )


class Proxy(KubeModel):
    """The proxies GitHub is reached through, for the operator and the runners (ARC's shape)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="has(self.http) || has(self.https)",
            message="spec.proxy: set http, https or both",
            check=lambda p: p.http is not None or p.https is not None,
        ),
    )

    http: ProxyServer | None = Field(default=None, description="Proxy for http:// URLs (http_proxy).")
    https: ProxyServer | None = Field(default=None, description="Proxy for https:// URLs (https_proxy).")
    no_proxy: Annotated[list[NoProxyEntry], Field(max_length=64)] = Field(
        default_factory=list,
        description="Hosts, domains (.example.com) or addresses reached directly (no_proxy).",
    )


class Autoscaling(KubeModel):
    """How a pool follows demand; see runnerpool/demand/ for the rule."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="spec.autoscaling.minReplicas must not be above spec.autoscaling.maxReplicas",
            check=lambda a: a.min_replicas <= a.max_replicas,
        ),
        Rule(
            cel="!has(self.minIdle) || self.minIdle <= self.maxReplicas",
            message="spec.autoscaling.minIdle must not be above spec.autoscaling.maxReplicas: "
            "the idle buffer is kept within maxReplicas",
            check=lambda a: a.min_idle <= a.max_replicas,
        ),
    )

    min_replicas: int = Field(
        default=0,
        ge=0,
        le=MAX_REPLICAS,
        json_schema_extra={"format": "int32"},
        description="Runner pods kept even without demand; 0 lets an idle pool scale to zero.",
    )
    max_replicas: int = Field(
        ge=1,
        le=MAX_REPLICAS,
        json_schema_extra={"format": "int32"},
        description="Most runner pods the pool runs, however many jobs are queued.",
    )
    min_idle: int = Field(
        default=0,
        ge=0,
        le=MAX_REPLICAS,
        json_schema_extra={"format": "int32"},
        description="Idle runners kept ready above demand (busy + queued jobs), within "
        "maxReplicas, so that the next jobs start without waiting for a pod; a runner that takes "
        "a job is replaced at once. 0: no buffer.",
    )
    scale_down_delay: ScaleDownDelay = Field(
        default=DEFAULT_SCALE_DOWN_DELAY,
        description="How long demand must stay low before the pool shrinks (e.g. 5m, 90s); "
        "scaling up never waits. Only idle runners are removed.",
    )
    repositories: Annotated[list[RepositoryName], ListType("set"), Field(max_length=100)] = Field(
        default_factory=list,
        description="For an organization pool: repositories (names, without the owner) whose "
        "queued jobs polling looks at when no webhook delivery reports them. For an enterprise "
        "pool (owner/name): the repositories whose jobs count for the pool at all, from webhook "
        "deliveries and polling. A repository pool polls its own repository.",
    )
    webhook_secret_ref: WebhookSecretRef | None = Field(
        default=None,
        description="The pool's own webhook secret: deliveries move this pool only when this "
        "secret signed them (the operator's cluster-wide secret no longer does). Unset means the "
        "cluster-wide secret.",
    )


#: The hook the runner image ships for each kind of work volume (ARC's runner image lays them
#: out so: the k8s hooks need the job pod to mount the runner's work volume claim, the
#: k8s-novolume hooks copy the workspace into the job pod instead).
KUBERNETES_HOOK = "/home/runner/k8s/index.js"
KUBERNETES_NOVOLUME_HOOK = "/home/runner/k8s-novolume/index.js"
DEFAULT_WORK_VOLUME_SIZE = "1Gi"
#: ``spec.containerMode`` values: where a job's containers run.
KUBERNETES_MODE = "kubernetes"

AbsolutePath = Annotated[
    str,
    StringConstraints(min_length=2, max_length=1024),
    Cel(regex_rule(r"^/\S*$", "spec.kubernetesMode.hookPath must be an absolute path without whitespace")),
]


AccessMode = Literal["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"]


class WorkVolumeClaim(KubeModel):
    """The runner's _work directory as an ephemeral PersistentVolumeClaim (one per pod, gone with it)."""

    storage_class_name: DnsSubdomain | None = Field(
        default=None,
        description="StorageClass the claim is provisioned from. Unset means the cluster's default class.",
    )
    storage: Quantity = Field(
        default=DEFAULT_WORK_VOLUME_SIZE,
        description=f"Size of the claim, e.g. 10Gi. Unset means {DEFAULT_WORK_VOLUME_SIZE}.",
    )
    access_modes: Annotated[
        list[AccessMode],
        ListType("set"),
        Field(min_length=1, max_length=3),
    ] = Field(
        default_factory=lambda: list[AccessMode](["ReadWriteOnce"]),
        description="Access modes of the claim. ReadWriteOnce (the default) keeps the job pods on "
        "the runner's node, which the hooks do; ReadWriteMany lets them schedule anywhere.",
    )


class KubernetesMode(KubeModel):
    """How a ``containerMode: kubernetes`` pool runs its jobs' containers (pods/kubernetes_mode.py)."""

    work_volume_claim: WorkVolumeClaim | None = Field(
        default=None,
        description="The runner's _work directory as an ephemeral PersistentVolumeClaim that the "
        "job pods mount (the runner container hooks' k8s flavour). Unset means an emptyDir and the "
        "k8s-novolume hooks, which copy the workspace into each job pod instead.",
    )
    hook_path: AbsolutePath | None = Field(
        default=None,
        description="Path of the container hooks' index.js in the runner image "
        f"(ACTIONS_RUNNER_CONTAINER_HOOKS). Unset means {KUBERNETES_HOOK} with a workVolumeClaim, "
        f"{KUBERNETES_NOVOLUME_HOOK} without.",
    )


# --------------------------------------------------------------------------------------
# spec.template: a pod template merged onto the operator's runner pod (runnerpool.pods.merge)

#: Most containers a template lists, and most items in its other lists the rules read: the API
#: server only accepts CEL rules whose worst-case cost it can bound.
MAX_TEMPLATE_CONTAINERS = 16
MAX_TEMPLATE_ITEMS = 128
#: What the operator sets on a runner pod while its runner is busy (runnerpool.runners.lifecycle).
_BUSY_ANNOTATION_KEYS = tuple(sorted(naming.BUSY_ANNOTATIONS))
_OPERATOR_MOUNT_PATHS = naming.OPERATOR_MOUNT_PATHS


def operator_label(key: str) -> bool:
    """A pod label the operator selects or tracks its pods by."""
    return key.startswith(naming.OPERATOR_PREFIX) or key == naming.MANAGED_BY_LABEL


def operator_annotation(key: str) -> bool:
    """A pod annotation the operator owns (its own keys, and the busy marks it sets and removes)."""
    return key.startswith(naming.OPERATOR_PREFIX) or key in naming.BUSY_ANNOTATIONS


def _refused(path: str, field: str, attribute: str, why: str) -> Rule:
    """A rule that a template leaves ``field`` (the Python ``attribute``) unset."""
    return Rule(
        cel=f"!has(self.{field})",
        message=f"{path}.{field} is the operator's: {why}",
        check=lambda model: getattr(model, attribute) is None,
    )


class _PassThrough(KubeModel):
    """A core/v1 object the operator passes on to the pod as it is.

    Only the fields a validation rule reads are declared: CEL cannot see the fields that
    ``x-kubernetes-preserve-unknown-fields`` keeps, and every other field (there are dozens,
    versioned with the cluster) is the API server's to validate when the pod is created.
    """

    model_config = ConfigDict(extra="allow")


#: A template container's envFrom entries, with what names a Secret declared for the rules.
EnvFromList = Annotated[
    list[Annotated[dict[str, Any], WithJsonSchema(ENV_FROM_SOURCE_SCHEMA)]] | None,
    Field(
        max_length=MAX_TEMPLATE_ITEMS,
        description="Sources of environment variables (core/v1 EnvFromSource); a secretRef names neither "
        f"spec.credentialSecretName nor a {_CREDENTIAL_SECRETS} Secret.",
    ),
]


class TemplateEnvVar(_PassThrough):
    rules: ClassVar[tuple[Rule, ...]] = (_CREDENTIAL_SECRET_ENV_RULE,)

    name: str = Field(min_length=1, max_length=256, description="Name of the environment variable.")
    value_from: EnvVarSourceDict | None = Field(
        default=None,
        description="Source for the value (core/v1 EnvVarSource); a secretKeyRef names neither "
        f"spec.credentialSecretName nor a {_CREDENTIAL_SECRETS} Secret.",
    )


class TemplateVolumeMount(_PassThrough):
    name: str = Field(min_length=1, max_length=253, description="Name of the volume to mount.")
    mount_path: str = Field(min_length=1, max_length=4096, description="Path in the container.")


_RUNNER = cel_string(naming.RUNNER_CONTAINER)


class TemplateContainer(_PassThrough):
    """A container of the template: ``runner`` merges into the operator's, other names add one."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _operator_env_rule(
            "spec.template.spec.containers[runner].env",
            f"self.name != {_RUNNER} || !has(self.env) || self.env.all(e, {_not_operator_env_cel('e.name')})",
            lambda c: c.name != naming.RUNNER_CONTAINER or not any(operator_env(e.name) for e in c.env or ()),
        ),
        Rule(
            cel=f"self.name != {_RUNNER} || !has(self.volumeMounts) || "
            f"self.volumeMounts.all(m, !(m.mountPath in {cel_list(_OPERATOR_MOUNT_PATHS)}))",
            message="spec.template.spec.containers[runner].volumeMounts must not use mountPath "
            f"{' or '.join(_OPERATOR_MOUNT_PATHS)}: the operator mounts the registration token, the "
            "JIT config, the runner's configuration and the work volume there "
            "(spec.workVolume changes the work volume)",
            check=lambda c: (
                c.name != naming.RUNNER_CONTAINER
                or not any(m.mount_path in _OPERATOR_MOUNT_PATHS for m in c.volume_mounts or ())
            ),
        ),
        _credential_mounts_rule("spec.template.spec.containers[*]"),
        _credential_env_from_rule("spec.template.spec.containers[*]"),
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        description=f"Container name. {naming.RUNNER_CONTAINER!r} merges into the operator's runner "
        "container (env and volumeMounts appended by name and mountPath, other fields such as "
        "image, imagePullPolicy, resources, envFrom and securityContext set or merged); any other "
        "name adds a container (a sidecar), or merges into one the operator adds.",
    )
    env: (
        Annotated[list[TemplateEnvVar], ListType("map", ("name",)), Field(max_length=MAX_TEMPLATE_ITEMS)]
        | None
    ) = Field(
        default=None,
        description="Environment variables (core/v1 EnvVar), merged by name. In the runner "
        f"container {naming.RESERVED_ENV_PREFIX}* (but {', '.join(naming.POOL_RUNNER_ENV)}) and "
        f"{', '.join(naming.RESERVED_ENV)} are the operator's.",
    )
    env_from: EnvFromList = None
    volume_mounts: Annotated[list[TemplateVolumeMount] | None, Field(max_length=MAX_TEMPLATE_ITEMS)] = Field(
        default=None,
        description="Volume mounts (core/v1 VolumeMount), merged by mountPath. In the runner "
        f"container {' and '.join(_OPERATOR_MOUNT_PATHS)} are the operator's.",
    )


class TemplateInitContainer(_PassThrough):
    """An init container of the template (a native sidecar too); ``register`` is the operator's."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"self.name != {cel_string(naming.REGISTER_CONTAINER)}",
            message=f"spec.template.spec.initContainers[{naming.REGISTER_CONTAINER}] is the operator's: "
            "it alone mounts the registration token and registers the runner; use another name",
            check=lambda c: c.name != naming.REGISTER_CONTAINER,
        ),
        _credential_mounts_rule("spec.template.spec.initContainers[*]"),
        _credential_env_from_rule("spec.template.spec.initContainers[*]"),
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        description=f"Container name; {naming.REGISTER_CONTAINER!r} is the operator's (it registers "
        "the runner before the runner container starts).",
    )
    env: (
        Annotated[list[TemplateEnvVar], ListType("map", ("name",)), Field(max_length=MAX_TEMPLATE_ITEMS)]
        | None
    ) = Field(default=None, description="Environment variables (core/v1 EnvVar).")
    env_from: EnvFromList = None
    volume_mounts: Annotated[list[TemplateVolumeMount] | None, Field(max_length=MAX_TEMPLATE_ITEMS)] = Field(
        default=None,
        description=f"Volume mounts (core/v1 VolumeMount); {' and '.join(_CREDENTIAL_VOLUMES)} are the "
        "operator's register container's alone.",
    )


class TemplateVolume(_PassThrough):
    rules: ClassVar[tuple[Rule, ...]] = (_CREDENTIAL_SECRET_VOLUME_RULE,)

    name: str = Field(
        min_length=1,
        max_length=63,
        description="Volume name (a core/v1 Volume: any volume source passes through). "
        f"{' and '.join(_OPERATOR_VOLUMES)} are the operator's.",
    )
    secret: Annotated[dict[str, Any], WithJsonSchema(SECRET_VOLUME_SOURCE_SCHEMA)] | None = Field(
        default=None,
        description=f"A Secret as a volume (core/v1 SecretVolumeSource); not one of the operator's "
        f"credential Secrets ({naming.TOKEN_SECRET_PREFIX}*, {naming.JIT_SECRET_PREFIX}*) and not "
        "spec.credentialSecretName.",
    )
    projected: Annotated[dict[str, Any], WithJsonSchema(PROJECTED_VOLUME_SOURCE_SCHEMA)] | None = Field(
        default=None,
        description="Projected sources as a volume (core/v1 ProjectedVolumeSource), at most "
        f"{MAX_PROJECTED_SOURCES}; none of the operator's credential Secrets, nor spec.credentialSecretName.",
    )


class TemplatePodSpec(_PassThrough):
    """The pod spec of a template: any core/v1 PodSpec field, a few checked here."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _refused(
            "spec.template.spec",
            "restartPolicy",
            "restart_policy",
            "OnFailure (one job per pod; a failed registration is retried); remove it",
        ),
        _refused(
            "spec.template.spec",
            "terminationGracePeriodSeconds",
            "termination_grace_period_seconds",
            "set spec.terminationGracePeriodSeconds instead, which must be longer than spec.busyGracePeriod",
        ),
        Rule(
            cel=f"!has(self.volumes) || self.volumes.all(v, !(v.name in {cel_list(_OPERATOR_VOLUMES)}))",
            message=f"spec.template.spec.volumes must not be named {' or '.join(_OPERATOR_VOLUMES)}: "
            "they are the operator's registration token, JIT config, runner configuration and work volumes "
            "(spec.workVolume changes the work volume)",
            check=lambda s: not any(v.name in _OPERATOR_VOLUMES for v in s.volumes or ()),
        ),
    )

    restart_policy: str | None = Field(
        default=None, max_length=32, description="Not settable: the operator's (OnFailure)."
    )
    termination_grace_period_seconds: int | None = Field(
        default=None,
        json_schema_extra={"format": "int64"},
        description="Not settable: use spec.terminationGracePeriodSeconds.",
    )
    service_account_name: PodAccountName | None = Field(
        default=None,
        description="The pods' ServiceAccount. Not settable with containerMode: kubernetes (the "
        "operator makes the runners' account there).",
    )
    service_account: PodAccountName | None = Field(
        default=None,
        description="Deprecated alias of serviceAccountName; not settable with containerMode: kubernetes.",
    )
    automount_service_account_token: bool | None = Field(
        default=None,
        description="Whether the ServiceAccount token is mounted. Not settable with containerMode: "
        "kubernetes (the container hooks need it).",
    )
    containers: (
        Annotated[
            list[TemplateContainer], ListType("map", ("name",)), Field(max_length=MAX_TEMPLATE_CONTAINERS)
        ]
        | None
    ) = Field(
        default=None,
        description="Containers (core/v1 Container), merged by name: "
        f"{naming.RUNNER_CONTAINER!r} is the operator's runner container, other names are "
        "sidecars.",
    )
    init_containers: (
        Annotated[
            list[TemplateInitContainer], ListType("map", ("name",)), Field(max_length=MAX_TEMPLATE_CONTAINERS)
        ]
        | None
    ) = Field(
        default=None,
        description="Init containers (core/v1 Container; restartPolicy Always makes a native "
        f"sidecar), merged by name, run after the operator's {naming.REGISTER_CONTAINER!r}.",
    )
    volumes: (
        Annotated[list[TemplateVolume], ListType("map", ("name",)), Field(max_length=MAX_TEMPLATE_ITEMS)]
        | None
    ) = Field(
        default=None,
        description="Volumes (core/v1 Volume), merged by name with the operator's and spec.volumes.",
    )


_META = "spec.template.metadata"
_OPERATOR_PREFIX = cel_string(naming.OPERATOR_PREFIX)
_POD_NAMES = "runner pods are named <pool>-<random> in the pool's namespace; remove it"


class TemplateMetadata(KubeModel):
    """Of a pod's metadata, a template sets labels and annotations; the rest is the operator's."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _refused(_META, "name", "name", _POD_NAMES),
        _refused(_META, "generateName", "generate_name", _POD_NAMES),
        _refused(_META, "namespace", "namespace", _POD_NAMES),
        _refused(_META, "ownerReferences", "owner_references", "the pool owns its pods; remove it"),
        Rule(
            cel=f"!has(self.labels) || self.labels.all(k, !k.startsWith({_OPERATOR_PREFIX}) "
            f"&& k != {cel_string(naming.MANAGED_BY_LABEL)})",
            message=f"{_META}.labels must not set {naming.MANAGED_BY_LABEL} or "
            f"{naming.OPERATOR_PREFIX}* keys: the operator selects and tracks its pods by them",
            check=lambda m: not any(operator_label(k) for k in m.labels or {}),
        ),
        Rule(
            cel=f"!has(self.annotations) || self.annotations.all(k, !k.startsWith({_OPERATOR_PREFIX}) "
            f"&& !(k in {cel_list(_BUSY_ANNOTATION_KEYS)}))",
            message=f"{_META}.annotations must not set {naming.OPERATOR_PREFIX}* keys or "
            f"{' or '.join(_BUSY_ANNOTATION_KEYS)}: the operator owns them (it sets the latter "
            "while a runner is busy, and removes them when it is idle)",
            check=lambda m: not any(operator_annotation(k) for k in m.annotations or {}),
        ),
    )

    labels: Annotated[
        dict[str, Annotated[str, StringConstraints(max_length=63)]] | None, Field(max_length=64)
    ] = Field(default=None, description="Labels added to every runner pod (the operator's own win).")
    annotations: Annotated[dict[str, str] | None, Field(max_length=64)] = Field(
        default=None,
        description="Annotations added to every runner pod, e.g. for workload identity or a service mesh.",
    )
    name: str | None = Field(
        default=None, max_length=253, description="Not settable: the operator names pods."
    )
    generate_name: str | None = Field(
        default=None, max_length=253, description="Not settable: the operator names pods."
    )
    namespace: str | None = Field(
        default=None, max_length=253, description="Not settable: pods run in the pool's namespace."
    )
    owner_references: Annotated[list[OpaqueDict] | None, Field(max_length=8)] = Field(
        default=None, description="Not settable: the pool owns its pods."
    )


class PodTemplate(KubeModel):
    metadata: TemplateMetadata | None = Field(
        default=None, description="Labels and annotations for the runner pods."
    )
    spec: TemplatePodSpec | None = Field(
        default=None,
        description="A core/v1 PodSpec merged onto the operator's runner pod (see "
        "docs/pod-template.md): any pod field, e.g. imagePullSecrets, affinity, "
        "topologySpreadConstraints, priorityClassName, initContainers, sidecar containers, "
        "securityContext, runtimeClassName, dnsConfig, hostAliases. Maps merge key by key, lists "
        "of named items (containers, volumes, env, imagePullSecrets) by name, volumeMounts by "
        "mountPath; any other list replaces the pod's. The operator's restartPolicy, token and "
        "work volumes and runner env are not settable.",
    )


class ScaleSet(KubeModel):
    """A pool that is a GitHub runner scale set (docs/scale-sets.md): its demand comes from the
    scale set's message session, its runners' JIT configs from the scale set."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="self.name == oldSelf.name",
            message="spec.scaleSet.name is immutable: the scale set is registered on GitHub under it; "
            "create a new RunnerPool for another scale set",
        ),
    )

    name: ScaleSetName = Field(
        description="The scale set's name on GitHub, which is also the label workflows target "
        "(runs-on: <name>); spec.labels are its extra labels. Unique within the runner group. "
        "Immutable."
    )


# --------------------------------------------------------------------------------------
# The pool's GitHub credential (spec.credentialSecretName) stays with the operator: wherever the
# rules above refuse the operator's own Secrets by prefix, these refuse the pool's credential too.
# They are spec rules, as only there does CEL see spec.credentialSecretName.


def _template_items_cel(field: str, item: str, ok: str) -> str:
    """CEL at spec level: every ``item`` of the list ``spec.template.spec.<field>`` is ``ok``."""
    pod = "self.template.spec"
    return f"(!has(self.template) || !has({pod}) || !has({pod}.{field}) || {pod}.{field}.all({item}, {ok}))"


def _no_own_credential_env_cel(container: str) -> str:
    """CEL: no env var and no envFrom source of ``container`` names the pool's credential Secret."""
    env = _env_secret_cel("e", _own_credential_cel)
    env_from = _env_from_secret_cel("f", _own_credential_cel)
    return (
        f"(!has({container}.env) || {container}.env.all(e, !({env}))) "
        f"&& (!has({container}.envFrom) || {container}.envFrom.all(f, !({env_from})))"
    )


def _no_own_credential_volume_cel(volume: str) -> str:
    """CEL: the volume ``volume`` mounts no key of the pool's credential Secret."""
    return f"!({_volume_names_cel(volume, _own_credential_cel)})"


def _template_pod(spec: RunnerPoolSpec) -> TemplatePodSpec | None:
    return spec.template.spec if spec.template is not None else None


def _env_secret_names(spec: RunnerPoolSpec) -> Iterator[object]:
    """The Secrets the spec puts in a container's environment: ``spec.env``, and the env and
    envFrom of the template's containers and init containers (what the env rules read)."""
    yield from (_secret_ref(e.value_from, "secretKeyRef") for e in spec.env)
    pod = _template_pod(spec)
    for container in (*(pod.containers or ()), *(pod.init_containers or ())) if pod is not None else ():
        yield from (_secret_ref(e.value_from, "secretKeyRef") for e in container.env or ())
        yield from (_secret_ref(f, "secretRef") for f in container.env_from or ())


def _volumes_secret_names(spec: RunnerPoolSpec) -> Iterator[object]:
    """The Secrets the spec's volumes mount: spec.volumes, spec.workVolume, the template's."""
    pod = _template_pod(spec)
    work = [spec.work_volume] if spec.work_volume is not None else []
    for volume in (*spec.volumes, *work, *(pod.volumes or () if pod is not None else ())):
        yield from _volume_secret_names(_as_dict(volume))


def _not_the_pools_credential(
    where: str, cel: str, names: Callable[[RunnerPoolSpec], Iterator[object]], instead: str
) -> Rule:
    """A spec rule that no Secret ``names`` finds (``cel``: the same in CEL) is the pool's
    credential: runner pods put what those fields name within a job's reach."""
    return Rule(
        cel=cel,
        message=f"{where} must not name the pool's credential Secret (spec.credentialSecretName): it "
        "holds the pool's GitHub token or App private key, which only the operator reads, and every "
        f"job could read it there; {instead}",
        check=lambda s: s.credential_secret_name not in names(s),
    )


_OWN_CREDENTIAL_RULES = (
    _not_the_pools_credential(
        "spec.env, and the env and envFrom of spec.template's containers and init containers,",
        f"(!has(self.env) || self.env.all(e, !({_env_secret_cel('e', _own_credential_cel)}))) && "
        + _template_items_cel("containers", "c", _no_own_credential_env_cel("c"))
        + " && "
        + _template_items_cel("initContainers", "c", _no_own_credential_env_cel("c")),
        _env_secret_names,
        "use a Secret of your own",
    ),
    _not_the_pools_credential(
        "spec.volumes, spec.workVolume and spec.template.spec.volumes (secret.secretName, "
        "projected.sources[].secret.name)",
        f"(!has(self.volumes) || self.volumes.all(v, {_no_own_credential_volume_cel('v')})) "
        f"&& (!has(self.workVolume) || {_no_own_credential_volume_cel('self.workVolume')}) && "
        + _template_items_cel("volumes", "v", _no_own_credential_volume_cel("v")),
        _volumes_secret_names,
        "mount a Secret of your own",
    ),
    Rule(
        cel="!has(self.githubServerTLS) || !has(self.githubServerTLS.certificateFrom.secretKeyRef) "
        "|| self.githubServerTLS.certificateFrom.secretKeyRef.name != self.credentialSecretName "
        "|| !(self.githubServerTLS.certificateFrom.secretKeyRef.key in "
        f"{cel_list(naming.SECRET_CREDENTIAL_KEYS)})",
        message="spec.githubServerTLS.certificateFrom.secretKeyRef must not name the token or private "
        f"key of the pool's credential Secret ({', '.join(naming.SECRET_CREDENTIAL_KEYS)}): that key is "
        "mounted in the runner container as its CA file, where every job reads it; a CA bundle kept "
        "under another key of that Secret is fine",
        check=lambda s: not _ca_is_the_credential(s),
    ),
)


def _ca_is_the_credential(spec: RunnerPoolSpec) -> bool:
    """Whether the pool's CA bundle is its credential's token or private key. The operator's own
    PEM check refuses such a CA for its GitHub calls only: pods were still made while the pool's
    registration token lasted, each with the PAT as its CA file."""
    tls = spec.github_server_tls
    ref = tls.certificate_from.secret_key_ref if tls is not None else None
    return (
        ref is not None
        and ref.name == spec.credential_secret_name
        and ref.key in naming.SECRET_CREDENTIAL_KEYS
    )


#: How a pool's runner pods register (``spec.registration``; docs/registration.md).
Registration = Literal["token", "jit"]
REGISTRATION_TOKEN: Registration = "token"
REGISTRATION_JIT: Registration = "jit"
#: Container modes in which a pool-wide token would not stay in the register container: in
#: kubernetes mode the runner's ServiceAccount can read the namespace's Secrets (the container
#: hooks need it), and dind's Docker daemon, which every job drives, is root on the node.  There
#: registration is JIT unless the pool says so, and ``token`` is refused.
JIT_ONLY_CONTAINER_MODES: tuple[str, ...] = ("dind", KUBERNETES_MODE)


class RunnerPoolSpec(KubeModel):
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="(has(self.repository) ? 1 : 0) + (has(self.organization) ? 1 : 0)"
            " + (has(self.enterprise) ? 1 : 0) == 1",
            message="set exactly one of spec.repository (owner/name), spec.organization or spec.enterprise",
            check=lambda s: sum(v is not None for v in (s.repository, s.organization, s.enterprise)) == 1,
        ),
        Rule(
            cel="has(self.repository) == has(oldSelf.repository)"
            " && (!has(self.repository) || self.repository == oldSelf.repository)"
            " && has(self.organization) == has(oldSelf.organization)"
            " && (!has(self.organization) || self.organization == oldSelf.organization)"
            " && has(self.enterprise) == has(oldSelf.enterprise)"
            " && (!has(self.enterprise) || self.enterprise == oldSelf.enterprise)"
            " && has(self.githubApiUrl) == has(oldSelf.githubApiUrl)"
            " && (!has(self.githubApiUrl) || self.githubApiUrl == oldSelf.githubApiUrl)",
            message="spec.repository, spec.organization, spec.enterprise and spec.githubApiUrl are "
            "immutable: they say where the pool's runners are registered, and runners registered "
            "before a change would be neither listed nor removed; create a new RunnerPool to "
            "register runners elsewhere",
        ),
        Rule(
            cel="!has(self.runnerGroup) || !has(self.repository)",
            message="spec.runnerGroup is for organization and enterprise pools: a repository's "
            "runners belong to no runner group; remove spec.runnerGroup or register with "
            "spec.organization",
            check=lambda s: s.runner_group is None or s.repository is None,
        ),
        Rule(
            cel="!has(self.autoscaling) || self.replicas <= self.autoscaling.maxReplicas",
            message="spec.replicas is above spec.autoscaling.maxReplicas: a pool with "
            "spec.autoscaling follows demand and does not use spec.replicas; remove spec.replicas "
            "or raise spec.autoscaling.maxReplicas",
            check=lambda s: s.autoscaling is None or s.replicas <= s.autoscaling.max_replicas,
        ),
        Rule(
            cel="!has(self.autoscaling) || !has(oldSelf.autoscaling) || self.replicas == oldSelf.replicas",
            message="spec.replicas cannot change while spec.autoscaling is set (kubectl scale and "
            "HorizontalPodAutoscalers do not apply to a pool that follows demand): change "
            "spec.autoscaling.minReplicas or maxReplicas, or remove spec.autoscaling to set the "
            "number of runners by hand",
        ),
        Rule(
            cel="!has(self.autoscaling) || !has(self.autoscaling.repositories) "
            "|| size(self.autoscaling.repositories) == 0 || !has(self.repository)",
            message="spec.autoscaling.repositories is for organization and enterprise pools; a "
            "repository pool polls spec.repository: remove spec.autoscaling.repositories",
            check=lambda s: s.autoscaling is None or not s.autoscaling.repositories or s.repository is None,
        ),
        Rule(
            cel="!has(self.organization) || !has(self.autoscaling) || !has(self.autoscaling.repositories)"
            " || self.autoscaling.repositories.all(r, !r.contains('/'))",
            message="spec.autoscaling.repositories of an organization pool lists repository names "
            "without the owner (hello-world, not octo-org/hello-world)",
            check=lambda s: (
                s.organization is None
                or s.autoscaling is None
                or all("/" not in r for r in s.autoscaling.repositories)
            ),
        ),
        Rule(
            cel="!has(self.enterprise) || !has(self.autoscaling) || !has(self.autoscaling.repositories)"
            " || self.autoscaling.repositories.all(r, r.contains('/'))",
            message="spec.autoscaling.repositories of an enterprise pool lists repositories as "
            "owner/name (octo-org/hello-world): an enterprise holds many organizations",
            check=lambda s: (
                s.enterprise is None
                or s.autoscaling is None
                or all("/" in r for r in s.autoscaling.repositories)
            ),
        ),
        Rule(
            cel="!has(self.terminationGracePeriodSeconds) || self.terminationGracePeriodSeconds > "
            f"duration(has(self.busyGracePeriod) ? self.busyGracePeriod : '{DEFAULT_BUSY_GRACE_PERIOD}')"
            ".getSeconds()",
            message="spec.terminationGracePeriodSeconds must be longer than spec.busyGracePeriod "
            f"(default {DEFAULT_BUSY_GRACE_PERIOD}), or the kubelet kills a busy runner before its job "
            "can finish: remove terminationGracePeriodSeconds (it is then busyGracePeriod plus "
            f"{BUSY_EXIT_MARGIN_SECONDS}s), raise it, or lower busyGracePeriod",
            check=lambda s: (
                s.termination_grace_period_seconds is None
                or s.termination_grace_period_seconds > parse_duration(s.busy_grace_period).total_seconds()
            ),
        ),
        Rule(
            cel="!has(self.dindImage) || (has(self.containerMode) && self.containerMode == 'dind')",
            message="spec.dindImage is the Docker daemon of spec.containerMode dind: set "
            "containerMode: dind or remove dindImage",
            check=lambda s: s.dind_image is None or s.container_mode == "dind",
        ),
        Rule(
            cel="!has(self.kubernetesMode) "
            "|| (has(self.containerMode) && self.containerMode == 'kubernetes')",
            message="spec.kubernetesMode applies to spec.containerMode: kubernetes only: set "
            "containerMode: kubernetes or remove kubernetesMode",
            check=lambda s: s.kubernetes_mode is None or s.container_mode == KUBERNETES_MODE,
        ),
        Rule(
            cel="!has(self.containerMode) || self.containerMode != 'kubernetes' "
            "|| !has(self.serviceAccountName)",
            message="spec.serviceAccountName cannot be set with containerMode: kubernetes: the "
            "operator makes the runners' ServiceAccount and the Role the container hooks need; "
            "remove spec.serviceAccountName",
            check=lambda s: s.container_mode != KUBERNETES_MODE or s.service_account_name is None,
        ),
        Rule(
            cel="!has(self.containerMode) || self.containerMode != 'kubernetes' || !has(self.workVolume)",
            message="spec.workVolume cannot be set with containerMode: kubernetes: the job pods "
            "need the work volume the hooks expect; use spec.kubernetesMode.workVolumeClaim",
            check=lambda s: s.container_mode != KUBERNETES_MODE or s.work_volume is None,
        ),
        Rule(
            cel="!has(self.containerMode) || self.containerMode != 'kubernetes' || !has(self.template) "
            "|| !has(self.template.spec) || (!has(self.template.spec.serviceAccountName) "
            "&& !has(self.template.spec.serviceAccount) "
            "&& !has(self.template.spec.automountServiceAccountToken))",
            message="spec.template.spec.serviceAccountName, serviceAccount and "
            "automountServiceAccountToken cannot be set with containerMode: kubernetes: the operator "
            "makes the runners' ServiceAccount and mounts its token for the container hooks; remove them",
            check=lambda s: (
                s.container_mode != KUBERNETES_MODE
                or s.template is None
                or s.template.spec is None
                or (
                    s.template.spec.service_account_name is None
                    and s.template.spec.service_account is None
                    and s.template.spec.automount_service_account_token is None
                )
            ),
        ),
        Rule(
            cel=f"!has(self.containerMode) || !(self.containerMode in {cel_list(JIT_ONLY_CONTAINER_MODES)}) "
            f"|| !has(self.registration) || self.registration != {cel_string(REGISTRATION_TOKEN)}",
            message="spec.registration: token cannot be used with containerMode: kubernetes or dind: "
            "the pool-wide registration token would be within a job's reach (in kubernetes mode the "
            "runners' ServiceAccount can read the namespace's Secrets, which the container hooks "
            "need; in dind the Docker daemon every job drives is root on the node, where the token "
            "is mounted), and whoever reads it can register runners of their own for the pool's "
            "repository or organization. Remove spec.registration (these modes register just in "
            "time) or set it to jit",
            check=lambda s: (
                s.container_mode not in JIT_ONLY_CONTAINER_MODES or s.registration != REGISTRATION_TOKEN
            ),
        ),
        Rule(
            cel="!has(self.scaleSet) || (has(self.runnerGroup) == has(oldSelf.runnerGroup) "
            "&& (!has(self.runnerGroup) || self.runnerGroup == oldSelf.runnerGroup))",
            message="spec.runnerGroup of a scale set is immutable: the scale set lives in that group "
            "on GitHub; create a new RunnerPool for another group",
        ),
        Rule(
            cel="has(self.scaleSet) == has(oldSelf.scaleSet)",
            message="spec.scaleSet cannot be added or removed: a pool is a runner scale set from its "
            "creation or never; create a new RunnerPool",
        ),
        Rule(
            cel="!has(self.scaleSet) || has(self.autoscaling)",
            message="spec.scaleSet needs spec.autoscaling (minReplicas, maxReplicas): a scale set "
            "has as many runners as GitHub assigns it jobs, within those bounds",
            check=lambda s: s.scale_set is None or s.autoscaling is not None,
        ),
        Rule(
            cel="!has(self.scaleSet) || !has(self.autoscaling) || ((!has(self.autoscaling.repositories) "
            "|| size(self.autoscaling.repositories) == 0) && !has(self.autoscaling.webhookSecretRef))",
            message="spec.autoscaling.repositories and webhookSecretRef do not apply to a scale set: "
            "its jobs come from GitHub's message session, with no polling and no webhook; remove them",
            check=lambda s: (
                s.scale_set is None
                or s.autoscaling is None
                or (not s.autoscaling.repositories and s.autoscaling.webhook_secret_ref is None)
            ),
        ),
        Rule(
            cel="!has(self.autoscaling) || !has(self.autoscaling.webhookSecretRef) "
            "|| (self.autoscaling.webhookSecretRef.name != self.credentialSecretName "
            f"&& !{_credential_secret_cel('self.autoscaling.webhookSecretRef.name')})",
            message="spec.autoscaling.webhookSecretRef must name a Secret of its own: not the pool's "
            f"credential Secret (spec.credentialSecretName) nor {_NOT_OURS}. The webhook secret is "
            "copied where the internet-facing webhook receiver reads it",
            check=lambda s: (
                s.autoscaling is None
                or s.autoscaling.webhook_secret_ref is None
                or (
                    s.autoscaling.webhook_secret_ref.name != s.credential_secret_name
                    and not _credential_secret(s.autoscaling.webhook_secret_ref.name)
                )
            ),
        ),
        Rule(
            cel="!has(self.scaleSet) || !has(self.registration) "
            f"|| self.registration != {cel_string(REGISTRATION_TOKEN)}",
            message="spec.registration: token does not apply to a scale set: its runners register "
            "just in time with configs the scale set makes; remove spec.registration",
            check=lambda s: s.scale_set is None or s.registration != REGISTRATION_TOKEN,
        ),
        *_OWN_CREDENTIAL_RULES,
    )

    repository: Repository | None = Field(
        default=None,
        description="Repository (owner/name) the runners register with. Set exactly one of "
        "repository, organization or enterprise. Immutable.",
    )
    organization: Organization | None = Field(
        default=None,
        description="Organization the runners register with. Set exactly one of repository, "
        "organization or enterprise. Immutable.",
    )
    enterprise: Enterprise | None = Field(
        default=None,
        description="Enterprise (its slug) the runners register with; needs a personal access "
        "token (GitHub Apps cannot manage enterprise runners). Set exactly one of repository, "
        "organization or enterprise. Immutable.",
    )
    runner_group: RunnerGroupName | None = Field(
        default=None,
        description="Runner group (by name) the runners join, for organization and enterprise "
        "pools; it must exist and, when it is open to selected repositories only, admit every "
        "repository in spec.autoscaling.repositories. Unset means the scope's default group.",
    )
    replicas: int = Field(
        default=1,
        ge=0,
        le=MAX_REPLICAS,
        json_schema_extra={"format": "int32"},
        description="Number of runner pods to keep, when spec.autoscaling is not set.",
    )
    autoscaling: Autoscaling | None = Field(
        default=None,
        description="Follow demand instead of keeping spec.replicas: as many runners as busy "
        "plus queued jobs that this pool's labels match, plus minIdle idle ones, between "
        "minReplicas and maxReplicas. "
        "The operator writes its decision to status.desiredReplicas, never to spec.",
    )
    scale_set: ScaleSet | None = Field(
        default=None,
        description="Make the pool a GitHub runner scale set (needs spec.autoscaling): the operator "
        "creates or adopts the scale set, learns its jobs from GitHub's message session (nothing "
        "listens on the internet, no polling), registers each runner with a JIT config from the "
        "scale set and deletes the scale set with the pool. Workflows use runs-on: <name>.",
    )
    labels: Annotated[list[RunnerLabel], ListType("set"), Field(max_length=32)] = Field(
        default_factory=list,
        description="Extra runner labels that workflows can select with runs-on. The runner adds "
        "self-hosted, its OS and architecture; the operator adds <namespace>/<pool>.",
    )
    credential_secret_name: DnsSubdomain = Field(
        default=DEFAULT_CREDENTIAL_SECRET,
        description="Secret in the pool's namespace with the GitHub App or token credentials used "
        "to obtain registration tokens. Only the operator reads it: the pool's env and volumes may "
        "not name it, as every job could read it there.",
    )
    github_api_url: GithubApiUrl | None = Field(
        default=None,
        description="GitHub Enterprise Server API base URL, e.g. https://ghe.example.com/api/v3. "
        "Unset means github.com.",
    )
    github_server_tls: GithubServerTLS | None = Field(
        default=None,
        alias="githubServerTLS",
        description="CA bundle for a GitHub Enterprise Server whose certificate a private CA signed.",
    )
    proxy: Proxy | None = Field(
        default=None,
        description="Proxies for the operator's GitHub calls for this pool and for its runners.",
    )
    runner_image: ImageReference | None = Field(
        default=None,
        description=f"Container image of the runner. Unset means {DEFAULT_RUNNER_IMAGE}.",
    )
    container_mode: ContainerMode | None = Field(
        default=None,
        description="How jobs get containers. dind: a Docker daemon (a privileged sidecar, "
        "spec.dindImage) runs beside the runner in each pod, sharing its work directory, and "
        "the runner's DOCKER_HOST points at its socket, so docker build, docker run and "
        "container jobs work. The sidecar is root on the node to anyone who can run a job: "
        "the namespace needs Pod Security privileged (docs/dind.md). kubernetes: every job "
        "runs in a container (ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER), in pods the runner "
        "container hooks create through the Kubernetes API with a ServiceAccount and Role the "
        "operator makes for the pool (see docs/kubernetes-mode.md for what that Role lets the "
        "runner do). Unset: jobs run in the runner container, with no Docker daemon.",
    )
    dind_image: DindImageReference | None = Field(
        default=None,
        description="Image of the Docker daemon in containerMode dind; it runs "
        "dockerd --host=unix:///var/run/docker.sock --group=<runner group> as its command "
        f"arguments. Unset means {DEFAULT_DIND_IMAGE}.",
    )
    env: Annotated[list[EnvVar], ListType("map", ("name",)), Field(max_length=100)] = Field(
        default_factory=list, description="Extra environment variables for the runner container."
    )
    resources: Resources | None = Field(
        default=None, description="Compute resources of the runner container."
    )
    node_selector: Annotated[dict[str, str], Field(max_length=64)] = Field(
        default_factory=dict, description="Node labels a runner pod's node must have."
    )
    tolerations: Annotated[list[Toleration], Field(max_length=64)] = Field(
        default_factory=list, description="Taints runner pods tolerate."
    )
    service_account_name: Annotated[DnsSubdomain, _NOT_A_RUNNER_ACCOUNT] | None = Field(
        default=None,
        description="Service account of the runner pods. Unset means the namespace's default.",
    )
    volumes: Annotated[list[VolumeDict], ListType("map", ("name",)), Field(max_length=64)] = Field(
        default_factory=list,
        description="Extra pod volumes (core/v1 Volume objects), mounted with volumeMounts.",
    )
    volume_mounts: Annotated[list[VolumeMountDict], Field(max_length=64)] = Field(
        default_factory=list,
        description="Extra mounts in the runner container (core/v1 VolumeMount objects).",
    )
    work_volume: WorkVolumeDict | None = Field(
        default=None,
        description="Volume source (a core/v1 VolumeSource such as emptyDir or ephemeral) for the "
        "runner's _work directory. Unset means an emptyDir.",
    )
    kubernetes_mode: KubernetesMode | None = Field(
        default=None, description="Settings of containerMode: kubernetes."
    )
    template: PodTemplate | None = Field(
        default=None,
        description="A pod template (labels, annotations and any pod spec field) merged onto the "
        "runner pods the operator makes, after the fields above: pull secrets, affinity, "
        "topology spread, priority class, init and sidecar containers, security contexts, "
        "workload identity labels. A container named runner merges into the runner container. "
        "The operator's own fields (pod names, owner, selector labels, restartPolicy, the token "
        "and work volumes, the runner's RUNNER_* env) are refused. A change rolls the pods as "
        "any template change does: idle ones at once, busy ones after their job.",
    )
    registration: Registration | None = Field(
        default=None,
        description="How a runner pod registers its runner. token: the pod's register init "
        "container runs config.sh with the pool's registration token (one GitHub call per pool "
        "per token life; the token is in the namespace's Secrets for that hour). jit: the "
        "operator asks GitHub for a just-in-time config per pod (one call per pod) and puts it "
        "in a Secret of that pod, emptied once the pod's runner has it; use it where others "
        "can read Secrets in the namespace (docs/registration.md). Unset means jit with "
        "containerMode kubernetes or dind, token otherwise; token is refused with those modes, "
        "where a job could reach the pool-wide token.",
    )
    recreate_deadline: GoDuration | None = Field(
        default=None,
        description="Idle runner pods older than this duration (e.g. 24h, 90m) are replaced, so "
        "long-lived runners pick up new images and a clean disk. Unset means never.",
    )
    busy_grace_period: BusyGracePeriod = Field(
        default=DEFAULT_BUSY_GRACE_PERIOD,
        description="How long a busy runner's job may go on when its pod is told to stop from "
        "outside: the pod or its namespace deleted, a drain with eviction disabled, a node "
        "shutdown. The runner finishes its job and exits (one job per pod); only when this "
        "runs out is the job cancelled. Idle runners stop at once; eviction (kubectl drain, "
        "autoscalers) and the operator itself never stop a busy runner. A duration of hours, "
        f"minutes and seconds (e.g. 1h, 30m; 0s cancels at once), at most "
        f"{MAX_BUSY_GRACE_SECONDS // 3600}h. The pods' terminationGracePeriodSeconds is this "
        f"plus {BUSY_EXIT_MARGIN_SECONDS}s unless spec.terminationGracePeriodSeconds is set.",
    )
    termination_grace_period_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TERMINATION_GRACE_SECONDS,
        json_schema_extra={"format": "int64"},
        description="Seconds a runner pod gets between SIGTERM and SIGKILL when it is deleted or "
        "evicted; it must be longer than busyGracePeriod (an idle runner exits at once on "
        "SIGTERM, a busy one after its job). Unset means busyGracePeriod plus "
        f"{BUSY_EXIT_MARGIN_SECONDS}s.",
    )

    @property
    def registration_mode(self) -> Registration:
        """How the pool's pods register: spec.registration, or when unset the mode's default.

        The one place the default is decided (a CRD default cannot depend on containerMode):
        every reader of the registration mode asks here, or :attr:`registers_jit`.
        """
        if self.registration is not None:
            return self.registration
        if self.container_mode in JIT_ONLY_CONTAINER_MODES or self.scale_set is not None:
            return REGISTRATION_JIT
        return REGISTRATION_TOKEN

    @property
    def webhook_secret_ref(self) -> WebhookSecretRef | None:
        """The Secret key that signs this pool's own deliveries (``None``: a pool not following
        demand, or one trusting the cluster's webhook secret)."""
        return self.autoscaling.webhook_secret_ref if self.autoscaling is not None else None

    @property
    def registers_jit(self) -> bool:
        """Whether each runner pod gets a JIT config of its own (no pool-wide token Secret)."""
        return self.registration_mode == REGISTRATION_JIT

    @property
    def connection(self) -> Connection | None:
        """Where the operator finds this pool's CA bundle and proxy credentials; ``None``: it
        uses its own (``runnerpool.github.credentials`` reads them)."""
        if self.github_server_tls is None and self.proxy is None:
            return None
        ca = None
        if self.github_server_tls is not None:
            kind, ref = self.github_server_tls.certificate_from.source
            ca = (kind, ref.name, ref.key)
        if self.proxy is None:
            return Connection(ca=ca)
        servers = (("http", self.proxy.http), ("https", self.proxy.https))
        return Connection(
            ca=ca,
            proxies=tuple(ProxyRef(scheme, s.url, s.credential_secret_ref) for scheme, s in servers if s),
            no_proxy=tuple(self.proxy.no_proxy),
        )


#: Jobs remembered per pool: queued and busy ones (at most maxReplicas are busy) plus recently
#: completed ones kept so a late or repeated delivery cannot bring them back.
MAX_TRACKED_JOBS = 2000


#: The longest ``Problem.message``.
PROBLEM_MESSAGE_MAX = 1024


class Problem(KubeModel):
    """Why a part of the operator that publishes on the pool cannot go on, in its own words."""

    reason: str = Field(max_length=128, description="Why it cannot go on (CamelCase).")
    message: str = Field(max_length=PROBLEM_MESSAGE_MAX, description="What is wrong and what to fix.")


class TrackedJob(KubeModel):
    state: JobState = Field(description="The job's latest state as GitHub reported it.")
    repository: str = Field(max_length=140, description="Repository (owner/name) the job runs for.")
    runner: str | None = Field(
        default=None, max_length=256, description="Runner that took the job, once in progress."
    )
    updated_at: Timestamp = Field(description="When the operator learnt of this state.")
    unconfirmed: bool | None = Field(
        default=None,
        description="Known only from a queued delivery too old to count (a redelivery, a job "
        "held for an environment's approval): not counted until a poll of its repository lists "
        "it; ended when the poll does not (or the repository answers 404).",
    )


class Demand(KubeModel):
    queued: int = Field(default=0, ge=0, description="Queued jobs this pool's labels match.")
    busy: int = Field(default=0, ge=0, description="Jobs in progress on this pool's runners.")
    jobs: Annotated[dict[str, TrackedJob], Field(max_length=MAX_TRACKED_JOBS), AtomicMap()] = Field(
        default_factory=dict,
        description="Jobs by GitHub job id, from webhook deliveries and polling.",
    )
    first_delivery_at: Timestamp | None = Field(
        default=None,
        description="When a verified webhook delivery for the pool's repository or organization "
        "was first seen: the webhook is configured.",
    )
    poll_problem: Problem | None = Field(
        default=None,
        description="Why GitHub refuses the poll of the pool's jobs (a credential without read "
        "access to Actions, a repository it cannot see), while it does; unset when polling works.",
    )


class ScaleSetStatus(KubeModel):
    """What the scale-set listener (the leader's, ``runnerpool.scaleset.listener``) last
    learnt; only it writes this."""

    id: int | None = Field(default=None, ge=1, description="The scale set's id on GitHub.")
    runner_group_id: int | None = Field(default=None, ge=0, description="Its runner group's id.")
    last_message_id: int = Field(
        default=0,
        ge=0,
        description="The last message whose effect is recorded here (for reading only: every "
        "message session starts at 0, and a message handled twice counts once).",
    )
    assigned_jobs: int = Field(
        default=0, ge=0, description="Jobs GitHub has assigned to the scale set and not finished."
    )
    running_jobs: int = Field(default=0, ge=0, description="Of those, jobs a runner is running.")
    busy_runners: Annotated[list[str], ListType("set"), Field(max_length=MAX_REPLICAS)] = Field(
        default_factory=list, description="Runners with a job started (JobStarted, not yet completed)."
    )
    dropped_labels: Annotated[list[RunnerLabel], ListType("set"), Field(max_length=32)] = Field(
        default_factory=list,
        description="Labels of spec.labels GitHub did not keep on the scale set (GitHub "
        "Enterprise Server before 3.18, or without custom scale-set labels enabled): jobs that ask "
        "for them are never assigned to it.",
    )
    problem: Problem | None = Field(
        default=None, description="Why the listener is stuck, while it is; unset when all is well."
    )


class RunnerPoolStatus(KubeModel):
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the operator last acted on."
    )
    replicas: int = Field(default=0, ge=0, description="Runner pods that exist (for the scale subresource).")
    desired_replicas: int | None = Field(
        default=None,
        ge=0,
        description="Runner pods the operator aims for: spec.replicas, or the autoscaling decision.",
    )
    ready_replicas: int = Field(default=0, ge=0, description="Runner pods that are ready.")
    updated_replicas: int | None = Field(
        default=None, ge=0, description="Runner pods that run the pool's current pod template."
    )
    selector: str | None = Field(
        default=None, description="Label selector of the runner pods (for the scale subresource)."
    )
    token_expires_at: Timestamp | None = Field(
        default=None, description="When the registration token in the pool's Secret expires."
    )
    runners: RunnerCounts | None = Field(
        default=None, description="Runners GitHub lists for this pool, by state."
    )
    scale_set: ScaleSetStatus | None = Field(
        default=None, description="A scale-set pool's scale set and session, from its listener."
    )
    demand: Demand | None = Field(
        default=None,
        description="Jobs waiting for or running on this pool (autoscaling pools only). Written "
        "by whichever operator replica received the webhook delivery or polled GitHub.",
    )
    conditions: Annotated[list[Condition], ListType("map", ("type",))] = Field(
        default_factory=list, description="Latest observations of the pool's state."
    )


class RunnerPool(KubeModel):
    """A whole RunnerPool object as the API server returns it.

    ``metadata`` stays a dict: the API server owns its schema, and the operator
    needs to echo fields such as resourceVersion back unchanged.
    """

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"size(self.metadata.name) <= {MAX_POOL_NAME_LENGTH}",
            message=f"metadata.name may have at most {MAX_POOL_NAME_LENGTH} characters: it becomes "
            "part of pod names, and pod hostnames (the runner names) are cut at 63",
            check=lambda p: len(p.name) <= MAX_POOL_NAME_LENGTH,
        ),
    )

    api_version: str = Field(default=API_VERSION, description="API version of this object.")
    kind: str = Field(default=KIND, description="Kind of this object: RunnerPool.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: RunnerPoolSpec = Field(description="Desired state of the pool.")
    status: RunnerPoolStatus = Field(
        default_factory=RunnerPoolStatus, description="Observed state of the pool, written by the operator."
    )

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def generation(self) -> int:
        return int(self.metadata.get("generation") or 0)

    @property
    def deleting(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def key(self) -> str:
        return pool_key(self.namespace, self.name)

    @property
    def scope(self) -> Scope:
        """Where the pool's runners register (validated again: an older stored object may be loose)."""
        spec = self.spec
        return Scope(organization=spec.organization, repository=spec.repository, enterprise=spec.enterprise)

    @property
    def finalizers(self) -> list[str]:
        return [str(item) for item in self.metadata.get("finalizers") or []]
