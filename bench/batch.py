"""``JsonMode.map`` on a local model: batched generation against one prompt at a time.

    python bench/batch.py                        # 16 prompts, batch 8, the ~100M model
    python bench/batch.py --prompts 32 --batch 16 --tokens 96 --json out.json
    python bench/batch.py --model demo           # the demo's small random model (fast)

The model is randomly initialised (``bench/throughput.py``'s ~100M Llama shape, with the
real Qwen2.5 tokenizer from ``../shared/data``; or the demo's model): nothing is
downloaded. Generation is greedy, so both ways must produce the same documents (the
script checks it: left padding must not change what a row generates).

* sequential: ``jm.run(prompt, SCHEMA)`` for each prompt, one ``generate`` per prompt;
* batched: ``jm.map(prompts, SCHEMA, concurrency=batch)``, one ``generate`` per
  ``batch`` prompts with a matcher per row.

Reported: generated tokens per second each way, and the ratio (prompts cut off at
``--tokens`` count as generations; the check compares the texts generated).
The first run of each way is a warm-up (compile, cold masks) and is not timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE))

from throughput import SCHEMA, build_model  # noqa: E402 - after the path fix


def _tokens(entries: list[Any]) -> int:
    return sum(a.usage.completion_tokens for e in entries for a in e.attempts if a.usage)


def _raw(entry: Any) -> str:
    """The text generated for one prompt (a Result's or a failure's last attempt)."""
    return str(entry.attempts[-1].raw) if entry.attempts else ""


def _one(jm: Any, prompt: str) -> Any:
    import jsonmode

    try:
        return jm.run(prompt, SCHEMA)
    except jsonmode.JsonModeError as error:  # truncated at --tokens: still a generation
        return error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96, help="max new tokens per prompt")
    parser.add_argument("--model", choices=("small", "demo"), default="small")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = parser.parse_args(argv)

    import torch

    import jsonmode
    from jsonmode.demo import random_local_model

    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, tokenizer = build_model(0) if args.model == "small" else random_local_model(seed=1)
    jm = jsonmode.JsonMode(
        model, tokenizer=tokenizer, max_new_tokens=args.tokens, max_attempts=1, mode="strict"
    )
    prompts = [f"Extract person number {i} from the register." for i in range(args.prompts)]
    jm.map(prompts[: args.batch], SCHEMA, concurrency=args.batch, progress=False)  # warm-up

    started = time.perf_counter()
    sequential = [_one(jm, prompt) for prompt in prompts]
    sequential_s = time.perf_counter() - started
    started = time.perf_counter()
    batched = jm.map(prompts, SCHEMA, concurrency=args.batch, progress=False)
    batched_s = time.perf_counter() - started

    same = sum(_raw(a) == _raw(b) for a, b in zip(sequential, batched, strict=True))
    conformed = sum(isinstance(entry, jsonmode.Result) for entry in batched)
    tokens = _tokens(sequential)
    numbers = {
        "model": args.model,
        "prompts": args.prompts,
        "batch": args.batch,
        "max_new_tokens": args.tokens,
        "generated_tokens": tokens,
        "sequential_s": round(sequential_s, 3),
        "batched_s": round(batched_s, 3),
        "sequential_tokens_per_s": round(tokens / sequential_s, 1),
        "batched_tokens_per_s": round(_tokens(list(batched)) / batched_s, 1),
        "speedup": round(sequential_s / batched_s, 2),
        "conformed": f"{conformed}/{len(prompts)} (the rest cut off at max_new_tokens)",
        "same_documents": f"{same}/{len(prompts)}",
    }
    for key, value in numbers.items():
        print(f"{key:>24}: {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return 0 if same == len(prompts) else 1


if __name__ == "__main__":
    sys.exit(main())
