"""Masks for a batch: restrict many rows of logits to their matchers' masks at once.

:class:`BatchMasker` serves a logits processor that owns a batch of sequences (the
vLLM adapter, :class:`~jsonmode.decoding.logits.JsonLogitsProcessor`): one call per
decoding step restricts every constrained row, whatever schema each row follows.

How a row is kept. A state's mask (:meth:`Matcher.mask`, cached per state by the
engine) is turned once into the *shorter* of its two id lists (``int64``): the
allowed ids when they are few (a structural position: a handful of tokens), else the
banned ids (inside a string: ~4 900 of Qwen2.5's 151 936 columns, padding and
special tokens included). With the compiled core the lists come from the engine's
packed mask instead (:meth:`Matcher.fill_bitmask`, then ``jsonmode._native.count_bits``
and ``bit_ids``): no bool array of the vocabulary's size is made for a new state (a
fresh 152 KB for Qwen2.5, whose page faults cost more than the list);
:meth:`BatchMasker.prepare` builds rows ahead of the logits (the vLLM adapter, during
the forward pass). Those rows are cached per (engine, state) and serve every dtype.
On the CPU, for float16/bfloat16/float32/float64 logits, the rows are written on the
logits' memory viewed as same-width integers (values copied bit for bit): a
banned list is one scatter of ``-inf``; an allowed list is a gather of the allowed
logits, a fill of the row with ``-inf`` and a scatter back. With the compiled core
loaded (:mod:`jsonmode.native`) that is one call for the whole batch
(``jsonmode._native.apply_rows``): every argument checked first, then the GIL
released and the rows claimed one by one by the calling thread and up to
``JSONMODE_MASK_THREADS - 1`` helper threads of a pool kept between calls (default:
the CPUs, at most 8), one per ~1 000 000 column writes (about seven float32 rows to
fill; smaller batches stay on the calling thread): a helper wakes tens of µs after
it is called, and once it holds a row the caller must wait for it, also when the
scheduler takes its core away (on this busy 2-core machine that wait was 3-6 ms in
one step in ten). The caller never waits for a helper that has not started a row.
Without the core (``JSONMODE_NO_EXTENSIONS=1``), or for logits whose rows are not
one C-contiguous block, the same writes go through a NumPy view, row by row on the
calling thread: the reference the compiled path is tested against, bit for bit.
Other dtypes, and logits under autograd, take the same steps as torch ops
(``index_fill_``, ``index_select`` / ``fill_`` / ``index_copy_``). On any other
device (CUDA) the rows go as bits: each cached row's ``np.packbits`` form (``width /
8`` bytes) is copied into one preallocated host buffer, sent in one transfer (8x
less than a bool mask), unpacked on the device with two elementwise ops and applied
with one ``masked_fill_`` over the gathered rows: a fixed handful of kernels per
step whatever the batch, no per-row kernel launch.

Why (measured on this 2-core machine, shared with another engineer's jobs; CPU
torch 2.13 with 2 threads, Qwen2.5 vocabulary, logits 151 936 wide, rows at 152
states drawn from MaskBench instances, about half of them in strings; µs per row of
a warm step, states cached, the median of three ``python bench/masks.py --all`` runs
of nine interleaved rounds each, load average 1.2-1.9)::

                                     float32                 bfloat16
    batch                        1     8    32    64     1     8    32    64
    (a) loop: add cached bias  108    87    79    77   120   115   107   110
    (b) bool buffer+masked_fill 216   186   271   368   190   162   181   210
    (c) packed, torch unpack   270   282   364   481   247   250   253   291
    (d) id lists, torch ops     52    53    60    53    39    41    30    31
    (e) id lists, NumPy: chosen 72    51    42    60    53    39    30    30
    fill() alone (bool masks)   34    31    38    37    26    27    33    34
    first visit, engine mask   176   110    98    80   161    99    93    78
    first visit, (e) after it  212   143   171   175   187   131   134   132
    first visit, (a) after it  322   274   269   271   268   231   225   240

``masked_fill_`` is unvectorised on the CPU (~50 µs a row whatever the mask) and
unpacking bits with torch ops costs more (~60 µs a row), so both dense forms lose
there; a cached ``0/-inf`` bias costs a full read of a 600 KB (float32) row plus the
add. The id lists touch only the columns that change, plus one fill for structural
rows. On a quiet machine (d) wins at one row (its fill of a float32 row runs on two
threads), (e) at 32, and they are within 10 % elsewhere; but every torch op on a
151 936-wide row is a fork-join over torch's threads, and when another process holds
one of those cores each one waits for the descheduled worker: in the runs where the
other engineer's jobs were busy, (a) cost 1 000-7 000 µs a row, (d) 360-3 300 and
(e), whose NumPy calls run on the calling thread alone, 30-200. So (e). On a GPU the
per-row ops would each be a kernel launch (~5-10 µs of host time), which is why the
packed form, constant in launches, is used there. That choice is reasoned, not
measured: no GPU was available to this work.

The compiled path (``python bench/batch_threads.py``, same sample, µs per warm step;
load average 1.8-2.6): one thread against the NumPy path 0.9-1.05x at every batch
(float32 batch 32: 4 935 against 5 006), since the writes are memory-bound and
NumPy's are C loops too; two threads against one 0.94-1.14 (0.76 for bfloat16 at 32
in a quieter minute), not the 0.6x an idle second core would give: another process
held it (two threads of pure computation took twice one's time), and one thread
filled memory at ~5-11 GB/s, two no faster under that load. What it changes: one
call and one GIL release per batch, rows shared with helpers where cores are free; a
cold step (engine masks, rows built, written) 0.84-1.09x the NumPy path's (mostly
~0.87). Since then a row's fill is a string store on x86-64 (``rep stosq``: whole
cache lines written without first being read, where memcpy's blocks read each line
they write): the kernel alone, 32 float32 Qwen2.5 rows, 1 125-1 556 -> 787-838 µs
(bfloat16 unchanged, ~500); BatchMasker at batch 32 on a quiet machine, t1 1 099 µs
against NumPy's 1 347 (0.82x), two threads 0.73x of one (float32 and bfloat16 alike):
two cores filling one 19 MB batch share the memory bus.

:meth:`BatchMasker.fill` (bool masks) and the accelerator path's packing (~2 µs a row)
stay per-row Python: no product code calls ``fill``, and the packing is small beside a
device transfer.

Cost. Warm: a dictionary lookup per row (~0.3 µs) and the ops above. First visit
of a state: the engine's mask (tens of µs to milliseconds, the engine's own cost)
plus ~0.1 ms to build the id list. A cached row holds 8 bytes per id of its shorter
list (~40 KB for an in-string Qwen2.5 state, at most ``4 * width`` bytes); the
packed form, built on first use off the CPU, ``width / 8`` more. ``max_cached``
bounds the rows held (least recently used goes first). The ``[max_rows, width]``
buffers (bool for :meth:`BatchMasker.fill`, packed for the accelerator path) are made
on their first use, so a CPU masker holds none: a new masker costs ~0.1 ms, not the
~20 ms it took here to zero 256 Qwen2.5-wide bool rows (``bench/batchcost.py`` sets
the per-step cost beside a forward pass: warm 1-4 %, cold 6-10 % at batch 32).

Semantics. Columns ``>= vocabulary.size`` (a model head wider than its tokenizer)
are always banned. A ``None`` matcher (a row whose sampled token was refused) may
only emit the masker's eos ids. A state whose mask is empty (should not happen) is
given the eos ids instead, so no row is ever all ``-inf`` — unless the masker has
no eos id below ``width``, which leaves such a row all ``-inf``. Callers do not pass
finished matchers; one that is passed is treated as ``None``.

Errors. Misuse (logits not a 2-D floating tensor of ``width`` columns, rows and
matchers of different lengths, a row out of range or given twice) raises
:class:`~jsonmode.errors.UsageError` before any logit is touched.

Thread-safety. A masker is not thread-safe: its buffers and cache belong to one
thread (one masker per logits processor). The matchers' engines are thread-safe,
so maskers in several threads may serve the same schemas. While the compiled core
writes the rows the GIL is released: other Python threads run meanwhile (they must
not write the same logits); the call returns once every row is written.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt
import torch

from jsonmode import native
from jsonmode.decoding.matcher import Mask, Matcher
from jsonmode.decoding.reference import State
from jsonmode.errors import UsageError

__all__ = ["BatchMasker"]

_NEG_INF = float("-inf")
# Float dtypes the CPU path writes through NumPy, as integers of the same width (the
# bits of -inf; bfloat16 has no NumPy dtype): exact, whatever the payload of a NaN.
_AS_INT = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}
_INF_BITS = {
    dtype: int(torch.tensor(_NEG_INF, dtype=dtype).view(same).item())
    for dtype, same in _AS_INT.items()
}
# Threads for a batch's rows (see _threads_for): offering rows to the pool costs ~1 µs,
# but a helper needs tens of µs to wake, and a row it holds is waited for, also while
# the scheduler has taken its core away; so a helper is asked for per ~1 ms of writes
# here (a Qwen2.5 float32 row's fill ~70-100 µs, a scattered banned id ~6 ns). With a
# quarter of that, two threads at batch 8 took 1.4-4.3x one thread's time on this busy
# 2-core machine (bench/batch_threads.py).
_WORK_PER_THREAD = 1_000_000
_SCATTER = 9


class _Row:
    """One state's mask, as the shorter of its allowed and banned id lists."""

    __slots__ = ("_packed", "ids", "index", "keep")

    def __init__(self, ids: npt.NDArray[np.int64], *, keep: bool) -> None:
        self.ids = ids  # allowed ids when keep, else banned ids; below the width
        self.index = torch.from_numpy(ids)  # the same memory, for torch's index ops
        self.keep = keep
        self._packed: npt.NDArray[np.uint8] | None = None

    def dense(self, out: npt.NDArray[np.bool_]) -> None:
        """Write the mask into ``out`` (one row of ``width``), True = allowed."""
        out.fill(not self.keep)
        out[self.ids] = self.keep

    def packed(self, width: int) -> npt.NDArray[np.uint8]:
        """The mask as bits, token ``8 * k + j`` in bit ``j`` of byte ``k`` (built
        on first use: only off-CPU logits need it)."""
        if self._packed is None:
            allowed = np.empty(width, dtype=np.bool_)
            self.dense(allowed)
            self._packed = np.packbits(allowed, bitorder="little")
        return self._packed


