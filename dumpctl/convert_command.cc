// `dumpctl convert IN [-o OUT]`: argument parsing, the output root, the summary line. The
// conversion itself is tools/bin_convert.h.
#include "dumpctl/convert_command.h"

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "storage/fs/file_system.h"
#include "tools/bin_convert.h"

namespace dumpd::dumpctl {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
// Mode of the .npy files written (less the umask), as msaccucmp and numpy.save leave them.
constexpr uint32_t kNpyMode = 0644;

constexpr const char* kUsage =
    "usage: dumpctl convert IN [-o OUT]\n"
    "\n"
    "Turns Ascend dump bin files into .npy files, one per input and output, named as\n"
    "msaccucmp's convert names them: {bin file name}.{input|output}.{index}.{d0}x{d1}....npy\n"
    "bfloat16 becomes float32, int4 int8 and uint1 uint8, as in dumpd's own .npy files.\n"
    "\n"
    "  IN             a bin file, or a directory: every file beneath it named\n"
    "                 {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp} is converted,\n"
    "                 and its sub-directory beneath IN kept under OUT (symbolic links\n"
    "                 beneath IN are not followed)\n"
    "  -o, --output OUT\n"
    "                 where the .npy files go (created if missing; default: the current\n"
    "                 directory)\n"
    "  -h, --help     show this help\n"
    "\n"
    "Exit status: 0 every tensor converted, 1 a file or tensor was rejected or not written\n"
    "(each named on stderr; the others are still converted), 2 usage error.\n";

int usageError(std::ostream& err, const std::string& message) {
  err << "dumpctl convert: " << message << "\n" << kUsage;
  return kExitUsage;
}

struct Arguments {
  std::string in;
  std::string out = ".";
  bool help = false;
};

// Returns kExitOk when `args` parsed into `parsed`, else the usage error's exit code.
int parseArguments(const std::vector<std::string_view>& args, std::ostream& err,
                   Arguments& parsed) {
  bool have_in = false;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (!options_done && (a == "-h" || a == "--help")) {
      parsed.help = true;
      return kExitOk;
    }
    if (!options_done && (a == "-o" || a == "--output")) {
      if (i + 1 >= args.size() || args[i + 1].empty()) {
        return usageError(err, std::string(a) + " needs a value (the output directory)");
      }
      parsed.out = std::string(args[++i]);
    } else if (!options_done && a.starts_with("--output=")) {
      parsed.out = std::string(a.substr(9));
      if (parsed.out.empty()) return usageError(err, "--output needs a value");
    } else if (!options_done && a == "--") {
      options_done = true;
    } else if (!options_done && a.size() > 1 && a.starts_with("-")) {
      return usageError(err, "unknown option '" + std::string(a) + "'");
    } else {
      if (have_in) return usageError(err, "expected one IN, got '" + std::string(a) + "' too");
      if (a.empty()) return usageError(err, "IN is empty");
      parsed.in = std::string(a);
      have_in = true;
    }
  }
  if (!have_in) return usageError(err, "missing IN (a bin file or a directory)");
  return kExitOk;
}

}  // namespace

int runConvertCommand(const std::vector<std::string_view>& args, std::ostream& out,
                      std::ostream& err) {
  Arguments a;
  if (int rc = parseArguments(args, err, a); rc != kExitOk) return rc;
  if (a.help) {
    out << kUsage;
    return kExitOk;
  }

  uint64_t unreadable = 0;
  auto sources = tools::findBinFiles(a.in, err, &unreadable);
  if (!sources) {
    err << "dumpctl convert: " << sources.error().message << "\n";
    return kExitFailed;
  }
  if (sources->empty() && unreadable == 0) {
    err << "dumpctl convert: no bin files beneath " << a.in << "\n";
  }

  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) {
    err << "dumpctl convert: cannot create the output directory " << a.out << ": " << ec.message()
        << "\n";
    return kExitFailed;
  }
  auto root = storage::openPosixFileSystem(a.out);
  if (!root) {
    err << "dumpctl convert: output directory " << a.out << ": " << root.error().message << "\n";
    return kExitFailed;
  }

  tools::ConvertCounts counts;
  // Sources come sorted by directory: open each output directory once.
  std::shared_ptr<storage::Directory> dir;
  for (const tools::BinSource& source : *sources) {
    if (!dir || dir->path() != source.rel_dir) {
      auto opened = (*root)->openDirectory(source.rel_dir, {.create = true});
      if (!opened) {
        err << "dumpctl convert: " << source.path << ": cannot create its output directory in "
            << a.out << ": " << opened.error().message << "\n";
        ++counts.files_rejected;
        dir.reset();
        continue;
      }
      dir = std::move(opened.value());
    }
    tools::convertBinFile(source, *dir, kNpyMode, err, counts);
  }

  out << "converted " << counts.tensors_written << " tensors from " << counts.files_read
      << " files into " << a.out;
  if (counts.files_rejected > 0) out << ", " << counts.files_rejected << " files rejected";
  if (counts.tensors_failed > 0) out << ", " << counts.tensors_failed << " tensors not converted";
  if (unreadable > 0) out << ", " << unreadable << " directories unreadable";
  out << "\n";
  const bool failed = counts.files_rejected > 0 || counts.tensors_failed > 0 || unreadable > 0;
  return failed ? kExitFailed : kExitOk;
}

}  // namespace dumpd::dumpctl
