// dumpd_fake_gpu_producer: dumps "CUDA" tensors that live on the fake device (copies that
// complete late), through the real client and daemon. Test-only.
//
// Op i ("Default/net/Fake-op{i}", type "Fake") has input 0: int32[n] with element k = k + 7i,
// and output 0: float32[n] with element k = 0.5k + i. Right after each dumpOp the producer
// overwrites both device buffers on its stream, as a caching allocator reusing them would:
// the files must still hold the values above.
//
//   --socket PATH --config FILE --ops N --elements n --staging BYTES --delay-us D
//   --kill-after K   flush after K ops, print "flushed K", dump the rest, then SIGKILL
//                    itself with copies in flight
//   --host 1         dump the same tensors from host memory (the reference run)
//   --nan-every K    element 1 of the output of every op i with i % K == 0 is NaN
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/client/fake_device.h"
#include "tests/client/fake_producer_options.h"

int main(int argc, char** argv) {
  dumpd::testing::FakeProducerOptions args;
  int64_t kill_after = -1;
  bool host = false;
  uint64_t nan_every = 0;
  const bool parsed = dumpd::testing::parseFakeProducerOptions(
      argc, argv, args, [&](const std::string& k, const char* v) {
        if (k == "--host") {
          host = std::atoi(v) != 0;
        } else if (k == "--nan-every") {
          nan_every = std::strtoull(v, nullptr, 10);
        } else if (k == "--kill-after") {
          kill_after = std::strtoll(v, nullptr, 10);
        } else {
          return false;
        }
        return true;
      });
  if (!parsed) return 2;
  const uint64_t ops = args.ops, elements = args.elements;
  auto producer = dumpd::testing::connectFakeProducer(args, "fake-gpu");
  if (!producer) return 1;
  auto& fake = producer->fake;
  auto& client = *producer->client;
  void* stream = producer->stream;
  const std::vector<int64_t> shape = {static_cast<int64_t>(elements)};
  const uint64_t bytes = elements * 4;
  for (uint64_t i = 0; i < ops; ++i) {
    if (kill_after >= 0 && i == static_cast<uint64_t>(kill_after)) {
      auto f = client.flush(30000);
      if (!f) {
        std::cerr << "flush: " << f.error().message << "\n";
        return 1;
      }
      std::cout << "flushed " << i << std::endl;
    }
    auto* in = static_cast<int32_t*>(fake->allocate(bytes).value());
    auto* out = static_cast<float*>(fake->allocate(bytes).value());
    for (uint64_t k = 0; k < elements; ++k) {
      in[k] = static_cast<int32_t>(k + 7 * i);
      out[k] = 0.5f * static_cast<float>(k) + static_cast<float>(i);
    }
    if (nan_every != 0 && i % nan_every == 0 && elements > 1) {
      out[1] = std::numeric_limits<float>::quiet_NaN();
    }
    dumpd::client::Tensor t[2];
    t[0].io = dumpd::Io::kInput;
    t[0].dtype = dumpd::DType::kInt32;
    t[1].io = dumpd::Io::kOutput;
    t[1].dtype = dumpd::DType::kFloat32;
    t[0].data = in;
    t[1].data = out;
    for (auto& x : t) {
      x.shape = shape;
      x.bytes = bytes;
      x.memory = host ? dumpd::client::Memory::kHost : dumpd::client::Memory::kCuda;
    }
    const std::string name = "Default/net/Fake-op" + std::to_string(i);
    dumpd::client::OpCall op;
    op.op_type = "Fake";
    op.op_name = name;
    op.tensors = t;
    op.stream = stream;
    auto r = client.dumpOp(op);
    if (!r) {
      std::cerr << "dumpOp: " << r.error().message << "\n";
      return 1;
    }
    // The buffers are "freed" and reused at once by later work on the stream.
    fake->enqueue(stream, [in, out, bytes] {
      std::memset(in, 0xAB, bytes);
      std::memset(out, 0xCD, bytes);
    });
  }
  if (kill_after >= 0) {
    const auto s = client.stats();
    std::cout << "in flight " << s.device_in_flight << std::endl;
    ::raise(SIGKILL);
  }
  auto f = client.flush(60000);
  if (!f) {
    std::cerr << "flush: " << f.error().message << "\n";
    return 1;
  }
  const auto s = client.stats();
  std::cout << "written " << f.value().tensors_written << " failed " << f.value().tensors_failed
            << " staged " << s.device_records_staged << " records " << s.device_records
            << " statistics " << s.device_statistics << std::endl;
  return client.close().has_value() ? 0 : 1;
}
