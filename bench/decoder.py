"""Constrained-decoding engines side by side: jsonmode, xgrammar, llguidance, outlines-core.

    python bench/decoder.py                   # 300 MaskBench schemas (15-25 min on 2 cores)
    python bench/decoder.py --quick           # 40 schemas (2-4 min)
    python bench/decoder.py --schemas 500 --seed 7 --json out.json

Every engine gets the same stratified MaskBench sample and the same Qwen2.5 tokenizer,
in one run. Each schema is compiled; each of its test instances is serialised compactly
(``json.dumps(x, separators=(",", ":"))``) with its object members in schema order (the
order every engine here writes declared properties in; ``tests/support/schema_order.py``),
tokenized with ``tokenizers`` (no special tokens) and walked token by token: at every
step the engine computes its mask (the timed call), the next token must be in it and
must advance the engine, and after the last token the end-of-sequence id
(``<|im_end|>``) must be allowed and accepted. A valid instance that MaskBench lists in
another order is also walked as given, untimed, for the "as given" column.

Each engine runs in its own worker process (a ``spawn``ed child) so that a compile that
hangs in native code can be killed (``--compile-timeout``), a crash cannot stop the run,
and memory is that engine's alone (RSS high-water mark minus the RSS after imports and
the tokenizer load; Linux ``/proc/self/status``). Peers are optional: an engine whose
package is missing is reported as such. Plain CPU: no GPU is used or needed.

Optional bench dependencies (see bench/README.md):
``pip install llguidance==1.9.1 outlines-core==0.2.14 apache-tvm-ffi``
and ``pip install --no-deps xgrammar==0.2.8`` (its hard dependency on ``triton`` and
``torch`` would otherwise be resolved; torch must stay the pinned CPU build).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing
import os
import platform
import random
import re
import statistics
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.schema_order import SchemaOrder  # noqa: E402  (shared with the MaskBench gate)

DATA = ROOT.parent / "shared" / "data"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
TOKENIZER_DIR = DATA / "tokenizers" / "qwen2.5"

ENGINES = ("jsonmode", "xgrammar", "llguidance", "outlines")
OPTIONAL_ENGINES = ("xgrammar-compliant",)  # only with --engines
REFERENCE = "llguidance"
PACKAGES = {
    "jsonmode": "jsonmode",
    "xgrammar": "xgrammar",
    "xgrammar-compliant": "xgrammar",
    "llguidance": "llguidance",
    "outlines": "outlines-core",
}
# Relative wall time per schema on MaskBench (for scheduling lanes only).
EXPECTED_COST = {
    "outlines": 5.0,
    "jsonmode": 4.0,
    "xgrammar-compliant": 3.0,
    "xgrammar": 0.3,
    "llguidance": 0.2,
}
STEAL_MIN = 8  # a second lane joins an engine only when this many schemas are left
MODULES = {"outlines": "outlines_core", "xgrammar-compliant": "xgrammar"}
# The untimed walk of a valid instance in the order MaskBench lists it (when not schema order).
GIVEN_PASS = 0
# Targets of issue 3, as ratios to llguidance in the same run.
TARGETS = {"compile_median": 3.0, "mask_mean": 2.0, "mask_p99": 3.0}

now_ns = time.perf_counter_ns


# -- the sample ----------------------------------------------------------------------------


@dataclass
class Test:
    index: int
    valid: bool
    data: Any
    text: str
    ids: list[int]  # ``text``: the instance with its members in schema order
    jsonschema_valid: bool | None = None  # the jsonschema package's verdict (formats on)
    given_ids: list[int] | None = None  # the instance as MaskBench lists it, when that differs


@dataclass
class Case:
    index: int
    category: str
    file: str
    schema: Any
    tests: list[Test]


def load_sample(count: int, seed: int) -> list[Case]:
    """``count`` schemas with tests, drawn per category in proportion to its size."""
    by_category: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
        records = [r for r in records if r.get("tests")]
        records.sort(key=lambda r: r["file"])
        by_category[path.name.split(".")[0]] = records
    rng = random.Random(seed)
    total = sum(len(v) for v in by_category.values())
    count = min(count, total)
    quota = {c: count * len(v) / total for c, v in by_category.items()}
    alloc = {c: min(len(by_category[c]), max(1, math.floor(q))) for c, q in quota.items()}
    # Largest remainder until the total is reached (or removed when the minimum overshoots).
    order = sorted(quota, key=lambda c: quota[c] - math.floor(quota[c]), reverse=True)
    while sum(alloc.values()) < count:
        for category in order:
            if sum(alloc.values()) < count and alloc[category] < len(by_category[category]):
                alloc[category] += 1
    while sum(alloc.values()) > count:
        biggest = max(alloc, key=lambda c: alloc[c])
        alloc[biggest] -= 1
    chosen: list[tuple[str, dict[str, Any]]] = []
    for category, records in by_category.items():
        chosen.extend((category, r) for r in rng.sample(records, alloc[category]))
    rng.shuffle(chosen)

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    cases = []
    for index, (category, record) in enumerate(chosen):
        tests = []
        order = _schema_order(record["schema"])
        for t_index, test in enumerate(record["tests"]):
            given = _compact(test["data"])
            text = given if order is None else _compact(order.order(test["data"]))
            tests.append(
                Test(
                    t_index,
                    bool(test["valid"]),
                    test["data"],
                    text,
                    encode(text),
                    given_ids=None if text == given else encode(given),
                )
            )
        cases.append(Case(index, category, record["file"], record["schema"], tests))
    _jsonschema_verdicts(cases)
    return cases


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _schema_order(schema: Any) -> SchemaOrder | None:
    """The schema-order serialiser, or ``None`` for a schema jsonschema cannot load."""
    try:
        return SchemaOrder(schema, _validator(schema))
    except Exception:
        return None


def _validator(schema: Any) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _jsonschema_verdicts(cases: list[Case]) -> None:
    for case in cases:
        try:
            validator = _validator(case.schema)
        except Exception:
            continue
        for test in case.tests:
            with contextlib.suppress(Exception):
                test.jsonschema_valid = validator.is_valid(test.data)


# -- engines (run inside the worker processes) --------------------------------------------


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
        matcher = handle.matcher()

        def on_reject(mask: Any, token: int) -> dict[str, Any]:
            flags: dict[str, Any] = {}
            if not bool(mask.any()):
                flags["empty_mask"] = True
            if matcher.advance(token):
                flags["advance_accepts_masked_token"] = True
            return flags

        return Walker(
            fill=matcher.mask,
            allowed=lambda mask, token: bool(mask[token]),
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


def _memory_kb() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        import resource

        out["VmHWM"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


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


def worker_main(
    conn: Any, name: str, eos: int, cap_s: float, mem_limit_gb: float, quiet: bool = False
) -> None:
    """One engine in its own process: set up once, then compile and walk schemas on request."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if quiet:  # native warnings (xgrammar prints one per unsupported keyword) go nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    if mem_limit_gb > 0:
        import resource

        limit = int(mem_limit_gb * 1024**3)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        engine = ENGINE_CLASSES[name]()
        # Import the engine's modules before the memory baseline (setup does the work).
        for module in {
            "jsonmode": ["jsonmode", "jsonmode.decoding.vocabulary", "numpy"],
            "xgrammar": ["xgrammar", "transformers"],
            "xgrammar-compliant": ["xgrammar", "transformers"],
            "llguidance": ["llguidance", "numpy"],
            "outlines": ["outlines_core", "outlines_core.json_schema", "numpy"],
        }[name]:
            __import__(module)
        started = time.perf_counter()
        if getattr(engine, "needs_transformers", False):
            import transformers

            transformers.logging.set_verbosity_error()
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
        else:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
        load_s = time.perf_counter() - started
        baseline = _memory_kb()
        started = time.perf_counter()
        engine.setup(tokenizer, eos)
        setup_s = time.perf_counter() - started
        after = _memory_kb()
        conn.send(
            (
                "ready",
                {
                    "setup_s": setup_s,
                    "tokenizer_load_s": load_s,
                    "rss_baseline_kb": baseline.get("VmRSS", 0),
                    "rss_after_setup_kb": after.get("VmRSS", 0),
                    "pid": os.getpid(),
                },
            )
        )
    except Exception:
        conn.send(("setup_error", traceback.format_exc(limit=6)))
        return
    while True:
        job = conn.recv()
        if job[0] == "stop":
            conn.send(("bye", _memory_kb()))
            return
        _, s_index, schema, tests, given = job
        started = now_ns()
        try:
            handle = engine.compile(schema)
        except CompileFailure as exc:
            conn.send(("compiled", s_index, exc.status, (now_ns() - started) / 1e9, str(exc), {}))
            conn.send(("done", s_index, {}, _memory_kb()))
            continue
        except Exception as exc:
            status = "crash" if name == "jsonmode" else "error"
            detail = f"{type(exc).__name__}: {exc}"
            if name == "jsonmode":
                detail += "\n" + traceback.format_exc(limit=8)
            conn.send(("compiled", s_index, status, (now_ns() - started) / 1e9, detail, {}))
            conn.send(("done", s_index, {}, _memory_kb()))
            continue
        elapsed = (now_ns() - started) / 1e9
        info = engine.compile_info(handle) if hasattr(engine, "compile_info") else {}
        conn.send(("compiled", s_index, "ok", elapsed, "", info))
        counters: dict[str, Any] = {}
        for pass_no in (1, 2):
            before = engine.counters(handle) if hasattr(engine, "counters") else None
            for t_index, valid, ids, text in tests:
                if pass_no == 2 and not valid:
                    continue
                try:
                    record = _walk(engine.walker(handle), ids, eos, cap_s)
                except Exception as exc:
                    record = {
                        "outcome": "error",
                        "position": -1,
                        "times": [],
                        "flags": {"exception": f"{type(exc).__name__}: {exc}"},
                    }
                    if name == "jsonmode":
                        record["flags"]["traceback"] = traceback.format_exc(limit=8)
                if (
                    name == "jsonmode"
                    and pass_no == 1
                    and valid
                    and record["outcome"] == "rejected"
                ):
                    try:
                        record["flags"]["accepts_text"] = engine.text_verdict(handle, text)
                        record["flags"]["accepts_text_any_order"] = engine.any_order_verdict(
                            schema, text
                        )
                    except Exception as exc:
                        record["flags"]["accepts_text_error"] = f"{type(exc).__name__}: {exc}"
                if not valid:
                    record["times"] = []  # mask time is measured on valid instances only
                conn.send(("instance", s_index, t_index, pass_no, record))
            if before is not None:
                after_counts = engine.counters(handle)
                counters[f"pass{pass_no}"] = {k: after_counts[k] - before[k] for k in before}
        for t_index, ids in given:  # valid instances as MaskBench lists them: untimed
            try:
                record = _walk(engine.walker(handle), ids, eos, cap_s)
                record = {"outcome": record["outcome"], "position": record["position"]}
            except Exception as exc:
                record = {"outcome": "error", "position": -1, "exception": repr(exc)}
            conn.send(("instance", s_index, t_index, GIVEN_PASS, record))
        del handle
        conn.send(("done", s_index, counters, _memory_kb()))


