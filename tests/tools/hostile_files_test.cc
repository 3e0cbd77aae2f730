// Files that lie: the offline tools refuse them with an error naming the file, in bounded
// memory and time, and a file that shrinks while mapped is reported instead of killing the
// process with SIGBUS.
#include <fcntl.h>
#include <lz4frame.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "proto/ascend_dump.pb.h"
#include "storage/format/bin_file.h"
#include "storage/format/npy.h"
#include "tests/tools/tools_test_util.h"
#include "tools/mapped_file.h"
#include "tools/tensor_data.h"

namespace dumpd::tools {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::writeFile;

std::string npyOfFloats(size_t n) {
  std::string out;
  const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
  storage::buildNpyHeader(out, DType::kFloat32, shape);
  std::vector<float> v(n, 0.5f);
  out.append(reinterpret_cast<const char*>(v.data()), n * 4);
  return out;
}

// XXH32 (seed 0) of a short input, for the frame descriptor's header checksum.
uint32_t xxh32Short(const unsigned char* p, size_t n) {
  constexpr uint32_t k1 = 2654435761U, k2 = 2246822519U, k3 = 3266489917U, k4 = 668265263U,
                     k5 = 374761393U;
  auto rotl = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  uint32_t h = k5 + static_cast<uint32_t>(n);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t w;
    std::memcpy(&w, p + i, 4);
    h = rotl(h + w * k3, 17) * k4;
  }
  for (; i < n; ++i) h = rotl(h + p[i] * k5, 11) * k1;
  h ^= h >> 15;
  h *= k2;
  h ^= h >> 13;
  h *= k3;
  return h ^ (h >> 16);
}

// One LZ4 frame of `content`. declared 0: no content size in the frame; else the frame
// declares `declared` bytes (patched in, header checksum recomputed: the library writes the
// true size).
std::string lz4Frame(const std::string& content, unsigned long long declared) {
  LZ4F_preferences_t prefs{};
  prefs.frameInfo.contentSize = declared == 0 ? 0 : content.size();
  std::string out(LZ4F_compressFrameBound(content.size(), &prefs), '\0');
  const size_t n =
      LZ4F_compressFrame(out.data(), out.size(), content.data(), content.size(), &prefs);
  EXPECT_FALSE(LZ4F_isError(n));
  out.resize(n);
  if (declared != 0) {
    // magic(4) FLG BD size(8) HC: HC = byte 1 of XXH32(FLG..size).
    auto* d = reinterpret_cast<unsigned char*>(out.data()) + 4;
    EXPECT_EQ(d[10], (xxh32Short(d, 10) >> 8) & 0xFF);  // the checksum is reproduced
    std::memcpy(d + 2, &declared, 8);
    d[10] = static_cast<unsigned char>((xxh32Short(d, 10) >> 8) & 0xFF);
  }
  return out;
}

TEST(HostileFiles, Lz4FrameDeclaringAHugeContentSizeIsRefusedNotAllocated) {
  TempDir d;
  const std::string path = d / "t.npy.lz4";
  const std::string npy = npyOfFloats(1000);
  // The declared size is checked against the npy header before anything is allocated; a
  // frame that lies about it would otherwise ask for 2^62 bytes.
  writeFile(path, lz4Frame(npy, 1ULL << 62));
  auto t = TensorData::open(TensorFileKind::kNpyLz4, path);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find(path), std::string::npos);
  EXPECT_NE(t.error().message.find("declares"), std::string::npos) << t.error().message;
  writeFile(path, lz4Frame(npy, npy.size()));
  ASSERT_TRUE(TensorData::open(TensorFileKind::kNpyLz4, path).has_value());
}

TEST(HostileFiles, Lz4ThatDecompressesPastItsNpyHeaderIsRefused) {
  TempDir d;
  const std::string path = d / "t.npy.lz4";
  // No content size in the frame; the npy inside is followed by 1 MiB of extra bytes.
  writeFile(path, lz4Frame(npyOfFloats(1000) + std::string(1 << 20, 'x'), 0));
  auto t = TensorData::open(TensorFileKind::kNpyLz4, path);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("more than its .npy header says"), std::string::npos)
      << t.error().message;
}

TEST(HostileFiles, NpyHeaderLengthOfGigabytesIsRefusedWithoutReadingThem) {
  TempDir d;
  const std::string path = d / "t.npy";
  std::string bytes = "\x93NUMPY\x02";
  bytes += std::string("\x00\xf0\xff\xff\xff", 5);  // version 2.0, header length ~4 GiB
  bytes += std::string(5000, 'x');
  writeFile(path, bytes);
  auto h = readNpyHeader(path, false);
  ASSERT_FALSE(h.has_value());
  EXPECT_NE(h.error().message.find("too long"), std::string::npos) << h.error().message;
}

TEST(HostileFiles, BinHeaderListingTooManyTensorsIsRefused) {
  toolkit::dumpdata::DumpData data;
  data.set_version("2.0");
  for (uint64_t i = 0; i <= storage::kMaxBinTensors; ++i) data.add_input();
  const std::string body = data.SerializeAsString();
  std::string file(8, '\0');
  const uint64_t len = body.size();
  std::memcpy(file.data(), &len, 8);
  file += body;
  auto parsed =
      storage::parseBinFile({reinterpret_cast<const std::byte*>(file.data()), file.size()}, "many");
  ASSERT_FALSE(parsed.has_value());
  EXPECT_NE(parsed.error().message.find("more than 65536"), std::string::npos)
      << parsed.error().message;
}

