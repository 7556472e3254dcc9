"""whisper.cpp with libggml-npuflow.so: Whisper tiny.en converted from CTranslate2
(tools/whisper_ct2_to_ggml.py) transcribes speech made by espeak-ng, and the transcription with
the backend is the CPU backend's, token for token, while the encoder's MUL_MATs run on NPUFLOW.

Each clip is synthesized here by espeak-ng (Debian), so its words are known."""
from __future__ import annotations

import importlib.util
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ggml_tools import (HOST_ALL, ROOT, WHISPER_TINY_EN, WHISPER_TINY_EN_CT2, Counters, run,
                        tool)

CONVERTER = ROOT / "tools" / "whisper_ct2_to_ggml.py"
# Sentences tiny.en transcribes word for word from espeak-ng's en-us voice; with a wrong mel
# bank, vocabulary or attention split the words come out wrong or not at all.
SENTENCES = [
    "Please call the office before noon tomorrow.",
    "We will run the model on the board and compare the results with the computer.",
    "Open the door and turn on the light.",
]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ref != hyp))
    return row[-1] / max(len(reference), 1)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("whisper") / "speech.wav"
    # Without the sanitizer runtimes the ASan run preloads: espeak-ng hangs under them.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "140", "-w", str(path), " ".join(SENTENCES)],
                   check=True, capture_output=True, env=env, timeout=120)
    return path


def whisper_layers(model: Path) -> tuple[int, int]:
    """(encoder layers, decoder layers) from the ggml file's header."""
    header = struct.unpack("<12i", model.read_bytes()[:48])
    assert header[0] == 0x67676D6C, "not a whisper.cpp ggml file"
    return header[5], header[9]


def transcribe(clip: Path, backend: bool, env: dict | None = None):
    """whisper-cli's transcript (stdout: timestamped segments) and its whole log."""
    result = run([tool("whisper-cli"), "-m", WHISPER_TINY_EN, "-f", clip, "-t", 2, "-l", "en"],
                 backend=backend, env=env)
    return result.stdout, result.stdout + result.stderr


def test_converted_tiny_en_transcribes_the_clip(clip):
    transcript, _ = transcribe(clip, backend=False)
    spoken = words(" ".join(SENTENCES))
    heard = words(re.sub(r"\[[^\]]*\]", " ", transcript))
    # tiny.en on a synthetic voice: every word of these sentences comes through today; one slip in
    # thirty is allowed, a broken conversion loses far more.
    assert word_error_rate(spoken, heard) <= 1 / 30, (spoken, heard)


@pytest.mark.parametrize("device", ["host", "sim"])
def test_transcription_is_the_cpu_backends_with_the_encoder_on_npuflow(clip, device):
    reference, _ = transcribe(clip, backend=False)
    env = dict(HOST_ALL, NPUFLOW_DEVICE=device)
    transcript, log = transcribe(clip, backend=True, env=env)
    assert transcript == reference
    counters = Counters(log)
    encoder_layers, decoder_layers = whisper_layers(WHISPER_TINY_EN)
    # The encoder's six projections per layer (Q, K, V, out, two MLP) and each decoder layer's
    # cross-attention K and V of the encoder output: all 1500 rows (30 s of audio). The decoder's
    # beam-of-5 rows stay on the CPU.
    assert counters.mul_mat == 6 * encoder_layers + 2 * decoder_layers, counters
    assert counters.m_hist == {1500: counters.mul_mat}, counters
    assert counters.fallback == 0, counters
    # The encoder's self-attention (1500 keys) is a FLASH_ATTN_EXT NPUFLOW takes at claim=all.
    assert counters.flash_attn == encoder_layers and counters.flash_attn_fallback == 0, counters


def convert(ct2_dir: Path, out: Path):
    return subprocess.run([sys.executable, str(CONVERTER), str(ct2_dir), str(out)],
                          capture_output=True, text=True)


def copy_ct2(dest: Path, model_bytes: bytes | None = None, vocabulary: str | None = None):
    dest.mkdir()
    source = WHISPER_TINY_EN_CT2
    dest.joinpath("model.bin").write_bytes(
        model_bytes if model_bytes is not None else source.joinpath("model.bin").read_bytes())
    if vocabulary is not None:
        dest.joinpath("vocabulary.txt").write_text(vocabulary)
    else:
        dest.joinpath("vocabulary.txt").write_bytes(source.joinpath("vocabulary.txt").read_bytes())
    return dest


def test_converter_writes_what_setup_converted(tmp_path):
    out = tmp_path / "tiny.en.bin"
    result = convert(WHISPER_TINY_EN_CT2, out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == WHISPER_TINY_EN.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "not_whisper", "bad_dtype", "no_endoftext",
                                    "not_byte_level", "no_vocabulary"])
def test_converter_refuses_a_damaged_model_and_writes_nothing(tmp_path, damage):
    model = WHISPER_TINY_EN_CT2.joinpath("model.bin").read_bytes()
    vocabulary = None
    if damage == "truncated":
        model = model[: len(model) // 2]
    elif damage == "not_whisper":
        # The spec name follows the version (uint32) and its length (uint16).
        model = model[:6] + b"T5Spec".ljust(12, b"\0") + model[6 + 12:]
    elif damage == "bad_dtype":
        # The first variable (decoder/activation, rank 0): its dtype byte follows the rank byte.
        name_end = 6 + 12 + 4 + 4 + 2 + len(b"decoder/activation\0")
        model = model[: name_end + 1] + bytes([77]) + model[name_end + 2:]
    elif damage == "no_endoftext":
        vocabulary = "a\nb\n"
    elif damage == "not_byte_level":
        vocabulary = "a b\n<|endoftext|>\n"
    ct2 = copy_ct2(tmp_path / "ct2", model, vocabulary)
    if damage == "no_vocabulary":
        ct2.joinpath("vocabulary.txt").unlink()
    out = tmp_path / "out.bin"
    result = convert(ct2, out)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.startswith("whisper_ct2_to_ggml: ") and "Traceback" not in result.stderr
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_a_wrong_attention_split_fails_the_transcription_gate(tmp_path, clip, monkeypatch):
    """The word gate tells a wrong conversion apart: with every encoder layer's query and key
    weights swapped (a wrong Q|K|V split), the same clip comes out wrong."""
    spec = importlib.util.spec_from_file_location("whisper_ct2_to_ggml", CONVERTER)
    converter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(converter)
    right = converter.whisper_tensors

    def swapped(variables):
        tensors = dict(right(variables))
        for name in [n for n in tensors if n.startswith("encoder.") and n.endswith("query.weight")]:
            key = name.replace("query", "key")
            tensors[name], tensors[key] = tensors[key], tensors[name]
        yield from tensors.items()

    monkeypatch.setattr(converter, "whisper_tensors", swapped)
    wrong = tmp_path / "wrong.bin"
    converter.convert(WHISPER_TINY_EN_CT2, wrong)
    result = run([tool("whisper-cli"), "-m", wrong, "-f", clip, "-t", 2, "-l", "en"], backend=False)
    heard = words(re.sub(r"\[[^\]]*\]", " ", result.stdout))
    print("heard with Q and K swapped:", " ".join(heard))
    assert word_error_rate(words(" ".join(SENTENCES)), heard) > 1 / 30, heard
