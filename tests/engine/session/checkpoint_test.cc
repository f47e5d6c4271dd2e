#include "engine/session/checkpoint.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/util/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr char kFingerprint[] = "0123456789abcdef0123456789abcdef";

CheckpointModel LinearModel(AttentionKind kind = AttentionKind::kFavor) {
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

CheckpointModel SoftmaxModel() {
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

SamplingParams Sampling() {
  return {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1234567};
}

// A linear state with random contents; layer 0 keeps M = -inf (favor), layer 1 gets finite M.
SessionState RandomLinearState(const CheckpointModel& m) {
  SessionState st = NewSessionState(m.config, Sampling());
  const LinearStateLayout l = LinearLayout(m.config);
  Rng fill(99);
  for (size_t i = 0; i < st.linear.size(); ++i) {
    const size_t off = i % l.per_layer;
    const bool layer0_m = i < l.per_layer && off >= l.m && off < l.conv;
    if (!layer0_m) st.linear[i] = 4.f * fill.Uniform() - 2.f;
  }
  st.position = 37;
  st.pending = {65, 10, 255};
  for (int i = 0; i < 5; ++i) st.rng.Next();
  return st;
}

void ExpectSameState(const SessionState& a, const SessionState& b) {
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.pending, b.pending);
  EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);
  EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
  EXPECT_EQ(a.sampling.top_p, b.sampling.top_p);
  EXPECT_EQ(a.sampling.seed, b.sampling.seed);
  EXPECT_EQ(a.rng, b.rng);
  ASSERT_EQ(a.linear.size(), b.linear.size());
  EXPECT_EQ(std::memcmp(a.linear.data(), b.linear.data(), a.linear.size() * sizeof(float)), 0);
}

void Recrc(std::string* blob) {
  const size_t body = blob->size() - 4;
  const uint32_t crc = Crc32c(blob->data(), body);
  for (int i = 0; i < 4; ++i) (*blob)[body + i] = static_cast<char>(crc >> (8 * i));
}

// Offset of the position field: prefix (16) + fingerprint length (4) + fingerprint + kind (1) +
// six u32 shape fields.
size_t PositionOffset() { return 16 + 4 + sizeof(kFingerprint) - 1 + 1 + 6 * 4; }

SessionState Sentinel() {
  SessionState s;
  s.position = 424242;
  s.pending = {1, 2, 3};
  return s;
}

