"""Function and scripted backends, backend resolution, litellm error mapping, deadlines
and Retry-After."""

import asyncio
import socket
import ssl
import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

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
from jsonmode.backends import deadline as _deadline
from jsonmode.backends.litellm import LiteLLMBackend, map_error, native_schema_for
from jsonmode.retry import parse_retry_after

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


# -- connection failures (issue 38): what happened and where, not "HTTP 500" -------------------


def _wrapped(cause, url="http://127.0.0.1:8000/v1/chat/completions", connect=True):
    """``cause`` wrapped the way httpx, the OpenAI SDK and litellm wrap it (litellm's
    outermost InternalServerError carries its made-up status 500)."""
    import httpx
    import openai

    from jsonmode.backends.litellm import _litellm

    litellm = _litellm()
    request = httpx.Request("POST", url)
    kind = httpx.ConnectError if connect else httpx.ReadError
    transport = kind(str(cause), request=request)
    transport.__cause__ = cause
    sdk = openai.APIConnectionError(request=request)
    sdk.__cause__ = transport
    outer = litellm.InternalServerError(
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection error.",
        "openai",
        "m",
    )
    outer.__cause__ = sdk
    return outer


def _certificate_error():
    error = ssl.SSLCertVerificationError(
        1,
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
        "certificate (_ssl.c:1006)",
    )
    error.verify_message = "self-signed certificate"
    return error


@pytest.mark.parametrize(
    ("cause", "url", "connect", "said"),
    [
        (
            ConnectionRefusedError(111, "Connection refused"),
            "http://127.0.0.1:8000/v1/chat/completions",
            True,
            "cannot connect to 127.0.0.1:8000 (connection refused)",
        ),
        (
            socket.gaierror(-2, "Name or service not known"),
            "https://api.example.invalid/v1/chat/completions",
            True,
            "cannot connect to api.example.invalid:443 "
            "(host name not found: Name or service not known)",
        ),
        (
            ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            "https://127.0.0.1:8443/v1/chat/completions",
            True,
            "cannot connect to 127.0.0.1:8443 (TLS handshake failed: wrong version number)",
        ),
        (
            _certificate_error(),
            "https://llm.internal/v1/chat/completions",
            True,
            "cannot connect to llm.internal:443 "
            "(TLS handshake failed: certificate verify failed: self-signed certificate)",
        ),
        (
            ConnectionResetError(104, "Connection reset by peer"),
            "http://[::1]:8000/v1/chat/completions",
            False,
            "lost the connection to [::1]:8000 (connection reset by peer)",
        ),
        (
            OSError(101, "Network is unreachable"),
            "http://10.0.0.9/v1/chat/completions",
            True,
            "cannot connect to 10.0.0.9:80 (Network is unreachable)",
        ),
    ],
    ids=["refused", "dns", "tls", "certificate", "reset", "unreachable"],
)
def test_a_connection_failure_says_what_happened_and_where(cause, url, connect, said):
    mapped = map_error(_wrapped(cause, url, connect))
    assert isinstance(mapped, TransientBackendError)  # retried like any transient failure
    assert mapped.message == said
    assert mapped.status_code is None  # no response came: litellm's 500 is made up
    assert mapped.retry_after is None


def test_a_connect_timeout_is_a_connection_failure():
    import httpx
    import openai

    from jsonmode.backends.network import connection_failure

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    timeout = httpx.ConnectTimeout("timed out", request=request)
    sdk = openai.APITimeoutError(request=request)
    sdk.__cause__ = timeout
    assert connection_failure(sdk) == "cannot connect to 127.0.0.1:9 (timed out)"


def test_a_server_that_answered_is_never_a_connection_failure():
    import httpx
    import openai

    from jsonmode.backends.litellm import _litellm
    from jsonmode.backends.network import connection_failure

    litellm = _litellm()
    request = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")
    response = httpx.Response(500, request=request)
    status = httpx.HTTPStatusError("500", request=request, response=response)
    sdk = openai.InternalServerError("Error code: 500 - boom", response=response, body=None)
    sdk.__cause__ = status
    outer = litellm.InternalServerError("boom", "openai", "m", response=response)
    outer.__cause__ = sdk
    assert connection_failure(outer) is None
    mapped = map_error(outer)
    assert mapped.status_code == 500
    assert mapped.message == "InternalServerError (HTTP 500): boom"
    # nothing underneath at all: not a connection failure either
    assert connection_failure(litellm.InternalServerError("boom", "openai", "m")) is None
    assert connection_failure(ValueError("x")) is None


def test_a_cyclic_exception_chain_ends():
    from jsonmode.backends.network import connection_failure

    first, second = ValueError("a"), ValueError("b")
    first.__cause__, second.__context__ = second, first
    assert connection_failure(first) is None


# -- deadlines (issue 22): a call ends by its timeout, whatever the backend ---------------------


