#include "server/store/redis/redis_session_store.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"
#include "server/store/ids.h"
#include "server/store/redis/redis_scripts.h"

namespace flatstate::server {
namespace {

namespace scripts = redis_scripts;

absl::Status ValidId(absl::string_view id, absl::string_view field) {
  if (IsValidId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", id, "' is not an id (32 lower-case hex characters)"));
}

absl::Status Unexpected(absl::string_view what) {
  return absl::InternalError(absl::StrCat("session store: unexpected reply to ", what));
}

// The array reply of a script, with at least `n` elements.
absl::StatusOr<std::vector<RedisReply>> ArrayReply(absl::StatusOr<RedisReply> r, size_t n,
                                                   absl::string_view what) {
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kArray || r->elements.size() < n) return Unexpected(what);
  return std::move(r->elements);
}

absl::StatusOr<uint64_t> ParseVersion(const RedisReply& r, absl::string_view key) {
  uint64_t v = 0;
  if (r.type == RedisReply::Type::kInteger && r.integer >= 0) return r.integer;
  if (r.type == RedisReply::Type::kString && absl::SimpleAtoi(r.str, &v)) return v;
  return absl::DataLossError(absl::StrCat("session store key ", key, ": not a version"));
}

std::string Ms(absl::Duration d) { return absl::StrCat(absl::ToInt64Milliseconds(d)); }

}  // namespace

RedisSessionStore::RedisSessionStore(RedisSessionStoreOptions options)
    : options_(std::move(options)),
      keys_(options_.key_prefix),
      client_(options_.address, options_.password) {}

std::string RedisSessionStore::TtlMs() const { return Ms(options_.session_ttl); }

absl::StatusOr<SessionLease> RedisSessionStore::AcquireLease(absl::string_view sid) {
  RETURN_IF_ERROR(ValidId(sid, "session_id"));
  SessionLease lease{std::string(sid), NewId()};
  const std::string value = absl::StrCat(options_.replica_id, "|", lease.token);
  const std::string lease_ms = Ms(options_.lease), ttl_ms = TtlMs();
  const std::string prefix = keys_.SessionPrefix(sid);
  ASSIGN_OR_RETURN(
      std::vector<RedisReply> r,
      ArrayReply(
          client_.Eval(scripts::kAcquire, {keys_.Lease(sid), keys_.Version(sid), keys_.Head(sid)},
                       {value, lease_ms, ttl_ms, prefix, absl::StrCat(options_.replica_id, "|")}),
          1, "AcquireLease"));
  if (r[0].integer == 1) return lease;
  std::string holder = r.size() > 1 ? r[1].str : "";
  if (const size_t bar = holder.rfind('|'); bar != std::string::npos) holder.resize(bar);
  return absl::AbortedError(absl::StrCat("session ", sid, " is leased by replica ", holder,
                                         " (retry after the lease ends, at most ",
                                         absl::FormatDuration(options_.lease), ")"));
}

absl::Status RedisSessionStore::RenewLease(const SessionLease& lease) {
  RETURN_IF_ERROR(ValidId(lease.session_id, "session_id"));
  const std::string value = absl::StrCat(options_.replica_id, "|", lease.token);
  ASSIGN_OR_RETURN(RedisReply r, client_.Eval(scripts::kRenew, {keys_.Lease(lease.session_id)},
                                              {value, Ms(options_.lease)}));
  if (r.type == RedisReply::Type::kInteger && r.integer == 1) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("session ", lease.session_id,
                   ": the lease of this replica expired or another replica holds it now"));
}

void RedisSessionStore::ReleaseLease(const SessionLease& lease) {
  if (!IsValidId(lease.session_id)) return;
  const std::string value = absl::StrCat(options_.replica_id, "|", lease.token);
  (void)client_.Eval(scripts::kRelease, {keys_.Lease(lease.session_id)}, {value});
}

absl::StatusOr<uint64_t> RedisSessionStore::Version(absl::string_view sid) {
  RETURN_IF_ERROR(ValidId(sid, "session_id"));
  const std::string key = keys_.Version(sid);
  ASSIGN_OR_RETURN(RedisReply r, client_.Command({"GET", key}));
  if (r.is_nil()) {
    return absl::NotFoundError(
        absl::StrCat("session ", sid, " is not in the session store ", address()));
  }
  return ParseVersion(r, key);
}

absl::StatusOr<RedisSessionStore::HeadRead> RedisSessionStore::ReadHead(
    absl::string_view sid) const {
  const std::string ver_key = keys_.Version(sid), head_key = keys_.Head(sid);
  ASSIGN_OR_RETURN(std::vector<RedisReply> r,
                   ArrayReply(client_.Eval(scripts::kRead, {ver_key, head_key}, {}), 2, "Load"));
  HeadRead out;
  if (r[0].is_nil() && r[1].is_nil()) return out;
  out.exists = true;
  if (r[0].is_nil()) {
    return absl::DataLossError(absl::StrCat("session store key ", ver_key, " is missing"));
  }
  ASSIGN_OR_RETURN(out.version, ParseVersion(r[0], ver_key));
  if (r[1].is_nil()) {
    return absl::DataLossError(absl::StrCat("session store key ", head_key, " is missing"));
  }
  ASSIGN_OR_RETURN(out.head, DecodeHead(r[1].str, head_key));
  return out;
}

