// A command's flags through CLI11, and the help in the tool's layout.
#include "command_line.hpp"

#include <algorithm>
#include <memory>
#include <ostream>
#include <utility>
#include <vector>

namespace attnkit::cli {

namespace {

constexpr std::size_t kIndent = 2;  // before each flag in the help
constexpr std::size_t kGap = 2;     // at least this much between the widest flag and its description

// The help as the tool always wrote it: the usage lines and the description, the flags section by
// section (one blank line apart, descriptions aligned on the widest flag), then the examples.
// CLI11's own layout puts a generic "Usage: [OPTIONS]" after the description and marks flags with
// REQUIRED, Needs and Excludes, which the descriptions here say in words.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
    return app->get_description() + make_groups(app, mode) + "\n" + make_footer(app);
  }
  std::string make_group(std::string group, bool is_positional, std::vector<const CLI::Option*> options) const override {
    std::string text = group + ":\n";
    for (const CLI::Option* option : options) text += make_option(option, is_positional);
    return text;
  }
  std::string make_option_name(const CLI::Option* option, bool) const override {
    std::string names = option->get_name(false, true);  // "-h,--help"
    for (auto comma = names.find(','); comma != std::string::npos; comma = names.find(',', comma + 2)) {
      names.insert(comma + 1, " ");
    }
    return names;
  }
  std::string make_option_opts(const CLI::Option* option) const override {
    return option->get_expected_max() == 0 ? std::string() : " " + option->get_type_name();
  }

  // The description column: just right of the widest flag and its placeholder.
  void fit(const CLI::App& app) {
    std::size_t widest = 0;
    for (const CLI::Option* option : app.get_options()) {
      widest = std::max(widest, make_option_name(option, false).size() + make_option_opts(option).size());
    }
    column_width(kIndent + widest + kGap);
  }
};

// "--q" from "--q" or "--q=".
std::string flag_name(const std::string& word) { return word.substr(0, word.find('=')); }

}  // namespace

CommandLine::CommandLine(std::string_view about, std::string_view footer) : app_(std::string(about)) {
  app_.footer(std::string(footer));
  app_.formatter(std::make_shared<HelpFormatter>());
  app_.set_help_flag();  // parse() adds ours, last, so that the help lists it last
  // Unknown flags and stray words, and repeated flags, are reported by check_structure in the
  // tool's words; CLI11 would raise its own errors for them.
  app_.allow_extras();
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void CommandLine::section(std::string title) { section_ = std::move(title); }

void CommandLine::add(CLI::Option* option, const std::string& placeholder) {
  option->type_name(placeholder)->group(section_);
}

void CommandLine::text(const std::string& flag, std::optional<std::string>& target, const std::string& placeholder,
                       const std::string& help) {
  add(app_.add_option(flag, target, help), placeholder);
}

void CommandLine::text(const std::string& flag, std::string& target, const std::string& placeholder,
                       const std::string& help) {
  add(app_.add_option(flag, target, help), placeholder);
}

void CommandLine::flag(const std::string& flag, bool& target, const std::string& help) {
  // Set from the count once the words are checked: bound to the bool, CLI11 would convert a value
  // given to the flag (--json=maybe) and report that in its own words.
  flags_.emplace_back(app_.add_flag(flag, help)->group(section_), &target);
}

bool CommandLine::given(const std::string& flag) const { return app_.count(flag) > 0; }

std::vector<std::string> CommandLine::for_cli11(const CommandArgs& words) const {
  std::vector<std::string> reversed;  // CLI11 takes the last word first
  for (auto word = words.rbegin(); word != words.rend(); ++word) {
    // CLI11 reads "--name=" as "--name" and would take the next word as the value: "--out=$EMPTY
    // --verbose" would write a file named --verbose. The value given is empty, so pass it so.
    const bool inline_flag = word->starts_with("--") && word->ends_with('=');
    const CLI::Option* option = inline_flag ? app_.get_option_no_throw(flag_name(*word)) : nullptr;
    if (option != nullptr && option->get_expected_max() > 0) {
      reversed.emplace_back();
      reversed.push_back(flag_name(*word));
    } else {
      reversed.push_back(*word);
    }
  }
  return reversed;
}

bool CommandLine::parse(const CommandArgs& words, std::ostream& out) {
  // Help is answered as soon as it is seen, before any value is checked.
  app_.add_flag_callback("-h,--help", [] { throw CLI::CallForHelp(); }, "show this help")
      ->group(section_)
      ->trigger_on_parse();
  try {
    app_.parse(for_cli11(words));
  } catch (const CLI::CallForHelp&) {
    std::static_pointer_cast<HelpFormatter>(app_.get_formatter())->fit(app_);
    out << app_.help();
    return false;
  } catch (const CLI::ArgumentMismatch&) {
    // A flag's value is always the next word, so the only mismatch left (repeats are taken, and
    // checked below) is a value-taking flag that is the last word.
    throw UsageError("flag " + flag_name(words.back()) + " needs a value");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  check_structure();
  for (const auto& [option, target] : flags_) *target = option->count() > 0;
  return true;
}

void CommandLine::check_structure() const {
  for (const CLI::Option* option : app_.get_options()) {
    if (option->count() > 1) throw UsageError("flag " + option->get_name() + " is given more than once");
    // A flag given alone records "true"; --flag=value records the value.
    if (option->get_expected_max() == 0 && option->count() == 1 && option->results().front() != "true") {
      throw UsageError("flag " + option->get_name() + " takes no value");
    }
  }
  std::vector<std::string> left = app_.remaining();
  const bool after_end_of_flags = !left.empty() && left.front() == "--";  // later words are positional
  if (after_end_of_flags) left.erase(left.begin());
  if (left.empty()) return;
  const std::string& word = left.front();
  if (!after_end_of_flags && word.starts_with("--")) throw UsageError("unknown flag " + flag_name(word));
  if (!after_end_of_flags && word.starts_with('-') && word.size() > 1) {
    throw UsageError("unknown option '" + word + "' (flags are spelled --name)");
  }
  throw UsageError("unexpected argument '" + word + "'");
}

}  // namespace attnkit::cli
