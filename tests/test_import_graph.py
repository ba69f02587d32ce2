"""The import graph, read from the source: no import circle and no private name taken
from another module (issue 40's measure; ARCHITECTURE.md's layers).

Every import counts: those inside functions, under ``TYPE_CHECKING`` and relative ones.
A name is private when it starts with one underscore; taking one from another module
(``from jsonmode.x import _y``, or ``x._y`` through an imported module ``x``) ties the
two modules' insides together.

Both allow-lists below are empty, and should stay so: an entry needs a reason written
beside it that no redesign removes. A listed entry that is gone fails too (delete it).
"""

from __future__ import annotations

import pathlib

from tests.support.import_graph import circles, graph

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jsonmode"

#: Import circles allowed, each as its set of modules, each with its reason.
KNOWN_CIRCLES: list[frozenset[str]] = []

#: Private names one module may take from another: (importer, module) -> names, each
#: with its reason.
KNOWN_PRIVATE: dict[tuple[str, str], frozenset[str]] = {}


def _short(name: str) -> str:
    return name.removeprefix("jsonmode.")


def test_no_new_import_circle() -> None:
    edges, _ = graph(PACKAGE)
    assert sorted(map(sorted, circles(edges))) == sorted(map(sorted, KNOWN_CIRCLES))


def test_no_new_private_name_taken_from_another_module() -> None:
    _, private = graph(PACKAGE)
    found = {(_short(a), _short(b)): frozenset(names) for (a, b), names in private.items()}
    assert found == KNOWN_PRIVATE


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
