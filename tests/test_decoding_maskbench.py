"""Gates: MaskBench through the token-level matcher (issue 3, "Correctness gates").

A fixed, deterministic sample of MaskBench schemas (every category; ranked by a hash
of the file name, so it does not move when data is added) is compiled once per
tokenizer (compile_schema(schema, vocabulary)) and checked four ways:

1. the valid instances of the first WALK_SAMPLE_SIZE sampled schemas, serialized
   compactly (``ensure_ascii`` off and on; members in schema order where the given
   order is refused), are tokenized with the Qwen2.5, Llama-3 and Mistral tokenizers
   (no special tokens) and walked through ``mask()``/``advance()``: every token
   allowed, EOS allowed at the end (and no other special token);
2. no invalid instance of any sampled schema is accepted unless each violated keyword
   (found with jsonschema) is listed in ``compiled.unenforced``;
3. random-logits fuzz (Qwen2.5): sampling through the mask never meets an empty mask,
   and every finished document parses and validates (violations only of unenforced
   keywords);
4. differential (Qwen2.5): fast masks equal masks computed with the slow reference
   matcher, token by token, on visited states.

Outcomes are checked in (tests/baselines/maskbench.json: schema id or instance key ->
outcome). The test fails on any regression and on any change not yet recorded (record
with JSONMODE_UPDATE_BASELINE=1). Outcomes starting with ``BUG:`` are never baselined:
a crash, a valid instance rejected by a fully enforced schema, an invalid instance
accepted under a keyword decoding claims to enforce, a mask that refuses a token of
text the byte-level matcher accepts, EOS refused at the end of an accepted text.
JSONMODE_FULL_GATES=1 samples 1500 schemas, walks them all, and fuzzes and compares
more (outcomes outside the baseline are then judged by the ``BUG:`` rules only).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from support.schema_order import SchemaOrder, resolve_pointer

from jsonmode.decoding.compiled import CompiledSchema, compile_schema
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import (
    BudgetExceededError,
    InvalidSchemaError,
    JsonModeError,
    UnsupportedSchemaError,
)

# The gate runs once for the module, inside its first test: give it room on a
# loaded 2-core machine (the house default per test is 300 s).
pytestmark = pytest.mark.timeout(1200)

ROOT = pathlib.Path(__file__).resolve().parent
DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
TOKENIZERS = DATA / "tokenizers"
BASELINE = ROOT / "baselines" / "maskbench.json"

FULL = os.environ.get("JSONMODE_FULL_GATES") == "1"
UPDATE = os.environ.get("JSONMODE_UPDATE_BASELINE") == "1"

# How many schemas (with test instances) the gates sample, shared among categories by
# the weights below (a category never gives more than it has). Every sampled schema
# is compiled and its invalid instances checked; the valid instances of the first
# WALK_SAMPLE_SIZE (same weights) are walked token by token with the three
# tokenizers. That walk is what costs: each new matcher state costs a mask (~20 ms
# for a 150k vocabulary today), ~2.5 s per schema for the three tokenizers.
SAMPLE_SIZE = 1500 if FULL else 150
WALK_SAMPLE_SIZE = None if FULL else 40  # None: all of the sample
CATEGORY_WEIGHTS = {
    "Github_trivial": 0.10,
    "Github_easy": 0.20,
    "Github_medium": 0.20,
    "Glaiveai2K": 0.15,
    "Kubernetes": 0.10,
    "Snowplow": 0.10,
    "Handwritten": 0.05,
    "Synthesized": 0.10,
}
# Schemas larger than this (JSON text) are left out of the default sample: the few
# huge Kubernetes/Handwritten schemas each take seconds to compile three times over.
MAX_SCHEMA_CHARS = None if FULL else 20_000
TOKENIZER_NAMES = ("qwen2.5", "llama-3", "mistral-7b-v0.1")
# The compile-time budget is wall-clock: raised here so that an outcome depends on the
# schema alone, never on how loaded the machine is.
COMPILE_OPTIONS = {"max_compile_seconds": 300.0}

# Random-logits fuzz (Qwen2.5): fully enforced schemas first. Sampling visits new
# matcher states nearly every step, each a fresh mask (~20 ms today): the default
# run is sized by that.
FUZZ_SCHEMAS = 200 if FULL else 20
FUZZ_SEEDS = 8 if FULL else 2
FUZZ_MAX_TOKENS = 300 if FULL else 100
# Logit biases (see _Logits) so that documents end.
FUZZ_OPEN_BIAS = 6.0
FUZZ_CLOSE_BIAS = 9.0
FUZZ_FAVOURED_BIAS = 12.0
# Open objects with required properties rarely end under random logits (random keys
# are extras): this share of the runs must end within FUZZ_MAX_TOKENS.
FUZZ_MIN_FINISHED = 0.35

DIFF_FULL_SCHEMAS = 5  # schemas whose sampled states get a whole-vocabulary reference
DIFF_FULL_STATES = 5
DIFF_SUBSET_SCHEMAS = 60 if FULL else 8  # the rest: a random subset + every allowed id
DIFF_SUBSET_STATES = 4
DIFF_SUBSET_SIZE = 2000

# Ratchet: schemas of the default sample that compile (with any tokenizer).
MIN_COMPILED = 147

UNSUPPORTED = (UnsupportedSchemaError, BudgetExceededError, InvalidSchemaError)
GOOD_SCHEMA_LEVEL = {"enforced": 2, "partial": 1}


# -- the sample ------------------------------------------------------------------------


def _rank(row: dict[str, Any]) -> str:
    return hashlib.sha256(row["file"].encode()).hexdigest()


def load_sample() -> list[dict[str, Any]]:
    """The sampled MaskBench rows, in a fixed order.

    Each row gains ``id``, ``category`` and ``walk`` (whether its valid instances are
    walked token by token: the first WALK_SAMPLE_SIZE of the sample, by category).
    """
    files = sorted(MASKBENCH.glob("*.jsonl.gz"))
    assert files, f"MaskBench missing under {MASKBENCH}"
    by_category: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        category = path.name.removesuffix(".jsonl.gz")
        assert category in CATEGORY_WEIGHTS, f"unknown MaskBench category {category}"
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle]
        kept = []
        for row in rows:
            if not row["tests"]:
                continue
            if MAX_SCHEMA_CHARS is not None and len(json.dumps(row["schema"])) > MAX_SCHEMA_CHARS:
                continue
            row["id"] = row["file"].removesuffix(".json")
            row["category"] = category
            kept.append(row)
        by_category[category] = sorted(kept, key=_rank)
    sample: list[dict[str, Any]] = []
    for category, weight in CATEGORY_WEIGHTS.items():
        rows = by_category.get(category, [])[: round(SAMPLE_SIZE * weight)]
        walk = len(rows) if WALK_SAMPLE_SIZE is None else round(WALK_SAMPLE_SIZE * weight)
        for index, row in enumerate(rows):
            row["walk"] = index < walk
        sample += rows
    return sample


def compact(value: Any, *, ascii_only: bool = False) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)


# -- which keywords an invalid instance violates -------------------------------------------


_SUBSCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
# Keywords under which the schema is not a plain tree walk: locations may be merged.
_COMBINING = frozenset(
    {"$ref", "allOf", "anyOf", "oneOf", "if", "then", "else", "not", "additionalItems"}
)


class _Coverage:
    """Decides whether jsonschema's errors on a value are all under unenforced keywords.

    An error is covered when some keyword on its schema path (the violated keyword or
    one it sits under, such as ``not`` or ``if``) is listed in ``unenforced``: at the
    same location when the path is a plain walk of the schema, by keyword name when it
    passes ``$ref``, a combinator or a conditional (the compiler merges those, so its
    locations differ). A failed ``anyOf``/``oneOf`` is covered when the keyword is
    unenforced there, or when every error of one of its branches is covered.
    """

    def __init__(self, compiled: CompiledSchema) -> None:
        self.root = compiled.schema.json_schema
        self.validator = compiled.schema.validator
        self.unenforced = set(compiled.unenforced)
        self.names = {u.rsplit("/", 1)[-1] for u in compiled.unenforced}

    def uncovered(self, value: Any) -> list[str]:
        """The violations not explained by ``unenforced`` (empty: all are)."""
        return [
            f"{e.validator} at schema /{'/'.join(map(str, e.absolute_schema_path))}: "
            f"{e.message[:120]}"
            for e in self.validator.iter_errors(value)
            if not self._covered(e, self.root, "", list(e.relative_schema_path), inside=False)
        ]

    def _covered(self, error: Any, node: Any, location: str, path: list[Any], inside: bool) -> bool:
        steps = self._locate(node, location, path)
        by_name = inside or any(
            keyword in _COMBINING or (keyword == "items" and isinstance(value, list))
            for _, keyword, value in steps
        )
        for at, keyword, _ in steps:
            if f"{at}/{keyword}" in self.unenforced or (by_name and keyword in self.names):
                return True
        if error.validator in ("anyOf", "oneOf") and error.context and steps:
            at, keyword, branches = steps[-1]
            by_branch: dict[int, list[Any]] = collections.defaultdict(list)
            for sub in error.context:
                by_branch[int(sub.relative_schema_path[0])].append(sub)
            for index, subs in by_branch.items():
                branch = branches[index] if isinstance(branches, list) else None
                where = f"{at}/{keyword}/{index}"
                if all(
                    self._covered(s, branch, where, list(s.relative_schema_path)[1:], inside=True)
                    for s in subs
                ):
                    return True
        return False

    def _locate(self, node: Any, location: str, path: list[Any]) -> list[tuple[str, str, Any]]:
        """``(schema location, keyword, the keyword's value)`` for each keyword on ``path``."""
        steps: list[tuple[str, str, Any]] = []
        index = 0
        while index < len(path):
            segment = path[index]
            # jsonschema leaves "$ref" out of schema paths: follow the reference when
            # the keyword is not on the referring node itself.
            hops = 0
            while (
                isinstance(node, dict)
                and isinstance(node.get("$ref"), str)
                and (segment == "$ref" or segment not in node)
                and hops < 40
            ):
                ref = node["$ref"]
                steps.append((location, "$ref", ref))
                node, location, hops = resolve_pointer(self.root, ref), ref[1:], hops + 1
                if segment == "$ref":
                    index += 1
                    if index == len(path):
                        return steps
                    segment = path[index]
            if not isinstance(node, dict):
                break
            keyword = str(segment)
            value = node.get(keyword)
            steps.append((location, keyword, value))
            index += 1
            location = f"{location}/{_escape(keyword)}"
            keyed = keyword in _SUBSCHEMA_MAPS or keyword in _SUBSCHEMA_LISTS
            if keyed or (keyword == "items" and isinstance(value, list)):
                if index == len(path):
                    break
                key = path[index]
                index += 1
                location = f"{location}/{_escape(str(key))}"
                if isinstance(value, dict):
                    node = value.get(key)
                elif isinstance(value, list) and isinstance(key, int) and key < len(value):
                    node = value[key]
                else:
                    node = None
            else:
                node = value
        return steps


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


# -- fixtures: vocabularies, compiled schemas --------------------------------------------------


class Tokenized:
    """A tokenizer (to encode instances) and its jsonmode vocabulary."""

    def __init__(self, name: str) -> None:
        from tokenizers import Tokenizer

        folder = TOKENIZERS / name
        self.name = name
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.vocabulary = Vocabulary.from_tokenizer(folder)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _compile(row: dict[str, Any], vocabulary: Vocabulary) -> CompiledSchema | str:
    try:
        return compile_schema(row["schema"], vocabulary, **COMPILE_OPTIONS)
    except UNSUPPORTED as exc:
        return f"unsupported:{type(exc).__name__}"
    except JsonModeError as exc:
        return f"BUG:compile raised {type(exc).__name__}: {exc}"
    except Exception as exc:  # a crash is a finding, never a skip
        return f"BUG:compile crashed: {type(exc).__name__}: {exc}"


def _schema_outcome(compiled: CompiledSchema | str) -> str:
    if isinstance(compiled, str):
        return compiled
    return "partial" if compiled.unenforced else "enforced"


def _release(compiled: CompiledSchema) -> None:
    """Drop the mask engine (and its caches) of a schema the gates are done with.

    jsonmode's compile cache keeps compiled schemas alive, and every engine keeps its
    masks and per-state vocabulary walks (megabytes per schema): without this, the
    gates would hold gigabytes. The next ``matcher()`` builds a fresh engine.
    """
    compiled.__dict__.pop("engine", None)


@dataclasses.dataclass
class Gates:
    """Everything the gates computed; the tests of this module assert on it."""

    sample: list[dict[str, Any]]
    tokenizers: dict[str, Tokenized]
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    walked: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    fuzz: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    fuzz_failures: list[str] = dataclasses.field(default_factory=list)
    fuzzed: list[str] = dataclasses.field(default_factory=list)
    differential: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    differential_failures: list[str] = dataclasses.field(default_factory=list)
    diffed: list[str] = dataclasses.field(default_factory=list)


# -- gate 1: valid instances, token by token -------------------------------------------------


def _walk(compiled: CompiledSchema, vocabulary: Vocabulary, ids: list[int]) -> str:
    """Walk ``ids`` through a fresh matcher: ``ok``, or what went wrong."""
    matcher = compiled.matcher()
    for position, token in enumerate(ids):
        mask = matcher.mask()
        if not mask.any():
            return f"BUG:empty mask before token {position}"
        if not mask[token]:
            return f"masked@{position}:{vocabulary.token_bytes(token)!r}"
        if not matcher.advance(token):
            return f"BUG:advance refused allowed token {position}"
    mask = matcher.mask()
    eos = sorted(vocabulary.eos_ids)
    if not mask[eos].all():
        return "BUG:EOS not allowed at the end of an accepted text"
    others = sorted(vocabulary.special_ids - vocabulary.eos_ids)
    if others and mask[others].any():
        return "BUG:special token allowed"
    if not matcher.advance(eos[0]) or not matcher.is_finished():
        return "BUG:eos refused"
    return "ok"


def _valid_walks(
    gates: Gates, row: dict[str, Any], tok: Tokenized, compiled: CompiledSchema
) -> list[int] | None:
    """Walk every valid instance (both serializations); the first ``ok`` token ids."""
    orderer = SchemaOrder(compiled.schema.json_schema, compiled.schema.validator)
    first: list[int] | None = None
    for t, case in enumerate(row["tests"]):
        if not case["valid"]:
            continue
        chosen = next(
            (v for v in orderer.spellings(case["data"]) if compiled.accepts(compact(v))), None
        )
        for form, ascii_only in (("compact", False), ("ascii", True)):
            key = f"{row['id']}#{t}@{tok.name}/{form}"
            if chosen is None:
                # Decoding may refuse a valid instance only through a keyword it does
                # not enforce exactly; a fully enforced schema must accept it.
                gates.outcomes[key] = (
                    "BUG:valid instance rejected" if compiled.fully_enforced else "rejected"
                )
                continue
            text = compact(chosen, ascii_only=ascii_only)
            ids = tok.encode(text)
            data = tok.vocabulary.decode(ids)
            if data not in (text.encode(), b" " + text.encode()):
                gates.outcomes[key] = f"BUG:token bytes are not the text: {data[:80]!r}"
                continue
            if not compiled.accepts(data):
                gates.outcomes[key] = "BUG:the one leading space is refused"
                continue
            outcome = _walk(compiled, tok.vocabulary, ids)
            if outcome.startswith("masked@"):
                # The byte-level matcher accepts these bytes: the mask must allow them.
                outcome = "BUG:mask refused a token of accepted text: " + outcome
            gates.outcomes[key] = outcome
            gates.walked[tok.name] += 1
            if first is None and outcome == "ok":
                first = ids
    return first


# -- gate 2: invalid instances ---------------------------------------------------------------


def _invalid_checks(gates: Gates, row: dict[str, Any], compiled: CompiledSchema) -> None:
    orderer = SchemaOrder(compiled.schema.json_schema, compiled.schema.validator)
    coverage = _Coverage(compiled)
    for t, case in enumerate(row["tests"]):
        if case["valid"]:
            continue
        key = f"{row['id']}#{t}/invalid"
        if not any(compiled.accepts(compact(v)) for v in orderer.spellings(case["data"])):
            gates.outcomes[key] = "rejected"
        elif compiled.schema.conforms(case["data"]):
            gates.outcomes[key] = "valid_per_validator"  # MaskBench's label disagrees
        else:
            uncovered = coverage.uncovered(case["data"])
            gates.outcomes[key] = (
                "BUG:invalid instance accepted: " + "; ".join(uncovered[:3])
                if uncovered
                else "accepted_unenforced"
            )


# -- gate 3: random-logits fuzz --------------------------------------------------------------


def _property_names(schema: Any) -> set[str]:
    """Every name a schema declares or requires, anywhere in it."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                names.update(node["properties"])
            if isinstance(node.get("required"), list):
                names.update(n for n in node["required"] if isinstance(n, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


_QUOTE_CLOSER = re.compile(rb'^"[}\],:]*"?$')  # ends a string ('"', '",', '":', '"}', ...)
_BRACE_CLOSER = re.compile(rb"^ ?[}\]][}\],]*$")  # ends a container ('}', ']}', '},', ...)
_KEY_OPENER = re.compile(rb'^ ?[{,]? ?"$')  # starts a string ('"', ',"', '{"', ', "')


class _Scanner:
    """Where a JSON text stops: inside a key, inside another string, or between tokens."""

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.in_string = self.escaped = self.is_key = self.expect_key = False
        self.content = bytearray()  # the current string's bytes so far

    def feed(self, data: bytes) -> None:
        for byte in data:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif byte == 0x5C:  # backslash
                    self.escaped = True
                elif byte == 0x22:  # the closing quote
                    self.in_string = False
                    continue
                self.content.append(byte)
            elif byte == 0x22:
                self.in_string, self.is_key, self.expect_key = True, self.expect_key, False
                self.content.clear()
            elif byte in b"{[":
                self.stack.append(byte)
                self.expect_key = byte == 0x7B
            elif byte in b"}]":
                if self.stack:
                    self.stack.pop()
                self.expect_key = False
            elif byte == 0x2C:  # a comma: a key comes next inside an object
                self.expect_key = bool(self.stack) and self.stack[-1] == 0x7B


class _Logits:
    """Random logits: Gumbel noise plus a bias, as a model would have, so documents end.

    Between tokens, closing a container ('}', ']') and EOS come first, then opening a
    string; inside a string, ending it (a quote then only '}', ']', ',' or ':') comes
    first; inside a key, spelling one of the schema's property names (a model writes
    the declared keys, and required ones must come) comes before that. Sampling takes
    the argmax of bias + Gumbel noise over the allowed ids, drawn exactly but cheaply:
    the maximum of ``n`` independent Gumbel(0) draws is Gumbel(log n) and its position
    is uniform, so one draw per bias level picks the level, and a uniform draw picks
    the token in it.
    """

    PLAIN, OPEN, CLOSE, FAVOURED = range(4)

    def __init__(self, tok: Tokenized) -> None:
        vocabulary = tok.vocabulary
        self.tok = tok
        self.inside = np.zeros(vocabulary.size, dtype=np.int8)  # inside a string
        self.between = np.zeros(vocabulary.size, dtype=np.int8)  # between tokens
        for token in np.flatnonzero(vocabulary.allowed_base).tolist():
            data = vocabulary.token_bytes(token)
            if _QUOTE_CLOSER.match(data):
                self.inside[token] = self.CLOSE
            if _BRACE_CLOSER.match(data):
                self.between[token] = self.CLOSE
            elif _KEY_OPENER.match(data):
                self.between[token] = self.OPEN
        self.between[sorted(vocabulary.eos_ids)] = self.CLOSE
        self.bias = np.array([0.0, FUZZ_OPEN_BIAS, FUZZ_CLOSE_BIAS, FUZZ_FAVOURED_BIAS])
        self.names: list[tuple[bytes, list[int]]] = []

    def for_schema(self, compiled: CompiledSchema) -> _Logits:
        """These logits, knowing how the schema's property names are spelled."""
        keyed = object.__new__(_Logits)
        keyed.__dict__.update(self.__dict__)
        keyed.names = []
        for name in sorted(_property_names(compiled.schema.json_schema)):
            spelled = json.dumps(name)[1:-1]
            keyed.names.append((spelled.encode(), self.tok.encode(spelled)))
        return keyed

    def levels(self, scanner: _Scanner) -> np.ndarray:
        if not scanner.in_string:
            return self.between
        if not scanner.is_key or not self.names:
            return self.inside
        levels = self.inside.copy()
        written = bytes(scanner.content)
        vocabulary = self.tok.vocabulary
        for spelled, ids in self.names:
            if spelled == written:  # the name is complete: end the key
                levels[levels == self.CLOSE] = self.FAVOURED
                break
            if spelled.startswith(written):
                done = b""
                for token in ids:  # the name's next token, if written so far by tokens
                    if done == written:
                        levels[token] = self.FAVOURED
                        break
                    done += vocabulary.token_bytes(token)
        return levels

    def sample(self, mask: np.ndarray, rng: np.random.Generator, level: np.ndarray) -> int | None:
        counts = np.bincount(level[mask], minlength=len(self.bias))
        if not counts.any():
            return None
        with np.errstate(divide="ignore"):
            scores = np.log(counts) + self.bias + rng.gumbel(size=len(self.bias))
        chosen = np.flatnonzero(mask & (level == int(np.argmax(scores))))
        return int(chosen[rng.integers(chosen.size)])


