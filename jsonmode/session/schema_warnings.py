"""A schema's warnings, emitted once per schema and instance."""

from __future__ import annotations

import sys
import threading
import warnings
import weakref

from jsonmode.errors import JsonModeWarning
from jsonmode.schema.core import Schema
from jsonmode.schema.lint import refusal

__all__ = ["SchemaWarnings"]


class SchemaWarnings:
    """Emits a schema's :attr:`Schema.warnings <jsonmode.Schema.warnings>` (severity
    ``"warning"``) as :class:`~jsonmode.JsonModeWarning`, pointing at the caller's code,
    once per schema object (a weak set: schemas are cached by :meth:`Schema.of`, so a
    request with the same schema is the same object). Thread-safe; costs a set lookup
    after the first time.

    ``strict`` (``JsonMode(strict_schema=True)``): a schema with warnings is refused
    instead, every time, with :func:`~jsonmode.schema.lint.refusal`'s
    :class:`~jsonmode.errors.InvalidSchemaError` (notes never refuse)."""

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._warned: weakref.WeakSet[Schema] = weakref.WeakSet()
        self._lock = threading.Lock()

    def check(self, spec: Schema) -> None:
        """Raise when ``strict`` and ``spec`` has warnings (see the class docstring).

        Raises:
            InvalidSchemaError: the schema's warnings, listed (``warnings`` holds them).
        """
        if self.strict:
            records = [record for record in spec.warnings if record.severity == "warning"]
            if records:
                raise refusal(records)

    def emit(self, spec: Schema) -> None:
        """Emit ``spec``'s warnings (once), or refuse it when ``strict`` (:meth:`check`)."""
        self.check(spec)
        records = [record for record in spec.warnings if record.severity == "warning"]
        if not records:
            return
        with self._lock:
            if spec in self._warned:
                return
            self._warned.add(spec)
        level = _outside_jsonmode()
        for record in records:
            warnings.warn(JsonModeWarning(str(record), record), stacklevel=level)


def _outside_jsonmode() -> int:
    """The ``stacklevel`` of the innermost caller outside jsonmode (for warnings)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("jsonmode"):
        frame = frame.f_back
        level += 1
    return level
