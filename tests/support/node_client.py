"""The official ``openai`` npm package under Node, for tests that call ``jsonmode serve``
from another language (issue 42 item 7).

:func:`install` (called by a session fixture) installs ``openai`` (major ``OPENAI_NPM``)
with npm into a temporary folder once per test session (npm's own cache, ``~/.npm`` or
``npm_config_cache``, is reused: a second session installs offline in ~1 s), copies the
ESM scripts of tests/node/ beside its ``node_modules`` and runs them with ``node``.
A script reads its requests as JSON on stdin, gets the server's base URL and key from
``JSONMODE_BASE_URL`` / ``JSONMODE_API_KEY`` and prints one JSON document on stdout.

Node is promised (the issue's machine has it; ``.ci/run`` installs Debian's ``nodejs``
and ``npm`` where missing): a missing ``node`` or ``npm``, or a failed install, FAILS
the test, never skips it.

    @pytest.fixture(scope="session")
    def node_openai(tmp_path_factory: pytest.TempPathFactory) -> NodeClient:
        return install(tmp_path_factory.mktemp("node-openai"))
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

__all__ = ["OPENAI_NPM", "SCRIPTS", "NodeClient", "install", "npm_install"]

#: The npm package pinned to a major: 6 is the newest that runs on Node 20 (the
#: machine's, and Debian's); openai@7 requires Node >= 22.
OPENAI_NPM = "openai@6"
SCRIPTS = Path(__file__).resolve().parents[1] / "node"
INSTALL_LIMIT = 300.0  # seconds; ~5 s with a warm npm cache
RUN_LIMIT = 60.0


class NodeClient:
    """``node`` with the ``openai`` package installed in ``folder``."""

    def __init__(self, node: str, folder: Path) -> None:
        self.node = node
        self.folder = folder
        manifest = folder / "node_modules" / "openai" / "package.json"
        self.version: str = json.loads(manifest.read_text())["version"]

    def run(
        self,
        script: str,
        requests: Any,
        *,
        base_url: str,
        api_key: str = "unused",
        env: Mapping[str, str] | None = None,
        timeout: float = RUN_LIMIT,
    ) -> Any:
        """Run tests/node/``script`` with ``requests`` (JSON) on stdin; its stdout, parsed.

        A script that exits non-zero or prints no JSON fails the test with its stderr.
        """
        environment = {
            **os.environ,
            "JSONMODE_BASE_URL": base_url,
            "JSONMODE_API_KEY": api_key,
            **(env or {}),
        }
        done = subprocess.run(
            [self.node, str(self.folder / script)],
            input=json.dumps(requests),
            capture_output=True,
            text=True,
            cwd=self.folder,
            env=environment,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"node {script} exited {done.returncode}:\n{done.stderr[-4000:]}")
        try:
            return json.loads(done.stdout)
        except ValueError:
            pytest.fail(f"node {script} printed no JSON:\n{done.stdout[-2000:]}\n{done.stderr}")


def install(folder: Path) -> NodeClient:
    """Install ``OPENAI_NPM`` into ``folder`` and copy the scripts there; fails (never
    skips) when node or npm is missing or the install does not succeed."""
    node = npm_install(folder, OPENAI_NPM)
    for script in SCRIPTS.glob("*.mjs"):
        shutil.copy(script, folder / script.name)
    return NodeClient(node, folder)


def npm_install(folder: Path, package: str, limit: float = INSTALL_LIMIT) -> str:
    """Install the npm ``package`` (a name with its version range) into ``folder``;
    returns the path of ``node``. Fails the test (never skips) when node or npm is
    missing, or the install fails or takes over ``limit`` seconds."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "node and npm are required (apt-get install -y --no-install-recommends nodejs npm;"
            " .ci/run installs them)"
        )
    command = [npm, "install", "--no-audit", "--no-fund", "--prefer-offline"]
    command += ["--prefix", str(folder), package]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"npm install {package} took over {limit} s")
    if done.returncode != 0:
        pytest.fail(f"npm install {package} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return node
