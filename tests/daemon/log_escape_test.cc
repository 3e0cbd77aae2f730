#include "daemon/log_escape.h"

#include <gtest/gtest.h>

namespace dumpd::daemon {
namespace {

TEST(LogEscape, PrintableAsciiIsKept) {
  EXPECT_EQ(escapeForLog("Default/Conv2D-op12 (x=1)"), "Default/Conv2D-op12 (x=1)");
}

TEST(LogEscape, ControlCharactersCannotForgeLinesOrColours) {
  const std::string out = escapeForLog("a\nFAKE LINE\r\x1b[31mred\x7f");
  EXPECT_EQ(out, "a\\x0aFAKE LINE\\x0d\\x1b[31mred\\x7f");
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
}

TEST(LogEscape, BackslashAndNonAsciiAreEscapedSoTheOutputIsUnambiguous) {
  EXPECT_EQ(escapeForLog("a\\x41"), "a\\x5cx41");
  EXPECT_EQ(escapeForLog("\xe2\x80\xae"), "\\xe2\\x80\\xae");  // U+202E, right-to-left override
  EXPECT_EQ(escapeForLog(std::string("a\0b", 3)), "a\\x00b");
}

TEST(LogEscape, LongTextIsCutAndSaysHowMuch) {
  const std::string out = escapeForLog(std::string(10000, 'x'), 100);
  EXPECT_EQ(out, std::string(100, 'x') + "...(9900 more bytes)");
}

}  // namespace
}  // namespace dumpd::daemon
