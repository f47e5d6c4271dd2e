#include "engine/model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;
using testing::NamedTensor;
using testing::RawSafetensors;

// A safetensors file with `header` padded to keep the data section 8-byte aligned.
std::string File(std::string header, const std::string& data) {
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  return RawSafetensors(header, data);
}

// Header holding one tensor 't' with the given entry JSON.
std::string One(const std::string& entry) { return "{\"t\":" + entry + "}"; }

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string dir_ = testing::TempDir();

  // Writes `bytes` to a fresh file and opens it.
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenBytes(const std::string& bytes) {
    path_ = dir_ + "/t" + std::to_string(n_++) + ".safetensors";
    testing::WriteFile(path_, bytes);
    return SafetensorsFile::Open(path_);
  }
  void ExpectError(const std::string& bytes, absl::StatusCode code,
                   const std::vector<std::string>& parts) {
    auto f = OpenBytes(bytes);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), code) << f.status();
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(path_));
    for (const auto& p : parts) {
      EXPECT_THAT(std::string(f.status().message()), HasSubstr(p)) << f.status();
    }
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path_;
  int n_ = 0;
};

TEST_F(SafetensorsTest, ReadsTensorsAndMetadata) {
  const std::vector<NamedTensor> ts = {
      {"b", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"a", {4}, {-1, -2, -3, -4}}, {"scalar", {}, {7}}};
  const std::string path = testing::WriteSafetensors(dir_ + "/ok.safetensors", ts);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const SafetensorsFile& file = **f;
  ASSERT_EQ(file.tensors().size(), 3u);
  // Ordered by data position, i.e. write order.
  EXPECT_EQ(file.tensors()[0].name, "b");
  EXPECT_EQ(file.tensors()[1].name, "a");
  EXPECT_EQ(file.tensors()[2].name, "scalar");
  const TensorView* b = file.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, "F32");
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b->size_bytes, 24u);
  EXPECT_EQ(b->num_elements(), 6);
  EXPECT_EQ(b->f32()[5], 6.f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 4, 0u);
  EXPECT_EQ(file.Find("a")->f32()[3], -4.f);
  EXPECT_EQ(file.Find("scalar")->num_elements(), 1);
  EXPECT_EQ(file.Find("scalar")->f32()[0], 7.f);
  EXPECT_EQ(file.Find("missing"), nullptr);
  EXPECT_EQ(file.data_section_offset() % 8, 0u);
  EXPECT_EQ(file.file_size(), file.data_section_offset() + 44);
  EXPECT_TRUE(file.metadata().empty());
}

// BF16 (the layers' GEMM weights of a bfloat16 model): two bytes per element, read as the top
// halves of fp32s; 2-byte alignment suffices.
TEST_F(SafetensorsTest, Bf16TensorReadsItsBits) {
  const std::string header = R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                             R"("v":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}})";
  const std::string data("\x80\x3f\x00\xc0\x80\x7f\x00\x00\x81\x3f", 10);
  auto f = OpenBytes(File(header, data));
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorView* w = (*f)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "BF16");
  EXPECT_EQ(w->size_bytes, 8u);
  EXPECT_EQ(w->bf16()[0], 0x3F80);  // 1.0
  EXPECT_EQ(w->bf16()[1], 0xC000);  // -2.0
  EXPECT_EQ(w->bf16()[2], 0x7F80);  // +Inf
  EXPECT_EQ((*f)->Find("v")->bf16()[0], 0x3F81);
  // A BF16 tensor whose byte count does not match its shape is refused like any other.
  const std::string bad = R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})";
  auto g = OpenBytes(File(bad, std::string(8, '\0')));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("BF16 [3] needs 6 bytes"));
}

TEST_F(SafetensorsTest, MetadataAndOtherDtypesAccepted) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("e":{"dtype":"I8","shape":[0],"data_offsets":[4,4]}})";
  auto f = OpenBytes(File(header, std::string(4, '\0')));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_NE((*f)->Find("h"), nullptr);
  EXPECT_EQ((*f)->Find("h")->dtype, "F16");
  EXPECT_FALSE(IsSupportedWeightDtype("F16"));
  EXPECT_TRUE(IsSupportedWeightDtype("F32"));
  EXPECT_TRUE(IsSupportedWeightDtype("BF16"));
  EXPECT_EQ(SafetensorsDtypeSize("BF16"), 2u);
  EXPECT_EQ(SafetensorsDtypeSize("F64"), 8u);
  EXPECT_EQ(SafetensorsDtypeSize("Q4"), 0u);
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open(dir_ + "/nope.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("nope.safetensors"));
}

struct ErrorCase {
  std::string what;
  std::string bytes;
  absl::StatusCode code;
  std::vector<std::string> message_parts;
};

