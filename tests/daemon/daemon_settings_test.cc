#include "daemon/daemon_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/config/config_test_util.h"

namespace dumpd::daemon {
namespace {

using config::Compression;
using config::Durability;

using config::testing::errorOf;
using ::testing::HasSubstr;

Result<DaemonSettings> parseOne(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::object();
  j[key] = value;
  return parseDaemonSettings(j.dump());
}

void expectDefaults(const DaemonSettings& s) {
  EXPECT_EQ(s.socket_path, "");
  EXPECT_EQ(s.socket_mode, 0660u);
  EXPECT_EQ(s.socket_group, "");
  EXPECT_EQ(s.max_sessions, 64u);
  EXPECT_EQ(s.max_ring_bytes, 1ull << 30);
  EXPECT_EQ(s.writer_threads, autoWriterThreads());
  EXPECT_EQ(s.write_queue_bytes, autoWriteQueueBytes(autoWriterThreads()));
  EXPECT_EQ(s.backpressure, Backpressure::kBlock);
  EXPECT_EQ(s.block_timeout_ms, 0u);
  EXPECT_EQ(s.durability, Durability::kNone);
  EXPECT_EQ(s.job_quota_bytes, 0u);
  EXPECT_EQ(s.min_free_bytes, 1ull << 30);
  EXPECT_EQ(s.compression, Compression::kNone);
  EXPECT_EQ(s.log_level, "info");
  EXPECT_EQ(s.max_sessions_per_uid, 16u);
  EXPECT_EQ(s.max_connections, 256u);
  EXPECT_EQ(s.max_connections_per_uid, 32u);
  EXPECT_EQ(s.handshake_timeout_ms, 10000u);
  EXPECT_EQ(s.max_pending_frame_bytes, 64ull << 20);
  EXPECT_EQ(s.max_open_directories, 64u);
  EXPECT_EQ(s.max_links_per_file, 1000u);
  EXPECT_EQ(s.shutdown_timeout_ms, 30000u);
  EXPECT_EQ(s.recorder_memory_bytes, 1ull << 30);
  EXPECT_EQ(s.journal_bytes, 16ull << 20);
}

TEST(DaemonSettingsTest, EmptyObjectKeepsDefaults) {
  auto s = parseDaemonSettings("{}");
  ASSERT_TRUE(s) << errorOf(s);
  expectDefaults(*s);
}

TEST(DaemonSettingsTest, ShippedExampleHasEveryKeyAtItsDefault) {
  auto s = loadDaemonSettings(DUMPD_SOURCE_DIR "/config/dumpd.json");
  ASSERT_TRUE(s) << errorOf(s);
  expectDefaults(*s);
  auto text = config::readTextFile(DUMPD_SOURCE_DIR "/config/dumpd.json");
  ASSERT_TRUE(text);
  auto keys = nlohmann::json::parse(*text);
  for (const char* key : {"socket_path",
                          "socket_mode",
                          "socket_group",
                          "max_sessions",
                          "max_ring_bytes",
                          "writer_threads",
                          "write_queue_bytes",
                          "backpressure",
                          "block_timeout_ms",
                          "durability",
                          "job_quota_bytes",
                          "min_free_bytes",
                          "compression",
                          "worker_priority",
                          "log_level",
                          "max_sessions_per_uid",
                          "max_connections",
                          "max_connections_per_uid",
                          "handshake_timeout_ms",
                          "max_pending_frame_bytes",
                          "max_open_directories",
                          "max_links_per_file",
                          "shutdown_timeout_ms",
                          "recorder_fetch_timeout_ms",
                          "recorder_memory_bytes",
                          "journal_bytes"}) {
    EXPECT_TRUE(keys.contains(key)) << key;
  }
  EXPECT_EQ(keys.size(), 26u);
}

TEST(DaemonSettingsTest, EveryKeyIsRead) {
  auto s = parseDaemonSettings(R"({
    "socket_path": "/run/x/d.sock", "socket_mode": "0600", "socket_group": "dumpd",
    "max_sessions": 8, "max_ring_bytes": 2097152,
    "writer_threads": 4, "write_queue_bytes": 8388608, "backpressure": "drop",
    "block_timeout_ms": 250, "durability": "iteration", "job_quota_bytes": 1000000,
    "min_free_bytes": 0, "compression": "lz4", "log_level": "debug",
    "worker_priority": "normal", "max_sessions_per_uid": 3, "max_connections": 9,
    "max_connections_per_uid": 5, "handshake_timeout_ms": 700, "max_pending_frame_bytes": 1234,
    "max_open_directories": 11, "max_links_per_file": 7, "shutdown_timeout_ms": 4000,
    "recorder_fetch_timeout_ms": 1500, "recorder_memory_bytes": 2097152,
    "journal_bytes": 8192})");
  ASSERT_TRUE(s) << errorOf(s);
  EXPECT_EQ(s->socket_path, "/run/x/d.sock");
  EXPECT_EQ(s->socket_mode, 0600u);
  EXPECT_EQ(s->socket_group, "dumpd");
  EXPECT_EQ(s->max_sessions, 8u);
  EXPECT_EQ(s->max_ring_bytes, 2097152u);
  EXPECT_EQ(s->writer_threads, 4u);
  EXPECT_EQ(s->write_queue_bytes, 8388608u);
  EXPECT_EQ(s->backpressure, Backpressure::kDrop);
  EXPECT_EQ(s->block_timeout_ms, 250u);
  EXPECT_EQ(s->durability, Durability::kIteration);
  EXPECT_EQ(s->job_quota_bytes, 1000000u);
  EXPECT_EQ(s->min_free_bytes, 0u);
  EXPECT_FALSE(s->workers_idle_priority);
  EXPECT_EQ(s->compression, Compression::kLz4);
  EXPECT_EQ(s->log_level, "debug");
  EXPECT_EQ(s->max_sessions_per_uid, 3u);
  EXPECT_EQ(s->max_connections, 9u);
  EXPECT_EQ(s->max_connections_per_uid, 5u);
  EXPECT_EQ(s->handshake_timeout_ms, 700u);
  EXPECT_EQ(s->max_pending_frame_bytes, 1234u);
  EXPECT_EQ(s->max_open_directories, 11u);
  EXPECT_EQ(s->max_links_per_file, 7u);
  EXPECT_EQ(s->recorder_memory_bytes, 2097152u);
  EXPECT_EQ(s->journal_bytes, 8192u);
  EXPECT_EQ(s->shutdown_timeout_ms, 4000u);
  EXPECT_EQ(s->recorder_fetch_timeout_ms, 1500u);
}

TEST(DaemonSettingsTest, LimitsBelowTheirMinimumAreRefused) {
  EXPECT_FALSE(parseDaemonSettings(R"({"handshake_timeout_ms": 10})"));
  EXPECT_FALSE(parseDaemonSettings(R"({"shutdown_timeout_ms": 0})"));
  EXPECT_FALSE(parseDaemonSettings(R"({"recorder_fetch_timeout_ms": 99})"));
  EXPECT_FALSE(parseDaemonSettings(R"({"max_open_directories": 1})"));
  EXPECT_FALSE(parseDaemonSettings(R"({"max_links_per_file": 0})"));
  EXPECT_FALSE(parseDaemonSettings(R"({"max_links_per_file": 65000})"));
  EXPECT_FALSE(parseDaemonSettings(R"({"max_connections_per_uid": 0})"));
}

TEST(DaemonSettingsTest, UnknownKeyIsAnErrorNamingIt) {
  auto s = parseDaemonSettings(R"({"log_level": "info", "writer_thread": 3})");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidConfig);
  EXPECT_EQ(s.error().message, "dumpd settings: unknown key 'writer_thread'");
}

