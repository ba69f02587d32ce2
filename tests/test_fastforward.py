"""Fast-forward (issue 26): the forced tokens, as the real tokenizer writes them, and the
transformers backend appending them without sampling.

The rule (``jsonmode/decoding/fastforward.py``) is checked with the real Qwen2.5 and
Llama-3 tokenizers (and the three others for the agreement walk); the backend with the
demo's random model. Nothing touches the network.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import tokenizers

from jsonmode import AttemptsExhaustedError, JsonMode, Schema, Vocabulary
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.fastforward import NONE, FastForward, Forced

TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"
REAL = ["qwen2.5", "llama-3"]
ALL = ["qwen2.5", "llama-3", "gpt2", "mistral-7b-v0.1", "phi-3-mini"]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "kind": {"enum": ["apple", "apricot", "banana"]},
    },
    "required": ["name", "age", "kind"],
    "additionalProperties": False,
}


@functools.cache
def _setup(name: str) -> tuple[Vocabulary, FastForward]:
    folder = TOKENIZERS / name
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = Vocabulary.from_tokenizer(folder)
    return vocab, FastForward(vocab, lambda text: tok.encode(text, add_special_tokens=False).ids)


def _walk_to(name: str, schema: Any, text: str, prefix: str) -> tuple[Any, list[int], list[int]]:
    """A matcher after the tokens of ``text`` (tokenized whole) that spell ``prefix``;
    returns it, those tokens and the rest of the document's tokens."""
    vocab, forward = _setup(name)
    ids = forward.encode(text)
    assert ids is not None
    matcher = compile_schema(schema, vocab).matcher()
    done: list[int] = []
    while vocab.decode(done) != prefix.encode():
        assert len(vocab.decode(done)) < len(prefix.encode()), "prefix not at a token boundary"
        token = ids[len(done)]
        assert matcher.advance(token)
        done.append(token)
    return matcher, done, ids[len(done) :]


def _spell(name: str, forced: Forced) -> list[bytes]:
    vocab, _ = _setup(name)
    return [vocab.token_bytes(t) for t in forced.tokens]


# -- the rule, on real tokenizers ----------------------------------------------------------


@pytest.mark.parametrize("name", REAL)
def test_a_key_is_forced_and_its_colon_left_to_the_model(name: str) -> None:
    _, forward = _setup(name)
    text = '{"name":"Bob","age":5,"kind":"apricot"}'
    matcher, done, rest = _walk_to(name, PERSON, text, '{"')
    assert matcher.forced_bytes() == b'name":'
    forced = forward.forced(matcher, done)
    assert _spell(name, forced) == [b"name"]
    assert list(forced.tokens) == rest[:1]
    assert not forced.ends
    # After the key the grammar forces '":' but the tokenizer writes '":"' before a
    # string value: the single token is held back, the model picks the merge.
    matcher, done, rest = _walk_to(name, PERSON, text, '{"name')
    assert matcher.forced_bytes() == b'":'
    assert forward.forced(matcher, done) == NONE
    vocab, _ = _setup(name)
    assert vocab.token_bytes(rest[0]) == b'":"'
    # Before an integer the colon stays '":' in the document, and is still left.
    matcher, done, rest = _walk_to(name, PERSON, text, '{"name":"Bob","age')
    assert matcher.forced_bytes() == b'":'
    assert forward.forced(matcher, done) == NONE
    # Between properties: the next key, not its colon.
    matcher, done, rest = _walk_to(name, PERSON, text, '{"name":"Bob","')
    forced = forward.forced(matcher, done)
    assert _spell(name, forced) == [b"age"]
    assert list(forced.tokens) == rest[:1]


@pytest.mark.parametrize("name", REAL)
def test_the_closing_brace_ends_the_document(name: str) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    text = '{"ok":true}'
    matcher, done, rest = _walk_to(name, schema, text, '{"ok":true')
    assert matcher.forced_bytes() == b"}"
    forced = _setup(name)[1].forced(matcher, done)
    assert forced.ends
    assert _spell(name, forced) == [b"}"]
    assert list(forced.tokens) == rest
    matcher.advance(forced.tokens[0])
    assert _setup(name)[1].forced(matcher, done + list(forced.tokens)) == Forced((), ends=True)


@pytest.mark.parametrize("name", REAL)
def test_an_enum_tail_is_forced_to_the_end(name: str) -> None:
    _, forward = _setup(name)
    text = '{"name":"Bob","age":5,"kind":"apricot"}'
    matcher, done, rest = _walk_to(name, PERSON, text, '{"name":"Bob","age":5,"kind":"apric')
    assert matcher.forced_bytes() == b'ot"}'
    forced = forward.forced(matcher, done)
    assert forced.ends
    assert list(forced.tokens) == rest  # 'ot' '"}': all of it, the document ends
    assert b"".join(_spell(name, forced)) == b'ot"}'


