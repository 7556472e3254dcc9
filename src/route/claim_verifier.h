// Verified claims (the `verify` knob): the first run of a claimed node that reaches the device
// also runs the node on the host reference and compares the two within the claim's gate. A node
// outside its gate is disabled for the session: one warning names it and the measured
// difference, that run's outputs are replaced by the reference's, and every later run computes
// the reference only. Sessions run from several threads at once, so the state is one atomic per
// node and the check itself runs under a mutex, once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/element_type.h"
#include "core/log.h"
#include "core/status.h"

namespace npuflow {

// How close the device's outputs must be to the host reference's.
struct ClaimGate {
  // exact: integer arithmetic on both sides (the QDQ claims), so every value must be equal: 0 LSB
  // on int8/uint8 outputs, identical floats on float outputs. Otherwise float arithmetic that
  // differs by design (an NPU's fp16 operands): cosine and relative L2 error over all outputs, as
  // tests/integration/gates.py measures against the CPU EP.
  bool exact = true;
  double min_cosine = 1.0;
  double max_rel_l2 = 0.0;

  static ClaimGate bit_exact() { return {}; }
  static ClaimGate cosine(double min_cosine, double max_rel_l2) {
    return {false, min_cosine, max_rel_l2};
  }
  // The float gate for a device computing in `compute_type`: fp32 (host) or fp16 (an NPU).
  // device_attention: the encoder may run attention on the device (its fp16 scores widen the
  // relative L2 bar to 1e-2).
  static ClaimGate for_float_device(ElementType compute_type, bool device_attention = false);
  std::string describe() const;
};

// One output buffer of a node: `count` elements of `type` (int8, uint8 or float32).
struct NodeOutput {
  ElementType type = ElementType::kFloat32;
  void* data = nullptr;
  int64_t count = 0;
};

struct GateResult {
  bool within = false;
  std::string measured;  // e.g. "max 3 LSB, 1 of 4096 values differ" or "cosine 0.98, relL2 0.2"
};

// Compares `got` with `reference` (same types and counts, output by output) under `gate`.
GateResult measure_against_gate(const ClaimGate& gate, const std::vector<NodeOutput>& got,
                                const std::vector<NodeOutput>& reference);

class ClaimVerifier {
 public:
  // Writes the node's outputs on its claimed path; returns whether the device computed them
  // (false: the claimed path ran on the host anyway, which proves nothing about the device, so
  // the check waits for a run that reaches it).
  using ClaimedRun = std::function<Result<bool>(const std::vector<NodeOutput>&)>;
  // Writes the same outputs with the host reference.
  using ReferenceRun = std::function<Status(const std::vector<NodeOutput>&)>;

  // node: how the warning names it. reference: what the reference run uses (its plan), held here
  // and released once the node is verified, so its resident weights are freed (it never runs
  // again); a caller keeps only a plain pointer, used inside reference runs.
  ClaimVerifier(std::string node, ClaimGate gate, Logger logger,
                std::shared_ptr<const void> reference = nullptr);

  Status run(const std::vector<NodeOutput>& outputs, const ClaimedRun& claimed,
             const ReferenceRun& reference) const;

  enum class State { kPending, kVerified, kDisabled };
  State state() const { return state_.load(std::memory_order_acquire); }
  const std::string& node() const { return node_; }
  int64_t reference_runs() const { return reference_runs_.load(); }
  // For NPUFLOW_PROF=1: the node, its state, what was measured and the runs on the reference.
  std::string profile_line() const;

 private:
  Status check(const std::vector<NodeOutput>& outputs, const ClaimedRun& claimed,
               const ReferenceRun& reference) const;

  std::string node_;
  ClaimGate gate_;
  Logger logger_;
  mutable std::shared_ptr<const void> reference_;  // reset under mutex_ once verified
  mutable std::atomic<State> state_{State::kPending};
  mutable std::mutex mutex_;      // held by the one run that checks
  mutable std::string measured_;  // written under mutex_ before state_ leaves kPending
  mutable double check_ms_ = 0;   // the reference run and the comparison
  mutable std::atomic<int64_t> reference_runs_{0};  // runs served by the reference once disabled
};

}  // namespace npuflow
