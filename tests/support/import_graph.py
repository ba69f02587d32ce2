"""The import graph of a package, read from its source (tests/test_layers.py and
tests/test_engine_layers.py measure it).

Every import counts: those inside functions, under ``TYPE_CHECKING`` and relative ones.
A name is private when it starts with one underscore; :func:`imports` reports one taken
from another module (``from jsonmode.x import _y``, or ``x._y`` through an imported
module ``x``).
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator


def modules(package: pathlib.Path) -> dict[str, tuple[pathlib.Path, bool]]:
    """Every module of ``package`` by dotted name, with its file and whether it is a
    package's ``__init__``."""
    found: dict[str, tuple[pathlib.Path, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def imports(
    name: str, path: pathlib.Path, is_package: bool, known: dict[str, tuple[pathlib.Path, bool]]
) -> Iterator[tuple[str, str | None]]:
    """(module imported, private name taken from it or None) for every import in a file
    and every ``module._name`` reached through an imported module's alias."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = name if is_package else name.rpartition(".")[0]
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name if alias.name in known else alias.name.rpartition(".")[0]
                if target in known:
                    yield target, None
                    if alias.asname:
                        aliases[alias.asname] = target
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    yield submodule, None
                    aliases[alias.asname or alias.name] = submodule
                elif source in known:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    yield source, alias.name if private else None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            yield aliases[node.value.id], node.attr


def graph(package: pathlib.Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    """The import edges between a package's modules, and the private names taken."""
    known = modules(package)
    edges: dict[str, set[str]] = {name: set() for name in known}
    private: dict[tuple[str, str], set[str]] = {}
    for name, (path, is_package) in known.items():
        for target, taken in imports(name, path, is_package, known):
            if target == name:
                continue
            edges[name].add(target)
            if taken is not None:
                private.setdefault((name, target), set()).add(taken)
    return edges, private


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found
