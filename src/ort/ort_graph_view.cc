#include "ort/ort_graph_view.h"

#include <unordered_map>

#include "ort/ort_api.h"

namespace npuflow::ort {
namespace {

class Builder {
 public:
  explicit Builder(OrtGraphSnapshot& out) : out_(out), ort_(*api().ort) {}

  // Returns the id for a value, creating and describing it on first sight.
  Result<ValueId> value(const OrtValueInfo* info) {
    if (info == nullptr) return kNoValue;  // omitted optional input
    const char* name = nullptr;
    NPUFLOW_ORT_CHECK(ort_.GetValueInfoName(info, &name));
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;

    ValueInfo value;
    value.name = name;
    const OrtTypeInfo* type_info = nullptr;
    if (OrtStatus* status = ort_.GetValueInfoTypeInfo(info, &type_info)) {
      ort_.ReleaseStatus(status);  // no type information: leave the value untyped
      type_info = nullptr;
    }
    const OrtTensorTypeAndShapeInfo* tensor = nullptr;
    if (type_info != nullptr) NPUFLOW_ORT_CHECK(ort_.CastTypeInfoToTensorInfo(type_info, &tensor));
    if (tensor != nullptr) {
      ONNXTensorElementDataType element = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
      NPUFLOW_ORT_CHECK(ort_.GetTensorElementType(tensor, &element));
      value.type = element_type_of(element);
      size_t rank = 0;
      NPUFLOW_ORT_CHECK(ort_.GetDimensionsCount(tensor, &rank));
      value.shape.resize(rank);
      NPUFLOW_ORT_CHECK(ort_.GetDimensions(tensor, value.shape.data(), rank));
      value.has_shape = true;
    }
    NPUFLOW_ORT_CHECK(ort_.ValueInfo_IsGraphOutput(info, &value.is_graph_output));
    bool is_constant = false;
    NPUFLOW_ORT_CHECK(ort_.ValueInfo_IsConstantInitializer(info, &is_constant));
    if (is_constant) {
      const OrtValue* initializer = nullptr;
      NPUFLOW_ORT_CHECK(ort_.ValueInfo_GetInitializerValue(info, &initializer));
      if (initializer != nullptr) {
        ConstantData data;
        NPUFLOW_ORT_CHECK(ort_.GetTensorData(initializer, &data.data));
        NPUFLOW_ORT_CHECK(ort_.GetTensorSizeInBytes(initializer, &data.bytes));
        value.constant = data;
      }
    }
    const ValueId id = out_.view.add_value(std::move(value));
    ids_.emplace(out_.view.value(id).name, id);
    return id;
  }

  Result<std::vector<ValueId>> values(const std::vector<const OrtValueInfo*>& infos) {
    std::vector<ValueId> ids;
    for (const OrtValueInfo* info : infos) {
      auto id = value(info);
      if (!id.is_ok()) return id.status();
      ids.push_back(id.value());
    }
    return ids;
  }

  Status node(const OrtNode* node) {
    NodeInfo info;
    const char* text = nullptr;
    NPUFLOW_ORT_CHECK(ort_.Node_GetName(node, &text));
    info.name = text ? text : "";
    NPUFLOW_ORT_CHECK(ort_.Node_GetOperatorType(node, &text));
    info.op_type = text;
    NPUFLOW_ORT_CHECK(ort_.Node_GetDomain(node, &text));
    info.domain = text ? text : "";

    size_t count = 0;
    NPUFLOW_ORT_CHECK(ort_.Node_GetNumInputs(node, &count));
    std::vector<const OrtValueInfo*> infos(count);
    NPUFLOW_ORT_CHECK(ort_.Node_GetInputs(node, infos.data(), count));
    auto inputs = values(infos);
    if (!inputs.is_ok()) return inputs.status();
    info.inputs = std::move(inputs).value();

    NPUFLOW_ORT_CHECK(ort_.Node_GetNumOutputs(node, &count));
    infos.assign(count, nullptr);
    NPUFLOW_ORT_CHECK(ort_.Node_GetOutputs(node, infos.data(), count));
    auto outputs = values(infos);
    if (!outputs.is_ok()) return outputs.status();
    info.outputs = std::move(outputs).value();

    // Values a nested subgraph reads count as consumed by this node.
    NPUFLOW_ORT_CHECK(ort_.Node_GetNumImplicitInputs(node, &count));
    infos.assign(count, nullptr);
    if (count) NPUFLOW_ORT_CHECK(ort_.Node_GetImplicitInputs(node, infos.data(), count));
    auto implicit = values(infos);
    if (!implicit.is_ok()) return implicit.status();
    info.implicit_inputs = std::move(implicit).value();

    NPUFLOW_ORT_CHECK(ort_.Node_GetNumAttributes(node, &count));
    std::vector<const OrtOpAttr*> attributes(count);
    if (count) NPUFLOW_ORT_CHECK(ort_.Node_GetAttributes(node, attributes.data(), count));
    for (const OrtOpAttr* attr : attributes) {
      NPUFLOW_RETURN_IF_ERROR(attribute(attr, info));
    }
    out_.view.add_node(std::move(info));
    out_.ort_nodes.push_back(node);
    return Status::ok();
  }

