"""The vLLM processor behind the reasoning gate (issue 41): per-request ``reasoning_end``
and ``reasoning_max_tokens`` beside ``json_schema``. A random-weight model on the Qwen3
tokenizer layout (``</think>`` is the added token 151668) thinks, closes its thinking
(forced by the cap), then writes a conforming document, and stops."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import jsonschema
import pytest
from support.qwen3_layout import END_THINK, qwen3_folder
from support.tiny_llama import build
from vllm import LLM, SamplingParams
from vllm.exceptions import VLLMValidationError

from jsonmode.adapters.vllm import JsonModeLogitsProcessor

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
CAP = 8


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LLM]:
    folder = build(tmp_path_factory.mktemp("tiny-qwen3"))
    qwen3_folder(folder)  # the Qwen3 layout's tokenizer files over Qwen2.5's
    engine = LLM(
        model=str(folder),
        logits_processors=[JsonModeLogitsProcessor],
        max_model_len=1024,
        max_num_seqs=8,
        seed=0,
        enforce_eager=True,
    )
    yield engine
    engine.llm_engine.engine_core.shutdown()
    del engine
    gc.collect()


def gated(seed: int, end: str = "</think>", cap: int | None = CAP) -> SamplingParams:
    extra: dict[str, object] = {"json_schema": json.dumps(SCHEMA), "reasoning_end": end}
    if cap is not None:
        extra["reasoning_max_tokens"] = cap
    return SamplingParams(max_tokens=120, temperature=1.0, seed=seed, extra_args=extra)


def test_the_model_thinks_closes_and_answers(llm: LLM) -> None:
    params = [gated(0), gated(1), gated(2), gated(3, end="[/THINK]")]
    outputs = llm.generate(["Think first, then answer in JSON."] * len(params), params)
    for output, param in zip(outputs, params, strict=True):
        completion = output.outputs[0]
        end = (param.extra_args or {})["reasoning_end"]
        assert isinstance(end, str)
        thinking, marker, document = completion.text.partition(end)
        assert marker, completion.text
        assert end not in thinking
        jsonschema.validate(json.loads(document), SCHEMA)
        assert completion.finish_reason == "stop"
        ids = list(completion.token_ids)
        if end == "</think>":
            assert END_THINK in ids
            assert ids.index(END_THINK) <= CAP  # the cap forced the marker's token


def test_bad_reasoning_arguments_are_refused_at_admission(llm: LLM) -> None:
    schema = json.dumps(SCHEMA)
    for extra in (
        {"json_schema": schema, "reasoning_end": 3},
        {"json_schema": schema, "reasoning_end": ""},
        {"json_schema": schema, "reasoning_end": "<" + "x" * 300 + ">"},
        {"json_schema": schema, "reasoning_end": "</think>", "reasoning_max_tokens": -1},
        {"json_schema": schema, "reasoning_end": "</think>", "reasoning_max_tokens": "8"},
        {"json_schema": schema, "reasoning_max_tokens": 4},
    ):
        with pytest.raises(VLLMValidationError, match="reasoning_"):
            llm.generate(["x"], SamplingParams(max_tokens=8, extra_args=extra), use_tqdm=False)
    (output,) = llm.generate(["x"], gated(5), use_tqdm=False)  # the engine carries on
    assert output.outputs[0].finish_reason == "stop"
