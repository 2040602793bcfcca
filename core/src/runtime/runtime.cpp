// The runtime: start-up (config, probe, load), option resolution, negotiation, prepare and run.
#include "runtime/internal.hpp"
#include "device/cuda_driver.hpp"
#include "device/probe.hpp"
#include "util/json_text.hpp"

#include <kpr/formats.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace kpr {

namespace fs = std::filesystem;

std::string version() { return KPR_VERSION_STRING; }

const char *to_string(ProviderState s) {
    switch (s) {
    case ProviderState::Loaded: return "loaded";
    case ProviderState::Failed: return "failed";
    default: return "disabled";
    }
}

const char *to_string(AnswerState s) {
    switch (s) {
    case AnswerState::Accepted: return "accepted";
    case AnswerState::Declined: return "declined";
    case AnswerState::Disabled: return "disabled";
    default: return "failed";
    }
}

// ---- ops ----------------------------------------------------------------------------------------

kpr_op_desc gemv(uint32_t type, uint64_t rows, uint64_t cols, uint32_t ncols) {
    kpr_op_desc op{};
    op.struct_size = sizeof op;
    op.kind = KPR_OP_GEMV;
    op.weight_type = type;
    op.rows = rows;
    op.cols = cols;
    op.ncols = ncols;
    op.n_experts = op.n_used = op.x_slots = 1;
    return op;
}

kpr_op_desc gemv_grouped(uint32_t type, uint64_t rows, uint64_t cols, uint32_t ncols, uint32_t n_experts,
                         uint32_t n_used, uint32_t x_slots) {
    kpr_op_desc op = gemv(type, rows, cols, ncols);
    op.kind = KPR_OP_GEMV_GROUPED;
    op.n_experts = n_experts;
    op.n_used = n_used;
    op.x_slots = x_slots;
    return op;
}

static std::string type_name_of(uint32_t t) {
    const formats::TypeInfo *ti = formats::type_info(t);
    return ti ? ti->name : fmt::format("type#{}", t);
}

std::string describe(const kpr_op_desc &op) {
    if (op.kind == KPR_OP_GEMV_GROUPED)
        return fmt::format("gemv_grouped {} {}x{} x{} experts ({} used{}) ncols {}", type_name_of(op.weight_type),
                           op.rows, op.cols, op.n_experts, op.n_used, op.x_slots > 1 ? ", x per slot" : "", op.ncols);
    return fmt::format("gemv {} {}x{} ncols {}", type_name_of(op.weight_type), op.rows, op.cols, op.ncols);
}

void validate(const kpr_op_desc &op) {
    if (op.kind != KPR_OP_GEMV && op.kind != KPR_OP_GEMV_GROUPED) throw Error(fmt::format("unknown op kind {}", op.kind));
    const formats::TypeInfo *ti = formats::type_info(op.weight_type);
    if (!ti) throw Error(fmt::format("unknown weight type id {}", op.weight_type));
    if (op.ncols < 1 || op.ncols > KPR_MAX_NCOLS)
        throw Error(fmt::format("ncols {} is out of range: kpr serves 1..{} activation columns", op.ncols, KPR_MAX_NCOLS));
    if (op.rows == 0 || op.cols == 0) throw Error(fmt::format("{}: rows and cols must be at least 1", describe(op)));
    if (op.cols % ti->block_size)
        throw Error(fmt::format("cols {} is not a multiple of {}'s block of {} weights", op.cols, ti->name, ti->block_size));
    if (op.kind == KPR_OP_GEMV_GROUPED) {
        if (op.n_experts == 0 || op.n_used == 0 || op.n_used > op.n_experts)
            throw Error(fmt::format("{}: needs 1 <= experts used <= experts", describe(op)));
        if (op.x_slots != 1 && op.x_slots != op.n_used)
            throw Error(fmt::format("{}: x_slots must be 1 or the number of experts used", describe(op)));
    } else if (op.n_experts > 1 || op.n_used > 1 || op.x_slots > 1) {
        throw Error("a gemv op has one expert: n_experts, n_used and x_slots must be 1");
    }
    weight_bytes(op);  // throws on overflow
}

