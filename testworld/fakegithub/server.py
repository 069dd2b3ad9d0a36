"""The HTTP face of the fake: GitHub's REST routes for runners, jobs, tokens and rate limits.

It runs in the test process on a loopback port so the operator under test,
whether in-process or a separate process, talks real HTTP through its real
GitHub client.  Answers follow GitHub's description (status codes, bodies,
``Link`` pagination, ``ETag``/304, ``x-ratelimit-*``), checked by
``tests/test_fakegithub.py`` against the extract in ``tests/data/github``.

Order of checks per request, as seen from outside: latency, injected faults
(hang or failure, which never reach "GitHub"), authentication (401), secondary
limit, primary limit (403 when the budget is spent, even for a conditional
request), then routing (404 for unknown scopes or paths, which do spend budget).

``/_fake/...`` is a JSON control API for tests whose GitHub client lives in
another process; it needs no credentials, is never logged, rate limited or
faulted.  ``{api}/actions/runner-registration`` and ``/_actions/...`` are the
runner's side (config.sh and run.sh), described in `testworld.fakegithub.actions`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import secrets
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

from testworld.fakegithub import actions, scaleset
from testworld.fakegithub.jobs import Bases
from testworld.fakegithub.scopes import Scope, ScopeKind
from testworld.fakegithub.state import (
    AuthRejectedError,
    Credential,
    FakeGitHubError,
    Fault,
    GitHubState,
    ListenerError,
    RateWindow,
    RegistrationRejectedError,
    RequestRecord,
)

log = logging.getLogger(__name__)

DOCS = "https://docs.github.com/rest"
RATE_LIMIT_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
SECONDARY_DOCS = (
    "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api"
    "#about-secondary-rate-limits"
)
_RUNNER_DOCS = "https://docs.github.com/rest/actions/self-hosted-runners"
DELETE_DOCS = {
    "org": f"{_RUNNER_DOCS}#delete-a-self-hosted-runner-from-an-organization",
    "repo": f"{_RUNNER_DOCS}#delete-a-self-hosted-runner-from-a-repository",
    "enterprise": f"{_RUNNER_DOCS}#delete-a-self-hosted-runner-from-an-enterprise",
}
#: GitHub's answer to a GitHub App (installation token) on an enterprise's runner endpoints.
INTEGRATION_REFUSED = "Resource not accessible by integration"
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100
RATE_LIMIT_ENDPOINT = "rate-limit/get"
_HANG_POLL = 0.02


@dataclass
class Answer:
    """A response before it is written, so checks can pass it along or turn it into a 304."""

    status: int
    payload: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None


@dataclass(frozen=True)
class _Request:
    """What a route handler may look at."""

    params: dict[str, str]
    query: Mapping[str, str]
    body: bytes
    link_base: str
    credential: Credential
    bases: Bases
    authorization: str | None = None


@dataclass(frozen=True)
class _Route:
    endpoint: str
    method: str
    pattern: re.Pattern[str]
    handler: Callable[[FakeGitHub, _Request], Answer]
    app: bool = False
    # Authenticated by the handler (RemoteAuth registration token), not by PAT or App JWT.
    remote_auth: bool = False


def _error(status: int, message: str, documentation_url: str = DOCS) -> Answer:
    return Answer(status, {"message": message, "documentation_url": documentation_url, "status": str(status)})


def _not_found() -> Answer:
    return _error(404, "Not Found")


def _scope_of(fake: FakeGitHub, params: dict[str, str]) -> Scope | None:
    kind: ScopeKind = "org" if "org" in params else "enterprise" if "enterprise" in params else "repo"
    name = params.get("org") or params.get("enterprise") or f"{params['owner']}/{params['repo']}"
    return fake.api_scope(kind, name)


def _enterprise_refusal(request: _Request) -> Answer | None:
    """Only a personal access token manages an enterprise's runners: an App gets a 403."""
    if "enterprise" in request.params and request.credential.key.startswith("installation:"):
        return _error(403, INTEGRATION_REFUSED)
    return None


def _runner_endpoint(
    handler: Callable[[FakeGitHub, _Request], Answer],
) -> Callable[[FakeGitHub, _Request], Answer]:
    def guarded(fake: FakeGitHub, request: _Request) -> Answer:
        return _enterprise_refusal(request) or handler(fake, request)

    return guarded


def _list_runner_groups(fake: FakeGitHub, request: _Request) -> Answer:
    scope = _scope_of(fake, request.params)
    if scope is None:
        return _not_found()
    return _page(request, "runner_groups", fake.api_runner_groups(scope, request.bases))


