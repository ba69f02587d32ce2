"""Two paths, one behaviour, end to end (issue 43): the mask engine on its compiled
path and on its pure-Python path, each in its own process, give the same masks, the
same ``advance`` verdicts and the same ``accepts`` verdicts over samples of the
correctness gates (MaskBench schemas walked along their valid instances and sampled
with random logits, the GBNF corpus of tests/test_grammar_decoding.py, files of the
JSON-Schema-Test-Suite): tests/support/native_digest.py digests each.

Also: the compiled path is the one loaded by default (a missing build fails CI, which
must build it), and a stale build (another ``KERNELS_VERSION``) is not used, with a
notice saying so.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from jsonmode import native

ROOT = pathlib.Path(__file__).resolve().parents[1]
DIGEST = ROOT / "tests" / "support" / "native_digest.py"


def _env(pure: bool) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "JSONMODE_NO_EXTENSIONS"}
    if pure:
        env["JSONMODE_NO_EXTENSIONS"] = "1"
    return env


def test_both_paths_give_the_same_masks_and_verdicts() -> None:
    command = [
        sys.executable,
        str(DIGEST),
        "--schemas",
        "16",
        "--suite-every",
        "3",
        "--fuzz-steps",
        "30",
    ]
    runs = [
        subprocess.Popen(
            command, env=_env(pure), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for pure in (False, True)
    ]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=240)
        assert run.returncode == 0, err[-4000:]
        results.append(json.loads(out))
    compiled, pure = results
    assert compiled["path"].startswith("compiled"), compiled["path"]
    assert pure["path"].startswith("pure Python"), pure["path"]
    assert len(compiled["digests"]) >= 16 + 10, sorted(compiled["digests"])
    differing = sorted(
        key for key in compiled["digests"].keys() | pure["digests"].keys()
        if compiled["digests"].get(key) != pure["digests"].get(key)
    )  # fmt: skip
    assert not differing, f"the paths differ on {differing}"


def test_the_compiled_path_is_the_default() -> None:
    if os.environ.get("JSONMODE_NO_EXTENSIONS") == "1":
        assert native.KERNELS is None
        assert native.describe() == "pure Python (JSONMODE_NO_EXTENSIONS=1)"
    else:
        assert native.KERNELS is not None, f"not compiled by default: {native.describe()}"
        assert native.describe().startswith("compiled core (C, ")


def test_switching_paths_in_process_says_so() -> None:
    if native.KERNELS is None:  # (the pure run of the gates: nothing loaded to switch on)
        before = native.describe()
        with native.use(True):
            assert native.KERNELS is None
            assert native.describe() == before
        return
    with native.use(False):
        assert native.KERNELS is None
        assert native.describe() == "pure Python (switched off by jsonmode.native.use)"
    assert native.describe().startswith("compiled")


STALE = """
import sys, types
fake = types.ModuleType("jsonmode._native")
fake.__file__ = "/stale/_native.so"
if {version!r} is not None:
    fake.KERNELS_VERSION = {version!r}
sys.modules["jsonmode._native"] = fake
from jsonmode import native
print(native.KERNELS is None)
print(native.describe())
"""


def test_a_stale_build_is_not_used_and_the_notice_says_why() -> None:
    for version in (native.KERNELS_VERSION + 1, 0, None):
        done = subprocess.run(
            [sys.executable, "-c", STALE.format(version=version)],
            env=_env(False),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        unused, notice = done.stdout.splitlines()
        assert unused == "True"
        assert notice == (
            f"pure Python (the compiled core at /stale/_native.so is version {version}, "
            f"not {native.KERNELS_VERSION}: reinstall jsonmode to rebuild it)"
        )


def test_a_missing_build_falls_back_with_the_notice() -> None:
    code = (
        "import sys; sys.modules['jsonmode._native'] = None\n"
        "from jsonmode import native; print(native.KERNELS is None); print(native.describe())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(False), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    unused, notice = done.stdout.splitlines()
    assert unused == "True"
    assert notice.startswith("pure Python (the compiled core is not built: ")


def test_ci_runs_gates_on_the_pure_python_path_too() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").replace("\\\n", " ")
    pytest = ["JSONMODE_NO_EXTENSIONS=1", "python", "-m", "pytest"]
    runs = [line.split() for line in script.splitlines() if line.split()[:4] == pytest]
    assert len(runs) == 1, runs
    words = runs[0]
    assert words[4:], "no test named"
    for target in words[4:]:
        path, _, name = target.partition("::")
        assert (ROOT / path).is_file(), target
        assert not name or f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), target
    assert "tests/test_native_paths.py::test_the_compiled_path_is_the_default" in words
