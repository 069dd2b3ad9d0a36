"""The metric names a PromQL expression selects, for checking them against what the operator exports.

A small tokenizer, not a parser: what is wanted is only the names, and PromQL's lexical rules
make them easy to find once strings, label matchers, range and subquery brackets, grouping
label lists, function and aggregation names, keywords, numbers and durations are set aside.
A name is an identifier that is none of those; ``{__name__="x"}`` names ``x`` too. Anything
the tokenizer does not recognise raises, so an expression it misreads fails loudly instead of
passing with a name missed.

Why no library: whether an expression *parses* is promtool's to say (Prometheus' own parser;
``deploy/monitoring/``'s promtool test), so a second, third-party grammar here would only add a
compiled dependency that can lag Prometheus' syntax; and a dashboard's queries hold Grafana
variables (``$__rate_interval``, ``$namespace``) that no PromQL parser accepts unsubstituted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["metric_names", "variable_query_names"]

_TOKENS = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[smhdwy]|ms)*(?:\d+(?:[smhdwy]|ms))*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|==|!=|<=|>=|[-+*/%^=<>])
  | (?P<punct>[{}()\[\],@:])
    """,
    re.VERBOSE,
)

#: Aggregations, set operators and modifiers: identifiers that are never metric names.
_KEYWORDS = frozenset(
    {
        *("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"),
        *("bottomk", "topk", "quantile", "limitk", "limit_ratio"),
        *("and", "or", "unless", "atan2", "bool", "offset", "inf", "nan"),
        *("by", "without", "on", "ignoring", "group_left", "group_right"),
    }
)
#: Keywords whose parenthesised list holds label names, not expressions.
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


def _tokens(expr: str) -> Iterator[tuple[str, str]]:
    position = 0
    while position < len(expr):
        found = _TOKENS.match(expr, position)
        if found is None:
            raise ValueError(
                f"cannot read PromQL at {position}: {expr[position : position + 20]!r} in {expr!r}"
            )
        position = found.end()
        kind = found.lastgroup
        assert kind is not None
        if kind not in ("space", "comment"):
            yield kind, found.group()


def _skip_to_closing(tokens: list[tuple[str, str]], start: int, opening: str, closing: str) -> int:
    """The index after the bracket that closes the one at ``start``."""
    depth = 0
    for index in range(start, len(tokens)):
        kind, text = tokens[index]
        if kind == "punct" and text == opening:
            depth += 1
        elif kind == "punct" and text == closing:
            depth -= 1
            if depth == 0:
                return index + 1
    raise ValueError(f"unbalanced {opening!r} in PromQL")


def _matcher_names(tokens: list[tuple[str, str]]) -> Iterator[str]:
    """``__name__="x"`` inside one label-matcher block."""
    for index in range(len(tokens) - 2):
        (_, label), (_, op), (kind, value) = tokens[index : index + 3]
        if label == "__name__" and op == "=" and kind == "string":
            yield value[1:-1]


def metric_names(expr: str) -> list[str]:
    """The metric names ``expr`` selects, each once, in the order they appear."""
    tokens = list(_tokens(expr))
    names: dict[str, None] = {}
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "punct" and text == "{":
            end = _skip_to_closing(tokens, index, "{", "}")
            names.update(dict.fromkeys(_matcher_names(tokens[index + 1 : end - 1])))
            index = end
            continue
        if kind == "punct" and text == "[":
            index = _skip_to_closing(tokens, index, "[", "]")
            continue
        if kind == "ident" and text in _LABEL_LISTS and following == "(":
            index = _skip_to_closing(tokens, index + 1, "(", ")")
            continue
        if kind == "ident" and text not in _KEYWORDS and following != "(":
            names[text] = None
        index += 1
    return list(names)


_LABEL_VALUES = re.compile(
    r"^\s*label_values\((?P<selector>.*),\s*(?P<label>[A-Za-z_]\w*)\s*\)\s*$", re.DOTALL
)


def variable_query_names(query: str) -> list[str]:
    """The names in a Grafana Prometheus variable query: ``label_values(selector, label)``,
    ``query_result(expr)`` or a bare expression."""
    if re.match(r"^\s*label_values\(\s*[A-Za-z_]\w*\s*\)\s*$", query):
        return []  # label_values(label): every series, no name
    found = _LABEL_VALUES.match(query)
    if found is not None:
        return metric_names(found.group("selector"))
    result = re.match(r"^\s*query_result\((?P<expr>.*)\)\s*$", query, re.DOTALL)
    return metric_names(result.group("expr") if result else query)