TEST(HostileFiles, AFileThatShrinksWhileMappedReadsZerosAndSaysSo) {
  TempDir d;
  const std::string path = d / "shrinks";
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  writeFile(path, std::string(16 * page, '\x7f'));
  auto mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped.has_value());
  EXPECT_FALSE(mapped->shrank());
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(page)), 0);
  const std::span<const std::byte> bytes = mapped->bytes();
  // volatile: the reads must happen, past the new end (SIGBUS without the guard).
  const volatile std::byte* p = bytes.data();
  EXPECT_EQ(static_cast<int>(p[0]), 0x7f);
  EXPECT_EQ(static_cast<int>(p[5 * page + 3]), 0);
  EXPECT_EQ(static_cast<int>(p[16 * page - 1]), 0);
  EXPECT_TRUE(mapped->shrank());
  // A fresh mapping of the same slot starts clean.
  mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped.has_value());
  EXPECT_FALSE(mapped->shrank());
}

TEST(HostileFiles, ATensorOfAFileThatShrankDecodesZerosAndSaysSo) {
  TempDir d;
  const std::string it = "rank_0/Net/0/0/";
  const std::string name = "Add.op.0.0.1.output.0.DefaultFormat.float32.npy";
  const std::string npy = npyOfFloats(1 << 19);  // 2 MiB: mapped, not read
  writeFile(d / ("L/" + it + name), npy);
  writeFile(d / ("R/" + it + name), npy);
  auto left = TensorData::open(TensorFileKind::kNpy, d / ("L/" + it + name));
  ASSERT_TRUE(left.has_value());
  ASSERT_EQ(::truncate((d / ("L/" + it + name)).c_str(), 4096), 0);
  std::vector<double> out(16);
  left->decode((1 << 19) - 16, 16, out.data());
  EXPECT_EQ(out[15], 0.0);
  EXPECT_TRUE(left->shrank());
}

// Issue 48: root's dumpctl checked a tree's entries while scanning and opened them later by
// path, following links and blocking on FIFOs. The tree's owner could swap a file for a link
// to a file only root may read (and convert would write its bytes out), or for a FIFO (and
// dumpctl would wait forever).
TEST(HostileFiles, AFileSwappedForALinkOrAFifoIsRefusedNotFollowed) {
  TempDir d;
  const std::string secret = d / "secret.npy";
  writeFile(secret, npyOfFloats(8));
  const std::string entry = d / "Add.op.0.0.1.output.0.DefaultFormat.float32.npy";
  ASSERT_EQ(::symlink(secret.c_str(), entry.c_str()), 0);
  for (auto open : {+[](const std::string& p) { return MappedFile::open(p).has_value(); },
                    +[](const std::string& p) {
                      return TensorData::open(TensorFileKind::kNpy, p).has_value();
                    }}) {
    EXPECT_FALSE(open(entry));
  }
  auto link = MappedFile::open(entry);
  ASSERT_FALSE(link.has_value());
  EXPECT_EQ(link.error().message,
            entry + " is a symbolic link: dumpctl does not follow links in dump trees");
  ASSERT_EQ(::unlink(entry.c_str()), 0);
  ASSERT_EQ(::mkfifo(entry.c_str(), 0600), 0);
  // Without O_NONBLOCK this open never returns (no writer): ctest's timeout fails the test.
  auto fifo = TensorData::open(TensorFileKind::kNpy, entry);
  ASSERT_FALSE(fifo.has_value());
  EXPECT_EQ(fifo.error().message, entry + " is not a regular file");
}

TEST(HostileFiles, ARacingSwapNeverMakesAnOpenReadTheLinkTarget) {
  // Another process swaps the entry between a file of its own and a link to the secret as
  // fast as it can; every open either reads the owner's file or is refused.
  TempDir d;
  const std::string secret = d / "secret.npy";
  writeFile(secret, npyOfFloats(4));
  const std::string own = d / "own.npy";
  writeFile(own, npyOfFloats(16));
  const std::string entry = d / "entry.npy";
  const std::string link = d / "entry.link";
  const std::string copy = d / "entry.copy";
  ASSERT_EQ(::symlink(secret.c_str(), link.c_str()), 0);
  const pid_t swapper = ::fork();
  ASSERT_GE(swapper, 0);
  if (swapper == 0) {
    for (int i = 0; i < 200000; ++i) {
      // rename() replaces atomically: the entry is always one or the other.
      (void)::link(own.c_str(), copy.c_str());
      (void)::rename(copy.c_str(), entry.c_str());
      (void)::symlink(secret.c_str(), link.c_str());
      (void)::rename(link.c_str(), entry.c_str());
    }
    ::_exit(0);
  }
  int own_reads = 0, refused = 0;
  for (int i = 0; i < 2000; ++i) {
    auto t = TensorData::open(TensorFileKind::kNpy, entry);
    if (!t) {
      ++refused;
      continue;
    }
    EXPECT_EQ(t->elements(), 16u) << "read the link's target";
    ++own_reads;
  }
  ::kill(swapper, SIGKILL);
  ::waitpid(swapper, nullptr, 0);
  EXPECT_EQ(own_reads + refused, 2000);
}

}  // namespace
}  // namespace dumpd::tools
