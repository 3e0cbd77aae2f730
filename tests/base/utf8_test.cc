// UTF-8 checks for text that leaves dumpd in protobuf strings and journals (base/utf8.h).
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace dumpd {
namespace {

const std::string kReplacement = "\xef\xbf\xbd";

TEST(Utf8, AcceptsWellFormedTextOfEveryLength) {
  EXPECT_TRUE(isValidUtf8(""));
  EXPECT_TRUE(isValidUtf8("Default/Conv2D-op1"));
  EXPECT_TRUE(isValidUtf8("\xc3\xa9"));          // é
  EXPECT_TRUE(isValidUtf8("\xe2\x82\xac"));      // €
  EXPECT_TRUE(isValidUtf8("\xf0\x9f\x98\x80"));  // U+1F600
}

TEST(Utf8, RefusesStrayOverlongSurrogateAndOutOfRangeBytes) {
  EXPECT_FALSE(isValidUtf8("\xff\xfe"));
  EXPECT_FALSE(isValidUtf8("\x80"));              // a continuation byte alone
  EXPECT_FALSE(isValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(isValidUtf8("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(isValidUtf8("\xed\xa0\x80"));      // a UTF-16 surrogate
  EXPECT_FALSE(isValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(isValidUtf8("\xc3"));              // cut short
  EXPECT_FALSE(isValidUtf8("ab\xe2\x82"));        // cut short at the end
}

TEST(Utf8, ReplacesEachBadByteAndKeepsTheRest) {
  EXPECT_EQ(toValidUtf8("op\xff\xfe-1"), "op" + kReplacement + kReplacement + "-1");
  EXPECT_EQ(toValidUtf8("\xc3\xa9\xc3"), "\xc3\xa9" + kReplacement);
  EXPECT_EQ(toValidUtf8("plain"), "plain");
  EXPECT_TRUE(isValidUtf8(toValidUtf8("\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf")));
}

TEST(Utf8, CutsBetweenCharactersNeverInside) {
  const std::string e = "\xc3\xa9";  // two bytes
  std::string text;
  for (int i = 0; i < 600; ++i) text += e;  // 1200 bytes
  const std::string_view cut = cutUtf8(text, 1023);
  EXPECT_EQ(cut.size(), 1022u);
  EXPECT_TRUE(isValidUtf8(cut));
  EXPECT_EQ(cutUtf8(text, 1024).size(), 1024u);
  EXPECT_EQ(cutUtf8("short", 1024), "short");
  // A four-byte character cut after each of its bytes backs off to its start.
  const std::string smile = "a\xf0\x9f\x98\x80";
  for (size_t n = 1; n < smile.size(); ++n) EXPECT_EQ(cutUtf8(smile, n), "a") << n;
}

TEST(Utf8, ACutOfBytesThatAreNotUtf8IsWhereAsked) {
  const std::string junk(10, '\x80');
  EXPECT_EQ(cutUtf8(junk, 5).size(), 5u);
}

TEST(Utf8, WireTextIsValidAndCutBetweenCharacters) {
  // Issue 48: 400 x "€" (1200 bytes) cut at 1024 bytes ended inside a character, and the
  // client's Trigger did not serialize as a protobuf string.
  std::string euros;
  for (int i = 0; i < 400; ++i) euros += "\xe2\x82\xac";
  const std::string cut = toWireText(euros, 1024);
  EXPECT_EQ(cut.size(), 1023u);
  EXPECT_TRUE(isValidUtf8(cut));
  // A four-byte character straddling the limit is cut before, not replaced by U+FFFD.
  const std::string smiles = "ab\xf0\x9f\x98\x80\xf0\x9f\x98\x80";
  for (size_t n = 2; n < 10; ++n) {
    EXPECT_EQ(toWireText(smiles, n), smiles.substr(0, n < 6 ? 2 : 6)) << n;
  }
  // Bytes that are not UTF-8 become U+FFFD; short valid text passes as it is.
  EXPECT_EQ(toWireText("a\xff"
                       "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(toWireText("\xe4\xb8\xad\xe6\x96\x87", 1024), "\xe4\xb8\xad\xe6\x96\x87");
  EXPECT_EQ(toWireText("", 3), "");
}

}  // namespace
}  // namespace dumpd
