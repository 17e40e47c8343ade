// File: common/status_macros.h
//
// Early-return helpers for absl::Status / absl::StatusOr. The installed
// Abseil (20220623) has no RETURN_IF_ERROR of its own.
//
//   ZOOM_RETURN_IF_ERROR(file.Sync());
//   ZOOM_ASSIGN_OR_RETURN(auto store, VectorStore::Open(path, options));
//   ZOOM_ASSIGN_OR_RETURN(header_, ReadHeader(fd));
#ifndef ZOOM_COMMON_STATUS_MACROS_H_
#define ZOOM_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ZOOM_STATUS_CONCAT_INNER_(a, b) a##b
#define ZOOM_STATUS_CONCAT_(a, b) ZOOM_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) once; returns it from the enclosing
// function if it is not OK.
#define ZOOM_RETURN_IF_ERROR(expr)                                      \
  do {                                                                  \
    ::absl::Status zoom_status_macro_status_ = (expr);                  \
    if (!zoom_status_macro_status_.ok()) return zoom_status_macro_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from
// the enclosing function, else moves the value into `lhs` (which may be a
// declaration such as `auto x` or an existing lvalue).
#define ZOOM_ASSIGN_OR_RETURN(lhs, rexpr)                                \
  ZOOM_ASSIGN_OR_RETURN_IMPL_(                                           \
      ZOOM_STATUS_CONCAT_(zoom_statusor_, __LINE__), lhs, rexpr)

#define ZOOM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // ZOOM_COMMON_STATUS_MACROS_H_
