#include "dumpctl/validate_command.h"

#include "config/dump_plan.h"
#include "config/json_util.h"

namespace dumpd::dumpctl {

int runValidateCommand(const std::string& file, std::ostream& out, std::ostream& err) {
  auto plan = config::loadDumpPlan(file, config::Environment::fromProcess());
  if (!plan) {
    err << "dumpctl: " << config::internal::printable(file) << ": " << plan.error().message << "\n";
    return 1;
  }
  out << config::summarizePlan(*plan) << "\n";
  for (const std::string& warning : plan->warnings) err << "dumpctl: warning: " << warning << "\n";
  return 0;
}

}  // namespace dumpd::dumpctl
