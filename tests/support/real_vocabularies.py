"""The real tokenizers of ``../shared/data/tokenizers`` (Qwen2.5, Llama-3, GPT-2,
Mistral, Phi-3), read by path and kept per process: each as a ``tokenizers.Tokenizer``
and as jsonmode's :class:`~jsonmode.decoding.vocabulary.Vocabulary`."""

from __future__ import annotations

import functools
from pathlib import Path

import tokenizers

from jsonmode.decoding.vocabulary import Vocabulary

TOKENIZERS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tokenizers"


@functools.cache
def tokenizer(name: str) -> tokenizers.Tokenizer:
    """The tokenizer of that folder (``qwen2.5``, ``llama-3``, ``gpt2``, ...)."""
    return tokenizers.Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))


@functools.cache
def vocabulary(name: str) -> Vocabulary:
    """That tokenizer's vocabulary, as the decoder reads it."""
    return Vocabulary.from_tokenizer(tokenizer(name))
