"""First contact: CI sets up exactly as the README says, and no test hangs on a warning's wording.

CI once passed in an environment kept from earlier runs while a fresh install failed 55
tests: a warning filter matched pydantic's wording, a new release reworded it, and the
warning became an error. These tests pin the two habits that prevent a repeat.
"""

from __future__ import annotations

import pathlib
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _quick_start() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quick start has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands_set_up_and_tests() -> None:
    lines = _quick_start()
    assert len(lines) == 2, lines
    setup, tests = lines
    assert setup.startswith("python -m venv "), "set-up must build a new virtual environment"
    assert "torch==2.13.0" in setup  # an unpinned torch pulls the CUDA build
    assert setup.endswith("jsonmode demo")
    assert tests == "python -m pytest"


def test_ci_runs_the_quick_start_verbatim_in_a_new_environment() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    lines = [line.strip() for line in script]
    setup, tests = _quick_start()
    assert setup in lines
    assert tests in lines
    assert lines.index(setup) + 1 == lines.index(tests)
    # The environment is removed first: a kept one hides what a new user meets.
    assert "rm -rf .venv" in " ".join(lines[: lines.index(setup)])
    assert "set -euo pipefail" in lines  # pytest's status (5: no tests) fails CI


def test_warning_filters_never_match_third_party_wording() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    filters = config["tool"]["pytest"]["ini_options"]["filterwarnings"]
    assert filters[0] == "error"
    for entry in filters[1:]:
        action, message, *rest = entry.split(":")
        assert action == "ignore", entry
        assert message == "", (
            f"filter {entry!r} matches a warning's wording; use category and module"
        )
        category = rest[0] if rest else ""
        assert category, f"filter {entry!r} names no category"
