"""The house's import graph, read from the source (tests/support/import_graph.py:
imports inside functions, under ``TYPE_CHECKING`` and relative ones count, so a lazy
import is caught too). Three rules (ARCHITECTURE.md, docs/architecture.md):

- imports flow downward only: every module of jsonmode sits on one floor of
  :data:`FLOORS`, and imports only from its own floor and the floors below;
- no import circle;
- no module takes another module's private names (one leading underscore:
  ``from jsonmode.x import _y``, or ``x._y`` through an imported module ``x``).

The allow-lists :data:`ALLOWED_CIRCLES` and :data:`ALLOWED_PRIVATE` are empty and
should stay so: an entry needs a reason beside it that no redesign removes, and an
entry that is gone fails too (delete it).

A module that no floor names fails the test: a new module is placed here on purpose,
which is where a newcomer learns where a new tier, backend, keyword or grammar
syntax goes (docs/architecture.md, "Where new work goes").
"""

from __future__ import annotations

import pathlib

import pytest

from tests.support.import_graph import circles, graph

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jsonmode"

#: Import circles allowed, each as its set of modules, each with its reason.
ALLOWED_CIRCLES: list[frozenset[str]] = []

#: Private names one module may take from another: (importer, module) -> names, each
#: with its reason.
ALLOWED_PRIVATE: dict[tuple[str, str], frozenset[str]] = {}

#: Floors from the ground up: (floor, the top-level modules or rooms of jsonmode on it).
#: A room (``decoding``) stands for every module in it.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "ground floor",
        (
            "errors",
            "reasoning",
            "records",
            "result",
            "events",
            "limits",
            "budget",
            "lru",
            "_text",
            "_json",
            "_watchdog",
            "native",
        ),
    ),
    ("regex engine", ("regex",)),
    ("schemas", ("schema",)),
    ("reply text to value", ("repair",)),
    ("constrained decoder", ("decoding",)),
    ("backends, transport policy, metrics", ("backends", "retry", "metrics")),
    ("the attempt session", ("session",)),
    ("public verbs", ("facade", "streaming", "batch", "texts")),
    ("entry points", ("", "cli", "serve", "adapters", "decorator", "demo", "_traffic", "_startup")),
)


def floor_of(module: str) -> int | None:
    """The floor number of a dotted ``jsonmode`` module (``""`` stands for the package's
    ``__init__``), or None when no floor names it."""
    top = module.removeprefix("jsonmode").removeprefix(".").split(".")[0]
    for number, (_, names) in enumerate(FLOORS):
        if top in names:
            return number
    return None


def upward(package: pathlib.Path) -> tuple[list[str], list[str]]:
    """(imports that run up the floors, modules on no floor) in ``package``."""
    edges, _ = graph(package)
    unplaced = sorted(name for name in edges if floor_of(name) is None)
    wrong = []
    for importer, targets in sorted(edges.items()):
        here = floor_of(importer)
        for target in sorted(targets):
            there = floor_of(target)
            if here is not None and there is not None and there > here:
                wrong.append(
                    f"{importer} ({FLOORS[here][0]}) imports {target} ({FLOORS[there][0]})"
                )
    return wrong, unplaced


def test_imports_flow_downward() -> None:
    wrong, unplaced = upward(PACKAGE)
    assert wrong == []
    assert unplaced == [], "place these modules on a floor of FLOORS"


def test_every_name_on_a_floor_exists() -> None:
    """A floor that names a module or room no longer there is a stale map."""
    present = {path.stem for path in PACKAGE.glob("*.py")} | {
        path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()
    }
    named = {name for _, names in FLOORS for name in names if name}
    assert named - present == set()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # a lazy import inside a function, running up from the engine to the façade
        ("def f():\n    from jsonmode.facade import JsonMode\n", ["jsonmode.decoding.x"]),
        # the same under TYPE_CHECKING
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from jsonmode.backends import base\n",
            ["jsonmode.decoding.x"],
        ),
        # a relative import up into the session's room
        ("from ..session import drive\n", ["jsonmode.decoding.x"]),
        # downward is fine
        ("from jsonmode.errors import JsonModeError\n", []),
    ],
)
def test_the_check_sees_every_upward_import(
    tmp_path: pathlib.Path, source: str, expected: list[str]
) -> None:
    package = tmp_path / "jsonmode"
    for room in ("decoding", "backends", "session"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("", encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    for name in ("facade", "errors"):
        (package / f"{name}.py").write_text("", encoding="utf-8")
    (package / "backends" / "base.py").write_text("", encoding="utf-8")
    (package / "session" / "drive.py").write_text("", encoding="utf-8")
    (package / "decoding" / "x.py").write_text(source, encoding="utf-8")
    wrong, unplaced = upward(package)
    assert [line.split(" ")[0] for line in wrong] == expected
    assert unplaced == []


def test_a_module_on_no_floor_is_named(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "jsonmode"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "stray.py").write_text("", encoding="utf-8")
    assert upward(package) == ([], ["jsonmode.stray"])


def _short(name: str) -> str:
    return name.removeprefix("jsonmode.")


def test_no_import_circle() -> None:
    edges, _ = graph(PACKAGE)
    assert sorted(map(sorted, circles(edges))) == sorted(map(sorted, ALLOWED_CIRCLES))


def test_no_private_name_taken_from_another_module() -> None:
    _, private = graph(PACKAGE)
    found = {(_short(a), _short(b)): frozenset(names) for (a, b), names in private.items()}
    assert found == ALLOWED_PRIVATE


def test_the_graph_sees_every_kind_of_import(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "jsonmode"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "inner" / "__init__.py").write_text("", encoding="utf-8")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jsonmode import b\n",
        encoding="utf-8",
    )
    (package / "b.py").write_text(
        "def f():\n    from .inner import c\n    return c._hidden\n", encoding="utf-8"
    )
    (package / "inner" / "c.py").write_text(
        "import jsonmode.a as a\nfrom ..b import _g\n", encoding="utf-8"
    )
    edges, private = graph(package)
    assert circles(edges) == [frozenset({"jsonmode.a", "jsonmode.b", "jsonmode.inner.c"})]
    assert private == {
        ("jsonmode.b", "jsonmode.inner.c"): {"_hidden"},
        ("jsonmode.inner.c", "jsonmode.b"): {"_g"},
    }
