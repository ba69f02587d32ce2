"""Cutting long text for messages and prompts, saying how much was cut."""

from __future__ import annotations

import json

__all__ = ["SHOWN", "clip", "shown"]


def clip(text: str, limit: int, *, tail: int = 0) -> str:
    """``text`` when at most ``limit`` characters; else its first ``limit - tail`` and
    last ``tail`` characters around a marker that says how many were cut.

    Costs two slices: never a copy of the whole text. ``0 <= tail <= limit``.
    """
    if len(text) <= limit:
        return text
    head = limit - tail
    cut = len(text) - head - tail
    end = text[len(text) - tail :] if tail else ""
    return f"{text[:head]} …[{cut:,} characters cut]… {end}".rstrip()


#: Characters :func:`shown` keeps of a name or a location.
SHOWN = 80


def shown(text: str, *, middle: bool = False, limit: int = SHOWN) -> str:
    """``text`` on one line (control characters escaped as JSON escapes them), at most
    about ``limit`` characters: cut in the middle (``middle``, for a location) or at the
    end, with ``…`` where it was cut."""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1].replace('\\"', '"')
    if len(escaped) <= limit:
        return escaped
    if middle:
        half = limit // 2
        return escaped[:half] + "…" + escaped[-half:]
    return escaped[:limit] + "…"
