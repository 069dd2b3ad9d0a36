"""The command line is derived from ``runnerpool.settings``: one place for every default."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runnerpool import api
from runnerpool.cli import _api_client, parser, settings_from
from runnerpool.settings import Settings
from runnerpool.watches import pool_watches


def _setting_fields() -> dict[str, dataclasses.Field[Any]]:
    """Every setting by the argparse dest the CLI gives it ("group.field", or the top-level name)."""
    found: dict[str, dataclasses.Field[Any]] = {}
    for top in dataclasses.fields(Settings):
        group = top.default
        if dataclasses.is_dataclass(group):
            found.update({f"{top.name}.{f.name}": f for f in dataclasses.fields(group)})
        else:
            found[top.name] = top
    return found


def test_every_flag_default_is_the_settings_default() -> None:
    settings = _setting_fields()
    flags = {a.dest: a for a in parser()._actions if a.dest not in ("help", "version", "kubeconfig")}

    assert set(flags) == set(settings), "every setting has a flag and every flag is a setting"
    for dest, action in flags.items():
        assert action.default == settings[dest].default, f"{action.option_strings[0]} default"
        assert action.help, f"{action.option_strings[0]} has no help"


def test_no_flags_give_the_default_settings() -> None:
    assert settings_from(parser().parse_args([])) == Settings()


def test_flags_reach_their_groups() -> None:
    settings = settings_from(
        parser().parse_args(
            [
                "--namespace=ci",
                "--namespace=build",
                "--workers=8",
                "--token-refresh-margin=45",
                "--runner-sync-interval=30",
                "--busy-runner-wait=12",
                "--leader-elect",
                "--lease-duration=20",
                "--github-api-url=https://ghe.example.com/api/v3",
                "--metrics-port=0",
                "--log-format=json",
            ]
        )
    )

    assert settings.namespaces == ("ci", "build")
    assert settings.queue.workers == 8
    assert settings.tokens.refresh_margin == timedelta(minutes=45)
    assert settings.runners.sync_interval == 30.0
    assert settings.deletion.busy_runner_wait == 12.0
    assert settings.leader_election.enabled
    assert settings.leader_election.lease_duration == 20
    assert settings.github.api_url == "https://ghe.example.com/api/v3"
    assert settings.probes.metrics_port == 0
    assert settings.logs.format == "json"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers=0"], "must be greater than 0"),
        (["--metrics-port=70000"], "must be a port number"),
        (["--log-format=xml"], "invalid choice"),
        (["--token-refresh-margin=60"], "must be at most 50 minutes"),
    ],
)
def test_bad_flags_say_what_to_fix(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("level", ["debug", "Debug", "DEBUG"])
def test_log_level_is_taken_in_any_case(level: str) -> None:
    """``--log-level=debug`` is what people type (and what Helm charts usually take)."""
    assert settings_from(parser().parse_args([f"--log-level={level}"])).logs.level == "DEBUG"


def test_lease_timings_the_library_refuses_are_refused_up_front() -> None:
    with pytest.raises(SystemExit, match="--lease-duration > --renew-deadline"):
        settings_from(parser().parse_args(["--lease-duration=5", "--renew-deadline=10"]))


def test_a_pools_api_url_is_its_own_else_the_flags_in_every_ref() -> None:
    """One resolution per pool: ``--github-api-url`` reaches what the background jobs are given."""
    settings = settings_from(parser().parse_args(["--github-api-url", "https://ghe.example.com/api/v3/"]))
    plain = api.RunnerPool.model_validate(
        {"metadata": {"name": "build", "namespace": "ci"}, "spec": {"organization": "octo-org"}}
    )
    own = api.RunnerPool.model_validate(
        {
            "metadata": {"name": "other", "namespace": "ci"},
            "spec": {"organization": "octo-org", "githubApiUrl": "https://ghe2.example.com/api/v3"},
        }
    )
    ref = settings.github.pool_ref(plain, credentials_version="7")
    assert (ref.api_url, ref.credentials_version) == ("https://ghe.example.com/api/v3", "7")
    assert settings.github.pool_ref(own, "7").api_url == "https://ghe2.example.com/api/v3"
    assert Settings().github.api_url_of(plain) == "https://api.github.com"


def test_the_connection_pool_keeps_a_connection_for_every_watch_of_many_enabled_namespaces(
    tmp_path: Path,
) -> None:
    """Cluster mode watches Secrets and pods per enabled namespace, three watches each: a pool
    sized for the table of watches alone was full with a few dozen namespaces, and urllib3
    closed each restarting watch's connection with a warning."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    settings = Settings()
    per_namespace = sum(1 for watch in pool_watches() if watch.per_namespace)
    assert per_namespace == 3, "two Secret watches and the pods'"
    size = _api_client(str(kubeconfig), settings).configuration.connection_pool_maxsize
    assert size >= 200 * per_namespace + settings.queue.workers + settings.api_server.pod_creates
