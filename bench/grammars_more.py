"""The ``more`` grammar set of ``bench/grammars.py --set more``: seven grammars of the
shapes people hand a GBNF engine, written here for the benchmark, none of them tuned on.

The standard set is JSON, chess, arithmetic and CSV; the wide set (bench/grammars_wide.py)
grammars that allow most of the vocabulary. These seven cover what neither does:

- ``c``: a C subset (typed functions, statements, nested expressions through five rule
  levels, ``//`` and ``/* */`` comments, white space as ``[ \\t\\n]+`` between words);
- ``text``: free text of letters, digits and ASCII punctuation, one class per rule;
- ``cjk``: Japanese text (hiragana, katakana, CJK ideographs and CJK punctuation as
  code-point ranges: multi-byte UTF-8 classes);
- ``list``: a Markdown bullet list, each item any line of text;
- ``jsonl``: JSON values one per line, strings without raw DEL (as llama.cpp's JSON
  grammars write them) and indentation counted as ``[ \\t]{0,20}``;
- ``schema``: a JSON object as a JSON-Schema-to-GBNF converter writes one (required and
  optional properties, a string with ``char{1,40}`` for its ``maxLength``, an integer,
  an array of strings, the converter's ``space`` rule);
- ``pretty``: pretty-printed JSON as llama.cpp's JSON grammars allow it: a white-space
  rule (a space, or a newline and up to 20 blanks of indentation) called after every
  token, strings and numbers rules of their own.

jsonmode and xgrammar read the GBNF; llguidance reads its own translation of it
(``llguidance.gbnf_to_lark``). Every grammar avoids an empty alternative (``x ::= |
...``), which xgrammar's reader refuses. The texts are fixed.
"""

from __future__ import annotations

import random
from collections.abc import Callable

C = r"""
root ::= function+
function ::= type name ws? "(" params? ")" ws? block ws?
type ::= ("int" | "float" | "char" | "void") ws
name ::= [a-zA-Z_] [a-zA-Z_0-9]*
params ::= type name ("," ws? type name)*
block ::= "{" ws? statement* "}"
statement ::= (declaration | assignment | call | ret | loop | branch | comment) ws?
declaration ::= type name ws? "=" ws? expression ";"
assignment ::= name ws? "=" ws? expression ";"
call ::= name "(" args? ")" ";"
ret ::= "return" ws expression ";"
loop ::= "while" ws? "(" condition ")" ws? block
branch ::= "if" ws? "(" condition ")" ws? block (ws? "else" ws? block)?
comment ::= "//" [^\n]* "\n" | "/*" ([^*] | "*" [^/])* "*/"
condition ::= expression ws? ("<=" | "<" | "==" | "!=" | ">=" | ">") ws? expression
expression ::= term (ws? [-+] ws? term)*
term ::= factor (ws? [*/%] ws? factor)*
factor ::= name | number | "-" factor | name "(" args? ")" | "(" ws? expression ws? ")"
args ::= expression ("," ws? expression)*
number ::= [0-9]+ ("." [0-9]+)?
ws ::= [ \t\n]+
"""

TEXT = r"""
root ::= word (gap word)*
word ::= piece+
piece ::= letter | digit | mark
letter ::= [a-zA-Z]
digit ::= [0-9]
mark ::= [!"#$%&'()*+,./:;<=>?@\[\]^_`{|}~-]
gap ::= [ \t\n]
"""

CJK = r"""
root ::= phrase ([ \n] phrase)*
phrase ::= glyph+
glyph ::= kana | kanji | stop
kana ::= [ぁ-ゖァ-ヺー]
kanji ::= [一-龯々]
stop ::= [、。「」・！？]
"""

LIST = r"""
root ::= item+
item ::= ("- " | "* ") line "\n"
line ::= [^\n\r\x0b\x0c]+
"""

JSONL = r"""
root ::= line+
line ::= value "\n"
value ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" indent (pair ("," indent pair)*)? indent "}"
pair ::= string ":" " "? value
array ::= "[" indent (value ("," indent value)*)? indent "]"
string ::= "\"" (plain | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\""
plain ::= [^"\\\x7F\x00-\x1F]
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
indent ::= (" " | "\n" [ \t]{0,20})?
"""