# -- the parent: one lane of engines, each in its own worker process ------------------------


@dataclass
class SchemaResult:
    status: str = "pending"  # ok | unsupported | invalid | budget | timeout | error | crash
    compile_s: float | None = None
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    walk_timeout: bool = False


@dataclass
class EngineRun:
    name: str
    available: bool = True
    unavailable_reason: str = ""
    version: str = ""
    ready: dict[str, Any] = field(default_factory=dict)  # the first worker's setup report
    workers_started: int = 0
    peak_rss_kb: int = 0
    wall_s: float = 0.0
    schemas: dict[int, SchemaResult] = field(default_factory=dict)
    # (schema, test, pass) -> walk record; pass 1, 2 (warm caches) or GIVEN_PASS
    walks: dict[tuple[int, int, int], dict[str, Any]] = field(default_factory=dict)
    pending: deque[Case] = field(default_factory=deque)
    done: int = 0
    started_at: float | None = None
    last_report: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Worker:
    def __init__(self, name: str, args: argparse.Namespace, eos: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=worker_main,
            args=(child, name, eos, args.walk_cap, args.mem_limit_gb, not args.verbose),
            daemon=True,
        )
        self.process.start()
        child.close()

    def recv(self, timeout: float) -> Any:
        """The next message; ``None`` on timeout; ``("died", exitcode)`` if the worker ended."""
        try:
            if not self.conn.poll(max(timeout, 0.0)):
                return None
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            return ("died", self.process.exitcode)

    def send(self, message: Any) -> bool:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            return False
        return True

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()


