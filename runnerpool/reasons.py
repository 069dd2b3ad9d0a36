"""The operator's one vocabulary of condition types and reasons (conditions and Events alike).

Every reason a user can meet in ``kubectl describe runnerpool`` (a condition's ``reason``, an
Event's reason, a GitHub or credential failure's classification) is a member of :class:`Reason`,
and every condition type a member of :class:`ConditionType`. Code compares and sets them by
member, never by a string typed again elsewhere (the kubectl plugin included), so a renamed
reason is renamed everywhere or the type checker says where not. Both are ``StrEnum``: a member
*is* its string, so what is written to the API server and compared with what is read back from
it is the plain string users see. ``docs/troubleshooting.md`` explains each member
(``tests/test_troubleshooting_doc.py`` fails on one it does not).

This module is at the bottom of the layers: the API models, the GitHub client, the secret
updater and the plugin all import it, and it imports nothing of the operator.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ConditionType", "Reason"]


class ConditionType(StrEnum):
    """The conditions a RunnerPool's status carries."""

    READY = "Ready"
    TOKEN_READY = "TokenReady"
    #: Pools that follow demand: the scaling decision and why (``runnerpool.autoscaling``).
    SCALING = "Scaling"
    #: Pools that follow demand: whether any source of demand reaches them (webhook or polling).
    DEMAND_VISIBLE = "DemandVisible"
    #: Pools with their own webhook secret (``spec.autoscaling.webhookSecretRef``): can it be read.
    WEBHOOK_SECRET_READY = "WebhookSecretReady"
    #: Whether the platform team enabled the operator in the pool's namespace (a RoleBinding to
    #: runnerpool-operator-namespace): it writes nowhere else (``runnerpool.namespace_access``).
    NAMESPACE_ENABLED = "NamespaceEnabled"
    #: With --allow rules: whether the pool's namespace may register runners at its scope.
    SCOPE_ALLOWED = "ScopeAllowed"
    #: Pools that name spec.runnerGroup: whether the group exists and admits what the pool serves.
    RUNNER_GROUP_READY = "RunnerGroupReady"
    #: A deleted pool: whether its runners are off GitHub yet (the finalizer waits for True).
    RUNNERS_DEREGISTERED = "RunnersDeregistered"