TEST(DaemonSettingsTest, SyntaxErrorHasLineAndColumn) {
  EXPECT_THAT(errorOf(parseDaemonSettings("{\n  \"log_level\": \"info\",\n}")),
              HasSubstr("dumpd settings: JSON syntax error at line 3, column 1: "));
}

TEST(DaemonSettingsTest, RootMustBeObject) {
  EXPECT_THAT(errorOf(parseDaemonSettings("[]")), HasSubstr("should be a JSON object"));
}

TEST(DaemonSettingsTest, SocketModeAsOctalString) {
  EXPECT_EQ(parseOne("socket_mode", "0660")->socket_mode, 0660u);
  EXPECT_EQ(parseOne("socket_mode", "600")->socket_mode, 0600u);
  EXPECT_EQ(parseOne("socket_mode", "0")->socket_mode, 0u);
  for (const char* bad : {"", "0o660", "0869", "rw-rw----", "00660", " 660"}) {
    EXPECT_THAT(errorOf(parseOne("socket_mode", bad)),
                HasSubstr("'socket_mode' should be an octal string such as \"0660\""))
        << bad;
  }
  EXPECT_THAT(errorOf(parseOne("socket_mode", "1777")),
              HasSubstr("a permission mode of at most \"0777\", but got: 1777"));
}

