"""Built-in grammars for two line-oriented formats: JSON Lines and CSV.

Both compile to the same intermediate form, automata, caches and mask engine as
:func:`~jsonmode.decoding.grammars.compiled.compile_grammar`, and return a
:class:`~jsonmode.decoding.grammars.compiled.CompiledGrammar` (``accepts``, ``diagnose``,
``matcher``, ``unenforced``), so they can be used wherever a grammar can.

- :func:`compile_jsonl`: documents conforming to a JSON Schema, one per line.
- :func:`compile_csv`: a header line, then rows whose cells follow an object schema's
  scalar properties (RFC 4180 quoting).

Compiled constraints are immutable, thread-safe and cached like compiled schemas (by
the schema's JSON, the format's arguments, the vocabulary fingerprint and options).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonschema

from jsonmode import regex as rx
from jsonmode.budget import checkpoint
from jsonmode.decoding.compile.compiler import CompileOptions
from jsonmode.decoding.compile.format_patterns import FORMAT_EXACTNESS, format_dfa
from jsonmode.decoding.compile.numbers import Bounds, integer_range, number_dfa
from jsonmode.decoding.grammars.compiled import (
    CompiledGrammar,
    bind_schemas,
    compiled_constraint,
    read_schema,
)
from jsonmode.decoding.ir import EMPTY, Call, Expr, Grammar, Lex, Lit, Rep, alt, seq
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError, UsageError
from jsonmode.schema.core import UNDECIDED, Schema
from jsonmode.schema.keywords import ANNOTATIONS
from jsonmode.schema.pointer import MISSING, resolve_local_ref

if TYPE_CHECKING:
    from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["compile_csv", "compile_jsonl"]


# -- JSON Lines -----------------------------------------------------------------------------


def compile_jsonl(
    schema: object,
    vocabulary: Vocabulary | None = None,
    *,
    min_lines: int = 1,
    max_lines: int | None = None,
    **options: Any,
) -> CompiledGrammar:
    """JSON Lines: ``min_lines`` to ``max_lines`` JSON documents, each conforming to
    ``schema``, one per line (kind ``"jsonl"``).

    The text is ``doc ("\\n" doc)* "\\n"?``: documents separated by one ``"\\n"``, a
    final ``"\\n"`` allowed but not required, no blank lines, no ``"\\r"``. Each line is
    exactly what ``compile_schema(schema)`` accepts (its one optional leading space
    included: ``json.loads`` reads such a line, and SentencePiece tokenizers like to
    start a piece with it), so every line parses on its own. ``min_lines=0`` also
    accepts the empty text.

    Documents must stay on one line, so ``whitespace="flexible"`` (which allows line
    breaks between tokens) is refused; the ``"standard"`` policy never writes one, and
    a JSON string cannot hold a raw line break.

    Args:
        schema: anything :meth:`Schema.of <jsonmode.schema.Schema.of>` takes.
        vocabulary: the tokenizer's vocabulary, for masks (None: ``accepts`` only).
        min_lines: the fewest documents (default 1; 0 allows the empty text).
        max_lines: the most documents (None: unbounded).
        **options: :class:`~jsonmode.decoding.compile.compiler.CompileOptions` fields.

    Returns:
        A :class:`CompiledGrammar` whose ``schemas`` is ``{"doc": schema}`` and whose
        ``unenforced`` lists the schema's unenforced keywords as ``doc:<pointer>``
        (when it is not empty, post-validate each line against the schema).

    Cost: compiling the schema (as ``compile_schema``) plus a few automaton states per
    allowed line when ``max_lines`` is set (a bound of many thousands of lines can
    exceed ``max_rule_states``: BudgetExceededError). Cached.

    Raises:
        UsageError: bad counts, an unknown option, or ``whitespace="flexible"``.
        InvalidSchemaError, UnsupportedSchemaError, BudgetExceededError: as
            ``compile_schema`` for the schema.
    """
    low, high = _counts("min_lines", min_lines, "max_lines", max_lines)
    if options.get("whitespace", "standard") == "flexible":
        raise UsageError(
            "JSON Lines documents must stay on one line: whitespace='flexible' allows "
            "line breaks inside a document",
            hint="leave whitespace at 'standard' (at most one space after ',' and ':')",
        )
    spec = read_schema(schema, options)
    schema_json = json.dumps(spec.json_schema)  # not sorted: property order is decoding order
    bound = {"doc": spec}

    def build(settings: CompileOptions) -> tuple[Grammar, tuple[str, ...]]:
        more = None if high is None else high - 1
        lines = seq(
            Call("doc"),
            Rep(seq(Lit(b"\n"), Call("doc")), max(low - 1, 0), more),
            Rep(Lit(b"\n"), 0, 1),
        )
        root = alt(EMPTY, lines) if low == 0 else lines
        return bind_schemas(Grammar("root", {"root": root}), bound, settings)

    count = _describe_count(low, high, "document")
    source = (
        f"JSON Lines: {count}, one per line (no line breaks inside a document), "
        f"each conforming to this JSON Schema:\n{schema_json}"
    )
    key = ("jsonl", schema_json, low, high)
    return compiled_constraint(key, build, vocabulary, options, "jsonl", source, bound)


# -- CSV ------------------------------------------------------------------------------------


def compile_csv(
    row_schema: object,
    vocabulary: Vocabulary | None = None,
    *,
    header: bool = True,
    delimiter: str = ",",
    min_rows: int = 1,
    max_rows: int | None = None,
    **options: Any,
) -> CompiledGrammar:
    """CSV whose rows follow an object schema's scalar properties (kind ``"csv"``).

    The text is a header line (when ``header``: the property names, in the schema's
    order), then ``min_rows`` to ``max_rows`` rows with one cell per property, in the
    same order. Lines end with ``"\\n"`` or ``"\\r\\n"``; the last line's end is
    optional. Cells (RFC 4180):

    - a string is bare text without the delimiter, ``"``, CR or LF, or a quoted field
      (``"..."``, a ``"`` inside written ``""``; anything else, line breaks included,
      may be inside). Its value's ``enum``/``const``, ``pattern``, ``minLength``/
      ``maxLength`` and exact ``format`` are enforced on the value (either spelling);
    - integers and numbers are bare, in JSON number syntax (integers without a
      fraction), within their bounds (a bounded number takes the spellings
      ``compile_schema`` allows it: an exponent only as ``repr`` writes one);
      booleans are ``true``/``false``; all unquoted;
    - an empty cell stands for a missing optional property, a ``null`` of a nullable
      one, or the empty string where the string allows it. With a single column an
      empty cell is written ``""`` (as ``csv.writer`` does), since an empty line is
      skipped by most readers.

    What a cell cannot express exactly (``multipleOf``, a non-exact ``format``, a
    length bound above ``max_repeat``, keywords beyond these) is listed in
    ``unenforced`` as a JSON pointer into the row schema (``strict=True``: raised).

    Args:
        row_schema: an object schema (a pydantic model, a dict, ...) whose properties
            are scalars: string, integer, number, boolean, null, enums/consts of those,
            and ``anyOf``/``oneOf``/``$ref`` of those.
        vocabulary: the tokenizer's vocabulary, for masks (None: ``accepts`` only).
        header: start with the header line.
        delimiter: one character, not ``"``, CR, LF, a letter, a digit, ``.``, ``+``
            or ``-`` (those could be part of a cell).
        min_rows: the fewest rows (default 1; 0 allows a header alone, or the empty
            text without a header).
        max_rows: the most rows (None: unbounded).
        **options: :class:`~jsonmode.decoding.compile.compiler.CompileOptions` fields (``strict``,
            ``max_repeat``, ``max_rule_states``, ``max_compile_seconds`` apply).

    Returns:
        A :class:`CompiledGrammar` whose ``schemas`` is ``{"row": row_schema}``.

    Cost: an automaton per distinct cell (a string pattern costs what it costs in a
    schema), a few states per allowed row when ``max_rows`` is set. Cached.

    Raises:
        UnsupportedSchemaError: not an object schema, no properties, a property that
            is not scalar (the message names it), a required name without a property.
        UsageError: a bad delimiter, bad counts, an unknown option.
        InvalidSchemaError, BudgetExceededError: as ``compile_schema``.
    """
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise UsageError(f"a CSV delimiter is one character, not {delimiter!r}")
    if delimiter in '"\r\n.+-' or delimiter.isalnum():
        raise UsageError(
            f"{delimiter!r} cannot be a CSV delimiter here: it may be part of a cell",
            hint='use ",", ";", "\\t" or "|"',
        )
    if not isinstance(header, bool):
        raise UsageError(f"header is True or False, not {header!r}")
    low, high = _counts("min_rows", min_rows, "max_rows", max_rows)
    spec = read_schema(row_schema, options)
    schema_json = json.dumps(spec.json_schema)
    bound = {"row": spec}

    def build(settings: CompileOptions) -> tuple[Grammar, tuple[str, ...]]:
        builder = _CsvBuilder(spec, settings, delimiter)
        return builder.grammar(header, low, high), tuple(builder.unenforced)

    names = _columns(spec.json_schema)
    head = delimiter.join(_spell(name, delimiter) for name in names)
    count = _describe_count(low, high, "row")
    source = (
        f"CSV (RFC 4180 quoting, delimiter {json.dumps(delimiter)}, a line per record): "
        + (f"the header line {json.dumps(head)}, then " if header else "")
        + f"{count} with one cell per column {json.dumps(names, ensure_ascii=False)}; "
        "an empty cell is a missing or null value; text with the delimiter, a quote or "
        'a line break is quoted ("..." with "" for a quote); numbers as in JSON; '
        "booleans true/false. Each row, as an object, conforms to this JSON Schema:\n" + schema_json
    )
    key = ("csv", schema_json, header, delimiter, low, high)
    return compiled_constraint(key, build, vocabulary, options, "csv", source, bound)


# -- helpers --------------------------------------------------------------------------------

_EOL = alt(Lit(b"\n"), Lit(b"\r\n"))
_QUOTE = ord('"')
_MAX_CODE_POINT = 0x10FFFF
# Keywords that only constrain objects or arrays: no-ops on a scalar cell.
_STRUCTURAL = frozenset(
    {
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "unevaluatedItems",
    }
)
_IGNORED = ANNOTATIONS | {"$id", "$anchor", "nullable"}
_CELL_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "anyOf",
        "oneOf",
    }
)
_ROW_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
_SCALARS = ("string", "integer", "number", "boolean", "null")
_CHECKED_FORMATS = frozenset(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)


def _counts(low_name: str, low: Any, high_name: str, high: Any) -> tuple[int, int | None]:
    """Validated count bounds."""
    if not isinstance(low, int) or isinstance(low, bool) or low < 0:
        raise UsageError(f"{low_name} is a count (0 or more), not {low!r}")
    if high is not None and (not isinstance(high, int) or isinstance(high, bool) or high < 1):
        raise UsageError(f"{high_name} is a count (1 or more) or None, not {high!r}")
    if high is not None and high < low:
        raise UsageError(f"{high_name}={high} is below {low_name}={low}")
    return low, high


def _describe_count(low: int, high: int | None, noun: str) -> str:
    if high is None:
        return f"{low} or more {noun}s" if low != 1 else f"one or more {noun}s"
    if low == high:
        return f"exactly {low} {noun}" + ("" if low == 1 else "s")
    return f"{low} to {high} {noun}s"


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _spell(text: str, delimiter: str) -> str:
    """``text`` as a CSV cell (bare when it can be, as csv.writer writes it)."""
    if text and not any(char in text for char in (delimiter, '"', "\r", "\n")):
        return text
    return '"' + text.replace('"', '""') + '"'


def _row_object(schema: Any) -> dict[str, Any]:
    """The row schema as an object schema (a top-level reference followed)."""
    node = schema
    for _ in range(32):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
            break
        target = resolve_local_ref(schema, node["$ref"])
        if target is MISSING:
            raise UnsupportedSchemaError(f"reference {node['$ref']!r} is not a local pointer")
        node = target
    declared = node.get("type") if isinstance(node, dict) else None
    if (
        not isinstance(node, dict)
        or declared not in ("object", ["object"], None)
        or not isinstance(node.get("properties"), dict)
        or not node["properties"]
    ):
        raise UnsupportedSchemaError(
            "a CSV row schema is an object schema with properties (one per column)",
            hint="pass a pydantic model, or a dict with 'properties'",
        )
    return node


def _columns(schema: Any) -> list[str]:
    return list(_row_object(schema)["properties"])


def _bare_dfa(delimiter: str) -> rx.CharDFA:
    """Any text without the delimiter, ``"``, CR or LF."""
    edges: list[tuple[int, int, int]] = []
    low = 0
    for hole in sorted({ord(delimiter), _QUOTE, 0x0A, 0x0D}):
        if low < hole:
            edges.append((low, hole - 1, 0))
        low = hole + 1
    edges.append((low, _MAX_CODE_POINT, 0))
    return rx.CharDFA(0, (True,), (tuple(edges),))


