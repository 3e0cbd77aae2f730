#include "config/iteration_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

using ::testing::ElementsAre;
using testing::errorOf;
using ::testing::HasSubstr;
using ::testing::Pair;

IterationSet parseOk(std::string_view text) {
  auto r = IterationSet::parse(text);
  EXPECT_TRUE(r) << text << ": " << errorOf(r);
  return r ? *r : IterationSet();
}

TEST(IterationSetTest, DefaultIsEmpty) {
  IterationSet s;
  EXPECT_FALSE(s.isAll());
  EXPECT_FALSE(s.contains(0));
  EXPECT_TRUE(s.isNone());
  EXPECT_EQ(s.toString(), "none");
}

TEST(IterationSetTest, NoneSelectsNoIterationAndRoundTrips) {
  auto s = parseOk("none");
  EXPECT_TRUE(s.isNone());
  EXPECT_FALSE(s.isAll());
  for (uint32_t i : {0u, 1u, 100000u, 4294967295u}) EXPECT_FALSE(s.contains(i)) << i;
  EXPECT_EQ(s.toString(), "none");
  EXPECT_TRUE(parseOk(s.toString()).isNone());
  EXPECT_FALSE(parseOk("0").isNone());
  // Only the lower-case word: MindSpore's charset message for the rest.
  EXPECT_THAT(errorOf(IterationSet::parse("None")), HasSubstr("only supports digits"));
}

TEST(IterationSetTest, AllMatchesEverything) {
  auto s = parseOk("all");
  EXPECT_TRUE(s.isAll());
  EXPECT_TRUE(s.contains(0));
  EXPECT_TRUE(s.contains(4294967295u));
  EXPECT_EQ(s.toString(), "all");
  EXPECT_TRUE(s.ranges().empty());
  EXPECT_TRUE(IterationSet::all().contains(17));
}

TEST(IterationSetTest, SingleValue) {
  auto s = parseOk("5");
  EXPECT_TRUE(s.contains(5));
  EXPECT_FALSE(s.contains(4));
  EXPECT_FALSE(s.contains(6));
}

TEST(IterationSetTest, SeedExample) {
  auto s = parseOk("0|5-8|100-120");
  for (uint32_t i : {0u, 5u, 6u, 7u, 8u, 100u, 110u, 120u}) EXPECT_TRUE(s.contains(i)) << i;
  for (uint32_t i : {1u, 4u, 9u, 99u, 121u, 1000u}) EXPECT_FALSE(s.contains(i)) << i;
  EXPECT_EQ(s.toString(), "0|5-8|100-120");
}

TEST(IterationSetTest, SpacesAroundSegmentsAreAccepted) {
  EXPECT_EQ(parseOk("0 | 5-8 | 100-120").toString(), "0|5-8|100-120");
  EXPECT_EQ(parseOk("  3  ").toString(), "3");
}

TEST(IterationSetTest, OverlappingAndAdjacentRangesAreMerged) {
  auto s = parseOk("10-20|15-30|31|0|1-2|5-5");
  EXPECT_THAT(s.ranges(), ElementsAre(Pair(0u, 2u), Pair(5u, 5u), Pair(10u, 31u)));
  EXPECT_EQ(s.toString(), "0-2|5|10-31");
  EXPECT_EQ(parseOk("4|4|4").toString(), "4");
}

TEST(IterationSetTest, LeadingZerosAreDecimal) { EXPECT_EQ(parseOk("007-010").toString(), "7-10"); }

TEST(IterationSetTest, Uint32Bounds) {
  auto s = parseOk("4294967290-4294967295|0");
  EXPECT_TRUE(s.contains(4294967295u));
  EXPECT_TRUE(s.contains(0));
  EXPECT_FALSE(s.contains(1));
  // Adjacent at the top must not wrap around when merging.
  EXPECT_EQ(parseOk("4294967295|4294967294").toString(), "4294967294-4294967295");
}

TEST(IterationSetTest, ContainsOnManyRanges) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += (i ? "|" : "") + std::to_string(i * 10);
  auto s = parseOk(text);
  EXPECT_EQ(s.ranges().size(), 1000u);
  for (uint32_t i = 0; i < 10000; ++i) EXPECT_EQ(s.contains(i), i % 10 == 0) << i;
}

TEST(IterationSetTest, CharactersOutsideTheAlphabetUseMindSporesMessage) {
  for (const char* bad : {"ALL", "All", " all", "all|1", "1,2", "1;2", "a", "1\t2", "+1", "1.5"}) {
    EXPECT_EQ(errorOf(IterationSet::parse(bad)),
              std::string("iteration only supports digits, {'-', '|'}, or just \"all\" but got: ") +
                  (std::string_view(bad) == "1\t2" ? "1\\x092" : bad))
        << bad;
  }
  // Empty: MindSpore refuses it too, but dumpd says how to select nothing.
  EXPECT_EQ(errorOf(IterationSet::parse("")),
            "iteration is empty: give \"none\" to select no iteration (dumpd), \"all\", or "
            "iterations such as \"0|5-8\"");
}

TEST(IterationSetTest, MalformedSegmentsAreRejectedNamingTheSegment) {
  struct Case {
    const char* text;
    const char* segment;
    const char* why;
  };
  for (const Case& c : {
           Case{"5-3", "\"5-3\"", "LOW is greater than HIGH"},
           Case{"0|-1", "\"-1\"", "expected N or LOW-HIGH"},
           Case{"5-", "\"5-\"", "expected N or LOW-HIGH"},
           Case{"1-2-3", "\"1-2-3\"", "expected N or LOW-HIGH"},
           Case{"-", "\"-\"", "expected N or LOW-HIGH"},
           Case{"1||2", "\"\"", "empty segment"},
           Case{"|1", "\"\"", "empty segment"},
           Case{"1|", "\"\"", "empty segment"},
           Case{"1| |2", "\" \"", "empty segment"},
           Case{"   ", "\"   \"", "empty segment"},
           Case{"5 - 8", "\"5 - 8\"", "space inside a segment"},
           Case{"1 2", "\"1 2\"", "space inside a segment"},
           Case{"4294967296", "\"4294967296\"", "not a number in 0..4294967295"},
           Case{"0-99999999999999999999", "\"0-99999999999999999999\"",
                "not a number in 0..4294967295"},
       }) {
    auto r = IterationSet::parse(c.text);
    ASSERT_FALSE(r) << c.text;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidConfig);
    EXPECT_EQ(r.error().message, std::string("iteration segment ") + c.segment + " is malformed (" +
                                     c.why + ") in: " + c.text);
  }
}

TEST(IterationSetTest, ErrorMessageNamesTheFirstBadSegment) {
  EXPECT_THAT(errorOf(IterationSet::parse("1|9-2|7-3")), HasSubstr("\"9-2\""));
}

}  // namespace
}  // namespace dumpd::config
