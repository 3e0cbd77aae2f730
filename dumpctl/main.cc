// dumpctl: the command-line tool. Exit codes: 0 success, 1 the command failed (an invalid
// config, no daemon), 2 usage error.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "base/version.h"
#include "dumpctl/compare_command.h"
#include "dumpctl/control_command.h"
#include "dumpctl/convert_command.h"
#include "dumpctl/status_command.h"
#include "dumpctl/trigger_command.h"
#include "dumpctl/validate_command.h"
#include "ipc/frame.h"

namespace {

constexpr int kExitUsage = 2;

constexpr const char* kUsage =
    "usage: dumpctl [--socket PATH] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  validate FILE    check a job config (data_dump.json) as the daemon would;\n"
    "                   prints a summary and exits 0 if valid, prints the error and exits 1\n"
    "  status [--json] [--watch]\n"
    "                   show the daemon's status (--watch refreshes every second)\n"
    "  trigger SESSION|--pid PID|--rank N --job NET_NAME [--reason TEXT]\n"
    "                   write what a session's flight recorder keeps now (the session's\n"
    "                   own uid or root only; see docs/recorder.md)\n"
    "  control SESSION|--pid PID|--rank N --job NET_NAME [--iteration RANGE] [--pause|--resume]\n"
    "          [--recorder on|off] [--replica-every N]\n"
    "                   change what a running job dumps, from its next step, or how often\n"
    "                   it checks its replicas (the session's own uid or root only)\n"
    "  convert IN [-o OUT]\n"
    "                   turn Ascend bin dump files (a file or a tree) into .npy files\n"
    "  compare LEFT RIGHT [-o result.csv] [--html report.html] [--map names.csv]\n"
    "                   compare two dump trees tensor by tensor; exit 1 if a pair fails\n"
    "                   (see 'dumpctl compare --help')\n"
    "\n"
    "options:\n"
    "  --socket PATH    daemon socket (default: $DUMPD_SOCKET, else /run/dumpd/dumpd.sock)\n"
    "  -h, --help       show this help\n"
    "  --version        print the version and the wire protocol it speaks\n";

int usageError(const std::string& message) {
  std::cerr << "dumpctl: " << message << "\n" << kUsage;
  return kExitUsage;
}

int runStatus(const std::vector<std::string_view>& args, const std::string& socket) {
  bool json = false;
  bool watch = false;
  for (std::string_view a : args) {
    if (a == "--json") {
      json = true;
    } else if (a == "--watch" || a == "-w") {
      watch = true;
    } else {
      return usageError("status: unknown argument '" + std::string(a) + "'");
    }
  }
  return dumpd::dumpctl::runStatusCommand(socket, json, watch, std::cout, std::cerr);
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  size_t i = 0;
  // Global options come before the command.
  for (; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--version") {
      std::cout << "dumpctl " << dumpd::kVersion << " (wire protocol " << dumpd::ipc::kProtocolMajor
                << "." << dumpd::ipc::kProtocolMinor << ")\n";
      return 0;
    }
    if (a == "--socket") {
      if (i + 1 >= args.size() || args[i + 1].empty()) {
        return usageError("--socket needs a PATH");
      }
      socket = std::string(args[++i]);
    } else if (a.starts_with("--socket=")) {
      socket = std::string(a.substr(9));
      if (socket.empty()) return usageError("--socket needs a PATH");
    } else if (a.starts_with("-")) {
      return usageError("unknown option '" + std::string(a) + "'");
    } else {
      break;
    }
  }
  if (i == args.size()) return usageError("no command given");
  std::string_view command = args[i];
  std::vector<std::string_view> rest(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());

  if (command == "validate") {
    if (rest.size() == 1 && (rest[0] == "-h" || rest[0] == "--help")) {
      std::cout << kUsage;
      return 0;
    }
    if (rest.empty()) return usageError("validate: missing FILE");
    if (rest.size() > 1) return usageError("validate: expected one FILE");
    return dumpd::dumpctl::runValidateCommand(std::string(rest[0]), std::cout, std::cerr);
  }
  if (command == "status") return runStatus(rest, socket);
  if (command == "control") {
    if (rest.size() == 1 && (rest[0] == "-h" || rest[0] == "--help")) {
      std::cout << kUsage;
      return 0;
    }
    return dumpd::dumpctl::runControlCommand(rest, socket, std::cout, std::cerr);
  }
  if (command == "trigger") {
    if (rest.size() == 1 && (rest[0] == "-h" || rest[0] == "--help")) {
      std::cout << kUsage;
      return 0;
    }
    return dumpd::dumpctl::runTriggerCommand(rest, socket, std::cout, std::cerr);
  }
  if (command == "convert") return dumpd::dumpctl::runConvertCommand(rest, std::cout, std::cerr);
  if (command == "compare") return dumpd::dumpctl::runCompareCommand(rest, std::cout, std::cerr);
  return usageError("unknown command '" + std::string(command) + "'");
}
