// Element types the core understands, independent of any runtime's enum.
#pragma once

#include <cstddef>
#include <cstdint>

namespace npuflow {

// kInt4: signed 4-bit values held one per byte (int8 storage), as librocketnpu takes them.
// kPackedInt4 / kPackedUInt4: ONNX's int4 / uint4, two values per byte, low nibble first; only
// the quantized-graph readers take them (element_size is 0: they are not byte-addressable).
enum class ElementType : uint8_t {
  kUnknown,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kFloat16,
  kFloat32,
  kInt4,
  kBool,  // one byte per element, 0 or 1 (ONNX bool)
  kInt16,
  kUInt16,
  kPackedInt4,
  kPackedUInt4
};

constexpr size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::kInt8:
    case ElementType::kUInt8:
    case ElementType::kInt4:
    case ElementType::kBool:
      return 1;
    case ElementType::kFloat16:
    case ElementType::kInt16:
    case ElementType::kUInt16:
      return 2;
    case ElementType::kInt32:
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
      return 8;
    case ElementType::kPackedInt4:
    case ElementType::kPackedUInt4:
    case ElementType::kUnknown:
      return 0;
  }
  return 0;
}

constexpr bool is_packed_4bit(ElementType type) {
  return type == ElementType::kPackedInt4 || type == ElementType::kPackedUInt4;
}

// The bytes `count` elements of `type` occupy (two per byte for the packed 4-bit types).
constexpr size_t storage_bytes(ElementType type, int64_t count) {
  const auto n = static_cast<size_t>(count < 0 ? 0 : count);
  return is_packed_4bit(type) ? (n + 1) / 2 : n * element_size(type);
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
    case ElementType::kInt16:
      return "int16";
    case ElementType::kUInt16:
      return "uint16";
    case ElementType::kPackedInt4:
      return "int4 (packed)";
    case ElementType::kPackedUInt4:
      return "uint4 (packed)";
    case ElementType::kUnknown:
      return "unknown";
  }
  return "unknown";
}

}  // namespace npuflow