uint64_t weight_bytes(const kpr_op_desc &op) {
    uint64_t row = formats::row_bytes(op.weight_type, op.cols), total = 0;
    uint64_t experts = std::max<uint32_t>(op.n_experts, 1);
    if (__builtin_mul_overflow(row, op.rows, &total) || __builtin_mul_overflow(total, experts, &total))
        throw Error(fmt::format("{}: the weight size overflows 64 bits", describe(op)));
    return total;
}

// ---- options ------------------------------------------------------------------------------------

void OptionStore::finish() {
    items.clear();
    for (size_t i = 0; i < names.size(); ++i) items.push_back({names[i].c_str(), values[i].c_str()});
    set = {sizeof(kpr_option_set), (uint32_t)items.size(), items.empty() ? nullptr : items.data()};
}

std::string OptionStore::get(const std::string &name) const {
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return values[i];
    return {};
}

std::shared_ptr<LoadedProvider> RuntimeImpl::find(const std::string &name) const {
    for (auto &p : providers)
        if (p->ok() && p->info.name == name) return p;
    return nullptr;
}

const Device &RuntimeImpl::device(const std::string &id) const {
    for (auto &d : devices)
        if (d.id == id) return d;
    std::vector<std::string> ids;
    for (auto &d : devices) ids.push_back(d.id);
    throw Error(fmt::format("unknown device '{}' (this machine has: {}{})", id, fmt::join(ids, ", "),
                            id.rfind("sim:", 0) == 0 || id.rfind("cuda", 0) != 0 ? "" : "; to see what another GPU would pick, use --simulate-device"));
}

ProviderSettings RuntimeImpl::settings(const LoadedProvider &p, const Device &d) const {
    return config.effective(p.info.name, d.id, d.arch(), d.desc.name);
}

bool RuntimeImpl::enabled(const LoadedProvider &p, const ProviderSettings &s, std::string *why) const {
    if (s.enabled) {
        if (!s.enabled->value) *why = fmt::format("disabled by {}", s.enabled->where);
        return s.enabled->value;
    }
    if (p.info.opt_in) {
        *why = fmt::format("opt-in provider, not enabled (set [providers.{}] enabled = true, a rule, or KPR_ENABLE={})",
                           p.info.name, p.info.name);
        return false;
    }
    return true;
}

std::shared_ptr<const OptionStore> RuntimeImpl::options(const LoadedProvider &p, const Device &d,
                                                        const kpr_option_value *overrides, uint32_t n) const {
    std::string key = p.info.name + "|" + d.id;
    if (!overrides || n == 0) {
        std::lock_guard<std::mutex> g(mu);
        if (auto it = option_stores.find(key); it != option_stores.end()) return it->second;
    }
    ProviderSettings s = settings(p, d);
    auto store = std::make_shared<OptionStore>();
    for (const kpr_option_decl &decl : p.option_decls) {
        std::string name = decl.name;
        std::string value = decl.default_value;
        if (auto it = s.options.find(name); it != s.options.end()) {
            try {
                value = canonical_option_value(decl, it->second);
            } catch (const Error &e) {
                throw Error(fmt::format("{}: providers.{}.options.{}: {}", it->second.where, p.info.name, name, e.what()));
            }
        }
        for (uint32_t i = 0; overrides && i < n; ++i)
            if (overrides[i].name && overrides[i].value && name == overrides[i].name)
                value = canonical_option_value(decl, OptionSetting{overrides[i].value, "", "self-test case"});
        store->names.push_back(name);
        store->values.push_back(value);
    }
    store->finish();
    if (!overrides || n == 0) {
        std::lock_guard<std::mutex> g(mu);
        option_stores.emplace(key, store);
    }
    return store;
}

// ---- negotiation --------------------------------------------------------------------------------

