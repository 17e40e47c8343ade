#include "client/cli_flags.h"

#include <cstdint>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace zoom::client {
namespace {

// What a flag of `flag`'s type takes, for a usage error.
std::string ExpectedValue(const absl::CommandLineFlag& flag, const std::string& parse_error) {
  if (flag.IsOfType<uint32_t>()) return "expected an integer 0..4294967295";
  if (flag.IsOfType<uint64_t>()) return "expected an integer 0..2^64-1";
  if (flag.IsOfType<double>()) return "expected a number";
  if (flag.IsOfType<bool>()) return "expected true or false";
  return parse_error;
}

}  // namespace

FlagScan ScanFlags(int argc, char** argv) {
  static const std::set<std::string> kAbslHelpFlags = {
      "helpfull", "helpshort", "helppackage", "helpon", "helpmatch", "version",
      "only_check_args"};
  FlagScan scan;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (int j = i + 1; j < argc; ++j) scan.positional.push_back(argv[j]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      scan.positional.push_back(std::string(arg));
      continue;
    }
    absl::string_view body = arg.substr(1);
    absl::ConsumePrefix(&body, "-");
    const size_t eq = body.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const std::string name(body.substr(0, eq));
    std::string value(has_value ? body.substr(eq + 1) : "");
    if (name == "help" || name == "h") {
      scan.help = true;
      continue;
    }
    if (kAbslHelpFlags.count(name) > 0 || name == "undefok") {
      scan.defer_to_absl = true;
      return scan;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) {
        negated = true;
      } else {
        flag = nullptr;
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      if (scan.error.empty()) scan.error = absl::StrCat("unknown flag ", arg);
      continue;
    }
    if (flag->IsOfType<bool>()) {
      if (negated) {
        if (has_value) {
          if (scan.error.empty()) scan.error = absl::StrCat("--", name, " takes no value");
          continue;
        }
        value = "false";
      } else if (!has_value) {
        value = "true";
      }
    } else if (!has_value) {
      if (i + 1 >= argc) {
        if (scan.error.empty()) scan.error = absl::StrCat("missing the value of --", name);
        continue;
      }
      value = argv[++i];
    }
    std::string flag_error;
    if (!flag->ParseFrom(value, &flag_error)) {
      if (scan.error.empty()) {
        scan.error = absl::StrCat("bad value '", value, "' for --", std::string(flag->Name()),
                                  ": ", ExpectedValue(*flag, flag_error));
      }
      continue;
    }
    scan.given.insert(std::string(flag->Name()));
  }
  return scan;
}


}  // namespace zoom::client
