#include "loadtest/zoomd_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process.h"
#include "common/timer.h"

namespace zoom::load {

ZoomdChild::ZoomdChild(ZoomdChildOptions options) : options_(std::move(options)) {
  port_file_ = options_.data_dir + ".port";
}

ZoomdChild::~ZoomdChild() {
  client_.reset();
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<double> ZoomdChild::Start() {
  if (pid_ > 0) return absl::FailedPreconditionError("zoomd is already running");
  ::unlink(port_file_.c_str());
  std::vector<std::string> args = {options_.binary, "--data_dir=" + options_.data_dir,
                                   "--port_file=" + port_file_, "--grpc_address=127.0.0.1:0",
                                   "--metrics_address="};
  args.insert(args.end(), options_.flags.begin(), options_.flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log = ::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", options_.log_path));
  Stopwatch sw;
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    // Killed with zoomload, however zoomload ends (the destructor's SIGKILL
    // runs only on a normal exit). The signal follows the forking thread.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log);
  if (pid_ < 0) return absl::InternalError("fork failed");
  const absl::Time end = absl::Now() + options_.start_timeout;
  while (absl::Now() < end) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("zoomd exited during start-up (see ", options_.log_path, ")"));
    }
    std::ifstream in(port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      client::ClientOptions client_options;
      client_options.timeout = options_.client_timeout;
      target_ = absl::StrCat("127.0.0.1:", port);
      client_ = client::ZoomClient::Connect(target_, client_options);
      auto health = client_->Health();
      if (health.ok() && *health == "SERVING") return sw.ElapsedMicros() / 1e6;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("zoomd did not serve within ", absl::FormatDuration(options_.start_timeout)));
}

absl::Status ZoomdChild::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  client_.reset();
  ::kill(pid_, SIGTERM);
  const absl::Time end = absl::Now() + absl::Minutes(10);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) != pid_) {
    if (absl::Now() > end) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return absl::DeadlineExceededError("zoomd did not exit within 10 min of SIGTERM");
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("zoomd exited with status ", status, " (see ",
                                            options_.log_path, ")"));
  }
  return absl::OkStatus();
}

uint64_t ZoomdChild::Rss() const { return RssBytesOf(pid_); }
uint64_t ZoomdChild::PeakRss() const { return PeakRssBytesOf(pid_); }
void ZoomdChild::ResetPeak() const {
  std::ofstream(absl::StrCat("/proc/", pid_, "/clear_refs")) << "5";
}
double ZoomdChild::CpuSeconds() const { return CpuSecondsOf(pid_); }

std::string DefaultZoomdBinary() { return SelfDir() + "/../server/main/zoomd"; }

std::string KernelsFromLog(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, kernels = "?";
  while (std::getline(in, line)) {
    const size_t at = line.find(", kernels ");
    if (at == std::string::npos) continue;
    const size_t from = at + 10;
    // The choices may hold ", " themselves: the next field is ", sync ".
    kernels = line.substr(from, line.find(", sync ", from) - from);
  }
  return kernels;
}

}  // namespace zoom::load
