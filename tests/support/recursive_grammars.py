"""Two small recursive GBNF grammars the checker and the parse-stack tests walk, with
the bytes their texts are drawn from: arithmetic (left recursion through repetition,
parentheses) and nested JSON-like values (two mutually nested containers)."""

from __future__ import annotations

ARITHMETIC = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
"""
NESTED = r"""
root ::= value
value ::= "[" (value ("," value)*)? "]" | "{" (pair ("," pair)*)? "}" | [0-9]
pair ::= "k" ":" value
"""
ALPHABETS = {ARITHMETIC: b"0(()+-*", NESTED: b"[[]]{{}},k:1"}
