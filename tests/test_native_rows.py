"""Batch rows in the compiled core (``jsonmode._native.apply_rows``, wired into
BatchMasker's CPU path): the same bits as the NumPy reference path, misuse refused
before anything is written, the GIL released while rows are written, and the
transformers backend and the logits processor going through it."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.batch_cases import ARRAY, OBJECT, PAD, TOKENIZERS
from support.native_rows import RowsSpy, compiled_kernels, spy_on_rows

from jsonmode import JsonMode, native
from jsonmode.decoding import batch_masks
from jsonmode.decoding.batch_masks import BatchMasker
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.logits import JsonLogitsProcessor
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.demo import CONSTRAINED_SCHEMA, random_local_model
from jsonmode.errors import UsageError

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}
NEG_INF_BITS32 = 0xFF800000


def vocabulary() -> Vocabulary:
    pieces = [bytes([b]) for b in range(32, 127)]
    pieces += [b'{"', b'":', b'",', b'"}', b"],", b"true", b"false", b'"a"', b"12", b'name":"']
    eos = len(pieces)
    return Vocabulary.from_token_bytes([*pieces, b"", b""], eos_ids=[eos, eos + 1])


def walked(compiled, rng: random.Random, count: int) -> list[Matcher]:
    """``count`` unfinished matchers at random points of random walks."""
    found = []
    while len(found) < count:
        matcher = compiled.matcher()
        for _ in range(rng.randrange(12)):
            matcher.advance(rng.choice([int(t) for t in np.flatnonzero(matcher.mask())]))
            if matcher.is_finished():
                break
        if not matcher.is_finished():
            found.append(matcher)
    return found


def noisy_logits(batch: int, width: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random logits with the values a bit-for-bit copy must keep: NaNs with payloads,
    -0.0, infinities."""
    logits = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed)).to(dtype)
    bits = logits.view(BITS[dtype])
    flat = bits.view(-1)
    picks = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))[:64]
    nan = torch.tensor(float("nan"), dtype=dtype).view(BITS[dtype])
    flat[picks[:16]] = nan | 1  # a NaN with a payload bit
    logits.view(-1)[picks[16:32]] = -0.0
    logits.view(-1)[picks[32:40]] = float("inf")
    return logits


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return vocabulary()


@pytest.fixture(scope="module")
def pool(vocab: Vocabulary) -> list[Matcher | None]:
    rng = random.Random(17)
    first, second = compile_schema(OBJECT, vocab), compile_schema(ARRAY, vocab)
    return [*walked(first, rng, 24), *walked(second, rng, 12), None, None]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> RowsSpy:
    return spy_on_rows(monkeypatch)


def both_paths(
    width: int, eos: frozenset[int], logits: torch.Tensor, rows: list[int], matchers: list
) -> tuple[torch.Tensor, torch.Tensor]:
    """(compiled path, NumPy reference path) outputs of fresh maskers on copies."""
    compiled = BatchMasker(width, eos).apply(logits.clone(), rows, matchers)
    with native.use(False):
        reference = BatchMasker(width, eos).apply(logits.clone(), rows, matchers)
    return compiled, reference


