"""The reasoning gate's cost (issue 41): ``mask()`` inside the thinking beside an
ordinary document mask, on the Qwen3 tokenizer layout (151 669 ids, ``</think>`` the
added token 151668), and on Llama-3 with the marker as text (several tokens).

    python bench/reasoning.py            # ~1 min here

Per layout: the first visit of each thinking state (the vectorised KMP walk of the
vocabulary, once per vocabulary and marker, plus the crossing tokens' check once per
gated constraint), then warm ``mask()`` + ``advance()`` in the thinking along a
random walk, and the same for the document after the marker (the engine's own cached
masks); also ``fill_bitmask`` (vLLM's form). Median and p90 in microseconds.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import jsonmode  # noqa: E402
from jsonmode.decoding.vocabulary import Vocabulary  # noqa: E402
from tests.support.qwen3_layout import TOKENIZERS, qwen3_folder  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def stats(samples: list[float]) -> str:
    us = sorted(s * 1e6 for s in samples)
    p90 = us[int(0.9 * (len(us) - 1))]
    return f"median {statistics.median(us):7.2f} us  p90 {p90:7.2f} us  (n={len(us)})"


def run(name: str, vocab: Vocabulary, walks: int = 20) -> None:
    reasoning = jsonmode.Reasoning("</think>", start="<think>", max_tokens=64)
    started = time.perf_counter()
    gated = jsonmode.compile_schema(SCHEMA, vocab, reasoning=reasoning)
    compile_s = time.perf_counter() - started
    rng = np.random.default_rng(0)
    first: list[float] = []
    think: list[float] = []
    think_bits: list[float] = []
    doc: list[float] = []
    doc_bits: list[float] = []
    words = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    for walk in range(walks):
        m = gated.matcher()
        for _ in range(400):
            t0 = time.perf_counter()
            mask = m.mask()
            t1 = time.perf_counter()
            m.fill_bitmask(words)
            t2 = time.perf_counter()
            thinking = m.in_thinking()
            if walk == 0 and thinking:
                first.append(t1 - t0)
            elif thinking:
                think.append(t1 - t0)
                think_bits.append(t2 - t1)
            elif walk > 0:
                doc.append(t1 - t0)
                doc_bits.append(t2 - t1)
            logits = rng.standard_normal(vocab.size)
            logits[list(vocab.eos_ids)] += 3.0
            logits[~mask] = -np.inf
            token = int(np.argmax(logits))
            assert m.advance(token)
            if m.is_finished():
                break
    print(f"{name}: {vocab.size} ids; compile with the gate {compile_s * 1000:.0f} ms")
    print(f"  first walk, thinking mask (cold states incl.): max {max(first) * 1000:.1f} ms")
    print(f"  thinking  mask()         {stats(think)}")
    print(f"  document  mask()         {stats(doc)}")
    print(f"  thinking  fill_bitmask() {stats(think_bits)}")
    print(f"  document  fill_bitmask() {stats(doc_bits)}")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        qwen3 = Vocabulary.from_tokenizer(qwen3_folder(Path(folder) / "qwen3"))
    run("Qwen3 layout (</think> one added token)", qwen3)
    llama = Vocabulary.from_tokenizer(TOKENIZERS / "llama-3" / "tokenizer.json")
    run("Llama-3 (</think> as text, several tokens)", llama)


if __name__ == "__main__":
    main()