std::shared_ptr<const Plan> RuntimeImpl::negotiate(const kpr_op_desc &op_in, const Device &d,
                                                   const std::string &only) const {
    kpr_op_desc op = op_in;
    op.struct_size = sizeof op;
    validate(op);
    auto plan = std::make_shared<Plan>();
    plan->rt_ = std::const_pointer_cast<RuntimeImpl>(shared_from_this());  // weak: the runtime caches the plan
    plan->op_ = op;
    plan->device_ = d;

    std::vector<std::shared_ptr<LoadedProvider>> order = providers;
    std::stable_sort(order.begin(), order.end(), [](auto &a, auto &b) { return a->info.name < b->info.name; });
    std::vector<std::string> notes;
    for (auto &p : order) {
        Answer a;
        a.provider = p->info.name;
        if (!p->ok()) {
            a.state = AnswerState::Failed;
            a.reason = fmt::format("failed to load from {}: {}", p->info.file, p->info.reason);
            plan->answers_.push_back(a);
            continue;
        }
        if (p->info.device_kind != d.desc.kind) {
            a.state = AnswerState::Declined;
            a.decline_code = KPR_ERR_UNSUPPORTED;
            a.reason = fmt::format("runs on {} devices, not on {}", p->info.device_kind == KPR_DEVICE_CUDA ? "CUDA" : "CPU",
                                   d.id);
            plan->answers_.push_back(a);
            continue;
        }
        if (!only.empty() && p->info.name != only) {
            a.state = AnswerState::Disabled;
            a.reason = fmt::format("not asked: restricted to provider '{}'", only);
            plan->answers_.push_back(a);
            continue;
        }
        ProviderSettings s = settings(*p, d);
        std::string why;
        if (!enabled(*p, s, &why) && only.empty()) {
            a.state = AnswerState::Disabled;
            a.reason = why;
            plan->answers_.push_back(a);
            continue;
        }
        a.forced = s.force && s.force->value;
        a.priority = s.priority ? (int32_t)s.priority->value : 0;
        try {
            kpr_offer offer = p->query(op, d.desc, *options(*p, d));
            a.state = offer.accepted ? AnswerState::Accepted : AnswerState::Declined;
            a.score = offer.score;
            a.decline_code = offer.accepted ? 0 : offer.decline_code;
            a.prepared_bytes = offer.prepared_bytes;
            a.workspace_bytes = offer.workspace_bytes;
            a.reason = offer.reason;
            if (!offer.accepted && a.reason.empty()) a.reason = "(declined without a reason)";
        } catch (const Error &e) {
            a.state = AnswerState::Failed;
            a.reason = e.what();
        }
        if (a.state == AnswerState::Accepted && calibration) a.calibrated_us = calibration(p->info.name, op, d);
        if (a.forced && a.state != AnswerState::Accepted) {
            if (s.require && s.require->value)
                throw Error(fmt::format("provider '{}' is forced ({}) with require = true ({}), but it {}: {}", a.provider,
                                        s.force->where, s.require->where, to_string(a.state), a.reason));
            notes.push_back(fmt::format("'{}' is forced ({}) but {}; negotiating among the others", a.provider,
                                        s.force->where, to_string(a.state)));
        }
        plan->answers_.push_back(a);
    }

    // Who wins: forced first, then priority, then a measured time, then the provider's score, then the name.
    const Answer *best = nullptr;
    std::string because;
    auto better = [&](const Answer &a, const Answer &b, std::string *why) {
        if (a.forced != b.forced) return *why = "forced", a.forced;
        if (a.priority != b.priority) return *why = fmt::format("priority {}", a.priority), a.priority > b.priority;
        if (a.calibrated_us && b.calibrated_us && *a.calibrated_us != *b.calibrated_us)
            return *why = fmt::format("calibrated {:.1f} us", *a.calibrated_us), *a.calibrated_us < *b.calibrated_us;
        if (a.calibrated_us.has_value() != b.calibrated_us.has_value())
            return *why = "calibrated on this machine", a.calibrated_us.has_value();
        if (a.score != b.score) return *why = fmt::format("score {}", a.score), a.score > b.score;
        return *why = "name (tie)", a.provider < b.provider;
    };
    int accepted = 0;
    for (auto &a : plan->answers_) {
        if (a.state != AnswerState::Accepted) continue;
        ++accepted;
        std::string why;
        if (!best) {
            best = &a;
            continue;
        }
        if (better(a, *best, &why)) best = &a;
    }
    if (best) {
        plan->winner_ = best->provider;
        if (accepted == 1) because = "the only provider that accepts";
        else {
            // Say what decided against the runner-up.
            const Answer *second = nullptr;
            std::string why, tmp;
            for (auto &a : plan->answers_)
                if (a.state == AnswerState::Accepted && &a != best && (!second || better(a, *second, &tmp))) second = &a;
            better(*best, *second, &why);
            because = fmt::format("wins over '{}' by {}", second->provider, why);
        }
        plan->decision_ = fmt::format("{}: {}", best->provider, because);
    } else {
        plan->decision_ = fmt::format("no provider accepts {} on {}", describe(op), d.id);
    }
    for (auto &n : notes) plan->decision_ += "; " + n;
    return plan;
}

