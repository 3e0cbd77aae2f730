// A training program outside dumpd's tree, built against the installed client library
// (tests/package): dumps one op of a float32 tensor whose element i is i * 0.5, then flushes;
// compares two replicas of it with the replica API on the way.
//   consumer CONFIG_JSON SOCKET
#include <dumpd/dumpd.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer CONFIG_JSON SOCKET\n");
    return 2;
  }
  dumpd::client::Options options;
  options.config_path = argv[1];
  options.socket_path = argv[2];
  options.producer_name = "package-consumer";
  auto client = dumpd::client::Client::connect(options);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.error().message.c_str());
    return 1;
  }
  std::vector<float> data(12);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  const int64_t shape[] = {3, 4};
  dumpd::client::Tensor t;
  t.io = dumpd::Io::kOutput;
  t.dtype = dumpd::DType::kFloat32;
  t.shape = shape;
  t.data = data.data();
  t.bytes = data.size() * sizeof(float);
  dumpd::client::OpCall op;
  op.op_type = "Consumer";
  op.op_name = "Default/Consumer-op0";
  op.tensors = {&t, 1};
  // The replica API: its digest, and two equal replicas compared.
  const uint64_t digest = dumpd::client::replicaDigest(data.data(), t.bytes);
  const uint64_t table[] = {digest, digest};
  auto verdicts = dumpd::client::compareReplicas(table, 2, 1);
  if (!verdicts || !verdicts.value().empty()) {
    std::fprintf(stderr, "compareReplicas found a difference between equal replicas\n");
    return 1;
  }
  if (auto s = (*client)->setStep(0); !s) return 1;
  auto dumped = (*client)->dumpOp(op);
  if (!dumped || !*dumped) {
    std::fprintf(stderr, "dumpOp failed\n");
    return 1;
  }
  if (auto closed = (*client)->close(); !closed) {
    std::fprintf(stderr, "close: %s\n", closed.error().message.c_str());
    return 1;
  }
  std::printf("dumpd client library %s: dumped\n", dumpd::client::libraryVersion());
  return 0;
}
