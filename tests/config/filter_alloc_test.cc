// Proves the Filter's per-name cache contract: once a name has been seen, opSelected() on it
// allocates nothing. alloc_counter.cc replaces global operator new in this binary.
#include <gtest/gtest.h>

#include "config/filter.h"
#include "tests/config/alloc_counter.h"
#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

TEST(FilterAllocTest, RepeatedNameAllocatesNothing) {
  auto config = testing::minimalConfig();
  config["common_dump_settings"]["dump_mode"] = 1;
  config["common_dump_settings"]["kernels"] = {"conv", "Default/Add-op0",
                                               "name-regex(Gradients/.*)"};
  auto plan = testing::parse(config);
  ASSERT_TRUE(plan);
  auto filter = Filter::create(*plan);
  ASSERT_TRUE(filter);
  Filter& f = *filter;

  // Long names: beyond any small-string buffer, so a std::string copy would allocate.
  const char* names[] = {
      "Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12",
      "Default/network-WithLossCell/_backbone-AlexNet/fc1-Dense/MatMul-op20",
      "Gradients/Default/network-WithLossCell/_backbone-AlexNet/Add-op7",
  };
  bool first[3];
  for (int i = 0; i < 3; ++i) first[i] = f.opSelected(names[i]);  // misses: may allocate

  long before = dumpd::testing::allocationCount();
  bool same = true;
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 3; ++i) same = same && f.opSelected(names[i]) == first[i];
    same = same && f.shouldDump(0, 0, names[0], Io::kOutput) == first[0];
  }
  long after = dumpd::testing::allocationCount();
  EXPECT_TRUE(same);
  EXPECT_EQ(after - before, 0) << "opSelected allocated on cached names";
  EXPECT_TRUE(first[0]);
  EXPECT_FALSE(first[1]);
  EXPECT_TRUE(first[2]);
}

}  // namespace
}  // namespace dumpd::config
