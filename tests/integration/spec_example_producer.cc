// Produces MindSpore's own system-test example (spec section 7) through dumpd: net "Add",
// x = [[1,2,3],[4,5,6]], y = [[7,8,9],[10,11,12]] float32, out = x + y, graph 0, step 0.
// Usage: spec_example_producer SOCKET CONFIG
#include <iostream>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: spec_example_producer SOCKET CONFIG\n";
    return 2;
  }
  dumpd::client::Options o;
  o.socket_path = argv[1];
  o.config_path = argv[2];
  o.rank = 0;
  o.device = 0;
  auto client = dumpd::client::Client::connect(o);
  if (!client) {
    std::cerr << client.error().message << "\n";
    return 1;
  }
  auto& c = *client.value();
  const float x[] = {1, 2, 3, 4, 5, 6};
  const float y[] = {7, 8, 9, 10, 11, 12};
  float out[6];
  for (int i = 0; i < 6; ++i) out[i] = x[i] + y[i];
  const int64_t shape[] = {2, 3};
  dumpd::client::Tensor t[3];
  const float* data[3] = {x, y, out};
  for (int i = 0; i < 3; ++i) {
    t[i].io = i < 2 ? dumpd::Io::kInput : dumpd::Io::kOutput;
    t[i].slot = i < 2 ? static_cast<uint32_t>(i) : 0;
    t[i].shape = shape;
    t[i].data = data[i];
    t[i].bytes = sizeof x;
  }
  if (auto s = c.setStep(0, 0); !s) return 1;
  dumpd::client::OpCall call;
  call.op_type = "Add";
  call.op_name = "Default/Add-op0";
  call.tensors = t;
  auto r = c.dumpOp(call);
  if (!r || !r.value()) {
    std::cerr << "dump failed\n";
    return 1;
  }
  auto f = c.flush(30000);
  if (!f) {
    std::cerr << f.error().message << "\n";
    return 1;
  }
  std::cout << "written " << f->tensors_written << "\n";
  return c.close().has_value() ? 0 : 1;
}
