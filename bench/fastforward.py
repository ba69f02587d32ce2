"""Fast-forward: how many tokens the grammar forces, and what it buys in generation.

    python bench/fastforward.py                   # 300 MaskBench schemas, then the ~100M model
    python bench/fastforward.py --schemas 100 --runs 2 --tokens 96
    python bench/fastforward.py --walks-only --tokenizers qwen2.5 llama-3

**1. Walks.** The MaskBench sample of ``bench/decoder.py`` (``load_sample``: instances
serialised compactly, members in schema order), each valid instance tokenized as a
continuation by each tokenizer (:meth:`FastForward.encode`: the tokenizer's own
encoding of the whole document) and walked as a model would write it: at every step
``FastForward.forced`` is asked what it would append. When it forces tokens they are
compared with the document's next tokens: equal, they are counted as forced and the
walk moves past them; different (a split the tokenizer would not write), the walk
goes on with the document's own token. Reported per tokenizer: the share of tokens
forced, the documents whose end-of-sequence is forced, mismatches (must be 0), the
bound (tokens that lie wholly inside the forced bytes where they start: what any
rule could force) and the mean time of one ``forced`` call.

**2. Generation.** The ~100M random Llama of ``bench/throughput.py`` (Qwen2.5's
tokenizer, on the CPU) through ``JsonMode(model, tokenizer=..., fast_forward=...)``,
a few schemas with bounded strings (a random model closes a string rarely), sampling
with the same seeds both ways, runs of the two ways interleaved. The first run of
each way is a warm-up (compile, cold masks). Reported: generated tokens, model
forward passes (counted by a hook; a pass over several appended tokens counts once),
tokens per pass, wall time per pass, tokens per second, seconds per document, and
how many outputs conformed. The documents differ between the two ways: forced tokens
are the tokenizer's (a key in one or two tokens), sampled ones the random model's
(often more, shorter ones), so a document takes fewer tokens with fast-forward and
seconds per document shows the gain better than tokens per second.
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
sys.path.insert(0, str(HERE.parent / "tests"))

from decoder import load_sample  # noqa: E402 - after the path fix
from support.tiny_llama import bounded  # noqa: E402
from throughput import SCHEMA as PERSON  # noqa: E402
from throughput import build_model  # noqa: E402

TOKENIZERS = HERE.parent.parent / "shared" / "data" / "tokenizers"

SCHEMAS: dict[str, Any] = {
    "person": PERSON,
    "order": {
        "type": "object",
        "properties": {
            "order_id": {"type": "integer", "minimum": 1},
            "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]},
            "customer": {
                "type": "object",
                "properties": {
                    "first_name": {"type": "string"},
                    "last_name": {"type": "string"},
                    "country_code": {"enum": ["DE", "FR", "US", "JP"]},
                },
                "required": ["first_name", "last_name", "country_code"],
            },
            "express_delivery": {"type": "boolean"},
            "gift_wrapping": {"type": "boolean"},
        },
        "required": ["order_id", "status", "customer", "express_delivery", "gift_wrapping"],
    },
    "review": {
        "type": "object",
        "properties": {
            "sentiment": {"enum": ["very_negative", "negative", "neutral", "positive"]},
            "mentions_delivery_problems": {"type": "boolean"},
            "mentions_product_quality": {"type": "boolean"},
            "would_recommend_to_a_friend": {"type": "boolean"},
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": [
            "sentiment",
            "mentions_delivery_problems",
            "mentions_product_quality",
            "would_recommend_to_a_friend",
            "score",
        ],
    },
}


# -- 1. walks ------------------------------------------------------------------------------


def walks(name: str, cases: list[Any]) -> dict[str, Any]:
    from tokenizers import Tokenizer

    import jsonmode
    from jsonmode.decoding.fastforward import FastForward

    folder = TOKENIZERS / name
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocabulary = jsonmode.Vocabulary.from_tokenizer(folder)
    forward = FastForward(
        vocabulary, lambda text: tokenizer.encode(text, add_special_tokens=False).ids
    )
    counts = dict.fromkeys(
        ("schemas", "documents", "tokens", "forced", "ends", "mismatches", "bound", "calls"), 0
    )
    seconds = 0.0
    for case in cases:
        try:
            compiled = jsonmode.compile_schema(case.schema, vocabulary)
        except jsonmode.JsonModeError:
            continue
        counts["schemas"] += 1
        for test in case.tests:
            ids = forward.encode(test.text) if test.valid else None
            if ids is None:
                continue
            matcher = compiled.matcher()
            if not all(matcher.advance(t) for t in ids) or not matcher.can_end():
                continue  # not written under the mask (a spelling it does not produce)
            counts["documents"] += 1
            counts["tokens"] += len(ids)
            matcher = compiled.matcher()
            at = 0
            while at <= len(ids):
                started = time.perf_counter()
                forced = forward.forced(matcher, ids[:at])
                seconds += time.perf_counter() - started
                counts["calls"] += 1
                if at == len(ids):
                    counts["ends"] += forced.ends
                    break
                take = list(forced.tokens)
                if take and take == ids[at : at + len(take)]:
                    counts["forced"] += len(take)
                    for token in take:
                        matcher.advance(token)
                    at += len(take)
                    continue
                counts["mismatches"] += bool(take)
                fixed = matcher.forced_bytes()
                counts["bound"] += bool(fixed) and fixed.startswith(vocabulary.token_bytes(ids[at]))
                matcher.advance(ids[at])
                at += 1
    counts["mean_forced_call_us"] = round(1e6 * seconds / max(counts["calls"], 1), 1)
    return counts


def _share(part: int, whole: int) -> str:
    return f"{100 * part / max(whole, 1):.1f} %"


# -- 2. generation -------------------------------------------------------------------------


def generation(runs: int, tokens: int) -> list[dict[str, Any]]:
    """Per schema, runs with fast-forward on and off interleaved (machine drift and
    other load hit both alike), each way warmed up first."""
    import torch

    import jsonmode

    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, tokenizer = build_model(0)
    calls = [0]

    def count(module: Any, args: Any, output: Any) -> None:
        calls[0] += 1

    model.register_forward_hook(count)

    def one(jm: Any, prompt: str, schema: Any, seed: int) -> tuple[int, int, float, bool]:
        torch.manual_seed(seed)
        calls[0] = 0
        started = time.perf_counter()
        try:
            result = jm.run(prompt, schema)
        except jsonmode.JsonModeError as error:  # cut off at --tokens
            attempts = getattr(error, "attempts", ())
            usage = attempts[-1].usage if attempts else None
            ok = False
        else:
            usage = result.attempts[-1].usage
            ok = jsonmode.Schema.of(schema).conforms(result.data)
        elapsed = time.perf_counter() - started
        return (usage.completion_tokens if usage else 0), calls[0], elapsed, ok

    rows = []
    for label, raw in SCHEMAS.items():
        schema = bounded(raw)
        prompt = f"Reply with one JSON {label} record."
        ways = {
            fast: jsonmode.JsonMode(
                model,
                tokenizer=tokenizer,
                max_new_tokens=tokens,
                max_attempts=1,
                fast_forward=fast,
                do_sample=True,
            )
            for fast in (True, False)
        }
        totals = {fast: [0, 0, 0.0, 0] for fast in ways}
        for jm in ways.values():
            one(jm, prompt, schema, 0)  # warm-up: compile and cold masks
        for seed in range(runs):
            for fast, jm in ways.items():
                generated, forwards, seconds, ok = one(jm, prompt, schema, 1000 + seed)
                total = totals[fast]
                total[0] += generated
                total[1] += forwards
                total[2] += seconds
                total[3] += ok
        for fast, (generated, forwards, seconds, ok) in totals.items():
            rows.append(
                {
                    "schema": label,
                    "fast_forward": fast,
                    "runs": runs,
                    "tokens": generated,
                    "forward_passes": forwards,
                    "tokens_per_forward": round(generated / max(forwards, 1), 2),
                    "tokens_per_s": round(generated / seconds, 1),
                    "s_per_document": round(seconds / max(runs, 1), 2),
                    "ms_per_forward": round(1000 * seconds / max(forwards, 1), 1),
                    "conformed": f"{ok}/{runs}",
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas", type=int, default=300, help="MaskBench schemas walked")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizers", nargs="+", default=["qwen2.5"])
    parser.add_argument("--runs", type=int, default=3, help="generations per schema and way")
    parser.add_argument("--tokens", type=int, default=160, help="max new tokens per run")
    parser.add_argument("--walks-only", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args(argv)

    numbers: dict[str, Any] = {"walks": {}, "generation": []}
    cases = load_sample(args.schemas, args.seed)
    print(f"1. MaskBench walks: {len(cases)} schemas (seed {args.seed})\n")
    header = (
        "tokenizer",
        "docs",
        "tokens",
        "forced",
        "left (bound)",
        "eos forced",
        "mismatch",
        "µs/call",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in args.tokenizers:
        c = walks(name, cases)
        numbers["walks"][name] = c
        cells = (
            name,
            c["documents"],
            c["tokens"],
            f"{c['forced']} ({_share(c['forced'], c['tokens'])})",
            f"{c['bound']} ({_share(c['bound'] + c['forced'], c['tokens'])})",
            f"{c['ends']} ({_share(c['ends'], c['documents'])})",
            c["mismatches"],
            c["mean_forced_call_us"],
        )
        print("| " + " | ".join(map(str, cells)) + " |")
    print(
        "\nforced: tokens fast-forward appends; left: tokens wholly inside the forced bytes"
        "\nthat it left to the model (bound: forced + left, what any rule could force);"
        "\neos forced: documents ended without asking the model."
    )
    failed = any(c["mismatches"] for c in numbers["walks"].values())
    if not args.walks_only:
        print(f"\n2. Generation, ~100M random model, CPU, {args.runs} runs per row\n")
        header = (
            "schema",
            "fast-forward",
            "tokens",
            "forwards",
            "tok/forward",
            "ms/forward",
            "tok/s",
            "s/doc",
            "valid",
        )
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        rows = generation(args.runs, args.tokens)
        numbers["generation"] = rows
        for row in rows:
            cells = (
                row["schema"],
                "on" if row["fast_forward"] else "off",
                row["tokens"],
                row["forward_passes"],
                row["tokens_per_forward"],
                row["ms_per_forward"],
                row["tokens_per_s"],
                row["s_per_document"],
                row["conformed"],
            )
            print("| " + " | ".join(map(str, cells)) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
