// A command's flags, parsed by CLI11 (Debian libcli11-dev, header only) and listed by its generated
// --help, with the tool's conventions on top: `--name value` and `--name=value`; a value-taking flag
// always takes the next word, so `--window -1,4` works; `-h`/`--help` wins over everything else;
// values go through value_parsers.hpp, whose errors name the flag and the bad value; and every
// mistake (unknown flag, stray word, missing value, a flag given twice, a value given to a flag that
// takes none) is a UsageError in the tool's words, never a CLI11 exception.
#pragma once

#include <CLI/CLI.hpp>

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "value_parsers.hpp"

namespace attnkit::cli {

class CommandLine {
 public:
  // The help prints `about` (the usage lines and what the command does), then the flags section by
  // section, then `footer` (examples, exit codes).
  CommandLine(std::string_view about, std::string_view footer);

  // The flags added from now on are listed under `title` in the help ("Flags" until then).
  void section(std::string title);

  // A flag taking a value, kept as given; `placeholder` names the value in the help (PATH, TEXT).
  void text(const std::string& flag, std::optional<std::string>& target, const std::string& placeholder,
            const std::string& help);
  void text(const std::string& flag, std::string& target, const std::string& placeholder, const std::string& help);
  // A flag taking a value read by `parse(text, flag)`, which throws UsageError naming the flag (the
  // parsers of value_parsers.hpp, or a command's own). `target` keeps its value when the flag is absent.
  template <class T, class Parse>
  void value(const std::string& flag, T& target, Parse parse, const std::string& placeholder,
             const std::string& help) {
    add(app_.add_option_function<std::string>(
        flag, [&target, parse, flag](const std::string& given) { target = parse(given, flag); }, help),
        placeholder);
  }
  // A flag without a value.
  void flag(const std::string& flag, bool& target, const std::string& help);

  // Parses `words` (what follows the command's name). Returns false when they ask for help, which is
  // then printed to `out`. Throws UsageError on any mistake, and whatever a value parser throws.
  bool parse(const CommandArgs& words, std::ostream& out);

  // Whether `flag` was given (after parse).
  bool given(const std::string& flag) const;

 private:
  void add(CLI::Option* option, const std::string& placeholder);
  std::vector<std::string> for_cli11(const CommandArgs& words) const;  // the words as CLI11 takes them
  void check_structure() const;  // unknown flags, stray words, repeats, values given to flags

  CLI::App app_;
  std::vector<std::pair<const CLI::Option*, bool*>> flags_;  // set by parse
  std::string section_ = "Flags";  // CLI11 leaves flags of an unnamed section out of the help
};

}  // namespace attnkit::cli
