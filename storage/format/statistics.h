// Tensor statistics for statistic.csv (spec section 5), computed in one pass over the data.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "base/dtype.h"
#include "config/ms_format.h"
#include "storage/format/stat_values.h"
#include "storage/fs/file_system.h"

namespace dumpd::storage {

struct TensorStats {
  uint64_t count = 0;  // elements
  double max = 0;      // NaN when any element is NaN
  double min = 0;
  double avg = 0;
  double l2norm = 0;      // sqrt(sum x^2)
  uint64_t negative = 0;  // x < 0 ("Negative Zero Count" in MindSpore's naming)
  uint64_t positive = 0;  // x > 0 ("Positive Zero Count")
  uint64_t zero = 0;      // x == 0, -0.0 included
  uint64_t nan = 0;
  uint64_t negative_inf = 0;
  uint64_t positive_inf = 0;
  std::array<unsigned char, 16> md5{};
  std::array<unsigned char, 20> sha1{};
};

// The printed statistics of `sums` (hashes untouched): max/min/avg/l2norm are NaN when any
// element is NaN; avg of inf and -inf is NaN.
void statsFromSums(const StatSums& sums, TensorStats& out);

struct StatOptions {
  bool values = true;  // everything but the hashes
  // Whose chunking avg and l2norm follow (storage/format/chunk_sums.h).
  config::MsFormat format = config::kDefaultMsFormat;
  bool md5 = false;
  bool sha1 = false;
};

// complex64/complex128 have no statistics row.
bool hasStatistics(DType dtype);

// Fills `out` for `elements` elements of `data`, each converted to double (bool as 0/1,
// bfloat16/float16/int4 decoded); avg and l2norm as options.format's MindSpore computes
// them. Hashes are over the raw bytes of `data`.
// REQUIRES: hasStatistics(dtype), data.size() == sourceBytes(dtype, elements).
void computeStats(DType dtype, uint64_t elements, ConstBuffer data, const StatOptions& options,
                  TensorStats& out);

// True when a floating (or complex) tensor holds an inf or NaN; false for integer types.
// The overflow check of op_debug_mode 3. Stops at the first chunk that holds one.
bool containsNonFinite(DType dtype, ConstBuffer data);

// Lower-case hex of a digest.
void appendHex(std::string& out, std::span<const unsigned char> bytes);

}  // namespace dumpd::storage
