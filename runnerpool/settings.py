"""Every operator setting, grouped, documented and defaulted in one place.

The command line is derived from these dataclasses (``runnerpool.cli``): each field that has
a flag carries its flag name, help text and parser in its metadata, so a flag's default *is*
the field's default. Components are handed their group (``TokenSettings`` for the token
updater, ``RunnerSettings`` for the runner managers, ...), never loose values with defaults
of their own.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from runnerpool.api import DEFAULT_RUNNER_IMAGE, RunnerPool
from runnerpool.domain import DEFAULT_API_URL, PoolRef, resolve_api_url
from runnerpool.naming import NAMESPACE_CLUSTER_ROLE
from runnerpool.tenants import (
    ALLOW_FLAG,
    GITHUB_HOST_FLAG,
    AllowList,
    AllowRule,
    GitHubHosts,
    parse_allow_rule,
    parse_github_host,
)

__all__ = [
    "ALL",
    "COMPONENTS",
    "OPERATOR",
    "WEBHOOK_RECEIVER",
    "ApiServerSettings",
    "DeletionSettings",
    "DemandSettings",
    "GitHubSettings",
    "LeaderElectionSettings",
    "LogSettings",
    "ProbeSettings",
    "QueueSettings",
    "RunnerSettings",
    "Settings",
    "TenantSettings",
    "TokenSettings",
]


#: What one process runs (``--component``): the operator (reconciles; holds the operator's
#: permissions; takes no inbound traffic but probes and metrics), the webhook receiver (faces
#: the internet; may only read pools, write their ``status.demand`` and read the mirrored pool
#: webhook secrets: ``runnerpool.demand.secret_mirror``), or both in one process (``make demo``
#: and other single-process dev setups only: that process faces the internet *and* holds the
#: operator's permissions).
OPERATOR, WEBHOOK_RECEIVER, ALL = "operator", "webhook-receiver", "all"
COMPONENTS = (OPERATOR, WEBHOOK_RECEIVER, ALL)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


#: The longest ``--token-refresh-margin``: a token lasts an hour, and with a margin near it a
#: fresh token is due again at once, so each pool fetched one every minute (its shortest gap).
MAX_TOKEN_REFRESH_MARGIN = 50.0


def token_refresh_margin(text: str) -> float:
    value = positive_float(text)
    if value > MAX_TOKEN_REFRESH_MARGIN:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_TOKEN_REFRESH_MARGIN:g} minutes (a registration token lasts 60: "
            f"a longer margin refreshes it every minute), got {text}"
        )
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number (0 turns it off), got {text}")
    return value


def namespaced_name(text: str) -> str:
    """``NAMESPACE/NAME``, or empty."""
    namespace, sep, name = text.partition("/")
    if text and not (sep and namespace and name and "/" not in name):
        raise argparse.ArgumentTypeError(f"must be NAMESPACE/NAME (or empty), got {text}")
    return text


def github_host(text: str) -> str:
    try:
        return parse_github_host(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def allow_rule(text: str) -> AllowRule:
    try:
        return parse_allow_rule(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def flag(
    name: str,
    help: str,
    *,
    parse: Callable[[str], Any] = str,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    switch: bool = False,
    repeat: bool = False,
) -> dict[str, Any]:
    """Field metadata the CLI turns into one ``add_argument`` call."""
    return {
        "flag": name,
        "help": help,
        "parse": parse,
        "metavar": metavar,
        "choices": choices,
        "switch": switch,
        "repeat": repeat,
    }


def setting(default: Any, name: str, help: str, **flag_options: Any) -> Any:
    """A settings field with its default and its flag (see ``flag``)."""
    return field(default=default, metadata=flag(name, help, **flag_options))


@dataclass(frozen=True)
class QueueSettings:
    """Work queue and reconcile workers."""

    workers: int = setting(
        4,
        "--workers",
        "concurrent reconciles (they mostly wait on the API server; "
        "the queue never runs one pool twice at once)",
        parse=positive_int,
    )
    #: A burst's pod events cost a few passes, not one each (runnerpool.runtime.workqueue).
    pass_spacing: float = setting(
        0.25,
        "--pass-spacing",
        "the shortest time between two passes of one pool: the events that arrive in between "
        "(a burst's pods starting) fold into one pass",
        parse=non_negative_float,
        metavar="SECONDS",
    )
    #: N starting pods cost a few status writes, not N.
    status_coalesce: float = setting(
        1.0,
        "--status-coalesce",
        "a status change that no condition reason reflects (pod counts while pods start) waits "
        "this long after the pool's last status write",
        parse=positive_float,
        metavar="SECONDS",
    )


@dataclass(frozen=True)
class TokenSettings:
    """Registration tokens (the secret updater)."""

    wait: float = setting(
        10.0,
        "--token-wait",
        "requeue delay while a pool waits for its first registration token",
        parse=positive_float,
        metavar="SECONDS",
    )
    #: A token lasts one hour. A pod that reads the Secret just before a refresh must still
    #: have time to pull its image, start and run ``config.sh`` with it; on a busy cluster that
    #: can take many minutes. meows refreshes 5 minutes ahead; ARC moved to 30 minutes after
    #: runners failed to register with tokens that expired on the way
    #: (actions-runner-controller #1295). 30 minutes leaves every pod at least half the
    #: token's life and still means only two GitHub calls per pool per hour.
    refresh_margin_minutes: float = setting(
        30.0,
        "--token-refresh-margin",
        "refresh a registration token this long before it expires (at most 50 of its 60 minutes)",
        parse=token_refresh_margin,
        metavar="MINUTES",
    )
    threads: int = setting(
        4,
        "--token-threads",
        "threads running token jobs (each mostly waits on one GitHub request)",
        parse=positive_int,
    )

    @property
    def refresh_margin(self) -> timedelta:
        return timedelta(minutes=self.refresh_margin_minutes)


@dataclass(frozen=True)
class RunnerSettings:
    """Runner pods and the per-scope runner managers."""

    image: str = setting(DEFAULT_RUNNER_IMAGE, "--runner-image", "default runner image")
    #: meows' runner manager period.
    sync_interval: float = setting(
        60.0,
        "--runner-sync-interval",
        "how often each repository or organization's runners are listed (once per scope, "
        "shared by its pools; stretched automatically when the GitHub budget runs low)",
        parse=positive_float,
        metavar="SECONDS",
    )
    #: Hundreds of repository-scoped pools need neither hundreds of threads nor hundreds of
    #: concurrent requests (GitHub's secondary limits start at 100).
    threads: int = setting(4, "--runner-threads", "threads running the runner managers", parse=positive_int)
    registration_timeout: float = setting(
        900.0,
        "--registration-timeout",
        "a pod whose runner is not listed this long after its creation (and whose container is "
        "not running), or whose runner is listed offline while its container cannot start (a JIT "
        "pod's image pull failing), is replaced: long enough for a slow pull of the runner image",
        parse=positive_float,
        metavar="SECONDS",
    )
    kick_gap: float = setting(
        2.0,
        "--runner-kick-gap",
        "a pool with pods to retire brings its scope's next runner listing forward, at most this "
        "often (an unchanged listing is a free 304)",
        parse=positive_float,
        metavar="SECONDS",
    )


@dataclass(frozen=True)
class DeletionSettings:
    """How often a pool being deleted looks again at what it waits for."""

    busy_runner_wait: float = setting(
        30.0,
        "--busy-runner-wait",
        "requeue delay while a deleted pool waits for its busy runners to finish their jobs",
        parse=positive_float,
        metavar="SECONDS",
    )
    pods_gone_wait: float = setting(
        5.0,
        "--pods-gone-wait",
        "requeue delay while a deleted pool waits for its runner pods to go",
        parse=positive_float,
        metavar="SECONDS",
    )
    credential_lost_wait: float = setting(
        900.0,
        "--credential-lost-wait",
        "how long a deleted pool whose credential Secret is missing or unusable waits for it to come "
        "back before it is let go without deregistering its runners (they may stay on GitHub; its "
        "Events name them)",
        parse=positive_float,
        metavar="SECONDS",
    )


@dataclass(frozen=True)
class LeaderElectionSettings:
    """Lease leader election (run 2+ replicas); the timings are client-go's defaults."""

    enabled: bool = setting(
        False, "--leader-elect", "elect a leader over a Lease (run 2+ replicas)", switch=True
    )
    namespace: str = setting("runnerpool-system", "--leader-election-namespace", "namespace of the Lease")
    lease_name: str = setting("runnerpool-operator", "--leader-election-id", "name of the Lease")
    #: Empty: the host name plus a random suffix, so two processes on one host differ.
    identity: str = setting("", "--leader-election-identity", "holder identity written into the Lease")
    lease_duration: int = field(  # the Lease stores whole seconds
        default=15,
        metadata=flag(
            "--lease-duration",
            "how long a Lease is valid without renewal",
            parse=positive_int,
            metavar="SECONDS",
        ),
    )
    renew_deadline: float = setting(
        10.0,
        "--renew-deadline",
        "how long the leader keeps trying to renew before it gives up",
        parse=positive_float,
        metavar="SECONDS",
    )
    retry_period: float = setting(
        2.0,
        "--retry-period",
        "time between two tries to acquire or renew",
        parse=positive_float,
        metavar="SECONDS",
    )


