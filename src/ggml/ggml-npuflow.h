// The C surface of libggml-npuflow.so beyond the ggml backend ABI: counters that tests and tools
// read through ggml_backend_reg_get_proc_address(reg, "ggml_backend_npuflow_get_stats"). Plain C
// so that a host program needs nothing but this header.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GGML_NPUFLOW_M_BUCKETS 8

struct ggml_npuflow_stats {
  int64_t mul_mat;  // MUL_MAT nodes computed by NPUFLOW (all backends of this library)
  int64_t mul_mat_host_fallback;  // of those, run on the host reference after a device refusal
  int64_t min_m_seen;             // smallest activation row count computed (0 if none)
  int64_t max_m_seen;
  // M histogram: [1], [2,16), [16,64), [64,128), [128,512), [512,2048), [2048,8192), [8192,inf)
  int64_t m_hist[GGML_NPUFLOW_M_BUCKETS];
  int64_t weights_packed;        // dequantize + pack events (first use or stale fingerprint)
  int64_t weights_repacked;      // of those, a known identity whose fingerprint changed
  int64_t weight_hits;           // resident weight reused
  int64_t supports_mul_mat_yes;  // supports_op answers for MUL_MAT
  int64_t supports_mul_mat_no;
  // Of the no answers, those for a MUL_MAT the routing rules accept that the offload policy
  // declined: NPUFLOW idle (device=auto without an NPU), or claim=faster's costs say slower.
  int64_t supports_mul_mat_declined;
  int64_t flash_attn;                // FLASH_ATTN_EXT nodes computed by NPUFLOW
  int64_t flash_attn_host_fallback;  // of those, with a call run on the host reference
  int64_t supports_flash_attn_yes;   // supports_op answers for FLASH_ATTN_EXT
  int64_t supports_flash_attn_no;
  int64_t mul_mat_id;                // MUL_MAT_ID nodes computed by NPUFLOW
  int64_t mul_mat_id_experts;        // expert products they ran (one per routed expert)
  int64_t mul_mat_id_host_fallback;  // of the nodes, with an expert run on the host reference
  int64_t supports_mul_mat_id_yes;   // supports_op answers for MUL_MAT_ID
  int64_t supports_mul_mat_id_no;
  // Products that ran several MUL_MATs sharing their activation, their weights stacked
  // (fuse_matmuls), and the MUL_MATs they ran (counted in mul_mat too).
  int64_t mul_mat_stacked_products;
  int64_t mul_mat_stacked_nodes;
};

typedef void (*ggml_npuflow_get_stats_t)(struct ggml_npuflow_stats* out);
typedef void (*ggml_npuflow_reset_stats_t)(void);

// Tests only ("ggml_backend_npuflow_inject_fault"): makes a callback throw until disarmed, to
// check that the module answers cleanly. point: "supports_op", "device_compute" (a MUL_MAT's
// device step, thrown from its parallel weight preparation, or a FLASH_ATTN_EXT's device call),
// "graph_compute", or NULL / "" to disarm. Returns 0, or -1 for an unknown point.
typedef int (*ggml_npuflow_inject_fault_t)(const char* point);

// Tests only, for claim=faster: "ggml_backend_npuflow_cost_identity" returns the identity a cost
// table must carry to be read by this process (valid until the next call);
// "ggml_backend_npuflow_use_cost_table" switches to another table file and forgets every decision
// made so far, so the next one reads it (NULL or "": the default path).
typedef const char* (*ggml_npuflow_cost_identity_t)(void);
typedef void (*ggml_npuflow_use_cost_table_t)(const char* path);

#ifdef __cplusplus
}
#endif
