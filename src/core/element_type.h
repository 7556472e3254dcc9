// Element types the core understands, independent of any runtime's enum.
#pragma once

#include <cstddef>
#include <cstdint>

namespace npuflow {

// kInt4: signed 4-bit values held one per byte (int8 storage), as librocketnpu takes them.
enum class ElementType : uint8_t {
  kUnknown,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kFloat16,
  kFloat32,
  kInt4,
  kBool  // one byte per element, 0 or 1 (ONNX bool)
};

constexpr size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::kInt8:
    case ElementType::kUInt8:
    case ElementType::kInt4:
    case ElementType::kBool:
      return 1;
    case ElementType::kFloat16:
      return 2;
    case ElementType::kInt32:
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
      return 8;
    case ElementType::kUnknown:
      return 0;
  }
  return 0;
}

constexpr const char* element_type_name(ElementType type) {
  switch (type) {
    case ElementType::kInt8:
      return "int8";
    case ElementType::kUInt8:
      return "uint8";
    case ElementType::kInt32:
      return "int32";
    case ElementType::kInt64:
      return "int64";
    case ElementType::kFloat16:
      return "float16";
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kInt4:
      return "int4";
    case ElementType::kBool:
      return "bool";
    case ElementType::kUnknown:
      return "unknown";
  }
  return "unknown";
}

}  // namespace npuflow
