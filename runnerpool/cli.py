"""``runnerpool-operator``: run the operator against a kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import typing
from importlib.metadata import version
from types import FrameType
from typing import Any

from kubernetes import client, config

from runnerpool import logs
from runnerpool.operator import Operator
from runnerpool.runtime.credential_refresh import throttle_refresh
from runnerpool.runtime.informers import informer_count
from runnerpool.runtime.kube import set_request_timeout
from runnerpool.runtime.leader import check_timing
from runnerpool.settings import Settings
from runnerpool.watches import pool_watches

log = logging.getLogger("runnerpool")


def parser() -> argparse.ArgumentParser:
    """The flags, derived from ``runnerpool.settings``: names, help and defaults are the fields'."""
    p = argparse.ArgumentParser(
        prog="runnerpool-operator",
        description="Keeps pools of self-hosted GitHub Actions runners (RunnerPool objects).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {version('runnerpool-operator')}")
    p.add_argument("--kubeconfig", help="kubeconfig file; default: in-cluster, then ~/.kube/config")
    for top in dataclasses.fields(Settings):
        group = _groups().get(top.name)
        if group is None:
            _add_flag(p, top, top.name)
            continue
        doc = (group.__doc__ or "").strip().splitlines()[0]
        section = p.add_argument_group(top.name.replace("_", " "), doc)
        for item in dataclasses.fields(group):
            _add_flag(section, item, f"{top.name}.{item.name}")
    return p


def _groups() -> dict[str, type[Any]]:
    hints = typing.get_type_hints(Settings)
    return {
        name: kind
        for name, kind in hints.items()
        if isinstance(kind, type) and dataclasses.is_dataclass(kind)
    }


def _add_flag(container: argparse._ActionsContainer, item: dataclasses.Field[Any], dest: str) -> None:
    meta = item.metadata
    if "flag" not in meta:
        return
    options: dict[str, Any] = {"dest": dest, "default": item.default, "help": meta["help"]}
    if meta["switch"]:
        options["action"] = "store_true"
    else:
        options["type"] = meta["parse"]
        if meta["repeat"]:
            options["action"] = "append"
        if meta["choices"]:
            options["choices"] = meta["choices"]
        else:
            options["metavar"] = meta["metavar"] or item.name.upper()
    container.add_argument(meta["flag"], **options)


#: Enabled runner namespaces the client's connection pool is sized for in cluster mode: each
#: has a watch of its own per ``per_namespace`` entry (two for Secrets, one for pods). The
#: size bounds the idle connections the pool keeps, not those it opens (an empty slot costs a
#: pointer); past it, a watch that restarts finds the pool full, and urllib3 closes its
#: connection with a warning, and the next request pays a new handshake.
POOL_SIZED_FOR_NAMESPACES = 256


def _api_client(kubeconfig: str | None, settings: Settings) -> client.ApiClient:
    """One client for every Kubernetes call, with a connection pool that holds them all.

    Each watch keeps one connection for as long as it runs (one per informer the table of
    watches makes: ``runnerpool.watches``); the client's default pool (five
    per CPU) is smaller than the watches plus the workers, the secret updater and runner managers of
    a two-core machine, and urllib3 discards a connection that finds the pool full, so
    every request past it paid a new TLS handshake (the largest entry of the N=100 profile).
    The pod creates a burst has in flight (``--pod-create-concurrency``) each hold one too.

    ``HTTPS_PROXY`` and the like are for GitHub (the chart's ``proxy`` values set them): the
    client would send every API request through that proxy too (the pinned kubernetes 37 reads
    them), which rarely reaches a cluster's API server. Only a kubeconfig's own ``proxy-url``
    applies to the API server (docs/ghes-and-proxies.md).
    """
    configuration = client.Configuration(proxy="")  # not None: None means "from the environment"
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    throttle_refresh(configuration)
    table = pool_watches()
    watches = informer_count(table, settings.namespaces, cluster_scoped=not settings.namespaced)
    if settings.namespaces is None:  # the per-namespace watches come and go with enabled namespaces
        watches += POOL_SIZED_FOR_NAMESPACES * sum(1 for watch in table if watch.per_namespace)
    configuration.connection_pool_maxsize = (
        watches + settings.queue.workers + settings.api_server.pod_creates + 16
    )
    return set_request_timeout(client.ApiClient(configuration), settings.api_server.request_timeout)


def settings_from(args: argparse.Namespace) -> Settings:
    """The parsed flags back into their groups; refuses Lease timings the library would refuse."""
    values = vars(args)
    groups = {
        name: group(
            **{f.name: values[f"{name}.{f.name}"] for f in dataclasses.fields(group) if "flag" in f.metadata}
        )
        for name, group in _groups().items()
    }
    namespaces = values["namespaces"]
    if values["namespaced"] and not namespaces:
        raise SystemExit(
            "error: --namespaced needs at least one --namespace: name the namespaces where the "
            "operator was given its RoleBinding (deploy/overlays/namespaced)"
        )
    settings = Settings(
        component=values["component"],
        namespaces=tuple(namespaces) if namespaces else None,
        namespaced=values["namespaced"],
        namespace_role=values["namespace_role"],
        **groups,
    )
    election = settings.leader_election
    try:
        check_timing(election.lease_duration, election.renew_deadline, election.retry_period)
    except ValueError as err:
        raise SystemExit(
            f"error: {err} (need --lease-duration > --renew-deadline > 1.2 * --retry-period >= 1 s)"
        ) from None
    return settings


def main(argv: list[str] | None = None, *, early_signals: list[int] | None = None) -> int:
    """Run until SIGTERM/SIGINT; ``early_signals``: those that arrived before this was called."""
    args = parser().parse_args(argv)
    settings = settings_from(args)
    logs.configure(settings.logs.format, settings.logs.level)
    try:
        api_client = _api_client(args.kubeconfig, settings)
    except config.ConfigException as err:
        print(f"error: no Kubernetes configuration: {err}; pass --kubeconfig", file=sys.stderr)
        return 2
    operator = Operator(settings, api_client)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("received %s, shutting down", signal.Signals(signum).name)
        operator.shutdown()  # only sets an event: the stop path runs on the main thread

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if early_signals:
        on_signal(early_signals[0], None)
    log.info(
        "starting runnerpool-operator",
        extra={"namespaces": settings.namespaces or "all", "workers": settings.queue.workers},
    )
    operator.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
