"""``GitHubClient`` over PyGithub: the transport, its ETag page cache and budget accounting.

Callers only ever see ``GitHubError`` subclasses (``runnerpool.github.errors``) whose
``reason`` can go straight into a Kubernetes condition and whose ``retry_after`` tells the
caller's scheduler how long GitHub asked us to wait.

Retries are split on purpose. The transport retries a couple of times, quickly, for the
failures that a second attempt usually fixes (5xx, resets, timeouts). Anything that needs
waiting - rate limits above all - is raised at once so that the per-pool schedulers, which
can wait without holding a worker thread, stay in charge of the backoff.

Every answer also feeds the API budget bookkeeping, because the operator shares one budget
per credential between all the pools that use it: the ``x-ratelimit-*`` headers become
gauges labelled by the credential's identity (never the token) and are kept for the runner
managers' slowdown rule; each answer is counted by templated endpoint and status. Runner
listings are conditional (``If-None-Match`` with the ETag of the page's last answer): an
unchanged page comes back as a 304, which GitHub does not count against the budget.

PyGithub's ``requestJsonAndCheck`` treats a 304 as a success with a ``None`` body, which is
indistinguishable from an empty answer, so every call here goes through the raw
``Requester.requestJson`` (status, headers, body) and this module decides what a status
means.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self, cast

import requests
import urllib3.exceptions
from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import BadAttributeException

from runnerpool.domain import DEFAULT_API_URL, Scope
from runnerpool.github import redact, transport
from runnerpool.github.errors import (
    BadCredentials,
    GitHubError,
    MalformedResponse,
    NotFound,
    NotSent,
    RateLimited,
    Unavailable,
)
from runnerpool.github.jobs import ActiveJobs, InvalidJob, Job, parse_job
from runnerpool.github.metrics import GITHUB_REQUESTS, NO_ANSWER, publish_budget
from runnerpool.github.pages import Page, PageCache
from runnerpool.github.parse import (
    next_link,
    parse_jitconfig,
    parse_member,
    parse_public,
    parse_runner,
    parse_runner_group,
    parse_token,
    structured,
)
from runnerpool.github.rate_gate import RateLimitGate
from runnerpool.github.route import Route
from runnerpool.github.translate import translate_github_exception, untrusted
from runnerpool.github.types import (
    CORE_BUCKET,
    REGISTRATION_BUCKET,
    RUNNERS_PER_PAGE,
    DeleteOutcome,
    JitConfig,
    JitRequest,
    RateLimit,
    RegistrationToken,
    Runner,
    RunnerGroup,
    header,
)
from runnerpool.reasons import Reason

__all__ = ["ENTERPRISE_NEEDS_PAT", "ClientOptions", "PyGithubClient"]

log = logging.getLogger(__name__)

redact.install()
transport.install()

#: A listing (runners, runner groups, a group's members) that has not ended after this many
#: pages (10,000 entries), nor after the pages its ``total_count`` promises (``_page_bound``),
#: is treated as a broken ``Link`` chain rather than followed for ever.
MAX_RUNNER_PAGES = 100
#: Pages read past what a listing's ``total_count`` promises: entries added while it is read.
PAGES_PAST_TOTAL = 2
#: The most pages any listing is followed for, whatever its ``total_count`` says (a million
#: entries; a hostile server's count must not hold a shared thread for ever).
MAX_LISTING_PAGES = 10_000
#: Reads of a runner listing whose pages disagree on ``total_count`` (see ``list_runners``).
RUNNER_LISTING_ATTEMPTS = 2
#: The reason of the refusal to use a GitHub App on an enterprise scope.
ENTERPRISE_NEEDS_PAT = Reason.ENTERPRISE_NEEDS_PERSONAL_ACCESS_TOKEN
#: The run statuses whose runs can hold a queued or running job (``active_jobs``).
ACTIVE_RUN_STATUSES = ("queued", "in_progress", "waiting")
#: GitHub returns at most 1,000 workflow runs for a ``status`` filter: ten pages of 100.
MAX_RUN_PAGES = 10
#: Where ``Auth.AppInstallationAuth`` (PyGithub 2.x) keeps its installation token.
_CACHED_INSTALLATION_TOKEN = "_AppInstallationAuth__installation_authorization"


class _TransientOnlyRetry(GithubRetry):
    """GithubRetry restricted to failures that a quick second attempt can fix.

    PyGithub's retry would otherwise sleep inside the request until a rate limit resets (up to
    an hour) or for a secondary limit's ``Retry-After``, holding a scheduler worker and hiding
    the condition from the operator. 403 and 429 are therefore never retried here, and any
    answer that carries ``Retry-After`` is returned at once so the caller can honour it.
    """

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code in (403, 429) or has_retry_after:
            return False
        return bool(super().is_retry(method, status_code, has_retry_after))

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Self:
        """A certificate no trusted CA signed is not tried again: the next handshake meets the
        same certificate (two more round trips, and two more WARNING lines, for nothing)."""
        if isinstance(error, urllib3.exceptions.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(error):
            raise urllib3.exceptions.MaxRetryError(_pool, url or "", error) from error
        # GithubRetry types its answer as a Retry; it is a copy of this class.
        return cast(Self, super().increment(method, url, response, error, _pool, _stacktrace))


@dataclass(frozen=True)
class ClientOptions:
    """Transport tuning, kept apart from credentials so tests can turn every wait off.

    ``retries`` is small on purpose: the scheduler owns the long backoff. GitHub asks for
    writes to be sent serially; every client does that (one write at a time per credential,
    see ``PyGithubClient._send``). PyGithub's fixed gaps are off by default: a one-second gap
    per write would make the hundredth new pool wait 100 s for its first token, and the few
    writes this operator sends (a token per scope and half hour, a delete per gone runner)
    are nowhere near the bursts the gap protects against. A secondary-limit answer (403/429
    with ``retry-after``) is still honoured by the callers' backoff.

    ``timeout`` is each call's whole deadline (connect, every read, the transport's retries
    and, for a GitHub App, minting its installation token), not a per-read timeout; no answer
    is read past ``max_response_bytes`` (``runnerpool.github.transport``).
    """

    timeout: int = 15
    max_response_bytes: int = transport.DEFAULT_MAX_RESPONSE_BYTES
    retries: int = 2
    backoff_factor: float = 0.5
    seconds_between_requests: float | None = None
    seconds_between_writes: float | None = None
    user_agent: str = "runnerpool-operator"

    def retry(self) -> GithubRetry:
        return _TransientOnlyRetry(
            total=self.retries,
            backoff_factor=self.backoff_factor,
            # Belt and braces: should a rate-limit 403 ever reach GithubRetry's own logic, raise
            # instead of sleeping until the reset.
            max_rate_limit_wait=0,
            # Hand the final 5xx back as a response so we can report its status.
            raise_on_status=False,
        )


@dataclass(frozen=True)
class _Listing:
    """One kind of paged listing: how to name it, count it, and read its items."""

    what: str
    endpoint: str
    key: str
    parse: Callable[[Any], Any]
    #: Where reading stops with what it has: workflow runs (GitHub serves no more than
    #: ``MAX_RUN_PAGES`` for a status filter) and their jobs. ``None``: GitHub serves every
    #: entry, and a listing still going after ``MAX_RUNNER_PAGES`` is a broken ``Link`` chain,
    #: refused rather than cut short.
    last_page: int | None = None


def _merge(into: dict[int, Runner], runners: Iterable[Runner]) -> None:
    """``runners`` into ``into`` by id, each as read last, but busy if any read saw it busy:
    a runner read twice (moved onto a later page, or read again) may have taken a job in
    between, and one reported idle could be picked to retire."""
    for runner in runners:
        before = into.get(runner.id)
        into[runner.id] = (
            dataclasses.replace(runner, busy=True) if before is not None and before.busy else runner
        )


def _page_bound(total: int | None) -> int:
    """The pages a listing whose ``total_count`` is ``total`` may take: a scope of more than
    10,000 runners (several full runner groups) is read to its end, not refused, which would
    leave its pools' finalizers waiting for ever."""
    if total is None:
        return MAX_RUNNER_PAGES
    return min(MAX_LISTING_PAGES, -(-total // RUNNERS_PER_PAGE) + PAGES_PAST_TOTAL)


def _run_id(item: Any, prefix: str) -> int:
    run_id = item.get("id") if isinstance(item, dict) else None
    if not isinstance(run_id, int):
        raise MalformedResponse(f"GET {prefix}: a workflow run without an id")
    return run_id


def _job(item: Any, repository: str, api_url: str, what: str) -> Job:
    try:
        return parse_job(item, repository, api_url)
    except InvalidJob as err:
        raise MalformedResponse(f"{what}: {err}") from None


def _group_scope(scope: Scope) -> None:
    """Runner groups belong to organizations and enterprises; a repository has none."""
    if scope.repository is not None:
        raise ValueError(f"{scope}: a repository has no runner groups")


class PyGithubClient:
    """``GitHubClient`` on top of a ``github.Github`` instance.

    Every call goes through PyGithub's public raw requester (see the module docstring for why
    not ``requestJsonAndCheck``), so pagination, conditional requests and response validation
    are ours: a half-parsed PyGithub object would surface as ``None`` deep in the caller
    instead of as a ``MalformedResponse`` here.

    With GitHub App credentials, the installation token is minted lazily by PyGithub's
    ``AppInstallationAuth`` through a ``GithubIntegration`` built from this ``Github``'s
    requester settings, so it inherits our retry. (A ``GithubIntegration`` constructed on its
    own has no retry at all by default.)

    The ETag cache lives here, per client and therefore per credential, because GitHub's
    answers vary by ``Authorization``: a validator obtained with one credential says nothing
    about what another one may see.
    """

    def __init__(
        self,
        gh: Github,
        *,
        clock: Callable[[], float] = time.time,
        credential: str | None = None,
        options: ClientOptions | None = None,
        route: Route | None = None,
    ) -> None:
        self._gh = gh
        self._route = route or Route()
        self._options = options or ClientOptions()
        self._requester = gh.requester
        self._clock = clock
        self._origin = transport.origin_of(self._requester.base_url)
        self._credential_name = credential
        self._pages = PageCache()
        self._budget_lock = threading.Lock()
        self._rate_limit: RateLimit | None = None
        # GitHub asks for writes to be serial: one at a time for everything on this credential.
        self._writes = threading.Lock()
        self._rate_gate = RateLimitGate(clock)

    @classmethod
    def from_auth(
        cls,
        auth: Auth.Auth,
        base_url: str = DEFAULT_API_URL,
        options: ClientOptions | None = None,
        *,
        clock: Callable[[], float] = time.time,
        credential: str | None = None,
        route: Route | None = None,
    ) -> PyGithubClient:
        """Build the ``Github`` instance with our transport settings."""
        opts = options or ClientOptions()
        gh = Github(
            auth=auth,
            base_url=base_url.rstrip("/"),
            timeout=opts.timeout,
            user_agent=opts.user_agent,
            per_page=RUNNERS_PER_PAGE,
            retry=opts.retry(),
            seconds_between_requests=opts.seconds_between_requests,
            seconds_between_writes=opts.seconds_between_writes,
            lazy=True,
        )
        return cls(gh, clock=clock, credential=credential, options=opts, route=route)

    @property
    def base_url(self) -> str:
        return str(self._requester.base_url)

    @property
    def credential(self) -> str:
        """Whose budget this client spends, fit for a metric label: never the token.

        A GitHub App installation is its own budget at GitHub, so it names itself; a personal
        access token cannot be named without a request, so it carries the name its owner gave
        it (``name_credential``: the operator uses the credential Secret's namespace/name).
        """
        auth = self._requester.auth
        if isinstance(auth, Auth.AppInstallationAuth):
            return f"app:{auth.app_id}/installation:{auth.installation_id}"
        return self._credential_name or "unnamed"

    def name_credential(self, name: str) -> None:
        self._credential_name = name

    @property
    def route(self) -> Route:
        """The CA bundle and proxy this client's calls take (the Actions service calls of a
        scale-set pool take the same: ``runnerpool.scaleset.clients``)."""
        return self._route

    def take_route(self, route: Route) -> None:
        """The pool's CA bundle and proxy, for every call from now on (``runnerpool.github.route``)."""
        self._route = route

    def rate_limit(self) -> RateLimit | None:
        """The budget from the latest answer that carried one; ``None`` before any."""
        with self._budget_lock:
            return self._rate_limit

    def close(self) -> None:
        self._gh.close()

    def __repr__(self) -> str:
        return f"PyGithubClient(base_url={self.base_url!r})"

    # -- the three calls -----------------------------------------------------------------------

    def registration_token(self, scope: Scope) -> RegistrationToken:
        self._refuse_app_for_enterprise(scope)
        path = f"/{scope.path}/actions/runners/registration-token"
        what = f"POST {path}"
        endpoint = f"/{scope.path_template}/actions/runners/registration-token"
        _, _, data = self._call(
            what, functools.partial(self._send, "POST", path, endpoint), bucket=REGISTRATION_BUCKET
        )
        return parse_token(data, what)

    def generate_jitconfig(self, scope: Scope, request: JitRequest) -> JitConfig:
        """One just-in-time runner named ``request.name``: it exists (offline) once this returns.

        A name in use answers 409 (a ``GitHubError`` with ``status`` 409): the caller deletes the
        leftover runner and asks again.
        """
        self._refuse_app_for_enterprise(scope)
        path = f"/{scope.path}/actions/runners/generate-jitconfig"
        what = f"POST {path}"
        endpoint = f"/{scope.path_template}/actions/runners/generate-jitconfig"
        body = {
            "name": request.name,
            "runner_group_id": request.runner_group_id,
            "labels": list(request.labels),
            "work_folder": request.work_folder,
        }
        _, _, data = self._call(
            what, functools.partial(self._send, "POST", path, endpoint, body=body), bucket=REGISTRATION_BUCKET
        )
        return parse_jitconfig(data, what)

    def list_runners(self, scope: Scope) -> list[Runner]:
        """All pages, each revalidated with its ETag; a runner that moved between pages while
        they were read is reported once.

        GitHub pages by number: a runner removed while later pages are still to come (an
        ephemeral runner of any pool of the scope, done with its job) moves the next one onto
        a page already read, and that runner is missed, busy or not. Pages whose
        ``total_count`` differ say so: the listing is read once more (``RUNNER_LISTING_ATTEMPTS``),
        and if the count did not hold still then either, every runner either read saw is
        reported, as the later read saw it, but busy if any read saw it busy (one that left
        meanwhile answers 404 when deleted; a busy one reported idle would be picked to retire).

        Only once more: in a scope whose runners come and go every second the count never holds
        still, and each read costs a request per changed page. A runner both reads missed is no
        pod taken from its job: a running pod no listing shows a runner for is kept until GitHub,
        asked by the pod's name, has none (``runnerpool.runners``).
        """
        self._refuse_app_for_enterprise(scope)
        what = f"GET /{scope.path}/actions/runners"
        endpoint = f"/{scope.path_template}/actions/runners"
        kind = _Listing(what, endpoint, "runners", functools.partial(parse_runner, what=what))
        first = f"/{scope.path}/actions/runners?per_page={RUNNERS_PER_PAGE}"
        seen: dict[int, Runner] = {}
        for _ in range(RUNNER_LISTING_ATTEMPTS):
            found, totals = self._runner_pages(first, kind)
            if len(totals) <= 1:
                return list(found.values())
            _merge(seen, found.values())
            log.info("%s: the runner count changed while its pages were read (%s)", what, sorted(totals))
        return list(seen.values())

    def runners_named(self, scope: Scope, name: str) -> list[Runner]:
        """The scope's runners called ``name`` (GitHub's ``name`` filter on the runner listing:
        one small page, revalidated with its ETag like every listing page, so asking again
        while the answer is unchanged costs a free 304).

        For a runner pod a paged listing did not show: runners that come and go while the pages
        are read can shift a runner onto a page already read while ``total_count`` holds still
        (one left, another registered), and ``list_runners`` cannot tell. Only exact names are
        kept (GitHub compares them case-insensitively).
        """
        self._refuse_app_for_enterprise(scope)
        what = f"GET /{scope.path}/actions/runners?name={name}"
        endpoint = f"/{scope.path_template}/actions/runners"
        kind = _Listing(what, endpoint, "runners", functools.partial(parse_runner, what=what))
        url = f"/{scope.path}/actions/runners?name={urllib.parse.quote(name, safe='')}"
        return [runner for runner in self._listing(url, kind, []) if runner.name.lower() == name.lower()]

    def _runner_pages(self, url: str, kind: _Listing) -> tuple[dict[int, Runner], set[int]]:
        """One pass over a runner listing's pages: the runners by id, and the counts the pages gave."""
        found: dict[int, Runner] = {}
        totals: set[int] = set()
        for page in self._pages_of(url, kind):
            _merge(found, page.items)
            if page.total is not None:
                totals.add(page.total)
        return found, totals

    def active_jobs(self, repository: str) -> ActiveJobs:
        """Queued and running jobs of one repository, every page conditional.

        GitHub lists workflow runs per repository only (there is no organization-wide job
        listing), and jobs per run. The cheapest complete view: runs with ``status=queued``,
        ``status=in_progress`` (a run in progress can still hold queued jobs, e.g. a matrix
        wider than the pool) and ``status=waiting`` (a run one of whose jobs awaits an
        environment's approval is ``waiting``, whatever its other jobs do: their queued jobs
        would be seen nowhere else), then the latest attempt's jobs of each. An idle
        repository costs three 304s, which GitHub does not count. A run whose jobs answer 404
        is skipped: only the runs listing speaks for the repository (a 404 there is raised).
        """
        owner, _, name = repository.partition("/")
        prefix = f"/repos/{urllib.parse.quote(owner)}/{urllib.parse.quote(name)}/actions/runs"
        spent: list[int] = []
        runs_kind = _Listing(
            f"GET {prefix}",
            "/repos/{owner}/{repo}/actions/runs",
            "workflow_runs",
            functools.partial(_run_id, prefix=prefix),
            last_page=MAX_RUN_PAGES,
        )
        runs: dict[int, None] = {}
        for status in ACTIVE_RUN_STATUSES:
            for run_id in self._listing(f"{prefix}?status={status}&per_page=100", runs_kind, spent):
                runs.setdefault(run_id)
        jobs: dict[int, Job] = {}
        for run_id in runs:
            what = f"GET {prefix}/{run_id}/jobs"
            jobs_kind = _Listing(
                what,
                "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs",
                "jobs",
                functools.partial(_job, repository=repository, api_url=self.base_url, what=what),
                last_page=MAX_RUN_PAGES,
            )
            try:
                listed = self._listing(f"{prefix}/{run_id}/jobs?filter=latest&per_page=100", jobs_kind, spent)
            except NotFound:
                # The run went between the two listings (deleted, or its repository's
                # retention ran out): its jobs with it, the repository's others stay.
                continue
            for job in listed:
                jobs.setdefault(job.id, job)
        return ActiveJobs(jobs=tuple(jobs.values()), spent=len(spent))

    def runner_groups(self, scope: Scope) -> list[RunnerGroup]:
        """Every page conditional: a group looked up again while nothing changed costs a 304."""
        _group_scope(scope)
        self._refuse_app_for_enterprise(scope)
        what = f"GET /{scope.path}/actions/runner-groups"
        kind = _Listing(
            what,
            f"/{scope.path_template}/actions/runner-groups",
            "runner_groups",
            functools.partial(parse_runner_group, what=what),
        )
        return self._listing(f"/{scope.path}/actions/runner-groups?per_page=100", kind, [])

    def runner_group_members(self, scope: Scope, group_id: int) -> list[str]:
        _group_scope(scope)
        self._refuse_app_for_enterprise(scope)
        members, field = ("repositories", "full_name") if scope.organization else ("organizations", "login")
        path = f"/{scope.path}/actions/runner-groups/{group_id}/{members}"
        kind = _Listing(
            f"GET {path}",
            f"/{scope.path_template}/actions/runner-groups/{{runner_group_id}}/{members}",
            members,
            functools.partial(parse_member, what=f"GET {path}", key=field),
        )
        return self._listing(f"{path}?per_page=100", kind, [])

    def _listing(self, url: str, kind: _Listing, spent: list[int]) -> list[Any]:
        """Every page of one listing; each page that cost budget (a 200) appends to ``spent``."""
        return [item for page in self._pages_of(url, kind, spent) for item in page.items]

    def _pages_of(self, url: str, kind: _Listing, spent: list[int] | None = None) -> Iterator[Page]:
        """The pages of one listing from ``url`` on, following ``Link`` up to its bound.

        A listing cut short is a wrong answer, not a smaller one: a runner group's 1,001st
        repository missing refuses the pool that serves it, a runner missing is a busy pod
        taken for idle. So only a listing GitHub itself ends early (``_Listing.last_page``)
        stops quietly; any other that runs past ``MAX_RUNNER_PAGES`` is refused.
        """
        bound, read = kind.last_page or MAX_RUNNER_PAGES, 0
        while read < bound:
            page = self._page(url, kind, spent)
            read += 1
            yield page
            if page.next_url is None:
                return
            if kind.last_page is None:
                bound = max(bound, _page_bound(page.total))
            url = self._checked_next(page.next_url, kind.what)
        if kind.last_page is None:
            raise MalformedResponse(f"{kind.what}: pagination did not end after {read} pages")

    def repository_public(self, repository: str) -> bool:
        """One conditional GET of the repository (its ETag'd answer kept like a page: a 304 is
        free). A repository the credential may not see (404, or 403 for a token limited to other
        repositories: a classic PAT with ``admin:org`` but not ``repo`` sees no private one) is
        not public: anyone may read a public one."""
        path = f"/repos/{repository}"
        what = f"GET {path}"
        try:
            cached, response_headers, data = self._revalidated(path, what, "/repos/{owner}/{repo}")
        except NotFound:
            return False
        except BadCredentials as err:
            if err.status == 403:
                return False
            raise
        if cached is not None:
            return bool(cached.items[0])
        public = parse_public(data, what)
        etag = header(response_headers, "etag")
        if etag:
            self._pages.put(path, Page(etag=etag, items=(public,), next_url=None))
        return public

    def delete_runner(self, scope: Scope, runner_id: int) -> DeleteOutcome:
        self._refuse_app_for_enterprise(scope)
        path = f"/{scope.path}/actions/runners/{runner_id}"
        what = f"DELETE {path}"
        endpoint = f"/{scope.path_template}/actions/runners/{{runner_id}}"
        try:
            self._call(what, functools.partial(self._send, "DELETE", path, endpoint))
        except NotFound:
            return DeleteOutcome.ALREADY_GONE
        except GitHubError as err:
            # GitHub answers 422 "still running a job" for a busy runner; any 422 here means
            # the runner is still registered, so the caller must come back later.
            if err.status == 422:
                log.debug("runner %s in %s not deleted: %s", runner_id, scope, err.message)
                return DeleteOutcome.BUSY
            raise
        return DeleteOutcome.DELETED

    # -- plumbing ------------------------------------------------------------------------------

    def _refuse_app_for_enterprise(self, scope: Scope) -> None:
        """GitHub lets only a personal access token (classic, ``manage_runners:enterprise``)
        manage an enterprise's runners: a GitHub App cannot be installed on an enterprise for
        that. Said before any request, so the refusal costs neither budget nor a token."""
        if scope.enterprise is not None and isinstance(self._requester.auth, Auth.AppInstallationAuth):
            raise BadCredentials(
                f"enterprise {scope.enterprise}: GitHub Apps cannot manage enterprise runners; put a "
                "personal access token with the manage_runners:enterprise scope into the credential "
                "Secret (key 'token')",
                reason=ENTERPRISE_NEEDS_PAT,
            )

    def _page(self, url: str, kind: _Listing, spent: list[int] | None = None) -> Page:
        """One page of a listing under ``key``, revalidated with its ETag; a 304 is free."""
        what, key = kind.what, kind.key
        cached, response_headers, data = self._revalidated(url, what, kind.endpoint)
        if cached is not None:
            return cached
        if spent is not None:
            spent.append(1)
        if not isinstance(data, dict) or not isinstance(data.get(key), list):
            raise MalformedResponse(f"{what}: expected an object with a {key} list")
        total = data.get("total_count")
        page = Page(
            etag=header(response_headers, "etag") or "",
            items=tuple(kind.parse(item) for item in data[key]),
            next_url=next_link(response_headers),
            total=total if isinstance(total, int) and not isinstance(total, bool) else None,
        )
        if page.etag:
            self._pages.put(url, page)
        return page

    def _revalidated(self, url: str, what: str, endpoint: str) -> tuple[Page | None, dict[str, Any], Any]:
        """A GET revalidated with the ETag of its last answer: that answer (a 304 is free), or
        ``None`` and the new answer's headers and body."""
        cached = self._pages.get(url)
        headers = {"If-None-Match": cached.etag} if cached is not None else {}
        status, response_headers, data = self._call(
            what, functools.partial(self._send, "GET", url, endpoint, headers=headers)
        )
        if status != 304:
            return None, response_headers, data
        if cached is None:
            raise MalformedResponse(f"{what}: 304 Not Modified to a request without If-None-Match")
        return cached, response_headers, None

    def _send(
        self,
        method: str,
        url: str,
        endpoint: str,
        *,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> tuple[int, dict[str, Any], Any]:
        """One request: count it, note the budget, and raise PyGithub's exception for anything
        but a 2xx or 304 (a redirect the transport did not follow, to another server, is no
        success either: a runner deletion answered 307 did not delete it).

        ``headers`` is copied because the requester adds ``Authorization`` to the dict it gets.
        """
        with self._write_turn(method, endpoint) if method != "GET" else contextlib.nullcontext():
            try:
                status, response_headers, answer = self._requester.requestJson(
                    method, url, headers=dict(headers or {}), input=body
                )
            except Exception:
                GITHUB_REQUESTS.labels(endpoint, method, NO_ANSWER).inc()
                raise
        GITHUB_REQUESTS.labels(endpoint, method, str(status)).inc()
        self._observe_budget(response_headers)
        if status == 304:
            return status, response_headers, None
        data = structured(answer)
        if not 200 <= status < 300:
            raise self._requester.createException(
                status, response_headers, data if isinstance(data, dict) else {}
            )
        return status, response_headers, data

    @contextlib.contextmanager
    def _write_turn(self, method: str, endpoint: str) -> Iterator[None]:
        """GitHub asks for one write at a time per credential: a write waits for the earlier
        ones, but only while at least half its deadline is left.

        Sent with less, its answer could come too late though GitHub answered in time, and the
        transport would take the host for slow and refuse every call to it for a while
        (``transport.SlowHosts``): a pool deletion's DELETEs, queued behind each other on a
        slow afternoon, paused every deregistration that way. Not sent, it fails as a missed
        deadline its caller retries, and the host is not blamed. It counts as a try
        (``GitHubError.held_back`` unset): it is congestion, not a wait that ends by itself, and
        callers that back off per try thin the queue; not counted, every refused caller came
        back every few seconds and held a thread up to half a deadline each time."""
        left = transport.time_left()
        wait = -1.0 if left is None else max(left - self._options.timeout / 2, 0.0)
        if not self._writes.acquire(timeout=wait):
            raise NotSent(
                f"{method} {endpoint}: not sent: this credential's earlier writes to GitHub, which "
                "go one at a time, left it less than half its deadline",
                reason=Reason.GITHUB_DEADLINE_EXCEEDED,
            )
        try:
            yield
        finally:
            self._writes.release()

    def _observe_budget(self, headers: Mapping[str, Any]) -> None:
        budget = RateLimit.from_headers(headers)
        if budget is None:
            return
        with self._budget_lock:
            self._rate_limit = budget
        publish_budget(self.credential, budget)

    def _checked_next(self, next_url: str, what: str) -> str:
        """Refuse to follow a ``Link`` off the configured server (PyGithub only asserts)."""
        if transport.origin_of(next_url) != self._origin:
            raise MalformedResponse(f"{what}: next page link points to another server")
        return next_url

    def _call(self, what: str, fn: Callable[[], Any], bucket: str = CORE_BUCKET) -> Any:
        """One call, unless GitHub rate-limited this credential (for calls of ``bucket``) and
        its wait is not over (``runnerpool.github.rate_gate``)."""
        closed = self._rate_gate.refusal(bucket)
        if closed is not None:
            raise closed
        sent_at = self._rate_gate.closes()
        try:
            answer = self._bounded(what, fn)
        except RateLimited as err:
            raise self._rate_gate.limited(err, sent_at, bucket) from None
        except GitHubError as err:
            if err.status is not None:  # GitHub answered (a 404, a 422), and not with a limit
                self._rate_gate.answered()
            raise
        self._rate_gate.answered()
        return answer

    def _bounded(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run one PyGithub call under one deadline and translate whatever it raises."""
        opts = self._options
        try:
            with transport.deadline(opts.timeout, opts.max_response_bytes), self._route.used():
                return self._authenticated(what, fn)
        except transport.DeadlineExceeded:
            raise Unavailable(
                f"{what}: no complete answer within {opts.timeout:g} s",
                reason=Reason.GITHUB_DEADLINE_EXCEEDED,
            ) from None
        except transport.ResponseTooLarge:
            raise MalformedResponse(
                f"{what}: the answer is larger than {opts.max_response_bytes} bytes",
                reason=Reason.GITHUB_RESPONSE_TOO_LARGE,
            ) from None
        except transport.HostSlow as err:
            # Its own words: a slow host, or a namespace held to one call at a time.
            raise NotSent(
                f"{what}: not sent: {err}", reason=Reason.GITHUB_HOST_SLOW, held_back=True
            ) from None

    def _translated(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except GithubException as exc:
            raise translate_github_exception(exc, what, self._clock()) from None
        except BadAttributeException:
            raise MalformedResponse(f"{what}: unexpected attribute type") from None
        except json.JSONDecodeError:
            raise MalformedResponse(f"{what}: body is not valid JSON") from None
        except (transport.DeadlineExceeded, transport.ResponseTooLarge, transport.HostSlow):
            raise  # _call says what they mean
        except requests.exceptions.SSLError as exc:
            raise untrusted(what, exc) from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{what}: {type(exc).__name__}") from exc
        except RuntimeError:
            # PyGithub raises RuntimeError for redirects to another host or scheme, i.e. a
            # base URL that points at the wrong place. Its text names where the server sent us:
            # the server's words, kept out of the pool's conditions.
            raise GitHubError(
                f"{what}: the server redirected to another host, scheme or path; check the GitHub API URL",
                reason=Reason.GITHUB_REDIRECTED,
            ) from None

    def _authenticated(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn`` with a live installation token, minted again once if GitHub rejects it.

        PyGithub keeps an installation token until 20 s before the expiry GitHub gave, and
        never drops it on its own: one revoked (``DELETE /installation/token``) or expired by
        GitHub's clock while ours says it has seconds left would be sent again, and refused
        with a 401 (BadCredentials), on every call until its hour ran out. The App's key
        mints a new one at once. A 401 to the new token means what it says: no third try.
        A call GitHub answered 401 did nothing, so a POST is as safe to send again as a GET.
        """
        self._ensure_installation_token(what)
        try:
            return self._translated(what, fn)
        except BadCredentials as err:
            if err.status != 401 or not self._forget_installation_token():
                raise
        log.info("%s: GitHub rejected the installation token of %s; minting another", what, self.credential)
        self._ensure_installation_token(what)
        return self._translated(what, fn)

    def _forget_installation_token(self) -> bool:
        """Drop the installation token PyGithub cached; ``False`` when there is none to drop
        (a personal access token cannot be minted again)."""
        auth = self._requester.auth
        if not isinstance(auth, Auth.AppInstallationAuth):
            return False
        # PyGithub has no public way to drop it; the class default (None) makes the next
        # ``auth.token`` mint a new one.
        vars(auth).pop(_CACHED_INSTALLATION_TOKEN, None)
        return True

    def _ensure_installation_token(self, what: str) -> None:
        """Mint the App installation token up front so its failures name the right culprit.

        Left to PyGithub, a 404 for an unknown installation would surface from the runner call
        and read as "scope not found"; here it becomes a credential problem.
        """
        auth = self._requester.auth
        if not isinstance(auth, Auth.AppInstallationAuth):
            return
        try:
            auth.token  # noqa: B018 - fetched and cached by PyGithub until near expiry
        except GithubException as exc:
            err = translate_github_exception(exc, "POST /app/installations/{id}/access_tokens", self._clock())
            if isinstance(err, (NotFound, BadCredentials)) or err.status == 422:
                raise BadCredentials(
                    f"{what}: GitHub App installation token could not be created ({err.message}); "
                    "check app-id, app-installation-id and app-private-key",
                    reason=Reason.APP_INSTALLATION_TOKEN_FAILED,
                    status=err.status,
                ) from None
            raise err from None
        except (transport.DeadlineExceeded, transport.ResponseTooLarge, transport.HostSlow):
            raise  # _call says what they mean
        except requests.exceptions.SSLError as exc:
            raise untrusted(f"{what}: installation token", exc) from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise NotSent(f"{what}: installation token: {type(exc).__name__}") from None
