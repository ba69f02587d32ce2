"""Grammar constraints side by side: jsonmode, xgrammar and llguidance, same grammars,
same tokenizer, one run.

    python bench/grammars.py                       # 3 rounds, all three engines (~2-3 min)
    python bench/grammars.py --rounds 5 --json out.json
    python bench/grammars.py --engines jsonmode,llguidance
    python bench/grammars.py --check 400           # the engines' grammars accept the same texts
    python bench/grammars.py --set wide            # the wide set (bench/grammars_wide.py)

Four grammars, each written for every engine: JSON (the value grammar with
``compile_schema({})``'s whitespace policy, written in GBNF), chess moves (numbered SAN),
arithmetic (recursive, decimals, optional spaces) and CSV (jsonmode: the built-in
``compile_csv`` for a four-column row schema; the others: the same language written
out by hand). jsonmode and xgrammar read the same GBNF text (xgrammar's EBNF is
llama.cpp's GBNF); llguidance reads a Lark translation, written here, with the regular
parts as terminals (its lexer's unit, as its own grammars do).

Each round is a fresh process (nothing warm from an earlier round; the engines' own
per-process caches start empty). Set-up, untimed: each engine's tokenizer; for jsonmode
also the vocabulary's token index and trie, and the import of the GBNF reader and the
CSV builder (imported on first use; the peers' whole code is loaded by their import).
In it, per grammar, each engine (which one goes first alternates) compiles the grammar,
timed (jsonmode: ``compile_grammar`` / ``compile_csv`` plus the mask engine; xgrammar:
parse plus ``GrammarCompiler.compile_grammar``, one thread, no cache; llguidance:
``grammar_from_lark`` plus ``LLMatcher``), then walks every text of the grammar token by
token with a fresh matcher: the mask call alone is timed (``bench/decoder.py``'s walk;
every engine fills a token bitmask of int32 words, jsonmode with ``fill_bitmask``), the
token must be allowed and taken, and EOS must end the text. Texts: JSON, six MaskBench
instances (300-1500 bytes, compact); chess, three 40-move games; arithmetic, six
expressions; CSV, three 15-row tables (the generated ones from a fixed seed).

Reported per grammar and engine: compile time (the median over rounds), mask time per
token (mean, p50, p99 over every token of every round), and both as ratios to
llguidance. Plain CPU; the tokenizer is Qwen2.5's (``../shared/data/tokenizers``).
Peers: see bench/README.md ("Decoder") for installing xgrammar and llguidance.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import decoder  # noqa: E402  (the walk, the tokenizer and MaskBench paths)

ENGINES = ("jsonmode", "xgrammar", "llguidance")
REFERENCE = "llguidance"
EOS_TOKEN = "<|im_end|>"

# -- the grammars ----------------------------------------------------------------------

JSON_GBNF = r"""
root   ::= " "? value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( member ( "," " "? member )* )? "}"
member ::= string ":" " "? value
array  ::= "[" ( value ( "," " "? value )* )? "]"
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1f] | "\\" escape
escape ::= ["\\/bfnrt] | "u" bmp | "u" [dD] [89abAB] hex hex "\\u" [dD] [c-fC-F] hex hex
bmp    ::= [0-9a-cA-CeEfF] hex hex hex | [dD] [0-7] hex hex
hex    ::= [0-9a-fA-F]
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
"""

JSON_LARK = r"""
start: " "? value
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" (member ("," " "? member)*)? "}"
member: STRING ":" " "? value
array: "[" (value ("," " "? value)*)? "]"
STRING: "\"" (CHAR | ESCAPE)* "\""
CHAR: /[^"\\\x00-\x1f]/
ESCAPE: /\\(["\\\/bfnrt]|u([0-9a-cA-CeEfF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))/
    | /\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/
"""

CHESS_GBNF = r"""
root   ::= turn (" " turn){0,59}
turn   ::= [1-9] [0-9]{0,2} ". " move (" " move)?
move   ::= (castle | piece | pawn) [+#]?
castle ::= "O-O" "-O"?
piece  ::= [KQRBN] [a-h]? [1-8]? "x"? square
pawn   ::= ([a-h] "x")? square ("=" [QRBN])?
square ::= [a-h] [1-8]
"""

CHESS_LARK = r"""
start: turn (" " turn){0,59}
turn: NUMBER ". " MOVE (" " MOVE)?
NUMBER: /[1-9][0-9]{0,2}/
MOVE: /(O-O(-O)?|[KQRBN][a-h]?[1-8]?x?[a-h][1-8]|([a-h]x)?[a-h][1-8](=[QRBN])?)[+#]?/
"""

ARITHMETIC_GBNF = r"""
root   ::= expr
expr   ::= term (sp [-+] sp term)*
term   ::= factor (sp [*/%] sp factor)*
factor ::= "-"? (number | "(" sp expr sp ")")
number ::= [0-9]+ ("." [0-9]{1,6})?
sp     ::= " "?
"""

ARITHMETIC_LARK = r"""
start: expr
expr: term (" "? ADD " "? term)*
term: factor (" "? MUL " "? factor)*
factor: "-"? (NUMBER | "(" " "? expr " "? ")")
NUMBER: /[0-9]+(\.[0-9]{1,6})?/
ADD: /[-+]/
MUL: /[*\/%]/
"""

CSV_ROW = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age"],
}

# compile_csv(CSV_ROW)'s language, by hand: a header (names bare or quoted), rows of
# four cells (RFC 4180 quoting; an empty cell for an optional one, or ""), lines ending
# in LF or CRLF, the last one's end optional.
CSV_GBNF = r"""
root   ::= header (eol row)+ eol?
eol    ::= "\n" | "\r\n"
header ::= hname "," hage "," hscore "," hactive
hname  ::= "name" | "\"name\""
hage   ::= "age" | "\"age\""
hscore ::= "score" | "\"score\""
hactive ::= "active" | "\"active\""
row    ::= name? "," age "," (score | "\"\"")? "," (active | "\"\"")?
name   ::= [^,"\r\n]+ | "\"" ([^"] | "\"\"")* "\""
age    ::= "0" | [1-9] [0-9]? | "1" [0-4] [0-9] | "150"
score  ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
active ::= "true" | "false"
"""

CSV_LARK = r"""
start: header (EOL row)+ EOL?
EOL: "\n" | "\r\n"
header: hname "," hage "," hscore "," hactive
hname: "name" | "\"name\""
hage: "age" | "\"age\""
hscore: "score" | "\"score\""
hactive: "active" | "\"active\""
row: NAME? "," AGE "," (SCORE | "\"\"")? "," (ACTIVE | "\"\"")?
NAME: /[^,"\r\n]+|"([^"]|"")*"/
AGE: /0|[1-9][0-9]?|1[0-4][0-9]|150/
SCORE: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/
ACTIVE: "true" | "false"
"""


# -- the texts ---------------------------------------------------------------------------


def json_texts(count: int = 6) -> list[str]:
    """MaskBench instances of 300-1500 bytes (compact, UTF-8), ranked by a hash."""
    texts = set()
    for path in sorted(decoder.MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                for test in json.loads(line)["tests"]:
                    text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                    try:
                        size = len(text.encode("utf-8"))
                    except UnicodeEncodeError:
                        continue
                    if 300 <= size <= 1500:
                        texts.add(text)
    return sorted(texts, key=lambda t: hashlib.sha256(t.encode()).hexdigest())[:count]


def chess_texts(rng: random.Random, count: int = 3, turns: int = 40) -> list[str]:
    def square() -> str:
        return rng.choice("abcdefgh") + rng.choice("12345678")

    def move() -> str:
        kind = rng.random()
        if kind < 0.05:
            text = rng.choice(["O-O", "O-O-O"])
        elif kind < 0.55:
            text = rng.choice("KQRBN") + rng.choice(["", "", rng.choice("abcdefgh")])
            text += rng.choice(["", "x"]) + square()
        else:
            text = (rng.choice("abcdefgh") + "x" if rng.random() < 0.3 else "") + square()
            if rng.random() < 0.05:
                text += "=" + rng.choice("QRBN")
        return text + rng.choice(["", "", "", "", "+", "#"])

    return [" ".join(f"{n}. {move()} {move()}" for n in range(1, turns + 1)) for _ in range(count)]


def arithmetic_texts(rng: random.Random, count: int = 6) -> list[str]:
    def number() -> str:
        text = str(rng.randint(0, 9999))
        return text + (f".{rng.randint(0, 999)}" if rng.random() < 0.4 else "")

    def expr(depth: int) -> str:
        parts = [factor(depth)]
        for _ in range(rng.randint(0, 3)):
            space = rng.choice(["", " "])
            parts.append(f"{space}{rng.choice('+-*/%')}{space}{factor(depth)}")
        return "".join(parts)

    def factor(depth: int) -> str:
        sign = "-" if rng.random() < 0.15 else ""
        if depth < 4 and rng.random() < 0.35:
            return f"{sign}({expr(depth + 1)})"
        return sign + number()

    texts: list[str] = []
    while len(texts) < count:
        text = expr(0)
        if len(text) >= 60:
            texts.append(text)
    return texts


def csv_texts(rng: random.Random, count: int = 3, rows: int = 15) -> list[str]:
    names = ["Ada", "Grace Hopper", "Lovelace, Ada", 'Edsger "EWD" Dijkstra', "Zoë", "Alan"]

    def row() -> str:
        name = rng.choice(names)
        if "," in name or '"' in name:
            name = '"' + name.replace('"', '""') + '"'
        score = rng.choice(["", f"{rng.uniform(-100, 100):.2f}", str(rng.randint(0, 9))])
        active = rng.choice(["", "true", "false"])
        return f"{name},{rng.randint(0, 150)},{score},{active}"

    return [
        "\n".join(["name,age,score,active", *(row() for _ in range(rows))]) + "\n"
        for _ in range(count)
    ]


@dataclass(frozen=True)
class Spec:
    gbnf: str
    lark: str
    texts: Callable[[random.Random], list[str]]
    builtin: str | None = None  # jsonmode compiles a built-in instead of the GBNF


GRAMMARS = {
    "json": Spec(JSON_GBNF, JSON_LARK, lambda rng: json_texts()),
    "chess": Spec(CHESS_GBNF, CHESS_LARK, chess_texts),
    "arithmetic": Spec(ARITHMETIC_GBNF, ARITHMETIC_LARK, arithmetic_texts),
    "csv": Spec(CSV_GBNF, CSV_LARK, csv_texts, builtin="csv"),
}
SETS = ("standard", "wide", "more")


def grammar_set(name: str) -> dict[str, Spec]:
    """The grammars of a set: ``standard`` (the four above), ``wide`` (see
    bench/grammars_wide.py: grammars whose masks allow most of the vocabulary) or
    ``more`` (see bench/grammars_more.py: seven grammars of other common shapes)."""
    if name == "standard":
        return GRAMMARS
    import grammars_more
    import grammars_wide

    chosen = grammars_wide.WIDE if name == "wide" else grammars_more.MORE
    return {
        grammar: Spec(gbnf, grammars_wide.lark_of(gbnf), texts)
        for grammar, (gbnf, texts) in chosen.items()
    }


# -- the engines -------------------------------------------------------------------------


class CompileFailure(Exception):
    pass


class JsonmodeEngine:
    name = "jsonmode"

    def setup(self, tokenizer: Any, eos: int) -> None:
        from jsonmode.decoding.vocabulary import Vocabulary

        self.vocabulary = Vocabulary.from_tokenizer(tokenizer)
        # The first mask engine of a vocabulary builds its token index and trie, once
        # per vocabulary and process: vocabulary set-up, untimed (as in decoder.py).
        import jsonmode

        jsonmode.compile_regex("a", self.vocabulary).engine  # noqa: B018
        # The modules a first grammar compile would import (the GBNF reader, the CSV
        # builder): imports are set-up, as the peers' are at their import, untimed.
        importlib.import_module("jsonmode.decoding.grammars.gbnf")
        importlib.import_module("jsonmode.decoding.grammars.builtins")

    def compile(self, name: str, spec: Spec) -> Any:
        import jsonmode

        try:
            if spec.builtin == "csv":
                compiled = jsonmode.compile_csv(CSV_ROW, self.vocabulary)
            else:
                compiled = jsonmode.compile_grammar(spec.gbnf, self.vocabulary)
        except jsonmode.JsonModeError as exc:
            raise CompileFailure(f"{type(exc).__name__}: {exc}") from None
        compiled.engine  # noqa: B018  (per-grammar set-up, timed with the compile)
        return compiled

    def walker(self, handle: Any) -> decoder.Walker:
        # Timed: filling a token bitmask, the form the peers fill here (and
        # bench/decoder.py times): Matcher.mask()'s bool array costs a fresh 152 KB
        # array per state on top (page faults, mostly).
        matcher = handle.matcher()
        words = np.zeros((self.vocabulary.size + 31) // 32, dtype=np.int32)
        return decoder.Walker(
            fill=lambda: matcher.fill_bitmask(words),
            allowed=lambda _, token: decoder._bit(words, token),
            advance=matcher.advance,
            finished=matcher.is_finished,
        )


class XgrammarEngine:
    name = "xgrammar"

    def setup(self, tokenizer: Any, eos: int) -> None:
        import transformers
        import xgrammar as xgr

        transformers.logging.set_verbosity_error()
        hf = transformers.AutoTokenizer.from_pretrained(str(decoder.TOKENIZER_DIR))
        self.xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf), stop_token_ids=[eos])
        # One thread (as in MaskBench) and no compile cache.
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        self.words = self.bitmask.numpy()[0]

    def compile(self, name: str, spec: Spec) -> Any:
        try:
            return self.compiler.compile_grammar(spec.gbnf)
        except RuntimeError as exc:
            raise CompileFailure(str(exc)) from None

    def walker(self, handle: Any) -> decoder.Walker:
        matcher = self.xgr.GrammarMatcher(handle)
        bitmask, words = self.bitmask, self.words
        return decoder.Walker(
            fill=lambda: matcher.fill_next_token_bitmask(bitmask),
            allowed=lambda _, token: decoder._bit(words, token),
            advance=matcher.accept_token,
            finished=matcher.is_terminated,
        )


class LlguidanceEngine:
    name = "llguidance"

    def setup(self, tokenizer: Any, eos: int) -> None:
        import llguidance

        self.llg = llguidance
        self.tokenizer = llguidance.LLTokenizer(tokenizer.to_str(), eos_token=eos)
        self.words = np.zeros((self.tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self.pointer, self.nbytes = self.words.ctypes.data, self.words.nbytes

    def compile(self, name: str, spec: Spec) -> Any:
        grammar = self.llg.LLMatcher.grammar_from_lark(spec.lark)
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise CompileFailure(matcher.get_error())
        return matcher

    def walker(self, handle: Any) -> decoder.Walker:
        matcher = handle.deep_copy()
        compute = matcher.unsafe_compute_mask_ptr
        pointer, nbytes, words = self.pointer, self.nbytes, self.words
        return decoder.Walker(
            fill=lambda: compute(pointer, nbytes),
            allowed=lambda _, token: decoder._bit(words, token),
            advance=matcher.consume_token,
            finished=lambda: matcher.is_accepting() or matcher.is_stopped(),
        )


ENGINE_CLASSES = {
    "jsonmode": JsonmodeEngine,
    "xgrammar": XgrammarEngine,
    "llguidance": LlguidanceEngine,
}
MODULES = {"jsonmode": "jsonmode", "xgrammar": "xgrammar", "llguidance": "llguidance"}


def installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(MODULES[name]) is not None


# -- one round (a fresh process) ---------------------------------------------------------


def one_round(names: list[str], seed: int, grammars: dict[str, Spec]) -> dict[str, Any]:
    """Every engine on every grammar in this process: compile times and walks."""
    from tokenizers import Tokenizer

    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    tokenizer = Tokenizer.from_file(str(decoder.TOKENIZER_DIR / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOS_TOKEN)
    rng = random.Random(seed)
    texts = {name: spec.texts(rng) for name, spec in grammars.items()}
    ids = {
        name: [list(tokenizer.encode(t, add_special_tokens=False).ids) for t in group]
        for name, group in texts.items()
    }
    engines = {}
    for name in names:
        engine = ENGINE_CLASSES[name]()
        engine.setup(tokenizer, eos)
        engines[name] = engine
    result: dict[str, Any] = {}
    for position, (grammar, spec) in enumerate(grammars.items()):
        order = names if position % 2 == 0 else names[::-1]
        result[grammar] = {}
        for name in order:
            engine = engines[name]
            started = time.perf_counter()
            try:
                handle = engine.compile(grammar, spec)
            except CompileFailure as exc:
                result[grammar][name] = {"error": str(exc)[:500]}
                continue
            compile_s = time.perf_counter() - started
            walks = [decoder._walk(engine.walker(handle), t, eos, 30.0) for t in ids[grammar]]
            result[grammar][name] = {
                "compile_s": compile_s,
                "walks": [{"outcome": w["outcome"], "times": w["times"]} for w in walks],
            }
            del handle
    result["_texts"] = {g: [len(t) for t in group] for g, group in ids.items()}
    return result


# -- the translations agree ----------------------------------------------------------------

_MUTATION_CHARS = '{}[]:,"\\ \n\r\t0123456789-+.eEtrufalsnbuxOQKRBN=#abcdefgh%*/()é'


def check(names: list[str], seed: int, mutations: int, grammars: dict[str, Spec]) -> int:
    """Whether every engine's form of each grammar accepts the same texts: the bench's
    texts and ``mutations`` mutated ones per grammar (a text is accepted when its
    tokens, then EOS, are all taken). The exit status: 1 on any disagreement."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(decoder.TOKENIZER_DIR / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOS_TOKEN)
    engines = {}
    for name in names:
        engines[name] = ENGINE_CLASSES[name]()
        engines[name].setup(tokenizer, eos)
    rng = random.Random(seed)
    failures = 0
    for grammar, spec in grammars.items():
        base = spec.texts(random.Random(seed))
        texts = list(base)
        for _ in range(mutations):
            text = rng.choice(base)[:200]
            for _ in range(rng.randint(1, 3)):
                at, kind = rng.randrange(len(text) + 1), rng.randrange(4)
                char = rng.choice(_MUTATION_CHARS)
                text = [
                    text[: max(0, at - 1)] + text[at:],
                    text[:at] + char + text[at:],
                    text[:at],
                    text[:at] + char + text[at + 1 :],
                ][kind]
            texts.append(text)
        handles = {name: engine.compile(grammar, spec) for name, engine in engines.items()}
        accepted = 0
        disagreements = []
        for text in texts:
            ids = [*tokenizer.encode(text, add_special_tokens=False).ids, eos]
            verdicts = {}
            for name, engine in engines.items():
                walker = engine.walker(handles[name])
                verdicts[name] = all(walker.advance(token) for token in ids)
            accepted += verdicts[names[0]]
            if len(set(verdicts.values())) > 1:
                disagreements.append(f"    {verdicts} {text[:100]!r}")
        print(f"{grammar}: {len(texts)} texts, {accepted} accepted, {len(disagreements)} disagree")
        for line in disagreements[:10]:
            print(line)
        failures += len(disagreements)
    return 1 if failures else 0


# -- aggregation and the table ------------------------------------------------------------


def summarize(
    rounds: list[dict[str, Any]], names: list[str], grammars: dict[str, Spec]
) -> dict[str, Any]:
    """Per grammar and engine: compile median (ms), mask mean/p50/p99 (µs) over the
    tokens of the texts every engine accepted, and ratios to the reference."""
    summary: dict[str, Any] = {}
    for grammar in grammars:
        per: dict[str, Any] = {}
        texts = len(rounds[0][grammar][names[0]].get("walks", [])) or len(
            rounds[0]["_texts"][grammar]
        )
        # Texts every engine accepted in every round: the common ground for masks.
        common = [
            i
            for i in range(texts)
            if all(
                "walks" in r[grammar][n] and r[grammar][n]["walks"][i]["outcome"] == "accepted"
                for r in rounds
                for n in names
            )
        ]
        for name in names:
            runs = [r[grammar][name] for r in rounds]
            errors = [run["error"] for run in runs if "error" in run]
            if errors:
                per[name] = {"error": errors[0]}
                continue
            times = np.array(
                [t for run in runs for i in common for t in run["walks"][i]["times"]], dtype=float
            )
            outcomes = [w["outcome"] for run in runs for w in run["walks"]]
            per[name] = {
                "compile_ms": 1e3 * statistics.median(run["compile_s"] for run in runs),
                "compile_first_ms": 1e3 * runs[0]["compile_s"],
                "mask_mean_us": float(times.mean()) / 1e3 if times.size else float("nan"),
                "mask_p50_us": float(np.percentile(times, 50)) / 1e3
                if times.size
                else float("nan"),
                "mask_p99_us": float(np.percentile(times, 99)) / 1e3
                if times.size
                else float("nan"),
                "tokens": int(times.size),
                "accepted": f"{outcomes.count('accepted')}/{len(outcomes)}",
            }
        reference = per.get(REFERENCE, {})
        for stats in per.values():
            if "error" in stats or "error" in reference or not reference:
                continue
            stats["ratios"] = {
                key: stats[key] / reference[key]
                for key in ("compile_ms", "mask_mean_us", "mask_p99_us")
                if reference.get(key)
            }
        summary[grammar] = {"texts_common": len(common), "engines": per}
    return summary


def table(summary: dict[str, Any], names: list[str]) -> str:
    head = (
        f"{'grammar':<11} {'engine':<11} {'compile ms':>10} {'mask mean µs':>12} "
        f"{'p50 µs':>8} {'p99 µs':>8} {'texts':>7} | {'compile×':>8} {'mean×':>6} {'p99×':>6}"
    )
    lines = [head, "-" * len(head)]
    for grammar, entry in summary.items():
        for name in names:
            stats = entry["engines"][name]
            if "error" in stats:
                lines.append(f"{grammar:<11} {name:<11} refused: {stats['error'][:70]}")
                continue
            ratios = stats.get("ratios", {})
            lines.append(
                f"{grammar:<11} {name:<11} {stats['compile_ms']:>10.2f} "
                f"{stats['mask_mean_us']:>12.1f} {stats['mask_p50_us']:>8.1f} "
                f"{stats['mask_p99_us']:>8.0f} {stats['accepted']:>7} | "
                + " ".join(
                    f"{ratios[k]:>{w}.2f}" if k in ratios else " " * w
                    for k, w in (("compile_ms", 8), ("mask_mean_us", 6), ("mask_p99_us", 6))
                )
            )
    return "\n".join(lines)


def metadata(names: list[str], rounds: int, seed: int) -> dict[str, Any]:
    versions = {}
    for name in names:
        package = {"jsonmode": "jsonmode"}.get(name, name)
        try:
            versions[name] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "(source tree)"
    return {
        "engines": names,
        "versions": versions,
        "rounds": rounds,
        "seed": seed,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "tokenizer": str(decoder.TOKENIZER_DIR.name),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--seed", type=int, default=2025, help="seed of the generated texts")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    parser.add_argument(
        "--check",
        type=int,
        metavar="N",
        default=None,
        help="instead of timing: check that the engines accept the same texts (N mutated "
        "texts per grammar besides the bench's)",
    )
    parser.add_argument(
        "--set",
        choices=SETS,
        default="standard",
        help="the grammars: standard (JSON, chess, arithmetic, CSV), wide (see "
        "bench/grammars_wide.py) or more (see bench/grammars_more.py)",
    )
    parser.add_argument("--single", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    unknown = set(names) - set(ENGINE_CLASSES)
    if unknown or not names:
        parser.error(f"engines from {', '.join(ENGINE_CLASSES)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    grammars = grammar_set(args.set)
    if args.single is not None:  # one round, in this (fresh) process
        args.single.write_text(json.dumps(one_round(names, args.seed, grammars)))
        return 0
    missing = [n for n in names if not installed(n)]
    for name in missing:
        print(f"{name}: not installed (see bench/README.md), left out", file=sys.stderr)
    names = [n for n in names if n not in missing]
    if not names:
        return 1
    if args.check is not None:
        return check(names, args.seed, args.check, grammars)
    rounds = []
    for number in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "round.json"
            command = [sys.executable, __file__, "--engines", ",".join(names)]
            command += ["--seed", str(args.seed), "--set", args.set, "--single", str(out)]
            started = time.perf_counter()
            subprocess.run(command, check=True)
            rounds.append(json.loads(out.read_text()))
        print(
            f"round {number + 1}/{args.rounds}: {time.perf_counter() - started:.1f} s", flush=True
        )
    summary = summarize(rounds, names, grammars)
    info = metadata(names, args.rounds, args.seed)
    print(
        f"\n{', '.join(f'{n} {v}' for n, v in info['versions'].items())}; tokenizer "
        f"{info['tokenizer']}; {args.rounds} rounds; load {info['load_average'][0]:.2f} "
        f"on {info['cpus']} CPUs; × = / {REFERENCE}\n"
    )
    print(table(summary, names))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"metadata": info, "summary": summary, "rounds": rounds}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
