#include "config/kernel_matcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

using ::testing::ElementsAre;
using testing::errorOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr const char* kConv =
    "Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12";

KernelMatcher make(const std::vector<std::string>& kernels) {
  auto m = KernelMatcher::create(kernels);
  EXPECT_TRUE(m) << errorOf(m);
  return m ? *m : KernelMatcher();
}

TEST(KernelMatcherTest, DefaultMatchesEverything) {
  KernelMatcher m;
  EXPECT_TRUE(m.matchesEverything());
  EXPECT_TRUE(m.matches("anything"));
  EXPECT_THAT(m.unusedEntries(), IsEmpty());
}

TEST(KernelMatcherTest, EmptyListsAfterNormalisationMatchEverything) {
  for (const std::vector<std::string>& list :
       std::vector<std::vector<std::string>>{{}, {""}, {" ", "\"\"", " \" \" "}}) {
    auto m = make(list);
    EXPECT_TRUE(m.matchesEverything());
    EXPECT_EQ(m.size(), 0u);
    EXPECT_TRUE(m.matches(kConv));
    EXPECT_TRUE(m.matches(""));
  }
}

TEST(KernelMatcherTest, FullNameMatchesExactly) {
  auto m = make({kConv});
  EXPECT_TRUE(m.matches(kConv));
  EXPECT_FALSE(m.matches(std::string(kConv) + "4"));
  EXPECT_FALSE(m.matches("Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d"));
  EXPECT_FALSE(m.matches("Conv2D-op12"));
}

TEST(KernelMatcherTest, EntryWithOpSuffixIsAFullName) {
  // "-op" without '/' is still a full name: compared for equality, not as a type substring.
  auto m = make({"Conv2D-op12"});
  EXPECT_TRUE(m.matches("Conv2D-op12"));
  EXPECT_FALSE(m.matches(kConv));
  EXPECT_FALSE(m.matches("Conv2D-op123"));
}

TEST(KernelMatcherTest, FullNameIsCaseSensitive) {
  auto m = make({"Default/Add-op0"});
  EXPECT_FALSE(m.matches("default/add-op0"));
}

TEST(KernelMatcherTest, OpTypeIsCaseInsensitiveSubstring) {
  auto m = make({"conv"});
  EXPECT_TRUE(m.matches("Conv2D-op1234"));
  EXPECT_TRUE(m.matches("Conv3D-op1221"));
  EXPECT_TRUE(m.matches(kConv));
  EXPECT_TRUE(m.matches("Default/DepthwiseConv2dNative-op3"));
  EXPECT_FALSE(m.matches("Default/MatMul-op3"));
  auto upper = make({"CONV2D"});
  EXPECT_TRUE(upper.matches("Default/Conv2D-op1"));
}

TEST(KernelMatcherTest, OpTypeLooksOnlyAtTheLastComponentBeforeItsLastDash) {
  auto m = make({"alexnet"});
  // "AlexNet" is in the scope, not in the op's own type.
  EXPECT_FALSE(m.matches(kConv));
  auto op = make({"op12"});
  // The "-op12" suffix is cut off before matching.
  EXPECT_FALSE(op.matches("Default/Conv2D-op12"));
}

TEST(KernelMatcherTest, OpTypeKey) {
  EXPECT_EQ(KernelMatcher::opTypeKey(kConv), "conv2d");
  EXPECT_EQ(KernelMatcher::opTypeKey("Conv2D-op1234"), "conv2d");
  EXPECT_EQ(KernelMatcher::opTypeKey("Default/Add"), "add");
  EXPECT_EQ(KernelMatcher::opTypeKey("Default/net-Foo/ReLU"), "relu");
  EXPECT_EQ(KernelMatcher::opTypeKey("Default/Fused-Mul-Add-op7"), "fused-mul-add");
  EXPECT_EQ(KernelMatcher::opTypeKey("Default/"), "");
  EXPECT_EQ(KernelMatcher::opTypeKey(""), "");
}

TEST(KernelMatcherTest, QuotesAndSpacesAreStripped) {
  auto m = make({" \"Default/Add-op0\" ", "Mat Mul"});
  EXPECT_EQ(m.size(), 2u);
  EXPECT_TRUE(m.matches("Default/Add-op0"));
  EXPECT_TRUE(m.matches("Default/MatMul-op1"));
  EXPECT_THAT(make({" \"Default/Add-op0\" "}).unusedEntries(), ElementsAre("Default/Add-op0"));
}

TEST(KernelMatcherTest, RegexMatchesTheWholeName) {
  auto m = make({"name-regex(Default/.+)"});
  EXPECT_TRUE(m.matches(kConv));
  EXPECT_FALSE(m.matches("Gradients/Default/Add-op1"));  // regex_match, not regex_search
  auto partial = make({"name-regex(Conv2D)"});
  EXPECT_FALSE(partial.matches("Default/Conv2D-op1"));
  EXPECT_TRUE(partial.matches("Conv2D"));
}

