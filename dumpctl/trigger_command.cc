#include "dumpctl/trigger_command.h"

namespace dumpd::dumpctl {

int runTriggerCommand(const std::vector<std::string_view>& args, const std::string& socket,
                      std::ostream& out, std::ostream& err) {
  std::vector<std::string_view> selector;
  v1::SessionCommand cmd;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--reason") {
      if (i + 1 >= args.size()) {
        err << "dumpctl trigger: --reason needs a TEXT\n";
        return 2;
      }
      cmd.mutable_trigger()->set_reason(std::string(args[++i]));
    } else {
      selector.push_back(args[i]);
    }
  }
  auto sel = parseSessionSelector(selector, {"--reason"});
  if (!sel) {
    err << "dumpctl trigger: " << sel.error().message << "\n";
    return 2;
  }
  *cmd.mutable_target() = sel.value();
  cmd.mutable_trigger();
  return sendSessionCommand(socket, cmd, "trigger", out, err);
}

}  // namespace dumpd::dumpctl
