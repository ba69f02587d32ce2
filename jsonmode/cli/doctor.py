"""``jsonmode doctor``: what this installation runs, one fact a line (see :mod:`jsonmode.cli`).

Prints jsonmode's version, Python's, which mask engine path runs and why
(:func:`jsonmode.native.describe`: the compiled core, or pure Python with the reason),
the threads a batch's masks are written by (:func:`jsonmode.native.threads`), and for
each optional part whether it is importable. The optional parts are looked up
(``importlib.util.find_spec`` and the installed metadata), never imported: the command
takes well under a second even where torch or vLLM is installed. Exit status 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import platform
import sys

__all__ = ["facts", "run"]

# (what it enables, the modules that must be importable, the distribution whose version is shown)
_PARTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("torch", ("torch",), "torch"),
    ("transformers", ("transformers",), "transformers"),
    ("vllm", ("vllm",), "vllm"),
    ("serve extra (jsonmode serve)", ("starlette", "uvicorn", "aiohttp"), "starlette"),
    ("tree-sitter (TypeScript schemas)", ("tree_sitter", "tree_sitter_typescript"), "tree-sitter"),
)


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # (a parent package that fails to import)
        return False


def _part(name: str, modules: tuple[str, ...], distribution: str) -> str:
    missing = [module for module in modules if not _found(module)]
    if missing:
        return f"{name}: not installed ({', '.join(missing)} missing)"
    try:
        return f"{name}: installed ({distribution} {importlib.metadata.version(distribution)})"
    except importlib.metadata.PackageNotFoundError:
        return f"{name}: installed"


def facts() -> list[str]:
    """The lines ``jsonmode doctor`` prints (see the module docstring)."""
    from jsonmode import __version__, native

    return [
        f"jsonmode {__version__}",
        f"python {platform.python_version()} "
        f"({platform.python_implementation()}, {sys.executable})",
        f"mask engine: {native.describe()}",
        f"batch mask threads: {native.threads()} (JSONMODE_MASK_THREADS)",
        *(_part(*part) for part in _PARTS),
    ]


def run(args: argparse.Namespace) -> int:
    """``jsonmode doctor``: :func:`facts` on stdout; 0."""
    for line in facts():
        print(line)
    return 0
