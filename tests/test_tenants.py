"""The ``--allow`` rules: their format, and which scopes they let a namespace's pools name."""

from __future__ import annotations

import pytest

from runnerpool.cli import parser, settings_from
from runnerpool.domain import Scope
from runnerpool.tenants import AllowList, parse_allow_rule

ACME = Scope(organization="acme")
ACME_TOOLS = Scope(repository="acme/tools")
LABS_TOOLS = Scope(repository="Labs/Tools")
BIG = Scope(enterprise="big-corp")


def allow(*rules: str) -> AllowList:
    return AllowList.of(parse_allow_rule(rule) for rule in rules)


def test_no_rule_allows_everything() -> None:
    rules = allow()
    assert not rules.enforced
    assert all(rules.allows("any", scope) for scope in (ACME, ACME_TOOLS, BIG))
    assert rules.refusal("any", BIG) is None


def test_an_organization_rule_covers_its_repositories_and_nothing_else() -> None:
    rules = allow("team-a=org:acme")
    assert rules.allows("team-a", ACME)
    assert rules.allows("team-a", ACME_TOOLS)
    assert not rules.allows("team-a", LABS_TOOLS)
    assert not rules.allows("team-a", BIG)
    assert not rules.allows("team-b", ACME), "a namespace no rule names may register nowhere"


def test_globs_and_github_names_without_case() -> None:
    rules = allow("team-*=repo:labs/t*", "platform=enterprise:big-*,org:*")
    assert rules.allows("team-x", LABS_TOOLS), "GitHub names are compared case-insensitively"
    assert not rules.allows("team-x", Scope(repository="labs/other"))
    assert not rules.allows("team-x", Scope(organization="labs")), "a repo rule is not its organization"
    assert rules.allows("platform", BIG)
    assert rules.allows("platform", ACME)
    assert not rules.allows("Platform", BIG), "namespaces match case-sensitively"


def test_rules_for_one_namespace_add_up() -> None:
    rules = allow("team-a=org:acme", "team-*=enterprise:big-corp")
    assert rules.allows("team-a", ACME) and rules.allows("team-a", BIG)
    assert not rules.allows("team-b", ACME) and rules.allows("team-b", BIG)


def test_the_refusal_names_the_setting_to_change() -> None:
    rules = allow("team-a=org:acme")
    said = rules.refusal("team-a", BIG)
    assert said is not None
    assert "enterprise big-corp" in said
    assert "--allow rules for namespace team-a (team-a=org:acme) do not include it" in said
    assert "add enterprise:big-corp to an --allow rule" in said
    other = rules.refusal("team-b", ACME)
    assert other is not None and "no --allow rule names namespace team-b" in other


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("team-a", "expected NAMESPACE_GLOB=KIND:GLOB"),
        ("=org:acme", "expected NAMESPACE_GLOB=KIND:GLOB"),
        ("Team_A=org:acme", "is not a namespace glob"),
        ("team-a=user:acme", "must be enterprise:GLOB, org:GLOB or repo:OWNER/NAME"),
        ("team-a=org:acme/tools", "org: takes one name or glob"),
        ("team-a=repo:tools", "repo: takes OWNER/NAME"),
        ("team-a=org:", "org: takes one name or glob"),
        ("team-a=org:acme,", "must be enterprise:GLOB"),
    ],
)
def test_malformed_rules_are_refused_with_the_reason(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        parse_allow_rule(text)
    assert said in str(caught.value)


def test_the_flag_is_repeatable_and_checked_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    settings = settings_from(parser().parse_args(["--allow", "a=org:x", "--allow", "b=repo:y/z"]))
    assert [str(rule) for rule in settings.tenants.allow or ()] == ["a=org:x", "b=repo:y/z"]
    assert settings.tenants.allow_list.allows("b", Scope(repository="y/z"))
    assert not settings_from(parser().parse_args([])).tenants.allow_list.enforced
    with pytest.raises(SystemExit):
        parser().parse_args(["--allow", "a=team:x"])
    assert "must be enterprise:GLOB, org:GLOB or repo:OWNER/NAME" in capsys.readouterr().err