def probe(name: str) -> EngineRun:
    """An engine's run record, marked unavailable when its package is not installed."""
    run = EngineRun(name)
    try:
        if importlib.util.find_spec(MODULES.get(name, name)) is None:
            raise ImportError(MODULES.get(name, name))
        run.version = importlib.metadata.version(PACKAGES[name])
    except (ImportError, importlib.metadata.PackageNotFoundError) as exc:
        run.available = False
        run.unavailable_reason = f"not installed ({exc})"
    return run


def drive(
    run: EngineRun, total: int, args: argparse.Namespace, eos: int, log: Callable[[str], None]
) -> None:
    """Work through ``run.pending`` with one worker process until nothing is left.

    Two lanes may drive the same engine at once (each with its own worker), so that
    the slowest engine's schemas are shared out once the other engines are done.
    """
    name = run.name
    worker: Worker | None = None
    with run.lock:
        if run.started_at is None:
            run.started_at = time.perf_counter()

    def start() -> Worker | None:
        candidate = Worker(name, args, eos)
        message = candidate.recv(args.setup_timeout)
        if message is None or message[0] != "ready":
            candidate.kill()
            detail = "timeout" if message is None else str(message[1])[-2000:]
            log(f"[{name}] setup failed: {detail}")
            with run.lock:
                run.unavailable_reason = f"setup failed: {detail}"
                if not run.ready:
                    run.available = False
            return None
        with run.lock:
            run.workers_started += 1
            if not run.ready:
                run.ready = message[1]
        return candidate

    def note_memory(memory: dict[str, int]) -> None:
        with run.lock:
            run.peak_rss_kb = max(run.peak_rss_kb, memory.get("VmHWM", 0))

    while True:
        with run.lock:
            if not run.pending or not run.available:
                break
            case = run.pending.popleft()
        result = SchemaResult()
        run.schemas[case.index] = result
        if worker is None:
            worker = start()
            if worker is None:
                result.status = "error"
                result.message = run.unavailable_reason
                if not run.available:
                    break
                continue
        payload = [(t.index, t.valid, t.ids, t.text) for t in case.tests]
        given = [(t.index, t.given_ids) for t in case.tests if t.valid and t.given_ids]
        if not worker.send(("job", case.index, case.schema, payload, given)):
            worker.kill()
            worker = None
            result.status = "error"
            result.message = "worker pipe closed"
            continue
        message = worker.recv(args.compile_timeout)
        if message is None or message[0] == "died":
            worker.kill()
            worker = None
            if message is None:
                result.status = "timeout"
                result.message = f"no compile within {args.compile_timeout:g} s (killed)"
            else:
                result.status = "crash" if name == "jsonmode" else "error"
                result.message = f"worker died while compiling (exit code {message[1]})"
        else:
            _, _, status, seconds, text, info = message
            result.status, result.compile_s = status, seconds
            result.message, result.info = text, info
            deadline = time.perf_counter() + args.schema_timeout
            while True:
                message = worker.recv(deadline - time.perf_counter())
                if message is None or message[0] == "died":
                    worker.kill()
                    worker = None
                    result.walk_timeout = message is None
                    if message is not None:
                        result.message += f" | worker died while walking (exit {message[1]})"
                    for test in case.tests:
                        for pass_no in (1, 2):
                            key = (case.index, test.index, pass_no)
                            if key not in run.walks and (pass_no == 1 or test.valid):
                                outcome = "capped" if message is None else "error"
                                run.walks[key] = {"outcome": outcome, "times": [], "flags": {}}
                    break
                if message[0] == "instance":
                    _, s_index, t_index, pass_no, record = message
                    run.walks[(s_index, t_index, pass_no)] = record
                elif message[0] == "done":
                    result.counters = message[2]
                    note_memory(message[3])
                    break
        with run.lock:
            run.done += 1
            done = run.done
            report = time.perf_counter() - run.last_report > 30 or done == total
            if report:
                run.last_report = time.perf_counter()
        if report:
            elapsed = time.perf_counter() - run.started_at
            log(f"[{name}] {done}/{total} schemas, {elapsed:.0f} s")
    if worker is not None:
        worker.send(("stop",))
        message = worker.recv(30)
        if message is not None and message[0] == "bye":
            note_memory(message[1])
        worker.kill()
    with run.lock:
        run.wall_s = time.perf_counter() - run.started_at