@pytest.fixture(autouse=True)
def _no_abandoned_workers():
    """Counts below are exact: wait for workers other tests abandoned to end."""
    for _ in range(500):
        if _deadline.abandoned() == 0:
            return
        time.sleep(0.01)


ONE_CALL = TransportPolicy(max_retries=0)
SLACK = 1.0


def _timed(fn):
    started = time.perf_counter()
    with pytest.raises(TransientBackendError) as info:
        fn()
    return time.perf_counter() - started, info.value


def _held(release: threading.Event):
    """A sync backend that answers only once ``release`` is set (30 s at most)."""

    def stuck(messages):
        release.wait(30)
        return '{"ok": true}'

    return stuck


def _no_abandoned_workers_left(seconds: float = 2.0) -> bool:
    ends = time.monotonic() + seconds
    while _deadline.abandoned() and time.monotonic() < ends:
        time.sleep(0.01)
    return _deadline.abandoned() == 0


def test_sync_function_past_its_timeout_is_given_up_and_runs_on_alone():
    release = threading.Event()
    finished = threading.Event()

    def stuck(messages):
        release.wait(30)
        finished.set()
        return '{"ok": true}'

    jm = JsonMode(stuck, timeout=0.3, transport=ONE_CALL)
    elapsed, error = _timed(lambda: jm.run("x", SCHEMA))
    assert 0.3 <= elapsed < 0.3 + SLACK
    assert "timeout of 0.3 s" in str(error)
    assert error.attempts[0].calls == 1
    assert _deadline.abandoned() == 1  # the worker runs on, counted, holding nothing
    release.set()
    assert finished.wait(5)
    assert _no_abandoned_workers_left()


def test_async_function_past_its_timeout_is_cancelled():
    cancelled = []

    async def stuck(messages):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return '{"ok": true}'

    jm = JsonMode(stuck, timeout=0.3, transport=ONE_CALL)
    elapsed, _ = _timed(lambda: asyncio.run(jm.arun("x", SCHEMA)))
    assert elapsed < 0.3 + SLACK
    elapsed, _ = _timed(lambda: jm.run("x", SCHEMA))  # sync code, async callable
    assert elapsed < 0.3 + SLACK
    assert cancelled == [True, True]


def test_sync_function_from_async_code_past_its_timeout_does_not_hold_the_loop():
    release = threading.Event()
    jm = JsonMode(_held(release), timeout=0.3, transport=ONE_CALL)
    try:
        # asyncio.run returns at the deadline: it does not wait for the abandoned thread
        elapsed, _ = _timed(lambda: asyncio.run(jm.arun("x", SCHEMA)))
        assert elapsed < 0.3 + SLACK
    finally:
        release.set()


def test_timeout_error_raised_by_an_async_function_is_not_the_deadline():
    async def fails(messages):
        raise TimeoutError("its own")

    with pytest.raises(TransientBackendError, match="its own"):
        asyncio.run(JsonMode(fails, timeout=5, transport=ONE_CALL).arun("x", SCHEMA))


def test_function_without_timeout_runs_in_the_callers_thread():
    threads = []

    def backend(messages):
        threads.append(threading.get_ident())
        return '{"ok": true}'

    jm = JsonMode(backend)
    assert jm.backend.timeout is None
    assert jm.generate("x", SCHEMA) == {"ok": True}
    assert threads == [threading.get_ident()]
    quick = JsonMode(backend, timeout=5)
    assert quick.generate("x", SCHEMA) == {"ok": True}
    assert asyncio.run(quick.agenerate("x", SCHEMA)) == {"ok": True}


def test_abandoned_workers_are_bounded(monkeypatch):
    monkeypatch.setattr(_deadline, "MAX_ABANDONED", 2)
    release = threading.Event()
    jm = JsonMode(_held(release), timeout=0.1, transport=ONE_CALL)
    try:
        for _ in range(2):
            _timed(lambda: jm.run("x", SCHEMA))
        threads = threading.active_count()
        elapsed, error = _timed(lambda: jm.run("x", SCHEMA))
        assert elapsed < 0.1  # refused at once, no thread started
        assert "still running" in str(error)
        assert threading.active_count() == threads
    finally:
        release.set()
    assert _no_abandoned_workers_left()
    assert JsonMode(lambda m: '{"ok": true}', timeout=0.5).generate("x", SCHEMA) == {"ok": True}


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1", True, [1]])
def test_function_timeout_must_be_a_positive_number(bad):
    with pytest.raises(UsageError, match="timeout"):
        JsonMode(lambda m: "", timeout=bad)


def test_litellm_backend_default_timeout_is_documented_and_applied():
    assert _deadline.DEFAULT_TIMEOUT == 120.0
    backend = LiteLLMBackend("openai/x", api_base="http://127.0.0.1:9/v1")
    assert backend.timeout == 120.0
    assert backend._arguments.__self__._options["timeout"] == 120.0  # the per-read backstop
    assert LiteLLMBackend("openai/x", timeout=7).timeout == 7.0


