// The JSON that file headers are made of (RFC 8259, strictly), through nlohmann/json: string literals
// for writers, and the base of a reader that a format's schema drives through nlohmann's SAX parser.
// Used by .safetensors (safetensors.cpp holds its schema and the file layout).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attnkit::io {

// ---- writing ----

// `text` as a JSON string literal (quotes, backslashes and control characters escaped, UTF-8 kept as
// is), or nothing if `text` is not valid UTF-8: nlohmann's strict serializer checks it.
std::optional<std::string> json_string(std::string_view text);

// ---- reading ----

// A format's schema as a handler of nlohmann/json's SAX events: each callback checks its event against
// the schema and keeps only what the schema asks for (there is no generic JSON tree, so a hostile
// header cannot make a reader allocate more than a small multiple of its own size). At the first
// departure from the schema a callback returns reject(...), which stops the parser at once.
class JsonSchemaReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  // Parses `text` (RFC 8259, strictly) into this handler. Every error is a format_error naming
  // `source` and the byte of the header it happened at; a syntax error also names where() and
  // shows the text from there.
  void read(std::string_view text, const std::string& source);

  // nlohmann's callbacks for a syntax error, and for binary data, which JSON text never holds.
  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& ex) final;
  bool binary(binary_t&) final { return reject("binary data"); }

 protected:
  // What the reader is in the middle of, for syntax errors: "reading the field 'shape' of tensor 'w'".
  virtual std::string where() const = 0;
  // Stops the parser: `problem` with the value read, named with the byte reached.
  bool reject(const std::string& problem);
  // Stops the parser: `problem` with the JSON text at the byte reached.
  bool malformed(const std::string& problem);
  std::size_t position() const { return static_cast<std::size_t>(reached_ - text_.data()); }
  std::string_view text() const { return text_; }

 private:
  bool malformed_at(std::size_t byte, const std::string& problem);

  std::string_view text_;
  std::size_t parsed_size_ = 0;    // the bytes handed to nlohmann: the text up to its first NUL byte
  const char* reached_ = nullptr;  // one past the last byte nlohmann has read
  std::string error_;
};

}  // namespace attnkit::io
