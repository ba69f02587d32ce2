"""jsonmode's decoder inside vLLM: a V1 logits processor, one matcher per request.

Load it one of three ways (all equivalent)::

    LLM(model, logits_processors=[JsonModeLogitsProcessor])           # offline engine
    python -m vllm.entrypoints.openai.api_server --model M \\
        --logits-processors jsonmode.adapters.vllm:JsonModeLogitsProcessor
    # or nothing at all: installing jsonmode registers it under vLLM's
    # ``vllm.logits_processors`` entry point, which vLLM loads at start

(Named both ways, vLLM builds it twice: the first instance of an engine does the work,
the other stands by.)

A request opts in with the per-request argument ``json_schema``: the JSON Schema as
JSON text (offline also a dict), in ``SamplingParams(extra_args={"json_schema": ...})``
or, over HTTP, ``"vllm_xargs": {"json_schema": "<schema as JSON text>"}``. Other
requests of the batch are never touched.

Contract:

- **Admission.** :meth:`JsonModeLogitsProcessor.validate_params` runs where vLLM
  admits the request (the API server answers HTTP 400): the schema is parsed and
  compiled (grammar only, cached per process), and a request is refused when its
  schema is invalid, unsupported or over a compile budget, when it also asks for a
  vLLM built-in structured output (two grammars on one row can leave no token at
  all, which the engine answers with HTTP 500), or when it sets ``min_tokens`` (the
  document may be complete before, and the end-of-sequence would be banned).
- **Per request.** Each opted-in request gets its own :class:`~jsonmode.decoding.
  matcher.Matcher` over a schema compiled once per process and tokenizer (the
  compile cache), advanced by the request's generated tokens before each sampling
  step. The batch bookkeeping follows vLLM's :class:`BatchUpdate` exactly: removed,
  then added (an added row may replace one), then moved (one-way or swap); a
  preempted request comes back as an added row whose generated tokens are replayed;
  tokens vLLM discards (a failed KV load) are rolled back.
- **Masks.** All constrained rows are masked at once by
  :class:`~jsonmode.decoding.batch.BatchMasker` (cached rows, tensor operations, no
  Python loop over the vocabulary); end-of-sequence is allowed exactly when the
  document is complete. A row whose sampled token the matcher refuses (another
  processor changed the logits) may only end; the error is logged.
- **What is enforced.** Every keyword the decoder enforces (``compiled.unenforced``
  lists the rest, such as ``uniqueItems``): validate the text afterwards (jsonmode's
  façade does, with ``hosted_vllm/...``), and mind ``max_tokens``, which can cut a
  document short.
- **Metrics.** With ``JSONMODE_METRICS_PORT`` set, the process that builds the
  processor enables :mod:`jsonmode.metrics` and serves ``/metrics`` on that port
  (compile time, mask time, mask-cache hits); with ``PROMETHEUS_MULTIPROC_DIR`` set
  as well, the first process to bind the port serves every process's aggregate.

Not supported: speculative decoding and pooling models (vLLM refuses custom logits
processors there). On GPU with asynchronous scheduling, load the processor with
``logits_processors=`` / ``--logits-processors`` (vLLM then fills in each step's
sampled tokens before the processors run); loaded only through the entry point, a
row whose last token is still vLLM's placeholder cannot be masked and may only end.

Thread-safety: vLLM calls one instance from one thread (its model runner);
``validate_params`` is thread-safe.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    import torch
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.sample.logits_processor import (
        BatchUpdate,
        LogitsProcessor,
        MoveDirectionality,
    )
except ModuleNotFoundError as _missing:
    # Still a ModuleNotFoundError (an ImportError), so importlib users and vLLM's
    # plugin loader see what they expect, but one that says what to do.
    if (_missing.name or "").partition(".")[0] not in ("vllm", "torch"):
        raise
    raise ModuleNotFoundError(
        f"jsonmode.adapters.vllm needs vLLM, and {_missing.name!r} cannot be imported: "
        "it is a logits processor that runs inside vLLM's own environment (the engine or "
        "its OpenAI-compatible server); install vLLM there (pip install vllm), or use "
        "jsonmode.JsonMode('hosted_vllm/MODEL', api_base=...) to talk to a vLLM server "
        "from elsewhere",
        name=_missing.name,
    ) from _missing

from jsonmode import events
from jsonmode.decoding.batch import BatchMasker
from jsonmode.decoding.compiled import CompiledSchema, compile_schema
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import JsonModeError

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

__all__ = ["SCHEMA_ARGUMENT", "JsonModeLogitsProcessor"]

#: The per-request argument that carries the JSON Schema.
SCHEMA_ARGUMENT = "json_schema"
#: vLLM's stand-in for a token sampled but not yet copied back (asynchronous scheduling).
_PLACEHOLDER = -1

log = logging.getLogger(__name__)


def requested_schema(params: SamplingParams) -> str | dict[str, Any] | None:
    """The schema a request asks for (None: it does not opt in).

    Raises VLLMValidationError for a value that is neither JSON text nor a dict.
    """
    extra = params.extra_args or {}
    if SCHEMA_ARGUMENT not in extra:
        return None
    value = extra[SCHEMA_ARGUMENT]
    if isinstance(value, str | dict):
        return value
    raise VLLMValidationError(
        f"{SCHEMA_ARGUMENT} must be a JSON Schema as JSON text (or a dict offline), "
        f"not {type(value).__name__}",
        parameter=SCHEMA_ARGUMENT,
    )


@dataclass(slots=True)
class _Row:
    """One constrained request in the persistent batch.

    ``output`` is vLLM's own list of the request's generated tokens (a live
    reference); ``seen`` the tokens the matcher has consumed from it."""

    request: str
    output: list[int]
    matcher: Matcher | None  # None: the schema failed to compile here (end only)
    seen: list[int] = field(default_factory=list)
    failed: bool = False
    ended: int | None = None  # len(seen) once the matcher accepted an end-of-sequence


class JsonModeLogitsProcessor(LogitsProcessor):
    """Constrains the requests that carry a ``json_schema`` argument (see the module).

    Cost per step: nothing when no row is constrained; otherwise one
    :meth:`Matcher.advance` per new token and one batched mask application (cached
    masks: tens of microseconds a row on CPU; a state seen for the first time costs
    the mask engine's walk, once per process).
    """

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Refuse, at admission, a request this processor could not serve.

        Raises VLLMValidationError (HTTP 400) naming the reason.
        """
        schema = requested_schema(sampling_params)
        if schema is None:
            return
        if sampling_params.structured_outputs is not None:
            raise VLLMValidationError(
                f"{SCHEMA_ARGUMENT} cannot be combined with vLLM's structured outputs "
                "(response_format, structured_outputs): ask for one of them",
                parameter=SCHEMA_ARGUMENT,
            )
        if sampling_params.min_tokens:
            raise VLLMValidationError(
                f"{SCHEMA_ARGUMENT} cannot be combined with min_tokens: the document "
                "may be complete before min_tokens, and end-of-sequence would be banned",
                parameter="min_tokens",
            )
        try:
            compile_schema(schema)  # the grammar only: no vocabulary in this process
        except JsonModeError as exc:
            raise VLLMValidationError(
                f"{SCHEMA_ARGUMENT}: {exc}", parameter=SCHEMA_ARGUMENT
            ) from None

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool):
        # vLLM builds one instance per way it was named (the entry point and
        # --logits-processors both): the first of an engine works, later ones stand by.
        self._standby = _claim(vllm_config)
        self._model_config = vllm_config.model_config
        self._width = int(vllm_config.model_config.get_vocab_size())
        self._max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        self._device = device
        self._rows: dict[int, _Row] = {}
        self._vocabulary: Vocabulary | None = None
        self._masker: BatchMasker | None = None
        _serve_metrics()

    def is_argmax_invariant(self) -> bool:
        """False: the mask changes which token is most likely."""
        return False

    # -- batch bookkeeping -------------------------------------------------------------

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the persistent batch: removed, then added, then moved rows."""
        if batch_update is None or self._standby:
            return
        rows = self._rows
        for index in batch_update.removed:
            rows.pop(index, None)
        for index, params, _prompt, output in batch_update.added:
            schema = requested_schema(params)
            if schema is None:
                rows.pop(index, None)  # the slot may have held a constrained request
            else:
                rows[index] = self._new_row(schema, output)
        for source, target, direction in batch_update.moved:
            moving = rows.pop(source, None)
            other = rows.pop(target, None)
            if moving is not None:
                rows[target] = moving
            if other is not None and direction == MoveDirectionality.SWAP:
                rows[source] = other

    def _new_row(self, schema: str | dict[str, Any], output: list[int]) -> _Row:
        label = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            compiled = self._compile(schema)
        except Exception as exc:  # never the engine: it serves every other request too
            # validate_params refused what fails here; a compile budget can still be
            # met only in this process (another machine's speed): end the request.
            log.error("jsonmode: cannot compile %.200s: %r; the request may only end", label, exc)
            return _Row(label, output, None, failed=True)
        return _Row(label, output, compiled.matcher())

    def _compile(self, schema: str | dict[str, Any]) -> CompiledSchema:
        return compile_schema(schema, self._vocab())

    def _vocab(self) -> Vocabulary:
        """The tokenizer's vocabulary, built on the first constrained request (~1 s)."""
        if self._vocabulary is None:
            self._vocabulary = _vocabulary_of(self._model_config, self._width)
        return self._vocabulary

    # -- each step ---------------------------------------------------------------------

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask the constrained rows of ``logits`` in place; other rows are untouched."""
        if not self._rows:
            return logits
        started = events.step_started() if events.listeners else 0.0
        indices: list[int] = []
        matchers: list[Matcher | None] = []
        for index, row in self._rows.items():
            if index >= logits.shape[0]:
                continue  # not sampled this step
            _guarded(row, _catch_up)
            _guarded(row, _warm)  # a mask that cannot be computed fails its row only
            matcher = row.matcher
            indices.append(index)
            if row.failed or matcher is None or matcher.is_finished():
                matchers.append(None)  # end-of-sequence only
            else:
                matchers.append(matcher)
        if indices:
            try:
                self._batch_masker().apply(logits, indices, matchers)
            except Exception:  # a bug in jsonmode: end these requests, not the engine
                log.exception("jsonmode: masking failed; the constrained requests may only end")
                self._end_all(logits, indices)
        if started and events.listeners:
            _report(self._rows.values(), started)
        return logits

    def _end_all(self, logits: torch.Tensor, indices: list[int]) -> None:
        for index in indices:
            self._rows[index].failed = True
        rows = torch.tensor(indices, device=logits.device)
        ends = torch.tensor(sorted(self._vocab().eos_ids), device=logits.device)
        kept = logits[rows][:, ends]
        logits[rows] = float("-inf")
        logits[rows.unsqueeze(1), ends] = kept

    def _batch_masker(self) -> BatchMasker:
        if self._masker is None:
            self._masker = BatchMasker(
                self._width, self._vocab().eos_ids, max_rows=min(self._max_rows, 256)
            )
        return self._masker


# The engines (by their configuration object) that have a working instance.
_claimed: list[Any] = []
_claimed_lock = threading.Lock()


def _claim(vllm_config: Any) -> bool:
    """Whether an instance already works for the engine of ``vllm_config``; if not,
    the caller's becomes that one. (A strong reference: the id is never reused.)"""
    with _claimed_lock:
        if any(seen is vllm_config for seen in _claimed):
            return True
        _claimed.append(vllm_config)
        return False


