"""TypeScript source as tree-sitter reads it: the top-level declarations by name, and
the reading of names, strings and numbers (for :mod:`jsonmode.schema.ts_types`).

tree-sitter and its TypeScript grammar (the ``typescript`` extra) are imported on the
first :func:`parse`, never by ``import jsonmode``. Syntax errors (tree-sitter's ERROR
and MISSING nodes) are :class:`~jsonmode.errors.InvalidSchemaError` with line and
column; more than :data:`MAX_DECLARATIONS` declarations is a
:class:`~jsonmode.errors.BudgetExceededError`. Each call has its own parser:
thread-safe.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jsonmode.budget import checkpoint
from jsonmode.errors import (
    BudgetExceededError,
    InvalidSchemaError,
    SchemaError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.schema.jsdoc import Doc, where

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = [
    "MAX_DECLARATIONS",
    "Declaration",
    "Module",
    "flattened",
    "is_undefined",
    "kids",
    "language",
    "name_of",
    "number_value",
    "parse",
    "string_value",
]

#: Most top-level declarations read from one source.
MAX_DECLARATIONS = 10_000
_CHUNK = 64 << 10
_MAX_ERROR_STEPS = 1_000_000
_DECLARATIONS = frozenset(("interface_declaration", "type_alias_declaration", "enum_declaration"))
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


@functools.cache
def language() -> Any:
    try:
        import tree_sitter
        import tree_sitter_typescript
    except ImportError as exc:
        raise UsageError(
            f"TypeScript schemas need the typescript extra ({exc.name} is missing)",
            hint='pip install "jsonmode[typescript]"',
        ) from None
    return tree_sitter.Language(tree_sitter_typescript.language_typescript())


def parser() -> Any:
    grammar = language()
    import tree_sitter

    return tree_sitter.Parser(grammar)


def _position(node: Node, data: bytes) -> tuple[int, int]:
    """(0-based row, 1-based column in characters) where ``node`` starts."""
    row, byte_column = node.start_point
    start = node.start_byte - byte_column
    return row, len(data[start : node.start_byte].decode("utf-8", "replace")) + 1


def _text(node: Node, data: bytes) -> bytes:
    """``node``'s source bytes: a slice of ``data``. (Never ``Node.text``: on a tree parsed
    from a callable, tree-sitter reads it through that callable again, a 64 KiB chunk a
    call, which made a 20 000-member union's conversion spend seconds copying.)"""
    return data[node.start_byte : node.end_byte]


def _snippet(node: Node, data: bytes) -> str:
    text = _text(node, data).decode("utf-8", "replace").split("\n", 1)[0].strip()
    return text if len(text) <= 60 else text[:57] + "..."


def _syntax_error(root: Node, data: bytes) -> None:
    """Raise InvalidSchemaError at the first ERROR or MISSING node under ``root``
    (found by a cursor: one child at a time, at most ``_MAX_ERROR_STEPS`` moves, then
    the node reached, which lies inside the error)."""
    cursor = root.walk()
    for step in range(_MAX_ERROR_STEPS):
        if step % 1024 == 0:
            checkpoint()
        current = cursor.node
        if current is None or current.is_error or current.is_missing:
            break
        if current.has_error:
            if not cursor.goto_first_child():
                break
        elif not cursor.goto_next_sibling():
            break
    node = cursor.node or root
    at = where(*_position(node, data))
    if node.is_missing:
        raise InvalidSchemaError(f"{at}: TypeScript syntax error: missing `{node.type}`")
    raise InvalidSchemaError(f"{at}: TypeScript syntax error at `{_snippet(node, data)}`")


def kids(node: Node) -> list[Node]:
    """``node``'s named children, comments left out."""
    return [child for child in node.named_children if child.type != "comment"]


@dataclass(frozen=True, slots=True)
class Declaration:
    name: str
    node: Node
    doc: Doc | None
    exported: bool


