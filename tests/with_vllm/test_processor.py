"""JsonModeLogitsProcessor against vLLM's batch bookkeeping, step by step, without an
engine: the BatchUpdate objects are the ones vLLM builds (removed, added, moved rows;
preempted requests re-added with their tokens; discarded tokens), and every masked
row is checked against a matcher fed the same tokens on its own."""

from __future__ import annotations

import gc
import json
import random
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from support.native_rows import spy_on_rows
from support.tiny_llama import TOKENIZERS
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

import jsonmode
from jsonmode.adapters import vllm as adapter
from jsonmode.adapters.vllm import JsonModeLogitsProcessor

WIDTH = 151_936
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
TAGS = {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}


@pytest.fixture(scope="module")
def vocabulary() -> jsonmode.Vocabulary:
    return jsonmode.Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5", vocab_size=WIDTH)


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A handoff store of this test's own (admission writes it, the rows read it)."""
    directory = tmp_path / "store"
    monkeypatch.setenv("JSONMODE_VLLM_STORE", str(directory))
    return directory


@pytest.fixture
def processor(
    vocabulary: jsonmode.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> JsonModeLogitsProcessor:
    # The tokenizer vLLM would load for the model: the same tokenizer.json.
    monkeypatch.setattr(adapter, "_vocabulary_of", lambda config, width: vocabulary)
    config = engine_config()
    return JsonModeLogitsProcessor(config, torch.device("cpu"), False)


def engine_config() -> Any:
    """The parts of a VllmConfig the processor reads (one object per engine)."""
    return SimpleNamespace(
        model_config=SimpleNamespace(get_vocab_size=lambda: WIDTH),
        scheduler_config=SimpleNamespace(max_num_seqs=8),
    )


def params(schema: object = None, **options: Any) -> SamplingParams:
    extra = None if schema is None else {"json_schema": schema}
    return SamplingParams(extra_args=extra, **options)


class Request:
    """A request as the engine holds it: its generated tokens, and (for a constrained
    one) a matcher of its own that the processor's rows are checked against."""

    def __init__(self, schema: dict[str, Any] | None, vocabulary: jsonmode.Vocabulary) -> None:
        self.schema = schema
        self.output: list[int] = []
        # (a budget of its own: a cache entry of its own, never the processor's)
        self.matcher = (
            None
            if schema is None
            else jsonmode.compile_schema(schema, vocabulary, max_compile_seconds=60).matcher()
        )

    def added(self, index: int) -> tuple[int, SamplingParams, list[int], list[int]]:
        """The row vLLM adds for this request, once admitted (validate_params)."""
        schema = None if self.schema is None else json.dumps(self.schema)
        admitted = params(schema)
        JsonModeLogitsProcessor.validate_params(admitted)
        return (index, admitted, [1, 2, 3], self.output)


def step(
    processor: JsonModeLogitsProcessor,
    batch: list[Request],
    update: BatchUpdate | None,
    rng: random.Random,
) -> None:
    """One engine step: update_state, apply to random logits, check every row, then
    sample an allowed token for each request (vLLM appends it to the output list)."""
    processor.update_state(update)
    seed = torch.Generator().manual_seed(rng.randrange(1 << 30))
    logits = torch.randn(len(batch), WIDTH, generator=seed)
    before = logits.clone()
    out = processor.apply(logits)
    assert out.shape == before.shape
    for row, request in enumerate(batch):
        if request.matcher is None:
            assert torch.equal(out[row], before[row]), "an unconstrained row was changed"
            continue
        allowed = torch.zeros(WIDTH, dtype=torch.bool)
        if request.matcher.is_finished():  # vLLM did not stop on it: it may only end again
            allowed[sorted(processor._vocab().eos_ids)] = True
        else:
            mask = torch.from_numpy(request.matcher.mask().copy())
            allowed[: mask.shape[0]] = mask
        expected = torch.where(allowed, before[row], torch.tensor(float("-inf")))
        assert torch.equal(out[row], expected), f"row {row} masked wrongly"
        choices = allowed.nonzero().flatten().tolist()
        token = rng.choice(choices)
        if request.matcher.can_end() and rng.random() < 0.2:
            token = min(processor._vocab().eos_ids & set(choices))
        assert request.matcher.is_finished() or request.matcher.advance(token)
        request.output.append(token)
    for request in batch:
        if request.matcher is None:
            request.output.append(rng.randrange(1000))


def test_rows_follow_added_removed_moved_and_swapped_requests(
    processor: JsonModeLogitsProcessor,
    vocabulary: jsonmode.Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = spy_on_rows(monkeypatch)  # every step's rows written by the compiled core
    rng = random.Random(7)
    a, b, c = Request(PERSON, vocabulary), Request(None, vocabulary), Request(TAGS, vocabulary)
    batch = [a, b, c]
    step(processor, batch, BatchUpdate(3, [], [r.added(i) for i, r in enumerate(batch)], []), rng)
    for _ in range(3):
        step(processor, batch, None, rng)
    # a leaves; vLLM condenses: the last row (c) moves into the hole
    batch = [c, b]
    step(
        processor, batch, BatchUpdate(2, [0], [], [(2, 0, MoveDirectionality.UNIDIRECTIONAL)]), rng
    )
    # the two rows swap
    batch = [b, c]
    step(processor, batch, BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]), rng)
    # a new constrained request takes a fresh slot, an unconstrained one replaces... none
    d = Request(PERSON, vocabulary)
    batch = [b, c, d]
    step(processor, batch, BatchUpdate(3, [], [d.added(2)], []), rng)
    for _ in range(4):
        step(processor, batch, None, rng)
    # an unconstrained request reuses the slot of a removed constrained one
    e = Request(None, vocabulary)
    batch = [b, e, d]
    step(processor, batch, BatchUpdate(3, [], [e.added(1)], []), rng)
    step(processor, batch, None, rng)
    assert sorted(processor._rows) == [2]
    assert len(spy.calls) == 13, "one compiled apply_rows call per step"
    assert spy.calls[0][0] == 2, "the constrained rows only (a and c)"
    assert spy.calls[-1][0] == 1, "(d)"


