// ascii_lower: ASCII letters lowered, every other byte (UTF-8 names, digits, punctuation) as it was.
#include <gtest/gtest.h>

#include "kestrel/core/ascii_lower.h"

namespace kestrel {
namespace {

TEST(AsciiLower, LowersAsciiLettersOnly) {
  EXPECT_EQ(ascii_lower(".JPG"), ".jpg");
  EXPECT_EQ(ascii_lower("RTSP://Host/Live"), "rtsp://host/live");
  EXPECT_EQ(ascii_lower("\xC3\x84" "B.Mp4"), "\xC3\x84" "b.mp4");  // "ÄB.Mp4": the UTF-8 bytes of Ä stay
  EXPECT_EQ(ascii_lower("cuda:0"), "cuda:0");
  EXPECT_EQ(ascii_lower(""), "");
}

}  // namespace
}  // namespace kestrel