def test_transformers_timeout_stops_generation():
    pytest.importorskip("transformers")
    import torch
    from transformers import StoppingCriteria

    from jsonmode.demo import random_local_model

    model, tokenizer = random_local_model(seed=1)

    class Slow(StoppingCriteria):  # a slow model: 50 ms a token, never stops by itself
        def __call__(self, input_ids, scores, **kwargs):
            time.sleep(0.05)
            return torch.zeros((input_ids.shape[0],), dtype=torch.bool)

    jm = JsonMode(
        model,
        tokenizer=tokenizer,
        tier="prompted",
        max_new_tokens=400,
        timeout=0.5,
        stopping_criteria=[Slow()],
        eos_token_id=None,
        transport=ONE_CALL,
    )
    assert jm.backend.timeout == 0.5
    elapsed, error = _timed(lambda: jm.run("x", SCHEMA))
    assert elapsed < 0.5 + SLACK + 1.0  # one step past the deadline at most, plus set-up
    assert "timeout of 0.5 s" in str(error)


# -- Retry-After ---------------------------------------------------------------------------------


def test_parse_retry_after_forms():
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    date = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": " 2.5 "}) == 2.5
    assert parse_retry_after({"RETRY-AFTER": "0"}) == 0.0
    assert parse_retry_after({"Retry-After": date}, now=now) == 90.0
    past = format_datetime(now - timedelta(seconds=90), usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "soon", "Retry-After": "9"}) == 9.0
    assert parse_retry_after({"Retry-After": "9" * 400}) == float("inf")
    for bad in ["", "soon", "-5", "1e3", "nan", "inf", "2, 3", "Sun, 99 Foo 2026", "0x10", "Ⅻ"]:
        assert parse_retry_after({"Retry-After": bad}) is None, bad
    assert parse_retry_after(None) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"Retry-After": 2}) is None  # type: ignore[dict-item]


def _rate_limited(*waits):
    """A backend refused with these Retry-After values, then answering."""
    replies = iter(waits)

    def backend(messages):
        for wait in replies:
            raise TransientBackendError("429", status_code=429, retry_after=wait)
        return '{"ok": true}'

    return backend


def test_policy_waits_for_retry_after_even_past_max_wait():
    slept = []
    policy = TransportPolicy(sleep=slept.append, initial_wait=0.01, max_wait=0.02)
    result = JsonMode(_rate_limited(2.0, None, 30.0), transport=policy).run("x", SCHEMA)
    assert slept[0] == 2.0
    assert slept[1] <= 0.02  # no Retry-After: the policy's own backoff
    assert slept[2] == 30.0
    assert result.attempts[0].calls == 4
    assert result.attempts[0].transport_retries == 3


def test_policy_never_sleeps_past_max_delay():
    slept = []
    policy = TransportPolicy(sleep=slept.append, max_delay=5.0)
    with pytest.raises(TransientBackendError) as info:
        JsonMode(_rate_limited(6.0), transport=policy).run("x", SCHEMA)
    assert slept == []
    assert info.value.retry_after == 6.0
    assert info.value.status_code == 429
    assert "max_delay" in str(info.value)
    assert info.value.attempts[0].calls == 1
    # the policy's own backoff is trimmed to the time left, not slept past it
    slept.clear()
    policy = TransportPolicy(sleep=slept.append, initial_wait=100, max_wait=100, max_delay=3)
    JsonMode(_rate_limited(None), transport=policy).run("x", SCHEMA)
    assert len(slept) == 1
    assert slept[0] <= 3.0


def test_async_policy_honours_retry_after():
    slept = []

    async def asleep(seconds):
        slept.append(seconds)

    policy = TransportPolicy(async_sleep=asleep, initial_wait=0.01, max_wait=0.02, max_delay=10)
    result = asyncio.run(JsonMode(_rate_limited(3.0), transport=policy).arun("x", SCHEMA))
    assert slept == [3.0]
    assert result.attempts[0].calls == 2
    with pytest.raises(TransientBackendError, match="Retry-After"):
        asyncio.run(JsonMode(_rate_limited(11.0), transport=policy).arun("x", SCHEMA))
    assert slept == [3.0]


def test_litellm_error_carries_retry_after():
    import httpx

    from jsonmode.backends.litellm import _litellm

    litellm = _litellm()
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    limited = httpx.Response(429, request=request, headers={"Retry-After": "7"})
    mapped = map_error(litellm.RateLimitError("slow down", "openai", "m", response=limited))
    assert isinstance(mapped, TransientBackendError)
    assert mapped.retry_after == 7.0
    busy = httpx.Response(503, request=request, headers={"retry-after-ms": "250"})
    mapped = map_error(litellm.ServiceUnavailableError("busy", "openai", "m", response=busy))
    assert mapped.retry_after == 0.25
    assert map_error(litellm.InternalServerError("boom", "openai", "m")).retry_after is None
