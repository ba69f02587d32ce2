"""Which mask-engine path runs: the compiled core (``jsonmode._native``) or pure Python.

The compiled core is one C extension built at install (``setup.py``): the C forms of
the engine's innermost loops (parse stacks stepping over the token trie and over a
boundary group's rests, :meth:`TokenTrie.walk_stacks
<jsonmode.decoding.engine.trie.TokenTrie.walk_stacks>` and :meth:`Stacks.finish
<jsonmode.decoding.engine.boundary.Stacks.finish>`), the numbering of those parse
stacks and their closures (:class:`~jsonmode.decoding.engine.boundary.Stacks`, whose
compiled form the walks call directly) and the batch row writer of
:class:`~jsonmode.decoding.batch_masks.BatchMasker`, which releases the GIL and
spreads a batch's rows over threads, the copy of a cached mask into a caller's
token bitmask (:meth:`Matcher.fill_bitmask
<jsonmode.decoding.matcher.Matcher.fill_bitmask>`); and at compile time each grammar
rule's NFA, built from its expression, and its subset construction
(:mod:`~jsonmode.decoding.automata.network`) and the regex engine's subset construction
and Hopcroft minimisation (:func:`jsonmode.regex.char_dfa.minimize_raw`) and the byte
automata of its character DFAs (:func:`jsonmode.regex.utf8_byte_dfa`,
:func:`jsonmode.regex.json_string_body_dfa`), and at a rule's first walks its states'
bounded-depth behaviour hashes (``state_hashes`` in
:mod:`~jsonmode.decoding.engine.state`). The pure-Python forms stay in the
package as the reference and the fallback, and give the same answers (the differential
tests hold them to it).

Which one runs is decided once, at import:

- ``JSONMODE_NO_EXTENSIONS=1`` in the environment: pure Python;
- else the extension when it imports and its ``KERNELS_VERSION`` is this module's
  (a stale build left beside newer sources is not used);
- else pure Python (the build failed or was skipped at install).

:func:`describe` says which, and why, in one line (``jsonmode doctor`` prints it).
:data:`KERNELS` is the loaded extension or None; engine code reads it at each call,
so :func:`use` (tests, benchmarks) switches paths for calls made after it.

``JSONMODE_MASK_THREADS`` bounds the threads a batch's rows are written by (default:
the CPUs this process may run on, at most 8); :func:`threads` reads it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from types import ModuleType

__all__ = ["KERNELS", "KERNELS_VERSION", "describe", "threads", "use"]

#: The kernels' interface version this package's Python expects of ``jsonmode._native``.
KERNELS_VERSION = 13
_MAX_THREADS = 8


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("JSONMODE_NO_EXTENSIONS") == "1":
        return None, "pure Python (JSONMODE_NO_EXTENSIONS=1)"
    try:
        module = importlib.import_module("jsonmode._native")
    except ImportError as exc:
        return None, f"pure Python (the compiled core is not built: {exc})"
    version = getattr(module, "KERNELS_VERSION", None)
    if version != KERNELS_VERSION:
        return None, (
            f"pure Python (the compiled core at {module.__file__} is version {version}, "
            f"not {KERNELS_VERSION}: reinstall jsonmode to rebuild it)"
        )
    return module, f"compiled core (C, {module.__file__})"


_LOADED, _WHY = _load()
#: The compiled kernels in use, or None for the pure-Python engine (see module docstring).
KERNELS: ModuleType | None = _LOADED


def describe() -> str:
    """One line: which path the mask engine runs, and why (see the module docstring)."""
    if KERNELS is None and _LOADED is not None:
        return "pure Python (switched off by jsonmode.native.use)"
    return _WHY


def threads() -> int:
    """Threads a batch's logits rows are written by (``JSONMODE_MASK_THREADS``, else
    the CPUs this process may use, at most 8; at least 1). An unreadable value is 1."""
    given = os.environ.get("JSONMODE_MASK_THREADS")
    if given is not None:
        try:
            return max(1, min(64, int(given)))
        except ValueError:
            return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not on every platform)
        cpus = os.cpu_count() or 1
    return max(1, min(_MAX_THREADS, cpus))


@contextlib.contextmanager
def use(compiled: bool) -> Iterator[None]:
    """Within the block, run the compiled kernels (``True``, when loaded) or the
    pure-Python ones (``False``). For tests and benchmarks: it switches the process,
    not a thread, so calls running in other threads meanwhile may take either path
    (each call reads :data:`KERNELS` once, and both paths give the same answers)."""
    global KERNELS
    before = KERNELS
    KERNELS = _LOADED if compiled else None
    try:
        yield
    finally:
        KERNELS = before