def _list_runner_group_members(fake: FakeGitHub, request: _Request) -> Answer:
    scope = _scope_of(fake, request.params)
    group_id = int(request.params["runner_group_id"])
    found = None if scope is None else fake.api_runner_group_members(scope, request.bases, group_id)
    key = "repositories" if "org" in request.params else "organizations"
    return _not_found() if found is None else _page(request, key, found)


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    """GitHub falls back to the default for values it cannot use rather than failing."""
    try:
        value = int(query.get(name, default))
    except ValueError:
        return default
    return value if value >= 1 else default


def _page(request: _Request, key: str, items: list[dict[str, Any]]) -> Answer:
    """One page of a listing as GitHub pages it: ``total_count``, the items under ``key``, ``Link``."""
    query = request.query
    per_page = min(_int_param(query, "per_page", DEFAULT_PER_PAGE), MAX_PER_PAGE)
    page = _int_param(query, "page", 1)
    start = (page - 1) * per_page
    answer = Answer(200, {"total_count": len(items), key: items[start : start + per_page]})
    last = max(1, -(-len(items) // per_page))
    link = _link_header(request.link_base, query, page, last)
    if link:
        answer.headers["Link"] = link
    return answer


def _list_runners(fake: FakeGitHub, request: _Request) -> Answer:
    scope = _scope_of(fake, request.params)
    if scope is None:
        return _not_found()
    return _page(request, "runners", fake.api_list_runners(scope, request.query.get("name")))


def _list_runs(fake: FakeGitHub, request: _Request) -> Answer:
    repo = _scope_of(fake, request.params)
    if repo is None:
        return _not_found()
    return _page(
        request, "workflow_runs", fake.api_list_runs(repo, request.bases, request.query.get("status"))
    )


def _list_run_jobs(fake: FakeGitHub, request: _Request) -> Answer:
    repo = _scope_of(fake, request.params)
    found = None if repo is None else fake.api_run_jobs(repo, request.bases, int(request.params["run_id"]))
    return _not_found() if found is None else _page(request, "jobs", found)


def _get_repository(fake: FakeGitHub, request: _Request) -> Answer:
    found = fake.api_repository(request.params["owner"], request.params["repo"], request.bases)
    return _not_found() if found is None else Answer(200, found)


def _get_job(fake: FakeGitHub, request: _Request) -> Answer:
    repo = _scope_of(fake, request.params)
    job = None if repo is None else fake.api_get_job(repo, request.bases, int(request.params["job_id"]))
    return _not_found() if job is None else Answer(200, job)


def _runner_registration(fake: FakeGitHub, request: _Request) -> Answer:
    """What config.sh calls first; refusals are GitHub's (see `actions`)."""
    try:
        data = json.loads(request.body) if request.body.strip() else {}
    except ValueError:
        return _error(400, "Problems parsing JSON")
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str):
        return _error(422, "url is required")
    try:
        tenant = fake.runner_registration(request.authorization, url)
    except ListenerError as exc:
        return _error(exc.status, str(exc))
    service = request.bases.web + actions.SERVICE_PATH
    return Answer(200, {"url": service, "token": tenant, "token_schema": "OAuthAccessToken"})


def _link_header(base: str, query: Mapping[str, str], page: int, last: int) -> str:
    """Build ``Link`` in GitHub's order (prev, next, last, first), keeping the caller's other parameters."""

    def url(target: int) -> str:
        params = dict(query)
        params["page"] = str(target)
        return f"<{base}?{urlencode(params)}>"

    parts = []
    if page > 1:
        parts.append(f'{url(min(page - 1, last))}; rel="prev"')
    if page < last:
        parts += [f'{url(page + 1)}; rel="next"', f'{url(last)}; rel="last"']
    if page > 1:
        parts.append(f'{url(1)}; rel="first"')
    return ", ".join(parts)


def _get_runner(fake: FakeGitHub, request: _Request) -> Answer:
    scope = _scope_of(fake, request.params)
    runner = None if scope is None else fake.api_get_runner(scope, int(request.params["runner_id"]))
    return _not_found() if runner is None else Answer(200, runner)


def _delete_runner(fake: FakeGitHub, request: _Request) -> Answer:
    scope = _scope_of(fake, request.params)
    if scope is None:
        return _not_found()
    outcome, name = fake.api_delete_runner(scope, int(request.params["runner_id"]))
    if outcome == "missing":
        return _not_found()
    if outcome == "busy":
        # GitHub's message really does end with a stray quote.
        message = f'Bad request - Runner "{name}" is still running a job"'
        return Answer(422, {"message": message, "documentation_url": DELETE_DOCS[scope.kind]})
    return Answer(204)


def _registration_token(fake: FakeGitHub, request: _Request) -> Answer:
    scope = _scope_of(fake, request.params)
    if scope is None:
        return _not_found()
    issued = fake.api_registration_token(scope)
    return Answer(201, {"token": issued.token, "expires_at": issued.expires_at_text()})


def _generate_jitconfig(fake: FakeGitHub, request: _Request) -> Answer:
    """One just-in-time runner: 201 with the runner and its config; 409 for a name in use, 422 as GitHub."""
    scope = _scope_of(fake, request.params)
    if scope is None:
        return _not_found()
    try:
        body = json.loads(request.body) if request.body.strip() else {}
    except ValueError:
        return _error(400, "Problems parsing JSON")
    if not isinstance(body, dict):
        return _error(400, "Problems parsing JSON")
    problem = _jitconfig_problem(body)
    if problem:
        return Answer(422, {"message": "Invalid request.\n\n" + problem, "documentation_url": DOCS})
    try:
        runner, encoded = fake.api_generate_jitconfig(
            scope,
            request.bases,
            name=body["name"],
            labels=list(body["labels"]),
            runner_group_id=body["runner_group_id"],
            work_folder=str(body.get("work_folder", "_work")),
        )
    except RegistrationRejectedError as exc:
        return _error(409, str(exc))
    return Answer(201, {"runner": runner, "encoded_jit_config": encoded})


def _jitconfig_problem(body: dict[str, Any]) -> str:
    """What GitHub's schema refuses: name, runner_group_id and 1-100 labels are required."""
    missing = [key for key in ("name", "runner_group_id", "labels") if key not in body]
    if missing:
        return " ".join(f'"{key}" wasn\'t supplied.' for key in missing)
    if not isinstance(body["name"], str) or not body["name"].strip():
        return "name must be a non-empty string."
    if not isinstance(body["runner_group_id"], int) or isinstance(body["runner_group_id"], bool):
        return "runner_group_id must be an integer."
    labels = body["labels"]
    if not isinstance(labels, list) or not all(isinstance(label, str) and label for label in labels):
        return "labels must be an array of strings."
    if not 1 <= len(labels) <= 100:
        return "labels must have between 1 and 100 items."
    if "work_folder" in body and not isinstance(body["work_folder"], str):
        return "work_folder must be a string."
    return ""


def _installation_token(fake: FakeGitHub, request: _Request) -> Answer:
    body = request.body
    try:
        requested = json.loads(body) if body.strip() else {}
    except ValueError:
        return _error(400, "Problems parsing JSON")
    if not isinstance(requested, dict):
        return _error(400, "Problems parsing JSON")
    app_id = request.credential.key.removeprefix("app:")
    minted = fake.api_installation_token(int(request.params["installation_id"]), app_id, requested)
    if minted is None:
        return _not_found()
    return Answer(
        201,
        {
            "token": minted.token,
            "expires_at": minted.expires_at_text(),
            "permissions": dict(minted.permissions),
            "repository_selection": minted.repository_selection,
        },
    )


def _routes() -> list[_Route]:
    scopes = {
        "org": r"/orgs/(?P<org>[^/]+)",
        "repo": r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)",
        "enterprise": r"/enterprises/(?P<enterprise>[^/]+)",
    }
    routes: list[_Route] = []
    for kind, prefix in scopes.items():
        # GitHub's operation ids: enterprise runners are "enterprise-admin/...".
        area, suffix = ("enterprise-admin", kind) if kind == "enterprise" else ("actions", kind)
        runners = f"{prefix}/actions/runners"
        routes += [
            _Route(
                f"{area}/list-self-hosted-runners-for-{suffix}",
                "GET",
                re.compile(runners),
                _runner_endpoint(_list_runners),
            ),
            _Route(
                f"{area}/create-registration-token-for-{suffix}",
                "POST",
                re.compile(f"{runners}/registration-token"),
                _runner_endpoint(_registration_token),
            ),
            _Route(
                f"{area}/generate-runner-jitconfig-for-{suffix}",
                "POST",
                re.compile(f"{runners}/generate-jitconfig"),
                _generate_jitconfig,
            ),
            _Route(
                f"{area}/get-self-hosted-runner-for-{suffix}",
                "GET",
                re.compile(rf"{runners}/(?P<runner_id>\d+)"),
                _runner_endpoint(_get_runner),
            ),
            _Route(
                f"{area}/delete-self-hosted-runner-from-{suffix}",
                "DELETE",
                re.compile(rf"{runners}/(?P<runner_id>\d+)"),
                _runner_endpoint(_delete_runner),
            ),
        ]
        if kind == "repo":
            continue
        groups = f"{prefix}/actions/runner-groups"
        members, who = ("repositories", "repo") if kind == "org" else ("organizations", "org")
        routes += [
            _Route(
                f"{area}/list-self-hosted-runner-groups-for-{suffix}",
                "GET",
                re.compile(groups),
                _runner_endpoint(_list_runner_groups),
            ),
            _Route(
                f"{area}/list-{who}-access-to-self-hosted-runner-group-in-{suffix}",
                "GET",
                re.compile(rf"{groups}/(?P<runner_group_id>\d+)/{members}"),
                _runner_endpoint(_list_runner_group_members),
            ),
        ]
    repo = scopes["repo"]
    routes += [
        _Route("repos/get", "GET", re.compile(repo), _get_repository),
        _Route("actions/list-workflow-runs-for-repo", "GET", re.compile(f"{repo}/actions/runs"), _list_runs),
        _Route(
            "actions/list-jobs-for-workflow-run",
            "GET",
            re.compile(rf"{repo}/actions/runs/(?P<run_id>\d+)/jobs"),
            _list_run_jobs,
        ),
        _Route(
            "actions/get-job-for-workflow-run",
            "GET",
            re.compile(rf"{repo}/actions/jobs/(?P<job_id>\d+)"),
            _get_job,
        ),
        _Route(
            "actions/runner-registration",
            "POST",
            re.compile(r"/actions/runner-registration"),
            _runner_registration,
            remote_auth=True,
        ),
    ]
    routes.append(
        _Route(
            "apps/create-installation-access-token",
            "POST",
            re.compile(r"/app/installations/(?P<installation_id>\d+)/access_tokens"),
            _installation_token,
            app=True,
        )
    )
    return routes


