"""The grammar judge: one model output read as a text under a grammar.

What it checks, how it repairs and what a re-ask says is the contract of
:mod:`jsonmode.texts` (``JsonMode.text`` / ``run_text``), documented there.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jsonmode.backends.base import Backend, ConstrainsGrammar, Request, TakesGrammar
from jsonmode.errors import (
    OutputError,
    OutputTruncatedError,
    SchemaViolationError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.repair.parse import Mode, Parsed
from jsonmode.repair.report import Repair
from jsonmode.result import Attempt, Tier
from jsonmode.schema.core import Schema
from jsonmode.schema.validation import Issue
from jsonmode.session.prompts import Message, first_text_messages, reask_text_messages

if TYPE_CHECKING:
    from jsonmode.decoding.grammars.compiled import CompiledGrammar, Mismatch

__all__ = [
    "TEXT_SCHEMA",
    "GrammarJudge",
    "as_grammar",
    "is_grammar",
    "mismatch_message",
]

#: The schema a grammar request carries (``Request.schema`` is required): "anything".
#: Backends that honour ``Request.grammar`` never read it, and a grammar request is
#: native only for a backend that says it takes that grammar.
TEXT_SCHEMA = Schema.of(True)

#: Characters of the text before the mismatch quoted in its message.
CONTEXT_CHARS = 30


def as_grammar(grammar: object) -> CompiledGrammar:
    """A compiled grammar as given, or GBNF text compiled (cached by its text).

    Raises InvalidGrammarError / UnsupportedSchemaError for GBNF that cannot be
    compiled, UsageError for anything else.
    """
    from jsonmode.decoding.grammars.compiled import CompiledGrammar, compile_grammar

    if isinstance(grammar, CompiledGrammar):
        return grammar
    if isinstance(grammar, str):
        return compile_grammar(grammar)
    raise UsageError(
        f"grammar must be GBNF text or a CompiledGrammar, not {type(grammar).__name__}",
        hint="compile_grammar / compile_regex / compile_choice make one; "
        "for a JSON Schema use run() / generate()",
    )


def is_grammar(target: object) -> bool:
    """Whether ``target``, given where a schema or a grammar may go (``JsonMode.stream``),
    is a grammar: a :class:`~jsonmode.CompiledGrammar`, or text that is not JSON Schema
    text (which starts with ``{``, or is ``true``/``false``), taken as GBNF. Cheap: never
    imports the decoder (no grammar exists before it is imported)."""
    if isinstance(target, str):
        stripped = target.strip()
        return not stripped.startswith("{") and stripped not in ("true", "false")
    module = sys.modules.get("jsonmode.decoding.grammars.compiled")
    return module is not None and isinstance(target, module.CompiledGrammar)


def mismatch_message(text: str, mismatch: Mismatch) -> str:
    """Where ``text`` stops matching, with the text just before it (a model cannot
    count bytes), in one line: ``the text stops matching at byte 7, at "9" after
    "e4 Nz": expected a character in [1-8]``."""
    data = text.encode("utf-8", "surrogatepass")
    before = data[: mismatch.offset].decode("utf-8", "replace")
    shown = before[-CONTEXT_CHARS:]
    after = _quoted(shown, len(shown) < len(before))
    if mismatch.ended:
        where = "(the text is empty)" if not before else f"after {after},"
        return (
            f"the text ends at byte {mismatch.offset} {where} where {mismatch.expected} must follow"
        )
    bad = json.dumps(data[mismatch.offset :].decode("utf-8", "replace")[:1], ensure_ascii=False)
    where = f"its first character {bad}" if not before else f"at {bad} after {after}"
    return f"the text stops matching at byte {mismatch.offset}, {where}: {mismatch.reason}"


def _quoted(text: str, cut: bool) -> str:
    return ("…" if cut else "") + json.dumps(text, ensure_ascii=False)


_FENCE = re.compile(r"\A\s*```[^\n`]*\n(.*?)\n?```\s*\Z", re.DOTALL)


class GrammarJudge:
    """Judges outputs against one compiled grammar (regex, choice ...) in ``mode``."""

    def __init__(self, grammar: CompiledGrammar, mode: Mode) -> None:
        self.grammar = grammar
        self.mode = mode
        self.wanted = f"text matching {_noun(grammar.kind)}"

    def tier(self, tier: Tier, backend: Backend) -> Tier:
        """Constrained when the backend can mask with a grammar (falls back to
        prompted when it cannot compile this one), native when the endpoint takes
        this grammar's kind, else prompted."""
        if tier == "constrained":
            if not isinstance(backend, ConstrainsGrammar):
                return "prompted"
            try:
                backend.constrain_grammar(self.grammar)
            except UnsupportedSchemaError:
                return "prompted"
            return "constrained"
        if tier == "native":
            takes = isinstance(backend, TakesGrammar) and backend.native_grammar(self.grammar)
            return "native" if takes else "prompted"
        return tier

    def request(self, messages: tuple[Message, ...], tier: Tier) -> Request:
        return Request(
            messages,
            TEXT_SCHEMA,
            native=tier == "native",
            constrained=tier == "constrained",
            grammar=self.grammar,
        )

    def first_messages(
        self, messages: tuple[Message, ...], examples: Sequence[tuple[str, Any]]
    ) -> tuple[Message, ...]:
        checked: list[tuple[str, str]] = []
        for index, example in enumerate(examples):
            if not (
                isinstance(example, tuple)
                and len(example) == 2
                and all(isinstance(part, str) for part in example)
            ):
                raise UsageError(f"example {index} must be a (prompt, text) pair of strings")
            mismatch = self.grammar.diagnose(example[1])
            if mismatch is not None:
                raise UsageError(
                    f"example {index} does not match {_noun(self.grammar.kind)}: "
                    f"{mismatch_message(example[1], mismatch)}"
                )
            checked.append(example)
        return first_text_messages(self.grammar, messages, checked)

    def reask_messages(
        self, first: tuple[Message, ...], failed: Attempt, max_attempts: int
    ) -> tuple[Message, ...]:
        return reask_text_messages(first, failed, max_attempts, _noun(self.grammar.kind))

    def read(self, text: str, truncated: bool) -> Parsed:
        try:
            return self._read(text, truncated)
        except OutputError:
            if self.mode == "strict" or truncated:
                raise
            fixed = _unwrapped(text)
            if fixed is None or self.grammar.diagnose(fixed) is not None:
                raise
            return Parsed(fixed, fixed, (Repair("$", "extract", text, fixed),))

    def _read(self, text: str, truncated: bool) -> Parsed:
        mismatch = self.grammar.diagnose(text)
        if mismatch is None:
            if truncated and self._could_go_on(text):
                raise OutputTruncatedError(
                    "output was cut off at the length limit where the text could go on",
                    raw=text,
                    hint="raise max_tokens or ask for a shorter answer",
                )
            return Parsed(text, text)
        where = mismatch_message(text, mismatch)
        if truncated and mismatch.ended:
            raise OutputTruncatedError(
                f"output was cut off at the length limit: {where}",
                raw=text,
                hint="raise max_tokens or ask for a shorter answer",
            )
        noun = _noun(self.grammar.kind)
        raise SchemaViolationError(
            f"output does not match {noun}: {where}",
            raw=text,
            issues=(Issue("$", "grammar", where),),
        )

    def _could_go_on(self, text: str) -> bool:
        from jsonmode.decoding.textcheck import checking  # (decoding loads on demand)

        checker = self.grammar.checker()
        data = text.encode("utf-8", "surrogatepass")
        with checking(self.grammar.options.max_compile_seconds, len(data)):
            state = checker.feed(checker.initial(), data)
            return bool(checker.allowed_bytes(state).any())

    def repairable(self, attempt: Attempt) -> bool:
        if attempt.outcome != "schema_violation" or not attempt.raw:
            return False
        fixed = _unwrapped(attempt.raw)
        return fixed is not None and self.grammar.diagnose(fixed) is None


def _unwrapped(text: str) -> str | None:
    """``text`` without one markdown code fence around it all, else without its
    surrounding whitespace; None when neither changes it."""
    fenced = _FENCE.match(text)
    if fenced is not None:
        return fenced.group(1)
    stripped = text.strip()
    return stripped if stripped != text else None


def _noun(kind: str) -> str:
    """The constraint named for the model and in errors."""
    return {
        "gbnf": "the grammar",
        "regex": "the regular expression",
        "choice": "any of the choices",
        "jsonl": "the JSON Lines format",
        "csv": "the CSV format",
    }.get(kind, f"the {kind} format")
