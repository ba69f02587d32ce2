"""A local transformers model as a backend: the ``constrained`` tier.

The model generates under :class:`~jsonmode.decoding.logits.JsonLogitsProcessor`,
so every enforced keyword holds by construction; ``max_new_tokens`` guards against
runaway output, and a document cut off by it is reported as truncated, never valid.
Generation runs on whatever device the model is on; masks follow the logits.

Local generation has no deadline by default: its work is bounded by
``max_new_tokens``, and a wall-clock stop would make results depend on the load of
the machine. ``timeout=`` adds one, as a stopping criterion checked after every
token: past it generation stops and the call fails with TransientBackendError.
"""

from __future__ import annotations

import asyncio
import codecs
import dataclasses
import queue
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from jsonmode import events
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.backends.deadline import check_timeout
from jsonmode.decoding.compiled import Compiled, CompiledSchema, compile_schema
from jsonmode.decoding.grammars import CompiledGrammar
from jsonmode.decoding.logits import JsonLogitsProcessor
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.result import Usage
from jsonmode.schema.core import Schema

__all__ = ["TransformersBackend"]


class TransformersBackend:
    """Generate with ``model.generate``; constrained when the request says so.

    Args:
        model: a transformers causal LM (any ``generate``-capable model).
        tokenizer: its tokenizer (a transformers tokenizer).
        max_new_tokens: the length guard (default 512).
        timeout: seconds one call may take (default None: no deadline, the length
            guard bounds the work). Checked after every generated token, with the
            clock started when the call starts (prompt encoding and schema
            compilation count, but are not interrupted); past it the call fails with
            TransientBackendError and the partial output is dropped.
        compile_options: :class:`~jsonmode.decoding.compiler.CompileOptions` fields.
        **generate_options: passed to ``model.generate`` (``do_sample``, ``temperature``...).

    ``stream`` yields the text as it is generated; ``complete_batch`` generates many
    requests in one ``generate`` call (``JsonMode.map`` uses it), one matcher per row.
    A request with a grammar (``JsonMode.text``) is decoded under that grammar's mask
    (:meth:`constrain_grammar`).

    Not thread-safe for concurrent ``complete`` calls on one model (torch models
    are not); the async path runs generation in a worker thread.
    """

    native_schema: bool | None = False
    constrained_decoding = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 512,
        timeout: float | None = None,
        compile_options: dict[str, Any] | None = None,
        **generate_options: Any,
    ) -> None:
        if tokenizer is None:
            raise UsageError(
                "a transformers model needs its tokenizer", hint="JsonMode(model, tokenizer=tok)"
            )
        if max_new_tokens < 1:
            raise UsageError("max_new_tokens must be positive")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.timeout = None if timeout is None else check_timeout(timeout)
        self.compile_options = dict(compile_options or {})
        self.generate_options = generate_options
        width = getattr(getattr(model, "config", None), "vocab_size", None)
        self.vocabulary = Vocabulary.from_tokenizer(tokenizer, vocab_size=width)
        self._grammars: weakref.WeakKeyDictionary[CompiledGrammar, CompiledGrammar] = (
            weakref.WeakKeyDictionary()
        )
        self._grammars_lock = threading.Lock()

    @property
    def name(self) -> str:
        config = getattr(self.model, "config", None)
        return f"transformers:{getattr(config, 'name_or_path', '') or type(self.model).__name__}"

    def constrain(self, schema: Schema) -> CompiledSchema:
        """Compile ``schema`` for this vocabulary (cached).

        Raises UnsupportedSchemaError / BudgetExceededError when it cannot be; the
        façade then falls back to the prompted tier.
        """
        return compile_schema(schema.json_schema, self.vocabulary, **self.compile_options)

    def constrain_grammar(self, grammar: CompiledGrammar) -> CompiledGrammar:
        """``grammar`` (any kind: GBNF, regex, choice, a built-in) for this vocabulary.

        Its rule automata do not depend on the vocabulary, so nothing is recompiled:
        the same grammar gets this vocabulary and its own mask engine, built on the
        first mask and kept for as long as ``grammar`` lives (one per grammar object;
        the compile functions' cache hands out the same object for the same text).
        A grammar already compiled for this vocabulary is used as it is. Thread-safe.
        """
        vocabulary = grammar.vocabulary
        if vocabulary is not None and vocabulary.fingerprint == self.vocabulary.fingerprint:
            return grammar
        with self._grammars_lock:
            made = self._grammars.get(grammar)
            if made is None:
                made = dataclasses.replace(grammar, vocabulary=self.vocabulary)
                self._grammars[grammar] = made
        return made

    def _constraint(self, request: Request) -> Compiled:
        if request.grammar is not None:
            return self.constrain_grammar(request.grammar)
        return self.constrain(request.schema)

    def _prompt_ids(self, request: Request) -> list[int]:
        messages = [dict(message) for message in request.messages]
        if getattr(self.tokenizer, "chat_template", None):
            encoded = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_dict=True
            )
            return [int(t) for t in encoded["input_ids"]]
        encoded = self.tokenizer(request.prompt_text() + "\n")
        return [int(t) for t in encoded["input_ids"]]

    def _generate(
        self, requests: Sequence[Request], streamer: Any = None, stop: Any = None
    ) -> list[Completion | BackendError]:
        """One ``generate`` call for ``requests`` (rows, left-padded); all constrained
        or none, and constrained ones share one schema or grammar (see
        :meth:`complete_batch`)."""
        import torch

        started = time.time()  # the clock transformers' MaxTimeCriteria reads
        prompts = [self._prompt_ids(request) for request in requests]
        eos = sorted(self.vocabulary.eos_ids)
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else (eos[0] if eos else 0)
        width = max(len(ids) for ids in prompts)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts])
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
        device = getattr(self.model, "device", None)
        if device is not None:
            input_ids, attention = input_ids.to(device), attention.to(device)
        processors = []
        processor: JsonLogitsProcessor | None = None
        if requests[0].constrained:
            processor = JsonLogitsProcessor(self._constraint(requests[0]))
            processors.append(processor)
        options: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "eos_token_id": eos or None,
            "pad_token_id": pad,
            "do_sample": False,
            **self.generate_options,
        }
        criteria = list(options.get("stopping_criteria") or [])
        if self.timeout is not None:
            from transformers import MaxTimeCriteria

            criteria.append(MaxTimeCriteria(self.timeout, initial_timestamp=started))
        if stop is not None:
            criteria.append(stop)
        if criteria:
            from transformers import StoppingCriteriaList

            options["stopping_criteria"] = StoppingCriteriaList(criteria)
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                logits_processor=processors,
                streamer=streamer,
                **options,
            )
        late = self.timeout is not None and time.time() - started > self.timeout
        replies: list[Completion | BackendError] = []
        for row, ids in enumerate(prompts):
            generated = [int(t) for t in output[row, width:].tolist()]
            ended = next((i for i, t in enumerate(generated) if t in self.vocabulary.eos_ids), None)
            if late and ended is None:
                replies.append(
                    TransientBackendError(
                        f"{self.name}: generation did not finish within the timeout of "
                        f"{self.timeout:g} s ({len(generated)} tokens generated)",
                        hint="raise timeout= or lower max_new_tokens",
                    )
                )
                continue
            body = generated if ended is None else generated[:ended]
            data = b"".join(self.vocabulary.token_bytes(t) for t in body)
            truncated = ended is None and len(generated) >= self.max_new_tokens
            if processor is not None and not processor.is_complete(row):
                truncated = True
            replies.append(
                Completion(
                    data.decode("utf-8", errors="replace"),
                    Usage(len(ids), len(generated) if ended is None else ended + 1),
                    truncated=truncated,
                )
            )
        if processor is not None and events.listeners:
            events.decoder_finished(processor.compiled.engine)  # exact cache counts per request
        return replies

    def complete(self, request: Request) -> Completion:
        return _raised(self._generate([request])[0])

    async def acomplete(self, request: Request) -> Completion:
        return await asyncio.to_thread(self.complete, request)

    def complete_batch(self, requests: Sequence[Request]) -> list[Completion | BackendError]:
        """Complete ``requests`` in as few ``generate`` calls as their kinds allow: one
        per (constrained, schema or grammar) group, each row with its own matcher. A failure of
        a row (its timeout) is that row's entry; a failure of ``generate`` itself is
        every row's entry of that group, as a PermanentBackendError. Not thread-safe
        (one model)."""
        replies: list[Completion | BackendError | None] = [None] * len(requests)
        groups: dict[tuple[bool, int], list[int]] = {}
        for index, request in enumerate(requests):
            target = request.schema if request.grammar is None else request.grammar
            key = (request.constrained, id(target) if request.constrained else 0)
            groups.setdefault(key, []).append(index)
        for rows in groups.values():
            try:
                done = self._generate([requests[row] for row in rows])
            except BackendError as error:
                done = [error] * len(rows)
            except Exception as exc:  # the model's own failure, e.g. out of memory
                failure = PermanentBackendError(f"{self.name}: generation failed: {exc!r}")
                done = [failure] * len(rows)
            for row, reply in zip(rows, done, strict=True):
                replies[row] = reply
        return [reply for reply in replies if reply is not None]

    def stream(self, request: Request) -> Iterator[Chunk]:
        """The text as tokens are generated, then the whole Completion.

        Generation runs in a worker thread; closing the iterator early stops it at the
        next token. Pieces are the tokens' own bytes, decoded incrementally (a
        character split across tokens comes out whole, with the second token).
        """
        stream = _TokenStream(self)
        stream.start(request)
        try:
            while (chunk := stream.next()) is not None:
                yield chunk
        finally:
            stream.stop()

    async def astream(self, request: Request) -> AsyncIterator[Chunk]:
        """Async :meth:`stream`: waits for each piece in a worker thread."""
        stream = _TokenStream(self)
        stream.start(request)
        try:
            while (chunk := await asyncio.to_thread(stream.next)) is not None:
                yield chunk
        finally:
            stream.stop()


