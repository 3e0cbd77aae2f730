// dumpd_client_bench: client critical path and end-to-end figures against a running dumpd,
// each with its reference measured in the same run. Prints one JSON object per line.
//
//   dumpd_client_bench --socket S --dir D [--quick]
//
// D must be on the file system under test (tmpfs or disk); the job dumps into D/dump.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string jobConfig(const std::string& path, const std::string& net) {
  return R"({"common_dump_settings": {"dump_mode": 0, "path": ")" + path + R"(", "net_name": ")" +
         net +
         R"(", "iteration": "all", "saved_data": "tensor", "input_output": 0, "kernels": [],
         "support_device": [0]}})";
}

// One op with one uint8 tensor of `bytes` bytes, filled with `fill`: what every bench dumps.
struct OneTensorOp {
  OneTensorOp(const char* op_type, uint64_t bytes, char fill)
      : src(bytes, fill), shape{static_cast<int64_t>(bytes)} {
    tensor.dtype = dumpd::DType::kUInt8;
    tensor.shape = shape;
    tensor.data = src.data();
    tensor.bytes = bytes;
    call.op_type = op_type;
    call.tensors = std::span<const dumpd::client::Tensor>(&tensor, 1);
  }
  OneTensorOp(const OneTensorOp&) = delete;
  OneTensorOp& operator=(const OneTensorOp&) = delete;

  std::vector<char> src;
  int64_t shape[1];
  dumpd::client::Tensor tensor;
  dumpd::client::OpCall call;
};

struct Bench {
  std::string socket;
  std::string dir;
  bool quick = false;
  int rank = 0;

  std::unique_ptr<dumpd::client::Client> connect(const std::string& net, uint64_t ring) {
    dumpd::client::Options o;
    o.socket_path = socket;
    o.config_text = jobConfig(dir + "/dump", net);
    o.rank = static_cast<uint32_t>(rank++);
    o.ring_bytes = ring;
    o.backpressure = dumpd::ipc::Backpressure::kBlock;
    auto c = dumpd::client::Client::connect(o);
    if (!c) {
      std::cerr << "connect: " << c.error().message << "\n";
      std::exit(1);
    }
    return std::move(c.value());
  }

  // Time inside dumpOp only, bursts that fit the ring (the producer's cost).
  void criticalPath(uint64_t size) {
    const uint64_t ring = 512ull << 20;
    auto c = connect("Crit" + std::to_string(size), ring);
    OneTensorOp op("Copy", size, 7);
    std::vector<char>& src = op.src;
    dumpd::client::OpCall& call = op.call;
    const uint64_t per_burst = std::max<uint64_t>(1, (ring / 2) / (size + 4096));
    // The reference copies the same bytes into a pre-faulted buffer as large as the burst:
    // the same cold-destination traffic as the ring, without dumpd.
    std::vector<char> dst(per_burst * size);
    std::memset(dst.data(), 0, dst.size());
    const int bursts = quick ? 2 : 5;
    std::string name;
    double dump_s = 0, memcpy_s = 0;
    uint64_t n = 0;
    for (int b = 0; b < bursts; ++b) {
      (void)c->setStep(static_cast<uint32_t>(b));
      auto t0 = Clock::now();
      for (uint64_t i = 0; i < per_burst; ++i) {
        name = "Default/op-op" + std::to_string(i);
        call.op_name = name;
        if (!c->dumpOp(call)) std::exit(1);
      }
      dump_s += seconds(Clock::now() - t0);
      n += per_burst;
      (void)c->flush(-1);  // drain before the next burst (not timed)
      t0 = Clock::now();
      for (uint64_t i = 0; i < per_burst; ++i) {
        src[i % size] = static_cast<char>(i);
        std::memcpy(dst.data() + i * size, src.data(), size);
        asm volatile("" : : "r"(dst.data()) : "memory");
      }
      memcpy_s += seconds(Clock::now() - t0);
    }
    std::cout << R"({"bench":"critical_path","lang":"cpp","size":)" << size
              << R"(,"dump_bytes_per_s":)" << static_cast<double>(n * size) / dump_s
              << R"(,"memcpy_bytes_per_s":)" << static_cast<double>(n * size) / memcpy_s << "}\n";
    (void)c->close();
  }

