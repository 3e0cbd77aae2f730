// The files of a job's tree that are not tensors: .dump_metadata/ (data_dump.json,
// config.json, manifest.jsonl), graphs/, execution_order/, kernel args beside an iteration's
// tensors, and the completion of an iteration (deferred fsyncs, its manifest line).
//
// Every error is counted (WriterCounters::recordError) before it is returned.
//
// Thread-safety: every method may be called from any thread; the mutex guards the manifest's
// appender. Callers hold the file system's credentials (JobWriter enters them per call).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "config/dump_plan.h"
#include "storage/writer/dir_cache.h"
#include "storage/writer/file_publisher.h"
#include "storage/writer/writer_counters.h"

namespace dumpd::storage {

class MetadataFiles {
 public:
  MetadataFiles(FileSystem& fs, DirCache& dirs, const FilePublisher& files,
                WriterCounters& counters, std::shared_ptr<DirState> metadata_dir);

  // .dump_metadata/data_dump.json (the job config as the client sent it) and config.json.
  Status writeJobFiles(std::string_view config_text, std::string_view device_target,
                       std::string_view producer_version);
  Status writeGraph(uint32_t graph_id, std::string_view ir_text, std::string_view pb_bytes);
  Status writeExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names);
  Status appendGlobalExecutionOrder(uint32_t graph_id, uint32_t iteration);
  // {net}/{graph}/{iteration}/{op_type}.{op_name}.json with string values.
  Status writeKernelArgs(uint32_t graph_id, uint32_t iteration, std::string_view op_type,
                         std::string_view op_name,
                         const std::vector<std::pair<std::string, std::string>>& args);

  // Completes an iteration taken out of the open ones: syncs what the durability setting
  // deferred, closes its appenders, appends its manifest line (figures of `taken.state`,
  // plus `dropped_upstream` with `upstream_reason`; `cut_short`: why the job did not finish it
  // whole, empty when it did).
  Status completeIteration(uint32_t graph, uint32_t iteration, DirCache::Taken taken,
                           uint64_t dropped_upstream, std::string_view upstream_reason,
                           std::string_view cut_short = {});

  // Appends `line` (one JSON object and its newline) to .dump_metadata/`name`, a journal
  // written rarely (triggers.jsonl, control.jsonl): opened, appended, synced and closed.
  Status appendJournal(std::string_view name, const std::string& line);

 private:
  Status appendManifest(const std::string& line);

  FileSystem& fs_;
  DirCache& dirs_;
  const FilePublisher& files_;
  WriterCounters& counters_;
  const std::shared_ptr<DirState> metadata_dir_;
  Mutex mu_;
  HeldAppender manifest_ GUARDED_BY(mu_);
};

}  // namespace dumpd::storage
