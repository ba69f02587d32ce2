"""The LangChain adapter through real langchain-core: LCEL chains with its fake chat
models, streaming, retry and fixing flows, and LangChain models as jsonmode backends."""

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from threading import Event
from typing import Any, ClassVar

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.exceptions import (
    ModelAuthenticationError,
    ModelRateLimitError,
    OutputParserException,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake import FakeListLLM, FakeStreamingListLLM
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel, Field

import jsonmode
from jsonmode import (
    AttemptsExhaustedError,
    Completion,
    JsonMode,
    OutputTruncatedError,
    PermanentBackendError,
    Schema,
    SchemaViolationError,
    TransientBackendError,
    TransportPolicy,
    Usage,
    UsageError,
)
from jsonmode.adapters.langchain import JsonModeParser, LangChainBackend, jsonmode_runnable
from jsonmode.backends import deadline
from jsonmode.backends.base import Request

GOOD = '{"name": "Ada Lovelace", "age": 36, "languages": ["English", "French"]}'
SLOPPY = "Sure!\n```json\n{'name': 'Ada Lovelace', 'age': '36', 'languages': ['English',],}\n```"
MISSING_AGE = '{"name": "Ada Lovelace", "languages": []}'


class Person(BaseModel):
    name: str
    age: int = Field(ge=0)
    languages: list[str]


ADA = Person(name="Ada Lovelace", age=36, languages=["English", "French"])


class Recorder(BaseCallbackHandler):
    """Records the messages every chat model call received (a LangChain callback)."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.calls.extend(messages)


def prompt_for(parser: JsonModeParser) -> ChatPromptTemplate:
    return ChatPromptTemplate.from_messages(
        [("system", "{format_instructions}"), ("human", "{text}")]
    ).partial(format_instructions=parser.get_format_instructions())


def no_wait(**overrides: Any) -> TransportPolicy:
    async def asleep(seconds: float) -> None:
        return None

    return TransportPolicy(sleep=lambda seconds: None, async_sleep=asleep, **overrides)


# -- the parser on its own ---------------------------------------------------------


def test_parser_is_a_langchain_output_parser_with_jsonmodes_format_instructions():
    from langchain_core.output_parsers import BaseOutputParser

    parser = JsonModeParser(Person)

    assert isinstance(parser, BaseOutputParser)
    instructions = parser.get_format_instructions()
    assert jsonmode.Schema.of(Person).prompt_form in instructions
    assert "exactly one JSON document" in instructions
    assert repr(parser) == "JsonModeParser('Person', mode='strict')"


def test_strict_parse_returns_the_model_instance():
    assert JsonModeParser(Person).parse(GOOD) == ADA


def test_strict_parse_refuses_slips_with_observation_and_raw_output():
    with pytest.raises(OutputParserException) as caught:
        JsonModeParser(Person).parse(MISSING_AGE)

    error = caught.value
    assert error.llm_output == MISSING_AGE
    assert error.send_to_llm
    assert error.observation is not None
    assert "- $ (required): 'age' is a required property" in error.observation
    assert isinstance(error.__cause__, SchemaViolationError)
    assert error.__cause__.raw == MISSING_AGE


def test_strict_parse_does_not_repair():
    with pytest.raises(OutputParserException, match="not JSON"):
        JsonModeParser(Person, mode="strict").parse(SLOPPY)


def test_repair_mode_repairs_through_jsonmode():
    assert JsonModeParser(Person, mode="repair").parse(SLOPPY) == Person(
        name="Ada Lovelace", age=36, languages=["English"]
    )


def test_output_schema_is_the_model():
    assert JsonModeParser(Person).get_output_jsonschema() == Person.model_json_schema()
    chain = FakeListChatModel(responses=[GOOD]) | JsonModeParser(Person)
    assert chain.get_output_jsonschema()["title"] == "Person"


def test_json_schema_dicts_give_plain_json():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert JsonModeParser(schema).parse('{"n": 1}') == {"n": 1}


def test_a_reply_cut_off_at_the_length_limit_is_reported_as_truncated():
    model = FakeListChatModel(responses=['{"name": "Ada Lovelace", "age": 3'])
    truncating = model | RunnableLambda(
        lambda message: AIMessage(
            content=message.content, response_metadata={"finish_reason": "length"}
        )
    )
    with pytest.raises(OutputParserException) as caught:
        (truncating | JsonModeParser(Person, mode="repair")).invoke("Ada")
    assert isinstance(caught.value.__cause__, OutputTruncatedError)
    assert "cut off" in (caught.value.observation or "")


def test_bad_arguments_are_usage_errors():
    with pytest.raises(UsageError):
        JsonModeParser(Person, mode="lenient")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        JsonModeParser(Person, diff=True)


# -- LCEL ----------------------------------------------------------------------------


def test_prompt_model_parser_chain():
    parser = JsonModeParser(Person)
    recorder = Recorder()
    chain = prompt_for(parser) | FakeListChatModel(responses=[GOOD]) | parser

    assert chain.invoke({"text": "Ada Lovelace, 36"}, config={"callbacks": [recorder]}) == ADA
    system, human = recorder.calls[0]
    assert parser.get_format_instructions() == system.content
    assert human.content == "Ada Lovelace, 36"


def test_chain_async_and_batch():
    parser = JsonModeParser(Person, mode="repair")
    chain = prompt_for(parser) | FakeListChatModel(responses=[GOOD, SLOPPY]) | parser

    assert asyncio.run(chain.ainvoke({"text": "a"})) == ADA
    assert chain.batch([{"text": "b"}], config={"max_concurrency": 1}) == [
        Person(name="Ada Lovelace", age=36, languages=["English"])
    ]


def test_streaming_yields_growing_partials_then_the_validated_value():
    parser = JsonModeParser(Person)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=GOOD)]))
    chunks = list((model | parser).stream("Ada"))

    *partials, final = chunks
    assert final == ADA
    assert len(partials) >= 3
    assert all(isinstance(partial, dict) for partial in partials)
    whole = json.loads(GOOD)
    for earlier, later in itertools.pairwise(partials):
        assert set(earlier) <= set(later)
    for partial in partials:
        assert set(partial) <= set(whole)
        assert all(partial[key] == whole[key] for key in partial if key == "age")
    assert "age" not in partials[0]


def test_async_streaming():
    parser = JsonModeParser(Person)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=GOOD)]))

    async def collect() -> list[Any]:
        return [chunk async for chunk in (model | parser).astream("Ada")]

    *partials, final = asyncio.run(collect())
    assert final == ADA
    assert partials
    assert partials[-1]["languages"][0] == "English"


def test_a_stream_that_ends_invalid_raises_after_its_partials():
    parser = JsonModeParser(Person)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=MISSING_AGE)]))
    seen: list[Any] = []

    def consume() -> None:
        seen.extend((model | parser).stream("Ada"))

    with pytest.raises(OutputParserException, match="age"):
        consume()
    assert seen
    assert seen[-1] == {"name": "Ada Lovelace", "languages": []}


def test_streaming_plain_text_chunks():
    parser = JsonModeParser({"type": "array", "items": {"type": "integer"}})
    chunks = list(parser.transform(iter(["[1, ", "22, ", "3", "]"])))
    assert chunks == [[1], [1, 22], [1, 22, 3], [1, 22, 3]]  # partials, then the value


def test_retry_flow_reinvokes_the_model_after_a_parser_exception():
    parser = JsonModeParser(Person)
    chain = (
        prompt_for(parser) | FakeListChatModel(responses=[MISSING_AGE, GOOD]) | parser
    ).with_retry(retry_if_exception_type=(OutputParserException,), stop_after_attempt=2)
    assert chain.invoke({"text": "Ada"}) == ADA


def test_fixing_flow_feeds_the_observation_and_raw_output_back_to_the_model():
    parser = JsonModeParser(Person)
    model = FakeListChatModel(responses=[MISSING_AGE, GOOD])
    recorder = Recorder()

    def fix_messages(inputs: dict[str, Any]) -> list[BaseMessage]:
        error: OutputParserException = inputs["error"]
        assert error.llm_output is not None
        assert error.observation is not None
        return [
            HumanMessage(inputs["text"]),
            AIMessage(error.llm_output),
            HumanMessage(error.observation),
        ]

    fixer = RunnableLambda(fix_messages) | model | parser
    chain = (prompt_for(parser) | model | parser).with_fallbacks(
        [fixer], exceptions_to_handle=(OutputParserException,), exception_key="error"
    )

    assert chain.invoke({"text": "Ada"}, config={"callbacks": [recorder]}) == ADA
    _, previous, observation = recorder.calls[1]
    assert previous.content == MISSING_AGE
    assert "'age' is a required property" in str(observation.content)


# -- LangChain models as jsonmode backends --------------------------------------------


def test_jsonmode_takes_a_chat_model_directly():
    recorder = Recorder()
    model = FakeListChatModel(responses=[MISSING_AGE, GOOD], callbacks=[recorder])
    jm = JsonMode(model)

    assert isinstance(jm.backend, LangChainBackend)
    assert jm.backend.name == "langchain:FakeListChatModel"
    result = jm.run("Ada Lovelace, 36", Person)

    assert result.value == ADA
    assert [attempt.outcome for attempt in result.attempts] == ["schema_violation", "valid"]
    first, reask = recorder.calls
    assert first[0].type == "system"
    assert jsonmode.Schema.of(Person).prompt_form in str(first[0].content)
    assert first[1].content == "Ada Lovelace, 36"
    assert reask[2].type == "ai"
    assert reask[2].content == MISSING_AGE
    assert "'age' is a required property" in str(reask[3].content)


def test_async_backend_reports_usage_from_usage_metadata():
    reply = AIMessage(
        content=GOOD,
        usage_metadata={"input_tokens": 120, "output_tokens": 30, "total_tokens": 150},
    )
    jm = JsonMode(GenericFakeChatModel(messages=iter([reply])))

    result = asyncio.run(jm.arun("Ada", Person))

    assert result.value == ADA
    assert result.usage == jsonmode.Usage(120, 30)


def test_backend_reports_truncation_from_the_finish_reason():
    reply = AIMessage(
        content='{"name": "Ada", "age": 3', response_metadata={"finish_reason": "length"}
    )
    jm = JsonMode(GenericFakeChatModel(messages=iter([reply])), mode="repair", max_attempts=1)

    with pytest.raises(AttemptsExhaustedError) as caught:
        jm.generate("Ada", Person)
    assert caught.value.attempts[0].outcome == "truncated"


def test_text_llms_are_backends_too():
    llm = FakeListLLM(responses=[MISSING_AGE, GOOD])
    result = JsonMode(llm).run("Ada", Person)
    assert result.value == ADA
    assert len(result.attempts) == 2


def test_runnables_built_from_models_are_backends_too():
    bound = FakeListChatModel(responses=[GOOD]).bind(stop=["\n\n"])
    assert JsonMode(bound).generate("Ada", Person) == ADA


def test_retryable_langchain_errors_are_transient_and_retried_by_the_transport_policy():
    calls: list[int] = []

    def flaky(messages: list[BaseMessage]) -> AIMessage:
        calls.append(len(messages))
        if len(calls) < 3:
            raise ModelRateLimitError("slow down")
        return AIMessage(GOOD)

    jm = JsonMode(RunnableLambda(flaky), transport=no_wait(max_retries=4))
    result = jm.run("Ada", Person)

    assert result.value == ADA
    assert result.attempts[0].transport_retries == 2


def test_permanent_langchain_errors_are_raised_at_once_with_their_cause():
    calls: list[int] = []

    def denied(messages: list[BaseMessage]) -> AIMessage:
        calls.append(1)
        raise ModelAuthenticationError("bad key")

    with pytest.raises(PermanentBackendError) as caught:
        JsonMode(RunnableLambda(denied), transport=no_wait()).generate("Ada", Person)
    assert isinstance(caught.value.__cause__, ModelAuthenticationError)
    assert calls == [1]


def test_http_statuses_on_provider_errors_decide_transience():
    class ProviderError(Exception):
        def __init__(self, status_code: int) -> None:
            super().__init__(f"HTTP {status_code}")
            self.status_code = status_code

    def unavailable(messages: list[BaseMessage]) -> AIMessage:
        raise ProviderError(503)

    with pytest.raises(TransientBackendError) as caught:
        JsonMode(RunnableLambda(unavailable), transport=no_wait(max_retries=1)).generate(
            "Ada", Person
        )
    assert caught.value.status_code == 503


def test_a_chain_that_does_not_return_text_is_a_usage_error():
    chain = FakeListChatModel(responses=[GOOD]) | StrOutputParser() | RunnableLambda(json.loads)
    with pytest.raises(UsageError, match="not a message or text"):
        JsonMode(chain).generate("Ada", Person)


def test_native_tier_is_refused_for_langchain_models():
    with pytest.raises(UsageError, match="natively"):
        JsonMode(FakeListChatModel(responses=[GOOD]), tier="native")


def test_the_decorator_takes_a_langchain_model():
    @jsonmode.structured(backend=FakeListChatModel(responses=[SLOPPY]), mode="repair")
    def extract(text: str) -> Person:
        """Extract the person: {text}"""

    assert extract("Ada").age == 36


def test_backend_options_go_to_invoke():
    recorder = Recorder()
    backend = LangChainBackend(
        FakeListChatModel(responses=[GOOD]), config={"callbacks": [recorder], "tags": ["x"]}
    )
    assert JsonMode(backend).generate("Ada", Person) == ADA
    assert len(recorder.calls) == 1


# -- the whole façade as one LCEL step -------------------------------------------------


def test_jsonmode_runnable_reasks_inside_an_lcel_chain():
    recorder = Recorder()
    model = FakeListChatModel(responses=[MISSING_AGE, GOOD], callbacks=[recorder])
    prompt = ChatPromptTemplate.from_messages([("human", "Extract: {text}")])
    chain = prompt | jsonmode_runnable(model, Person)

    assert chain.invoke({"text": "Ada Lovelace, 36"}) == ADA
    assert len(recorder.calls) == 2
    assert recorder.calls[0][-1].content == "Extract: Ada Lovelace, 36"


def test_jsonmode_runnable_async_and_string_input():
    runnable = jsonmode_runnable(FakeListChatModel(responses=[SLOPPY]), Person, mode="repair")
    assert asyncio.run(runnable.ainvoke("Ada")).age == 36


def test_jsonmode_runnable_raises_jsonmodes_typed_errors():
    runnable = jsonmode_runnable(FakeListChatModel(responses=[MISSING_AGE]), Person, max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as caught:
        runnable.invoke([HumanMessage("Ada")])
    assert len(caught.value.attempts) == 2


def test_jsonmode_runnable_refuses_other_inputs():
    runnable = jsonmode_runnable(FakeListChatModel(responses=[GOOD]), Person)
    with pytest.raises(UsageError, match="prompt"):
        runnable.invoke({"text": "a dict is not a prompt"})


def test_import_jsonmode_never_imports_langchain():
    code = (
        "import sys, jsonmode;"
        "jm = jsonmode.JsonMode(lambda prompt: '{}');"
        "print('langchain_core' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _slow(seconds: float) -> RunnableLambda:
    import time as _time

    def reply(messages: Any) -> str:
        _time.sleep(seconds)
        return '{"name": "Ada", "age": 36}'

    async def areply(messages: Any) -> str:
        await asyncio.sleep(seconds)
        return '{"name": "Ada", "age": 36}'

    return RunnableLambda(reply, afunc=areply)


def test_a_langchain_call_ends_at_its_timeout_sync_and_async():
    import time as _time

    policy = jsonmode.TransportPolicy(max_retries=0)
    jm = jsonmode.JsonMode(_slow(5.0), timeout=0.3, transport=policy)
    started = _time.monotonic()
    with pytest.raises(jsonmode.TransientBackendError, match="timeout"):
        jm.run("x", {"type": "object"})
    assert _time.monotonic() - started < 2.5
    started = _time.monotonic()
    with pytest.raises(jsonmode.TransientBackendError, match="timeout"):
        asyncio.run(jm.arun("x", {"type": "object"}))
    assert _time.monotonic() - started < 2.5
    assert jsonmode.JsonMode(_slow(0.0), timeout=5).run("x", {"type": "object"}).data["age"] == 36


def test_a_langchain_rate_limit_carries_retry_after_to_the_policy():
    class Response:
        headers: ClassVar[dict[str, str]] = {"Retry-After": "3"}

    class RateLimited(Exception):  # the shape provider SDK errors have
        status_code = 429
        response = Response()

    replies = iter([RateLimited("slow down"), '{"name": "Ada", "age": 36}'])

    def reply(messages: Any) -> str:
        item = next(replies)
        if isinstance(item, Exception):
            raise item
        return item

    waits: list[float] = []
    policy = jsonmode.TransportPolicy(sleep=waits.append, max_delay=60)
    result = jsonmode.JsonMode(RunnableLambda(reply), transport=policy).run("x", {"type": "object"})
    assert result.attempts[0].calls == 2
    assert waits
    assert waits[0] >= 3


# -- LangChainBackend streams (JsonMode.stream) ------------------------------------------------

REQUEST = Request(({"role": "user", "content": "Ada"},), Schema.of(Person))


class StreamingChat(BaseChatModel):
    """A chat model that streams ``pieces`` the way provider models do: the usage and the
    finish reason ride on the last chunk. ``fail_after`` raises that error after so many
    pieces; ``every`` sleeps between pieces; ``closed`` is set when the stream is closed."""

    pieces: list[str]
    finish_reason: str = "stop"
    usage: dict[str, int] | None = None
    every: float = 0.0
    fail_after: int | None = None
    error: Any = None
    closed: Any = None

    @property
    def _llm_type(self) -> str:
        return "streaming-chat"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
        return ChatResult(generations=[ChatGeneration(message=AIMessage("".join(self.pieces)))])

    def _stream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        import time as _time

        try:
            for number, piece in enumerate(self.pieces):
                if self.fail_after is not None and number == self.fail_after:
                    raise self.error
                _time.sleep(self.every)
                last = number == len(self.pieces) - 1
                message = AIMessageChunk(
                    content=piece,
                    usage_metadata=self.usage if last else None,  # type: ignore[arg-type]
                    response_metadata={"finish_reason": self.finish_reason} if last else {},
                )
                yield ChatGenerationChunk(message=message)
        finally:
            if self.closed is not None:
                self.closed.set()


def _read(stream: Any) -> tuple[list[str], Completion]:
    chunks = list(stream)
    *pieces, final = chunks
    assert all(isinstance(piece, str) for piece in pieces)
    assert isinstance(final, Completion)
    return pieces, final


def _aread(stream: Any) -> tuple[list[str], Completion]:
    async def run() -> list[Any]:
        return [chunk async for chunk in stream]

    return _read(iter(asyncio.run(run())))


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_backend_streams_a_chat_models_chunks(driver: str):
    backend = LangChainBackend(GenericFakeChatModel(messages=iter([AIMessage(GOOD)])))
    stream = backend.stream(REQUEST) if driver == "sync" else backend.astream(REQUEST)
    pieces, final = _read(stream) if driver == "sync" else _aread(stream)
    assert len(pieces) > 3  # the fake model splits on spaces
    assert "".join(pieces) == GOOD
    assert final == Completion(GOOD, None, truncated=False)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_backend_stream_reports_usage_and_truncation_from_the_last_chunk(driver: str):
    usage = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    model = StreamingChat(
        pieces=['{"name": ', '"Ada", "age": 3'], finish_reason="length", usage=usage
    )
    backend = LangChainBackend(model, timeout=5)
    stream = backend.stream(REQUEST) if driver == "sync" else backend.astream(REQUEST)
    pieces, final = _read(stream) if driver == "sync" else _aread(stream)
    assert pieces == ['{"name": ', '"Ada", "age": 3']
    assert final == Completion('{"name": "Ada", "age": 3', Usage(12, 5), truncated=True)


def test_backend_streams_text_llms_and_runnables_that_do_not_stream():
    pieces, final = _read(LangChainBackend(FakeStreamingListLLM(responses=[GOOD])).stream(REQUEST))
    assert "".join(pieces) == GOOD
    assert len(pieces) > 1
    assert final == Completion(GOOD)
    whole = AIMessage(
        GOOD,
        usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        response_metadata={"finish_reason": "stop"},
    )
    pieces, final = _read(LangChainBackend(RunnableLambda(lambda messages: whole)).stream(REQUEST))
    assert pieces == [GOOD]
    assert final == Completion(GOOD, Usage(3, 4))


def test_backend_stream_refuses_what_is_not_text():
    backend = LangChainBackend(RunnableLambda(lambda messages: {"not": "text"}))
    with pytest.raises(UsageError, match="not a message or text"):
        list(backend.stream(REQUEST))


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("timeout", [None, 5.0])
def test_backend_stream_errors_are_mapped_where_they_happen(driver: str, timeout: Any):
    model = StreamingChat(pieces=["{", "}"], fail_after=1, error=ModelRateLimitError("slow down"))
    backend = LangChainBackend(model, timeout=timeout)
    got: list[Any] = []

    def read() -> None:
        if driver == "sync":
            got.extend(backend.stream(REQUEST))
            return

        async def run() -> None:
            async for chunk in backend.astream(REQUEST):
                got.append(chunk)

        asyncio.run(run())

    with pytest.raises(TransientBackendError, match="slow down") as caught:
        read()
    assert got == ["{"]
    assert isinstance(caught.value.__cause__, ModelRateLimitError)
    model.error = ModelAuthenticationError("who are you")
    got.clear()
    with pytest.raises(PermanentBackendError, match="who are you"):
        read()


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_backend_stream_ends_at_its_timeout(driver: str):
    import time as _time

    model = StreamingChat(pieces=["x"] * 100, every=0.1)
    backend = LangChainBackend(model, timeout=0.5)
    read = _read if driver == "sync" else _aread
    stream = backend.stream(REQUEST) if driver == "sync" else backend.astream(REQUEST)
    started = _time.monotonic()
    with pytest.raises(TransientBackendError, match="timeout"):
        read(stream)
    assert _time.monotonic() - started < 0.5 + 1.5


def _abandoned_workers_gone(seconds: float) -> bool:
    import time as _time

    ends = _time.monotonic() + seconds
    while deadline.abandoned() and _time.monotonic() < ends:
        _time.sleep(0.01)
    return deadline.abandoned() == 0


def test_closing_a_backend_stream_early_closes_the_models_stream():
    assert _abandoned_workers_gone(10)  # other tests' (a timed-out call sleeps on for 5 s)
    closed = Event()
    model = StreamingChat(pieces=["x"] * 100, every=0.05, closed=closed)
    stream = LangChainBackend(model, timeout=30).stream(REQUEST)
    assert next(stream) == "x"
    stream.close()  # type: ignore[attr-defined]
    assert closed.wait(2)  # not after reading all 100 pieces (5 s)
    assert _abandoned_workers_gone(2)


def test_jsonmode_streams_a_langchain_model_as_its_value_grows():
    """JsonMode(chat_model).stream: partial PartialPerson values while the model's
    chunks arrive, then the validated Person."""
    jm = JsonMode(GenericFakeChatModel(messages=iter([AIMessage(GOOD)])))
    *partials, final = jm.stream("Extract Ada", Person)
    assert len(partials) > 2
    assert type(partials[0].value).__name__ == "PartialPerson"
    assert partials[-1].value.languages == ["English", "French"]
    assert final.kind == "final"
    assert final.result.value == Person.model_validate_json(GOOD)
    assert final.result.tier == "prompted"


def test_a_long_stream_is_read_in_linear_time(monkeypatch):
    # Each chunk re-read the whole output: 40 KB in 4-character chunks handed ~n^2/8
    # characters (200 million) to the partial parser.
    import jsonmode.adapters.langchain as adapter

    read: list[int] = []
    real = adapter.parse_partial

    def counted(text: str, **kwargs: Any) -> Any:
        read.append(len(text))
        return real(text, **kwargs)

    monkeypatch.setattr(adapter, "parse_partial", counted)
    text = json.dumps(list(range(8_000)))
    chunks = [text[i : i + 4] for i in range(0, len(text), 4)]
    *partials, final = JsonModeParser({"type": "array"}).transform(iter(chunks))
    assert final == list(range(8_000))
    assert sum(read) <= 40 * len(text)
    assert len(partials) > 50
    assert all(p == final[: len(p)] for p in partials)


@pytest.mark.parametrize("kind", ["text", "messages"])
def test_a_long_stream_is_merged_in_linear_time(monkeypatch, kind):
    # Each chunk was merged into the output so far with LangChain's `a + b`, which copies
    # both: 1 MB of 4-character message chunks took 40 s and 385 MB (n^2/8 characters
    # copied). Count the characters LangChain's merges copy and the texts built.
    import langchain_core.messages.ai as ai
    from langchain_core.outputs import GenerationChunk

    copied: list[int] = []
    real_merge = ai.add_ai_message_chunks

    def counted_merge(left: Any, *others: Any) -> Any:
        copied.append(len(left.content) + sum(len(o.content) for o in others))
        return real_merge(left, *others)

    real_add = GenerationChunk.__add__

    def counted_add(self: Any, other: Any) -> Any:
        copied.append(len(self.text) + len(other.text))
        return real_add(self, other)

    monkeypatch.setattr(ai, "add_ai_message_chunks", counted_merge)
    monkeypatch.setattr(GenerationChunk, "__add__", counted_add)
    text = json.dumps(list(range(8_000)))  # ~46 KB
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    chunks: list[Any] = pieces if kind == "text" else [AIMessageChunk(p) for p in pieces]
    *partials, final = JsonModeParser({"type": "array"}).transform(iter(chunks))
    assert final == list(range(8_000))
    assert sum(copied) <= 40 * len(text)
    assert len(partials) > 50


def test_a_message_stream_keeps_its_metadata_when_merged_lazily():
    """The last chunk's finish reason still says the output was cut off."""
    chunks = [
        AIMessageChunk('{"name": "Ada'),
        AIMessageChunk('", "age": 3', response_metadata={"finish_reason": "length"}),
    ]
    with pytest.raises(OutputParserException, match=r"truncated|cut off"):
        list(JsonModeParser(Person).transform(iter(chunks)))
    with pytest.raises(UsageError, match="mixed"):
        list(JsonModeParser(Person).transform(iter(["{", AIMessageChunk("}")])))
