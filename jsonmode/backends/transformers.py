"""A local transformers model as a backend: the ``constrained`` tier.

The model generates under :class:`~jsonmode.decoding.logits.JsonLogitsProcessor`,
so every enforced keyword holds by construction; ``max_new_tokens`` guards against
runaway output, and a document cut off by it is reported as truncated, never valid.
Generation runs on whatever device the model is on; masks follow the logits.

Local generation has no deadline by default: its work is bounded by
``max_new_tokens``, and a wall-clock stop would make results depend on the load of
the machine. ``timeout=`` adds one, as a stopping criterion checked after every
token: past it generation stops and the call fails with TransientBackendError.

Fast-forward (``fast_forward=True``, the default). Where the schema forces the next
bytes, their tokens are appended without sampling them, as the tokenizer would write
them (:mod:`~jsonmode.decoding.fastforward` has the rule: never a split the model
would not produce). One request generates in segments: ``model.generate`` runs until
a sampled token leaves forced tokens pending (a stopping criterion), the backend
appends them, and the next ``generate`` call continues from the same KV cache, so
the forced tokens cost one forward pass together instead of one each. Documents
that end by force get their end-of-sequence appended the same way. Streaming gets
the forced tokens as they are appended. A batch (``complete_batch``) stays one
``generate`` call in lockstep: there the forced tokens are imposed through the mask
(every other token banned), one step each: the same tokens, so a prompt gives the
same document alone or in a batch under greedy decoding, but no forward pass saved.
``fast_forward=False`` uses plain masking.

Reasoning. A request with ``reasoning`` (a :class:`~jsonmode.Reasoning`) is decoded behind
the reasoning gate (:mod:`~jsonmode.decoding.reasoning_gate`): the thinking is free up to
the end marker (at most ``max_tokens`` tokens, then the marker is forced), then the
schema or grammar applies; alone, batched and streamed alike. The reply's text keeps the
thinking and its markers (an added marker token is written as its text;
``Completion.reasoning`` stays None: the tiers split the thinking off).
:meth:`TransformersBackend.detected_reasoning` tells ``reasoning="auto"`` how the model
thinks. Beam search (``num_beams > 1``) is refused
(:class:`~jsonmode.errors.UsageError`): matchers follow rows, which beams reorder.
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
from jsonmode.decoding.batch_masks import BatchMasker
from jsonmode.decoding.compiled import Compiled, CompiledSchema, compile_schema
from jsonmode.decoding.fastforward import FastForward
from jsonmode.decoding.grammars.compiled import CompiledGrammar
from jsonmode.decoding.logits import JsonLogitsProcessor
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.reasoning_gate import GatedConstraint, gate, marker_spellings
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.reasoning import FAMILIES, Reasoning
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
        compile_options: :class:`~jsonmode.decoding.compile.compiler.CompileOptions` fields.
        fast_forward: append the tokens the schema forces without sampling them
            (default True; see the module docstring). False: every token is sampled
            under the mask, as before fast-forward existed.
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
        fast_forward: bool = True,
        **generate_options: Any,
    ) -> None:
        if tokenizer is None:
            raise UsageError(
                "a transformers model needs its tokenizer", hint="JsonMode(model, tokenizer=tok)"
            )
        if max_new_tokens < 1:
            raise UsageError("max_new_tokens must be positive")
        if (generate_options.get("num_beams") or 1) > 1:
            # (Each row's matcher follows that row; beam search reorders rows between
            # steps, so masks would follow the wrong text.)
            raise UsageError(
                "beam search (num_beams > 1) is not supported by the constrained decoder",
                hint="leave num_beams at 1 (sampling or greedy decoding)",
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.timeout = None if timeout is None else check_timeout(timeout)
        self.compile_options = dict(compile_options or {})
        self.fast_forward = bool(fast_forward)
        self.generate_options = generate_options
        width = getattr(getattr(model, "config", None), "vocab_size", None)
        self.vocabulary = Vocabulary.from_tokenizer(tokenizer, vocab_size=width)
        self._grammars: weakref.WeakKeyDictionary[CompiledGrammar, CompiledGrammar] = (
            weakref.WeakKeyDictionary()
        )
        self._grammars_lock = threading.Lock()
        self._forwarder: FastForward | None = None
        self._detected: tuple[Reasoning | None] | None = None

    @property
    def name(self) -> str:
        config = getattr(self.model, "config", None)
        return f"transformers:{getattr(config, 'name_or_path', '') or type(self.model).__name__}"

    def constrain(self, schema: Schema) -> CompiledSchema:
        """Compile ``schema`` for this vocabulary (cached).

        Raises UnsupportedSchemaError / BudgetExceededError when it cannot be; the
        façade then falls back to the prompted tier.
        """
        compiled: CompiledSchema = compile_schema(
            schema.json_schema, self.vocabulary, **self.compile_options
        )
        return compiled

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

    def _constraint(self, request: Request) -> Compiled | GatedConstraint:
        """The request's schema or grammar; behind the reasoning gate when the request
        says how the model thinks (``request.reasoning``): the thinking is free, the
        end marker closes it, then the constraint applies (a cap on thinking tokens
        forces the marker)."""
        base: Compiled
        if request.grammar is not None:
            base = self.constrain_grammar(request.grammar)
        else:
            base = self.constrain(request.schema)
        if request.reasoning is None:
            return base
        return gate(base, request.reasoning, self.vocabulary)

    def detected_reasoning(self) -> Reasoning | None:
        """How this model thinks, from its tokenizer: an added control token that is a
        known family's end marker (``</think>``, ``[/THINK]``), else a chat template
        that writes both of a family's markers; None when neither. Cached."""
        if self._detected is not None:
            return self._detected[0]
        found: Reasoning | None = None
        controls = self.vocabulary.controls
        template = getattr(self.tokenizer, "chat_template", None)
        template = template if isinstance(template, str) else ""
        for family in FAMILIES.values():
            if family.end in controls:
                found = family
                break
        else:
            for family in FAMILIES.values():
                if family.end in template and (family.start or "") in template:
                    found = family
                    break
        self._detected = (found,)
        return found

    def _text(self, tokens: Sequence[int], request: Request) -> str:
        """The reply's text: the tokens' bytes, with the thinking markers' control
        tokens written as their text (the tiers split the thinking off upstream)."""
        spelled = marker_spellings(self.vocabulary, request.reasoning)
        token_bytes = self.vocabulary.token_bytes
        data = b"".join(spelled.get(t) or token_bytes(t) for t in tokens)
        return data.decode("utf-8", errors="replace")

    def _prompt_ids(self, request: Request) -> list[int]:
        messages = [dict(message) for message in request.messages]
        if getattr(self.tokenizer, "chat_template", None):
            encoded = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_dict=True
            )
            return [int(t) for t in encoded["input_ids"]]
        encoded = self.tokenizer(request.prompt_text() + "\n")
        return [int(t) for t in encoded["input_ids"]]

    def _forward(self) -> FastForward:
        """The fast-forward rule for this tokenizer (built on first use)."""
        if self._forwarder is None:
            tokenizer = self.tokenizer

            def encode(text: str) -> list[int]:
                return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]

            self._forwarder = FastForward(self.vocabulary, encode)
        return self._forwarder

    def _segmented(self, options: dict[str, Any]) -> bool:
        """Whether one request may generate in fast-forward segments."""
        beams = options.get("num_beams") or 1
        returned = options.get("num_return_sequences") or 1
        return self.fast_forward and beams == 1 and returned == 1

    def _generate(
        self, requests: Sequence[Request], streamer: Any = None, stop: Any = None
    ) -> list[Completion | BackendError]:
        """Generate ``requests`` (rows, left-padded) in one ``generate`` call, or in
        fast-forward segments for one constrained request; all constrained or none,
        and constrained ones share one schema or grammar (see :meth:`complete_batch`).
        ``streamer`` gets the generated token ids (never the prompt)."""
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
        options: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "eos_token_id": eos or None,
            "pad_token_id": pad,
            "do_sample": False,
            **self.generate_options,
        }
        criteria = list(options.pop("stopping_criteria", None) or [])
        extra = list(options.pop("logits_processor", None) or [])  # the caller's, run first
        if self.timeout is not None:
            from transformers import MaxTimeCriteria

            criteria.append(MaxTimeCriteria(self.timeout, initial_timestamp=started))
        if stop is not None:
            criteria.append(stop)
        processor: JsonLogitsProcessor | _Guide | None = None
        if not requests[0].constrained:
            output = self._run(input_ids, attention, extra, criteria, streamer, options)
        elif not self._segmented(options):
            processor = JsonLogitsProcessor(self._constraint(requests[0]))
            processors = [*extra, processor]
            output = self._run(input_ids, attention, processors, criteria, streamer, options)
        else:
            compiled, forward = self._constraint(requests[0]), self._forward()
            processor = _Guide(compiled, forward, len(requests), width, self._end_token())
            processors = [*extra, processor]
            if len(requests) == 1:
                output = self._segments(input_ids, processors, criteria, streamer, options)
            else:  # lockstep rows: forced tokens go through the mask
                output = self._run(input_ids, attention, processors, criteria, streamer, options)
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
            truncated = ended is None and len(generated) >= self.max_new_tokens
            if processor is not None and not processor.is_complete(row):
                truncated = True
            replies.append(
                Completion(
                    self._text(body, requests[row]),
                    Usage(len(ids), len(generated) if ended is None else ended + 1),
                    truncated=truncated,
                )
            )
        if processor is not None and events.listeners:
            events.decoder_finished(processor.compiled.engine)  # exact cache counts per request
        return replies

    def _end_token(self) -> int | None:
        """The end-of-sequence id fast-forward appends: the tokenizer's own when it is
        one of the vocabulary's, else the lowest."""
        eos_ids = self.vocabulary.eos_ids
        own = self.tokenizer.eos_token_id
        if isinstance(own, int) and own in eos_ids:
            return own
        return min(eos_ids) if eos_ids else None

    def _run(
        self,
        input_ids: Any,
        attention: Any,
        processors: list[Any],
        criteria: list[Any],
        streamer: Any,
        options: dict[str, Any],
    ) -> Any:
        """One ``model.generate`` call; returns the sequences (prompt included)."""
        import torch

        options = dict(options)
        if criteria:
            from transformers import StoppingCriteriaList

            options["stopping_criteria"] = StoppingCriteriaList(criteria)
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                logits_processor=processors,
                streamer=None if streamer is None else _AfterPrompt(streamer),
                **options,
            )
        return getattr(output, "sequences", output)

    def _segments(
        self,
        input_ids: Any,
        processors: list[Any],
        criteria: list[Any],
        streamer: Any,
        options: dict[str, Any],
    ) -> Any:
        """One row, generated in fast-forward segments: ``generate`` until a sampled
        token leaves forced tokens pending, append them, continue from the KV cache.
        Stops where one ``generate`` call would: end of sequence, ``max_new_tokens``
        in all, or a stopping criterion (timeout, a closed stream, the caller's)."""
        import torch
        from transformers import StoppingCriteriaList

        guide: _Guide = processors[-1]
        watched = [_Watched(criterion) for criterion in criteria]
        options = {**options, "return_dict_in_generate": True}
        ids = input_ids
        cache: dict[str, Any] = {}  # the KV cache, under the keyword this transformers takes
        budget = int(options.pop("max_new_tokens"))
        while budget > 0 and not guide.done(0):
            pending = guide.pending[0]
            if pending:
                forced = torch.tensor([pending[:budget]], dtype=ids.dtype, device=ids.device)
                ids = torch.cat([ids, forced], dim=1)
                budget -= int(forced.shape[1])
                if streamer is not None:
                    streamer.put(forced.cpu())
                guide.catch_up(ids)  # the criteria see them after the next sampled token
                continue
            with torch.inference_mode():
                output = self.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=budget,
                    logits_processor=processors,
                    stopping_criteria=StoppingCriteriaList([*watched, guide.stop]),
                    streamer=None if streamer is None else _AfterPrompt(streamer),
                    **cache,
                    **options,
                )
            sequences = getattr(output, "sequences", output)
            budget -= int(sequences.shape[1] - ids.shape[1])
            ids, cache = sequences, _cache_of(output)
            guide.catch_up(ids)
            if not guide.pending[0] or any(w.fired for w in watched):
                break  # ended, out of tokens, or stopped by a criterion
        return ids

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
        groups: dict[tuple[bool, int, Reasoning | None], list[int]] = {}
        for index, request in enumerate(requests):
            target = request.schema if request.grammar is None else request.grammar
            key = (
                request.constrained,
                id(target) if request.constrained else 0,
                request.reasoning if request.constrained else None,
            )
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


