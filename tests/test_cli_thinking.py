"""``jsonmode generate --reasoning``, run as a real subprocess against the scripted
OpenAI-compatible server (tests/support/openai_server.py)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest
from support.openai_server import OpenAIServer, Reply

from jsonmode.cli.generate import reasoning_option
from jsonmode.errors import UsageError
from jsonmode.reasoning import FAMILIES, Reasoning

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})


PREFIX = (sys.executable,)


def generate(server: OpenAIServer, schema: str, *more: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("JSONMODE_MODEL", None)
    options = ("--api-base", server.base_url, "--schema", schema, "--max-attempts", "1", *more)
    command = "import sys; from jsonmode.cli import main; sys.exit(main())"
    return subprocess.run(
        [*PREFIX, "-c", command, "generate", "--model", "openai/test-model", *options, "Who?"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_generate_splits_the_thinking_off_and_off_reads_it_whole(
    openai_server: Callable[..., OpenAIServer], tmp_path: pathlib.Path
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(SCHEMA, encoding="utf-8")
    # (litellm itself moves a leading <think> block into reasoning_content; it leaves
    # Magistral's spelling in the content)
    magistral = '[THINK]Maybe {"name": "Draft"}?[/THINK]{"name": "Ada"}'
    server = openai_server(
        Reply(magistral), Reply(magistral), Reply('<r>{"name": "x"}</r>{"name": "Ada"}')
    )
    done = generate(server, str(schema))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "Ada"}
    done = generate(server, str(schema), "--reasoning", "off")
    assert done.returncode != 0
    assert "output is not JSON" in done.stderr
    done = generate(server, str(schema), "--reasoning", "</r>")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "Ada"}


def test_reasoning_option_values() -> None:
    assert reasoning_option("auto") == "auto"
    assert reasoning_option("off") is None
    assert reasoning_option("[/THINK]") == FAMILIES["magistral"]
    assert reasoning_option("</r>") == Reasoning(end="</r>", start="<r>")
    assert reasoning_option("[/R]") == Reasoning(end="[/R]", start="[R]")
    assert reasoning_option("END") == Reasoning(end="END")
    with pytest.raises(UsageError):
        reasoning_option("")
