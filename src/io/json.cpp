#include "io/json.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "io/file_common.hpp"

namespace attnkit::io {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A byte that stands for itself inside a JSON string.
bool is_plain_ascii(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
}

// How many bytes each byte takes inside a JSON string literal: 1 as itself, 2 as a short escape
// (\" \\ \b \f \n \r \t), 6 as \u00XX (the other control characters).
constexpr std::array<std::uint8_t, 256> kJsonEscapedSize = [] {
  std::array<std::uint8_t, 256> size{};
  for (std::size_t c = 0; c < size.size(); ++c) size[c] = c < 0x20 ? 6 : 1;
  for (unsigned char c : {'"', '\\', '\b', '\f', '\n', '\r', '\t'}) size[c] = 2;
  return size;
}();

std::size_t json_escaped_size(char ch) { return kJsonEscapedSize[static_cast<unsigned char>(ch)]; }

}  // namespace

// ---- UTF-8 ----

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at text[pos], or 0 if there is
// none: stray continuation bytes, overlong forms, UTF-16 surrogates and code points above U+10FFFF
// are ill-formed (RFC 3629, table 3-7 of the Unicode standard).
std::size_t utf8_sequence_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) -> unsigned {
    return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : 0u;
  };
  const unsigned lead = byte(0);
  const auto continuation = [&](std::size_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return pos + i < text.size() && byte(i) >= lo && byte(i) <= hi;
  };
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned lo = lead == 0xE0 ? 0xA0 : 0x80;  // E0 80..9F would be overlong
    const unsigned hi = lead == 0xED ? 0x9F : 0xBF;  // ED A0..BF would encode a surrogate
    return continuation(1, lo, hi) && continuation(2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned lo = lead == 0xF0 ? 0x90 : 0x80;  // F0 80..8F would be overlong
    const unsigned hi = lead == 0xF4 ? 0x8F : 0xBF;  // F4 90.. would exceed U+10FFFF
    return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

bool is_valid_utf8(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {  // the common case, kept out of the general path
      ++pos;
      continue;
    }
    const std::size_t n = utf8_sequence_length(text, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

void append_utf8(std::string& out, std::uint32_t code_point) {
  const auto put = [&](std::uint32_t bits) { out += static_cast<char>(bits); };
  if (code_point < 0x80) {
    put(code_point);
  } else if (code_point < 0x800) {
    put(0xC0 | (code_point >> 6));
    put(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    put(0xE0 | (code_point >> 12));
    put(0x80 | ((code_point >> 6) & 0x3F));
    put(0x80 | (code_point & 0x3F));
  } else {
    put(0xF0 | (code_point >> 18));
    put(0x80 | ((code_point >> 12) & 0x3F));
    put(0x80 | ((code_point >> 6) & 0x3F));
    put(0x80 | (code_point & 0x3F));
  }
}

// ---- writing ----

// A JSON string literal: quotes, backslashes and control characters escaped; UTF-8 kept as is.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = pos;
    while (end < text.size() && json_escaped_size(text[end]) == 1) ++end;
    out.append(text.substr(pos, end - pos));  // the common case: long runs that need no escape
    pos = end;
    if (pos == text.size()) break;
    const char ch = text[pos++];
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        constexpr char kHex[] = "0123456789abcdef";
        const auto c = static_cast<unsigned char>(ch);
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
      }
    }
  }
  out += '"';
}

// The length of append_json_string's output for `text`.
std::uint64_t json_string_size(std::string_view text) {
  std::uint64_t size = 2;  // the quotes
  for (char ch : text) size += json_escaped_size(ch);
  return size;
}

// ---- reading ----

JsonReader::JsonReader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

bool JsonReader::digit_at(std::size_t i) const { return i < text_.size() && is_digit(text_[i]); }

void JsonReader::expect_end(const std::string& problem) {
  skip_whitespace();
  if (pos_ != text_.size()) malformed(problem);
}

void JsonReader::malformed(const std::string& problem) const {
  format_fail(source_, "malformed header JSON at byte " + std::to_string(pos_) + " of the header: " + problem +
                           " (header text: " + in_quotes(text_.substr(std::min(pos_, text_.size()))) + ")");
}

void JsonReader::skip_whitespace() {
  while (pos_ < text_.size() && std::string_view(" \t\n\r").find(text_[pos_]) != std::string_view::npos) ++pos_;
}

