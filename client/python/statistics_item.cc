#include "client/python/statistics_item.h"

#include <cmath>
#include <utility>

#include "base/element_count.h"

namespace dumpd::python {

StatisticsItem makeStatisticsItem(std::vector<int64_t> shape, const std::string& dtype,
                                  const std::vector<double>& values) {
  StatisticsItem s;
  const std::optional<DType> t = dtypeFromName(dtype);
  if (!t) throw py::value_error("Statistics: unknown dtype \"" + dtype + "\"");
  if (*t == DType::kComplex64 || *t == DType::kComplex128) {
    throw py::value_error("Statistics: " + dtype + " tensors have no statistics row");
  }
  const auto elements = elementCount(shape);
  if (!elements) {
    throw py::value_error("Statistics: a dimension is negative or the shape is too large");
  }
  if (values.size() != 10) {
    throw py::value_error("Statistics: values holds " + std::to_string(values.size()) +
                          " numbers, not the 10 of (" + kStatisticsFields + ")");
  }
  uint64_t* counts[] = {&s.stats.nan,  &s.stats.negative_inf, &s.stats.positive_inf,
                        &s.stats.zero, &s.stats.negative,     &s.stats.positive};
  for (size_t i = 0; i < 6; ++i) {
    const double v = values[i];
    if (!(v >= 0) || v > static_cast<double>(*elements) || std::floor(v) != v) {
      throw py::value_error("Statistics: count " + std::to_string(i) + " of (" + kStatisticsFields +
                            ") is " + std::to_string(v) + ", not a whole number from 0 to the " +
                            std::to_string(*elements) + " elements of the shape");
    }
    *counts[i] = static_cast<uint64_t>(v);
  }
  s.stats.count = *elements;
  s.stats.max = values[6];
  s.stats.min = values[7];
  s.stats.sum = values[8];
  s.stats.sum_squares = values[9];
  s.stats.flags = 0;
  s.shape = std::move(shape);
  s.dtype = *t;
  return s;
}

}  // namespace dumpd::python
