"""The Actions service's runner scale set API, as the fake GitHub serves it.

What the operator's scale set client (``runnerpool.scaleset``) uses, with the shapes of
``types.go`` and the status codes of ``client.go``/``session_client.go`` (actions/scaleset at
6ce0259; session conflicts as ARC's cmd/ghalistener handles them at c6e4c94a; no code copied).
Paths are below the service URL that ``POST {api}/actions/runner-registration`` hands out
(``{web}/_actions``, the one config.sh gets); the admin token is that answer's ``token``, a JWT
that expires with the registration token it was traded for (``state.runner_registration``)::

    GET    _apis/runtime/runnergroups/?groupName=       {"count", "value": [RunnerGroup]}
    GET    _apis/runtime/runnerscalesets?runnerGroupId=&name=   {"count", "value"}
    POST   _apis/runtime/runnerscalesets                200 RunnerScaleSet (409 name taken)
    GET|PATCH|DELETE _apis/runtime/runnerscalesets/{id} 200 | 200 | 204; 404 when gone
    POST   .../{id}/generatejitconfig {"name","workFolder"}  200; 409 AgentExistsException
    POST   .../{id}/sessions {"ownerName"}   200 session; 409 TaskAgentSessionConflictException
           while another session is live (polled within ``session_timeout``)
    PATCH|DELETE .../{id}/sessions/{sessionId}          200 new queue token | 204
    GET    .../{id}/messages?sessionId=[&lastMessageId=] queue token; 200 the first message not
           acknowledged with an id above lastMessageId, else held ``poll_wait`` s then 202;
           401 when the queue token expired (``queue_token_lifetime``)
    DELETE .../{id}/messages/{messageId}?sessionId=     queue token; 204 (acknowledged)
    POST   .../{id}/acquirejobs [ids]                    queue token; {"count", "value"}
    GET    _apis/distributedtask/pools/0/agents/{id} | ?agentName=   404 AgentNotFoundException
    DELETE _apis/distributedtask/pools/0/agents/{id}     204; 409 JobStillRunningException

Admin calls need ``?api-version=`` and ``Authorization: Bearer <admin token>`` (401 otherwise,
or once it expired by the fake's clock or ``revoke_admin_tokens`` revoked it). Every message
and session answer carries the statistics, computed when answered. Job messages (at most 50
per message) are added by the control methods (``offer_job``, ``start_job``, ``complete_job``)
and by acquiring; the queue keeps a message until it is acknowledged, so an unacknowledged one
is delivered again. Faults set with ``fail_next`` (a substring of these paths) apply here too.

``reassign`` plays an assignment GitHub cancels because no runner took the job (``JobCompleted``
``canceled``, then ``JobAvailable`` again, up to 3 times).

Runners. ``generatejitconfig`` makes a runner of the fake itself (`GitHubState`), so the REST
listing (``GET .../actions/runners``, its ETags included) shows it, as GitHub lists scale set
runners: ephemeral, in the scale set's runner group, labelled with the scale set's labels
(its name first; ``read-only``/``custom`` for ``System``/``User``; none of config.sh's
``self-hosted``/OS labels: GitHub applies the scale set's labels to its runners,
actions/scaleset#75), offline until its config runs, online after and busy while it runs a
job. The config has the format of REST ``generate-jitconfig``'s, as on GitHub, so either runs
it: a pod stand-in (`use_jit_config`, `testworld.simulator`) or a runner process
(testworld/runner_image's ``run.sh --jitconfig``). REST ``DELETE .../actions/runners/{id}`` and
``DELETE _apis/distributedtask/pools/0/agents/{id}`` remove the same runner; a busy one is
refused by each in its own words (REST 422 "is still running a job", the service 409
``JobStillRunningException``, kept as the fake answered them before).

Jobs. An acquired job goes to an online idle runner of its scale set, oldest job first. A
stand-in's runner takes it at once (``JobStarted``), runs ``duration_s`` of the fake's clock or
until `complete_job` (``JobCompleted``), and is removed (`on_runner_finished` hooks hear of
it: the stand-in's pod ends). A runner process is offered it as a workflow job of the
repository through its listener (`GitHubState.offer_to_runner`) and runs it itself (``script``
or ``duration_s``); its start and completion become ``JobStarted``/``JobCompleted``, and lost
contact completes it ``failed``. `GitHubState.reset` forgets the scale sets too. Not here:
jobs a stand-in plays are not REST workflow jobs (no ``GET .../actions/jobs/{id}`` or
``workflow_job`` webhook for them), and a runner process whose runner goes offline before it
started its job gives the job back to the scale set only at the next tick (a poll).
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from testworld.fakegithub.appjwt import jwt_claims
from testworld.fakegithub.jobs import Bases, Conclusion, Job
from testworld.fakegithub.state import (
    SERVICE_PATH,
    GitHubState,
    RegistrationRejectedError,
    _Runner,  # the fake's runner record
)

__all__ = ["PATH", "ScaleSetService", "actions_exception", "answer", "service"]

#: Requests below this path are the scale set API's (the runner protocol has no ``_apis``).
PATH = SERVICE_PATH + "/_apis/"
MAX_JOBS_PER_MESSAGE = 50
#: A job whose assignment was cancelled (no runner took it) is offered again, up to 3 times.
MAX_ASSIGNMENTS = 3
_SETS = r"/_apis/runtime/runnerscalesets"
_AGENTS = r"/_apis/distributedtask/pools/0/agents"

Reply = tuple[int, Any, dict[str, str]]


def actions_exception(type_key: str, message: str) -> dict[str, Any]:
    """The service's error body: a serialised .NET exception (clients match ``typeName``); the
    client's ``responses`` tests answer with it too."""
    return {
        "$id": "1",
        "innerException": None,
        "message": message,
        "typeName": f"GitHub.DistributedTask.WebApi.{type_key}, GitHub.DistributedTask.WebApi",
        "typeKey": type_key,
        "errorCode": 0,
        "eventId": 3000,
    }