@dataclass(frozen=True)
class GitHubSettings:
    """Which GitHub the operator talks to by default."""

    api_url: str = setting(
        DEFAULT_API_URL,
        "--github-api-url",
        "GitHub API base URL; for GitHub Enterprise Server e.g. https://ghe.example.com/api/v3 "
        "(a pool's spec.githubApiUrl overrides it)",
    )
    #: A pool names its GitHub; the operator calls only these hosts (``runnerpool.tenants``).
    api_hosts: tuple[str, ...] | None = setting(
        None,
        GITHUB_HOST_FLAG,
        "HOST[:PORT] of a GitHub API a pool's spec.githubApiUrl may name, e.g. ghe.example.com "
        "(repeatable); a pool naming another host gets no GitHub call. --github-api-url's host is "
        "always allowed. Default: api.github.com",
        parse=github_host,
        metavar="HOST",
        repeat=True,
    )
    #: A server that sends a byte a second never trips a per-read timeout: this one is whole.
    timeout: int = setting(
        15,
        "--github-timeout",
        "each GitHub call's whole deadline: connect, every read and the quick retries; a host "
        "that misses it is then probed only every 30 s until it answers in time",
        parse=positive_int,
        metavar="SECONDS",
    )
    max_response_bytes: int = setting(
        4 * 1024 * 1024,
        "--github-max-response-bytes",
        "the largest GitHub answer read (GitHub's largest pages the operator asks for are about "
        "1 MiB); a larger one is refused unread",
        parse=positive_int,
        metavar="BYTES",
    )

    def __post_init__(self) -> None:
        if self.api_hosts is not None:  # the command line gives a list
            object.__setattr__(self, "api_hosts", tuple(self.api_hosts))

    @property
    def hosts(self) -> GitHubHosts:
        """The GitHub API hosts pools may name (``--github-api-host`` and ``--github-api-url``'s)."""
        return GitHubHosts.of(self.api_hosts, self.api_url)

    def api_url_of(self, pool: RunnerPool) -> str:
        """The API base ``pool`` talks to: its ``spec.githubApiUrl``, else ``--github-api-url``.

        The one place a pool's URL is resolved; everything else takes the answer (a
        ``PoolRef.api_url``, or this method handed in as a callable).
        """
        return resolve_api_url(pool.spec.github_api_url, self.api_url)

    def pool_ref(self, pool: RunnerPool, credentials_version: str) -> PoolRef:
        """What the background jobs know of ``pool``, its API URL resolved (``api_url_of``)."""
        return PoolRef(
            namespace=pool.namespace,
            name=pool.name,
            scope=pool.scope,
            credential_secret_name=pool.spec.credential_secret_name,
            api_url=self.api_url_of(pool),
            credentials_version=credentials_version,
            connection=pool.spec.connection,
        )


