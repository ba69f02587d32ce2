"""Two versions of jsonmode's compiler and mask engine in one process, interleaved per schema.

    git worktree add --detach /tmp/base HEAD~1       # the version to compare against
    python bench/ab.py /tmp/base                     # this checkout (A) against it (B)
    python bench/ab.py /tmp/base --schemas 100 --rounds 3
    python bench/ab.py /tmp/base --parity 0          # one of the two processes only
    python bench/ab.py /tmp/base --grammars wide --rounds 5   # grammars, cold each round

Separate benchmark runs on a shared machine drift by ±15% (CPU frequency, neighbours),
more than most single changes to the mask. Here both versions are loaded into one
process (each its own copy of the ``jsonmode`` package, with its own caches), and every
schema of the decoder benchmark's MaskBench sample is compiled and walked by both, in
alternating order, so that drift falls on both alike. Timed: the mask call alone, as in
``bench/decoder.py``, over every valid instance of each schema, first visits included
(each version's compile cache is cleared before each schema, its other caches are left
to warm up across schemas as in that benchmark).

With ``--grammars SET`` (``standard``, ``wide`` or ``more``: ``bench/grammars.py``'s
sets) the cases are grammars and their texts instead. A grammar's first masks are most
of its time (a new lexeme's walks and tables, cached process-wide after), and its
``bench/grammars.py`` numbers come from a fresh process per round: so here every round
starts with each version's process-wide caches emptied and its vocabulary set-up done
again (untimed), and each grammar is compiled and walked by both versions in turn.

Whichever version walks a schema first pays more for it (what the two share: memory
the first one's temporaries leave mapped, CPU caches): a version against itself read
B/A 0.93 with A first on the even schemas and 1.065 with A first on the odd ones, the
costly schemas falling unevenly between the two. So every comparison is two fresh
processes, one per parity (``--parity``), and the ratios are their geometric mean.
Prints each parity's ratios, then each version's mask total, mean and p99 over both,
and B's time over A's; then each version's compile median (as in ``bench/decoder.py``:
the schema's mask engine included) over the schemas both compiled, and B's over A's.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
        for name in ("decoding.compiled", "decoding.grammars.gbnf", "decoding.grammars.builtins"):
            importlib.import_module(f"jsonmode.{name}")  # (every module a run imports)
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
    modules["jsonmode.decoding.compiled"]._cache.clear()
    texts = [test.ids for test in case.tests if test.valid]

    def build(jsonmode: ModuleType) -> Any:
        return jsonmode.compile_schema(case.schema, vocabulary)

    return _timed(modules, vocabulary, build, texts, bitmask)


def _walk_grammar(
    modules: dict[str, ModuleType], vocabulary: Any, case: tuple[Any, list[list[int]]]
) -> tuple[float | None, list[float]]:
    """Compile grammar ``case`` (its spec and its texts' token ids) with one version and
    walk its texts: the compile time (None: refused) and the ``fill_bitmask`` times."""
    import grammars  # (the benchmark's sets: bench/ is on the path)

    modules["jsonmode.decoding.grammars.compiled"]._cache.clear()
    spec, texts = case

    def build(jsonmode: ModuleType) -> Any:
        if spec.builtin == "csv":
            return jsonmode.compile_csv(grammars.CSV_ROW, vocabulary)
        return jsonmode.compile_grammar(spec.gbnf, vocabulary)

    return _timed(modules, vocabulary, build, texts, bitmask=True)


def _timed(
    modules: dict[str, ModuleType],
    vocabulary: Any,
    build: Callable[[ModuleType], Any],
    texts: list[list[int]],
    bitmask: bool,
) -> tuple[float | None, list[float]]:
    """One version's compile (``build`` with its package, the mask engine's set-up
    included, as the benchmarks time it; None where it refuses) and its mask call
    times along each token list of ``texts`` (and once past its end)."""
    sys.modules.update(modules)
    jsonmode = modules["jsonmode"]
    started = time.perf_counter()
    try:
        compiled = build(jsonmode)
        compiled.engine  # noqa: B018  (per-case set-up, timed as in the benchmarks)
    except jsonmode.JsonModeError:
        return None, []
    compile_time = time.perf_counter() - started
    times = []
    words = np.zeros((vocabulary.size + 31) // 32, dtype=np.int32)
    for ids in texts:
        matcher = compiled.matcher()
        fill = getattr(matcher, "fill_bitmask", None) if bitmask else None
        for token in [*ids, None]:
            started = time.perf_counter()
            if fill is not None:
                fill(words)
            else:
                matcher.mask()
            times.append(time.perf_counter() - started)
            if token is None or not matcher.advance(token):
                break
    return compile_time, times


def _cold(modules: dict[str, ModuleType], vocabulary: Any) -> None:
    """Empty one version's process-wide caches (every ``Lru`` of its package, the set
    of primed vocabularies) and do its vocabulary set-up again: a fresh process's
    state but for what is memoised otherwise (imports, functools caches, weak memos)."""
    sys.modules.update(modules)
    lru_class = modules["jsonmode.lru"].Lru
    for found in gc.get_objects():
        if isinstance(found, lru_class):
            found.clear()
    modules["jsonmode.decoding.engine.cache"]._primed.clear()
    modules["jsonmode.decoding.compiled"]._cache.clear()
    modules["jsonmode.decoding.grammars.compiled"]._cache.clear()
    modules["jsonmode"].compile_schema({}, vocabulary).engine  # noqa: B018  (set-up again)


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
    parser.add_argument(
        "--parity",
        type=int,
        choices=(0, 1),
        default=None,
        help="one process only: A walks first the schemas of this index parity",
    )
    parser.add_argument(
        "--grammars",
        choices=("standard", "wide", "more"),
        default=None,
        help="grammars of bench/grammars.py's set instead of schemas (caches emptied each round)",
    )
    parser.add_argument("--json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.parity is not None:
        result = _one_process(args)
        if args.json is not None:
            args.json.write_text(json.dumps(result))
        _report([result])
        return 0
    results = []
    forwarded = [str(args.base), "--schemas", str(args.schemas), "--seed", str(args.seed)]
    forwarded += ["--rounds", str(args.rounds), *(["--bitmask"] if args.bitmask else [])]
    forwarded += ["--grammars", args.grammars] if args.grammars else []
    with tempfile.TemporaryDirectory() as folder:
        for parity in (0, 1):
            out = Path(folder) / f"parity{parity}.json"
            command = [sys.executable, __file__, *forwarded, "--parity", str(parity)]
            done = subprocess.run([*command, "--json", str(out)], capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                return done.returncode
            results.append(json.loads(out.read_text()))
    for parity, result in enumerate(results):
        ratio, compile_ratio = _ratios(result)
        compiled = "-" if compile_ratio is None else f"{compile_ratio:.3f}"
        print(f"parity {parity}: B / A {ratio:.3f}, compile B / A {compiled}")
    _report(results)
    return 0


def _one_process(args: argparse.Namespace) -> dict[str, Any]:
    """Both versions over the sample in this process, A first on the schemas of
    ``args.parity``: every mask time and the compile times of the schemas both
    compiled, per version, and the versions' package files."""
    sys.path.insert(0, str(BENCH))
    import decoder  # (the benchmark's sample and tokenizer)
    from tokenizers import Tokenizer

    versions = [("A", ROOT), ("B", args.base)]
    packages = [_load(root) for _, root in versions]  # (a wrong root fails here, early)
    tokenizer = Tokenizer.from_file(str(decoder.TOKENIZER_DIR / "tokenizer.json"))
    cases: list[Any]
    if args.grammars:
        import random

        import grammars

        def ids(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False).ids)

        cases = [
            (spec, [ids(text) for text in spec.texts(random.Random(args.seed))])
            for spec in grammars.grammar_set(args.grammars).values()
        ]
    else:
        cases = decoder.load_sample(args.schemas, args.seed)
    # The harness's objects out of the collector's reach, as in paired.py (see
    # bench/README.md); both versions' modules, loaded above, are frozen alike.
    gc.freeze()
    loaded = []
    files = []
    for modules in packages:
        sys.modules.update(modules)
        vocabulary = modules["jsonmode"].Vocabulary.from_tokenizer(tokenizer)
        modules["jsonmode"].compile_schema({}, vocabulary).engine  # noqa: B018  (index, trie)
        loaded.append((modules, vocabulary))
        files.append(str(modules["jsonmode"].__file__))
    times: list[list[float]] = [[], []]
    compiles: list[list[float]] = [[], []]  # per schema both compiled, in one order
    for round_ in range(args.rounds):
        if args.grammars and round_:
            for version in loaded:
                _cold(*version)
        for index, case in enumerate(cases):
            order = (0, 1) if (index + round_ + args.parity) % 2 == 0 else (1, 0)
            took: list[float | None] = [None, None]
            for which in order:
                if args.grammars:
                    took[which], found = _walk_grammar(*loaded[which], case)
                else:
                    took[which], found = _walk(*loaded[which], case, args.bitmask)
                times[which].extend(found)
            if took[0] is not None and took[1] is not None:
                compiles[0].append(took[0])
                compiles[1].append(took[1])
    return {"files": files, "times": times, "compiles": compiles}


