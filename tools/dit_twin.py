"""The DiT twin of docs/diffusion.md: writes the random-weight safetensors fixture and computes the
reference run in float64 numpy. The numpy code is the gate the C++ pipeline is compared against,
so it follows the document literally and shares no code with the C++ side.

    python tools/dit_twin.py write OUT [--blocks 4] [--seed 0]
    python tools/dit_twin.py reference MODEL --out LATENT.npy [--steps 20] [--cfg 4.0] [--seed 0]
        [--spectrum] [--spectrum-option k=v,...] [--trace DIR] [--height H] [--width W]
    python tools/dit_twin.py forward MODEL --sigma S --seed K --out DIR [--uncond]

Readings of docs/diffusion.md where it leaves a choice (the C++ side must make the same ones):
 1. Tensor names: the modulators are `blocks.<b>.adaln_{self_attn,cross_attn,mlp}.linear_{1,2}
    .weight` and `final.adaln.linear_{1,2}.weight`; every other name is spelled as in the text
    (`blocks.<b>.self_attn.q.weight`, `blocks.<b>.self_attn.q_norm.weight`, `mlp.fc1.weight`,
    `final.linear.weight`, `t_norm.weight`, `prompt.context`, ...). b is a decimal without padding.
 2. "Sorted by name" is Python's sorted() on the names (code-point order, so `blocks.10` comes
    before `blocks.2`); the data are laid out, the header lists them and the generator draws them in
    that order. The header JSON has `__metadata__` first, compact separators, and is padded with
    spaces to a multiple of 8 bytes (as the safetensors library does), so the data start aligned.
 3. The metadata hold exactly the table's keys. The patch token width is (C + 1) p^2 and the
    final layer's width C p^2, both derived from the metadata (68 and 64 for the twin).
 4. Weight init: each tensor is `rng.standard_normal(shape)` in float64, scaled, then cast to F32.
    "In" of a linear weight `[out, in]` is shape[1]. The gain-0.1 "modulators' linear_2" are the
    blocks' `adaln_*.linear_2`, `final.adaln.linear_2` and `t_embedder.linear_2` (which feeds temb3
    into every modulator). Norm weights are the 1-D
    tensors `t_norm.weight`, `*.q_norm.weight`, `*.k_norm.weight`.
 5. The forward pass, the sampler's Euler step and the CFG combination run in float64 on the
    float32 weights, noise and sigmas; the sigma schedule itself is float32 in the C++ order of
    operations. The timestep embedding takes the float32 sigma widened to float64.
 6. The unconditional context is zeros of [Lc, Dc]; its cross-attention keys are rmsnorm(0) = 0,
    so the softmax is uniform over zero values and the sub-layer adds nothing (no special case).
 7. RoPE pairs are interleaved (2p, 2p + 1) within each axis section; the t section rotates by 0
    (t = 0). theta_h = 10000 * 4^(dh / (dh - 2)) is computed in float64.
 8. Spectrum: the schedule state (window, flex, stop slot) is float32 as in spectrum.cc; options
    are rounded to float32 as strtof would, then the forecast math (Chebyshev rows, ridge Gram,
    Cholesky with the 1e-4 trace retry on a non-positive pivot, the blend) runs in float64. In
    float64 a rank-deficient Gram (lam = 0 with fewer points than m + 1) may give a tiny positive
    pivot where float32 gives a non-positive one: only then can the two sides disagree.
 9. Spectrum records the guided x0 of every computed step (warm-up and post-stop included); a
    forecast step makes no model evaluation, so "evaluations" counts 2 per computed step with
    cfg != 1 and 1 otherwise.
10. Trace files come from the FIRST model evaluation of the run (step 0, conditional branch):
    `velocity.npy` is that branch's unguided v. `noise.npy` is the noise before the sigma_0 factor.
11. `forward --sigma S` rounds S to float32 (the sampler only ever passes float32 sigmas), and uses
    x = noise(seed) with no sigma factor.
12. `reference` without --height/--width uses the square latent of dit.image_tokens
    (sqrt(N) * p on a side: 64 x 64 for the twin); both must be multiples of p.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import time
from dataclasses import dataclass, field

# One BLAS thread unless the caller says otherwise: the matrices are small (1024 x 128), and on a
# shared machine OpenBLAS's spinning worker threads made a forward pass 2-4x slower, not faster.
# Set before numpy loads, which is when OpenBLAS reads it.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402  (after the thread settings above)

# --- Configuration (docs/diffusion.md "File") ---------------------------------------------------

TWIN_METADATA = {
    "dit.hidden": "128",
    "dit.heads": "4",
    "dit.blocks": "4",
    "dit.mlp_ratio": "4",
    "dit.adaln_rank": "32",
    "dit.context_dim": "64",
    "dit.context_tokens": "512",
    "dit.latent_channels": "16",
    "dit.patch": "2",
    "dit.rope_split": "12,10,10",
    "dit.image_tokens": "1024",
}

SUBLAYERS = ("self_attn", "cross_attn", "mlp")  # a block's sub-layers, in execution order
EPS = 1e-6  # rmsnorm and layernorm
FLOW_SHIFT = 3.0  # kAnimaFlowShift


@dataclass(frozen=True)
class DitConfig:
    hidden: int
    heads: int
    blocks: int
    mlp_ratio: int
    adaln_rank: int
    context_dim: int
    context_tokens: int
    latent_channels: int
    patch: int
    rope_split: tuple[int, int, int]
    image_tokens: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def token_features(self) -> int:  # latent channels plus the padding-mask channel, per patch
        return (self.latent_channels + 1) * self.patch**2

    @property
    def out_features(self) -> int:
        return self.latent_channels * self.patch**2

    @staticmethod
    def from_metadata(meta: dict[str, str]) -> "DitConfig":
        def integer(key: str) -> int:
            if key not in meta:
                raise ValueError(f"model metadata lacks {key}")
            return int(meta[key])

        split = tuple(int(v) for v in meta.get("dit.rope_split", "").split(","))
        cfg = DitConfig(
            hidden=integer("dit.hidden"), heads=integer("dit.heads"), blocks=integer("dit.blocks"),
            mlp_ratio=integer("dit.mlp_ratio"), adaln_rank=integer("dit.adaln_rank"),
            context_dim=integer("dit.context_dim"), context_tokens=integer("dit.context_tokens"),
            latent_channels=integer("dit.latent_channels"), patch=integer("dit.patch"),
            rope_split=split, image_tokens=integer("dit.image_tokens"))
        if cfg.hidden % cfg.heads:
            raise ValueError("dit.hidden must be a multiple of dit.heads")
        if len(split) != 3 or sum(split) != cfg.head_dim or any(d % 2 or d <= 0 for d in split):
            raise ValueError(f"dit.rope_split {split} must be three even sizes summing to "
                             f"head_dim {cfg.head_dim}")
        if split[1] <= 2 or split[2] <= 2:
            raise ValueError("the h and w RoPE sections need more than 2 dims (NTK exponent)")
        return cfg


def tensor_shapes(cfg: DitConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the file, by name; the order is fixed later by sorting."""
    d, r, hd, dc = cfg.hidden, cfg.adaln_rank, cfg.head_dim, cfg.context_dim
    shapes: dict[str, tuple[int, ...]] = {
        "x_embedder.weight": (d, cfg.token_features),
        "t_embedder.linear_1.weight": (d, d),
        "t_embedder.linear_2.weight": (3 * d, d),
        "t_norm.weight": (d,),
        "final.adaln.linear_1.weight": (r, d),
        "final.adaln.linear_2.weight": (2 * d, r),
        "final.linear.weight": (cfg.out_features, d),
        "prompt.context": (cfg.context_tokens, dc),
    }
    for b in range(cfg.blocks):
        p = f"blocks.{b}."
        for sub in SUBLAYERS:
            shapes[p + f"adaln_{sub}.linear_1.weight"] = (r, d)
            shapes[p + f"adaln_{sub}.linear_2.weight"] = (3 * d, r)
        for attn, kv_in in (("self_attn", d), ("cross_attn", dc)):
            shapes[p + f"{attn}.q.weight"] = (d, d)
            shapes[p + f"{attn}.k.weight"] = (d, kv_in)
            shapes[p + f"{attn}.v.weight"] = (d, kv_in)
            shapes[p + f"{attn}.o.weight"] = (d, d)
            shapes[p + f"{attn}.q_norm.weight"] = (hd,)
            shapes[p + f"{attn}.k_norm.weight"] = (hd,)
        shapes[p + "mlp.fc1.weight"] = (cfg.mlp_ratio * d, d)
        shapes[p + "mlp.fc2.weight"] = (d, cfg.mlp_ratio * d)
    return shapes


