// A small JSON document model with a strict reader (RFC 8259, positions kept for error messages)
// and a deterministic pretty writer, enough for topology files.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace chorus {
namespace json {

enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

// One JSON value. Numbers written without fraction or exponent that fit in int64 keep their exact
// integer value (isInteger), since byte counts and ids exceed a double's 53-bit mantissa.
struct Value {
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  int64_t integer = 0;
  bool isInteger = false;
  std::string text;
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;  // in document order
  int line = 0;  // 1-based position of the value's first character; 0 when built in code
  int column = 0;

  static Value makeNull() { return Value(); }
  static Value makeBool(bool b);
  static Value makeInt(int64_t i);
  static Value makeDouble(double d);
  static Value makeString(std::string s);
  static Value makeArray();
  static Value makeObject();

  // Appends a member (objects) or item (arrays); returns *this for chaining.
  Value& add(std::string key, Value v);
  Value& push(Value v);
  // The member named key, or nullptr.
  const Value* find(const std::string& key) const;
};

const char* kindName(Kind kind);

struct ParseError {
  int line = 0;
  int column = 0;
  std::string message;  // what was expected or found, e.g. "expected ',' or '}' after a member"
};

// Parses one document (surrounding whitespace allowed, nothing else). Duplicate object keys and
// nesting deeper than 100 levels are errors.
bool parse(const std::string& text, Value* out, ParseError* error);

// Two-space indented output ending with a newline; arrays of scalars stay on one line.
std::string write(const Value& value);

}  // namespace json
}  // namespace chorus