def _ratios(result: dict[str, Any]) -> tuple[float, float | None]:
    """One process's B / A: mask total, compile median (None: nothing compiled)."""
    times, compiles = result["times"], result["compiles"]
    masks = sum(times[1]) / sum(times[0])
    if not compiles[0]:
        return masks, None
    medians = [float(np.median(found)) for found in compiles]
    return masks, medians[1] / medians[0]


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(value) for value in values) / len(values))


def _report(results: list[dict[str, Any]]) -> None:
    """Each version's mask and compile statistics over ``results`` (processes), and
    B / A as the geometric mean of the processes' ratios."""
    for label, file in zip("AB", results[0]["files"], strict=True):
        print(f"{label}: {file}")
    for which, label in enumerate("AB"):
        values = np.concatenate([np.array(result["times"][which]) for result in results])
        print(
            f"{label}: {values.size} mask calls, total {values.sum():.3f} s, "
            f"mean {values.mean() * 1e6:.1f} µs, p99 {np.percentile(values, 99) * 1e6:.0f} µs"
        )
    if any(len(r["times"][0]) != len(r["times"][1]) for r in results):
        print("note: the versions walked different numbers of tokens (a schema or token refused)")
    ratios = [_ratios(result) for result in results]
    print(f"B / A: {_geometric_mean([masks for masks, _ in ratios]):.3f}")
    compiled = [ratio for _, ratio in ratios if ratio is not None]
    if not compiled:
        return
    for which, label in enumerate("AB"):
        median = float(np.median(np.concatenate([r["compiles"][which] for r in results])))
        count = len(results[0]["compiles"][which])
        print(f"{label}: compile median {median * 1e3:.2f} ms over {count} schemas")
    print(f"compile B / A: {_geometric_mean(compiled):.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
