"""Constrained vs unconstrained generation speed with a ~100M-parameter random Llama.

    python bench/throughput.py              # 3 rounds, at most 256 new tokens per run
    python bench/throughput.py --rounds 5 --tokens 128 --json out.json

The model is a randomly initialised Llama-style model (vocabulary 151 936, the width
of Qwen2.5's head) built from a config, with the real Qwen2.5 tokenizer from
``../shared/data``: nothing is downloaded. Both modes sample (``do_sample=True``)
through ``model.generate`` with the KV cache, on this machine's CPU.

* constrained: ``JsonLogitsProcessor`` over a schema, until the document ends (EOS)
  or ``--tokens``; every generated document is checked to be schema-valid;
* unconstrained: ``max_new_tokens = min_new_tokens =`` the constrained run's length.

Each constrained run is followed by an unconstrained run of exactly as many tokens
(a step costs more as the sequence grows), so both see the same lengths and drift. The first
constrained run of the process also pays the compile and the cold masks of every
state it visits ("cold"); later runs reuse the per-state mask cache, as a server
does from its second request on ("warm"). Reported: tokens per second per mode, and
constrained / unconstrained (target >= 95 %).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR = HERE.parent.parent / "shared" / "data" / "tokenizers" / "qwen2.5"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "born": {"type": "string", "format": "date"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "born", "zip", "tags", "active"],
    "additionalProperties": False,
}


def build_model(seed: int) -> tuple[Any, Any]:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    config = LlamaConfig(
        vocab_size=151_936,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    return model, tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256, help="max new tokens per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    import torch

    import jsonmode
    from jsonmode.decoding.logits import JsonLogitsProcessor

    model, tokenizer = build_model(args.seed)
    params = sum(p.numel() for p in model.parameters())
    prompt = tokenizer("Reply with a JSON person record:", return_tensors="pt")
    width = prompt["input_ids"].shape[1]
    vocabulary = jsonmode.Vocabulary.from_tokenizer(tokenizer, vocab_size=151_936)
    spec = jsonmode.Schema.of(SCHEMA)

    def unconstrained(seed: int, tokens: int) -> tuple[int, float]:
        torch.manual_seed(seed)
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                **prompt,
                do_sample=True,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                eos_token_id=sorted(vocabulary.eos_ids),
                pad_token_id=model.config.pad_token_id,
            )
        return int(out.shape[1] - width), time.perf_counter() - started

    def constrained(seed: int) -> tuple[int, float, bool, bool]:
        torch.manual_seed(seed)
        started = time.perf_counter()
        compiled = jsonmode.compile_schema(SCHEMA, vocabulary)
        processor = JsonLogitsProcessor(compiled)
        with torch.no_grad():
            out = model.generate(
                **prompt,
                do_sample=True,
                max_new_tokens=args.tokens,
                logits_processor=[processor],
                eos_token_id=sorted(vocabulary.eos_ids),  # stop on any of them
                pad_token_id=model.config.pad_token_id,
            )
        elapsed = time.perf_counter() - started
        ids = out[0, width:].tolist()
        ended = next((i for i, t in enumerate(ids) if t in vocabulary.eos_ids), len(ids))
        text = tokenizer.decode(ids[:ended], skip_special_tokens=True)
        complete = processor.is_complete()
        try:
            valid = complete and spec.conforms(json.loads(text))
        except ValueError:
            valid = False
        return len(ids), elapsed, complete, valid

    # One unconstrained warm-up run: torch's first call pays for allocations.
    unconstrained(-1, 8)
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        # Each constrained run is paired with an unconstrained run of exactly as many
        # tokens (a step's cost grows with the sequence length).
        seed = args.seed * 1000 + round_
        tokens, seconds, complete, valid = constrained(seed)
        rows.append(
            {
                "round": round_,
                "mode": "constrained",
                "tokens": tokens,
                "seconds": seconds,
                "complete": complete,
                "valid": valid,
                "cold": round_ == 0,
            }
        )
        free_tokens, free_seconds = unconstrained(seed, tokens)
        rows.append(
            {
                "round": round_,
                "mode": "unconstrained",
                "tokens": free_tokens,
                "seconds": free_seconds,
            }
        )
        for row in rows[-2:]:
            print(
                f"round {round_} {row['mode']:13s} {row['tokens']:4d} tokens in "
                f"{row['seconds']:.2f} s = {row['tokens'] / row['seconds']:6.1f} tok/s"
                + (f"  complete={row['complete']} valid={row['valid']}" if "valid" in row else ""),
                flush=True,
            )

    def rate(selected: list[dict[str, Any]]) -> float:
        return sum(r["tokens"] for r in selected) / sum(r["seconds"] for r in selected)

    free = [r for r in rows if r["mode"] == "unconstrained"]
    cold = [r for r in rows if r["mode"] == "constrained" and r["cold"]]
    warm = [r for r in rows if r["mode"] == "constrained" and not r["cold"]]
    summary = {
        "parameters": params,
        "torch_threads": torch.get_num_threads(),
        "unconstrained_tok_s": rate(free),
        "constrained_cold_tok_s": rate(cold),
        "constrained_warm_tok_s": rate(warm) if warm else None,
        # A document cut off by --tokens is incomplete, not invalid.
        "all_valid": all(r["valid"] for r in rows if r["mode"] == "constrained" and r["complete"]),
        "unconstrained_ms_per_token": statistics.median(
            r["seconds"] / r["tokens"] * 1e3 for r in free
        ),
    }
    print()
    print(f"model: random Llama, {params / 1e6:.0f}M parameters, vocab 151936, CPU")
    print(f"unconstrained      {summary['unconstrained_tok_s']:7.1f} tok/s")
    ratio_cold = summary["constrained_cold_tok_s"] / summary["unconstrained_tok_s"]
    print(f"constrained, cold  {summary['constrained_cold_tok_s']:7.1f} tok/s  ({ratio_cold:.1%})")
    if warm:
        ratio_warm = summary["constrained_warm_tok_s"] / summary["unconstrained_tok_s"]
        print(
            f"constrained, warm  {summary['constrained_warm_tok_s']:7.1f} tok/s  ({ratio_warm:.1%})"
            "  target >= 95%"
        )
    print(f"every complete constrained document schema-valid: {summary['all_valid']}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
