"""The mask engine's modules in stage order (jsonmode/decoding/engine/__init__.py):
each imports only the engine modules before it, and only their public names. Read
from the source with the import graph of tests/support/import_graph.py (imports inside
functions and under ``TYPE_CHECKING`` count)."""

from __future__ import annotations

from tests.support.import_graph import graph
from tests.test_layers import PACKAGE

ENGINE = "jsonmode.decoding.engine"
# The order the package docstring gives: the ground floor, then stages 1 to 5.
ORDER = [
    "entries",
    "trie",
    "keyhashes",
    "facts",
    "state",
    "rules",
    "segments",
    "slices",
    "runs",
    "walk",
    "boundary",
    "cache",
]


def _engine_imports() -> dict[str, set[str]]:
    edges, _ = graph(PACKAGE)
    return {
        name.removeprefix(f"{ENGINE}."): {
            target.removeprefix(f"{ENGINE}.")
            for target in targets
            if target.startswith(f"{ENGINE}.")
        }
        for name, targets in edges.items()
        if name.startswith(f"{ENGINE}.")
    }


def test_the_order_names_every_engine_module() -> None:
    assert sorted(_engine_imports()) == sorted(ORDER)


def test_each_engine_module_imports_only_modules_before_it() -> None:
    imports = _engine_imports()
    backwards = {
        name: sorted(target for target in imports[name] if ORDER.index(target) >= at)
        for at, name in enumerate(ORDER)
    }
    assert {name: late for name, late in backwards.items() if late} == {}
    package_edges, _ = graph(PACKAGE)
    assert {t for t in package_edges[ENGINE] if t.startswith(f"{ENGINE}.")} == {f"{ENGINE}.cache"}


def test_no_engine_module_takes_another_ones_private_names() -> None:
    _, private = graph(PACKAGE)
    taken = {
        (importer, module): sorted(names)
        for (importer, module), names in private.items()
        if importer.startswith(ENGINE) or module.startswith(ENGINE)
    }
    assert taken == {}