def _guarded(row: _Row, work: Callable[[_Row], None]) -> None:
    """Run ``work`` on ``row``; any error ends that request, never the engine (a
    vLLM server serves every other request in the batch too)."""
    if row.failed:
        return
    try:
        work(row)
    except Exception:
        row.failed = True
        log.exception("jsonmode: a constrained request failed; it may only end")


def _warm(row: _Row) -> None:
    """Compute the row's mask now (cached by the engine for the masker to read)."""
    if row.matcher is not None and not row.matcher.is_finished():
        row.matcher.mask()


def _catch_up(row: _Row) -> None:
    """Advance ``row``'s matcher to the request's generated tokens.

    Tokens vLLM discarded since the last step (its list got shorter or changed) are
    rolled back first. A placeholder (asynchronous scheduling) stops the walk and
    fails the row: its state is unknown.
    """
    matcher, output, seen = row.matcher, row.output, row.seen
    if matcher is None or row.failed:
        return
    same = min(len(seen), len(output))
    if same and output[same - 1] != seen[same - 1]:
        same = next(i for i in range(same) if output[i] != seen[i])
    if same < len(seen):
        ended = len(seen) if row.ended is None else row.ended  # later tokens: not fed
        matcher.rollback(max(0, ended - same))
        if row.ended is not None and same < row.ended:
            row.ended = None
        del seen[same:]
    for token in output[len(seen) :]:
        if token == _PLACEHOLDER:
            row.failed = True
            log.error(
                "jsonmode: a sampled token is not known yet (asynchronous scheduling); "
                "load the processor with --logits-processors so vLLM fills it in first"
            )
            return
        if matcher.is_finished():
            seen.append(token)  # vLLM did not stop on this end-of-sequence: more ends
            continue
        if not matcher.advance(token):
            row.failed = True
            log.error(
                "jsonmode: token %d is not allowed by the schema (another logits "
                "processor changed the logits?); the request may only end",
                token,
            )
            return
        seen.append(token)
        if matcher.is_finished():
            row.ended = len(seen)


