"""Cutting long text for messages and prompts, saying how much was cut."""

from __future__ import annotations

__all__ = ["clip"]


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
