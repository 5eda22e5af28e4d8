#include "topo/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace chorus {
namespace json {

Value Value::makeBool(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}

Value Value::makeInt(int64_t i) {
  Value v;
  v.kind = Kind::kNumber;
  v.integer = i;
  v.number = static_cast<double>(i);
  v.isInteger = true;
  return v;
}

Value Value::makeDouble(double d) {
  Value v;
  v.kind = Kind::kNumber;
  v.number = d;
  return v;
}

Value Value::makeString(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(s);
  return v;
}

Value Value::makeArray() {
  Value v;
  v.kind = Kind::kArray;
  return v;
}

Value Value::makeObject() {
  Value v;
  v.kind = Kind::kObject;
  return v;
}

Value& Value::add(std::string key, Value v) {
  members.emplace_back(std::move(key), std::move(v));
  return *this;
}

Value& Value::push(Value v) {
  items.push_back(std::move(v));
  return *this;
}

const Value* Value::find(const std::string& key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "?";
}

namespace {

constexpr int kMaxDepth = 100;

class Reader {
 public:
  explicit Reader(const std::string& text) : s_(text) {}

  bool document(Value* out, ParseError* error) {
    skipSpace();
    if (!value(out, 0)) return fail(error);
    skipSpace();
    if (pos_ != s_.size()) {
      setError("unexpected text after the end of the document");
      return fail(error);
    }
    return true;
  }

 private:
  bool fail(ParseError* error) {
    if (error != nullptr) *error = error_;
    return false;
  }

  // Records the first error at the current position.
  bool setError(const std::string& message) {
    if (error_.message.empty()) {
      error_.line = line_;
      error_.column = static_cast<int>(pos_ - lineStart_) + 1;
      error_.message = message;
    }
    return false;
  }

  bool atEnd() const { return pos_ >= s_.size(); }
  char peek() const { return atEnd() ? '\0' : s_[pos_]; }

  void skipSpace() {
    while (!atEnd()) {
      char c = s_[pos_];
      if (c == '\n') {
        ++pos_;
        ++line_;
        lineStart_ = pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string describeHere() const {
    if (atEnd()) return "end of input";
    char c = s_[pos_];
    if (static_cast<unsigned char>(c) < 0x20) return formatChar("control character 0x%02x", c);
    return formatChar("'%c'", c);
  }

  static std::string formatChar(const char* fmt, char c) {
    char buf[48];
    snprintf(buf, sizeof(buf), fmt, static_cast<unsigned char>(c));
    return buf;
  }

  bool literal(const char* word) {
    size_t start = pos_;
    for (const char* p = word; *p != '\0'; ++p, ++pos_) {
      if (peek() != *p) {
        pos_ = start;
        return false;
      }
    }
    return true;
  }

  bool value(Value* out, int depth) {
    out->line = line_;
    out->column = static_cast<int>(pos_ - lineStart_) + 1;
    char c = peek();
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->kind = Kind::kString;
      return string(&out->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    if (literal("true")) {
      *out = withPosition(Value::makeBool(true), *out);
      return true;
    }
    if (literal("false")) {
      *out = withPosition(Value::makeBool(false), *out);
      return true;
    }
    if (literal("null")) {
      *out = withPosition(Value::makeNull(), *out);
      return true;
    }
    if (c == '<' && depth == 0)
      return setError("expected a JSON value but found '<' (an XML file? Chorus reads JSON)");
    return setError(
        "expected a value (object, array, string, number, true, false or null) but "
        "found " +
        describeHere());
  }

  static Value withPosition(Value v, const Value& where) {
    v.line = where.line;
    v.column = where.column;
    return v;
  }

  bool object(Value* out, int depth) {
    if (depth >= kMaxDepth) return setError("nesting deeper than 100 levels");
    out->kind = Kind::kObject;
    ++pos_;  // '{'
    skipSpace();
    if (peek() == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      if (peek() != '"')
        return setError("expected a member name in quotes but found " + describeHere());
      std::string key;
      int keyLine = line_;
      int keyColumn = static_cast<int>(pos_ - lineStart_) + 1;
      if (!string(&key)) return false;
      if (out->find(key) != nullptr) {
        line_ = keyLine;
        pos_ = lineStart_ + static_cast<size_t>(keyColumn - 1);
        return setError("duplicate member \"" + key + "\"");
      }
      skipSpace();
      if (peek() != ':')
        return setError("expected ':' after a member name but found " + describeHere());
      ++pos_;
      skipSpace();
      Value member;
      if (!value(&member, depth + 1)) return false;
      out->members.emplace_back(std::move(key), std::move(member));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        skipSpace();
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return true;
      }
      return setError("expected ',' or '}' after a member but found " + describeHere());
    }
  }

  bool array(Value* out, int depth) {
    if (depth >= kMaxDepth) return setError("nesting deeper than 100 levels");
    out->kind = Kind::kArray;
    ++pos_;  // '['
    skipSpace();
    if (peek() == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      Value item;
      if (!value(&item, depth + 1)) return false;
      out->items.push_back(std::move(item));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        skipSpace();
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return true;
      }
      return setError("expected ',' or ']' after an array item but found " + describeHere());
    }
  }

  static void appendUtf8(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool hex4(uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      char c = peek();
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return setError("expected 4 hex digits after \\u but found " + describeHere());
      }
    }
    *out = v;
    return true;
  }

  bool string(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    for (;;) {
      if (atEnd()) return setError("unterminated string");
      char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        return setError("raw " + describeHere() + " inside a string (escape it)");
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      char e = peek();
      ++pos_;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00) {
            uint32_t low = 0;
            if (peek() != '\\' || pos_ + 1 >= s_.size() || s_[pos_ + 1] != 'u')
              return setError("expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            pos_ += 2;
            if (!hex4(&low)) return false;
            if (low < 0xdc00 || low > 0xdfff)
              return setError("expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            return setError("unpaired low surrogate in \\u escape");
          }
          appendUtf8(out, cp);
          break;
        }
        default:
          --pos_;
          return setError("invalid escape \\" + describeHere() + " in a string");
      }
    }
  }

