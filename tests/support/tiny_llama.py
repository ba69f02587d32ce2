"""A random-weight Llama-style model on disk, built offline, for vLLM to serve.

vLLM loads models from a folder (config.json, safetensors weights, tokenizer files,
generation_config.json); no pretrained weights exist here, so the tests and the
benchmark write one with a real tokenizer from ``../shared/data/tokenizers`` (its chat
template included). The weights are noise: a constrained request's output conforms
only because of the mask, and an unconstrained one practically never does.

vLLM's CPU attention needs a head size of at least 32.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKENIZERS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tokenizers"


@dataclass(frozen=True)
class Shape:
    """A model's size. ``TINY`` (~10M parameters, nearly all embedding) for tests;
    ``SMALL`` (~100M) for a benchmark in which the mask's share is realistic."""

    hidden: int
    layers: int
    heads: int
    intermediate: int


TINY = Shape(hidden=64, layers=2, heads=2, intermediate=128)
SMALL = Shape(hidden=512, layers=8, heads=8, intermediate=1408)


def build(folder: Path, shape: Shape = TINY, *, tokenizer: str = "qwen2.5", seed: int = 0) -> Path:
    """Write the model into ``folder`` (created) and return it. Takes seconds.

    The tokenizer's files are copied beside the weights (vLLM reads them from the
    model's folder); the logits are 151 936 wide, as Qwen2.5's are, wider than the
    tokenizer's 151 665 ids.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    source = TOKENIZERS / tokenizer
    for item in source.iterdir():
        shutil.copy(item, folder / item.name)
    tok = AutoTokenizer.from_pretrained(str(folder))
    eos = [tok.convert_tokens_to_ids(name) for name in ("<|im_end|>", "<|endoftext|>")]
    config = LlamaConfig(
        vocab_size=151_936,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=eos[0],
        pad_token_id=eos[1],
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "pad_token_id": eos[1]}), encoding="utf-8"
    )
    return folder


def offline_environment(log_level: str = "WARNING") -> None:
    """Settings vLLM reads at import (its spawned processes inherit them): offline, a
    small CPU KV cache (GiB), ``log_level`` logging, no usage reports. Set only where
    the caller's environment has none."""
    for name, value in (
        ("VLLM_CPU_KVCACHE_SPACE", "1"),
        ("VLLM_LOGGING_LEVEL", log_level),
        ("VLLM_NO_USAGE_STATS", "1"),
        ("DO_NOT_TRACK", "1"),
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
    ):
        os.environ.setdefault(name, value)


def bounded(schema: Any) -> Any:
    """``schema`` with ``maxLength: 12`` on every plain string type and its objects closed
    (``additionalProperties: false`` where it has ``properties``). A random model closes a
    string rarely (a quote is one token in thousands), so an unbounded string runs to
    ``max_tokens``; a real model's strings end. Strings with a ``pattern`` or ``format``
    are left alone: vLLM's xgrammar back-end refuses a length bound beside either."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bounded(value) for key, value in schema.items()}
    kind = out.get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    if is_string and not {"pattern", "format", "enum", "const"} & out.keys():
        out.setdefault("maxLength", 12)
    if "properties" in out:
        out.setdefault("additionalProperties", False)
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):  # names, not schemas, at this level
            out[key] = {name: bounded(value) for name, value in schema[key].items()}
    return out
