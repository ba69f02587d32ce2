"""``jsonmode demo``: the main job, offline, on an embedded default.

Part 1, the constrained tier: a *randomly initialised* Llama-style model, built from
a config with a byte-level BPE tokenizer the demo trains on the spot — no download.
Its output is gibberish, yet always schema-valid JSON: that is the point. With
``--model NAME_OR_PATH`` a real Hugging Face model is used instead.

Part 2, the prompted tier against a built-in *scripted* backend whose replies carry
the slips real models make (prose, fences, trailing commas, wrong types, a cut-off
reply): repair mode repairs and records, strict mode re-asks with every error.

With ``metrics_port``, metrics are enabled and served on ``127.0.0.1:PORT`` and, after
the scenarios, demo traffic flows (see :mod:`jsonmode._traffic`) until the duration
ends or Ctrl-C, so ``jsonmode dashboard`` has something live to show.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from pydantic import BaseModel, Field

from jsonmode._json import dumps
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.facade import JsonMode
from jsonmode.result import Result

__all__ = ["run_demo"]


class Person(BaseModel):
    """A person mentioned in a text."""

    name: str
    age: int = Field(ge=0)
    email: str | None = None
    languages: list[str]


_TEXT = "Ada Lovelace, 36, writes to ada@example.org and reads English and French."
_SLOPPY = (
    "Sure! Here is the JSON you asked for:\n```json\n"
    "{'name': 'Ada Lovelace', 'age': '36', 'email': 'ada@example.org', "
    "'languages': ['English', 'French',],}\n```\nLet me know if you need anything else."
)
_CUT_OFF = '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "languages": ["Eng'
_CLEAN = (
    '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", '
    '"languages": ["English", "French"]}'
)


def _scripted_model(first_reply: str | Completion) -> ScriptedBackend:
    """A scripted 'model': the first reply has slips; a re-ask gets the clean answer."""

    def reply(request: Request) -> str | Completion:
        is_reask = any(m.get("role") == "assistant" for m in request.messages)
        return _CLEAN if is_reask else first_reply

    return ScriptedBackend([reply] * 3)


def _show(title: str, result: Result[Any], verbose: bool, out: TextIO) -> None:
    out.write(f"\n== {title}\n")
    for attempt in result.attempts:
        if verbose:
            out.write(attempt.describe() + "\n")
            continue
        line = f"   attempt {attempt.index}: {attempt.outcome}"
        if attempt.error:
            line += f" — {attempt.error}"
        if attempt.repairs:
            line += " — repairs: " + ", ".join(r.kind for r in attempt.repairs)
        out.write(line + "\n")
    out.write(f"   value ({type(result.value).__name__}): {dumps(result.data)}\n")


# Bounded strings and ranges: even a random model must finish within max_new_tokens.
CONSTRAINED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {
            "anyOf": [
                {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.org$"},
                {"type": "null"},
            ]
        },
        "languages": {
            "type": "array",
            "items": {"enum": ["English", "French", "German", "Italian"]},
            "minItems": 1,
            "maxItems": 3,
        },
        "verified": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "languages", "verified"],
    "additionalProperties": False,
}


def random_local_model(seed: int = 0) -> tuple[Any, Any]:
    """A small random Llama-style model and a byte-level BPE tokenizer, built offline."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [_CLEAN, _TEXT, _SLOPPY, json.dumps(CONSTRAINED_SCHEMA)] * 20
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer)
    fast: Any = PreTrainedTokenizerFast  # transformers is untyped here
    tokenizer = fast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model: Any = LlamaForCausalLM(config)
    return model.eval(), tokenizer


