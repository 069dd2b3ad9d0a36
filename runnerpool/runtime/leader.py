"""Lease-based leader election on top of ``kubernetes.leaderelection``.

What the client library (kubernetes 37) does, read from its source:

* ``LeaderElection.run()`` loops in ``acquire()`` until it holds the Lease,
  starts ``onstarted_leading`` in a daemon thread, renews every
  ``retry_period``; when renewals fail for ``renew_deadline`` (or
  ``onstarted_leading`` raises) it calls ``onstopped_leading`` and returns.
  It does not stop the ``onstarted_leading`` thread: that is the callback's job.
* Updates go through ``replace`` with the resourceVersion just read, so two
  candidates cannot both win a race.
* A Lease whose ``holderIdentity`` is empty counts as free and is taken at the
  next retry, without waiting for ``leaseDuration``.

What it does not do, and is added here with as little code as possible:

* **Stop.**  ``acquire()`` and ``renew_loop()`` are ``while True`` loops over
  ``time.sleep``; there is no way to end them.  :class:`_StoppableElection`
  overrides just those two methods with the same logic waiting on an event.
* **Release on shutdown** (client-go's ``ReleaseOnCancel``).  Without it a new
  leader waits a full ``lease_duration`` after a clean rollout.
  :meth:`LeaderElector.stop` with ``release=True`` clears ``holderIdentity``
  after ``on_stopped_leading`` has returned, so the successor starts only after
  this replica's work has stopped.
* **An injectable API client, without the generated API.**  ``LeaseLock`` builds
  ``CoordinationV1Api()`` from the global default configuration, and building that class
  cost ~27 ms of the operator's start-up CPU (a tenth of it): ``_LeaseLock`` keeps the
  library's record rules and reads, creates and replaces the Lease as a dict over
  ``runtime.kube`` (the operator's one API path, with its timeout).
* **Errors instead of exit.**  The library's ``Config`` validates with
  ``sys.exit``; that is turned into ``ValueError``.  A transport error (API
  server unreachable) escapes its loops and kills the election thread; here it
  counts as one failed attempt, as in client-go.
* **Ordered callbacks.**  ``onstarted_leading`` runs in a thread nobody
  waits for; ``on_stopped_leading`` here waits until it has returned.
* **Renewal from the last observed Lease** (client-go's fast path).  The
  library's ``try_acquire_or_renew`` GETs the Lease before every attempt, and
  its ``LeaseLock.update`` drops the replaced object, so the resourceVersion it
  holds is always one behind and only the GET makes the next replace succeed:
  one read per renewal (90 per 3 minutes at a 2 s retry period).  Here the lock
  keeps what the server answered to create and replace, and the leader, while
  its own observed lease is still valid, renews with a replace of that copy; only
  when the replace fails (a conflict: someone else wrote the Lease) does it take
  the library's path, which reads the Lease and decides afresh.  No library call
  renews without reading, so this step is written here.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from runnerpool.api_errors import describe, log_failure, one_line_errors_from
from runnerpool.runtime.kube import LEASES, Kube
from runnerpool.runtime.transport import ATTEMPTS
from runnerpool.settings import LeaderElectionSettings

__all__ = ["LeaderElector"]

logger = logging.getLogger(__name__)
# The library's LeaseLock logs "Failed to create lock as <ApiException>": headers and body.
one_line_errors_from("leaderelection", trace_to=logger)


def _noop() -> None:
    return None


class _LeaseLock(LeaseLock):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """The library's LeaseLock on wire-format dicts, keeping the Lease the server returns.

    ``lease_reference`` (set by ``get``, ``create`` and ``update``) then always carries the
    current resourceVersion, so the next replace needs no GET first. The library's own
    ``__init__`` is not called: it builds the generated ``CoordinationV1Api``.
    """

    def __init__(self, kube: Kube, name: str, namespace: str, identity: str) -> None:
        self.kube = kube
        self.name = name
        self.namespace = namespace
        self.identity = str(identity)
        self.lease_reference: dict[str, Any] | None = None

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        try:
            lease = self.kube.get(LEASES, namespace, name)
        except ApiException as exc:
            return False, exc
        self.lease_reference = lease
        return True, self._record(lease.get("spec") or {})

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}}
        try:
            self.lease_reference = self.kube.create(
                LEASES, namespace, body | {"spec": self._spec(election_record)}
            )
        except ApiException as exc:
            logger.info("lease %s/%s not created: %s", namespace, name, describe(exc))
            return False
        return True

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.lease_reference is None:
            return False
        lease = self.lease_reference | {
            "spec": (self.lease_reference.get("spec") or {}) | self._spec(updated_record)
        }
        try:
            self.lease_reference = self.kube.replace(LEASES, namespace, name, lease)
        except ApiException as exc:
            logger.debug("lease %s/%s not replaced: %s", namespace, name, describe(exc))
            return False
        return True

    def _spec(self, record: Any) -> dict[str, Any]:
        """The library's ``get_lease_spec``, in wire format."""
        return {
            "holderIdentity": record.holder_identity,
            "leaseDurationSeconds": int(record.lease_duration),
            "acquireTime": _micro_time(self.time_str_to_iso(record.acquire_time)),
            "renewTime": _micro_time(self.time_str_to_iso(record.renew_time)),
        }

    def _record(self, spec: Mapping[str, Any]) -> LeaderElectionRecord:
        """The library's ``get_lock_object``, from wire format."""
        record = LeaderElectionRecord(None, None, None, None)
        if spec.get("holderIdentity"):
            record.holder_identity = spec["holderIdentity"]
        if spec.get("leaseDurationSeconds"):
            record.lease_duration = str(spec["leaseDurationSeconds"])
        for wire, field in (("acquireTime", "acquire_time"), ("renewTime", "renew_time")):
            if spec.get(wire):
                setattr(record, field, self.time_from_utc(datetime.fromisoformat(spec[wire])))
        return record


