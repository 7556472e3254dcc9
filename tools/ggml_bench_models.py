"""Writes the Llama-architecture GGUF that `make bench-ggml` quantizes to Q4_K_M and Q8_0.

SmolLM2-135M cannot serve for the K-quants: its width, 576, is not a multiple of 256, so
llama-quantize would store most of its projections as a fallback type instead of Q4_K. This model
has SmolLM2's tokenizer (copied from the fetched GGUF, so llama.cpp loads it like any model) and
widths that every quantization type accepts as they are: 12 blocks, d_model 768, 12 query and 4
key/value heads of 64, FFN 2048, SwiGLU, tied embeddings (113M parameters). Its weights are
seeded Gaussians (std 0.02), written as F16: a prefill benchmark needs the shapes and the types,
not trained values. Run with the gguf venv (tools/setup.sh gguf):

    python tools/ggml_bench_models.py SMOLLM2.gguf OUT.gguf
"""
from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

LAYERS, D_MODEL, HEADS, KV_HEADS, FFN = 12, 768, 12, 4, 2048
HEAD_DIM = D_MODEL // HEADS
SEED = 18


def copy_tokenizer(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> int:
    vocab = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(field.name, value, main, sub)
        if field.name == "tokenizer.ggml.tokens":
            vocab = len(value)
    if vocab == 0:
        sys.exit("the source GGUF has no tokenizer.ggml.tokens")
    return vocab


def main(source: str, out: str) -> None:
    reader = gguf.GGUFReader(source)
    tmp = Path(out).with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("npuflow bench llama 113M (random weights, SmolLM2 tokenizer)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    vocab = copy_tokenizer(reader, writer)
    writer.add_vocab_size(vocab)
    writer.add_context_length(2048)
    writer.add_embedding_length(D_MODEL)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)

    rng = np.random.default_rng(SEED)

    def weight(rows: int, cols: int) -> np.ndarray:  # numpy (rows, cols) = ggml ne0=cols, ne1=rows
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    writer.add_tensor("token_embd.weight", weight(vocab, D_MODEL))
    writer.add_tensor("output_norm.weight", np.ones(D_MODEL, dtype=np.float32))
    for i in range(LAYERS):
        b = f"blk.{i}."
        writer.add_tensor(b + "attn_norm.weight", np.ones(D_MODEL, dtype=np.float32))
        writer.add_tensor(b + "attn_q.weight", weight(D_MODEL, D_MODEL))
        writer.add_tensor(b + "attn_k.weight", weight(KV_HEADS * HEAD_DIM, D_MODEL))
        writer.add_tensor(b + "attn_v.weight", weight(KV_HEADS * HEAD_DIM, D_MODEL))
        writer.add_tensor(b + "attn_output.weight", weight(D_MODEL, D_MODEL))
        writer.add_tensor(b + "ffn_norm.weight", np.ones(D_MODEL, dtype=np.float32))
        writer.add_tensor(b + "ffn_gate.weight", weight(FFN, D_MODEL))
        writer.add_tensor(b + "ffn_up.weight", weight(FFN, D_MODEL))
        writer.add_tensor(b + "ffn_down.weight", weight(D_MODEL, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