class _Refused(Exception):  # noqa: N818 - an answer, not a bug
    def __init__(self, status: int, payload: Any = None) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload


@dataclass
class _ScaleSet:
    id: int
    scope_key: tuple[str, str]
    name: str
    group_id: int
    group_name: str
    labels: list[dict[str, str]]
    disable_update: bool
    created_on: str


@dataclass
class _Session:
    id: str
    owner: str
    scale_set_id: int
    token: str
    token_expires: float
    last_seen: float


@dataclass
class _Message:
    id: int
    scale_set_id: int
    jobs: list[dict[str, Any]]
    delivered: bool = False


@dataclass
class _Job:
    request_id: int
    scale_set_id: int
    fields: dict[str, Any]
    #: available -> assigned (acquired) -> running -> completed
    state: str = "available"
    runner_id: int | None = None
    runner_name: str = ""
    #: How often it was assigned and cancelled because no runner took it.
    assignments: int = 0
    #: How long it runs once a runner took it; ``None``: until the test calls ``complete_job``.
    duration_s: float | None = None
    started_at: float | None = None
    #: ``JobCompleted``'s result once completed.
    result: str = ""
    #: The job's steps for a runner process (one line of shell), as `GitHubState.queue_job`'s.
    script: str | None = None
    #: The workflow job a runner process was offered (the fake's id): the process runs it.
    workflow_job: int | None = None