def _sample(matcher: Matcher, logits: _Logits, seed: int) -> Iterator[int | None]:
    """Sample a document from random logits through the mask, advancing ``matcher``.

    Yields each token before advancing by it, or ``None`` (then stops) when the mask is
    empty before the document is finished. Stops at EOS or after FUZZ_MAX_TOKENS.
    """
    rng = np.random.default_rng(seed)
    vocabulary = logits.tok.vocabulary
    scanner = _Scanner()
    for _ in range(FUZZ_MAX_TOKENS):
        token = logits.sample(matcher.mask(), rng, logits.levels(scanner))
        yield token
        if token is None:
            return
        if not matcher.advance(token):
            raise AssertionError(f"the matcher refused token {token} its mask allowed")
        if matcher.is_finished():
            return
        scanner.feed(vocabulary.token_bytes(token))


def _fuzz(gates: Gates, row: dict[str, Any], compiled: CompiledSchema, logits: _Logits) -> None:
    gates.fuzzed.append(row["id"])
    logits = logits.for_schema(compiled)
    vocabulary = compiled.vocabulary
    assert vocabulary is not None
    coverage = _Coverage(compiled)
    for seed in range(FUZZ_SEEDS):
        where = f"{row['id']} seed {seed}"
        gates.fuzz["runs"] += 1
        tokens: list[int] = []
        matcher = compiled.matcher()
        try:
            for token in _sample(matcher, logits, int(_rank(row)[:8], 16) + seed):
                if token is None:
                    gates.fuzz_failures.append(f"{where}: empty mask after {len(tokens)} tokens")
                    break
                tokens.append(token)
        except AssertionError as exc:
            gates.fuzz_failures.append(f"{where}: {exc}")
            continue
        if not matcher.is_finished():
            gates.fuzz["unfinished"] += 1
            continue
        gates.fuzz["finished"] += 1
        gates.fuzz["tokens"] += len(tokens)
        data = vocabulary.decode(tokens[:-1])  # the last token is EOS
        try:
            value = json.loads(data.decode("utf-8"))
        except ValueError as exc:
            gates.fuzz_failures.append(f"{where}: does not parse ({exc}): {data[:200]!r}")
            continue
        if compiled.schema.conforms(value):
            gates.fuzz["valid"] += 1
            continue
        uncovered = coverage.uncovered(value)
        if compiled.fully_enforced or uncovered:
            gates.fuzz_failures.append(
                f"{where}: invalid document ({'; '.join(uncovered[:2])}): {data[:200]!r}"
            )
        else:
            gates.fuzz["invalid_under_unenforced"] += 1


