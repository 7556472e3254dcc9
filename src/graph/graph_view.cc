#include "graph/graph_view.h"

#include <cstring>

namespace npuflow {

AttributeTensor AttributeTensor::of_int64s(const std::vector<int64_t>& shape,
                                           const std::vector<int64_t>& values) {
  AttributeTensor t{ElementType::kInt64, shape, {}};
  const auto* raw = reinterpret_cast<const uint8_t*>(values.data());
  t.bytes.assign(raw, raw + values.size() * sizeof(int64_t));
  return t;
}

std::optional<std::vector<int64_t>> Attribute::tensor_integers() const {
  constexpr int64_t kMaxCount = 16;
  if (!tensor) return std::nullopt;
  const bool wide = tensor->type == ElementType::kInt64;
  if (!wide && tensor->type != ElementType::kInt32) return std::nullopt;
  const int64_t count = element_count(tensor->shape);
  const size_t size = wide ? sizeof(int64_t) : sizeof(int32_t);
  if (count < 0 || count > kMaxCount || tensor->bytes.size() != static_cast<size_t>(count) * size)
    return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i) {
    if (wide) {
      std::memcpy(&out[i], tensor->bytes.data() + i * size, size);
    } else {
      int32_t v = 0;
      std::memcpy(&v, tensor->bytes.data() + i * size, size);
      out[i] = v;
    }
  }
  return out;
}

const Attribute* NodeInfo::attribute(const std::string& attr_name) const {
  for (const auto& [key, attr] : attributes) {
    if (key == attr_name) return &attr;
  }
  return nullptr;
}

int64_t NodeInfo::int_attribute(const std::string& attr_name, int64_t fallback) const {
  const Attribute* attr = attribute(attr_name);
  return attr && attr->integer ? *attr->integer : fallback;
}

bool is_standard_domain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx" || domain == "com.microsoft";
}

NodeId GraphView::producer_if(ValueId id, const char* op) const {
  if (id == kNoValue) return kNoNode;
  const NodeId producer = value(id).producer;
  if (producer == kNoNode) return kNoNode;
  const NodeInfo& info = node(producer);
  if (info.op_type != op) return kNoNode;
  return is_standard_domain(info) ? producer : kNoNode;
}

ValueId GraphView::add_value(ValueInfo info) {
  values.push_back(std::move(info));
  return static_cast<ValueId>(values.size() - 1);
}

ValueId GraphView::find_value(const std::string& value_name) const {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].name == value_name) return static_cast<ValueId>(i);
  }
  return kNoValue;
}

NodeId GraphView::add_node(NodeInfo info) {
  const auto id = static_cast<NodeId>(nodes.size());
  for (ValueId input : info.inputs) {
    if (input != kNoValue) values[static_cast<size_t>(input)].consumers.push_back(id);
  }
  for (ValueId input : info.implicit_inputs) {
    if (input != kNoValue) values[static_cast<size_t>(input)].consumers.push_back(id);
  }
  for (ValueId output : info.outputs) {
    if (output != kNoValue) values[static_cast<size_t>(output)].producer = id;
  }
  nodes.push_back(std::move(info));
  return id;
}

int64_t leading_rows(const std::vector<int64_t>& shape) {
  if (shape.empty()) return -1;
  return element_count(std::vector<int64_t>(shape.begin(), shape.end() - 1));
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) {
    // A model's shapes are untrusted: a product past int64 is as unknown as a dynamic dimension.
    if (d < 0 || __builtin_mul_overflow(count, d, &count)) return -1;
  }
  return count;
}

}  // namespace npuflow