SCHEMA = r"""
root ::= "{" space title-kv "," space year-kv "," space authors-kv ("," space isbn-kv)? "}" space
space ::= (" " | "\n" [ \t]{0,20})?
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" space
integral ::= "0" | [1-9] [0-9]{0,15}
integer ::= "-"? integral space
title-kv ::= "\"title\"" space ":" space title
title ::= "\"" char{1,40} "\"" space
year-kv ::= "\"year\"" space ":" space integer
authors ::= "[" space (string ("," space string)*)? "]" space
authors-kv ::= "\"authors\"" space ":" space authors
isbn-kv ::= "\"isbn\"" space ":" space string
"""


def c_texts(rng: random.Random) -> list[str]:
    bound = rng.randint(5, 20)
    return [
        "int main() {\n  int total = 0;\n  int i = 1;\n  while (i <= "
        f"{bound}) {{\n    total = total + i * 2;\n    i = i + 1;\n  }}\n"
        "  return total;\n}\n",
        "float scale(float x, int n) {\n  // halve it n times\n  if (n > 0) {\n"
        "    return scale(x / 2, n - 1);\n  } else {\n    return x;\n  }\n}\n",
        "void log_it(char c) {\n  /* one call, then done */\n  put(c, -1);\n}\n",
    ]


def text_texts(rng: random.Random) -> list[str]:
    hour = rng.randint(1, 12)
    return [
        "The meeting moved to Room 4B; bring the Q3 numbers (all of them!) and "
        f"a laptop. It starts at {hour}:30pm sharp, so don't be late.",
        'She said "no," then left -- #2 on the list [done] & @home: 100% ok?',
    ]


def cjk_texts(rng: random.Random) -> list[str]:
    return [
        "今日は、とても良い天気です。公園へ行きましょう！",
        "東京タワーの高さは「三百三十三」メートル。\nカタカナとひらがな・漢字",
    ]


def list_texts(rng: random.Random) -> list[str]:
    count = rng.randint(2, 9)
    return [
        f"- buy {count} apples and a loaf of bread\n- call the plumber about the sink\n"
        "* check the café's hours (opens at 8)\n",
        "- one item: résumé ✓, naïve, 東京\n",
    ]


def jsonl_texts(rng: random.Random) -> list[str]:
    age = rng.randint(18, 90)
    return [
        f'{{"name": "Ann", "age": {age}, "tags": ["a", "b\\n"], "ok": true}}\n'
        '[1, -2.5e3, null, "x"]\n"just a string with \\"quotes\\""\n',
        '{\n  "nested": {\n    "deep": [\n      {"k": 0.25}\n    ]\n  },\n  "empty": {}\n}\n',
    ]


PRETTY = r"""
root ::= obj
val ::= obj | arr | str | num | ("true" | "false" | "null") sp
obj ::= "{" sp (pair ("," sp pair)*)? "}" sp
pair ::= str ":" sp val
arr ::= "[" sp (val ("," sp val)*)? "]" sp
str ::= "\"" ([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\"" sp
num ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,16})? sp
sp ::= (" " | "\n" [ \t]{0,20})?
"""


def pretty_texts(rng: random.Random) -> list[str]:
    import json

    doc = {
        "name": "Ann",
        "age": rng.randint(18, 90),
        "tags": ["a", 'b "c"'],
        "address": {"city": "Paris", "zip": "75001", "geo": [48.85, 2.35]},
        "ok": True,
        "note": None,
    }
    orders = {"items": [{"id": 1, "price": 9.5}, {"id": 2, "price": -10.25e2}], "empty": {}}
    return [json.dumps(doc, indent=2), json.dumps(orders, indent=4), json.dumps(doc)]


def schema_texts(rng: random.Random) -> list[str]:
    year = rng.randint(1900, 2024)
    return [
        f'{{"title": "The Art of Computer Programming", "year": {year}, '
        '"authors": ["Donald E. Knuth"], "isbn": "978-0201896831"}',
        '{\n  "title": "Zoë\'s \\"Café\\" guide",\n  "year": -44,\n  "authors": []\n}',
    ]


MORE: dict[str, tuple[str, Callable[[random.Random], list[str]]]] = {
    "c": (C, c_texts),
    "text": (TEXT, text_texts),
    "cjk": (CJK, cjk_texts),
    "list": (LIST, list_texts),
    "jsonl": (JSONL, jsonl_texts),
    "schema": (SCHEMA, schema_texts),
    "pretty": (PRETTY, pretty_texts),
}
