"""External programs some integration tests drive: found, or a clear verdict.

Where the programs are promised (``JSONMODE_REQUIRE_TOOLS`` set, as ``.ci/run`` does
after installing them, or ``CI`` set, as hosted runners do) a missing program fails
the test; elsewhere the test is skipped with the command that installs it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

import pytest

__all__ = ["ARTIFACTS", "JSONMODE", "ROOT", "python_env", "require"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: Where tests leave files for people to look at (screenshots); kept by CI, ignored by git.
ARTIFACTS = pathlib.Path(os.environ.get("JSONMODE_TEST_ARTIFACTS", ROOT / "test-artifacts"))

_PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "chromium": "chromium"}


def require(program: str) -> str:
    """The path of ``program``; fails in CI, skips elsewhere, when it is missing."""
    found = shutil.which(program)
    if found:
        return found
    package = _PACKAGES.get(program, program)
    message = f"{program} is not installed: apt-get install -y --no-install-recommends {package}"
    if os.environ.get("JSONMODE_REQUIRE_TOOLS") or os.environ.get("CI"):
        pytest.fail(message + " (.ci/run installs it)")
    pytest.skip(message)


def python_env(**extra: str) -> dict[str, str]:
    """The environment for a ``python -m jsonmode.cli`` subprocess of this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


JSONMODE = [sys.executable, "-m", "jsonmode.cli"]
