#include "engine/tokenizer/hf/bpe_model.h"

#include <atomic>
#include <queue>
#include <thread>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/status_macros.h"

namespace flatstate::hf {
namespace {

absl::Status Err(const std::string& where, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(where, msg));
}

std::string Quote(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& j,
                                                             const std::string& where,
                                                             BpeParts* parts) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  if (auto it = j.find("dropout"); it != j.end() && !it->is_null()) {
    return Err(where, absl::StrCat(".dropout: only null is supported, got ", it->dump()));
  }
  ASSIGN_OR_RETURN(m->byte_fallback_, OptionalBool(j, "byte_fallback", false, where));
  ASSIGN_OR_RETURN(m->ignore_merges_, OptionalBool(j, "ignore_merges", false, where));
  ASSIGN_OR_RETURN(m->fuse_unk_, OptionalBool(j, "fuse_unk", false, where));
  ASSIGN_OR_RETURN(m->prefix_, OptionalString(j, "continuing_subword_prefix", "", where));
  ASSIGN_OR_RETURN(m->suffix_, OptionalString(j, "end_of_word_suffix", "", where));

  if (!parts->vocab_captured) {
    auto vit = j.find("vocab");
    if (vit == j.end() || !vit->is_object()) return Err(where, ".vocab: missing or not an object");
    for (auto it = vit->begin(); it != vit->end(); ++it) parts->AddToken(it.key(), *it);
  }
  if (parts->vocab_bad) {
    return Err(where, absl::StrCat(".vocab[", Quote(parts->bad_key), "]: id ", parts->bad_value,
                                   " is not an integer in [0, 16777216)"));
  }
  int32_t max_id = -1;
  for (const BpeParts::Token& t : parts->vocab) max_id = std::max(max_id, t.id);
  if (max_id >= static_cast<int32_t>(parts->vocab.size()) + (1 << 20)) {
    return Err(where, absl::StrCat(".vocab: ids must be dense; the largest is ", max_id, " for ",
                                   parts->vocab.size(), " tokens"));
  }
  m->id_to_token_.resize(max_id + 1);
  m->has_token_.assign(max_id + 1, 0);
  for (const BpeParts::Token& t : parts->vocab) {
    const std::string_view key = parts->Str(t.off, t.len);
    if (m->has_token_[t.id]) {
      if (m->id_to_token_[t.id] == key) continue;  // a repeated key
      return Err(where, absl::StrCat(".vocab[", Quote(key), "]: id ", t.id, " is used twice"));
    }
    m->id_to_token_[t.id].assign(key.data(), key.size());
    m->has_token_[t.id] = 1;
  }
  m->vocab_.Build(m->id_to_token_, m->has_token_);
  parts->vocab.clear();
  if (auto it = j.find("unk_token"); it != j.end() && it->is_string()) {
    m->unk_id_ = m->TokenToId(it->get<std::string>());
  }
  for (int b = 0; b < 256; ++b) {
    m->byte_ids_[b] = m->byte_fallback_ ? m->TokenToId(absl::StrFormat("<0x%02X>", b)) : -1;
  }