absl::StatusOr<StoredSession> RedisSessionStore::Load(absl::string_view sid) {
  RETURN_IF_ERROR(ValidId(sid, "session_id"));
  for (int attempt = 0; attempt < options_.load_attempts; ++attempt) {
    ASSIGN_OR_RETURN(HeadRead h, ReadHead(sid));
    if (!h.exists) {
      return absl::NotFoundError(
          absl::StrCat("session ", sid, " is not in the session store ", address()));
    }
    StoredSession out;
    out.version = h.version;
    out.head = std::move(h.head.head);
    out.chunk_tokens = h.head.chunk_tokens;
    const int64_t n = static_cast<int64_t>(h.head.nonces.size());
    std::vector<std::string> names;
    std::vector<RedisArgs> gets;
    names.reserve(n);
    for (int64_t c = 0; c < n; ++c) names.push_back(keys_.Chunk(sid, c, h.head.nonces[c]));
    for (const std::string& k : names) gets.push_back({"GET", k});
    ASSIGN_OR_RETURN(std::vector<absl::StatusOr<RedisReply>> replies, client_.Pipeline(gets));
    std::string missing;
    for (int64_t c = 0; c < n && missing.empty(); ++c) {
      if (!replies[c].ok()) return replies[c].status();
      if (replies[c]->is_nil()) {
        missing = names[c];
        break;
      }
      ASSIGN_OR_RETURN(std::string bytes, DecodeChunk(replies[c]->str, c, names[c]));
      out.chunks.push_back(std::move(bytes));
    }
    if (missing.empty()) return out;
    // A chunk vanished: a newer Save superseded it (retry), or it is lost (same version).
    ASSIGN_OR_RETURN(uint64_t now, Version(sid));
    if (now == h.version) {
      return absl::DataLossError(
          absl::StrCat("session store key ", missing, " is missing (expired or evicted by Redis)"));
    }
  }
  return absl::AbortedError(absl::StrCat("session ", sid, " changed ", options_.load_attempts,
                                         " times while it was being loaded; retry"));
}

absl::StatusOr<std::vector<std::string>> RedisSessionStore::WriteChunks(
    absl::string_view sid, const SessionImage& image, const std::vector<std::string>& nonces) {
  std::vector<std::string> names, values;
  const std::string ttl = TtlMs();
  for (int64_t c = image.first_new_chunk; c < image.total_chunks; ++c) {
    names.push_back(keys_.Chunk(sid, c, nonces[c]));
    values.push_back(EncodeChunk(c, image.new_chunks[c - image.first_new_chunk]));
  }
  std::vector<RedisArgs> sets;
  for (size_t i = 0; i < names.size(); ++i) {
    sets.push_back({"SET", names[i], values[i], "PX", ttl});
  }
  if (sets.empty()) return names;
  absl::StatusOr<std::vector<absl::StatusOr<RedisReply>>> r = client_.Pipeline(sets);
  absl::Status failed = r.status();
  for (size_t i = 0; failed.ok() && i < r->size(); ++i) failed = (*r)[i].status();
  if (!failed.ok()) {
    DeleteKeys(names);
    return failed;
  }
  return names;
}

void RedisSessionStore::DeleteKeys(const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  RedisArgs del = {"DEL"};
  for (const std::string& k : keys) del.push_back(k);
  (void)client_.Command(del);
}

absl::StatusOr<uint64_t> RedisSessionStore::Save(absl::string_view sid, uint64_t expected,
                                                 const SessionImage& image) {
  RETURN_IF_ERROR(ValidId(sid, "session_id"));
  if (image.chunk_tokens < 0 || image.total_chunks < 0 || image.first_new_chunk < 0 ||
      image.first_new_chunk > image.total_chunks ||
      static_cast<int64_t>(image.new_chunks.size()) != image.total_chunks - image.first_new_chunk ||
      (expected == 0 && image.first_new_chunk != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("session ", sid, ": inconsistent session image (total_chunks ",
                     image.total_chunks, ", first_new_chunk ", image.first_new_chunk, ", ",
                     image.new_chunks.size(), " new chunks, expected version ", expected, ")"));
  }
  const auto refused = [&](uint64_t stored) {
    return absl::AbortedError(absl::StrCat("session ", sid, ": stored version is ", stored,
                                           ", this write expected ", expected));
  };
  std::vector<std::string> nonces;
  if (image.first_new_chunk > 0) {  // learn the nonces of the chunks this write keeps
    ASSIGN_OR_RETURN(HeadRead h, ReadHead(sid));
    if (h.version != expected) return refused(h.version);
    if (static_cast<int64_t>(h.head.nonces.size()) < image.first_new_chunk) {
      return absl::InvalidArgumentError(
          absl::StrCat("session ", sid, ": the write keeps ", image.first_new_chunk,
                       " chunks but the stored version has ", h.head.nonces.size()));
    }
    nonces.assign(h.head.nonces.begin(), h.head.nonces.begin() + image.first_new_chunk);
  }
  while (static_cast<int64_t>(nonces.size()) < image.total_chunks) nonces.push_back(NewNonce());
  ASSIGN_OR_RETURN(std::vector<std::string> sent, WriteChunks(sid, image, nonces));

  std::vector<std::string> keys = {keys_.Version(sid), keys_.Head(sid)};
  for (int64_t c = 0; c < image.total_chunks; ++c) keys.push_back(keys_.Chunk(sid, c, nonces[c]));
  const std::string head = EncodeHead(image.chunk_tokens, nonces, image.head);
  const std::string expected_text = absl::StrCat(expected), ttl = TtlMs();
  const std::string prefix = keys_.SessionPrefix(sid);
  // A transport error here leaves `sent` to expire: the commit may have happened.
  ASSIGN_OR_RETURN(
      std::vector<RedisReply> r,
      ArrayReply(client_.Eval(scripts::kCommit, keys, {expected_text, head, ttl, prefix}), 2,
                 "Save"));
  if (r[0].integer == 1) return ParseVersion(r[1], keys[0]);
  DeleteKeys(sent);
  if (r[0].integer == 2) {
    return absl::DataLossError(
        absl::StrCat("session store key ", r[1].str, " is missing (expired or evicted by Redis)"));
  }
  uint64_t stored = 0;
  (void)absl::SimpleAtoi(r[1].str, &stored);
  return refused(stored);
}

