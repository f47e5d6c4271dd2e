// Small Status helpers (abseil 20220623 ships none).
//
// RETURN_IF_ERROR(expr):        returns the status of `expr` when it is not OK.
// ASSIGN_OR_RETURN(lhs, expr):  evaluates a StatusOr, returns its status on error, else moves the
//                               value into `lhs` (which may be a declaration: `auto x`).
#ifndef FLATSTATE_ENGINE_UTIL_STATUS_MACROS_H_
#define FLATSTATE_ENGINE_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FS_CONCAT_INNER_(a, b) a##b
#define FS_CONCAT_(a, b) FS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status fs_status_ = (expr);        \
    if (!fs_status_.ok()) return fs_status_;   \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  FS_ASSIGN_OR_RETURN_IMPL_(FS_CONCAT_(fs_statusor_, __LINE__), lhs, expr)

#define FS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // FLATSTATE_ENGINE_UTIL_STATUS_MACROS_H_