@dataclass(frozen=True)
class TenantSettings:
    """Which enterprises, organizations and repositories each namespace's pools may name."""

    allow: tuple[AllowRule, ...] | None = setting(
        None,
        ALLOW_FLAG,
        "NAMESPACE_GLOB=KIND:GLOB[,KIND:GLOB...] with KIND enterprise, org (also its repositories) "
        "or repo (OWNER/NAME), e.g. 'team-*=org:acme,repo:labs/tools' (repeatable); a pool that no "
        "rule for its namespace allows gets no runner, no demand and costs no GitHub call. Default: "
        "no rule, every pool may name anything; safe with several tenants, since demand is counted "
        "per namespace from each pool's own credential and webhook secret (docs/security.md)",
        parse=allow_rule,
        metavar="RULE",
        repeat=True,
    )

    def __post_init__(self) -> None:
        if self.allow is not None:  # the command line gives a list
            object.__setattr__(self, "allow", tuple(self.allow))

    @property
    def allow_list(self) -> AllowList:
        return AllowList.of(self.allow)

    def allows_pool(self, pool: RunnerPool) -> bool:
        """Whether the rules let ``pool`` register at its scope: every demand path (the webhook
        recorder, the poller) and the reconciler's scope gate ask the same question."""
        return self.allow_list.allows(pool.namespace, pool.scope)