  bool digits() {
    if (!(peek() >= '0' && peek() <= '9')) return false;
    while (peek() >= '0' && peek() <= '9') ++pos_;
    return true;
  }

  bool number(Value* out) {
    size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9')
        return setError("leading zeros are not allowed in numbers");
    } else if (!digits()) {
      return setError("expected a digit but found " + describeHere());
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!digits()) return setError("expected a digit after '.' but found " + describeHere());
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digits())
        return setError("expected a digit in the exponent but found " + describeHere());
    }
    std::string token = s_.substr(start, pos_ - start);
    out->kind = Kind::kNumber;
    out->number = strtod(token.c_str(), nullptr);
    if (integral) {
      errno = 0;
      long long v = strtoll(token.c_str(), nullptr, 10);
      if (errno == 0) {
        out->integer = v;
        out->isInteger = true;
      }
    }
    if (!std::isfinite(out->number)) {
      pos_ = start;
      return setError("number " + token + " is out of range");
    }
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
  size_t lineStart_ = 0;
  int line_ = 1;
  ParseError error_;
};

void writeString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// The shortest decimal text that reads back as the same double; whole numbers without exponent.
std::string formatDouble(double d) {
  char buf[40];
  // Negative zero as "0": "-0" would read back as the integer 0 and print differently.
  if (d == 0) return "0";
  if (d == std::floor(d) && std::fabs(d) < 1e15) {
    snprintf(buf, sizeof(buf), "%.0f", d);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (strtod(buf, nullptr) == d) break;
  }
  return buf;
}

bool isScalar(const Value& v) {
  return v.kind != Kind::kArray && v.kind != Kind::kObject;
}

void writeValue(const Value& v, int indent, std::string* out) {
  std::string pad(static_cast<size_t>(indent + 2), ' ');
  switch (v.kind) {
    case Kind::kNull:
      *out += "null";
      return;
    case Kind::kBool:
      *out += v.boolean ? "true" : "false";
      return;
    case Kind::kNumber:
      *out += v.isInteger ? std::to_string(v.integer) : formatDouble(v.number);
      return;
    case Kind::kString:
      writeString(v.text, out);
      return;
    case Kind::kArray: {
      bool flat = true;
      for (const Value& item : v.items) flat = flat && isScalar(item);
      if (v.items.empty() || flat) {
        out->push_back('[');
        for (size_t i = 0; i < v.items.size(); ++i) {
          if (i > 0) *out += ", ";
          writeValue(v.items[i], indent, out);
        }
        out->push_back(']');
        return;
      }
      *out += "[\n";
      for (size_t i = 0; i < v.items.size(); ++i) {
        *out += pad;
        writeValue(v.items[i], indent + 2, out);
        *out += i + 1 < v.items.size() ? ",\n" : "\n";
      }
      *out += std::string(static_cast<size_t>(indent), ' ') + "]";
      return;
    }
    case Kind::kObject: {
      if (v.members.empty()) {
        *out += "{}";
        return;
      }
      *out += "{\n";
      for (size_t i = 0; i < v.members.size(); ++i) {
        *out += pad;
        writeString(v.members[i].first, out);
        *out += ": ";
        writeValue(v.members[i].second, indent + 2, out);
        *out += i + 1 < v.members.size() ? ",\n" : "\n";
      }
      *out += std::string(static_cast<size_t>(indent), ' ') + "}";
      return;
    }
  }
}

}  // namespace

bool parse(const std::string& text, Value* out, ParseError* error) {
  Reader reader(text);
  *out = Value();
  return reader.document(out, error);
}

std::string write(const Value& value) {
  std::string out;
  writeValue(value, 0, &out);
  out.push_back('\n');
  return out;
}

}  // namespace json
}  // namespace chorus
