// File: client/cli_flags.h
//
// A strict pre-check of absl flags for the command-line tools (zoomctl,
// zoomload): absl::ParseCommandLine exits 1 on a bad flag, but the tools
// promise exit status 2 for usage errors. ScanFlags walks argv the way absl
// does (a value after '=' or, for a non-bool flag, in the next argument;
// "--" ends the flags), parses every flag into its absl flag, and reports
// the first problem instead of exiting.
#ifndef ZOOM_CLIENT_CLI_FLAGS_H_
#define ZOOM_CLIENT_CLI_FLAGS_H_

#include <set>
#include <string>
#include <vector>

namespace zoom::client {

struct FlagScan {
  bool help = false;                    // --help, -h or -help
  bool defer_to_absl = false;           // --helpfull & co: let absl handle everything
  std::string error;                    // the first usage error, if any
  std::set<std::string> given;          // names of the flags on the command line
  std::vector<std::string> positional;  // the non-flag arguments, in order
};

FlagScan ScanFlags(int argc, char** argv);

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_CLI_FLAGS_H_
