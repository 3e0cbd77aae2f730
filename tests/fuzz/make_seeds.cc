// Writes the seed corpora of the fuzz targets: real frames, real Hellos carrying the shipped
// job configs, and real rings filled by RingProducer and ipc::writeOpDescriptors.
//
//   fuzz_make_seeds SOURCE_DIR OUT_DIR   # writes OUT_DIR/<target>/<seed>
//
// The checked-in tests/fuzz/corpus/ is this program's output; the fuzz_seed_corpus_is_current
// test regenerates it and compares, so a protocol or layout change that stales the seeds
// fails until they are regenerated with
//   build/tests/fuzz_make_seeds . tests/fuzz/corpus
// Output is deterministic: fixed values, deterministic protobuf serialization, a fresh
// (zero-filled) ring per seed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "base/dtype.h"
#include "ipc/control_codec.h"
#include "ipc/frame.h"
#include "ipc/op_codec.h"
#include "ipc/ring_format.h"
#include "ipc/shm_ring.h"
#include "proto/dumpd.pb.h"
#include "storage/format/bin_file.h"
#include "storage/format/npy.h"

namespace dumpd {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kRingBytes = 64 * 1024;  // the ring_record_fuzz ring

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "fuzz_make_seeds: %s\n", why.c_str());
  std::exit(1);
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) die("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeSeed(const fs::path& dir, const std::string& name, std::string_view bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) die("cannot write " + (dir / name).string());
}

std::string serialize(const google::protobuf::MessageLite& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!m.SerializeToCodedStream(&coded)) die("cannot serialize a seed message");
  }
  return out;
}

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>(v >> (8 * i));
  return out;
}

// ------------------------------------------------------------------ frame_decoder_fuzz

std::string frame(const v1::Envelope& env) {
  auto f = ipc::encodeFrame(env);
  if (!f) die(f.error().message);
  return *f;
}

v1::Hello realHello(std::string job_config) {
  v1::Hello h;
  h.set_protocol_major(ipc::kProtocolMajor);
  h.set_protocol_minor(ipc::kProtocolMinor);
  h.set_pid(4242);
  h.set_rank(1);
  h.set_device(1);
  h.set_job_config(std::move(job_config));
  h.set_producer_name("dumpd-python");
  h.set_producer_version("2.3.0");
  h.set_ring_bytes(64u << 20);
  h.set_backpressure(v1::BACKPRESSURE_BLOCK);
  h.set_device_target("Ascend");
  h.set_config_path("/home/user/data_dump.json");
  return h;
}

v1::Envelope wrap(const v1::Hello& h) {
  v1::Envelope env;
  *env.mutable_hello() = h;
  return env;
}

// [chunk][limit][stream]: see frame_decoder_fuzz.cc.
void frameSeeds(const fs::path& src, const fs::path& out) {
  const auto seed = [&](const std::string& name, uint8_t chunk, uint8_t limit,
                        const std::string& stream) {
    std::string bytes{static_cast<char>(chunk), static_cast<char>(limit)};
    writeSeed(out, name, bytes + stream);
  };
  const std::string hello = frame(wrap(realHello(readFile(src / "config/examples/kernels.json"))));
  seed("hello_whole", 0, 0, hello);
  seed("hello_byte_by_byte", 1, 0, hello);
  v1::Envelope status;
  status.mutable_status_request();
  v1::Envelope flush;
  flush.mutable_flush()->set_sequence(77);
  flush.mutable_flush()->set_token(3);
  v1::Envelope goodbye;
  goodbye.mutable_goodbye();
  seed("status_flush_goodbye_chunk7", 7, 0, frame(status) + frame(flush) + frame(goodbye));
  seed("empty_envelope", 0, 0, frame(v1::Envelope()));
  // A 16-byte limit: the Flush fits, the Hello behind it is over the limit.
  seed("over_small_limit", 5, 1, frame(flush) + hello);
  seed("not_a_message", 0, 0, std::string("\x04\0\0\0\xff\xff\xff\xff", 8));
  seed("truncated_hello", 3, 0, hello.substr(0, hello.size() - 5));
  // Hello.pid and Hello.backpressure = -1 as 5-byte varints: 16 bytes on the wire, which the
  // parser accepts, but 26 once protobuf writes them back (10-byte varints), over the 16-byte
  // limit the frame was read under.
  seed("short_negative_varints", 0, 1,
       std::string("\x10\0\0\0\x0a\x0e\x18\xff\xff\xff\xff\x0f\x50\xff\xff\xff\xff\x0f\x28\x01",
                   20));
  v1::Envelope error;
  error.mutable_error()->set_code(v1::Error::INVALID_CONFIG);
  error.mutable_error()->set_message("Dump config parse failed");
  seed("welcome_and_error_chunk13", 13, 0, [&] {
    v1::Envelope welcome;
    welcome.mutable_welcome()->set_session_id(9);
    welcome.mutable_welcome()->mutable_limits()->set_max_frame_bytes(ipc::kMaxFrameBytes);
    return frame(welcome) + frame(error);
  }());
}