# -- two paths, one behaviour -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_native_rows_equal_the_numpy_rows_bit_for_bit(
    vocab, pool, dtype, threads, spy, monkeypatch
):
    """Batches of 1..64 rows (allowed and banned lists, None rows, a wider head), any
    subset of the batch in any order, written by 1-4 threads: the same bits as the
    NumPy path, the other rows untouched."""
    monkeypatch.setenv("JSONMODE_MASK_THREADS", str(threads))
    monkeypatch.setattr(batch_masks, "_WORK_PER_THREAD", 1)  # threads even for tiny rows
    width = vocab.size + PAD
    rng = random.Random(threads * 100 + DTYPES.index(dtype))
    compiled_masker, reference_masker = BatchMasker(width, vocab.eos_ids), None
    with native.use(False):
        reference_masker = BatchMasker(width, vocab.eos_ids)
    kinds = set()
    for size in range(1, 65):
        matchers = [rng.choice(pool) for _ in range(size)]
        batch = size + rng.randrange(3)
        rows = rng.sample(range(batch), size)
        logits = noisy_logits(batch, width, dtype, seed=size)
        spy.calls.clear()
        out = compiled_masker.apply(logits.clone(), rows, matchers)
        assert spy.calls == [(size, min(threads, size))]
        with native.use(False):
            expected = reference_masker.apply(logits.clone(), rows, matchers)
        assert same_bits(out, expected), f"batch of {size}"
        untouched = [r for r in range(batch) if r not in rows]
        assert same_bits(out[untouched], logits[untouched])
        kinds |= {compiled_masker._row(m).keep for m in matchers}
    assert kinds == {True, False}, "both allowed and banned id lists were written"


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
@pytest.mark.parametrize("shift", [0, 1, 2, 3])
def test_whole_row_fills_at_every_alignment_and_length(dtype, shift):
    """An allowed list fills the rest of its row (the compiled core: items up to an
    8-byte boundary, a string store, the last items): rows of 1..80 items of 2, 4 and 8
    bytes, starting at every alignment (the widths vary, and the block starts ``shift``
    items past an 8-byte boundary), get the -inf pattern everywhere but their kept items,
    as the NumPy reference writes them, and nothing outside the rows is touched."""
    kernels = compiled_kernels()
    size = np.dtype(dtype).itemsize
    negative = {2: 0xFF80, 4: 0xFF800000, 8: 0xFFF0000000000000}[size]
    rng = np.random.default_rng(size * 10 + shift)
    for width in range(1, 81):
        batch = 3
        space = np.zeros(batch * width + shift + 2, dtype=dtype)  # (8-byte aligned)
        space[:] = rng.integers(1, 1000, space.size)
        before = space.copy()
        host = space[shift : shift + batch * width].reshape(batch, width)
        kept = [
            np.array(sorted(rng.choice(width, k, replace=False)), dtype=np.int64)
            for k in (0, min(width, 1), min(width, 3))
        ]
        kernels.apply_rows(host, [0, 1, 2], kept, [True] * batch, negative, 1)
        expected = before.copy()
        view = expected[shift : shift + batch * width].reshape(batch, width)
        for row, ids in enumerate(kept):
            saved = view[row, ids].copy()
            view[row] = np.array(negative, dtype=np.uint64).astype(dtype)
            view[row, ids] = saved
        assert np.array_equal(space, expected), f"width {width}"


@pytest.mark.skipif(not (TOKENIZERS / "qwen2.5").is_dir(), reason="needs shared/data")
def test_qwen_rows_equal_the_numpy_rows_on_every_thread_count(spy, monkeypatch):
    qwen = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5" / "tokenizer.json")
    width = 151_936
    rng = random.Random(8)
    matchers: list[Matcher | None] = [
        *walked(compile_schema(OBJECT, qwen), rng, 6),
        *walked(compile_schema(ARRAY, qwen), rng, 3),
        None,
    ]
    inside = compile_schema({"type": "string"}, qwen).matcher()
    assert inside.advance(_quote(qwen))  # inside a string: a banned list
    matchers += [inside, inside]
    monkeypatch.setattr(batch_masks, "_WORK_PER_THREAD", 1)  # every thread asked for
    for threads in (1, 2, 3, 4):
        monkeypatch.setenv("JSONMODE_MASK_THREADS", str(threads))
        for dtype in (torch.float32, torch.bfloat16):
            rows = rng.sample(range(len(matchers) + 3), len(matchers))
            logits = noisy_logits(len(matchers) + 3, width, dtype, seed=threads)
            spy.calls.clear()
            out, expected = both_paths(width, qwen.eos_ids, logits, rows, matchers)
            assert same_bits(out, expected)
            assert spy.calls
            assert spy.calls[0][0] == len(matchers)
            assert spy.calls[0][1] == threads
            assert not torch.isfinite(out[rows][:, qwen.size :]).any()


