#include "route/claim_verifier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/strings.h"

namespace npuflow {
namespace {

std::string fixed(double value, const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// The value of element i of an output as a double (int8, uint8 or float32).
double element(const NodeOutput& output, int64_t i) {
  switch (output.type) {
    case ElementType::kInt8:
      return static_cast<const int8_t*>(output.data)[i];
    case ElementType::kUInt8:
      return static_cast<const uint8_t*>(output.data)[i];
    default:
      return static_cast<const float*>(output.data)[i];
  }
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

GateResult measure_exact(const std::vector<NodeOutput>& got,
                         const std::vector<NodeOutput>& reference) {
  int64_t differ = 0, total = 0;
  double worst = 0;
  bool integer = true;
  for (size_t o = 0; o < got.size(); ++o) {
    integer = integer && got[o].type != ElementType::kFloat32;
    for (int64_t i = 0; i < got[o].count; ++i) {
      const double a = element(got[o], i), b = element(reference[o], i);
      if (same_value(a, b)) continue;
      ++differ;
      const double diff = std::isfinite(a - b) ? std::fabs(a - b) : INFINITY;  // a NaN on one side
      worst = std::max(worst, diff);
    }
    total += got[o].count;
  }
  GateResult result;
  result.within = differ == 0;
  result.measured = str_cat(integer ? str_cat("max ", static_cast<int64_t>(worst), " LSB")
                                    : str_cat("max |diff| ", worst),
                            ", ", differ, " of ", total, " values differ");
  return result;
}

GateResult measure_cosine(const ClaimGate& gate, const std::vector<NodeOutput>& got,
                          const std::vector<NodeOutput>& reference) {
  // Non-finite reference values (NaN/Inf propagate as on the CPU EP) must be matched exactly and
  // stay out of the sums; anything else non-finite on the device is a mismatch.
  double dot = 0, ref_sq = 0, got_sq = 0, diff_sq = 0;
  int64_t non_finite = 0;
  for (size_t o = 0; o < got.size(); ++o) {
    for (int64_t i = 0; i < got[o].count; ++i) {
      const double a = element(got[o], i), b = element(reference[o], i);
      if (!std::isfinite(a) || !std::isfinite(b)) {
        if (!same_value(a, b)) ++non_finite;
        continue;
      }
      dot += a * b;
      ref_sq += b * b;
      got_sq += a * a;
      diff_sq += (a - b) * (a - b);
    }
  }
  double cosine = 1, rel_l2 = 0;
  if (ref_sq > 0 && got_sq > 0) {
    cosine = dot / std::sqrt(ref_sq * got_sq);
    rel_l2 = std::sqrt(diff_sq / ref_sq);
  } else if (ref_sq > 0 || got_sq > 0) {  // one side all zero, the other not
    cosine = 0;
    rel_l2 = INFINITY;
  }
  GateResult result;
  result.within = non_finite == 0 && cosine >= gate.min_cosine && rel_l2 <= gate.max_rel_l2;
  result.measured = str_cat("cosine ", fixed(cosine, "%.9f"), ", relL2 ", fixed(rel_l2, "%.2e"));
  if (non_finite > 0) result.measured += str_cat(", ", non_finite, " non-finite values differ");
  return result;
}

}  // namespace

ClaimGate ClaimGate::for_float_device(ElementType compute_type, bool device_attention) {
  // The bars of tests/integration/gates.py: fp32 throughout, fp16 operands, or fp16 operands and
  // librocketnpu's flash attention (fp16 scores before the softmax).
  if (compute_type == ElementType::kFloat32) return cosine(0.99999, 1e-5);
  return device_attention ? cosine(0.9999, 1e-2) : cosine(0.9999, 1e-3);
}

std::string ClaimGate::describe() const {
  if (exact) return "bit-exact (0 LSB)";
  return str_cat("cosine >= ", min_cosine, ", relL2 <= ", max_rel_l2);
}

GateResult measure_against_gate(const ClaimGate& gate, const std::vector<NodeOutput>& got,
                                const std::vector<NodeOutput>& reference) {
  if (got.size() != reference.size()) {
    return {false, str_cat(got.size(), " outputs against ", reference.size())};
  }
  for (size_t o = 0; o < got.size(); ++o) {
    if (got[o].type != reference[o].type || got[o].count != reference[o].count) {
      return {false,
              str_cat("output ", o, " is ", got[o].count, " ", element_type_name(got[o].type),
                      " against ", reference[o].count, " ", element_type_name(reference[o].type))};
    }
  }
  return gate.exact ? measure_exact(got, reference) : measure_cosine(gate, got, reference);
}

ClaimVerifier::ClaimVerifier(std::string node, ClaimGate gate, Logger logger,
                             std::shared_ptr<const void> reference)
    : node_(std::move(node)),
      gate_(gate),
      logger_(std::move(logger)),
      reference_(std::move(reference)) {}

Status ClaimVerifier::run(const std::vector<NodeOutput>& outputs, const ClaimedRun& claimed,
                          const ReferenceRun& reference) const {
  switch (state()) {
    case State::kVerified:
      return claimed(outputs).status();
    case State::kDisabled:
      reference_runs_++;
      return reference(outputs);
    case State::kPending:
      break;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (state() != State::kPending) {  // another thread checked while this one waited
    lock.unlock();
    return run(outputs, claimed, reference);
  }
  return check(outputs, claimed, reference);
}

Status ClaimVerifier::check(const std::vector<NodeOutput>& outputs, const ClaimedRun& claimed,
                            const ReferenceRun& reference) const {
  auto reached = claimed(outputs);
  if (!reached.is_ok()) return reached.status();
  if (!reached.value()) return Status::ok();  // host arithmetic already; check a later run
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<NodeOutput> expected;
  for (const NodeOutput& out : outputs) {
    const size_t bytes = static_cast<size_t>(out.count) * element_size(out.type);
    buffers.push_back(std::make_unique<uint8_t[]>(bytes));
    expected.push_back({out.type, buffers.back().get(), out.count});
  }
  NPUFLOW_RETURN_IF_ERROR(reference(expected));
  const GateResult result = measure_against_gate(gate_, outputs, expected);
  check_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  measured_ = result.measured;
  if (result.within) {
    logger_.info(str_cat("npu_verify_ok ", node_, ": ", result.measured,
                         " against the host reference (gate: ", gate_.describe(), "), checked in ",
                         fixed(check_ms_, "%.1f"), " ms"));
    reference_.reset();
    state_.store(State::kVerified, std::memory_order_release);
    return Status::ok();
  }
  // The user never sees the wrong outputs: this run returns the reference's.
  for (size_t o = 0; o < outputs.size(); ++o) {
    std::memcpy(outputs[o].data, expected[o].data,
                static_cast<size_t>(outputs[o].count) * element_size(outputs[o].type));
  }
  logger_.warning(str_cat("npu_verify_failed ", node_,
                          ": the device's outputs are outside the claim's gate against the host "
                          "reference (",
                          result.measured, "; gate: ", gate_.describe(),
                          "); the node is disabled and runs the host reference for the rest of "
                          "the session"));
  state_.store(State::kDisabled, std::memory_order_release);
  return Status::ok();
}

std::string ClaimVerifier::profile_line() const {
  switch (state()) {
    case State::kPending:
      return str_cat("npuflow verify: ", node_, " not checked (no run reached the device)");
    case State::kVerified:
      return str_cat("npuflow verify: ", node_, " verified (", measured_, "; checked in ",
                     fixed(check_ms_, "%.1f"), " ms)");
    case State::kDisabled:
      break;
  }
  return str_cat("npuflow verify: ", node_, " disabled (", measured_, "; gate: ", gate_.describe(),
                 "), ", reference_runs(), " later runs on the host reference");
}

}  // namespace npuflow