def test_a_preempted_request_is_replayed_when_it_comes_back(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    rng = random.Random(3)
    a, b = Request(PERSON, vocabulary), Request(TAGS, vocabulary)
    step(processor, [a, b], BatchUpdate(2, [], [a.added(0), b.added(1)], []), rng)
    for _ in range(5):
        step(processor, [a, b], None, rng)
    # a is preempted (removed), b condensed into slot 0; later a returns at slot 1
    # with the tokens it had generated: the processor replays them
    step(processor, [b], BatchUpdate(1, [0], [], [(1, 0, MoveDirectionality.UNIDIRECTIONAL)]), rng)
    step(processor, [b, a], BatchUpdate(2, [], [a.added(1)], []), rng)
    for _ in range(3):
        step(processor, [b, a], None, rng)


def test_discarded_tokens_are_rolled_back(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    rng = random.Random(5)
    a = Request(PERSON, vocabulary)
    step(processor, [a], BatchUpdate(1, [], [a.added(0)], []), rng)
    for _ in range(6):
        step(processor, [a], None, rng)
    # vLLM discards the last two tokens (a failed KV load) and samples again
    del a.output[-2:]
    a.matcher.rollback(2)
    for _ in range(3):
        step(processor, [a], None, rng)
    # the list shrinks and regrows by a different token in one step
    del a.output[-1:]
    a.matcher.rollback(1)
    choices = torch.from_numpy(a.matcher.mask().copy()).nonzero().flatten().tolist()
    other = next(t for t in choices if t != a.output[-1]) if len(choices) > 1 else choices[0]
    assert a.matcher.advance(other)
    a.output.append(other)
    step(processor, [a], None, rng)


def eos_only(row: torch.Tensor, vocabulary: jsonmode.Vocabulary) -> bool:
    finite = torch.isfinite(row).nonzero().flatten().tolist()
    return bool(finite) and set(finite) <= set(vocabulary.eos_ids)


def masked_as(row: torch.Tensor, matcher: Any) -> bool:
    """Whether exactly ``matcher``'s allowed tokens kept a finite logit in ``row``."""
    expected = torch.from_numpy(matcher.mask().copy())
    return torch.equal(torch.isfinite(row[: expected.shape[0]]), expected)


def test_a_refused_token_or_an_unknown_one_leaves_only_the_end(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    a, b = Request(PERSON, vocabulary), Request(PERSON, vocabulary)
    processor.update_state(BatchUpdate(2, [], [a.added(0), b.added(1)], []))
    processor.apply(torch.zeros(2, WIDTH))
    a.output.append(vocabulary.size - 1)  # not a JSON object's first token
    b.output.append(-1)  # vLLM's placeholder: the sampled token is not known yet
    out = processor.apply(torch.zeros(2, WIDTH))
    assert eos_only(out[0], vocabulary)
    assert eos_only(out[1], vocabulary)


def test_end_of_sequence_exactly_when_the_document_is_complete(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    text = '{"name": "Ada", "age": 36}'
    compiled = jsonmode.compile_schema(PERSON, vocabulary)
    request = Request(PERSON, vocabulary)
    processor.update_state(BatchUpdate(1, [], [request.added(0)], []))
    eos = sorted(vocabulary.eos_ids)
    # feed the document byte-spelled by single-character tokens the matcher accepts
    reference = compiled.matcher()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZERS / "qwen2.5"))
    for token in tokenizer.encode(text):
        out = processor.apply(torch.zeros(1, WIDTH))
        assert not torch.isfinite(out[0, eos]).any(), "end allowed inside the document"
        assert reference.advance(token)
        request.output.append(token)
    out = processor.apply(torch.zeros(1, WIDTH))
    assert torch.isfinite(out[0, eos]).all(), "end not allowed after a complete document"


def test_validate_params_refuses_what_it_cannot_serve() -> None:
    ok = JsonModeLogitsProcessor.validate_params
    ok(params())  # not opted in
    ok(params(json.dumps(PERSON)))
    ok(params(PERSON))  # offline: a dict
    cases = [
        (params("{not json"), "json_schema"),
        (params(json.dumps({"type": "nonsense"})), "json_schema"),
        (params(json.dumps({"$ref": "http://example.com/s.json"})), "json_schema"),
        (params(42), "JSON text"),
        (params(json.dumps(PERSON), min_tokens=5), "min_tokens"),
        (
            params(json.dumps(PERSON), structured_outputs=StructuredOutputsParams(json=PERSON)),
            "structured outputs",
        ),
    ]
    for sampling, words in cases:
        with pytest.raises(VLLMValidationError, match=words):
            ok(sampling)


def test_installing_jsonmode_registers_the_entry_point() -> None:
    (found,) = [e for e in entry_points(group="vllm.logits_processors") if e.name == "jsonmode"]
    assert found.load() is JsonModeLogitsProcessor


def test_metrics_are_served_from_the_processors_process(
    vocabulary: jsonmode.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    from conftest import free_port

    port = free_port()
    monkeypatch.setenv("JSONMODE_METRICS_PORT", str(port))
    monkeypatch.setattr(adapter, "_metrics_started", False)
    monkeypatch.setattr(adapter, "_vocabulary_of", lambda config, width: vocabulary)
    config = engine_config()
    processor = JsonModeLogitsProcessor(config, torch.device("cpu"), False)
    try:
        rng = random.Random(1)
        request = Request(TAGS, vocabulary)
        step(processor, [request], BatchUpdate(1, [], [request.added(0)], []), rng)
        for _ in range(16):
            if request.matcher.is_finished():
                break
            step(processor, [request], None, rng)
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        counts = {
            line.split()[0]: float(line.split()[1])
            for line in text.splitlines()
            if line.startswith("jsonmode_mask_") and not line.startswith("#")
        }
        assert (
            counts["jsonmode_mask_cache_hits_total"] + counts["jsonmode_mask_cache_misses_total"]
            > 0
        )
        assert counts["jsonmode_mask_duration_seconds_count"] >= 1
    finally:
        import jsonmode.metrics

        jsonmode.metrics.disable()


def test_an_error_inside_jsonmode_ends_that_request_not_the_engine(
    processor: JsonModeLogitsProcessor,
    vocabulary: jsonmode.Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (apply's own work: the helper thread, ahead, would race with the breakage below;
    # the next test breaks the helper's)
    monkeypatch.setenv(adapter.AHEAD_ENV, "0")
    a, b = Request(PERSON, vocabulary), Request(TAGS, vocabulary)
    processor.update_state(BatchUpdate(2, [], [a.added(0), b.added(1)], []))

    def broken() -> None:
        raise RuntimeError("a bug")

    matcher = processor._rows[0].matcher
    matcher.mask = broken  # type: ignore[union-attr,method-assign]
    matcher.fill_bitmask = broken  # type: ignore[union-attr,method-assign]
    logits = torch.zeros(2, WIDTH)
    out = processor.apply(logits)
    assert eos_only(out[0], vocabulary)
    assert masked_as(out[1], b.matcher)


def test_an_error_on_the_helper_thread_ends_that_request_not_the_engine(
    processor: JsonModeLogitsProcessor,
    vocabulary: jsonmode.Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warm = adapter._warm

    def failing(masker: Any, row: Any) -> None:
        if row is processor._rows.get(0):
            raise RuntimeError("a bug")
        warm(masker, row)

    monkeypatch.setattr(adapter, "_warm", failing)
    a, b = Request(PERSON, vocabulary), Request(TAGS, vocabulary)
    processor.update_state(BatchUpdate(2, [], [a.added(0), b.added(1)], []))
    processor._wait()
    assert processor._rows[0].failed
    assert not processor._rows[1].failed
    out = processor.apply(torch.zeros(2, WIDTH))
    assert eos_only(out[0], vocabulary)
    assert masked_as(out[1], b.matcher)


def test_named_twice_one_instance_works_and_the_other_stands_by(
    vocabulary: jsonmode.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the entry point and --logits-processors both: vLLM builds two instances
    monkeypatch.setattr(adapter, "_vocabulary_of", lambda config, width: vocabulary)
    config = engine_config()
    first = JsonModeLogitsProcessor(config, torch.device("cpu"), False)
    second = JsonModeLogitsProcessor(config, torch.device("cpu"), False)
    request = Request(PERSON, vocabulary)
    for processor in (first, second):
        processor.update_state(BatchUpdate(1, [], [request.added(0)], []))
    logits = torch.zeros(1, WIDTH)
    assert torch.equal(second.apply(logits.clone()), logits)
    assert not torch.isfinite(first.apply(logits.clone())).all()


def test_a_failure_to_mask_ends_the_constrained_requests_only(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    a, b = Request(PERSON, vocabulary), Request(None, vocabulary)
    processor.update_state(BatchUpdate(2, [], [a.added(0), b.added(1)], []))
    masker = processor._batch_masker()

    def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    masker.apply = broken  # type: ignore[method-assign]
    logits = torch.randn(2, WIDTH)
    before = logits.clone()
    out = processor.apply(logits)
    assert eos_only(out[0], vocabulary)
    eos = sorted(vocabulary.eos_ids)
    assert torch.equal(out[0, eos], before[0, eos])  # the end keeps its logits
    assert torch.equal(out[1], before[1])
    assert processor._rows[0].failed


def nested_any_of(levels: int, salt: str = "") -> dict[str, Any]:
    """``d_i = {"anyOf": [ref d_{i+1}, ref d_{i+1}]}``: compiling takes time
    exponential in ``levels`` (16: ~8 s here); ``salt`` makes each text new."""
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string", "maxLength": 3, "description": salt}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def test_the_engine_step_never_compiles(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    from jsonmode import events

    schema = nested_any_of(9, salt=f"{random.random()}")  # new to every cache
    request = Request(schema, vocabulary)
    compiles: list[str] = []
    unsubscribe = events.subscribe(
        lambda event: compiles.append(stage) if isinstance(event, events.CompileFinished) else None
    )
    try:
        stage = "admission"
        added = request.added(0)  # validate_params, as vLLM's API server runs it
        stage = "engine step"
        step(processor, [request], BatchUpdate(1, [], [added], []), random.Random(3))
        step(processor, [request], None, random.Random(4))
    finally:
        unsubscribe()
    assert compiles == ["admission"]  # once, in the API server's process, never in a step
    assert not processor._rows[0].failed


def test_a_row_whose_automata_cannot_be_had_may_only_end(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary, store: Path
) -> None:
    # admitted, then the store lost the entry (another machine's directory, or dropped)
    admitted = params(json.dumps(nested_any_of(3, salt="lost")))
    JsonModeLogitsProcessor.validate_params(admitted)
    for entry in store.glob("*"):
        entry.unlink()
    plain = Request(None, vocabulary)
    processor.update_state(BatchUpdate(2, [], [(0, admitted, [1], []), plain.added(1)], []))
    logits = torch.randn(2, WIDTH)
    before = logits.clone()
    out = processor.apply(logits)
    assert eos_only(out[0], vocabulary)
    assert torch.equal(out[1], before[1])


def test_the_compile_budget_is_the_servers_and_a_request_may_lower_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    slow = json.dumps(nested_any_of(11, salt=f"{random.random()}"))  # ~0.5 s here
    started = time.perf_counter()
    with pytest.raises(VLLMValidationError, match=r"compile time \(seconds\)"):
        JsonModeLogitsProcessor.validate_params(
            SamplingParams(
                extra_args={"json_schema": slow, "json_schema_max_compile_seconds": 0.02}
            )
        )
    # the server's ceiling holds whatever a request asks
    monkeypatch.setenv("JSONMODE_VLLM_MAX_COMPILE_SECONDS", "0.02")
    with pytest.raises(VLLMValidationError, match=r"compile time \(seconds\)"):
        JsonModeLogitsProcessor.validate_params(
            SamplingParams(extra_args={"json_schema": slow, "json_schema_max_compile_seconds": 60})
        )
    assert time.perf_counter() - started < 0.4
    for bad in (0, -1, "1", True, float("nan")):
        with pytest.raises(VLLMValidationError, match="json_schema_max_compile_seconds must be"):
            JsonModeLogitsProcessor.validate_params(
                SamplingParams(
                    extra_args={"json_schema": "{}", "json_schema_max_compile_seconds": bad}
                )
            )
    monkeypatch.setenv("JSONMODE_VLLM_MAX_COMPILE_SECONDS", "soon")
    with pytest.raises(VLLMValidationError, match="JSONMODE_VLLM_MAX_COMPILE_SECONDS"):
        JsonModeLogitsProcessor.validate_params(params("{}"))


def test_a_store_others_may_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("JSONMODE_VLLM_STORE", str(shared))
    with pytest.raises(VLLMValidationError, match="JSONMODE_VLLM_STORE"):
        JsonModeLogitsProcessor.validate_params(params('{"type": "integer"}'))
    assert not list(shared.iterdir())


# -- ahead of the forward pass: the rows' work on the helper thread -------------------


def spy_on_warm(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of every row's mask computation (adapter._warm), in order."""
    where: list[str] = []
    warm = adapter._warm

    def spied(masker: Any, row: Any) -> None:
        where.append(threading.current_thread().name)
        warm(masker, row)

    monkeypatch.setattr(adapter, "_warm", spied)
    return where


def test_rows_are_caught_up_and_masked_on_the_helper_thread_before_apply(
    processor: JsonModeLogitsProcessor,
    vocabulary: jsonmode.Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where = spy_on_warm(monkeypatch)
    rng = random.Random(11)
    a, b = Request(PERSON, vocabulary), Request(TAGS, vocabulary)
    step(processor, [a, b], BatchUpdate(2, [], [a.added(0), b.added(1)], []), rng)
    for _ in range(4):
        step(processor, [a, b], None, rng)  # (step checks every row's mask)
    helper = [name.startswith("jsonmode-ahead") for name in where]
    # per step: both rows on the helper first, then apply's own (cached) look
    assert helper == [True, True, False, False] * 5


def test_with_ahead_off_every_row_is_done_in_apply(
    processor: JsonModeLogitsProcessor,
    vocabulary: jsonmode.Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(adapter.AHEAD_ENV, "0")
    where = spy_on_warm(monkeypatch)
    rng = random.Random(12)
    a = Request(PERSON, vocabulary)
    step(processor, [a], BatchUpdate(1, [], [a.added(0)], []), rng)
    for _ in range(3):
        step(processor, [a], None, rng)
    assert where == [threading.current_thread().name] * 4


def test_a_placeholder_seen_ahead_is_read_again_by_apply(
    processor: JsonModeLogitsProcessor, vocabulary: jsonmode.Vocabulary
) -> None:
    # Asynchronous scheduling: at update_state the last token may still be vLLM's
    # placeholder, filled in before the processors run. The helper leaves it be.
    a = Request(PERSON, vocabulary)
    processor.update_state(BatchUpdate(1, [], [a.added(0)], []))
    processor.apply(torch.zeros(1, WIDTH))
    token = int(torch.from_numpy(a.matcher.mask().copy()).nonzero().flatten()[0])
    a.output.append(-1)
    processor.update_state(None)
    processor._wait()  # (the helper has read the placeholder)
    assert not processor._rows[0].failed
    a.output[-1] = token
    assert a.matcher.advance(token)
    out = processor.apply(torch.zeros(1, WIDTH))
    assert masked_as(out[0], a.matcher)


def test_an_error_of_the_helper_is_logged_and_apply_does_the_work(
    processor: JsonModeLogitsProcessor,
    vocabulary: jsonmode.Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise RuntimeError("a bug in the helper")

    monkeypatch.setattr(processor, "_prepare", broken)
    rng = random.Random(13)
    a = Request(PERSON, vocabulary)
    with caplog.at_level("ERROR", logger="jsonmode.adapters.vllm"):
        step(processor, [a], BatchUpdate(1, [], [a.added(0)], []), rng)
        step(processor, [a], None, rng)
    assert caplog.text.count("preparing the rows ahead failed") == 2
    assert not processor._rows[0].failed


def test_a_dropped_processor_leaves_no_helper_thread(
    vocabulary: jsonmode.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter, "_vocabulary_of", lambda config, width: vocabulary)
    processor = JsonModeLogitsProcessor(engine_config(), torch.device("cpu"), False)
    a = Request(PERSON, vocabulary)
    step(processor, [a], BatchUpdate(1, [], [a.added(0)], []), random.Random(14))

    def helpers() -> int:
        return sum(t.name.startswith("jsonmode-ahead") for t in threading.enumerate())

    assert helpers() >= 1
    del processor
    gc.collect()
    deadline = time.monotonic() + 10
    while helpers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert helpers() == 0
