// API-version negotiation against fake ONNX Runtimes that know fewer versions than the headers.
#include "ort/ort_api.h"

#include <gtest/gtest.h>

namespace npuflow::ort {
namespace {

uint32_t g_runtime_max = 0;
const OrtApi* g_table = reinterpret_cast<const OrtApi*>(&g_runtime_max);  // any non-null

const OrtApi* ORT_API_CALL fake_get_api(uint32_t version) noexcept {
  return version <= g_runtime_max ? g_table : nullptr;
}
const char* ORT_API_CALL fake_version() noexcept {
  return "fake";
}

OrtApiBase fake_base() {
  return OrtApiBase{fake_get_api, fake_version};
}

TEST(OrtApi, NegotiatesDownToTheRuntimesVersion) {
  OrtApiBase base = fake_base();
  g_runtime_max = ORT_API_VERSION + 3;  // a newer runtime serves the headers' version
  EXPECT_EQ(highest_supported_version(&base), static_cast<uint32_t>(ORT_API_VERSION));
  g_runtime_max = 25;  // an older runtime: step down
  EXPECT_EQ(highest_supported_version(&base), 25u);
  g_runtime_max = kOrtApiFloor;
  EXPECT_EQ(highest_supported_version(&base), kOrtApiFloor);
}

TEST(OrtApi, RefusesRuntimesBelowTheFloor) {
  OrtApiBase base = fake_base();
  g_runtime_max = kOrtApiFloor - 1;
  EXPECT_EQ(highest_supported_version(&base), 0u);
}

}  // namespace
}  // namespace npuflow::ort
