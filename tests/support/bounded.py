"""Run Python code in a fresh interpreter with a hard time limit.

For tests of "this ends in bounded time": the old code under test may not end at all,
and a test must then fail (not hang the suite), with the child's output kept.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def run_python(code: str, seconds: float, *args: str, what: str = "the child") -> str:
    """``python -c code args...``; its stdout. Fails the test when it runs past
    ``seconds`` or exits non-zero (with the tail of its stderr)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} was still running after {seconds} s")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
