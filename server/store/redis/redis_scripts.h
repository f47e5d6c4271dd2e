// The Lua scripts of RedisSessionStore (redis_session_store.h describes what each step does).
// Private to redis_session_store.cc. Each script is one string with static storage (RedisClient
// caches its SHA1 keyed by the string's address). chunk_keys() reads the head's framing
// (redis_session_format.h: "FSRH" at 0, total_chunks at [16, 24), 16-hex nonces from 24) and names
// the session's chunk keys; a head that does not frame that way names none.
#ifndef FLATSTATE_SERVER_STORE_REDIS_REDIS_SCRIPTS_H_
#define FLATSTATE_SERVER_STORE_REDIS_REDIS_SCRIPTS_H_

namespace flatstate::server::redis_scripts {

#define FLATSTATE_LUA_CHUNK_KEYS                                                                 \
  "local function chunk_keys(head, sp)\n"                                                        \
  "  local out = {}\n"                                                                           \
  "  local len = redis.call('STRLEN', head)\n"                                                   \
  "  if len < 24 or redis.call('GETRANGE', head, 0, 3) ~= 'FSRH' then return out end\n"          \
  "  local b = redis.call('GETRANGE', head, 16, 23)\n"                                           \
  "  local n = 0\n"                                                                              \
  "  for i = 8, 1, -1 do n = n * 256 + string.byte(b, i) end\n"                                  \
  "  if n == 0 or n > (len - 24) / 16 then return out end\n"                                     \
  "  local nonces = redis.call('GETRANGE', head, 24, 24 + 16 * n - 1)\n"                         \
  "  for c = 0, n - 1 do\n"                                                                      \
  "    out[#out + 1] = sp .. 'kv:' .. c .. ':' .. string.sub(nonces, 16 * c + 1, 16 * c + 16)\n" \
  "  end\n"                                                                                      \
  "  return out\n"                                                                               \
  "end\n"

// KEYS: ver, head. Returns {ver or nil, head or nil}.
inline constexpr char kRead[] = "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}\n";

// KEYS: ver, head, then the chunk keys of the new head in order. ARGV: expected version, head
// value, ttl ms, session key prefix. Returns {0, stored version} (refused), {2, missing chunk
// key}, or {1, new version}.
inline constexpr char kCommit[] = FLATSTATE_LUA_CHUNK_KEYS
    "local cur = redis.call('GET', KEYS[1]) or '0'\n"
    "if cur ~= ARGV[1] then return {0, cur} end\n"
    "local keep = {}\n"
    "for i = 3, #KEYS do\n"
    "  if redis.call('EXISTS', KEYS[i]) == 0 then return {2, KEYS[i]} end\n"
    "  keep[KEYS[i]] = true\n"
    "end\n"
    "for _, k in ipairs(chunk_keys(KEYS[2], ARGV[4])) do\n"
    "  if not keep[k] then redis.call('DEL', k) end\n"
    "end\n"
    "redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "local v = redis.call('INCR', KEYS[1])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "for i = 3, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end\n"
    "return {1, v}\n";

// KEYS: lease, ver, head. ARGV: lease value, lease ms, ttl ms, session key prefix, this
// replica's lease prefix ("<replica id>|"). Takes the lease when it is free or left by this same
// replica id (stale: see SessionStore::AcquireLease). Returns {1} (taken; the session's TTL
// refreshed) or {0, holder's value, its PTTL}.
inline constexpr char kAcquire[] = FLATSTATE_LUA_CHUNK_KEYS
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur and string.sub(cur, 1, string.len(ARGV[5])) ~= ARGV[5] then\n"
    "  return {0, cur, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "if redis.call('PEXPIRE', KEYS[3], ARGV[3]) == 1 then\n"
    "  redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
    "  for _, k in ipairs(chunk_keys(KEYS[3], ARGV[4])) do redis.call('PEXPIRE', k, ARGV[3]) "
    "end\n"
    "end\n"
    "return {1}\n";

// KEYS: lease. ARGV: lease value, lease ms. Returns 1 if renewed, 0 if not ours.
inline constexpr char kRenew[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

// KEYS: lease. ARGV: lease value. Returns 1 if released, 0 if not ours.
inline constexpr char kRelease[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

// KEYS: ver, head, lease. ARGV: session key prefix. Returns how many state keys (ver, head,
// chunks; not the lease) it deleted.
inline constexpr char kDelete[] = FLATSTATE_LUA_CHUNK_KEYS
    "local n = 0\n"
    "for _, k in ipairs(chunk_keys(KEYS[2], ARGV[1])) do n = n + redis.call('DEL', k) end\n"
    "n = n + redis.call('DEL', KEYS[1], KEYS[2])\n"
    "redis.call('DEL', KEYS[3])\n"
    "return n\n";

#undef FLATSTATE_LUA_CHUNK_KEYS

}  // namespace flatstate::server::redis_scripts

#endif  // FLATSTATE_SERVER_STORE_REDIS_REDIS_SCRIPTS_H_
