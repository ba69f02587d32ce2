"""Tests that run alone while the suite runs on every core.

The suite runs on pytest-xdist workers (``-n logical`` in pyproject's addopts). Most tests do
not care what runs beside them; a test marked ``alone`` does: it bounds wall-clock time (a
compile deadline, a repair time limit, a timeout that must or must not fire), and a second
worker and its child processes on a 2-core CI machine stretch wall time several-fold.

``enter``/``leave`` (conftest calls them around each test's whole run: set-up, call,
teardown) hold a readers–writer lock shared by the workers of one run, made of two
``flock``-ed files: every test holds it shared, an ``alone`` test holds it exclusive, so an
``alone`` test starts only once the other workers' current tests have ended, and they start
no new test until it ends. The turnstile file makes a waiting ``alone`` test block new shared
holders (``flock`` alone would let a stream of shared holders starve it). A worker keeps its
exclusive hold from one ``alone`` test to the next one it runs (a module's, under
``--dist loadfile``), so they run as one stretch.

Outside xdist (``-n 0``, or a single test file run by hand) it does nothing. Locks are
released by the kernel if a worker dies, so a crashed worker never wedges the run.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

_files: dict[str, IO[bytes]] = {}
_held: list[bool] = []  # [alone?] while this worker holds the lock


def _lock_file(name: str) -> IO[bytes] | None:
    """This worker's open handle on the run's lock file ``name``; None outside xdist."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None or os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    if name not in _files:
        folder = Path(tempfile.gettempdir()) / f"jsonmode-tests-{run}"
        folder.mkdir(exist_ok=True)
        _files[name] = (folder / name).open("ab")
    return _files[name]


def enter(alone: bool) -> None:
    """Before a test: hold the run's lock, exclusive when ``alone``, shared otherwise
    (blocks until it is granted). An exclusive hold kept by :func:`leave` carries on."""
    if _held == [True] and alone:
        return
    leave(keep=False)
    turnstile, gate = _lock_file("turnstile"), _lock_file("gate")
    if turnstile is None or gate is None:
        return
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    finally:
        fcntl.flock(turnstile, fcntl.LOCK_UN)
    _held[:] = [alone]


def leave(keep: bool) -> None:
    """After a test: let go of the lock, unless ``keep`` (the next test of this worker
    is ``alone`` too: the run of a module's alone tests is not cut by the other workers'
    tests, each of which an alone test would wait out)."""
    if _held and not keep:
        gate = _lock_file("gate")
        if gate is not None:
            fcntl.flock(gate, fcntl.LOCK_UN)
        _held.clear()
