// npuflow's faithfulness gate for the ggml backend: MUL_MAT on the NPUFLOW device against ggml's
// own CPU backend, on prefill-sized shapes (M in {128, 512, 2048}; the projections of
// SmolLM2-135M and Llama-3.2-1B) for every weight type the backend makes resident.
//
// Two activation sets per case:
//  - "exact": values q * 2^e with |q| <= 127 and one +-127 per 32-block, a single exponent per
//    256-block. The CPU backend converts activations to its vec_dot type (F16, BF16, Q8_0, Q8_1,
//    Q8_K) before its dot products; these values survive every such conversion unchanged, so the
//    comparison isolates NPUFLOW's arithmetic (dequantize + GEMM) from the CPU's activation
//    rounding. Gate: NMSE <= 1e-6 on host (5e-4 on sim, whose operands are fp16).
//  - "random": Gaussian activations, which the CPU rounds to 8 bits for quantized weights. Gate:
//    NMSE <= 5e-4, test-backend-ops' MUL_MAT limit. Run at M = 128 only.
//  - "rawblk" (the native types, M = 128): Gaussian activations on a weight whose block bits are
//    random but for its scales, the patterns another quantizer may write.
//  - "ties" (the native types, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, MXFP4, and Q6_K on host, M = 128):
//    every value but a block's extreme (per 32 values; per 256 for the K-quants' Q8_K activation)
//    lies exactly halfway between two 8-bit levels, where the CPU's rounding (ties to even on x86
//    and arm64, away from zero in ggml's reference) decides.
// On the native path (NPUFLOW_QUANT_PATH=native, the default) Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, MXFP4
// (and on host Q6_K, whose 16-value groups the RK3588 does not take) weights stay int8 and their
// activations are quantized as the CPU backend quantizes them (Q8_0; Q8_1 with its block sums for
// Q4_1's min; Q8_K for Q4_K, Q5_K and Q6_K); the integer sums are then exact on host and sim
// alike, so every activation set of those types is held to NMSE <= 1e-9 (the CPU's
// own fp32 summation order; the dequantizing path is ~1e-5 off on "random"). It also checks the
// resident-weight cache: packed once per weight, reused, and repacked when the weight's bytes
// change (in a weights buffer and in a plain buffer).
//
// Usage: npuflow_ggml_vs_cpu [--quick]   (exit 0 = all gates held; nothing is skipped)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "ggml_test_util.h"

namespace {

struct Shape {
  int64_t k, n;
  const char* what;
};

const Shape kShapes[] = {
    {576, 576, "SmolLM2-135M attn_q/attn_output"},   {576, 192, "SmolLM2-135M attn_k/attn_v"},
    {576, 1536, "SmolLM2-135M ffn_gate/ffn_up"},     {1536, 576, "SmolLM2-135M ffn_down"},
    {2048, 2048, "Llama-3.2-1B attn_q/attn_output"}, {2048, 512, "Llama-3.2-1B attn_k/attn_v"},
    {2048, 8192, "Llama-3.2-1B ffn_gate/ffn_up"},    {8192, 2048, "Llama-3.2-1B ffn_down"},
};
const ggml_type kTypes[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                            GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                            GGML_TYPE_Q6_K, GGML_TYPE_MXFP4};
const int64_t kRows[] = {128, 512, 2048};

double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(ref[i]) - got[i];
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return norm > 0 ? err / norm : err;
}

void fill_exact_activations(std::vector<float>& x, int64_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int> q(-127, 127), e(-9, -5), sign(0, 1);
  for (size_t row = 0; row < x.size() / k; ++row) {
    for (int64_t b = 0; b < k; b += 256) {
      const float scale = std::ldexp(1.0f, e(rng));
      for (int64_t i = b; i < std::min(k, b + 256); ++i) {
        const int v = (i % 32 == 0) ? (sign(rng) ? 127 : -127) : q(rng);
        x[row * k + i] = static_cast<float>(v) * scale;
      }
    }
  }
}

