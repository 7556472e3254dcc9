#include "ggml/ggml_cost_probe.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/strings.h"
#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "route/claim_policy.h"

namespace npuflow::ggml {
namespace {

// Bumped whenever what a row means changes (how it is timed, what a call includes).
constexpr const char* kCostMethod = "ggml-matmul-costs v2 (cache-cold copies)";

struct BuildIdSearch {
  uintptr_t address = 0;
  std::string id;
  bool found = false;
};

int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<BuildIdSearch*>(data);
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum && !contains; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    contains =
        ph.p_type == PT_LOAD && search->address >= start && search->address < start + ph.p_memsz;
  }
  if (!contains) return 0;
  search->found = true;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const uint8_t* name = p + sizeof(ElfW(Nhdr));
      const uint8_t* desc = name + ((note->n_namesz + 3) & ~3u);
      if (desc + note->n_descsz > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        static const char kHex[] = "0123456789abcdef";
        for (uint32_t b = 0; b < note->n_descsz; ++b) {
          search->id += kHex[desc[b] >> 4];
          search->id += kHex[desc[b] & 0xf];
        }
        return 1;
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;
}

// The ELF build id of the loaded object that holds `address`; without one, its file's path, size
// and modification time (a rebuilt library differs in at least one).
std::string build_of(const void* address) {
  BuildIdSearch search;
  search.address = reinterpret_cast<uintptr_t>(address);
  dl_iterate_phdr(find_build_id, &search);
  if (!search.id.empty()) return str_cat("build-id ", search.id);
  Dl_info info{};
  struct stat st {};
  if (dladdr(address, &info) != 0 && info.dli_fname != nullptr && stat(info.dli_fname, &st) == 0) {
    return str_cat(info.dli_fname, " ", st.st_size, " bytes, mtime ", st.st_mtime);
  }
  return "unknown build";
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    for (const char* key : {"model name", "Hardware", "CPU part"}) {
      if (line.rfind(key, 0) == 0) {
        const size_t colon = line.find(':');
        if (colon != std::string::npos) return line.substr(colon + 2);
      }
    }
  }
  return "unknown CPU";
}

