"""Queued and running jobs of a repository, from GitHub's REST API (PyGithub's raw requester).

What GitHub offers (REST description, /work/shared/github): workflow runs are listed per
repository only (``GET /repos/{owner}/{repo}/actions/runs?status=``), jobs per run
(``GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs``). There is no organization-wide
listing of runs or jobs, so an organization pool polls the repositories it names
(``spec.autoscaling.repositories``) and those its deliveries came from.

The cheapest complete view: runs with ``status=queued`` and with ``status=in_progress`` (a
run in progress can still hold queued jobs, e.g. a matrix wider than the pool), then the
latest attempt's jobs of each (``filter=latest``). Every page is conditional
(``If-None-Match`` with its last ``ETag``); an idle repository answers two 304s, which
GitHub does not count.

Kept in this module until the GitHub client becomes a package (issue 10): it then belongs
next to ``PyGithubClient``, sharing its page cache, budget bookkeeping and request counter.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import requests
import urllib3.exceptions
from github import GithubException
from github.Requester import Requester

from runnerpool.demand.jobs import InvalidJob, Job, parse_job
from runnerpool.github_api import (
    GITHUB_REQUESTS,
    NO_ANSWER,
    MalformedResponse,
    RateLimit,
    Unavailable,
    translate_github_exception,
)

__all__ = ["ActiveJobs", "JobsClient", "RestJobsClient"]

PER_PAGE = 100
#: GitHub returns at most 1,000 runs for a ``status`` filter: ten pages of 100.
MAX_PAGES = 10
MAX_CACHED_PAGES = 4096


@dataclass(frozen=True)
class ActiveJobs:
    jobs: tuple[Job, ...]
    #: Requests that counted against the budget (not the free 304s).
    spent: int


class JobsClient(Protocol):
    """What the poller needs from GitHub; raises only ``GitHubError``."""

    def active_jobs(self, repository: str) -> ActiveJobs: ...

    def rate_limit(self) -> RateLimit | None: ...


@dataclass(frozen=True)
class _Page:
    etag: str
    data: Any
    next_url: str | None


class _EtagCache:
    """Bounded LRU of pages by URL. (``github_api._PageCache`` is the runner pages' twin; they
    become one when the GitHub client is a package.)"""

    def __init__(self, max_pages: int = MAX_CACHED_PAGES) -> None:
        self._pages: OrderedDict[str, _Page] = OrderedDict()
        self._max = max_pages
        self._lock = threading.Lock()

    def get(self, url: str) -> _Page | None:
        with self._lock:
            page = self._pages.get(url)
            if page is not None:
                self._pages.move_to_end(url)
            return page

    def put(self, url: str, page: _Page) -> None:
        with self._lock:
            self._pages[url] = page
            self._pages.move_to_end(url)
            while len(self._pages) > self._max:
                self._pages.popitem(last=False)


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    for key, value in headers.items():
        if str(key).lower() == name:
            return str(value)
    return None


def _next(headers: Mapping[str, Any]) -> str | None:
    for part in (_header(headers, "link") or "").split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params:
            return url.strip().strip("<>")
    return None


class RestJobsClient:
    def __init__(self, requester: Requester, clock: Callable[[], float] = time.time) -> None:
        self._requester = requester
        self._clock = clock
        self._base = urllib.parse.urlsplit(str(requester.base_url))
        self._pages = _EtagCache()
        self._lock = threading.Lock()
        self._budget: RateLimit | None = None

    @property
    def api_url(self) -> str:
        return str(self._requester.base_url).rstrip("/")

    def rate_limit(self) -> RateLimit | None:
        with self._lock:
            return self._budget

    def active_jobs(self, repository: str) -> ActiveJobs:
        owner, _, name = repository.partition("/")
        prefix = f"/repos/{urllib.parse.quote(owner)}/{urllib.parse.quote(name)}/actions/runs"
        spent = 0
        runs: dict[int, None] = {}
        for status in ("queued", "in_progress"):
            items, cost = self._list(
                f"{prefix}?status={status}&per_page={PER_PAGE}",
                "workflow_runs",
                "/repos/{owner}/{repo}/actions/runs",
            )
            spent += cost
            for run in items:
                run_id = run.get("id") if isinstance(run, dict) else None
                if not isinstance(run_id, int):
                    raise MalformedResponse(f"GET {prefix}: a workflow run without an id")
                runs.setdefault(run_id)
        jobs: dict[int, Job] = {}
        for run_id in runs:
            items, cost = self._list(
                f"{prefix}/{run_id}/jobs?filter=latest&per_page={PER_PAGE}",
                "jobs",
                "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs",
            )
            spent += cost
            for item in items:
                try:
                    job = parse_job(item, repository, self.api_url)
                except InvalidJob as err:
                    raise MalformedResponse(f"GET {prefix}/{run_id}/jobs: {err}") from None
                jobs.setdefault(job.id, job)
        return ActiveJobs(jobs=tuple(jobs.values()), spent=spent)

    def _list(self, url: str, key: str, endpoint: str) -> tuple[list[Any], int]:
        items: list[Any] = []
        spent = 0
        for _ in range(MAX_PAGES):
            page, cost = self._page(url, key, endpoint)
            spent += cost
            items.extend(page.data)
            if page.next_url is None:
                break
            url = self._same_server(page.next_url, endpoint)
        return items, spent

    def _same_server(self, url: str, endpoint: str) -> str:
        there = urllib.parse.urlsplit(url)
        if (there.scheme, there.netloc) != (self._base.scheme, self._base.netloc):
            raise MalformedResponse(f"GET {endpoint}: next page link points to another server")
        return url

    def _page(self, url: str, key: str, endpoint: str) -> tuple[_Page, int]:
        what = f"GET {url.split('?', 1)[0]}"
        cached = self._pages.get(url)
        # A fresh dict every time: the requester adds Authorization to the one it gets.
        headers = {"If-None-Match": cached.etag} if cached is not None else {}
        try:
            status, answer_headers, body = self._requester.requestJson("GET", url, headers=dict(headers))
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            GITHUB_REQUESTS.labels(endpoint, "GET", NO_ANSWER).inc()
            raise Unavailable(f"{what}: {type(exc).__name__}") from exc
        GITHUB_REQUESTS.labels(endpoint, "GET", str(status)).inc()
        budget = RateLimit.from_headers(answer_headers)
        if budget is not None:
            with self._lock:
                self._budget = budget
        if status == 304:
            if cached is None:
                raise MalformedResponse(f"{what}: 304 Not Modified to a request without If-None-Match")
            return cached, 0
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        if status >= 400:
            failure = GithubException(status, data if isinstance(data, dict) else {}, answer_headers)
            raise translate_github_exception(failure, what, self._clock())
        if not isinstance(data, dict) or not isinstance(data.get(key), list):
            raise MalformedResponse(f"{what}: expected an object with a {key} list")
        page = _Page(
            etag=_header(answer_headers, "etag") or "", data=data[key], next_url=_next(answer_headers)
        )
        if page.etag:
            self._pages.put(url, page)
        return page, 1
