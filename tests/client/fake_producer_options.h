// The options the fake-device producers share (fake_gpu_producer.cc,
// fake_gpu_recorder_producer.cc): "--key value" pairs. Test-only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "client/client.h"
#include "tests/client/fake_device.h"

namespace dumpd::testing {

struct FakeProducerOptions {
  client::Options client;
  uint64_t ops = 10;
  uint64_t elements = 1024;
  int delay_us = 200;
};

// Parses argv into `o`; the producer's own keys go to `own` (false: unknown). False, after
// a message, for an unknown key.
inline bool parseFakeProducerOptions(
    int argc, char** argv, FakeProducerOptions& o,
    const std::function<bool(const std::string&, const char*)>& own) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--socket") {
      o.client.socket_path = v;
    } else if (k == "--config") {
      o.client.config_path = v;
    } else if (k == "--ops") {
      o.ops = std::strtoull(v, nullptr, 10);
    } else if (k == "--elements") {
      o.elements = std::strtoull(v, nullptr, 10);
    } else if (k == "--staging") {
      o.client.device_staging_bytes = std::strtoull(v, nullptr, 10);
    } else if (k == "--delay-us") {
      o.delay_us = std::atoi(v);
    } else if (!own(k, v)) {
      std::cerr << "unknown option " << k << "\n";
      return false;
    }
  }
  return true;
}

// A client whose device is a fake one (one device, `o.delay_us`), connected, and a stream.
struct FakeProducer {
  std::shared_ptr<FakeDevice> fake;
  std::unique_ptr<client::Client> client;
  void* stream = nullptr;
};

// Connects as `name`; nullopt after a message when the daemon refuses.
inline std::optional<FakeProducer> connectFakeProducer(FakeProducerOptions& o, const char* name) {
  FakeProducer p;
  p.fake =
      std::make_shared<FakeDevice>(FakeDevice::Config{.devices = 1, .max_delay_us = o.delay_us});
  o.client.device_api = p.fake;
  o.client.producer_name = name;
  auto c = client::Client::connect(o.client);
  if (!c) {
    std::cerr << "connect: " << c.error().message << "\n";
    return std::nullopt;
  }
  p.client = std::move(c.value());
  p.stream = p.fake->createStream().value();
  return p;
}

}  // namespace dumpd::testing
