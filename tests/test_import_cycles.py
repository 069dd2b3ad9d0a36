"""No import circle anywhere in the tree: every module can be read without the ones that read it.

A circle is two modules that each need the other (``a`` imports ``b`` imports ... imports
``a``): neither can be understood, tested or moved alone, and Python only imports them because
some import was pushed into a function or a ``TYPE_CHECKING`` block. So every import counts
here, wherever it is written: at module level, inside a function, and under ``TYPE_CHECKING``
(a type-only circle is still two modules that name each other; the test world had one,
``fakegithub.jobs`` <-> ``fakegithub.state``, and a function-level one through ``envtest``, the
node's seal and the simulator).

The graph is grimp's, the one ``lint-imports`` checks its contracts on; import-linter has no
contract for circles between modules (``acyclic_siblings`` works on packages' children as
wholes), so the strongly connected components are found here.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runnerpool", "secret_updater", "generators", "testworld", "tests", "bench")


def import_circles(*packages: str, cache_dir: str | None = None) -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (sorted)."""
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=cache_dir)
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    return _strongly_connected(edges)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, without recursion (the tree is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def test_no_module_of_the_tree_imports_itself_through_others() -> None:
    circles = import_circles(*PACKAGES)
    assert not circles, "import circles (move what both need into a module of its own):\n" + "\n".join(
        " <-> ".join(circle) for circle in circles
    )


def _write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("how", "files", "circle"),
    [
        (
            "at module level, through a third module",
            {
                "a.py": "from circ import b\n",
                "b.py": "from circ.sub import c\n",
                "sub/__init__.py": "",
                "sub/c.py": "import circ.a\n",
            },
            ["circ.a", "circ.b", "circ.sub.c"],
        ),
        (
            "inside a function",
            {"a.py": "from circ import b\n", "b.py": "def f():\n    from circ import a\n"},
            ["circ.a", "circ.b"],
        ),
        (
            "under TYPE_CHECKING",
            {
                "a.py": "from circ import b\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circ.a import X\n",
            },
            ["circ.a", "circ.b"],
        ),
    ],
)
def test_a_circle_is_found(
    how: str, files: dict[str, str], circle: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_package(tmp_path / "circ", {"__init__.py": "", "leaf.py": "X = 1\n", **files})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circ") == [circle], how


def test_a_tree_without_circles_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shared code below both users (what breaking a circle does) is not a circle."""
    _write_package(
        tmp_path / "tree",
        {
            "__init__.py": "from tree import a\n",
            "wait.py": "def poll_until(): ...\n",
            "a.py": "from tree import wait\nfrom tree import b\n",
            "b.py": "from tree.wait import poll_until\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("tree") == []
