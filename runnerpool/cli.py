"""``runnerpool-operator``: run the operator against a kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from datetime import timedelta
from importlib.metadata import version
from types import FrameType

from kubernetes import client, config

from runnerpool import api, logs
from runnerpool.manager import Operator, Options
from runnerpool.runners.manager import DEFAULT_INTERVAL
from runnerpool.runtime.leader import check_timing
from secret_updater.filler import DEFAULT_MARGIN

log = logging.getLogger("runnerpool")


def _positive(kind: type[int] | type[float]):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="runnerpool-operator",
        description="Keeps pools of self-hosted GitHub Actions runners (RunnerPool objects).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {version('runnerpool-operator')}")
    p.add_argument("--kubeconfig", help="kubeconfig file; default: in-cluster, then ~/.kube/config")
    p.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    p.add_argument(
        "--workers",
        type=_positive(int),
        default=4,
        help="concurrent reconciles (they mostly wait on the API server; "
        "the queue never runs one pool twice at once)",
    )
    p.add_argument(
        "--token-wait",
        type=_positive(float),
        default=10.0,
        metavar="SECONDS",
        help="requeue delay while a pool waits for its first registration token",
    )
    p.add_argument(
        "--token-refresh-margin",
        type=_positive(float),
        default=DEFAULT_MARGIN.total_seconds() / 60,
        metavar="MINUTES",
        help="refresh a registration token this long before it expires",
    )
    p.add_argument(
        "--github-api-url",
        default="https://api.github.com",
        help="GitHub API base URL; for GitHub Enterprise Server e.g. https://ghe.example.com/api/v3 "
        "(a pool's spec.githubApiUrl overrides it)",
    )
    p.add_argument("--runner-image", default=api.DEFAULT_RUNNER_IMAGE, help="default runner image")
    p.add_argument(
        "--runner-sync-interval",
        type=_positive(float),
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help="how often each repository or organization's runners are listed (once per scope, "
        "shared by its pools; stretched automatically when the GitHub budget runs low)",
    )
    p.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port; 0 turns it off")
    p.add_argument("--health-port", type=int, default=8081, help="/healthz and /readyz port; 0 turns it off")
    p.add_argument(
        "--leader-elect", action="store_true", help="elect a leader over a Lease (run 2+ replicas)"
    )
    p.add_argument("--leader-election-namespace", default="runnerpool-system")
    p.add_argument("--leader-election-id", default="runnerpool-operator", help="name of the Lease")
    p.add_argument("--lease-duration", type=_positive(int), default=15, metavar="SECONDS")
    p.add_argument("--renew-deadline", type=_positive(float), default=10.0, metavar="SECONDS")
    p.add_argument("--retry-period", type=_positive(float), default=2.0, metavar="SECONDS")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return p


def _api_client(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def options_from(args: argparse.Namespace) -> Options:
    try:
        check_timing(args.lease_duration, args.renew_deadline, args.retry_period)
    except ValueError as err:
        raise SystemExit(
            f"error: {err} (need --lease-duration > --renew-deadline > 1.2 * --retry-period >= 1 s)"
        ) from None
    return Options(
        namespaces=args.namespaces,
        workers=args.workers,
        token_wait=args.token_wait,
        github_api_url=args.github_api_url,
        runner_image=args.runner_image,
        token_margin=timedelta(minutes=args.token_refresh_margin),
        runner_sync_interval=args.runner_sync_interval,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        leader_election_id=args.leader_election_id,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )


def main(argv: list[str] | None = None, *, early_signals: list[int] | None = None) -> int:
    """Run until SIGTERM/SIGINT; ``early_signals``: those that arrived before this was called."""
    args = parser().parse_args(argv)
    logs.configure(args.log_format, args.log_level)
    options = options_from(args)
    try:
        api_client = _api_client(args.kubeconfig)
    except config.ConfigException as err:
        print(f"error: no Kubernetes configuration: {err}; pass --kubeconfig", file=sys.stderr)
        return 2
    operator = Operator(options, api_client)

    stopping: list[threading.Thread] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("received %s, shutting down", signal.Signals(signum).name)
        if stopping:
            return  # one shutdown is enough; a second signal must not start another
        stopping.append(threading.Thread(target=operator.shutdown, name="shutdown", daemon=True))
        stopping[0].start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if early_signals:
        on_signal(early_signals[0], None)
    log.info(
        "starting runnerpool-operator",
        extra={"namespaces": options.namespaces or "all", "workers": options.workers},
    )
    operator.run()
    for thread in stopping:
        # Nothing of ours may still run while the interpreter finalizes (see Operator.run).
        thread.join(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
