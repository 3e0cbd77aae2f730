// The reference of bench/node_bench.py: one process writing files the way a training process
// that dumps for itself would, with the per-file work of dumpd's writer (create a temporary
// name, write a header and the payload, close, rename), and nothing else.
//
//   raw_writer DIR FILE_BYTES COUNT FILES_PER_DIR
//
// Prepares its buffer, prints "ready", waits for one line on stdin (the start signal shared
// by every process of a run), writes COUNT files into DIR/<n / FILES_PER_DIR>/, and prints
// "<start_ns> <end_ns>" (CLOCK_MONOTONIC, comparable across the run's processes).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr size_t kHeaderBytes = 128;  // an npy header of a small shape, as dumpd writes

uint64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "raw_writer: %s: %s\n", what.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: raw_writer DIR FILE_BYTES COUNT FILES_PER_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const uint64_t count = std::strtoull(argv[3], nullptr, 10);
  const uint64_t per_dir = std::max<uint64_t>(1, std::strtoull(argv[4], nullptr, 10));
  std::vector<char> payload(bytes, 7);  // touched: no page faults in the timed loop
  std::vector<char> header(kHeaderBytes, ' ');
  for (uint64_t d = 0; d * per_dir < count; ++d) {
    const std::string sub = dir + "/" + std::to_string(d);
    if (mkdir(sub.c_str(), 0750) != 0 && errno != EEXIST) return fail("mkdir " + sub);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char go[16];
  if (std::fgets(go, sizeof go, stdin) == nullptr) return fail("no start signal");
  const uint64_t start = nowNs();
  for (uint64_t i = 0; i < count; ++i) {
    const std::string base = dir + "/" + std::to_string(i / per_dir) + "/Op.t" + std::to_string(i);
    const std::string tmp = base + ".tmp";
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return fail("open " + tmp);
    if (!writeAll(fd, header.data(), header.size()) ||
        !writeAll(fd, payload.data(), payload.size())) {
      return fail("write " + tmp);
    }
    if (close(fd) != 0) return fail("close " + tmp);
    if (rename(tmp.c_str(), (base + ".npy").c_str()) != 0) return fail("rename " + tmp);
  }
  const uint64_t end = nowNs();
  std::printf("%llu %llu\n", static_cast<unsigned long long>(start),
              static_cast<unsigned long long>(end));
  return 0;
}
