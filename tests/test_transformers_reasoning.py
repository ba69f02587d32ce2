"""The transformers backend behind the reasoning gate (issue 41): a random-weight model on
the Qwen3 tokenizer layout thinks (free), closes with ``</think>`` (forced by the cap),
then writes a conforming document; in ``complete``, ``complete_batch`` and ``stream``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import jsonmode
from jsonmode.backends.base import DetectsReasoning, Request
from jsonmode.reasoning import FAMILIES
from jsonmode.schema.core import Schema
from tests.support.qwen3_layout import qwen3_folder

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "color": {"enum": ["red", "green"]},
    },
    "required": ["ok", "n", "color"],
    "additionalProperties": False,
}
CAP = 6
REASONING = jsonmode.Reasoning("</think>", start="<think>", max_tokens=CAP)


@pytest.fixture(scope="module")
def qwen3_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = qwen3_folder(tmp_path_factory.mktemp("qwen3-model"))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = LlamaConfig(
        vocab_size=151_936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
    )
    torch.manual_seed(3)
    return LlamaForCausalLM(config).eval(), tokenizer


def backend_of(model: tuple[Any, Any], **options: Any) -> Any:
    from jsonmode.backends.transformers import TransformersBackend

    return TransformersBackend(model[0], model[1], max_new_tokens=48, **options)


def request(prompt: str) -> Request:
    return Request(
        ({"role": "user", "content": prompt},),
        Schema.of(SCHEMA),
        constrained=True,
        reasoning=REASONING,
    )


def check(text: str) -> None:
    """Thinking (no marker in it), the marker, then a conforming document."""
    thinking, marker, document = text.partition("</think>")
    assert marker, text
    assert "</think>" not in thinking
    jsonschema.validate(json.loads(document), SCHEMA)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_complete_thinks_then_answers(qwen3_model: tuple[Any, Any], fast_forward: bool) -> None:
    backend = backend_of(qwen3_model, fast_forward=fast_forward)
    assert backend.vocabulary.controls["</think>"] == 151668  # the Qwen3 layout
    reply = backend.complete(request("Pick a color."))
    check(reply.text)
    assert not reply.truncated
    assert reply.reasoning is None  # the split is the tiers' (upstream)
    # the thinking is capped: at most CAP tokens, then the marker's one token, then
    # the document (at most a token per byte) and end-of-sequence
    document = reply.text.partition("</think>")[2]
    assert reply.usage.completion_tokens <= CAP + 1 + len(document.encode()) + 1


def test_complete_batch_gates_every_row(qwen3_model: tuple[Any, Any]) -> None:
    backend = backend_of(qwen3_model)
    replies = backend.complete_batch([request("one"), request("two, longer prompt")])
    assert len(replies) == 2
    for reply in replies:
        check(reply.text)
        assert not reply.truncated


def test_stream_shows_the_thinking_and_the_marker(qwen3_model: tuple[Any, Any]) -> None:
    backend = backend_of(qwen3_model)
    pieces = list(backend.stream(request("Stream it.")))
    final = pieces[-1]
    text = "".join(p for p in pieces[:-1] if isinstance(p, str))
    check(text)
    assert text == final.text


def test_without_reasoning_the_reply_is_the_document(qwen3_model: tuple[Any, Any]) -> None:
    backend = backend_of(qwen3_model)
    plain = Request(({"role": "user", "content": "x"},), Schema.of(SCHEMA), constrained=True)
    reply = backend.complete(plain)
    assert "</think>" not in reply.text
    jsonschema.validate(json.loads(reply.text), SCHEMA)


def test_detected_reasoning(qwen3_model: tuple[Any, Any], tmp_path: Path) -> None:
    from jsonmode.demo import random_local_model

    backend = backend_of(qwen3_model)
    assert isinstance(backend, DetectsReasoning)
    assert backend.detected_reasoning() == FAMILIES["think"]  # its added tokens
    assert backend.detected_reasoning() is backend.detected_reasoning()
    model, tokenizer = random_local_model(seed=0)
    assert backend_of((model, tokenizer)).detected_reasoning() is None
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}[THINK]...[/THINK]"
    )
    assert backend_of((model, tokenizer)).detected_reasoning() == FAMILIES["magistral"]


def test_the_facade_thinks_then_answers_in_every_path(qwen3_model: tuple[Any, Any]) -> None:
    """The seam between the two halves of issue 41: JsonMode sends its markers on the
    request, the backend gates its mask with them, and the tiers split the reply."""
    model, tokenizer = qwen3_model
    jm = jsonmode.JsonMode(model, tokenizer=tokenizer, reasoning=REASONING, max_new_tokens=48)
    result = jm.run("Pick a color.", SCHEMA)
    assert result.tier == "constrained"
    jsonschema.validate(result.value, SCHEMA)
    thinking, marker, document = result.raw.partition("</think>")
    assert marker
    assert json.loads(document) == result.value
    assert result.reasoning is not None
    assert "</think>" not in result.reasoning
    assert result.reasoning.strip() in thinking

    for item in jm.map(["one", "two, longer"], SCHEMA):
        assert isinstance(item, jsonmode.Result), item
        jsonschema.validate(item.value, SCHEMA)
        assert item.reasoning is not None

    kinds = [event.kind for event in jm.stream("Stream it.", SCHEMA)]
    assert kinds[-1] == "final"
    assert "thinking" in kinds  # the thinking shown apart from the partial values


def test_auto_uses_what_the_local_model_says(qwen3_model: tuple[Any, Any]) -> None:
    """reasoning="auto" (the default) asks a local backend for its markers and sends
    them: the mask then lets the model think (it would be forced into JSON at once)."""
    model, tokenizer = qwen3_model
    from jsonmode.backends.transformers import TransformersBackend

    seen: list[Request] = []

    class Recording(TransformersBackend):
        def complete(self, request: Request) -> jsonmode.Completion:
            seen.append(request)
            return super().complete(request)

    backend = Recording(model, tokenizer, max_new_tokens=8)
    jm = jsonmode.JsonMode(backend, max_attempts=1)
    with pytest.raises(jsonmode.AttemptsExhaustedError) as caught:
        jm.run("Think about it.", SCHEMA)  # no cap: 8 tokens end inside the thinking
    assert [attempt.outcome for attempt in caught.value.attempts] == ["thinking_truncated"]
    assert seen
    assert seen[0].reasoning == FAMILIES["think"]
    assert seen[0].constrained
