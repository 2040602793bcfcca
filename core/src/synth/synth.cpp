// kpr synth: a GGUF with a real model family's tensor names, shapes and metadata, filled with random
// valid blocks (no quantizer search), written one tensor at a time.
#include <kpr/bench.hpp>
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <thread>

namespace kpr::bench {

namespace {

struct Shape {
    const char *name, *arch, *family;
    uint32_t layers, hidden, ffn, heads, kv_heads, head_dim, vocab;
    uint32_t experts = 0, experts_used = 0, expert_ffn = 0;
    bool moe_every_layer = false;  // else: only the last layer is a mixture-of-experts layer (tiny)
    bool qk_norm = false;
    uint32_t context = 8192;
    double rope_base = 500000.0;
};

const Shape kShapes[] = {
    // Meta Llama 3.1 8B
    {"llama-8b", "llama", "Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128, 128256, 0, 0, 0, false, false, 131072, 500000.0},
    // Meta Llama 3.2 1B
    {"llama-1b", "llama", "Llama-3.2-1B", 16, 2048, 8192, 32, 8, 64, 128256, 0, 0, 0, false, false, 131072, 500000.0},
    // Qwen3-30B-A3B
    {"qwen-moe-30b", "qwen3moe", "Qwen3-30B-A3B", 48, 2048, 6144, 32, 4, 128, 151936, 128, 8, 768, true, true, 40960,
     1000000.0},
    // Two layers, llama names; layer 1 is a Mixtral-style expert layer so grouped ops are covered.
    {"tiny", "llama", "kpr-tiny", 2, 256, 512, 4, 2, 64, 1024, 4, 2, 256, false, false, 2048, 10000.0},
};

const Shape &shape_of(const std::string &name) {
    for (auto &s : kShapes)
        if (name == s.name) return s;
    throw Error(fmt::format("--shape: unknown shape '{}' (kpr knows: {})", name, fmt::join(synth_shapes(), ", ")), 2);
}

void fill(uint32_t type, uint64_t seed, uint8_t *dst, uint64_t bytes, int threads) {
    const formats::TypeInfo *ti = formats::type_info(type);
    uint64_t blocks = bytes / ti->block_bytes;
    unsigned n = (unsigned)std::max(1, threads);
    if (blocks < 8192) n = 1;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < n; ++t)
        ts.emplace_back([=] {
            uint64_t b = blocks * t / n, e = blocks * (t + 1) / n;
            if (e > b) formats::fill_random_blocks(type, seed * 7919 + t, dst + b * ti->block_bytes, e - b);
        });
    for (auto &t : ts) t.join();
}

} // namespace

std::vector<std::string> synth_shapes() {
    std::vector<std::string> v;
    for (auto &s : kShapes) v.push_back(s.name);
    return v;
}

SynthSummary synth_model(const SynthOptions &o, const std::string &path) {
    const Shape &s = shape_of(o.shape);
    std::vector<uint32_t> types = o.types.empty() ? std::vector<uint32_t>{KPR_TYPE_Q8_0} : o.types;
    for (uint32_t t : types) {
        const formats::TypeInfo *ti = formats::type_info(t);
        if (!ti || !ti->supported) throw Error(fmt::format("--types: kpr cannot fill type '{}'", formats::type_name(t)), 2);
    }
    auto role = [&](size_t i) { return types[std::min(i, types.size() - 1)]; };
    const uint32_t t_main = role(0), t_down = role(1), t_out = role(2);
    uint32_t layers = o.layers > 0 ? (uint32_t)o.layers : s.layers;
    int threads = o.threads > 0 ? o.threads : (int)std::max(1u, std::min(8u, std::thread::hardware_concurrency()));

    gguf::Writer gw;
    std::vector<std::pair<std::string, std::string>> kv_log;
    struct Meta {  // adds to the writer and remembers the pair for --list
        gguf::Writer &w;
        std::vector<std::pair<std::string, std::string>> &log;
        void add_string(const std::string &k, const std::string &v) { w.add_string(k, v), log.emplace_back(k, v); }
        void add_u32(const std::string &k, uint32_t v) { w.add_u32(k, v), log.emplace_back(k, std::to_string(v)); }
        void add_f32(const std::string &k, float v) { w.add_f32(k, v), log.emplace_back(k, fmt::format("{}", v)); }
        void add_tensor_generated(std::string n, uint32_t t, std::vector<uint64_t> ne,
                                  std::function<void(uint8_t *, uint64_t)> f) {
            w.add_tensor_generated(std::move(n), t, std::move(ne), std::move(f));
        }
    } w{gw, kv_log};
    const std::string a = s.arch;
    w.add_string("general.architecture", a);
    w.add_string("general.name", fmt::format("{} (kpr synth: random weights{})", s.family,
                                             layers != s.layers ? fmt::format(", {} of {} layers", layers, s.layers) : ""));
    w.add_string("general.basename", s.family);
    w.add_string("kpr.synth.shape", s.name);
    w.add_u32("kpr.synth.seed", (uint32_t)o.seed);
    w.add_u32(a + ".block_count", layers);
    w.add_u32(a + ".context_length", s.context);
    w.add_u32(a + ".embedding_length", s.hidden);
    w.add_u32(a + ".feed_forward_length", s.ffn);
    w.add_u32(a + ".attention.head_count", s.heads);
    w.add_u32(a + ".attention.head_count_kv", s.kv_heads);
    w.add_u32(a + ".attention.key_length", s.head_dim);
    w.add_u32(a + ".attention.value_length", s.head_dim);
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
    w.add_f32(a + ".rope.freq_base", (float)s.rope_base);
    w.add_u32(a + ".rope.dimension_count", s.head_dim);
    w.add_u32(a + ".vocab_size", s.vocab);
    if (s.experts) {
        w.add_u32(a + ".expert_count", s.experts);
        w.add_u32(a + ".expert_used_count", s.experts_used);
        if (s.moe_every_layer) w.add_u32(a + ".expert_feed_forward_length", s.expert_ffn);
    }

    SynthSummary sum;
    sum.architecture = a;
    sum.layers = layers;
    uint64_t seed = o.seed;
    auto check_cols = [&](const std::string &name, uint32_t type, uint64_t cols) {
        const formats::TypeInfo *ti = formats::type_info(type);
        if (cols % ti->block_size)
            throw Error(fmt::format("tensor '{}': {} has blocks of {} weights, which do not divide its {} columns; pick "
                                    "another type for this role",
                                    name, ti->name, ti->block_size, cols),
                        2);
    };
    auto add = [&](const std::string &name, uint32_t type, std::vector<uint64_t> ne) {
        check_cols(name, type, ne[0]);
        uint64_t bytes = formats::row_bytes(type, ne[0]);
        for (size_t i = 1; i < ne.size(); ++i) bytes *= ne[i];
        uint64_t tseed = ++seed;
        w.add_tensor_generated(name, type, ne, [type, tseed, threads](uint8_t *dst, uint64_t n) {
            fill(type, tseed, dst, n, threads);
        });
        sum.tensors++;
        sum.bytes += bytes;
        sum.tensor_list.push_back({name, type, ne, bytes});
    };
    auto norm = [&](const std::string &name, uint64_t n) { add(name, KPR_TYPE_F32, {n}); };

    const uint64_t H = s.hidden, Q = (uint64_t)s.heads * s.head_dim, KV = (uint64_t)s.kv_heads * s.head_dim;
    add("token_embd.weight", t_out, {H, s.vocab});
    for (uint32_t l = 0; l < layers; ++l) {
        std::string p = fmt::format("blk.{}.", l);
        norm(p + "attn_norm.weight", H);
        add(p + "attn_q.weight", t_main, {H, Q});
        add(p + "attn_k.weight", t_main, {H, KV});
        add(p + "attn_v.weight", t_main, {H, KV});
        add(p + "attn_output.weight", t_main, {Q, H});
        if (s.qk_norm) {
            norm(p + "attn_q_norm.weight", s.head_dim);
            norm(p + "attn_k_norm.weight", s.head_dim);
        }
        norm(p + "ffn_norm.weight", H);
        bool moe = s.experts && (s.moe_every_layer || l + 1 == layers);
        if (moe) {
            add(p + "ffn_gate_inp.weight", KPR_TYPE_F32, {H, s.experts});
            add(p + "ffn_gate_exps.weight", t_main, {H, s.expert_ffn, s.experts});
            add(p + "ffn_up_exps.weight", t_main, {H, s.expert_ffn, s.experts});
            add(p + "ffn_down_exps.weight", t_down, {s.expert_ffn, H, s.experts});
        } else {
            add(p + "ffn_gate.weight", t_main, {H, s.ffn});
            add(p + "ffn_up.weight", t_main, {H, s.ffn});
            add(p + "ffn_down.weight", t_down, {s.ffn, H});
        }
    }
    norm("output_norm.weight", H);
    add("output.weight", t_out, {H, s.vocab});
    for (auto &k : kv_log) sum.metadata.push_back(k);
    if (!o.dry_run) gw.write(path);
    return sum;
}

} // namespace kpr::bench
