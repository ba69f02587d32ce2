"""Function and scripted backends, backend resolution, litellm error mapping."""

import asyncio

import pytest

from jsonmode import (
    Completion,
    JsonMode,
    PermanentBackendError,
    TransientBackendError,
    TransportPolicy,
    UsageError,
)
from jsonmode.backends import FunctionBackend, ScriptedBackend, resolve
from jsonmode.backends.litellm import LiteLLMBackend, map_error, native_schema_for

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
FAST = TransportPolicy(sleep=lambda s: None, max_retries=1)


def test_function_taking_messages_gets_fresh_copies():
    seen = []

    def backend(messages):
        seen.append(messages)
        messages.append({"role": "user", "content": "mutated by the backend"})
        return '{"ok": true}' if len(seen) > 1 else "no"

    caller = [{"role": "user", "content": "hi"}]
    assert JsonMode(backend).generate(caller, SCHEMA) == {"ok": True}
    assert caller == [{"role": "user", "content": "hi"}]
    assert all(m["content"] != "mutated by the backend" for m in seen[1][:-1])


def test_function_annotated_str_gets_a_prompt():
    prompts = []

    def backend(prompt: str) -> str:
        prompts.append(prompt)
        return '{"ok": false}'

    assert JsonMode(backend).generate("question?", SCHEMA) == {"ok": False}
    assert "[system]" in prompts[0]
    assert "question?" in prompts[0]


def test_async_function_backend_in_sync_and_async_code():
    async def backend(messages):
        await asyncio.sleep(0)
        return '{"ok": true}'

    assert JsonMode(backend).generate("x", SCHEMA) == {"ok": True}
    assert asyncio.run(JsonMode(backend).agenerate("x", SCHEMA)) == {"ok": True}


def test_sync_function_backend_from_async_code_runs_in_a_thread():
    assert asyncio.run(JsonMode(lambda m: '{"ok": true}').agenerate("x", SCHEMA)) == {"ok": True}


def test_async_backend_from_sync_code_inside_a_loop_is_a_usage_error():
    async def backend(messages):
        return '{"ok": true}'

    async def misuse():
        return JsonMode(backend).generate("x", SCHEMA)

    with pytest.raises(UsageError, match="agenerate"):
        asyncio.run(misuse())


def test_function_exceptions_are_mapped():
    def flaky(messages):
        raise ConnectionError("refused")

    with pytest.raises(TransientBackendError) as info:
        JsonMode(flaky, transport=FAST).run("x", SCHEMA)
    assert isinstance(info.value.__cause__, ConnectionError)

    def broken(messages):
        raise KeyError("bug")

    with pytest.raises(PermanentBackendError):
        JsonMode(broken, transport=FAST).run("x", SCHEMA)


def test_function_must_return_text():
    with pytest.raises(UsageError, match="must return str"):
        JsonMode(lambda m: {"ok": True}).run("x", SCHEMA)


def test_function_may_return_completion():
    completion = Completion('{"ok": true}')
    assert JsonMode(lambda m: completion).generate("x", SCHEMA) == {"ok": True}


def test_scripted_backend_runs_out_loudly():
    with pytest.raises(PermanentBackendError, match="no replies"):
        JsonMode(ScriptedBackend([])).run("x", SCHEMA)


def test_resolve():
    assert isinstance(resolve(lambda m: ""), FunctionBackend)
    backend = ScriptedBackend([])
    assert resolve(backend) is backend
    assert isinstance(resolve("openai/x", api_base="http://h"), LiteLLMBackend)
    with pytest.raises(UsageError):
        resolve(backend, temperature=0)
    with pytest.raises(UsageError):
        resolve(lambda m: "", temperature=0)
    with pytest.raises(UsageError):
        resolve(42)
    with pytest.raises(UsageError, match="takes"):
        FunctionBackend(lambda m: "", takes="both")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "api_base", "native"),
    [
        ("openai/gpt-4o-mini", None, True),
        ("gpt-4o-mini", None, True),
        ("openai/local", "http://127.0.0.1:8000/v1", None),
        ("hosted_vllm/qwen", "http://127.0.0.1:8000/v1", True),
        ("ollama/llama3", None, True),
        ("ollama_chat/llama3", "http://127.0.0.1:11434", True),
        ("anthropic/claude", None, None),
    ],
)
def test_native_capability_table(model, api_base, native):
    assert native_schema_for(model, api_base) is native


def test_litellm_errors_map_to_transient_or_permanent():
    import httpx

    from jsonmode.backends.litellm import _litellm

    litellm = _litellm()  # imported the way jsonmode does: no network for the cost map

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")

    def response(status):
        return httpx.Response(status, request=request)

    cases = [
        (litellm.RateLimitError("slow down", "openai", "m", response=response(429)), True),
        (litellm.InternalServerError("boom", "openai", "m"), True),  # also refused connections
        (litellm.APIConnectionError("refused", "openai", "m"), True),
        (litellm.Timeout("late", "m", "openai"), True),
        (litellm.ServiceUnavailableError("busy", "openai", "m"), True),
        (litellm.BadRequestError("bad", "m", "openai"), False),
        (litellm.AuthenticationError("who", "openai", "m"), False),
        (litellm.NotFoundError("where", "m", "openai"), False),
        (litellm.PermissionDeniedError("no", "openai", "m", response=response(403)), False),
        (ValueError("litellm internal"), False),
    ]
    for exc, transient in cases:
        mapped = map_error(exc)
        assert isinstance(mapped, TransientBackendError) is transient, type(exc).__name__
        assert mapped.retryable is transient
