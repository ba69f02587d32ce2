"""How a model thinks before it answers: :class:`Reasoning`, the markers around its
thinking, and the spellings of the model families that think.

A reasoning model writes its thinking first, closes it with an end marker, then writes
its answer: ``<think>\\n...\\n</think>\\n{"name": "Ada"}``. jsonmode never searches the
thinking for the answer, never constrains the thinking, and keeps it on the result
(``Result.reasoning``). :class:`Reasoning` says where the thinking ends (``end``),
whether it opens with a marker of its own (``start``; some chat templates pre-fill it,
so the reply may start inside the thinking), and how many tokens it may take before
the end marker is forced (``max_tokens``, for the constrained tier's gate).

:data:`FAMILIES` lists the spellings of the families jsonmode knows (Qwen3, QwQ and
DeepSeek-R1 and its distillations: ``<think>``/``</think>``; Magistral:
``[THINK]``/``[/THINK]``; gpt-oss's harmony channels). ``"auto"`` (the façade's
default) looks for these in replies, and for local models in the tokenizer's added
tokens.

A ground-floor module: it imports nothing of jsonmode but :mod:`jsonmode.errors`.
Every object here is immutable and thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from jsonmode.errors import UsageError

__all__ = ["FAMILIES", "MAX_MARKER_CHARS", "Reasoning"]

#: A marker longer than this is refused (a marker is a tag, not a text).
MAX_MARKER_CHARS = 256


@dataclass(frozen=True, slots=True)
class Reasoning:
    """Where a model's thinking ends, and optionally where it starts and how long it may be.

    Attributes:
        end: the end marker's text (``"</think>"``): one added token or several
            ordinary ones; matched across token boundaries.
        start: the start marker's text (``"<think>"``), or None when the thinking has
            none. A reply may begin with it or, when the chat template pre-fills it,
            begin already inside the thinking.
        max_tokens: at most this many tokens of thinking, after which the constrained
            tier forces the end marker (None: no cap). Counted from the first token
            the model writes.

    Raises:
        UsageError: an empty or over-long marker, a start equal to the end, or a
            ``max_tokens`` that is not a non-negative int.
    """

    end: str
    start: str | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name, marker in (("end", self.end), ("start", self.start)):
            if marker is None and name == "start":
                continue
            if not isinstance(marker, str) or not marker:
                raise UsageError(f"Reasoning.{name} must be a non-empty string, not {marker!r}")
            if len(marker) > MAX_MARKER_CHARS:
                raise UsageError(
                    f"Reasoning.{name} is {len(marker)} characters; at most {MAX_MARKER_CHARS}"
                )
        if self.start is not None and self.start == self.end:
            raise UsageError("Reasoning.start and Reasoning.end must differ")
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 0
        ):
            raise UsageError(
                f"Reasoning.max_tokens must be a non-negative int or None, not {self.max_tokens!r}"
            )


#: The thinking markers of the model families jsonmode knows, by family: what
#: ``reasoning="auto"`` recognises in replies and in tokenizers' added tokens.
FAMILIES: dict[str, Reasoning] = {
    "think": Reasoning(end="</think>", start="<think>"),  # Qwen3, QwQ, DeepSeek-R1
    "magistral": Reasoning(end="[/THINK]", start="[THINK]"),
    # gpt-oss (harmony): analysis channel, then the final channel's message
    "harmony": Reasoning(
        end="<|end|><|start|>assistant<|channel|>final<|message|>",
        start="<|channel|>analysis<|message|>",
    ),
}
