// kpr bench: one op through every accepting provider, side by side; and the decode window of a model.
#include <kpr/bench.hpp>
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/memory.hpp>

#include "bench/gpu_hold.hpp"
#include "device/cuda_driver.hpp"
#include "device/memory_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

namespace kpr::bench {

namespace {

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    double pos = q * (v.size() - 1);
    size_t i = (size_t)pos;
    double f = pos - i;
    return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

// Timestamps between ops: CUDA events on a stream (the GPU's time, one synchronisation at the end) or the
// host's clock on the CPU (ops there return when done).
class Marks {
public:
    Marks(const Device &d, void *stream, size_t n) : cuda_(d.is_cuda()), stream_(stream) {
        if (cuda_) {
            const cuda::Driver &drv = cuda::driver();
            drv.make_current(d.desc.ordinal);
            events_.resize(n);
            for (auto &e : events_) drv.check(drv.cuEventCreate(&e, 0), "cuEventCreate");
        } else {
            host_.resize(n);
        }
    }
    ~Marks() {
        for (auto e : events_) cuda::driver().cuEventDestroy(e);
    }
    void mark(size_t i) {
        if (cuda_) cuda::driver().check(cuda::driver().cuEventRecord(events_[i], static_cast<cuda::CUstream>(stream_)), "cuEventRecord");
        else host_[i] = std::chrono::steady_clock::now();
    }
    void wait(size_t last) {
        if (cuda_) cuda::driver().check(cuda::driver().cuEventSynchronize(events_[last]), "cuEventSynchronize");
    }
    double us(size_t a, size_t b) const {
        if (!cuda_) return std::chrono::duration<double, std::micro>(host_[b] - host_[a]).count();
        float ms = 0;
        cuda::driver().check(cuda::driver().cuEventElapsedTime(&ms, events_[a], events_[b]), "cuEventElapsedTime");
        return ms * 1e3;
    }

private:
    bool cuda_;
    void *stream_;
    std::vector<cuda::CUevent> events_;
    std::vector<std::chrono::steady_clock::time_point> host_;
};

uint64_t last_level_cache(const Device &d) {
    if (d.is_cuda()) return d.desc.l2_bytes;
    return std::max(d.desc.cache_l3_bytes, d.desc.cache_l2_bytes);
}

// Random distinct experts per column: ids[col * used + slot].
std::vector<int32_t> routing(std::mt19937_64 &rng, uint32_t ncols, uint32_t experts, uint32_t used) {
    std::vector<int32_t> ids;
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    for (uint32_t c = 0; c < ncols; ++c) {
        for (uint32_t s = 0; s < used; ++s) {  // partial Fisher-Yates
            std::uniform_int_distribution<uint32_t> pick(s, experts - 1);
            std::swap(all[s], all[pick(rng)]);
            ids.push_back(all[s]);
        }
    }
    return ids;
}

size_t distinct(const std::vector<int32_t> &ids) { return std::set<int32_t>(ids.begin(), ids.end()).size(); }

void fill_blocks_parallel(uint32_t type, uint64_t seed, uint8_t *dst, uint64_t bytes) {
    const formats::TypeInfo *ti = formats::type_info(type);
    uint64_t blocks = bytes / ti->block_bytes;
    unsigned n = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
    if (blocks < 4096) n = 1;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < n; ++t)
        ts.emplace_back([=] {
            uint64_t b = blocks * t / n, e = blocks * (t + 1) / n;
            if (e > b) formats::fill_random_blocks(type, seed * 1000003 + t, dst + b * ti->block_bytes, e - b);
        });
    for (auto &t : ts) t.join();
}

std::string kind_name(const kpr_op_desc &op) { return op.kind == KPR_OP_GEMV_GROUPED ? "gemv_grouped" : "gemv"; }

} // namespace

uint64_t bytes_read(const kpr_op_desc &op) {
    if (op.kind != KPR_OP_GEMV_GROUPED) return weight_bytes(op);
    uint64_t per = formats::row_bytes(op.weight_type, op.cols) * op.rows;
    return per * std::min<uint64_t>(op.n_experts, (uint64_t)op.n_used * op.ncols);
}

