// kpr requant: a GGUF model with chosen tensors converted to Q8_0 (see kpr/requant.hpp).
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/requant.hpp>

#include "../util/atomic_file.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <unistd.h>

namespace kpr::requant {

namespace fs = std::filesystem;

const char *default_pattern() {
    return R"((^|\.)(attn_(q|k|v|qkv|output|q_a|q_b|kv_a_mqa|kv_b)|ffn_(gate|up|down))\.weight$|^output\.weight$)";
}

size_t Report::converted() const {
    size_t n = 0;
    for (auto &t : tensors) n += t.action == TensorReport::Action::Converted;
    return n;
}

namespace {

// ---- temporaries, visible to a signal handler ---------------------------------------------------------

// The handler reads a published array of C strings: a slot is filled (and the count raised) only after
// the temporary it names has been created by this process, and cleared once that name has been renamed
// into place, so the handler unlinks nothing but this run's own temporaries. The owner keeps the strings.
std::atomic<std::atomic<const char *> *> g_temp_paths{nullptr};
std::atomic<size_t> g_temp_count{0};

class TempRegistry {
public:
    explicit TempRegistry(size_t capacity) : ptrs_(new std::atomic<const char *>[capacity]), capacity_(capacity) {
        paths_.reserve(capacity);  // no reallocation: the published c_str() pointers stay valid
        for (size_t i = 0; i < capacity; ++i) ptrs_[i].store(nullptr);
        g_temp_count.store(0);
        g_temp_paths.store(ptrs_.get());
    }
    ~TempRegistry() {
        // The TempFiles themselves remove what was not renamed into place.
        g_temp_count.store(0);
        g_temp_paths.store(nullptr);
    }
    // `path` exists now, created by this process; returns its slot.
    size_t add(const std::string &path) {
        if (paths_.size() == capacity_) throw Error("requant: internal error: more temporaries than shards");
        paths_.push_back(path);
        const size_t i = paths_.size() - 1;
        ptrs_[i].store(paths_[i].c_str());
        g_temp_count.store(paths_.size());
        return i;
    }
    // The name no longer holds our temporary (renamed into place or removed).
    void forget(size_t slot) { ptrs_[slot].store(nullptr); }
    TempRegistry(const TempRegistry &) = delete;
    TempRegistry &operator=(const TempRegistry &) = delete;

private:
    std::vector<std::string> paths_;
    std::unique_ptr<std::atomic<const char *>[]> ptrs_;
    size_t capacity_;
};

// ---- shards ----------------------------------------------------------------------------------------------

const std::regex &split_re() {
    static const std::regex re(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)");
    return re;
}

std::string shard_name(const std::string &prefix, unsigned k, unsigned n) {
    return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, k, n);
}

// ---- conversion ---------------------------------------------------------------------------------------------

struct Plan {
    const gguf::Tensor *tensor = nullptr;
    bool matched = false, convert = false;
    size_t report_index = 0;
};

struct ShardWork {
    std::string input, output;
    util::TempFile part;  // renamed to output at the end
    size_t slot = 0;      // its TempRegistry slot
    std::unique_ptr<gguf::File> file;
    std::vector<Plan> plans;           // one per tensor, in file order
    size_t to_convert = 0;
};

// Converts one tensor's rows [r0, r1): dst gets Q8_0; returns (max|w|, max|w' - w|).
std::pair<double, double> convert_rows(const gguf::Tensor &t, uint64_t cols, uint64_t r0, uint64_t r1, uint8_t *dst) {
    const uint64_t in_row = formats::row_bytes(t.type, cols), out_row = formats::row_bytes(KPR_TYPE_Q8_0, cols);
    std::vector<float> w(cols), back(cols);
    double max_abs = 0, max_err = 0;
    for (uint64_t r = r0; r < r1; ++r) {
        formats::dequantize_row(t.type, t.data + r * in_row, w.data(), cols);
        uint8_t *q = dst + r * out_row;
        formats::quantize_row_q8_0(w.data(), q, cols);
        formats::dequantize_row(KPR_TYPE_Q8_0, q, back.data(), cols);
        for (uint64_t i = 0; i < cols; ++i) {
            const double a = std::fabs((double)w[i]), e = std::fabs((double)back[i] - (double)w[i]);
            if (a > max_abs) max_abs = a;
            if (e > max_err) max_err = e;
        }
    }
    return {max_abs, max_err};
}

void convert_tensor(const gguf::Tensor &t, uint8_t *dst, unsigned threads, TensorReport &rep) {
    const uint64_t cols = t.ne[0], rows = t.elements() / cols;
    unsigned n = (unsigned)std::min<uint64_t>(std::max(1u, threads), std::max<uint64_t>(1, rows / 64));
    std::vector<std::pair<double, double>> part(n);
    std::vector<std::exception_ptr> errors(n);
    auto work = [&](unsigned i) {
        try {
            const uint64_t r0 = rows * i / n, r1 = rows * (i + 1) / n;
            part[i] = convert_rows(t, cols, r0, r1, dst);
        } catch (...) {
            errors[i] = std::current_exception();
        }
    };
    if (n == 1) {
        work(0);
    } else {
        std::vector<std::thread> pool;
        for (unsigned i = 0; i < n; ++i) pool.emplace_back(work, i);
        for (auto &th : pool) th.join();
    }
    for (auto &e : errors)
        if (e) std::rethrow_exception(e);
    for (auto &[a, e] : part) {
        rep.max_abs = std::max(rep.max_abs, a);
        rep.max_err = std::max(rep.max_err, e);
    }
    rep.rel_error = rep.max_abs > 0 ? rep.max_err / rep.max_abs : 0.0;
}

// Why a matching tensor cannot be converted ("" when it can).
std::string keep_reason(const gguf::Tensor &t) {
    if (t.type == KPR_TYPE_Q8_0) return "already q8_0";
    const formats::TypeInfo *ti = formats::type_info(t.type);
    if (!ti || !ti->supported) return fmt::format("type {} has no dequantizer in kpr: left as is", formats::type_name(t.type));
    if (t.ne.size() < 2) return "1-D tensor (a norm or a bias, not a weight matrix): left as is";
    if (t.ne[0] % KPR_QK != 0)
        return fmt::format("cols (ne0) {} is not a multiple of 32, the q8_0 block: left as {}", t.ne[0], ti->name);
    return "";
}

void check_output_dir(const std::string &path) {
    fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) parent = ".";
    std::error_code ec;
    if (!fs::is_directory(parent, ec)) throw Error(fmt::format("{}: the folder {} does not exist", path, parent.string()), 2);
}

