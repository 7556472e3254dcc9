#include "ort/fused_node_inputs.h"

namespace npuflow::ort {

Status fused_input_names(const OrtNode* node, std::vector<std::string>& names) {
  const OrtApi& ort = *api().ort;
  size_t count = 0;
  NPUFLOW_ORT_CHECK(ort.Node_GetNumInputs(node, &count));
  std::vector<const OrtValueInfo*> inputs(count);
  NPUFLOW_ORT_CHECK(ort.Node_GetInputs(node, inputs.data(), count));
  names.assign(count, "");
  for (size_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    if (inputs[i] == nullptr) continue;
    if (OrtStatus* status = ort.GetValueInfoName(inputs[i], &name)) {
      ort.ReleaseStatus(status);
      continue;
    }
    if (name) names[i] = name;
  }
  return Status::ok();
}

std::optional<size_t> index_of(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (!names[i].empty() && names[i] == name) return i;
  return std::nullopt;
}

}  // namespace npuflow::ort