void fill_tie_activations(std::vector<float>& x, int64_t k, int64_t block, std::mt19937& rng) {
  std::uniform_int_distribution<int> level(-127, 126), e(-9, -3), sign(0, 1);
  for (size_t row = 0; row < x.size() / k; ++row) {
    for (int64_t b = 0; b < k; b += block) {
      const float scale = std::ldexp(1.0f, e(rng));  // amax = 127 * scale: x / d is exact
      for (int64_t i = b; i < std::min(k, b + block); ++i) {
        const float v = i == b ? (sign(rng) ? 127.0f : -127.0f) : level(rng) + 0.5f;
        x[row * k + i] = v * scale;
      }
    }
  }
}

void fill_gaussian(std::vector<float>& x, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> g(0.0f, sigma);
  for (float& v : x) v = g(rng);
}

struct Harness {
  npuflow_test::LoadedBackends loaded;
  ggml_backend_t cpu = nullptr;
  ggml_backend_t npu = nullptr;
  double max_nmse_exact = 1e-6;
  double max_nmse_random = 5e-4;
  double max_nmse_native = 1e-9;  // the native types, every activation set
  bool native_path = true;
  // Q6_K's 16-value groups: the host's group-wise GEMM takes them; the RK3588's (sim, rocket)
  // takes groups of 32 only, so there Q6_K is dequantized.
  bool sixteen_value_groups = false;
  bool native(ggml_type type) const {
    return native_path &&
           (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 ||
            type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_MXFP4 ||
            (type == GGML_TYPE_Q6_K && sixteen_value_groups));
  }
  int failures = 0;
  int computed = 0;

  // Builds y = mul_mat(w, x) in its own context over the given tensors and runs it on `backend`.
  std::vector<float> run(ggml_backend_t backend, ggml_tensor* w, const std::vector<float>& x_data,
                         int64_t m, bool* supported) {
    ggml_init_params params{ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
    ggml_context* ctx = ggml_init(params);
    ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], m);
    ggml_tensor* y = ggml_mul_mat(ctx, w, x);
    ggml_backend_buffer_t buf =
        ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(x, x_data.data(), 0, ggml_nbytes(x));
    ggml_cgraph* graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, y);
    std::vector<float> out(static_cast<size_t>(w->ne[1] * m), NAN);
    if (supported) *supported = ggml_backend_supports_op(backend, y);
    if (!supported || *supported) {
      if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        std::printf("  graph_compute failed on %s\n", ggml_backend_name(backend));
        failures++;
      }
      ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return out;
  }

  // Compares NPUFLOW with the CPU on one weight and one activation set; returns the NMSE.
  double compare(ggml_tensor* w, const std::vector<float>& x, int64_t m, const char* label,
                 double limit, const char* what) {
    bool supported = false;
    const auto got = run(npu, w, x, m, &supported);
    if (!supported) {
      std::printf(
          "FAIL %-5s K=%-5lld N=%-5lld M=%-5lld %-6s NPUFLOW refused a shape it must take\n",
          ggml_type_name(w->type), (long long)w->ne[0], (long long)w->ne[1], (long long)m, label);
      failures++;
      return INFINITY;
    }
    computed++;
    const auto ref = run(cpu, w, x, m, nullptr);
    const double e = nmse(ref, got);
    const bool ok = e <= limit;
    if (!ok) failures++;
    std::printf("%s %-5s K=%-5lld N=%-5lld M=%-5lld %-6s nmse=%.3e (limit %.0e)  %s\n",
                ok ? "ok  " : "FAIL", ggml_type_name(w->type), (long long)w->ne[0],
                (long long)w->ne[1], (long long)m, label, e, limit, what);
    std::fflush(stdout);
    return e;
  }
};

// A weight tensor of `type` in its own buffer, filled with quantized Gaussian values.
struct Weight {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buf = nullptr;
  ggml_tensor* t = nullptr;

