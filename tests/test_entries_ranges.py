"""``entries.ranges`` (the integers of many ranges, back to back: what the walks expand
trie ranges with) on both paths: the compiled core's ``fill_ranges`` (csrc/r12ranges.c,
four stores a short range, the next range writing over the spare ones) and NumPy's
cumsum, repeat and arange. Equal answers for short, empty and long ranges, up to the
last item of the output; malformed calls get typed errors before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonmode import native
from jsonmode.decoding.engine.entries import ranges

KERNELS = native.KERNELS
compiled_only = pytest.mark.skipif(KERNELS is None, reason="the compiled core is not loaded")

_RANGES = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), st.one_of(st.integers(0, 5), st.integers(0, 40))),
    max_size=60,
)


def _expected(pairs: list[tuple[int, int]]) -> list[int]:
    return [value for start, count in pairs for value in range(start, start + count)]


@compiled_only
@settings(max_examples=300, deadline=None)
@given(pairs=_RANGES)
def test_both_paths_expand_ranges_alike(pairs: list[tuple[int, int]]) -> None:
    lo = np.array([start for start, _ in pairs], dtype=np.int64)
    hi = lo + np.array([count for _, count in pairs], dtype=np.int64)
    with native.use(True):
        fast = ranges(lo, hi)
    with native.use(False):
        slow = ranges(lo, hi)
    assert fast.dtype == slow.dtype == np.int64
    assert fast.tolist() == slow.tolist() == _expected(pairs)


@compiled_only
def test_short_ranges_at_the_end_of_the_output_stay_inside_it() -> None:
    """The last ranges are short and the output has no spare room after them: the
    four-store path must not run there (AddressSanitizer checks the same call)."""
    lo = np.array([10, 20, 30], dtype=np.int64)
    hi = np.array([12, 21, 33], dtype=np.int64)
    out = np.full(8, -7, dtype=np.int64)
    assert KERNELS is not None
    KERNELS.fill_ranges(lo, hi, out[:6])
    assert out.tolist() == [10, 11, 20, 30, 31, 32, -7, -7]


@compiled_only
def test_fill_ranges_refuses_malformed_calls_before_writing() -> None:
    assert KERNELS is not None
    lo = np.array([0, 5], dtype=np.int64)
    hi = np.array([2, 6], dtype=np.int64)
    out = np.full(3, -1, dtype=np.int64)
    for bad_hi, message in [
        (np.array([2, 4], dtype=np.int64), "ends before it starts"),
        (np.array([9, 6], dtype=np.int64), "more than out"),
        (np.array([1, 6], dtype=np.int64), "fewer integers"),
        (np.array([2], dtype=np.int64), "differ in length"),
    ]:
        with pytest.raises(ValueError, match=message):
            KERNELS.fill_ranges(lo, bad_hi, out)
        assert out.tolist() == [-1, -1, -1]
    with pytest.raises(TypeError, match="int64"):
        KERNELS.fill_ranges(lo.astype(np.int32), hi, out)
    with pytest.raises(TypeError, match="int64"):
        KERNELS.fill_ranges(lo, hi, out.astype(np.float64))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # (NumPy refuses the buffer)
        KERNELS.fill_ranges(lo, hi, out)
