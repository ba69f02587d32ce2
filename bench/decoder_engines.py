"""The engines of the decoder benchmark, each behind one small adapter, and the walk.

Part of ``bench/decoder.py`` (see its docstring). An adapter has ``setup(tokenizer,
eos)`` (vocabulary preprocessing), ``compile(schema)`` (a handle, or
:class:`CompileFailure` for a typed refusal) and ``walker(handle)`` (a fresh
:class:`Walker` for one sequence); :func:`_walk` walks one instance's tokens then EOS,
timing the mask call alone. They run inside the worker processes
(``decoder_workers``), and in ``bench/paired.py`` and ``bench/grammars.py``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ENGINES = ("jsonmode", "xgrammar", "llguidance", "outlines")
OPTIONAL_ENGINES = ("xgrammar-compliant",)  # only with --engines

now_ns = time.perf_counter_ns


class CompileFailure(Exception):
    """The engine declined the schema (a typed, expected refusal)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Walker:
    """One sequence. ``fill()`` is the timed mask computation; its result goes to ``allowed``."""

    fill: Callable[[], Any]
    allowed: Callable[[Any, int], bool]
    advance: Callable[[int], bool]
    finished: Callable[[], bool]
    on_reject: Callable[[Any, int], dict[str, Any]] = lambda result, token: {}


def _bit(words: Any, token: int) -> bool:
    return bool((int(words[token >> 5]) >> (token & 31)) & 1)


class JsonmodeEngine:
    name = "jsonmode"

    def setup(self, tokenizer: Any, eos: int) -> None:
        from jsonmode.decoding.vocabulary import Vocabulary

        self.vocabulary = Vocabulary.from_tokenizer(tokenizer)
        # The first mask engine for a vocabulary builds its token index and trie (once
        # per vocabulary and process): vocabulary set-up, timed here with it.
        import jsonmode

        jsonmode.compile_schema({}, self.vocabulary).engine  # noqa: B018

    def compile(self, schema: Any) -> Any:
        import jsonmode
        from jsonmode.decoding import compiled as compiled_module

        # Measure a real compile even when two sampled schemas are equal.
        with contextlib.suppress(AttributeError):
            compiled_module._cache.clear()
        try:
            compiled = jsonmode.compile_schema(schema, self.vocabulary)
        except jsonmode.BudgetExceededError as exc:
            raise CompileFailure("budget", str(exc)) from None
        except jsonmode.UnsupportedSchemaError as exc:
            raise CompileFailure("unsupported", str(exc)) from None
        except jsonmode.InvalidSchemaError as exc:
            raise CompileFailure("invalid", str(exc)) from None
        # The schema's mask engine (what its matchers share) is per-schema set-up, like
        # llguidance's LLMatcher built in its compile: timed here, not left untimed.
        compiled.engine  # noqa: B018
        return compiled

    def compile_info(self, handle: Any) -> dict[str, Any]:
        return {"unenforced": list(handle.unenforced)}

    def counters(self, handle: Any) -> dict[str, int]:
        engine = handle.engine
        return {"hits": int(engine.hits), "misses": int(engine.misses)}

    def walker(self, handle: Any) -> Walker:
        import numpy as np

        # Timed: filling a token bitmask (int32 words, bit t % 32 of word t // 32), the
        # form llguidance and xgrammar fill here and serving engines apply; the
        # bool array of Matcher.mask() costs an unpack on top.
        matcher = handle.matcher()
        words = np.zeros((self.vocabulary.size + 31) // 32, dtype=np.int32)

        def on_reject(_: Any, token: int) -> dict[str, Any]:
            flags: dict[str, Any] = {}
            if not bool(words.any()):
                flags["empty_mask"] = True
            if matcher.advance(token):
                flags["advance_accepts_masked_token"] = True
            return flags

        return Walker(
            fill=lambda: matcher.fill_bitmask(words),
            allowed=lambda _, token: _bit(words, token),
            advance=matcher.advance,
            finished=matcher.is_finished,
            on_reject=on_reject,
        )

    def text_verdict(self, handle: Any, text: str) -> bool:
        return bool(handle.accepts(text))

    def any_order_verdict(self, schema: Any, text: str) -> bool:
        """Text-level verdict with the any-property-order option (default: schema order)."""
        import jsonmode

        return bool(jsonmode.compile_schema(schema, property_order="any").accepts(text))


class XgrammarEngine:
    """xgrammar's defaults (``strict_mode=True``: properties and items not declared are
    forbidden, unlike JSON Schema) as in the issue's reference numbers; the
    ``xgrammar-compliant`` variant follows JSON Schema (``strict_mode=False``), which
    makes its compile one to two orders of magnitude slower."""

    name = "xgrammar"
    needs_transformers = True
    compliant = False

    def setup(self, hf_tokenizer: Any, eos: int) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(
            hf_tokenizer, vocab_size=len(hf_tokenizer), stop_token_ids=[eos]
        )
        # One thread (as in MaskBench) and no compile cache (equal schemas compile again).
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        self.words = self.bitmask.numpy()[0]

    def compile(self, schema: Any) -> Any:
        return self.compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=True, strict_mode=not self.compliant
        )

    def walker(self, handle: Any) -> Walker:
        matcher = self.xgr.GrammarMatcher(handle)
        bitmask, words = self.bitmask, self.words
        return Walker(
            fill=lambda: matcher.fill_next_token_bitmask(bitmask),
            allowed=lambda _, token: _bit(words, token),
            advance=matcher.accept_token,
            finished=matcher.is_terminated,
        )