# -- statistics ----------------------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mask_stats(times_ns: Sequence[int]) -> dict[str, Any]:
    if not times_ns:
        return {"tokens": 0, "mean_us": None, "median_us": None, "p99_us": None, "max_us": None}
    us = [t / 1000 for t in times_ns]
    return {
        "tokens": len(us),
        "mean_us": statistics.fmean(us),
        "median_us": _percentile(us, 50),
        "p99_us": _percentile(us, 99),
        "max_us": max(us),
    }


def _pointer_map(schema: Any) -> dict[int, str]:
    """id(subschema) -> JSON pointer (unescaped segments), for locating jsonschema errors."""
    out: dict[int, str] = {}

    def visit(node: Any, path: str) -> None:
        if isinstance(node, dict | list) and id(node) not in out:
            out[id(node)] = path
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                visit(value, f"{path}/{key}")

    visit(schema, "")
    return out


def _unescape(pointer: str) -> str:
    return pointer.replace("~1", "/").replace("~0", "~")


_KINDS = ("unenforced", "unenforced_keyword_elsewhere", "bug")
_BRANCHES = re.compile(r"/(?:anyOf|oneOf|allOf)/\d+(?=/|$)")


def classify_invalid_accepted(case: Case, test: Test, unenforced: Sequence[str]) -> dict[str, Any]:
    """Why jsonmode accepted an invalid instance: label noise, unenforced keywords, or a bug.

    Every violation jsonschema reports must lie under a location in ``unenforced``
    (also after dropping ``anyOf/oneOf/allOf`` branch steps, which jsonmode merges);
    for a failed ``anyOf``/``oneOf``, it is enough that one branch's violations do.
    ``unenforced_keyword_elsewhere``: the keyword is unenforced, but at another location.
    """
    if test.jsonschema_valid:
        return {"kind": "label_noise", "errors": []}
    try:
        validator = _validator(case.schema)
        errors = list(validator.iter_errors(test.data))
    except Exception as exc:
        return {"kind": "unknown", "errors": [f"jsonschema failed: {exc!r}"]}
    if not errors:
        return {"kind": "label_noise", "errors": []}
    pointers = _pointer_map(case.schema)
    skipped = [_unescape(u) for u in unenforced]
    merged = {_BRANCHES.sub("", u) for u in skipped}
    skipped_keywords = {u.rsplit("/", 1)[-1] for u in skipped}
    described: list[str] = []

    def rank(error: Any) -> int:
        location = f"{pointers.get(id(error.schema), '?')}/{error.validator}"
        if len(described) < 6:
            described.append(f"{error.validator} at {location}: {error.message[:100]}")
        if (
            location in skipped
            or any(u.startswith(location + "/") for u in skipped)
            or _BRANCHES.sub("", location) in merged
        ):
            return 0
        if error.validator in ("anyOf", "oneOf") and error.context:
            branches: dict[Any, list[Any]] = defaultdict(list)
            for sub in error.context:
                branches[sub.relative_schema_path[0]].append(sub)
            return min(max(rank(sub) for sub in subs) for subs in branches.values())
        return 1 if error.validator in skipped_keywords else 2

    kind = _KINDS[max(rank(error) for error in errors)]
    return {"kind": kind, "errors": described}


