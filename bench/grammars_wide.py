"""The wide grammar set of ``bench/grammars.py --set wide``: grammars whose masks allow
most of the vocabulary at once, written here for the benchmark.

The standard set's grammars (JSON, chess, arithmetic, CSV) allow few tokens at most
steps. Grammars people write for code, logs, queries and tool calls are different: an
identifier, a free-text message or a quoted string of any characters allows tens of
thousands of tokens at each step, often with a counted repetition (``{1,60}``) whose
every step is a new state, and with optional white space before words (every " word"
token a boundary between two rules). These five are of that kind:

- ``code``: assignments and calls in a C-like language (identifiers after optional
  white space, nested expressions);
- ``log``: log lines (a date, a time, a level, then a message of up to 60 characters
  that runs to the end of the line);
- ``sql``: SELECT statements (identifiers of up to 31 characters, quoted literals of up
  to 40, numbers);
- ``tool``: a tool call's JSON arguments, whose string values are ``char{0,80}`` with
  ``char`` a rule (JSON escapes included);
- ``prose``: words, numbers and punctuation (a letter class repeated without a bound).

jsonmode and xgrammar read the GBNF; llguidance reads llguidance's own translation of
it (``llguidance.gbnf_to_lark``), made when the set is loaded. The texts are fixed,
drawn from the seeded ``rng`` where they vary.
"""

from __future__ import annotations

import random
from collections.abc import Callable

CODE = r"""
root ::= stmt (ws stmt)*
stmt ::= ident ws "=" ws expr ";" | ident ws "(" ws args? ws ")" ";" | "return" ws expr ";"
args ::= expr (ws "," ws expr)*
expr ::= term (ws [-+*/<>] ws term)*
term ::= ident | number | "(" ws expr ws ")" | ident "(" ws args? ws ")"
ident ::= [a-zA-Z_] [a-zA-Z0-9_]*
number ::= [0-9]+ ("." [0-9]+)?
ws ::= [ \t\n]*
"""

LOG = r"""
root ::= entry ("\n" entry){0,9}
entry ::= date "T" time zone " " level " " msg
date ::= [12] [0-9]{3} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])
time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})?
zone ::= "Z" | [+-] [0-9]{2} ":" [0-9]{2}
level ::= "INFO" | "WARN" | "ERROR" | "DEBUG"
msg ::= [a-zA-Z0-9 ,.:_-]{1,60}
"""

SQL = r"""
root ::= select
select ::= "SELECT " cols " FROM " ident where? order? limit? ";"
cols ::= "*" | col (", " col)*
col ::= ident ("." ident)? (" AS " ident)?
ident ::= [a-zA-Z_] [a-zA-Z0-9_]{0,30}
where ::= " WHERE " cond ((" AND " | " OR ") cond)*
cond ::= col " " op " " val
op ::= "=" | "!=" | "<" | ">" | "<=" | ">=" | "LIKE"
val ::= number | "'" [^'\n]{0,40} "'"
number ::= "-"? [0-9]{1,10} ("." [0-9]{1,6})?
order ::= " ORDER BY " col (" ASC" | " DESC")?
limit ::= " LIMIT " [1-9] [0-9]{0,5}
"""

TOOL = r"""
root ::= "<call>" ws "{" ws "\"name\":" ws name "," ws "\"arguments\":" ws args ws "}" ws "</call>"
name ::= "\"get_weather\"" | "\"search\"" | "\"send_email\""
args ::= "{" ws (pair ("," ws pair)*)? ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z_]{1,20} "\""
val ::= "\"" char{0,80} "\"" | num | "true" | "false" | "null"
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
num ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,10})?
ws ::= [ \t\n]{0,4}
"""

PROSE = r"""
root ::= sentence (" " sentence)*
sentence ::= word ((", " | " ") word)* [.!?]
word ::= [A-Za-z]+ ("'" [a-z]+)? | [0-9]+
"""

_NAMES = ["x", "total", "count_2", "buffer", "i", "result", "max_value", "f", "parse_line"]
_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "it",
    "rains",
    "in",
    "Paris",
    "on",
    "Monday",
]


def code_texts(rng: random.Random, count: int = 4, statements: int = 6) -> list[str]:
    def expr(depth: int) -> str:
        if depth > 1 or rng.random() < 0.4:
            return rng.choice([rng.choice(_NAMES), str(rng.randint(0, 999)), "3.25"])
        op = rng.choice(["+", "-", "*", "/", "<"])
        inner = f"{expr(depth + 1)} {op} {expr(depth + 1)}"
        return f"({inner})" if rng.random() < 0.5 else inner

    def stmt() -> str:
        kind = rng.random()
        if kind < 0.6:
            return f"{rng.choice(_NAMES)} = {expr(0)};"
        if kind < 0.85:
            return f"{rng.choice(_NAMES)}({expr(0)}, {expr(1)});"
        return f"return {expr(0)};"

    return ["\n".join(stmt() for _ in range(statements)) for _ in range(count)]


def log_texts(rng: random.Random, count: int = 3, lines: int = 4) -> list[str]:
    def line() -> str:
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8)))
        level = rng.choice(["INFO", "WARN", "ERROR", "DEBUG"])
        return (
            f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T1{rng.randint(0, 9)}:"
            f"{rng.randint(10, 59)}:{rng.randint(10, 59)}.{rng.randint(100, 999)}Z "
            f"{level} {words[:60]}"
        )

    return ["\n".join(line() for _ in range(lines)) for _ in range(count)]


def sql_texts(rng: random.Random) -> list[str]:
    return [
        "SELECT a.id AS x, name FROM users WHERE age >= 21 AND name LIKE 'A%' "
        "ORDER BY name DESC LIMIT 10;",
        "SELECT * FROM orders;",
        "SELECT col1, col2 FROM my_table WHERE x = -3.25 OR y != 'abc, def' LIMIT 5;",
        f"SELECT total FROM t{rng.randint(1, 99)} WHERE total > {rng.randint(1, 9999)};",
    ]


def tool_texts(rng: random.Random) -> list[str]:
    city = rng.choice(["Paris, France", "São Paulo", "Tokyo 東京"])
    return [
        '<call> {"name": "get_weather", "arguments": {"city": "' + city + '", "days": 3, '
        '"metric": true}} </call>',
        '<call>{"name":"search","arguments":{"query":"best \\"pizza\\" near me \\u00e9",'
        '"limit":10}}</call>',
        '<call>\n{"name": "send_email", "arguments": {"to": "ann@example.com", "subject": '
        '"Meeting moved to 3pm", "body": "Hi Ann, the meeting is now at 3pm. Thanks!"}}\n</call>',
    ]


def prose_texts(rng: random.Random, count: int = 3) -> list[str]:
    def sentence() -> str:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 12))]
        words[0] = words[0].capitalize()
        return " ".join(words) + rng.choice(".!?")

    return [" ".join(sentence() for _ in range(4)) for _ in range(count)]


WIDE: dict[str, tuple[str, Callable[[random.Random], list[str]]]] = {
    "code": (CODE, code_texts),
    "log": (LOG, log_texts),
    "sql": (SQL, sql_texts),
    "tool": (TOOL, tool_texts),
    "prose": (PROSE, prose_texts),
}


def lark_of(gbnf: str) -> str:
    """llguidance's own translation of ``gbnf`` (empty when llguidance is missing: its
    engine then reports the grammar refused)."""
    try:
        from llguidance.gbnf_to_lark import gbnf_to_lark
    except ImportError:
        return ""
    translated: str = gbnf_to_lark(gbnf)
    return translated
