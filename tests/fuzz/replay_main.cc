// Stand-in for libFuzzer's main() in ordinary (GCC) builds: runs LLVMFuzzerTestOneInput once
// over every file named on the command line, and over every regular file directly inside each
// directory named there, so a fuzz target's corpus replays as a regression test.
//
// Each input is copied into a heap buffer of exactly its size, as libFuzzer does, so an ASan
// build reports a read one byte past the input. Arguments starting with '-' (libFuzzer flags)
// are ignored. Exits 1 when no input ran: a missing or emptied corpus must not pass as green.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool runFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  // new[] of 0 bytes still yields a unique pointer, like libFuzzer's empty input.
  auto input = std::make_unique<uint8_t[]>(bytes.size());
  std::copy(bytes.begin(), bytes.end(), input.get());
  LLVMFuzzerTestOneInput(input.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t ran = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(arg, ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // a stable order makes failures reproducible
      for (const fs::path& f : files) {
        if (runFile(f)) ++ran;
      }
    } else if (fs::is_regular_file(arg, ec)) {
      if (runFile(arg)) ++ran;
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", arg.c_str());
      ok = false;
    }
  }
  std::printf("replay: ran %zu input(s)\n", ran);
  if (ran == 0) {
    std::fprintf(stderr, "replay: no input ran; give corpus files or directories\n");
    return 1;
  }
  return ok ? 0 : 1;
}