def summarize(run: EngineRun, cases: list[Case]) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": run.name, "version": run.version}
    if not run.available:
        out["unavailable"] = run.unavailable_reason
        return out
    compiled = [c for c in cases if run.schemas.get(c.index, SchemaResult()).status == "ok"]
    statuses = Counter(run.schemas[c.index].status for c in cases if c.index in run.schemas)
    valid_all = sum(t.valid for c in cases for t in c.tests)
    outcomes: Counter[tuple[bool, str]] = Counter()
    as_given: Counter[str] = Counter()  # valid instances walked as MaskBench lists them
    mask_times: list[int] = []
    warm_times: list[int] = []
    first_mask: list[float] = []
    for case in compiled:
        first = None
        for test in case.tests:
            record = run.walks.get((case.index, test.index, 1), {"outcome": "missing"})
            outcomes[(test.valid, record["outcome"])] += 1
            if test.valid:
                if test.given_ids:
                    given = run.walks.get((case.index, test.index, GIVEN_PASS), {})
                    as_given["reordered"] += 1
                    as_given[given.get("outcome", "missing")] += 1
                else:
                    as_given[record["outcome"]] += 1
                mask_times.extend(record.get("times", []))
                if first is None and record.get("times"):
                    first = record["times"][0]
                warm = run.walks.get((case.index, test.index, 2))
                if warm is not None:
                    warm_times.extend(warm.get("times", []))
        compile_s = run.schemas[case.index].compile_s or 0.0
        if first is not None:
            first_mask.append(compile_s + first / 1e9)
    valid_compiled = sum(t.valid for c in compiled for t in c.tests)
    invalid_compiled = sum(not t.valid for c in compiled for t in c.tests)
    compile_ms = [run.schemas[c.index].compile_s * 1000 for c in compiled]  # type: ignore[operator]
    out.update(
        {
            "schemas": len(cases),
            "compiled": len(compiled),
            "compiled_pct": 100 * len(compiled) / max(len(cases), 1),
            "statuses": dict(statuses),
            "valid_instances_all": valid_all,
            "valid_instances_compiled": valid_compiled,
            "valid_accepted": outcomes[(True, "accepted")],
            # Capped walks (cut at --walk-cap seconds) are neither accepted nor rejected.
            "valid_accepted_pct": 100
            * outcomes[(True, "accepted")]
            / max(valid_compiled - outcomes[(True, "capped")], 1),
            "valid_accepted_pct_of_all": 100 * outcomes[(True, "accepted")] / max(valid_all, 1),
            # The same instances as MaskBench lists them (members not always in schema order).
            "valid_reordered": as_given["reordered"],
            "valid_accepted_as_given": as_given["accepted"],
            "valid_accepted_as_given_pct": 100
            * as_given["accepted"]
            / max(valid_compiled - as_given["capped"], 1),
            "valid_capped": outcomes[(True, "capped")],
            "valid_errors": outcomes[(True, "error")],
            "invalid_instances_compiled": invalid_compiled,
            "invalid_accepted": outcomes[(False, "accepted")],
            "invalid_accepted_label_noise": sum(
                1
                for c in compiled
                for t in c.tests
                if not t.valid
                and t.jsonschema_valid
                and run.walks.get((c.index, t.index, 1), {}).get("outcome") == "accepted"
            ),
            "invalid_capped": outcomes[(False, "capped")],
            "invalid_errors": outcomes[(False, "error")],
            "compile_ms_median": _percentile(compile_ms, 50),
            "compile_ms_p90": _percentile(compile_ms, 90),
            "compile_ms_max": max(compile_ms) if compile_ms else None,
            "compile_plus_first_mask_ms_median": _percentile([x * 1000 for x in first_mask], 50),
            "mask": _mask_stats(mask_times),
            "mask_second_pass": _mask_stats(warm_times),
            "setup_s": run.ready.get("setup_s"),
            "tokenizer_load_s": run.ready.get("tokenizer_load_s"),
            "rss_setup_mb": (
                run.ready.get("rss_after_setup_kb", 0) - run.ready.get("rss_baseline_kb", 0)
            )
            / 1024,
            "rss_peak_mb": max(run.peak_rss_kb - run.ready.get("rss_baseline_kb", 0), 0) / 1024,
            "workers_started": run.workers_started,
            "walk_timeouts": sum(1 for r in run.schemas.values() if r.walk_timeout),
            "wall_s": run.wall_s,
        }
    )
    if run.name == "jsonmode":
        totals: dict[str, Counter[str]] = {"pass1": Counter(), "pass2": Counter()}
        for result in run.schemas.values():
            for pass_name, counts in result.counters.items():
                totals[pass_name].update(counts)
        for pass_name, counts in totals.items():
            seen = counts["hits"] + counts["misses"]
            out[f"cache_hit_rate_{pass_name}"] = counts["hits"] / seen if seen else None
    return out


def jsonmode_findings(
    runs: dict[str, EngineRun], cases: list[Case], tokenizer: Any
) -> dict[str, Any]:
    """Everything jsonmode got wrong or crashed on, with the first examples."""
    run = runs["jsonmode"]
    peers = [r for name, r in runs.items() if name != "jsonmode" and r.available]
    findings: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_index = {c.index: c for c in cases}
    for index, result in sorted(run.schemas.items()):
        case = by_index[index]
        if result.status == "crash":
            findings["compile_crash"].append({"file": case.file, "error": result.message})
        if result.walk_timeout:
            findings["schema_walk_timeout"].append({"file": case.file})
        if result.status in ("unsupported", "budget", "invalid", "timeout"):
            findings[f"not_compiled_{result.status}"].append(
                {"file": case.file, "error": result.message[:300]}
            )
        if result.status != "ok":
            continue
        unenforced = result.info.get("unenforced", [])
        for test in case.tests:
            record = run.walks.get((index, test.index, 1))
            if record is None:
                continue
            flags = record.get("flags", {})
            where = {"file": case.file, "test": test.index, "valid": test.valid}
            if record["outcome"] == "error":
                findings["walk_exception"].append({**where, **flags})
            elif record["outcome"] == "capped":
                findings["walk_capped"].append(where)
            for flag in (
                "empty_mask",
                "advance_accepts_masked_token",
                "mask_allows_but_advance_rejects",
                "not_finished_after_eos",
            ):
                if flags.get(flag):
                    findings[flag].append({**where, "position": record.get("position")})
            if test.valid and record["outcome"] == "rejected":
                position = record["position"]
                ids = test.ids
                token = ids[position] if position < len(ids) else None
                accepted_by = [
                    peer.name
                    for peer in peers
                    if peer.walks.get((index, test.index, 1), {}).get("outcome") == "accepted"
                ]
                if flags.get("accepts_text_any_order"):
                    # Accepted in another member order: the decoder's schema order and
                    # tests/support/schema_order.py's disagree for this instance.
                    key = "valid_rejected_accepted_in_another_order"
                elif accepted_by:
                    key = "valid_rejected_peer_accepts"
                else:
                    key = "valid_rejected_no_peer_accepts"
                findings[key].append(
                    {
                        "accepted_by": accepted_by,
                        **where,
                        "position": position,
                        "tokens": len(ids),
                        "prefix": tokenizer.decode(ids[:position])[-60:],
                        "token": "<EOS>" if token is None else tokenizer.decode([token]),
                        "accepts_text": flags.get("accepts_text"),
                        "accepts_text_any_order": flags.get(
                            "accepts_text_any_order", flags.get("accepts_text_error")
                        ),
                        "jsonschema_valid": test.jsonschema_valid,
                        "instance": test.text[:300],
                    }
                )
            if not test.valid and record["outcome"] == "accepted":
                verdict = classify_invalid_accepted(case, test, unenforced)
                entry = {**where, "instance": test.text[:300], "errors": verdict["errors"][:4]}
                findings[f"invalid_accepted_{verdict['kind']}"].append(entry)
    return dict(findings)