# -- gate 4: differential against the reference matcher ------------------------------------------


class _ReferenceMasks:
    """Masks by feeding every token's bytes through the slow reference matcher.

    ``ReferenceMatcher.step`` is a pure function of (state, byte): its results are
    memoised, and tokens sorted by their bytes share the walk of their common prefix.
    The answer for a token is exactly ``bool(reference.feed(state, token_bytes))``.
    """

    def __init__(self, compiled: CompiledSchema, order: list[int]) -> None:
        self.reference = compiled.reference()
        self.vocabulary = compiled.vocabulary
        self.order = order  # ordinary token ids sorted by bytes
        self.steps: dict[tuple[Any, int], Any] = {}

    def _step(self, state: Any, byte: int) -> Any:
        nxt = self.steps.get((state, byte))
        if nxt is None:
            nxt = self.steps[(state, byte)] = self.reference.step(state, byte)
        return nxt

    def mask(self, state: Any, only: np.ndarray | None) -> np.ndarray:
        vocabulary = self.vocabulary
        assert vocabulary is not None
        allowed = np.zeros(vocabulary.size, dtype=np.bool_)
        wanted = None
        if only is not None:
            wanted = np.zeros(vocabulary.size, dtype=np.bool_)
            wanted[only] = True
        prefix = b""
        states = [state]  # states[k]: the state after the first k bytes of ``prefix``
        for token in self.order:
            if wanted is not None and not wanted[token]:
                continue
            data = vocabulary.token_bytes(token)
            common = 0
            limit = min(len(prefix), len(data))
            while common < limit and prefix[common] == data[common]:
                common += 1
            del states[common + 1 :]
            current = states[-1]
            for byte in data[common:]:
                current = self._step(current, byte) if current else current
                states.append(current)
            prefix = data
            allowed[token] = bool(current)
        if self.reference.can_end(state):
            allowed[sorted(vocabulary.eos_ids)] = True
        return allowed