def _raised(reply: Completion | BackendError) -> Completion:
    if isinstance(reply, BackendError):
        raise reply
    return reply


_END = object()


class _TokenStream:
    """One streamed generation: a transformers streamer that turns token ids into text
    pieces on a queue, a stopping criterion for an early close, and the worker."""

    def __init__(self, backend: TransformersBackend) -> None:
        self.backend = backend
        self.queue: queue.Queue[Any] = queue.Queue()
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stopped = threading.Event()
        self.prompt_seen = False
        self.ended = False
        self.worker: threading.Thread | None = None

    # transformers' streamer protocol: put(token ids), end()
    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate hands the prompt over first
            self.prompt_seen = True
            return
        vocabulary = self.backend.vocabulary
        for token in value.reshape(-1).tolist():
            if self.ended or int(token) in vocabulary.eos_ids:
                self.ended = True
                continue
            piece = self.decoder.decode(vocabulary.token_bytes(int(token)))
            if piece:
                self.queue.put(piece)

    def end(self) -> None:
        pass  # the worker posts the Completion, then _END

    # a stopping criterion: an early close stops generation at the next token
    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.stopped.is_set(), dtype=torch.bool)

    def start(self, request: Request) -> None:
        def work() -> None:
            try:
                self.queue.put(_raised(self.backend._generate([request], self, self)[0]))
            except BaseException as error:  # handed to the consumer, raised there
                self.queue.put(error)
            finally:
                self.queue.put(_END)

        self.worker = threading.Thread(target=work, name="jsonmode-generate", daemon=True)
        self.worker.start()

    def next(self) -> Chunk | None:
        item = self.queue.get()
        if item is _END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.stopped.set()
        if self.worker is not None:
            self.worker.join()
