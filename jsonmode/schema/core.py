"""Schema input → one normalised JSON Schema, plus the validators for it.

Accepted inputs: a pydantic model class, any other type pydantic's ``TypeAdapter``
takes (``list[Model]``, ``Iterable[Model]``, ``Literal[...]``, unions, ``Annotated``
constraints), a JSON Schema dict, JSON Schema text, or a ``pathlib.Path`` to a JSON
Schema file (or to a TypeScript file, ``.ts``: see :meth:`Schema.from_typescript`).

A :class:`Schema` is immutable and thread-safe; building one costs a schema check
(milliseconds for large schemas), so :meth:`Schema.of` caches them. Building one also
resolves every reference inside the document (:mod:`jsonmode.schema.refs`): a
reference to a file, a URL or anything else outside it is refused before any I/O,
and ``json_schema`` holds in-document references as JSON pointers from the root.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import re
import threading
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema.exceptions
import pydantic
import referencing.exceptions
from jsonschema.protocols import Validator as _JsonschemaValidator

from jsonmode import limits
from jsonmode._json import decode_message
from jsonmode.budget import checkpoint, ensure_deadline
from jsonmode.errors import InvalidSchemaError, UnsupportedSchemaError, UsageError
from jsonmode.schema.fastcheck import compile_check
from jsonmode.schema.formats import FormatUndecided, bounded
from jsonmode.schema.formats import budget as format_budget
from jsonmode.schema.linear import without_memo
from jsonmode.schema.lint import lint
from jsonmode.schema.patterns import PatternUndecidedError
from jsonmode.schema.patterns import compiled as compiled_pattern
from jsonmode.schema.refs import analyse, schema_positions
from jsonmode.schema.spelling import SchemaWarning
from jsonmode.schema.validation import (
    MAX_ISSUES,
    Issue,
    checked_class,
    explain_schema_error,
    format_path,
    validation_issues,
    validator_of,
)

__all__ = ["Checked", "Schema"]

_CACHE_LIMIT = 256
_cache: dict[object, Schema] = {}
_cache_lock = threading.Lock()
_NAME_SAFE = re.compile(r"[^A-Za-z0-9_-]+")
# Checks that ran out of their budget (schema/patterns.py, schema/formats.py): never a pass.
UNDECIDED = (PatternUndecidedError, FormatUndecided)
_TOO_DEEP = Issue(
    "$", "depth", "the value nests too deeply to be validated: flatten it or shorten it"
)


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome of checking one JSON value.

    Attributes:
        issues: every violation; empty when the value conforms.
        value: the value for the caller — a model instance (or typed value) for a
            pydantic model or Python type, else the JSON value itself. ``None``
            when there are issues.
    """

    issues: tuple[Issue, ...]
    value: Any = None

    @property
    def ok(self) -> bool:
        return not self.issues