@pytest.mark.parametrize("name", REAL)
def test_an_enum_inside_an_object_keeps_its_last_token_back(name: str) -> None:
    vocab, forward = _setup(name)
    schema = {
        "type": "object",
        "properties": {"fruit": {"enum": ["pineapple", "banana"]}, "n": {"type": "integer"}},
        "required": ["fruit", "n"],
    }
    text = '{"fruit":"pineapple","n":3}'
    matcher, done, rest = _walk_to(name, schema, text, '{"fruit":"')
    assert matcher.forced_bytes() == b""  # pineapple or banana
    step = rest[0]
    assert matcher.advance(step)
    done.append(step)
    forced = forward.forced(matcher, done)
    assert forced.tokens
    assert not forced.ends
    assert list(forced.tokens) == rest[1 : 1 + len(forced.tokens)]
    written = vocab.decode(done + list(forced.tokens))
    assert text.encode().startswith(written)
    assert len(written) < len(b'{"fruit":"pineapple","n":')  # the last token is left


def test_nothing_is_forced_before_the_first_token_or_when_there_is_a_choice() -> None:
    vocab, forward = _setup("qwen2.5")
    schema = {"const": "a fixed answer"}
    matcher, done, rest = _walk_to("qwen2.5", schema, '"a fixed answer"', '"a')
    assert matcher.forced_bytes() == b' fixed answer"'
    assert forward.forced(matcher, []) == NONE  # the prompt's boundary is the model's
    forced = forward.forced(matcher, done)
    assert forced.ends
    assert list(forced.tokens) == rest
    # A quote alone is not how the tokenizer starts '"a fixed answer"' (it writes '"a'):
    # after it nothing is forced, the model spells on.
    quote = forward.encode('"')
    assert quote is not None
    alone = compile_schema(schema, vocab).matcher()
    assert alone.advance(quote[0])
    assert forward.forced(alone, quote) == NONE
    choice = compile_schema({"enum": ["yes", "no"]}, vocab).matcher()
    assert choice.advance(quote[0])
    assert forward.forced(choice, quote) == NONE


def test_the_matcher_is_left_as_it_was() -> None:
    _, forward = _setup("qwen2.5")
    text = '{"name":"Bob","age":5,"kind":"apricot"}'
    matcher, done, rest = _walk_to("qwen2.5", PERSON, text, '{"name":"Bob","age":5,"kind":"apric')
    state, forced_bytes = matcher.state, matcher.forced_bytes()
    assert forward.forced(matcher, done).tokens
    assert matcher.state == state
    assert matcher.forced_bytes() == forced_bytes
    for token in rest:
        assert matcher.advance(token)
    assert matcher.can_end()
    matcher.rollback(len(rest) + len(done))  # the history is exactly the walk's


def test_control_tokens_are_never_forced() -> None:
    """A forced text that the tokenizer would write with an added control token (Qwen2.5's
    non-special ``<tool_call>``) is left to the model, which spells it with text."""
    vocab, forward = _setup("qwen2.5")
    assert forward.encode("<tool_call>") is None
    matcher = compile_schema({"enum": ["<tool_call>"]}, vocab).matcher()
    quote = forward.encode('"')
    assert quote is not None
    assert matcher.advance(quote[0])
    assert matcher.forced_bytes() == b'<tool_call>"'
    forced = forward.forced(matcher, quote)
    assert not set(forced.tokens) & vocab.special_ids


@pytest.mark.parametrize("name", ["mistral-7b-v0.1", "phi-3-mini"])
def test_sentencepiece_continuations_have_no_prefix_space(name: str) -> None:
    vocab, forward = _setup(name)
    for text in ['"a"', '":', "}", " {", "\n", '"kind":"apricot"}']:
        ids = forward.encode(text)
        assert ids is not None, text
        assert vocab.decode(ids) == text.encode()


# -- agreement with the tokenizer's own encoding of whole documents ----------------------------

