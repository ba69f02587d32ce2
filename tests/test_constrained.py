"""The constrained tier end to end: a random local model, the logits processor, fallbacks."""

import json

import numpy as np
import pytest
import torch

from jsonmode import AttemptsExhaustedError, Completion, JsonMode, Schema
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.logits import JsonLogitsProcessor
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.demo import CONSTRAINED_SCHEMA, random_local_model


@pytest.fixture(scope="module")
def local():
    return random_local_model(seed=1)


def test_random_model_always_produces_valid_json(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=256, do_sample=True)
    for seed in range(5):
        torch.manual_seed(seed)
        result = jm.run("Extract the person.", CONSTRAINED_SCHEMA)
        assert result.tier == "constrained"
        assert [a.outcome for a in result.attempts] == ["valid"]
        assert Schema.of(CONSTRAINED_SCHEMA).conforms(result.data)


def test_truncation_is_reported_never_valid(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=4, max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run("Extract the person.", CONSTRAINED_SCHEMA)
    assert [a.outcome for a in info.value.attempts] == ["truncated", "truncated"]


def test_schema_over_budget_falls_back_to_prompted(local):
    model, tokenizer = local
    jm = JsonMode(
        model,
        tokenizer=tokenizer,
        max_new_tokens=8,
        max_attempts=1,
        compile_options={"max_rule_states": 3},
    )
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run("Extract the person.", CONSTRAINED_SCHEMA)
    # Unconstrained noise from a random model: the prompted tier ran and validated it.
    assert info.value.attempts[0].outcome in ("invalid_json", "truncated")
    assert jm.tier == "constrained"


def test_processor_rows_padding_and_finished_rows(local):
    _, tokenizer = local
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    compiled = compile_schema({"enum": ["ab", "cd"]}, vocabulary)
    processor = JsonLogitsProcessor(compiled)
    width = vocabulary.size + 13  # models pad their vocabulary
    prompt = torch.zeros((2, 3), dtype=torch.long)
    scores = processor(prompt, torch.zeros((2, width)))
    assert scores.shape == (2, width)
    allowed = torch.isfinite(scores)
    assert allowed.any(dim=1).all()
    assert not allowed[:, vocabulary.size :].any(), "padded ids are never allowed"
    expected = compiled.matcher().mask()
    assert np.array_equal(allowed[0, : vocabulary.size].numpy(), expected)
    # Row 0 writes '"ab"' token by token and ends; row 1 keeps going.
    text = tokenizer.encode('"ab"', add_special_tokens=False)
    ids = prompt
    for token in text:
        ids = torch.cat([ids, torch.tensor([[token], [text[0]]])], dim=1)
        processor(ids, torch.zeros((2, width)))
    eos = sorted(vocabulary.eos_ids)[0]
    ids = torch.cat([ids, torch.tensor([[eos], [text[1]]])], dim=1)
    raw = torch.randn((2, width))
    out = processor(ids, raw)
    assert processor.matchers[0].is_finished()
    assert torch.equal(out[0], raw[0]), "finished rows are left alone"
    assert torch.isfinite(out[1]).any()


def test_refused_token_marks_row_failed_and_allows_only_eos(local):
    _, tokenizer = local
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    compiled = compile_schema({"type": "boolean"}, vocabulary)
    processor = JsonLogitsProcessor(compiled)
    prompt = torch.zeros((1, 2), dtype=torch.long)
    processor(prompt, torch.zeros((1, vocabulary.size)))
    bad = tokenizer.encode("{", add_special_tokens=False)[0]
    out = processor(
        torch.cat([prompt, torch.tensor([[bad]])], dim=1), torch.zeros((1, vocabulary.size))
    )
    assert processor.failed[0]
    finite = torch.isfinite(out[0]).nonzero().flatten().tolist()
    assert set(finite) == set(vocabulary.eos_ids)


def test_streaming_yields_the_text_as_it_is_produced(local):
    from jsonmode.backends.base import Request
    from jsonmode.session.prompts import first_messages, user_messages

    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=256)
    spec = Schema.of(CONSTRAINED_SCHEMA)
    request = Request(first_messages(spec, user_messages("Extract.")), spec, constrained=True)
    chunks = list(jm.backend.stream(request))
    *pieces, whole = chunks
    assert len(pieces) > 3, "text arrives in pieces, not at the end"
    assert all(isinstance(piece, str) for piece in pieces)
    assert isinstance(whole, Completion)
    assert not whole.truncated
    assert "".join(pieces) == whole.text  # the pieces are the text, no end-of-text marker
    assert spec.conforms(json.loads(whole.text))
    assert whole.usage is not None
    assert whole.usage.completion_tokens > 3


def test_demo_with_model_loads_that_model_from_a_path_offline(local, tmp_path, capsys):
    """`jsonmode demo --model PATH` uses the given Hugging Face model (here one saved to
    disk), says so, and still turns it into schema-valid JSON."""
    from jsonmode.cli import main

    model, tokenizer = local
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert main(["demo", "--model", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"the Hugging Face model {tmp_path}" in out
    assert "RANDOMLY INITIALISED" not in out
    runs = [line for line in out.splitlines() if line.lstrip().startswith("run ")]
    assert len(runs) == 3
    assert all("tier constrained, valid" in line for line in runs)
    values = [line.split("value: ", 1)[1] for line in out.splitlines() if "   value: {" in line]
    assert all(Schema.of(CONSTRAINED_SCHEMA).conforms(json.loads(v)) for v in values[:3])