def _micro_time(when: datetime) -> str:
    """A ``metav1.MicroTime``: UTC, six fraction digits, ``Z``."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _StoppableElection(LeaderElection):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """The library's election with its two endless loops made stoppable."""

    # Set by the library's try_acquire_or_renew and update_lock.
    observed_record: Any
    observed_time_milliseconds: int

    def __init__(self, config: Any, stop: threading.Event) -> None:
        super().__init__(config)
        self._stop = stop
        # Set here rather than in onstarted_leading, which the library starts in
        # a thread that may not have run yet when a stop ends the renew loop.
        self.acquired = threading.Event()

    def acquire(self) -> bool:
        retry = self.election_config.retry_period
        while not self._stop.is_set():
            if self._try():
                self.acquired.set()
                return True
            self._stop.wait(retry)
        return False

    def _try(self) -> bool:
        # LeaseLock only catches ApiException; a refused connection would end
        # the library's loop (and the thread) instead of counting as one failed try.
        try:
            return self._renew_observed() or bool(self.try_acquire_or_renew())
        except Exception as exc:
            logger.warning("lease %s: %s", self.election_config.lock.name, describe(exc))
            return False

    def _renew_observed(self) -> bool:
        """client-go's fast path: the leader replaces its last observed Lease without reading it.

        Only while that observation says we hold a lease that has not expired; any
        failure (409 when someone else wrote the Lease) falls back to the library's
        read-then-decide path.
        """
        config = self.election_config
        lock, observed = config.lock, self.observed_record
        if lock.lease_reference is None or observed is None or observed.holder_identity != lock.identity:
            return False
        now = time.time()
        if self.observed_time_milliseconds + config.lease_duration * 1000 <= int(now * 1000):
            return False
        # The library's own record format (local naive time), read back by its LeaseLock.
        record = LeaderElectionRecord(
            lock.identity, str(config.lease_duration), observed.acquire_time, str(datetime.fromtimestamp(now))
        )
        if not lock.update(lock.name, lock.namespace, record):
            return False
        self.observed_record = record
        self.observed_time_milliseconds = int(time.time() * 1000)
        return True

    def renew_loop(self, leading_failed: threading.Event | None = None) -> None:
        retry = self.election_config.retry_period
        deadline = self.election_config.renew_deadline
        while not self._stop.is_set():
            if leading_failed is not None and leading_failed.is_set():
                return
            give_up = time.monotonic() + deadline
            while not self._try():
                if self._stop.is_set():
                    return
                if time.monotonic() >= give_up:
                    identity = self.election_config.lock.identity
                    logger.warning(
                        "%s could not renew the lease for %ss; leadership lost", identity, deadline
                    )
                    return
                self._stop.wait(retry)
            self._stop.wait(retry)