def _quote(vocab: Vocabulary) -> int:
    return next(i for i in range(vocab.size) if vocab.token_bytes(i) == b'"')


def test_threads_follow_the_work_and_the_setting(vocab, spy, monkeypatch):
    """One thread for small batches (a helper costs more than it saves), up to
    JSONMODE_MASK_THREADS for large ones; JSONMODE_MASK_THREADS=1 keeps one."""
    width = 151_936  # a Qwen2.5-wide head over the small vocabulary: fills of whole rows
    matcher = compile_schema(ARRAY, vocab).matcher()  # structural: an allowed list
    masker = BatchMasker(width, vocab.eos_ids)
    monkeypatch.setenv("JSONMODE_MASK_THREADS", "4")
    # (each row a fill of 151 936 columns; a helper per ~1 000 000 column writes)
    for size, threads in ((1, 1), (2, 1), (6, 1), (8, 1), (14, 2), (20, 3), (32, 4)):
        spy.calls.clear()
        masker.apply(torch.zeros(size, width), list(range(size)), [matcher] * size)
        assert spy.calls == [(size, threads)], size
    monkeypatch.setenv("JSONMODE_MASK_THREADS", "1")
    spy.calls.clear()
    masker.apply(torch.zeros(32, width), list(range(32)), [matcher] * 32)
    assert spy.calls == [(32, 1)]


def test_logits_whose_rows_are_not_one_block_take_the_numpy_path(vocab, pool, spy):
    width = vocab.size + PAD
    wide = noisy_logits(6, width + 5, torch.float32, seed=3)
    rows, matchers = [4, 0, 2, 1, 5], pool[:5]
    with native.use(False):
        expected = BatchMasker(width, vocab.eos_ids).apply(wide[:, :width].clone(), rows, matchers)
    written = wide.clone()
    view = written[:, :width]  # rows with a stride of width + 5: not one C-contiguous block
    assert not view.is_contiguous()
    BatchMasker(width, vocab.eos_ids).apply(view, rows, matchers)
    assert spy.calls == [], "the compiled writer takes one C-contiguous block only"
    assert same_bits(written[:, :width], expected), "written in place through the view"
    assert same_bits(written[:, width:], wide[:, width:]), "the columns beyond untouched"


def test_the_pure_python_process_gives_the_same_logits(tmp_path):
    """JSONMODE_NO_EXTENSIONS=1 in a fresh process: pure Python loaded, same bytes."""
    script = tmp_path / "rows.py"
    script.write_text(
        "import hashlib, random, sys, torch\n"
        "from jsonmode import native\n"
        "from jsonmode.decoding.batch_masks import BatchMasker\n"
        "from jsonmode.decoding.compiled import compile_schema\n"
        "from jsonmode.decoding.vocabulary import Vocabulary\n"
        "pieces = [bytes([b]) for b in range(32, 127)] + [b'']\n"
        "vocab = Vocabulary.from_token_bytes(pieces, eos_ids=[95])\n"
        "compiled = compile_schema(" + repr(OBJECT) + ", vocab)\n"
        "rng = random.Random(1)\n"
        "matchers = []\n"
        "for _ in range(40):\n"
        "    m = compiled.matcher()\n"
        "    for _ in range(rng.randrange(9)):\n"
        "        ok = [i for i, a in enumerate(m.mask()) if a]\n"
        "        m.advance(rng.choice(ok))\n"
        "        if m.is_finished(): break\n"
        "    matchers.append(None if m.is_finished() else m)\n"
        "logits = torch.randn(48, 200, generator=torch.Generator().manual_seed(2))\n"
        "BatchMasker(200, [95]).apply(logits, rng.sample(range(48), 40), matchers)\n"
        "print(native.KERNELS is None, hashlib.sha256(logits.numpy().tobytes()).hexdigest())\n"
    )
    answers = {}
    for off in ("1", "0"):
        env = {**os.environ, "JSONMODE_NO_EXTENSIONS": off}
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, check=True
        )
        answers[off] = done.stdout.split()
    assert answers["1"][0] == "True", "JSONMODE_NO_EXTENSIONS=1: pure Python"
    assert answers["0"][0] == "False", "by default: the compiled core"
    assert answers["1"][1] == answers["0"][1]