@dataclass
class ScaleSetService:
    """The scale sets of one fake GitHub; tests drive jobs through the control methods."""

    fake: GitHubState
    #: How long an empty poll is held before 202 (GitHub: about 50 s; tests: a fraction).
    poll_wait: float = 50.0
    queue_token_lifetime: float = 3600.0
    #: A session not polled for this long no longer blocks a new one (its owner died).
    session_timeout: float = 120.0
    #: False: a GHES before 3.18 (or 3.18-3.20 with custom scale-set labels off), which keeps only
    #: the scale set's own name of the labels it is given, without an error.
    custom_labels: bool = True
    #: On the fake's own lock: one lock for runners and scale sets, so a test may ask either while
    #: holding the other (``fake.wait_for(lambda: fake.scale_sets.completed() == 3)``).
    _cond: threading.Condition = field(init=False)
    _sets: dict[int, _ScaleSet] = field(default_factory=dict)
    _sessions: dict[str, _Session] = field(default_factory=dict)
    _messages: list[_Message] = field(default_factory=list)
    _jobs: dict[int, _Job] = field(default_factory=dict)
    _ids: Callable[[], int] = field(default_factory=lambda: itertools.count(1).__next__)
    #: Called with a runner's id when its job completed (it is removed then): a pod stand-in ends.
    _finished_hooks: list[Callable[[int], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._cond = threading.Condition(self.fake._lock)
        #: Workflow job id -> request id of the scale set jobs runner processes were offered.
        self._offered: dict[int, int] = {}
        self.fake._job_hooks.append(self._follow)
        self.fake._poll_hooks.append(self._runner_polls)
        #: The jobs not completed (what ticks and statistics look at), by request id.
        self._active: dict[int, _Job] = {}
        #: Scale set id -> how many of its message polls are held right now.
        self._held: dict[int, int] = {}
        self.fake._release_hooks.append(self._cond.notify_all)  # held polls end on `stop`
        #: Admin tokens seen on admin calls, and those ``revoke_admin_tokens`` revoked.
        self._admin_used: set[str] = set()
        self._revoked: set[str] = set()
        #: (method, path, status) of every call answered, oldest first.
        self._answers: list[tuple[str, str, int]] = []

    def reset(self) -> None:
        """Forget scale sets, sessions, messages and jobs (`GitHubState.reset` calls it; the
        runners are the fake's and go with its reset)."""
        with self._cond:
            for table in (self._sets, self._sessions, self._jobs, self._active, self._offered):
                table.clear()
            self._messages.clear()
            self._answers.clear()
            self._cond.notify_all()

    # -- control: what GitHub and runners do on their own ---------------------------------------

    def scale_set(self, name: str) -> dict[str, Any] | None:
        with self._cond:
            found = next((s for s in self._sets.values() if s.name == name), None)
            return None if found is None else self._set_json(found)

    def scale_sets(self) -> list[dict[str, Any]]:
        """Every scale set, as ``GET _apis/runtime/runnerscalesets/{id}`` shows it, oldest first."""
        with self._cond:
            return [self._set_json(s) for s in self._sets.values()]

    def scale_set_id(self, scale_set: int | str) -> int:
        """The id of a scale set given by id or by name (a name must be unique in the fake)."""
        with self._cond:
            return self._resolve(scale_set).id

    def offer_job(
        self,
        scale_set: int | str,
        *,
        repository: str = "app",
        labels: tuple[str, ...] = (),
        duration_s: float | None = None,
        script: str | None = None,
    ) -> int:
        """A workflow job that targets the scale set (by id or name): ``JobAvailable``; returns
        its request id. Once the listener acquired it, an online idle runner of the scale set
        takes it (``JobStarted``); it then runs ``duration_s`` seconds of the fake's clock, or
        until `complete_job` when ``None``. A runner process (testworld/runner_image, a session
        of its own) is offered it as a workflow job instead and runs it itself: ``script`` (one
        line of shell) or ``duration_s`` seconds (0 when ``None``), as `GitHubState.queue_job`'s."""
        if duration_s is not None and duration_s < 0:
            raise ValueError(f"duration_s must not be negative, got {duration_s}")
        with self._cond:
            found = self._resolve(scale_set)
            request_id = 1000 + self._ids()
            owner = found.scope_key[1].split("/")[0]
            job = _Job(
                request_id,
                found.id,
                {
                    "runnerRequestId": request_id,
                    "repositoryName": repository,
                    "ownerName": owner,
                    "jobId": str(uuid.uuid4()),
                    "jobWorkflowRef": f"{owner}/{repository}/.github/workflows/ci.yml@refs/heads/main",
                    "jobDisplayName": "build",
                    "workflowRunId": request_id * 10,
                    "eventName": "push",
                    "requestLabels": list(labels or (found.name,)),
                    "queueTime": _stamp(self.fake.clock()),
                },
                duration_s=duration_s,
                script=script,
            )
            self._jobs[request_id] = self._active[request_id] = job
            self._post(
                found.id,
                {**job.fields, "messageType": "JobAvailable", "acquireJobUrl": self._acquire_url(found.id)},
            )
            return request_id

    def start_job(self, request_id: int, runner_name: str) -> None:
        """The scale set's runner ``runner_name`` took the (acquired) job: ``JobStarted``. A
        runner still offline came online for it (its config ran)."""
        with self._cond, self.fake._lock:
            job = self._jobs[request_id]
            runner = next((r for r in self._members(job.scale_set_id) if r.name == runner_name), None)
            if runner is None:
                raise LookupError(f"no runner {runner_name!r} in scale set {job.scale_set_id}")
            if job.state != "assigned" or runner.busy:
                raise ValueError(f"job {request_id} is {job.state}; runner busy: {runner.busy}")
            runner.status, runner.jit_used = "online", True
            self._start(job, runner)

    def complete_job(self, request_id: int, result: str = "succeeded") -> None:
        """The job ended: ``JobCompleted``; its (ephemeral) runner is removed, as GitHub does."""
        with self._cond:
            job = self._jobs[request_id]
            workflow_job = self.fake._jobs.get(job.workflow_job or 0)
            if workflow_job is not None and workflow_job.status != "completed":
                # A runner process's job: GitHub ends it (cancelled, failed...) for the process.
                self.fake._finish(workflow_job, _CONCLUSIONS.get(result, "failure"))
                self.fake._notify()
            else:
                self._complete(job, result)

    def reassign(self, request_id: int) -> None:
        """No runner took the assigned job in time: GitHub cancels the assignment
        (``JobCompleted`` ``canceled``) and offers the job again (``JobAvailable``), up to
        `MAX_ASSIGNMENTS` times; after that the cancellation is final."""
        with self._cond:
            job = self._jobs[request_id]
            if job.state != "assigned":
                raise ValueError(f"job {request_id} is {job.state}, not assigned")
            cancelled = {**job.fields, "messageType": "JobCompleted", "result": "canceled", "runnerId": 0}
            self._post(job.scale_set_id, {**cancelled, "runnerName": ""})
            job.assignments += 1
            if job.assignments >= MAX_ASSIGNMENTS:
                self._done(job, "canceled")
                return
            job.state = "available"
            self._post(
                job.scale_set_id,
                {
                    **job.fields,
                    "messageType": "JobAvailable",
                    "acquireJobUrl": self._acquire_url(job.scale_set_id),
                },
            )

    def runners(self, scale_set: int | str) -> list[dict[str, Any]]:
        """The scale set's runners: ``runnerId``, ``runnerName``, ``busy``, ``status``."""
        with self._cond, self.fake._lock:
            self._tick()
            return [
                _who(r) | {"busy": r.busy, "status": r.status}
                for r in self._members(self._resolve(scale_set).id)
            ]

    def jobs(self, scale_set: int | str | None = None) -> list[dict[str, Any]]:
        """The scale set's jobs (every one without ``scale_set``), oldest first: ``requestId``,
        ``scaleSetId``, ``state`` (available, assigned, running, completed), ``runnerName``,
        ``result``."""
        with self._cond:
            self._tick()
            wanted = None if scale_set is None else self._resolve(scale_set).id
            return [
                {
                    "requestId": j.request_id,
                    "scaleSetId": j.scale_set_id,
                    "state": j.state,
                    "runnerName": j.runner_name,
                    "result": j.result,
                }
                for j in self._jobs.values()
                if wanted in (None, j.scale_set_id)
            ]

    def completed(self, scale_set: int | str | None = None, result: str = "succeeded") -> int:
        """How many of the scale set's jobs (every one's without it) completed with ``result``."""
        with self._cond:
            self._tick()
            wanted = None if scale_set is None else self._resolve(scale_set).id
            return sum(
                j.state == "completed" and j.result == result and wanted in (None, j.scale_set_id)
                for j in self._jobs.values()
            )

    def wait_completed(
        self, n: int, scale_set: int | str | None = None, *, timeout: float = 30.0, result: str = "succeeded"
    ) -> bool:
        """Block until at least ``n`` jobs (of ``scale_set``) completed with ``result``; False on
        timeout. Jobs whose ``duration_s`` ran out complete on the way."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.completed(scale_set, result) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, self._next_due(), 0.2))
            return True

    def use_jit_config(self, encoded: str) -> int:
        """A runner pod's stand-in runs ``run.sh --jitconfig <encoded>``: the runner is online and
        takes a job assigned to its scale set (see `GitHubState.run_jit_config`, which refuses a
        config used already or whose runner was deleted). Works for a REST JIT config too.
        Returns the runner's id."""
        with self._cond:
            runner_id = self.fake.run_jit_config(encoded)
            self._tick()
            self._cond.notify_all()
            return runner_id

    def runner_stopped(self, runner_id: int) -> None:
        """A stand-in's runner process went (its pod was deleted): an idle runner is offline and
        takes no more jobs, as GitHub shows a runner whose listener stopped; it stays registered
        until deleted. A busy one keeps its job (the stand-in plays it to its end)."""
        with self._cond:
            runner = self.fake._runners.get(runner_id)
            if runner is not None and runner.scale_set_id is not None and not runner.busy:
                runner.status = "offline"
                self.fake._notify()

    def on_runner_finished(self, hook: Callable[[int], None]) -> None:
        """Call ``hook(runner_id)`` whenever a scale set runner's job completed and the runner was
        removed: its process exits then. It runs under the service's lock and must not block."""
        with self._cond:
            self._finished_hooks.append(hook)

    def remove_runner_finished(self, hook: Callable[[int], None]) -> None:
        with self._cond:
            if hook in self._finished_hooks:
                self._finished_hooks.remove(hook)

    def polling(self, scale_set: int | str) -> int:
        """How many long polls of the scale set's message queue the fake holds right now."""
        with self._cond:
            return self._held.get(self._resolve(scale_set).id, 0)

    def sessions(self, scale_set: int | str) -> list[str]:
        """The owners of the scale set's message sessions (at most one)."""
        with self._cond:
            wanted = scale_set if isinstance(scale_set, int) else self._resolve(scale_set).id
            return [s.owner for s in self._sessions.values() if s.scale_set_id == wanted]

    def expire_queue_tokens(self) -> None:
        """Every queue token expires now (the next queue call answers 401)."""
        with self._cond:
            for session in self._sessions.values():
                session.token_expires = self.fake.clock()

    def revoke_admin_tokens(self) -> None:
        """Every admin token used so far is refused from now on (401), before its ``exp``: GitHub
        revokes them; a client trades its registration token for a new one."""
        with self._cond:
            self._revoked |= self._admin_used

    # -- the HTTP side -------------------------------------------------------------------------

    def answered(self, method: str | None, path: str, status: int) -> int:
        """How many calls (``method``, None: any) to a path containing ``path`` were answered
        ``status`` (the REST request log, ``FakeGitHub.requests``, does not hold these)."""
        with self._cond:
            return sum(1 for m, p, s in self._answers if method in (None, m) and path in p and s == status)

    def answer(self, method: str, path: str, *, query: str, authorization: str | None, body: bytes) -> Reply:
        reply = self._answer(method, path, query=query, authorization=authorization, body=body)
        with self._cond:
            self._answers.append((method, path, reply[0]))
        return reply

    def _answer(self, method: str, path: str, *, query: str, authorization: str | None, body: bytes) -> Reply:
        fault = self.fake.take_fault(method, path)
        if fault is not None and fault.kind == "fail":
            return fault.status, actions_exception("VssServiceException", "injected failure"), {}
        params = dict(parse_qsl(query))
        try:
            data: Any = json.loads(body) if body.strip() else None
        except ValueError:
            return 400, actions_exception("ArgumentException", "the body is not JSON"), {}
        route = path.removeprefix(SERVICE_PATH)
        try:
            for pattern, verb, handler, auth in _ROUTES:
                found = re.fullmatch(pattern, route)
                if found and verb == method:
                    return (
                        200,
                        handler(
                            self,
                            _Call(found, params, data, self._authorize(auth, authorization, found, params)),
                        ),
                        {},
                    )
        except _Done as done:
            return done.status, done.payload, {}
        except _Refused as refused:
            return refused.status, refused.payload, {}
        return 404, actions_exception("NotFoundException", f"no endpoint {method} {path}"), {}

    def _authorize(
        self, auth: str, authorization: str | None, found: re.Match[str], params: dict[str, str]
    ) -> Any:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(401)
        token = token.strip()
        now = self.fake.clock()
        if auth == "queue":
            with self._cond:
                set_id = int(found["id"])
                session = self._sessions.get(params.get("sessionId", "")) or next(
                    (s for s in self._sessions.values() if s.token == token), None
                )
                if session is None or session.token != token or session.scale_set_id != set_id:
                    raise _Refused(401)
                if now >= session.token_expires:
                    raise _Refused(401)
                return session
        if params.get("api-version") is None:
            raise _Refused(400, actions_exception("VssInvalidApiVersionException", "api-version is required"))
        claims = jwt_claims(token)
        tenants: dict[str, str] = self.fake._tenants  # the fake's own records
        issued = self.fake._registration_tokens.get(tenants.get(token, ""))
        if claims is None or issued is None or now >= float(claims.get("exp", 0)):
            raise _Refused(401)
        with self._cond:
            if token in self._revoked:
                raise _Refused(401)
            self._admin_used.add(token)
        return issued.scope

    # -- handlers ------------------------------------------------------------------------------

    def _groups(self, call: _Call) -> Any:
        wanted = call.params.get("groupName", "").lower()
        groups = self.fake.api_runner_groups(call.auth, Bases("", ""))
        value = [
            {"id": g["id"], "name": g["name"], "size": 0, "isDefaultGroup": bool(g["default"])}
            for g in groups
            if g["name"].lower() == wanted
        ]
        return {"count": len(value), "value": value}

    def _find_sets(self, call: _Call) -> Any:
        with self._cond:
            group, name = int(call.params.get("runnerGroupId", "0")), call.params.get("name")
            value = [
                self._set_json(s)
                for s in self._sets.values()
                if s.scope_key == call.auth.key and s.group_id == group and (name is None or s.name == name)
            ]
            return {"count": len(value), "value": value}

    def _create_set(self, call: _Call) -> Any:
        data = call.data if isinstance(call.data, dict) else {}
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise _Refused(400, actions_exception("ArgumentException", "name is required"))
        group_id = int(data.get("runnerGroupId") or 1)
        groups = {g["id"]: g["name"] for g in self.fake.api_runner_groups(call.auth, Bases("", ""))}
        if group_id not in groups:
            raise _Refused(
                404, actions_exception("RunnerGroupNotFoundException", f"no runner group {group_id}")
            )
        with self._cond:
            if any(
                s.scope_key == call.auth.key and s.group_id == group_id and s.name == name
                for s in self._sets.values()
            ):
                raise _Refused(409, actions_exception("RunnerScaleSetExistsException", f"{name} exists"))
            made = _ScaleSet(
                self._ids(),
                call.auth.key,
                name,
                group_id,
                groups[group_id],
                self._kept_labels(data, name),
                bool((data.get("RunnerSetting") or {}).get("disableUpdate", False)),
                _stamp(self.fake.clock()),
            )
            self._sets[made.id] = made
            return self._set_json(made)

    def _kept_labels(self, data: dict[str, Any], name: str) -> list[dict[str, str]]:
        given = _labels(data, name)
        return given if self.custom_labels else [label for label in given if label["name"] == name]

    def _get_set(self, call: _Call) -> Any:
        with self._cond:
            return self._set_json(self._owned(call))

    def _update_set(self, call: _Call) -> Any:
        data = call.data if isinstance(call.data, dict) else {}
        with self._cond:
            found = self._owned(call)
            found.name = str(data.get("name") or found.name)
            if data.get("labels"):
                found.labels = self._kept_labels(data, found.name)
            if "RunnerSetting" in data:
                found.disable_update = bool((data["RunnerSetting"] or {}).get("disableUpdate", False))
            return self._set_json(found)

    def _delete_set(self, call: _Call) -> Any:
        with self._cond:
            found = self._owned(call)
            del self._sets[found.id]
            gone = found.id
            self._sessions = {k: v for k, v in self._sessions.items() if v.scale_set_id != gone}
            self._jobs = {k: v for k, v in self._jobs.items() if v.scale_set_id != gone}
            self._active = {k: v for k, v in self._active.items() if v.scale_set_id != gone}
            with self.fake._lock:
                for runner in self._members(gone):
                    self.fake._forget_runner(runner)
                self.fake._notify()
            self._messages[:] = [m for m in self._messages if m.scale_set_id != found.id]
            self._cond.notify_all()
        raise _Done(204)

    def _jit(self, call: _Call) -> Any:
        data = call.data if isinstance(call.data, dict) else {}
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise _Refused(400, actions_exception("ArgumentException", "name is required"))
        with self._cond:
            found = self._owned(call)
            try:
                runner_id, encoded = self.fake.scale_set_jit_runner(
                    call.auth,
                    name=name,
                    labels=_runner_labels(found),
                    runner_group_id=found.group_id,
                    scale_set_id=found.id,
                    work_folder=str(data.get("workFolder") or "_work"),
                )
            except RegistrationRejectedError:
                raise _Refused(
                    409, actions_exception("AgentExistsException", f"Agent exists with name {name}")
                ) from None
            return {
                "runner": {"id": runner_id, "name": name, "runnerScaleSetId": found.id},
                "encodedJITConfig": encoded,
            }

    def _open_session(self, call: _Call) -> Any:
        data = call.data if isinstance(call.data, dict) else {}
        now = self.fake.clock()
        with self._cond:
            found = self._owned(call)
            for other in self._sessions.values():
                if other.scale_set_id == found.id and now - other.last_seen < self.session_timeout:
                    raise _Refused(
                        409,
                        actions_exception(
                            "TaskAgentSessionConflictException",
                            f"The session for this agent already exists (owner {other.owner}).",
                        ),
                    )
            for key in [k for k, s in self._sessions.items() if s.scale_set_id == found.id]:
                del self._sessions[key]
            session = _Session(str(uuid.uuid4()), str(data.get("ownerName", "")), found.id, "", 0.0, now)
            self._new_token(session)
            self._sessions[session.id] = session
            return self._session_json(session)

    def _refresh_session(self, call: _Call) -> Any:
        with self._cond:
            session = self._session_of(call)
            self._new_token(session)
            return self._session_json(session)

    def _close_session(self, call: _Call) -> Any:
        with self._cond:
            del self._sessions[self._session_of(call).id]
            self._cond.notify_all()
        raise _Done(204)

    def _poll(self, call: _Call) -> Any:
        session: _Session = call.auth
        try:
            last = int(call.params.get("lastMessageId", "0"))
        except ValueError:
            last = 0
        deadline = time.monotonic() + self.poll_wait
        with self._cond:
            generation = self.fake._generation
            self._held[session.scale_set_id] = self._held.get(session.scale_set_id, 0) + 1
            try:
                return self._hold(session, last, deadline, generation)
            finally:
                self._held[session.scale_set_id] -= 1

    def _hold(self, session: _Session, last: int, deadline: float, generation: int) -> Any:
        while True:
            session.last_seen = self.fake.clock()
            self._tick()
            if session.id not in self._sessions:
                raise _Refused(
                    404, actions_exception("TaskAgentSessionExpiredException", "the session ended")
                )
            ready = next(
                (m for m in self._messages if m.scale_set_id == session.scale_set_id and m.id > last),
                None,
            )
            if ready is not None:
                ready.delivered = True
                return {
                    "messageId": ready.id,
                    "messageType": "RunnerScaleSetJobMessages",
                    "body": json.dumps(ready.jobs),
                    "statistics": self._statistics(session.scale_set_id),
                }
            left = deadline - time.monotonic()
            if left <= 0 or generation != self.fake._generation:
                raise _Done(202)  # (the fake stops: let go at once, as a 202)
            self._cond.wait(min(left, self._next_due()))

    def _acknowledge(self, call: _Call) -> Any:
        message_id = int(call.match["message"])
        with self._cond:
            self._messages[:] = [m for m in self._messages if m.id != message_id]
        raise _Done(204)

    def _acquire(self, call: _Call) -> Any:
        session: _Session = call.auth
        wanted = call.data if isinstance(call.data, list) else []
        with self._cond:
            acquired = []
            for request_id in wanted:
                job = self._jobs.get(request_id) if isinstance(request_id, int) else None
                if job is not None and job.scale_set_id == session.scale_set_id and job.state == "available":
                    job.state = "assigned"
                    acquired.append(request_id)
                    self._post(job.scale_set_id, {**job.fields, "messageType": "JobAssigned"})
            self._tick()  # an online idle runner of the scale set takes it at once
            return {"count": len(acquired), "value": acquired}

    def _get_runner(self, call: _Call) -> Any:
        with self._cond, self.fake._lock:
            runner = self._runner_of(call)
            return _who(runner) | {"runnerScaleSetId": runner.scale_set_id or 0}

    def _find_runner(self, call: _Call) -> Any:
        name = call.params.get("agentName", "").lower()
        with self._cond, self.fake._lock:
            value = [
                {"id": r.id, "name": r.name, "runnerScaleSetId": r.scale_set_id or 0}
                for r in self.fake._runners.values()
                if r.name.lower() == name and r.scope.key == call.auth.key
            ]
            return {"count": len(value), "value": value}

    def _remove_runner(self, call: _Call) -> Any:
        """The same runner as REST's ``DELETE .../actions/runners/{id}`` removes (GitHub's runner
        id is the agent id); a busy one is refused here with the service's 409."""
        with self._cond, self.fake._lock:
            runner = self._runner_of(call)
            if runner.busy:
                raise _Refused(
                    409, actions_exception("JobStillRunningException", f"{runner.name} is running a job")
                )
            self.fake._forget_runner(runner)
            self.fake._notify()
            self._cond.notify_all()
        raise _Done(204)

    # -- helpers (called with the lock held) ---------------------------------------------------

    def _acquire_url(self, scale_set_id: int) -> str:
        return f"{self._web()}{SERVICE_PATH}{_SETS}/{scale_set_id}/acquirejobs"

    def _web(self) -> str:
        return self.fake._bases().web

    def _owned(self, call: _Call) -> _ScaleSet:
        found = self._sets.get(int(call.match["id"]))
        if found is None or found.scope_key != call.auth.key:
            raise _Refused(404, actions_exception("RunnerScaleSetNotFoundException", "no such scale set"))
        return found

    def _session_of(self, call: _Call) -> _Session:
        found = self._owned(call)
        session = self._sessions.get(call.match["session"])
        if session is None or session.scale_set_id != found.id:
            raise _Refused(404, actions_exception("TaskAgentSessionExpiredException", "no such session"))
        return session

    def _runner_of(self, call: _Call) -> _Runner:
        runner = self.fake._runners.get(int(call.match["runner"]))
        if runner is None or runner.scope.key != call.auth.key:
            raise _Refused(404, actions_exception("AgentNotFoundException", "No agent found"))
        return runner

    def _resolve(self, scale_set: int | str) -> _ScaleSet:
        if isinstance(scale_set, int):
            found = self._sets.get(scale_set)
            if found is None:
                raise LookupError(f"no scale set {scale_set}")
            return found
        named = [s for s in self._sets.values() if s.name == scale_set]
        if len(named) != 1:
            raise LookupError(f"{len(named)} scale sets are named {scale_set!r}: give the id")
        return named[0]

    def _members(self, scale_set_id: int) -> list[_Runner]:
        """The scale set's runners, oldest first (the fake's records: hold its lock)."""
        return [r for r in self.fake._runners.values() if r.scale_set_id == scale_set_id]

    def _tick(self) -> None:
        """Bring the scale sets' jobs up to the clock: jobs whose ``duration_s`` ran out complete,
        assigned jobs go to online idle runners of their scale set (oldest job first)."""
        now = self.fake.clock()
        with self.fake._lock:
            for job in list(self._active.values()):
                due = job.started_at is not None and job.duration_s is not None
                if due and job.state == "running" and now >= (job.started_at or 0) + (job.duration_s or 0):
                    self._complete(job, "succeeded")
            idle: dict[int, list[_Runner]] = {}  # per scale set, found once per tick
            for job in list(self._active.values()):
                if job.state != "assigned" or self._still_offered(job):
                    continue
                if job.scale_set_id not in idle:
                    idle[job.scale_set_id] = [
                        r
                        for r in self._members(job.scale_set_id)
                        if r.status == "online" and not r.busy and r.job_id is None
                    ]
                if not idle[job.scale_set_id]:
                    continue
                runner = idle[job.scale_set_id].pop(0)
                if runner.listener:
                    owner = self._sets[job.scale_set_id].scope_key[1].split("/")[0]
                    job.workflow_job = self.fake.offer_to_runner(
                        runner.id,
                        f"{owner}/{job.fields['repositoryName']}",
                        list(job.fields["requestLabels"]),
                        job.duration_s or 0.0,
                        job.script,
                    )
                    self._offered[job.workflow_job] = job.request_id
                else:
                    self._start(job, runner)

    def _runner_polls(self, runner: _Runner) -> None:
        """A runner process asks for a job (under the fake's lock): a scale set runner is offered
        one its scale set was assigned."""
        if runner.scale_set_id is not None and runner.job_id is None:
            self._tick()

    def _still_offered(self, job: _Job) -> bool:
        """Whether a runner process still holds the job it was offered; a job whose runner went
        (deleted, offline before it started) is withdrawn and may go to another runner."""
        offered = self.fake._jobs.get(job.workflow_job or 0)
        if offered is None:
            return False
        if offered.assigned_to is not None and offered.assigned_to in self.fake._runners:
            return True
        self.fake._jobs.pop(offered.id, None)
        self.fake._open_jobs.pop(offered.id, None)
        self._offered.pop(offered.id, None)
        job.workflow_job = None
        return False

    def _follow(self, workflow_job: Job) -> None:
        """A runner process started or completed the job it was offered (under the fake's lock):
        ``JobStarted``/``JobCompleted`` for its scale set; the runner's removal is the fake's."""
        job = self._jobs.get(self._offered.get(workflow_job.id, 0))
        runner = self.fake._runners.get(workflow_job.runner_id or 0)
        if job is None:
            return
        if workflow_job.status == "in_progress" and job.state == "assigned" and runner is not None:
            job.state, job.runner_id, job.runner_name = "running", runner.id, runner.name
            job.started_at = self.fake.clock()
            self._post(job.scale_set_id, {**job.fields, "messageType": "JobStarted", **_who(runner)})
        elif workflow_job.status == "completed" and job.state != "completed":
            self._done(job, _RESULTS.get(workflow_job.conclusion or "", "failed"))
            job.runner_id = job.runner_id or workflow_job.runner_id
            job.runner_name = job.runner_name or workflow_job.runner_name or ""
            who = {"runnerId": job.runner_id or 0, "runnerName": job.runner_name}
            self._post(
                job.scale_set_id, {**job.fields, "messageType": "JobCompleted", "result": job.result, **who}
            )
            if runner is None or (runner.ephemeral and runner.job_id == workflow_job.id):
                for hook in self._finished_hooks:  # GitHub removes it now (not if contact was lost)
                    hook(job.runner_id or 0)

    def _done(self, job: _Job, result: str) -> None:
        job.state, job.result = "completed", result
        self._active.pop(job.request_id, None)

    def _next_due(self) -> float:
        """Seconds until the next running job's ``duration_s`` runs out (a poll wakes then)."""
        now = self.fake.clock()
        ends = [
            (j.started_at or 0) + (j.duration_s or 0) - now
            for j in self._active.values()
            if j.state == "running" and j.duration_s is not None
        ]
        return max(0.01, min(ends, default=self.poll_wait))

    def _start(self, job: _Job, runner: _Runner) -> None:
        job.state, job.runner_id, job.runner_name = "running", runner.id, runner.name
        job.started_at = self.fake.clock()
        runner.busy = True
        self.fake._notify()
        self._post(job.scale_set_id, {**job.fields, "messageType": "JobStarted", **_who(runner)})

    def _complete(self, job: _Job, result: str) -> None:
        with self.fake._lock:
            runner = self.fake._runners.get(job.runner_id or 0)
            if runner is not None and runner.scale_set_id == job.scale_set_id:
                runner.busy = False
                self.fake._forget_runner(runner)
                self.fake._notify()
                for hook in self._finished_hooks:
                    hook(runner.id)
        self._done(job, result)
        who = {"runnerId": job.runner_id or 0, "runnerName": job.runner_name}
        self._post(job.scale_set_id, {**job.fields, "messageType": "JobCompleted", "result": result, **who})

    def _new_token(self, session: _Session) -> None:
        session.token = secrets.token_urlsafe(24)
        session.token_expires = self.fake.clock() + self.queue_token_lifetime

    def _post(self, scale_set_id: int, job: dict[str, Any]) -> None:
        """Add a job message to the scale set's newest undelivered message, or to a new one."""
        last = next((m for m in reversed(self._messages) if m.scale_set_id == scale_set_id), None)
        if last is None or last.delivered or len(last.jobs) >= MAX_JOBS_PER_MESSAGE:
            last = _Message(self._ids(), scale_set_id, [])
            self._messages.append(last)
        last.jobs.append(job)
        self._cond.notify_all()
        self.fake._notify()  # and `GitHubState.wait_for`'s waiters

    def _statistics(self, scale_set_id: int) -> dict[str, int]:
        jobs = [j for j in self._active.values() if j.scale_set_id == scale_set_id]
        with self.fake._lock:
            runners = self._members(scale_set_id)
        assigned = sum(j.state == "assigned" for j in jobs)
        running = sum(j.state == "running" for j in jobs)
        busy = sum(r.busy for r in runners)
        return {
            "totalAvailableJobs": sum(j.state == "available" for j in jobs),
            "totalAcquiredJobs": assigned,
            "totalAssignedJobs": assigned + running,
            "totalRunningJobs": running,
            "totalRegisteredRunners": len(runners),
            "totalBusyRunners": busy,
            "totalIdleRunners": len(runners) - busy,
        }

    def _set_json(self, found: _ScaleSet) -> dict[str, Any]:
        return {
            "id": found.id,
            "name": found.name,
            "runnerGroupId": found.group_id,
            "runnerGroupName": found.group_name,
            "labels": [dict(label) for label in found.labels],
            "RunnerSetting": {"ephemeral": True, "isElastic": True, "disableUpdate": found.disable_update},
            "createdOn": found.created_on,
            "runnerJitConfigUrl": f"{self._web()}{SERVICE_PATH}{_SETS}/{found.id}/generatejitconfig",
            "statistics": self._statistics(found.id),
        }

    def _session_json(self, session: _Session) -> dict[str, Any]:
        queue = f"{self._web()}{SERVICE_PATH}{_SETS}/{session.scale_set_id}/messages?sessionId={session.id}"
        return {
            "sessionId": session.id,
            "ownerName": session.owner,
            "runnerScaleSet": self._set_json(self._sets[session.scale_set_id]),
            "messageQueueUrl": queue,
            "messageQueueAccessToken": session.token,
            "statistics": self._statistics(session.scale_set_id),
        }


class _Done(Exception):  # noqa: N818 - an answer without a body
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status
        self.payload = None


@dataclass(frozen=True)
class _Call:
    match: re.Match[str]
    params: dict[str, str]
    data: Any
    #: The admin token's scope, or the queue token's session.
    auth: Any


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch))