// ------------------------------------------------------------------ hello_fuzz

// [fds][u16 n][n bytes Envelope][job config tail]: see hello_fuzz.cc.
void helloSeeds(const fs::path& src, const fs::path& out) {
  const auto seed = [&](const std::string& name, uint8_t fds, const v1::Hello& h,
                        const std::string& tail) {
    const std::string env = serialize(wrap(h));
    if (env.size() > 0xffff) die("hello seed too large");
    writeSeed(out, name, std::string(1, static_cast<char>(fds)) + le(env.size(), 2) + env + tail);
  };
  // Op names the filter is asked about: one line each in config_path.
  const std::string names =
      "Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12\n"
      "Default/network-WithLossCell/_backbone-AlexNet/fc3-Dense/MatMul-op30\n"
      "Default/network-WithLossCell/_backbone-AlexNet/ReLU-op7";
  for (const char* example : {"all_ops", "kernels", "overflow", "statistics_only"}) {
    v1::Hello h = realHello(readFile(src / "config/examples" / (std::string(example) + ".json")));
    h.set_config_path(names);
    seed(std::string(example) + "_hello", 2, h, "");
  }
  const std::string kernels = readFile(src / "config/examples/kernels.json");
  v1::Hello bare = realHello("");
  bare.set_config_path(names);
  seed("kernels_in_tail", 2, bare, kernels);
  v1::Hello old = realHello(kernels);
  old.set_protocol_major(ipc::kProtocolMajor - 1);
  seed("old_protocol", 2, old, "");
  seed("one_fd", 1, realHello(kernels), "");
  // No "path": the dump goes beneath the client's MS_DIAGNOSTIC_DATA_PATH.
  v1::Hello diag = realHello("");
  diag.set_ms_diagnostic_data_path("/var/log/ms_diag");
  diag.set_config_path("Default/Add-op1");
  seed("pathless_with_diagnostic_path", 2, diag, R"json({"common_dump_settings": {
    "dump_mode": 2, "net_name": "Net", "iteration": "0-3|7", "input_output": 1,
    "kernels": [], "support_device": [1]}, "e2e_dump_settings": {"enable": true}})json");
  v1::Hello regex = realHello("");
  regex.set_config_path("Default/fc1-Dense/MatMul-op3\nDefault/conv1-Conv2d/Conv2D-op1");
  seed("regex_kernels", 2, regex, R"json({"common_dump_settings": {
    "dump_mode": 1, "path": "/tmp/d", "net_name": "Net", "iteration": "all", "input_output": 0,
    "kernels": ["name-regex(Default/fc\\d-.+)", "conv2d", "Default/conv1-Conv2d/Conv2D-op1"],
    "support_device": [0, 1]}})json");
  // Found by this target: with std::regex, "(a*)*c" against 40 'a's backtracked for hours
  // (config/kernel_matcher.cc); the RE2 matcher answers in linear time.
  v1::Hello backtrack = realHello("");
  backtrack.set_config_path(std::string(40, 'a'));
  seed("regex_exponential_backtracking", 2, backtrack, R"json({"common_dump_settings": {
    "dump_mode": 1, "path": "/d", "net_name": "N", "iteration": "all", "input_output": 0,
    "kernels": ["name-regex((a*)*c)"], "support_device": [0]}})json");
}

// ------------------------------------------------------------------ ring_record_fuzz

// Fills a fresh ring the way the client does.
class RingWriter {
 public:
  RingWriter() : ring_(make()) {}

