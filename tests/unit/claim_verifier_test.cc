// Verified claims: the gates the first device run is held to, and the once-per-node check that
// disables a wrong node, hands the user the reference's outputs and stays thread-safe.
#include "route/claim_verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace npuflow {
namespace {

NodeOutput view_of(std::vector<int8_t>& values) {
  return {ElementType::kInt8, values.data(), static_cast<int64_t>(values.size())};
}
NodeOutput view_of(std::vector<float>& values) {
  return {ElementType::kFloat32, values.data(), static_cast<int64_t>(values.size())};
}

std::vector<float> ramp(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = 0.5f + static_cast<float>(i % 7) - 3.0f;
  return values;
}

TEST(ClaimGate, ExactGateCountsLsbAndValues) {
  std::vector<int8_t> ref = {1, 2, 3, 4}, got = ref;
  auto same = measure_against_gate(ClaimGate::bit_exact(), {view_of(got)}, {view_of(ref)});
  EXPECT_TRUE(same.within) << same.measured;
  got[2] = 6;
  auto off = measure_against_gate(ClaimGate::bit_exact(), {view_of(got)}, {view_of(ref)});
  EXPECT_FALSE(off.within);
  EXPECT_EQ(off.measured, "max 3 LSB, 1 of 4 values differ");
}

TEST(ClaimGate, ExactGateOnFloatOutputsWantsIdenticalValues) {
  std::vector<float> ref = ramp(16), got = ref;
  got[5] = std::nextafter(got[5], 100.0f);
  auto off = measure_against_gate(ClaimGate::bit_exact(), {view_of(got)}, {view_of(ref)});
  EXPECT_FALSE(off.within);
  EXPECT_NE(off.measured.find("1 of 16 values differ"), std::string::npos) << off.measured;
}

TEST(ClaimGate, CosineGateAlsoBoundsAGainError) {
  const ClaimGate gate = ClaimGate::for_float_device(ElementType::kFloat16);
  std::vector<float> ref = ramp(64), close = ref, gained = ref;
  close[3] += 1e-4f;  // fp16-sized noise stays inside
  EXPECT_TRUE(measure_against_gate(gate, {view_of(close)}, {view_of(ref)}).within);
  for (float& v : gained) v *= 1.01f;  // cosine 1, relL2 1e-2
  auto result = measure_against_gate(gate, {view_of(gained)}, {view_of(ref)});
  EXPECT_FALSE(result.within);
  EXPECT_NE(result.measured.find("cosine 1.000000000, relL2 1.00e-02"), std::string::npos)
      << result.measured;
}

// With attention on the device the relative L2 bar is 1e-2 (fp16 scores), the cosine bar the same.
TEST(ClaimGate, DeviceAttentionWidensOnlyTheRelativeL2Bar) {
  const ClaimGate plain = ClaimGate::for_float_device(ElementType::kFloat16);
  const ClaimGate attention = ClaimGate::for_float_device(ElementType::kFloat16, true);
  EXPECT_EQ(attention.min_cosine, plain.min_cosine);
  EXPECT_DOUBLE_EQ(plain.max_rel_l2, 1e-3);
  EXPECT_DOUBLE_EQ(attention.max_rel_l2, 1e-2);
  std::vector<float> ref = ramp(64), gained = ref;
  for (float& v : gained) v *= 1.005f;  // relL2 5e-3
  EXPECT_FALSE(measure_against_gate(plain, {view_of(gained)}, {view_of(ref)}).within);
  EXPECT_TRUE(measure_against_gate(attention, {view_of(gained)}, {view_of(ref)}).within);
  EXPECT_DOUBLE_EQ(ClaimGate::for_float_device(ElementType::kFloat32, true).max_rel_l2, 1e-5);
}

TEST(ClaimGate, NonFiniteValuesMustMatchTheReference) {
  const ClaimGate gate = ClaimGate::for_float_device(ElementType::kFloat32);
  std::vector<float> ref = ramp(8), got = ref;
  ref[1] = got[1] = std::numeric_limits<float>::quiet_NaN();  // propagated on both sides
  EXPECT_TRUE(measure_against_gate(gate, {view_of(got)}, {view_of(ref)}).within);
  got[2] = std::numeric_limits<float>::infinity();
  auto result = measure_against_gate(gate, {view_of(got)}, {view_of(ref)});
  EXPECT_FALSE(result.within);
  EXPECT_NE(result.measured.find("1 non-finite values differ"), std::string::npos);
}

TEST(ClaimGate, AllZeroAgainstNonZeroFails) {
  const ClaimGate gate = ClaimGate::for_float_device(ElementType::kFloat32);
  std::vector<float> ref = ramp(8), zeros(8, 0.0f), more_zeros(8, 0.0f);
  EXPECT_FALSE(measure_against_gate(gate, {view_of(zeros)}, {view_of(ref)}).within);
  EXPECT_TRUE(measure_against_gate(gate, {view_of(zeros)}, {view_of(more_zeros)}).within);
}

// A node whose device answer is `device` and whose reference answer is `reference`, counting
// how often each side ran.
struct FakeNode {
  std::vector<float> device, reference;
  bool reaches_device = true;
  std::atomic<int> device_runs{0}, reference_runs{0};