# -- misuse -----------------------------------------------------------------------------


def test_batchmasker_misuse_is_refused_before_the_compiled_writer_runs(vocab, spy):
    width = vocab.size + PAD
    masker = BatchMasker(width, vocab.eos_ids)
    matcher = compile_schema(ARRAY, vocab).matcher()
    logits = torch.randn(3, width)
    before = logits.clone()
    for rows, matchers in (([1, 1], [matcher, None]), ([3], [matcher]), ([0, 1], [matcher])):
        with pytest.raises(UsageError):
            masker.apply(logits, rows, matchers)
    with pytest.raises(UsageError):
        masker.apply(torch.randn(3, width + 1), [0], [matcher])
    assert spy.calls == []
    assert torch.equal(logits, before)


def _kernel_misuse(host: np.ndarray) -> list[tuple[Callable[[], object], type[Exception]]]:
    kernels = compiled_kernels()
    good = np.array([0, 2], dtype=np.int64)

    def call(rows=(0, 1), ids=None, keeps=None, target=None, threads=2) -> Callable[[], object]:
        listed = list(rows)
        return lambda: kernels.apply_rows(
            host if target is None else target,
            listed,
            [good] * len(listed) if ids is None else ids,
            [True] * len(listed) if keeps is None else keeps,
            NEG_INF_BITS32,
            threads,
        )

    class Falsy:
        def __bool__(self) -> bool:
            raise RuntimeError("no truth")

    read_only = host.copy()
    read_only.flags.writeable = False
    return [
        (call(ids=[good, np.array([1, 8], dtype=np.int64)]), ValueError),  # past the width
        (call(ids=[good, np.array([-1], dtype=np.int64)]), ValueError),
        (call(rows=(0, 0)), ValueError),  # a row twice
        (call(rows=(0, 3)), ValueError),  # out of range
        (call(rows=(1, -1)), ValueError),
        (call(rows=(0, "1")), TypeError),
        (call(ids=[good, good.astype(np.int32)]), TypeError),
        (call(ids=[good, good.astype(np.float64)]), TypeError),
        (call(ids=[good, good.astype(np.uint64)]), TypeError),
        (call(ids=[good, np.zeros((1, 2), dtype=np.int64)]), TypeError),
        (call(ids=[good, np.arange(4, dtype=np.int64)[::2]]), ValueError),  # not contiguous
        (call(ids=[good]), ValueError),  # lengths differ
        (call(keeps=[True, Falsy()]), RuntimeError),
        (call(target=read_only), ValueError),
        (call(target=host[0]), ValueError),  # 1-D
        (call(target=host.reshape(1, 3, 8)), ValueError),  # 3-D
        (call(target=host[:, ::2]), ValueError),  # not C-contiguous
        (call(target=host.view(np.int8)), ValueError),  # 1-byte items
        (lambda: kernels.apply_rows(host, (0,), [good], [True], NEG_INF_BITS32, 1), ValueError),
    ]


def test_kernel_misuse_raises_a_typed_error_with_nothing_written():
    """Every argument is checked before the first write: a bad id in the LAST row
    leaves the first rows (which come first in the work list) unwritten."""
    host = np.arange(3 * 8, dtype=np.int32).reshape(3, 8)
    before = host.copy()
    for k, (call, error) in enumerate(_kernel_misuse(host)):
        with pytest.raises(error):
            call()
        assert np.array_equal(host, before), f"case {k} wrote before refusing"
    compiled_kernels().apply_rows(host, [], [], [], NEG_INF_BITS32, 4)  # nothing to do
    assert np.array_equal(host, before)


