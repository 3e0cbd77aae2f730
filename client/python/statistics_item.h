// dumpd.Statistics: a tensor's statistics computed where the tensor is (dumpd.torch computes
// them inside a compiled graph), given to dump_op in place of the tensor. Its shape and dtype
// name the tensor; the client sends the 96-byte row (client::Tensor::statistics).
// REQUIRES: the GIL is held.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "base/dtype.h"
#include "ipc/ring_format.h"

namespace dumpd::python {

namespace py = pybind11;

struct StatisticsItem {
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  ipc::StatsPayload stats{};
};

// The order of Statistics(values=...): counts (whole numbers), then max, min and the plain
// sums of the values and of their squares.
inline constexpr const char* kStatisticsFields =
    "nan, negative_inf, positive_inf, zero, negative, positive, max, min, sum, sum_squares";

// Statistics(shape, dtype, values) as Python calls it. ValueError naming the problem for an
// unknown or complex dtype, a negative dimension, a count of values other than 10, or a
// count that is not a whole number within the tensor's element count.
StatisticsItem makeStatisticsItem(std::vector<int64_t> shape, const std::string& dtype,
                                  const std::vector<double>& values);

}  // namespace dumpd::python
