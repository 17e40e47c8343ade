#include "tests/testing/nats_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace zoom::testing {
namespace {

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

std::string NatsServerBinary() {
  for (const char* p : {"/usr/sbin/nats-server", "/usr/bin/nats-server"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

NatsServer::NatsServer(std::string name, std::string store_dir, std::vector<int> route_ports,
                       bool clustered)
    : name_(std::move(name)),
      store_dir_(std::move(store_dir)),
      log_path_(store_dir_ + ".log"),
      config_path_(store_dir_ + ".conf"),
      route_ports_(std::move(route_ports)),
      clustered_(clustered || !route_ports_.empty()) {}

NatsServer::~NatsServer() {
  if (pid_ > 0) Signal(SIGKILL);
}

bool NatsServer::Start(absl::Duration timeout) {
  if (pid_ > 0) return true;
  const std::string bin = NatsServerBinary();
  if (bin.empty()) return false;
  // max_payload has no flag: a config file for it, the rest on the command
  // line (which nats-server merges over the file).
  {
    std::ofstream conf(config_path_, std::ios::trunc);
    conf << "max_payload: " << max_payload_ << "\n";
    if (!conf.flush()) return false;
  }
  // Everything the child needs is made before fork (no allocation after
  // fork in a threaded process).
  std::vector<std::string> args = {bin, "-c", config_path_, "-a", "127.0.0.1", "-p",
                                   std::to_string(client_.port()), "-js", "-sd", store_dir_,
                                   "-n", name_};
  if (clustered_) {
    std::vector<std::string> routes;
    for (int p : route_ports_) routes.push_back(absl::StrCat("nats://127.0.0.1:", p));
    args.insert(args.end(), {"--cluster_name", "zoomtest", "--cluster",
                             absl::StrCat("nats://127.0.0.1:", cluster_.port()), "--routes",
                             absl::StrJoin(routes, ",")});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(126);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  if (pid_ < 0) return false;
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (Accepts(client_.port())) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

void NatsServer::Signal(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  if (sig == SIGKILL || sig == SIGTERM) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

std::string NatsServer::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

NatsCluster::NatsCluster(const std::string& dir, int size) {
  for (int i = 0; i < size; ++i) {
    servers_.push_back(std::make_unique<NatsServer>(absl::StrCat("n", i),
                                                    absl::StrCat(dir, "/nats", i),
                                                    std::vector<int>{}, /*clustered=*/true));
  }
  for (int i = 0; i < size; ++i) {
    std::vector<int> routes;
    for (int j = 0; j < size; ++j) {
      if (j != i) routes.push_back(servers_[j]->cluster_port());
    }
    servers_[i]->set_route_ports(routes);
  }
}

bool NatsCluster::Start(absl::Duration timeout) {
  for (auto& s : servers_) {
    if (!s->Start(timeout)) return false;
  }
  return true;
}

std::vector<std::string> NatsCluster::urls() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) out.push_back(s->url());
  return out;
}

}  // namespace zoom::testing
