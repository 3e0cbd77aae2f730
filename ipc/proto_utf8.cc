#include "ipc/proto_utf8.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <climits>
#include <cstdint>
#include <span>

#include "base/utf8.h"

namespace dumpd::ipc {
namespace {

using google::protobuf::internal::WireFormatLite;

// A length-delimited field of a message that a client sends: a string, or a nested message
// (its fields: `message`).
struct Field {
  int number;
  const char* name;                // full name, for the error
  std::span<const Field> message;  // empty: a string
};

// proto/dumpd.proto, client -> daemon. Fields not listed (numbers, bytes) are skipped.
constexpr Field kArgsEntry[] = {{1, "dumpd.v1.KernelArgs.ArgsEntry.key", {}},
                                {2, "dumpd.v1.KernelArgs.ArgsEntry.value", {}}};
constexpr Field kTrigger[] = {{1, "dumpd.v1.Trigger.reason", {}}};
constexpr Field kExecutionOrder[] = {{2, "dumpd.v1.ExecutionOrder.op_names", {}}};
constexpr Field kKernelArgs[] = {{3, "dumpd.v1.KernelArgs.op_type", {}},
                                 {4, "dumpd.v1.KernelArgs.op_name", {}},
                                 {5, "dumpd.v1.KernelArgs.args", kArgsEntry}};
constexpr Field kConstant[] = {{2, "dumpd.v1.Constant.data_id", {}}};
constexpr Field kControl[] = {{3, "dumpd.v1.Control.execution_order", kExecutionOrder},
                              {4, "dumpd.v1.Control.kernel_args", kKernelArgs},
                              {5, "dumpd.v1.Control.constant", kConstant},
                              {6, "dumpd.v1.Control.trigger", kTrigger}};
constexpr Field kHello[] = {
    {6, "dumpd.v1.Hello.job_config", {}},       {7, "dumpd.v1.Hello.producer_name", {}},
    {8, "dumpd.v1.Hello.producer_version", {}}, {11, "dumpd.v1.Hello.device_target", {}},
    {12, "dumpd.v1.Hello.config_path", {}},     {13, "dumpd.v1.Hello.ms_diagnostic_data_path", {}},
    {14, "dumpd.v1.Hello.ms_format", {}}};
constexpr Field kSelector[] = {{5, "dumpd.v1.SessionSelector.net_name", {}}};
constexpr Field kControlChange[] = {{1, "dumpd.v1.ControlChange.iteration", {}}};
constexpr Field kSessionCommand[] = {{1, "dumpd.v1.SessionCommand.target", kSelector},
                                     {2, "dumpd.v1.SessionCommand.trigger", kTrigger},
                                     {3, "dumpd.v1.SessionCommand.control", kControlChange}};
constexpr Field kEnvelope[] = {{1, "dumpd.v1.Envelope.hello", kHello},
                               {9, "dumpd.v1.Envelope.session_command", kSessionCommand}};

// Nested messages deeper than this are not looked into (dumpd.v1 nests three deep).
constexpr int kMaxDepth = 8;

const Field* find(std::span<const Field> m, int number) {
  for (const Field& f : m) {
    if (f.number == number) return &f;
  }
  return nullptr;
}

std::string walk(std::span<const Field> type, std::string_view bytes, int depth) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return {};
    const Field* field = find(type, static_cast<int>(WireFormatLite::GetTagFieldNumber(tag)));
    if (field == nullptr ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return {};
      continue;
    }
    uint32_t length = 0;
    std::string value;
    if (!in.ReadVarint32(&length) || length > INT32_MAX ||
        !in.ReadString(&value, static_cast<int>(length))) {
      return {};
    }
    if (field->message.empty()) {
      if (!isValidUtf8(value)) return field->name;
    } else if (depth < kMaxDepth) {
      std::string inner = walk(field->message, value, depth + 1);
      if (!inner.empty()) return inner;
    }
  }
}

}  // namespace

std::string invalidUtf8Field(WireMessage type, std::string_view bytes) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) return {};
  return walk(type == WireMessage::kEnvelope ? std::span<const Field>(kEnvelope)
                                             : std::span<const Field>(kControl),
              bytes, 0);
}

}  // namespace dumpd::ipc
