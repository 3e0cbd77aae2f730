#include "tools/compare_metrics.h"

#include <gtest/gtest.h>
#include <lz4frame.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "storage/format/npy.h"

namespace dumpd::tools {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The definitions of shared/spec/compare.md written the plain way (two-pass mean/std, one log
// per element), over the elements both finite.
PairMetrics reference(const std::vector<double>& xs, const std::vector<double>& ys) {
  std::vector<double> x, y;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isfinite(xs[i]) && std::isfinite(ys[i])) {
      x.push_back(xs[i]);
      y.push_back(ys[i]);
    }
  }
  const double n = static_cast<double>(x.size());
  double xy = 0, xx = 0, yy = 0, ad = 0, sd = 0, ay = 0, mad = 0, mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += x[i] * y[i];
    xx += x[i] * x[i];
    yy += y[i] * y[i];
    ad += std::fabs(x[i] - y[i]);
    sd += (x[i] - y[i]) * (x[i] - y[i]);
    ay += std::fabs(y[i]);
    mad = std::max(mad, std::fabs(x[i] - y[i]));
    mx += x[i] / n;
    my += y[i] / n;
  }
  double vx = 0, vy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    vx += (x[i] - mx) * (x[i] - mx) / n;
    vy += (y[i] - my) * (y[i] - my) / n;
  }
  auto normalise = [](const std::vector<double>& v) {
    const double lo = *std::min_element(v.begin(), v.end());
    const double hi = *std::max_element(v.begin(), v.end());
    std::vector<double> a(v.size());
    double sum = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      a[i] = std::max(hi > lo ? (v[i] - lo) / (hi - lo) : 1.0, kKlEpsilon);
      sum += a[i];
    }
    for (double& e : a) e /= sum;
    return a;
  };
  const auto p = normalise(x), q = normalise(y);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += p[i] * std::log(p[i] / q[i]);
  PairMetrics m;
  m.cosine = xy / std::sqrt(xx * yy);
  m.max_absolute_error = mad;
  m.accumulated_relative_error = ad / ay;
  m.relative_euclidean = std::sqrt(sd) / std::sqrt(yy);
  m.kl_divergence = kl;
  m.left_mean = mx;
  m.left_std = std::sqrt(vx);
  m.right_mean = my;
  m.right_std = std::sqrt(vy);
  m.mean_absolute_error = ad / n;
  m.root_mean_square_error = std::sqrt(sd / n);
  return m;
}

TensorData viewOf(const std::vector<double>& v) {
  return TensorData::view(DType::kFloat64, std::as_bytes(std::span(v)), v.size());
}

PairMetrics metricsOf(const std::vector<double>& x, const std::vector<double>& y,
                      PairSums* sums = nullptr) {
  return comparePair(viewOf(x), viewOf(y), sums);
}

void expectNear(double got, double want, const char* what, double abs_tol = 0) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << " = " << got;
    return;
  }
  EXPECT_NEAR(got, want, 1e-10 * std::fabs(want) + abs_tol) << what;
}

void expectMetrics(const PairMetrics& got, const PairMetrics& want) {
  expectNear(got.cosine, want.cosine, "cosine");
  expectNear(got.max_absolute_error, want.max_absolute_error, "max abs");
  expectNear(got.accumulated_relative_error, want.accumulated_relative_error, "acc rel");
  expectNear(got.relative_euclidean, want.relative_euclidean, "rel euclid");
  expectNear(got.kl_divergence, want.kl_divergence, "kl", 1e-15);
  expectNear(got.left_mean, want.left_mean, "left mean", 1e-15);
  expectNear(got.left_std, want.left_std, "left std", 1e-14);
  expectNear(got.right_mean, want.right_mean, "right mean", 1e-15);
  expectNear(got.right_std, want.right_std, "right std", 1e-14);
  expectNear(got.mean_absolute_error, want.mean_absolute_error, "mae");
  expectNear(got.root_mean_square_error, want.root_mean_square_error, "rmse");
}

std::vector<double> normal(size_t n, double mean, double sd, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> v(n);
  for (double& e : v) e = d(g);
  return v;
}

void checkAgainstReference() {
  for (size_t n : {1, 2, 3, 5, 7, 1023, 1024, 1025, 4099, 20000}) {
    auto x = normal(n, 0.5, 2, static_cast<uint32_t>(n));
    auto y = x;
    auto noise = normal(n, 0, 0.1, 99);
    for (size_t i = 0; i < n; ++i) y[i] += noise[i];
    SCOPED_TRACE(n);
    expectMetrics(metricsOf(x, y), reference(x, y));
  }
  auto x = normal(3000, 0, 1, 10), y = normal(3000, 0, 1, 11);
  x[10] = kNaN;
  y[2000] = kInf;
  x[2001] = y[2001] = -kInf;
  expectMetrics(metricsOf(x, y), reference(x, y));
}