def _visited_states(
    compiled: CompiledSchema, ids: list[int], logits: _Logits, seed: int, count: int
) -> list[Any]:
    """``count`` states met walking ``ids`` and one fuzzed document, evenly spread."""
    states: list[Any] = []
    matcher = compiled.matcher()
    for token in ids:
        states.append(matcher.state)
        assert matcher.advance(token)
    states.append(matcher.state)
    matcher = compiled.matcher()
    for token in _sample(matcher, logits, seed):
        if token is None:
            break
        states.append(matcher.state)
    unique = list(dict.fromkeys(states))
    picks = np.linspace(0, len(unique) - 1, min(count, len(unique))).round().astype(int)
    return [unique[i] for i in sorted(set(picks.tolist()))]


def _differential(
    gates: Gates,
    row: dict[str, Any],
    compiled: CompiledSchema,
    ids: list[int],
    logits: _Logits,
    order: list[int],
    full: bool,
) -> None:
    gates.diffed.append(row["id"])
    vocabulary = compiled.vocabulary
    assert vocabulary is not None
    rng = np.random.default_rng(int(_rank(row)[:8], 16))
    reference = _ReferenceMasks(compiled, order)
    count = DIFF_FULL_STATES if full else DIFF_SUBSET_STATES
    for state in _visited_states(compiled, ids, logits, int(_rank(row)[8:16], 16), count):
        fast = compiled.engine.mask(state)
        if full:
            only = None
        else:
            subset = rng.choice(vocabulary.size, size=DIFF_SUBSET_SIZE, replace=False)
            only = np.union1d(subset, np.flatnonzero(fast))
        slow = reference.mask(state, only)
        if only is not None:
            keep = np.zeros(vocabulary.size, dtype=np.bool_)
            keep[only] = True
            keep[sorted(vocabulary.eos_ids)] = True
            fast, slow = fast & keep, slow & keep
        gates.differential["states"] += 1
        gates.differential["tokens"] += vocabulary.size if only is None else int(only.size)
        differ = np.flatnonzero(fast != slow)
        if differ.size:
            gates.differential_failures.append(
                f"{row['id']}: {differ.size} tokens differ, e.g. "
                + ", ".join(
                    f"{t} {vocabulary.token_bytes(int(t))!r} fast={bool(fast[t])}"
                    for t in differ[:6]
                )
            )


