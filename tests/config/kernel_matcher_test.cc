#include "config/kernel_matcher.h"

#include <string>
#include <vector>

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
  EXPECT_FALSE(m.matches("Gradients/Default/Add-op1"));  // a full match, not a search
  auto partial = make({"name-regex(Conv2D)"});
  EXPECT_FALSE(partial.matches("Default/Conv2D-op1"));
  EXPECT_TRUE(partial.matches("Conv2D"));
}

TEST(KernelMatcherTest, RegexSyntaxSharedWithEcmaScriptWorks) {
  auto m = make({R"(name-regex(Default/(?:Add|Mul)-op\d+))"});
  EXPECT_TRUE(m.matches("Default/Add-op12"));
  EXPECT_TRUE(m.matches("Default/Mul-op3"));
  EXPECT_FALSE(m.matches("Default/Sub-op3"));
  EXPECT_FALSE(m.matches("Default/Add-opX"));
  auto classes = make({R"(name-regex([A-Z]\w*/\S+\s[^/]{2,3}-op\d{1,2}?\b.*))"});
  EXPECT_TRUE(classes.matches("Default/x_1 Add-op1"));
  EXPECT_TRUE(classes.matches("Default/x_1 Ad-op12"));
  EXPECT_FALSE(classes.matches("default/x_1 Add-op1"));    // [A-Z]
  EXPECT_FALSE(classes.matches("Default/x_1 Addd-op1"));   // {2,3}
  EXPECT_FALSE(classes.matches("Default/x_1 Add-op123"));  // \d{1,2} then \b
  EXPECT_FALSE(classes.matches("Default/x_1_Add-op1"));    // \s
}

TEST(KernelMatcherTest, RegexIsCaseSensitive) {
  auto m = make({"name-regex(Default/add-op\\d+)"});
  EXPECT_TRUE(m.matches("Default/add-op1"));
  EXPECT_FALSE(m.matches("Default/Add-op1"));
  EXPECT_FALSE(m.matches("DEFAULT/add-op1"));
}

TEST(KernelMatcherTest, RegexMatchesBytesAsStdRegexDoes) {
  // MindSpore's std::regex works on chars: '.' is one byte, whatever the encoding.
  auto m = make({"name-regex(Default/.{2})"});
  EXPECT_TRUE(m.matches("Default/\xc3\xa9"));  // "é" in UTF-8: two bytes
  EXPECT_TRUE(m.matches("Default/\xff\xfe"));  // not UTF-8 at all
  EXPECT_FALSE(m.matches("Default/\xc3\xa9x"));
  // '.' does not match a newline, in both engines.
  EXPECT_FALSE(make({"name-regex(a.b)"}).matches("a\nb"));
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

TEST(KernelMatcherTest, InvalidRegexIsAnErrorNamingTheEntryAndTheReason) {
  struct Case {
    const char* entry;
    const char* reason;
  };
  for (const Case& c : {Case{"name-regex(Default/(.+)", "missing ): Default/(.+"},
                        Case{"name-regex([a-)", "missing ]: [a-"},
                        Case{"name-regex(*x)", "no argument for repetition operator: *"},
                        Case{"name-regex(a{1001})", "invalid repetition size: {1001}"}}) {
    auto r = KernelMatcher::create({"conv", c.entry});
    ASSERT_FALSE(r) << c.entry;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidConfig);
    EXPECT_EQ(r.error().message, std::string("Dump config parse failed, kernels entry \"") +
                                     c.entry + "\": unsupported regular expression: " + c.reason +
                                     " (dumpd uses RE2 syntax, see docs/compatibility.md)");
  }
}

TEST(KernelMatcherTest, BacktrackingOnlySyntaxIsRefusedNamingTheEntry) {
  // Backreferences, lookaround, atomic groups and possessive quantifiers need a backtracking
  // engine; RE2 refuses them. MindSpore's std::regex accepts \1, (?=, (?! and a++.
  struct Case {
    const char* entry;
    const char* reason;
  };
  for (const Case& c :
       {Case{R"(name-regex(Default/(Add)-op\d+/\1))", R"(invalid escape sequence: \1)"},
        Case{"name-regex(Default/(?=Add).*)", "invalid perl operator: (?="},
        Case{"name-regex(Default/(?!Add).*)", "invalid perl operator: (?!"},
        Case{"name-regex(.*(?<=-op1))", "invalid perl operator: (?<"},
        Case{"name-regex(.*(?<!-op1))", "invalid perl operator: (?<"},
        Case{"name-regex(Default/(?>A|Ad)d.*)", "invalid perl operator: (?>"},
        Case{"name-regex(Default/a++)", "bad repetition operator: ++"}}) {
    auto r = KernelMatcher::create({c.entry});
    ASSERT_FALSE(r) << c.entry;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidConfig);
    EXPECT_EQ(r.error().message, std::string("Dump config parse failed, kernels entry \"") +
                                     c.entry + "\": unsupported regular expression: " + c.reason +
                                     " (dumpd uses RE2 syntax, see docs/compatibility.md)");
  }
}

TEST(KernelMatcherTest, ControlCharactersInTheErrorAreEscaped) {
  auto r = KernelMatcher::create({"name-regex(a\n(b)"});
  EXPECT_THAT(errorOf(r), HasSubstr("kernels entry \"name-regex(a\\x0a(b)\": unsupported regular "
                                    "expression: missing ): a\\x0a(b"));
}

