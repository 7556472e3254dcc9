// The safetensors reader: a file written here reads back; every truncation and random byte
// corruption of it is either read consistently or refused with a message, never a crash or an
// out-of-bounds view (ASan runs this too).
#include "diffusion/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace npuflow::diffusion {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "npuflow_" + std::to_string(::getpid()) + "_" + name;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Two F32 tensors and metadata, the header padded to 8 bytes as the safetensors library does.
std::string valid_file() {
  std::string header =
      R"({"__metadata__":{"dit.hidden":"4"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[24,40]}})";
  while ((8 + header.size()) % 8) header.push_back(' ');
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  bytes += header;
  for (int i = 0; i < 10; ++i) {
    const float value = 0.5f * i;
    bytes.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  return bytes;
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
  const std::string path = temp_path("valid.safetensors");
  write_file(path, valid_file());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto a = file.value()->tensor("a", {2, 3});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a.value().elements(), 6);
  EXPECT_FLOAT_EQ(a.value().data[5], 2.5f);
  auto b = file.value()->tensor("b", {4});
  ASSERT_TRUE(b.is_ok());
  EXPECT_FLOAT_EQ(b.value().data[0], 3.0f);
  EXPECT_EQ(file.value()->metadata("dit.hidden"), "4");
  EXPECT_FALSE(file.value()->metadata("dit.heads").has_value());
  // Wrong shape, missing tensor: errors that name the tensor.
  auto wrong = file.value()->tensor("a", {3, 2});
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("a has shape"), std::string::npos);
  EXPECT_FALSE(file.value()->tensor("c", {1}).is_ok());
  std::remove(path.c_str());
}

TEST(Safetensors, OtherDtypesAreUnsupportedNotMisread) {
  std::string bytes = valid_file();
  const size_t at = bytes.find("\"F32\",\"shape\":[4]");
  bytes.replace(at, 5, "\"I32\"");
  const std::string path = temp_path("i32.safetensors");
  write_file(path, bytes);
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto b = file.value()->tensor("b", {4});
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnsupported);
  std::remove(path.c_str());
}

TEST(Safetensors, TruncationsAndCorruptionsAreRefusedOrReadSafely) {
  const std::string valid = valid_file();
  const std::string path = temp_path("mutant.safetensors");
  int refused = 0, read = 0;
  auto check = [&](const std::string& bytes) {
    write_file(path, bytes);
    auto file = SafetensorsFile::open(path);
    if (!file.is_ok()) {
      EXPECT_FALSE(file.status().message().empty());
      ++refused;
      return;
    }
    ++read;
    // Whatever was read must be readable in full.
    for (const char* name : {"a", "b"}) {
      for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 3}, {4}}) {
        auto view = file.value()->tensor(name, shape);
        if (!view.is_ok()) continue;
        float sum = 0.0f;
        for (int64_t i = 0; i < view.value().elements(); ++i) sum += view.value().data[i];
        (void)sum;
      }
    }
  };
  for (size_t length = 0; length < valid.size(); ++length) check(valid.substr(0, length));
  std::mt19937 rng(17);
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly the length and the header, where the structure is.
      const size_t at = rng() % 4 ? rng() % (bytes.size() - 40) : rng() % bytes.size();
      bytes[at] = static_cast<char>(rng() & 0xff);
    }
    check(bytes);
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(read, 10);  // flips in padding or data keep the file valid
  std::remove(path.c_str());
}

}  // namespace
}  // namespace npuflow::diffusion
