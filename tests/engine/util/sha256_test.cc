#include "engine/util/sha256.h"

#include <algorithm>
#include <string>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PiecewiseUpdateMatchesOneShot) {
  std::string msg;
  for (int i = 0; i < 1000; ++i) msg.push_back(static_cast<char>(i * 7 + 3));
  const std::string want = Sha256Hex(msg);
  for (size_t step : {1, 3, 55, 56, 63, 64, 65, 200}) {
    Sha256 h;
    for (size_t i = 0; i < msg.size(); i += step) {
      h.Update(msg.data() + i, std::min(step, msg.size() - i));
    }
    const auto d = h.Final();
    EXPECT_EQ(HexLower(d.data(), d.size()), want) << "step " << step;
  }
}

TEST(Sha256Test, FinalResets) {
  Sha256 h;
  h.Update("xyz", 3);
  h.Final();
  h.Update("abc", 3);
  const auto d = h.Final();
  EXPECT_EQ(HexLower(d.data(), d.size()), Sha256Hex("abc"));
}

}  // namespace
}  // namespace flatstate
