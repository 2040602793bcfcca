// A persistent pool of worker threads shared by every prepared op of the provider.
//
// run() splits a job into chunks; the calling thread works on chunks too, and up to `threads - 1` workers
// join it. Several callers may run jobs at once (run() is reentrant): workers serve queued jobs in order.
// Workers are created at first use (and more only when a later job asks for more threads); no thread is
// created per call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kpr_cpu {

class ThreadPool {
public:
    using ChunkFn = void (*)(void *ctx, size_t chunk);

    static ThreadPool &instance();

    // Calls fn(ctx, c) for every c in [0, n_chunks), on at most `threads` threads (the caller included).
    void run(size_t n_chunks, unsigned threads, ChunkFn fn, void *ctx);

    // Joins every worker (provider shutdown). A later run() starts workers again.
    void stop();

    unsigned workers() const;

private:
    struct Task {
        ChunkFn fn;
        void *ctx;
        size_t n;
        std::atomic<size_t> next{0};
        std::atomic<size_t> done{0};
        unsigned slots = 0;  // helpers that may still join (guarded by mutex_)
        unsigned active = 0; // helpers inside (guarded by mutex_)
    };

    ThreadPool() = default;
    void ensure_workers(unsigned n); // mutex_ held
    void worker_main();
    static void work_on(Task &t);

    mutable std::mutex mutex_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    std::deque<Task *> queue_;
    std::vector<std::thread> threads_;
    bool stopping_ = false;
};

} // namespace kpr_cpu