// ---- Plan ----------------------------------------------------------------------------------------

std::string human_bytes(uint64_t b) {
    if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
    if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", b / double(1ull << 20));
    if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", b / double(1ull << 10));
    return fmt::format("{} B", b);
}

std::string Plan::explain() const {
    std::string out = fmt::format("{} on {} ({})\n", describe(op_), device_.id, device_.desc.name);
    out += ok() ? fmt::format("winner: {}\n", decision_) : fmt::format("{}\n", decision_);
    size_t w = 8;
    for (auto &a : answers_) w = std::max(w, a.provider.size());
    out += fmt::format("  {:<{}}  {:<9} {:>6} {:>5}  {}\n", "provider", w, "answer", "score", "prio", "reason");
    for (auto &a : answers_) {
        std::string reason = a.reason;
        if (a.state == AnswerState::Accepted && (a.prepared_bytes || a.workspace_bytes))
            reason += fmt::format(" [prepared {}, workspace {}]", human_bytes(a.prepared_bytes), human_bytes(a.workspace_bytes));
        if (a.calibrated_us) reason += fmt::format(" [calibrated {:.1f} us]", *a.calibrated_us);
        if (a.forced) reason += " [forced]";
        bool counts = a.state == AnswerState::Accepted || a.state == AnswerState::Declined;
        // the winner's own answer: a provider that failed to load under the same name answers too
        const bool won = a.state == AnswerState::Accepted && a.provider == winner_;
        out += fmt::format("{} {:<{}}  {:<9} {:>6} {:>5}  {}\n", won ? "*" : " ", a.provider, w,
                           to_string(a.state), counts ? std::to_string(a.score) : "-", a.priority, reason);
    }
    return out;
}

std::string Plan::to_json() const {
    nlohmann::json j;
    j["provider"] = ok() ? nlohmann::json(winner_) : nlohmann::json(nullptr);
    j["device"] = device_.id;
    j["device_name"] = device_.desc.name;
    j["op"] = {{"kind", op_.kind == KPR_OP_GEMV ? "gemv" : "gemv_grouped"},
               {"type", type_name_of(op_.weight_type)},
               {"rows", op_.rows},
               {"cols", op_.cols},
               {"ncols", op_.ncols}};
    if (op_.kind == KPR_OP_GEMV_GROUPED) {
        j["op"]["experts"] = op_.n_experts;
        j["op"]["experts_used"] = op_.n_used;
    }
    j["decision"] = decision_;
    j["answers"] = nlohmann::json::array();
    for (auto &a : answers_) {
        nlohmann::json e = {{"provider", a.provider}, {"state", to_string(a.state)}, {"score", a.score},
                            {"priority", a.priority}, {"forced", a.forced}, {"reason", a.reason},
                            {"prepared_bytes", a.prepared_bytes}, {"workspace_bytes", a.workspace_bytes}};
        if (a.calibrated_us) e["calibrated_us"] = *a.calibrated_us;
        j["answers"].push_back(e);
    }
    return json_text(j, 2);
}

PreparedOp Plan::prepare(const void *weights, uint64_t bytes, uint64_t identity) const {
    if (!ok()) throw Error(fmt::format("cannot prepare: {}", decision_));
    if (device_.desc.simulated)
        throw Error(fmt::format("cannot prepare on {}: it is a simulated device description, not hardware", device_.id));
    uint64_t need = weight_bytes(op_);
    if (bytes != need)
        throw Error(fmt::format("{}: weights are {} bytes, the op needs {}", describe(op_), bytes, need));
    if (!weights) throw Error("prepare: null weights");
    // The runtime owns the providers' configuration; a plan does not keep it alive (the runtime's plan cache
    // holds the plan, so a strong reference back would be a cycle that leaks every runtime).
    std::shared_ptr<RuntimeImpl> rt = rt_.lock();
    if (!rt) throw Error(fmt::format("cannot prepare {}: the Runtime that made this plan was destroyed", describe(op_)));
    auto p = rt->find(winner_);
    if (!p) throw Error(fmt::format("provider '{}' is no longer loaded", winner_));
    if (device_.is_cuda()) cuda::driver().make_current(device_.desc.ordinal);
    PreparedOp out;
    out.handle_ = p->prepare(op_, device_.desc, *rt->options(*p, device_), weights, bytes, identity);
    out.plan_ = shared_from_this();
    out.provider_ = p;
    return out;
}

