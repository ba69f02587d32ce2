"""The mask-cache hit path's copy in the compiled core (``r3hits_fill_words``, issue 43
round 3): a cached mask's bits into a caller's token bitmask in one C call.

Differential: the kernel against its pure-Python form
(:func:`jsonmode.decoding.matcher.fill_words`) on the real masks of MaskBench walks
(Qwen2.5) and on Hypothesis-drawn buffers; ``Matcher.fill_bitmask`` equal on both paths;
malformed calls refused (in tests/support/native_hostile.py, with the other kernels');
and a hit that allocates nothing.
"""

from __future__ import annotations

import functools
import importlib
import json
import tracemalloc
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from support.native_digest import maskbench

from jsonmode import native
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.matcher import fill_words
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import JsonModeError

# The built extension itself, whichever path this process runs (a missing build fails
# here, by design: CI must build it).
KERNELS: ModuleType = importlib.import_module("jsonmode._native")
TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers"


@functools.cache
def _qwen() -> tuple[Vocabulary, tokenizers.Tokenizer]:
    tokenizer = tokenizers.Tokenizer.from_file(str(TOKENIZERS / "qwen2.5" / "tokenizer.json"))
    return Vocabulary.from_tokenizer(tokenizer), tokenizer


def _both(out: np.ndarray, bits: np.ndarray) -> tuple[bool, np.ndarray, np.ndarray]:
    """The kernel's answer and bytes written, and the Python form's bytes (``out``
    untouched when the kernel refuses)."""
    compiled, python = out.copy(), out.copy()
    done = KERNELS.r3hits_fill_words(compiled, bits)
    if done:
        fill_words(python.reshape(-1).view(np.uint8), bits)
    return done, compiled, python


def test_maskbench_masks_copy_alike_and_fill_bitmask_is_the_same_on_both_paths() -> None:
    """Along the valid instances of 30 MaskBench schemas: each state's cached bits
    copied by the kernel equal the Python form's (into a wider row holding garbage),
    and ``fill_bitmask`` writes the same words with the compiled core and without."""
    vocabulary, tokenizer = _qwen()
    words = (vocabulary.size + 31) // 32
    eos = min(vocabulary.eos_ids)
    rng = np.random.default_rng(43)
    checked = 0
    for _, schema, instances in maskbench(30):
        try:
            compiled = compile_schema(schema, vocabulary)
        except JsonModeError:
            continue
        for instance in instances[:2]:
            text = json.dumps(instance, ensure_ascii=False, separators=(",", ":"))
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            fast, slow = compiled.matcher(), compiled.matcher()
            rows = rng.integers(-(2**31), 2**31, size=(2, words + 3), dtype=np.int64)
            rows = rows.astype(np.int32)
            for token in [*ids, eos]:
                bits = compiled.engine.bits(fast.state)
                done, got, expected = _both(rows[0], bits)
                assert done
                assert np.array_equal(got, expected)
                fast.fill_bitmask(rows[0])
                with native.use(False):
                    slow.fill_bitmask(rows[1])
                assert np.array_equal(rows[0], rows[1])
                checked += 1
                if not (fast.advance(token) and slow.advance(token)):
                    break
    assert checked > 500


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 300),
    extra=st.integers(-8, 40),
    dtype=st.sampled_from(["int32", "uint32", "float32", "int64", "int16", "uint8"]),
    step=st.sampled_from([1, 2]),
    writable=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_buffers_copy_alike_or_are_refused_untouched(
    size: int, extra: int, dtype: str, step: int, writable: bool, seed: int
) -> None:
    """Written exactly when ``out`` is a writable, C-contiguous buffer of 4-byte items
    at least as long as ``bits`` (then as the Python form writes it); else False and
    ``out`` untouched."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 256, size=size, dtype=np.uint8)
    itemsize = np.dtype(dtype).itemsize
    count = max(0, (size + extra) // itemsize)
    base = rng.integers(0, 256, size=count * itemsize * step, dtype=np.uint8).view(dtype)
    out = base[::step]
    out.flags.writeable = writable
    before = out.copy()
    fits = itemsize == 4 and out.flags.c_contiguous and writable and out.nbytes >= size
    done = KERNELS.r3hits_fill_words(out, bits)
    assert done is fits
    if fits:
        expected = before.copy()
        fill_words(expected.view(np.uint8), bits)
        assert out.tobytes() == expected.tobytes()  # (bytes: float32 garbage has NaNs)
    else:
        assert out.tobytes() == before.tobytes()


def test_bits_must_be_a_contiguous_buffer_and_two_arguments_given() -> None:
    out = np.zeros(8, dtype=np.int32)
    bits = np.zeros(64, dtype=np.uint8)
    with pytest.raises(TypeError, match="2 arguments"):
        KERNELS.r3hits_fill_words(out)
    with pytest.raises(TypeError):
        KERNELS.r3hits_fill_words(out, 5)
    with pytest.raises((ValueError, BufferError)):
        KERNELS.r3hits_fill_words(out, bits[::2])
    assert KERNELS.r3hits_fill_words(b"immutable!!!", bits[:4]) is False
    assert KERNELS.r3hits_fill_words(None, bits) is False
    assert not out.any()


def test_a_hit_allocates_nothing_with_the_compiled_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached mask's fill, into a new row view each time as a batch's rows are, is a
    lookup and one C call: no NumPy view is allocated (the peak of traced memory over
    100 fills grows by less than one view's ~200 bytes); the pure-Python path makes
    views."""
    monkeypatch.setattr(native, "KERNELS", KERNELS)
    vocabulary, tokenizer = _qwen()
    compiled = compile_schema({"type": "array", "items": {"type": "string"}}, vocabulary)
    first, second = compiled.matcher(), compiled.matcher()
    assert first.advance(tokenizer.token_to_id("["))
    batch = np.zeros((2, (vocabulary.size + 31) // 32 + 3), dtype=np.int32)
    rows = [batch[0], batch[1], batch[0][:], batch[1][:]]  # (views, each checked anew)

    def fills(fill: bool = True) -> None:
        for n in range(50):
            if fill:
                first.fill_bitmask(rows[n % 2 * 2])  # (a lookup: no memo, see below)
                second.fill_bitmask(rows[n % 2 * 2 + 1])
            first._last = second._last = None  # (no memo: each fill looks up)

    def peak(fill: bool = True) -> int:
        fills()  # (warm: every mask cached)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            fills(fill)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    idle = peak(fill=False)  # (the loop's own range and iterator)
    # (At most small Python objects: the hit counter's new int, a key tuple.)
    assert peak() - idle < 100
    with native.use(False):
        assert peak() - idle > 200  # (the Python form: views of each row)
    flags = np.unpackbits(batch[0].view(np.uint8), bitorder="little")[: vocabulary.size]
    assert np.array_equal(flags.astype(bool), first.mask())
