"""Keep ``import jsonmode`` fast.

jsonschema's ``format-nongpl`` extra imports ``rfc3987_syntax`` eagerly, and that
module compiles a grammar on import (about 1.4 s here), only to check the ``iri`` and
``iri-reference`` formats. Before jsonschema is imported we register a stand-in whose
``is_valid_syntax`` imports the real module on first use, so the checks still run
exactly as before but only programs that meet an IRI format pay for them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_NAME = "rfc3987_syntax"
_lock = threading.Lock()


def _real() -> types.ModuleType:
    with _lock:
        module = sys.modules.get(_NAME)
        if module is None or getattr(module, "__jsonmode_proxy__", False):
            sys.modules.pop(_NAME, None)
            module = importlib.import_module(_NAME)
    return module


def _real_is_valid_syntax(rule: str, value: str) -> Any:
    return _real().is_valid_syntax(rule, value)


def _delegate(name: str) -> Any:
    """Anything else asked of the stand-in comes from the real module.

    Dunder look-ups (``__path__``, ``__file__`` ...) come from the import system
    itself and must not load the real module.
    """
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return getattr(_real(), name)


def defer_slow_imports() -> None:
    """Install the stand-in unless jsonschema or rfc3987_syntax is already loaded."""
    if _NAME in sys.modules or "jsonschema" in sys.modules:
        return
    try:
        present = importlib.util.find_spec(_NAME) is not None
    except (ImportError, ValueError):
        present = False
    if not present:
        return
    proxy = types.ModuleType(_NAME)
    proxy.is_valid_syntax = _real_is_valid_syntax  # type: ignore[attr-defined]
    proxy.__jsonmode_proxy__ = True  # type: ignore[attr-defined]
    proxy.__getattr__ = _delegate  # type: ignore[method-assign]
    sys.modules[_NAME] = proxy