  ClaimVerifier::ClaimedRun claimed() {
    return [this](const std::vector<NodeOutput>& out) -> Result<bool> {
      device_runs++;
      std::copy(device.begin(), device.end(), static_cast<float*>(out[0].data));
      return reaches_device;
    };
  }
  ClaimVerifier::ReferenceRun host() {
    return [this](const std::vector<NodeOutput>& out) {
      reference_runs++;
      std::copy(reference.begin(), reference.end(), static_cast<float*>(out[0].data));
      return Status::ok();
    };
  }
};

struct Warnings {
  std::vector<std::string> lines;
  std::mutex mutex;
  Logger logger() {
    return Logger(LogLevel::kWarning, [this](LogLevel, const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
    });
  }
};

TEST(ClaimVerifier, AWrongNodeIsDisabledOnceAndTheUserGetsTheReference) {
  FakeNode node;
  node.reference = ramp(32);
  node.device = node.reference;
  node.device[0] = -1000.0f;
  Warnings warnings;
  ClaimVerifier verifier("encoder 'x'", ClaimGate::for_float_device(ElementType::kFloat16),
                         warnings.logger());
  for (int run = 0; run < 3; ++run) {
    std::vector<float> out(32, 7.0f);
    ASSERT_TRUE(verifier.run({view_of(out)}, node.claimed(), node.host()).is_ok());
    EXPECT_EQ(out, node.reference) << "run " << run;
  }
  EXPECT_EQ(verifier.state(), ClaimVerifier::State::kDisabled);
  EXPECT_EQ(node.device_runs.load(), 1);  // the device never runs again
  EXPECT_EQ(node.reference_runs.load(), 3);
  EXPECT_EQ(verifier.reference_runs(), 2);
  ASSERT_EQ(warnings.lines.size(), 1u);
  EXPECT_NE(warnings.lines[0].find("npu_verify_failed encoder 'x'"), std::string::npos);
  EXPECT_NE(warnings.lines[0].find("relL2"), std::string::npos) << warnings.lines[0];
  EXPECT_NE(verifier.profile_line().find("disabled"), std::string::npos);
}

TEST(ClaimVerifier, ARightNodeIsCheckedOnceAndItsReferenceFreed) {
  FakeNode node;
  node.reference = ramp(32);
  node.device = node.reference;
  auto reference_plan = std::make_shared<int>(0);
  std::weak_ptr<int> watch = reference_plan;
  Warnings warnings;
  ClaimVerifier verifier("qdq 'y'", ClaimGate::bit_exact(), warnings.logger(),
                         std::move(reference_plan));
  for (int run = 0; run < 3; ++run) {
    std::vector<float> out(32);
    ASSERT_TRUE(verifier.run({view_of(out)}, node.claimed(), node.host()).is_ok());
    EXPECT_EQ(out, node.device);
  }
  EXPECT_EQ(verifier.state(), ClaimVerifier::State::kVerified);
  EXPECT_EQ(node.device_runs.load(), 3);
  EXPECT_EQ(node.reference_runs.load(), 1);
  EXPECT_TRUE(watch.expired());
  EXPECT_TRUE(warnings.lines.empty());
}

TEST(ClaimVerifier, ARunThatStayedOnTheHostProvesNothing) {
  FakeNode node;
  node.reference = ramp(8);
  node.device = node.reference;
  node.reaches_device = false;
  ClaimVerifier verifier("qdq 'y'", ClaimGate::bit_exact(), Logger());
  std::vector<float> out(8);
  ASSERT_TRUE(verifier.run({view_of(out)}, node.claimed(), node.host()).is_ok());
  EXPECT_EQ(verifier.state(), ClaimVerifier::State::kPending);
  EXPECT_EQ(node.reference_runs.load(), 0);
  node.reaches_device = true;
  ASSERT_TRUE(verifier.run({view_of(out)}, node.claimed(), node.host()).is_ok());
  EXPECT_EQ(verifier.state(), ClaimVerifier::State::kVerified);
}

TEST(ClaimVerifier, AFailedRunLeavesTheNodePending) {
  ClaimVerifier verifier("qdq 'y'", ClaimGate::bit_exact(), Logger());
  std::vector<float> out(8);
  auto failing = [](const std::vector<NodeOutput>&) -> Result<bool> {
    return invalid_argument("bad input");
  };
  auto host = [](const std::vector<NodeOutput>&) { return Status::ok(); };
  EXPECT_FALSE(verifier.run({view_of(out)}, failing, host).is_ok());
  EXPECT_EQ(verifier.state(), ClaimVerifier::State::kPending);
}

TEST(ClaimVerifier, ConcurrentFirstRunsCheckOnceAndAllGetTheReference) {
  FakeNode node;
  node.reference = ramp(256);
  node.device = node.reference;
  node.device[17] += 50.0f;
  Warnings warnings;
  ClaimVerifier verifier("encoder 'z'", ClaimGate::for_float_device(ElementType::kFloat16),
                         warnings.logger());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int run = 0; run < 20; ++run) {
        std::vector<float> out(256);
        if (!verifier.run({view_of(out)}, node.claimed(), node.host()).is_ok() ||
            out != node.reference) {
          wrong++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(node.device_runs.load(), 1);
  EXPECT_EQ(warnings.lines.size(), 1u);
  EXPECT_EQ(verifier.reference_runs(), 8 * 20 - 1);
}

}  // namespace
}  // namespace npuflow