// ---- one op, every provider -----------------------------------------------------------------------

namespace {

std::vector<BenchResult> bench_op_impl(const Runtime &rt, const kpr_op_desc &op_in, const BenchOptions &o, double bw,
                                       const Progress &progress) {
    kpr_op_desc op = op_in;
    op.struct_size = sizeof op;
    validate(op);
    const Device &dev = rt.device(o.device);
    if (dev.desc.simulated) throw Error(fmt::format("cannot bench on {}: it is a simulated device", dev.id));
    const uint64_t W = weight_bytes(op);
    const bool grouped = op.kind == KPR_OP_GEMV_GROUPED;

    // Who accepts: each provider asked alone; negotiation's own choice marks the winner.
    std::string winner;
    if (auto p = rt.plan(op, dev.id); p->ok()) winner = p->provider();
    struct Cand {
        std::string name;
        std::shared_ptr<const Plan> plan;
        std::vector<PreparedOp> prepared;
        BenchResult r;
        std::vector<double> samples;
    };
    std::vector<Cand> cands;
    for (auto &info : rt.providers()) {
        const std::string &name = info.name;
        if (info.state == ProviderState::Failed || name.empty()) continue;
        if (!o.providers.empty() && std::find(o.providers.begin(), o.providers.end(), name) == o.providers.end()) continue;
        if (info.device_kind != dev.desc.kind) continue;
        auto plan = rt.plan(op, dev.id, name);
        if (!plan->ok()) continue;
        Cand c;
        c.name = name;
        c.plan = plan;
        cands.push_back(std::move(c));
    }
    std::sort(cands.begin(), cands.end(), [](auto &a, auto &b) { return a.name < b.name; });

    // Rotation: enough copies of the weights to exceed the last-level cache several times.
    uint64_t target = o.rotate_bytes;
    if (!target) {
        target = std::max<uint64_t>(4 * last_level_cache(dev), dev.is_cuda() ? (1ull << 30) : (512ull << 20));
        if (dev.is_cuda() && dev.desc.memory_bytes) target = std::min<uint64_t>(target, dev.desc.memory_bytes / 4);
    }
    uint64_t copies = std::clamp<uint64_t>((target + W - 1) / W, 1, std::max<uint64_t>(1, o.max_copies));
    const uint64_t stride = (W + 4095) & ~uint64_t(4095);
    // Providers that repack keep their own copy per prepared op: count it against memory on a GPU.
    if (dev.is_cuda() && dev.desc.memory_bytes) {
        uint64_t per_copy = stride * (1 + cands.size());
        copies = std::max<uint64_t>(1, std::min<uint64_t>(copies, (dev.desc.memory_bytes / 2) / per_copy));
    }

    // Every buffer below, added up and checked before the first is allocated: a shape too large for this
    // machine is an error naming the op and the bytes, not std::bad_alloc or the out-of-memory killer.
    {
        using detail::sat_add;
        using detail::sat_mul;
        const uint32_t slots = grouped ? op.x_slots : 1, n_used = grouped ? op.n_used : 1;
        const uint64_t weights_bytes = sat_mul(stride, copies);
        const uint64_t x_bytes = sat_mul(sat_mul(uint64_t{op.ncols} * slots, op.cols), 4);
        const uint64_t y_bytes = sat_mul(sat_mul(sat_mul(uint64_t{op.ncols} * n_used, op.rows), 4), cands.size());
        const uint64_t on_device = sat_add(sat_add(weights_bytes, x_bytes), y_bytes);
        const std::string what = fmt::format("bench {} ({} bytes of weights)", describe(op), W);
        // The host holds one copy of the weights and of x while they are made, and on the CPU the rest too.
        uint64_t on_host = sat_add(W, x_bytes);
        if (dev.is_cuda()) detail::check_device_bytes(dev, on_device, what + ", with x and y on the device");
        else on_host = sat_add(on_host, on_device);
        detail::check_host_bytes(on_host, what + (dev.is_cuda() ? ", made on the host first"
                                                                : ", with x, y and the rotated copies"));
    }

    std::vector<uint8_t> master(W);
    fill_blocks_parallel(op.weight_type, o.seed, master.data(), W);
    Buffer weights(dev, stride * copies);
    for (uint64_t c = 0; c < copies; ++c) {
        if (dev.is_cpu()) std::memcpy(static_cast<uint8_t *>(weights.data()) + c * stride, master.data(), W);
        else weights.upload(master.data(), W, c * stride);
    }
    std::vector<uint8_t>().swap(master);

    uint32_t xs = grouped ? op.x_slots : 1, used = grouped ? op.n_used : 1;
    std::vector<float> x((size_t)op.ncols * xs * op.cols);
    formats::fill_random_floats(o.seed + 7, x.data(), x.size());
    Buffer xb(dev, x.size() * 4), ib(dev, std::max<size_t>(1, (size_t)op.ncols * used) * 4);
    xb.upload(x.data(), x.size() * 4);
    std::mt19937_64 rng(o.seed);
    std::vector<int32_t> ids;
    uint64_t read = W;
    if (grouped) {
        ids = routing(rng, op.ncols, op.n_experts, op.n_used);
        ib.upload(ids.data(), ids.size() * 4);
        read = W / op.n_experts * distinct(ids);
    }
    Stream stream(dev);
    std::vector<Buffer> ys;

    for (auto &c : cands) {
        BenchResult &r = c.r;
        r.provider = c.name;
        r.device = dev.id;
        r.device_name = dev.desc.name;
        r.op_kind = kind_name(op);
        r.type = formats::type_name(op.weight_type);
        r.rows = op.rows, r.cols = op.cols, r.ncols = op.ncols;
        r.experts = grouped ? op.n_experts : 1, r.experts_used = used;
        r.weight_bytes = read;
        r.copies = (uint32_t)copies;
        r.winner = c.name == winner;
        try {
            for (uint64_t k = 0; k < copies; ++k)
                c.prepared.push_back(c.plan->prepare(static_cast<uint8_t *>(weights.data()) + k * stride, W));
        } catch (const Error &e) {
            r.error = e.what();
            c.prepared.clear();
        }
        ys.emplace_back(dev, (size_t)op.ncols * used * op.rows * 4);
    }

    auto pass = [&](Cand &c, Buffer &y, int times) {
        for (int t = 0; t < times; ++t)
            for (auto &p : c.prepared)
                p.run(static_cast<const float *>(xb.data()), static_cast<float *>(y.data()), op.ncols,
                      grouped ? static_cast<const int32_t *>(ib.data()) : nullptr, stream.handle());
    };
    // GPU: each sample waits behind a hold while the host queues it (see gpu_hold.hpp).
    std::unique_ptr<GpuHold> hold;
    if (dev.is_cuda() && o.prequeue) hold = std::make_unique<GpuHold>(dev);
    using clock = std::chrono::steady_clock;
    auto host_ms = [](clock::time_point t0) { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };

    // Warm-up (at least `warmup` passes and `warmup_ms`), and how many passes make a sample last
    // min_sample_ms; on a GPU also how long the host takes to queue one pass.
    std::vector<int> passes(cands.size(), 1);
    std::vector<double> queue_ms(cands.size(), 0);
    for (size_t i = 0; i < cands.size(); ++i) {
        Cand &c = cands[i];
        if (!c.r.error.empty()) continue;
        try {
            int n = 0;
            double dev_ms = 0;
            auto t_warm = clock::now();
            do {
                int k = std::max(1, o.warmup);
                auto t0 = clock::now();
                stream.record_start();
                pass(c, ys[i], k);
                queue_ms[i] = host_ms(t0) / k;
                dev_ms += stream.elapsed_ms();
                n += k;
            } while (host_ms(t_warm) < o.warmup_ms && n < 100000);
            double ms = dev_ms / n;
            if (ms > 0 && ms < o.min_sample_ms) passes[i] = (int)std::min(1000.0, std::ceil(o.min_sample_ms / ms));
        } catch (const Error &e) {
            c.r.error = e.what();
        }
    }
    size_t total = (size_t)std::max(1, o.reps) * cands.size(), done = 0;
    for (int s = 0; s < std::max(1, o.reps); ++s) {
        for (size_t j = 0; j < cands.size(); ++j) {
            size_t i = (j + s) % cands.size();  // a different provider goes first each round
            Cand &c = cands[i];
            ++done;
            if (!c.r.error.empty()) continue;
            try {
                // Hold for twice what queueing the sample took in warm-up (plus a margin), at most 50 ms.
                if (hold) hold->hold(stream.handle(), std::min(50.0, 0.2 + 2.0 * queue_ms[i] * passes[i]));
                stream.record_start();
                pass(c, ys[i], passes[i]);
                double ms = stream.elapsed_ms();
                c.samples.push_back(ms * 1e3 / (passes[i] * (double)c.prepared.size()));
            } catch (const Error &e) {
                c.r.error = e.what();
            }
            if (progress) progress(fmt::format("{} {}", c.name, describe(op)), done, total);
        }
    }
    std::vector<BenchResult> out;
    for (auto &c : cands) {
        BenchResult r = c.r;
        if (!c.samples.empty()) {
            r.samples = (int)c.samples.size();
            r.median_us = percentile(c.samples, 0.5);
            r.p10_us = percentile(c.samples, 0.1);
            r.p90_us = percentile(c.samples, 0.9);
            r.min_us = *std::min_element(c.samples.begin(), c.samples.end());
            r.max_us = *std::max_element(c.samples.begin(), c.samples.end());
            r.spread = r.median_us > 0 ? (r.p90_us - r.p10_us) / r.median_us : 0;
            r.gbps = r.median_us > 0 ? read / (r.median_us * 1e3) : 0;
            r.bandwidth_fraction = bw > 0 ? r.gbps / bw : 0;
            r.prequeued = hold != nullptr;
        }
        out.push_back(r);
    }
    return out;
}

} // namespace

