#include "storage/writer/metadata_files.h"

#include <nlohmann/json.hpp>

#include "storage/format/names.h"
#include "storage/writer/tensor_files.h"

namespace dumpd::storage {
namespace {

// Files written once (metadata, graphs, execution order): MindSpore's 0400.
constexpr uint32_t kOtherFileMode = 0400;

// A JSON string literal; invalid UTF-8 is replaced rather than thrown about.
std::string jsonString(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// MindSpore's kernel-args file name: "{t}.{n}.json", t the last path component of the full
// name cut at its last '-' ("Default/MatMul-op3" -> "MatMul"), n the full name with '.' and
// '/' replaced by '_' (dumpd: control bytes too). An empty t is the op type (sanitised).
std::string kernelArgsFileName(std::string_view op_type, std::string_view op_name) {
  std::string_view tail = op_name.substr(op_name.rfind('/') + 1);  // npos + 1 == 0
  tail = tail.substr(0, tail.rfind('-'));
  std::string name;
  if (tail.empty()) {
    appendSanitized(name, op_type);
  } else {
    for (char c : tail) name.push_back(static_cast<unsigned char>(c) < 0x20 ? '_' : c);
  }
  name.push_back('.');
  for (char c : op_name) {
    name.push_back(c == '.' || c == '/' || static_cast<unsigned char>(c) < 0x20 ? '_' : c);
  }
  name.append(".json");
  return name;
}

}  // namespace

MetadataFiles::MetadataFiles(FileSystem& fs, DirCache& dirs, const FilePublisher& files,
                             WriterCounters& counters, std::shared_ptr<DirState> metadata_dir)
    : fs_(fs),
      dirs_(dirs),
      files_(files),
      counters_(counters),
      metadata_dir_(std::move(metadata_dir)),
      manifest_(dirs.appenderCount()) {}

Status MetadataFiles::writeJobFiles(std::string_view config_text, std::string_view device_target,
                                    std::string_view producer_version) {
  auto lease = dirs_.pin(metadata_dir_);
  if (!lease) return lease.error();
  const SyncPolicy sync = files_.otherSync();
  if (auto r =
          files_.publishText(lease.value(), "data_dump.json", config_text, kOtherFileMode, sync);
      !r) {
    return r.error();
  }
  const std::string config_json = "{\"device_target\":" + jsonString(device_target) +
                                  ",\"ms_version\":" + jsonString(producer_version) + "}";
  if (auto r = files_.publishText(lease.value(), "config.json", config_json, kOtherFileMode, sync);
      !r) {
    return r.error();
  }
  return {};
}

Status MetadataFiles::writeGraph(uint32_t graph_id, std::string_view ir_text,
                                 std::string_view pb_bytes) {
  if (ir_text.empty() && pb_bytes.empty()) return {};
  auto lease = dirs_.rankSubdir("graphs");
  if (!lease) return counters_.recordError(lease.error());
  const std::string base = "ms_output_trace_code_graph_" + std::to_string(graph_id);
  const std::pair<std::string_view, std::string_view> files[] = {{".ir", ir_text},
                                                                 {".pb", pb_bytes}};
  for (const auto& [ext, text] : files) {
    if (text.empty()) continue;
    if (auto r = files_.publishText(lease.value(), base + std::string(ext), text, kOtherFileMode,
                                    files_.otherSync());
        !r) {
      return counters_.recordError(r.error());
    }
  }
  return {};
}

Status MetadataFiles::writeExecutionOrder(uint32_t graph_id,
                                          const std::vector<std::string>& op_names) {
  auto lease = dirs_.rankSubdir("execution_order");
  if (!lease) return counters_.recordError(lease.error());
  std::string text = "NodeExecutionOrder-FullNameWithScope\n";
  for (const std::string& name : op_names) {
    text.append(name);
    text.push_back('\n');
  }
  const std::string file = "ms_execution_order_graph_" + std::to_string(graph_id) + ".csv";
  if (auto r = files_.publishText(lease.value(), file, text, kOtherFileMode, files_.otherSync());
      !r) {
    return counters_.recordError(r.error());
  }
  return {};
}

Status MetadataFiles::appendGlobalExecutionOrder(uint32_t graph_id, uint32_t iteration) {
  auto lease = dirs_.rankSubdir("execution_order");
  if (!lease) return counters_.recordError(lease.error());
  const std::string file = "ms_global_execution_order_graph_" + std::to_string(graph_id) + ".csv";
  MutexLock lock(&lease.value().state().mu);
  auto opened = FilePublisher::openAppender(lease.value().dir(), file, {}, files_.syncDirs());
  if (!opened) return counters_.recordError(opened.error());
  std::unique_ptr<AppendFile> appender = std::move(opened.value());
  const std::string line = std::to_string(iteration) + "\n";
  if (Status s = appender->append(line); !s) return counters_.recordError(s.error());
  if (files_.syncDirs()) {
    if (Status s = appender->sync(); !s) return counters_.recordError(s.error());
  }
  return {};
}

Status MetadataFiles::writeKernelArgs(
    uint32_t graph_id, uint32_t iteration, std::string_view op_type, std::string_view op_name,
    const std::vector<std::pair<std::string, std::string>>& args) {
  auto lease = dirs_.iteration(graph_id, iteration);
  if (!lease) return counters_.recordError(lease.error());
  const std::string name = kernelArgsFileName(op_type, op_name);
  // As MindSpore's E2eDump writes it: nlohmann's dump(4) of an object of strings (keys
  // sorted), no trailing newline; "null" when there are none.
  nlohmann::json j;
  for (const auto& [key, value] : args) j[key] = value;
  const std::string text = j.dump(4, ' ', false, nlohmann::json::error_handler_t::replace);
  if (auto r =
          files_.publish(lease.value(), name, ".json", false, kTensorFileMode, files_.tensorSync(),
                         [&text](WritableFile& f) { return f.write(asBytes(text)); });
      !r) {
    return counters_.recordError(r.error(), &lease.value().state());
  }
  return {};
}

Status MetadataFiles::appendManifest(const std::string& line) {
  MutexLock lock(&mu_);
  if (!manifest_) {
    auto lease = dirs_.pin(metadata_dir_);
    if (!lease) return lease.error();
    auto opened =
        FilePublisher::openAppender(lease.value().dir(), "manifest.jsonl", {}, files_.syncDirs());
    if (!opened) return opened.error();
    manifest_.hold(std::move(opened.value()));
  }
  if (Status s = manifest_->append(line); !s) return s;
  if (files_.syncDirs()) return manifest_->sync();
  return {};
}

Status MetadataFiles::appendJournal(std::string_view name, const std::string& line) {
  auto lease = dirs_.pin(metadata_dir_);
  if (!lease) return counters_.recordError(lease.error());
  auto opened = FilePublisher::openAppender(lease.value().dir(), name, {}, files_.syncDirs());
  if (!opened) return counters_.recordError(opened.error());
  if (Status s = opened.value()->append(line); !s) return counters_.recordError(s.error());
  // Rare and small: always made durable, whatever the durability setting.
  if (Status s = opened.value()->sync(); !s) return counters_.recordError(s.error());
  return {};
}

Status MetadataFiles::completeIteration(uint32_t graph, uint32_t iteration, DirCache::Taken taken,
                                        uint64_t dropped_upstream, std::string_view upstream_reason,
                                        std::string_view cut_short) {
  Status result;
  uint64_t tensors = 0, bytes = 0, dropped = dropped_upstream, errors = 0;
  std::vector<std::string> reasons;
  if (DirState* ds = taken.state.get()) {
    MutexLock lock(&ds->mu);
    if (files_.syncDirs()) result = files_.syncAtCompletion(*ds, std::move(taken.dir), fs_);
    ds->unsynced.clear();
    ds->stat_csv.reset();
    ds->mapping_csv.reset();
    tensors = ds->tensors.load();
    bytes = ds->bytes.load();
    dropped += ds->dropped.load();
    errors = ds->errors;
    reasons = ds->reasons;
  }
  if (!upstream_reason.empty()) {
    reasons.emplace_back(upstream_reason);
  } else if (dropped_upstream != 0) {
    reasons.emplace_back("dropped before storage");
  }
  if (!cut_short.empty()) reasons.emplace_back(cut_short);
  if (errors != 0) reasons.push_back(std::to_string(errors) + " write error(s)");
  if (!result) reasons.push_back(result.error().message);
  nlohmann::ordered_json j;
  j["graph"] = graph;
  j["iteration"] = iteration;
  j["tensors"] = tensors;
  j["bytes"] = bytes;
  j["dropped"] = dropped;
  j["reasons"] = reasons;
  // whole: every tensor the job dumped in it is on disk (it finished the iteration, nothing
  // was dropped, no write failed). writes_ok: no write or fsync failed. complete: the same
  // as whole (dumpd 0.2 wrote writes_ok under this name; readers took it for whole).
  const bool writes_ok = result.has_value() && errors == 0;
  const bool whole = writes_ok && cut_short.empty() && dropped == 0;
  j["whole"] = whole;
  j["writes_ok"] = writes_ok;
  j["complete"] = whole;
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  if (Status s = appendManifest(line); !s && result) result = s;
  if (!result) return counters_.recordError(result.error());
  return result;
}

}  // namespace dumpd::storage