class XgrammarCompliantEngine(XgrammarEngine):
    name = "xgrammar-compliant"
    compliant = True  # MaskBench's "compliant" setting: strict_mode=False, any whitespace


class LlguidanceEngine:
    name = "llguidance"

    def setup(self, tokenizer: Any, eos: int) -> None:
        import llguidance
        import numpy as np

        self.llg = llguidance
        # What llguidance.hf.from_tokenizer does with a transformers tokenizer's backend.
        self.tokenizer = llguidance.LLTokenizer(tokenizer.to_str(), eos_token=eos)
        self.words = np.zeros((self.tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self.pointer = self.words.ctypes.data
        self.nbytes = self.words.nbytes

    def compile(self, schema: Any) -> Any:
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise CompileFailure("unsupported", matcher.get_error())
        return matcher

    def walker(self, handle: Any) -> Walker:
        matcher = handle.deep_copy()
        compute = matcher.unsafe_compute_mask_ptr  # what llguidance.numpy's helper calls
        pointer, nbytes, words = self.pointer, self.nbytes, self.words
        return Walker(
            fill=lambda: compute(pointer, nbytes),
            allowed=lambda _, token: _bit(words, token),
            advance=matcher.consume_token,
            finished=lambda: matcher.is_accepting() or matcher.is_stopped(),
        )


_GPT2_BYTES: dict[str, int] = {}


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-unicode table, inverted (byte-level BPE token strings -> bytes)."""
    if not _GPT2_BYTES:
        printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
        codes = list(printable)
        extra = 0
        for byte in range(256):
            if byte not in printable:
                printable.append(byte)
                codes.append(256 + extra)
                extra += 1
        _GPT2_BYTES.update({chr(c): b for b, c in zip(printable, codes, strict=True)})
    return _GPT2_BYTES


class OutlinesEngine:
    name = "outlines"

    def setup(self, tokenizer: Any, eos: int) -> None:
        """outlines-core's own ``Vocabulary.from_pretrained`` needs the Hub; this builds
        the same map (token bytes -> ids, specials left out) from the tokenizer."""
        import numpy as np
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        self.oc = outlines_core
        self.build_regex = build_regex_from_schema
        decoder = _byte_decoder()
        added_tokens = tokenizer.get_added_tokens_decoder()
        special = {int(i) for i, t in added_tokens.items() if t.special}
        added = {int(i): t.content for i, t in added_tokens.items() if not t.special}
        tokens: dict[bytes, list[int]] = defaultdict(list)
        for text, token in tokenizer.get_vocab(with_added_tokens=True).items():
            if token in special or token == eos:
                continue
            if token in added:
                data = added[token].encode("utf-8")
            else:
                try:
                    data = bytes(decoder[ch] for ch in text)
                except KeyError:
                    continue
            tokens[data].append(token)
        self.vocabulary = outlines_core.Vocabulary(eos, dict(tokens))
        self.eos = eos
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.words = np.zeros((size + 31) // 32, dtype=np.int32)
        self.pointer = self.words.ctypes.data

    def compile(self, schema: Any) -> Any:
        regex = self.build_regex(json.dumps(schema))
        return self.oc.Index(regex, self.vocabulary)

    def walker(self, handle: Any) -> Walker:
        guide = self.oc.Guide(handle)
        pointer, size, words, eos = self.pointer, self.words.size, self.words, self.eos

        def advance(token: int) -> bool:
            if token == eos:  # outlines has no transition on EOS: it ends a final state
                return bool(guide.is_finished())
            try:
                guide.advance(token, return_tokens=False)
            except ValueError:
                return False
            return True

        return Walker(
            fill=lambda: guide.write_mask_into(pointer, size, 4),
            allowed=lambda _, token: _bit(words, token),
            advance=advance,
            finished=guide.is_finished,
        )


ENGINE_CLASSES = {
    "jsonmode": JsonmodeEngine,
    "xgrammar": XgrammarEngine,
    "xgrammar-compliant": XgrammarCompliantEngine,
    "llguidance": LlguidanceEngine,
    "outlines": OutlinesEngine,
}


def _walk(walker: Walker, ids: list[int], eos: int, cap_s: float) -> dict[str, Any]:
    """Walk ``ids`` then EOS; only ``walker.fill()`` is timed."""
    fill, allowed, advance = walker.fill, walker.allowed, walker.advance
    times: list[int] = []
    sequence = [*ids, eos]
    last = len(sequence) - 1
    started = time.perf_counter()
    for position, token in enumerate(sequence):
        t0 = now_ns()
        result = fill()
        times.append(now_ns() - t0)
        if not allowed(result, token):
            flags = walker.on_reject(result, token)
            return {"outcome": "rejected", "position": position, "times": times, "flags": flags}
        if not advance(token):
            flags = {"mask_allows_but_advance_rejects": True}
            return {"outcome": "rejected", "position": position, "times": times, "flags": flags}
        if position < last and time.perf_counter() - started > cap_s:
            return {"outcome": "capped", "position": position, "times": times, "flags": {}}
    flags = {} if walker.finished() else {"not_finished_after_eos": True}
    return {"outcome": "accepted", "position": last, "times": times, "flags": flags}
