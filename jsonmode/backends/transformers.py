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
import time
from collections.abc import Iterator
from typing import Any

from jsonmode import events
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.deadline import check_timeout
from jsonmode.decoding.compiled import CompiledSchema, compile_schema
from jsonmode.decoding.logits import JsonLogitsProcessor
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import TransientBackendError, UsageError
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

    def _prompt_ids(self, request: Request) -> Any:
        messages = [dict(message) for message in request.messages]
        if getattr(self.tokenizer, "chat_template", None):
            encoded = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            return encoded["input_ids"], encoded.get("attention_mask")
        encoded = self.tokenizer(request.prompt_text() + "\n", return_tensors="pt")
        return encoded["input_ids"], encoded.get("attention_mask")

    def _generate(self, request: Request, streamer: Any = None) -> Completion:
        import torch

        started = time.time()  # the clock transformers' MaxTimeCriteria reads
        input_ids, attention = self._prompt_ids(request)
        device = getattr(self.model, "device", None)
        if device is not None:
            input_ids = input_ids.to(device)
            attention = attention.to(device) if attention is not None else None
        processors = []
        processor: JsonLogitsProcessor | None = None
        if request.constrained:
            processor = JsonLogitsProcessor(self.constrain(request.schema))
            processors.append(processor)
        eos = sorted(self.vocabulary.eos_ids)
        pad = self.tokenizer.pad_token_id
        options: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "eos_token_id": eos or None,
            "pad_token_id": pad if pad is not None else (eos[0] if eos else 0),
            "do_sample": False,
            **self.generate_options,
        }
        if self.timeout is not None:
            from transformers import MaxTimeCriteria, StoppingCriteriaList

            given = options.get("stopping_criteria") or []
            stop = MaxTimeCriteria(self.timeout, initial_timestamp=started)
            options["stopping_criteria"] = StoppingCriteriaList([*given, stop])
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                logits_processor=processors,
                streamer=streamer,
                **options,
            )
        prompt_length = int(input_ids.shape[1])
        generated = [int(t) for t in output[0, prompt_length:].tolist()]
        ended = next((i for i, t in enumerate(generated) if t in self.vocabulary.eos_ids), None)
        if self.timeout is not None and ended is None and time.time() - started > self.timeout:
            raise TransientBackendError(
                f"{self.name}: generation did not finish within the timeout of "
                f"{self.timeout:g} s ({len(generated)} tokens generated)",
                hint="raise timeout= or lower max_new_tokens",
            )
        body = generated if ended is None else generated[:ended]
        data = b"".join(self.vocabulary.token_bytes(t) for t in body)
        truncated = ended is None and len(generated) >= self.max_new_tokens
        if processor is not None and not processor.is_complete(0):
            truncated = True
        if processor is not None and events.listeners:
            events.decoder_finished(processor.compiled.engine)  # exact cache counts per request
        return Completion(
            data.decode("utf-8", errors="replace"),
            Usage(prompt_length, len(generated)),
            truncated=truncated,
        )

    def complete(self, request: Request) -> Completion:
        return self._generate(request)

    async def acomplete(self, request: Request) -> Completion:
        return await asyncio.to_thread(self._generate, request)

    def stream(self, request: Request) -> Iterator[str]:
        """Yield the text as it is generated (then the final Completion is not returned).

        Runs generation in a worker thread and yields decoded pieces as tokens arrive.
        """
        import threading

        from transformers import TextIteratorStreamer

        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True)
        worker = threading.Thread(target=self._generate, args=(request, streamer), daemon=True)
        worker.start()
        yield from streamer
        worker.join()