class BatchMasker:
    """Restrict a batch of logits rows to their matchers' masks. Not thread-safe.

    ``width`` is the logits width (the model head: may exceed the vocabulary, whose
    extra columns stay banned); ``eos_ids`` are what a ``None`` row, or a state with
    an empty mask, may emit. ``max_rows`` sizes the buffers that :meth:`fill` and the
    accelerator path allocate on first use (they grow when a call brings more rows;
    the CPU :meth:`apply` needs none); ``max_cached`` bounds the cached state rows.

    Rows are cached by the engine's serial number (unique in the process, never
    reused, unlike ``id()``) and the state, so matchers of different compiled
    schemas (different engines, even different vocabularies) share one masker, and
    two schemas whose states compare equal never share a row.

    See the module docstring for the strategy, its measured cost and its errors.
    """

    def __init__(
        self,
        width: int,
        eos_ids: Collection[int],
        *,
        max_rows: int = 64,
        max_cached: int = 256,
    ) -> None:
        if width < 1 or max_rows < 1 or max_cached < 1:
            raise UsageError(
                f"width, max_rows and max_cached must be positive "
                f"(got {width}, {max_rows}, {max_cached})"
            )
        self.width = int(width)
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        self.max_cached = int(max_cached)
        below = sorted(e for e in self.eos_ids if 0 <= e < self.width)
        self._eos_row = _Row(np.array(below, dtype=np.int64), keep=True)
        self._rows: OrderedDict[tuple[int, State], _Row] = OrderedDict()
        self._capacity = int(max_rows)
        # Made on first use: [capacity, width] bools that only fill() writes (39 MB at
        # 256 Qwen2.5 rows, ~20 ms to zero here, for a masker the vLLM adapter sizes so).
        self._allowed: torch.Tensor | None = None
        self._packed: npt.NDArray[np.uint8] | None = None  # made on first off-CPU apply
        self._bits: dict[torch.device, torch.Tensor] = {}
        self._words: npt.NDArray[np.int32] | None = None  # a state's bitmask (compiled core)

    @property
    def cached(self) -> int:
        """How many state rows are cached now (at most ``max_cached``)."""
        return len(self._rows)

    def fill(self, matchers: Sequence[Matcher | None]) -> torch.Tensor:
        """Masks of ``matchers`` into the masker's buffer (made on first use); a view
        ``[len(matchers), width]``, bool, True = allowed, on the CPU.

        ``None`` = end-of-sequence only (a row whose sampled token was refused). The
        buffer grows when there are more rows than it holds; the view is overwritten
        by the next call. Costs ~25-40 µs a warm row here (a 152 KB memset and a
        scatter of the row's shorter id list). To restrict logits, use :meth:`apply`:
        this mask and a ``masked_fill_`` cost 3-6x more on the CPU.
        """
        count = len(matchers)
        self._reserve(count)
        if self._allowed is None:  # every row handed out is written whole: no zeroing
            self._allowed = torch.empty((self._capacity, self.width), dtype=torch.bool)
        host = self._allowed.numpy()
        for k, matcher in enumerate(matchers):
            self._row(matcher).dense(host[k])
        return self._allowed[:count]

    def apply(
        self,
        logits: torch.Tensor,
        rows: Sequence[int] | torch.Tensor,
        matchers: Sequence[Matcher | None],
    ) -> torch.Tensor:
        """In place: ``logits[rows[i]]`` restricted to ``matchers[i]``'s mask
        (disallowed -> ``-inf``); other rows untouched; returns ``logits``.

        ``logits``: ``[batch, width]``, any floating dtype, any device. Allowed
        logits keep their exact values. ``rows``: distinct row indices (a sequence
        or a 1-D tensor), one per matcher. Raises UsageError (nothing touched) on
        misuse; see the module docstring.
        """
        if logits.dim() != 2 or int(logits.shape[1]) != self.width:
            raise UsageError(
                f"logits must be [batch, {self.width}], got {list(logits.shape)}",
                hint="build the BatchMasker with the logits width (the model head)",
            )
        if not logits.is_floating_point():
            raise UsageError(f"logits must be floating point, got {logits.dtype}")
        listed = _row_list(rows, len(matchers), int(logits.shape[0]))
        entries = [self._row(matcher) for matcher in matchers]
        if not entries:
            return logits
        path = self._path(logits)
        if path == "numpy":
            _apply_numpy(logits, listed, entries)
        elif path == "torch":
            _apply_torch(logits, listed, entries)
        else:
            self._apply_bits(logits, listed, entries)
        return logits

    @staticmethod
    def _path(logits: torch.Tensor) -> str:
        """``"numpy"``: id lists written through NumPy (CPU, the usual float dtypes);
        ``"torch"``: the same with torch ops (CPU, other dtypes or autograd); ``"bits"``:
        any other device. (Tests force each path on the CPU.)"""
        if logits.device.type != "cpu":
            return "bits"
        if logits.dtype in _AS_INT and not logits.requires_grad:
            return "numpy"
        return "torch"

    # -- rows -----------------------------------------------------------------------

    def _row(self, matcher: Matcher | None) -> _Row:
        if matcher is None or matcher.is_finished():
            return self._eos_row
        state = matcher.state
        # The engine's serial (its mask cache's own key): never reused in the process.
        key = (matcher._engine._token, state)
        row = self._rows.get(key)
        if row is not None:
            self._rows.move_to_end(key)
            return row
        row = self._build_from(matcher)
        self._rows[key] = row
        if len(self._rows) > self.max_cached:
            self._rows.popitem(last=False)
        return row

    def prepare(self, matchers: Sequence[Matcher | None]) -> None:
        """Build and cache the rows of ``matchers`` now (a state's first visit: the
        engine's mask and the id list), so that a later :meth:`apply` of the same
        states only writes. For a caller that has time before the logits exist (the
        vLLM adapter, while the model runs its forward pass). Not thread-safe, like
        every method here: never while another call of this masker runs. Errors are
        the engine's (a matcher's mask that cannot be computed)."""
        for matcher in matchers:
            self._row(matcher)

    def _build_from(self, matcher: Matcher) -> _Row:
        """The row of ``matcher``'s state: with the compiled core, straight from the
        engine's packed mask (no bool array of the vocabulary's size: a fresh 152 KB
        for Qwen2.5, mostly page faults); else from :meth:`Matcher.mask`."""
        kernels = native.KERNELS
        if kernels is None:
            return self._build(matcher.mask())
        size = matcher.engine.vocabulary.size
        words = (size + 31) // 32
        if self._words is None or self._words.size < words:
            self._words = np.zeros(words, dtype=np.int32)
        matcher.fill_bitmask(self._words)
        bits = self._words.view(np.uint8)
        shared = min(self.width, size)
        count = kernels.count_bits(bits, shared)
        if count == 0:
            return self._eos_row
        keep = 2 * count <= self.width
        ids = np.empty(count if keep else self.width - count, dtype=np.int64)
        kernels.bit_ids(bits, shared, self.width, keep, ids)
        return _Row(ids, keep=keep)

    def _build(self, mask: Mask) -> _Row:
        shared = min(self.width, int(mask.shape[0]))
        view = mask[:shared]  # ids beyond the width cannot be emitted anyway
        count = int(np.count_nonzero(view))
        if count == 0:
            return self._eos_row
        if 2 * count <= self.width:
            return _Row(np.flatnonzero(view).astype(np.int64, copy=False), keep=True)
        banned = np.flatnonzero(~view).astype(np.int64, copy=False)
        if shared < self.width:  # padded columns of a wider model head
            banned = np.concatenate([banned, np.arange(shared, self.width, dtype=np.int64)])
        return _Row(banned, keep=False)

    # -- buffers --------------------------------------------------------------------

    def _reserve(self, count: int) -> None:
        if count <= self._capacity:
            return
        self._capacity = max(count, 2 * self._capacity)
        self._allowed = None  # both made again on their next use
        self._packed = None

    def _apply_bits(self, logits: torch.Tensor, rows: list[int], entries: list[_Row]) -> None:
        """The accelerator path: packed rows, one host-to-device copy, unpacked there."""
        count = len(entries)
        self._reserve(count)
        if self._packed is None:
            self._packed = np.zeros((self._capacity, (self.width + 7) // 8), dtype=np.uint8)
        packed = self._packed[:count]
        for k, entry in enumerate(entries):
            packed[k] = entry.packed(self.width)
        device = logits.device
        bits = self._bits.get(device)
        if bits is None:
            bits = self._bits[device] = torch.tensor(
                [1 << j for j in range(8)], dtype=torch.uint8, device=device
            )
        # A blocking copy: the host buffer is reused by the next call.
        sent = torch.from_numpy(packed).to(device)
        banned = sent.unsqueeze(-1).bitwise_and(bits).eq(0).flatten(1)[:, : self.width]
        if count == int(logits.shape[0]) and rows == list(range(count)):
            logits.masked_fill_(banned, _NEG_INF)
            return
        index = torch.tensor(rows, dtype=torch.long, device=device)
        logits.index_copy_(0, index, logits.index_select(0, index).masked_fill_(banned, _NEG_INF))


def _apply_numpy(logits: torch.Tensor, rows: list[int], entries: list[_Row]) -> None:
    """The CPU path, on the logits' bits (same-width integers): with the compiled core,
    one ``apply_rows`` call for every row, the GIL released and the rows spread over
    :func:`_threads_for` threads; else (pure Python, or logits whose rows are not one
    C-contiguous block) the reference: per row, one NumPy scatter of -inf (banned
    list), or a gather of the allowed logits, a fill of the row and a scatter back
    (allowed list), on the calling thread. Both write the same bits."""
    host = logits.view(_AS_INT[logits.dtype]).numpy()
    bits = _INF_BITS[logits.dtype]
    kernels = native.KERNELS
    if kernels is not None and host.flags.c_contiguous:
        ids = [entry.ids for entry in entries]
        keeps = [entry.keep for entry in entries]
        kernels.apply_rows(host, rows, ids, keeps, bits, _threads_for(entries, host.shape[1]))
        return
    negative = host.dtype.type(bits)
    for r, entry in zip(rows, entries, strict=True):
        row = host[r]
        if not entry.keep:
            row[entry.ids] = negative
            continue
        kept = row[entry.ids]
        row.fill(negative)
        row[entry.ids] = kept


def _threads_for(entries: list[_Row], width: int) -> int:
    """Threads for one batch: :func:`jsonmode.native.threads`, but no more than one
    row and one per ``_WORK_PER_THREAD`` of work, counted in sequential column writes (an allowed
    list fills its whole row; a banned id is a scattered write, ~``_SCATTER`` times
    the cost of a sequential one here), so small batches stay on the calling thread."""
    cap = min(native.threads(), len(entries))
    if cap <= 1:
        return 1
    work = sum(width if entry.keep else _SCATTER * entry.ids.size for entry in entries)
    return max(1, min(cap, work // _WORK_PER_THREAD))


def _apply_torch(logits: torch.Tensor, rows: list[int], entries: list[_Row]) -> None:
    """The CPU path with torch ops (dtypes NumPy cannot view, tensors under autograd)."""
    for r, entry in zip(rows, entries, strict=True):
        row = logits[r]
        if entry.keep:
            kept = row.index_select(0, entry.index)
            row.fill_(_NEG_INF)
            row.index_copy_(0, entry.index, kept)
        else:
            row.index_fill_(0, entry.index, _NEG_INF)


def _row_list(rows: Sequence[int] | torch.Tensor, count: int, batch: int) -> list[int]:
    """``rows`` as distinct Python ints in ``[0, batch)``, one per matcher."""
    if isinstance(rows, torch.Tensor):
        if (
            rows.dim() != 1
            or rows.is_floating_point()
            or rows.is_complex()
            or rows.dtype == torch.bool
        ):
            raise UsageError(f"rows must be a 1-D integer tensor, got {rows.dtype} {rows.dim()}-D")
        listed: list[int] = rows.tolist()
    else:
        listed = [int(r) for r in rows]
    if len(listed) != count:
        raise UsageError(f"{len(listed)} rows for {count} matchers")
    outside = [r for r in listed if not 0 <= r < batch]
    if outside:
        raise UsageError(f"row index {outside[0]} lies outside [0, {batch})")
    if len(set(listed)) != count:
        twice = next(r for r in listed if listed.count(r) > 1)
        raise UsageError(f"row {twice} is given twice", hint="one matcher per row")
    return listed