void ExpectSentinel(const SessionState& s) {
  EXPECT_EQ(s.position, 424242);
  EXPECT_EQ(s.pending, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(s.linear.empty());
  EXPECT_TRUE(s.kv_blocks.empty());
}

TEST(CheckpointTest, LinearRoundTrip) {
  for (AttentionKind kind : {AttentionKind::kFavor, AttentionKind::kLinearElu,
                             AttentionKind::kCosformer, AttentionKind::kCosine}) {
    const CheckpointModel m = LinearModel(kind);
    const SessionState st = RandomLinearState(m);
    absl::StatusOr<std::string> blob = SerializeSession(m, st, nullptr);
    ASSERT_TRUE(blob.ok()) << blob.status();
    SessionState out = Sentinel();
    ASSERT_TRUE(RestoreSession(m, *blob, nullptr, &out).ok());
    ExpectSameState(st, out);
    EXPECT_TRUE(out.kv_blocks.empty());
    // The restored rng continues exactly where the original would.
    Rng a = st.rng, b = out.rng;
    EXPECT_EQ(a.Next(), b.Next());
    // Serialising the restored state gives the same bytes.
    EXPECT_EQ(*SerializeSession(m, out, nullptr), *blob);
  }
}

TEST(CheckpointTest, TextTailRoundTripsAndIsBounded) {
  const CheckpointModel m = LinearModel();
  SessionState st = RandomLinearState(m);
  st.text_tail = "\xE2\x9C";  // first two bytes of U+2713
  absl::StatusOr<std::string> blob = SerializeSession(m, st, nullptr);
  ASSERT_TRUE(blob.ok()) << blob.status();
  SessionState out = Sentinel();
  ASSERT_TRUE(RestoreSession(m, *blob, nullptr, &out).ok());
  EXPECT_EQ(out.text_tail, st.text_tail);
  st.text_tail = "abcd";
  EXPECT_EQ(SerializeSession(m, st, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, FavorKeepsMinusInfinityStabiliser) {
  const CheckpointModel m = LinearModel(AttentionKind::kFavor);
  const SessionState st = RandomLinearState(m);
  SessionState out;
  ASSERT_TRUE(RestoreSession(m, *SerializeSession(m, st, nullptr), nullptr, &out).ok());
  const LinearStateLayout l = LinearLayout(m.config);
  for (size_t i = l.m; i < l.conv; ++i) {
    EXPECT_TRUE(std::isinf(out.linear[i]) && out.linear[i] < 0) << i;
  }
  for (float x : out.linear) EXPECT_FALSE(std::isnan(x));
}

TEST(CheckpointTest, HeaderOnly) {
  const CheckpointModel m = LinearModel();
  const std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  absl::StatusOr<CheckpointHeader> h = ReadCheckpointHeader(blob);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, kCheckpointVersion);
  EXPECT_EQ(h->fingerprint, kFingerprint);
  EXPECT_EQ(h->attention_kind, AttentionKind::kFavor);
  EXPECT_EQ(h->context_tokens, 37 + 3);
  EXPECT_EQ(ReadCheckpointHeader(blob.substr(0, 30)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpointHeader("garbage that is not a checkpoint").status().code(),
            absl::StatusCode::kDataLoss);
}

// Fills `tokens` rows of a softmax session in `pool` with distinct values.
void FillRows(KvBlockPool* pool, const std::vector<int32_t>& table, int64_t tokens) {
  const int bs = pool->block_size();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int l = 0; l < pool->num_layers(); ++l) {
      float* k = pool->K(table[t / bs], l, t % bs);
      float* v = pool->V(table[t / bs], l, t % bs);
      for (int h = 0; h < pool->hidden(); ++h) {
        k[h] = static_cast<float>(t * 1000 + l * 100 + h) + 0.25f;
        v[h] = -static_cast<float>(t * 1000 + l * 100 + h) - 0.5f;
      }
    }
  }
}

void ExpectRows(const KvBlockPool& a, const std::vector<int32_t>& ta, const KvBlockPool& b,
                const std::vector<int32_t>& tb, int64_t tokens) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int l = 0; l < a.num_layers(); ++l) {
      const int sa = t % a.block_size(), sb = t % b.block_size();
      const int32_t ba = ta[t / a.block_size()], bb = tb[t / b.block_size()];
      ASSERT_EQ(std::memcmp(a.K(ba, l, sa), b.K(bb, l, sb), a.hidden() * sizeof(float)), 0)
          << "t=" << t << " l=" << l;
      ASSERT_EQ(std::memcmp(a.V(ba, l, sa), b.V(bb, l, sb), a.hidden() * sizeof(float)), 0)
          << "t=" << t << " l=" << l;
    }
  }
}

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

TEST(CheckpointTest, SoftmaxRoundTripIntoAnotherPool) {
  SoftmaxFixture f;
  // Different block size and a non-empty pool.
  KvBlockPool dst(10, 3, 2, 8);
  std::vector<int32_t> taken;
  ASSERT_TRUE(dst.Reserve(&taken, 4).ok());
  const int free_before = dst.blocks_free();
  SessionState out = Sentinel();
  absl::Status s = RestoreSession(f.model, f.blob, &dst, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out.position, 13);
  EXPECT_EQ(out.pending, (std::vector<int32_t>{7}));
  EXPECT_EQ(out.rng, f.state.rng);
  EXPECT_TRUE(out.linear.empty());
  EXPECT_EQ(out.kv_blocks.size(), 5u);  // ceil(13 / 3)
  EXPECT_EQ(dst.blocks_free(), free_before - 5);
  ExpectRows(f.pool, f.state.kv_blocks, dst, out.kv_blocks, 13);
  // And back: serialising from the new pool gives the same payload bytes as before.
  absl::StatusOr<std::string> again = SerializeSession(f.model, out, &dst);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), f.blob.size());
}

TEST(CheckpointTest, SoftmaxEmptyContext) {
  SoftmaxFixture f(/*position=*/0);
  KvBlockPool dst(1, 4, 2, 8);
  SessionState out;
  ASSERT_TRUE(RestoreSession(f.model, f.blob, &dst, &out).ok());
  EXPECT_EQ(out.position, 0);
  EXPECT_TRUE(out.kv_blocks.empty());
  EXPECT_EQ(dst.blocks_free(), 1);
}

