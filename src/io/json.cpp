#include "io/json.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include "io/file_common.hpp"

namespace attnkit::io {
namespace {

// How many bytes each byte takes inside a JSON string literal: 1 as itself, 2 as a short escape
// (\" \\ \b \f \n \r \t), 6 as \u00XX (the other control characters).
constexpr std::array<std::uint8_t, 256> kJsonEscapedSize = [] {
  std::array<std::uint8_t, 256> size{};
  for (std::size_t c = 0; c < size.size(); ++c) size[c] = c < 0x20 ? 6 : 1;
  for (unsigned char c : {'"', '\\', '\b', '\f', '\n', '\r', '\t'}) size[c] = 2;
  return size;
}();

std::size_t json_escaped_size(char ch) { return kJsonEscapedSize[static_cast<unsigned char>(ch)]; }

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

}  // namespace

// ---- UTF-8 ----

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

namespace {

// Walks the text for nlohmann's parser and notes how far it has read, which nlohmann tells only its
// own syntax errors: the schema's errors name that byte too.
class TrackedChar {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedChar(const char* at, const char** reached) : at_(at), reached_(reached) {}
  const char& operator*() const { return *at_; }
  TrackedChar& operator++() {
    *reached_ = ++at_;
    return *this;
  }
  TrackedChar operator++(int) {
    TrackedChar before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackedChar& other) const { return at_ == other.at_; }

 private:
  const char* at_;
  const char** reached_;
};

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

// nlohmann's message without its prefix ("[json.exception.parse_error.101] parse error at line 1,
// column 5: ") and without the token it quotes (which may be the whole of a long string: the error
// shows the header text instead).
std::string syntax_problem(const nlohmann::detail::exception& ex, const std::string& last_token) {
  std::string message = ex.what();
  if (const std::size_t at = message.find("syntax error"); at != std::string::npos) message.erase(0, at);
  const std::string last_read = "; last read: '" + last_token + "'";
  if (const std::size_t at = message.find(last_read); at != std::string::npos) message.erase(at, last_read.size());
  // What nlohmann says it expected, in plainer words: after a value it names only the closing
  // bracket, where a comma is as welcome, and its "literal" means any value but an array or object.
  constexpr std::pair<std::string_view, std::string_view> kPlainer[] = {
      {"; expected '}'", "; expected ',' or '}'"},
      {"; expected ']'", "; expected ',' or ']'"},
      {"; expected '[', '{', or a literal", "; expected a JSON value"},
      {"; expected string literal", "; expected a key (a string)"},
  };
  for (const auto& [theirs, ours] : kPlainer) {
    if (message.ends_with(theirs)) message.replace(message.size() - theirs.size(), theirs.size(), ours);
  }
  return message;
}

}  // namespace

void JsonSchemaReader::read(std::string_view text, const std::string& source) {
  text_ = text;
  reached_ = text.data();
  // nlohmann skips a byte-order mark silently; RFC 8259 forbids writing one and the reference reader
  // refuses it.
  if (text.starts_with(kByteOrderMark)) {
    malformed_at(0, "the header starts with a UTF-8 byte-order mark");
    format_fail(source, error_);
  }
  // nlohmann's lexer takes a NUL byte for the end of the text, so that "{}\0" would pass: it gets the
  // text up to the first NUL, and a NUL it stopped at is an error (JSON has no place for one).
  parsed_size_ = std::min(text.find('\0'), text.size());
  const TrackedChar begin(text.data(), &reached_), end(text.data() + parsed_size_, &reached_);
  if (!nlohmann::json::sax_parse(begin, end, this, nlohmann::json::input_format_t::json, /*strict=*/true)) {
    format_fail(source, error_);
  }
  if (parsed_size_ < text.size()) {
    malformed_at(parsed_size_, "a NUL byte");
    format_fail(source, error_);
  }
}

bool JsonSchemaReader::reject(const std::string& problem) {
  error_ = problem + " (at byte " + std::to_string(position()) + " of the header)";
  return false;
}

bool JsonSchemaReader::malformed(const std::string& problem) { return malformed_at(position(), problem); }

bool JsonSchemaReader::malformed_at(std::size_t byte, const std::string& problem) {
  byte = std::min(byte, text_.size());
  error_ = "malformed header JSON at byte " + std::to_string(byte) + " of the header, " + where() + ": " + problem +
           " (header text: " + in_quotes(text_.substr(byte)) + ")";
  return false;
}

// `position` counts the bytes read, the offending one included.
bool JsonSchemaReader::parse_error(std::size_t position, const std::string& last_token,
                                   const nlohmann::detail::exception& ex) {
  const std::size_t byte = position > 0 ? position - 1 : 0;
  if (byte >= parsed_size_ && parsed_size_ < text_.size()) {
    return malformed_at(parsed_size_, "a NUL byte (JSON allows none; a string may hold one escaped, as \\u0000)");
  }
  return malformed_at(byte, syntax_problem(ex, last_token));
}

}  // namespace attnkit::io
