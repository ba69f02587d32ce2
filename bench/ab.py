"""Two versions of jsonmode's compiler and mask engine in one process, interleaved per schema.

    git worktree add --detach /tmp/base HEAD~1       # the version to compare against
    python bench/ab.py /tmp/base                     # this checkout (A) against it (B)
    python bench/ab.py /tmp/base --schemas 100 --rounds 3

Separate benchmark runs on a shared machine drift by ±15% (CPU frequency, neighbours),
more than most single changes to the mask. Here both versions are loaded into one
process (each its own copy of the ``jsonmode`` package, with its own caches), and every
schema of the decoder benchmark's MaskBench sample is compiled and walked by both, in
alternating order, so that drift falls on both alike. Timed: the mask call alone, as in
``bench/decoder.py``, over every valid instance of each schema, first visits included
(each version's compile cache is cleared before each schema, its other caches are left
to warm up across schemas as in that benchmark). Prints each version's mask total, mean
and p99, and B's time over A's; then each version's compile median (as in
``bench/decoder.py``: the schema's mask engine included), over the schemas both
compiled, and B's over A's.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def _load(root: Path) -> dict[str, ModuleType]:
    """The ``jsonmode`` package found under ``root``, imported as a separate copy: its
    modules, to be put back into ``sys.modules`` while it runs."""
    for name in [name for name in sys.modules if name.split(".")[0] == "jsonmode"]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        package = importlib.import_module("jsonmode")
        importlib.import_module("jsonmode.decoding.compiled")
    finally:
        sys.path.remove(str(root))
    found = Path(package.__file__ or "").resolve()
    if root.resolve() not in found.parents:
        raise SystemExit(f"{root}: no jsonmode package there (imported {found} instead)")
    return {name: module for name, module in sys.modules.items() if name.startswith("jsonmode")}


def _walk(
    modules: dict[str, ModuleType], vocabulary: Any, case: Any, bitmask: bool = False
) -> tuple[float | None, list[float]]:
    """Compile ``case`` with one version and walk its valid instances: the compile time
    (None: refused) and the mask call times (``bitmask``: of ``fill_bitmask`` into one
    reused buffer, where the version has it, as ``bench/decoder.py`` times it)."""
    sys.modules.update(modules)
    jsonmode, compiled_module = modules["jsonmode"], modules["jsonmode.decoding.compiled"]
    compiled_module._cache.clear()
    started = time.perf_counter()
    try:
        compiled = jsonmode.compile_schema(case.schema, vocabulary)
        compiled.engine  # noqa: B018  (per-schema set-up, timed as in bench/decoder.py)
    except jsonmode.JsonModeError:
        return None, []
    compile_time = time.perf_counter() - started
    times = []
    words = np.zeros((vocabulary.size + 31) // 32, dtype=np.int32)
    for test in case.tests:
        if not test.valid:
            continue
        matcher = compiled.matcher()
        fill = getattr(matcher, "fill_bitmask", None) if bitmask else None
        for token in [*test.ids, None]:
            started = time.perf_counter()
            if fill is not None:
                fill(words)
            else:
                matcher.mask()
            times.append(time.perf_counter() - started)
            if token is None or not matcher.advance(token):
                break
    return compile_time, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="root of the other checkout (B)")
    parser.add_argument("--schemas", type=int, default=300, help="sample size (default 300)")
    parser.add_argument("--seed", type=int, default=20250301, help="sampling seed")
    parser.add_argument(
        "--rounds", type=int, default=1, help="passes over the sample (each swaps who goes first)"
    )
    parser.add_argument(
        "--bitmask",
        action="store_true",
        help="time Matcher.fill_bitmask (as bench/decoder.py does) where a version has it, "
        "else mask()",
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(BENCH))
    import decoder  # (the benchmark's sample and tokenizer)
    from tokenizers import Tokenizer

    versions = [("A", ROOT), ("B", args.base)]
    packages = [_load(root) for _, root in versions]  # (a wrong root fails here, early)
    cases = decoder.load_sample(args.schemas, args.seed)
    # The harness's objects out of the collector's reach, as in paired.py (see
    # bench/README.md); both versions' modules, loaded above, are frozen alike.
    gc.freeze()
    tokenizer = Tokenizer.from_file(str(decoder.TOKENIZER_DIR / "tokenizer.json"))
    loaded = []
    for (label, _), modules in zip(versions, packages, strict=True):
        sys.modules.update(modules)
        vocabulary = modules["jsonmode"].Vocabulary.from_tokenizer(tokenizer)
        modules["jsonmode"].compile_schema({}, vocabulary).engine  # noqa: B018  (index, trie)
        loaded.append((modules, vocabulary))
        print(f"{label}: {modules['jsonmode'].__file__}")
    times: list[list[float]] = [[], []]
    compiles: list[list[float]] = [[], []]  # per schema both compiled, in one order
    for round_ in range(args.rounds):
        for index, case in enumerate(cases):
            order = (0, 1) if (index + round_) % 2 == 0 else (1, 0)
            took: list[float | None] = [None, None]
            for which in order:
                took[which], found = _walk(*loaded[which], case, args.bitmask)
                times[which].extend(found)
            if took[0] is not None and took[1] is not None:
                compiles[0].append(took[0])
                compiles[1].append(took[1])
    for (label, _), found in zip(versions, times, strict=True):
        values = np.array(found)
        print(
            f"{label}: {values.size} mask calls, total {values.sum():.3f} s, "
            f"mean {values.mean() * 1e6:.1f} µs, p99 {np.percentile(values, 99) * 1e6:.0f} µs"
        )
    if len(times[0]) != len(times[1]):
        print("note: the versions walked different numbers of tokens (a schema or token refused)")
    print(f"B / A: {sum(times[1]) / sum(times[0]):.3f}")
    if compiles[0]:
        medians = [float(np.median(found)) for found in compiles]
        for (label, _), median in zip(versions, medians, strict=True):
            print(f"{label}: compile median {median * 1e3:.2f} ms over {len(compiles[0])} schemas")
        print(f"compile B / A: {medians[1] / medians[0]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
