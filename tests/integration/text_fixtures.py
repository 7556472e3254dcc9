"""Feeds for the text encoders: sentences through a model's own tokenizer.json, right-padded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


def tokenized(tokenizer_json: Path, sentences) -> dict:
    """input_ids, attention_mask and token_type_ids (zeros) of a padded batch of sentences."""
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.enable_padding()
    encoded = tokenizer.encode_batch(sentences)
    ids = np.array([e.ids for e in encoded], np.int64)
    mask = np.array([e.attention_mask for e in encoded], np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