# -- rows straight from a packed mask (count_bits, bit_ids) ---------------------------------


def numpy_row(mask: np.ndarray, width: int) -> tuple[bool, list[int]] | None:
    """BatchMasker._build's rule in NumPy over a bool mask: None for an empty one."""
    with native.use(False):
        masker = BatchMasker(width, [])
        row = masker._build(mask)
    return None if row is masker._eos_row else (row.keep, row.ids.tolist())


def kernel_row(mask: np.ndarray, width: int) -> tuple[bool, list[int]] | None:
    kernels = compiled_kernels()
    bits = np.packbits(mask, bitorder="little")
    shared = min(width, mask.size)
    count = kernels.count_bits(bits, shared)
    assert count == int(np.count_nonzero(mask[:shared]))
    if count == 0:
        return None
    keep = 2 * count <= width
    ids = np.empty(count if keep else width - count, dtype=np.int64)
    kernels.bit_ids(bits, shared, width, keep, ids)
    return keep, ids.tolist()


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 300),
    pad=st.integers(-40, 40),
    density=st.sampled_from([0.0, 0.02, 0.3, 0.5, 0.7, 0.98, 1.0]),
    seed=st.integers(0, 1 << 30),
)
def test_bit_ids_give_the_numpy_rows_of_any_mask(size, pad, density, seed):
    """Any mask size (word boundaries and past them), a model head narrower or wider
    than the vocabulary, masks nearly empty to full: the kernels' id lists are the
    NumPy rule's (allowed ids when at most half the width, else the banned ones and
    the padded columns)."""
    width = max(1, size + pad)
    rng = np.random.default_rng(seed)
    mask = rng.random(size) < density
    assert kernel_row(mask, width) == numpy_row(mask, width)


def test_the_compiled_masker_builds_rows_from_bits_without_a_bool_mask(vocab, pool, monkeypatch):
    """With the core, a row comes from the engine's packed mask: Matcher.mask() (a bool
    array of the vocabulary's size per state) is never called, and the rows are the
    NumPy path's, which does call it."""
    width = vocab.size + PAD
    logits = noisy_logits(len(pool), width, torch.float32, seed=5)
    with native.use(False):
        expected = BatchMasker(width, vocab.eos_ids).apply(
            logits.clone(), list(range(len(pool))), pool
        )

    def refused(self: Matcher) -> None:
        raise AssertionError("Matcher.mask() called on the compiled path")

    monkeypatch.setattr(Matcher, "mask", refused)
    out = BatchMasker(width, vocab.eos_ids).apply(logits.clone(), list(range(len(pool))), pool)
    assert same_bits(out, expected)


def test_prepared_rows_are_only_written_by_apply(vocab, pool, monkeypatch):
    """prepare() builds and caches the rows; apply() then asks no matcher for a mask."""
    width = vocab.size + PAD
    live = [m for m in pool if m is not None]
    masker = BatchMasker(width, vocab.eos_ids)
    masker.prepare(live)
    assert masker.cached == len({(id(m.engine), m.state) for m in live})

    def refused(self: Matcher, out: object) -> None:
        raise AssertionError("a prepared row was built again")

    monkeypatch.setattr(Matcher, "fill_bitmask", refused)
    logits = noisy_logits(len(live), width, torch.float32, seed=6)
    out = masker.apply(logits.clone(), list(range(len(live))), live)
    with native.use(False):
        expected = BatchMasker(width, vocab.eos_ids).apply(
            logits.clone(), list(range(len(live))), live
        )
    assert same_bits(out, expected)