def _constrained_part(
    model_name: str | None, verbose: bool, stream: TextIO
) -> Callable[[], Any] | None:
    """Run the constrained scenarios; returns a function that runs one more (None:
    the local extra is not installed)."""
    try:
        if model_name:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model_name)
            model: Any = AutoModelForCausalLM.from_pretrained(model_name)
            model.eval()
            label = f"the Hugging Face model {model_name}"
        else:
            model, tokenizer = random_local_model()
            label = "a RANDOMLY INITIALISED model (its words are noise; its JSON is valid)"
    except ImportError as exc:
        stream.write(
            f"\n(constrained tier skipped: {exc.name} is not installed; "
            "pip install torch==2.13.0 && pip install -e '.[local]')\n"
        )
        return None
    stream.write(f"\n== constrained tier: {label}\n")
    jm = JsonMode(
        model, tokenizer=tokenizer, max_new_tokens=256, do_sample=True, schema_name="profile"
    )
    for seed in range(3):
        import torch

        torch.manual_seed(seed)
        result = jm.run(f"Extract the person from: {_TEXT}", CONSTRAINED_SCHEMA)
        attempt = result.attempts[-1]
        stream.write(
            f"   run {seed + 1}: tier {result.tier}, {attempt.outcome}, "
            f"{attempt.usage.completion_tokens if attempt.usage else '?'} tokens\n"
        )
        stream.write(f"   value: {dumps(result.data)}\n")
        if verbose:
            stream.write(attempt.describe() + "\n")
    return lambda: jm.run(f"Extract the person from: {_TEXT}", CONSTRAINED_SCHEMA)


def run_demo(
    *,
    verbose: bool = False,
    model: str | None = None,
    out: TextIO | None = None,
    metrics_port: int | None = None,
    duration: float | None = None,
) -> int:
    """Run the scenarios and print what happened; returns 0 when every one conformed.

    With ``metrics_port``: serve metrics there (0: any free port), then keep sending
    demo traffic for ``duration`` seconds (None: until Ctrl-C).
    """
    stream = out or sys.stdout
    if metrics_port is None:
        _scenarios(model, verbose, stream)
        return 0
    import jsonmode.metrics

    jsonmode.metrics.enable()
    with jsonmode.metrics.serve(metrics_port) as exporter:
        stream.write(
            f"metrics: {exporter.url}\n"
            f"watch:   jsonmode dashboard --metrics-url {exporter.url}"
            " (then open http://127.0.0.1:8765/)\n"
        )
        stream.flush()
        local = _scenarios(model, verbose, stream)
        stream.write(
            "\n== demo traffic: scripted requests with realistic slips, "
            + ("until Ctrl-C" if duration is None else f"for {duration:g} s")
            + "\n"
        )
        stream.flush()
        try:
            from jsonmode._traffic import run_traffic

            run_traffic(Person, stream, duration=duration, local=local)
        except KeyboardInterrupt:
            stream.write("\nstopped.\n")
    return 0


def _scenarios(model: str | None, verbose: bool, stream: TextIO) -> Callable[[], Any] | None:
    local = _constrained_part(model, verbose, stream)
    stream.write(
        "\n== prompted tier against a built-in SCRIPTED backend\n"
        "(no model and no network: its replies are canned, with the slips real models make)\n"
        f"prompt: Extract the person from: {_TEXT!r}\n"
    )
    scenarios: Sequence[tuple[str, str | Completion, str]] = (
        ("repair mode: prose + fence + single quotes + trailing commas + '36'", _SLOPPY, "repair"),
        ("strict mode: the same reply is rejected, the re-ask fixes it", _SLOPPY, "strict"),
        (
            "repair mode: a reply cut off at the length limit is never patched up",
            Completion(_CUT_OFF, truncated=True),
            "repair",
        ),
    )
    for title, first_reply, mode in scenarios:
        jm = JsonMode(_scripted_model(first_reply), mode=mode, schema_name="person")  # type: ignore[arg-type]
        result = jm.run(f"Extract the person from: {_TEXT}", Person)
        _show(title, result, verbose, stream)
    stream.write("\nEvery value above conforms to its schema.\n")
    stream.flush()
    return local
