#include "kestrel/dist/launcher.h"

#include <arpa/inet.h>
#include <sched.h>
#include <sys/prctl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "kestrel/core/error.h"

namespace kestrel::dist {
namespace {

std::atomic<int> g_forward_signal{0};

void on_signal(int sig) { g_forward_signal.store(sig); }

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) fail("launcher: cannot open a socket to find a free port: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    fail("launcher: cannot find a free port on 127.0.0.1: ", std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

constexpr const char* kBoundEnv = "KESTREL_LAUNCHER_BOUND_CPUS";
constexpr const char* kLaunchedEnv = "KESTREL_LAUNCHER_WORKER";

}  // namespace

std::vector<std::vector<int>> split_cpus(const std::vector<int>& cpus, int nproc) {
  std::vector<std::vector<int>> out(static_cast<size_t>(nproc));
  if (nproc < 1 || static_cast<int>(cpus.size()) < nproc) return out;
  const size_t base = cpus.size() / nproc, extra = cpus.size() % nproc;
  size_t next = 0;
  for (size_t r = 0; r < out.size(); ++r) {
    const size_t n = base + (r < extra ? 1 : 0);
    out[r].assign(cpus.begin() + static_cast<std::ptrdiff_t>(next), cpus.begin() + static_cast<std::ptrdiff_t>(next + n));
    next += n;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

bool launched_worker() {
  const char* ws = std::getenv("WORLD_SIZE");
  return ws != nullptr && *ws != '\0';
}

bool started_by_launcher() {
  const char* v = std::getenv(kLaunchedEnv);
  return v != nullptr && std::string(v) == "1";
}

bool cpus_bound_by_launcher() {
  const char* v = std::getenv(kBoundEnv);
  return v != nullptr && std::string(v) == "1";
}

namespace {

// MASTER_PORT from the environment, else a free port.
int master_port_from_env() {
  const char* p = std::getenv("MASTER_PORT");
  if (p == nullptr || *p == '\0') return free_port();
  char* end = nullptr;  // (atoi made "abc" port 0)
  const long port = std::strtol(p, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) fail("MASTER_PORT=", p, ": expected a port number in [1, 65535]");
  return static_cast<int>(port);
}

// How the workers start: the executable, its ports and signals, and each rank's CPUs (empty: unbound).
struct WorkerSetup {
  std::string exe;
  int nproc = 1, master_port = 0;
  bool int_ignored = false;
  pid_t launcher_pid = 0;
  std::vector<std::vector<int>> cpus;  // per rank
};

// The forked worker of rank r: its own process group (a terminal's Ctrl-C reaches only the launcher, which
// forwards it once), its own environment, then the same command line. Never returns.
[[noreturn]] void exec_worker(int r, const WorkerSetup& w, const std::vector<std::string>& argv) {
  ::setpgid(0, 0);
  ::signal(SIGINT, w.int_ignored ? SIG_IGN : SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  // A launcher that dies (SIGKILL, a closed terminal's SIGHUP) takes its workers with it: SIGTERM,
  // which a training worker handles by saving and stopping with the others; none is left orphaned.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != w.launcher_pid) ::_exit(1);  // it died before the line above
  const std::string rank = std::to_string(r), world = std::to_string(w.nproc), port = std::to_string(w.master_port);
  ::setenv("RANK", rank.c_str(), 1);
  ::setenv("LOCAL_RANK", rank.c_str(), 1);
  ::setenv("GROUP_RANK", "0", 1);
  ::setenv("WORLD_SIZE", world.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  ::setenv(kLaunchedEnv, "1", 1);
  if (!w.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : w.cpus[r]) CPU_SET(c, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
      std::cerr << "launcher: rank " << r << ": cannot bind to its CPUs: " << std::strerror(errno) << std::endl;
    // One compute thread per bound core, unless the user chose (OpenMP would otherwise start one
    // thread per core of the machine, all competing for this rank's cores).
    ::setenv("OMP_NUM_THREADS", std::to_string(w.cpus[r].size()).c_str(), 0);
    ::setenv(kBoundEnv, "1", 1);
  } else if (w.nproc > 1) {
    ::setenv("OMP_NUM_THREADS", "1", 0);  // as torchrun: do not oversubscribe the cores
  }
  std::vector<char*> args;
  args.push_back(const_cast<char*>(w.exe.c_str()));
  for (size_t i = 1; i < argv.size(); ++i) args.push_back(const_cast<char*>(argv[i].c_str()));
  args.push_back(nullptr);
  ::execv(w.exe.c_str(), args.data());
  std::cerr << "launcher: cannot execute " << w.exe << ": " << std::strerror(errno) << std::endl;
  ::_exit(127);
}

// Waits for the workers, forwarding Ctrl-C/SIGTERM to them; the first failure kills the others. Returns
// the run's exit code: 0, the first failed rank's code, or 130 when the ranks stopped and saved.
int supervise(std::vector<pid_t> pids) {
  const int nproc = static_cast<int>(pids.size());
  int result = 0, alive = nproc;
  bool failed = false, killed = false;
  while (alive > 0) {
    // Polled, not a blocking wait: a signal that arrives between two waits (or while forking) is
    // forwarded within 50 ms, not when a worker happens to exit.
    if (const int sig = g_forward_signal.exchange(0); sig != 0)
      for (pid_t p : pids)
        if (p > 0) ::kill(p, sig);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      ::usleep(50 * 1000);
      continue;
    }
    if (pid < 0) break;  // ECHILD: nothing left
    int rank = -1;
    for (int r = 0; r < nproc; ++r)
      if (pids[r] == pid) rank = r;
    if (rank < 0) continue;
    pids[rank] = -1;
    --alive;
    const int code = exit_code_of(status);
    // Stopped and saved (Ctrl-C, SIGTERM): the worker exits with 130 itself; the ranks agree on the
    // step, the others follow. A worker killed by SIGINT (128 + 2 too, but before its handler was set)
    // saved nothing: that is a failure like any other.
    if (WIFEXITED(status) && code == 130) {
      if (!failed) result = 130;
      continue;
    }
    if (code != 0 && !failed) {  // the first failure is the result; the ranks killed after it are not
      failed = true;
      result = code;
      std::cerr << "launcher: rank " << rank << " failed (exit code " << code << ")"
                << (alive > 0 ? "; stopping the others" : "") << std::endl;
    }
    if (code != 0 && !killed) {
      // SIGKILL, also after a forwarded Ctrl-C: a rank that handled SIGTERM or SIGINT (save and stop at
      // its next step) would wait in a collective for the failed rank until the timeout.
      killed = true;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    }
  }
  return result;
}

}  // namespace

int launch_local(int nproc, const std::vector<std::string>& argv, int master_port) {
  if (nproc < 1) fail("--nproc-per-node ", nproc, ": expected at least 1");
  if (argv.empty()) fail("launcher: empty command line");
  WorkerSetup w;
  w.nproc = nproc;
  w.master_port = master_port != 0 ? master_port : master_port_from_env();
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) fail("launcher: cannot resolve /proc/self/exe: ", std::strerror(errno));
  w.exe.assign(exe, static_cast<size_t>(n));

  // An inherited SIGCHLD of SIG_IGN would reap the workers in the kernel: waitpid would answer ECHILD
  // at once and a failed rank would pass for a finished run.
  ::signal(SIGCHLD, SIG_DFL);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  // Started with Ctrl-C ignored (a script's background job): so are the workers, as a single process
  // keeps ignoring it (core/stop_signal.h).
  w.int_ignored = old_int.sa_handler == SIG_IGN;
  if (w.int_ignored) ::signal(SIGINT, SIG_IGN);

  std::cout << "launcher: " << nproc << " processes on this node, MASTER_ADDR=127.0.0.1 MASTER_PORT=" << w.master_port
            << std::endl;
  // Variables of a multi-node job are replaced for the workers: each node would train alone.
  for (const char* name : {"NODE_RANK", "GROUP_RANK", "MASTER_ADDR"}) {
    const char* v = std::getenv(name);
    const std::string value = v == nullptr ? "" : v;
    if (value.empty() || value == "0" || value == "127.0.0.1" || value == "localhost") continue;
    std::cerr << "launcher: WARNING: " << name << "=" << value << " in the environment is not used: --nproc-per-node "
              << "starts a job on this node alone; for several nodes start kestrel with torchrun (docs/distributed.md)"
              << std::endl;
  }
  // Each rank on its own range of this process's CPUs (the guides' taskset per rank), unless
  // KESTREL_CPU_BIND=0 or there are fewer CPUs than ranks.
  const char* bind_env = std::getenv("KESTREL_CPU_BIND");
  if (nproc > 1 && !(bind_env != nullptr && std::string(bind_env) == "0")) {
    w.cpus = split_cpus(allowed_cpus(), nproc);
    if (w.cpus.empty() || w.cpus[0].empty()) w.cpus.clear();
  }
  for (int r = 0; r < nproc && !w.cpus.empty(); ++r)
    std::cout << "launcher: rank " << r << " on CPUs " << w.cpus[r].front() << "-" << w.cpus[r].back() << std::endl;
  w.launcher_pid = ::getpid();
  std::vector<pid_t> pids(nproc, -1);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) fail("launcher: fork failed: ", std::strerror(errno));
    if (pid == 0) exec_worker(r, w, argv);
    pids[r] = pid;
  }
  const int result = supervise(pids);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace kestrel::dist
