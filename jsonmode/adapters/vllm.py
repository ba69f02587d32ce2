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
or, over HTTP, ``"vllm_xargs": {"json_schema": "<schema as JSON text>"}``. Instead of a
schema, a request may carry ``structural_tag``: xgrammar's structural-tag format as JSON
text (offline also a dict; see :mod:`jsonmode.decoding.grammars.structural_tags`), free
text with constrained regions such as tool calls; it is admitted, compiled and handed
to the engine exactly as a schema is, and a request with both is refused. Other
requests of the batch are never touched. A reasoning model's request adds
``reasoning_end`` (the end marker's text, ``"</think>"``) and optionally
``reasoning_max_tokens`` (an int): its thinking is free up to the end marker (no
end-of-sequence there; the marker matched across tokens, or as one added token), at
most that many tokens of it before the marker is forced, then the schema or the tag
applies (:mod:`jsonmode.decoding.reasoning_gate`). Bad values are refused at admission like a
bad schema; an end marker the tokenizer cannot spell ends the request (logged).

Contract:

- **Admission.** :meth:`JsonModeLogitsProcessor.validate_params` runs where vLLM
  admits the request, in the API server's process (HTTP 400 when it refuses): the
  schema is parsed and compiled there, and only there, and a request is refused
  when its schema is invalid, unsupported or over the compile budget, when it also
  asks for a vLLM built-in structured output (two grammars on one row can leave no
  token at all, which the engine answers with HTTP 500), or when it sets
  ``min_tokens`` (the document may be complete before, and the end-of-sequence
  would be banned).
- **Compile budget.** The server's ``JSONMODE_VLLM_MAX_COMPILE_SECONDS`` (in the API
  server's environment; default 10, compile_schema's), checked while compiling; a
  request may lower it for its own schema with ``json_schema_max_compile_seconds``
  (a positive number; a higher one is held to the server's). A misconfigured value
  refuses every constrained request, naming the variable. Admission runs on vLLM's
  renderer threads for raw prompts and on the API server's event loop for rendered
  ones (chat): there a compile holds the server's other admissions and responses,
  never the engine, for at most the budget: set it to what a step of your clients'
  patience allows (a schema compiled before costs a cache lookup).
- **Compiled once, loaded in the engine.** Admission hands the compiled automata to
  the engine process through a private directory (:mod:`jsonmode.adapters.handoff`:
  ``JSONMODE_VLLM_STORE``, default ``<tmp>/jsonmode-vllm-<uid>``, mode 0700, owned by
  the server's user; content-addressed by schema text and jsonmode's code; bounded,
  oldest dropped first); the engine's :meth:`~JsonModeLogitsProcessor.update_state`
  only loads them (a read and an unpickle of a file only this user can have
  written: ~15 ms for a 1 KB schema that takes seconds to compile), keeping the last 64
  schemas' mask engines. The engine step never compiles: a row whose automata are
  not there (the API server and the engine do not share the directory, or the
  entry was dropped while the request waited) may only end, and the error is
  logged. The tokenizer's vocabulary and the mask engines' per-vocabulary set-up
  are made when the engine starts (~2 s), not in the first constrained step.
- **Per request.** Each opted-in request gets its own :class:`~jsonmode.decoding.
  matcher.Matcher` over its schema's shared mask engine, advanced by the request's
  generated tokens before each sampling step. The batch bookkeeping follows vLLM's
  :class:`BatchUpdate` exactly: removed, then added (an added row may replace one),
  then moved (one-way or swap); a preempted request comes back as an added row
  whose generated tokens are replayed; tokens vLLM discards (a failed KV load) are
  rolled back.
- **Ahead of the forward pass.** :meth:`~JsonModeLogitsProcessor.update_state` runs
  before the model's forward pass, when the tokens sampled at the last step are in
  the requests' lists already: it hands the rows' catching up (``Matcher.advance``)
  and their next masks (first visits of states: the mask engine's walks) to one
  helper thread, which works while the model runs (torch releases the GIL in its
  operations); :meth:`~JsonModeLogitsProcessor.apply` waits for it, then writes the
  rows. A token the helper cannot read yet (a placeholder of asynchronous
  scheduling) is left for ``apply``, which does the rest itself. ``JSONMODE_VLLM_AHEAD=0``
  in the engine's environment keeps all of it in ``apply``.
- **Masks.** All constrained rows are masked at once by
  :class:`~jsonmode.decoding.batch_masks.BatchMasker` (cached rows, tensor operations, no
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

Thread-safety: vLLM calls one instance from one thread (its model runner); the
helper thread touches the rows only between ``update_state`` and the next
``apply`` or ``update_state``, which wait for it first; ``validate_params`` is
thread-safe.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
from jsonmode.adapters.handoff import STORE_ENV, Automata, Handoff, default_directory, entry_key
from jsonmode.decoding.batch_masks import BatchMasker
from jsonmode.decoding.compile.compiler import CompileOptions
from jsonmode.decoding.compiled import Compiled, compile_schema
from jsonmode.decoding.grammars.structural_tags import compile_structural_tag
from jsonmode.decoding.matcher import MaskEngine, Matcher
from jsonmode.decoding.reasoning_gate import EngineConstraint, GatedConstraint, gate
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.errors import JsonModeError
from jsonmode.reasoning import Reasoning

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

__all__ = [
    "AHEAD_ENV",
    "BUDGET_ARGUMENT",
    "BUDGET_ENV",
    "REASONING_CAP_ARGUMENT",
    "REASONING_END_ARGUMENT",
    "SCHEMA_ARGUMENT",
    "TAG_ARGUMENT",
    "JsonModeLogitsProcessor",
]

#: The per-request argument that carries the JSON Schema.
SCHEMA_ARGUMENT = "json_schema"
#: The per-request argument that carries a structural tag (instead of a schema).
TAG_ARGUMENT = "structural_tag"
#: The per-request argument that gates the schema until the model's thinking ends:
#: the end marker's text.
REASONING_END_ARGUMENT = "reasoning_end"
#: The per-request cap on thinking tokens, after which the end marker is forced (an int).
REASONING_CAP_ARGUMENT = "reasoning_max_tokens"
#: The per-request argument that lowers the compile budget (seconds) for its schema.
BUDGET_ARGUMENT = "json_schema_max_compile_seconds"
#: The environment variable of the API server's process that sets the compile budget
#: (seconds; default: compile_schema's, 10 s): a request may lower it, never raise it.
BUDGET_ENV = "JSONMODE_VLLM_MAX_COMPILE_SECONDS"
# The compile options the stored automata are made with (compile_schema's defaults).
_OPTIONS = "defaults"
# Mask engines (one per schema) an engine process keeps.
_ENGINES_KEPT = 64
#: vLLM's stand-in for a token sampled but not yet copied back (asynchronous scheduling).
_PLACEHOLDER = -1
#: The environment variable of the engine's process that, set to ``0``, keeps the rows'
#: catching up and first masks in ``apply`` (default: on a helper thread, ahead).
AHEAD_ENV = "JSONMODE_VLLM_AHEAD"

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


def requested(params: SamplingParams) -> tuple[str, str | dict[str, Any]] | None:
    """What a request asks for: ``(argument, value)``, the argument
    :data:`SCHEMA_ARGUMENT` or :data:`TAG_ARGUMENT` (None: it does not opt in).

    Raises VLLMValidationError for both arguments at once, or a value that is neither
    JSON text nor a dict.
    """
    schema = requested_schema(params)
    extra = params.extra_args or {}
    if TAG_ARGUMENT not in extra:
        return None if schema is None else (SCHEMA_ARGUMENT, schema)
    if schema is not None:
        raise VLLMValidationError(
            f"{SCHEMA_ARGUMENT} and {TAG_ARGUMENT} cannot both be given: ask for one of them",
            parameter=TAG_ARGUMENT,
        )
    value = extra[TAG_ARGUMENT]
    if isinstance(value, str | dict):
        return TAG_ARGUMENT, value
    raise VLLMValidationError(
        f"{TAG_ARGUMENT} must be a structural tag as JSON text (or a dict offline), "
        f"not {type(value).__name__}",
        parameter=TAG_ARGUMENT,
    )


def _compiled(argument: str, value: str | dict[str, Any], seconds: float) -> Compiled:
    """The grammar of what ``argument`` asks for, without a vocabulary."""
    if argument == TAG_ARGUMENT:
        return compile_structural_tag(value, max_compile_seconds=seconds)
    return compile_schema(value, max_compile_seconds=seconds)


def _options_of(argument: str) -> str:
    """The options part of a handoff key: a tag's text never names a schema's entry."""
    return TAG_ARGUMENT if argument == TAG_ARGUMENT else _OPTIONS


def requested_reasoning(params: SamplingParams) -> Reasoning | None:
    """The reasoning gate a request asks for (None: none).

    Raises VLLMValidationError for an end marker that is not a non-empty string (of at
    most 256 characters), a cap that is not a non-negative int, or a cap without an
    end marker.
    """
    extra = params.extra_args or {}
    end = extra.get(REASONING_END_ARGUMENT)
    cap = extra.get(REASONING_CAP_ARGUMENT)
    if end is None:
        if cap is not None:
            raise VLLMValidationError(
                f"{REASONING_CAP_ARGUMENT} needs {REASONING_END_ARGUMENT} (the end marker)",
                parameter=REASONING_CAP_ARGUMENT,
            )
        return None
    if not isinstance(end, str):
        raise VLLMValidationError(
            f"{REASONING_END_ARGUMENT} must be the end marker's text, not {type(end).__name__}",
            parameter=REASONING_END_ARGUMENT,
        )
    try:
        return Reasoning(end, max_tokens=cap)
    except JsonModeError as exc:
        name = REASONING_CAP_ARGUMENT if "max_tokens" in exc.message else REASONING_END_ARGUMENT
        raise VLLMValidationError(f"{name}: {exc}", parameter=name) from None


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
    the mask engine's walk, once per process); a new row, one load from the handoff
    store (milliseconds), never a compile.
    """

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Refuse, at admission, a request this processor could not serve.

        Raises VLLMValidationError (HTTP 400) naming the reason.
        """
        asked = requested(sampling_params)
        if asked is None:
            return
        argument, schema = asked
        if sampling_params.structured_outputs is not None:
            raise VLLMValidationError(
                f"{argument} cannot be combined with vLLM's structured outputs "
                "(response_format, structured_outputs): ask for one of them",
                parameter=argument,
            )
        if sampling_params.min_tokens:
            raise VLLMValidationError(
                f"{argument} cannot be combined with min_tokens: the document "
                "may be complete before min_tokens, and end-of-sequence would be banned",
                parameter="min_tokens",
            )
        seconds = _compile_seconds(sampling_params)
        reasoning = requested_reasoning(sampling_params)
        try:
            # the grammar only: no vocabulary in this process, and none needed
            compiled = _compiled(argument, schema, seconds)
            key = entry_key(_schema_text(schema), _options_of(argument))
            store = _handoff()
        except (JsonModeError, TypeError, ValueError) as exc:
            raise VLLMValidationError(f"{argument}: {exc}", parameter=argument) from None
        if reasoning is not None:
            try:
                gate(compiled, reasoning)  # (an over-long marker; spelling: in the engine)
            except JsonModeError as exc:
                raise VLLMValidationError(
                    f"{REASONING_END_ARGUMENT}: {exc}", parameter=REASONING_END_ARGUMENT
                ) from None
        if store.touch(key):
            return  # (stored for an earlier request: the engine loads it from there)
        automata = Automata(
            compiled.network, compiled.options.max_nesting_depth, compiled.depth_in_levels
        )
        if not store.put(key, automata):
            raise VLLMValidationError(
                f"{argument}: the compiled grammar cannot be handed to the engine "
                f"(the server's log says why: too large, or {store.directory} is full)",
                parameter=argument,
            )

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
        self._engines: OrderedDict[str, MaskEngine] = OrderedDict()
        self._gates: OrderedDict[tuple[int, Reasoning], GatedConstraint] = OrderedDict()
        self._masker: BatchMasker | None = None
        self._unreadable: Exception | None = None
        # The rows' preparation for the next apply, running on the helper thread
        # (started by update_state; see the module's "Ahead of the forward pass").
        self._ahead: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        if not self._standby:
            # Now, while the engine starts (~2 s): in the first constrained request's
            # step it would stall every row of that step.
            try:
                self._vocabulary = _vocabulary_of(self._model_config, self._width)
                # and the per-vocabulary set-up of the mask engines (~1 s: the token
                # index and trie), made with the first one, and the batch masker
                compile_schema({"type": "string"}, self._vocabulary).engine  # noqa: B018
                self._batch_masker()
            except Exception as exc:  # constrained requests end; the engine serves the rest
                self._unreadable = exc
                log.error("jsonmode: cannot read the tokenizer's vocabulary: %r", exc)
        _serve_metrics()

    def is_argmax_invariant(self) -> bool:
        """False: the mask changes which token is most likely."""
        return False

    # -- batch bookkeeping -------------------------------------------------------------

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the persistent batch (removed, then added, then moved rows), then hand
        the rows' catching up and next masks to the helper thread (see the module's
        "Ahead of the forward pass"); called by vLLM before each forward pass."""
        if self._standby:
            return
        self._wait()  # (a step that never reached apply: its helper work ends first)
        if batch_update is not None:
            self._follow(batch_update)
        if self._rows and _ahead_enabled():
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(1, thread_name_prefix="jsonmode-ahead")
            self._pending = self._ahead.submit(self._prepare)

    def _follow(self, batch_update: BatchUpdate) -> None:
        """Apply vLLM's batch changes to the rows: removed, then added, then moved."""
        rows = self._rows
        for index in batch_update.removed:
            rows.pop(index, None)
        for index, params, _prompt, output in batch_update.added:
            asked = requested(params)
            if asked is None:
                rows.pop(index, None)  # the slot may have held a constrained request
            else:
                rows[index] = self._new_row(asked, output, params)
        for source, target, direction in batch_update.moved:
            moving = rows.pop(source, None)
            other = rows.pop(target, None)
            if moving is not None:
                rows[target] = moving
            if other is not None and direction == MoveDirectionality.SWAP:
                rows[source] = other

    def _new_row(
        self, asked: tuple[str, str | dict[str, Any]], output: list[int], params: SamplingParams
    ) -> _Row:
        """The row of a request admitted by :meth:`validate_params`: its automata are
        loaded from the handoff store, never compiled here (the engine step serves
        every row of the batch). A request whose automata cannot be had may only end."""
        argument, schema = asked
        try:
            text = _schema_text(schema)
            engine = self._engine(entry_key(text, _options_of(argument)))
            reasoning = requested_reasoning(params)
            if engine is not None and reasoning is not None:
                return _Row(text, output, self._gated(engine, reasoning).matcher())
        except Exception as exc:  # never the engine: it serves every other request too
            label = schema if isinstance(schema, str) else repr(schema)
            log.error("jsonmode: no automata for %.200s: %r; the request may only end", label, exc)
            return _Row(label if isinstance(schema, str) else "", output, None, failed=True)
        if engine is None:
            log.error(
                "jsonmode: the schema %.200s was not compiled at admission, or its automata "
                "were dropped from %s before the request ran (the API server and the "
                "engine must share that directory: %s); the request may only end",
                text,
                _handoff().directory,
                STORE_ENV,
            )
            return _Row(text, output, None, failed=True)
        return _Row(text, output, Matcher(engine))

    def _gated(self, engine: MaskEngine, reasoning: Reasoning) -> GatedConstraint:
        """``engine`` behind the reasoning gate (one per engine and reasoning, its
        thinking masks shared by the rows; the last few kept). Raises
        UnsupportedSchemaError for a marker the vocabulary cannot spell."""
        key = (id(engine), reasoning)
        gated = self._gates.get(key)
        if gated is None or gated.engine is not engine:
            gated = self._gates[key] = gate(EngineConstraint(engine), reasoning)
            if len(self._gates) > _ENGINES_KEPT:
                self._gates.popitem(last=False)
        return gated

    def _engine(self, key: str) -> MaskEngine | None:
        """The mask engine for the automata stored under ``key`` (one per schema in
        this process, its mask caches shared by the rows; the last
        :data:`_ENGINES_KEPT` kept). Cost: a dictionary lookup, or one read of the
        store (~15 ms for a 1 KB schema of nested ``anyOf`` that takes seconds to compile)."""
        engines = self._engines
        engine = engines.get(key)
        if engine is not None:
            engines.move_to_end(key)
            return engine
        automata = _handoff().get(key)
        if automata is None:
            return None
        engine = MaskEngine(
            automata.network, self._vocab(), max_depth=automata.max_depth, levels=automata.levels
        )
        engines[key] = engine
        if len(engines) > _ENGINES_KEPT:
            engines.popitem(last=False)
        return engine

    def _vocab(self) -> Vocabulary:
        """The tokenizer's vocabulary, read when the engine starts (~1 s). Raises what
        reading it raised (UsageError: no tokenizer.json)."""
        if self._unreadable is not None:
            raise self._unreadable
        if self._vocabulary is None:
            self._vocabulary = _vocabulary_of(self._model_config, self._width)
        return self._vocabulary

    # -- each step ---------------------------------------------------------------------

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask the constrained rows of ``logits`` in place; other rows are untouched."""
        if not self._rows:
            return logits
        started = events.step_started() if events.listeners else 0.0
        self._wait()
        indices: list[int] = []
        matchers: list[Matcher | None] = []
        warm = functools.partial(_warm, self._batch_masker())
        for index, row in self._rows.items():
            if index >= logits.shape[0]:
                continue  # not sampled this step
            _guarded(row, _catch_up)  # (after the helper's work: what it left, if anything)
            _guarded(row, warm)  # a mask that cannot be computed fails its row only
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

    def _prepare(self) -> None:
        """On the helper thread: catch every row up to its generated tokens and compute
        its next mask (cached by the engine for :meth:`apply`); a row's error fails
        that row only, as in ``apply``."""
        warm = functools.partial(_warm, self._batch_masker())
        for row in list(self._rows.values()):
            _guarded(row, _catch_up_ahead)
            _guarded(row, warm)

    def _wait(self) -> None:
        """Wait for the helper's work of this step, if any (its own errors are logged:
        ``apply`` then does the rows' work itself)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception:
                log.exception("jsonmode: preparing the rows ahead failed; apply does it")

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


def _warm(masker: BatchMasker, row: _Row) -> None:
    """Build the row's mask now, as the masker's cached id list (a state's first
    visit: the engine's walk), for the masker's ``apply`` to write."""
    if row.matcher is not None and not row.matcher.is_finished():
        masker.prepare([row.matcher])


def _catch_up(row: _Row, ahead: bool = False) -> None:
    """Advance ``row``'s matcher to the request's generated tokens.

    Tokens vLLM discarded since the last step (its list got shorter or changed) are
    rolled back first. A placeholder (asynchronous scheduling) stops the walk and
    fails the row: its state is unknown; ``ahead`` (the helper thread, before the
    forward pass) stops there without failing it: ``apply`` reads the token later.
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
            if ahead:
                return
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


def _catch_up_ahead(row: _Row) -> None:
    _catch_up(row, ahead=True)


def _ahead_enabled() -> bool:
    """Whether rows are prepared on the helper thread (``JSONMODE_VLLM_AHEAD``, not
    ``0``), read at each step."""
    return os.environ.get(AHEAD_ENV, "1").strip() != "0"


def _report(rows: Any, started: float) -> None:
    engines = {id(row.matcher.engine): row.matcher.engine for row in rows if row.matcher}
    for engine in engines.values():
        events.decoder_finished(engine)
    events.emit(events.MaskTimed(time.perf_counter() - started))


def _schema_text(schema: str | dict[str, Any]) -> str:
    """The schema as the text the handoff store is keyed by: JSON text as sent, a
    dict (offline) as ``json.dumps`` writes it (its key order kept, as vLLM keeps
    it on the way to the engine)."""
    if isinstance(schema, str):
        return schema
    return json.dumps(schema, ensure_ascii=False, allow_nan=False)


def _compile_seconds(params: SamplingParams) -> float:
    """The compile budget for this request: the server's (:data:`BUDGET_ENV`, else
    compile_schema's default), or the request's :data:`BUDGET_ARGUMENT` when lower.

    Raises VLLMValidationError for a request's value that is not a positive number,
    or a server's that is not (naming the variable: a misconfigured server refuses
    every constrained request rather than compile without the budget it was given).
    """
    ceiling = CompileOptions.max_compile_seconds
    configured = os.environ.get(BUDGET_ENV)
    if configured:
        try:
            ceiling = float(configured)
        except ValueError:
            ceiling = math.nan
        if not ceiling > 0:
            raise VLLMValidationError(
                f"the server's {BUDGET_ENV}={configured[:40]!r} is not a positive number "
                "of seconds; ask the server's operator to fix it",
                parameter=SCHEMA_ARGUMENT,
            )
    asked = (params.extra_args or {}).get(BUDGET_ARGUMENT)
    if asked is None:
        return ceiling
    if isinstance(asked, bool) or not isinstance(asked, int | float) or not asked > 0:
        raise VLLMValidationError(
            f"{BUDGET_ARGUMENT} must be a positive number of seconds, not {str(asked)[:40]!r}",
            parameter=BUDGET_ARGUMENT,
        )
    return min(float(asked), ceiling)


_stores: dict[str, Handoff] = {}
_stores_lock = threading.Lock()


def _handoff() -> Handoff:
    """This process's handoff store (the directory :func:`default_directory` names
    now; checked when first used). Raises UsageError when it is not private."""
    directory = default_directory()
    with _stores_lock:
        store = _stores.get(str(directory))
        if store is None:
            store = _stores[str(directory)] = Handoff(directory)
        return store


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
