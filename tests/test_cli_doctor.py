"""``jsonmode doctor`` (issue 43: a one-line notice of which mask engine path runs),
through the real command."""

from __future__ import annotations

import os
import subprocess
import sys

import jsonmode
from jsonmode import native


def _doctor(pure: bool, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "JSONMODE_NO_EXTENSIONS"}
    if pure:
        env["JSONMODE_NO_EXTENSIONS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "jsonmode.cli", "doctor", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_doctor_says_the_compiled_core_runs_by_default() -> None:
    done = _doctor(False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"jsonmode {jsonmode.__version__}"
    assert lines[1].startswith(f"python {sys.version_info.major}.{sys.version_info.minor}.")
    assert lines[2].startswith("mask engine: compiled core (C, "), lines[2]
    assert lines[3] == f"batch mask threads: {native.threads()} (JSONMODE_MASK_THREADS)"
    parts = [line.split(":")[0] for line in lines[4:]]
    assert parts == [
        "torch",
        "transformers",
        "vllm",
        "serve extra (jsonmode serve)",
        "tree-sitter (TypeScript schemas)",
    ]
    # (the dev environment has torch and the serve extra: their versions are shown)
    assert lines[4].startswith("torch: installed (torch ")
    assert lines[7].startswith("serve extra (jsonmode serve): installed (starlette ")


def test_doctor_says_pure_python_runs_when_switched_off() -> None:
    done = _doctor(True)
    assert done.returncode == 0, done.stderr
    assert "mask engine: pure Python (JSONMODE_NO_EXTENSIONS=1)" in done.stdout.splitlines()


def test_doctor_names_a_missing_part() -> None:
    code = (
        "import sys; sys.modules['vllm'] = None\n"  # (find_spec then raises ValueError)
        "from jsonmode.cli.doctor import facts\n"
        "print('\\n'.join(facts()))\n"
        "print(sorted(m for m in ('torch', 'transformers', 'litellm') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "vllm: not installed (vllm missing)" in lines
    assert lines[-1] == "[]", "doctor imported a heavy module"


def test_doctor_is_in_the_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jsonmode.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "doctor" in done.stdout