  // Payload i is `payloads[i]` where given (its size must be data_bytes), else a pattern.
  void op(const ipc::OpSpec& spec, const std::vector<std::string>& payloads = {}) {
    if (Status s = ipc::checkOpSpec(spec); !s) die(s.error().message);
    std::byte* body = reserve(ipc::RecordKind::kOp, ipc::opBodyBytes(spec));
    std::vector<std::byte*> at(spec.tensors.size());
    ipc::writeOpDescriptors(body, spec, at);
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
      if (i < payloads.size()) {
        if (payloads[i].size() != spec.tensors[i].data_bytes) die("seed payload size");
        std::memcpy(at[i], payloads[i].data(), payloads[i].size());
        continue;
      }
      for (uint64_t k = 0; k < spec.tensors[i].data_bytes; ++k) {
        at[i][k] = static_cast<std::byte>(i * 31 + k);
      }
    }
    ring_.commit();
  }

  void control(const v1::Control& ctl, std::string_view payload = {}) {
    const std::string msg = serialize(ctl);  // deterministic: a corpus that stays the same
    std::byte* body =
        reserve(ipc::RecordKind::kControl, ipc::controlBodyBytes(msg.size(), payload.size()));
    std::byte* to = ipc::writeControl(body, msg);
    if (!payload.empty()) std::memcpy(to, payload.data(), payload.size());
    ring_.commit();
  }

  // Everything committed so far is released, as a consumer would.
  void releaseAll() { ring_.control()->tail.store(head(), std::memory_order_release); }

  uint64_t head() const { return ring_.control()->head.load(std::memory_order_acquire); }
  // The data area from offset `from` to `to`.
  std::string bytes(uint64_t from, uint64_t to) const {
    const auto* area = reinterpret_cast<const char*>(ring_.control()) + ipc::kRingControlBytes;
    return std::string(area + from, area + to);
  }
  // A ring_record_fuzz input: head, then the data area up to `until`.
  std::string seed(uint64_t head, uint64_t until) const { return le(head, 8) + bytes(0, until); }

 private:
  static ipc::RingProducer make() {
    auto r = ipc::RingProducer::create(kRingBytes);
    if (!r) die(r.error().message);
    return std::move(r).value();
  }
  std::byte* reserve(ipc::RecordKind kind, uint64_t body_bytes) {
    std::byte* body = ring_.tryReserve(kind, body_bytes);
    if (body == nullptr) die("seed ring is full");
    return body;
  }
  ipc::RingProducer ring_;
};

struct OpBuilder {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<ipc::TensorSpec> tensors;
  ipc::OpSpec spec;

  OpBuilder(std::string_view type, std::string_view name) {
    spec.graph_id = 1;
    spec.iteration = 3;
    spec.op_type = type;
    spec.op_name = name;
    shapes.reserve(64);  // TensorSpec::shape points into these
  }
  OpBuilder& tensor(uint8_t io, DType dtype, std::vector<int64_t> shape,
                    std::string_view format = "DefaultFormat") {
    uint64_t elements = 1;
    for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
    shapes.push_back(std::move(shape));
    ipc::TensorSpec t;
    t.io = io;
    t.dtype = static_cast<uint8_t>(dtype);
    t.slot = static_cast<uint32_t>(tensors.size());
    t.shape = shapes.back();
    t.format = format;
    t.timestamp_us = 1700000000000000ull + tensors.size();
    t.data_bytes = sourceBytes(dtype, elements);
    tensors.push_back(t);
    spec.tensors = tensors;
    return *this;
  }
};

