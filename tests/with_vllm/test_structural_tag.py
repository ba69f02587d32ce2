"""The processor's ``structural_tag`` argument (issue 41): xgrammar's structural tag as
an alternative to ``json_schema``, admitted, compiled and handed to the engine as a
schema is; its rows masked exactly as a matcher of the same spec masks, beside schema
rows and plain rows of the same batch."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch
from test_processor import PERSON, WIDTH, Request, eos_only, step
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.v1.sample.logits_processor import BatchUpdate

import jsonmode
from jsonmode.adapters.vllm import JsonModeLogitsProcessor

pytest_plugins = ["test_processor"]  # (its fixtures: vocabulary, store, processor)

ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
SPEC = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<tool_call>"],
        "tags": [
            {
                "type": "tag",
                "begin": '<tool_call>\n{"name": "add", "arguments": ',
                "content": {"type": "json_schema", "json_schema": ADD},
                "end": "}\n</tool_call>",
            }
        ],
        "stop_after_first": True,
    },
}


def tagged(spec: object, **options: Any) -> SamplingParams:
    return SamplingParams(extra_args={"structural_tag": spec}, **options)


class TagRequest(Request):
    """A request carrying a structural tag, with a matcher of its own to check against."""

    def __init__(self, spec: dict[str, Any], vocabulary: jsonmode.Vocabulary) -> None:
        self.schema = None
        self.spec = spec
        self.output: list[int] = []
        compiled = jsonmode.compile_structural_tag(spec, vocabulary, max_compile_seconds=60)
        self.matcher = compiled.matcher()

    def added(self, index: int) -> tuple[int, SamplingParams, list[int], list[int]]:
        admitted = tagged(json.dumps(self.spec))
        JsonModeLogitsProcessor.validate_params(admitted)
        return (index, admitted, [1, 2, 3], self.output)


def test_admission_takes_a_structural_tag_and_refuses_what_it_cannot_serve() -> None:
    ok = JsonModeLogitsProcessor.validate_params
    ok(tagged(json.dumps(SPEC)))
    ok(tagged(SPEC))  # offline: a dict
    ok(tagged(json.dumps(SPEC["format"])))  # without the outer object
    bad_tag = json.loads(json.dumps(SPEC))
    bad_tag["format"]["tags"][0]["content"]["type"] = "json_shema"
    cases = [
        (tagged("{not json"), "structural_tag: .*not JSON"),
        (tagged(json.dumps(bad_tag)), r"\$\.format\.tags\[0\]\.content\.type"),
        (tagged(json.dumps({"type": "any_tokens"})), "token-level"),
        (tagged(42), "structural_tag must be a structural tag as JSON text"),
        (
            SamplingParams(
                extra_args={"json_schema": json.dumps(PERSON), "structural_tag": json.dumps(SPEC)}
            ),
            "cannot both be given",
        ),
        (tagged(json.dumps(SPEC), min_tokens=3), "min_tokens"),
    ]
    for sampling, words in cases:
        with pytest.raises(VLLMValidationError, match=words) as caught:
            ok(sampling)
        assert caught.value.parameter in ("structural_tag", "min_tokens")


def test_tag_rows_are_masked_as_their_matcher_beside_schema_and_plain_rows(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    batch = [TagRequest(SPEC, vocabulary), Request(PERSON, vocabulary), Request(None, vocabulary)]
    update = BatchUpdate(3, [], [r.added(i) for i, r in enumerate(batch)], [])
    rng = random.Random(41)
    step(processor, batch, update, rng)
    for _ in range(12):
        step(processor, batch, None, rng)
    assert not any(row.failed for row in processor._rows.values())


def test_a_call_in_prose_ends_only_when_the_call_is_closed(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    request = TagRequest(SPEC, vocabulary)
    processor.update_state(BatchUpdate(1, [], [request.added(0)], []))
    eos = sorted(vocabulary.eos_ids)
    singles = {
        vocabulary.token_bytes(t): t
        for t in range(vocabulary.size)
        if len(vocabulary.token_bytes(t)) == 1 and t not in vocabulary.special_ids
    }
    text = 'Sure. <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    opened = text.index("<") + len("<tool_call>")  # (a part of the trigger is prose)
    for position, byte in enumerate(text.encode()):
        out = processor.apply(torch.zeros(1, WIDTH))
        ending = bool(torch.isfinite(out[0, eos]).all())
        assert ending == (position < opened), f"end allowed wrongly at {text[:position]!r}"
        token = singles[bytes([byte])]
        assert torch.isfinite(out[0, token]), f"{text[position]!r} masked at {position}"
        if text[:position].endswith('"a": '):
            assert not torch.isfinite(out[0, singles[b'"']]), "a string where an integer goes"
        request.output.append(token)
    out = processor.apply(torch.zeros(1, WIDTH))
    assert eos_only(out[0], vocabulary), "after the first call (stop_after_first) only the end"
