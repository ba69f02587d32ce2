"""Imports flow downward only (ARCHITECTURE.md): cli → façade → backends → decoding,
schema, repair → errors. Read from the source (every import statement, those inside
functions included), so a lazy import that closes a cycle is caught too."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jsonmode"


def imported(path: pathlib.Path) -> set[str]:
    """The jsonmode modules a file imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("jsonmode.")}


#: the public verbs, clients of jsonmode.session
VERBS = ("jsonmode.facade", "jsonmode.streaming", "jsonmode.batch", "jsonmode.texts")


def files(folder: str) -> list[pathlib.Path]:
    """Every module under ``folder``, its subpackages' included."""
    return sorted((PACKAGE / folder).rglob("*.py"))


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        # other models inside jsonmode never reach up to the façade, nor into adapters
        ("backends", ("jsonmode.facade", "jsonmode.adapters", "jsonmode.cli")),
        # the engine knows nothing of backends, the façade or adapters
        ("decoding", ("jsonmode.facade", "jsonmode.backends", "jsonmode.adapters")),
        # (schema/ uses the decoder's regex engine for `pattern`: that way is down)
        ("schema", ("jsonmode.facade", "jsonmode.backends", "jsonmode.adapters")),
        ("repair", ("jsonmode.facade", "jsonmode.backends", "jsonmode.decoding")),
        # the attempt session serves the public verbs and never reaches up to them
        ("session", (*VERBS, "jsonmode.decorator", "jsonmode.adapters", "jsonmode.cli")),
    ],
)
def test_imports_flow_downward(folder: str, forbidden: tuple[str, ...]) -> None:
    wrong = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in files(folder)
        for name in sorted(imported(path))
        if name.startswith(forbidden)
    ]
    assert wrong == []


def test_the_check_sees_subpackages() -> None:
    assert PACKAGE / "decoding" / "engine" / "cache.py" in files("decoding")


def test_the_check_sees_imports_inside_functions(tmp_path: pathlib.Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from jsonmode.facade import JsonMode\n", encoding="utf-8")
    assert "jsonmode.facade" in imported(probe)