char JsonReader::peek() {
  skip_whitespace();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

bool JsonReader::consume(char c) {
  if (peek() != c || pos_ >= text_.size()) return false;
  ++pos_;
  return true;
}

void JsonReader::expect(char c, const std::string& where) {
  if (!consume(c)) malformed(std::string("expected '") + c + "' " + where);
}

// A number as JSON spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
std::string_view JsonReader::scan_number() {
  const std::size_t start = pos_;
  if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
  if (pos_ < text_.size() && text_[pos_] == '0') {
    ++pos_;
    if (digit_at(pos_)) malformed("a JSON number cannot have a leading zero");
  } else if (digit_at(pos_)) {
    while (digit_at(pos_)) ++pos_;
  } else {
    malformed("invalid number");
  }
  if (pos_ < text_.size() && text_[pos_] == '.') {
    ++pos_;
    if (!digit_at(pos_)) malformed("invalid number: no digit after '.'");
    while (digit_at(pos_)) ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (!digit_at(pos_)) malformed("invalid number: no digit in the exponent");
    while (digit_at(pos_)) ++pos_;
  }
  return text_.substr(start, pos_ - start);
}

// Names the value that starts here, for a message about a value of the wrong type.
std::string JsonReader::describe_value() {
  const char c = peek();
  if (c == '{') return "an object";
  if (c == '[') return "an array";
  if (c == '"') return "a string";
  if (c == '-' || is_digit(c)) return "the number " + in_quotes(scan_number());
  for (std::string_view literal : {"true", "false", "null"}) {
    if (text_.substr(pos_, literal.size()) == literal) return std::string(literal);
  }
  malformed("expected a JSON value");
}

void JsonReader::wrong_type(const std::string& what, const std::string& expected) {
  const std::string got = describe_value();
  format_fail(source_, what + " must be " + expected + ", not " + got);
}

// Four hex digits of a \u escape.
std::uint32_t JsonReader::parse_hex4() {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i, ++pos_) {
    const char c = pos_ < text_.size() ? text_[pos_] : '\0';
    const int digit = is_digit(c)              ? c - '0'
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                               : -1;
    if (digit < 0) malformed("\\u must be followed by four hex digits");
    value = value * 16 + static_cast<std::uint32_t>(digit);
  }
  return value;
}

// After the backslash: one escape, appended to `out` as UTF-8.
void JsonReader::parse_escape(std::string& out) {
  const char c = pos_ < text_.size() ? text_[pos_] : '\0';
  ++pos_;
  switch (c) {
    case '"': out += '"'; return;
    case '\\': out += '\\'; return;
    case '/': out += '/'; return;
    case 'b': out += '\b'; return;
    case 'f': out += '\f'; return;
    case 'n': out += '\n'; return;
    case 'r': out += '\r'; return;
    case 't': out += '\t'; return;
    case 'u': break;
    default: --pos_; malformed("invalid escape sequence in a string");
  }
  constexpr std::uint32_t kHighFirst = 0xD800, kLowFirst = 0xDC00, kLowLast = 0xDFFF;
  std::uint32_t code_point = parse_hex4();
  if (code_point >= kHighFirst && code_point < kLowFirst) {  // a high surrogate: a low one must follow
    if (text_.substr(pos_, 2) != "\\u") malformed("a \\u escape of a high surrogate is not followed by a low one");
    pos_ += 2;
    const std::uint32_t low = parse_hex4();
    if (low < kLowFirst || low > kLowLast) malformed("a \\u escape of a high surrogate is not followed by a low one");
    code_point = 0x10000 + ((code_point - kHighFirst) << 10) + (low - kLowFirst);
  } else if (code_point >= kLowFirst && code_point <= kLowLast) {
    malformed("a \\u escape of a low surrogate without a high one before it");
  }
  append_utf8(out, code_point);
}

std::string JsonReader::parse_string(const std::string& what) {
  if (peek() != '"' || pos_ >= text_.size()) malformed("expected " + what);
  ++pos_;
  std::string out;
  while (true) {
    if (pos_ >= text_.size()) malformed("unterminated string");
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') break;
    if (c == '\\') {
      ++pos_;
      parse_escape(out);
      continue;
    }
    if (c < 0x20) malformed("unescaped control character in a string");
    if (c < 0x80) {  // a run of plain ASCII, appended at once
      const std::size_t start = pos_;
      while (pos_ < text_.size() && is_plain_ascii(text_[pos_])) ++pos_;
      out.append(text_.substr(start, pos_ - start));
      continue;
    }
    const std::size_t n = utf8_sequence_length(text_, pos_);
    if (n == 0) malformed("invalid UTF-8 in a string");
    out.append(text_.substr(pos_, n));
    pos_ += n;
  }
  ++pos_;
  return out;
}

std::uint64_t JsonReader::parse_uint(const std::string& what) {
  const char c = peek();
  if (c != '-' && !is_digit(c)) {
    format_fail(source_, what + " entries must be non-negative integers, not " + describe_value());
  }
  const std::string_view token = scan_number();
  if (token.find_first_of("-.eE") != std::string_view::npos) {
    format_fail(source_, what + " entries must be non-negative integers, not " + in_quotes(token));
  }
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t value = 0;
  for (char d : token) {
    const auto digit = static_cast<std::uint64_t>(d - '0');
    if (value > (kMax - digit) / 10) format_fail(source_, what + " entry " + in_quotes(token) + " overflows 64 bits");
    value = value * 10 + digit;
  }
  return value;
}

std::vector<std::uint64_t> JsonReader::parse_uint_array(const std::string& what) {
  if (peek() != '[') wrong_type(what, "an array of non-negative integers");
  ++pos_;
  std::vector<std::uint64_t> out;
  if (consume(']')) return out;
  do {
    out.push_back(parse_uint(what));
  } while (consume(','));
  expect(']', "to close " + what + " (expected ',' or ']')");
  return out;
}

}  // namespace attnkit::io