def _cache_of(output: Any) -> dict[str, Any]:
    """The KV cache a ``generate`` output holds, as the keyword argument that hands it
    to the next call: ``cache`` (transformers 5.2x), ``past_key_values`` before;
    none (the next call recomputes the prefix) when the model returned none."""
    for name in ("cache", "past_key_values"):
        value = getattr(output, name, None)
        if value is not None:
            return {name: value}
    return {}


class _AfterPrompt:
    """A streamer for one ``generate`` call: drops the prompt that call hands over
    first and passes the generated tokens on (fast-forward runs several calls into
    one stream, and appends its forced tokens to the stream itself)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.target.put(value)

    def end(self) -> None:
        pass


class _Watched:
    """A stopping criterion that remembers whether it ever stopped generation."""

    def __init__(self, criterion: Any) -> None:
        self.criterion = criterion
        self.fired = False

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        done = self.criterion(input_ids, scores, **kwargs)
        self.fired = self.fired or bool(done.any() if hasattr(done, "any") else done)
        return done


class _Guide:
    """The constraint of one fast-forward generation: a logits processor and a
    stopping criterion (:meth:`stop`) over one matcher per row.

    Every token that enters ``input_ids`` advances its row's matcher, whether the
    model sampled it or fast-forward appended it (:meth:`catch_up` reads the columns
    not seen yet, so ``generate`` calls and appended runs may alternate). After each
    token, a row with nothing pending asks :class:`FastForward` for the forced tokens
    (plus ``end_token`` when the document ends by force): they are *pending*. The
    segmented path appends them; in a lockstep batch the processor bans every other
    token until they are written. A row whose token its matcher refuses is failed
    and may only end (as in :class:`JsonLogitsProcessor`). Not thread-safe: one per
    generation.
    """

    def __init__(
        self,
        compiled: Compiled | GatedConstraint,
        forward: FastForward,
        rows: int,
        start: int,
        end_token: int | None,
    ) -> None:
        self.compiled = compiled
        self.forward = forward
        self.matchers: list[Matcher] = [compiled.matcher() for _ in range(rows)]
        self.failed = [False] * rows
        self.pending: list[list[int]] = [[] for _ in range(rows)]
        self.emitted: list[list[int]] = [[] for _ in range(rows)]
        self.consumed = start  # columns of input_ids read so far (the prompt: ``start``)
        self.end_token = end_token
        self._masker: BatchMasker | None = None

    def catch_up(self, input_ids: Any) -> None:
        width = int(input_ids.shape[1])
        if width <= self.consumed:
            return
        columns = input_ids[:, self.consumed :].tolist()
        self.consumed = width
        for row, tokens in enumerate(columns):
            for token in tokens:
                self._take(row, int(token))

    def _take(self, row: int, token: int) -> None:
        matcher = self.matchers[row]
        if self.failed[row] or matcher.is_finished():
            return  # generate pads rows that have ended
        pending = self.pending[row]
        if pending and pending[0] == token:
            del pending[0]
        else:
            pending.clear()
        if not matcher.advance(token):
            self.failed[row] = True
            pending.clear()
            return
        if matcher.is_finished():
            return
        self.emitted[row].append(token)
        if not pending:
            forced = self.forward.forced(matcher, self.emitted[row])
            pending.extend(forced.tokens)
            if forced.ends and self.end_token is not None:
                pending.append(self.end_token)

    def done(self, row: int) -> bool:
        return self.failed[row] or self.matchers[row].is_finished()

    def is_complete(self, row: int = 0) -> bool:
        """Row ``row`` produced a complete document (ended, or may end now)."""
        matcher = self.matchers[row]
        return not self.failed[row] and (matcher.is_finished() or matcher.can_end())

    # transformers' logits-processor protocol
    def __call__(self, input_ids: Any, scores: Any) -> Any:
        started = events.step_started() if events.listeners else 0.0
        self.catch_up(input_ids)
        rows, width = scores.shape
        masker = self._masker
        if masker is None or masker.width != width:
            eos = self.compiled.engine.vocabulary.eos_ids
            masker = self._masker = BatchMasker(width, eos, max_rows=max(rows, 1))
        live = [row for row in range(rows) if not self.matchers[row].is_finished()]
        forced = [row for row in live if self.pending[row] and not self.failed[row]]
        masked = [row for row in live if row not in forced]
        out = scores.clone()
        matchers = [None if self.failed[row] else self.matchers[row] for row in masked]
        masker.apply(out, masked, matchers)
        for row in forced:  # only the next forced token keeps its logit
            token = self.pending[row][0]
            kept = out[row, token].clone()
            out[row].fill_(float("-inf"))
            out[row, token] = kept
        if started and events.listeners:
            events.decoder_step(self.compiled.engine, started)
        return out

    # a stopping criterion: stop the segment when a row has tokens to append
    def stop(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.catch_up(input_ids)
        pending = [bool(p) and not self.done(row) for row, p in enumerate(self.pending)]
        return torch.tensor(pending, dtype=torch.bool, device=input_ids.device)


class _TokenStream:
    """One streamed generation: a transformers streamer that turns token ids into text
    pieces on a queue, a stopping criterion for an early close, and the worker."""

    def __init__(self, backend: TransformersBackend) -> None:
        self.backend = backend
        self.queue: queue.Queue[Any] = queue.Queue()
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stopped = threading.Event()
        self.ended = False
        self.spelled: dict[int, bytes] = {}
        self.worker: threading.Thread | None = None

    # transformers' streamer protocol, less the prompt (see _AfterPrompt): put(token ids), end()
    def put(self, value: Any) -> None:
        vocabulary = self.backend.vocabulary
        for token in value.reshape(-1).tolist():
            if self.ended or int(token) in vocabulary.eos_ids:
                self.ended = True
                continue
            token = int(token)
            piece = self.decoder.decode(self.spelled.get(token) or vocabulary.token_bytes(token))
            if piece:
                self.queue.put(piece)

    def end(self) -> None:
        pass  # the worker posts the Completion, then _END

    # a stopping criterion: an early close stops generation at the next token
    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.stopped.is_set(), dtype=torch.bool)

    def start(self, request: Request) -> None:
        self.spelled = marker_spellings(self.backend.vocabulary, request.reasoning)

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