// ---- PreparedOp ----------------------------------------------------------------------------------

PreparedOp::PreparedOp(PreparedOp &&o) noexcept { *this = std::move(o); }
PreparedOp &PreparedOp::operator=(PreparedOp &&o) noexcept {
    std::swap(plan_, o.plan_);
    std::swap(provider_, o.provider_);
    std::swap(handle_, o.handle_);
    return *this;
}
PreparedOp::~PreparedOp() {
    if (handle_ && provider_) provider_->release(handle_);
}
const std::string &PreparedOp::provider() const { return plan_->provider(); }
const kpr_op_desc &PreparedOp::op() const { return plan_->op(); }

void PreparedOp::run(const float *x, float *y, uint32_t ncols, const int32_t *ids, void *stream) const {
    if (!handle_) throw Error("run on an empty PreparedOp");
    const kpr_op_desc &op = plan_->op();
    if (ncols < 1 || ncols > op.ncols)
        throw Error(fmt::format("{}: run with ncols {} (prepared for at most {})", describe(op), ncols, op.ncols));
    if (!x || !y) throw Error("run: null x or y");
    if (op.kind == KPR_OP_GEMV_GROUPED && !ids) throw Error(fmt::format("{}: a grouped op needs expert ids", describe(op)));
    if (plan_->device().is_cuda()) cuda::driver().make_current(plan_->device().desc.ordinal);
    kpr_run_args args{sizeof args, ncols, x, y, ids, stream};
    provider_->run(handle_, args);
}

// ---- Runtime -------------------------------------------------------------------------------------

static void setup_logging(const std::string &level) {
    static std::once_flag once;
    std::call_once(once, [] {
        auto logger = spdlog::stderr_color_mt("kpr");
        logger->set_pattern("kpr: %^%l%$: %v");
        spdlog::set_default_logger(logger);
    });
    spdlog::set_level(spdlog::level::from_str(level.empty() ? "warn" : level));
}

