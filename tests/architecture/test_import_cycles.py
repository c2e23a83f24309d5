"""No module of Relaunch imports itself back through others, lazily or not.

import-linter's contracts (pyproject.toml) keep the layers apart; this test covers what they do
not: a cycle inside one layer or package. It walks grimp's import graph, the one import-linter
builds, and reports every strongly connected group of modules.
"""

from __future__ import annotations

import grimp

PACKAGES = ("controller", "trainer", "devstack")


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm over the module graph; groups of two or more modules are cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_no_module_is_part_of_an_import_cycle():
    graph = grimp.build_graph(*PACKAGES)
    assert strongly_connected(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    # The check above is only worth something if it can fail: two modules importing each other.
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert strongly_connected(graph) == [["pkg.a", "pkg.b"]]
