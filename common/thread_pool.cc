#include "common/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <new>
#include <system_error>
#include <thread>

namespace hsring {

namespace {

// Whether this thread is running a task of the pool (a pool thread always is, a caller of
// run() while it runs tasks of its own job): a region started there runs inline.
thread_local bool t_in_task = false;

ThreadPool* g_pool = nullptr;  // set once, by shared()

}  // namespace

struct ThreadPool::Job {
  const std::function<void(size_t)>* task;
  size_t count;
  size_t next = 0;           // the next task index to hand out; GUARDED_BY(mutex_)
  size_t ended = 0;          // tasks that have returned or thrown; GUARDED_BY(mutex_)
  std::exception_ptr error;  // the first exception a task threw; GUARDED_BY(mutex_)
};

ThreadPool& ThreadPool::shared() {
  static ThreadPool* const pool = [] {
    auto* p = new ThreadPool();  // never deleted: see the header
    g_pool = p;
    // fork() copies the pool's state but none of its threads. Holding the mutex across
    // the fork means the child's copy is consistent (no job half queued), and the child
    // then forgets the threads it does not have.
    ::pthread_atfork([] { g_pool->mutex_.lock(); }, [] { g_pool->mutex_.unlock(); },
                     &ThreadPool::forget_threads_after_fork);
    return p;
  }();
  return *pool;
}

void ThreadPool::forget_threads_after_fork() {
  // The child's only thread is the one that forked; jobs queued by the parent's other
  // threads belong to stacks that do not exist here.
  ThreadPool& pool = *g_pool;
  pool.queue_.clear();
  pool.threads_ = 0;
  // The copied condition variables still count the parent's waiting threads as waiters,
  // and a notify may wait for them to leave, which they never do here (glibc's
  // pthread_cond_signal did, under ASan): the child gets fresh ones, and a fresh mutex in
  // place of the one the prepare handler locked. Nothing else refers to the old ones, and
  // their destructors have nothing to free.
  new (&pool.work_) std::condition_variable();
  new (&pool.done_) std::condition_variable();
  new (&pool.mutex_) std::mutex();
}

size_t ThreadPool::threads() const {
  const std::lock_guard lock(mutex_);
  return threads_;
}

size_t ThreadPool::claim(Job& job) {
  const size_t index = job.next++;
  if (job.next == job.count) queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
  return index;
}

void ThreadPool::finish(Job& job, std::exception_ptr error) {
  if (error && !job.error) job.error = std::move(error);
  // The caller may return (and the job, on its stack, end) as soon as this count is
  // complete and the mutex released: nothing touches the job after it.
  if (++job.ended == job.count) done_.notify_all();
}

namespace {

std::exception_ptr call(const std::function<void(size_t)>& task, size_t index) {
  try {
    task(index);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

void ThreadPool::worker_loop() {
  t_in_task = true;
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return !queue_.empty(); });
    Job& job = *queue_.front();
    const size_t index = claim(job);
    lock.unlock();
    std::exception_ptr error = call(*job.task, index);
    lock.lock();
    finish(job, std::move(error));
  }
}

void ThreadPool::run(size_t count, size_t helpers, const std::function<void(size_t)>& task) {
  helpers = std::min(helpers, count == 0 ? 0 : count - 1);
  if (helpers == 0 || t_in_task) {
    std::exception_ptr first;
    for (size_t i = 0; i < count; ++i)
      if (std::exception_ptr error = call(task, i); error && !first) first = std::move(error);
    if (first) std::rethrow_exception(first);
    return;
  }
  Job job{&task, count};
  std::unique_lock lock(mutex_);
  // Grown on demand, under the mutex: a new thread waits for it, then finds the job.
  // A thread that cannot be started leaves its share to the threads there are.
  try {
    for (; threads_ < helpers; ++threads_) std::thread([this] { worker_loop(); }).detach();
  } catch (const std::system_error&) {
  }
  queue_.push_back(&job);
  for (size_t i = 0; i < helpers; ++i) work_.notify_one();
  // The caller works on its own job too, until every task is handed out.
  t_in_task = true;
  while (job.next < job.count) {
    const size_t index = claim(job);
    lock.unlock();
    std::exception_ptr error = call(task, index);
    lock.lock();
    finish(job, std::move(error));
  }
  t_in_task = false;
  done_.wait(lock, [&job] { return job.ended == job.count; });
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace hsring
