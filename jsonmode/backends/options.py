"""Checks on the options a caller passes by keyword (``JsonMode(backend, **options)``).

A misspelt option must not travel on: ``JsonMode("openai/m", mdoe="repair")`` once ran
in strict mode and sent ``"mdoe": "repair"`` in the request body. These helpers refuse
such a name with a :class:`~jsonmode.errors.UsageError` that names the option it most
likely meant (``did you mean 'mode'?``), before any request is sent. Each backend says
which names it takes; the façade checks its own first (:data:`FACADE_OPTIONS`).

Pure functions over short lists of names: cheap (``difflib`` over at most a few hundred
names, only when a name is unknown), thread-safe.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from jsonmode.errors import UsageError

__all__ = [
    "FACADE_OPTIONS",
    "RETRY_OPTIONS",
    "check_spelling",
    "closest",
    "refuse_retry_options",
    "refuse_unknown",
]

#: The keyword arguments ``JsonMode`` itself takes (the rest go to the backend).
FACADE_OPTIONS: tuple[str, ...] = (
    "mode",
    "max_attempts",
    "tier",
    "transport",
    "schema_name",
    "reasoning",
    "strict_schema",
)

#: Retry counts of other libraries (the OpenAI SDK and instructor's ``max_retries``,
#: litellm's ``num_retries``): jsonmode's own two loops take their place.
RETRY_OPTIONS: tuple[str, ...] = ("max_retries", "num_retries")

# How alike two names must be to count as a misspelling (difflib's ratio): catches
# "mdoe", "max_attemps", "tire", "timout", and no option litellm takes is that close to
# one of jsonmode's (tests/test_options.py pins it).
_CUTOFF = 0.75


def closest(name: str, known: Iterable[str]) -> str | None:
    """The name in ``known`` most like ``name``, when it is close enough to be what was
    meant (None otherwise)."""
    found = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=_CUTOFF)
    return found[0] if found else None


def check_spelling(
    names: Iterable[str], known: Collection[str], where: str, *, others: Collection[str] = ()
) -> None:
    """Refuse a name that is not in ``known`` but close to one that is: a misspelling
    (a name close to none may still be another layer's option, and passes; so do
    ``others``, names another layer takes although they look like one of ``known``).

    Raises:
        UsageError: ``unknown option 'mdoe' for JsonMode; did you mean 'mode'?``
    """
    for name in names:
        if name in known or name in others:
            continue
        close = closest(name, known)
        if close is not None:
            raise UsageError(f"unknown option {name!r} for {where}; did you mean {close!r}?")


def refuse_unknown(
    names: Iterable[str],
    known: Collection[str],
    where: str,
    *,
    suggest: Iterable[str] = (),
    hint: str | None = None,
) -> None:
    """Refuse every name not in ``known``, naming the closest of ``known`` and
    ``suggest`` when one is close.

    Raises:
        UsageError: the first unknown name, in the order given.
    """
    for name in names:
        if name in known:
            continue
        close = closest(name, [*known, *suggest])
        guess = f"; did you mean {close!r}?" if close is not None else ""
        raise UsageError(f"unknown option {name!r} for {where}{guess}", hint=hint)


def refuse_retry_options(names: Iterable[str]) -> None:
    """Refuse ``max_retries`` / ``num_retries``: instructor users mean validation
    retries by it, and given to litellm or the OpenAI SDK it would start a third retry
    loop under jsonmode's two, invisible to its records and multiplying the waits.

    Raises:
        UsageError: naming ``max_attempts`` and ``transport=TransportPolicy(...)``.
    """
    for name in names:
        if name in RETRY_OPTIONS:
            raise UsageError(
                f"jsonmode takes no {name!r}: it has two retry loops of its own",
                hint="max_attempts=N bounds validation attempts (each re-ask shows the model "
                "its errors); transport=jsonmode.TransportPolicy(max_retries=N) retries "
                "transient backend failures (429, 5xx, timeouts)",
            )