TEST(CompareMetrics, MatchReferenceDefinitionsAtEverySizeAroundBlockAndLaneEdges) {
  checkAgainstReference();
}

TEST(CompareMetrics, BaselineKernelsMatchReferenceToo) {
  useBaselineKernels(true);
  checkAgainstReference();
  useBaselineKernels(false);
}

TEST(CompareMetrics, IdenticalSidesGiveCosineExactlyOneAndZeroErrors) {
  auto x = normal(5000, 1, 3, 1);
  PairMetrics m = metricsOf(x, x);
  EXPECT_EQ(m.cosine, 1.0);
  EXPECT_EQ(m.max_absolute_error, 0.0);
  EXPECT_EQ(m.accumulated_relative_error, 0.0);
  EXPECT_EQ(m.relative_euclidean, 0.0);
  EXPECT_NEAR(m.kl_divergence, 0.0, 1e-15);
  EXPECT_EQ(m.left_mean, m.right_mean);
}

TEST(CompareMetrics, ScaledSideKeepsCosineAndGivesRelativeEuclideanHalf) {
  auto x = normal(3000, 0, 1, 2);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = 2 * x[i];
  PairMetrics m = metricsOf(x, y);
  EXPECT_NEAR(m.cosine, 1.0, 1e-15);
  EXPECT_NEAR(m.relative_euclidean, 0.5, 1e-15);
  EXPECT_NEAR(m.accumulated_relative_error, 0.5, 1e-15);
  EXPECT_NEAR(m.kl_divergence, 0.0, 1e-15);  // min-max normalisation removes the scale
}

TEST(CompareMetrics, StdIsPopulationStdAndSurvivesALargeMean) {
  // Mean 1e3, std 1e-3 (as far apart as float32 data can be): sum x^2 / n - mean^2 would keep
  // about four digits.
  auto x = normal(10000, 1e3, 1e-3, 3);
  auto y = normal(10000, 1e3, 1e-3, 4);
  PairMetrics want = reference(x, y);
  PairMetrics m = metricsOf(x, y);
  EXPECT_NEAR(m.left_std, want.left_std, 1e-9 * want.left_std);
  EXPECT_NEAR(m.right_std, want.right_std, 1e-9 * want.right_std);
}

TEST(CompareMetrics, RangesMergedInAnyGroupingEqualOnePass) {
  auto x = normal(10000, 0, 1, 5), y = normal(10000, 0.1, 1, 6);
  TensorData tx = viewOf(x), ty = viewOf(y);
  PairSums whole = sumPairs(tx, ty, 0, 10000);
  PairSums parts;
  for (uint64_t b : {0, 3001, 3002, 7777}) {
    const uint64_t e = b == 0 ? 3001 : b == 3001 ? 3002 : b == 3002 ? 7777 : 10000;
    parts.merge(sumPairs(tx, ty, b, e));
  }
  KlScale scale = klScale(whole);
  KlSums kl_whole = sumKl(scale, tx, ty, 0, 10000);
  KlSums kl_parts = sumKl(scale, tx, ty, 0, 4000);
  kl_parts.merge(sumKl(scale, tx, ty, 4000, 10000));
  expectMetrics(finishMetrics(parts, scale, kl_parts), finishMetrics(whole, scale, kl_whole));
  expectMetrics(finishMetrics(whole, scale, kl_whole), reference(x, y));
}

TEST(CompareMetrics, AllZeroSideGivesNaNCosineAndKl) {
  std::vector<double> zeros(100, 0.0);
  auto y = normal(100, 0, 1, 7);
  PairMetrics both = metricsOf(zeros, zeros);
  EXPECT_TRUE(std::isnan(both.cosine));
  EXPECT_TRUE(std::isnan(both.kl_divergence));
  EXPECT_TRUE(std::isnan(both.relative_euclidean));  // 0 / 0
  EXPECT_EQ(both.max_absolute_error, 0.0);
  PairMetrics left = metricsOf(zeros, y);
  EXPECT_TRUE(std::isnan(left.cosine));
  EXPECT_TRUE(std::isnan(left.kl_divergence));
  EXPECT_DOUBLE_EQ(left.relative_euclidean, 1.0);
  PairMetrics right = metricsOf(y, zeros);
  EXPECT_EQ(right.relative_euclidean, kInf);
}

