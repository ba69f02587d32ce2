"""The lock that lets ``alone`` tests run by themselves under pytest-xdist
(tests/support/alone.py), checked across real processes as xdist's workers use it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SUPPORT = Path(__file__).parent

# A child: takes the lock (exclusive when argv[2] == "alone"), writes "<name> in" to the
# log, waits until the file argv[3] exists (the parent's go-ahead), writes "<name> out".
CHILD = """
import sys, time
from pathlib import Path
from support import alone
name, mode, release, log = sys.argv[1:5]
with alone.held(mode == "alone"):
    with open(log, "a") as out:
        out.write(f"{name} in\\n")
    while not Path(release).exists():
        time.sleep(0.01)
    with open(log, "a") as out:
        out.write(f"{name} out\\n")
"""


class Run:
    """Children sharing one xdist run id, each a pretend worker."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = folder / "log"
        self.log.touch()
        self.children: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "PYTHONPATH": str(SUPPORT),
            "PYTEST_XDIST_TESTRUNUID": f"lock-test-{os.getpid()}-{folder.name}",
        }

    def start(self, name: str, mode: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, name, mode, str(self.folder / name), str(self.log)],
            env={**self.env, "PYTEST_XDIST_WORKER": name},
        )
        self.children.append(child)
        return child

    def release(self, name: str) -> None:
        (self.folder / name).touch()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def wait_for(self, line: str) -> None:
        deadline = time.monotonic() + 30
        while line not in self.lines():
            assert time.monotonic() < deadline, (line, self.lines())
            time.sleep(0.01)

    def wait_blocked(self, child: subprocess.Popen[bytes]) -> None:
        """Until the kernel lists ``child`` as waiting on a lock (/proc/locks "->")."""
        deadline = time.monotonic() + 30
        while not any(
            "->" in row and str(child.pid) in row.split()
            for row in Path("/proc/locks").read_text().splitlines()
        ):
            assert time.monotonic() < deadline, "the child never waited on the lock"
            assert child.poll() is None, "the child ended instead of waiting"
            time.sleep(0.01)

    def finish(self) -> list[str]:
        for child in self.children:
            assert child.wait(timeout=30) == 0
        return self.lines()


@pytest.fixture
def run(tmp_path: Path):
    started = Run(tmp_path)
    yield started
    for child in started.children:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_an_alone_test_waits_for_the_running_test_and_holds_off_the_next(run: Run) -> None:
    run.start("shared", "shared")
    run.wait_for("shared in")
    loner = run.start("alone", "alone")
    run.wait_blocked(loner)  # the running test keeps the lone one out
    late = run.start("late", "shared")
    run.wait_blocked(late)  # the turnstile: no new test starts while the lone one waits
    run.release("shared")
    run.wait_for("alone in")
    run.release("late")  # late may go ahead now, but only once the lone test ends
    time.sleep(0.2)
    assert "late in" not in run.lines()
    run.release("alone")
    order = ["shared in", "shared out", "alone in", "alone out", "late in", "late out"]
    assert run.finish() == order


def test_shared_tests_run_side_by_side(run: Run) -> None:
    run.start("first", "shared")
    run.start("second", "shared")
    run.wait_for("first in")
    run.wait_for("second in")  # both inside at once: neither was released yet
    run.release("first")
    run.release("second")
    assert sorted(run.finish()) == ["first in", "first out", "second in", "second out"]


def test_outside_xdist_the_lock_is_no_lock(run: Run) -> None:
    del run.env["PYTEST_XDIST_TESTRUNUID"]
    run.start("one", "alone")
    run.start("two", "alone")
    run.wait_for("one in")
    run.wait_for("two in")
    run.release("one")
    run.release("two")
    assert sorted(run.finish()) == ["one in", "one out", "two in", "two out"]
