// io::FramePattern (image_writer.h, Note [Frame patterns]): the names a PNG
// sequence gets, and the patterns refused before anything is written.
#include <gtest/gtest.h>

#include <string>

#include "omni/error.h"
#include "omni/io/image_writer.h"

namespace {

using omni::io::FramePattern;

TEST(FramePattern, NamesFramesAsPrintfWouldWithoutPrintf) {
  EXPECT_EQ(FramePattern("f%d.png").file(12).string(), "f12.png");
  EXPECT_EQ(FramePattern("frames/%03d.png").file(7).string(), "frames/007.png");
  EXPECT_EQ(FramePattern("frames/%03d.png").file(1234).string(), "frames/1234.png");
  EXPECT_EQ(FramePattern("f%5d.png").file(42).string(), "f   42.png");
  EXPECT_EQ(FramePattern("f%0d.png").file(3).string(), "f3.png");
  EXPECT_EQ(FramePattern("100%%/f_%02d_%%.png").file(4).string(), "100%/f_04_%.png");
  EXPECT_TRUE(FramePattern::is_pattern("a%b"));
  EXPECT_FALSE(FramePattern::is_pattern("out.png"));
}

// The regression (issue 34, D1): the pattern was snprintf's format.
TEST(FramePattern, AnythingButOneNumberFieldIsAConfigErrorNamingIt) {
  for (const std::string pattern :
       {"f_%03d_%s.png", "f_%n.png", "%s%s%s%s.png", "f_%d_%d.png", "f_%x.png", "f_%-5d.png",
        "f_%+d.png", "f_% d.png", "f_%.3d.png", "f_%ld.png", "f_%*d.png", "f_100%%.png", "f_%",
        "f_%1000d.png", "f%d/x.png", "plain.png"}) {
    SCOPED_TRACE(pattern);
    try {
      FramePattern p(pattern);
      ADD_FAILURE() << "accepted";
    } catch (const omni::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + pattern + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
