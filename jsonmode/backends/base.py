"""The backend protocol: one request in, one completion out.

A backend turns a :class:`Request` (messages, and the schema when the native tier
passes it through) into a :class:`Completion`. A request may carry a grammar instead
(``JsonMode.text``); a backend that can take one says so with an optional ability
(below); any other backend gets the grammar in the prompt only. It reports failure only as
:class:`~jsonmode.errors.TransientBackendError` (worth retrying the same request) or
:class:`~jsonmode.errors.PermanentBackendError` (not). Retrying, validation and
repair belong to the session (:mod:`jsonmode.session`), never to a backend.

Optional abilities are protocols a backend satisfies structurally (by having the
methods; it may also subclass them), checked with ``isinstance``:

- :class:`Constrains`: exposes logits (``constrained_decoding``) and compiles a schema
  for its own mask engine (``constrain``): the constrained tier.
- :class:`ConstrainsGrammar`: compiles a grammar for its mask engine (``JsonMode.text``
  in the constrained tier).
- :class:`TakesGrammar`: its endpoint takes this grammar's kind natively.
- :class:`StreamingBackend`: streams its reply (``JsonMode.stream``).
- :class:`CompletesBatch`: completes many requests in one call (``JsonMode.map`` in
  the constrained tier).
- :class:`Prepares`: has a one-time slow set-up (``JsonMode.prepare``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from jsonmode.errors import BackendError
from jsonmode.reasoning import Reasoning
from jsonmode.result import Usage
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.decoding.grammars.compiled import CompiledGrammar

__all__ = [
    "Backend",
    "Chunk",
    "CompletesBatch",
    "Completion",
    "Constrains",
    "ConstrainsGrammar",
    "Prepares",
    "Request",
    "StreamingBackend",
    "TakesGrammar",
]


@dataclass(frozen=True, slots=True)
class Request:
    """One call to a backend. A value: re-asks build a new one, nothing is mutated.

    Attributes:
        messages: chat messages (``{"role": ..., "content": ...}``), already private copies.
        schema: the target schema.
        native: pass ``schema`` (or ``grammar``) through the backend's own
            structured-output API.
        constrained: decode under jsonmode's own token mask (local models only).
        grammar: the text's grammar, for ``JsonMode.text`` (None: the reply is JSON
            under ``schema``). When set, ``schema`` is a placeholder ("anything") and
            ``native``/``constrained`` apply to the grammar.
        reasoning: the model thinks first, between these markers (None: it does not,
            or it is not known). A constraining backend leaves the thinking free and
            constrains what follows the end marker.
    """

    messages: tuple[Mapping[str, Any], ...]
    schema: Schema
    native: bool = False
    constrained: bool = False
    grammar: CompiledGrammar | None = None
    reasoning: Reasoning | None = None

    def prompt_text(self) -> str:
        """The messages flattened into one prompt, for text-in/text-out callables."""
        parts = []
        for message in self.messages:
            content = message.get("content")
            text = content if isinstance(content, str) else str(content)
            parts.append(f"[{message.get('role', 'user')}]\n{text}")
        return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class Completion:
    """What a backend returned.

    Attributes:
        text: the generated text ("" when the model returned no content).
        usage: token counts, when reported.
        truncated: generation stopped at the length limit.
        problem: what is wrong with the reply's form, seen by the backend before any
            reading (a native ``tools`` reply that called another function than the
            one it was told to); None when nothing is. The façade counts such an
            attempt as non-conforming output (a ``schema_violation`` whose one issue,
            keyword ``tool``, is this text) and re-asks with it.
        reasoning: the thinking the API returned apart from the content (litellm's
            ``reasoning_content``), or None.
    """

    text: str
    usage: Usage | None = None
    truncated: bool = False
    problem: str | None = None
    reasoning: str | None = None


@runtime_checkable
class Backend(Protocol):
    """Anything that completes a :class:`Request`.

    ``native_schema`` says whether the endpoint takes a JSON Schema: ``True`` known to,
    ``False`` cannot, ``None`` unknown (the caller may still ask for the native tier).
    """

    @property
    def name(self) -> str: ...

    @property
    def native_schema(self) -> bool | None: ...

    def complete(self, request: Request) -> Completion: ...

    async def acomplete(self, request: Request) -> Completion: ...


#: What a streaming backend yields: a piece of text as it arrives, and optionally, last,
#: the whole :class:`Completion` (its text is then authoritative; it carries usage and
#: truncation).
Chunk = str | Completion


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A backend that can also stream its reply (``JsonMode.stream`` uses it).

    ``stream(request)`` / ``astream(request)`` yield :data:`Chunk` s: text pieces in
    order, and optionally one final :class:`Completion` whose ``text`` is the whole
    reply (when there is none, the pieces joined are the reply, with no usage). They
    fail as ``complete`` does (Transient/PermanentBackendError), at any point of the
    stream, and a whole stream falls under the backend's one ``timeout``. The caller
    may stop iterating early (it then closes the iterator); the backend must release
    its connection or thread when it does.
    """

    def stream(self, request: Request) -> Iterator[Chunk]: ...

    def astream(self, request: Request) -> AsyncIterator[Chunk]: ...


@runtime_checkable
class Constrains(Protocol):
    """A backend that exposes logits to constrain (a local model): the constrained
    tier. ``constrained_decoding`` says whether it does for this instance;
    ``constrain(schema)`` compiles the schema for its mask engine (cached), raising
    :class:`~jsonmode.errors.UnsupportedSchemaError` for one it cannot enforce."""

    constrained_decoding: bool

    def constrain(self, schema: Schema) -> Any: ...


@runtime_checkable
class ConstrainsGrammar(Protocol):
    """A backend whose mask engine takes a grammar: ``constrain_grammar(grammar)``
    returns it compiled for its vocabulary (``UnsupportedSchemaError`` when it cannot)."""

    def constrain_grammar(self, grammar: CompiledGrammar) -> CompiledGrammar: ...


@runtime_checkable
class TakesGrammar(Protocol):
    """A backend whose endpoint may take a grammar natively: ``native_grammar(grammar)``
    says whether it takes this one's kind."""

    def native_grammar(self, grammar: CompiledGrammar) -> bool: ...


@runtime_checkable
class CompletesBatch(Protocol):
    """A backend that completes many requests in one call (one ``generate`` for a local
    model): one Completion or one BackendError per request, in order."""

    def complete_batch(self, requests: Sequence[Request]) -> list[Completion | BackendError]: ...


@runtime_checkable
class Prepares(Protocol):
    """A backend with a one-time slow set-up (importing litellm), done before any
    request's clock starts; cheap after the first call."""

    def prepare(self) -> None: ...


@runtime_checkable
class DetectsReasoning(Protocol):
    """A backend that can tell, from its own model, how that model thinks (a local
    model's tokenizer with ``<think>``/``</think>`` added tokens, or its chat template):
    what ``JsonMode(reasoning="auto")`` uses for it. Cheap after the first call."""

    def detected_reasoning(self) -> Reasoning | None: ...
