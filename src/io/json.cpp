#include "io/json.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include "io/file_common.hpp"

namespace attnkit::io {

// ---- writing ----

std::optional<std::string> json_string(std::string_view text) {
  try {
    return nlohmann::json(text).dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::type_error&) {  // 316: invalid UTF-8
    return std::nullopt;
  }
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
// column 5: ", or "[json.exception.out_of_range.406] " for a number like 1e400) and without the token
// it quotes (which may be the whole of a long string: the error shows the header text instead).
std::string syntax_problem(const nlohmann::detail::exception& ex, const std::string& last_token) {
  std::string message = ex.what();
  if (const std::size_t at = message.find("] "); at != std::string::npos) message.erase(0, at + 2);
  if (message.starts_with("parse error at ")) {
    if (const std::size_t at = message.find(": "); at != std::string::npos) message.erase(0, at + 2);
  }
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
  // nlohmann skips a byte-order mark silently; RFC 8259 forbids writing one, and a header with one
  // has always been refused.
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
