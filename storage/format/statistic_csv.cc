#include "storage/format/statistic_csv.h"

#include "storage/format/csv.h"
#include "storage/format/names.h"

namespace dumpd::storage {
namespace {

using config::StatCategory;

void appendField(std::string& out, std::string_view field) {
  appendCsvField(out, field);
  out.push_back(',');
}

void appendCount(std::string& out, uint64_t v) {
  appendDecimal(out, v);
  out.push_back(',');
}

void appendNumber(std::string& out, double v) {
  appendStatNumber(out, v);
  out.push_back(',');
}

}  // namespace

std::string statisticCsvHeader(std::span<const StatCategory> categories) {
  std::string out = "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape";
  for (StatCategory c : categories) {
    out.push_back(',');
    out.append(config::statCategoryHeader(c));
  }
  out.push_back('\n');
  return out;
}

StatOptions statOptionsFor(std::span<const StatCategory> categories, config::MsFormat format) {
  StatOptions o;
  o.values = false;
  o.format = format;
  for (StatCategory c : categories) {
    if (c == StatCategory::kMd5) {
      o.md5 = true;
    } else if (c == StatCategory::kSha1) {
      o.sha1 = true;
    } else {
      o.values = true;
    }
  }
  return o;
}

void appendStatisticRow(std::string& out, const StatRow& row, const TensorStats& stats,
                        std::span<const StatCategory> categories, config::MsFormat format) {
  const bool released = format == config::MsFormat::k26;
  appendField(out, row.op_type);
  if (released) {
    thread_local std::string name;
    name.clear();
    appendSanitized(name, row.op_name);
    appendField(out, name);
  } else {
    appendField(out, row.op_name);
  }
  appendCount(out, row.task_id);
  appendCount(out, row.stream_id);
  appendCount(out, row.timestamp_us);
  out.append(ioName(row.io));
  out.push_back(',');
  appendCount(out, row.slot);
  appendCount(out, row.data_size);
  out.append(dtypeName(row.dtype));
  out.push_back(',');
  out.push_back('"');
  if (released) {
    appendShapeParenthesized(out, row.shape);
  } else {
    appendShape(out, row.shape);
  }
  out.append("\",");
  for (StatCategory c : categories) {
    switch (c) {
      case StatCategory::kMax:
        appendNumber(out, stats.max);
        break;
      case StatCategory::kMin:
        appendNumber(out, stats.min);
        break;
      case StatCategory::kAvg:
        appendNumber(out, stats.avg);
        break;
      case StatCategory::kCount:
        appendCount(out, stats.count);
        break;
      case StatCategory::kNegativeZeroCount:
        appendCount(out, stats.negative);
        break;
      case StatCategory::kPositiveZeroCount:
        appendCount(out, stats.positive);
        break;
      case StatCategory::kNanCount:
        appendCount(out, stats.nan);
        break;
      case StatCategory::kNegativeInfCount:
        appendCount(out, stats.negative_inf);
        break;
      case StatCategory::kPositiveInfCount:
        appendCount(out, stats.positive_inf);
        break;
      case StatCategory::kZeroCount:
        appendCount(out, stats.zero);
        break;
      case StatCategory::kL2Norm:
        appendNumber(out, stats.l2norm);
        break;
      case StatCategory::kMd5:
        appendHex(out, stats.md5);
        out.push_back(',');
        break;
      case StatCategory::kSha1:
        appendHex(out, stats.sha1);
        out.push_back(',');
        break;
    }
  }
  out.push_back('\n');
}

}  // namespace dumpd::storage
