#include "thread_pool.h"

#include <algorithm>

namespace kpr_cpu {

ThreadPool &ThreadPool::instance() {
    // Never destroyed: workers may still be parked at process exit; the provider's shutdown() joins them.
    static ThreadPool *pool = new ThreadPool();
    return *pool;
}

unsigned ThreadPool::workers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return (unsigned)threads_.size();
}

void ThreadPool::ensure_workers(unsigned n) {
    n = std::min(n, 1024u);
    while (threads_.size() < n) threads_.emplace_back([this] { worker_main(); });
}

void ThreadPool::work_on(Task &t) {
    size_t mine = 0;
    for (;;) {
        const size_t c = t.next.fetch_add(1, std::memory_order_relaxed);
        if (c >= t.n) break;
        t.fn(t.ctx, c);
        ++mine;
    }
    if (mine) t.done.fetch_add(mine, std::memory_order_acq_rel);
}

void ThreadPool::worker_main() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        Task *t = queue_.front();
        ++t->active;
        if (--t->slots == 0) queue_.pop_front();
        lock.unlock();
        work_on(*t);
        lock.lock();
        --t->active;
        if (t->active == 0) done_cv_.notify_all();
    }
}

void ThreadPool::run(size_t n_chunks, unsigned threads, ChunkFn fn, void *ctx) {
    if (n_chunks == 0) return;
    const unsigned helpers = (unsigned)std::min<size_t>(threads > 0 ? threads - 1 : 0, n_chunks - 1);
    if (helpers == 0) {
        for (size_t c = 0; c < n_chunks; ++c) fn(ctx, c);
        return;
    }
    Task t;
    t.fn = fn;
    t.ctx = ctx;
    t.n = n_chunks;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = false;
        ensure_workers(helpers);
        t.slots = helpers;
        queue_.push_back(&t);
    }
    if (helpers == 1)
        work_cv_.notify_one();
    else
        work_cv_.notify_all();
    work_on(t);
    // Wait for the helpers that joined; take the task off the queue so that no more join.
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = std::find(queue_.begin(), queue_.end(), &t);
    if (it != queue_.end()) queue_.erase(it);
    done_cv_.wait(lock, [&t] { return t.active == 0; });
}

void ThreadPool::stop() {
    std::vector<std::thread> joined;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        joined.swap(threads_);
    }
    work_cv_.notify_all();
    for (std::thread &th : joined) th.join();
}

} // namespace kpr_cpu
