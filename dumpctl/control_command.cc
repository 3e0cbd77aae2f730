#include "dumpctl/control_command.h"

#include <charconv>

#include "config/iteration_set.h"

namespace dumpd::dumpctl {

int runControlCommand(const std::vector<std::string_view>& args, const std::string& socket,
                      std::ostream& out, std::ostream& err) {
  const auto usage = [&](const std::string& message) {
    err << "dumpctl control: " << message << "\n";
    return 2;
  };
  std::vector<std::string_view> selector;
  v1::SessionCommand cmd;
  v1::ControlChange* change = cmd.mutable_control();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--iteration") {
      if (i + 1 >= args.size()) return usage("--iteration needs a RANGE (\"all\", \"0|5-8\")");
      const std::string_view range = args[++i];
      // Checked here too, for the same message without a round trip.
      if (auto set = config::IterationSet::parse(range); !set) {
        err << "dumpctl control: " << set.error().message << "\n";
        return 1;
      }
      change->set_iteration(std::string(range));
    } else if (a == "--pause" || a == "--resume") {
      if (change->has_paused()) return usage("give one of --pause and --resume");
      change->set_paused(a == "--pause");
    } else if (a == "--recorder") {
      if (i + 1 >= args.size() || (args[i + 1] != "on" && args[i + 1] != "off")) {
        return usage("--recorder needs on or off");
      }
      change->set_recorder_on(args[++i] == "on");
    } else if (a == "--replica-every") {
      uint32_t n = 0;
      const std::string_view v = i + 1 < args.size() ? args[i + 1] : std::string_view();
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n == 0) {
        return usage("--replica-every needs a number of optimizer steps, at least 1");
      }
      ++i;
      change->set_replica_every(n);
    } else {
      selector.push_back(a);
    }
  }
  // The selector first: an unknown option is named whatever else is on the line.
  auto sel = parseSessionSelector(
      selector, {"--iteration", "--pause", "--resume", "--recorder", "--replica-every"});
  if (!sel) return usage(sel.error().message);
  if (!change->has_iteration() && !change->has_paused() && !change->has_recorder_on() &&
      !change->has_replica_every()) {
    return usage(
        "nothing to change: give --iteration, --pause, --resume, --recorder or --replica-every");
  }
  *cmd.mutable_target() = sel.value();
  return sendSessionCommand(socket, cmd, "control", out, err);
}

}  // namespace dumpd::dumpctl