# -- running the gates ----------------------------------------------------------------------


def _run_gates() -> Gates:
    """All four gates, schema by schema, releasing each schema's masks when done."""
    clock = time.perf_counter()
    gates = Gates(load_sample(), {name: Tokenized(name) for name in TOKENIZER_NAMES})
    gates.seconds["setup"] = time.perf_counter() - clock
    ranked = sorted(gates.sample, key=_rank)  # categories interleaved
    qwen = gates.tokenizers["qwen2.5"].vocabulary
    logits = _Logits(gates.tokenizers["qwen2.5"])
    order = sorted(np.flatnonzero(qwen.allowed_base).tolist(), key=qwen.token_bytes)
    seconds: collections.Counter[str] = collections.Counter()
    partial: list[dict[str, Any]] = []
    for name in TOKENIZER_NAMES:
        tok = gates.tokenizers[name]
        for row in ranked:
            if name != "qwen2.5" and not row["walk"]:
                continue
            clock = time.perf_counter()
            compiled = _compile(row, tok.vocabulary)
            outcome = _schema_outcome(compiled)
            previous = gates.outcomes.setdefault(row["id"], outcome)
            if previous != outcome:
                gates.outcomes[row["id"]] = f"BUG:{outcome} with {name}, {previous} before"
            seconds[f"compile {name}"] += time.perf_counter() - clock
            if isinstance(compiled, str):
                continue
            clock = time.perf_counter()
            ids = _valid_walks(gates, row, tok, compiled) if row["walk"] else None
            seconds[f"walk {name}"] += time.perf_counter() - clock
            if name == "qwen2.5":
                clock = time.perf_counter()
                _invalid_checks(gates, row, compiled)
                seconds["invalid"] += time.perf_counter() - clock
                clock = time.perf_counter()
                if not compiled.fully_enforced:
                    partial.append(row)
                elif len(gates.fuzzed) < FUZZ_SCHEMAS:
                    _fuzz(gates, row, compiled, logits)
                seconds["fuzz"] += time.perf_counter() - clock
                clock = time.perf_counter()
                if ids is not None and len(gates.diffed) < DIFF_FULL_SCHEMAS + DIFF_SUBSET_SCHEMAS:
                    full = len(gates.diffed) < DIFF_FULL_SCHEMAS
                    _differential(gates, row, compiled, ids, logits, order, full)
                seconds["differential"] += time.perf_counter() - clock
            _release(compiled)
        if name == "qwen2.5":
            # Too few fully enforced schemas: fuzz partially enforced ones as well.
            clock = time.perf_counter()
            for row in partial[: max(0, FUZZ_SCHEMAS - len(gates.fuzzed))]:
                compiled = _compile(row, qwen)
                assert not isinstance(compiled, str)
                _fuzz(gates, row, compiled, logits)
                _release(compiled)
            seconds["fuzz"] += time.perf_counter() - clock
    gates.seconds.update(seconds)
    return gates