@dataclass(frozen=True, eq=False)
class Schema:
    """A normalised schema: the JSON Schema, its name and its validators.

    Build with :meth:`Schema.of`. Thread-safe; never mutated after construction.
    ``json_schema`` must be treated as read-only.
    """

    json_schema: dict[str, Any] | bool
    name: str
    adapter: pydantic.TypeAdapter[Any] | None = field(default=None, repr=False)
    _validator_class: type[_JsonschemaValidator] = field(init=False, repr=False, compare=False)
    # The validator, made on first use (compiling a schema for decoding seldom needs it).
    _validator: _JsonschemaValidator | None = field(
        init=False, default=None, repr=False, compare=False
    )
    _fast: Callable[[Any], bool] | None = field(init=False, repr=False, compare=False)
    # json_schema as JSON text (json.dumps, keys in their order), once known.
    _text: str | None = field(init=False, default=None, repr=False, compare=False)
    # References to nowhere in definitions nothing uses (schema.refs): lint warnings.
    _dangling: tuple[tuple[tuple[str | int, ...], str, str], ...] = field(
        init=False, default=(), repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Read under the compile's deadline, or (parse, validate, Schema.of) one of
        # its own: the metaschema check, the references and the compiled check stop
        # there with a BudgetExceededError.
        with ensure_deadline():
            self._read()

    def _read(self) -> None:
        """Check, resolve and compile the schema (see ``__post_init__``)."""
        declared = self.json_schema.get("$schema") if isinstance(self.json_schema, dict) else None
        found = _patterns(self.json_schema, declared if isinstance(declared, str) else None)
        cls = self._checked_class(self.json_schema)
        if self.json_schema is False:
            raise UnsupportedSchemaError("the schema `false` accepts no value at all")
        dialect = cls.ID_OF(cls.META_SCHEMA)
        try:
            # Every reference resolved inside the document, before any validation.
            references = analyse(self.json_schema, dialect)
        except RecursionError:  # pragma: no cover - the metaschema check recurses first
            raise UnsupportedSchemaError("the schema nests too deeply") from None
        for parts, target in references.unchecked:
            # (Reached by a reference where the metaschema does not look: checked
            # here, against the document's dialect unless it declares its own.)
            self._checked_class({"$schema": dialect, **target}, at=parts)
        object.__setattr__(self, "_dangling", references.dangling)
        if references.document is not self.json_schema:
            object.__setattr__(self, "json_schema", references.document)
            cls = self._checked_class(references.document)
        if references.as_written:
            # (Dynamic references: a verdict may depend on the dynamic scope, so
            # verdicts are not shared between places; see schema.verdicts.)
            cls = without_memo(cls)
        object.__setattr__(self, "_validator_class", cls)
        fast = compile_check(self.json_schema, bounded(cls.FORMAT_CHECKER))
        object.__setattr__(self, "_fast", fast)
        if fast is None:
            # (The compiled check compiles every pattern it meets; without it, they
            # are compiled now, under the deadline, never while validating.)
            for pattern in found:
                compiled_pattern(pattern)

    @staticmethod
    def _checked_class(
        schema: dict[str, Any] | bool, at: tuple[str | int, ...] = ()
    ) -> type[_JsonschemaValidator]:
        """The validator class for ``schema``, once ``schema`` is checked against its
        metaschema (see :func:`~jsonmode.schema.validation.checked_class`); ``at``:
        where ``schema`` sits in the document (errors name the whole location)."""
        try:
            return checked_class(schema)
        except jsonschema.exceptions.SchemaError as exc:
            problem = explain_schema_error(exc)
            location = problem.location
            if at:
                inner = "" if location == "/" else location
                location = "/" + "/".join(str(part) for part in at) + inner
            where = "the root" if location == "/" else location
            raise InvalidSchemaError(
                f"not a valid JSON Schema: at {where}, {problem.message}",
                schema_path=location,
                hint=problem.hint,
            ) from None
        except RecursionError:  # (jsonschema checks a schema recursively)
            raise UnsupportedSchemaError(
                "the schema nests too deeply to be checked against its metaschema",
                hint="flatten the schema with $defs and $ref",
            ) from None

    @classmethod
    def of(cls, schema: object, *, name: str | None = None) -> Schema:
        """Normalise ``schema`` (see module docstring); cached for hashable inputs and dicts.

        A ``pathlib.Path`` is read at every call (and cached by its text); each
        error about it names the file. A path ending in ``.ts`` is TypeScript
        (:meth:`from_typescript`): ``name`` names its root type (None: the one type the
        file exports).

        Raises:
            InvalidSchemaError: not a valid JSON Schema (the message names the JSON path
                of the bad keyword and what was expected; ``schema_path`` holds the
                path), not JSON (with the line and column), JSON that is not an object
                or a boolean, or not a type pydantic knows.
            InvalidSchemaError: also a reference that does not resolve inside the
                document (files and URLs are never read: see :mod:`jsonmode.schema.refs`),
                or a reference cycle that never descends into the value. (A pointer to
                nowhere inside a definition nothing uses is a :attr:`warnings` record
                instead: nothing ever looks it up.)
            UnsupportedSchemaError: a schema that accepts nothing.
            BudgetExceededError: JSON text over :data:`~jsonmode.limits.MAX_SCHEMA_CHARS`
                (a file is read no further), a ``pattern`` or ``patternProperties`` name
                over :data:`~jsonmode.limits.MAX_PATTERN_CHARS` (the message names its
                location), or reading the schema past the current compile deadline
                (outside a compile, one of
                :data:`~jsonmode.budget.DEFAULT_SECONDS`).
        """
        if isinstance(schema, Schema):
            return schema if name is None or name == schema.name else schema.renamed(name)
        if isinstance(schema, pathlib.Path):
            return cls._from_file(schema, name)
        return cls._cached(schema, name)

    @classmethod
    def _cached(cls, schema: object, name: str | None, file: pathlib.Path | None = None) -> Schema:
        key = _cache_key(schema, name)
        if key is not None:
            with _cache_lock:
                hit = _cache.get(key)
            if hit is not None:
                return hit
        text = key[1] if isinstance(key, tuple) and key[0] == "json" else None
        built = cls._build(schema, name, text, file)
        if key is not None:
            with _cache_lock:
                if len(_cache) >= _CACHE_LIMIT:
                    _cache.pop(next(iter(_cache)))
                _cache[key] = built
        return built

    @classmethod
    def _from_file(cls, path: pathlib.Path, name: str | None) -> Schema:
        """The schema in a file, read now (cached by its text, never by its path: the
        file may change). Every error names the file."""
        cap = limits.MAX_SCHEMA_CHARS
        try:
            with path.open(encoding="utf-8") as handle:
                text = handle.read(cap + 1)  # (never more than the cap allows)
        except OSError as exc:
            raise InvalidSchemaError(
                f"cannot read schema file {path}: {exc.strerror or exc}"
            ) from None
        except UnicodeDecodeError as exc:
            raise InvalidSchemaError(
                f"schema file {path} is not UTF-8 text (at byte {exc.start})"
            ) from None
        if len(text) > cap:
            limits.check_schema_size(len(text), f"schema file {path}", read=True)
        if path.suffix == ".ts":
            try:
                return cls.from_typescript(text, name)
            except (InvalidSchemaError, UnsupportedSchemaError) as exc:
                if type(exc) not in (InvalidSchemaError, UnsupportedSchemaError):
                    raise
                raise type(exc)(f"schema file {path}: {exc.message}", hint=exc.hint) from None
        return cls._cached(text, name, path)

    @classmethod
    def from_typescript(cls, source: str, root: str | None = None) -> Schema:
        """The TypeScript type ``root`` of ``source`` as a schema named ``root``
        (:mod:`jsonmode.schema.typescript` says what converts and what raises).

        ``root`` None: ``source`` must export exactly one type, the root. A
        ``pathlib.Path`` ending in ``.ts`` given to :meth:`of` comes here, with ``name``
        as the root. Needs the ``typescript`` extra (else a UsageError saying
        ``pip install "jsonmode[typescript]"``); ``import jsonmode`` never imports it.
        Cost: a tree-sitter parse and a walk of the types reached, then :meth:`of` on
        the JSON Schema (cached by it).

        Raises:
            InvalidSchemaError: a syntax error, an unknown type or root, a source that
                does not name its root (line and column in the message where there is one).
            UnsupportedSchemaError: TypeScript with no JSON Schema form (conditional or
                mapped types, functions, imports ...), with line and column.
            BudgetExceededError: a source over the limits (size, declarations, nesting).
        """
        from jsonmode.schema import typescript  # (lazy: an optional extra)

        converted, name = typescript.convert(source, root)
        return cls._cached(converted, name)

    @classmethod
    def _build(
        cls,
        schema: object,
        name: str | None,
        text: str | None = None,
        file: pathlib.Path | None = None,
    ) -> Schema:
        """``text``: ``schema`` (a dict or bool) as JSON already, when the caller has it;
        ``file``: where the text ``schema`` was read from (named in every error)."""
        if isinstance(schema, str):
            source = "schema text" if file is None else f"schema file {file}"
            limits.check_schema_size(len(schema), source)
            try:
                schema = json.loads(schema)
            except RecursionError:
                raise InvalidSchemaError(f"{source} nests too deeply") from None
            except json.JSONDecodeError as exc:
                where = f"line {exc.lineno}, column {exc.colno}"
                problem = decode_message(exc)
                raise InvalidSchemaError(f"{source} is not JSON: {problem} at {where}") from None
            except ValueError as exc:  # an integer too long to convert
                raise InvalidSchemaError(f"{source} is not JSON: {exc}") from None
            if not isinstance(schema, (dict, bool)):
                raise InvalidSchemaError(
                    f"{'schema' if file is None else source} must be a JSON object "
                    f"(a JSON Schema) or true/false, not {_json_kind(schema)}"
                )
        if isinstance(schema, (dict, bool)):
            try:
                if text is None:
                    text = json.dumps(schema, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as exc:
                raise InvalidSchemaError(f"schema is not JSON-serialisable: {exc}") from None
            limits.check_schema_size(len(text))
            # A private deep copy, as JSON reads it: the caller may mutate their dict later.
            owned = json.loads(text)
            title = owned.get("title") if isinstance(owned, dict) else None
            try:
                built = cls(owned, _safe_name(name or (title if isinstance(title, str) else "")))
                if built.json_schema is owned:
                    # (json.dumps wrote ``text``: it is its own reading's text.)
                    object.__setattr__(built, "_text", text)
                return built
            except (InvalidSchemaError, UnsupportedSchemaError) as exc:
                if file is None or type(exc) not in (InvalidSchemaError, UnsupportedSchemaError):
                    raise
                raise type(exc)(
                    f"schema file {file}: {exc.message}",
                    schema_path=exc.schema_path,
                    hint=exc.hint,
                ) from None
        if isinstance(schema, type) or _is_typing_form(schema):
            try:
                # Any: pydantic's own parameter type differs between releases.
                form: Any = schema
                adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(form)
                generated = adapter.json_schema()
            except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
                raise InvalidSchemaError(
                    f"cannot build a JSON Schema for {schema!r}: {exc}"
                ) from None
            default_name = _type_name(schema) or str(generated.get("title", ""))
            return cls(generated, _safe_name(name or default_name), adapter)
        hint = "pass a pydantic model, a Python type, a JSON Schema dict or JSON text"
        if isinstance(schema, (list, tuple)):
            hint += "; for a list of items, pass list[Item] or {'type': 'array', 'items': ...}"
        raise UsageError(f"unsupported schema input of type {type(schema).__name__}", hint=hint)

    def renamed(self, name: str) -> Schema:
        """The same schema under another name (the name is sent to native APIs)."""
        return Schema(self.json_schema, _safe_name(name), self.adapter)

    def json_text(self) -> str:
        """``json_schema`` as ``json.dumps`` writes it (keys in their order: property
        order is decoding order). Cost: one ``json.dumps`` on first use, nothing when
        the schema was given as a dict and reading it changed nothing."""
        text = self._text
        if text is None:
            text = json.dumps(self.json_schema)
            object.__setattr__(self, "_text", text)
        return text

    @property
    def validator(self) -> _JsonschemaValidator:
        """The jsonschema validator (draft per ``$schema``, format checking on)."""
        validator = self._validator
        if validator is None:
            # (Thread-safe: two threads may each make one; either is the same.) A
            # registry that holds nothing beyond the document: no lookup does I/O.
            validator = validator_of(self._validator_class, self.json_schema)
            object.__setattr__(self, "_validator", validator)
        return validator

    @property
    def is_typed(self) -> bool:
        """True when checking returns a pydantic instance / typed value, not plain JSON."""
        return self.adapter is not None

    def conforms(self, value: Any) -> bool:
        """Whether ``value`` satisfies the JSON Schema (no explanation; cheap when compiled).

        Its format checks share one CPU budget (:mod:`jsonmode.schema.formats`)."""
        with format_budget():
            try:
                return self._conforms(value)
            except UNDECIDED:
                return False

    def _conforms(self, value: Any) -> bool:
        if self._fast is not None:
            try:
                return self._fast(value)
            except RecursionError:
                pass  # (jsonschema may still manage: it is asked next)
        try:
            return bool(self.validator.is_valid(value))
        except referencing.exceptions.Unresolvable as exc:
            raise InvalidSchemaError(f"schema reference cannot be resolved: {exc}") from None
        except RecursionError:
            return False  # see issues(): too deep to validate counts as not conforming

    def issues(self, value: Any) -> list[Issue]:
        """Every JSON Schema violation of ``value`` (empty when it conforms).

        A compiled yes/no check answers first when the schema allows it (see
        :mod:`jsonmode.schema.fastcheck`); jsonschema explains every failure. A value
        nested too deeply for the validators' recursion (a very deep instance of a
        recursive schema) does not conform: one issue with keyword ``depth`` says so.
        The format checks of one call share one CPU budget (:mod:`jsonmode.schema.formats`);
        a pattern or format check that cannot be decided in its budget makes the whole
        value not conform, with one issue saying which (never a pass, even under
        ``not`` or ``anyOf``).
        """
        with format_budget():
            try:
                return self._issues(value)
            except PatternUndecidedError as exc:
                return [Issue("$", exc.keyword, exc.issue_message())]
            except FormatUndecided as exc:
                return [Issue("$", "format", f"{exc} (treated as not conforming)")]

    def _issues(self, value: Any) -> list[Issue]:
        if self._fast is not None:
            try:
                if self._fast(value):
                    return []
            except (RecursionError, *UNDECIDED):
                pass  # jsonschema answers (naming the undecided keyword), or: too deep
        try:
            return validation_issues(self.validator, value)
        except referencing.exceptions.Unresolvable as exc:
            raise InvalidSchemaError(f"schema reference cannot be resolved: {exc}") from None
        except RecursionError:
            return [_TOO_DEEP]

    def check(self, value: Any, *, context: Any = None) -> Checked:
        """Validate with jsonschema, then (for Python types) with pydantic.

        Pydantic runs only on values that already conform to the JSON Schema, so its
        lax conversions never hide a schema violation; its own validators (custom
        ``field_validator`` s) still report through ``Issue(keyword="model")``.

        Args:
            value: a JSON value.
            context: pydantic's validation context, as pydantic defines it for
                ``TypeAdapter.validate_json(..., context=...)``: validators read it as
                ``info.context``. Unused by JSON Schema inputs.

        Lazy values: pydantic validates the items of an ``Iterable[...]`` (or
        ``Generator[...]``) only while the caller iterates them. ``check`` iterates
        every one now, so an item's validator error is an issue here (``$[2].age``,
        keyword ``model``), never an exception later. Such a value is handed back as
        a ``list`` at the top level; inside a model or container, as an iterator over
        its items (already validated: the type pydantic gives there and its serializer
        expects). This costs one walk of the typed value, only for schemas with such a
        part; issues beyond :data:`~jsonmode.schema.validation.MAX_ISSUES` are not collected.

        Thread-safe. Raises only what the validators raise for a broken schema
        (:class:`InvalidSchemaError` for an unresolvable reference).
        """
        issues = self.issues(value)
        if issues:
            return Checked(tuple(issues))
        if self.adapter is None:
            return Checked((), value)
        try:
            typed = self.adapter.validate_json(json.dumps(value), context=context)
        except pydantic.ValidationError as exc:
            return Checked(_model_issues(exc, ()))
        if not self._lazy:
            return Checked((), typed)
        problems: list[Issue] = []
        try:
            typed = _materialise(typed, (), problems)
        except RecursionError:
            return Checked((_TOO_DEEP,))
        if problems:
            if len(problems) > MAX_ISSUES:
                problems[MAX_ISSUES:] = [_MORE_ISSUES]
            return Checked(tuple(problems))
        return Checked((), list(typed) if isinstance(typed, Iterator) else typed)

    @functools.cached_property
    def _lazy(self) -> bool:
        """Whether pydantic may hand back a part unvalidated until iterated: a
        ``generator`` anywhere in the adapter's core schema (``Iterable[...]``)."""
        if self.adapter is None:
            return False
        stack: list[Any] = [self.adapter.core_schema]
        seen: set[int] = set()
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, dict):
                if node.get("type") == "generator":
                    return True
                stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
            elif isinstance(node, list):
                stack.extend(v for v in node if isinstance(v, (dict, list)))
        return False

    @functools.cached_property
    def warnings(self) -> tuple[SchemaWarning, ...]:
        """What in the schema is probably a mistake, though legal JSON Schema (the
        schema lint, :mod:`jsonmode.schema.lint`), in document order: every keyword its
        draft does not know, which JSON Schema ignores (``"requried"`` requires
        nothing), with "did you mean 'required'?" when a keyword is close, or what to
        write instead when it is another draft's; a keyword of another draft that
        this one ignores (``dependencies`` in Draft 2020-12); a ``required`` name that
        ``additionalProperties: false`` forbids; contradictory bounds (``minimum``
        above ``maximum``, ``minLength`` above ``maxLength`` ...); an empty ``enum``;
        a ``pattern`` (or ``patternProperties`` name) that matches no string; a
        reference to nowhere in a definition nothing uses. Each record has the
        keyword's JSON pointer (``location``), the ``keyword``, a one-line ``message``
        naming the fix and a ``severity``. Empty for pydantic-generated schemas;
        ``x-`` extensions and annotations (``title``, ``description``, ``examples``,
        ``$comment`` ...) are known. See :mod:`jsonmode.schema.spelling` for what counts
        as known, and :mod:`jsonmode.schema.lint` for the bounds (at most
        :data:`~jsonmode.schema.lint.MAX_WARNINGS` records, plus one counting the rest).

        Cost: one pass over the schema's keys, on first use (then kept). Never raises.
        """
        cls = self._validator_class
        dialect = str(cls.ID_OF(cls.META_SCHEMA))
        return lint(self.json_schema, dialect, self._dangling)

    @functools.cached_property
    def prompt_form(self) -> str:
        """The schema as compact JSON for a prompt, without pydantic's derived titles."""
        return json.dumps(_strip_derived_titles(self.json_schema), separators=(",", ":"))


_MORE_ISSUES = Issue(
    "$", "limit", f"more issues were found; only the first {MAX_ISSUES} are listed"
)


def _model_issues(
    exc: pydantic.ValidationError, prefix: tuple[str | int, ...]
) -> tuple[Issue, ...]:
    """Pydantic's errors as issues (keyword ``model``), at most MAX_ISSUES of them."""
    errors = exc.errors(include_url=False)
    issues = [
        Issue(format_path((*prefix, *err["loc"])), "model", err["msg"])
        for err in errors[:MAX_ISSUES]
    ]
    return (*issues, _MORE_ISSUES) if len(errors) > MAX_ISSUES else tuple(issues)


def _materialise(value: Any, loc: tuple[str | int, ...], problems: list[Issue]) -> Any:
    """``value`` with every lazily validated part (pydantic's ``ValidatorIterator``)
    iterated to the end; each failing item's errors are appended to ``problems``
    (at most one past MAX_ISSUES: then iteration stops). Such a part becomes an
    iterator over its validated items; models, dataclasses, lists and dicts are
    updated in place (pydantic built them for this call), tuples rebuilt."""
    if isinstance(value, Iterator):
        items: list[Any] = []
        index = 0
        while len(problems) <= MAX_ISSUES:
            try:
                item = next(value)
            except StopIteration:
                break
            except pydantic.ValidationError as exc:
                problems.extend(_model_issues(exc, loc))
            else:
                items.append(_materialise(item, (*loc, index), problems))
            index += 1
        return iter(items)
    if isinstance(value, pydantic.BaseModel) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        fields = getattr(value, "__dict__", None)
        if fields is None:
            return value
        names = _json_names(value)
        for name, item in list(fields.items()):
            fixed = _materialise(item, (*loc, names.get(name, name)), problems)
            if fixed is not item:
                fields[name] = fixed
        return value
    if isinstance(value, list):
        for index, item in enumerate(value):
            fixed = _materialise(item, (*loc, index), problems)
            if fixed is not item:
                value[index] = fixed
        return value
    if isinstance(value, dict):
        for key, item in list(value.items()):
            fixed = _materialise(item, (*loc, str(key)), problems)
            if fixed is not item:
                value[key] = fixed
        return value
    if type(value) is tuple:
        fixed_items = tuple(_materialise(item, (*loc, i), problems) for i, item in enumerate(value))
        unchanged = all(a is b for a, b in zip(fixed_items, value, strict=True))
        return value if unchanged else fixed_items
    return value


def _json_names(value: Any) -> dict[str, str]:
    """A model's field names → the names its JSON uses (aliases), as pydantic's error
    locations give them."""
    if not isinstance(value, pydantic.BaseModel):
        return {}
    names: dict[str, str] = {}
    for name, info in type(value).model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        if alias:
            names[name] = alias
    return names


def _json_kind(value: object) -> str:
    """How JSON names the kind of a value read from JSON text ("an array")."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "a number"


def _type_name(obj: object) -> str:
    """``Person`` for a class, ``list_Person`` for ``list[Person]``."""
    args = typing.get_args(obj)
    origin = typing.get_origin(obj)
    if origin is None or not args:
        return str(getattr(obj, "__name__", ""))
    parts = [_type_name(origin)] + [_type_name(arg) or repr(arg) for arg in args]
    return "_".join(part for part in parts if part)


def _is_typing_form(obj: object) -> bool:
    return type(obj).__module__ in ("typing", "types", "typing_extensions") or hasattr(
        obj, "__origin__"
    )


def _patterns(schema: Any, dialect: str | None) -> list[str]:
    """Every ``pattern`` and ``patternProperties`` name at the schema's positions
    (:func:`~jsonmode.schema.refs.schema_positions`: where the metaschema checks a
    schema), each checked against :data:`~jsonmode.limits.MAX_PATTERN_CHARS` (the
    error names its location) before anything reads it. One pass over the schema's
    keys, checking the deadline per subschema; tolerant of what the metaschema check,
    next, refuses."""
    found: list[str] = []
    for parts, node, _ in schema_positions(schema, dialect):
        checkpoint()
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            _check_length(pattern, parts, "pattern")
            found.append(pattern)
        named = node.get("patternProperties")
        if isinstance(named, dict):
            for name in named:
                if isinstance(name, str):
                    _check_length(name, parts, "patternProperties")
                    found.append(name)
    return found


def _check_length(pattern: str, parts: tuple[str | int, ...], keyword: str) -> None:
    """:func:`~jsonmode.limits.check_pattern` naming where ``keyword`` of the subschema
    at ``parts`` is (the pointer made only for a pattern over the cap)."""
    if len(pattern) > limits.MAX_PATTERN_CHARS:
        where = "".join(f"/{part}" for part in (*parts, keyword))
        limits.check_pattern(pattern, where)


def _cache_key(schema: object, name: str | None) -> object | None:
    if isinstance(schema, (dict, bool)):
        try:
            # Key order matters (properties order is the decoding order): no sort_keys.
            return ("json", json.dumps(schema, allow_nan=False), name)
        except (TypeError, ValueError, RecursionError):
            return None
    if isinstance(schema, str):
        return ("text", schema, name)
    try:
        hash(schema)
    except TypeError:
        return None
    return ("type", schema, name)


def _safe_name(name: str) -> str:
    cleaned = _NAME_SAFE.sub("_", name).strip("_")[:64]
    return cleaned or "response"


def _strip_derived_titles(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip_derived_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {
                prop: _drop_title_if_derived(prop, _strip_derived_titles(sub))
                for prop, sub in value.items()
            }
        elif key in ("enum", "const", "examples", "default"):
            out[key] = value
        else:
            out[key] = _strip_derived_titles(value)
    return out


def _drop_title_if_derived(prop: str, sub: Any) -> Any:
    if isinstance(sub, dict) and sub.get("title") == prop.replace("_", " ").title():
        return {k: v for k, v in sub.items() if k != "title"}
    return sub