TEST(DaemonSettingsTest, SocketModeAsInteger) {
  EXPECT_EQ(parseOne("socket_mode", 432)->socket_mode, 0660u);
  // 660 written as a JSON integer is decimal 660 (octal 1224): rejected with a hint.
  EXPECT_THAT(errorOf(parseOne("socket_mode", 660)),
              HasSubstr("write octal modes as a string, e.g. \"0660\", but got: 660"));
  EXPECT_THAT(errorOf(parseOne("socket_mode", -1)), HasSubstr("but got: -1"));
  EXPECT_THAT(errorOf(parseOne("socket_mode", 1.5)), HasSubstr("but got: 1.5"));
}

TEST(DaemonSettingsTest, SizesAreNonNegativeIntegerBytes) {
  for (const char* key :
       {"max_ring_bytes", "write_queue_bytes", "job_quota_bytes", "min_free_bytes"}) {
    EXPECT_EQ(errorOf(parseOne(key, "64MiB")), std::string("dumpd settings: '") + key +
                                                   "' should be a non-negative integer, but "
                                                   "got: 64MiB");
    EXPECT_THAT(errorOf(parseOne(key, -1)), HasSubstr("but got: -1")) << key;
    EXPECT_THAT(errorOf(parseOne(key, 1e9)), HasSubstr("non-negative integer")) << key;
  }
  EXPECT_EQ(parseOne("job_quota_bytes", 18446744073709551615ull)->job_quota_bytes,
            18446744073709551615ull);
}

TEST(DaemonSettingsTest, RingSizesAreChecked) {
  EXPECT_THAT(errorOf(parseOne("max_ring_bytes", 1024)),
              HasSubstr("'max_ring_bytes' should be at least 65536, but got: 1024"));
  EXPECT_TRUE(parseOne("max_ring_bytes", 65536).has_value());
  EXPECT_THAT(errorOf(parseOne("write_queue_bytes", 100)),
              HasSubstr("'write_queue_bytes' should be at least 65536, but got: 100"));
}

TEST(DaemonSettingsTest, WriterThreadsRange) {
  EXPECT_EQ(parseOne("writer_threads", 1)->writer_threads, 1u);
  EXPECT_EQ(parseOne("writer_threads", 64)->writer_threads, 64u);
  EXPECT_EQ(errorOf(parseOne("writer_threads", 0)),
            "dumpd settings: 'writer_threads' should be an integer in 1..64, but got: 0");
  EXPECT_THAT(errorOf(parseOne("writer_threads", 65)), HasSubstr("but got: 65"));
}

TEST(DaemonSettingsTest, WritersAndQueueAreSizedToTheNode) {
  EXPECT_EQ(autoWriterThreads(0u), 2u);  // unknown core count
  EXPECT_EQ(autoWriterThreads(1u), 2u);
  EXPECT_EQ(autoWriterThreads(2u), 2u);
  EXPECT_EQ(autoWriterThreads(12u), 12u);
  EXPECT_EQ(autoWriterThreads(16u), 16u);
  EXPECT_EQ(autoWriterThreads(128u), 16u);
  EXPECT_EQ(autoWriteQueueBytes(2), 512ull << 20);
  EXPECT_EQ(autoWriteQueueBytes(16), 4ull << 30);
  // The queue follows writer_threads set in the file, unless the file sets it too.
  EXPECT_EQ(parseOne("writer_threads", 8)->write_queue_bytes, 2ull << 30);
  auto both = parseDaemonSettings(R"({"writer_threads": 8, "write_queue_bytes": 1048576})");
  ASSERT_TRUE(both) << errorOf(both);
  EXPECT_EQ(both->write_queue_bytes, 1048576u);
  auto autos = parseDaemonSettings(R"({"writer_threads": "auto", "write_queue_bytes": "auto"})");
  ASSERT_TRUE(autos) << errorOf(autos);
  EXPECT_EQ(autos->writer_threads, autoWriterThreads());
  EXPECT_EQ(autos->write_queue_bytes, autoWriteQueueBytes(autoWriterThreads()));
  EXPECT_THAT(errorOf(parseOne("writer_threads", "many")), HasSubstr("'writer_threads'"));
}