TEST(CompareMetrics, ConstantNonZeroSideNormalisesToOnes) {
  std::vector<double> constant(50, 3.0);
  auto y = normal(50, 0, 1, 8);
  expectMetrics(metricsOf(constant, y), reference(constant, y));
  EXPECT_GT(metricsOf(constant, y).kl_divergence, 0.0);
}

TEST(CompareMetrics, NonFiniteAtTheSamePlacesAreLeftOutAndEqual) {
  auto x = normal(2000, 0, 1, 9);
  auto y = x;
  for (size_t i : {5, 1500}) x[i] = y[i] = kNaN;
  x[700] = y[700] = kInf;
  x[701] = y[701] = -kInf;
  PairSums sums;
  PairMetrics m = metricsOf(x, y, &sums);
  EXPECT_EQ(sums.counted, 1996u);
  EXPECT_EQ(sums.nonfinite_equal, 4u);
  EXPECT_EQ(sums.nonfinite_differ, 0u);
  EXPECT_EQ(m.cosine, 1.0);
  EXPECT_EQ(m.max_absolute_error, 0.0);
  EXPECT_EQ(tensorFailure(m, sums, Thresholds{}), "");
}

TEST(CompareMetrics, NonFiniteAtDifferentPlacesFailAndTheRestIsMeasured) {
  auto x = normal(3000, 0, 1, 10);
  auto y = normal(3000, 0, 1, 11);
  x[10] = kNaN;    // one side only
  y[2000] = kInf;  // one side only
  x[2500] = kInf;  // +inf against -inf
  y[2500] = -kInf;
  PairSums sums;
  PairMetrics m = metricsOf(x, y, &sums);
  EXPECT_EQ(sums.nonfinite_differ, 3u);
  EXPECT_EQ(sums.counted, 2997u);
  expectMetrics(m, reference(x, y));
  EXPECT_NE(tensorFailure(m, sums, Thresholds{}).find("3 elements differ in nan/inf"),
            std::string::npos);
}

TEST(CompareMetrics, EmptyOrAllExcludedGivesNaNEverywhere) {
  std::vector<double> nans(10, kNaN);
  PairMetrics m = metricsOf(nans, nans);
  for (double v : {m.cosine, m.max_absolute_error, m.relative_euclidean, m.kl_divergence,
                   m.left_mean, m.mean_absolute_error}) {
    EXPECT_TRUE(std::isnan(v));
  }
}

TEST(CompareMetrics, FailureNamesEachMetricOnTheWrongSide) {
  PairMetrics m = nanMetrics();
  m.cosine = 0.95;
  m.relative_euclidean = 0.5;
  m.kl_divergence = 0.001;
  EXPECT_EQ(tensorFailure(m, PairSums{}, Thresholds{}),
            "cosine 0.95 < 0.99, relative euclidean 0.5 > 0.05");
  Thresholds loose;
  loose.min_cosine = 0.9;
  loose.max_relative_euclidean = 1;
  EXPECT_EQ(tensorFailure(m, PairSums{}, loose), "");
}

TEST(CompareMetrics, VectorLogIsWithinTwoUlpOfStdLog) {
  std::mt19937_64 g(12);
  std::uniform_real_distribution<double> exponent(-23.1, 23.1);  // 1e-10 .. 1e10
  for (int i = 0; i < 200000; ++i) {
    const double x = std::exp(exponent(g));
    const double want = std::log(x);
    const double ulp = std::fabs(std::nextafter(want, kInf) - want);
    ASSERT_LE(std::fabs(vectorLog(x) - want), 2 * ulp) << x;
  }
  EXPECT_EQ(vectorLog(1.0), 0.0);
}