# --- Safetensors, by hand ------------------------------------------------------------------------

def write_safetensors(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """F32 tensors in sorted-name order; written to PATH.partial and renamed, so a reader never
    sees half a file."""
    names = sorted(tensors)
    header: dict[str, object] = {"__metadata__": dict(metadata)}
    offset = 0
    for name in names:
        size = tensors[name].size * 4
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keeps the data 8-byte aligned
    partial = path + ".partial"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())
    os.replace(partial, path)


def read_safetensors(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        raise ValueError(f"{path}: the header runs past the end of the file")
    header = json.loads(data[8:8 + header_len])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {info['dtype']}, the twin is all F32")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end - begin != 4 * math.prod(shape) or end > len(body):
            raise ValueError(f"{path}: {name}'s data_offsets do not fit its shape or the file")
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(shape)
    return tensors, metadata


# --- Weights of the twin (docs/diffusion.md last section) ---------------------------------------

def init_tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    z = rng.standard_normal(shape)
    if name == "prompt.context":
        return z.astype(np.float32)
    if len(shape) == 1:  # a norm weight: near 1 so QK-norm and t_norm stay well scaled
        return (1.0 + 0.1 * z).astype(np.float32)
    # Small modulator and output gains keep gates small and the trajectory smooth.
    # temb3 (t_embedder.linear_2) feeds every modulator directly: at gain 1 the timestep's
    # fast sinusoids made x0 jump 35-40% per step.
    is_modulator_out = name.endswith("linear_2.weight") and ("adaln" in name or
                                                              name.startswith("t_embedder."))
    gain = 0.1 if is_modulator_out else 0.5 if name == "final.linear.weight" else 1.0
    return (z * gain / math.sqrt(shape[1])).astype(np.float32)


def make_twin(blocks: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    metadata = dict(TWIN_METADATA, **{"dit.blocks": str(blocks)})
    shapes = tensor_shapes(DitConfig.from_metadata(metadata))
    rng = np.random.default_rng(seed)
    return {name: init_tensor(rng, name, shapes[name]) for name in sorted(shapes)}, metadata


def load_model(path: str) -> tuple[DitConfig, dict[str, np.ndarray]]:
    """The configuration from the metadata, and the weights widened to float64 after checking
    every expected tensor's shape."""
    tensors, metadata = read_safetensors(path)
    cfg = DitConfig.from_metadata(metadata)
    weights = {}
    for name, shape in tensor_shapes(cfg).items():
        if name not in tensors:
            raise ValueError(f"{path}: tensor {name} is missing")
        if tensors[name].shape != shape:
            raise ValueError(f"{path}: {name} is {tensors[name].shape}, expected {shape}")
        weights[name] = tensors[name].astype(np.float64)
    return cfg, weights


# --- Noise: splitmix64 + Box-Muller (docs/diffusion.md "Noise") ---------------------------------

def splitmix64(x: np.ndarray) -> np.ndarray:
    """Elementwise on uint64, wrapping mod 2^64 on purpose."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def gaussian_noise(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Value i of seed s from the counters (s << 32) + 2i and + 2i + 1, float32, row-major."""
    if not 0 <= seed < 2**31:
        raise ValueError("the noise seed must be in [0, 2^31)")
    count = math.prod(shape)
    counters = np.uint64(seed << 32) + np.uint64(2) * np.arange(count, dtype=np.uint64)
    u1 = (splitmix64(counters) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    u2 = (splitmix64(counters + np.uint64(1)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    z = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * np.pi * u2)
    return z.astype(np.float32).reshape(shape)


# --- Elementwise helpers (docs/diffusion.md "Forward", notation) --------------------------------

def silu(u: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # e^-u = inf for very negative u gives the right limit, -0
        return u / (1.0 + np.exp(-u))


def rmsnorm(u: np.ndarray) -> np.ndarray:
    return u / np.sqrt(np.mean(u * u, axis=-1, keepdims=True) + EPS)


def layernorm(u: np.ndarray) -> np.ndarray:
    centred = u - np.mean(u, axis=-1, keepdims=True)
    return centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + EPS)


def gelu(u: np.ndarray) -> np.ndarray:
    # u * u * u, not u**3: numpy's float power is ~100x slower and this is the MLP's hot spot.
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * (u * u * u))))


def linear(weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """W x for a PyTorch-layout [out, in] weight, on rows of x."""
    return x @ weight.T


def softmax_rows_inplace(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, overwriting scores (they are 4 M values per attention)."""
    scores -= scores.max(axis=-1, keepdims=True)  # stable: the largest exponent is 0
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


# --- Forward pass -------------------------------------------------------------------------------

def patchify(x: np.ndarray, p: int) -> np.ndarray:
    """[C, H, W] plus a zero mask channel -> [N, (C + 1) p^2], feature c p^2 + py p + px."""
    c, h, w = x.shape
    padded = np.concatenate([x, np.zeros((1, h, w), x.dtype)], axis=0)
    patches = padded.reshape(c + 1, h // p, p, w // p, p).transpose(1, 3, 0, 2, 4)
    return patches.reshape((h // p) * (w // p), (c + 1) * p * p)


def unpatchify(tokens: np.ndarray, channels: int, h: int, w: int, p: int) -> np.ndarray:
    """[N, C p^2] -> [C, H, W], the inverse of patchify without the mask channel."""
    patches = tokens.reshape(h // p, w // p, channels, p, p).transpose(2, 0, 3, 1, 4)
    return patches.reshape(channels, h, w)


def timestep_features(sigma: float, hidden: int) -> np.ndarray:
    half = hidden // 2
    freq = np.exp(-math.log(10000.0) * np.arange(half) / half)
    arg = (1000.0 * sigma) * freq
    return np.concatenate([np.cos(arg), np.sin(arg)])


def timestep_conditioning(w: dict, sigma: float, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """(temb3 [3D], emb [D]): temb3 is added to every modulator, emb feeds their LoRA."""
    s = timestep_features(sigma, hidden)
    hidden_t = silu(linear(w["t_embedder.linear_1.weight"], s))
    temb3 = linear(w["t_embedder.linear_2.weight"], hidden_t)
    emb = rmsnorm(s) * w["t_norm.weight"]
    return temb3, emb


def modulation(w: dict, prefix: str, emb: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """AdaLN-LoRA: linear_2 (linear_1 silu(emb)) + the matching part of temb3."""
    low_rank = linear(w[prefix + "linear_1.weight"], silu(emb))
    return linear(w[prefix + "linear_2.weight"], low_rank) + bias


def modulate(x: np.ndarray, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return layernorm(x) * (1.0 + scale) + shift


def rope_tables(cfg: DitConfig, hp: int, wp: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin per token and rotation pair, [N, head_dim / 2], sections t, h, w in order."""
    dt, dh, dw = cfg.rope_split
    rows, cols = np.divmod(np.arange(hp * wp), wp)  # token n = i Wp + j
    sections = (
        (np.zeros(hp * wp), dt, 10000.0),
        (rows.astype(np.float64), dh, 10000.0 * 4.0 ** (dh / (dh - 2))),  # NTK, ratio 4
        (cols.astype(np.float64), dw, 10000.0 * 4.0 ** (dw / (dw - 2))),
    )
    angles = np.concatenate(
        [pos[:, None] * theta ** (-2.0 * np.arange(d // 2) / d) for pos, d, theta in sections],
        axis=1)
    return np.cos(angles), np.sin(angles)


def apply_rope(u: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotates the interleaved pairs (2q, 2q + 1) of u [heads, N, hd]."""
    u0, u1 = u[..., 0::2], u[..., 1::2]
    out = np.empty_like(u)
    out[..., 0::2] = u0 * cos - u1 * sin
    out[..., 1::2] = u0 * sin + u1 * cos
    return out


def split_heads(u: np.ndarray, heads: int) -> np.ndarray:
    """[N, D] -> [heads, N, hd]: head e takes columns e hd .. e hd + hd - 1."""
    n, d = u.shape
    return u.reshape(n, heads, d // heads).transpose(1, 0, 2)


def attention(w: dict, prefix: str, cfg: DitConfig, h: np.ndarray, source: np.ndarray,
              rope: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """QK-norm multi-head attention of h's queries over source's keys and values, with RoPE on
    q and k when given; returns o's projection [N, D]."""
    q = split_heads(linear(w[prefix + "q.weight"], h), cfg.heads)
    k = split_heads(linear(w[prefix + "k.weight"], source), cfg.heads)
    v = split_heads(linear(w[prefix + "v.weight"], source), cfg.heads)
    q = rmsnorm(q) * w[prefix + "q_norm.weight"]
    k = rmsnorm(k) * w[prefix + "k_norm.weight"]
    if rope is not None:
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    scores = q @ k.transpose(0, 2, 1)
    scores *= 1.0 / math.sqrt(cfg.head_dim)
    probs = softmax_rows_inplace(scores)
    o = (probs @ v).transpose(1, 0, 2).reshape(h.shape[0], cfg.hidden)
    return linear(w[prefix + "o.weight"], o)


def transformer_block(w: dict, b: int, cfg: DitConfig, x: np.ndarray, emb: np.ndarray,
                      temb3: np.ndarray, context: np.ndarray,
                      rope: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    d = cfg.hidden
    p = f"blocks.{b}."
    for sub in SUBLAYERS:
        m = modulation(w, p + f"adaln_{sub}.", emb, temb3)
        shift, scale, gate = m[0:d], m[d:2 * d], m[2 * d:3 * d]
        h = modulate(x, shift, scale)
        if sub == "self_attn":
            f = attention(w, p + "self_attn.", cfg, h, h, rope)
        elif sub == "cross_attn":
            f = attention(w, p + "cross_attn.", cfg, h, context, None)
        else:
            f = linear(w[p + "mlp.fc2.weight"], gelu(linear(w[p + "mlp.fc1.weight"], h)))
        x = x + gate * f
    return x


def final_layer(w: dict, cfg: DitConfig, x: np.ndarray, emb: np.ndarray,
                temb3: np.ndarray) -> np.ndarray:
    d = cfg.hidden
    m = modulation(w, "final.adaln.", emb, temb3[0:2 * d])
    return linear(w["final.linear.weight"], modulate(x, m[0:d], m[d:2 * d]))


@dataclass
class ForwardTrace:
    """What one evaluation leaves for block-level comparisons."""

    blocks: list[np.ndarray] = field(default_factory=list)  # x after each block, [N, D]
    final_tokens: np.ndarray | None = None  # [N, C p^2], before unpatchify
    velocity: np.ndarray | None = None  # [C, H, W]

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        for b, x in enumerate(self.blocks):
            save_npy(os.path.join(directory, f"block_{b}.npy"), x)
        save_npy(os.path.join(directory, "final_tokens.npy"), self.final_tokens)
        save_npy(os.path.join(directory, "velocity.npy"), self.velocity)


class DitModel:
    def __init__(self, cfg: DitConfig, weights: dict[str, np.ndarray]):
        self.cfg = cfg
        self.w = weights
        self._rope: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def velocity(self, x: np.ndarray, sigma: float, context: np.ndarray,
                 trace: ForwardTrace | None = None) -> np.ndarray:
        """v = model(x_t, sigma, context) for x_t [C, H, W], in float64."""
        cfg, p = self.cfg, self.cfg.patch
        c, h, w = x.shape
        if c != cfg.latent_channels or h % p or w % p:
            raise ValueError(f"latent {x.shape}: needs {cfg.latent_channels} channels and H, W "
                             f"multiples of {p}")
        key = (h // p, w // p)
        if key not in self._rope:
            self._rope[key] = rope_tables(cfg, *key)
        tokens = linear(self.w["x_embedder.weight"], patchify(x, p))
        temb3, emb = timestep_conditioning(self.w, sigma, cfg.hidden)
        for b in range(cfg.blocks):
            tokens = transformer_block(self.w, b, cfg, tokens, emb, temb3, context, self._rope[key])
            if trace is not None:
                trace.blocks.append(tokens)
        out = final_layer(self.w, cfg, tokens, emb, temb3)
        v = unpatchify(out, cfg.latent_channels, h, w, p)
        if trace is not None:
            trace.final_tokens, trace.velocity = out, v
        return v


# --- Sampler: FlowMatch schedule and Euler step (src/diffusion/flow_sampler.cc, in float32) ----

def time_snr_shift(shift: np.float32, sigma: np.float32) -> np.float32:
    if shift == np.float32(1):
        return sigma
    return shift * sigma / (np.float32(1) + (shift - np.float32(1)) * sigma)


def discrete_flow_sigmas(steps: int, shift: float = FLOW_SHIFT) -> np.ndarray:
    """steps + 1 float32 sigmas, every operation in float32 as flow_sampler.cc does."""
    if steps < 1:
        raise ValueError("flow schedule: at least one step")
    f32 = np.float32
    shift32, last = f32(shift), f32(999)

    def sigma_at(t: np.float32) -> np.float32:
        return time_snr_shift(shift32, (t + f32(1)) / f32(1000))

    if steps == 1:
        sigmas = [sigma_at(last)]
    else:
        stride = last / f32(steps - 1)
        sigmas = [sigma_at(last - stride * f32(i)) for i in range(steps)]
    return np.array(sigmas + [f32(0)], dtype=np.float32)


def euler_step(x: np.ndarray, x0: np.ndarray, sigma: float, sigma_next: float) -> np.ndarray:
    return x + (x - x0) / sigma * (sigma_next - sigma)


# --- Spectrum forecaster (src/diffusion/spectrum.cc; schedule in float32, math in float64) -----

SPECTRUM_DEFAULTS = {"w": 0.4, "m": 3, "lam": 1.0, "window": 2, "flex": 0.5, "warmup": 4,
                     "stop": 0.9}
SPECTRUM_INTEGER_KEYS = ("m", "window", "warmup")


def parse_spectrum_options(text: str) -> dict:
    """"k=v,..." over sd.cpp's defaults; float options rounded to float32 as strtof would."""
    options = dict(SPECTRUM_DEFAULTS)
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"spectrum option '{item}' has no '=' (key=value)")
        if key not in options:
            raise ValueError(f"unknown spectrum option '{key}' (known: {', '.join(options)})")
        try:
            options[key] = int(value) if key in SPECTRUM_INTEGER_KEYS else float(value)
        except ValueError:
            kind = "an integer" if key in SPECTRUM_INTEGER_KEYS else "a number"
            raise ValueError(f"spectrum option {key}: '{value}' is not {kind}") from None
    for key in options:
        if key not in SPECTRUM_INTEGER_KEYS:
            options[key] = float(np.float32(options[key]))
    o = options
    if not (0 <= o["m"] <= 16 and o["lam"] >= 0 and o["window"] >= 0 and o["flex"] >= 0
            and o["warmup"] >= 0 and 0 <= o["stop"] <= 1 and math.isfinite(o["w"])):
        raise ValueError(f"spectrum options out of range: {o}")
    return options


def chebyshev_row(tau: float, degree: int) -> np.ndarray:
    row = np.zeros(degree + 1)
    row[0] = 1.0
    if degree >= 1:
        row[1] = tau
    for j in range(2, degree + 1):
        row[j] = 2.0 * tau * row[j - 1] - row[j - 2]
    return row


def cholesky_lower(a: np.ndarray) -> np.ndarray | None:
    """spectrum.cc's Cholesky; None on a non-positive pivot (where it would retry)."""
    n = a.shape[0]
    lower = np.zeros_like(a)
    for i in range(n):
        for j in range(i + 1):
            dot = float(lower[i, :j] @ lower[j, :j])
            if i == j:
                pivot = a[i, i] - dot
                if pivot <= 0.0:
                    return None
                lower[i, i] = math.sqrt(pivot)
            else:
                lower[i, j] = (a[i, j] - dot) / lower[j, j]
    return lower


def cholesky_solve(lower: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = len(b)
    y, x = np.zeros(n), np.zeros(n)
    for i in range(n):
        y[i] = (b[i] - lower[i, :i] @ y[:i]) / lower[i, i]
    for i in reversed(range(n)):
        x[i] = (y[i] - lower[i + 1:, i] @ x[i + 1:]) / lower[i, i]
    return x


def ridge_weights(times: list[float], tau_at: float, degree: int, lam: float) -> np.ndarray:
    """a = Phi (Phi^T Phi + lam I)^-1 phi(tau_at): the Chebyshev fit's value at tau_at as weights
    on the stored points, oldest first."""
    design = np.stack([chebyshev_row(t, degree) for t in times])
    gram = design.T @ design + lam * np.eye(degree + 1)
    lower = cholesky_lower(gram)
    if lower is None:  # sd.cpp's safeguard: raise the diagonal once, use whatever comes out
        gram = gram + np.eye(degree + 1) * (1e-4 * np.trace(gram) / (degree + 1))
        lower = cholesky_lower(gram)
        if lower is None:
            raise FloatingPointError("spectrum: the ridge system is not positive definite")
    return design @ cholesky_solve(lower, chebyshev_row(tau_at, degree))


class SpectrumForecaster:
    def __init__(self, options: dict, total_steps: int):
        f32 = np.float32
        self.o = options
        self.capacity = max(options["m"] + 1, 6)
        self.stop_slot = int(f32(options["stop"]) * f32(total_steps))  # float product, truncated
        self.window = f32(options["window"])
        self.slot = 0
        self.since_compute = 0
        self.history: list[np.ndarray] = []
        self.times: list[float] = []

    @staticmethod
    def normalized_time(slot: int) -> float:
        return 2.0 * slot / 50.0 - 1.0  # sd.cpp's fixed 50, whatever the step count

    def should_forecast(self) -> bool:
        if self.slot < self.o["warmup"]:
            return False
        if self.stop_slot > 0 and self.slot >= self.stop_slot:
            return False
        if len(self.history) < 2:
            return False
        window = max(1, int(math.floor(self.window)))
        return (self.since_compute + 1) % window != 0

    def record(self, x0: np.ndarray) -> None:
        self.history.append(x0.copy())
        self.times.append(self.normalized_time(self.slot))
        del self.history[:-self.capacity], self.times[:-self.capacity]
        if self.slot >= self.o["warmup"]:
            self.window = np.float32(self.window + np.float32(self.o["flex"]))
        self.since_compute = 0
        self.slot += 1

    def forecast(self) -> np.ndarray:
        ridge = ridge_weights(self.times, self.normalized_time(self.slot), self.o["m"],
                              self.o["lam"])
        cheb = np.zeros_like(self.history[0])
        for weight, stored in zip(ridge, self.history):  # oldest to newest, as spectrum.cc sums
            cheb += weight * stored
        newest, before = self.history[-1], self.history[-2]
        taylor = newest + 0.5 * (newest - before)
        w = self.o["w"]
        self.since_compute += 1
        self.slot += 1
        return (1.0 - w) * taylor + w * cheb


# --- Sampling run -------------------------------------------------------------------------------

@dataclass
class SampleResult:
    latent: np.ndarray
    computed_steps: list[int]
    forecast_steps: list[int]
    evaluations: int


def sample(model: DitModel, context: np.ndarray, steps: int, cfg_scale: float, seed: int,
           height: int, width: int, spectrum: dict | None,
           trace_dir: str | None) -> SampleResult:
    """FlowMatch Euler with CFG and optional Spectrum, docs/diffusion.md "Sampler"."""
    sigmas32 = discrete_flow_sigmas(steps)
    sigmas = sigmas32.astype(np.float64)
    noise = gaussian_noise(seed, (model.cfg.latent_channels, height, width))
    uncond = np.zeros_like(context)
    forecaster = SpectrumForecaster(spectrum, steps) if spectrum is not None else None
    first_trace = ForwardTrace() if trace_dir else None
    x = sigmas[0] * noise.astype(np.float64)
    computed, forecast, evaluations = [], [], 0
    for i in range(steps):
        sigma = sigmas[i]
        if forecaster is not None and forecaster.should_forecast():
            x0 = forecaster.forecast()
            forecast.append(i + 1)
        else:
            v = model.velocity(x, sigma, context, first_trace if evaluations == 0 else None)
            evaluations += 1
            if cfg_scale != 1.0:
                v_uncond = model.velocity(x, sigma, uncond)
                evaluations += 1
                v = v_uncond + cfg_scale * (v - v_uncond)
            x0 = v * (-sigma) + x  # flow: c_out = -sigma, c_skip = 1
            if forecaster is not None:
                forecaster.record(x0)
            computed.append(i + 1)
        x = euler_step(x, x0, sigma, sigmas[i + 1])
    if trace_dir:
        first_trace.save(trace_dir)
        save_npy(os.path.join(trace_dir, "noise.npy"), noise)
        save_npy(os.path.join(trace_dir, "sigmas.npy"), sigmas32)
    return SampleResult(x, computed, forecast, evaluations)


# --- Command line -------------------------------------------------------------------------------

def save_npy(path: str, array: np.ndarray) -> None:
    """float32 .npy at exactly PATH (np.save would append .npy to other names), atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = path + ".partial"
    with open(partial, "wb") as f:
        np.save(f, np.ascontiguousarray(array, dtype=np.float32))
    os.replace(partial, path)


def default_side(cfg: DitConfig) -> int:
    side = math.isqrt(cfg.image_tokens)
    if side * side != cfg.image_tokens:
        raise ValueError("dit.image_tokens is not square: pass --height and --width")
    return side * cfg.patch


def command_write(args: argparse.Namespace) -> None:
    tensors, metadata = make_twin(args.blocks, args.seed)
    write_safetensors(args.out, tensors, metadata)


def command_reference(args: argparse.Namespace) -> None:
    cfg, weights = load_model(args.model)
    height = args.height or default_side(cfg)
    width = args.width or default_side(cfg)
    spectrum = parse_spectrum_options(args.spectrum_option) if args.spectrum else None
    start = time.perf_counter()
    result = sample(DitModel(cfg, weights), weights["prompt.context"], args.steps, args.cfg,
                    args.seed, height, width, spectrum, args.trace)
    seconds = time.perf_counter() - start
    save_npy(args.out, result.latent)
    print(json.dumps({"computed_steps": result.computed_steps,
                      "forecast_steps": result.forecast_steps,
                      "evaluations": result.evaluations, "seconds": round(seconds, 3)}))


def command_forward(args: argparse.Namespace) -> None:
    cfg, weights = load_model(args.model)
    height = args.height or default_side(cfg)
    width = args.width or default_side(cfg)
    context = weights["prompt.context"]
    if args.uncond:
        context = np.zeros_like(context)
    x = gaussian_noise(args.seed, (cfg.latent_channels, height, width)).astype(np.float64)
    trace = ForwardTrace()
    DitModel(cfg, weights).velocity(x, float(np.float32(args.sigma)), context, trace)
    trace.save(args.out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("write", help="write the twin's safetensors file")
    w.add_argument("out")
    w.add_argument("--blocks", type=int, default=4)
    w.add_argument("--seed", type=int, default=0)
    w.set_defaults(run=command_write)

    r = sub.add_parser("reference", help="run the sampler in float64 numpy")
    r.add_argument("model")
    r.add_argument("--out", required=True, help="final latent, float32 .npy [C, H, W]")
    r.add_argument("--steps", type=int, default=20)
    r.add_argument("--cfg", type=float, default=4.0)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--spectrum", action="store_true")
    r.add_argument("--spectrum-option", default="", help="k=v,... over sd.cpp's defaults")
    r.add_argument("--trace", help="directory for the first evaluation's intermediates")
    r.add_argument("--height", type=int, help="default: the square latent of dit.image_tokens")
    r.add_argument("--width", type=int, help="default: the square latent of dit.image_tokens")
    r.set_defaults(run=command_reference)

    f = sub.add_parser("forward", help="one model evaluation on noise(seed)")
    f.add_argument("model")
    f.add_argument("--sigma", type=float, required=True)
    f.add_argument("--seed", type=int, required=True)
    f.add_argument("--out", required=True, help="directory for the intermediates")
    f.add_argument("--uncond", action="store_true", help="zero context instead of the prompt")
    f.add_argument("--height", type=int, help="default: the square latent of dit.image_tokens")
    f.add_argument("--width", type=int, help="default: the square latent of dit.image_tokens")
    f.set_defaults(run=command_forward)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (ValueError, OSError, FloatingPointError) as e:
        print(f"dit_twin: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
