// Helpers shared by the storage tests: plans, temporary directories, tensors, a minimal .npy
// reader and a runner for the numpy checks (which need /usr/bin/python3, where numpy lives).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "config/dump_plan.h"
#include "storage/format/statistics.h"
#include "storage/fs/credentials.h"
#include "storage/writer/op_record.h"

namespace dumpd::storage {

// gtest prints Credentials readably ("uid 1234 gid 1234 groups []").
inline void PrintTo(const Credentials& c, std::ostream* os) { *os << describe(c); }

}  // namespace dumpd::storage

namespace dumpd::storage::testing {

// Tests of the writer's mechanics use the newer generation's rows (the full op name is in
// them); tests/storage/golden_test.cc covers both generations' text.
inline config::DumpPlan makePlan(config::SavedData saved = config::SavedData::kFull,
                                 config::MsFormat format = config::MsFormat::k27) {
  config::DumpPlan plan;
  plan.ms_format = format;
  plan.config_text =
      "{\n  \"common_dump_settings\": {\"dump_mode\": 0, \"path\": \"/tmp/x\", \"net_name\": "
      "\"Net\", \"iteration\": \"0\", \"saved_data\": \"full\", \"input_output\": 0, "
      "\"kernels\": [], \"support_device\": [0]}\n}\n";
  plan.path = "/tmp/x";
  plan.net_name = "Net";
  plan.iterations = config::IterationSet::all();
  plan.saved_data = saved;
  plan.statistic_category = {config::StatCategory::kMax, config::StatCategory::kMin,
                             config::StatCategory::kL2Norm};
  return plan;
}

// Every category computed from the values (all but the hashes), in MindSpore's order.
inline std::vector<config::StatCategory> valueCategories() {
  using config::StatCategory;
  return {StatCategory::kMax,
          StatCategory::kMin,
          StatCategory::kAvg,
          StatCategory::kCount,
          StatCategory::kNegativeZeroCount,
          StatCategory::kPositiveZeroCount,
          StatCategory::kNanCount,
          StatCategory::kNegativeInfCount,
          StatCategory::kPositiveInfCount,
          StatCategory::kZeroCount,
          StatCategory::kL2Norm};
}

// A tensor that owns its bytes and shape; view() borrows them.
struct OwnedTensor {
  Io io = Io::kOutput;
  uint32_t slot = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  std::string format = "DefaultFormat";
  uint64_t timestamp_us = 1700000000000000;

  TensorView view() const {
    TensorView v;
    v.io = io;
    v.slot = slot;
    v.dtype = dtype;
    v.shape = shape;
    v.format = format;
    v.timestamp_us = timestamp_us;
    v.data = bytes;
    return v;
  }
};

template <typename T>
OwnedTensor makeTensor(Io io, uint32_t slot, DType dtype, std::vector<int64_t> shape,
                       const std::vector<T>& values, uint64_t ts = 1700000000000000) {
  OwnedTensor t;
  t.io = io;
  t.slot = slot;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  t.timestamp_us = ts;
  return t;
}

inline OwnedTensor floatTensor(Io io, uint32_t slot, std::vector<int64_t> shape,
                               const std::vector<float>& values, uint64_t ts = 1700000000000000) {
  return makeTensor(io, slot, DType::kFloat32, std::move(shape), values, ts);
}

// computeStats over `values` (elements: all of them when 0).
template <typename T>
TensorStats statsOf(DType dtype, const std::vector<T>& values, uint64_t elements = 0,
                    StatOptions options = {}) {
  TensorStats s;
  if (elements == 0) elements = values.size();
  ConstBuffer data(reinterpret_cast<const std::byte*>(values.data()), values.size() * sizeof(T));
  computeStats(dtype, elements, data, options, s);
  return s;
}

// An OpRecord over owned tensors (keeps the views alive).
struct OwnedOp {
  uint32_t graph = 0;
  uint32_t iteration = 0;
  std::string op_type = "Add";
  std::string op_name = "Default/Add-op0";
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  std::vector<OwnedTensor> tensors;
  std::vector<TensorView> views;

  OpRecord record() {
    views.clear();
    for (const auto& t : tensors) views.push_back(t.view());
    OpRecord r;
    r.graph_id = graph;
    r.iteration = iteration;
    r.op_type = op_type;
    r.op_name = op_name;
    r.task_id = task_id;
    r.stream_id = stream_id;
    r.tensors = views;
    return r;
  }
};

// A fresh directory under the test temp dir, removed (recursively) at destruction.
class TempDir {
 public:
  TempDir() : TempDir(std::filesystem::temp_directory_path().string()) {}
  // Beneath `parent` (e.g. "/dev/shm" where many small files must be quick).
  explicit TempDir(const std::string& parent) {
    std::string tmpl = parent + "/dumpd-storage-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (p) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Regular files and symlinks beneath `root`, as root-relative paths, sorted.
inline std::vector<std::string> listFiles(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec)) {
      out.push_back(it->path().lexically_relative(root).string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs a command; returns its stdout and sets *status to its exit status.
inline std::string runCommand(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* f = ::popen(command.c_str(), "r");
  if (!f) {
    if (status) *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// /usr/bin/python3 runs tests/storage/npy_check.py with `args`.
inline std::string runNpyCheck(const std::string& args, int* status = nullptr) {
  return runCommand(std::string("/usr/bin/python3 ") + DUMPD_SOURCE_DIR +
                        "/tests/storage/npy_check.py " + args + " 2>&1",
                    status);
}

// What a minimal .npy parser finds in a file: enough to prove a file is whole.
struct NpyInfo {
  bool ok = false;
  std::string descr;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  size_t data_size = 0;
};

inline NpyInfo parseNpy(const std::string& bytes) {
  NpyInfo info;
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return info;
  size_t header_len, preamble;
  if (bytes[6] == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    preamble = 10;
  } else {
    if (bytes.size() < 12) return info;
    header_len = 0;
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    preamble = 12;
  }
  if (bytes.size() < preamble + header_len) return info;
  std::string header = bytes.substr(preamble, header_len);
  size_t d = header.find("'descr': '");
  if (d == std::string::npos) return info;
  info.descr = header.substr(d + 10, header.find('\'', d + 10) - d - 10);
  size_t s = header.find("'shape': (");
  if (s == std::string::npos) return info;
  std::string dims = header.substr(s + 10, header.find(')', s) - s - 10);
  std::stringstream ss(dims);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') != std::string::npos) info.shape.push_back(std::stoll(item));
  }
  size_t elements = 1;
  for (int64_t x : info.shape) elements *= static_cast<size_t>(x);
  size_t item_size = std::stoul(info.descr.substr(2));
  info.data_offset = preamble + header_len;
  info.data_size = bytes.size() - info.data_offset;
  info.ok = (preamble + header_len) % 64 == 0 && info.data_size == elements * item_size;
  return info;
}

}  // namespace dumpd::storage::testing
