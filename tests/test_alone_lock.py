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

# A child: runs the tests argv[2] names, a comma-separated list of "alone" and "shared",
# the way conftest does: for each, alone.enter, "<label> in" written to the log, a wait until
# the file <folder>/<label> exists (the parent's go-ahead), "<label> out", alone.leave
# (keeping an exclusive hold when the next test is alone too). A label is the child's name,
# numbered from 1 when it runs several tests.
CHILD = """
import sys, time
from pathlib import Path
from support import alone
name, modes, folder, log = sys.argv[1:5]
modes = modes.split(",")
for index, mode in enumerate(modes):
    label = name if len(modes) == 1 else f"{name}{index + 1}"
    alone.enter(mode == "alone")
    with open(log, "a") as out:
        out.write(f"{label} in\\n")
    while not (Path(folder) / label).exists():
        time.sleep(0.01)
    with open(log, "a") as out:
        out.write(f"{label} out\\n")
    following = modes[index + 1] if index + 1 < len(modes) else None
    alone.leave(keep=mode == "alone" and following == "alone")
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

    def start(self, name: str, modes: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, name, modes, str(self.folder), str(self.log)],
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


def test_a_workers_alone_tests_in_a_row_are_one_stretch(run: Run) -> None:
    run.start("loner", "alone,alone,shared")
    run.wait_for("loner1 in")
    other = run.start("other", "shared")
    run.wait_blocked(other)
    run.release("loner1")
    run.wait_for("loner2 in")  # the next alone test went on without letting go
    assert "other in" not in run.lines()
    run.release("loner2")
    run.wait_for("other in")  # the lock was let go after the last alone one
    run.release("other")
    run.release("loner3")
    lines = run.finish()
    assert lines[:4] == ["loner1 in", "loner1 out", "loner2 in", "loner2 out"]
    assert sorted(lines[4:]) == ["loner3 in", "loner3 out", "other in", "other out"]


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