ROUTES = _routes()


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """Weak comparison, as RFC 9110 prescribes for If-None-Match."""
    wanted = etag.removeprefix("W/")
    for candidate in (part.strip() for part in if_none_match.split(",")):
        if candidate == "*" or candidate.removeprefix("W/") == wanted:
            return True
    return False


def _rate_headers(window: RateWindow) -> dict[str, str]:
    return {
        "x-ratelimit-limit": str(window.limit),
        "x-ratelimit-remaining": str(window.remaining),
        "x-ratelimit-reset": str(window.reset),
        "x-ratelimit-used": str(window.used),
        "x-ratelimit-resource": "core",
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # An operator firing many requests at once must not hit a full accept backlog.
    request_queue_size = 128
    fake: FakeGitHub

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer is normal here (timeouts are tested on purpose).
        log.debug("connection from %s ended abruptly", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "github.com"
    # Idle keep-alive connections are closed after this; stop() closes them sooner.
    timeout = 30

    @property
    def fake(self) -> FakeGitHub:
        return cast(_Server, self.server).fake

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        self.fake._track(self.connection, threading.current_thread())

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.fake._untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    # ------------------------------------------------------------------ plumbing

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _write(self, answer: Answer, extra: Mapping[str, str] | None = None) -> None:
        body = answer.raw
        if body is None and answer.payload is not None:
            body = json.dumps(answer.payload).encode()
        self.send_response(answer.status)
        headers = {**(extra or {}), **answer.headers}
        if body is not None and "Content-Type" not in headers:
            headers["Content-Type"] = "application/json; charset=utf-8"
        for name, value in headers.items():
            self.send_header(name, value)
        if answer.status not in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        if body and answer.status not in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            self.wfile.write(body)

    def _hang(self, max_seconds: float) -> None:
        """Hold the request without answering until the client hangs up or the bound passes."""
        generation = self.fake.hang_started()
        deadline = time.monotonic() + max_seconds
        try:
            while time.monotonic() < deadline and not self.fake.hang_released(generation):
                readable, _, _ = select.select([self.connection], [], [], _HANG_POLL)
                if readable:
                    try:
                        if not self.connection.recv(1, socket.MSG_PEEK):
                            break  # the client closed its end: it gave up
                    except OSError:
                        break
                    time.sleep(_HANG_POLL)  # pipelined bytes, not a hang-up: keep holding
        finally:
            self.fake.hang_finished()
            self.close_connection = True

    # ------------------------------------------------------------------ the API

    def _dispatch(self) -> None:
        try:
            self._dispatch_unguarded()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            # A bug in the fake must show up as a 500 in the test, not a silent hang-up.
            log.exception("fake GitHub failed on %s %s", self.command, self.path)
            with contextlib.suppress(OSError):
                self._write(_error(500, "fake GitHub internal error (see the test log)"))
            self.close_connection = True

    def _dispatch_unguarded(self) -> None:
        split = urlsplit(self.path)
        body = self._read_body()
        if split.path.startswith("/_fake/"):
            self._control(split.path, dict(parse_qsl(split.query)), body)
            return
        if split.path.startswith(scaleset.PATH):
            auth = self.headers.get("Authorization")
            self._write(Answer(*scaleset.answer(self.fake, self.command, self.path, auth, body)))
            return
        if split.path.startswith(actions.SERVICE_PATH + "/"):
            path = split.path.removeprefix(actions.SERVICE_PATH)
            status, text = actions.answer(
                self.fake,
                self.command,
                path,
                query=split.query,
                authorization=self.headers.get("Authorization"),
                body=body,
            )
            self._write(
                Answer(status, raw=text.encode(), headers={"Content-Type": "text/plain; charset=utf-8"})
            )
            return
        fake = self.fake
        exchange = _Exchange.parse(self.command, split.path, split.query, body, fake.api_prefix)
        exchange.conditional = self.headers.get("If-None-Match") is not None
        if fake.latency:
            fake.pause(fake.latency)
        fault = fake.take_fault(exchange.method, exchange.path)
        if fault is not None and fault.kind == "hang":
            self._record(exchange, 0, None, counted=False)
            self._hang(fault.max_seconds)
            return
        if fault is not None and fault.kind == "fail":
            self._send(exchange, _fault_answer(fault), None, None, counted=False)
            return
        if exchange.route is not None and exchange.route.remote_auth:
            self._send(exchange, self._answer(exchange, None), None, None, counted=False)
            return
        app_endpoint = exchange.route is not None and exchange.route.app
        try:
            credential = fake.authenticate(self.headers.get("Authorization"), app_endpoint=app_endpoint)
        except AuthRejectedError as exc:
            anonymous = fake.anonymous_window(self.client_address[0])
            self._send(exchange, _error(401, str(exc)), None, anonymous, counted=False)
            return
        if fault is not None:  # the only kind left: a secondary rate limit
            answer = _secondary_limit_answer(fault, exchange.request_id)
            self._send(exchange, answer, credential, fake.rate_snapshot(credential), counted=False)
            return
        counts = exchange.endpoint != RATE_LIMIT_ENDPOINT
        admitted, window = fake.rate_admit(credential, counts=counts)
        if not admitted:
            answer = _primary_limit_answer(fake.primary_limit_status, credential, exchange.request_id)
            self._send(exchange, answer, credential, window, counted=False)
            return
        answer = self._answer(exchange, credential)
        if exchange.method == "GET" and answer.status == 200:
            answer = _with_etag(answer, self.headers.get("If-None-Match"))
            if answer.status == 304 and counts:
                window = fake.rate_refund(credential)
                counts = False
        self._send(exchange, answer, credential, window, counted=counts)

    def _answer(self, exchange: _Exchange, credential: Credential | None) -> Answer:
        """Route an admitted request; ``credential`` is None only for RemoteAuth routes."""
        fake = self.fake
        if exchange.endpoint == RATE_LIMIT_ENDPOINT and credential is not None:
            return Answer(200, fake.rate_limit_json(credential))
        if exchange.route is None:
            return _not_found()
        # Links name the host the client asked for (the node's bridge address, or loopback) in
        # the scheme the fake serves: a GHES behind a private CA links to https.
        host = self.headers.get("Host")
        web = f"{fake._scheme}://{host}"
        bases = Bases(f"{web}{fake.api_prefix}", web) if host else fake._bases()
        request = _Request(
            exchange.params,
            dict(parse_qsl(exchange.query)),
            exchange.body,
            bases.api + exchange.path,
            credential or Credential(key="remote-auth", who="a runner"),
            bases,
            self.headers.get("Authorization"),
        )
        return exchange.route.handler(fake, request)

    def _send(
        self,
        exchange: _Exchange,
        answer: Answer,
        credential: Credential | None,
        window: RateWindow | None,
        *,
        counted: bool,
    ) -> None:
        headers = {"x-github-request-id": exchange.request_id, "x-github-api-version-selected": "2022-11-28"}
        if window is not None:
            headers.update(_rate_headers(window))
        if answer.status in (200, 304):
            headers["Cache-Control"] = "private, max-age=60, s-maxage=60"
            headers["Vary"] = "Accept, Authorization, Cookie, X-GitHub-OTP"
        # Recorded before the answer leaves: a client that reads the answer and calls again must
        # find this request before its next one in the log, as in a real server's access order.
        self._record(exchange, answer.status, credential, counted=counted)
        self._write(answer, headers)

    def _record(
        self, exchange: _Exchange, status: int, credential: Credential | None, *, counted: bool
    ) -> None:
        self.fake.record(
            RequestRecord(
                method=exchange.method,
                path=exchange.path,
                query=exchange.query,
                endpoint=exchange.endpoint,
                status=status,
                conditional=exchange.conditional,
                counted=counted,
                credential=None if credential is None else credential.key,
                at=self.fake.clock(),
            )
        )

    # ------------------------------------------------------------------ the control API

    def _control(self, path: str, query: dict[str, str], body: bytes) -> None:
        try:
            data: Any = json.loads(body) if body.strip() else {}
            if not isinstance(data, dict):
                raise TypeError("the control API takes a JSON object")
            answer = _control_answer(self.fake, self.command, path.removeprefix("/_fake"), query, data)
        except RegistrationRejectedError as exc:
            answer = Answer(422, {"message": str(exc)})
        except (FakeGitHubError, LookupError) as exc:
            answer = Answer(404, {"message": str(exc)})
        except (ValueError, TypeError) as exc:
            answer = Answer(400, {"message": f"{type(exc).__name__}: {exc}"})
        self._write(answer)


@dataclass
class _Exchange:
    """One API request as the dispatcher sees it, path already stripped of the API prefix."""

    method: str
    path: str
    query: str
    body: bytes
    endpoint: str = "unknown"
    route: _Route | None = None
    params: dict[str, str] = field(default_factory=dict)
    conditional: bool = False
    request_id: str = field(
        default_factory=lambda: ":".join(secrets.token_hex(n).upper() for n in (2, 3, 4, 4))
    )

    @classmethod
    def parse(cls, method: str, path: str, query: str, body: bytes, prefix: str) -> _Exchange:
        if prefix and path != prefix and not path.startswith(prefix + "/"):
            return cls(method, path, query, body)
        path = path[len(prefix) :].rstrip("/") or "/"
        exchange = cls(method, path, query, body)
        if path == "/rate_limit" and method == "GET":
            exchange.endpoint = RATE_LIMIT_ENDPOINT
        for route in ROUTES:
            found = route.pattern.fullmatch(path)
            if found and route.method == method:
                exchange.endpoint, exchange.route, exchange.params = route.endpoint, route, found.groupdict()
                break
        return exchange


def _fault_answer(fault: Fault) -> Answer:
    body = fault.body
    if body is None:
        body = json.dumps({"message": HTTPStatus(fault.status).phrase}).encode()
    return Answer(fault.status, raw=body)


def _secondary_limit_answer(fault: Fault, request_id: str) -> Answer:
    message = (
        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
        f"If you reach out to GitHub Support for help, please include the request ID {request_id}."
    )
    answer = _error(fault.status, message, SECONDARY_DOCS)
    answer.headers["retry-after"] = str(fault.retry_after)
    return answer


def _primary_limit_answer(status: int, credential: Credential, request_id: str) -> Answer:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    message = (
        f"API rate limit exceeded for {credential.who}. If you reach out to GitHub Support for help, "
        f"please include the request ID {request_id} and timestamp {stamp}."
    )
    return _error(status, message, RATE_LIMIT_DOCS)


def _with_etag(answer: Answer, if_none_match: str | None) -> Answer:
    """Serialise once, tag the bytes, and turn a matching conditional request into a bodiless 304."""
    raw = json.dumps(answer.payload).encode()
    etag = '"' + hashlib.sha256(raw).hexdigest() + '"'
    if if_none_match is not None and _etag_matches(if_none_match, etag):
        return Answer(304, headers={**answer.headers, "ETag": etag})
    return Answer(answer.status, answer.payload, {**answer.headers, "ETag": etag}, raw)


# ---------------------------------------------------------------------- /_fake control routes

_ControlHandler = Callable[["FakeGitHub", "re.Match[str]", Any, dict[str, Any]], Answer]


def _runner_ref(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def _ctl_add_scope(fake: FakeGitHub, _m: re.Match[str], _scope: Any, data: dict[str, Any]) -> Answer:
    created = fake.add_scope(data.get("scope"), org=data.get("org"), repo=data.get("repo"))
    return Answer(201, {"kind": created.kind, "name": created.name})


def _ctl_list_runners(fake: FakeGitHub, _m: re.Match[str], scope: Any, _data: dict[str, Any]) -> Answer:
    return Answer(200, fake.runners(scope))


def _ctl_add_runner(fake: FakeGitHub, _m: re.Match[str], scope: Any, data: dict[str, Any]) -> Answer:
    runner_id = fake.register_runner(
        scope,
        data["name"],
        data.get("labels", ()),
        status=data.get("status", "online"),
        busy=bool(data.get("busy", False)),
        ephemeral=bool(data.get("ephemeral", False)),
    )
    return Answer(201, fake.runner(scope, runner_id))


def _ctl_register(fake: FakeGitHub, _m: re.Match[str], scope: Any, data: dict[str, Any]) -> Answer:
    where = scope or data["url"]
    runner_id = fake.register_runner_with_token(
        where,
        data["token"],
        data["name"],
        data.get("labels", ()),
        ephemeral=bool(data.get("ephemeral", False)),
    )
    return Answer(201, fake.runner(where, runner_id))


def _ctl_set_runner(fake: FakeGitHub, match: re.Match[str], scope: Any, data: dict[str, Any]) -> Answer:
    runner = _runner_ref(match["runner"])
    return Answer(200, fake.set_runner(scope, runner, status=data.get("status"), busy=data.get("busy")))


def _ctl_complete_job(fake: FakeGitHub, match: re.Match[str], scope: Any, _data: dict[str, Any]) -> Answer:
    fake.complete_job(scope, _runner_ref(match["runner"]))
    return Answer(204)


def _ctl_remove_runner(fake: FakeGitHub, match: re.Match[str], scope: Any, _data: dict[str, Any]) -> Answer:
    fake.remove_runner(scope, _runner_ref(match["runner"]))
    return Answer(204)


def _ctl_tokens(fake: FakeGitHub, _m: re.Match[str], scope: Any, _data: dict[str, Any]) -> Answer:
    issued = fake.tokens_issued(scope)
    return Answer(
        200,
        [
            {"token": t.token, "expires_at": t.expires_at_text(), "uses": fake.token_uses(t.token)}
            for t in issued
        ],
    )


def _ctl_requests(fake: FakeGitHub, _m: re.Match[str], _scope: Any, _data: dict[str, Any]) -> Answer:
    return Answer(200, [asdict(record) for record in fake.requests])


def _ctl_faults(fake: FakeGitHub, _m: re.Match[str], _scope: Any, data: dict[str, Any]) -> Answer:
    if data.get("clear"):
        fake.clear_faults()
    if "latency" in data:
        fake.set_latency(float(data["latency"]))
    where = {"method": data.get("method"), "path": data.get("path")}
    if "fail" in data:
        fake.fail_next(int(data["fail"]), int(data.get("status", 502)), **where)
    if "hang" in data:
        fake.hang_next(int(data["hang"]), max_seconds=float(data.get("max_seconds", 10.0)), **where)
    if "secondary" in data:
        retry_after, status = int(data.get("retry_after", 60)), int(data.get("status", 429))
        fake.secondary_limit_next(int(data["secondary"]), retry_after=retry_after, status=status, **where)
    return Answer(204)


def _ctl_rate_limit(fake: FakeGitHub, _m: re.Match[str], _scope: Any, data: dict[str, Any]) -> Answer:
    if "limit" in data:
        fake.set_rate_limit(int(data["limit"]), token=data.get("token"))
    if "remaining" in data:
        fake.set_remaining(int(data["remaining"]), token=data.get("token"))
    return Answer(204)


def _ctl_queue_job(fake: FakeGitHub, _m: re.Match[str], scope: Any, data: dict[str, Any]) -> Answer:
    job_id = fake.queue_job(
        scope or data["repo"],
        data["labels"],
        float(data.get("duration_s", 0.0)),
        name=str(data.get("name", "build")),
        workflow_name=str(data.get("workflow_name", "CI")),
        script=None if data.get("script") is None else str(data["script"]),
    )
    return Answer(201, fake.job(job_id))


def _ctl_job(fake: FakeGitHub, match: re.Match[str], _scope: Any, _data: dict[str, Any]) -> Answer:
    return Answer(200, fake.job(int(match["job"])))


def _ctl_jobs(fake: FakeGitHub, _m: re.Match[str], scope: Any, _data: dict[str, Any]) -> Answer:
    return Answer(200, fake.jobs(scope))


def _ctl_annotations(fake: FakeGitHub, match: re.Match[str], _scope: Any, _data: dict[str, Any]) -> Answer:
    return Answer(200, fake.annotations(int(match["job"])))


def _ctl_settings(fake: FakeGitHub, _m: re.Match[str], _scope: Any, data: dict[str, Any]) -> Answer:
    if "lost_contact_seconds" in data:
        fake.lost_contact_seconds = float(data["lost_contact_seconds"])
    if "min_runner_version" in data:
        fake.min_runner_version = data["min_runner_version"] or None
    return Answer(
        200,
        {"lost_contact_seconds": fake.lost_contact_seconds, "min_runner_version": fake.min_runner_version},
    )


def _ctl_reset(fake: FakeGitHub, _m: re.Match[str], _scope: Any, _data: dict[str, Any]) -> Answer:
    fake.reset()
    return Answer(204)


_RUNNER = r"/runners/(?P<runner>[^/]+)"
CONTROL_ROUTES: list[tuple[str, re.Pattern[str], _ControlHandler]] = [
    ("POST", re.compile(r"/scopes"), _ctl_add_scope),
    ("GET", re.compile(r"/runners"), _ctl_list_runners),
    ("POST", re.compile(r"/runners"), _ctl_add_runner),
    ("POST", re.compile(r"/register"), _ctl_register),
    ("PATCH", re.compile(_RUNNER), _ctl_set_runner),
    ("DELETE", re.compile(_RUNNER), _ctl_remove_runner),
    ("POST", re.compile(_RUNNER + "/complete-job"), _ctl_complete_job),
    ("GET", re.compile(r"/tokens"), _ctl_tokens),
    ("GET", re.compile(r"/requests"), _ctl_requests),
    ("POST", re.compile(r"/faults"), _ctl_faults),
    ("POST", re.compile(r"/rate-limit"), _ctl_rate_limit),
    ("POST", re.compile(r"/reset"), _ctl_reset),
    ("POST", re.compile(r"/jobs"), _ctl_queue_job),
    ("GET", re.compile(r"/jobs"), _ctl_jobs),
    ("GET", re.compile(r"/jobs/(?P<job>\d+)"), _ctl_job),
    ("GET", re.compile(r"/jobs/(?P<job>\d+)/annotations"), _ctl_annotations),
    ("POST", re.compile(r"/settings"), _ctl_settings),
]


def _control_answer(
    fake: FakeGitHub, method: str, path: str, query: dict[str, str], data: dict[str, Any]
) -> Answer:
    """Route ``/_fake/...``; the scope comes from the JSON body or ``?scope=``."""
    scope = data.get("scope") or query.get("scope")
    for route_method, pattern, handler in CONTROL_ROUTES:
        found = pattern.fullmatch(path)
        if found and route_method == method:
            return handler(fake, found, scope, data)
    return Answer(404, {"message": f"no control endpoint {method} /_fake{path}"})


class FakeGitHub(GitHubState):
    """A GitHub REST server on 127.0.0.1 for the operator's tests and the demo.

    Use as a context manager (or `start`/`stop`); `url` is the base URL to give
    the operator.  ``api_prefix="/api/v3"`` serves the routes the way GitHub
    Enterprise Server does.  All control methods are inherited from
    `GitHubState` and are safe to call from any thread while requests run.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_prefix: str = "",
        tls: ssl.SSLContext | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # ``tls``: serve https with this context (a GHES behind a private CA: testworld/tls.py).
        self.tls = tls
        self.host = host
        self.port = port
        self.api_prefix = "/" + api_prefix.strip("/") if api_prefix.strip("/") else ""
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``; only valid once started."""
        if self._server is None:
            raise RuntimeError("FakeGitHub is not running")
        return f"{self._scheme}://{self.host}:{self.port}{self.api_prefix}"

    @property
    def scale_sets(self) -> scaleset.ScaleSetService:
        """The fake's runner scale sets (`testworld.fakegithub.scaleset`): ``offer_job``,
        ``complete_job``, ``wait_completed``, ``runners``, ``jobs``... for tests to drive."""
        return scaleset.service(self)

    @property
    def _scheme(self) -> str:
        return "http" if self.tls is None else "https"

    def _bases(self) -> Bases:
        if self._server is None:
            return super()._bases()
        return Bases(api=self.url, web=f"{self._scheme}://{self.host}:{self.port}")

    def start(self) -> FakeGitHub:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self.host, self.port), _Handler)
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        server.fake = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakegithub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every connection, hung ones included, then wait for the handlers."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        self.release_hangs()
        server.shutdown()
        with self._connections_lock:
            open_connections = dict(self._connections)
        for connection in open_connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for thread in open_connections.values():
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _track(self, connection: socket.socket, thread: threading.Thread) -> None:
        with self._connections_lock:
            self._connections[connection] = thread

    def _untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.pop(connection, None)

    def pause(self, seconds: float) -> None:
        """Sleep that `stop` cuts short, so latency never delays a test's teardown."""
        self._stopping.wait(seconds)

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
