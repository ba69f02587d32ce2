"""BatchMasker: a batch of rows restricted at once, against a row-by-row reference."""

import random

import numpy as np
import pytest
import torch
from support.batch_cases import ARRAY, OBJECT, PAD, TOKENIZERS

from jsonmode.decoding.batch_masks import BatchMasker
from jsonmode.decoding.compiled import compile_schema
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import UsageError

BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def vocabulary() -> Vocabulary:
    pieces = [bytes([b]) for b in range(32, 127)]
    pieces += [b'{"', b'":', b'",', b'"}', b"],", b"true", b"false", b'"a"', b"12", b'name":"']
    eos = len(pieces)
    return Vocabulary.from_token_bytes([*pieces, b"", b""], eos_ids=[eos, eos + 1])


def walked(compiled, rng, count):
    """``count`` unfinished matchers at random points of random walks."""
    found = []
    while len(found) < count:
        matcher = compiled.matcher()
        for _ in range(rng.randrange(12)):
            choices = [int(t) for t in np.flatnonzero(matcher.mask())]
            matcher.advance(rng.choice(choices))
            if matcher.is_finished():
                break
        if not matcher.is_finished():
            found.append(matcher)
    return found


def allowed_row(matcher, width, eos):
    """The reference: one row's allowed columns from ``Matcher.mask()`` alone."""
    allowed = np.zeros(width, dtype=bool)
    if matcher is not None:
        mask = matcher.mask()
        shared = min(width, mask.size)
        allowed[:shared] = mask[:shared]
    if not allowed.any():
        allowed[[e for e in eos if e < width]] = True
    return allowed


def reference(logits, rows, matchers, eos):
    expected = logits.clone()
    for row, matcher in zip(rows, matchers, strict=True):
        banned = torch.from_numpy(~allowed_row(matcher, logits.shape[1], eos))
        expected[row][banned] = float("-inf")
    return expected


def same_bits(a, b):
    return torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


@pytest.fixture(scope="module")
def vocab():
    return vocabulary()


@pytest.fixture(params=["numpy", "torch", "bits"])
def path(request):
    """Every path, forced on the CPU: id lists through NumPy (the CPU's), through torch
    ops (other dtypes, autograd), and the accelerators' packed bits."""
    return request.param


def force(masker, path, monkeypatch):
    monkeypatch.setattr(masker, "_path", lambda logits: path)
    return masker


