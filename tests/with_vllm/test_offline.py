"""The offline engine (``vllm.LLM``) with jsonmode's processor: a mixed batch of
constrained requests (several schemas, real JSONSchemaBench ones among them) and
unconstrained ones, on a random-weight model whose unconstrained text is noise."""

from __future__ import annotations

import gc
import gzip
import itertools
import json
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.tiny_llama import bounded
from vllm import LLM, SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import StructuredOutputsParams

import jsonmode
from jsonmode.adapters.vllm import JsonModeLogitsProcessor

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        },
        "required": ["name", "age", "email"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "number", "minimum": -5, "maximum": 5}, "maxItems": 4},
    {"enum": ["yes", "no", "maybe"]},
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z]{2}[0-9]$"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["id"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "type": "object",
        "properties": {"when": {"type": "string", "format": "date"}, "ok": {"type": "boolean"}},
        "required": ["when", "ok"],
        "additionalProperties": False,
    },
]

PROMPTS = ["Give me JSON.", "Describe a person.", "List numbers:", "Answer:"]


def sample_bench_schemas(per_collection: int) -> list[dict[str, Any]]:
    """Real schemas from JSONSchemaBench (strings bounded, see :func:`bounded`): the
    first few of each collection that the decoder enforces fully (the others are
    post-validated: not this test's point)."""
    picked: list[dict[str, Any]] = []
    for collection in ("Glaiveai2K", "Github_easy", "Github_medium", "Kubernetes", "Snowplow"):
        found = 0
        with gzip.open(DATA / "jsonschemabench" / "schemas" / f"{collection}.jsonl.gz") as lines:
            for line in lines:
                schema = bounded(json.loads(json.loads(line)["json_schema"]))
                try:
                    with warnings.catch_warnings():
                        # the metaschema's "regex" format is Python's re, which warns
                        # about some patterns ("possible nested set")
                        warnings.simplefilter("ignore", FutureWarning)
                        if jsonmode.compile_schema(schema).unenforced:
                            continue
                except jsonmode.JsonModeError:
                    continue
                picked.append(schema)
                found += 1
                if found == per_collection:
                    break
    return picked


@pytest.fixture(scope="module")
def llm(tiny_model: Path) -> Iterator[LLM]:
    engine = LLM(
        model=str(tiny_model),
        logits_processors=[JsonModeLogitsProcessor],
        max_model_len=2048,
        max_num_seqs=32,
        seed=0,
        enforce_eager=True,
    )
    yield engine
    engine.llm_engine.engine_core.shutdown()
    del engine
    gc.collect()


def constrained(schema: str | dict[str, Any], seed: int, max_tokens: int = 600) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0,
        seed=seed,
        extra_args={"json_schema": schema},
    )


def plain(seed: int) -> SamplingParams:
    return SamplingParams(max_tokens=24, temperature=1.0, seed=seed)


def conforms(text: str, schema: dict[str, Any]) -> None:
    value = json.loads(text)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [e.message for e in validator.iter_errors(value)]
    assert not errors, f"{text!r}: {errors}"


