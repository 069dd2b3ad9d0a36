"""``kubectl-runnerpool``: the console script kubectl runs for ``kubectl runnerpool ...``.

kubectl hands a plugin the words after its name and none of its own flags, so the plugin
takes kubectl's usual ones itself (``-n``, ``-A``, ``--kubeconfig``, ``--context``, ``-o``),
before or after the command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from runnerpool.domain import DEFAULT_API_URL
from runnerpool.plugin import commands
from runnerpool.plugin.cluster import Login, connect
from runnerpool.plugin.errors import PluginError
from runnerpool.settings import GitHubSettings

__all__ = ["API_URL_ENV", "main"]

#: The operator's ``--github-api-url`` for pools that name none (GHES installs).
API_URL_ENV = "RUNNERPOOL_GITHUB_API_URL"

_EPILOG = """\
examples:
  kubectl runnerpool list -A
  kubectl runnerpool runners repo-runners -n ci-runners
  kubectl runnerpool why repo-runners -n ci-runners
  kubectl runnerpool remove-offline repo-runners -n ci-runners --yes
  kubectl runnerpool convert -f runnerdeployment.yaml > runnerpool.yaml

permissions: list and why need get/list on runnerpools, pods and events (the built-in view
role); runners and remove-offline also read the pool's credential Secret (get secrets: the
built-in edit or admin role). convert reads only its input, never the cluster."""


def _common() -> argparse.ArgumentParser:
    """kubectl's flags, accepted before and after the command (``SUPPRESS``: a subcommand's
    default never overwrites what was given before it)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-n", "--namespace", default=argparse.SUPPRESS, help="namespace (default: the context's)"
    )
    common.add_argument(
        "--kubeconfig",
        default=argparse.SUPPRESS,
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)",
    )
    common.add_argument(
        "--context", default=argparse.SUPPRESS, help="kubeconfig context (default: the current one)"
    )
    common.add_argument(
        "--github-api-url",
        default=argparse.SUPPRESS,
        help=f"GitHub API for pools without spec.githubApiUrl, as the operator's --github-api-url "
        f"(default: ${API_URL_ENV}, else {DEFAULT_API_URL})",
    )
    return common


def _parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="kubectl runnerpool",
        description="RunnerPools as the operator and GitHub see them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = sub.add_parser(
        "list", parents=[common], help="pools: desired, ready, busy, queued, token expiry"
    )
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="pools of every namespace")
    listing.add_argument("-o", "--output", choices=["table", "json"], default="table")
    runners = sub.add_parser(
        "runners", parents=[common], help="the pool's runners as GitHub lists them, beside their pods"
    )
    runners.add_argument("pool")
    runners.add_argument("-o", "--output", choices=["table", "json"], default="table")
    why = sub.add_parser(
        "why", parents=[common], help="conditions, recent Events, last errors, what the operator waits for"
    )
    why.add_argument("pool")
    remove = sub.add_parser(
        "remove-offline",
        parents=[common],
        help="delete the pool's offline idle runners on GitHub (asks first; busy runners never)",
    )
    remove.add_argument("pool")
    remove.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    convert = sub.add_parser(
        "convert",
        help="print RunnerPools for ARC RunnerDeployments, scale set values or meows RunnerPools "
        "(exit 3: some fields not mapped, listed on stderr)",
    )
    convert.add_argument("-f", "--filename", required=True, help="YAML file, or - for standard input")
    convert.add_argument(
        "-n",
        "--namespace",
        default=argparse.SUPPRESS,
        help="namespace of the printed pools (default: each source's)",
    )
    return parser


def run(
    argv: Sequence[str], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr, stdin: TextIO = sys.stdin
) -> int:
    """The plugin with its streams given (tests call this in-process)."""
    args = _parser().parse_args(list(argv))
    if args.command == "convert":
        return commands.convert(
            args.filename, getattr(args, "namespace", None), out=out, err=err, stdin=stdin
        )
    login = Login(kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None))
    api_url = getattr(args, "github_api_url", None) or os.environ.get(API_URL_ENV) or DEFAULT_API_URL
    try:
        cluster = connect(login)
        try:
            ctx = commands.Context(cluster, out, err, stdin, GitHubSettings(api_url=api_url))
            namespace = getattr(args, "namespace", None) or cluster.namespace
            if args.command == "list":
                return commands.list_pools(ctx, None if args.all_namespaces else namespace, args.output)
            if args.command == "runners":
                return commands.list_runners(ctx, namespace, args.pool, args.output)
            if args.command == "why":
                return commands.why(ctx, namespace, args.pool)
            return commands.remove_offline(ctx, namespace, args.pool, args.yes)
        finally:
            cluster.close()
    except PluginError as failure:
        print(f"error: {failure}", file=err)
        return 1


def main() -> int:
    return run(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
