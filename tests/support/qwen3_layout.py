"""The Qwen3 tokenizer layout, built offline: the shared Qwen2.5 tokenizer with the four
tokens Qwen3 adds after Qwen2.5's (``<tool_response>`` 151665, ``</tool_response>``
151666, ``<think>`` 151667, ``</think>`` 151668; not marked special, as in Qwen3's
tokenizer.json). Qwen3's base vocabulary and merges are Qwen2.5's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZERS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tokenizers"
if not TOKENIZERS.is_dir():
    TOKENIZERS = Path("/work/shared/data/tokenizers")

THINK, END_THINK = 151667, 151668
QWEN3_ADDED = [
    (151665, "<tool_response>"),
    (151666, "</tool_response>"),
    (THINK, "<think>"),
    (END_THINK, "</think>"),
]


def qwen3_folder(target: Path) -> Path:
    """Write the Qwen3 layout's tokenizer files into ``target`` (created); return it."""
    target.mkdir(parents=True, exist_ok=True)
    for item in (TOKENIZERS / "qwen2.5").iterdir():
        shutil.copy(item, target / item.name)
    data = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    for token_id, content in QWEN3_ADDED:
        data["added_tokens"].append(
            {
                "id": token_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    (target / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    config_file = target / "tokenizer_config.json"
    if config_file.is_file():  # transformers rebuilds its added tokens from this list
        config = json.loads(config_file.read_text(encoding="utf-8"))
        decoder = config.setdefault("added_tokens_decoder", {})
        for token_id, content in QWEN3_ADDED:
            decoder[str(token_id)] = {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": False,
            }
        config_file.write_text(json.dumps(config), encoding="utf-8")
    return target
