"""Number bounds as automata: ``minimum``, ``maximum`` and their exclusive forms.

:class:`Bounds` reads the four keywords (and draft 4's boolean ``exclusiveMinimum``/
``exclusiveMaximum``) into one interval. For integers the interval becomes an exact
integer range (:func:`integer_range`). For numbers, :func:`number_dfa` builds the
language of the JSON spellings of the values inside the interval:

* plain decimals ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``, bounded exactly by comparing the
  integer part and then the fraction digit by digit;
* exponent forms as ``json.dumps`` writes them (``repr`` of a float: ``1e-05``,
  ``2.5e+16``): values below 1e-4 or from 1e16 up, allowed exactly when the interval
  holds all of them on that side, refused when it holds none;
* ``-0`` and ``-0.0`` when zero is inside.

Other spellings of a number (``1E5``, ``0.5e1``) are not produced or accepted
while bounds apply. When the interval cuts through a range of exponent forms (a
bound below 1e-4 or from 1e16 up) the result is None and the caller leaves the
bounds to post-validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

from jsonmode import regex as rx
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError

__all__ = ["Bounds", "integer_range", "number_dfa"]

_TINY = Decimal("1e-4")  # repr() writes |x| < 1e-4 with an exponent...
_BIG = Decimal("1e16")  # ...and |x| >= 1e16
_TINY_FORM = r"[1-9](?:\.[0-9]+)?e-(?:0[5-9]|[1-9][0-9]+)"
_BIG_FORM = r"[1-9](?:\.[0-9]+)?e\+(?:1[6-9]|[2-9][0-9]|[1-9][0-9][0-9]+)"
_MAX_DIGITS = 40  # longer bounds are left to post-validation


@dataclass(frozen=True)
class Bounds:
    """An interval of numbers; None = unbounded on that side."""

    low: Decimal | None = None
    low_strict: bool = False
    high: Decimal | None = None
    high_strict: bool = False

    @classmethod
    def of(cls, schema: dict[str, Any], *, legacy: bool = False) -> Bounds:
        """The interval the bound keywords of ``schema`` allow (the tightest of them).

        ``legacy``: draft 3/4 semantics, where ``exclusiveMinimum``/``exclusiveMaximum``
        are booleans that make ``minimum``/``maximum`` strict.
        """
        bounds = cls()
        for keyword, value in schema.items():
            number = _decimal(value)
            if number is None:
                continue
            if keyword == "minimum":
                strict = legacy and schema.get("exclusiveMinimum") is True
                bounds = bounds.raise_low(number, strict)
            elif keyword == "exclusiveMinimum":
                bounds = bounds.raise_low(number, True)
            elif keyword == "maximum":
                strict = legacy and schema.get("exclusiveMaximum") is True
                bounds = bounds.lower_high(number, strict)
            elif keyword == "exclusiveMaximum":
                bounds = bounds.lower_high(number, True)
        return bounds

    def raise_low(self, value: Decimal, strict: bool) -> Bounds:
        if self.low is None or value > self.low or (value == self.low and strict):
            return Bounds(value, strict, self.high, self.high_strict)
        return self

    def lower_high(self, value: Decimal, strict: bool) -> Bounds:
        if self.high is None or value < self.high or (value == self.high and strict):
            return Bounds(self.low, self.low_strict, value, strict)
        return self

    @property
    def unbounded(self) -> bool:
        return self.low is None and self.high is None

    def contains(self, value: Decimal) -> bool:
        if self.low is not None and (value < self.low or (value == self.low and self.low_strict)):
            return False
        return not (
            self.high is not None
            and (value > self.high or (value == self.high and self.high_strict))
        )

    def label(self) -> str:
        if self.unbounded:
            return ""
        left = "(" if self.low_strict else "["
        right = ")" if self.high_strict else "]"
        low = "" if self.low is None else _plain(self.low)
        high = "" if self.high is None else _plain(self.high)
        return f"{left}{low},{high}{right}"


def integer_range(bounds: Bounds) -> tuple[int | None, int | None]:
    """The smallest and largest integers inside ``bounds`` (None: unbounded)."""
    low = high = None
    if bounds.low is not None:
        low = math.floor(bounds.low) + 1 if bounds.low_strict else math.ceil(bounds.low)
    if bounds.high is not None:
        high = math.ceil(bounds.high) - 1 if bounds.high_strict else math.floor(bounds.high)
    return low, high


def number_dfa(bounds: Bounds) -> rx.CharDFA | None:
    """The JSON spellings of the numbers inside ``bounds``; None when not exact."""
    low, high = bounds.low, bounds.high
    for bound in (low, high):
        if bound is not None and (
            (bound != 0 and abs(bound) < _TINY)
            or abs(bound) >= _BIG
            or len(_plain(bound)) > _MAX_DIGITS
        ):
            return None
    if low is not None and high is not None and low > high:
        return rx.compile_pattern("^[^\\s\\S]$")
    try:
        parts: list[rx.CharDFA] = []
        # Positive side (and zero): y in [max(low, 0), high].
        if high is None or high > 0 or (high == 0 and not bounds.high_strict):
            if low is None or low < 0:
                start, start_strict = Decimal(0), False
            else:
                start, start_strict = low, bounds.low_strict
            parts.append(_non_negative(start, start_strict, high, bounds.high_strict))
        # Negative side: x = -y with y in [max(-high, 0), -low], y > 0.
        if low is None or low < 0:
            if high is None or high >= 0:
                start, start_strict = Decimal(0), True
            else:
                start, start_strict = -high, bounds.high_strict
            end = None if low is None else -low
            parts.append(_non_negative(start, start_strict, end, bounds.low_strict, sign="-"))
        if bounds.contains(Decimal(0)):
            parts.append(rx.compile_pattern(r"^-0(?:\.0+)?$"))
        # Exponent forms: all or nothing on each side (bounds near them returned None).
        if (low is None or low <= 0) and (high is None or high >= _TINY):
            parts.append(rx.compile_pattern(f"^{_TINY_FORM}$"))
        if (low is None or low <= -_TINY) and (high is None or high >= 0):
            parts.append(rx.compile_pattern(f"^-{_TINY_FORM}$"))
        if high is None:
            parts.append(rx.compile_pattern(f"^{_BIG_FORM}$"))
        if low is None:
            parts.append(rx.compile_pattern(f"^-{_BIG_FORM}$"))
        if not parts:
            return rx.compile_pattern("^[^\\s\\S]$")
        result = parts[0]
        for part in parts[1:]:
            result = rx.union(result, part)
        return result
    except BudgetExceededError:
        raise  # the compile's deadline, not the regex engine's state budget
    except UnsupportedSchemaError:
        return None  # a budget: leave the bounds to post-validation


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    except InvalidOperation:  # pragma: no cover - json numbers are finite
        return None
    return number if number.is_finite() else None


def _plain(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _split(value: Decimal) -> tuple[int, str]:
    """Integer part and fraction digits (no trailing zeros) of ``value >= 0``."""
    whole = int(value.to_integral_value(rounding=ROUND_FLOOR))
    text = _plain(value)
    return whole, text.split(".", 1)[1] if "." in text else ""


def _non_negative(
    low: Decimal, low_strict: bool, high: Decimal | None, high_strict: bool, *, sign: str = ""
) -> rx.CharDFA:
    """``sign`` then a plain decimal ``y`` (no sign, no exponent), ``low <(=) y <(=) high``."""
    above = rx.compile_pattern(f"^{sign}(?:{_at_least(low, low_strict)})$")
    if high is None:
        return above
    return rx.intersect(above, rx.compile_pattern(f"^{sign}(?:{_at_most(high, high_strict)})$"))


_ANY_FRACTION = r"(?:\.[0-9]+)?"


def _at_least(bound: Decimal, strict: bool) -> str:
    whole, digits = _split(bound)
    alts = [f"(?:{rx.integer_range_pattern(whole + 1, None)}){_ANY_FRACTION}"]
    if not digits:
        fraction = r"\.[0-9]*[1-9][0-9]*" if strict else _ANY_FRACTION
    else:
        options = [digits[:i] + f"[{int(d) + 1}-9][0-9]*" for i, d in enumerate(digits) if d != "9"]
        options.append(digits + (r"[0-9]*[1-9][0-9]*" if strict else "[0-9]*"))
        fraction = r"\.(?:" + "|".join(options) + ")"
    alts.append(f"{whole}{fraction}")
    return "|".join(alts)


def _at_most(bound: Decimal, strict: bool) -> str:
    whole, digits = _split(bound)
    alts = []
    if whole >= 1:
        alts.append(f"(?:{rx.integer_range_pattern(0, whole - 1)}){_ANY_FRACTION}")
    if not digits:
        if not strict:
            alts.append(f"{whole}(?:\\.0+)?")
    else:
        options = [digits[:i] + f"[0-{int(d) - 1}][0-9]*" for i, d in enumerate(digits) if d != "0"]
        last = len(digits) if not strict else len(digits) - 1
        options += [digits[:j] for j in range(1, last + 1)]
        if not strict:
            options.append(digits + "0+")
        alts.append(f"{whole}" + (r"(?:\.(?:" + "|".join(options) + "))?" if options else ""))
    return "|".join(alts) if alts else "[^\\s\\S]"