std::vector<BenchResult> bench_op(const Runtime &rt, const kpr_op_desc &op_in, const BenchOptions &o, double bw,
                                  const Progress &progress) {
    try {
        return bench_op_impl(rt, op_in, o, bw, progress);
    } catch (const std::bad_alloc &) {
        // The checks above leave this to allocations that the memory available could not serve after all.
        kpr_op_desc op = op_in;
        op.struct_size = sizeof op;
        throw Error(fmt::format("bench {}: out of memory (std::bad_alloc) with {} bytes of weights", describe(op),
                                weight_bytes(op)));
    } catch (const std::length_error &e) {
        kpr_op_desc op = op_in;
        op.struct_size = sizeof op;
        throw Error(fmt::format("bench {}: a buffer is too large to allocate ({}; {} bytes of weights)", describe(op),
                                e.what(), weight_bytes(op)));
    }
}

// ---- decode window --------------------------------------------------------------------------------

std::string tensor_category(const std::string &name, size_t dims) {
    auto has = [&](const char *s) { return name.find(s) != std::string::npos; };
    if (name.rfind("output.", 0) == 0) return "output";
    if (has("token_embd") || has("_norm") || dims < 2) return "";
    if (has("_exps") || has("ffn_gate_inp")) return "experts";
    if (has(".attn_")) return "attention";
    if (has(".ffn_")) return "ffn";
    return "";
}

