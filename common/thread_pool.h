// The process's compute threads: one pool, started on first use and kept for the life of
// the process, that runs the numbered tasks of a parallel region (common/parallel.h) on
// the calling thread and on pool threads, so a region costs a wake-up, not a thread start.
//
// Thread safety: run() may be called from any number of threads at once; their tasks
// share the pool threads, first come first served. Every field of the pool is guarded by
// its one mutex; a task's own writes are published to the caller of run() through that
// mutex too (each task's end is recorded under it, and run() returns after reading it).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>

namespace hsring {

class ThreadPool {
 public:
  // The one pool. Never destroyed: its threads are parked at exit rather than joined, so a
  // parallel region during static destruction or a std::exit from another thread never
  // waits on (or for) a pool that is gone. A child forked while the pool exists starts
  // with an empty pool (its parent's threads do not exist there) and grows its own.
  static ThreadPool& shared();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs task(0), ..., task(count - 1), each exactly once, on the calling thread and on at
  // most `helpers` pool threads (the pool grows to that many threads on demand), and
  // returns when every task has returned. A task that throws does not stop the others;
  // run() rethrows the first exception once all have ended. Called from inside a task (a
  // nested region), it runs its tasks on the calling thread, one after another, so a
  // region never waits for pool threads that are all waiting for it.
  void run(size_t count, size_t helpers, const std::function<void(size_t)>& task);

  // Pool threads started so far (they are never stopped); for tests.
  size_t threads() const;

 private:
  struct Job;

  ThreadPool() = default;
  void worker_loop();
  // Hands out job's next task index; the job leaves the queue with its last one.
  // REQUIRES: mutex_ held, job.next < job.count.
  size_t claim(Job& job);
  // Records that one of job's tasks ended (with `error`, or none), and wakes job's caller
  // when it was the last. REQUIRES: mutex_ held.
  void finish(Job& job, std::exception_ptr error);
  static void forget_threads_after_fork();

  mutable std::mutex mutex_;
  std::condition_variable work_;  // a job was queued
  std::condition_variable done_;  // a job's last task ended
  std::deque<Job*> queue_;        // jobs with tasks not yet handed out; GUARDED_BY(mutex_)
  size_t threads_ = 0;            // GUARDED_BY(mutex_)
};

}  // namespace hsring