ggml_backend_dev_t cpu_device() {
  return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

std::string cpu_backend_build(ggml_backend_dev_t dev) {
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  std::vector<std::string> features;
  auto get_features = reinterpret_cast<ggml_backend_get_features_t>(
      ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features"));
  if (get_features != nullptr) {
    for (const ggml_backend_feature* f = get_features(reg); f->name != nullptr; ++f) {
      features.push_back(str_cat(f->name, "=", f->value));
    }
  }
  return str_cat(ggml_backend_dev_description(dev), " [", join(features, ","), "] ",
                 build_of(reinterpret_cast<const void*>(reg->iface.get_name)));
}

struct ContextDeleter {
  void operator()(ggml_context* ctx) const { ggml_free(ctx); }
};
struct BufferDeleter {
  void operator()(ggml_backend_buffer* buffer) const { ggml_backend_buffer_free(buffer); }
};
struct BackendDeleter {
  void operator()(ggml_backend* backend) const { ggml_backend_free(backend); }
};

template <typename Run>
Result<double> timed_ms(Run&& run) {
  const auto start = std::chrono::steady_clock::now();
  NPUFLOW_RETURN_IF_ERROR(run());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Result<MatmulCost> measure_mul_mat(const ProbeShape& asked, const NpuflowRun& npuflow) {
  ProbeShape shape = asked;
  shape.n = std::min(asked.n, kProbeMaxColumns);
  ggml_backend_dev_t dev = cpu_device();
  if (dev == nullptr) {
    return unsupported("no CPU backend is registered in this process: nothing to measure against");
  }
  std::unique_ptr<ggml_backend, BackendDeleter> cpu(ggml_backend_dev_init(dev, nullptr));
  if (cpu == nullptr) return unsupported("the CPU backend could not be started");
  auto set_threads =
      reinterpret_cast<ggml_backend_set_n_threads_t>(ggml_backend_reg_get_proc_address(
          ggml_backend_dev_backend_reg(dev), "ggml_backend_set_n_threads"));
  if (set_threads != nullptr) set_threads(cpu.get(), shape.threads);

  // In a model every weight streams from memory once per ubatch; one weight timed again and again
  // would stay in cache, which flatters NPUFLOW's fp32 copy (4-8x the bytes of a quantized one).
  // So the probe cycles through copies whose fp32 form together exceeds a last-level cache.
  const int64_t fp32_bytes = shape.k * shape.n * 4;
  const int copies = static_cast<int>(
      std::clamp<int64_t>((kProbeColdBytes + fp32_bytes - 1) / fp32_bytes, 1, kProbeMaxCopies));
  ggml_init_params params{
      ggml_tensor_overhead() * (2 * copies + 2) + copies * ggml_graph_overhead_custom(4, false),
      nullptr, true};
  std::unique_ptr<ggml_context, ContextDeleter> ctx(ggml_init(params));
  ggml_tensor* x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, shape.k, shape.m);
  std::vector<ggml_tensor*> weights, outputs;
  std::vector<ggml_cgraph*> graphs;
  for (int c = 0; c < copies; ++c) {
    ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), shape.type, shape.k, shape.n);
    ggml_format_name(w, "npuflow.cost_probe.weight.%d", c);
    weights.push_back(w);
    outputs.push_back(ggml_mul_mat(ctx.get(), w, x));
    graphs.push_back(ggml_new_graph_custom(ctx.get(), 4, false));
    ggml_build_forward_expand(graphs.back(), outputs.back());
  }
  std::unique_ptr<ggml_backend_buffer, BufferDeleter> buffer(
      ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
  if (buffer == nullptr) return unsupported("could not allocate the probe's tensors");
  // As a model's weights are: immutable, so NPUFLOW fingerprints them by samples.
  ggml_backend_buffer_set_usage(buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);

  std::mt19937 rng(static_cast<uint32_t>(shape.k * 31 + shape.n * 7 + shape.m));
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(shape.k * shape.n));
  for (float& v : values) v = 0.05f * gauss(rng);
  std::vector<uint8_t> raw(ggml_nbytes(weights[0]));
  ggml_quantize_chunk(shape.type, values.data(), raw.data(), 0, shape.n, shape.k, nullptr);
  for (ggml_tensor* w : weights) ggml_backend_tensor_set(w, raw.data(), 0, raw.size());
  values.assign(static_cast<size_t>(shape.k * shape.m), 0.0f);
  for (float& v : values) v = gauss(rng);
  ggml_backend_tensor_set(x, values.data(), 0, ggml_nbytes(x));

  int copy = 0;  // the copy the next timed call of each side uses
  auto run_cpu = [&]() -> Status {
    return ggml_backend_graph_compute(cpu.get(), graphs[copy]) == GGML_STATUS_SUCCESS
               ? Status::ok()
               : unsupported("the CPU backend failed the probe's MUL_MAT");
  };
  auto run_npuflow = [&]() -> Status { return npuflow(outputs[copy]); };

  // Warm-up: every copy once on each side (NPUFLOW packs each).
  for (copy = 0; copy < copies; ++copy) NPUFLOW_RETURN_IF_ERROR(run_cpu());
  for (copy = 0; copy < copies; ++copy) NPUFLOW_RETURN_IF_ERROR(run_npuflow());
  constexpr int kMinRounds = 3, kMaxRounds = 9;
  constexpr double kBudgetMs = 250;
  std::vector<double> cpu_ms, npuflow_ms;
  double spent = 0;
  for (int round = 0; round < kMaxRounds && (round < kMinRounds || spent < kBudgetMs); ++round) {
    // Alternate which goes first, so a drift in the machine's load hits both alike.
    for (int side = 0; side < 2; ++side) {
      const bool cpu_turn = (side == 0) == (round % 2 == 0);
      copy = round % copies;
      auto ms = cpu_turn ? timed_ms(run_cpu) : timed_ms(run_npuflow);
      if (!ms.is_ok()) return ms.status();
      (cpu_turn ? cpu_ms : npuflow_ms).push_back(ms.value());
      spent += ms.value();
    }
  }
  // The least of each side's rounds: on a shared machine interference only ever adds time, and
  // the least is the run it disturbed least.
  // A column slice stands for the whole weight in proportion: both backends split a MUL_MAT's
  // work by output columns.
  const double scale = static_cast<double>(asked.n) / static_cast<double>(shape.n);
  MatmulCost cost;
  cost.cpu_ms = *std::min_element(cpu_ms.begin(), cpu_ms.end()) * scale;
  cost.npuflow_ms = *std::min_element(npuflow_ms.begin(), npuflow_ms.end()) * scale;
  cost.rounds = static_cast<int>(cpu_ms.size());
  cost.measured_n = shape.n;
  return cost;
}

std::string cost_identity(const std::string& npuflow_device_description) {
  ggml_backend_dev_t dev = cpu_device();
  return str_cat(kCostMethod, "; machine ", machine_signature(), ", ", cpu_model(), ", ",
                 std::thread::hardware_concurrency(), " CPUs; ggml ", ggml_version(), " (",
                 ggml_commit(), "); CPU backend ",
                 dev != nullptr ? cpu_backend_build(dev) : std::string("not registered"),
                 "; libggml-npuflow ", build_of(reinterpret_cast<const void*>(&cost_identity)),
                 ", ", npuflow_device_description);
}

}  // namespace npuflow::ggml
