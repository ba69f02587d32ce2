"""GBNF shapes the budget tests share, as Python source for a child process (the child
builds the text itself: hundreds of KB are not passed on a command line)."""

from __future__ import annotations

#: 20 000 rules each calling into a shared 500-rule recursive chain (611 KB of GBNF):
#: a Python expression that evaluates to the grammar's text.
SHARED_CHAIN = r"""(
    "root ::= c0\n"
    + "".join(f'c{i} ::= "x" s0 c{i + 1} | "y"\n' for i in range(19999))
    + 'c19999 ::= "x" s0\n'
    + "".join(f's{j} ::= "b" s{j + 1} "c" | "d"\n' for j in range(499))
    + 's499 ::= "e" s0 | "f"\n'
)"""