@dataclass(frozen=True)
class ProbeSettings:
    """Prometheus metrics and the health probes."""

    metrics_port: int = setting(
        8080, "--metrics-port", "Prometheus /metrics port; 0 turns it off", parse=port
    )
    metrics_bind_address: str = setting(
        "0.0.0.0", "--metrics-bind-address", "address the /metrics endpoint listens on", metavar="ADDRESS"
    )
    #: As controller-runtime's metrics filters: a scrape needs a token that may GET /metrics.
    metrics_secure: bool = setting(
        False,
        "--metrics-secure",
        "serve /metrics over HTTPS and only to bearer tokens whose user may get the /metrics "
        "URL (TokenReview + SubjectAccessReview; RBAC: runnerpool-operator-metrics-reader)",
        switch=True,
    )
    metrics_cert_dir: str = setting(
        "",
        "--metrics-cert-dir",
        "folder with tls.crt and tls.key for --metrics-secure (re-read when they change); "
        "empty: a self-signed certificate made at start",
        metavar="PATH",
    )
    health_port: int = setting(8081, "--health-port", "/healthz and /readyz port; 0 turns it off", parse=port)


@dataclass(frozen=True)
class DemandSettings:
    """Pools that follow demand: the webhook receiver (--component webhook-receiver) and the
    poller (operator leader)."""

    webhook_port: int = setting(
        8082,
        "--webhook-port",
        "port of the GitHub workflow_job webhook receiver (POST /webhook; --component "
        "webhook-receiver or all); 0 turns it off",
        parse=port,
    )
    #: The receiver may not read tenants' Secrets: the operator copies the pools' own webhook
    #: secrets into this one Secret, which the receiver alone reads by name.
    webhook_secret_mirror: str = setting(
        "runnerpool-system/runnerpool-operator-webhook-pool-secrets",
        "--webhook-secret-mirror",
        "NAMESPACE/NAME of the Secret into which the operator copies the pools' own webhook secrets "
        "(spec.autoscaling.webhookSecretRef) and from which a separate webhook receiver reads them; "
        "empty: not copied (a separate receiver then moves only pools trusting the cluster-wide secret)",
        parse=namespaced_name,
        metavar="NAMESPACE/NAME",
    )
    webhook_secret_file: str = setting(
        "",
        "--webhook-secret-file",
        "file holding the webhook secret (one per line; two during a rotation), re-read when it "
        "changes; without it every delivery is refused and polling alone follows demand",
        metavar="PATH",
    )
    #: The receiver faces the internet (an Ingress): what one client may hold of it.
    webhook_read_timeout: int = setting(
        10,
        "--webhook-read-timeout",
        "a webhook connection is closed when its request is not complete this many seconds after "
        "its first byte, or when it sends nothing for as long",
        parse=positive_int,
        metavar="SECONDS",
    )
    webhook_max_connections: int = setting(
        256,
        "--webhook-max-connections",
        "open webhook connections at most (each may buffer up to 64 KiB of body and 16 KiB of headers); "
        "more wait to be accepted",
        parse=positive_int,
    )
    webhook_threads: int = setting(
        8,
        "--webhook-threads",
        "threads that verify and record webhook deliveries (reading requests takes one more, "
        "however many connections are open)",
        parse=positive_int,
    )
    mirror_interval: float = setting(
        10.0,
        "--webhook-secret-mirror-interval",
        "how often the operator's leader brings the --webhook-secret-mirror Secret up to date (a "
        "pool's secret is re-read at most once a minute; a new one is copied at the next pass)",
        parse=positive_float,
        metavar="SECONDS",
    )
    #: Without webhooks this is the pickup delay's floor; with them, only how soon a lost
    #: delivery is repaired. An idle repository costs nothing per poll (two free 304s).
    poll_interval: float = setting(
        30.0,
        "--demand-poll-interval",
        "how often the queued and running jobs of autoscaling pools' repositories are polled "
        "(stretched automatically when the GitHub budget runs low)",
        parse=positive_float,
        metavar="SECONDS",
    )

    #: Repositories and workflows are the users': bounded (runnerpool.demand.job_labels).
    job_metrics_labels: str = setting(
        "repository,workflow",
        "--job-metrics-labels",
        "labels of runnerpool_job_queue_seconds and runnerpool_job_run_seconds besides namespace "
        "and pool: repository and workflow, repository only, or none (docs/operating.md: cardinality)",
        choices=("repository,workflow", "repository", "none"),
    )
    job_metrics_max_label_sets: int = setting(
        50,
        "--job-metrics-max-label-sets",
        "distinct repository/workflow label sets per pool in the job metrics; past it a new "
        'workflow is counted as workflow="other" (a new repository as repository="other")',
        parse=positive_int,
    )

    @property
    def mirror(self) -> tuple[str, str] | None:
        """``(namespace, name)`` of ``webhook_secret_mirror``; ``None`` when it is empty."""
        if not self.webhook_secret_mirror:
            return None
        namespace, _, name = self.webhook_secret_mirror.partition("/")
        return namespace, name