def masker_for(vocab, path, monkeypatch, **options):
    return force(BatchMasker(vocab.size + PAD, vocab.eos_ids, **options), path, monkeypatch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_mixed_batch_equals_the_row_by_row_reference(vocab, path, dtype, monkeypatch):
    rng = random.Random(5)
    first, second = compile_schema(OBJECT, vocab), compile_schema(ARRAY, vocab)
    matchers = [*walked(first, rng, 6), *walked(second, rng, 6), None, None]
    rng.shuffle(matchers)
    width = vocab.size + PAD
    masker = masker_for(vocab, path, monkeypatch, max_rows=4)  # 14 rows: the buffers grow
    logits = torch.randn(20, width).to(dtype)
    rows = rng.sample(range(20), len(matchers))
    expected = reference(logits, rows, matchers, vocab.eos_ids)
    out = masker.apply(logits.clone(), rows, matchers)
    assert same_bits(out, expected), "allowed logits unchanged, the rest -inf"
    untouched = [r for r in range(20) if r not in rows]
    assert same_bits(out[untouched], logits[untouched]), "other rows bit-identical"
    assert not torch.isfinite(out[rows][:, vocab.size :]).any(), "padded columns banned"
    assert torch.isfinite(out[rows]).any(dim=1).all(), "no row all -inf"
    for row, matcher in zip(rows, matchers, strict=True):
        if matcher is None:
            finite = set(torch.isfinite(out[row]).nonzero().flatten().tolist())
            assert finite == set(vocab.eos_ids), "None rows: end-of-sequence only"
    # Warm: the same again from the cache, with the rows as a tensor.
    again = masker.apply(logits.clone(), torch.tensor(rows), matchers)
    assert same_bits(again, expected)


def test_fill_equals_the_reference_masks_and_grows(vocab):
    rng = random.Random(9)
    matchers = [
        *walked(compile_schema(OBJECT, vocab), rng, 5),
        None,
        *walked(compile_schema(ARRAY, vocab), rng, 5),
    ]
    width = vocab.size + PAD
    masker = BatchMasker(width, vocab.eos_ids, max_rows=3)
    filled = masker.fill(matchers)
    assert filled.dtype == torch.bool
    assert filled.shape == (len(matchers), width)
    for k, matcher in enumerate(matchers):
        assert np.array_equal(filled[k].numpy(), allowed_row(matcher, width, vocab.eos_ids))
    assert masker.fill(matchers[:2]).shape == (2, width)


def test_the_bool_buffer_is_made_by_fill_alone_and_rows_are_written_whole(vocab):
    """apply() on the CPU needs no [max_rows, width] buffer (the vLLM adapter sizes a
    masker for 256 rows); fill() makes it uninitialised, so each row it returns must be
    written whole: rows filled before are overwritten, never read through."""
    rng = random.Random(4)
    matchers = [*walked(compile_schema(OBJECT, vocab), rng, 4), None]
    matchers += walked(compile_schema(ARRAY, vocab), rng, 3)
    width = vocab.size + PAD
    masker = BatchMasker(width, vocab.eos_ids, max_rows=256)
    assert masker._allowed is None
    masker.apply(torch.randn(len(matchers), width), range(len(matchers)), matchers)
    assert masker._allowed is None, "the CPU apply allocates no bool buffer"
    for order in (matchers, matchers[::-1], matchers[2:] + matchers[:2]):
        filled = masker.fill(order)
        for k, matcher in enumerate(order):
            assert np.array_equal(filled[k].numpy(), allowed_row(matcher, width, vocab.eos_ids))


def test_states_equal_across_schemas_never_share_a_row(vocab, path, monkeypatch):
    # Different schemas, one vocabulary: equal initial states, different masks. A
    # cache keyed by the state alone would hand the second row the first one's mask.
    first, second = compile_schema(ARRAY, vocab).matcher(), compile_schema(OBJECT, vocab).matcher()
    assert first.state == second.state
    assert not np.array_equal(first.mask(), second.mask())
    masker = masker_for(vocab, path, monkeypatch)
    logits = torch.randn(2, vocab.size + PAD)
    for order in ([first, second], [second, first]):
        out = masker.apply(logits.clone(), [0, 1], order)
        assert torch.equal(out, reference(logits, [0, 1], order, vocab.eos_ids))
        assert torch.equal(masker.fill(order)[1], masker.fill(order[1:])[0])
    assert masker.cached == 2


def test_cache_is_bounded_and_evicted_rows_are_rebuilt(vocab, path, monkeypatch):
    rng = random.Random(3)
    masker = masker_for(vocab, path, monkeypatch, max_cached=3)
    matchers = walked(compile_schema(OBJECT, vocab), rng, 30)
    assert len({m.state for m in matchers}) > 3
    logits = torch.randn(4, vocab.size + PAD)
    for start in range(0, 30, 2):
        batch = matchers[start : start + 2]
        out = masker.apply(logits.clone(), [3, 1], batch)
        assert masker.cached <= 3
        assert torch.equal(out, reference(logits, [3, 1], batch, vocab.eos_ids))
    first = matchers[:2]
    out = masker.apply(logits.clone(), [0, 2], first)  # evicted long ago: rebuilt
    assert torch.equal(out, reference(logits, [0, 2], first, vocab.eos_ids))


def test_empty_masks_and_finished_matchers_allow_eos_only(vocab, path, monkeypatch):
    # A vocabulary that cannot spell a boolean: no token continues, so the matcher's
    # mask allows end-of-sequence alone (the text is then judged incomplete).
    tiny = Vocabulary.from_token_bytes([b"a", b"b", b""], eos_ids=[2])
    stuck = compile_schema({"type": "boolean"}, tiny).matcher()
    assert stuck.mask().tolist() == [False, False, True]
    done = compile_schema({"type": "boolean"}, vocab).matcher()
    assert done.advance(next(i for i in range(vocab.size) if vocab.token_bytes(i) == b"true"))
    assert done.advance(min(vocab.eos_ids))
    assert done.is_finished()
    for matcher, source in ((stuck, tiny), (done, vocab)):
        masker = masker_for(source, path, monkeypatch)
        out = masker.apply(torch.zeros(2, source.size + PAD), [1], [matcher])
        assert set(torch.isfinite(out[1]).nonzero().flatten().tolist()) == set(source.eos_ids)
        assert torch.equal(out[0], torch.zeros(source.size + PAD))


def test_misuse_raises_before_touching_the_logits(vocab):
    masker = BatchMasker(vocab.size + PAD, vocab.eos_ids)
    matcher = compile_schema(ARRAY, vocab).matcher()
    logits = torch.randn(3, vocab.size + PAD)
    before = logits.clone()
    bad = [
        (torch.randn(3, vocab.size), [0], [matcher]),  # width
        (torch.zeros(3, vocab.size + PAD, dtype=torch.long), [0], [matcher]),  # dtype
        (logits, [0, 1], [matcher]),  # lengths
        (logits, [3], [matcher]),  # out of range
        (logits, [-1], [matcher]),
        (logits, [1, 1], [matcher, None]),  # twice
        (logits, torch.tensor([[0]]), [matcher]),  # not 1-D
        (logits, torch.tensor([True]), [matcher]),
    ]
    for tensor, rows, matchers in bad:
        with pytest.raises(UsageError):
            masker.apply(tensor, rows, matchers)
    assert torch.equal(logits, before)
    with pytest.raises(UsageError):
        BatchMasker(0, vocab.eos_ids)
    assert masker.apply(logits, [], []) is logits
    assert torch.equal(logits, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_rows_equal_the_reference(vocab):
    rng = random.Random(11)
    matchers = [*walked(compile_schema(OBJECT, vocab), rng, 5), None]
    masker = BatchMasker(vocab.size + PAD, vocab.eos_ids, max_rows=2)
    logits = torch.randn(9, vocab.size + PAD).to(torch.bfloat16)
    rows = rng.sample(range(9), len(matchers))
    out = masker.apply(logits.cuda(), rows, matchers).cpu()
    assert same_bits(out, reference(logits, rows, matchers, vocab.eos_ids))
    whole = masker.apply(logits[:6].cuda(), range(6), matchers).cpu()
    assert same_bits(whole, reference(logits[:6], range(6), matchers, vocab.eos_ids))


@pytest.mark.skipif(not (TOKENIZERS / "qwen2.5").is_dir(), reason="needs shared/data")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qwen_batch_with_a_padded_head(path, dtype, monkeypatch):
    qwen = Vocabulary.from_tokenizer(TOKENIZERS / "qwen2.5" / "tokenizer.json")
    width = 151_936
    assert qwen.size < width
    first = compile_schema(OBJECT, qwen)
    second = compile_schema(ARRAY, qwen)
    rng = random.Random(2)
    matchers = [*walked(first, rng, 4), *walked(second, rng, 3), None]
    # In strings (most tokens allowed, or about half under a length bound) and at
    # structure (few allowed): both kinds of id list.
    for schema, text in ((OBJECT, b'{"name":"ab'), ({"type": "string"}, b'"ab')):
        inside = compile_schema(schema, qwen).matcher()
        for token in _encode(qwen, text):
            assert inside.advance(token)
        matchers.append(inside)
    masker = force(BatchMasker(width, qwen.eos_ids, max_rows=4), path, monkeypatch)
    logits = torch.randn(len(matchers) + 2, width).to(dtype)
    rows = rng.sample(range(len(matchers) + 2), len(matchers))
    out = masker.apply(logits.clone(), rows, matchers)
    assert same_bits(out, reference(logits, rows, matchers, qwen.eos_ids))
    assert torch.isfinite(out[rows[-1]]).sum() > width // 2
    # Each cached row is the shorter list: at most half the width (4 bytes a column).
    assert all(row.ids.size <= width // 2 for row in masker._rows.values())
    assert any(not row.keep for row in masker._rows.values())


def _encode(vocab, text):
    """Greedy longest-match ids of ``text`` (enough for a short ASCII prefix)."""
    by_bytes = {vocab.token_bytes(i): i for i in range(vocab.size) if vocab.allowed_base[i]}
    ids, at = [], 0
    while at < len(text):
        end = max(e for e in range(at + 1, min(len(text), at + 16) + 1) if text[at:e] in by_bytes)
        ids.append(by_bytes[text[at:end]])
        at = end
    return ids


def test_paths_by_device_dtype_and_autograd(vocab):
    masker = BatchMasker(vocab.size + PAD, vocab.eos_ids)
    width = vocab.size + PAD
    assert masker._path(torch.zeros(1, width)) == "numpy"
    assert masker._path(torch.zeros(1, width, dtype=torch.bfloat16)) == "numpy"
    assert masker._path(torch.zeros(1, width, dtype=torch.float16)) == "numpy"
    assert masker._path(torch.zeros(1, width, dtype=torch.bfloat16, requires_grad=True)) == "torch"
    assert masker._path(torch.zeros(1, width, device="meta")) == "bits"
    # Under autograd (a non-leaf: in place is allowed), bfloat16 goes through torch ops.
    matchers = walked(compile_schema(OBJECT, vocab), random.Random(1), 3)
    base = torch.randn(3, width).to(torch.bfloat16)
    logits = base.clone().requires_grad_(True) * 1.0
    out = masker.apply(logits, [2, 0, 1], matchers)
    assert same_bits(out.detach(), reference(base, [2, 0, 1], matchers, vocab.eos_ids))
