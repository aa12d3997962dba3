// A local launcher, the single-node part of torchrun: runs the same command N times with RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT set, binds each
// rank to its own contiguous share of the allowed CPUs (OMP_NUM_THREADS = that share unless set;
// KESTREL_CPU_BIND=0 turns binding off), forwards
// SIGINT/SIGTERM to the workers, stops the others when one fails and returns the first failure's
// exit code (128 + signal for a worker killed by a signal), 0 when all succeed (also after a forwarded
// Ctrl-C that the workers handled by saving and exiting normally).
#pragma once
#include <string>
#include <vector>

namespace kestrel::dist {

// True when this process is already a worker of a launched job (WORLD_SIZE is set).
bool launched_worker();

// argv[0] is replaced by this executable (/proc/self/exe). master_port 0: MASTER_PORT from the
// environment, else a free port.
int launch_local(int nproc, const std::vector<std::string>& argv, int master_port = 0);

// `cpus` split into nproc contiguous ranges, the first ones one CPU larger when it does not divide;
// all empty when there are fewer CPUs than ranks.
std::vector<std::vector<int>> split_cpus(const std::vector<int>& cpus, int nproc);
std::vector<int> allowed_cpus();  // this process's affinity mask

// True in a worker of kestrel's launcher (launch_local): the launcher itself has said what the command line
// warrants, once for all its ranks.
bool started_by_launcher();

// True in a worker that the launcher bound to its own CPUs: its affinity mask is already its share.
bool cpus_bound_by_launcher();

}  // namespace kestrel::dist
