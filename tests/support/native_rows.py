"""A spy on the compiled core's batch row writer (``jsonmode._native.apply_rows``).

``RowsSpy`` stands in for :data:`jsonmode.native.KERNELS`: every kernel is the real
one, and each ``apply_rows`` call is recorded (row count, threads) before it is
forwarded, so a test can check that a path (BatchMasker, the transformers backend,
the vLLM processor) writes its rows through the compiled core, with how many threads.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import pytest

from jsonmode import native


def compiled_kernels() -> ModuleType:
    """The compiled core, which these tests need: skipped only where the environment
    turns it off on purpose (``JSONMODE_NO_EXTENSIONS=1``); a missing build fails."""
    if os.environ.get("JSONMODE_NO_EXTENSIONS") == "1":
        pytest.skip("JSONMODE_NO_EXTENSIONS=1: the compiled core is off in this run")
    with native.use(True):
        kernels = native.KERNELS
    assert kernels is not None, f"the compiled core is not loaded: {native.describe()}"
    return kernels


class RowsSpy:
    """The compiled kernels, with ``apply_rows`` calls recorded as (rows, threads)."""

    def __init__(self, kernels: ModuleType) -> None:
        self.kernels = kernels
        self.calls: list[tuple[int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernels, name)

    def apply_rows(
        self,
        host: Any,
        rows: list[int],
        ids: list[Any],
        keeps: list[bool],
        negative: int,
        threads: int,
    ) -> None:
        self.calls.append((len(rows), threads))
        self.kernels.apply_rows(host, rows, ids, keeps, negative, threads)


def spy_on_rows(monkeypatch: pytest.MonkeyPatch) -> RowsSpy:
    """Install a :class:`RowsSpy` as ``jsonmode.native.KERNELS`` for one test."""
    spy = RowsSpy(compiled_kernels())
    monkeypatch.setattr(native, "KERNELS", spy)
    return spy