 private:
  Status attribute(const OrtOpAttr* attr, NodeInfo& info) {
    const char* name = nullptr;
    NPUFLOW_ORT_CHECK(ort_.OpAttr_GetName(attr, &name));
    OrtOpAttrType type = ORT_OP_ATTR_UNDEFINED;
    NPUFLOW_ORT_CHECK(ort_.OpAttr_GetType(attr, &type));
    Attribute value;
    size_t written = 0;
    if (type == ORT_OP_ATTR_INT) {
      int64_t integer = 0;
      NPUFLOW_ORT_CHECK(ort_.ReadOpAttr(attr, type, &integer, sizeof(integer), &written));
      value.integer = integer;
    } else if (type == ORT_OP_ATTR_FLOAT) {
      float real = 0;
      NPUFLOW_ORT_CHECK(ort_.ReadOpAttr(attr, type, &real, sizeof(real), &written));
      value.real = real;
    } else if (type == ORT_OP_ATTR_INTS) {
      OrtStatus* probe = ort_.ReadOpAttr(attr, type, nullptr, 0, &written);
      if (probe != nullptr) ort_.ReleaseStatus(probe);
      std::vector<int64_t> list(written / sizeof(int64_t));
      if (!list.empty()) {
        NPUFLOW_ORT_CHECK(
            ort_.ReadOpAttr(attr, type, list.data(), list.size() * sizeof(int64_t), &written));
      }
      value.integers = std::move(list);
    } else if (type == ORT_OP_ATTR_STRING) {
      // A first call with no buffer reports the size needed.
      OrtStatus* probe = ort_.ReadOpAttr(attr, type, nullptr, 0, &written);
      if (probe != nullptr) ort_.ReleaseStatus(probe);
      std::string text(written, '\0');
      NPUFLOW_ORT_CHECK(ort_.ReadOpAttr(attr, type, text.data(), text.size(), &written));
      text.resize(written);
      value.text = text;
    } else if (type == ORT_OP_ATTR_TENSOR) {
      tensor_attribute(attr, value);
    }
    info.attributes.emplace_back(name, std::move(value));
    return Status::ok();
  }

  // Small tensor attributes are copied. A larger one, or one ONNX Runtime cannot hand over, is left
  // unset: the matchers then know less, nothing fails.
  void tensor_attribute(const OrtOpAttr* attr, Attribute& value) {
    constexpr size_t kMaxBytes = 4096;
    OrtValue* tensor = nullptr;
    OrtStatus* status = ort_.OpAttr_GetTensorAttributeAsOrtValue(attr, &tensor);
    if (status == nullptr && tensor == nullptr) return;
    OrtTensorTypeAndShapeInfo* info = nullptr;
    if (status == nullptr) status = ort_.GetTensorTypeAndShape(tensor, &info);
    AttributeTensor t;
    ONNXTensorElementDataType element = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    if (status == nullptr) status = ort_.GetTensorElementType(info, &element);
    if (status == nullptr) status = ort_.GetDimensionsCount(info, &rank);
    t.shape.resize(rank);
    if (status == nullptr && rank) status = ort_.GetDimensions(info, t.shape.data(), rank);
    if (info) ort_.ReleaseTensorTypeAndShapeInfo(info);
    t.type = element_type_of(element);
    const void* data = nullptr;
    if (status == nullptr) status = ort_.GetTensorData(tensor, &data);
    const size_t bytes = static_cast<size_t>(element_count(t.shape)) * element_size(t.type);
    if (status == nullptr && element_size(t.type) > 0 && bytes <= kMaxBytes) {
      t.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
      value.tensor = std::move(t);
    }
    if (tensor) ort_.ReleaseValue(tensor);
    if (status) ort_.ReleaseStatus(status);
  }

  OrtGraphSnapshot& out_;
  const OrtApi& ort_;
  std::unordered_map<std::string, ValueId> ids_;
};

}  // namespace

Result<OrtGraphSnapshot> snapshot_graph(const OrtGraph* graph) {
  OrtGraphSnapshot out;
  const OrtApi& ort = *api().ort;
  const char* name = nullptr;
  NPUFLOW_ORT_CHECK(ort.Graph_GetName(graph, &name));
  out.view.name = name && *name ? name : "main";

  Builder builder(out);
  size_t count = 0;
  NPUFLOW_ORT_CHECK(ort.Graph_GetNumInputs(graph, &count));
  std::vector<const OrtValueInfo*> inputs(count);
  if (count) NPUFLOW_ORT_CHECK(ort.Graph_GetInputs(graph, inputs.data(), count));
  for (const OrtValueInfo* input : inputs) {
    auto id = builder.value(input);
    if (!id.is_ok()) return id.status();
    out.view.values[static_cast<size_t>(id.value())].is_graph_input = true;
  }

  NPUFLOW_ORT_CHECK(ort.Graph_GetNumNodes(graph, &count));
  std::vector<const OrtNode*> nodes(count);
  if (count) NPUFLOW_ORT_CHECK(ort.Graph_GetNodes(graph, nodes.data(), count));
  for (const OrtNode* node : nodes) NPUFLOW_RETURN_IF_ERROR(builder.node(node));
  return out;
}

}  // namespace npuflow::ort
