"""Text under a grammar: how ``JsonMode.text`` / ``run_text`` judge each output.

The façade's validation session is one loop over attempts (tier, first request,
re-asks, final error); what differs between "a JSON value that conforms to a schema"
and "a text that matches a grammar" is a small :class:`Judge`: which tier can serve
it, the requests and messages, how one output is read, and whether repair would
have passed. Both judges live in the session (:mod:`jsonmode.session.judges`,
:mod:`jsonmode.session.grammar_judge`); this module names the grammar side's public
helpers.

Post-validation of a text is the grammar itself (``CompiledGrammar.diagnose``), in
every tier: the text is valid when the whole text matches. A text that does not is
a :class:`~jsonmode.errors.SchemaViolationError` (outcome ``schema_violation``): the
grammar is to a text what a schema is to a JSON value, the constraint the output must
satisfy; nothing failed to be *read* (any text reads), so ``OutputParseError``
(outcome ``invalid_json``) would misreport it. Its one issue (path ``$``, keyword
``grammar``) gives the byte offset where the text stops matching, the text just
before it, and what was expected there; the re-ask shows the model the same words.

Cut off at the length limit: a text that ends early (a proper prefix) is truncated,
and so is a matching text that the grammar would let go on (``[0-9]+`` cut at "12"
may have been "1234"); a matching text after which nothing may follow is valid.

Repair: ``strict`` mode never changes a text. ``repair`` mode, only when the text as
it is does not match, tries the two slips that lose nothing the grammar wanted —
surrounding whitespace, and one markdown code fence around the whole reply — and
takes the result when it matches, recorded as an ``extract`` repair. Nothing else is
ever repaired (a grammar says nothing about which edit a model meant).

Rules bound to JSON Schemas (``compile_grammar(..., schemas=...)``) are checked as the
schema's decoder grammar, which enforces every keyword except those listed in the
compiled grammar's ``unenforced``: those (``args:/uniqueItems`` ...) are **not**
post-validated, since a grammar does not say where in the text a bound document
lies. Compile with ``strict=True`` to refuse schemas that have such keywords.
"""

from __future__ import annotations

from jsonmode.session.grammar_judge import (
    TEXT_SCHEMA,
    GrammarJudge,
    as_grammar,
    is_grammar,
    mismatch_message,
)
from jsonmode.session.judges import Judge

__all__ = [
    "TEXT_SCHEMA",
    "GrammarJudge",
    "Judge",
    "as_grammar",
    "is_grammar",
    "mismatch_message",
]
