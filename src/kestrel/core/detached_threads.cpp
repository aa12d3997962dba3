#include "kestrel/core/detached_threads.h"

#include <atomic>

namespace kestrel {
namespace {

std::atomic<int> running{0};  // trivially destructible: a thread may end during exit

}  // namespace

void detached_thread_started() { running.fetch_add(1); }
void detached_thread_ended() { running.fetch_sub(1); }
int detached_threads_running() { return running.load(); }

}  // namespace kestrel