TEST(TensorDataDecode, EveryDtypeDecodesToItsValue) {
  // float16 1.5 = 0x3e00, -2 = 0xc000; bfloat16 1.5 = 0x3fc0, -2 = 0xc000.
  const uint16_t halves[] = {0x3e00, 0xc000};
  const uint16_t bf16[] = {0x3fc0, 0xc000};
  const uint8_t int4[] = {0x7f, 0x08};  // 0xf=-1, 7, then 8=-8, 0
  const bool bools[] = {true, false};
  const int64_t i64[] = {-5, 1LL << 40};
  const std::complex<float> c64[] = {{1, -2}, {3.5f, 4}};
  double out[4];
  TensorData::view(DType::kFloat16, std::as_bytes(std::span(halves)), 2).decode(0, 2, out);
  EXPECT_EQ(out[0], 1.5);
  EXPECT_EQ(out[1], -2.0);
  TensorData::view(DType::kBFloat16, std::as_bytes(std::span(bf16)), 2).decode(0, 2, out);
  EXPECT_EQ(out[0], 1.5);
  EXPECT_EQ(out[1], -2.0);
  TensorData packed = TensorData::view(DType::kInt4, std::as_bytes(std::span(int4)), 4);
  packed.decode(0, 4, out);
  EXPECT_EQ(std::vector<double>(out, out + 4), (std::vector<double>{-1, 7, -8, 0}));
  packed.decode(1, 2, out);  // an odd start
  EXPECT_EQ(std::vector<double>(out, out + 2), (std::vector<double>{7, -8}));
  TensorData::view(DType::kBool, std::as_bytes(std::span(bools)), 2).decode(0, 2, out);
  EXPECT_EQ(out[0], 1.0);
  EXPECT_EQ(out[1], 0.0);
  TensorData::view(DType::kInt64, std::as_bytes(std::span(i64)), 2).decode(0, 2, out);
  EXPECT_EQ(out[0], -5.0);
  EXPECT_EQ(out[1], 1099511627776.0);
  TensorData complex = TensorData::view(DType::kComplex64, std::as_bytes(std::span(c64)), 2);
  EXPECT_EQ(complex.values(), 4u);
  complex.decode(0, 4, out);
  EXPECT_EQ(std::vector<double>(out, out + 4), (std::vector<double>{1, -2, 3.5, 4}));
}

// A file under the test's temp dir, removed at the end.
struct TempFile {
  explicit TempFile(const std::string& bytes)
      : path((std::filesystem::temp_directory_path() /
              ("tensor_data_test." + std::to_string(::getpid()) + "." + std::to_string(++count)))
                 .string()) {
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
  static inline int count = 0;
};

std::string npyFile(const std::vector<float>& v) {
  std::string out;
  const int64_t shape[] = {static_cast<int64_t>(v.size())};
  storage::buildNpyHeader(out, DType::kFloat32, shape);
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return out;
}

std::string lz4Frame(const std::string& raw, bool content_size) {
  LZ4F_preferences_t prefs{};
  prefs.frameInfo.contentSize = content_size ? raw.size() : 0;
  std::string out(LZ4F_compressFrameBound(raw.size(), &prefs), '\0');
  out.resize(LZ4F_compressFrame(out.data(), out.size(), raw.data(), raw.size(), &prefs));
  return out;
}

std::vector<double> decodeAll(const TensorData& t) {
  std::vector<double> out(t.values());
  for (uint64_t at = 0; at < t.values(); at += 1000) {
    t.decode(at, static_cast<size_t>(std::min<uint64_t>(1000, t.values() - at)), out.data() + at);
  }
  return out;
}

TEST(TensorDataOpen, ReadsNpyAndLz4FramesWithOrWithoutContentSize) {
  std::vector<float> v(300000, 0.0f);  // compresses far beyond 4:1
  v[0] = 1.5f;
  v[299999] = -2.0f;
  const std::string raw = npyFile(v);
  TempFile plain(raw), sized(lz4Frame(raw, true)), unsized(lz4Frame(raw, false));
  auto a = TensorData::open(TensorFileKind::kNpy, plain.path);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->bytesRead(), raw.size());
  for (const TempFile* f : {&sized, &unsized}) {
    auto t = TensorData::open(TensorFileKind::kNpyLz4, f->path);
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_EQ(t->elements(), v.size());
    EXPECT_LT(t->bytesRead(), raw.size() / 4);  // the compressed size
    std::vector<double> got = decodeAll(*t);
    EXPECT_EQ(got[0], 1.5);
    EXPECT_EQ(got[299999], -2.0);
    EXPECT_EQ(got, decodeAll(*a));
  }
}

TEST(TensorDataOpen, BinSliceAndErrorsNamingTheFile) {
  const uint16_t bf16[] = {0x3fc0, 0xc000};
  std::string file = "headerXX";
  file.append(reinterpret_cast<const char*>(bf16), 4);
  TempFile f(file);
  auto t = TensorData::open(TensorFileKind::kBin, f.path, DType::kBFloat16, 2, 8, 4);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(decodeAll(*t), (std::vector<double>{1.5, -2.0}));
  auto past = TensorData::open(TensorFileKind::kBin, f.path, DType::kBFloat16, 2, 10, 4);
  ASSERT_FALSE(past);
  EXPECT_NE(past.error().message.find(f.path), std::string::npos);
  auto small = TensorData::open(TensorFileKind::kBin, f.path, DType::kFloat32, 2, 8, 4);
  EXPECT_FALSE(small);
  std::string cut = npyFile({1, 2, 3});
  cut.resize(cut.size() - 1);
  TempFile truncated(cut), garbage(lz4Frame("x", true).substr(0, 5));
  auto tr = TensorData::open(TensorFileKind::kNpy, truncated.path);
  ASSERT_FALSE(tr);
  EXPECT_NE(tr.error().message.find("truncated"), std::string::npos);
  EXPECT_FALSE(TensorData::open(TensorFileKind::kNpyLz4, garbage.path));
  EXPECT_FALSE(TensorData::open(TensorFileKind::kNpy, "/nonexistent/x.npy"));
}