def test_a_mixed_batch_constrains_only_the_requests_that_ask(llm: LLM) -> None:
    assert not any(jsonmode.compile_schema(s).unenforced for s in SCHEMAS)
    requests: list[tuple[str, SamplingParams, dict[str, Any] | None]] = []
    for k, schema in enumerate(SCHEMAS * 2):
        # offline the schema may be a dict or JSON text: both are exercised
        text_or_dict = schema if k % 2 else json.dumps(schema)
        requests.append((PROMPTS[k % len(PROMPTS)], constrained(text_or_dict, k), schema))
        requests.append((PROMPTS[k % len(PROMPTS)], plain(100 + k), None))
    outputs = llm.generate([r[0] for r in requests], [r[1] for r in requests], use_tqdm=False)
    unconstrained = []
    for (_, _, schema), output in zip(requests, outputs, strict=True):
        completion = output.outputs[0]
        if schema is None:
            unconstrained.append(completion.token_ids)
            continue
        assert completion.finish_reason == "stop", completion.text
        conforms(completion.text, schema)
    # the unconstrained requests are exactly what they are without any constrained one
    alone = llm.generate(
        [r[0] for r in requests if r[2] is None],
        [r[1] for r in requests if r[2] is None],
        use_tqdm=False,
    )
    assert [list(o.outputs[0].token_ids) for o in alone] == [list(t) for t in unconstrained]
    # and they are noise: the constraint, not the model, makes the JSON
    assert sum(_is_json(o.outputs[0].text) for o in alone) == 0


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_real_schemas_from_jsonschemabench(llm: LLM) -> None:
    schemas = sample_bench_schemas(2)
    assert len(schemas) >= 8
    params = [constrained(s, seed, max_tokens=1500) for seed, s in enumerate(schemas)]
    outputs = llm.generate(["Reply with JSON."] * len(schemas), params, use_tqdm=False)
    for schema, output in zip(schemas, outputs, strict=True):
        completion = output.outputs[0]
        assert completion.finish_reason == "stop", (
            json.dumps(schema)[:3000],
            completion.text[-300:],
        )
        conforms(completion.text, schema)


def test_a_bad_schema_is_refused_at_admission_and_the_engine_carries_on(llm: LLM) -> None:
    for bad in ('{"type": ', {"type": "object", "$ref": "file:///etc/passwd"}):
        with pytest.raises(VLLMValidationError, match="json_schema"):
            llm.generate(["x"], constrained(bad, 0), use_tqdm=False)
    both = SamplingParams(
        extra_args={"json_schema": json.dumps(SCHEMAS[2])},
        structured_outputs=StructuredOutputsParams(json=SCHEMAS[2]),
    )
    with pytest.raises(VLLMValidationError, match="structured outputs"):
        llm.generate(["x"], both, use_tqdm=False)
    (output,) = llm.generate(["x"], constrained(SCHEMAS[2], 1), use_tqdm=False)
    assert json.loads(output.outputs[0].text) in SCHEMAS[2]["enum"]


def test_a_slow_schema_never_stalls_the_other_rows(llm: LLM) -> None:
    """A schema that takes ~1 s to compile joins a batch mid-generation: the other
    row's tokens keep coming (compiling happens at admission, never in the engine
    step), and the schema's row still conforms."""
    levels = 14  # d_i = {"anyOf": [ref d_{i+1}, ref d_{i+1}]}: 2**levels ways to compile
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string", "maxLength": 3, "description": uuid.uuid4().hex}
    slow = {"$ref": "#/$defs/d0", "$defs": defs}  # new text: no cache anywhere has it
    engine = llm.llm_engine
    engine.add_request(
        "plain", {"prompt": "Tell me a story."}, SamplingParams(max_tokens=1900, ignore_eos=True)
    )
    produced = 0
    while produced < 4:
        produced = max([len(o.outputs[0].token_ids) for o in engine.step()] + [produced])
    admitted = time.perf_counter()
    engine.add_request("slow", {"prompt": "Reply."}, constrained(json.dumps(slow), 5, 60))
    compile_seconds = time.perf_counter() - admitted  # validate_params compiled it
    arrivals: list[float] = []
    text = None
    while text is None:
        for output in engine.step():
            if output.request_id == "plain":
                arrivals.append(time.perf_counter())
                assert not output.finished, "the plain request ran out before the slow one"
            elif output.finished:
                assert output.outputs[0].finish_reason == "stop", output.outputs[0].text
                text = output.outputs[0].text
    engine.abort_request(["plain"])
    while engine.has_unfinished_requests():
        engine.step()
    conforms(text, slow)
    stall = max(later - earlier for earlier, later in itertools.pairwise(arrivals))
    assert compile_seconds > 0.3, compile_seconds  # (the schema is slow, on any machine)
    assert stall < compile_seconds / 3, (stall, compile_seconds)
