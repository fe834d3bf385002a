// The JSON that file headers are made of (RFC 8259, strictly): UTF-8 checks, string literals for
// writers, and a reader that a format's schema drives token by token. There is no generic JSON tree,
// so a hostile header cannot make a reader allocate more than a small multiple of its own size.
// Used by .safetensors (safetensors.cpp holds its schema and the file layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::io {

// ---- UTF-8 ----

// The length (1 to 4) of the well-formed UTF-8 sequence at text[pos], or 0 if there is none.
std::size_t utf8_sequence_length(std::string_view text, std::size_t pos);
bool is_valid_utf8(std::string_view text);
void append_utf8(std::string& out, std::uint32_t code_point);

// ---- writing ----

// Appends `text` as a JSON string literal: quotes, backslashes and control characters escaped,
// UTF-8 kept as is.
void append_json_string(std::string& out, std::string_view text);
// The length of append_json_string's output for `text`, without building it.
std::uint64_t json_string_size(std::string_view text);

// ---- reading ----

// Reads JSON tokens from `text`, skipping whitespace between them. Every error is a format_error
// naming `source`, the byte of the header it happened at, and the text from there.
class JsonReader {
 public:
  JsonReader(std::string_view text, const std::string& source);

  char peek();                 // the next token's first character, or '\0' at the end
  bool consume(char c);        // past `c` if it comes next
  void expect(char c, const std::string& where);
  void expect_end(const std::string& problem);  // nothing but whitespace may follow

  std::string parse_string(const std::string& what);  // any escape; valid UTF-8 only
  std::uint64_t parse_uint(const std::string& what);  // a non-negative integer within 64 bits
  std::vector<std::uint64_t> parse_uint_array(const std::string& what);

  [[noreturn]] void malformed(const std::string& problem) const;
  // `what` must be `expected`, and is not: names the value found instead.
  [[noreturn]] void wrong_type(const std::string& what, const std::string& expected);

 private:
  void skip_whitespace();
  bool digit_at(std::size_t i) const;
  std::string_view scan_number();
  std::string describe_value();
  std::uint32_t parse_hex4();
  void parse_escape(std::string& out);

  std::string_view text_;
  std::size_t pos_ = 0;
  const std::string& source_;
};

}  // namespace attnkit::io