  if (!parts->merges_captured) {
    if (j.contains("merges")) return Err(where, ".merges: not a list");
    return m;
  }
  // Resolving a merge is three vocabulary look-ups; large files share that (read-only) with a
  // second thread in chunks taken in turn, so that a second thread the scheduler starts late (a
  // busy machine) costs at most the chunk it took, then the merges are indexed in rank order.
  // The first bad merge is reported either way: each chunk stops at its first, the lowest
  // chunk's is returned.
  constexpr size_t kChunk = 8192;
  const size_t n = parts->merges.size();
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<std::pair<uint64_t, int32_t>> resolved(n);
  std::vector<absl::Status> errors(chunks);
  std::atomic<size_t> next_chunk{0};
  const auto resolve = [&] {
    for (size_t c; (c = next_chunk.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      absl::Status s =
          m->ResolveMerges(*parts, c * kChunk, std::min(n, (c + 1) * kChunk), resolved.data());
      if (!s.ok()) errors[c] = Err(where, std::string(s.message()));
    }
  };
  if (n >= 65536) {
    std::thread second(resolve);
    resolve();
    second.join();
  } else {
    resolve();
  }
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  m->merges_.Build(resolved);
  return m;
}

absl::Status BpeModel::ResolveMerges(const BpeParts& parts, size_t lo, size_t hi,
                                     std::pair<uint64_t, int32_t>* resolved) const {
  // The look-ups are cache misses (random ids into tables of megabytes), so they are pipelined:
  // each merge's halves are hashed and their index slots prefetched kAhead merges early, their
  // candidate token strings kAhead / 2 merges early.
  constexpr size_t kAhead = 16, kRing = 32;
  uint64_t ring[kRing][2];
  const auto hash = [&](size_t k) {
    const BpeParts::Merge& e = parts.merges[k];
    if (e.a_len == BpeParts::kBadMerge) return;
    uint64_t* h = ring[k % kRing];
    h[0] = TokenIndex::Hash(parts.arena.data() + e.a, e.a_len);
    h[1] = TokenIndex::Hash(parts.arena.data() + e.b, e.b_len);
    vocab_.PrefetchSlot(h[0]);
    vocab_.PrefetchSlot(h[1]);
  };
  const auto peek = [&](size_t k) {
    if (parts.merges[k].a_len == BpeParts::kBadMerge) return;
    vocab_.PrefetchToken(ring[k % kRing][0]);
    vocab_.PrefetchToken(ring[k % kRing][1]);
  };
  for (size_t k = lo; k < std::min(hi, lo + kAhead); ++k) hash(k);
  for (size_t k = lo; k < std::min(hi, lo + kAhead / 2); ++k) peek(k);
  std::string joined;
  int32_t next_id = -1;
  for (size_t i = lo; i < hi; ++i) {
    if (i + kAhead < hi) hash(i + kAhead);
    if (i + kAhead / 2 < hi) peek(i + kAhead / 2);
    absl::Status s = ResolveMerge(parts, i, ring[i % kRing], &joined, &next_id, &resolved[i]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::ResolveMerge(const BpeParts& parts, size_t i, const uint64_t hashes[2],
                                    std::string* joined, int32_t* next_id,
                                    std::pair<uint64_t, int32_t>* out) const {
  const BpeParts::Merge& e = parts.merges[i];
  if (e.a_len == BpeParts::kBadMerge) {
    return absl::InvalidArgumentError(
        absl::StrCat(".merges[", i, "]: expected \"a b\" or [a, b], got ", parts.bad_merges[e.a]));
  }
  const std::string_view a = parts.Str(e.a, e.a_len);
  std::string_view b = parts.Str(e.b, e.b_len);
  const int32_t ia = vocab_.FindHashed(a, hashes[0]), ib = vocab_.FindHashed(b, hashes[1]);
  if (ia < 0 || ib < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(".merges[", i, "]: token ", Quote(ia < 0 ? a : b), " is not in model.vocab"));
  }
  if (!prefix_.empty() && b.substr(0, prefix_.size()) == prefix_) b.remove_prefix(prefix_.size());
  // Trained vocabularies list merged tokens in merge order, so the id after the last merge's is
  // tried first; it stands only when no string has two ids (the index then maps to the largest).
  int32_t ij = -1;
  const int32_t guess = *next_id;
  if (guess >= 0 && guess < id_end() && has_token_[guess] && !vocab_.has_repeated_strings()) {
    const std::string& t = id_to_token_[guess];
    if (t.size() == a.size() + b.size() && t.compare(0, a.size(), a) == 0 &&
        t.compare(a.size(), b.size(), b) == 0) {
      ij = guess;
    }
  }
  if (ij < 0) {
    joined->assign(a);
    joined->append(b);
    ij = TokenToId(*joined);
    if (ij < 0) {
      return absl::InvalidArgumentError(absl::StrCat(".merges[", i, "]: merged token ",
                                                     Quote(*joined), " is not in model.vocab"));
    }
  }
  *next_id = ij + 1;
  *out = {PairIndex::Key(ia, ib), ij};
  return absl::OkStatus();
}

int32_t BpeModel::TokenToId(std::string_view token) const { return vocab_.Find(token); }

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_end() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = TokenToId(piece); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  if (piece.size() > kMaxCachedPiece) {
    MergeWord(piece, ids);
    return;
  }
  const absl::string_view key(piece.data(), piece.size());
  Shard& shard = cache_[absl::HashOf(key) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word;
  MergeWord(piece, &word);
  ids->insert(ids->end(), word.begin(), word.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() < kCachePerShard) shard.map.emplace(std::string(piece), std::move(word));
}

void BpeModel::MergeWord(std::string_view piece, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  int32_t unk_pending = -1;  // a fused unk run not yet pushed
  const auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  };
  std::string buf;
  for (size_t i = 0; i < piece.size();) {
    char32_t cp;
    const size_t n = DecodeUtf8(piece, i, &cp);
    std::string_view ch = piece.substr(i, n);
    const bool first = i == 0, last = i + n == piece.size();
    i += n;
    int32_t id;
    if ((first || prefix_.empty()) && (!last || suffix_.empty())) {
      id = TokenToId(ch);
    } else {
      buf.clear();
      if (!first) buf += prefix_;
      buf += ch;
      if (last) buf += suffix_;
      id = TokenToId(buf);
    }
    if (id >= 0) {
      if (unk_pending >= 0) add(unk_pending), unk_pending = -1;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all &= byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        if (unk_pending >= 0) add(unk_pending), unk_pending = -1;
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!fuse_unk_) {
        if (unk_pending >= 0) add(unk_pending);
        unk_pending = -1;
        add(unk_id_);
      } else {
        unk_pending = unk_id_;
      }
    }
  }
  if (unk_pending >= 0) add(unk_pending);
  if (sym.empty()) return;
  sym.back().next = -1;

  // Lowest rank first, leftmost on ties: a min-heap of (rank, position).
  using Item = std::pair<int64_t, int32_t>;  // (rank << 32 | new_id, pos)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  const auto push_pair = [&](int32_t pos) {
    const int32_t nx = sym[pos].next;
    if (nx < 0) return;
    const PairIndex::Value* m = merges_.Find(PairIndex::Key(sym[pos].id, sym[nx].id));
    if (m == nullptr) return;
    queue.emplace((static_cast<int64_t>(m->rank) << 32) | m->new_id, pos);
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(sym.size()); ++p) push_pair(p);
  while (!queue.empty()) {
    const auto [key, pos] = queue.top();
    queue.pop();
    Symbol& left = sym[pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const PairIndex::Value* m = merges_.Find(PairIndex::Key(left.id, right.id));
    const int32_t new_id = static_cast<int32_t>(key & 0xFFFFFFFF);
    if (m == nullptr || m->new_id != new_id) continue;
    left.id = new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(pos);
  }
  for (int32_t p = 0; p >= 0; p = sym[p].next) ids->push_back(sym[p].id);
}

}  // namespace flatstate::hf
