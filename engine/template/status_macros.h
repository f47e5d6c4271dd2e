// Status propagation helpers private to the template library (it depends only on abseil).
//
// TPL_RETURN_IF_ERROR(expr) returns a non-OK absl::Status; TPL_ASSIGN_OR_RETURN(lhs, expr)
// unwraps an absl::StatusOr or returns its status. Header-only; nothing to own or lock.
#ifndef FLATSTATE_ENGINE_TEMPLATE_STATUS_MACROS_H_
#define FLATSTATE_ENGINE_TEMPLATE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TPL_CONCAT_INNER_(a, b) a##b
#define TPL_CONCAT_(a, b) TPL_CONCAT_INNER_(a, b)

#define TPL_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status tpl_status_ = (expr);       \
    if (!tpl_status_.ok()) return tpl_status_; \
  } while (0)

#define TPL_ASSIGN_OR_RETURN(lhs, expr) \
  TPL_ASSIGN_OR_RETURN_IMPL_(TPL_CONCAT_(tpl_statusor_, __LINE__), lhs, expr)

#define TPL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // FLATSTATE_ENGINE_TEMPLATE_STATUS_MACROS_H_