class Module:
    """The top-level declarations of one source, by name."""

    def __init__(self, root: Node, data: bytes) -> None:
        self.data = data
        self.types: dict[str, Declaration] = {}
        self.foreign: dict[str, tuple[Node, str]] = {}
        self.exported_names: set[str] = set()
        doc: Doc | None = None
        for child in root.named_children:
            checkpoint()
            if child.type == "comment":
                doc = self.doc(child)
                continue
            node, exported = child, False
            if child.type in ("export_statement", "ambient_declaration"):
                inner = [kid for kid in kids(child) if kid.type in _DECLARATIONS]
                if inner:
                    node, exported = inner[0], child.type == "export_statement"
                elif child.type == "export_statement":
                    self._exports(child)
            if node.type in _DECLARATIONS:
                self._declare(node, doc, exported)
            elif node.type == "import_statement":
                self._foreign(node, "is imported from another file")
            elif node.type in ("class_declaration", "abstract_class_declaration"):
                self._foreign(node, "is a class")
            doc = None

    def text(self, node: Node) -> bytes:
        """``node``'s source bytes (a slice of the source; cost: its length)."""
        return _text(node, self.data)

    def doc(self, comment: Node) -> Doc | None:
        text = self.text(comment).decode("utf-8", "replace")
        if not text.startswith("/**") or text.startswith("/**/"):
            return None
        return Doc(text, *_position(comment, self.data))

    def where(self, node: Node) -> str:
        return where(*_position(node, self.data))

    def fail(
        self, node: Node, message: str, error: type[SchemaError] = UnsupportedSchemaError
    ) -> SchemaError:
        """The error to raise about ``node``: ``line L, column C: message: `text```."""
        return error(f"{self.where(node)}: {message}: `{_snippet(node, self.data)}`")

    def _declare(self, node: Node, doc: Doc | None, exported: bool) -> None:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node).decode() if name_node is not None else ""
        if name in self.types:
            first = self.where(self.types[name].node)
            raise self.fail(
                node, f"`{name}` is declared again (first at {first}); merging is not supported"
            )
        if len(self.types) >= MAX_DECLARATIONS:
            raise BudgetExceededError(
                "TypeScript declarations",
                MAX_DECLARATIONS,
                doing="reading the TypeScript source",
                hint="convert a smaller source, or raise "
                "jsonmode.schema.ts_source.MAX_DECLARATIONS",
            )
        self.types[name] = Declaration(name, node, doc, exported)

    def _exports(self, statement: Node) -> None:
        """``export { A, B as C }``: the local names exported (or imported, with ``from``)."""
        imported = statement.child_by_field_name("source") is not None
        for clause in kids(statement):
            if clause.type != "export_clause":
                continue
            for spec in kids(clause):
                local = spec.child_by_field_name("name")
                if local is None:
                    continue
                name = self.text(local).decode()
                if imported:
                    self.foreign.setdefault(name, (spec, "is imported from another file"))
                else:
                    self.exported_names.add(name)

    def _foreign(self, node: Node, what: str) -> None:
        names = [node.child_by_field_name("name")]
        if node.type == "import_statement":
            names = [kid for kid in _descendants(node) if kid.type == "identifier"]
        for name in names:
            if name is not None:
                self.foreign.setdefault(self.text(name).decode(), (name, what))

    def root_name(self, root: str | None) -> str:
        """The root type's name (see :func:`convert`)."""
        if root is not None:
            if root in self.types:
                return root
            if root in self.foreign:
                node, what = self.foreign[root]
                raise self.fail(node, f"the root type `{root}` {what}")
            raise InvalidSchemaError(
                f"no type named `{root}` is declared in the TypeScript source "
                f"(declared: {self._names(self.types)})"
            )
        exported = [
            name
            for name, decl in self.types.items()
            if decl.exported or name in self.exported_names
        ]
        if len(exported) == 1:
            return exported[0]
        problem = "exports no type" if not exported else f"exports {len(exported)} types"
        raise InvalidSchemaError(
            f"name the root type: the TypeScript source {problem} "
            f"(declared: {self._names(exported or list(self.types))})",
            hint="Schema.from_typescript(source, root=NAME), Schema.of(path, name=NAME), "
            "or --type NAME",
        )

    @staticmethod
    def _names(names: Any) -> str:
        listed = sorted(names)
        text = ", ".join(listed[:20]) + (
            f" and {len(listed) - 20} more" if len(listed) > 20 else ""
        )
        return text or "none"