TEST(DaemonSettingsTest, MaxSessionsAtLeastOne) {
  EXPECT_THAT(errorOf(parseOne("max_sessions", 0)), HasSubstr("'max_sessions'"));
  EXPECT_THAT(errorOf(parseOne("max_sessions", 4294967296ull)), HasSubstr("'max_sessions'"));
}

TEST(DaemonSettingsTest, BlockTimeoutFitsIn32Bits) {
  EXPECT_EQ(parseOne("block_timeout_ms", 4294967295ull)->block_timeout_ms, 4294967295u);
  EXPECT_THAT(errorOf(parseOne("block_timeout_ms", 4294967296ull)),
              HasSubstr("'block_timeout_ms' should be an integer in 0..4294967295"));
}

TEST(DaemonSettingsTest, EnumeratedStrings) {
  EXPECT_THAT(errorOf(parseOne("backpressure", "wait")),
              HasSubstr("'backpressure' should be \"block\" or \"drop\", but got: wait"));
  EXPECT_THAT(errorOf(parseOne("durability", "always")),
              HasSubstr("'durability' should be \"none\", \"iteration\" or \"file\", but got: "
                        "always"));
  EXPECT_EQ(parseOne("durability", "file")->durability, Durability::kFile);
  EXPECT_THAT(errorOf(parseOne("compression", "zstd")),
              HasSubstr("'compression' should be \"none\" or \"lz4\", but got: zstd"));
  EXPECT_THAT(errorOf(parseOne("backpressure", 1)), HasSubstr("but got: 1"));
}

TEST(DaemonSettingsTest, LogLevels) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    auto s = parseOne("log_level", level);
    ASSERT_TRUE(s) << errorOf(s);
    EXPECT_EQ(s->log_level, level);
  }
  EXPECT_EQ(errorOf(parseOne("log_level", "warning")),
            "dumpd settings: 'log_level' should be one of trace, debug, info, warn, error, "
            "critical, off, but got: warning");
  EXPECT_FALSE(isValidLogLevel("INFO"));
}

TEST(DaemonSettingsTest, SocketPathLengthAndCharacters) {
  EXPECT_TRUE(parseOne("socket_path", "/" + std::string(106, 'a')));
  EXPECT_THAT(errorOf(parseOne("socket_path", "/" + std::string(107, 'a'))),
              HasSubstr("'socket_path' should be at most 107 bytes long"));
  EXPECT_THAT(errorOf(parseOne("socket_path", "/run/a\nb")),
              HasSubstr("without control characters, but got: /run/a\\x0ab"));
  EXPECT_THAT(errorOf(parseOne("socket_group", 5)), HasSubstr("'socket_group' should be a string"));
}

TEST(DaemonSettingsTest, LoadErrorsNameTheFile) {
  auto s = loadDaemonSettings("/nonexistent/dumpd.json");
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("/nonexistent/dumpd.json"));
}

TEST(DaemonSettingsTest, WorkerPriorityIsIdleOrNormal) {
  EXPECT_TRUE(parseDaemonSettings("{}")->workers_idle_priority);
  EXPECT_TRUE(parseOne("worker_priority", "idle")->workers_idle_priority);
  EXPECT_THAT(errorOf(parseOne("worker_priority", "low")),
              HasSubstr("'worker_priority' should be \"idle\" or \"normal\", but got: low"));
}

}  // namespace
TEST(DaemonSettingsTest, RecorderMemoryAndJournalBytesHaveAFloor) {
  auto small = parseDaemonSettings(R"({"recorder_memory_bytes": 1000})");
  ASSERT_FALSE(small);
  EXPECT_NE(errorOf(small).find("'recorder_memory_bytes' should be an integer of at least 1048576"),
            std::string::npos)
      << errorOf(small);
  auto journal = parseDaemonSettings(R"({"journal_bytes": 0})");
  ASSERT_FALSE(journal);
  EXPECT_NE(errorOf(journal).find("'journal_bytes'"), std::string::npos);
}

}  // namespace dumpd::daemon
