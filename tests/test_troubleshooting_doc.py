"""docs/troubleshooting.md names every condition type, reason and Event reason the operator sets.

A user who meets a reason in ``kubectl describe runnerpool`` looks it up there; a reason added
to the code without a line in the doc fails here. The reasons are read from the source (the
operator's and the secret updater's), wherever they are written as literals or constants:

* the third argument of ``Stamp.condition(type, status, REASON, message)`` and of
  ``Recorder.event(obj, type, REASON, message)``;
* ``reason="..."`` in any call (the GitHub errors' classification), ``default_reason = "..."``
  (their classes) and constants named ``*_REASON``;
* the reason argument of ``Decision(...)`` and of the ``cls(...)`` constructors of Decision
  and of the credential errors, through the constants they name;
* a variable at a reason position, through the string literals assigned to it in the function.

The collector is checked against reasons known to come from each of those places, so it
cannot silently find nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from runnerpool.reasons import ConditionType, Reason

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "troubleshooting.md"
SOURCES = [REPO / "runnerpool", REPO / "secret_updater"]
#: Stand-ins for tests, never run by the operator.
NOT_SHIPPED = {"fakes.py", "fake.py"}
CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*$")
#: Calls whose argument at that index is a reason.
REASON_ARGUMENT = {"condition": 2, "event": 2, "Decision": 1}


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _strings(node: ast.AST) -> Iterator[str]:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and CAMEL.match(inner.value):
            yield inner.value


def _reasons_in(tree: ast.Module) -> set[str]:
    constants: dict[str, str] = {}  # names assigned a string (module or class level) -> the string
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    constants[target.id] = node.value.value
                    if target.id.endswith("REASON") or target.id == "default_reason":
                        found.add(node.value.value)

    def resolve(arg: ast.expr, function: ast.AST) -> Iterator[str]:
        name = arg.attr if isinstance(arg, ast.Attribute) else arg.id if isinstance(arg, ast.Name) else None
        if name is None:
            yield from _strings(arg)
        elif name in constants:
            yield constants[name]
        else:  # a local variable: the literals assigned to it in the function
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets
                ):
                    yield from _strings(node.value)

    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.Module):
            continue
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            callee = _callee(call)
            for keyword in call.keywords:
                if keyword.arg == "reason":
                    found |= set(resolve(keyword.value, function))
            index = REASON_ARGUMENT.get(callee)
            if callee == "cls":  # Decision(replicas, REASON, ...) or CredentialError(REASON, ...)
                found |= {r for arg in call.args[:2] for r in resolve(arg, function)}
            elif index is not None and len(call.args) > index:
                found |= set(resolve(call.args[index], function))
    return {r for r in found if CAMEL.match(r)}


def reasons_in_code() -> set[str]:
    found: set[str] = set()
    for folder in SOURCES:
        for path in folder.rglob("*.py"):
            if path.name not in NOT_SHIPPED:
                found |= _reasons_in(ast.parse(path.read_text(), str(path)))
    return found


def documented(doc: str) -> set[str]:
    """Names written as code (`Reason`) in the doc."""
    return set(re.findall(r"`([A-Za-z]+)`", doc))


#: One of each place a reason can be written as a literal; the collector must find them all, so
#: that the check below cannot silently find nothing.
_EVERY_KIND_OF_PLACE = """
BUSY_REASON = "OneConstant"
class Failure:
    default_reason = "OneDefaultReason"
    def make(cls):
        return cls("OneClsArgument", "message")
def run(stamp, recorder, obj):
    stamp.condition(READY, True, "OneConditionLiteral", "m")
    recorder.event(obj, WARNING, "OneEventLiteral", "m")
    verb = "OneVariable"
    recorder.event(obj, NORMAL, verb, "m")
    fail(reason="OneKeyword")
    Decision(1, "OneDecisionLiteral", "m")
"""


def test_the_collector_finds_reasons_from_each_kind_of_place() -> None:
    found = _reasons_in(ast.parse(_EVERY_KIND_OF_PLACE))
    assert found == {
        "OneConstant",
        "OneDefaultReason",
        "OneClsArgument",
        "OneConditionLiteral",
        "OneEventLiteral",
        "OneVariable",
        "OneKeyword",
        "OneDecisionLiteral",
    }, sorted(found)


def test_every_condition_type_and_reason_is_documented() -> None:
    doc = documented(DOC.read_text())
    missing_types = {str(t) for t in ConditionType} - doc
    assert missing_types == set(), f"condition types missing from docs/troubleshooting.md: {missing_types}"
    missing = {str(r) for r in Reason} - doc
    assert missing == set(), f"reasons docs/troubleshooting.md does not name: {missing}"


def test_the_code_sets_no_reason_outside_the_vocabulary() -> None:
    """A reason written as a string must still be a member of ``runnerpool.reasons.Reason``."""
    strays = reasons_in_code() - {str(r) for r in Reason}
    assert strays == set(), f"add these to runnerpool.reasons.Reason (and the doc): {sorted(strays)}"
