#include "dumpctl/session_request.h"

#include <charconv>
#include <string>
#include <utility>

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

}  // namespace

Result<v1::SessionSelector> parseSessionSelector(const std::vector<std::string_view>& args) {
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
      return usage("unknown argument '" + std::string(a) + "'");
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