@pytest.fixture(scope="module")
def gates() -> Gates:
    return _run_gates()


# -- the tests --------------------------------------------------------------------------------


def _level(key: str, outcome: str | None) -> int:
    """How good an outcome is (higher is better; comparable within one key)."""
    if outcome is None or outcome.startswith("BUG:"):
        return -1
    if "#" not in key:  # a schema: enforced > partial > unsupported
        return GOOD_SCHEMA_LEVEL.get(outcome, 0)
    if key.endswith("/invalid"):
        return 1 if outcome in ("rejected", "valid_per_validator") else 0
    return 1 if outcome == "ok" else 0


def test_no_bug_outcomes(gates: Gates) -> None:
    """Crashes, valid instances a fully enforced schema refuses, invalid instances
    accepted under enforced keywords, masks that refuse accepted text: never baselined."""
    bugs = sorted(f"{k}: {v}" for k, v in gates.outcomes.items() if v.startswith("BUG:"))
    assert not bugs, f"{len(bugs)} outcomes that are bugs:\n" + "\n".join(bugs[:20])


def test_matches_the_checked_in_baseline(gates: Gates) -> None:
    recorded = {k: v for k, v in gates.outcomes.items() if not v.startswith("BUG:")}
    if UPDATE:
        kept = json.loads(BASELINE.read_text()) if FULL and BASELINE.exists() else {}
        BASELINE.write_text(json.dumps({**kept, **recorded}, indent=0, sort_keys=True) + "\n")
    baseline: dict[str, str] = json.loads(BASELINE.read_text())
    regressions = sorted(
        f"{k}: {baseline[k]} -> {v}"
        for k, v in gates.outcomes.items()
        if k in baseline and _level(k, v) < _level(k, baseline[k])
    )
    assert not regressions, f"{len(regressions)} regressions:\n" + "\n".join(regressions[:20])
    sampled = {row["id"] for row in gates.sample}
    vanished = sorted(k for k in baseline if k.split("#")[0] in sampled and k not in gates.outcomes)
    assert not vanished, f"{len(vanished)} recorded outcomes vanished, e.g. {vanished[:5]}"
    if FULL:
        return  # beyond the default sample, outcomes are judged by the BUG rules only
    unrecorded = sorted(k for k in recorded if k not in baseline)
    changed = sorted(
        f"{k}: {baseline[k]} -> {v}" for k, v in recorded.items() if baseline.get(k, v) != v
    )
    hint = "record them with JSONMODE_UPDATE_BASELINE=1"
    assert not unrecorded, f"{len(unrecorded)} new outcomes ({hint}), e.g. {unrecorded[:5]}"
    assert not changed, f"{len(changed)} outcomes improved ({hint}):\n" + "\n".join(changed[:10])