absl::Status RedisSessionStore::Delete(absl::string_view sid) {
  RETURN_IF_ERROR(ValidId(sid, "session_id"));
  ASSIGN_OR_RETURN(
      RedisReply r,
      client_.Eval(scripts::kDelete, {keys_.Version(sid), keys_.Head(sid), keys_.Lease(sid)},
                   {keys_.SessionPrefix(sid)}));
  if (r.type == RedisReply::Type::kInteger && r.integer > 0) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("session ", sid, " is not in the session store ", address()));
}

absl::Status RedisSessionStore::PutEvicted(absl::string_view, absl::string_view) {
  return absl::UnimplementedError("PutEvicted: the Redis session store is written through");
}
absl::StatusOr<std::string> RedisSessionStore::GetEvicted(absl::string_view) const {
  return absl::UnimplementedError("GetEvicted: the Redis session store is written through");
}
void RedisSessionStore::RemoveEvicted(absl::string_view) {}

absl::Status RedisSessionStore::PutCheckpoint(absl::string_view cid, absl::string_view blob) {
  RETURN_IF_ERROR(ValidId(cid, "checkpoint_id"));
  const CheckpointManifest m = DescribeCheckpoint(blob, options_.checkpoint_part_bytes);
  std::vector<std::string> names;
  for (size_t i = 0; i < m.parts.size(); ++i) names.push_back(keys_.CheckpointPart(cid, i));
  std::vector<RedisArgs> sets;
  for (size_t i = 0; i < m.parts.size(); ++i) {
    sets.push_back(
        {"SET", names[i], blob.substr(i * options_.checkpoint_part_bytes, m.parts[i].size)});
  }
  // The manifest last: a reader never finds a manifest whose parts are not written yet.
  const std::string manifest_key = keys_.Checkpoint(cid), manifest = EncodeManifest(m);
  sets.push_back({"SET", manifest_key, manifest});
  ASSIGN_OR_RETURN(std::vector<absl::StatusOr<RedisReply>> r, client_.Pipeline(sets));
  for (const absl::StatusOr<RedisReply>& x : r) RETURN_IF_ERROR(x.status());
  return absl::OkStatus();
}

absl::StatusOr<std::string> RedisSessionStore::GetCheckpoint(absl::string_view cid) const {
  RETURN_IF_ERROR(ValidId(cid, "checkpoint_id"));
  const std::string manifest_key = keys_.Checkpoint(cid);
  ASSIGN_OR_RETURN(RedisReply mr, client_.Command({"GET", manifest_key}));
  if (mr.is_nil()) {
    return absl::NotFoundError(absl::StrCat("checkpoint_id: checkpoint ", cid, " not found"));
  }
  ASSIGN_OR_RETURN(CheckpointManifest m, DecodeManifest(mr.str, manifest_key));
  std::vector<std::string> names;
  std::vector<RedisArgs> gets;
  for (size_t i = 0; i < m.parts.size(); ++i) names.push_back(keys_.CheckpointPart(cid, i));
  for (const std::string& k : names) gets.push_back({"GET", k});
  ASSIGN_OR_RETURN(std::vector<absl::StatusOr<RedisReply>> r, client_.Pipeline(gets));
  std::string blob;
  for (size_t i = 0; i < r.size(); ++i) {
    if (!r[i].ok()) return r[i].status();
    if (r[i]->is_nil()) {
      return absl::DataLossError(absl::StrCat("session store key ", names[i], " is missing"));
    }
    RETURN_IF_ERROR(CheckPart(r[i]->str, m.parts[i], names[i]));
    blob += r[i]->str;
  }
  return blob;
}

}  // namespace flatstate::server