class Reason(StrEnum):
    """Why a condition is what it is, or what an Event tells."""

    # --- Ready: the way up, and the pool's runners
    WAITING_FOR_TOKEN = "WaitingForToken"
    TOKEN_NOT_READY = "TokenNotReady"
    RUNNERS_STARTING = "RunnersStarting"
    RUNNERS_READY = "RunnersReady"
    ROLLING_OUT = "RollingOut"
    SCALING_DOWN = "ScalingDown"
    POD_CREATE_FAILED = "PodCreateFailed"
    #: The API server refuses the pool's pod as written (an unknown or invalid field of
    #: ``spec.template``): the current pods stay, no rollout starts.
    TEMPLATE_INVALID = "TemplateInvalid"
    RUNNER_PODS_FAILING = "RunnerPodsFailing"
    #: GitHub refuses the pool's runners as outdated (their termination message says so:
    #: ``runnerpool.pods.outdated``): the pool backs off its pods until the image is newer.
    RUNNER_VERSION_OUTDATED = "RunnerVersionOutdated"
    #: Pods the scheduler could not place for a minute (no node fits them): a stuck-pod reason of
    #: ``RunnerPodsFailing`` (``runnerpool.pods.failures``), not a Ready reason of its own.
    UNSCHEDULABLE = "Unschedulable"
    #: Events of pods that ended badly (``runnerpool.pods.endings``): a container killed for
    #: passing its memory limit, and a busy pod taken away (evicted, preempted, ...).
    RUNNER_OOM_KILLED = "RunnerOOMKilled"
    RUNNER_POD_DISRUPTED = "RunnerPodDisrupted"
    #: A same-named object the pool would make exists and is not the pool's: left alone.
    CHILD_NOT_OWNED = "ChildNotOwned"
    #: The cluster refused an object the pool needs before any pod (its token Secret, its runner
    #: ServiceAccount or RoleBinding): a quota, an admission policy. Also the Event's reason when
    #: it refuses a namespace's disruption budget (the pods are made all the same).
    CHILD_REFUSED = "ChildRefused"
    # --- TokenReady
    TOKEN_ISSUED = "TokenIssued"
    JIT_CONFIGS = "JitConfigs"
    REFRESH_FAILING = "RefreshFailing"
    # --- Scaling (the decision of ``runnerpool.autoscaling``)
    FIXED = "Fixed"
    FOLLOWING_DEMAND = "FollowingDemand"
    WAITING_TO_SCALE_DOWN = "WaitingToScaleDown"
    # --- DemandVisible
    WEBHOOK_DELIVERING = "WebhookDelivering"
    REPOSITORY_POLLED = "RepositoryPolled"
    REPOSITORIES_POLLED = "RepositoriesPolled"
    NO_DEMAND_SOURCE = "NoDemandSource"
    #: GitHub refuses the poll of the pool's jobs for good (``status.demand.pollProblem``: a
    #: credential without Actions read access, a repository it cannot see) and no webhook
    #: delivery has reached the pool.
    POLL_REFUSED = "PollRefused"
    #: A scale set's jobs come from its message session (``runnerpool.scaleset``).
    SCALE_SET_LISTENING = "ScaleSetListening"
    #: Listening, but GitHub did not keep some of ``spec.labels`` on the scale set (a GHES
    #: without custom scale-set labels): jobs that ask for them never come.
    SCALE_SET_LABELS_DROPPED = "ScaleSetLabelsDropped"
    #: The leader's listener has not yet created or adopted the pool's scale set.
    SCALE_SET_PENDING = "ScaleSetPending"
    #: The scale set id the pool's status holds is not the pool's scale set on GitHub (its
    #: name in its runner group): no JIT config is made from it (``runnerpool.scale_set_pools``).
    SCALE_SET_NOT_THE_POOLS = "ScaleSetNotThePools"
    #: A deleted pool's scale set listener has not ended yet (a call to GitHub in flight that
    #: could make the scale set again): its scale set is deleted, and the pool let go, once it has.
    SCALE_SET_LISTENER_STOPPING = "ScaleSetListenerStopping"
    #: Another pool being deleted names the same scale set and goes first (its runners in the
    #: scale set may still run jobs): this pool deletes the scale set once that one is gone.
    SCALE_SET_STILL_USED = "ScaleSetStillUsed"
    # --- WebhookSecretReady
    SECRET_FOUND = "SecretFound"
    SECRET_NOT_USABLE = "SecretNotUsable"
    #: The secret is usable, but the copy a separate webhook receiver reads (one Secret, under
    #: 1 MiB, shared between namespaces: ``demand.secret_mirror``) has no room for it.
    SECRET_NOT_MIRRORED = "SecretNotMirrored"
    #: The pools of the namespace name more keys of the Secret than a delivery to its URL is
    #: verified with (``demand.verification.MAX_KEYS_PER_ROUTE``), and this pool's is not among them.
    TOO_MANY_SECRET_KEYS = "TooManySecretKeys"
    # --- NamespaceEnabled
    NAMESPACE_ENABLED = "NamespaceEnabled"
    NAMESPACE_NOT_ENABLED = "NamespaceNotEnabled"
    # --- ScopeAllowed
    SCOPE_ALLOWED = "ScopeAllowed"
    SCOPE_NOT_ALLOWED = "ScopeNotAllowed"
    # --- RunnerGroupReady
    RUNNER_GROUP_FOUND = "RunnerGroupFound"
    RUNNER_GROUP_NOT_FOUND = "RunnerGroupNotFound"
    REPOSITORY_NOT_ALLOWED = "RepositoryNotAllowed"
    # --- RunnersDeregistered
    DEREGISTERED = "Deregistered"
    RUNNERS_BUSY = "RunnersBusy"
    #: The cluster refused a write the deletion needs (an admission policy, a quota).
    DELETION_REFUSED = "DeletionRefused"
    #: True, and its Event: the runners are gone, but pods are still Terminating past their
    #: deletion time (their node lost); the pool goes without them an hour later, once GitHub
    #: confirms it has none of their runners (``runnerpool.runners.lifecycle.given_up``).
    RUNNER_PODS_STUCK_TERMINATING = "RunnerPodsStuckTerminating"
    # --- failures of credentials and of GitHub (``runnerpool.github.errors``, the secret updater)
    CREDENTIAL_SECRET_MISSING = "CredentialSecretMissing"
    CREDENTIAL_SECRET_MALFORMED = "CredentialSecretMalformed"
    BAD_CREDENTIALS = "BadCredentials"
    FORBIDDEN = "Forbidden"
    APP_INSTALLATION_TOKEN_FAILED = "AppInstallationTokenFailed"
    ENTERPRISE_NEEDS_PERSONAL_ACCESS_TOKEN = "EnterpriseNeedsPersonalAccessToken"
    SCOPE_NOT_FOUND = "ScopeNotFound"
    RATE_LIMITED = "RateLimited"
    GITHUB_UNAVAILABLE = "GitHubUnavailable"
    GITHUB_REDIRECTED = "GitHubRedirected"
    MALFORMED_RESPONSE = "MalformedResponse"
    GITHUB_REQUEST_FAILED = "GitHubRequestFailed"
    JIT_RUNNER_NAME_IN_USE = "JitRunnerNameInUse"
    TOKEN_SECRET_PATCH_FAILED = "TokenSecretPatchFailed"
    TOKEN_REFRESH_ERROR = "TokenRefreshError"
    # --- Events only
    INVALID_SPEC = "InvalidSpec"
    CREATED_PODS = "CreatedPods"
    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    UPDATED_DISRUPTION_BUDGET = "UpdatedDisruptionBudget"
    WAITING_FOR_BUSY_RUNNERS = "WaitingForBusyRunners"
    DEREGISTERED_RUNNERS = "DeregisteredRunners"
    DEREGISTRATION_FAILED = "DeregistrationFailed"
    FAILED_CREATE = "FailedCreate"
    #: The cluster refused the runner manager's busy mark (or unmark) of a runner pod.
    BUSY_MARK_REFUSED = "BusyMarkRefused"
    # --- bounded GitHub calls (``runnerpool.github.transport``, ``runnerpool.tenants.GitHubHosts``)
    GITHUB_DEADLINE_EXCEEDED = "GitHubDeadlineExceeded"
    GITHUB_RESPONSE_TOO_LARGE = "GitHubResponseTooLarge"
    GITHUB_HOST_SLOW = "GitHubHostSlow"
    #: The server's certificate chain ends at a CA the pool does not trust (spec.githubServerTLS).
    GITHUB_CERTIFICATE_UNTRUSTED = "GitHubCertificateUntrusted"
    #: spec.githubServerTLS or a spec.proxy credential Secret names what is not there.
    GITHUB_CONNECTION_CONFIG_MISSING = "GitHubConnectionConfigMissing"
    GITHUB_HOST_NOT_ALLOWED = "GitHubHostNotAllowed"
    # --- a deleted pool whose credential is unusable (``runnerpool.deregistration``)
    #: RunnersDeregistered False, and its Event: the runners cannot be deregistered; the pool is
    #: let go at the time the message gives unless the credential comes back.
    CREDENTIAL_LOST = "CredentialLost"
    #: Event: the wait ended, the pool was let go without deregistering; the message names the
    #: runners that may be left on GitHub and how to remove them.
    RUNNERS_LEFT_ON_GITHUB = "RunnersLeftOnGitHub"
    # --- scale-set pools: the listener's problem (``status.scaleSet.problem``,
    # ``runnerpool.scaleset.listener``)
    #: Another owner (another operator replica or installation) holds the scale set's message
    #: session; the listener asks again until it is freed.
    SCALE_SET_SESSION_HELD = "ScaleSetSessionHeld"
    #: Another live pool of this operator names the same scale set and has it (it was made
    #: first): this pool's listener makes no call until that pool is being deleted.
    SCALE_SET_HELD_BY_ANOTHER_POOL = "ScaleSetHeldByAnotherPool"
    #: The Actions service or GitHub did not answer usably (5xx, connection errors, timeouts,
    #: rate limits, malformed answers); the listener backs off and tries again.
    SCALE_SET_UNREACHABLE = "ScaleSetUnreachable"
    #: GitHub refused the credentials (401/403) for the registration token or the Actions
    #: service's admin token, or the credential Secret is missing or unusable.
    SCALE_SET_CREDENTIALS_REFUSED = "ScaleSetCredentialsRefused"
