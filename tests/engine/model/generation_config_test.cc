// generation_config.json (engine/model/generation_config.h): the end-of-sequence ids it adds, the
// BOS id it fills, and errors that name the file and key and leave the config unchanged.
#include "engine/model/generation_config.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

ModelConfig Config(std::vector<int32_t> eos, int32_t bos = -1) {
  ModelConfig c;
  c.vocab_size = 100;
  c.eos_token_ids = std::move(eos);
  c.bos_token_id = bos;
  return c;
}

TEST(GenerationConfig, EosIdsJoinTheConfigsWithoutDuplicates) {
  ModelConfig c = Config({2});
  ASSERT_TRUE(ApplyGenerationConfig(R"({"eos_token_id": [2, 7, 7, 9], "bos_token_id": 1})",
                                    "m/generation_config.json", &c)
                  .ok());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 7, 9}));
  EXPECT_EQ(c.bos_token_id, 1);  // filled: the config had none
  c = Config({}, 5);
  ASSERT_TRUE(ApplyGenerationConfig(R"({"eos_token_id": 3, "bos_token_id": 1, "top_k": 4})",
                                    "g.json", &c)
                  .ok());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(c.bos_token_id, 5);  // the config's own BOS stays
  c = Config({4});
  ASSERT_TRUE(ApplyGenerationConfig(R"({"eos_token_id": null})", "g.json", &c).ok());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{4}));
}

TEST(GenerationConfig, BadTextOrIdsNameTheFileAndKeyAndChangeNothing) {
  for (const char* text : {"[1]", "not json", R"({"eos_token_id": [7, 100]})",
                           R"({"eos_token_id": -1})", R"({"eos_token_id": "2"})",
                           R"({"eos_token_id": [7, 1.5]})",
                           R"({"eos_token_id": 18446744073709551615})"}) {
    ModelConfig c = Config({2});
    const absl::Status s = ApplyGenerationConfig(text, "m/generation_config.json", &c);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find("m/generation_config.json"), std::string::npos) << s;
    if (text[0] == '{') {
      EXPECT_NE(s.message().find("eos_token_id"), std::string::npos) << s;
    }
    EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2})) << text;
  }
}

}  // namespace
}  // namespace flatstate
