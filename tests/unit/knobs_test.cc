// The knob table: precedence, validation, and docs/knobs.md kept true.
#include "core/knobs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

namespace npuflow {
namespace {

Knobs::Lookup from_map(std::map<std::string, std::string> values, bool by_env) {
  return [values, by_env](const KnobSpec& spec) -> std::optional<std::string> {
    auto it = values.find(by_env ? spec.env : spec.name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Knobs, DefaultsMatchTheTable) {
  Knobs knobs = Knobs::defaults();
  EXPECT_EQ(knobs.integer("min_rows"), 16);
  EXPECT_TRUE(knobs.flag("qdq"));
  EXPECT_EQ(knobs.text("device"), "auto");
  EXPECT_EQ(knobs.text("sim_kacc"), "npu");
  EXPECT_EQ(knobs.integer("sim_fail_every"), 0);
  EXPECT_FALSE(knobs.flag("prof"));
  EXPECT_EQ(knobs.log_level(), LogLevel::kWarning);
  EXPECT_EQ(knobs.origin("min_rows"), "default");
}

TEST(Knobs, ProviderOptionWinsOverEnvironment) {
  auto knobs = Knobs::resolve(from_map({{"min_rows", "8"}}, false),
                              from_map({{"NPUFLOW_MIN_ROWS", "4"}, {"NPUFLOW_QDQ", "0"}}, true));
  ASSERT_TRUE(knobs.is_ok());
  EXPECT_EQ(knobs.value().integer("min_rows"), 8);
  EXPECT_EQ(knobs.value().origin("min_rows"), "provider option");
  EXPECT_FALSE(knobs.value().flag("qdq"));
  EXPECT_EQ(knobs.value().origin("qdq"), "environment");
}

TEST(Knobs, BadValuesAreClearErrors) {
  auto bad_int = Knobs::resolve(nullptr, from_map({{"NPUFLOW_MIN_ROWS", "many"}}, true));
  ASSERT_FALSE(bad_int.is_ok());
  EXPECT_NE(bad_int.status().message().find("NPUFLOW_MIN_ROWS='many'"), std::string::npos);
  auto out_of_range = Knobs::resolve(from_map({{"min_rows", "0"}}, false), from_map({}, true));
  EXPECT_FALSE(out_of_range.is_ok());
  auto bad_device = Knobs::resolve(nullptr, from_map({{"NPUFLOW_DEVICE", "gpu"}}, true));
  ASSERT_FALSE(bad_device.is_ok());
  EXPECT_NE(bad_device.status().message().find("expected one of"), std::string::npos);
  auto bad_level = Knobs::resolve(nullptr, from_map({{"NPUFLOW_LOG", "loud"}}, true));
  EXPECT_FALSE(bad_level.is_ok());
}

TEST(Knobs, DocsTableListsEveryKnobWithItsDefault) {
  std::ifstream doc(NPUFLOW_SOURCE_DIR "/docs/knobs.md");
  ASSERT_TRUE(doc.good()) << "docs/knobs.md is missing";
  std::stringstream text;
  text << doc.rdbuf();
  const std::string content = text.str();
  int rows = 0;
  std::istringstream lines(content);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `NPUFLOW_", 0) == 0) rows++;
  }
  EXPECT_EQ(rows, static_cast<int>(knob_table().size())) << "docs/knobs.md rows vs knob table";
  for (const KnobSpec& spec : knob_table()) {
    const std::string row = std::string("| `") + spec.env + "` | `" + spec.name + "` |";
    const size_t at = content.find(row);
    ASSERT_NE(at, std::string::npos) << spec.env << " is not documented in docs/knobs.md";
    const std::string line = content.substr(at, content.find('\n', at) - at);
    const std::string cell =
        *spec.default_value ? std::string("| `") + spec.default_value + "` |" : "| (empty) |";
    EXPECT_NE(line.find(cell), std::string::npos)
        << spec.env << ": docs/knobs.md shows another default than " << spec.default_value;
  }
}

}  // namespace
}  // namespace npuflow