  void smallRecords() {
    auto c = connect("Small", 512ull << 20);
    const uint64_t count = quick ? 100000 : 400000;
    OneTensorOp op("Tiny", 256, 1);
    op.call.op_name = "Default/tiny-op0";
    dumpd::client::Tensor& t = op.tensor;
    const dumpd::client::OpCall& call = op.call;
    (void)c->setStep(0);
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      t.slot = static_cast<uint32_t>(i);  // distinct file names
      if (!c->dumpOp(call)) std::exit(1);
    }
    const double s = seconds(Clock::now() - t0);
    std::cout << R"({"bench":"small_records","records":)" << count << R"(,"records_per_s":)"
              << static_cast<double>(count) / s << "}\n";
    (void)c->flush(-1);
    (void)c->close();
  }

  // Client to files, sustained, against a raw sequential write of the same bytes.
  void sustained(const std::string& label) {
    const uint64_t size = 16ull << 20;
    const uint64_t count = quick ? 32 : 96;
    auto c = connect("Sustained", 256ull << 20);
    OneTensorOp op("Big", size, 3);
    const std::vector<char>& src = op.src;
    dumpd::client::OpCall& call = op.call;
    std::string name;
    (void)c->setStep(0);
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      name = "Default/big-op" + std::to_string(i);
      call.op_name = name;
      if (!c->dumpOp(call)) std::exit(1);
    }
    auto f = c->flush(-1);
    const double dumpd_s = seconds(Clock::now() - t0);
    (void)c->close();
    // Reference: one file, sequential writes of the same chunks, buffered, closed.
    const std::string raw = dir + "/raw.bin";
    t0 = Clock::now();
    int fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    for (uint64_t i = 0; i < count; ++i) {
      if (::write(fd, src.data(), size) != static_cast<ssize_t>(size)) std::exit(1);
    }
    ::close(fd);
    const double raw_s = seconds(Clock::now() - t0);
    ::unlink(raw.c_str());
    const double bytes = static_cast<double>(count * size);
    std::cout << R"({"bench":"sustained","fs":")" << label << R"(","bytes":)" << bytes
              << R"(,"dumpd_bytes_per_s":)" << bytes / dumpd_s << R"(,"raw_bytes_per_s":)"
              << bytes / raw_s << R"(,"written":)" << (f ? f->tensors_written : 0) << "}\n";
  }

  // Many small files against a raw create+write+close loop of the same sizes.
  void files(const std::string& label) {
    const uint64_t count = quick ? 5000 : 20000;
    const uint64_t size = 4096;
    auto c = connect("Files", 256ull << 20);
    OneTensorOp op("F", size, 5);
    op.call.op_name = "Default/f-op0";
    const std::vector<char>& src = op.src;
    dumpd::client::Tensor& t = op.tensor;
    const dumpd::client::OpCall& call = op.call;
    (void)c->setStep(0);
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      t.slot = static_cast<uint32_t>(i);
      if (!c->dumpOp(call)) std::exit(1);
    }
    (void)c->flush(-1);
    const double dumpd_s = seconds(Clock::now() - t0);
    (void)c->close();
    const std::string raw = dir + "/rawfiles";
    fs::create_directories(raw);
    // Names of the same length as dumpd's, so directory costs compare.
    const std::string stem = raw + "/F.Default_f-op0.0.0.1700000000000000.output.";
    t0 = Clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      const std::string p = stem + std::to_string(i) + ".DefaultFormat.uint8.npy";
      int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::write(fd, src.data(), size + 0) != static_cast<ssize_t>(size)) std::exit(1);
      ::close(fd);
    }
    const double raw_s = seconds(Clock::now() - t0);
    fs::remove_all(raw);
    std::cout << R"({"bench":"files","fs":")" << label << R"(","files":)" << count
              << R"(,"dumpd_files_per_s":)" << static_cast<double>(count) / dumpd_s
              << R"(,"raw_files_per_s":)" << static_cast<double>(count) / raw_s << "}\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  std::string label = "fs";
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--socket" && i + 1 < argc)
      b.socket = argv[++i];
    else if (a == "--dir" && i + 1 < argc)
      b.dir = argv[++i];
    else if (a == "--label" && i + 1 < argc)
      label = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--quick")
      b.quick = true;
    else {
      std::cerr << "usage: dumpd_client_bench --socket S --dir D [--label L] [--only "
                   "critical|small|sustained|files] [--quick]\n";
      return 2;
    }
  }
  if (b.socket.empty() || b.dir.empty()) return 2;
  fs::create_directories(b.dir);
  if (only.empty() || only == "critical") {
    for (uint64_t s : {4ull << 10, 64ull << 10, 1ull << 20, 16ull << 20}) b.criticalPath(s);
  }
  if (only.empty() || only == "small") b.smallRecords();
  if (only.empty() || only == "sustained") b.sustained(label);
  if (only.empty() || only == "files") b.files(label);
  return 0;
}
