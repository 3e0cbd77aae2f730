// dumpd_example_producer: a training-style producer for demos and integration tests.
//
// Simulates a small network (Conv2D -> BiasAdd -> ReLU -> MatMul -> Add, per "layer") over
// several iterations and streams every op's inputs and outputs to dumpd. Values are
// deterministic, so tests can recompute them:
//   element k of tensor (iteration i, op o, io, slot s) = i*1000 + o*10 + s + k*0.001 (+0.5
//   for outputs), as float32.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

constexpr const char* kUsage =
    "usage: dumpd_example_producer [options]\n"
    "  --socket PATH        dumpd socket (default $DUMPD_SOCKET)\n"
    "  --config FILE        job config (default $MINDSPORE_DUMP_CONFIG)\n"
    "  --rank N --device N  identity (default $RANK_ID / $DEVICE_ID or 0)\n"
    "  --iterations N       iterations to run (default 3)\n"
    "  --layers N           layers of 5 ops each (default 2)\n"
    "  --elements N         float32 elements per tensor (default 1024)\n"
    "  --ring-bytes N       ring size (default 64 MiB)\n"
    "  --backpressure P     block or drop (default: daemon setting)\n"
    "  --op-name-prefix S   prefix of op scope names (default Default/network)\n"
    "  --kill-after N       SIGKILL itself after N committed records (crash test)\n"
    "  --zero-copy          produce values straight into the ring (reserveOp/commitOp)\n"
    "  --no-flush           exit right after the last commit: no flush, no Goodbye\n"
    "  --pause-at-end       after the last commit print 'committed N' and wait for stdin EOF\n"
    "  --quiet\n";

struct Args {
  dumpd::client::Options options;
  uint32_t iterations = 3;
  uint32_t layers = 2;
  uint64_t elements = 1024;
  std::string prefix = "Default/network";
  int64_t kill_after = -1;
  bool flush = true;
  bool pause_at_end = false;
  bool zero_copy = false;
  bool quiet = false;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--help" || k == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (k == "--no-flush") {
      a.flush = false;
    } else if (k == "--zero-copy") {
      a.zero_copy = true;
    } else if (k == "--pause-at-end") {
      a.pause_at_end = true;
    } else if (k == "--quiet") {
      a.quiet = true;
    } else if ((v = next()) == nullptr) {
      std::cerr << "missing value for " << k << "\n";
      return false;
    } else if (k == "--socket") {
      a.options.socket_path = v;
    } else if (k == "--config") {
      a.options.config_path = v;
    } else if (k == "--rank") {
      a.options.rank = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--device") {
      a.options.device = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--iterations") {
      a.iterations = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--layers") {
      a.layers = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--elements") {
      a.elements = std::stoull(v);
    } else if (k == "--ring-bytes") {
      a.options.ring_bytes = std::stoull(v);
    } else if (k == "--backpressure") {
      a.options.backpressure = std::string(v) == "drop" ? dumpd::ipc::Backpressure::kDrop
                                                        : dumpd::ipc::Backpressure::kBlock;
    } else if (k == "--op-name-prefix") {
      a.prefix = v;
    } else if (k == "--kill-after") {
      a.kill_after = std::stoll(v);
    } else {
      std::cerr << "unknown option " << k << "\n" << kUsage;
      return false;
    }
  }
  return true;
}

void fill(std::span<float> buf, uint32_t iteration, uint32_t op, uint32_t io, uint32_t slot) {
  const float base = static_cast<float>(iteration) * 1000.0f + static_cast<float>(op) * 10.0f +
                     static_cast<float>(slot) + (io == 1 ? 0.5f : 0.0f);
  for (size_t k = 0; k < buf.size(); ++k) buf[k] = base + static_cast<float>(k) * 0.001f;
}