// A temporary for `to` that is a hard link (or a copy) of `from`; returns a note when a hard link was asked
// for but a copy was made. The temporary has a unique name of its own: nothing that exists is replaced.
std::string link_or_copy(const std::string &from, const std::string &to, bool copy, util::TempFile &out) {
    std::string note;
    if (!copy) {
        std::string why;
        if (util::TempFile::link_to(from, to, out, &why)) return "";
        note = fmt::format("hard link not possible ({}): copied", why);
    }
    util::TempFile t(to);
    t.copy_from(from);
    t.finish();
    out = std::move(t);
    return note;
}

} // namespace

std::vector<std::string> shard_set(const std::string &path) {
    std::smatch m;
    if (!std::regex_match(path, m, split_re())) return {path};
    const unsigned n = (unsigned)std::stoul(m[3].str()), k = (unsigned)std::stoul(m[2].str());
    if (n == 0 || k == 0 || k > n) throw Error(fmt::format("{}: shard {} of {} is not a valid split name", path, k, n), 2);
    std::vector<std::string> out;
    for (unsigned i = 1; i <= n; ++i) {
        std::string s = shard_name(m[1].str(), i, n);
        std::error_code ec;
        if (!fs::is_regular_file(s, ec))
            throw Error(fmt::format("{}: shard {} of {} of the split model is missing ({})", path, i, n, s));
        out.push_back(s);
    }
    return out;
}