  Weight(ggml_type type, int64_t k, int64_t n, bool weights_usage, std::mt19937& rng) {
    ggml_init_params params{ggml_tensor_overhead() * 2, nullptr, true};
    ctx = ggml_init(params);
    t = ggml_new_tensor_2d(ctx, type, k, n);
    ggml_set_name(t, "blk.0.test.weight");
    buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    if (weights_usage) ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    refill(rng);
  }
  void refill(std::mt19937& rng) {
    std::vector<float> values(static_cast<size_t>(t->ne[0] * t->ne[1]));
    fill_gaussian(values, rng, 0.05f);
    std::vector<uint8_t> raw(ggml_nbytes(t));
    ggml_quantize_chunk(t->type, values.data(), raw.data(), 0, t->ne[1], t->ne[0], nullptr);
    ggml_backend_tensor_set(t, raw.data(), 0, raw.size());
  }
  // Every bit of every block random, but for the block's fp16 scale (and min) or E8M0 exponent,
  // kept finite and moderate: bit patterns ggml's own quantizer never writes (any 6-bit K-quant
  // scale and min, every nibble and fifth bit, Q8_0's -128), as another tool's GGUF may hold.
  void fill_raw_blocks(std::mt19937& rng) {
    std::vector<uint8_t> raw(ggml_nbytes(t));
    for (auto& byte : raw) byte = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> factor(-0.01f, 0.01f);
    std::uniform_int_distribution<int> exponent(112, 130);
    const size_t block = ggml_type_size(t->type);
    const int halves = t->type == GGML_TYPE_Q8_0 || t->type == GGML_TYPE_Q4_0 ? 1 : 2;
    for (size_t at = 0; at < raw.size(); at += block) {
      if (t->type == GGML_TYPE_MXFP4) {
        raw[at] = static_cast<uint8_t>(exponent(rng));
        continue;
      }
      if (t->type == GGML_TYPE_Q6_K) {  // its fp16 d closes the block; any signed 8-bit scale
        const ggml_fp16_t bits = ggml_fp32_to_fp16(factor(rng) / 64.0f);
        std::memcpy(raw.data() + at + block - sizeof(bits), &bits, sizeof(bits));
        continue;
      }
      for (int h = 0; h < halves; ++h) {
        const ggml_fp16_t bits = ggml_fp32_to_fp16(factor(rng));
        std::memcpy(raw.data() + at + h * sizeof(bits), &bits, sizeof(bits));
      }
    }
    ggml_backend_tensor_set(t, raw.data(), 0, raw.size());
  }
  ~Weight() {
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  Harness h;
  h.loaded = npuflow_test::load_backends();
  h.cpu = ggml_backend_dev_init(h.loaded.cpu_dev, nullptr);
  h.npu = ggml_backend_dev_init(h.loaded.npuflow_dev, nullptr);
  const char* device = std::getenv("NPUFLOW_DEVICE");
  if (device != nullptr && std::strcmp(device, "host") != 0) h.max_nmse_exact = 5e-4;
  h.sixteen_value_groups = device != nullptr && std::strcmp(device, "host") == 0;
  const char* quant_path = std::getenv("NPUFLOW_QUANT_PATH");
  h.native_path = quant_path == nullptr || std::strcmp(quant_path, "dequant") != 0;
  std::printf(
      "NPUFLOW: %s\nCPU: %s\nexact-activation limit %.0e, random-activation limit %.0e; Q8_0, "
      "Q4_0, Q4_1, Q4_K, Q5_K, MXFP4%s %s\n",
      ggml_backend_dev_description(h.loaded.npuflow_dev),
      ggml_backend_dev_description(h.loaded.cpu_dev), h.max_nmse_exact, h.max_nmse_random,
      h.sixteen_value_groups ? ", Q6_K" : "",
      h.native_path ? "native, every set at 1e-9" : "dequantized (NPUFLOW_QUANT_PATH=dequant)");

  std::mt19937 rng(1234);
  const auto stats0 = npuflow_test::npuflow_stats(h.loaded.npuflow_reg);
  int weights = 0, refused_as_required = 0;
  double worst_exact = 0;
  for (ggml_type type : kTypes) {
    for (const Shape& shape : kShapes) {
      if (quick && shape.k > 2048) continue;
      if (shape.k % ggml_blck_size(type) != 0) {
        // K-quants need K % 256: ggml cannot even store such a weight row; make sure NPUFLOW
        // would refuse the contract violation rather than claim it.
        ggml_init_params params{ggml_tensor_overhead() * 3, nullptr, true};
        ggml_context* ctx = ggml_init(params);
        ggml_tensor* y = ggml_mul_mat(ctx, ggml_new_tensor_2d(ctx, type, shape.k, shape.n),
                                      ggml_new_tensor_2d(ctx, GGML_TYPE_F32, shape.k, 512));
        const bool supported = ggml_backend_supports_op(h.npu, y);
        ggml_free(ctx);
        if (supported) {
          std::printf("FAIL %s K=%lld: NPUFLOW claimed a K that is not a multiple of the block\n",
                      ggml_type_name(type), (long long)shape.k);
          h.failures++;
        }
        refused_as_required++;
        continue;
      }
      Weight w(type, shape.k, shape.n, true, rng);
      weights++;
      for (int64_t m : kRows) {
        if (quick && m > 512) continue;
        std::vector<float> x(static_cast<size_t>(shape.k * m));
        fill_exact_activations(x, shape.k, rng);
        const bool native = h.native(type);
        worst_exact = std::max(
            worst_exact, h.compare(w.t, x, m, "exact",
                                   native ? h.max_nmse_native : h.max_nmse_exact, shape.what));
        if (m == 128) {
          fill_gaussian(x, rng, 1.0f);
          h.compare(w.t, x, m, "random", native ? h.max_nmse_native : h.max_nmse_random,
                    shape.what);
          if (native) {
            fill_tie_activations(x, shape.k, ggml_blck_size(type) == 256 ? 256 : 32, rng);
            h.compare(w.t, x, m, "ties", h.max_nmse_native, shape.what);
          }
        }
      }
      if (h.native(type)) {
        // The same gate on a weight of random block bits (Gaussian activations, M = 128).
        Weight raw(type, shape.k, shape.n, true, rng);
        raw.fill_raw_blocks(rng);
        weights++;
        std::vector<float> x(static_cast<size_t>(shape.k * 128));
        fill_gaussian(x, rng, 1.0f);
        h.compare(raw.t, x, 128, "rawblk", h.max_nmse_native, shape.what);
      }
    }
  }
  const auto stats1 = npuflow_test::npuflow_stats(h.loaded.npuflow_reg);
  const int64_t ran = stats1.mul_mat - stats0.mul_mat;
  const int64_t packed = stats1.weights_packed - stats0.weights_packed;
  std::printf("NPUFLOW ran %lld MUL_MATs (%d compared), packed %lld weights for %d tensors\n",
              (long long)ran, h.computed, (long long)packed, weights);
  if (ran != h.computed || packed != weights || stats1.mul_mat_host_fallback != 0) {
    std::printf(
        "FAIL counters: each weight must be packed once and every compare run on the "
        "device (fallbacks %lld)\n",
        (long long)stats1.mul_mat_host_fallback);
    h.failures++;
  }

  // Stale-weight checks: the same tensor (same address, name, shape) with new bytes.
  for (bool weights_usage : {true, false}) {
    Weight w(GGML_TYPE_Q4_0, 576, 576, weights_usage, rng);
    std::vector<float> x(576 * 128);
    fill_exact_activations(x, 576, rng);
    h.compare(w.t, x, 128, "exact", h.max_nmse_exact, "cache: first use");
    const auto before = npuflow_test::npuflow_stats(h.loaded.npuflow_reg);
    if (weights_usage) {
      w.refill(rng);  // a whole new weight at the same address
    } else {
      // One block changed: a plain buffer is fingerprinted in full.
      std::vector<uint8_t> raw(ggml_nbytes(w.t));
      ggml_backend_tensor_get(w.t, raw.data(), 0, raw.size());
      raw[raw.size() / 2 + 7] ^= 0x5a;
      ggml_backend_tensor_set(w.t, raw.data(), 0, raw.size());
    }
    h.compare(w.t, x, 128, "exact", h.max_nmse_exact,
              weights_usage ? "cache: rewritten weight" : "cache: one block changed");
    const auto after = npuflow_test::npuflow_stats(h.loaded.npuflow_reg);
    if (after.weights_repacked != before.weights_repacked + 1) {
      std::printf("FAIL cache: a changed weight was not repacked\n");
      h.failures++;
    }
  }

  std::printf("worst exact-activation NMSE %.3e; %d (type, K) pairs refused as required; %s\n",
              worst_exact, refused_as_required, h.failures ? "FAILED" : "PASSED");
  ggml_backend_free(h.npu);
  ggml_backend_free(h.cpu);
  return h.failures ? 1 : 0;
}
