#include "dumpctl/session_request.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include "ipc/socket_io.h"
#include "ipc/socket_path.h"

namespace dumpd::dumpctl {
namespace {

constexpr int kExitFailed = 1;

template <typename T>
bool parseNumber(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

Error usage(std::string message) {
  return makeError(ErrorCode::kInvalidArgument, std::move(message));
}

// Levenshtein distance (options are short).
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string_view nearestOption(std::string_view given, const std::vector<std::string_view>& known) {
  std::string_view best;
  size_t best_distance = 0;
  for (std::string_view k : known) {
    const size_t d = editDistance(given, k);
    if (best.empty() || d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  // Close: a third of the option's length at most (a typo, a plural, a dash).
  if (best.empty() || best_distance * 3 > best.size()) return {};
  return best;
}

Result<v1::SessionSelector> parseSessionSelector(
    const std::vector<std::string_view>& args,
    const std::vector<std::string_view>& command_options) {
  v1::SessionSelector sel;
  bool have_rank = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    const auto value = [&](std::string_view) -> std::optional<std::string_view> {
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    if (a == "--pid") {
      auto v = value(a);
      int32_t pid = 0;
      if (!v || !parseNumber(*v, pid) || pid <= 0) return usage("--pid needs a process id");
      sel.set_pid(pid);
    } else if (a == "--rank") {
      auto v = value(a);
      uint32_t rank = 0;
      if (!v || !parseNumber(*v, rank)) return usage("--rank needs a rank number");
      sel.set_rank(rank);
      have_rank = true;
    } else if (a == "--job") {
      auto v = value(a);
      if (!v || v->empty()) return usage("--job needs the job's net_name");
      sel.set_net_name(std::string(*v));
    } else if (!a.starts_with("-")) {
      uint64_t id = 0;
      if (!parseNumber(a, id) || id == 0) {
        // Appended, not "'" + std::string: GCC 12's false -Wrestrict (its bug 105329).
        std::string why = "'";
        why.append(a).append("' is not a session id (dumpctl status shows them)");
        return usage(std::move(why));
      }
      if (sel.session_id() != 0) return usage("more than one session id given");
      sel.set_session_id(id);
    } else {
      std::vector<std::string_view> known = {"--pid", "--rank", "--job"};
      known.insert(known.end(), command_options.begin(), command_options.end());
      std::string why = "unknown argument '";
      why.append(a).append("'");
      if (std::string_view near = nearestOption(a, known); !near.empty()) {
        why.append(" (did you mean ").append(near).append("?)");
      }
      return usage(std::move(why));
    }
  }
  if (have_rank != !sel.net_name().empty()) return usage("--rank and --job go together");
  sel.set_by_rank(have_rank);
  const int ways = (sel.session_id() != 0) + (sel.pid() != 0) + have_rank;
  if (ways == 0) return usage("name the session: SESSION, --pid PID, or --rank N --job NET_NAME");
  if (ways > 1) return usage("name the session one way only");
  return sel;
}

int sendSessionCommand(const std::string& socket, const v1::SessionCommand& command,
                       std::string_view name, std::ostream& out, std::ostream& err) {
  v1::Envelope req;
  *req.mutable_session_command() = command;
  auto sock = ipc::connectUnix(ipc::resolveSocketPath(socket));
  if (!sock) {
    err << "dumpctl " << name << ": " << sock.error().message << "\n";
    return kExitFailed;
  }
  ipc::FrameDecoder decoder;
  Status sent = ipc::sendFrame(sock->get(), req);
  auto reply =
      sent ? ipc::recvFrame(sock->get(), decoder, 5000) : Result<v1::Envelope>(sent.error());
  if (!reply) {
    err << "dumpctl " << name << ": " << reply.error().message << "\n";
    return kExitFailed;
  }
  if (reply->has_error()) {
    err << "dumpctl " << name << ": " << reply->error().message() << "\n";
    return kExitFailed;
  }
  if (!reply->has_session_command_reply()) {
    err << "dumpctl " << name << ": dumpd answered with an unexpected message\n";
    return kExitFailed;
  }
  out << reply->session_command_reply().message() << "\n";
  return 0;
}

}  // namespace dumpd::dumpctl
