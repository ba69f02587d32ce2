"""Batch rows on threads: BatchMasker.apply on the NumPy path against the compiled core
(``jsonmode._native.apply_rows``) on one thread and on two, per decoding step.

    python bench/batch_threads.py            # the table (~1-2 min here)
    python bench/batch_threads.py --quick    # fewer rounds (~30 s)
    python bench/batch_threads.py --batches 32 --rounds 25   # the issue's target row

Matchers come from ``bench/masks.py``'s sample (its ``load_pool``: valid MaskBench
instances advanced by a random prefix of their tokens, Qwen2.5 tokenizer, about half in
strings), logits ``[B, 151 936]`` float32 and bfloat16, every row constrained in a
shuffled order, fresh logits copied in (untimed) before each call.

Strategies, each a BatchMasker of its own (its own cache of state rows):

* ``numpy``: the pure-Python path (``jsonmode.native.use(False)``): per row, NumPy ops
  on the calling thread;
* ``t1``: the compiled core, ``JSONMODE_MASK_THREADS=1``;
* ``t2``: the compiled core, ``JSONMODE_MASK_THREADS=2``, with BatchMasker's own
  choice of threads (one for small batches, see ``batch_masks._threads_for``);
* ``t2!``: the same, two threads forced whatever the batch (to show where helpers pay).

Warm: every state's row cached by every strategy; rounds interleave the strategies (the
first one rotates), and each cell is the median over rounds of the mean µs per step.
Whole step, cold: before each step the engine's mask caches (bool and packed) and the
strategy's row cache are emptied, so the step is the engine's mask for the batch (its
walk caches stay warm: ``Matcher.mask()`` on the NumPy path, the packed mask on the
compiled one) plus building the rows plus writing them; the same interleaving and
medians.

On a machine shared with other jobs the helper thread competes with them for the second
core. So each row ends with the machine's spare parallelism measured just before and just
after it (``2 threads: x1 time``: two threads hashing 16 MB each, over one thread hashing
16 MB; 1.0 = a second core free, 2.0 = one core's worth for this process): ``t2/t1`` can
only go below 1 where that is below 2. The header and footer print the load average.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from masks import WIDTH, check, load_pool  # noqa: E402  (bench/masks.py, beside this file)

BATCHES = (1, 8, 32, 64)


class Rows:
    """BatchMasker.apply on one path and thread setting (see the module docstring)."""

    def __init__(self, eos: list[int], compiled: bool, threads: int, forced: bool) -> None:
        from jsonmode.decoding.batch_masks import BatchMasker

        self.make = lambda: BatchMasker(WIDTH, eos, max_cached=1024)
        self.compiled, self.threads, self.forced = compiled, threads, forced
        self.clear()

    def clear(self) -> None:
        self.masker = self.make()

    def prepare(self) -> None:
        """Untimed: the thread setting this strategy runs under."""
        from jsonmode.decoding import batch_masks

        os.environ["JSONMODE_MASK_THREADS"] = str(self.threads)
        batch_masks._WORK_PER_THREAD = 1 if self.forced else WORK_PER_THREAD

    def apply(self, logits: Any, rows: list[int], matchers: list[Any]) -> Any:
        from jsonmode import native

        self.prepare()
        with native.use(self.compiled):
            return self.masker.apply(logits, rows, matchers)


def strategies(eos: list[int]) -> dict[str, Rows]:
    return {
        "numpy": Rows(eos, compiled=False, threads=1, forced=False),
        "t1": Rows(eos, compiled=True, threads=1, forced=False),
        "t2": Rows(eos, compiled=True, threads=2, forced=False),
        "t2!": Rows(eos, compiled=True, threads=2, forced=True),
    }


def _step(strategy: Rows, logits: Any, rows: list[int], matchers: list[Any]) -> float:
    from jsonmode import native

    strategy.prepare()
    with native.use(strategy.compiled):
        started = time.perf_counter()
        strategy.masker.apply(logits, rows, matchers)
        return time.perf_counter() - started


def measure(
    pool: list[Any], runs: dict[str, Rows], dtype: Any, size: int, rounds: int, cold_rounds: int
) -> dict[str, dict[str, float]]:
    """Median µs per step, warm and whole-step cold, of every strategy at batch ``size``."""
    import torch

    from jsonmode.decoding.engine import cache as cache_module  # (its _mask_cache)

    rng = random.Random(size)
    count = max(4, 256 // size)
    batches = [rng.sample(pool, size) for _ in range(count)]
    orders = [rng.sample(range(size), size) for _ in range(count)]
    fresh = torch.randn(size, WIDTH).to(dtype)
    work = fresh.clone()
    names = list(runs)
    spare = capacity()
    warm: dict[str, list[float]] = {name: [] for name in names}
    cold: dict[str, list[float]] = {name: [] for name in names}
    for strategy in runs.values():  # fill every cache
        for matchers, rows in zip(batches, orders, strict=True):
            strategy.apply(work, rows, matchers)
    gc.collect()
    gc.disable()
    try:
        for turn in range(rounds):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            spent = dict.fromkeys(order, 0.0)
            for matchers, rows in zip(batches, orders, strict=True):
                for name in order:
                    work.copy_(fresh)
                    spent[name] += _step(runs[name], work, rows, matchers)
            for name in order:
                warm[name].append(spent[name] / count * 1e6)
        visits = max(1, count // 4)
        for turn in range(cold_rounds):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            spent = dict.fromkeys(order, 0.0)
            for matchers, rows in zip(batches[:visits], orders[:visits], strict=True):
                for name in order:
                    cache_module._mask_cache.clear()
                    cache_module._bits_cache.clear()  # (the compiled path's rows read bits)
                    runs[name].clear()
                    work.copy_(fresh)
                    spent[name] += _step(runs[name], work, rows, matchers)
            for name in order:
                cold[name].append(spent[name] / visits * 1e6)
    finally:
        gc.enable()
    return {
        "warm": {name: statistics.median(values) for name, values in warm.items()},
        "cold": {name: statistics.median(values) for name, values in cold.items()},
        "capacity": {"before": spare, "after": capacity()},
    }


def capacity(megabytes: int = 16) -> float:
    """The machine's spare parallelism now: the time two Python threads take to hash
    ``megabytes`` each (hashlib releases the GIL) over the time one takes to hash it
    once. 1.0: a second core is free; 2.0: the process gets one core's worth."""
    import hashlib
    import threading

    data = bytes(megabytes << 20)

    def one() -> None:
        hashlib.sha256(data).digest()

    def timed(count: int) -> float:
        workers = [threading.Thread(target=one) for _ in range(count)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return time.perf_counter() - started

    single = statistics.median(timed(1) for _ in range(3))
    double = statistics.median(timed(2) for _ in range(3))
    return double / single


def render(results: dict[tuple[str, int], dict[str, dict[str, float]]]) -> str:
    head = [
        "dtype", "B",
        "warm: numpy", "t1", "t2", "t2!", "t1/numpy", "t2/t1", "t2!/t1",
        "cold step: numpy", "t1", "t2", "t2/numpy", "2 threads: x1 time",
    ]  # fmt: skip
    lines = [head]
    for (dtype, size), result in results.items():
        w, c = result["warm"], result["cold"]
        lines.append(
            [
                dtype,
                str(size),
                *(f"{w[n]:.0f}" for n in ("numpy", "t1", "t2", "t2!")),
                f"{w['t1'] / w['numpy']:.2f}",
                f"{w['t2'] / w['t1']:.2f}",
                f"{w['t2!'] / w['t1']:.2f}",
                *(f"{c[n]:.0f}" for n in ("numpy", "t1", "t2")),
                f"{c['t2'] / c['numpy']:.2f}",
                f"{result['capacity']['before']:.2f}-{result['capacity']['after']:.2f}",
            ]
        )
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in lines
    )