def _report(rows: Any, started: float) -> None:
    engines = {id(row.matcher.engine): row.matcher.engine for row in rows if row.matcher}
    for engine in engines.values():
        events.decoder_finished(engine)
    events.emit(events.MaskTimed(time.perf_counter() - started))


def _vocabulary_of(model_config: Any, width: int) -> Vocabulary:
    """The vocabulary of vLLM's tokenizer for this model, ``width`` logits wide.

    Raises UsageError when the tokenizer cannot be read (no tokenizer, or a
    tokenizer mode without a tokenizer.json, such as ``mistral``)."""
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config)
    if tokenizer is not None and hasattr(tokenizer, "backend_tokenizer"):
        return Vocabulary.from_tokenizer(tokenizer, vocab_size=width)
    return Vocabulary.from_tokenizer(str(model_config.tokenizer), vocab_size=width)


_metrics_started = False


def _serve_metrics() -> None:
    """Serve jsonmode's metrics from this process when ``JSONMODE_METRICS_PORT`` says so."""
    global _metrics_started
    port = os.environ.get("JSONMODE_METRICS_PORT")
    if not port or _metrics_started:
        return
    import jsonmode.metrics

    _metrics_started = True
    jsonmode.metrics.enable()
    addr = os.environ.get("JSONMODE_METRICS_ADDR", "127.0.0.1")
    try:
        exporter = jsonmode.metrics.serve(int(port), addr=addr)
    except (OSError, ValueError) as exc:  # another process serves the port (multiprocess)
        log.warning("jsonmode: metrics not served from this process: %s", exc)
        return
    log.info("jsonmode: metrics at %s", exporter.url)
