"""A fake GitHub REST API for the operator's process-level tests and the demo.

It implements only what the operator and the test world use (self-hosted
runners, registration tokens, App installation tokens, ``/rate_limit``, workflow
runs and jobs), but those faithfully: shapes and status codes from GitHub's
OpenAPI description, pagination, ETags, rate limits, plus fault injection for the
failures the real service produces.  Runner processes (the config.sh/run.sh
stand-ins in ``testworld/runner_image``) register and take jobs through the
protocol described in `testworld.fakegithub.actions`.

Lost contact (``lost_contact_seconds``, default `LOST_CONTACT_SECONDS` = 600)
-----------------------------------------------------------------------------
GitHub fails a job whose runner went silent, and the fake does too.  How GitHub decides,
as far as the public record goes:

* The real runner's listener (``Runner.Listener``, ``JobDispatcher.RenewJobRequestAsync``
  in actions/runner) renews the running job's lock first, before it starts the worker
  (``Runner.Worker``), then every 60 s until the job ends ("renew again after 60 sec
  delay"; the broker-era call is ``POST {run service}/renewjob`` with ``planId``/``jobId``,
  answering ``lockedUntil``).  A failed renewal is retried until ``lockedUntil`` plus 5
  minutes; a 404 (job not found) stops it.
* Each renewal moves the lock 10 minutes ahead: the runner's diagnostic log shows
  "Successfully renew job request 94, job is valid till 17:50:44" for a renewal at
  17:40:44 (actions/runner#1549; in #3539 renewals stopped under CPU load, and a job not
  done within those 10 minutes failed).  GitHub then completes the job with
  conclusion ``failure`` and the annotation "The self-hosted runner: NAME lost communication
  with the server. Verify the machine is running and has a healthy network connection. ..."
  (actions/runner#1546, #2040, #3539).
* The runner is then listed ``offline`` and ``busy: false`` and stays registered, ephemeral
  or not, until it is deleted (actions/runner#1364: an ephemeral runner whose machine died
  before its job completed "will remain as registered, but offline";
  actions/actions-runner-controller#1235: a runner whose pod went while busy stays busy
  "until GitHub Actions somehow detects the situation and revert the runner status to
  offline"); GitHub's own clean-up comes only after a day
  (ephemeral) or 14 days (/work/shared/github/README.md).

So here: a job in progress whose runner process has not renewed it (``POST
/_actions/renewjob``, see `actions`) for ``lost_contact_seconds`` completes as ``failure``
at the moment its lock ran out, with that annotation (`FakeGitHub.annotations`, and a
``workflow_job`` ``completed`` webhook like any completion); its runner goes offline and
idle and stays registered until deleted; a late renewal or completion from that runner is a
404.  Starting a job counts as its first renewal, and the fake tells the runner how often to
renew (``renew_s``: a tenth of the lock, as 60 s is of GitHub's 600 s), so a healthy stand-in
keeps its job whatever the setting.  While its job runs, a runner is judged by the job's
lock, not by ``listener_timeout`` (the real listener keeps polling during a job; the
stand-in renews instead).  Runners made through the control API have no process: their
jobs are played by the fake and never lose contact.  Set ``lost_contact_seconds`` per
instance (constructor or attribute, at any time), through ``POST /_fake/settings``
``{"lost_contact_seconds": 4}`` or ``--lost-contact-seconds``; tests use a few seconds and
drive the fake's clock, or wait on its state, instead of sleeping.  Time-driven changes
happen at the next request or control call that looks at jobs or runners (the operator's
listing does), as everywhere in the fake.
"""

from testworld.fakegithub.server import FakeGitHub
from testworld.fakegithub.state import LOST_CONTACT_SECONDS, RegistrationRejectedError, UnknownScopeError

__all__ = ["LOST_CONTACT_SECONDS", "FakeGitHub", "RegistrationRejectedError", "UnknownScopeError"]