template <typename T>
std::string bytesOf(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

// Device statistics of the values 1..4 (a 4-element float32 tensor), then `forge` applied.
std::string statsOf1to4(void (*forge)(ipc::StatsPayload&) = nullptr) {
  ipc::StatsPayload p{};
  p.count = 4;
  p.positive = 4;
  p.max = 4;
  p.min = 1;
  p.sum = 10;
  p.sum_squares = 30;
  if (forge != nullptr) forge(p);
  return bytesOf(p);
}

// A flagged float32 tensor, then records that repeat it (their SamePayload's reserved set to
// `reserved`), and device statistics seeds: well formed and forged.
void payloadKindSeeds(const fs::path& out) {
  {
    RingWriter w;
    OpBuilder first("First", "Default/First-op0");
    first.tensor(1, DType::kFloat32, {4});
    first.tensors[0].memo = true;
    first.spec.tensors = first.tensors;
    w.op(first.spec);
    for (uint32_t reserved : {0u, 0u, 7u}) {
      OpBuilder b("Repeat", "Default/Repeat-op1");
      b.tensor(0, DType::kFloat32, {4});
      b.tensors[0].payload = ipc::PayloadKind::kSame;
      b.tensors[0].data_bytes = sizeof(ipc::SamePayload);
      b.spec.tensors = b.tensors;
      w.op(b.spec, {bytesOf(ipc::SamePayload{1, 0, reserved})});
    }
    writeSeed(out, "same_references_last_reserved", w.seed(w.head(), w.head()));
  }
  const std::pair<const char*, void (*)(ipc::StatsPayload&)> stats[] = {
      {"statistics_valid", nullptr},
      {"statistics_counts_wrap",
       [](ipc::StatsPayload& p) { p.nan = p.negative_inf = uint64_t{1} << 63; }},
      {"statistics_count_over", [](ipc::StatsPayload& p) { p.positive = 5; }},
      {"statistics_flags", [](ipc::StatsPayload& p) { p.flags = 2; }},
  };
  for (const auto& [name, forge] : stats) {
    RingWriter w;
    OpBuilder b("Stats", "Default/Stats-op0");
    b.tensor(1, DType::kFloat32, {4});
    b.tensors[0].payload = ipc::PayloadKind::kStatistics;
    b.tensors[0].data_bytes = sizeof(ipc::StatsPayload);
    b.spec.tensors = b.tensors;
    w.op(b.spec, {statsOf1to4(forge)});
    writeSeed(out, name, w.seed(w.head(), w.head()));
  }
}

v1::Control stepControl(uint32_t graph, uint32_t iteration) {
  v1::Control c;
  c.mutable_step()->set_graph_id(graph);
  c.mutable_step()->set_iteration(iteration);
  return c;
}

void ringSeeds(const fs::path& out) {
  const auto conv = [] {
    OpBuilder b("Conv2D", "Default/network-WithLossCell/_backbone-AlexNet/conv1-Conv2d/Conv2D-op5");
    b.tensor(0, DType::kFloat32, {1, 3, 4, 4}, "NCHW")
        .tensor(0, DType::kFloat16, {2, 3, 2, 2}, "FRACTAL_Z")
        .tensor(1, DType::kFloat32, {1, 2, 3, 3}, "NCHW");
    return b;
  };

  writeSeed(out, "empty_ring", le(0, 8));
  payloadKindSeeds(out);
  {
    RingWriter w;
    OpBuilder b = conv();
    w.op(b.spec);
    writeSeed(out, "one_op", w.seed(w.head(), w.head()));
    // head 64 bytes short of the record's end: a record the producer has not finished.
    writeSeed(out, "head_inside_a_record", w.seed(w.head() - 64, w.head()));
  }
  {
    RingWriter w;
    w.control(stepControl(1, 0));
    v1::Control graph;
    graph.mutable_graph()->set_graph_id(1);
    graph.mutable_graph()->set_ir_text("%1 = Conv2D(%0, %w) : (<Tensor[F32]>) -> ...\n");
    w.control(graph);
    v1::Control order;
    order.mutable_execution_order()->set_graph_id(1);
    order.mutable_execution_order()->add_op_names("Default/Conv2D-op5");
    order.mutable_execution_order()->add_op_names("Default/ReLU-op6");
    w.control(order);
    v1::Control args;
    args.mutable_kernel_args()->set_graph_id(1);
    args.mutable_kernel_args()->set_iteration(0);
    args.mutable_kernel_args()->set_op_type("Conv2D");
    args.mutable_kernel_args()->set_op_name("Default/Conv2D-op5");
    (*args.mutable_kernel_args()->mutable_args())["pad_mode"] = "same";
    (*args.mutable_kernel_args()->mutable_args())["stride"] = "(1, 1)";
    w.control(args);
    v1::Control constant;
    constant.mutable_constant()->set_graph_id(1);
    constant.mutable_constant()->set_data_id("Parameter_7");
    constant.mutable_constant()->set_dtype(static_cast<uint32_t>(DType::kInt32));
    constant.mutable_constant()->add_shape(2);
    constant.mutable_constant()->add_shape(2);
    constant.mutable_constant()->set_data_bytes(16);
    w.control(constant, std::string("\1\0\0\0\2\0\0\0\3\0\0\0\4\0\0\0", 16));
    writeSeed(out, "controls", w.seed(w.head(), w.head()));
  }
  {
    RingWriter w;
    OpBuilder b("FusedOp", "Default/fused-Block/FusedOp-op99");
    b.spec.flags = ipc::kOpMarked;
    b.tensor(0, DType::kBool, {3})
        .tensor(0, DType::kInt4, {5})
        .tensor(0, DType::kBFloat16, {2, 2})
        .tensor(0, DType::kUInt1, {7})
        .tensor(0, DType::kComplex64, {1})
        .tensor(0, DType::kInt64, {})
        .tensor(0, DType::kFloat32, {0, 4})
        .tensor(1, DType::kFloat64, {1, 1, 1, 1, 1, 1, 1, 2}, "NC1HWC0")
        .tensor(1, DType::kUInt8, {6}, "");
    w.op(b.spec);
    writeSeed(out, "marked_op_many_dtypes", w.seed(w.head(), w.head()));
  }
  {
    // Records up to half the ring and a bit, then a record that only fits after the wrap: the
    // producer pads the rest of the data area. The seed is what a fresh consumer reads: the
    // records before the pad (from before the wrap overwrote the first one), the pad's header,
    // and head at the end of the pad.
    RingWriter w;
    OpBuilder b = conv();
    w.op(b.spec);
    w.control(stepControl(1, 3));
    const uint64_t pad_at = kRingBytes / 2 + 512;
    OpBuilder filler("MatMul", "Default/fc3-Dense/MatMul-op30");
    filler.tensor(1, DType::kFloat32, {1});
    while (w.head() + ipc::recordLength(ipc::opBodyBytes(filler.spec)) < pad_at) {
      filler.tensors[0].data_bytes += 4;
      filler.shapes[0][0] = static_cast<int64_t>(filler.tensors[0].data_bytes / 4);
    }
    if (w.head() + ipc::recordLength(ipc::opBodyBytes(filler.spec)) != pad_at) {
      die("filler record does not end at the pad");
    }
    w.op(filler.spec);
    const std::string before_wrap = w.bytes(0, pad_at);
    w.releaseAll();
    v1::Control graph;
    graph.mutable_graph()->set_graph_id(1);
    graph.mutable_graph()->set_pb_bytes(std::string(kRingBytes - pad_at, 'g'));
    w.control(graph);  // longer than the space left before the wrap
    const std::string pad_header = w.bytes(pad_at, pad_at + sizeof(ipc::RecordHeader));
    ipc::RecordHeader pad;
    std::memcpy(&pad, pad_header.data(), sizeof pad);
    if (pad.kind != static_cast<uint16_t>(ipc::RecordKind::kPad) ||
        pad.length != kRingBytes - pad_at) {
      die("the producer wrote no pad record where expected");
    }
    writeSeed(out, "op_control_op_pad", le(kRingBytes, 8) + before_wrap + pad_header);
  }
}

}  // namespace
// Files the offline tools read: bin files (every tensor kind the reader decodes), an npy file
// and statistic.csv / mapping.csv text.
void dumpFileSeeds(const fs::path& out) {
  const int64_t shape23[] = {2, 3};
  const int64_t shape5[] = {5};
  {
    const storage::BinTensorSpec specs[] = {
        {Io::kInput, DType::kFloat32, shape23, "NCHW", 24},
        {Io::kInput, DType::kBFloat16, shape23, "ND", 12},
        {Io::kOutput, DType::kInt4, shape5, "FRACTAL_NZ", 3},
        {Io::kOutput, DType::kComplex64, shape5, "DefaultFormat", 40},
    };
    std::string file;
    storage::buildBinHeader(file, "Default/network/Conv2D-op12", 1700000000000000, specs);
    for (int i = 0; i < 24 + 12 + 3 + 40; ++i) file.push_back(static_cast<char>(i * 7));
    writeSeed(out, "bin_four_tensors", file);
    storage::buildBinHeader(file, "Default/Empty-op1", 1, {});
    writeSeed(out, "bin_no_tensors", file);
  }
  std::string npy;
  storage::buildNpyHeader(npy, DType::kFloat16, shape23);
  npy.append(12, '\x3c');
  writeSeed(out, "npy_float16", npy);
  writeSeed(out, "statistic_csv",
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
            "Max Value,Min Value,Avg Value,L2Norm Value\n"
            "Conv2D,Default_Conv2D-op12,0,0,1700000000000000,input,0,24,float32,\"(2,3)\","
            "5,0,2.5,9.53939\r\n");
  writeSeed(out, "mapping_csv", "1234567890123456,\"a,very \"\"long\"\" name\"\n");
}

}  // namespace dumpd

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path src = argv[1];
  const std::filesystem::path out = argv[2];
  dumpd::frameSeeds(src, out / "frame_decoder_fuzz");
  dumpd::helloSeeds(src, out / "hello_fuzz");
  dumpd::ringSeeds(out / "ring_record_fuzz");
  dumpd::dumpFileSeeds(out / "dump_file_fuzz");
  return 0;
}
