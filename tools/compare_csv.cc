#include "tools/compare_csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

#include "base/unique_fd.h"
#include "storage/format/names.h"
#include "tools/mapped_file.h"

namespace dumpd::tools {
namespace {

constexpr std::string_view kHeader =
    "LeftOp,RightOp,TensorIndex,CosineSimilarity,MaxAbsoluteError,"
    "AccumulatedRelativeError,RelativeEuclideanDistance,KullbackLeiblerDivergence,"
    "StandardDeviation,MeanAbsoluteError,RootMeanSquareError,DType,Shape,Result,Note\n";

std::string_view resultText(const CompareRow& row) {
  switch (row.kind) {
    case RowKind::kLeftOnly:
    case RowKind::kRightOnly:
      return "unmatched";
    case RowKind::kError:
      return "error";
    default:
      return row.failed ? "fail" : "pass";
  }
}

void appendStatisticsNote(std::string& out, const StatisticPair& s) {
  struct Column {
    std::string_view name;
    double left, right;
  };
  const Column columns[] = {{"Max Value", s.left_max, s.right_max},
                            {"Min Value", s.left_min, s.right_min},
                            {"Avg Value", s.left_avg, s.right_avg},
                            {"L2Norm Value", s.left_l2norm, s.right_l2norm}};
  out.append("statistics:");
  for (const Column& c : columns) {
    out.push_back(' ');
    out.append(c.name);
    out.push_back(' ');
    appendNumber(out, c.left);
    out.append(" vs ");
    appendNumber(out, c.right);
    out.push_back(';');
  }
  out.append(" worst ");
  out.append(s.worst_column.empty() ? std::string_view("(none)") : s.worst_column);
  out.push_back(' ');
  appendNumber(out, s.worst_relative);
}

Error ioError(int err, std::string_view what, const std::string& path) {
  return makeError(err == ENOENT                     ? ErrorCode::kNotFound
                   : (err == EACCES || err == EPERM) ? ErrorCode::kPermission
                                                     : ErrorCode::kIo,
                   std::string(what) + " " + path + ": " + std::strerror(err));
}

Result<std::string> readWholeFile(const std::string& path) {
  auto opened = openRegularFile(path, nullptr, /*follow_link=*/true);  // named by the user
  if (!opened) return opened.error();
  const UniqueFd& fd = opened.value();
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ioError(errno, "cannot read", path);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace

Status readNameMap(const std::string& path, NameMap& map) {
  auto text = readWholeFile(path);
  if (!text) return text.error();
  auto records = parseCsv(*text, "map file " + path);
  if (!records) return records.error();
  map.clear();
  for (size_t r = 0; r < records->size(); ++r) {
    const CsvRecord& rec = (*records)[r];
    if (r == 0 && rec.fields.size() == 2 && rec.fields[0] == "left" && rec.fields[1] == "right") {
      continue;
    }
    if (rec.fields.size() != 2 || rec.fields[0].empty() || rec.fields[1].empty()) {
      return makeError(ErrorCode::kInvalidArgument,
                       "map file " + path + " line " + std::to_string(rec.line) +
                           ": expected \"left name,right name\", got " +
                           std::to_string(rec.fields.size()) + " field(s)" +
                           (rec.fields.size() == 2 ? " with an empty name" : ""));
    }
    map[storage::sanitizeName(rec.fields[0])] = storage::sanitizeName(rec.fields[1]);
  }
  return {};
}

void appendNumber(std::string& out, double value) {
  if (std::isnan(value)) {
    out.append("NaN");
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

std::string formatCompareCsv(const CompareReport& report) {
  std::string out(kHeader);
  std::string note;
  for (const CompareRow& row : report.rows) {
    const PairMetrics& m = row.metrics;
    appendCsvField(out, row.left_op);
    out.push_back(',');
    appendCsvField(out, row.right_op);
    out.push_back(',');
    appendCsvField(out, row.tensor_index);
    for (double v : {m.cosine, m.max_absolute_error, m.accumulated_relative_error,
                     m.relative_euclidean, m.kl_divergence}) {
      out.push_back(',');
      appendNumber(out, v);
    }
    out.append(",(");
    appendNumber(out, m.left_mean);
    out.push_back(';');
    appendNumber(out, m.left_std);
    out.append(")(");
    appendNumber(out, m.right_mean);
    out.push_back(';');
    appendNumber(out, m.right_std);
    out.append("),");
    appendNumber(out, m.mean_absolute_error);
    out.push_back(',');
    appendNumber(out, m.root_mean_square_error);
    out.push_back(',');
    appendCsvField(out, row.dtype);
    out.push_back(',');
    appendCsvField(out, row.shape);
    out.push_back(',');
    out.append(resultText(row));
    out.push_back(',');
    note = row.note;
    if (row.statistics) {
      if (!note.empty()) note.append("; ");
      appendStatisticsNote(note, *row.statistics);
    }
    appendCsvField(out, note);
    out.push_back('\n');
  }
  return out;
}

Status writeFileAtomically(const std::string& path, std::string_view content) {
  // mkstemp: a fresh name, created exclusively, so a link planted in a shared directory (/tmp)
  // is never followed. 0644 less the umask, as an ordinary output file.
  std::string temp = path + ".tmp.XXXXXX";
  UniqueFd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (!fd.valid()) return ioError(errno, "cannot create", temp);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  (void)::fchmod(fd.get(), 0644 & ~mask);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      return ioError(err, "cannot write", temp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return ioError(err, "cannot write", path);
  }
  return {};
}

}  // namespace dumpd::tools