DOCUMENTS: list[tuple[dict[str, Any], Any]] = [
    (PERSON, {"name": "Bob", "age": 5, "kind": "apricot"}),
    (PERSON, {"name": "Zoë Ünal", "age": -12, "kind": "banana"}),
    (
        {
            "type": "object",
            "properties": {
                "meta": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "links": {
                            "type": "object",
                            "properties": {"self": {"type": "string"}},
                            "required": ["self"],
                        },
                    },
                    "required": ["id", "links"],
                },
                "status": {"enum": ["draft", "published", "archived"]},
                "flags": {"type": "array", "items": {"type": "boolean"}},
                "version": {"const": "1.0.0"},
            },
            "required": ["meta", "status", "flags", "version"],
        },
        {
            "meta": {"id": "x86-64", "links": {"self": "https://e.org/a"}},
            "status": "published",
            "flags": [True, False],
            "version": "1.0.0",
        },
    ),
    (
        {"type": "array", "items": {"enum": ["ready_to_ship", "ready_to_pay", "cancelled"]}},
        ["ready_to_pay", "cancelled", "ready_to_ship"],
    ),
    (
        {
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"b": {"type": "object"}}},
                "c": {"type": "integer"},
            },
            "required": ["a", "c"],
        },
        {"a": {"b": {}}, "c": 7},
    ),
]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_forced_tokens_are_the_tokenizers_own(name: str, separators: tuple[str, str]) -> None:
    """Walk each document as the tokenizer writes it whole: wherever fast-forward forces
    tokens, they are the document's next tokens (never a split the tokenizer would not
    produce), and every document ends by force."""
    vocab, forward = _setup(name)
    forced_total = 0
    for schema, value in DOCUMENTS:
        text = json.dumps(value, separators=separators, ensure_ascii=False)
        ids = forward.encode(text)
        assert ids is not None
        matcher = compile_schema(schema, vocab).matcher()
        at = 0
        while at < len(ids):
            forced = forward.forced(matcher, ids[:at])
            if forced.tokens:
                assert list(forced.tokens) == ids[at : at + len(forced.tokens)], (
                    text,
                    vocab.decode(ids[:at]),
                    [vocab.token_bytes(t) for t in forced.tokens],
                )
                assert forced.ends == (at + len(forced.tokens) == len(ids))
                forced_total += len(forced.tokens)
                for token in forced.tokens:
                    assert matcher.advance(token)
                at += len(forced.tokens)
                continue
            assert matcher.advance(ids[at]), (text, vocab.decode(ids[: at + 1]))
            at += 1
        assert forward.forced(matcher, ids).ends or (at and forced.ends)
    assert forced_total >= 10


# -- the transformers backend --------------------------------------------------------------

SMALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["alpha", "beta"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "count", "tags", "ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def local() -> Any:
    pytest.importorskip("torch")
    from jsonmode.demo import random_local_model

    return random_local_model(seed=1)


def _counted(model: Any) -> list[int]:
    calls = [0]

    def count(module: Any, args: Any, output: Any) -> None:
        calls[0] += 1

    model.register_forward_hook(count)
    return calls


def test_fast_forward_output_is_valid_and_saves_forward_passes(local: Any) -> None:
    import torch

    model, tokenizer = local
    calls = _counted(model)
    seen = {}
    for fast in (True, False):
        jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=96, fast_forward=fast)
        assert jm.backend.fast_forward is fast  # type: ignore[attr-defined]
        for seed in range(3):
            torch.manual_seed(seed)
            calls[0] = 0
            result = jm.run(f"Extract record {seed}.", SMALL)
            assert [a.outcome for a in result.attempts] == ["valid"]
            assert Schema.of(SMALL).conforms(result.data)
            usage = result.attempts[0].usage
            assert usage is not None
            seen[fast, seed] = (calls[0], usage.completion_tokens)
    for seed in range(3):
        passes, tokens = seen[True, seed]
        assert passes < tokens  # forced tokens share a pass, the forced end needs none
        passes, tokens = seen[False, seed]
        assert passes == tokens  # one pass per token, end of sequence included


def test_fast_forward_alone_in_a_batch_and_streamed_agree(local: Any) -> None:
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=96)
    prompts = ["Extract the record.", "Another record, please"]
    alone = [jm.run(prompt, SMALL).attempts[0].raw for prompt in prompts]
    batched = jm.map(prompts, SMALL, concurrency=2)
    assert [entry.attempts[0].raw for entry in batched] == alone  # type: ignore[union-attr]
    events = list(jm.stream(prompts[0], SMALL))  # forced tokens are streamed as appended
    final = events[-1].result  # type: ignore[union-attr]
    assert final.attempts[0].raw == alone[0]
    partials = [event for event in events if event.kind == "partial"]
    assert partials
    assert all(alone[0].startswith(event.text) for event in partials)


def test_a_stopping_criterion_stops_a_fast_forward_generation(local: Any) -> None:
    from transformers import StoppingCriteria

    model, tokenizer = local

    class AfterFive(StoppingCriteria):
        def __init__(self) -> None:
            self.start = -1

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            import torch

            if self.start < 0:
                self.start = int(input_ids.shape[1]) - 1
            done = int(input_ids.shape[1]) - self.start >= 5
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool)

    stopped = JsonMode(
        model,
        tokenizer=tokenizer,
        max_new_tokens=96,
        max_attempts=1,
        stopping_criteria=[AfterFive()],
    )
    with pytest.raises(AttemptsExhaustedError) as info:
        stopped.run("Extract the record.", SMALL)
    attempts = info.value.attempts
    assert [a.outcome for a in attempts] == ["truncated"]
    assert attempts[0].usage.completion_tokens < 20


def test_beam_search_is_refused() -> None:
    """Matchers follow rows and beam search reorders them: refused up front, with a
    hint, rather than masks following the wrong text."""
    from jsonmode.backends.transformers import TransformersBackend
    from jsonmode.errors import UsageError

    with pytest.raises(UsageError, match="beam search") as caught:
        TransformersBackend(object(), tokenizer=object(), num_beams=2)
    assert "num_beams at 1" in (caught.value.hint or "")