TEST_F(SafetensorsTest, RejectsMalformedFiles) {
  const auto kInv = absl::StatusCode::kInvalidArgument;
  const auto kLoss = absl::StatusCode::kDataLoss;
  const std::string d16(16, '\0');
  std::string huge_len(8, '\0');
  huge_len[4] = 1;  // 2^32 bytes
  const std::string f32_2 = R"("dtype":"F32","shape":[2],)";
  const std::vector<ErrorCase> cases = {
      {"empty file", "", kLoss, {"shorter than"}},
      {"5 bytes", std::string(5, 'x'), kLoss, {"truncated"}},
      {"oversized header", huge_len + "{}", kInv, {"oversized header"}},
      {"header past end", RawSafetensors(std::string(100, ' '), "").substr(0, 20), kLoss,
       {"header length 100", "truncated"}},
      {"bad json", File("{not json", d16), kInv, {"not valid JSON"}},
      {"json array", File("[1,2]", d16), kInv, {"not a JSON object"}},
      {"entry not object", File(One("5"), d16), kInv, {"tensor 't'", "JSON object"}},
      {"no dtype", File(One(R"({"shape":[2],"data_offsets":[0,8]})"), d16), kInv,
       {"tensor 't'", "dtype"}},
      {"dtype not string", File(One(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), d16),
       kInv, {"tensor 't'", "dtype"}},
      {"unknown dtype", File(One(R"({"dtype":"Q4","shape":[2],"data_offsets":[0,8]})"), d16),
       kInv, {"tensor 't'", "unknown dtype 'Q4'"}},
      {"negative dim", File(One(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), d16),
       kInv, {"tensor 't'", "shape"}},
      {"shape not array", File(One(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), d16),
       kInv, {"tensor 't'", "shape"}},
      {"fractional dim", File(One(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), d16),
       kInv, {"tensor 't'", "shape"}},
      {"no offsets", File(One("{" + f32_2 + R"("x":1})"), d16), kInv,
       {"tensor 't'", "data_offsets"}},
      {"three offsets", File(One("{" + f32_2 + R"("data_offsets":[0,8,9]})"), d16), kInv,
       {"tensor 't'", "data_offsets"}},
      {"negative offset", File(One("{" + f32_2 + R"("data_offsets":[-8,0]})"), d16), kInv,
       {"tensor 't'", "data_offsets"}},
      {"end before begin", File(One("{" + f32_2 + R"("data_offsets":[8,0]})"), d16), kInv,
       {"tensor 't'", "end < begin"}},
      {"out of range", File(One("{" + f32_2 + R"("data_offsets":[16,24]})"), d16), kLoss,
       {"tensor 't'", "data_offsets [16, 24] out of range (data section is 16 bytes)"}},
      {"size mismatch", File(One(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"), d16),
       kInv, {"tensor 't'", "hold 16 bytes", "needs 12 bytes"}},
      {"shape overflow",
       File(One(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]})"),
            d16),
       kInv, {"tensor 't'", "needs more than 2^63 bytes"}},
      {"overlap",
       File("{\"a\":{" + f32_2 + R"("data_offsets":[0,8]},"b":{)" + f32_2 +
                R"("data_offsets":[4,12]}})",
            d16),
       kInv, {"tensor 'b'", "overlaps tensor 'a'"}},
      {"misaligned", File(One("{" + f32_2 + R"("data_offsets":[2,10]})"), d16), kInv,
       {"tensor 't'", "misaligned"}},
      {"metadata not strings", File(R"({"__metadata__":{"k":1}})", ""), kInv,
       {"__metadata__", "'k'"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectError(c.bytes, c.code, c.message_parts);
  }
}

TEST_F(SafetensorsTest, AdjacentAndEmptyTensorsDoNotOverlap) {
  const std::string h =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  auto f = OpenBytes(File(h, std::string(16, '\0')));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 3u);
}


TEST_F(SafetensorsTest, RandomCorruptionNeverCrashes) {
  const std::vector<NamedTensor> ts = {{"w", {3, 2}, {1, 2, 3, 4, 5, 6}}, {"n", {2}, {1, 1}}};
  const std::string good = testing::SerializeSafetensors(ts);
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(state >> 33);
  };
  int opened = 0;
  for (int i = 0; i < 500; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) bytes[next() % bytes.size()] = static_cast<char>(next());
    if (next() % 5 == 0) bytes.resize(next() % bytes.size());
    auto f = OpenBytes(bytes);
    if (f.ok()) {
      ++opened;
      for (const TensorView& t : (*f)->tensors()) {
        EXPECT_LE(t.data + t.size_bytes, (*f)->file_data() + (*f)->file_size());
      }
    } else {
      EXPECT_THAT(std::string(f.status().message()), HasSubstr(path_));
    }
  }
  EXPECT_GT(opened, 0);  // flips inside the data section leave the file valid
}

}  // namespace
}  // namespace flatstate
