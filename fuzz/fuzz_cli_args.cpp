// Fuzz target: the attnkit tool's command-line parsing (tools/attnkit/command_line.hpp, the CLI11
// front, value_parsers.hpp and attention_flags.hpp).
//
// The input is text. Every value parser reads all of it; a CommandLine with the flags of `attnkit
// run` reads it split into words at whitespace, and the options it fills then go through
// attnkit::forward on a tiny problem. Allowed failures: cli::UsageError and attnkit::Error; anything
// else (a CLI11 exception getting through included) is a finding. Cheap properties checked on the way: what a list
// parser accepts it reads back identically after printing; a number, an integer and an unsigned
// integer parse of the same text agree; a text without separators is a one-item list.
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attention_flags.hpp"
#include "command_line.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"
#include "fuzz_support.hpp"

namespace {

namespace cli = attnkit::cli;
using attnkit::fuzz::check;
using attnkit::fuzz::finding;

constexpr std::string_view kFlag = "--fuzz";

// The file flags of `attnkit run` (tools/attnkit/run.cpp); the attention flags and --verbose follow them.
constexpr const char* kRunFileFlags[] = {"--q", "--k", "--v", "--out", "--lse", "--probs", "--d-out", "--dq", "--dk", "--dv"};
constexpr std::size_t kRunFileFlagCount = std::size(kRunFileFlags);

// The parser's result, or nullopt if it raised UsageError (its only allowed failure).
template <class T>
std::optional<T> parsed(const std::function<T()>& parse) {
  try {
    return parse();
  } catch (const cli::UsageError&) {
    return std::nullopt;
  } catch (const std::exception& e) {
    finding("cli: a value parser raised something other than UsageError", e.what());
  }
}

bool same_number(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

bool same_numbers(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same_number(a[i], b[i])) return false;
  }
  return true;
}

// %.17g prints every double so that it reads back exactly.
std::string printed(const std::vector<double>& values) {
  std::string text;
  for (double x : values) {
    char item[40];
    std::snprintf(item, sizeof item, "%.17g", x);
    text += (text.empty() ? "" : ",") + std::string(item);
  }
  return text;
}

std::size_t count_of(std::string_view text, char c) {
  std::size_t n = 0;
  for (char x : text) n += x == c;
  return n;
}

void check_scalars(std::string_view text) {
  const auto number = parsed<double>([&] { return cli::parse_number(text, kFlag); });
  const auto integer = parsed<std::int64_t>([&] { return cli::parse_integer(text, kFlag); });
  const auto whole = parsed<std::uint64_t>([&] { return cli::parse_unsigned(text, kFlag); });
  if (integer) {
    // Both parses round the same exact value to the nearest double ("-0" is the number -0.0, and 0).
    check(number && *number == static_cast<double>(*integer), "cli: an integer does not parse as that number");
  }
  if (whole && *whole <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    check(integer && static_cast<std::uint64_t>(*integer) == *whole, "cli: an unsigned integer does not parse as that integer");
  }
  if (count_of(text, ',') == 0) {
    const auto list = parsed<std::vector<double>>([&] { return cli::parse_number_list(text, kFlag); });
    check(number.has_value() == list.has_value(), "cli: a number and a one-item list disagree");
    if (number) check(list->size() == 1 && same_number(list->front(), *number), "cli: a one-item list is not its number");
  }
}

void check_lists(std::string_view text) {
  if (const auto values = parsed<std::vector<double>>([&] { return cli::parse_number_list(text, kFlag); })) {
    check(values->size() == count_of(text, ',') + 1, "cli: a number list has the wrong number of items");
    const auto again = parsed<std::vector<double>>([&] { return cli::parse_number_list(printed(*values), kFlag); });
    check(again && same_numbers(*again, *values), "cli: a printed number list does not read back the same");
  }
  if (const auto values = parsed<std::vector<std::int64_t>>([&] { return cli::parse_integer_list(text, kFlag); })) {
    check(values->size() == count_of(text, ',') + 1, "cli: an integer list has the wrong number of items");
    std::string text_again;
    for (std::int64_t x : *values) text_again += (text_again.empty() ? "" : ",") + std::to_string(x);
    const auto again = parsed<std::vector<std::int64_t>>([&] { return cli::parse_integer_list(text_again, kFlag); });
    check(again && *again == *values, "cli: a printed integer list does not read back the same");
  }
  using Matrix = std::vector<std::vector<double>>;
  if (const auto rows = parsed<Matrix>([&] { return cli::parse_matrix(text, kFlag); })) {
    check(rows->size() == count_of(text, ';') + 1, "cli: a matrix has the wrong number of rows");
    std::string text_again;
    for (const auto& row : *rows) {
      check(row.size() == rows->front().size(), "cli: a matrix has rows of different lengths");
      text_again += (text_again.empty() ? "" : ";") + printed(row);
    }
    const auto again = parsed<Matrix>([&] { return cli::parse_matrix(text_again, kFlag); });
    check(again && again->size() == rows->size(), "cli: a printed matrix does not read back");
    for (std::size_t r = 0; r < rows->size(); ++r) {
      check(same_numbers((*again)[r], (*rows)[r]), "cli: a printed matrix does not read back the same");
    }
  }
}

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
      if (i > start) words.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return words;
}