# -- output --------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{suffix}"
    return f"{value}{suffix}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        cells = [
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return value / reference


def render(summaries: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    ref = summaries.get(REFERENCE, {})
    present = [s for s in summaries.values() if "unavailable" not in s]
    out = []
    out.append(
        f"MaskBench sample: {meta['schemas']} schemas (seed {meta['seed']}; "
        + ", ".join(f"{k} {v}" for k, v in meta["categories"].items())
        + f"), {meta['valid_instances']} valid / {meta['invalid_instances']} invalid instances; "
        f"tokenizer Qwen2.5 ({meta['vocab']} ids), EOS <|im_end|>; lanes {meta['lanes']}"
    )
    out.append("")
    out.append(
        "Correctness (instances of the schemas the engine compiled; capped walks, cut at "
        f"{meta['settings']['walk_cap']:g} s, count neither way)"
    )
    rows = []
    for s in present:
        rows.append(
            [
                f"{s['engine']} {s['version']}",
                _fmt(s["compiled_pct"], 1, "%"),
                f"{_fmt(s['valid_accepted_pct'], 1, '%')} "
                f"({s['valid_accepted']}/{s['valid_instances_compiled'] - s['valid_capped']})",
                _fmt(s["valid_accepted_pct_of_all"], 1, "%"),
                f"{_fmt(s['valid_accepted_as_given_pct'], 1, '%')} ({s['valid_reordered']})",
                f"{s['invalid_accepted']} ({s['invalid_accepted_label_noise']})",
                str(s["valid_capped"] + s["invalid_capped"]),
                str(s["valid_errors"] + s["invalid_errors"]),
                " ".join(f"{k}:{v}" for k, v in sorted(s["statuses"].items()) if k != "ok") or "-",
            ]
        )
    out.append(
        _table(
            [
                "engine",
                "compiled",
                "valid accepted",
                "of all valid",
                "as given (reordered)",
                "invalid acc. (noise)",
                "capped",
                "errors",
                "not compiled",
            ],
            rows,
        )
    )
    out.append(
        "  valid accepted: instances with their members in schema order (the order every "
        "engine here writes declared properties in). as given: the same instances in the "
        "order MaskBench lists them; in brackets how many of the compiled schemas' valid "
        "instances that order differs for (walked both ways; the reordered walk is timed)."
    )
    out.append(
        "  invalid acc. (noise): invalid instances accepted; in brackets those the jsonschema "
        "package itself finds valid (label noise in MaskBench)."
    )
    out.append("")
    out.append(
        "Speed (mask = the mask computation call alone, per token, "
        "valid-instance walks, first pass)"
    )
    rows = []
    for s in present:
        mask = s["mask"]
        rows.append(
            [
                s["engine"],
                _fmt(s["compile_ms_median"], 2),
                _fmt(s["compile_ms_p90"], 1),
                _fmt(s["compile_plus_first_mask_ms_median"], 1),
                _fmt(mask["mean_us"], 1),
                _fmt(mask["median_us"], 1),
                _fmt(mask["p99_us"], 0),
                str(mask["tokens"]),
                _fmt(s["setup_s"], 2),
                _fmt(s["rss_setup_mb"], 0),
                _fmt(s["rss_peak_mb"], 0),
            ]
        )
    out.append(
        _table(
            [
                "engine",
                "compile med ms",
                "p90 ms",
                "+1st mask ms",
                "mask mean µs",
                "median µs",
                "p99 µs",
                "tokens",
                "setup s",
                "setup MB",
                "peak MB",
            ],
            rows,
        )
    )
    out.append(
        "  memory: RSS (VmRSS/VmHWM of the engine's own worker process) above the RSS after "
        "imports and the tokenizer load; setup = the engine's vocabulary/tokenizer "
        "preprocessing from a loaded tokenizers.Tokenizer (a transformers tokenizer for "
        "xgrammar); +1st mask = compile plus the first mask (llguidance and jsonmode build "
        "lazily, xgrammar and outlines at compile)."
    )
    out.append("")
    if ref and "unavailable" not in ref:
        out.append(
            f"Ratios to {REFERENCE} "
            "(targets for jsonmode: compile median ≤ 3×, mask mean ≤ 2×, p99 ≤ 3×)"
        )
        rows = []
        for s in present:
            rows.append(
                [
                    s["engine"],
                    _fmt(_ratio(s["compile_ms_median"], ref["compile_ms_median"]), 2, "×"),
                    _fmt(_ratio(s["mask"]["mean_us"], ref["mask"]["mean_us"]), 2, "×"),
                    _fmt(_ratio(s["mask"]["p99_us"], ref["mask"]["p99_us"]), 2, "×"),
                    _fmt(
                        _ratio(
                            s["mask_second_pass"]["mean_us"], ref["mask_second_pass"]["mean_us"]
                        ),
                        2,
                        "×",
                    ),
                ]
            )
        out.append(
            _table(
                ["engine", "compile median", "mask mean", "mask p99", "mask mean, 2nd pass"], rows
            )
        )
        out.append("")
    out.append(
        "Second pass over the same valid instances (caches warm; jsonmode keeps masks per state)"
    )
    rows = []
    for s in present:
        warm = s["mask_second_pass"]
        rows.append(
            [
                s["engine"],
                _fmt(warm["mean_us"], 1),
                _fmt(warm["median_us"], 1),
                _fmt(warm["p99_us"], 0),
                str(warm["tokens"]),
            ]
        )
    out.append(_table(["engine", "mask mean µs", "median µs", "p99 µs", "tokens"], rows))
    jm = summaries.get("jsonmode", {})
    if jm and "unavailable" not in jm:
        hit1, hit2 = jm.get("cache_hit_rate_pass1"), jm.get("cache_hit_rate_pass2")
        out.append(
            f"  jsonmode mask-cache hit rate: first pass {_fmt(hit1 and 100 * hit1, 1, '%')}, "
            f"second pass {_fmt(hit2 and 100 * hit2, 1, '%')} (MaskEngine.hits / (hits + misses))"
        )
    common = meta.get("common")
    if common:
        out.append("")
        out.append(
            f"Same tokens: the {common['instances']} valid instances "
            f"({common['tokens']} mask calls) "
            "that every engine above accepted, first pass"
        )
        rows = [
            [
                name,
                _fmt(stats["mean_us"], 1),
                _fmt(stats["median_us"], 1),
                _fmt(stats["p99_us"], 0),
                _fmt(
                    _ratio(stats["mean_us"], common["stats"].get(REFERENCE, {}).get("mean_us")),
                    2,
                    "×",
                ),
                _fmt(
                    _ratio(stats["p99_us"], common["stats"].get(REFERENCE, {}).get("p99_us")),
                    2,
                    "×",
                ),
            ]
            for name, stats in common["stats"].items()
        ]
        out.append(
            _table(
                ["engine", "mask mean µs", "median µs", "p99 µs", "mean / llg", "p99 / llg"], rows
            )
        )
    for s in summaries.values():
        if "unavailable" in s:
            out.append(f"{s['engine']}: {s['unavailable']}")
    return "\n".join(out)


def render_findings(findings: dict[str, list[dict[str, Any]]], examples: int = 5) -> str:
    if not findings:
        return "jsonmode findings: none"
    order = [
        "compile_crash",
        "walk_exception",
        "valid_rejected_peer_accepts",
        "valid_rejected_no_peer_accepts",
        "valid_rejected_accepted_in_another_order",
        "invalid_accepted_bug",
        "invalid_accepted_unenforced_keyword_elsewhere",
        "mask_allows_but_advance_rejects",
        "advance_accepts_masked_token",
        "empty_mask",
        "not_finished_after_eos",
        "walk_capped",
        "schema_walk_timeout",
        "invalid_accepted_unenforced",
        "invalid_accepted_label_noise",
        "invalid_accepted_unknown",
        "not_compiled_timeout",
        "not_compiled_budget",
        "not_compiled_invalid",
        "not_compiled_unsupported",
    ]
    lines = ["jsonmode findings (count, first examples):"]
    for key in [*order, *sorted(set(findings) - set(order))]:
        items = findings.get(key)
        if not items:
            continue
        lines.append(f"- {key}: {len(items)}")
        if key.startswith("not_compiled"):
            reasons = Counter(_reason(item["error"]) for item in items)
            for reason, count in reasons.most_common(8):
                lines.append(f"    {count:4d} × {reason}")
            continue
        if key in ("invalid_accepted_label_noise", "invalid_accepted_unenforced"):
            continue
        for item in items[:examples]:
            shown = {k: v for k, v in item.items() if k != "traceback"}
            lines.append("    " + json.dumps(shown, ensure_ascii=False)[:600])
    return "\n".join(lines)


def _source_digest(folder: Path) -> str:
    """sha256 of jsonmode's decoder sources (the engine changes often: which one ran)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _reason(message: str) -> str:
    text = message.split("\n")[0]
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:110]


# -- main ----------------------------------------------------------------------------------


def common_subset(runs: dict[str, EngineRun], cases: list[Case]) -> dict[str, Any] | None:
    present = [runs[n] for n in (*ENGINES, *OPTIONAL_ENGINES) if n in runs and runs[n].available]
    if len(present) < 2:
        return None
    chosen = [
        (c.index, t.index)
        for c in cases
        for t in c.tests
        if t.valid
        and all(
            r.walks.get((c.index, t.index, 1), {}).get("outcome") == "accepted" for r in present
        )
    ]
    stats = {}
    tokens = 0
    for run in present:
        times = [x for key in chosen for x in run.walks[(*key, 1)]["times"]]
        stats[run.name] = _mask_stats(times)
        tokens = len(times)
    return {"instances": len(chosen), "tokens": tokens, "stats": stats}


def per_schema(run: EngineRun, cases: list[Case]) -> dict[str, Any]:
    """Every schema's and instance's outcome for one engine (for ``--json``)."""
    out: dict[str, Any] = {}
    for case in cases:
        result = run.schemas.get(case.index, SchemaResult())
        tests: dict[str, Any] = {}
        for test in case.tests:
            entry: dict[str, Any] = {
                "valid": test.valid,
                "jsonschema_valid": test.jsonschema_valid,
                "tokens": len(test.ids),
            }
            for pass_no in (1, 2):
                record = run.walks.get((case.index, test.index, pass_no))
                if record is not None:
                    entry[f"pass{pass_no}"] = {k: v for k, v in record.items() if k != "times"}
                    entry[f"pass{pass_no}"]["mask_ns"] = record.get("times", [])
            tests[str(test.index)] = entry
        out[str(case.index)] = {
            "file": case.file,
            "category": case.category,
            **vars(result),
            "tests": tests,
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--schemas", type=int, default=None, help="sample size (default 300; 40 with --quick)"
    )
    parser.add_argument("--seed", type=int, default=20250301, help="sampling seed")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument("--quick", action="store_true", help="40 schemas, for a smoke run")
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated, from {','.join(ENGINES + OPTIONAL_ENGINES)}",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        choices=(1, 2, 3, 4),
        help="engines running at once (default 2: one busy core each, slowest engines "
        "first; 1: each engine alone)",
    )
    parser.add_argument("--compile-timeout", type=float, default=10.0, help="seconds per compile")
    parser.add_argument(
        "--walk-cap", type=float, default=10.0, help="seconds per instance walk before it is capped"
    )
    parser.add_argument(
        "--schema-timeout",
        type=float,
        default=60.0,
        help="seconds for all walks of one schema before its worker is killed",
    )
    parser.add_argument(
        "--setup-timeout", type=float, default=300.0, help="seconds for worker setup"
    )
    parser.add_argument(
        "--mem-limit-gb", type=float, default=8.0, help="address-space limit per worker (0: none)"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="let the engines' own warnings through"
    )
    args = parser.parse_args(argv)
    if args.schemas is None:
        args.schemas = 40 if args.quick else 300
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - set(ENGINES + OPTIONAL_ENGINES)
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")

    lock = threading.Lock()
    begun = time.perf_counter()

    def log(text: str) -> None:
        with lock:
            print(f"[{time.perf_counter() - begun:6.0f}s] {text}", file=sys.stderr, flush=True)

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    eos = tokenizer.token_to_id("<|im_end|>")
    cases = load_sample(args.schemas, args.seed)
    n_valid = sum(t.valid for c in cases for t in c.tests)
    n_invalid = sum(not t.valid for c in cases for t in c.tests)
    log(f"sample: {len(cases)} schemas, {n_valid} valid + {n_invalid} invalid instances")

    # Engines are taken from this queue by ``--jobs`` lanes, slowest first.
    # ``--jobs`` lanes take engines slowest first; a lane with nothing new to start
    # helps with the engine that has the most work left (its own worker process).
    order = sorted(engines, key=lambda e: EXPECTED_COST.get(e, 0), reverse=True)
    runs: dict[str, EngineRun] = {}
    for name in order:
        runs[name] = probe(name)
        runs[name].pending.extend(cases)
        if not runs[name].available:
            log(f"[{name}] {runs[name].unavailable_reason}: skipped")
    started: set[str] = set()
    schedule: list[str] = []

    def remaining(name: str) -> float:
        return len(runs[name].pending) * EXPECTED_COST.get(name, 1.0)

    def lane_main(lane: int) -> None:
        while True:
            with lock:
                live = [n for n in order if runs[n].available and runs[n].pending]
                fresh = [n for n in live if n not in started]
                helping = [n for n in live if len(runs[n].pending) >= STEAL_MIN]
                if fresh:
                    name = fresh[0]
                elif helping:
                    name = max(helping, key=remaining)
                else:
                    return
                started.add(name)
            log(f"[{name}] {'starting' if name in fresh else 'helping'} (lane {lane})")
            begin = time.perf_counter() - begun
            drive(runs[name], len(cases), args, eos, log)
            end = time.perf_counter() - begun
            with lock:
                schedule.append(f"{name} (lane {lane}, {begin:.0f}-{end:.0f} s)")

    threads = [threading.Thread(target=lane_main, args=(n + 1,)) for n in range(args.jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in order:
        if runs[name].available:
            log(f"[{name}] finished in {runs[name].wall_s:.0f} s")

    summaries = {name: summarize(runs[name], cases) for name in engines}
    meta = {
        "schemas": len(cases),
        "seed": args.seed,
        "categories": dict(Counter(c.category for c in cases)),
        "valid_instances": n_valid,
        "invalid_instances": n_invalid,
        "vocab": tokenizer.get_vocab_size(with_added_tokens=True),
        "lanes": f"{args.jobs}: " + ", ".join(schedule),
        "python": platform.python_version(),
        "jsonmode_decoding_sha256": _source_digest(ROOT / "jsonmode" / "decoding"),
        "packages": {
            name: _version(name)
            for name in ("numpy", "tokenizers", "transformers", "torch", "jsonschema")
        },
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "settings": {
            k: getattr(args, k)
            for k in ("compile_timeout", "walk_cap", "schema_timeout", "mem_limit_gb", "jobs")
        },
        "wall_s": time.perf_counter() - begun,
        "common": common_subset(runs, cases),
    }
    findings = (
        jsonmode_findings(runs, cases, tokenizer)
        if "jsonmode" in runs and runs["jsonmode"].available
        else {}
    )
    print(render(summaries, meta))
    print()
    print(render_findings(findings))
    print(
        f"\ntotal wall time {meta['wall_s']:.0f} s; "
        f"load average at end {meta['load_average_at_end']}"
    )
    if args.json is not None:
        payload = {
            "meta": meta,
            "summaries": summaries,
            "jsonmode_findings": findings,
            "schemas": {
                name: per_schema(run, cases) for name, run in runs.items() if run.available
            },
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
