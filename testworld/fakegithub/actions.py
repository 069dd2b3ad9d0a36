"""The runner's side of the fake: registration and a small listener protocol for stand-ins.

The real actions runner talks to GitHub in two steps.  ``config.sh`` trades the
registration token for credentials of the Actions service (documented behaviour, so
the fake serves it exactly)::

    POST {api}/actions/runner-registration          api: https://api.github.com, or
    Authorization: RemoteAuth <registration token>       http(s)://HOST/api/v3 (GHES)
    {"url": "<web URL of the repository or organization>", "runner_event": "register"}
    -> 200 {"url": <service URL>, "token": <tenant credential>, "token_schema": "OAuthAccessToken"}
    -> 401 without RemoteAuth; 404 "Not Found" when the token is unknown, expired, or
       was issued for another repository or organization

Then it registers the runner, and ``run.sh`` long-polls the service for a job.  That
service protocol is GitHub's private one; this module stands in for it with a protocol
of its own, small enough for a bash client with curl and no JSON parser.  Paths are
under the service URL (``http://HOST:PORT/_actions``), requests carry
``Authorization: Bearer <credential>`` and form-encoded bodies, answers are
``text/plain`` ``key=value`` lines (errors: one ``message=...`` line)::

    POST   /runners              tenant credential; name=, labels=a,b, ephemeral=0|1, replace=0|1,
                                 version= (the runner's, as the real one registers it)
           -> 201 runner_id=, runner_name=, credential=   (the runner, offline so far)
           -> 409 a runner has that name and replace=0;  401 tenant credential unknown
    POST   /sessions             runner credential; version=  -> 201 session_id=   (runner online)
           -> 403 "Runner version vX is deprecated and cannot receive messages." below the
              fake's ``min_runner_version`` (GitHub's refusal of an outdated runner)
    GET    /sessions/{id}/job?wait=S                  (long poll, S capped at 50 s)
           -> 200 job_id=, run_id=, repository=, labels=, duration_s=[, script=]   a job
              offered to it (script: one line of shell, the job's steps, when it has any)
           -> 204 nothing within S seconds;  404 the session ended
    POST   /jobs/{id}/started    -> 204   job in_progress, runner busy
    POST   /renewjob             job_id=  -> 200 locked_until=<RFC 3339>, renew_s=<seconds>
           renews the running job's lock (the real runner's ``renewjob`` call, which its
           listener makes every 60 s while the job runs: Runner.Listener/JobDispatcher.cs);
           renew again within renew_s.  404 when the job is not the runner's running job
           (completed, or failed for lost contact): stop renewing
    POST   /jobs/{id}/completed  conclusion=success|failure|cancelled[, summary=] -> 204
           the job completes; an ephemeral runner is removed from GitHub's list
    DELETE /sessions/{id}        -> 204   runner offline, still registered (as the real
                                          runner leaves it: deleting it is the operator's job)

A runner credential answers 401 once its runner is deleted (GitHub revokes it).  An idle
listener that has not polled for ``listener_timeout`` seconds is offline, as GitHub
marks a runner whose process died.  A job in progress whose lock was not renewed for
``lost_contact_seconds`` fails, and its runner is offline and idle (see
`testworld.fakegithub`).  These requests are not GitHub REST calls: they
are not in the REST request log, rate limited or faulted; they have a log of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from urllib.parse import parse_qsl

from testworld.fakegithub.state import SERVICE_PATH, GitHubState, ListenerError, ListenerRecord

__all__ = ["SERVICE_PATH", "answer"]

Reply = tuple[int, str]
_Handler = Callable[[GitHubState, "re.Match[str]", str, dict[str, str], Mapping[str, str]], Reply]


def _lines(**values: object) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def _flag(form: Mapping[str, str], name: str) -> bool:
    return form.get(name, "0").strip().lower() in ("1", "true", "yes")


def _register(
    fake: GitHubState, _m: re.Match[str], cred: str, form: dict[str, str], _q: Mapping[str, str]
) -> Reply:
    name = form.get("name", "").strip()
    labels = [label.strip() for label in form.get("labels", "").split(",") if label.strip()]
    runner_id, credential = fake.listener_register(
        cred,
        name,
        labels,
        ephemeral=_flag(form, "ephemeral"),
        replace=_flag(form, "replace"),
        runner_group=form.get("runner_group", "").strip(),
        version=form.get("version", "").strip(),
    )
    return 201, _lines(runner_id=runner_id, runner_name=name, credential=credential)


def _open(
    fake: GitHubState, _m: re.Match[str], cred: str, form: dict[str, str], _q: Mapping[str, str]
) -> Reply:
    return 201, _lines(session_id=fake.listener_open_session(cred, form.get("version", "").strip()))


def _close(
    fake: GitHubState, m: re.Match[str], cred: str, _f: dict[str, str], _q: Mapping[str, str]
) -> Reply:
    fake.listener_close_session(cred, m["session"])
    return 204, ""


def _poll(
    fake: GitHubState, m: re.Match[str], cred: str, _f: dict[str, str], query: Mapping[str, str]
) -> Reply:
    try:
        wait = float(query.get("wait", "20"))
    except ValueError:
        raise ValueError(f"wait must be a number of seconds, got {query.get('wait')!r}") from None
    job = fake.listener_poll(cred, m["session"], wait)
    if job is None:
        return 204, ""
    steps = {} if job.script is None else {"script": job.script}
    return 200, _lines(
        job_id=job.id,
        run_id=job.run_id,
        repository=job.repo.name,
        labels=",".join(job.labels),
        duration_s=f"{job.duration_s:g}",
        **steps,
    )


def _started(
    fake: GitHubState, m: re.Match[str], cred: str, _f: dict[str, str], _q: Mapping[str, str]
) -> Reply:
    fake.listener_job_started(cred, int(m["job"]))
    return 204, ""


def _renew(
    fake: GitHubState, _m: re.Match[str], cred: str, form: dict[str, str], _q: Mapping[str, str]
) -> Reply:
    job_id = form.get("job_id", "")
    if not job_id.isdigit():
        raise ValueError(f"job_id must be a job id, got {job_id!r}")
    locked_until, renew_s = fake.listener_renew_job(cred, int(job_id))
    stamp = datetime.fromtimestamp(locked_until, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return 200, _lines(locked_until=stamp, renew_s=f"{renew_s:g}")


def _completed(
    fake: GitHubState, m: re.Match[str], cred: str, form: dict[str, str], _q: Mapping[str, str]
) -> Reply:
    fake.listener_job_completed(
        cred, int(m["job"]), form.get("conclusion", "success"), form.get("summary", "")
    )
    return 204, ""


_ROUTES: list[tuple[str, re.Pattern[str], _Handler]] = [
    ("POST", re.compile(r"/runners"), _register),
    ("POST", re.compile(r"/sessions"), _open),
    ("DELETE", re.compile(r"/sessions/(?P<session>[^/]+)"), _close),
    ("GET", re.compile(r"/sessions/(?P<session>[^/]+)/job"), _poll),
    ("POST", re.compile(r"/jobs/(?P<job>\d+)/started"), _started),
    ("POST", re.compile(r"/renewjob"), _renew),
    ("POST", re.compile(r"/jobs/(?P<job>\d+)/completed"), _completed),
]


def answer(
    fake: GitHubState, method: str, path: str, *, query: str, authorization: str | None, body: bytes
) -> Reply:
    """Serve one request of the listener protocol; ``path`` is below `SERVICE_PATH`.

    Every request lands in the fake's listener log (`GitHubState.listener_requests`).
    """
    started = fake.clock()
    scheme, _, credential = (authorization or "").strip().partition(" ")
    credential = credential.strip()
    runner = fake.runner_of(credential) if credential else None
    status, text = _answer(fake, method, path, query=query, scheme=scheme, credential=credential, body=body)
    fake.record_listener(ListenerRecord(method, path, status, runner, started, fake.clock()))
    return status, text


def _answer(
    fake: GitHubState, method: str, path: str, *, query: str, scheme: str, credential: str, body: bytes
) -> Reply:
    if scheme.lower() != "bearer" or not credential:
        return 401, _lines(message="Bearer credential required")
    form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    for route_method, pattern, handler in _ROUTES:
        found = pattern.fullmatch(path)
        if found and route_method == method:
            try:
                return handler(fake, found, credential, form, dict(parse_qsl(query)))
            except ListenerError as exc:
                return exc.status, _lines(message=str(exc))
            except ValueError as exc:
                return 400, _lines(message=str(exc))
    return 404, _lines(message=f"no endpoint {method} {SERVICE_PATH}{path}")
