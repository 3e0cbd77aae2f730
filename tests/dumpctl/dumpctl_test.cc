// Runs the real dumpctl binary (DUMPCTL_PATH) and checks exit codes and output.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dumpctl/validate_command.h"

namespace dumpd::config {
namespace {

using dumpctl::runValidateCommand;

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

const std::string kData = std::string(DUMPD_SOURCE_DIR) + "/tests/config/data/";
const std::string kExamples = std::string(DUMPD_SOURCE_DIR) + "/config/examples/";

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs dumpctl with `args` and a controlled environment; stdout and stderr go to files.
RunResult runDumpctl(const std::vector<std::string>& args,
                     const std::vector<std::string>& env = {}) {
  char dir_template[] = "/tmp/dumpctl_test_XXXXXX";
  std::string dir = ::mkdtemp(dir_template);
  std::string out_path = dir + "/out";
  std::string err_path = dir + "/err";

  std::vector<char*> argv;
  std::string binary = DUMPCTL_PATH;
  argv.push_back(binary.data());
  std::vector<std::string> owned_args = args;
  for (auto& a : owned_args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> owned_env = env;
  std::vector<char*> envp;
  for (auto& e : owned_env) envp.push_back(e.data());
  envp.push_back(nullptr);

  RunResult result;
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  std::filesystem::remove_all(dir);
  return result;
}

TEST(DumpctlTest, ValidateValidFileExitsZeroWithSummary) {
  auto r = runDumpctl({"validate", kData + "valid_seed_ascend_o0o1.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "net=ResNet50 path=/absolute_path iterations=0|5-8|100-120 dump_mode=0 "
            "saved_data=tensor\n");
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(DumpctlTest, ValidateEveryExample) {
  for (const char* name :
       {"all_ops.json", "kernels.json", "statistics_only.json", "overflow.json"}) {
    auto r = runDumpctl({"validate", kExamples + name});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_THAT(r.out, StartsWith("net=Net path=/tmp/dumpd/")) << name;
  }
}

TEST(DumpctlTest, ValidateInvalidFileExitsOneWithErrorOnStderr) {
  std::string file = kData + "invalid_seed_cpu_gpu_trailing_comma.json";
  auto r = runDumpctl({"validate", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_EQ(r.err, "dumpctl: " + file +
                       ": JSON syntax error at line 17, column 5: syntax error while parsing "
                       "object key - unexpected '}'; expected string literal\n");
}

TEST(DumpctlTest, ValidateReportsMindSporeMessage) {
  auto r = runDumpctl({"validate", kData + "invalid_dump_mode_3.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err,
              HasSubstr("Dump config parse failed, dump_mode should be 0, 1 or 2, but got 3\n"));
}

TEST(DumpctlTest, ValidateMissingFileExitsOne) {
  auto r = runDumpctl({"validate", "/nonexistent/data_dump.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/data_dump.json"));
}

TEST(DumpctlTest, ValidateUsesDiagnosticDataPathFromEnvironment) {
  std::string file = kData + "valid_path_from_env.json";
  auto with_env = runDumpctl({"validate", file}, {"MS_DIAGNOSTIC_DATA_PATH=/diag"});
  EXPECT_EQ(with_env.exit_code, 0) << with_env.err;
  EXPECT_THAT(with_env.out, HasSubstr("path=/diag/debug_dump"));
  auto without = runDumpctl({"validate", file});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_THAT(without.err, HasSubstr("Dump path is empty."));
}

TEST(DumpctlTest, ValidatePrintsForcedValuesAsWarnings) {
  auto r = runDumpctl({"validate", kData + "valid_overflow_forces.json"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("dumpctl: warning: op_debug_mode 3 does not support selecting "
                               "kernels: dump_mode 1 is set to 0\n"));
}

TEST(DumpctlTest, SocketOptionIsAcceptedBeforeTheCommand) {
  std::string file = kData + "valid_minimal.json";
  EXPECT_EQ(runDumpctl({"--socket", "/tmp/x.sock", "validate", file}).exit_code, 0);
  EXPECT_EQ(runDumpctl({"--socket=/tmp/x.sock", "validate", file}).exit_code, 0);
}

TEST(DumpctlTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},
           {"validate"},
           {"validate", "a.json", "b.json"},
           {"frobnicate"},
           {"--socket"},
           {"--socket="},
           {"--bogus", "validate", "x"},
           {"status", "--yaml"},
       }) {
    auto r = runDumpctl(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined;
    EXPECT_THAT(r.err, HasSubstr("usage: dumpctl")) << joined;
    EXPECT_THAT(r.out, IsEmpty()) << joined;
  }
}

TEST(DumpctlTest, UsageErrorsSayWhatWasWrong) {
  EXPECT_THAT(runDumpctl({"frobnicate"}).err, StartsWith("dumpctl: unknown command 'frobnicate'"));
  EXPECT_THAT(runDumpctl({"validate"}).err, StartsWith("dumpctl: validate: missing FILE"));
  EXPECT_THAT(runDumpctl({}).err, StartsWith("dumpctl: no command given"));
}

TEST(DumpctlTest, HelpExitsZero) {
  for (const char* flag : {"--help", "-h"}) {
    auto r = runDumpctl({flag});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.out, HasSubstr("usage: dumpctl [--socket PATH] COMMAND"));
    EXPECT_THAT(r.out, HasSubstr("validate FILE"));
    EXPECT_THAT(r.err, IsEmpty());
  }
}

TEST(DumpctlTest, StatusWithoutADaemonExitsOneNamingTheSocket) {
  const std::string socket = "/tmp/dumpctl_test_no_daemon_here.sock";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--socket", socket, "status"}, {"--socket", socket, "status", "--json"}}) {
    auto r = runDumpctl(args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(socket));
  }
}

TEST(ValidateCommandTest, InProcessValidAndInvalid) {
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(runValidateCommand(kExamples + "kernels.json", out, err), 0);
  EXPECT_EQ(out.str(),
            "net=Net path=/tmp/dumpd/kernels iterations=all dump_mode=1 (3 kernels) "
            "saved_data=full categories=max,min,l2norm\n");
  EXPECT_EQ(err.str(), "");
  std::ostringstream out2;
  std::ostringstream err2;
  EXPECT_EQ(runValidateCommand(kData + "invalid_net_name_dot.json", out2, err2), 1);
  EXPECT_EQ(out2.str(), "");
  EXPECT_EQ(err2.str(), "dumpctl: " + kData +
                            "invalid_net_name_dot.json: net_name only supports alphabetic, "
                            "digit, or {'-', '_'}, but got: Res.Net\n");
}

}  // namespace
}  // namespace dumpd::config
