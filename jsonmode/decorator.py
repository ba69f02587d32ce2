"""``@jsonmode.structured``: a typed function whose body is a prompt.

::

    @jsonmode.structured(backend="openai/gpt-4o-mini", mode="repair")
    def extract(text: str) -> Person:
        \"\"\"Extract the person mentioned in: {text}\"\"\"

    person = extract("Ada Lovelace, 36")        # a validated Person

The return annotation is the schema (a pydantic model or anything pydantic's
``TypeAdapter`` takes). The prompt is the function's return value when the body
returns a string (or a list of chat messages); when the body returns ``None`` the
docstring is the prompt, formatted with ``str.format`` and the call's arguments
(defaults applied; write ``{{`` and ``}}`` for literal braces). Every call goes
through one :class:`~jsonmode.JsonMode` built when the function is decorated, so
tiers, modes, retries, repairs and events are the façade's, and so are the errors
(``AttemptsExhaustedError`` carries every attempt).

``async def`` functions get an async wrapper that awaits the façade's async API.
The wrapper keeps the function's name, docstring, annotations and signature.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import string
import textwrap
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from jsonmode.errors import UsageError
from jsonmode.facade import JsonMode
from jsonmode.repair.parse import Mode
from jsonmode.schema.core import Schema
from jsonmode.session.prompts import Message

__all__ = ["structured"]

P = ParamSpec("P")
R = TypeVar("R")


def structured(
    backend: object,
    mode: Mode = "strict",
    *,
    examples: Sequence[tuple[str, Any]] = (),
    **options: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn a typed function into a call that returns a validated value.

    Args:
        backend: anything ``JsonMode`` takes (a litellm model string, a callable
            returning text, a :class:`~jsonmode.Backend`, a LangChain chat model),
            or a ready ``JsonMode`` to share (then ``mode`` and ``options`` must be
            left at their defaults).
        mode: ``"strict"`` or ``"repair"``.
        examples: few-shot ``(prompt, value)`` pairs sent with every call.
        **options: the rest of ``JsonMode``'s arguments (``max_attempts``, ``tier``,
            ``transport``) and the backend's options (``api_base``, ``temperature`` ...).

    The ``JsonMode`` is built here, once: a bad mode, tier or backend raises
    :class:`~jsonmode.UsageError` at decoration time, not at the first call.

    Raises (when decorating):
        UsageError: no return annotation, ``-> None``, a generator function, or a
            docstring placeholder that names no parameter.
        InvalidSchemaError: the return annotation is not a type pydantic can describe.
    """
    if isinstance(backend, JsonMode):
        if mode != "strict" or options:
            raise UsageError(
                "pass mode and options to the JsonMode itself, not to structured()",
            )
        jm = backend
    else:
        jm = JsonMode(backend, mode, **options)
    shots = tuple(examples)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        return cast("Callable[P, R]", _StructuredFunction(fn, jm, shots).wrapper())

    return decorate


class _StructuredFunction:
    """What ``structured`` knows about one decorated function."""

    def __init__(self, fn: object, jm: JsonMode, examples: tuple[tuple[str, Any], ...]) -> None:
        if not inspect.isfunction(fn) and not inspect.ismethod(fn):
            raise UsageError(
                f"structured() decorates a function, not {type(fn).__name__}",
                hint="write @jsonmode.structured(backend=...) with its arguments",
            )
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise UsageError(f"structured() cannot decorate the generator {fn.__qualname__}")
        self.fn: Callable[..., Any] = fn
        self.name = fn.__qualname__
        self.jm = jm
        self.examples = examples
        self.signature = inspect.signature(fn)
        if self.signature.return_annotation is inspect.Signature.empty:
            raise UsageError(
                f"{self.name} needs a return annotation: it is the schema of the answer",
                hint="e.g. def extract(text: str) -> Person",
            )
        self.template = inspect.cleandoc(fn.__doc__) if fn.__doc__ else None
        # A placeholder that names no parameter is a typo: say so now when the
        # docstring is surely the prompt (the body is empty), else on first use, so
        # a body that returns its own prompt may keep braces in its documentation.
        self._template_error: UsageError | None = None
        if self.template is not None:
            self._template_error = _placeholder_error(self.template, self.signature, self.name)
            if self._template_error is not None and _body_is_empty(fn):
                raise self._template_error
        self._schema: Schema | None = None
        # A forward reference (`from __future__ import annotations` with the model
        # defined further down) cannot resolve yet: it does on the first call.
        with contextlib.suppress(NameError):
            self.schema()

    def schema(self) -> Schema:
        if self._schema is None:
            annotation = typing.get_type_hints(self.fn, include_extras=True).get("return")
            if annotation is None or annotation is type(None):
                raise UsageError(
                    f"{self.name} is annotated -> None: annotate the schema of the answer"
                )
            self._schema = Schema.of(annotation)
        return self._schema

    def prompt(self, bound: inspect.BoundArguments, returned: object) -> str | list[Message]:
        """The body's own prompt, or else the docstring formatted with the arguments."""
        if isinstance(returned, str):
            return returned
        if _is_message_list(returned):
            return list(cast("Sequence[Message]", returned))
        if returned is not None:
            raise UsageError(
                f"{self.name} returned {type(returned).__name__}: return the prompt "
                "(a string or a list of chat messages), or nothing to use the docstring"
            )
        if self.template is None:
            raise UsageError(
                f"{self.name} has no docstring and returned no prompt",
                hint="write the prompt as the docstring, or return it from the body",
            )
        if self._template_error is not None:
            error = self._template_error
            raise UsageError(error.message, hint=error.hint)
        bound.apply_defaults()
        try:
            return self.template.format_map(bound.arguments)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"cannot format the docstring of {self.name} with its arguments: {exc!r}"
            ) from exc

    def wrapper(self) -> Any:
        fn, signature = self.fn, self.signature

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def acall(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                prompt = self.prompt(bound, await fn(*args, **kwargs))
                return await self.jm.agenerate(prompt, self.schema(), examples=self.examples)

            return acall

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            prompt = self.prompt(bound, fn(*args, **kwargs))
            return self.jm.generate(prompt, self.schema(), examples=self.examples)

        return call


def _placeholder_error(template: str, signature: inspect.Signature, name: str) -> UsageError | None:
    """Every ``{field}`` must name a parameter."""
    try:
        fields = [
            field for _, field, _, _ in string.Formatter().parse(template) if field is not None
        ]
    except ValueError as exc:
        return UsageError(
            f"the docstring of {name} is not a valid format template: {exc}",
            hint="write {{ and }} for literal braces",
        )
    for field in fields:
        root = field.split(".", 1)[0].split("[", 1)[0]
        if root == "" or root.isdigit():
            return UsageError(
                f"the docstring of {name} has a positional placeholder {{{field}}}: "
                "name a parameter instead"
            )
        if root not in signature.parameters:
            known = ", ".join(signature.parameters) or "none"
            return UsageError(
                f"the docstring of {name} uses {{{field}}}, but {root!r} is not a parameter "
                f"(parameters: {known})",
                hint="write {{ and }} for literal braces",
            )
    return None


def _body_is_empty(fn: Callable[..., Any]) -> bool:
    """True when the body is only a docstring (and ``...`` or ``pass``).

    Unknown (no source, as in a REPL) counts as empty: the docstring is then the
    only prompt the function can have, so checking it early is right.
    """
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return True
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    for statement in node.body:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring, or a bare `...`
        return False
    return True


def _is_message_list(value: object) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and len(value) > 0
        and all(isinstance(item, Mapping) for item in value)
    )