@dataclass(frozen=True)
class ApiServerSettings:
    """Calls to the Kubernetes API server."""

    #: A call that hangs holds a worker for ever; watches keep their own. Per attempt: the
    #: kubernetes client tries a failed call up to four times, so a dead server costs 4x this.
    request_timeout: float = setting(
        15.0,
        "--api-timeout",
        "each Kubernetes API call's timeout, per attempt, to connect and between two reads "
        "(watches excepted: the server ends them)",
        parse=positive_float,
        metavar="SECONDS",
    )
    #: Enough to keep a 2-core API server busy (bench/README.md: 1 pool x 500 replicas, 16 in
    #: flight left it waiting on its own writes); the ReplicaSet controller sends up to 256. The
    #: connection pool grows by as many (runnerpool.cli), the threads start with the first burst.
    pod_creates: int = setting(
        64,
        "--pod-create-concurrency",
        "pod creates in flight at once, all pools together: a pool's missing pods are created "
        "in batches of 1, 2, 4, ... up to this, stopping at the first batch with a refusal",
        parse=positive_int,
    )


@dataclass(frozen=True)
class LogSettings:
    """Log output."""

    format: str = setting(
        "text", "--log-format", "text for people, json for log pipelines", choices=("text", "json")
    )
    level: str = setting(
        "INFO",
        "--log-level",
        "lowest level logged (any case: debug is DEBUG)",
        parse=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    )


@dataclass(frozen=True)
class Settings:
    """The whole operator's settings; every field but ``component``, ``namespaces``,
    ``namespaced`` and ``namespace_role`` is a group."""

    component: str = setting(
        OPERATOR,
        "--component",
        "what this process runs: the operator (no webhook port), the webhook-receiver (only "
        "reads pools and writes their demand; scale it by replicas), or all in one process "
        "(single-process dev setups such as make demo)",
        choices=COMPONENTS,
    )
    namespaces: tuple[str, ...] | None = setting(
        None,
        "--namespace",
        "watch only this namespace (repeatable); default: all namespaces",
        metavar="NS",
        repeat=True,
    )
    #: Bindings in the watched namespaces suffice (deploy/overlays/namespaced): nothing is read
    #: or watched cluster-wide, not even the watched Namespace objects.
    namespaced: bool = setting(
        False,
        "--namespaced",
        "namespace-scoped mode: needs permissions in the --namespace namespaces only (RoleBindings "
        "there, nothing bound cluster-wide); "
        "the operator then does not watch the Namespace objects themselves",
        switch=True,
    )
    #: The chart names it after its release: the NamespaceNotEnabled line must name that one.
    namespace_role: str = setting(
        NAMESPACE_CLUSTER_ROLE,
        "--namespace-role",
        "the ClusterRole a RoleBinding in a runner namespace enables the operator with, as the "
        "line in a NamespaceNotEnabled condition names it (the Helm chart's: <release>-namespace, "
        "with its watchNamespaces <release>-namespaced)",
        metavar="NAME",
    )
    queue: QueueSettings = QueueSettings()
    tokens: TokenSettings = TokenSettings()
    runners: RunnerSettings = RunnerSettings()
    deletion: DeletionSettings = DeletionSettings()
    leader_election: LeaderElectionSettings = LeaderElectionSettings()
    github: GitHubSettings = GitHubSettings()
    tenants: TenantSettings = TenantSettings()
    probes: ProbeSettings = ProbeSettings()
    demand: DemandSettings = DemandSettings()
    logs: LogSettings = LogSettings()
    api_server: ApiServerSettings = ApiServerSettings()
