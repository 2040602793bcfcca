// kpr/bench.hpp -- measuring providers: read bandwidth, one op across every accepting provider, the decode
// window of a model, synthetic models, and the HTML report.
//
//   auto bw = kpr::bench::measure_read_bandwidth(rt.device("cpu"), {});
//   auto results = kpr::bench::bench_op(rt, kpr::gemv(KPR_TYPE_Q8_0, 4096, 4096, 1), opts, bw.gbps);
//
// Timing: CUDA events on a GPU (the time the GPU spent; each sample is queued behind a short hold kernel
// so the GPU runs its calls back to back however fast the host launches), steady_clock on the CPU. Each sample runs the op
// once per weight copy, the copies together larger than the last-level cache (rotation), so every call
// reads its weights from memory; providers are interleaved sample by sample so drift hits all of them.
#pragma once

#include <kpr/runtime.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kpr::gguf {
class File;
}

namespace kpr::bench {

// ---- read bandwidth -------------------------------------------------------------------------------

struct BandwidthOptions {
    uint64_t bytes = 0;  // 0: 512 MiB on the CPU, 1 GiB on a GPU (at least 4x the last-level cache)
    int reps = 5;        // timed passes; the best is reported
    int threads = 0;     // CPU: 0 = every usable thread
};

struct Bandwidth {
    std::string device;
    double gbps = 0;          // best pass, 1e9 bytes/s
    double median_gbps = 0;
    uint64_t bytes = 0;
    std::string method;       // "cpu: 2 threads, read-sum of 512 MiB" / "cuda: PTX read kernel (...)"
    double peak_gbps = 0;     // the device's theoretical peak when known (GPU), else 0
};

// Throws kpr::Error when the device cannot be measured (a simulated device; CUDA unavailable).
Bandwidth measure_read_bandwidth(const Device &device, const BandwidthOptions &opts = {});

// ---- one op, every provider ---------------------------------------------------------------------

struct BenchOptions {
    std::string device = "cpu";
    std::vector<std::string> providers;  // empty: every provider that accepts
    int warmup = 2;                      // passes over the copies before timing
    int reps = 15;                       // timed samples per provider (interleaved)
    uint64_t rotate_bytes = 0;           // weight bytes to rotate through; 0: max(4 x LLC, 512 MiB CPU / 1 GiB GPU)
    uint64_t max_copies = 512;
    double min_sample_ms = 0.5;          // a sample repeats the pass over the copies until it lasts this long
    double warmup_ms = 50;               // and warm-up goes on until this much time has passed (clocks ramp up)
    bool prequeue = true;                // GPU: queue each sample behind a hold so the GPU runs it back to back
                                         // (device time); false: time the calls as the host launches them
    uint64_t seed = 1;
};

struct BenchResult {
    std::string provider, device, device_name, op_kind, type;
    uint64_t rows = 0, cols = 0;
    uint32_t ncols = 1, experts = 1, experts_used = 1;
    uint64_t weight_bytes = 0;  // bytes one call reads (the experts used, for grouped ops)
    uint32_t copies = 0;        // rotated weight copies
    double median_us = 0, min_us = 0, max_us = 0, p10_us = 0, p90_us = 0;
    double spread = 0;          // (p90 - p10) / median
    double gbps = 0;            // weight bytes / median
    double bandwidth_fraction = 0;
    bool winner = false;        // negotiation's choice without restriction
    bool prequeued = false;     // GPU samples were queued behind a hold (device time, not the host's launch rate)
    std::string error;          // when the provider accepted but failed to prepare or run
    int samples = 0;
};

using Progress = std::function<void(const std::string &what, size_t done, size_t total)>;

// Every provider that accepts `op` on opts.device (or those named), timed side by side. A provider that
// fails is reported with `error` set. bandwidth_gbps <= 0 leaves bandwidth_fraction at 0.
std::vector<BenchResult> bench_op(const Runtime &rt, const kpr_op_desc &op, const BenchOptions &opts,
                                  double bandwidth_gbps, const Progress &progress = {});

// Bytes of weights one call of `op` reads (grouped: the experts used per column, at most all of them).
uint64_t bytes_read(const kpr_op_desc &op);

// ---- decode window ------------------------------------------------------------------------------

struct DecodeTensor {
    std::string name, category, type, provider, op;
    uint64_t rows = 0, cols = 0, weight_bytes = 0;
    uint32_t experts = 1, experts_used = 1;
    double median_us = 0;
};

struct DecodeWindow {
    std::string model, device, architecture;
    uint32_t ncols = 1;
    int steps = 0;
    double step_us = 0, step_min_us = 0, step_max_us = 0;  // whole step, every matrix once
    double tokens_per_s = 0;                                // ncols / step
    double gbps = 0, bandwidth_fraction = 0;                 // bytes read per step / step time
    uint64_t bytes_per_step = 0;
    std::vector<std::pair<std::string, double>> categories;  // category -> us per step (sum of tensor medians)
    std::vector<DecodeTensor> tensors;
};

struct DecodeOptions {
    std::string device = "cpu";
    int warmup = 1;
    int steps = 5;
    uint64_t seed = 1;
};

// Category of a tensor by its GGUF name: "attention", "ffn", "experts", "output", or "" (not a decode GEMV:
// embeddings, norms).
std::string tensor_category(const std::string &name, size_t dims);

// Every weight matrix of `file` once through its negotiated plan per step, for each ncols.
std::vector<DecodeWindow> bench_decode(const Runtime &rt, const gguf::File &file, const std::vector<uint32_t> &ncols,
                                       const DecodeOptions &opts, double bandwidth_gbps,
                                       const Progress &progress = {});

// ---- synthetic models ---------------------------------------------------------------------------

struct SynthOptions {
    std::string shape = "tiny";     // tiny, llama-1b, llama-8b, qwen-moe-30b
    std::vector<uint32_t> types;    // roles: [0] attention + ffn gate/up, [1] ffn down, [2] output + embeddings
    int layers = 0;                 // 0: the shape's own count
    uint64_t seed = 1;
    int threads = 0;
    bool dry_run = false;           // describe the file (SynthSummary) without writing it
};

struct SynthTensor {
    std::string name;
    uint32_t type = 0;
    std::vector<uint64_t> ne;
    uint64_t bytes = 0;
};

struct SynthSummary {
    std::string architecture;
    uint32_t layers = 0;
    uint64_t tensors = 0, bytes = 0;
    std::vector<std::pair<std::string, std::string>> metadata;  // key, value as text
    std::vector<SynthTensor> tensor_list;
};

std::vector<std::string> synth_shapes();
// Writes a GGUF with the family's tensor names, shapes and metadata, filled with random valid blocks,
// one tensor in memory at a time. Throws kpr::Error for an unknown shape or a type whose block does not
// divide a tensor's rows.
SynthSummary synth_model(const SynthOptions &opts, const std::string &path);

// ---- report -------------------------------------------------------------------------------------

// Writes DIR/report.html (self-contained: inline SVG plots, no scripts from the network) and
// DIR/report.json from `data`: {"conditions": {...}, "bandwidth": [...], "ops": [BenchResult...],
// "decode": [DecodeWindow...]}.
void write_report(const std::string &dir, const std::string &json_text);

} // namespace kpr::bench

namespace kpr::bench {
// Conditions of a run, for reports and docs: device name, driver, clocks as the driver reports them,
// CPU threads and features, load average, kpr version, UTC time. Ordered key/value pairs.
std::vector<std::pair<std::string, std::string>> conditions(const Runtime &rt, const Device &device);
// "1-8", "1,8", "1,2,4-8" -> {1, 2, ...}; throws kpr::Error (exit 2) for anything outside 1..8.
std::vector<uint32_t> parse_ncols(const std::string &text);
} // namespace kpr::bench

namespace kpr::bench {
// The ops one decode step of a model runs (what `kpr calibrate --model` times and the decode window runs):
// every weight matrix, grouped ops for expert tensors with <arch>.expert_used_count experts per column
// (x per slot for ffn_down_exps, broadcast x otherwise).
struct ModelOp {
    std::string tensor, category;
    kpr_op_desc op{};
};
std::vector<ModelOp> model_ops(const gguf::File &file, uint32_t ncols);
} // namespace kpr::bench