TEST(NpyHeaderParse, ReadsNumpyAndMindSporeForms) {
  std::string header;
  const int64_t shape[] = {2, 3};
  storage::buildNpyHeader(header, DType::kFloat16, shape);  // "(2,3,)"
  auto h = parseNpyHeader(std::as_bytes(std::span(header)), "a.npy");
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(h->dtype, DType::kFloat16);
  EXPECT_EQ(h->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->data_offset, header.size());
  std::string numpy = std::string("\x93NUMPY\x01\x00", 8);
  std::string dict = "{'descr': '|b1', 'fortran_order': False, 'shape': (4, 5), }";
  dict.append(118 - 10 - dict.size(), ' ');
  dict.push_back('\n');
  numpy.push_back(static_cast<char>(dict.size()));
  numpy.push_back(0);
  numpy += dict;
  auto b = parseNpyHeader(std::as_bytes(std::span(numpy)), "b.npy");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->dtype, DType::kBool);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{4, 5}));
}

TEST(NpyHeaderParse, RejectsFortranOrderBigEndianAndTruncationNamingTheFile) {
  auto make = [](std::string dict) {
    std::string s = std::string("\x93NUMPY\x01\x00", 8);
    s.push_back(static_cast<char>(dict.size()));
    s.push_back(0);
    return s + dict;
  };
  for (std::string dict : {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n",
                           "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n",
                           "{'descr': '<U8', 'fortran_order': False, 'shape': (2,), }\n"}) {
    std::string file = make(dict);
    auto h = parseNpyHeader(std::as_bytes(std::span(file)), "bad.npy");
    ASSERT_FALSE(h) << dict;
    EXPECT_NE(h.error().message.find("bad.npy"), std::string::npos);
  }
  std::string cut = make("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n");
  cut.resize(30);
  EXPECT_FALSE(parseNpyHeader(std::as_bytes(std::span(cut)), "cut.npy"));
}

TEST(Statistics, ComputedAsStatisticCsvDefinesThem) {
  std::vector<double> v = {1, -2, 4};
  StatisticValues s = computeStatistics(viewOf(v));
  EXPECT_EQ(*s.max, 4);
  EXPECT_EQ(*s.min, -2);
  EXPECT_EQ(*s.avg, 1);
  EXPECT_DOUBLE_EQ(*s.l2norm, std::sqrt(21.0));
  v.push_back(kNaN);
  StatisticValues n = computeStatistics(viewOf(v));
  EXPECT_TRUE(std::isnan(*n.max) && std::isnan(*n.min) && std::isnan(*n.avg));
}

TEST(Statistics, ComparisonKeepsTheWorstColumnBothSidesHave) {
  StatisticValues l{10.0, -1.0, 2.0, std::nullopt};
  StatisticValues r{10.0, -1.1, 2.0, 5.0};
  StatisticPair p = compareStatistics(l, r);
  EXPECT_EQ(p.worst_column, "Min Value");
  EXPECT_NEAR(p.worst_relative, 0.1 / 1.1, 1e-15);
  EXPECT_TRUE(std::isnan(p.left_l2norm));
  EXPECT_EQ(p.right_l2norm, 5.0);
  EXPECT_EQ(statisticFailure(p, Thresholds{}), "Min Value relative difference 0.0909091 > 0.05");
  StatisticValues nan_l{kNaN, std::nullopt, std::nullopt, std::nullopt};
  StatisticValues nan_r{kNaN, std::nullopt, std::nullopt, std::nullopt};
  EXPECT_EQ(compareStatistics(nan_l, nan_r).worst_relative, 0.0);
  StatisticValues finite{1.0, std::nullopt, std::nullopt, std::nullopt};
  EXPECT_EQ(compareStatistics(nan_l, finite).worst_relative, kInf);
  EXPECT_TRUE(std::isnan(compareStatistics(StatisticValues{}, finite).worst_relative));
}

}  // namespace
}  // namespace dumpd::tools