def _descendants(node: Node) -> list[Node]:
    """Every named node under ``node`` (an import statement: small and shallow)."""
    found: list[Node] = []
    stack = list(node.named_children)
    while stack:
        kid = stack.pop()
        found.append(kid)
        stack.extend(kid.named_children)
    return found


def flattened(node: Node, kind: str) -> list[Node]:
    """The members of a union or intersection ``node`` (nested ones and parentheses
    flattened, without recursion)."""
    members: list[Node] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if item.type == "parenthesized_type":
            inner = kids(item)
            if inner and inner[0].type == kind:
                stack.append(inner[0])
                continue
        if item.type == kind:
            stack.extend(reversed(kids(item)))
        else:
            members.append(item)
    return members


def is_undefined(node: Node) -> bool:
    inner = kids(node) if node.type == "literal_type" else []
    return bool(inner) and inner[0].type == "undefined"


def name_of(node: Node, module: Module) -> str:
    """A property or enum member name: an identifier, a string or a number."""
    if node.type == "string":
        return string_value(node, module)
    if node.type == "number":
        number = number_value(node, module)
        return str(number)
    if node.type in ("property_identifier", "identifier", "type_identifier"):
        return module.text(node).decode()
    raise module.fail(node, "computed property names need evaluation")


def string_value(node: Node, module: Module) -> str:
    """The value of a string literal (escape sequences read as JavaScript reads them)."""
    parts: list[str] = []
    for kid in node.named_children:
        text = module.text(kid).decode("utf-8", "replace")
        if kid.type == "escape_sequence":
            parts.append(_unescape(text))
        elif kid.type == "string_fragment":
            parts.append(text)
    value = "".join(parts)
    try:  # (surrogate pairs written as two \u escapes)
        return value.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise module.fail(node, "a string with a lone surrogate", InvalidSchemaError) from None


def _unescape(sequence: str) -> str:
    letter = sequence[1:2]
    if letter in _ESCAPES and len(sequence) == 2:
        return _ESCAPES[letter]
    if letter in ("x", "u"):
        return chr(int(sequence[2:].strip("{}"), 16))
    if letter in ("\r", "\n", "\u2028", "\u2029"):
        return ""  # (a line continuation)
    return sequence[1:]


def number_value(node: Node, module: Module) -> int | float:
    text = module.text(node).decode().replace("_", "")
    if text.endswith("n"):
        raise module.fail(node, "bigint literals have no JSON value")
    try:
        if text[:2].lower() in ("0x", "0o", "0b"):
            return int(text, 0)
        value = float(text)
    except ValueError:
        raise module.fail(node, "a number TypeScript does not read", InvalidSchemaError) from None
    if not math.isfinite(value):
        raise module.fail(node, "a number too large for JSON", InvalidSchemaError)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def parse(source: str) -> Module:
    """``source`` parsed, its declarations read (see the module docstring)."""
    try:
        data = source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidSchemaError(
            f"TypeScript source is not valid text (a lone surrogate at character {exc.start})"
        ) from None

    parsing = [True]

    def read(offset: int, _: Any) -> bytes:
        # (tree-sitter asks for the text as it goes: the deadline stops the parse. The
        # tree keeps this callable as its source, and Node.text would call it again
        # later, unchecked for errors by tree-sitter 0.26 (a crash): the converter reads
        # node text from slices (_text), and once the parse is over this only reads.)
        if parsing[0]:
            checkpoint()
        return data[offset : offset + _CHUNK]

    try:
        tree = parser().parse(read)
    finally:
        parsing[0] = False
    if tree.root_node.has_error:
        _syntax_error(tree.root_node, data)
    return Module(tree.root_node, data)
