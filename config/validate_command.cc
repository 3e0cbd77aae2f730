#include "config/validate_command.h"

#include "config/dump_plan.h"
#include "config/json_util.h"

namespace dumpd::config {

int runValidateCommand(const std::string& file, std::ostream& out, std::ostream& err) {
  auto plan = loadDumpPlan(file, Environment::fromProcess());
  if (!plan) {
    err << "dumpctl: " << internal::printable(file) << ": " << plan.error().message << "\n";
    return 1;
  }
  out << summarizePlan(*plan) << "\n";
  for (const std::string& warning : plan->warnings) err << "dumpctl: warning: " << warning << "\n";
  return 0;
}

}  // namespace dumpd::config