TEST(KernelMatcherTest, RegexLongerThan1024BytesIsRejected) {
  std::string longest = "name-regex(" + std::string(1024, 'a') + ")";
  EXPECT_TRUE(KernelMatcher::create({longest}));
  std::string longer = "name-regex(" + std::string(1025, 'a') + ")";
  EXPECT_EQ(errorOf(KernelMatcher::create({longer})),
            "Dump config parse failed, kernels entry \"" + longer +
                "\": regular expression longer than 1024 bytes");
}

TEST(KernelMatcherTest, RegexWhoseProgramExceedsTheMemoryBudgetIsRefused) {
  // 120 bytes of pattern, ~40,000 instructions once the counted repetitions are expanded:
  // RE2's default 8 MiB would take it, dumpd's 256 KiB budget does not.
  std::string pattern;
  for (int i = 0; i < 20; ++i) pattern += ".{1000}";
  std::string entry = "name-regex(" + pattern + ")";
  EXPECT_EQ(errorOf(KernelMatcher::create({entry})),
            "Dump config parse failed, kernels entry \"" + entry +
                "\": unsupported regular expression: pattern too large - compile failed (dumpd "
                "compiles each regular expression within 256 KiB, see docs/compatibility.md)");
}

TEST(KernelMatcherTest, LargestRealisticRegexFitsTheBudget) {
  // A 1 KiB alternation of full names, the biggest thing a user plausibly writes.
  std::string alternation;
  std::vector<std::string> names;
  for (int i = 0; alternation.size() < 980; ++i) {
    names.push_back("Default/net/layer" + std::to_string(i) + "/Conv2D-op" + std::to_string(i));
    alternation += (i == 0 ? "" : "|") + names.back();
  }
  ASSERT_LE(alternation.size(), KernelMatcher::kMaxRegexBytes);
  auto m = make({"name-regex(" + alternation + ")"});
  EXPECT_EQ(m.size(), 1u);
  for (const std::string& name : names) EXPECT_TRUE(m.matches(name)) << name;
  EXPECT_FALSE(m.matches("Default/net/layer0/Conv2D-op1"));
}

TEST(KernelMatcherTest, DeeplyNestedGroupsAreAccepted) {
  // std::regex recursed per nested group, so dumpd capped nesting at 16; RE2 does not recurse.
  std::string deep = "name-regex(" + std::string(500, '(') + "a" + std::string(500, ')') + ")";
  auto m = make({deep});
  EXPECT_EQ(m.size(), 1u);
  EXPECT_TRUE(m.matches("a"));
  EXPECT_FALSE(m.matches("aa"));
}

TEST(KernelMatcherTest, CatastrophicBacktrackingPatternsMatchInLinearTime) {
  // With std::regex the failing cases below backtrack exponentially: (a+)+$ against 26 'a's
  // and a 'b' took 8 s, x4 per 2 more characters. RE2 needs no backtracking. The assertions
  // are the answers; a regression shows up as the test timing out.
  for (size_t n : {size_t{60}, size_t{10'000}}) {
    std::string as(n, 'a');
    auto nested_plus = make({"name-regex((a+)+$)"});
    EXPECT_TRUE(nested_plus.matches(as)) << n;
    EXPECT_FALSE(nested_plus.matches(as + "b")) << n;
    EXPECT_FALSE(nested_plus.matches("b" + as)) << n;

    auto alternation = make({"name-regex((a|aa)*b)"});
    EXPECT_FALSE(alternation.matches(as)) << n;
    EXPECT_TRUE(alternation.matches(as + "b")) << n;
    EXPECT_FALSE(alternation.matches(as + "c")) << n;

    auto nested_star = make({"name-regex((a*)*b)"});
    EXPECT_FALSE(nested_star.matches(as)) << n;
    EXPECT_TRUE(nested_star.matches(as + "b")) << n;

    auto repeated_star = make({"name-regex((.*a){20})"});
    EXPECT_TRUE(repeated_star.matches(as)) << n;
    EXPECT_FALSE(repeated_star.matches(as + "b")) << n;
  }
}

TEST(KernelMatcherTest, RegexMatchesAVeryLongName) {
  // std::regex recursed per character of the name, so dumpd never matched a regex against
  // names over 1024 bytes; RE2 has no such limit.
  std::string scope(100'000, 'a');
  auto m = make({R"(name-regex(Default/a+/Conv2D-op\d+))"});
  EXPECT_TRUE(m.matches("Default/" + scope + "/Conv2D-op1"));
  EXPECT_FALSE(m.matches("Default/" + scope + "/Conv3D-op1"));
  EXPECT_FALSE(m.matches("Default/" + scope + "b/Conv2D-op1"));
  auto t = make({"name-regex(Gradients/.+)", "conv"});
  EXPECT_TRUE(t.matches("Default/" + scope + "/Conv2D-op1"));  // through the op type
  EXPECT_THAT(t.unusedEntries(), ElementsAre("name-regex(Gradients/.+)"));
  EXPECT_TRUE(t.matches("Gradients/" + scope + "/Add-op1"));
  EXPECT_THAT(t.unusedEntries(), IsEmpty());
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