// The parsed options on a problem just big enough for them: one batch entry per key length, one
// query head per ALiBi slope. Only the library's own errors may come back.
void run_options(const cli::AttentionFlags& flags) {
  constexpr std::int64_t kMaxEntries = 16, n = 3, m = 4, d = 2;
  const auto batch = static_cast<std::int64_t>(flags.key_lengths.empty() ? 1 : flags.key_lengths.size());
  const auto heads = static_cast<std::int64_t>(flags.alibi_slopes.empty() ? 1 : flags.alibi_slopes.size());
  if (batch > kMaxEntries || heads > kMaxEntries) return;
  const attnkit::DType dtype = flags.dtype.value_or(attnkit::DType::f32);
  attnkit::Tensor q(dtype, {batch, heads, n, d}), k(dtype, {batch, 1, m, d}), v(dtype, {batch, 1, m, d});
  attnkit::Tensor out(dtype, {batch, heads, n, d}), lse(attnkit::DType::f32, {batch, heads, n});
  for (attnkit::Tensor* t : {&q, &k, &v}) {
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      attnkit::store_from_double(static_cast<std::byte*>(t->raw()) + i * static_cast<std::int64_t>(attnkit::dtype_size(dtype)),
                                 dtype, static_cast<double>(i % 7) * 0.25 - 0.75);
    }
  }
  try {
    attnkit::forward(q.view(), k.view(), v.view(), out.view(), cli::with_spans(flags, nullptr), {.lse = lse.view()});
  } catch (const attnkit::Error&) {
    // The library refused the options: fine, the CLI prints its message.
  } catch (const std::exception& e) {
    finding("cli: forward with parsed options raised something other than attnkit::Error", e.what());
  }
}

// -h may carry more letters (-hx, as CLI11 reads grouped short flags) and --help a value (--help=true).
bool asks_for_help(const std::vector<std::string>& words) {
  for (const std::string& word : words) {
    if (word.starts_with("-h") || word == "--help" || word.starts_with("--help=")) return true;
  }
  return false;
}

void check_flags(std::string_view text) {
  const std::vector<std::string> words = words_of(text);
  cli::CommandLine command_line("Usage: attnkit run\n\n", "Examples: none");
  std::optional<std::string> paths[kRunFileFlagCount];
  for (std::size_t i = 0; i < kRunFileFlagCount; ++i) command_line.text(kRunFileFlags[i], paths[i], "PATH", "a file");
  cli::AttentionFlags flags;
  cli::add_attention_flags(command_line, flags, true);
  bool verbose = false;
  command_line.flag("--verbose", verbose, "a summary");
  std::ostringstream help;
  try {
    if (!command_line.parse(words, help)) {
      check(asks_for_help(words), "cli: help printed for words without -h or --help");
      check(help.str().find("--scale S") != std::string::npos, "cli: the help does not list --scale");
      return;
    }
  } catch (const cli::UsageError&) {
    return;
  } catch (const attnkit::Error&) {
    return;
  } catch (const std::exception& e) {
    finding("cli: CommandLine::parse raised something other than UsageError", e.what());
  }
  for (std::size_t i = 0; i < kRunFileFlagCount; ++i) {
    check(command_line.given(kRunFileFlags[i]) == paths[i].has_value(), "cli: given() and the value disagree",
          kRunFileFlags[i]);
  }
  check(command_line.given("--verbose") == verbose, "cli: given() and the flag disagree", "--verbose");
  run_options(flags);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_scalars(text);
  check_lists(text);
  check_flags(text);
  return 0;
}