def test_bit_ids_misuse_raises_a_typed_error():
    kernels = compiled_kernels()
    bits = np.packbits(np.array([1, 0, 1, 1, 0, 0, 0, 0, 1], dtype=np.bool_), bitorder="little")
    good = np.empty(4, dtype=np.int64)
    cases: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: kernels.count_bits(bits, 17), ValueError),  # past the bits given
        (lambda: kernels.count_bits(bits, -1), ValueError),
        (lambda: kernels.count_bits(bits.astype(np.int32), 4), TypeError),
        (lambda: kernels.bit_ids(bits, 9, 9, True, np.empty(3, dtype=np.int64)), ValueError),
        (lambda: kernels.bit_ids(bits, 9, 9, False, np.empty(4, dtype=np.int64)), ValueError),
        (lambda: kernels.bit_ids(bits, 9, 8, True, good), ValueError),  # width < shared
        (lambda: kernels.bit_ids(bits, 9, 9, True, good.astype(np.int32)), TypeError),
        (lambda: kernels.bit_ids(bits, 9, 9, True, np.empty((2, 2), dtype=np.int64)), TypeError),
        (lambda: kernels.bit_ids(bits, 99, 99, True, good), ValueError),
        (lambda: kernels.bit_ids(bits, 9, 9, True, b"12345678" * 4), (TypeError, BufferError)),
    ]
    for call, error in cases:
        with pytest.raises(error):
            call()
    kernels.bit_ids(bits, 9, 9, True, good)
    assert good.tolist() == [0, 2, 3, 8]


# -- the GIL ----------------------------------------------------------------------------


def counted_during(call: Callable[[], object]) -> tuple[float, int]:
    """Seconds ``call`` took in this thread, and how many times a second Python thread
    counted meanwhile. The counter yields the GIL at each count (sleep(0)) and the
    switch interval is 1 s, so a call that holds the GIL is never interrupted by it (a
    forced switch would need 1 s): its count is 0; a call that releases the GIL lets the
    counter run while it works."""
    stamps: list[float] = []
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    counter = threading.Thread(target=count)
    counter.start()
    try:
        while len(stamps) < 10:  # the counter runs; this thread holds the GIL again
            time.sleep(0.001)
        started = time.perf_counter()
        call()
        ended = time.perf_counter()
    finally:
        stop.set()
        counter.join()
        sys.setswitchinterval(interval)
    return ended - started, sum(started < s < ended for s in stamps)


def test_the_probe_sees_a_call_that_holds_the_gil():
    """The control: sum() over a range is a C loop that never releases the GIL."""
    took, counted = counted_during(lambda: sum(range(3_000_000)))
    assert took > 0.005
    assert counted == 0


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_a_second_python_thread_runs_while_rows_are_written():
    kernels = compiled_kernels()
    rows = 8
    width = 1 << 20  # 4 MB rows; each gets 4M scattered writes (~100+ ms in all)
    host = np.zeros((rows, width), dtype=np.int32)
    scattered = np.tile(np.random.default_rng(0).permutation(width).astype(np.int64), 4)

    def for_a_while() -> None:  # (repeated for 0.1 s at least: long enough to tell)
        started = time.perf_counter()
        while time.perf_counter() - started < 0.1:
            kernels.apply_rows(
                host, list(range(rows)), [scattered] * rows, [False] * rows, NEG_INF_BITS32, 1
            )

    took, counted = counted_during(for_a_while)
    assert took >= 0.1
    assert counted >= 50, f"the counter counted {counted} times in {took * 1e3:.0f} ms"
    assert (host == np.int32(-8388608)).all()


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_batchmasker_apply_lets_a_second_python_thread_run(vocab, spy):
    """The wired path: BatchMasker.apply on the compiled core releases the GIL too."""
    width = 1 << 20  # a wide head over the small vocabulary: whole rows filled
    matcher = compile_schema(ARRAY, vocab).matcher()
    masker = BatchMasker(width, vocab.eos_ids)
    logits = torch.zeros(24, width)
    masker.apply(logits, list(range(24)), [matcher] * 24)  # the row cached
    logits.zero_()

    def for_a_while() -> None:
        # (~100 MB of rows a call, repeated for 0.15 s at least: a window long enough to
        # count in however fast the machine writes them; five calls took 29 ms on one.)
        started = time.perf_counter()
        while time.perf_counter() - started < 0.15:
            masker.apply(logits, list(range(24)), [matcher] * 24)

    took, counted = counted_during(for_a_while)
    assert len(spy.calls) >= 2
    assert took >= 0.15
    assert counted >= 50, f"the counter counted {counted} times in {took * 1e3:.0f} ms"
    assert not torch.isfinite(logits[:, vocab.size :]).any()


