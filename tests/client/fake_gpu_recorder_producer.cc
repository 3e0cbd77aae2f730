// dumpd_fake_gpu_recorder_producer: a training loop whose "CUDA" tensors live on the fake
// device, with a flight recorder, through the real client and daemon. Test-only.
//
// Each step s marks iteration s, then runs ops 0..N-1. Op i writes, on the stream, into the
// same two device buffers every step (as a training step reuses its activations):
// input 0: int32[n], element k = k + 7i + 1000s; output 0: float32[n], element k =
// 0.5k + i + s. Right after each dumpOp the stream overwrites both buffers (0xAB / 0xCD):
// the files must still hold the values above.
// With --chain, op i > 0 also takes op i-1's output as its input 1 (the same device buffer
// and identity, as a layer takes the last one's activation): dump once sends it as a
// reference. Op i-1's output is overwritten after op i instead.
//
//   --socket PATH --config FILE --steps S --ops N --elements n --staging BYTES
//   --recorder JSON    the flight_recorder option (docs/recorder.md)
//   --inf-step K       output element 1 of op 1 is +inf at step K
//   --kill-step K      SIGKILL itself after the ops of step K (flushed first)
//   --delay-us D       the fake device's largest delay per operation
//   --chain            op i > 0 repeats op i-1's output as its input 1
//   --pause-step K     sleep --pause-ms (default 2000) after marking step K, before its ops
// Prints "stats deferred D fetched F released R records C deduplicated T" before it exits.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/client/fake_device.h"
#include "tests/client/fake_producer_options.h"

namespace {

void printStats(const dumpd::client::Stats& s) {
  std::cout << "stats deferred " << s.device_records_deferred << " fetched "
            << s.device_records_fetched << " released " << s.device_records_released << " records "
            << s.device_records << " deduplicated " << s.tensors_deduplicated << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  dumpd::testing::FakeProducerOptions args;
  args.ops = 4;
  args.delay_us = 100;
  uint64_t steps = 10;
  int64_t inf_step = -1, kill_step = -1;
  bool chain = false;
  int64_t pause_step = -1, pause_ms = 2000;
  const bool parsed = dumpd::testing::parseFakeProducerOptions(
      argc, argv, args, [&](const std::string& k, const char* v) {
        if (k == "--steps") {
          steps = std::strtoull(v, nullptr, 10);
        } else if (k == "--recorder") {
          args.client.flight_recorder = v;
        } else if (k == "--inf-step") {
          inf_step = std::strtoll(v, nullptr, 10);
        } else if (k == "--kill-step") {
          kill_step = std::strtoll(v, nullptr, 10);
        } else if (k == "--chain") {
          chain = std::strcmp(v, "1") == 0;
        } else if (k == "--pause-step") {
          pause_step = std::strtoll(v, nullptr, 10);
        } else if (k == "--pause-ms") {
          pause_ms = std::strtoll(v, nullptr, 10);
        } else {
          return false;
        }
        return true;
      });
  if (!parsed) return 2;
  const uint64_t ops = args.ops, elements = args.elements;
  auto producer = dumpd::testing::connectFakeProducer(args, "fake-gpu-recorder");
  if (!producer) return 1;
  auto& fake = producer->fake;
  auto& client = *producer->client;
  void* stream = producer->stream;
  const std::vector<int64_t> shape = {static_cast<int64_t>(elements)};
  const uint64_t bytes = elements * 4;
  std::vector<int32_t*> ins(ops);
  std::vector<float*> outs(ops);
  for (uint64_t i = 0; i < ops; ++i) {
    ins[i] = static_cast<int32_t*>(fake->allocate(bytes).value());
    outs[i] = static_cast<float*>(fake->allocate(bytes).value());
  }
  for (uint64_t s = 0; s < steps; ++s) {
    if (auto st = client.setStep(static_cast<uint32_t>(s)); !st) {
      std::cerr << "setStep: " << st.error().message << "\n";
      return 1;
    }
    if (static_cast<int64_t>(s) == pause_step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
    for (uint64_t i = 0; i < ops; ++i) {
      int32_t* in = ins[i];
      float* out = outs[i];
      const bool inf = static_cast<int64_t>(s) == inf_step && i == 1 && elements > 1;
      // The op's "kernel": writes this step's values on the stream.
      fake->enqueue(stream, [=] {
        for (uint64_t k = 0; k < elements; ++k) {
          in[k] = static_cast<int32_t>(k + 7 * i + 1000 * s);
          out[k] = 0.5f * static_cast<float>(k) + static_cast<float>(i + s);
        }
        if (inf) out[1] = std::numeric_limits<float>::infinity();
      });
      // Identities change every step (a new activation each step).
      const auto identity = [&](uint64_t op_index) { return ((s + 1) << 16) | (op_index + 1); };
      const bool repeats = chain && i > 0;
      // Inputs first, as a framework lists them: input 0, (input 1,) output 0.
      dumpd::client::Tensor t[3];
      t[0].io = dumpd::Io::kInput;
      t[0].dtype = dumpd::DType::kInt32;
      t[0].data = in;
      dumpd::client::Tensor& o = t[repeats ? 2 : 1];
      o.io = dumpd::Io::kOutput;
      o.dtype = dumpd::DType::kFloat32;
      o.data = out;
      o.identity = chain ? identity(i) : 0;
      if (repeats) {
        t[1].io = dumpd::Io::kInput;
        t[1].slot = 1;
        t[1].dtype = dumpd::DType::kFloat32;
        t[1].data = outs[i - 1];
        t[1].identity = identity(i - 1);
      }
      for (auto& x : t) {
        x.shape = shape;
        x.bytes = bytes;
        x.memory = dumpd::client::Memory::kCuda;
      }
      const std::string name = "Default/net/Fake-op" + std::to_string(i);
      dumpd::client::OpCall op;
      op.op_type = "Fake";
      op.op_name = name;
      op.tensors = std::span(t, repeats ? 3 : 2);
      op.stream = stream;
      if (auto r = client.dumpOp(op); !r) {
        std::cerr << "dumpOp: " << r.error().message << "\n";
        return 1;
      }
      // The next op's work reuses the memory at once (with --chain, op i-1's output once op
      // i took it).
      float* done = chain ? (i > 0 ? outs[i - 1] : nullptr) : out;
      float* last = chain && i + 1 == ops ? out : nullptr;
      fake->enqueue(stream, [=] {
        std::memset(in, 0xAB, bytes);
        if (done != nullptr) std::memset(done, 0xCD, bytes);
        if (last != nullptr) std::memset(last, 0xCD, bytes);
      });
    }
    if (static_cast<int64_t>(s) == kill_step) {
      if (auto f = client.flush(30000); !f) {
        std::cerr << "flush: " << f.error().message << "\n";
        return 1;
      }
      printStats(client.stats());
      ::raise(SIGKILL);
    }
  }
  auto f = client.flush(60000);
  if (!f) {
    std::cerr << "flush: " << f.error().message << "\n";
    return 1;
  }
  printStats(client.stats());
  std::cout << "written " << f.value().tensors_written << " failed " << f.value().tensors_failed
            << std::endl;
  return client.close().has_value() ? 0 : 1;
}
