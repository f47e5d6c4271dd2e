// Look-up tables of a BPE model (bpe_model.h), built for load time.
//
// TokenIndex: token string -> id for a BPE vocabulary. An open-addressing table of 64-bit slots
// (32 bits of the string's hash, id + 1) with linear probing, sized to a load factor <= 0.7; the
// strings themselves are not copied: a slot's id points into the caller's id -> token table,
// which the index reads on look-up (so it must outlive the index and not move; BpeModel owns
// both).
//
// PairIndex: (left id, right id) -> (rank, merged id) for the merges, 16-byte slots with linear
// probing at a load factor <= 0.7.
//
// Both own their slots only, are immutable after Build, so thread-safe. Nothing fails: a missing
// token is -1, a missing pair nullptr.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_TOKEN_INDEX_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_TOKEN_INDEX_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace flatstate::hf {

class TokenIndex {
 public:
  // Indexes tokens[id] for every id with present[id] != 0, in increasing id order; a string
  // present under several ids maps to the largest (as inserting in id order into a map would).
  void Build(const std::vector<std::string>& tokens, const std::vector<uint8_t>& present);

  // The id of `s`, or -1.
  int32_t Find(std::string_view s) const { return FindHashed(s, Hash(s.data(), s.size())); }
  // The same with Hash(s) computed by the caller.
  int32_t FindHashed(std::string_view s, uint64_t h) const;
  // Prefetch hints for a later FindHashed(s, h), for callers that look up many strings in a row:
  // the slot `h` lands on, then (once that is cached) the token string of its first candidate.
  void PrefetchSlot(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }
  void PrefetchToken(uint64_t h) const;
  // True when some string was present under two ids.
  bool has_repeated_strings() const { return repeated_; }

  // A fast 64-bit hash of n bytes (wyhash-style multiply-fold); not for untrusted-input DoS
  // resistance: vocabularies are trusted files.
  static uint64_t Hash(const char* p, size_t n) {
    uint64_t h = kSeed ^ (n * kMul1);
    while (n > 8) {
      h = Mix(h ^ Load8(p), kMul2);
      p += 8;
      n -= 8;
    }
    uint64_t w;
    if (n >= 4) {
      w = (static_cast<uint64_t>(Load4(p)) << 32) | Load4(p + n - 4);
    } else if (n > 0) {
      w = (static_cast<uint64_t>(static_cast<uint8_t>(p[0])) << 16) |
          (static_cast<uint64_t>(static_cast<uint8_t>(p[n / 2])) << 8) |
          static_cast<uint8_t>(p[n - 1]);
    } else {
      w = 0;
    }
    return Mix(h ^ w, kMul1);
  }

 private:
  static constexpr uint64_t kSeed = 0x243F6A8885A308D3ull;
  static constexpr uint64_t kMul1 = 0x9E3779B97F4A7C15ull;
  static constexpr uint64_t kMul2 = 0xBF58476D1CE4E5B9ull;
  static uint64_t Mix(uint64_t x, uint64_t m) {
    const unsigned __int128 r = static_cast<unsigned __int128>(x) * m;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
  }
  static uint64_t Load8(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint32_t Load4(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static uint32_t Tag(uint64_t h) { return static_cast<uint32_t>(h >> 32); }

  const std::string* tokens_ = nullptr;  // the caller's id -> token table
  std::vector<uint64_t> slots_;          // (tag << 32) | (id + 1); 0 is empty
  uint64_t mask_ = 0;
  bool repeated_ = false;
};

class PairIndex {
 public:
  struct Value {
    int32_t rank;
    int32_t new_id;
  };
  // The key of a pair of ids (each in [0, 2^31)).
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // pairs[r] = (key, merged id) of the merge of rank r; a key listed twice keeps its last rank
  // (as inserting in rank order into a map would).
  void Build(const std::vector<std::pair<uint64_t, int32_t>>& pairs);
  const Value* Find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (uint64_t i = Slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e.value;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^31: no pair has this key
  struct Entry {
    uint64_t key;
    Value value;
  };
  uint64_t Slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  std::vector<Entry> slots_;
  uint64_t mask_ = 0;
  int shift_ = 63;
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_TOKEN_INDEX_H_