WORK_PER_THREAD = 0  # BatchMasker's own, read at start


def main(argv: list[str] | None = None) -> int:
    global WORK_PER_THREAD
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="warm rounds (default 9)")
    parser.add_argument("--schemas", type=int, default=20, help="MaskBench schemas (default 20)")
    parser.add_argument("--pool", type=int, default=200, help="matchers to draw batches from")
    parser.add_argument("--seed", type=int, default=20250301)
    parser.add_argument(
        "--batches", default=",".join(map(str, BATCHES)), help="batch sizes (default 1,8,32,64)"
    )
    parser.add_argument("--cold-rounds", type=int, default=None, help="(default 5, quick 3)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 9)
    cold_rounds = args.cold_rounds or (3 if args.quick else 5)
    sizes = [int(size) for size in args.batches.split(",")]

    import torch

    from jsonmode import native
    from jsonmode.decoding import batch_masks

    if native.KERNELS is None:
        raise SystemExit(f"the compiled core is not loaded: {native.describe()}")
    WORK_PER_THREAD = batch_masks._WORK_PER_THREAD
    torch.set_num_threads(2)
    load_before = os.getloadavg()
    started = time.perf_counter()
    vocabulary, pool, _ = load_pool(args.schemas, args.pool, args.seed)
    eos = sorted(vocabulary.eos_ids)
    runs = strategies(eos)
    check(pool, runs, eos)
    states = len({(m._engine._token, m.state) for m in pool})
    print(
        f"# batch rows on threads: {native.describe()}; CPUs {os.cpu_count()}; Qwen2.5 "
        f"({vocabulary.size} tokens), width {WIDTH}; {len(pool)} matchers ({states} states) "
        f"from {args.schemas} MaskBench schemas; load average before "
        f"{' '.join(f'{x:.2f}' for x in load_before)}"
    )
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        for size in sizes:
            results[(str(dtype).split(".")[-1], size)] = measure(
                pool, runs, dtype, size, rounds, cold_rounds
            )
    print("µs per step (median over rounds); ratios of those medians")
    print(render(results))
    print(
        f"# load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