def test_most_sampled_schemas_compile(gates: Gates) -> None:
    schemas = [gates.outcomes[row["id"]] for row in gates.sample]
    compiled = sum(o in GOOD_SCHEMA_LEVEL for o in schemas)
    walked = [r for r in gates.sample if r["walk"] and gates.outcomes[r["id"]] in GOOD_SCHEMA_LEVEL]
    print(
        f"\nMaskBench gates: {len(schemas)} schemas, {compiled} compiled "
        f"({100 * compiled / len(schemas):.1f} %), "
        f"{sum(o == 'enforced' for o in schemas)} fully enforced; valid instances of "
        f"{len(walked)} compiled schemas walked per tokenizer (two serializations each): "
        f"{dict(gates.walked)}; seconds: "
        + ", ".join(f"{k} {v:.1f}" for k, v in gates.seconds.items())
    )
    if not FULL:
        assert len(schemas) == SAMPLE_SIZE
        assert sum(r["walk"] for r in gates.sample) == WALK_SAMPLE_SIZE
        assert compiled >= MIN_COMPILED, f"only {compiled} of {len(schemas)} schemas compile"
    for name in TOKENIZER_NAMES:
        assert gates.walked[name] >= 2 * len(walked), f"too few instances walked with {name}"


def test_random_logits_fuzz(gates: Gates) -> None:
    print(f"\nfuzz over {len(gates.fuzzed)} schemas: {dict(gates.fuzz)}")
    assert not gates.fuzz_failures, f"{len(gates.fuzz_failures)} fuzz failures:\n" + "\n".join(
        gates.fuzz_failures[:10]
    )
    assert len(gates.fuzzed) == FUZZ_SCHEMAS
    assert gates.fuzz["runs"] == FUZZ_SCHEMAS * FUZZ_SEEDS
    # Most documents end within the bound (the bias makes strings and containers close).
    assert gates.fuzz["finished"] >= FUZZ_MIN_FINISHED * gates.fuzz["runs"], dict(gates.fuzz)