def _election_config(lock: Any, lease: float, renew: float, retry: float, *callbacks: Any) -> Any:
    """The library's Config, whose checks call ``sys.exit``: turned into a ValueError."""
    try:
        return electionconfig.Config(lock, lease, renew, retry, *callbacks)
    except SystemExit as exc:
        raise ValueError(f"invalid leader election settings: {exc.code}") from None


def check_timing(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """Raise ValueError for timings the library refuses, before anything has started."""
    _election_config(object(), lease_duration, renew_deadline, retry_period, _noop, _noop)


class LeaderElector:
    """One candidate for one Lease; :meth:`run` once, from a thread of your own.

    ``on_started_leading`` runs in a daemon thread once the Lease is held and
    should start the controllers and return; ``on_stopped_leading`` runs on the
    :meth:`run` thread when leadership ends (lost, or :meth:`stop`), always
    after ``on_started_leading`` has returned, and must stop them.  After a
    lost lease the process should exit, as controller-runtime's manager does:
    :meth:`run` returns and does not compete again.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        settings: LeaderElectionSettings,
        *,
        on_started_leading: Callable[[], None] = _noop,
        on_stopped_leading: Callable[[], None] = _noop,
    ) -> None:
        namespace, name = settings.namespace, settings.lease_name
        identity = settings.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        # client-go bounds a renewal by the renew deadline: each attempt of a Lease call gets
        # its share, so one call gives up within that deadline (with --api-timeout alone, four
        # attempts of 15 s: a minute in which a leader whose server stopped answering led on).
        self._kube = Kube(api_client, at_most=settings.renew_deadline / ATTEMPTS)
        self._namespace = namespace
        self._name = name
        self._identity = identity
        self._user_started = on_started_leading
        self._user_stopped = on_stopped_leading
        self._stop = threading.Event()
        self._running = threading.Event()
        self._finished = threading.Event()
        self._release = True
        self._finished_leading = False
        self._started_returned = threading.Event()

        lock = _LeaseLock(self._kube, name, namespace, identity)
        config = _election_config(
            lock,
            settings.lease_duration,
            settings.renew_deadline,
            settings.retry_period,
            self._started,
            self._stopped,
        )
        self._election = _StoppableElection(config, self._stop)

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        """True from winning the Lease until leadership ends."""
        return self._election.acquired.is_set() and not self._finished_leading

    def run(self) -> None:
        """Compete for the Lease and lead until it is lost or :meth:`stop` is called."""
        if self._running.is_set():
            raise RuntimeError("LeaderElector.run() may be called only once")
        self._running.set()
        try:
            self._election.run()
        finally:
            if self._election.acquired.is_set() and self._stop.is_set() and self._release:
                self._release_lease()
            self._finished.set()

    def stop(self, release: bool = True, timeout: float | None = None) -> bool:
        """End :meth:`run`; ``True`` once it has returned (or was never started).

        With ``release`` the Lease is handed back after ``on_stopped_leading``,
        so another candidate takes over after at most its ``retry_period``.
        """
        self._release = release
        self._stop.set()
        if not self._running.is_set():
            return True
        return self._finished.wait(timeout)

    def _started(self) -> None:
        try:
            logger.info("%s became leader of lease %s/%s", self._identity, self._namespace, self._name)
            self._user_started()
        finally:
            self._started_returned.set()

    def _stopped(self) -> None:
        self._finished_leading = True
        # The library runs on_started_leading in a thread of its own and does not
        # wait for it; a stop right after winning could otherwise tear down
        # controllers that are still being started.
        self._started_returned.wait()
        logger.info("%s stopped leading lease %s/%s", self._identity, self._namespace, self._name)
        try:
            self._user_stopped()
        except Exception as err:
            log_failure(logger, logging.ERROR, "on_stopped_leading raised", err=err)

    def _release_lease(self) -> None:
        """Clear ``holderIdentity`` if we still hold the Lease, as client-go does on cancel.

        The replace carries the resourceVersion just read, so a candidate that
        took the Lease in between makes it fail instead of being overwritten.
        """
        try:
            lease = self._kube.get(LEASES, self._namespace, self._name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self._identity:
                return
            now = _micro_time(datetime.now(UTC))
            spec = {k: v for k, v in spec.items() if k != "holderIdentity"}
            spec |= {"leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
            self._kube.replace(LEASES, self._namespace, self._name, lease | {"spec": spec})
            logger.info("%s released lease %s/%s", self._identity, self._namespace, self._name)
        except ApiException as exc:
            logger.warning("could not release lease %s/%s: %s", self._namespace, self._name, describe(exc))
