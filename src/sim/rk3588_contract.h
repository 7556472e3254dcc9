// The RK3588 NPU's matmul contract as librocketnpu enforces it (shared/reference/rk3588-npu.md
// §1 "Matmul entries", "M = 1", "Tile caps", "Multicore and residency"): per-dtype alignment,
// the tiling planner (Mt, Nt <= 256, Kt fitted into the 12 x 32 KiB CBUF) and the split of N
// across worker fds. Refusals carry the library's status name (ROCKET_E_SHAPE, ROCKET_E_TILING)
// in the message and map to kUnsupported, so a caller falls back to the host.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace npuflow::sim {

enum class NpuType { kFp16, kInt8, kInt4 };
const char* npu_type_name(NpuType type);

// `value` padded up to a multiple of `multiple` (a contract dimension).
inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Hardware and library constants (RU src/rocket_hw_profile.c, src/rocket_matmul.c:498-570).
inline constexpr int kCores = 3;
inline constexpr int kCbufBanks = 12;
inline constexpr int64_t kCbufBankBytes = 32 * 1024;
inline constexpr int64_t kMaxTile = 256;                        // Mt, Nt cap
inline constexpr int64_t kMaxKt = 16384;                        // Kt starts at min(K, 16384)
inline constexpr int64_t kKGroup = 32;                          // Kt steps down by 32
inline constexpr int64_t kMaxDim = int64_t{1} << 24;            // no dimension may exceed 2^24
inline constexpr int64_t kTilesPerJob = 64;                     // BATCH: a job holds <= 64 tiles
inline constexpr uint64_t kIovaBytesPerFd = uint64_t{4} << 30;  // 32-bit regcmd IOVAs
inline constexpr int kMaxWorkers = 8;
inline constexpr int64_t kInt4TileLimit = 32767;  // an int4 tile's int16 partial

struct ShapeContract {
  int64_t m_multiple;
  int64_t k_multiple;
  int64_t n_multiple;
  // CBUF bytes per element as a fraction (int4 packs two values per byte on chip).
  int64_t cbuf_bytes_num;
  int64_t cbuf_bytes_den;
  int bank_budget;  // int8 keeps one slack feature bank: 11
  int value_min;    // operand range (int4: [-7, 7]); fp16 unused
  int value_max;
};
const ShapeContract& contract_for(NpuType type);

// M > 0, M % 4 (M = 1 included: planners refuse it, callers pad to 4), K % 32, N % 16/32/64, no
// dimension above 2^24. Message e.g. "ROCKET_E_SHAPE: int8 N=40 is not a multiple of 32".
Status check_shape(NpuType type, int64_t m, int64_t k, int64_t n);
// Group-wise: group % 32, K % group; int4 also needs 49 * group <= 32767 (Kt = group).
Status check_group(NpuType type, int64_t k, int64_t group);

struct PlanOptions {
  bool asym = true;    // fp16 ASYM (Nt 128) when N > 256 and nKt > 1; on by default
  int64_t kt_cap = 0;  // int4 `_int4_ex(.., kt_cap)`; 0: none
  int64_t group = 0;   // group-wise: Kt must divide the group
};

// One worker's tiling of an M x K x N slice.
struct TilePlan {
  int64_t mt = 0, nt = 0, kt = 0;
  int64_t m_tiles = 0, n_tiles = 0, k_tiles = 0;
  int feature_banks = 0, weight_banks = 0;
  bool asym = false;
  int64_t tiles() const { return m_tiles * n_tiles * k_tiles; }
  int64_t jobs() const { return (tiles() + kTilesPerJob - 1) / kTilesPerJob; }
};

// CBUF banks for `rows` x `kt` elements: ceil(rows * kt * bytes / 32 KiB).
int cbuf_banks(NpuType type, int64_t rows, int64_t kt);
// The library's planner for one slice (shape already checked). ROCKET_E_TILING if no Kt fits.
Result<TilePlan> plan_tiles(NpuType type, int64_t m, int64_t k, int64_t n,
                            const PlanOptions& options = {});

struct WorkerSlice {
  int64_t n0 = 0;
  int64_t n = 0;
  TilePlan plan;
};
// The per-worker N slice width: ceil(N / workers) rounded up to 16 (to the dtype's N multiple
// for int8/int4, so that every slice stays inside the contract).
int64_t worker_slice_width(NpuType type, int64_t n, int workers);
// Splits N across up to `workers` fds (empty slices dropped) and plans each slice.
Result<std::vector<WorkerSlice>> plan_workers(NpuType type, int64_t m, int64_t k, int64_t n,
                                              int workers, const PlanOptions& options = {});

}  // namespace npuflow::sim
