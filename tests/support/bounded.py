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


#: Python source that defines ``peak_mb()`` in a child: its own peak resident memory
#: in MB (``VmHWM``, the high-water mark of its address space). Not ``ru_maxrss``:
#: Linux carries a process's peak across fork and exec, so a child started by a large
#: pytest process reads the parent's size (an 800 MB parent: 813 MB for a child that
#: held 14 MB), and a growth measured from it reads zero.
PEAK_MB = """
def peak_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")
"""


def run_jsonmode(*args: object, seconds: float) -> subprocess.CompletedProcess[str]:
    """``python -m jsonmode.cli args...`` (the command as installed, from this tree),
    its output captured as text. Fails the test when it runs past ``seconds``; the exit
    status is the caller's to check."""
    command = [sys.executable, "-m", "jsonmode.cli", *map(str, args)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"jsonmode {args[0] if args else ''} was still running after {seconds} s")
