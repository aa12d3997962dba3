// Threads left to end on their own, as Python's daemon threads: a stream reader blocked in a network read
// (OpenCV's timeout is 30 s) is not waited for when detect stops. While one runs, main leaves with _Exit
// after flushing its output, rather than run static destructors of libraries the thread is inside.
#pragma once

namespace kestrel {

void detached_thread_started();
void detached_thread_ended();
int detached_threads_running();

}  // namespace kestrel
