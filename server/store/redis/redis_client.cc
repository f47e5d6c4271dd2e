#include "server/store/redis/redis_client.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace flatstate::server {
namespace {

// Blocks SIGPIPE in the calling thread for its lifetime; a SIGPIPE raised meanwhile by this
// thread's write(2) stays pending and is consumed before the old mask comes back.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    was_blocked_ = sigismember(&old_, SIGPIPE) == 1;
  }
  ~ScopedSigpipeBlock() {
    if (was_blocked_) return;
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
  bool was_blocked_ = false;
};

// Copies a hiredis reply; an error reply (also inside an array) becomes `*error`.
RedisReply Convert(const redisReply* r, std::string* error) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) {
        out.elements.push_back(Convert(r->element[i], error));
      }
      break;
    case REDIS_REPLY_ERROR:
      if (error->empty()) error->assign(r->str, r->len);
      break;
    default:  // REDIS_REPLY_NIL
      break;
  }
  return out;
}

struct ReplyDeleter {
  void operator()(void* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<void, ReplyDeleter>;

void ToArgv(const RedisArgs& args, std::vector<const char*>* argv, std::vector<size_t>* lens) {
  argv->clear();
  lens->clear();
  for (absl::string_view a : args) {
    argv->push_back(a.data());
    lens->push_back(a.size());
  }
}

}  // namespace

RedisClient::RedisClient(RedisAddress address, std::string password)
    : address_(std::move(address)), password_(std::move(password)) {}

RedisClient::~RedisClient() {
  absl::MutexLock lock(&mu_);
  DropLocked();
}

void RedisClient::DropLocked() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

absl::Status RedisClient::TransportErrorLocked(std::string what) {
  DropLocked();
  return absl::UnavailableError(
      absl::StrCat("session store ", address_.ToString(), " is unreachable: ", what));
}

absl::Status RedisClient::ReplyError(absl::string_view text) const {
  const std::string msg = absl::StrCat("session store ", address_.ToString(), ": ", text);
  if (absl::StartsWith(text, "OOM")) return absl::ResourceExhaustedError(msg);
  for (absl::string_view p : {"NOAUTH", "WRONGPASS", "NOPERM", "ERR invalid password", "ERR AUTH",
                              "ERR Client sent AUTH"}) {
    if (absl::StartsWith(text, p)) return absl::FailedPreconditionError(msg);
  }
  for (absl::string_view p : {"LOADING", "MASTERDOWN", "BUSY", "TRYAGAIN", "READONLY"}) {
    if (absl::StartsWith(text, p)) return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

absl::Status RedisClient::ConnectLocked() {
  const timeval connect_timeout = absl::ToTimeval(kRedisConnectTimeout);
  ctx_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, connect_timeout);
  if (ctx_ == nullptr) return TransportErrorLocked("cannot allocate a connection");
  if (ctx_->err != 0) return TransportErrorLocked(ctx_->errstr);
  if (redisSetTimeout(ctx_, absl::ToTimeval(kRedisCommandTimeout)) != REDIS_OK ||
      redisEnableKeepAlive(ctx_) != REDIS_OK) {
    return TransportErrorLocked(ctx_->errstr);
  }
  if (!password_.empty()) {
    absl::StatusOr<RedisReply> r = CommandLocked({"AUTH", password_});
    if (!r.ok()) {
      DropLocked();
      return r.status();
    }
  }
  if (address_.db != 0) {
    const std::string db = absl::StrCat(address_.db);
    absl::StatusOr<RedisReply> r = CommandLocked({"SELECT", db});
    if (!r.ok()) {
      DropLocked();
      return r.status();
    }
  }
  return absl::OkStatus();
}

absl::Status RedisClient::EnsureConnectedLocked() {
  if (ctx_ != nullptr) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (now - last_failed_connect_ < kReconnectBackoff) return last_connect_error_;
  absl::Status s = ConnectLocked();
  if (!s.ok()) {
    last_failed_connect_ = now;
    last_connect_error_ = s;
  }
  return s;
}

absl::StatusOr<RedisReply> RedisClient::CommandLocked(const RedisArgs& args) {
  if (ctx_ == nullptr) return TransportErrorLocked("not connected");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  ToArgv(args, &argv, &lens);
  ScopedSigpipeBlock no_sigpipe;
  ReplyPtr reply(redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (reply == nullptr) return TransportErrorLocked(ctx_->errstr);
  std::string error;
  RedisReply out = Convert(static_cast<redisReply*>(reply.get()), &error);
  if (!error.empty()) return ReplyError(error);
  return out;
}

absl::Status RedisClient::Ping() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(EnsureConnectedLocked());
  return CommandLocked({"PING"}).status();
}

absl::StatusOr<RedisReply> RedisClient::Command(const RedisArgs& args) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(EnsureConnectedLocked());
  return CommandLocked(args);
}

absl::StatusOr<std::vector<absl::StatusOr<RedisReply>>> RedisClient::Pipeline(
    const std::vector<RedisArgs>& commands) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(EnsureConnectedLocked());
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const RedisArgs& args : commands) {
    ToArgv(args, &argv, &lens);
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK) {
      return TransportErrorLocked(ctx_->errstr);
    }
  }
  ScopedSigpipeBlock no_sigpipe;
  std::vector<absl::StatusOr<RedisReply>> out;
  out.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
      return TransportErrorLocked(ctx_->errstr);
    }
    ReplyPtr reply(raw);
    std::string error;
    RedisReply r = Convert(static_cast<redisReply*>(reply.get()), &error);
    if (error.empty()) {
      out.push_back(std::move(r));
    } else {
      out.push_back(ReplyError(error));
    }
  }
  return out;
}

absl::StatusOr<RedisReply> RedisClient::Eval(absl::string_view script,
                                             const std::vector<std::string>& keys,
                                             const RedisArgs& args) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(EnsureConnectedLocked());
  const std::string nkeys = absl::StrCat(keys.size());
  for (int attempt = 0;; ++attempt) {
    std::string& sha = script_sha_[script.data()];
    if (sha.empty()) {
      ASSIGN_OR_RETURN(RedisReply loaded, CommandLocked({"SCRIPT", "LOAD", script}));
      if (loaded.type != RedisReply::Type::kString) {
        return absl::InternalError(
            absl::StrCat("session store ", address_.ToString(), ": SCRIPT LOAD returned no SHA1"));
      }
      sha = loaded.str;
    }
    RedisArgs argv = {"EVALSHA", sha, nkeys};
    for (const std::string& k : keys) argv.push_back(k);
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<RedisReply> r = CommandLocked(argv);
    if (attempt == 0 && !r.ok() && absl::IsInternal(r.status()) &&
        absl::StrContains(r.status().message(), ": NOSCRIPT")) {
      sha.clear();  // the server lost its script cache (restart, SCRIPT FLUSH): load again
      continue;
    }
    return r;
  }
}

}  // namespace flatstate::server
