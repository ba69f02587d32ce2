"""``ts-json-schema-generator`` (the reference TypeScript → JSON Schema tool) under Node,
for tests/test_typescript_reference.py (issue 44 item 2).

:func:`install` (a session fixture calls it) installs ``TS_JSON_SCHEMA_NPM`` with npm
into a temporary folder once per test session (npm's own cache is reused: a second
session installs offline in seconds) and copies tests/node/ts_json_schema.cjs beside
its ``node_modules``. :meth:`Reference.schemas` runs every file in ONE node process
(each file costs ~0.5 s there: a TypeScript program each; starting Node and loading
TypeScript ~2 s once).

Node is promised (``.ci/run`` installs Debian's ``nodejs`` and ``npm`` where missing):
a missing ``node`` or ``npm``, or a failed install, FAILS the test, never skips it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.node_client import npm_install

__all__ = ["SCRIPT", "TS_JSON_SCHEMA_NPM", "Reference", "install"]

#: Pinned to 2.4: the newest release that runs on Node 20 (the machine's, and
#: Debian's); 2.5 and later require Node >= 22.
TS_JSON_SCHEMA_NPM = "ts-json-schema-generator@~2.4.0"
SCRIPT = Path(__file__).resolve().parents[1] / "node" / "ts_json_schema.cjs"
INSTALL_LIMIT = 300.0  # seconds; ~5 s with a warm npm cache
RUN_LIMIT = 120.0


class Reference:
    """``node`` with ``ts-json-schema-generator`` installed in ``folder``."""

    def __init__(self, node: str, folder: Path) -> None:
        self.node = node
        self.folder = folder
        manifest = folder / "node_modules" / "ts-json-schema-generator" / "package.json"
        self.version: str = json.loads(manifest.read_text())["version"]

    def schemas(self, requests: list[tuple[Path, str]]) -> list[dict[str, Any]]:
        """The reference tool's schema for each (file, root type), in order; a file it
        cannot convert fails the test with its message."""
        payload = [{"path": str(path), "type": root} for path, root in requests]
        done = subprocess.run(
            [self.node, str(self.folder / SCRIPT.name)],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=self.folder,
            timeout=RUN_LIMIT,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"node {SCRIPT.name} exited {done.returncode}:\n{done.stderr[-4000:]}")
        answers: list[dict[str, Any]] = json.loads(done.stdout)
        for (path, root), answer in zip(requests, answers, strict=True):
            if "error" in answer:
                pytest.fail(f"ts-json-schema-generator failed on {path.name} ({root}): {answer}")
        return [answer["schema"] for answer in answers]


def install(folder: Path) -> Reference:
    """Install ``TS_JSON_SCHEMA_NPM`` into ``folder`` and copy the script there; fails
    (never skips) when node or npm is missing or the install does not succeed."""
    node = npm_install(folder, TS_JSON_SCHEMA_NPM, INSTALL_LIMIT)
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    return Reference(node, folder)