# -- who goes through it ----------------------------------------------------------------


def test_the_logits_processor_writes_through_the_compiled_core(vocab, spy):
    processor = JsonLogitsProcessor(compile_schema(OBJECT, vocab))
    width = vocab.size + PAD
    out = processor(torch.zeros((3, 2), dtype=torch.long), torch.zeros((3, width)))
    assert spy.calls == [(3, 1)]
    with native.use(False):
        again = JsonLogitsProcessor(compile_schema(OBJECT, vocab))
        expected = again(torch.zeros((3, 2), dtype=torch.long), torch.zeros((3, width)))
    assert torch.equal(out, expected)


def test_the_transformers_backend_writes_through_the_compiled_core(spy):
    model, tokenizer = random_local_model(seed=1)
    torch.manual_seed(0)
    result = JsonMode(model, tokenizer=tokenizer, max_new_tokens=64).run(
        "Extract the person.", CONSTRAINED_SCHEMA
    )
    assert result.tier == "constrained"
    assert json.loads(result.raw) == result.data
    assert len(spy.calls) >= 3, "one call a decoding step"


# -- the helper pool --------------------------------------------------------------------


def _expected_rows(host: np.ndarray, rows: list[int], ids: list[np.ndarray], keeps: list[bool]):
    out = host.copy()
    for r, listed, keep in zip(rows, ids, keeps, strict=True):
        if keep:
            kept = out[r, listed]
            out[r] = np.int32(-8388608)
            out[r, listed] = kept
        else:
            out[r, listed] = np.int32(-8388608)
    return out


def _random_batch(seed: int, batch: int = 12, width: int = 5000):
    rng = np.random.default_rng(seed)
    host = rng.integers(-1000, 1000, size=(batch, width), dtype=np.int32)
    rows = [int(r) for r in rng.permutation(batch)[: batch - 2]]
    keeps = [bool(k) for k in rng.integers(0, 2, size=len(rows))]
    ids = [
        np.sort(rng.choice(width, size=int(rng.integers(0, 300)), replace=False)).astype(np.int64)
        for _ in rows
    ]
    return host, rows, ids, keeps


def test_callers_on_several_threads_at_once_each_get_their_rows():
    """The pool offers one batch at a time: callers running at once (the GIL released)
    replace each other's offer and finish their rows themselves; every result exact."""
    kernels = compiled_kernels()
    failures: list[str] = []

    def caller(seed: int) -> None:
        for round in range(40):
            host, rows, ids, keeps = _random_batch(seed * 1000 + round)
            expected = _expected_rows(host, rows, ids, keeps)
            kernels.apply_rows(host, rows, ids, keeps, NEG_INF_BITS32, 1 + (seed + round) % 4)
            if not np.array_equal(host, expected):
                failures.append(f"caller {seed}, round {round}")

    callers = [threading.Thread(target=caller, args=(seed,)) for seed in range(4)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    assert failures == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_writes_rows_with_a_pool_of_its_own():
    """fork() copies no thread: the child's pool starts empty and fills again."""
    kernels = compiled_kernels()
    host, rows, ids, keeps = _random_batch(1)
    kernels.apply_rows(host.copy(), rows, ids, keeps, NEG_INF_BITS32, 4)  # the pool runs
    expected = _expected_rows(host, rows, ids, keeps)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's verdict is its exit status)
        try:
            kernels.apply_rows(host, rows, ids, keeps, NEG_INF_BITS32, 4)
            os._exit(0 if np.array_equal(host, expected) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
