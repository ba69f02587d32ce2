"""Digests of the mask engine's answers over the correctness gates, for comparing the
compiled path with the pure-Python one in separate processes (tests/test_native_paths.py)
and for a run under AddressSanitizer (tests/test_native_asan.py).

Run as a script: ``python tests/support/native_digest.py [--extension SO] [--schemas N]
[--suite-every K] [--fuzz-steps S] [--kernel-cases C]``. It prints one JSON object:
``path`` (``jsonmode.native.describe()``) and ``digests``, one per item (a MaskBench
schema, a grammar of the GBNF corpus, a JSON-Schema-Test-Suite file): a SHA-256 over,
per step, the mask's bits, the ``advance`` verdicts and the ``accepts`` verdicts. Two
runs that agree on every digest gave the same answers at every step.

``--extension SO`` loads that built extension as ``jsonmode._native`` before jsonmode is
imported (a sanitizer build); ``--kernel-cases C`` also runs the kernels' seeded
differential fuzz and their malformed calls (tests/support/native_fuzz.py), failing the
run on any difference.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS.parents[1] / "shared" / "data"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
QWEN = DATA / "tokenizers" / "qwen2.5"
SUITE = DATA / "json-schema-test-suite" / "tests" / "draft2020-12"


def load_extension(path: str) -> None:
    """Make the extension built at ``path`` the module ``jsonmode._native`` (before
    jsonmode is imported, so jsonmode.native loads this one)."""
    spec = importlib.util.spec_from_file_location("jsonmode._native", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["jsonmode._native"] = module
    spec.loader.exec_module(module)


def maskbench(count: int) -> list[tuple[str, Any, list[Any]]]:
    """``count`` MaskBench schemas with their valid instances: per category, those
    whose file names hash lowest (stable as data is added), round-robin."""
    per: list[list[tuple[str, Any, list[Any]]]] = []
    for path in sorted(MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
        records = [r for r in records if any(t["valid"] for t in r.get("tests", ()))]
        records.sort(key=lambda r: hashlib.sha1(r["file"].encode()).hexdigest())
        per.append(
            [
                (r["file"], r["schema"], [t["data"] for t in r["tests"] if t["valid"]])
                for r in records
            ]
        )
    chosen: list[tuple[str, Any, list[Any]]] = []
    for rank in range(count):
        for records in per:
            if len(chosen) < count and rank < len(records):
                chosen.append(records[rank])
    return chosen


class Digest:
    def __init__(self) -> None:
        self.hash = hashlib.sha256()

    def add(self, *values: Any) -> None:
        self.hash.update(repr(values).encode())

    def mask(self, mask: Any) -> None:
        import numpy as np

        self.hash.update(np.packbits(np.asarray(mask, dtype=np.bool_)).tobytes())

    def hexdigest(self) -> str:
        return self.hash.hexdigest()


def walk(compiled: Any, ids: list[int], digest: Digest) -> None:
    """``ids`` then EOS: the mask and the verdict at each step."""
    import numpy as np

    matcher = compiled.matcher()
    words = np.full((compiled.vocabulary.size + 31) // 32 + 1, -1, dtype=np.int32)
    for token in ids:
        digest.mask(matcher.mask())
        matcher.fill_bitmask(words)  # (r3hits_fill_words on the compiled path)
        digest.hash.update(words.tobytes())
        if not matcher.advance(token):
            digest.add("refused", token)
            return
    digest.mask(matcher.mask())
    eos = sorted(compiled.vocabulary.eos_ids)
    digest.add("end", matcher.can_end(), matcher.advance(eos[0]), matcher.is_finished())


def sample(compiled: Any, rng: random.Random, steps: int, digest: Digest) -> None:
    """Random-logits sampling: at each step a random id is offered first (its verdict
    recorded; refused leaves the state), then one of the allowed ids is taken."""
    import numpy as np

    matcher = compiled.matcher()
    size = len(compiled.vocabulary)
    for _ in range(steps):
        mask = np.asarray(matcher.mask(), dtype=np.bool_)
        digest.mask(mask)
        offered = rng.randrange(size)
        verdict = matcher.advance(offered)
        digest.add(offered, verdict)
        if verdict:
            continue
        allowed = np.flatnonzero(mask)
        if not allowed.size or matcher.is_finished():
            break
        token = int(allowed[rng.randrange(allowed.size)])
        digest.add(token, matcher.advance(token))


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.extension:
        load_extension(args.extension)
    sys.path.insert(0, str(TESTS))
    from tokenizers import Tokenizer

    from jsonmode import native
    from jsonmode.decoding.compiled import compile_schema
    from jsonmode.decoding.grammars.compiled import compile_grammar
    from jsonmode.decoding.vocabulary import Vocabulary
    from jsonmode.errors import JsonModeError

    problems: list[str] = []
    if args.kernel_cases:
        from support.native_fuzz import PAIRS, differ
        from support.native_hostile import run_hostile

        kernels = sys.modules["jsonmode._native"] if args.extension else native.KERNELS
        assert kernels is not None, native.describe()
        rng = random.Random(43)
        for pair in PAIRS:
            for _ in range(args.kernel_cases):
                found = differ(pair, kernels, rng)
                if found:
                    problems.append(found)
        problems += run_hostile(kernels)

    tokenizer = Tokenizer.from_file(str(QWEN / "tokenizer.json"))
    vocabulary = Vocabulary.from_tokenizer(QWEN)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    digests: dict[str, str] = {}
    for name, schema, instances in maskbench(args.schemas):
        digest = Digest()
        try:
            compiled = compile_schema(schema, vocabulary)
        except JsonModeError as exc:
            digests[f"maskbench/{name}"] = f"error:{type(exc).__name__}"
            continue
        for data in instances[:2]:
            text = json.dumps(data, separators=(",", ":"))
            digest.add(compiled.accepts(text))
            walk(compiled, encode(text), digest)
        sample(compiled, random.Random(name), args.fuzz_steps, digest)
        digests[f"maskbench/{name}"] = digest.hexdigest()

    import test_grammar_decoding as corpus  # the GBNF corpus (and regex, choice, built-ins)

    for case in corpus.CASES:
        digest = Digest()
        compiled = case.build(vocabulary)
        for text in case.good:
            digest.add(compiled.accepts(text))
            walk(compiled, encode(text), digest)
        digest.add([compiled.accepts(text) for text in case.bad])
        sample(compiled, random.Random(case.name), args.fuzz_steps, digest)
        digests[f"grammar/{case.name}"] = digest.hexdigest()

    import test_engine_deep_grammars as deep  # a C-like grammar: walks by sets of stacks

    digest = Digest()
    compiled = compile_grammar(deep.C, vocabulary)
    for text in deep.TEXTS[:2]:
        walk(compiled, encode(text), digest)
    digests["grammar/c-like"] = digest.hexdigest()

    files = sorted(SUITE.glob("*.json"))[:: args.suite_every] if args.suite_every else []
    for path in files:
        digest = Digest()
        for group in json.loads(path.read_text()):
            try:
                compiled = compile_schema(group["schema"])
            except JsonModeError as exc:
                digest.add("error", type(exc).__name__)
                continue
            digest.add([compiled.accepts(json.dumps(t["data"])) for t in group["tests"]])
        digests[f"suite/{path.name}"] = digest.hexdigest()
    return {"path": native.describe(), "digests": digests, "problems": problems}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--extension")
    parser.add_argument("--schemas", type=int, default=12)
    parser.add_argument("--suite-every", type=int, default=3)
    parser.add_argument("--fuzz-steps", type=int, default=30)
    parser.add_argument("--kernel-cases", type=int, default=0)
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
