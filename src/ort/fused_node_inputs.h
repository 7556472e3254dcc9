// The fused node's inputs by name: how a compile step finds the runtime values a claim names.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "ort/ort_api.h"

namespace npuflow::ort {

// The fused node's input names, in order ("" for an omitted optional input).
Status fused_input_names(const OrtNode* node, std::vector<std::string>& names);
// The position of `name` among them.
std::optional<size_t> index_of(const std::vector<std::string>& names, const std::string& name);

}  // namespace npuflow::ort