TEST(KernelMatcherTest, RegexIsEcmaScript) {
  auto m = make({R"(name-regex(Default/(?:Add|Mul)-op\d+))"});
  EXPECT_TRUE(m.matches("Default/Add-op12"));
  EXPECT_TRUE(m.matches("Default/Mul-op3"));
  EXPECT_FALSE(m.matches("Default/Sub-op3"));
  EXPECT_FALSE(m.matches("Default/Add-opX"));
}

TEST(KernelMatcherTest, RegexEntryContainingSlashIsStillARegex) {
  // Rule order: the regex form is recognised before the '/' full-name rule.
  auto m = make({"name-regex(Default/Add-op.*)"});
  EXPECT_TRUE(m.matches("Default/Add-op99"));
}

TEST(KernelMatcherTest, RegexNeedsClosingParenthesisAtTheEnd) {
  // Not the regex form: no ')' at the end, so it is an op type ("name-regex(conv").
  auto m = make({"name-regex(Conv"});
  EXPECT_FALSE(m.matches("Default/Conv2D-op1"));
  EXPECT_TRUE(m.matches("Default/name-regex(conv2d-op1"));
}

TEST(KernelMatcherTest, EmptyRegexMatchesOnlyTheEmptyName) {
  auto m = make({"name-regex()"});
  EXPECT_EQ(m.size(), 1u);
  EXPECT_FALSE(m.matches("Default/Add-op0"));
}

TEST(KernelMatcherTest, InvalidRegexIsAnErrorNamingTheEntry) {
  for (const char* bad : {"name-regex(Default/(.+)", "name-regex([a-)", "name-regex(*x)"}) {
    auto r = KernelMatcher::create({"conv", bad});
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidConfig);
    EXPECT_THAT(r.error().message, HasSubstr(std::string("kernels entry \"") + bad +
                                             "\" is not a valid regular expression"));
  }
}

TEST(KernelMatcherTest, OversizedRegexesAreRejected) {
  std::string deep = "name-regex(" + std::string(17, '(') + "a" + std::string(17, ')') + ")";
  EXPECT_THAT(errorOf(KernelMatcher::create({deep})), HasSubstr("nests groups deeper than 16"));
  std::string ok = "name-regex(" + std::string(16, '(') + "a" + std::string(16, ')') + ")";
  EXPECT_TRUE(KernelMatcher::create({ok}));
  // Escaped and bracketed parentheses are not groups.
  EXPECT_TRUE(KernelMatcher::create({R"(name-regex(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(\(a))"}));
  EXPECT_TRUE(KernelMatcher::create({"name-regex([((((((((((((((((((((]a)"}));
  std::string longer = "name-regex(" + std::string(1025, 'a') + ")";
  EXPECT_THAT(errorOf(KernelMatcher::create({longer})), HasSubstr("longer than 1024 bytes"));
}

TEST(KernelMatcherTest, LongNamesNeverMatchARegexButStillMatchOtherForms) {
  std::string name = "Default/" + std::string(2000, 'a') + "/Conv2D-op1";
  auto m = make({"name-regex(Default/.+)"});
  EXPECT_FALSE(m.matches(name));
  auto t = make({"name-regex(Default/.+)", "conv"});
  EXPECT_TRUE(t.matches(name));
}

TEST(KernelMatcherTest, AnyFormMatching) {
  auto m = make({"Default/Add-op0", "matmul", "name-regex(Gradients/.*)"});
  EXPECT_TRUE(m.matches("Default/Add-op0"));
  EXPECT_TRUE(m.matches("Default/MatMul-op4"));
  EXPECT_TRUE(m.matches("Gradients/Default/Add-op0"));
  EXPECT_FALSE(m.matches("Default/Add-op1"));
}

TEST(KernelMatcherTest, UnusedEntriesAreThoseThatNeverMatched) {
  auto m = make({"Default/Add-op0", "matmul", "name-regex(Gradients/.*)", "relu"});
  EXPECT_THAT(m.unusedEntries(),
              ElementsAre("Default/Add-op0", "matmul", "name-regex(Gradients/.*)", "relu"));
  m.matches("Default/Add-op0");
  m.matches("Default/MatMul-op4");
  EXPECT_THAT(m.unusedEntries(), ElementsAre("name-regex(Gradients/.*)", "relu"));
}

TEST(KernelMatcherTest, EveryMatchingEntryIsMarkedNotOnlyTheFirst) {
  auto m = make({"add", "Default/Add-op0", "name-regex(.*Add.*)"});
  EXPECT_TRUE(m.matches("Default/Add-op0"));
  EXPECT_THAT(m.unusedEntries(), IsEmpty());
}

TEST(KernelMatcherTest, DuplicatesAfterNormalisationCountOnce) {
  auto m = make({"conv", " conv", "\"conv\"", "Conv"});
  EXPECT_EQ(m.size(), 2u);  // "conv" and "Conv" are distinct entries (both op types)
  EXPECT_THAT(m.unusedEntries(), UnorderedElementsAre("conv", "Conv"));
}

}  // namespace
}  // namespace dumpd::config