Report run(const std::string &input, const std::string &output, const Options &options,
           const std::function<void(const TensorReport &)> &progress) {
    // ---- patterns
    std::vector<std::string> pats = options.match;
    if (pats.empty()) pats.push_back(default_pattern());
    std::vector<std::regex> res;
    for (auto &p : pats) {
        try {
            res.emplace_back(p, std::regex::ECMAScript);
        } catch (const std::regex_error &e) {
            throw Error(fmt::format("--match '{}': not a valid regular expression: {}", p, e.what()), 2);
        }
    }
    auto matches = [&](const std::string &name) {
        for (auto &r : res)
            if (std::regex_search(name, r)) return true;
        return false;
    };

    // ---- shards in and out
    std::error_code ec;
    if (!fs::is_regular_file(input, ec)) throw Error(fmt::format("{}: no such file", input));
    const std::vector<std::string> inputs = shard_set(input);
    std::vector<std::string> outputs;
    if (inputs.size() == 1) {
        outputs.push_back(output);
    } else {
        std::smatch mi, mo;
        std::regex_match(inputs[0], mi, split_re());
        std::string prefix;
        if (std::regex_match(output, mo, split_re())) {
            if (mo[3].str() != mi[3].str())
                throw Error(fmt::format("{}: the input is split in {} shards, the output name says {}", output,
                                        std::stoul(mi[3].str()), std::stoul(mo[3].str())), 2);
            prefix = mo[1].str();
        } else {
            prefix = output.size() > 5 && output.ends_with(".gguf") ? output.substr(0, output.size() - 5) : output;
        }
        for (unsigned k = 1; k <= inputs.size(); ++k) outputs.push_back(shard_name(prefix, k, (unsigned)inputs.size()));
    }
    // The input is never opened for writing: outputs are new files renamed into place. An output path that
    // names an input (the same path, another spelling of it, a symlink to it) is refused all the same. A
    // hard link of an input left by an earlier run is only a name: --force replaces the name, not the data.
    for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string &out = outputs[i];
        const fs::path out_real = fs::weakly_canonical(out, ec);
        for (auto &in : inputs)
            if (out_real == fs::weakly_canonical(in, ec))
                throw Error(fmt::format("{}: is the input {}; kpr requant never overwrites its input", out, in), 2);
        if (fs::exists(out, ec) && !options.force)
            throw Error(fmt::format("{}: exists (pass --force to replace it)", out), 2);
        if (fs::exists(out, ec) && !fs::is_regular_file(out, ec))
            throw Error(fmt::format("{}: exists and is not a regular file", out), 2);
        check_output_dir(out);
    }

    // ---- what to do, per shard
    Report rep;
    std::vector<ShardWork> work(inputs.size());
    size_t matched = 0;
    std::vector<std::string> some_names;
    for (size_t s = 0; s < inputs.size(); ++s) {
        ShardWork &w = work[s];
        w.input = inputs[s];
        w.output = outputs[s];
        w.file = std::make_unique<gguf::File>(gguf::File::open(w.input));
        for (const gguf::Tensor &t : w.file->tensors()) {
            Plan p;
            p.tensor = &t;
            if (some_names.size() < 6) some_names.push_back(t.name);
            if (matches(t.name)) {
                p.matched = true;
                ++matched;
                TensorReport tr;
                tr.file = w.output;
                tr.name = t.name;
                tr.from_type = tr.to_type = t.type;
                tr.ne = t.ne;
                tr.note = keep_reason(t);
                if (tr.note.empty()) {
                    p.convert = true;
                    tr.to_type = KPR_TYPE_Q8_0;
                    tr.action = TensorReport::Action::Converted;
                    ++w.to_convert;
                }
                p.report_index = rep.tensors.size();
                rep.tensors.push_back(tr);
            }
            w.plans.push_back(p);
        }
    }
    if (matched == 0) {
        std::string pl;
        for (auto &p : pats) pl += (pl.empty() ? "'" : ", '") + p + "'";
        std::string nl;
        for (auto &n : some_names) nl += (nl.empty() ? "" : ", ") + n;
        throw Error(fmt::format("{}: no tensor name matches {} (names look like: {})", input, pl, nl));
    }

    // ---- write everything under temporary names, then rename the set into place. Each temporary is a
    // new file with a unique name (util::TempFile: O_EXCL), so no existing file -- an input named like an
    // old temporary included -- is ever truncated or removed. Those of a run killed outright (SIGKILL)
    // stay behind under their unique names; nothing here deletes files by a guessed name.
    TempRegistry registry(work.size());
    const unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    for (auto &t : rep.tensors)
        if (t.action == TensorReport::Action::Kept && progress) progress(t);
    for (ShardWork &w : work) {
        ShardReport sr;
        sr.input = w.input;
        sr.output = w.output;
        sr.converted = w.to_convert;
        if (w.to_convert == 0) {
            sr.action = options.copy ? ShardReport::Action::Copied : ShardReport::Action::HardLinked;
            sr.note = link_or_copy(w.input, w.output, options.copy, w.part);
            w.slot = registry.add(w.part.path());
            if (!sr.note.empty()) sr.action = ShardReport::Action::Copied;
        } else {
            gguf::Writer wr;
            // Every key in order with its type; general.alignment (when present) sets the writer's alignment.
            for (const gguf::KV &kv : w.file->metadata()) wr.add(kv.key, kv.value);
            for (const Plan &p : w.plans) {
                const gguf::Tensor &t = *p.tensor;
                if (!p.convert) {
                    wr.add_tensor_view(t.name, t.type, t.ne, t.data, t.bytes);
                    continue;
                }
                TensorReport *tr = &rep.tensors[p.report_index];
                wr.add_tensor_generated(t.name, KPR_TYPE_Q8_0, t.ne, [&t, tr, threads, &progress](uint8_t *dst, uint64_t) {
                    convert_tensor(t, dst, threads, *tr);
                    if (progress) progress(*tr);
                });
            }
            w.part = util::TempFile(w.output);
            w.slot = registry.add(w.part.path());
            wr.write_stream(w.part.stream(), w.output);
            w.part.finish();
        }
        rep.shards.push_back(sr);
    }
    // Every shard is complete: rename them into place (replacing old outputs only with --force, checked above).
    // When an output already is a hard link of the same file (a shard of an earlier run), commit() drops
    // the temporary name instead. A failure here leaves the shards renamed so far and removes the rest.
    for (ShardWork &w : work) {
        w.part.commit();
        registry.forget(w.slot);
    }
    return rep;
}

void remove_temporaries_from_signal_handler() noexcept {
    const size_t n = g_temp_count.load();
    std::atomic<const char *> *p = g_temp_paths.load();
    if (!p) return;
    for (size_t i = 0; i < n; ++i)
        if (const char *path = p[i].load()) ::unlink(path);
}

namespace {
void on_signal(int sig) {
    remove_temporaries_from_signal_handler();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
} // namespace

void install_signal_cleanup() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        sigaction(sig, &sa, nullptr);
    }
}

} // namespace kpr::requant
