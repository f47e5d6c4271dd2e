// The Redis session store's value framing (server/store/redis/redis_session_format.h) without
// redis-server: the decoders read bytes another replica wrote, so every round trip is exact and
// every truncation, flipped byte, wrong magic or misplaced value is DataLoss naming the key.
#include "server/store/redis/redis_session_format.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate::server {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kNonces = {"0123456789abcdef", "fedcba9876543210",
                                          "00000000ffffffff"};

TEST(RedisSessionFormat, RoundTrips) {
  const std::string head_bytes("checkpoint head\0with a zero", 27);
  auto head = DecodeHead(EncodeHead(512, kNonces, head_bytes), "k:head");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->chunk_tokens, 512);
  EXPECT_EQ(head->nonces, kNonces);
  EXPECT_EQ(head->head, head_bytes);

  auto chunk = DecodeChunk(EncodeChunk(7, "kv rows"), 7, "k:chunk");
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(*chunk, "kv rows");

  const std::string blob(1000, 'x');
  const CheckpointManifest m = DescribeCheckpoint(blob, 300);
  ASSERT_EQ(m.parts.size(), 4u);
  EXPECT_EQ(m.total_size, 1000u);
  EXPECT_EQ(m.parts.back().size, 100u);
  auto back = DecodeManifest(EncodeManifest(m), "k:ckpt");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->parts.size(), m.parts.size());
  for (size_t i = 0; i < m.parts.size(); ++i) {
    EXPECT_EQ(back->parts[i].size, m.parts[i].size);
    EXPECT_EQ(back->parts[i].crc, m.parts[i].crc);
    EXPECT_TRUE(CheckPart(blob.substr(i * 300, m.parts[i].size), m.parts[i], "k:part").ok());
  }
}

// Every prefix and every single-bit flip of each encoded value is refused (never a crash), with
// DataLoss naming the key.
TEST(RedisSessionFormat, EveryTruncationAndFlipIsDataLoss) {
  const std::string head = EncodeHead(64, kNonces, "head bytes");
  const std::string chunk = EncodeChunk(2, "chunk bytes");
  const std::string manifest = EncodeManifest(DescribeCheckpoint(std::string(700, 'y'), 256));
  auto check = [](const absl::Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << what << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr("session store key k:x")) << what;
  };
  for (const auto& [name, value] : {std::pair<std::string, std::string>{"head", head},
                                    {"chunk", chunk},
                                    {"manifest", manifest}}) {
    auto decode = [&, n = name](const std::string& v) {
      if (n == "head") return DecodeHead(v, "k:x").status();
      if (n == "chunk") return DecodeChunk(v, 2, "k:x").status();
      return DecodeManifest(v, "k:x").status();
    };
    ASSERT_TRUE(decode(value).ok()) << name;
    for (size_t len = 0; len < value.size(); ++len) {
      check(decode(value.substr(0, len)), name + " truncated to " + std::to_string(len));
    }
    check(decode(value + "z"), name + " with a trailing byte");
    for (size_t i = 0; i < value.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string v = value;
        v[i] = static_cast<char>(v[i] ^ (1 << bit));
        check(decode(v), name + " bit " + std::to_string(bit) + " of byte " + std::to_string(i));
      }
    }
  }
}

TEST(RedisSessionFormat, MisplacedValuesAreRefused) {
  // A chunk stored under another index's key, a head read as a chunk, a part that is not its
  // manifest entry.
  EXPECT_EQ(DecodeChunk(EncodeChunk(3, "x"), 4, "k:c4").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeChunk(EncodeHead(1, {}, "h"), 0, "k:c0").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeHead(EncodeChunk(0, "c"), "k:h").status().code(), absl::StatusCode::kDataLoss);
  const CheckpointManifest m = DescribeCheckpoint("abcdef", 4);
  EXPECT_FALSE(CheckPart("abcx", m.parts[0], "k:p0").ok());
  EXPECT_FALSE(CheckPart("abc", m.parts[0], "k:p0").ok());
}

}  // namespace
}  // namespace flatstate::server
