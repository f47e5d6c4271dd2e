// Helpers shared by the checkpoint tests (checkpoint_*_test.cc): small linear and softmax models
// with a fixed fingerprint, states with random contents, a sentinel state that a failed restore
// must leave untouched, a checksum fixer for blobs edited by hand, and SoftmaxFixture (a softmax
// session in its own pool, serialised). Test-only; not thread-safe. Failures are gtest failures.
#ifndef FLATSTATE_TESTS_ENGINE_SESSION_CHECKPOINT_TEST_UTIL_H_
#define FLATSTATE_TESTS_ENGINE_SESSION_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/session/checkpoint.h"
#include "engine/util/crc32c.h"
#include "gtest/gtest.h"

namespace flatstate::testing {

// The fingerprint of every model here.
inline constexpr char kFingerprint[] = "0123456789abcdef0123456789abcdef";

// A two-layer linear model of `kind` (favor features, a causal conv) and a two-layer softmax one.
inline CheckpointModel LinearModel(AttentionKind kind = AttentionKind::kFavor) {
  CheckpointModel m;
  m.fingerprint = kFingerprint;
  m.config.attention_kind = kind;
  m.config.hidden_size = 16;
  m.config.num_attention_heads = 2;
  m.config.head_dim = 8;
  m.config.num_hidden_layers = 2;
  m.config.favor_num_features = 6;
  m.config.conv_kernel_size = 3;
  return m;
}

inline CheckpointModel SoftmaxModel() {
  CheckpointModel m;
  m.fingerprint = kFingerprint;
  m.config.attention_kind = AttentionKind::kSoftmax;
  m.config.hidden_size = 8;
  m.config.num_attention_heads = 2;
  m.config.head_dim = 4;
  m.config.num_hidden_layers = 2;
  m.config.conv_kernel_size = 0;
  return m;
}

// Non-default sampling parameters, so that a round trip shows them.
inline SamplingParams Sampling() {
  return {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1234567};
}

// A linear state with random contents; layer 0 keeps M = -inf (favor), layer 1 gets finite M.
inline SessionState RandomLinearState(const CheckpointModel& m) {
  SessionState st = NewSessionState(m.config, Sampling());
  const LayerStateLayout l = MakeStateLayout(m.config).layers[0];
  Rng fill(99);
  for (size_t i = 0; i < st.linear.size(); ++i) {
    const bool layer0_m = l.attention.linear && i >= l.m && i < l.conv;
    if (!layer0_m) st.linear[i] = 4.f * fill.Uniform() - 2.f;
  }
  st.position = 37;
  st.pending = {65, 10, 255};
  for (int i = 0; i < 5; ++i) st.rng.Next();
  return st;
}

// Rewrites the trailing CRC-32C of `blob` to match its body, as a writer would.
inline void Recrc(std::string* blob) {
  const size_t body = blob->size() - 4;
  const uint32_t crc = Crc32c(blob->data(), body);
  for (int i = 0; i < 4; ++i) (*blob)[body + i] = static_cast<char>(crc >> (8 * i));
}

// A state that a failed restore must leave as it is (ExpectSentinel checks it).
inline SessionState Sentinel() {
  SessionState s;
  s.position = 424242;
  s.pending = {1, 2, 3};
  return s;
}

inline void ExpectSentinel(const SessionState& s) {
  EXPECT_EQ(s.position, 424242);
  EXPECT_EQ(s.pending, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(s.linear.empty());
  EXPECT_TRUE(s.kv_blocks.empty());
}

// Fills `tokens` rows of a softmax session in `pool` with distinct values.
inline void FillRows(KvBlockPool* pool, const std::vector<int32_t>& table, int64_t tokens) {
  const int bs = pool->block_size();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int l = 0; l < pool->num_layers(); ++l) {
      std::vector<float> k(pool->hidden()), v(pool->hidden());
      for (int h = 0; h < pool->hidden(); ++h) {
        k[h] = static_cast<float>(t * 1000 + l * 100 + h) + 0.25f;
        v[h] = -static_cast<float>(t * 1000 + l * 100 + h) - 0.5f;
      }
      pool->WriteRow(table[t / bs], l, 0, t % bs, k.data());
      pool->WriteRow(table[t / bs], l, 1, t % bs, v.data());
    }
  }
}

// A softmax session of `position` tokens with distinct KV rows, in a pool that holds another
// session too, and its serialised checkpoint.
struct SoftmaxFixture {
  CheckpointModel model = SoftmaxModel();
  KvBlockPool pool{8, 4, 2, 8};
  std::vector<int32_t> other;  // another session, so block ids are not 0..n
  SessionState state;
  std::string blob;

  explicit SoftmaxFixture(int64_t position = 13) {
    EXPECT_TRUE(pool.Reserve(&other, 5).ok());
    state = NewSessionState(model.config, Sampling());
    state.position = position;
    state.pending = {7};
    state.rng.Next();
    EXPECT_TRUE(pool.Reserve(&state.kv_blocks, position + 1).ok());
    FillRows(&pool, state.kv_blocks, position);
    blob = *SerializeSession(model, state, &pool);
  }
};

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_ENGINE_SESSION_CHECKPOINT_TEST_UTIL_H_
