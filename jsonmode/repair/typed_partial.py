"""Partial values typed after the caller's schema: ``PartialPerson`` for ``Person``.

A streamed partial value (:mod:`jsonmode.repair.partial`) is plain JSON. When the
caller's schema is a pydantic model, :func:`typed_partial` builds an instance of the
model's *partial* twin instead: a pydantic model of the same name prefixed with
``Partial``, the same fields (same aliases), each one optional with default ``None``.
Nested models become their partial twins too, inside lists, tuples, dicts and
optional fields; a union of several models stays a plain dict (which member it will
be is not known yet).

The instance is built with ``model_construct``: **nothing is validated** (validators
do not run, constraints are not checked: ``minLength`` may not hold yet), which is
what a partial value promises. ``model_fields_set`` says which fields have arrived.

Cost: the twin class is built once per model (cached, thread-safe); converting a
value is one walk over it.
"""

from __future__ import annotations

import functools
import threading
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Union

import pydantic

__all__ = ["partial_model", "typed_partial"]

_lock = threading.RLock()


def partial_model(model: type[pydantic.BaseModel]) -> type[pydantic.BaseModel]:
    """The partial twin of ``model``: every field optional, default None (cached)."""
    with _lock:
        return _partial_model(model)


@functools.lru_cache(maxsize=512)
def _partial_model(model: type[pydantic.BaseModel]) -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        fields[name] = (
            Union[annotation, None],  # noqa: UP007 - a runtime-built annotation
            pydantic.Field(default=None, alias=info.alias),
        )
    partial: type[pydantic.BaseModel] = pydantic.create_model(
        f"Partial{model.__name__}",
        __config__=pydantic.ConfigDict(populate_by_name=True, arbitrary_types_allowed=True),
        __module__=model.__module__,
        __doc__=f"A partial {model.__name__} while it streams: any field may still be None.",
        **fields,
    )
    return partial


def typed_partial(value: Any, source: object) -> Any:
    """``value`` (a partial JSON value) typed after ``source``, the schema the caller
    passed: a model's partial twin for a pydantic model (also inside ``list[...]``,
    ``Optional[...]``, ``dict[str, ...]``), else ``value`` itself. Never raises for a
    value that does not fit the shape: what does not fit stays plain JSON."""
    try:
        return _convert(source, value, 0)
    except RecursionError:  # pragma: no cover - a partial value nested beyond Python's stack
        return value


def _is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)


def _convert(annotation: Any, value: Any, depth: int) -> Any:
    if value is None or depth > 200:
        return value
    if _is_model(annotation):
        return _instance(annotation, value, depth) if isinstance(value, Mapping) else value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _convert(args[0], value, depth)
    if origin is Union or origin is types.UnionType:
        members = [arg for arg in args if arg is not type(None)]
        models = [arg for arg in members if _is_model(arg)]
        if len(members) == 1:
            return _convert(members[0], value, depth)
        if len(models) == 1 and isinstance(value, Mapping):
            return _convert(models[0], value, depth)
        return value
    if isinstance(value, list) and args:
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return [_convert(args[0], item, depth + 1) for item in value]
            return [
                _convert(args[i], item, depth + 1) if i < len(args) else item
                for i, item in enumerate(value)
            ]
        if (
            isinstance(origin, type)
            and issubclass(origin, Iterable)
            and not issubclass(origin, (str, bytes, Mapping))
        ):
            return [_convert(args[0], item, depth + 1) for item in value]
    if (
        isinstance(value, dict)
        and len(args) == 2
        and isinstance(origin, type)
        and issubclass(origin, Mapping)
    ):
        return {key: _convert(args[1], item, depth + 1) for key, item in value.items()}
    return value


def _instance(model: type[pydantic.BaseModel], data: Mapping[str, Any], depth: int) -> Any:
    partial = partial_model(model)
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in data:
            values[name] = _convert(info.annotation, data[key], depth + 1)
        elif name in data:
            values[name] = _convert(info.annotation, data[name], depth + 1)
    return partial.model_construct(_fields_set=set(values), **values)
