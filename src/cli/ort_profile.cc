#include "cli/ort_profile.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/strings.h"

namespace npuflow::cli {
namespace {

constexpr const char* kKernelSuffix = "_kernel_time";

std::vector<ProfiledTensor> tensors(const JsonValue& list) {
  std::vector<ProfiledTensor> out;
  for (const JsonValue& entry : list.array()) {
    // Each entry is {"<type>": [dims...]}.
    for (const auto& [type, dims] : entry.object()) {
      ProfiledTensor t;
      t.type = type;
      for (const JsonValue& d : dims.array()) t.shape.push_back(d.integer(-1));
      out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace

Result<std::vector<ProfiledNode>> parse_profile(const JsonValue& events) {
  if (events.kind() != JsonValue::Kind::kArray) {
    return invalid_argument("an ONNX Runtime profile is a JSON array of events");
  }
  std::vector<ProfiledNode> nodes;
  for (const JsonValue& event : events.array()) {
    const std::string& name = event["name"].string();
    const std::string_view suffix(kKernelSuffix);
    if (event["cat"].string() != "Node" || name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const JsonValue& args = event["args"];
    ProfiledNode node;
    node.name = name.substr(0, name.size() - suffix.size());
    node.op_type = args["op_name"].string();
    node.provider = args["provider"].string();
    node.inputs = tensors(args["input_type_shape"]);
    node.outputs = tensors(args["output_type_shape"]);
    nodes.push_back(std::move(node));
  }
  return nodes;
}

Result<std::vector<ProfiledNode>> profiled_run(Ort::Session& session, InputSet& inputs) {
  run(session, inputs, output_names(session));
  Ort::AllocatorWithDefaultOptions allocator;
  const std::string path = session.EndProfilingAllocated(allocator).get();
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  auto events = JsonValue::parse(text.str());
  if (!events.is_ok()) {
    return internal_error(
        str_cat("ONNX Runtime's profile ", path, " does not parse: ", events.status().message()));
  }
  return parse_profile(events.value());
}

}  // namespace npuflow::cli