TEST(CheckpointTest, SoftmaxPoolTooSmall) {
  SoftmaxFixture f;
  KvBlockPool dst(5, 4, 2, 8);
  std::vector<int32_t> taken;
  ASSERT_TRUE(dst.Reserve(&taken, 8).ok());  // 2 used, 3 free; restore needs 4
  SessionState out = Sentinel();
  absl::Status s = RestoreSession(f.model, f.blob, &dst, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(dst.blocks_free(), 3);
  ExpectSentinel(out);
}

TEST(CheckpointTest, SoftmaxNeedsMatchingPool) {
  SoftmaxFixture f;
  SessionState out;
  EXPECT_EQ(RestoreSession(f.model, f.blob, nullptr, &out).code(),
            absl::StatusCode::kInvalidArgument);
  KvBlockPool wrong(8, 4, 3, 8);
  EXPECT_EQ(RestoreSession(f.model, f.blob, &wrong, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.blocks_free(), 8);
  EXPECT_EQ(SerializeSession(f.model, f.state, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  SessionState short_table = f.state;
  short_table.kv_blocks.resize(2);
  EXPECT_EQ(SerializeSession(f.model, short_table, &f.pool).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, SerializeRejectsWrongLinearSize) {
  const CheckpointModel m = LinearModel();
  SessionState st = RandomLinearState(m);
  st.linear.pop_back();
  EXPECT_EQ(SerializeSession(m, st, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, EverySingleByteFlipIsDetected) {
  std::vector<std::pair<CheckpointModel, std::string>> cases;
  {
    const CheckpointModel m = LinearModel();
    cases.emplace_back(m, *SerializeSession(m, RandomLinearState(m), nullptr));
  }
  SoftmaxFixture f;
  cases.emplace_back(f.model, f.blob);
  for (const auto& [model, blob] : cases) {
    for (size_t pos = 0; pos < blob.size(); ++pos) {
      for (unsigned char mask : {0x01, 0x80, 0xFF}) {
        std::string bad = blob;
        bad[pos] = static_cast<char>(bad[pos] ^ mask);
        KvBlockPool pool(16, 4, 2, 8);
        SessionState out = Sentinel();
        absl::Status s = RestoreSession(model, bad, &pool, &out);
        ASSERT_THAT(s.code(),
                    AnyOf(absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument))
            << "pos " << pos << " mask " << int(mask) << ": " << s;
        ExpectSentinel(out);
        ASSERT_EQ(pool.blocks_free(), 16);
        (void)ReadCheckpointHeader(bad);  // must not crash
      }
    }
  }
}

TEST(CheckpointTest, EveryTruncationFails) {
  SoftmaxFixture f;
  const CheckpointModel lm = LinearModel();
  const std::string linear_blob = *SerializeSession(lm, RandomLinearState(lm), nullptr);
  for (size_t len = 0; len < linear_blob.size(); ++len) {
    SessionState out = Sentinel();
    absl::Status s =
        RestoreSession(lm, std::string_view(linear_blob).substr(0, len), nullptr, &out);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << len << ": " << s;
    ExpectSentinel(out);
    (void)ReadCheckpointHeader(std::string_view(linear_blob).substr(0, len));
  }
  for (size_t len = 0; len < f.blob.size(); ++len) {
    KvBlockPool pool(16, 4, 2, 8);
    SessionState out;
    ASSERT_EQ(RestoreSession(f.model, std::string_view(f.blob).substr(0, len), &pool, &out).code(),
              absl::StatusCode::kDataLoss)
        << len;
    ASSERT_EQ(pool.blocks_free(), 16);
  }
}

TEST(CheckpointTest, TruncatedWithValidChecksumNamesField) {
  const CheckpointModel m = LinearModel();
  std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  blob.resize(blob.size() - 4 - 8);  // drop crc and the last two floats
  blob.append(4, '\0');
  Recrc(&blob);
  SessionState out;
  absl::Status s = RestoreSession(m, blob, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated checkpoint"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("payload"));
}

TEST(CheckpointTest, BadMagicAndVersion) {
  const CheckpointModel m = LinearModel();
  const std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  SessionState out;

  std::string bad = blob;
  bad[0] = 'X';
  absl::Status s = RestoreSession(m, bad, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a flatstate checkpoint (bad magic)"));

  bad = blob;
  bad[8] = 2;
  Recrc(&bad);  // as a newer writer would produce it: the checksum is verified first
  s = RestoreSession(m, bad, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unsupported checkpoint format version 2"));
  EXPECT_EQ(ReadCheckpointHeader(bad).status().code(), absl::StatusCode::kInvalidArgument);

  bad = blob;
  bad[blob.size() / 2] ^= 0x10;
  s = RestoreSession(m, bad, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("checksum mismatch: checkpoint is corrupted"));
}

// The checksum is verified before any header field is trusted, by both readers: a flipped
// version word, header length or fingerprint byte is corruption (DataLoss), not an unknown
// version (InvalidArgument) or another model (FailedPrecondition).
TEST(CheckpointTest, CorruptHeaderFieldIsDataLoss) {
  const CheckpointModel m = LinearModel();
  const std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  struct Case {
    const char* field;
    size_t offset;
  };
  // Offsets: version word 8, header length 12, fingerprint bytes from 20 (after its u32 length).
  for (const Case& c : {Case{"version word", 8}, Case{"version word high byte", 11},
                        Case{"header length", 12}, Case{"fingerprint byte", 20 + 5}}) {
    std::string bad = blob;
    bad[c.offset] = static_cast<char>(bad[c.offset] ^ 0x02);
    SessionState out = Sentinel();
    absl::Status s = RestoreSession(m, bad, nullptr, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.field << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("checksum mismatch: checkpoint is corrupted"))
        << c.field;
    ExpectSentinel(out);
    absl::StatusOr<CheckpointHeader> h = ReadCheckpointHeader(bad);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss) << c.field << ": " << h.status();
  }
}

// A blob whose checksum is right but whose version this build does not know (a newer writer's)
// is InvalidArgument from both readers.
TEST(CheckpointTest, UnknownVersionWithCorrectChecksum) {
  const CheckpointModel m = LinearModel();
  const std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  for (uint32_t version : {0u, 2u, 0x01000001u, 0xFFFFFFFFu}) {
    std::string bad = blob;
    for (int i = 0; i < 4; ++i) bad[8 + i] = static_cast<char>(version >> (8 * i));
    Recrc(&bad);
    SessionState out = Sentinel();
    absl::Status s = RestoreSession(m, bad, nullptr, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << version << ": " << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("unsupported checkpoint format version ", version)));
    ExpectSentinel(out);
    EXPECT_EQ(ReadCheckpointHeader(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << version;
  }
}

TEST(CheckpointTest, OtherFingerprint) {
  CheckpointModel writer = LinearModel();
  writer.fingerprint = "ffffffffffffffffffffffffffffffff";
  const std::string blob = *SerializeSession(writer, RandomLinearState(writer), nullptr);
  const CheckpointModel reader = LinearModel();
  SessionState out = Sentinel();
  absl::Status s = RestoreSession(reader, blob, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("checkpoint is for model fingerprint ffffffffffffffffffffffffffffffff, "
                        "this model is 0123456789abcdef0123456789abcdef"));
  ExpectSentinel(out);
}

TEST(CheckpointTest, AttentionKindAndShapeMismatch) {
  const CheckpointModel writer = LinearModel(AttentionKind::kLinearElu);
  const std::string blob = *SerializeSession(writer, RandomLinearState(writer), nullptr);
  SessionState out;

  CheckpointModel reader = LinearModel(AttentionKind::kCosine);
  absl::Status s = RestoreSession(reader, blob, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("attention_kind"));

  reader = LinearModel(AttentionKind::kLinearElu);
  reader.config.num_hidden_layers = 3;
  s = RestoreSession(reader, blob, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_hidden_layers"));

  reader = LinearModel(AttentionKind::kLinearElu);
  reader.config.conv_kernel_size = 4;
  s = RestoreSession(reader, blob, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("conv_kernel_size"));

  // A softmax blob offered to a linear model.
  SoftmaxFixture f;
  CheckpointModel linear = LinearModel();
  s = RestoreSession(linear, f.blob, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("attention_kind"));
}

TEST(CheckpointTest, PayloadSizeMismatch) {
  SoftmaxFixture f;
  std::string bad = f.blob;
  bad[PositionOffset()] = 12;  // position 13 -> 12: payload no longer matches
  Recrc(&bad);
  KvBlockPool pool(16, 4, 2, 8);
  SessionState out;
  absl::Status s = RestoreSession(f.model, bad, &pool, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("payload"));
  EXPECT_EQ(pool.blocks_free(), 16);
}

TEST(CheckpointTest, TrailingGarbage) {
  const CheckpointModel m = LinearModel();
  const std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  SessionState out = Sentinel();
  EXPECT_EQ(RestoreSession(m, blob + "xyz", nullptr, &out).code(), absl::StatusCode::kDataLoss);
  // With a checksum that covers the garbage, the trailing bytes themselves are reported.
  std::string bad = blob.substr(0, blob.size() - 4) + "garbage!" + std::string(4, '\0');
  Recrc(&bad);
  absl::Status s = RestoreSession(m, bad, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trailing"));
  ExpectSentinel(out);
}

TEST(CheckpointTest, PendingTokenOutOfVocabulary) {
  const CheckpointModel m = LinearModel();
  SessionState st = RandomLinearState(m);
  st.pending = {300};
  const std::string blob = *SerializeSession(m, st, nullptr);
  SessionState out;
  EXPECT_EQ(RestoreSession(m, blob, nullptr, &out).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace flatstate