def test_fast_masks_equal_the_reference(gates: Gates) -> None:
    print(f"\ndifferential over {len(gates.diffed)} schemas: {dict(gates.differential)}")
    assert not gates.differential_failures, "\n".join(gates.differential_failures[:10])
    assert len(gates.diffed) == DIFF_FULL_SCHEMAS + DIFF_SUBSET_SCHEMAS
    assert gates.differential["states"] >= DIFF_FULL_SCHEMAS * DIFF_FULL_STATES


def test_schemas_without_instances_compile_or_are_refused_with_a_typed_error() -> None:
    """The sample leaves out the rows without instances (956 of MaskBench's 8 097):
    each is compiled here (grammar and automata, no vocabulary), and where one does
    not compile, the error must be typed. (Schemas that reach themselves again through
    a reference inside allOf or anyOf used to be inlined without end: RecursionError.)
    Under JSONMODE_FULL_GATES=1, every row is compiled."""
    compiled = refused = 0
    crashes: list[str] = []
    for path in sorted(MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                if row["tests"] and not FULL:
                    continue
                try:
                    compile_schema(row["schema"])
                    compiled += 1
                except JsonModeError:
                    refused += 1
                except Exception as exc:  # (the bug this test looks for)
                    crashes.append(f"{row['file']}: {type(exc).__name__}: {str(exc)[:200]}")
    print(f"\nrows without instances: {compiled} compiled, {refused} refused (typed)")
    assert not crashes, "\n".join(crashes[:10])
    assert compiled > 900
