// File: client/zoomctl_output.h
//
// zoomctl's output: exit codes, errors on stderr, JSON and the human-readable
// forms of a collection's info (with its calibration curve). Split out of
// zoomctl.cc (one concern a file); not a library API.
#ifndef ZOOM_CLIENT_ZOOMCTL_OUTPUT_H_
#define ZOOM_CLIENT_ZOOMCTL_OUTPUT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// Prints "zoomctl: message" and the usage hint on stderr; kExitUsage.
int UsageError(absl::string_view message);
// Prints "error: CODE: message" on stderr; kExitError.
int Fail(const absl::Status& status);
// Prints `message` as one line of JSON (proto3 JSON mapping, field names as
// in the .proto, zero fields included); kExitOk, or Fail's.
int PrintJson(const google::protobuf::Message& message);
// "1.5 MiB" and the like.
std::string HumanBytes(uint64_t bytes);
// "[1, 2.5, ...]".
std::string FormatVector(const google::protobuf::RepeatedField<float>& v);

// An enum value's name, or its number if this client does not know it.
template <typename Enum>
std::string EnumName(Enum value, const std::string& (*name_of)(Enum)) {
  std::string name = name_of(value);
  if (name.empty()) name = absl::StrCat(static_cast<int>(value));
  return name;
}

// The calibration's Pareto front (no cheaper point has as high a recall
// lower bound), cheapest first; '*' marks what the default target picks.
void PrintCalibration(const v1::CollectionInfo& info);
// `zoomctl info`'s human-readable form.
void PrintInfo(const v1::CollectionInfo& info);
// An info answer: Fail, PrintJson (json) or PrintInfo.
int PrintInfoResult(const absl::StatusOr<v1::CollectionInfo>& info, bool json);

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_ZOOMCTL_OUTPUT_H_
