"""The compiled core under AddressSanitizer and UndefinedBehaviorSanitizer (issue 43:
"no read past a buffer"): ``csrc/*.c`` (jsonmode._native) is built with
``-fsanitize=address,undefined`` into a temporary folder and loaded as
``jsonmode._native`` in a child process (libasan preloaded, Python's allocator set to
malloc so the kernels' own buffers are checked too), which runs the kernels' seeded
differential fuzz, every malformed call of tests/support/native_fuzz.py, and MaskBench
walks and grammar walks with random-logits sampling (tests/support/native_digest.py).
Any sanitizer report, or any difference from the pure-Python forms, fails the test.

A missing C compiler fails it too: CI and the development machines have gcc.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "csrc").glob("*.c"))
FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]


def build(folder: pathlib.Path) -> pathlib.Path:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the sanitizer build of jsonmode._native"
    target = folder / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    command = [
        gcc, *FLAGS, "-shared", "-fPIC", "-pthread", "-Wall",
        f"-I{sysconfig.get_paths()['include']}", *map(str, SOURCES), "-o", str(target),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
    return target


@pytest.mark.timeout(1800)  # (~25 s to build, ~50 s to run here; slower on a busy machine)
def test_the_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers(
    tmp_path: pathlib.Path,
) -> None:
    extension = build(tmp_path)
    asan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert os.path.isabs(asan), f"gcc has no libasan: {asan!r}"
    env = {
        **os.environ,
        "LD_PRELOAD": asan,
        "PYTHONMALLOC": "malloc",  # (pymalloc's arenas would hide the kernels' overruns)
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    env.pop("JSONMODE_NO_EXTENSIONS", None)
    command = [
        sys.executable, str(ROOT / "tests" / "support" / "native_digest.py"),
        "--extension", str(extension), "--kernel-cases", "300",
        "--schemas", "5", "--suite-every", "0", "--fuzz-steps", "20",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    report = done.stderr[-6000:]
    assert "ERROR: AddressSanitizer" not in done.stderr, report
    assert "runtime error:" not in done.stderr, report
    assert done.returncode == 0, report
    result = json.loads(done.stdout)
    assert result["path"].startswith("compiled"), result
    assert str(extension) in result["path"], result
    assert result["problems"] == [], result["problems"][:5]
    assert len(result["digests"]) >= 5
