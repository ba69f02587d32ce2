"""bench/ab.py: two versions of the mask engine in one process (run as a script)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "ab.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_a_version_against_itself_walks_the_same_tokens():
    done = _run(str(ROOT), "--schemas", "2")
    assert done.returncode == 0, done.stderr
    calls = re.findall(r"^([AB]): (\d+) mask calls, total [\d.]+ s", done.stdout, re.M)
    assert [label for label, _ in calls] == ["A", "B"]
    assert calls[0][1] == calls[1][1] != "0"
    assert re.search(r"^B / A: \d+\.\d{3}$", done.stdout, re.M)
    pattern = r"^([AB]): compile median [\d.]+ ms over (\d+) schemas"
    compiled = re.findall(pattern, done.stdout, re.M)
    assert compiled == [("A", "2"), ("B", "2")]
    assert re.search(r"^compile B / A: \d+\.\d{3}$", done.stdout, re.M)
    # One fresh process per parity (which version walks a schema first), each reported.
    parities = re.findall(
        r"^parity (\d): B / A \d+\.\d{3}, compile B / A \d+\.\d{3}$", done.stdout, re.M
    )
    assert parities == ["0", "1"]


def test_one_parity_is_one_process():
    done = _run(str(ROOT), "--schemas", "2", "--parity", "1")
    assert done.returncode == 0, done.stderr
    assert not re.search(r"^parity", done.stdout, re.M)
    assert re.search(r"^B / A: \d+\.\d{3}$", done.stdout, re.M)
    assert re.search(r"^compile B / A: \d+\.\d{3}$", done.stdout, re.M)


def test_a_root_without_jsonmode_is_refused(tmp_path):
    done = _run(str(tmp_path))
    assert done.returncode != 0
    assert "no jsonmode package there" in done.stderr
