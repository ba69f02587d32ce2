"""torch glue: a transformers-compatible logits processor driven by matchers.

``JsonLogitsProcessor(compiled)`` is a plain callable ``(input_ids, scores) ->
scores`` (transformers' two-argument ``LogitsProcessor`` protocol), so it works in
``model.generate(logits_processor=[...])`` and in hand-written loops alike.

Per call: advance each row's matcher by the token sampled last, then restrict every
unfinished row at once with a :class:`~jsonmode.decoding.batch_masks.BatchMasker` (rows
cached per state as short id lists: one ``index_fill_``, or a gather, ``fill_`` and
scatter, per row on the CPU; see that module for the measured choice). Rows that
have finished are left alone. A row whose sampled token was refused (another
processor, beam search reordering) is marked failed and may only emit
end-of-sequence: no row is ever all ``-inf``.
"""

from __future__ import annotations

import torch

from jsonmode import events
from jsonmode.decoding.batch_masks import BatchMasker
from jsonmode.decoding.compiled import Compiled
from jsonmode.decoding.matcher import Matcher
from jsonmode.decoding.reasoning_gate import GatedConstraint

__all__ = ["JsonLogitsProcessor"]


class JsonLogitsProcessor:
    """Constrain generation to what ``compiled`` accepts (a compiled schema, grammar,
    regex or choice, or one behind a reasoning gate). One per ``generate`` call.

    Pass every end-of-sequence id to ``generate`` (``eos_token_id=sorted(
    compiled.vocabulary.eos_ids)``): a row that ended on one generate does not stop
    on would be left alone and run on unconstrained.

    ``max_cached_biases`` bounds the state rows kept (the name predates the
    :class:`~jsonmode.decoding.batch_masks.BatchMasker` that keeps them: a row is now the
    state's shorter id list, ~40 KB for an in-string Qwen2.5 state and a few bytes
    for a structural one, whatever the dtype); rebuilding an evicted one costs
    ~0.1 ms.

    Attributes:
        matchers: one per batch row, created on the first call.
        failed: rows whose sampled token the matcher refused.
    """

    def __init__(
        self, compiled: Compiled | GatedConstraint, *, max_cached_biases: int = 128
    ) -> None:
        self.compiled = compiled
        self.matchers: list[Matcher] = []
        self.failed: list[bool] = []
        self._prompt_length = -1
        self._limit = max_cached_biases
        self._eos = compiled.engine.vocabulary.eos_ids
        self._masker: BatchMasker | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        started = events.step_started() if events.listeners else 0.0  # sampled steps only
        rows, width = scores.shape
        if not self.matchers:
            self.matchers = [self.compiled.matcher() for _ in range(rows)]
            self.failed = [False] * rows
            self._prompt_length = int(input_ids.shape[1])
        elif int(input_ids.shape[1]) > self._prompt_length:
            last = input_ids[:, -1].tolist()
            for row, token in enumerate(last):
                matcher = self.matchers[row]
                if self.failed[row] or matcher.is_finished():
                    continue
                if not matcher.advance(int(token)):
                    self.failed[row] = True
        masker = self._masker
        if masker is None or masker.width != width:
            masker = self._masker = BatchMasker(
                width, self._eos, max_rows=max(rows, 1), max_cached=max(self._limit, 1)
            )
        # Finished rows are padded by generate: leave them alone.
        live = [row for row, matcher in enumerate(self.matchers) if not matcher.is_finished()]
        out = scores.clone()
        masker.apply(out, live, [None if self.failed[row] else self.matchers[row] for row in live])
        if started and events.listeners:
            events.decoder_step(self.compiled.engine, started)
        return out

    def is_complete(self, row: int = 0) -> bool:
        """Row ``row`` produced a complete document (ended, or may end now)."""
        matcher = self.matchers[row]
        return not self.failed[row] and (matcher.is_finished() or matcher.can_end())
