// Google Benchmark micro-benchmarks of the hot paths: ring reserve/commit/consume, the kernel
// filter per lookup, statistics per GB, npy writing to tmpfs, the client's strided copy,
// replica fingerprints.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/fingerprint.h"
#include "client/finite_copy.h"
#include "client/strided_copy.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "ipc/shm_ring.h"
#include "storage/format/statistics.h"
#include "storage/fs/file_system.h"
#include "storage/writer/job_writer.h"

namespace {

using namespace dumpd;

// Producer and consumer in one thread: reserve, fill, commit, then consume and release.
void BM_RingRoundTrip(benchmark::State& state) {
  const uint64_t body = static_cast<uint64_t>(state.range(0));
  auto producer = ipc::RingProducer::create(64 << 20).value();
  auto consumer = ipc::RingConsumer::attach(UniqueFd(::dup(producer.memfd())),
                                            producer.mappedBytes(), 1ull << 30)
                      .value();
  // The source sits at a fixed page offset: a heap address would make memcpy's speed depend
  // on how it aliases the ring (4 KiB aliasing), which differs from build to build.
  std::vector<std::byte> storage(body + 8192, std::byte{1});
  std::byte* src =
      storage.data() + (4096 - reinterpret_cast<uintptr_t>(storage.data()) % 4096) + 2048;
  for (auto _ : state) {
    std::byte* p = producer.tryReserve(ipc::RecordKind::kOp, body);
    std::memcpy(p, src, body);
    producer.commit();
    // Drain what is committed: a wrap adds a pad record before the op record.
    for (auto r = consumer.next(); r.has_value() && r.value().has_value(); r = consumer.next()) {
      benchmark::DoNotOptimize(r.value()->body);
      if (consumer.release(r.value()->end)) consumer.wakeProducer();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_RingRoundTrip)->Arg(256)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);

config::DumpPlan kernelPlan() {
  config::DumpPlan plan;
  plan.dump_mode = config::DumpMode::kKernels;
  plan.iterations = config::IterationSet::all();
  plan.kernels = {"conv", "name-regex(Default/features.+)", "Default/fc-Linear/MatMul-op9"};
  plan.support_device = {0};
  return plan;
}

void BM_FilterCachedLookup(benchmark::State& state) {
  auto filter = config::Filter::create(kernelPlan()).value();
  std::vector<std::string> names;
  for (int i = 0; i < 200; ++i) {
    names.push_back("Default/network-Net/layer" + std::to_string(i % 20) + "-Block/Conv2D-op" +
                    std::to_string(i));
  }
  for (const auto& n : names) filter.opSelected(n);  // warm the cache, as step 2 onwards
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(filter.shouldDump(0, 5, names[i], Io::kOutput));
    i = (i + 1) % names.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_FilterCachedLookup);

// computeStats of `n` elements of `data` (`bytes` long) for as long as the benchmark runs.
void runStatistics(benchmark::State& state, DType dtype, const void* data, uint64_t n,
                   uint64_t bytes, const storage::StatOptions& opts) {
  storage::TensorStats out;
  const std::span<const std::byte> span(static_cast<const std::byte*>(data), bytes);
  for (auto _ : state) {
    storage::computeStats(dtype, n, span, opts, out);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_Statistics(benchmark::State& state) {
  const uint64_t n = 1 << 22;  // 16 MiB of float32
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& x : v) x = dist(rng);
  storage::StatOptions opts;
  opts.values = state.range(0) == 0 || state.range(0) == 3;
  opts.md5 = state.range(0) == 1;
  opts.sha1 = state.range(0) == 2;
  opts.format = state.range(0) == 3 ? config::MsFormat::k27 : config::MsFormat::k26;
  runStatistics(state, DType::kFloat32, v.data(), n, n * sizeof(float), opts);
  state.SetLabel(state.range(0) == 0   ? "max,min,avg,l2norm,counts ms_format 2.6"
                 : state.range(0) == 3 ? "max,min,avg,l2norm,counts ms_format 2.7"
                 : state.range(0) == 1 ? "md5"
                                       : "sha1");
}
BENCHMARK(BM_Statistics)->Arg(0)->Arg(3)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// Statistics of small float32 tensors (Arg: elements), "2.6" and "2.7": fewer than eight of
// MindSpore's chunks take the generic path, a chain of dependent adds per chunk.
void BM_SmallStatistics(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& x : v) x = dist(rng);
  storage::StatOptions opts;
  opts.format = state.range(1) == 26 ? config::MsFormat::k26 : config::MsFormat::k27;
  runStatistics(state, DType::kFloat32, v.data(), n, n * sizeof(float), opts);
}
BENCHMARK(BM_SmallStatistics)
    ->Args({4096, 26})
    ->Args({65536, 26})
    ->Args({4096, 27})
    ->Args({65536, 27});

void BM_BF16Statistics(benchmark::State& state) {
  // Arg 0: bfloat16, 1: float16; normal values, 2.6's chunking (the default).
  const uint64_t n = 1 << 22;
  std::vector<uint16_t> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (uint16_t& h : v) {
    const float f = dist(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    // float16: f's sign and mantissa bits with an exponent of 2^-5 .. 2^1.
    h = state.range(0) == 0
            ? static_cast<uint16_t>(bits >> 16)
            : static_cast<uint16_t>(((bits >> 16) & 0x8000) | ((10 + rng() % 7) << 10) |
                                    ((bits >> 13) & 0x3ff));
  }
  storage::StatOptions opts;
  const DType dtype = state.range(0) == 0 ? DType::kBFloat16 : DType::kFloat16;
  runStatistics(state, dtype, v.data(), n, n * 2, opts);
  state.SetLabel(state.range(0) == 0 ? "bfloat16" : "float16");
}
BENCHMARK(BM_BF16Statistics)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// JobWriter::writeOp of one tensor to tmpfs: names, temp file, header + payload, rename.
void BM_NpyWriteTmpfs(benchmark::State& state) {
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  const std::string root = "/dev/shm/dumpd-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(root);
  {
    config::DumpPlan plan;
    plan.path = root;
    plan.net_name = "Bench";
    plan.iterations = config::IterationSet::all();
    plan.support_device = {0};
    auto fs = storage::openPosixFileSystem(root).value();
    auto writer = storage::JobWriter::create(fs, plan, storage::JobOptions{}).value();
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    const int64_t shape[] = {static_cast<int64_t>(data.size())};
    storage::TensorView t;
    t.shape = shape;
    t.data = std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), bytes);
    storage::OpRecord op;
    op.op_type = "Conv2D";
    uint64_t i = 0;
    std::string name;
    for (auto _ : state) {
      name = "Default/net/Conv2D-op" + std::to_string(i++);
      op.op_name = name;
      t.timestamp_us = i;
      op.tensors = std::span<const storage::TensorView>(&t, 1);
      auto r = writer->writeOp(op);
      if (!r) state.SkipWithError(r.error().message.c_str());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  }
  std::filesystem::remove_all(root);
}
BENCHMARK(BM_NpyWriteTmpfs)->Arg(4096)->Arg(1 << 20)->Arg(16 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace

// A 16 MiB float32 tensor of shape (64, 64, 32, 32) into C order: Arg 0 is memcpy of the
// contiguous tensor (the reference), 1 its channels-last layout (a tiled transpose), 2 a
// slice of every other row (rows by memcpy), 3 a gather (every other element of the last
// dimension of a tensor twice as wide).
void BM_StridedCopy(benchmark::State& state) {
  const std::vector<int64_t> shape{64, 64, 32, 32};
  const size_t bytes = size_t{64} * 64 * 32 * 32 * 4;
  std::vector<int64_t> strides;
  size_t source = bytes;
  switch (state.range(0)) {
    case 1:  // NHWC storage
      strides = {64 * 32 * 32 * 4, 4, 32 * 64 * 4, 64 * 4};
      state.SetLabel("channels-last");
      break;
    case 2:  // [:, :, ::2, :] of (64, 64, 64, 32)
      strides = {64 * 64 * 32 * 4, 64 * 32 * 4, 2 * 32 * 4, 4};
      source = 2 * bytes;
      state.SetLabel("slice rows");
      break;
    case 3:  // [..., ::2] of (64, 64, 32, 64)
      strides = {64 * 32 * 64 * 4, 32 * 64 * 4, 64 * 4, 2 * 4};
      source = 2 * bytes;
      state.SetLabel("gather");
      break;
    default:
      state.SetLabel("memcpy (reference)");
  }
  std::vector<std::byte> src(source, std::byte{1});
  std::vector<std::byte> dst(bytes, std::byte{0});  // touched: no page faults in the loop
  for (auto _ : state) {
    if (strides.empty()) {
      std::memcpy(dst.data(), src.data(), bytes);
    } else {
      client::copyStrided(dst.data(), src.data(), shape, strides, 4);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_StridedCopy)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

// The client's copy of a 16 MiB float32 tensor into the ring (client/finite_copy.h): Arg 0
// memcpy (the reference), 1 the copy that also looks for NaN and inf, as dumpOp makes it;
// Arg 1 of 1 MiB (in cache) shows the check's own cost, Arg 1 of 16 MiB the memory-bound one.
void BM_FiniteCopy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(1)) << 20;
  std::vector<float> src(bytes / 4);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& x : src) x = dist(rng);
  std::vector<std::byte> dst(bytes, std::byte{0});
  const auto* from = reinterpret_cast<const std::byte*>(src.data());
  bool found = false;
  for (auto _ : state) {
    if (state.range(0) == 0) {
      std::memcpy(dst.data(), from, bytes);
    } else {
      found |= client::copyFindingNonFinite(dst.data(), from, bytes, DType::kFloat32);
    }
    benchmark::DoNotOptimize(dst.data());
  }
  benchmark::DoNotOptimize(found);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(state.range(0) == 0 ? "memcpy (reference)" : "copy + NaN/inf check");
}
BENCHMARK(BM_FiniteCopy)
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({0, 16})
    ->Args({1, 16})
    ->Unit(benchmark::kMillisecond);

// Replica fingerprints (base/fingerprint.h) of a 16 MiB tensor: Arg 0 is a plain read of the
// same bytes (a sum of 64-bit words: the read bandwidth the fingerprint is judged against),
// 1 the fingerprint with the CPU's best path, 2 the scalar rule.
void BM_Fingerprint(benchmark::State& state) {
  const size_t bytes = size_t{16} << 20;
  std::vector<std::byte> src(bytes);
  for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<std::byte>(i * 131);
  uint64_t out = 0;
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0: {
        uint64_t s = 0;
        for (size_t i = 0; i < bytes; i += 8) {
          uint64_t w;
          std::memcpy(&w, src.data() + i, 8);
          s += w;
        }
        out += s;
        break;
      }
      case 1:
        out += fingerprint(src);
        break;
      default:
        out += fingerprintSumScalar(src);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetLabel(state.range(0) == 0   ? "read (reference)"
                 : state.range(0) == 1 ? "fingerprint"
                                       : "fingerprint, scalar");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Fingerprint)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
