"""litellm's cost on hostile replies, through real litellm against the scripted server
(tests/support/openai_server.py): a multi-megabyte error body, streams of one-byte
chunks (issue 39, items 8 and 10).

Each check runs in a fresh interpreter under a hard limit (tests/support/bounded.py):
the old code may take minutes, and the logging switch applies when jsonmode is the
first to import litellm.
"""

from __future__ import annotations

import json

import pytest
from support.bounded import run_python

pytestmark = pytest.mark.integration

PRELUDE = """
import asyncio, json, sys, threading, time
sys.path.insert(0, "tests")
from support.openai_server import HttpError, OpenAIServer, Reply
from jsonmode import JsonMode, PermanentBackendError, Schema, TransportPolicy
from jsonmode.backends.base import Request
from jsonmode.backends.litellm import LiteLLMBackend
asyncio.set_event_loop(None)
REQUEST = Request(({"role": "user", "content": "hi"},), Schema.of({"type": "string"}))
"""

HUGE_400 = (
    PRELUDE
    + """
body = "bad request: " + "x" * 3_000_000 + " END"
out = {}
with OpenAIServer([HttpError(400, "small")] * 2 + [HttpError(400, body)] * 8) as server:
    backend = LiteLLMBackend("openai/m", api_base=server.base_url, api_key="k", timeout=4)
    warmups = (lambda: backend.complete(REQUEST), lambda: asyncio.run(backend.acomplete(REQUEST)))
    for warm in warmups:
        try:  # litellm imports its error path on first use: not timed
            warm()
        except PermanentBackendError:
            pass
    for name, call in (
        ("sync", lambda: backend.complete(REQUEST)),
        ("async", lambda: asyncio.run(backend.acomplete(REQUEST))),
    ):
        start = time.perf_counter()
        try:
            call()
        except Exception as exc:
            out[name] = [type(exc).__name__, time.perf_counter() - start, len(str(exc))]
    before = server.request_count
    policy = TransportPolicy(max_retries=3, initial_wait=0.01, max_wait=0.02)
    model = JsonMode("openai/m", api_base=server.base_url, api_key="k", timeout=4, transport=policy)
    try:
        model.run("hi", {"type": "string"})
    except Exception as exc:
        out["run"] = [type(exc).__name__, server.request_count - before, exc.message[-40:]]
print(json.dumps(out))
"""
)


def test_a_multi_megabyte_400_is_permanent_quick_and_sent_once() -> None:
    # litellm ran its secret-redaction regexes over the whole body several times
    # (~10 us a character): a 3 MB body outlasted the 4 s deadline, and the permanent
    # 400 became a transient timeout, retried. The SDK client now gets a clipped body.
    out = json.loads(run_python(HUGE_400, 150, what="the 400 child"))
    for name in ("sync", "async"):
        kind, seconds, length = out[name]
        assert kind == "PermanentBackendError", out
        assert seconds < 2.0, out
        assert length < 2_200, out
    kind, requests, tail = out["run"]
    assert kind == "PermanentBackendError", out
    assert requests == 1, out  # never retried
    assert tail.endswith("x END"), out


STREAMS = (
    PRELUDE
    + """
LiteLLMBackend("openai/m").prepare()  # jsonmode imports litellm first, as a program would
import litellm.litellm_core_utils.thread_pool_executor as pool
submitted = 0
submit = pool.executor.submit
def counting(*args, **kwargs):
    global submitted
    submitted += 1
    return submit(*args, **kwargs)
pool.executor.submit = counting
text = '"' + "a" * 598 + '"'
calls = 4
script = [Reply('"w"')] + [Reply(text, pieces=tuple(text))] * (2 * calls)
with OpenAIServer(script) as server:
    backend = LiteLLMBackend("openai/m", api_base=server.base_url, api_key="k", timeout=120)
    list(backend.stream(REQUEST))
    time.sleep(0.5)
    threads, submitted = threading.active_count(), 0
    for _ in range(calls):
        *_, done = backend.stream(REQUEST)
        assert done.text == text
    async def read():
        return [piece async for piece in backend.astream(REQUEST)]
    for _ in range(calls):
        assert asyncio.run(read())[-1].text == text
    time.sleep(1.0)
    print(json.dumps({"tasks": submitted, "threads": threading.active_count() - threads}))
"""
)


def test_one_byte_chunks_run_no_logging_per_chunk_and_leave_no_threads() -> None:
    # litellm's per-chunk success logging ran a task on its logging pool for every
    # chunk (asyncio.run and the success handler each): 600 one-byte chunks made ~600
    # tasks per stream, and the pool grew to its 100 threads, left behind.
    out = json.loads(run_python(STREAMS, 300, what="the streaming child"))
    assert out["tasks"] <= 8 * 3, out  # a few per stream, not one per chunk
    assert out["threads"] <= 3, out
