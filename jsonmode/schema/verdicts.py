"""``anyOf``, ``oneOf`` and ``$ref`` for jsonschema, each value judged once per subschema.

jsonschema's own ``anyOf`` and ``oneOf`` list every error of every branch before they
decide. In a recursive schema whose branches reach the same child (a union of two
object shapes that share a recursive ``children`` property: a pydantic union without
a discriminator), each level judges its child once per branch and explains every
branch's failure in full, so time and memory double with every level of nesting (a
274-byte output took 54 s and 2.5 GB). ``allOf``, ``if`` or ``not`` over a recursive
``$ref`` double alike on a value they must read whole.

The replacements here (installed by :func:`jsonmode.schema.linear.linear_validator_class`):

- **Decide first, explain after.** A branch's or a reference's verdict is its first
  error or none (as ``is_valid``). Verdicts are memoised per ``(value, subschema)`` for
  as long as the outermost of these keywords that started judging is at it, so every
  place that reaches the same child under the same subschema shares one verdict: each
  pair is judged once. The memo holds the value and the subschema themselves, so no
  identity is reused while it lives. It is skipped (``memo=False``) for documents with
  dynamic references, where a verdict may depend on the dynamic scope as well.
- **Explain only a failure, boundedly.** A failing ``anyOf``/``oneOf`` lists at most
  :data:`MAX_BRANCH_ERRORS` errors of each branch, and one met while another's branches
  are being explained says only that no branch matched (its own branches unexplained:
  nested explanations would multiply per level again). A failing ``$ref`` explains
  lazily, as jsonschema does (a caller that stops at the first error pays for that one).

Messages are jsonschema's own, but values and subschemas are quoted at most
:data:`MAX_QUOTE` characters long. Thread-safe: the memo and the explaining flag are
context variables, each set and reset around work that does not yield.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from jsonschema.exceptions import ValidationError

__all__ = ["MAX_BRANCH_ERRORS", "MAX_QUOTE", "any_of", "one_of", "quote", "ref"]

#: Longest quotation of a value in a message (jsonschema quotes it whole).
MAX_QUOTE = 200
#: Errors listed per failing branch in an ``anyOf``/``oneOf`` error's context.
MAX_BRANCH_ERRORS = 32

# (kind, id(value), id(subschema)) -> (value, subschema, verdict)
_Verdicts = dict[tuple[str, int, int], tuple[Any, Any, bool]]
_verdicts: contextvars.ContextVar[_Verdicts | None] = contextvars.ContextVar(
    "jsonmode_verdicts", default=None
)
_explaining: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jsonmode_explaining_branches", default=False
)


def any_of(
    validator: Any, options: Sequence[Any], instance: Any, schema: Any, *, memo: bool = True
) -> Iterator[ValidationError]:
    """jsonschema's ``anyOf``, deciding before explaining (see module)."""
    with _scope(memo) as verdicts:
        if any(_branch(validator, instance, sub, i, verdicts) for i, sub in enumerate(options)):
            return
        context = _explain(validator, options, instance)
    yield ValidationError(
        f"{quote(instance)} is not valid under any of the given schemas", context=context
    )


def one_of(
    validator: Any, options: Sequence[Any], instance: Any, schema: Any, *, memo: bool = True
) -> Iterator[ValidationError]:
    """jsonschema's ``oneOf``, deciding before explaining (see module)."""
    with _scope(memo) as verdicts:
        valid = [
            i for i, sub in enumerate(options) if _branch(validator, instance, sub, i, verdicts)
        ]
        context = [] if valid else _explain(validator, options, instance)
    if not valid:
        yield ValidationError(
            f"{quote(instance)} is not valid under any of the given schemas", context=context
        )
    elif len(valid) > 1:
        # (jsonschema's order: the later matches, then the first.)
        matched = [options[i] for i in (*valid[1:], valid[0])]
        shown = ", ".join(quote(each) for each in matched)
        yield ValidationError(f"{quote(instance)} is valid under each of {shown}")


def ref(
    validator: Any, reference: str, instance: Any, schema: Any, *, memo: bool = True
) -> Iterator[ValidationError]:
    """jsonschema's ``$ref``, its verdict shared (keyed by the subschema holding it:
    one ``$ref`` always resolves alike where dynamic scope plays no part)."""
    with _scope(memo) as verdicts:
        key = ("$ref", id(instance), id(schema))
        known = _recalled(verdicts, key, instance, schema)
        if known:
            return
        errors = iter(validator._validate_reference(ref=reference, instance=instance))
        if known is None:  # (unjudged: the first error decides, within the memo's scope)
            first = next(errors, None)
            _remember(verdicts, key, instance, schema, first is None)
            if first is None:
                return
            errors = itertools.chain((first,), errors)
    yield from errors  # (known invalid: explained afresh, lazily)


def quote(value: Any) -> str:
    """``repr(value)``, at most :data:`MAX_QUOTE` characters long."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTE else f"{text[: MAX_QUOTE - 3]}..."


@contextlib.contextmanager
def _scope(memo: bool) -> Iterator[_Verdicts | None]:
    """The verdict memo of the outermost keyword at work (made here when there is
    none), or None without ``memo``."""
    if not memo:
        yield None
        return
    current = _verdicts.get()
    if current is not None:
        yield current
        return
    token = _verdicts.set({})
    try:
        yield _verdicts.get()
    finally:
        _verdicts.reset(token)


def _branch(
    validator: Any, instance: Any, sub: Any, index: int, verdicts: _Verdicts | None
) -> bool:
    """Whether ``instance`` is valid under branch ``sub``: its first error or none."""
    key = ("branch", id(instance), id(sub))
    known = _recalled(verdicts, key, instance, sub)
    if known is None:
        known = next(iter(validator.descend(instance, sub, schema_path=index)), None) is None
        _remember(verdicts, key, instance, sub, known)
    return known


def _recalled(
    verdicts: _Verdicts | None, key: tuple[str, int, int], instance: Any, sub: Any
) -> bool | None:
    """The verdict memoised for ``instance`` under ``sub`` (None: not judged yet, or
    no memo)."""
    known = None if verdicts is None else verdicts.get(key)
    if known is not None and known[0] is instance and known[1] is sub:
        return known[2]
    return None


def _remember(
    verdicts: _Verdicts | None, key: tuple[str, int, int], instance: Any, sub: Any, valid: bool
) -> None:
    if verdicts is not None:
        verdicts[key] = (instance, sub, valid)


def _explain(validator: Any, options: Sequence[Any], instance: Any) -> list[ValidationError]:
    """Each branch's first :data:`MAX_BRANCH_ERRORS` errors (none when another
    ``anyOf``/``oneOf`` is being explained already)."""
    if _explaining.get():
        return []
    token = _explaining.set(True)
    try:
        return [
            error
            for index, sub in enumerate(options)
            for error in itertools.islice(
                validator.descend(instance, sub, schema_path=index), MAX_BRANCH_ERRORS
            )
        ]
    finally:
        _explaining.reset(token)
