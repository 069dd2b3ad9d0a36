"""Run the fake GitHub on its own, for the demo or for tests that spawn processes.

The first line on stdout is the base URL and nothing else, so a parent process
can read it to learn the port chosen with ``--port 0``.  Drive it afterwards
through the ``/_fake/`` control endpoints.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from testworld.fakegithub.server import FakeGitHub
from testworld.fakegithub.state import DEFAULT_RATE_LIMIT, LOST_CONTACT_SECONDS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m testworld.fakegithub", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    parser.add_argument("--api-prefix", default="", help='serve under a prefix, e.g. "/api/v3" like GHES')
    parser.add_argument(
        "--scope", action="append", default=[], metavar="ORG|OWNER/REPO", help="create a scope (repeatable)"
    )
    parser.add_argument(
        "--installation",
        action="append",
        type=int,
        default=[],
        metavar="ID",
        help="create an App installation",
    )
    parser.add_argument("--auto-create", action="store_true", help="unknown scopes and installations exist")
    parser.add_argument(
        "--token", action="append", default=None, metavar="PAT", help="accept only these PATs (default: any)"
    )
    parser.add_argument(
        "--rate-limit", type=int, default=DEFAULT_RATE_LIMIT, help="requests per hour per token"
    )
    parser.add_argument(
        "--token-lifetime", type=float, default=3600.0, help="registration token lifetime in seconds"
    )
    parser.add_argument(
        "--lost-contact-seconds",
        type=float,
        default=LOST_CONTACT_SECONDS,
        help="fail a job whose runner has not renewed it for this long (GitHub: 600)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    done = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    fake = FakeGitHub(
        host=args.host,
        port=args.port,
        api_prefix=args.api_prefix,
        scopes=args.scope,
        installations=args.installation,
        auto_create=args.auto_create,
        tokens=args.token,
        rate_limit=args.rate_limit,
        registration_token_lifetime=args.token_lifetime,
        lost_contact_seconds=args.lost_contact_seconds,
    )
    with fake:
        print(fake.url, flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