Runtime Runtime::create(const RuntimeOptions &opts) {
    auto impl = std::make_shared<RuntimeImpl>();
    std::string level = opts.log_level;
    if (level.empty() && opts.use_environment)
        if (const char *e = std::getenv("KPR_LOG")) level = e;
    setup_logging(level);

    std::optional<fs::path> cfg = opts.config_file;
    if (!cfg && opts.use_environment)
        if (const char *e = std::getenv("KPR_CONFIG"); e && *e) cfg = fs::path(e);
    if (cfg) impl->config = Config::load(*cfg);
    if (opts.use_environment) impl->config.apply_environment();
    if (level.empty() && impl->config.log_level) setup_logging(*impl->config.log_level);

    impl->devices.push_back(probe_cpu());
    if (opts.probe_gpus) {
        auto gpus = probe_cuda(&impl->gpu_note);
        if (gpus.empty()) spdlog::info("no CUDA devices: {}; running CPU-only", impl->gpu_note);
        for (auto &g : gpus) impl->devices.push_back(g);
    } else {
        impl->gpu_note = "GPU probing turned off";
    }
    for (auto &d : opts.extra_devices) impl->devices.push_back(d);

    impl->host = {sizeof(kpr_host_api), KPR_ABI_VERSION, nullptr, nullptr, (int32_t)spdlog::get_level()};
    impl->load_providers(provider_search_path(opts, impl->config, opts.use_environment));

    // Names in the config must exist and options must be declared: an error naming file, line, column, key.
    std::map<std::string, std::vector<kpr_option_decl>> known;
    for (auto &p : impl->providers)
        if (p->ok()) known[p->info.name] = p->option_decls;
    auto errors = impl->config.check_against(known);
    if (!errors.empty()) throw Error(errors.front() + (errors.size() > 1 ? fmt::format(" (and {} more)", errors.size() - 1) : ""));
    attach_calibration(*impl, opts);
    if (opts.use_environment)
        for (const char *var : {"KPR_ENABLE", "KPR_DISABLE", "KPR_FORCE"})
            if (const char *e = std::getenv(var)) {
                std::stringstream ss(e);
                std::string n;
                std::vector<std::string> names;
                for (auto &[k, _] : known) names.push_back(k);
                while (std::getline(ss, n, ',')) {
                    n.erase(0, n.find_first_not_of(" \t"));
                    n.erase(n.find_last_not_of(" \t") + 1);
                    if (!n.empty() && !known.count(n)) {
                        std::string hint = closest_name(n, names);
                        impl->warnings.push_back(fmt::format("{} names unknown provider '{}'{}", var, n,
                                                             hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
                        spdlog::warn("{}", impl->warnings.back());
                    }
                }
            }
    Runtime rt;
    rt.impl_ = impl;
    return rt;
}

const std::vector<Device> &Runtime::devices() const { return impl_->devices; }
const Device &Runtime::device(const std::string &id) const { return impl_->device(id); }
std::vector<std::string> Runtime::config_files() const { return impl_->config.files; }
std::vector<std::string> Runtime::warnings() const { return impl_->warnings; }

std::vector<ProviderInfo> Runtime::providers() const {
    std::vector<ProviderInfo> out;
    for (auto &p : impl_->providers) {
        ProviderInfo info = p->info;
        if (p->ok()) {
            // Disabled is judged on the first device of the provider's kind (or the config alone).
            const Device *dev = nullptr;
            for (auto &d : impl_->devices)
                if (d.desc.kind == info.device_kind && !d.desc.simulated) {
                    dev = &d;
                    break;
                }
            Device none;
            none.id = info.device_kind == KPR_DEVICE_CUDA ? "cuda:?" : "cpu";
            std::string why;
            if (!impl_->enabled(*p, impl_->settings(*p, dev ? *dev : none), &why)) {
                info.state = ProviderState::Disabled;
                info.reason = why;
            } else if (!dev) {
                info.reason = info.device_kind == KPR_DEVICE_CUDA ? "no CUDA device on this machine" : "";
            }
        }
        out.push_back(info);
    }
    return out;
}

std::shared_ptr<const Plan> Runtime::plan(const kpr_op_desc &op, const std::string &device_id,
                                          const std::string &only_provider) const {
    const Device &d = impl_->device(device_id);
    if (!only_provider.empty() && !impl_->find(only_provider)) {
        std::vector<std::string> names;
        for (auto &p : impl_->providers)
            if (p->ok()) names.push_back(p->info.name);
        std::string hint = closest_name(only_provider, names);
        throw Error(fmt::format("unknown provider '{}'{}", only_provider,
                                hint.empty() ? fmt::format(" (loaded: {})", fmt::join(names, ", "))
                                             : fmt::format(" (did you mean '{}'?)", hint)));
    }
    std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", op.kind, op.weight_type, op.rows, op.cols, op.ncols,
                                  op.n_experts, op.n_used, op.x_slots, device_id, only_provider);
    {
        std::lock_guard<std::mutex> g(impl_->mu);
        if (auto it = impl_->plans.find(key); it != impl_->plans.end()) return it->second;
    }
    auto plan = impl_->negotiate(op, d, only_provider);
    std::lock_guard<std::mutex> g(impl_->mu);
    return impl_->plans.emplace(key, plan).first->second;  // first writer wins: every caller sees one plan
}

std::shared_ptr<LoadedProvider> Runtime::loaded(const std::string &name) const { return impl_->find(name); }

std::vector<std::shared_ptr<LoadedProvider>> Runtime::loaded_providers() const {
    std::vector<std::shared_ptr<LoadedProvider>> out;
    for (auto &p : impl_->providers)
        if (p->ok()) out.push_back(p);
    return out;
}

std::vector<std::pair<std::string, std::string>> Runtime::options_for(const std::string &provider,
                                                                      const std::string &device_id) const {
    auto p = impl_->find(provider);
    if (!p) throw Error(fmt::format("unknown provider '{}'", provider));
    auto store = impl_->options(*p, impl_->device(device_id));
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i = 0; i < store->names.size(); ++i) out.emplace_back(store->names[i], store->values[i]);
    return out;
}

} // namespace kpr