namespace {
int layer_of(const std::string &name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::atoi(name.c_str() + 4);
}
} // namespace

std::vector<DecodeWindow> bench_decode(const Runtime &rt, const gguf::File &f, const std::vector<uint32_t> &ncols_list,
                                       const DecodeOptions &o, double bw, const Progress &progress) {
    const Device &dev = rt.device(o.device);
    if (dev.desc.simulated) throw Error(fmt::format("cannot bench on {}: it is a simulated device", dev.id));
    std::string arch = f.get_string_or("general.architecture", "");
    struct T {
        const gguf::Tensor *t;
        gguf::TensorOp top;
        std::string category;
        int layer;
        std::unique_ptr<Buffer> dev_weights;
    };
    std::vector<T> ts;
    bool has_output = f.find_tensor("output.weight") != nullptr;
    for (auto &t : f.tensors()) {
        std::string cat = tensor_category(t.name, t.ne.size());
        if (!has_output && t.name == "token_embd.weight") cat = "output";  // tied embeddings: the head reads them
        if (cat.empty() || t.ne.size() < 2 || t.ne.size() > 3) continue;
        ts.push_back({&t, gguf::tensor_op(t, f.path()), cat, layer_of(t.name), nullptr});
    }
    if (ts.empty()) throw Error(fmt::format("{}: no weight matrices a decode step multiplies", f.path()));
    uint32_t n_experts_max = 1;
    for (auto &t : ts) n_experts_max = std::max(n_experts_max, t.top.n_experts);
    uint64_t used_meta = f.get_u64_or(arch + ".expert_used_count", 2);
    uint32_t n_used = (uint32_t)std::clamp<uint64_t>(used_meta, 1, n_experts_max);

    // Weights on the device (the CPU reads them in place from the mapping).
    if (dev.is_cuda())
        for (auto &t : ts) {
            t.dev_weights = std::make_unique<Buffer>(dev, t.t->bytes);
            t.dev_weights->upload(t.t->data, t.t->bytes);
        }
    uint32_t max_nc = 1;
    for (auto n : ncols_list) max_nc = std::max(max_nc, n);
    uint64_t max_x = 0, max_y = 0;
    for (auto &t : ts) {
        uint32_t u = t.top.grouped() ? std::min(n_used, t.top.n_experts) : 1;
        max_x = std::max<uint64_t>(max_x, t.top.cols * u);
        max_y = std::max<uint64_t>(max_y, t.top.rows * u);
    }
    std::vector<float> x(max_x * max_nc);
    formats::fill_random_floats(o.seed, x.data(), x.size());
    Buffer xb(dev, x.size() * 4), yb(dev, max_y * max_nc * 4);
    xb.upload(x.data(), x.size() * 4);
    Stream stream(dev);

    std::vector<DecodeWindow> out;
    size_t total_steps = ncols_list.size() * (size_t)(o.warmup + o.steps), step_done = 0;
    for (uint32_t nc : ncols_list) {
        // Routing: per step and layer, random distinct experts per column (the layer's gate, up and down share it).
        int nsteps = o.warmup + o.steps;
        std::mt19937_64 rng(o.seed * 31 + nc);
        std::map<int, uint32_t> layer_experts;
        for (auto &t : ts)
            if (t.top.grouped()) layer_experts[t.layer] = t.top.n_experts;
        std::map<std::pair<int, int>, size_t> id_off;  // (step, layer) -> offset in ids
        std::vector<int32_t> ids;
        std::map<int, double> distinct_avg;
        for (int s = 0; s < nsteps; ++s)
            for (auto &[layer, ne] : layer_experts) {
                auto r = routing(rng, nc, ne, std::min(n_used, ne));
                id_off[{s, layer}] = ids.size();
                if (s >= o.warmup) distinct_avg[layer] += (double)distinct(r) / o.steps;
                ids.insert(ids.end(), r.begin(), r.end());
            }
        Buffer ib(dev, std::max<size_t>(1, ids.size()) * 4);
        if (!ids.empty()) ib.upload(ids.data(), ids.size() * 4);

        DecodeWindow w;
        w.model = f.path();
        w.device = dev.id;
        w.architecture = arch;
        w.ncols = nc;
        w.steps = o.steps;
        std::vector<PreparedOp> prepared;
        std::vector<DecodeTensor> rows;
        for (size_t i = 0; i < ts.size(); ++i) {
            auto &t = ts[i];
            uint32_t u = t.top.grouped() ? std::min(n_used, t.top.n_experts) : 1;
            bool down = t.t->name.find("ffn_down_exps") != std::string::npos;
            kpr_op_desc op = gguf::make_op_desc(t.top, nc, u, t.top.grouped() && down ? u : 1);
            auto plan = rt.plan(op, dev.id);
            if (!plan->ok())
                throw Error(fmt::format("{}: nothing serves tensor '{}' ({}) on {}: {}", f.path(), t.t->name, describe(op),
                                        dev.id, plan->decision()));
            const void *wp = dev.is_cuda() ? t.dev_weights->data() : (const void *)t.t->data;
            prepared.push_back(plan->prepare(wp, t.t->bytes, i + 1));
            DecodeTensor d;
            d.name = t.t->name;
            d.category = t.category;
            d.type = formats::type_name(t.top.type);
            d.provider = plan->provider();
            d.op = describe(op);
            d.rows = t.top.rows, d.cols = t.top.cols;
            d.experts = t.top.n_experts, d.experts_used = u;
            uint64_t expert_bytes = t.t->bytes / t.top.n_experts;
            d.weight_bytes = t.top.grouped() ? (uint64_t)std::llround(expert_bytes * distinct_avg[t.layer]) : t.t->bytes;
            w.bytes_per_step += d.weight_bytes;
            rows.push_back(d);
        }
        Marks marks(dev, stream.handle(), ts.size() + 1);
        std::vector<std::vector<double>> per(ts.size());
        std::vector<double> steps;
        for (int s = 0; s < nsteps; ++s) {
            marks.mark(0);
            for (size_t i = 0; i < ts.size(); ++i) {
                const int32_t *idp = nullptr;
                if (ts[i].top.grouped())
                    idp = static_cast<const int32_t *>(ib.data()) + id_off[{s, ts[i].layer}];
                prepared[i].run(static_cast<const float *>(xb.data()), static_cast<float *>(yb.data()), nc, idp,
                                stream.handle());
                marks.mark(i + 1);
            }
            marks.wait(ts.size());
            if (s >= o.warmup) {
                for (size_t i = 0; i < ts.size(); ++i) per[i].push_back(marks.us(i, i + 1));
                steps.push_back(marks.us(0, ts.size()));
            }
            ++step_done;
            if (progress) progress(fmt::format("decode window ncols {} step {}/{}", nc, s + 1, nsteps), step_done, total_steps);
        }
        std::map<std::string, double> cat;
        for (size_t i = 0; i < ts.size(); ++i) {
            rows[i].median_us = percentile(per[i], 0.5);
            cat[rows[i].category] += rows[i].median_us;
        }
        for (const char *c : {"attention", "ffn", "experts", "output"})
            if (cat.count(c)) w.categories.emplace_back(c, cat[c]);
        w.step_us = percentile(steps, 0.5);
        w.step_min_us = *std::min_element(steps.begin(), steps.end());
        w.step_max_us = *std::max_element(steps.begin(), steps.end());
        w.tokens_per_s = w.step_us > 0 ? nc * 1e6 / w.step_us : 0;
        w.gbps = w.step_us > 0 ? w.bytes_per_step / (w.step_us * 1e3) : 0;
        w.bandwidth_fraction = bw > 0 ? w.gbps / bw : 0;
        w.tensors = std::move(rows);
        out.push_back(std::move(w));
    }
    return out;
}

} // namespace kpr::bench

namespace kpr::bench {
std::vector<ModelOp> model_ops(const gguf::File &f, uint32_t ncols) {
    std::string arch = f.get_string_or("general.architecture", "");
    bool has_output = f.find_tensor("output.weight") != nullptr;
    std::vector<ModelOp> out;
    for (auto &t : f.tensors()) {
        std::string cat = tensor_category(t.name, t.ne.size());
        if (!has_output && t.name == "token_embd.weight") cat = "output";
        if (cat.empty() || t.ne.size() < 2 || t.ne.size() > 3) continue;
        gguf::TensorOp top = gguf::tensor_op(t, f.path());
        uint32_t used = 1, xs = 1;
        if (top.grouped()) {
            used = (uint32_t)std::clamp<uint64_t>(f.get_u64_or(arch + ".expert_used_count", 2), 1, top.n_experts);
            if (t.name.find("ffn_down_exps") != std::string::npos) xs = used;
        }
        out.push_back({t.name, cat, gguf::make_op_desc(top, ncols, used, xs)});
    }
    return out;
}
} // namespace kpr::bench