// Zero-copy: reserve ring space, compute the values in place, commit.
dumpd::Result<bool> dumpInPlace(dumpd::client::Client& c, const dumpd::client::OpCall& call,
                                uint32_t it, uint32_t op) {
  auto r = c.reserveOp(call);
  if (!r) return r.error();
  if (!r->active()) return false;
  // The reservation holds the selected tensors in call order.
  size_t k = 0;
  for (const dumpd::client::Tensor& t : call.tensors) {
    if (!c.shouldDump(call.op_name, t.io)) continue;
    std::span<std::byte> p = r->payload(k++);
    fill(std::span<float>(reinterpret_cast<float*>(p.data()), p.size() / sizeof(float)), it, op,
         t.io == dumpd::Io::kOutput ? 1 : 0, t.slot);
  }
  auto seq = c.commitOp(r.value());
  if (!seq) return seq.error();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 2;
  a.options.producer_name = "dumpd_example_producer";
  a.options.producer_version = "0.1.0";
  auto client = dumpd::client::Client::connect(a.options);
  if (!client) {
    std::cerr << "dumpd_example_producer: " << client.error().message << "\n";
    return client.error().code == dumpd::ErrorCode::kInvalidConfig ? 3 : 1;
  }
  auto& c = *client.value();
  static const char* kTypes[] = {"Conv2D", "BiasAdd", "ReLU", "MatMul", "Add"};
  std::vector<std::string> names;
  for (uint32_t l = 0; l < a.layers; ++l) {
    for (uint32_t t = 0; t < 5; ++t) {
      names.push_back(a.prefix + "/layer" + std::to_string(l) + "/" + kTypes[t] + "-op" +
                      std::to_string(l * 5 + t));
    }
  }
  (void)c.saveExecutionOrder(0, names);
  std::vector<float> in0(a.elements), in1(a.elements), out0(a.elements);
  const int64_t shape[] = {static_cast<int64_t>(a.elements)};
  int64_t committed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t it = 0; it < a.iterations; ++it) {
    if (auto s = c.setStep(it); !s) {
      std::cerr << "dumpd_example_producer: " << s.error().message << "\n";
      return 1;
    }
    for (uint32_t op = 0; op < names.size(); ++op) {
      fill(in0, it, op, 0, 0);
      fill(in1, it, op, 0, 1);
      fill(out0, it, op, 1, 0);
      dumpd::client::Tensor ts[3];
      const std::vector<float>* bufs[3] = {&in0, &in1, &out0};
      const dumpd::Io ios[3] = {dumpd::Io::kInput, dumpd::Io::kInput, dumpd::Io::kOutput};
      const uint32_t slots[3] = {0, 1, 0};
      for (int k = 0; k < 3; ++k) {
        ts[k].io = ios[k];
        ts[k].slot = slots[k];
        ts[k].shape = shape;
        ts[k].data = bufs[k]->data();
        ts[k].bytes = a.elements * sizeof(float);
      }
      dumpd::client::OpCall call;
      call.op_type = kTypes[op % 5];
      call.op_name = names[op];
      call.tensors = ts;
      auto r = a.zero_copy ? dumpInPlace(c, call, it, op) : c.dumpOp(call);
      if (!r) {
        std::cout << "committed " << committed << std::endl;
        std::cerr << "dumpd_example_producer: " << r.error().message << "\n";
        return 1;
      }
      if (r.value()) ++committed;
      // The buffers are reused at once: the memory-reuse contract.
      std::memset(in0.data(), 0xff, in0.size() * sizeof(float));
      if (a.kill_after >= 0 && committed >= a.kill_after) {
        std::cout << "committed " << committed << std::endl;
        ::kill(::getpid(), SIGKILL);
      }
    }
  }
  if (a.pause_at_end) {
    std::cout << "committed " << committed << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto st = c.stats();
  if (a.flush) {
    auto f = c.flush(60000);
    if (!f) {
      std::cerr << "dumpd_example_producer: flush: " << f.error().message << "\n";
      return 1;
    }
    if (!a.quiet) {
      std::cout << "flushed: " << f->tensors_written << " tensors written, " << f->bytes_written
                << " bytes, " << f->tensors_dropped << " dropped, " << f->tensors_failed
                << " failed\n";
    }
  }
  if (!a.quiet) {
    std::cout << "committed " << st.records_committed << " records (" << st.tensors_committed
              << " tensors, " << st.bytes_committed << " bytes) in " << secs << " s; filtered "
              << st.tensors_filtered << ", dropped " << st.tensors_dropped << "\n";
  }
  if (!a.flush) {
    std::cout.flush();
    std::_Exit(0);  // the kernel closes the socket; the daemon must drain
  }
  if (auto s = c.close(); !s) {
    std::cerr << "dumpd_example_producer: close: " << s.error().message << "\n";
    return 1;
  }
  return 0;
}
