// Damaged and foreign checkpoints: every byte flip and truncation fails cleanly, with the code and
// message the format documents; nothing of a failed restore reaches the state or the pool.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/session/checkpoint_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// Offset of the position field: prefix (16) + fingerprint length (4) + fingerprint + kind (1) +
// six u32 shape fields.
size_t PositionOffset() { return 16 + 4 + sizeof(kFingerprint) - 1 + 1 + 6 * 4; }

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
  bad[8] = 3;
  Recrc(&bad);  // as a newer writer would produce it: the checksum is verified first
  s = RestoreSession(m, bad, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unsupported checkpoint format version 3"));
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
  for (uint32_t version : {0u, 3u, 0x01000001u, 0xFFFFFFFFu}) {
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

// Version 2 (a session with a grammar) has two more header fields: a version 1 blob relabelled 2
// lacks them (DataLoss), and its grammar needs an engine to compile it (RestoreSession alone,
// no resolver: tests/engine/runtime/engine_grammar_test.cc).
TEST(CheckpointTest, Version1BlobRelabelledVersion2IsDataLoss) {
  const CheckpointModel m = LinearModel();
  std::string bad = *SerializeSession(m, RandomLinearState(m), nullptr);
  bad[8] = 2;
  Recrc(&bad);
  SessionState out = Sentinel();
  const absl::Status s = RestoreSession(m, bad, nullptr, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("grammar source"));
  ExpectSentinel(out);
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
}  // namespace flatstate::testing