def _doubled_quotes(dfa: rx.CharDFA) -> rx.CharDFA:
    """The body of a quoted CSV field whose value ``dfa`` accepts: each ``"`` of the
    value written ``""``, anything else as itself."""
    rows: list[tuple[tuple[int, int, int], ...]] = []
    extra: list[tuple[tuple[int, int, int], ...]] = []
    for row in dfa.edges:
        out: list[tuple[int, int, int]] = []
        for lo, hi, dst in row:
            if not lo <= _QUOTE <= hi:
                out.append((lo, hi, dst))
                continue
            middle = dfa.n_states + len(extra)
            extra.append(((_QUOTE, _QUOTE, dst),))
            if lo < _QUOTE:
                out.append((lo, _QUOTE - 1, dst))
            out.append((_QUOTE, _QUOTE, middle))
            if hi > _QUOTE:
                out.append((_QUOTE + 1, hi, dst))
        rows.append(tuple(out))
    accepting = dfa.accepting + (False,) * len(extra)
    return rx.CharDFA(dfa.start, accepting, tuple(rows + extra))


def _lex(what: str, dfa: rx.CharDFA) -> Lex:
    """A lexeme for ``dfa``. Lexemes compare (and are cached process-wide) by label,
    so the label carries a digest of the automaton itself."""
    dfa = rx.minimize(dfa)
    digest = hashlib.sha256(dfa.to_text().encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Lex(f"csv {what} #{digest}", rx.utf8_byte_dfa(dfa))


def _accepts_empty(dfa: rx.CharDFA) -> bool:
    return dfa.accepting[dfa.start]


@dataclass
class _Cell:
    """A column's cell: its non-empty spellings, and whether it may be empty."""

    options: list[Expr] = field(default_factory=list)
    empty: bool = False

    def add(self, other: _Cell) -> None:
        """Take ``other``'s spellings too (each once: branches that reach the same
        cell, ``anyOf: [$ref d, $ref d]``, must not double the options per level)."""
        known = set(self.options)
        self.options.extend(option for option in other.options if option not in known)
        self.empty = self.empty or other.empty


@dataclass
class _CsvBuilder:
    spec: Schema
    options: CompileOptions
    delimiter: str
    unenforced: list[str] = field(default_factory=list)
    rules: dict[str, Expr] = field(default_factory=dict)
    legacy: bool = False  # draft 3/4: boolean exclusiveMinimum/exclusiveMaximum
    # Cells by their resolved schema: a subschema that branches reach many ways is
    # built once (a chain of anyOf [$ref d_i+1, $ref d_i+1] was 2^depth builds).
    cells: dict[str, _Cell] = field(default_factory=dict)

    def __post_init__(self) -> None:
        root = self.spec.json_schema
        declared = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        self.legacy = "draft-04" in declared or "draft-03" in declared

    def skip(self, path: str, keyword: str) -> None:
        location = f"{path}/{keyword}"
        if self.options.strict:
            raise UnsupportedSchemaError(
                f"{keyword!r} cannot be enforced while decoding CSV", schema_path=location
            )
        if location not in self.unenforced:
            self.unenforced.append(location)

    # -- the whole text -------------------------------------------------------------------

    def grammar(self, header: bool, low: int, high: int | None) -> Grammar:
        row_schema = _row_object(self.spec.json_schema)
        properties: dict[str, Any] = row_schema["properties"]
        required = [n for n in row_schema.get("required", []) if isinstance(n, str)]
        for name in required:
            if name not in properties:
                raise UnsupportedSchemaError(
                    f"the required property {name!r} has no column (it is not in 'properties')",
                    schema_path="/required",
                )
        for keyword in sorted(set(row_schema) - _ROW_KEYWORDS - _IGNORED):
            self.skip("", keyword)
        single = len(properties) == 1
        self.rules["root"] = EMPTY  # (first in the printed grammar)
        cells: list[Expr] = []
        heads: list[Expr] = []
        for index, (name, sub) in enumerate(properties.items()):
            checkpoint()
            path = f"/properties/{_escape(name)}"
            cell = self.cell(sub, path, name)
            if name not in required:
                cell.empty = True
            cells.append(self.column(f"cell{index}_{name}", cell, single))
            title = self.strings([name])
            heads.append(alt(*title.options, *self.empty(single) if title.empty else ()))
        sep = Lit(self.delimiter.encode("utf-8"))

        def line(items: list[Expr]) -> Expr:
            parts: list[Expr] = []
            for index, item in enumerate(items):
                parts.extend((sep, item) if index else (item,))
            return seq(*parts)

        self.rules["row"] = line(cells)
        final = Rep(_EOL, 0, 1)
        if header:
            self.rules["header"] = line(heads)
            root: Expr = seq(Call("header"), Rep(seq(_EOL, Call("row")), low, high), final)
        else:
            more = None if high is None else high - 1
            rows = seq(Call("row"), Rep(seq(_EOL, Call("row")), max(low - 1, 0), more), final)
            root = alt(EMPTY, rows) if low == 0 else rows
        self.rules["root"] = root
        return Grammar("root", dict(self.rules))

    def column(self, hint: str, cell: _Cell, single: bool) -> Expr:
        """A cell as a rule of its own (its non-empty spellings; one automaton walk per
        cell for the mask engine), with the empty cell beside the call."""
        name = re.sub(r"[^A-Za-z0-9_]+", "_", hint).strip("_")
        base, counter = name, 1
        while name in self.rules:
            counter += 1
            name = f"{base}_{counter}"
        options: list[Expr] = []
        if cell.options:
            self.rules[name] = alt(*cell.options)
            options.append(Call(name))
        if cell.empty:
            options += self.empty(single)
        return alt(*options)

    @staticmethod
    def empty(single: bool) -> list[Expr]:
        """An empty field, or an empty quoted one; alone on its line an empty field
        would be an empty line, which readers skip: then only the quoted form."""
        return [Lit(b'""')] if single else [EMPTY, Lit(b'""')]

    # -- one cell -------------------------------------------------------------------------

    def cell(self, schema: Any, path: str, name: str) -> _Cell:
        """The cell for ``schema`` (a property's subschema) at ``path``.

        Raises:
            UnsupportedSchemaError: a value that may be an object or an array.
        """
        checkpoint()
        schema = self.resolve(schema, path)
        if schema is False:
            return _Cell()
        key = json.dumps(schema, sort_keys=True, default=repr)
        known = self.cells.get(key)
        if known is None:
            # (the first path to reach a cell names what it leaves unenforced)
            known = self.cells[key] = self.new_cell(schema, path, name)
        return _Cell(list(known.options), known.empty)

    def new_cell(self, schema: Any, path: str, name: str) -> _Cell:
        """:meth:`cell` for a resolved schema not seen before."""
        if (
            schema is True
            or not isinstance(schema, dict)
            or not ({"type", "enum", "const", "anyOf", "oneOf"} & set(schema))
        ):
            raise UnsupportedSchemaError(
                f"the CSV column {name!r} may hold any JSON value: a cell holds a scalar",
                schema_path=path,
                hint="give it a type: string, integer, number or boolean (or an enum)",
            )
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                return self.branches(schema, keyword, path, name)
        types = self.types(schema, path, name)
        for keyword in sorted(set(schema) - _CELL_KEYWORDS - _STRUCTURAL - _IGNORED):
            self.skip(path, keyword)
        if "multipleOf" in schema and {"integer", "number"} & set(types):
            self.skip(path, "multipleOf")
        if "enum" in schema or "const" in schema:
            return self.constants(schema, path, name)
        out = _Cell()
        for kind in types:
            if kind == "null":
                out.empty = True
            elif kind == "boolean":
                out.options += [Lit(b"true"), Lit(b"false")]
            elif kind == "integer":
                if "number" not in types:
                    out.options += self.integer(schema)
            elif kind == "number":
                out.options += self.number(schema, path)
            else:
                out.add(self.text(self.string_dfa(schema, path)))
        return out

    def types(self, schema: dict[str, Any], path: str, name: str) -> list[str]:
        declared = schema.get("type")
        if declared is None:
            return []  # (an enum or a const: the values say)
        types = [declared] if isinstance(declared, str) else list(declared)
        for kind in types:
            if kind not in _SCALARS:
                raise UnsupportedSchemaError(
                    f"the CSV column {name!r} may hold {'an' if kind[0] in 'aeiou' else 'a'} "
                    f"{kind}: a cell holds a scalar (string, integer, number, boolean)",
                    schema_path=f"{path}/type",
                )
        return types

    def resolve(self, schema: Any, path: str) -> Any:
        """``schema`` with ``$ref`` followed and ``allOf`` merged (shallowly: a keyword
        two parts both set differently is left to post-validation)."""
        for _ in range(32):
            if not isinstance(schema, dict):
                return schema
            if isinstance(schema.get("$ref"), str):
                target = resolve_local_ref(self.spec.json_schema, schema["$ref"])
                if target is MISSING:
                    raise UnsupportedSchemaError(
                        f"reference {schema['$ref']!r} is not a local pointer", schema_path=path
                    )
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = self.merge(target, rest, path)
            elif isinstance(schema.get("allOf"), list):
                merged: Any = {k: v for k, v in schema.items() if k != "allOf"}
                for part in schema["allOf"]:
                    merged = self.merge(merged, part, path)
                schema = merged
            else:
                return schema
        raise UnsupportedSchemaError("a reference cycle without structure", schema_path=path)

    def merge(self, one: Any, two: Any, path: str) -> Any:
        if one is False or two is False:
            return False
        if one is True or one == {}:
            return two
        if two is True or two == {}:
            return one
        if not isinstance(one, dict) or not isinstance(two, dict):
            return one
        out = dict(one)
        for keyword, value in two.items():
            if keyword in out and out[keyword] != value and keyword not in _IGNORED:
                self.skip(path, keyword)  # the first part's value is enforced
            else:
                out.setdefault(keyword, value)
        return out

    def branches(self, schema: dict[str, Any], keyword: str, path: str, name: str) -> _Cell:
        rest = {k: v for k, v in schema.items() if k != keyword}
        out = _Cell()
        kinds: list[Any] = []
        for index, branch in enumerate(schema[keyword]):
            where = f"{path}/{keyword}/{index}"
            branch = self.resolve(branch, where)
            if branch is False:
                continue
            combined = self.merge(branch if branch is not True else {}, rest, where)
            kinds.append(combined.get("type") if isinstance(combined, dict) else None)
            out.add(self.cell(combined, where, name))
        distinct = all(isinstance(k, str) for k in kinds) and len(set(kinds)) == len(kinds)
        if keyword == "oneOf" and not distinct:
            self.skip(path, "oneOf")  # enforced as anyOf
        return out

    def constants(self, schema: dict[str, Any], path: str, name: str) -> _Cell:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        validator = self.spec.validator.evolve(schema=rest)
        out = _Cell()
        strings: list[str] = []
        for count, value in enumerate(values):
            if not count & 255:
                checkpoint()
            if isinstance(value, (dict, list)):
                raise UnsupportedSchemaError(
                    f"the CSV column {name!r} may hold {json.dumps(value)[:40]}: "
                    "a cell holds a scalar",
                    schema_path=f"{path}/{'const' if 'const' in schema else 'enum'}",
                )
            try:
                if not validator.is_valid(value):
                    continue
            except UNDECIDED:
                continue  # never generate a value whose check cannot be decided
            if value is None:
                out.empty = True
            elif isinstance(value, str):
                strings.append(value)
            elif isinstance(value, bool):
                out.options.append(Lit(json.dumps(value).encode()))
            elif isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
                out.options.append(Lit(str(int(value)).encode()))
                if isinstance(value, float):
                    out.options.append(Lit(json.dumps(value).encode()))
            else:
                out.options.append(Lit(json.dumps(value).encode()))
        if strings:
            out.add(self.strings(strings))
        return out

    # -- scalars --------------------------------------------------------------------------

    def integer(self, schema: dict[str, Any]) -> list[Expr]:
        low, high = integer_range(Bounds.of(schema, legacy=self.legacy))
        if low is not None and high is not None and low > high:
            return []
        pattern = f"^{rx.integer_range_pattern(low, high)}$"
        label = f"integer[{'' if low is None else low},{'' if high is None else high}]"
        return [_lex(label, rx.compile_pattern(pattern))]

    def number(self, schema: dict[str, Any], path: str) -> list[Expr]:
        bounds = Bounds.of(schema, legacy=self.legacy)
        dfa = None if bounds.unbounded else number_dfa(bounds)
        if dfa is None:
            if not bounds.unbounded:
                for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                    if keyword in schema:
                        self.skip(path, keyword)
            number = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
            dfa = rx.compile_pattern(f"^{number}$")
        if dfa.is_empty():
            return []
        return [_lex(f"number{bounds.label()}", dfa)]

    def string_dfa(self, schema: dict[str, Any], path: str) -> rx.CharDFA:
        """The values a string cell may hold (``pattern``, ``format``, length bounds)."""
        low = int(schema.get("minLength", 0))
        high = None if schema.get("maxLength") is None else int(schema["maxLength"])
        if high is not None and high > self.options.max_repeat:
            self.skip(path, "maxLength")
            high = None
        if low > self.options.max_repeat:
            self.skip(path, "minLength")
            low = 0
        shape = rx.any_char_dfa(0, None)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            shape = self.narrowed(shape, lambda: rx.compile_pattern(pattern), path, "pattern")
        fmt = schema.get("format")
        if isinstance(fmt, str):
            known = format_dfa(fmt)
            if fmt in _CHECKED_FORMATS and FORMAT_EXACTNESS.get(fmt) != "exact":
                self.skip(path, "format")
            if known is not None:
                shape = self.narrowed(shape, lambda: known, path, "format")
        if low or high is not None:
            try:
                shape = rx.intersect(shape, rx.any_char_dfa(low, high))
            except BudgetExceededError:
                raise
            except UnsupportedSchemaError as exc:  # over the regex engine's state budget
                for keyword in ("minLength", "maxLength"):
                    if keyword in schema:
                        if self.options.strict:
                            raise UnsupportedSchemaError(
                                str(exc), schema_path=f"{path}/{keyword}"
                            ) from None
                        self.skip(path, keyword)
        return shape

    def narrowed(
        self, shape: rx.CharDFA, build: Callable[[], rx.CharDFA], path: str, keyword: str
    ) -> rx.CharDFA:
        """``shape`` intersected with ``build()``, or ``shape`` (and ``keyword`` left to
        post-validation) when that is unsupported or over the regex engine's budget."""
        try:
            return rx.intersect(shape, build())
        except BudgetExceededError:
            raise  # the compile's deadline: not this keyword's fault
        except UnsupportedSchemaError as exc:
            if self.options.strict:
                raise UnsupportedSchemaError(str(exc), schema_path=f"{path}/{keyword}") from None
            self.skip(path, keyword)
            return shape

    def strings(self, values: list[str]) -> _Cell:
        """A cell that is one of ``values``: bare where it can be, or quoted."""
        out = _Cell(empty="" in values)
        for value in values:
            if not value:
                continue
            if _spell(value, self.delimiter) == value:
                out.options.append(Lit(value.encode("utf-8")))
            quoted = '"' + value.replace('"', '""') + '"'
            out.options.append(Lit(quoted.encode("utf-8")))
        return out

    def text(self, values: rx.CharDFA) -> _Cell:
        """A text cell whose value ``values`` accepts: bare or quoted, non-empty (the
        empty value is the empty cell)."""
        out = _Cell(empty=_accepts_empty(values))
        nonempty = rx.intersect(values, rx.any_char_dfa(1, None))
        if nonempty.is_empty():
            return out
        bare = rx.intersect(nonempty, _bare_dfa(self.delimiter))
        if not bare.is_empty():
            out.options.append(_lex(f"bare text (delimiter {ord(self.delimiter)})", bare))
        body = _lex("quoted text", _doubled_quotes(nonempty))
        out.options.append(seq(Lit(b'"'), body, Lit(b'"')))
        return out
