#include "core/json.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/strings.h"

namespace npuflow {

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Result<JsonValue> parse_document() {
    JsonValue value;
    NPUFLOW_RETURN_IF_ERROR(parse_value(value, 0));
    skip_space();
    if (pos_ != text_.size()) return error("trailing characters");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  Status error(const char* what) const {
    return invalid_argument(str_cat("JSON: ", what, " at offset ", pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool consume_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status parse_string(std::string& out) {
    if (!consume('"')) return error("expected a string");
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) return error("unterminated escape");
        char e = text_[pos_++];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'u': {
            if (pos_ + 4 > text_.size()) return error("short \\u escape");
            out += static_cast<char>(
                std::strtol(std::string(text_.substr(pos_, 4)).c_str(), nullptr, 16));
            pos_ += 4;
            break;
          }
          default:
            out += e;
            break;
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= text_.size()) return error("unterminated string");
    ++pos_;
    return Status::ok();
  }

  Status parse_value(JsonValue& out, int depth) {
    if (depth > kMaxDepth) return error("nesting too deep");
    skip_space();
    if (pos_ >= text_.size()) return error("unexpected end");
    const char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      out.kind_ = JsonValue::Kind::kObject;
      if (consume('}')) return Status::ok();
      do {
        std::string key;
        skip_space();
        NPUFLOW_RETURN_IF_ERROR(parse_string(key));
        if (!consume(':')) return error("expected ':'");
        NPUFLOW_RETURN_IF_ERROR(parse_value(out.object_[key], depth + 1));
      } while (consume(','));
      if (!consume('}')) return error("expected '}'");
      return Status::ok();
    }
    if (c == '[') {
      ++pos_;
      out.kind_ = JsonValue::Kind::kArray;
      if (consume(']')) return Status::ok();
      do {
        out.array_.emplace_back();
        NPUFLOW_RETURN_IF_ERROR(parse_value(out.array_.back(), depth + 1));
      } while (consume(','));
      if (!consume(']')) return error("expected ']'");
      return Status::ok();
    }
    if (c == '"') {
      out.kind_ = JsonValue::Kind::kString;
      return parse_string(out.string_);
    }
    if (consume_word("true") || consume_word("false")) {
      out.kind_ = JsonValue::Kind::kBool;
      out.boolean_ = text_[pos_ - 1] == 'e' && text_[pos_ - 2] == 'u';
      return Status::ok();
    }
    if (consume_word("null")) return Status::ok();
    const std::string rest(text_.substr(pos_, 64));
    char* end = nullptr;
    out.number_ = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) return error("unexpected character");
    out.kind_ = JsonValue::Kind::kNumber;
    pos_ += static_cast<size_t>(end - rest.c_str());
    return Status::ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

int64_t JsonValue::integer(int64_t otherwise) const {
  constexpr double kExactLimit = 9007199254740992.0;  // 2^53
  if (kind_ != Kind::kNumber || !(std::fabs(number_) <= kExactLimit) ||
      std::trunc(number_) != number_) {
    return otherwise;
  }
  return static_cast<int64_t>(number_);
}

const JsonValue& JsonValue::operator[](std::string_view key) const {
  static const JsonValue kNull;
  auto it = object_.find(key);
  return it == object_.end() ? kNull : it->second;
}

Result<JsonValue> JsonValue::parse(std::string_view text) {
  return JsonParser(text).parse_document();
}

}  // namespace npuflow
