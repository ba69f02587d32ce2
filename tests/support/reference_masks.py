"""Masks by the slow reference matcher, token by token: the oracle fast masks are
compared with (seconds per mask for a real tokenizer: use small vocabularies)."""

from __future__ import annotations

from typing import Any

import numpy as np


def reference_mask(compiled: Any, state: Any) -> np.ndarray:
    """Which tokens of ``compiled.vocabulary`` the reference matcher takes from
    ``state`` (each token's bytes fed whole), end-of-sequence where the document may
    end."""
    vocabulary = compiled.vocabulary
    reference = compiled.reference()
    allowed = np.zeros(vocabulary.size, dtype=bool)
    for token in range(vocabulary.size):
        data = vocabulary.token_bytes(token)
        if data and vocabulary.allowed_base[token]:
            allowed[token] = bool(reference.feed(state, data))
    if reference.can_end(state):
        allowed[sorted(vocabulary.eos_ids)] = True
    return allowed