def _who(runner: _Runner) -> dict[str, Any]:
    return {"runnerId": runner.id, "runnerName": runner.name}


def _runner_labels(found: _ScaleSet) -> list[tuple[str, str]]:
    """A scale set runner's labels in the REST listing: the scale set's name first, then its
    other labels; ``System`` ones are ``read-only`` (applied by GitHub, as config.sh's
    ``self-hosted``), ``User`` ones ``custom`` (the REST label types)."""
    out = [(found.name, "read-only")]
    for label in found.labels:
        if label["name"].lower() != found.name.lower():
            out.append((label["name"], "read-only" if label["type"].lower() == "system" else "custom"))
    return out


def _labels(data: dict[str, Any], name: str) -> list[dict[str, str]]:
    given = data.get("labels") or [{"name": name, "type": "System"}]
    return [{"name": str(label.get("name")), "type": str(label.get("type") or "System")} for label in given]


#: A workflow job's conclusion as a ``JobCompleted`` result, and back.
_RESULTS = {"success": "succeeded", "failure": "failed", "cancelled": "canceled"}
_CONCLUSIONS: dict[str, Conclusion] = {"succeeded": "success", "failed": "failure", "canceled": "cancelled"}

_Handler = Callable[[ScaleSetService, _Call], Any]
_ROUTES: list[tuple[str, str, _Handler, str]] = [
    (r"/_apis/runtime/runnergroups/?", "GET", ScaleSetService._groups, "admin"),
    (_SETS, "GET", ScaleSetService._find_sets, "admin"),
    (_SETS, "POST", ScaleSetService._create_set, "admin"),
    (rf"{_SETS}/(?P<id>\d+)", "GET", ScaleSetService._get_set, "admin"),
    (rf"{_SETS}/(?P<id>\d+)", "PATCH", ScaleSetService._update_set, "admin"),
    (rf"{_SETS}/(?P<id>\d+)", "DELETE", ScaleSetService._delete_set, "admin"),
    (rf"{_SETS}/(?P<id>\d+)/generatejitconfig", "POST", ScaleSetService._jit, "admin"),
    (rf"{_SETS}/(?P<id>\d+)/sessions", "POST", ScaleSetService._open_session, "admin"),
    (rf"{_SETS}/(?P<id>\d+)/sessions/(?P<session>[^/]+)", "PATCH", ScaleSetService._refresh_session, "admin"),
    (rf"{_SETS}/(?P<id>\d+)/sessions/(?P<session>[^/]+)", "DELETE", ScaleSetService._close_session, "admin"),
    (rf"{_SETS}/(?P<id>\d+)/messages", "GET", ScaleSetService._poll, "queue"),
    (rf"{_SETS}/(?P<id>\d+)/messages/(?P<message>\d+)", "DELETE", ScaleSetService._acknowledge, "queue"),
    (rf"{_SETS}/(?P<id>\d+)/acquirejobs", "POST", ScaleSetService._acquire, "queue"),
    (rf"{_AGENTS}/(?P<runner>\d+)", "GET", ScaleSetService._get_runner, "admin"),
    (_AGENTS, "GET", ScaleSetService._find_runner, "admin"),
    (rf"{_AGENTS}/(?P<runner>\d+)", "DELETE", ScaleSetService._remove_runner, "admin"),
]

_SERVICES: weakref.WeakKeyDictionary[GitHubState, ScaleSetService] = weakref.WeakKeyDictionary()
_SERVICES_LOCK = threading.Lock()


def service(fake: GitHubState, **settings: Any) -> ScaleSetService:
    """The fake's scale set service (made on first use); ``settings`` change its fields."""
    with _SERVICES_LOCK:
        found = _SERVICES.get(fake)
        if found is None:
            found = _SERVICES[fake] = ScaleSetService(fake)
            fake.on_reset(found.reset)
    for name, value in settings.items():
        setattr(found, name, value)
    return found


def answer(fake: GitHubState, method: str, target: str, authorization: str | None, body: bytes) -> Reply:
    """Serve one request below `PATH` (``target``: path and query), the server's one hook:
    status, JSON payload (None: no body) and headers."""
    split = urlsplit(target)
    return service(fake).answer(method, split.path, query=split.query, authorization=authorization, body=body)
