// kpr/runtime.hpp -- the C++ API an inference engine links against.
//
//   kpr::Runtime rt = kpr::Runtime::create({});              // probe devices, read config, load providers
//   auto plan = rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 4096, 4096, 1), "cpu");   // negotiate (cached per key)
//   if (!plan->ok()) throw ...;                               // plan->explain() says why nothing serves it
//   kpr::PreparedOp op = plan->prepare(weights, bytes);      // bind the weights (and their size) once
//   op.run(x, y, /*ncols=*/1);                               // as often as wanted, from any thread
//
// Every call is thread-safe. Errors are thrown as kpr::Error with a message that names the input.
#pragma once

#include <kpr/error.hpp>
#include <kpr/provider.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kpr {

// ---- devices ------------------------------------------------------------------------------------

struct Device {
    kpr_device_desc desc{};
    std::string id;            // "cpu", "cuda:0"
    bool is_cpu() const { return desc.kind == KPR_DEVICE_CPU; }
    bool is_cuda() const { return desc.kind == KPR_DEVICE_CUDA; }
    std::string arch() const;  // "6.0" for CUDA, "x86-64-avx512" style summary for the CPU
};

// Names of the CPU feature bits that are set, "avx2 fma f16c ...".
std::string cpu_feature_names(uint64_t features);

// Built-in descriptions of GPUs kpr is not running on (`kpr plan --simulate-device`): p100 (or gp100),
// p40, gtx1080, v100, t4, a100, rtx3090, l4, h100, h200; nullopt for an unknown name.
std::optional<Device> simulated_device(const std::string &name);
std::vector<std::string> simulated_device_names();
// A device description from a TOML file: one [device] table with like = "p100" (a built-in to start from),
// name (string), cc = "6.0" (string), sm_count, smem_per_block, smem_per_block_optin, smem_per_sm,
// l2_bytes, memory_bytes (integers >= 1) and bandwidth_gbps (a number >= 0). cc is required, and sm_count
// without `like`. Throws kpr::Error naming the file (FILE:LINE:COL and the key where there is one) on a
// missing or unreadable file, a folder, a syntax error, an unknown key, a value of the wrong type or out
// of range. docs/config.md, "Simulated devices", has examples.
Device load_device_file(const std::filesystem::path &file);

// ---- ops ----------------------------------------------------------------------------------------

kpr_op_desc gemv(uint32_t type, uint64_t rows, uint64_t cols, uint32_t ncols);
kpr_op_desc gemv_grouped(uint32_t type, uint64_t rows, uint64_t cols, uint32_t ncols, uint32_t n_experts,
                         uint32_t n_used, uint32_t x_slots = 1);
// "gemv q8_0 4096x4096 ncols 1", "gemv_grouped q4_K 768x2048 x128 experts (8 used) ncols 2"
std::string describe(const kpr_op_desc &op);
// Throws kpr::Error when the op cannot exist (ncols out of range, cols not a multiple of the block,
// unknown type, zero sizes, sizes that overflow).
void validate(const kpr_op_desc &op);
uint64_t weight_bytes(const kpr_op_desc &op);  // all experts

// ---- providers ----------------------------------------------------------------------------------

enum class ProviderState { Loaded, Failed, Disabled };
const char *to_string(ProviderState s);

struct OptionInfo {
    std::string name, type, default_value, doc, choices;
    int64_t min_value = 0, max_value = 0;
};

struct ProviderInfo {
    std::string name;          // the provider's name ("" when it failed before saying it)
    std::string file;          // the library
    std::string version, family, description;
    uint32_t abi_version = 0;
    uint32_t device_kind = KPR_DEVICE_CPU;
    std::vector<uint32_t> sass_archs, ptx_archs;
    bool opt_in = false;
    std::vector<OptionInfo> options;
    ProviderState state = ProviderState::Loaded;
    std::string reason;        // Failed: what went wrong; Disabled: which setting disabled it
};

// ---- negotiation --------------------------------------------------------------------------------

enum class AnswerState { Accepted, Declined, Disabled, Failed };
const char *to_string(AnswerState s);

struct Answer {
    std::string provider;
    AnswerState state = AnswerState::Declined;
    int32_t score = 0;
    int32_t priority = 0;           // from the config (0 when none)
    bool forced = false;
    uint32_t decline_code = 0;      // kpr_status: UNSUPPORTED or WRONG_ARCH
    uint64_t prepared_bytes = 0, workspace_bytes = 0;
    std::optional<double> calibrated_us;  // a measured time for this key, when calibration has one
    std::string reason;             // the provider's, or the core's (disabled by which setting, failed why)
};

class PreparedOp;
class Runtime;

// The outcome of negotiation for one key. Immutable; shared by everyone who asks for the same key.
class Plan : public std::enable_shared_from_this<Plan> {
public:
    bool ok() const { return !winner_.empty(); }
    const std::string &provider() const { return winner_; }  // "" when nothing serves the op
    const kpr_op_desc &op() const { return op_; }
    const Device &device() const { return device_; }
    const std::vector<Answer> &answers() const { return answers_; }
    const std::string &decision() const { return decision_; }  // why the winner won, or why none did
    std::string explain() const;                               // a table a person can read
    std::string to_json() const;                               // {"provider", "device", "op", "answers": [...]}

    // Bind weights (in the device's memory, owned by the caller, outliving the prepared op). The Runtime
    // that made the plan must still exist; the prepared op then lives on its own.
    // `identity` lets providers share a repacked copy between ops on the same tensor (0: none).
    PreparedOp prepare(const void *weights, uint64_t bytes, uint64_t identity = 0) const;

private:
    friend class Runtime;
    friend struct RuntimeImpl;
    std::weak_ptr<struct RuntimeImpl> rt_;  // prepare() needs the Runtime alive (it owns the configuration)
    kpr_op_desc op_{};
    Device device_;
    std::string winner_;
    std::string decision_;
    std::vector<Answer> answers_;
};

// A plan bound to one weight tensor. Movable; releases the provider's handle on destruction.
class PreparedOp {
public:
    PreparedOp() = default;
    PreparedOp(PreparedOp &&) noexcept;
    PreparedOp &operator=(PreparedOp &&) noexcept;
    ~PreparedOp();
    PreparedOp(const PreparedOp &) = delete;
    PreparedOp &operator=(const PreparedOp &) = delete;

    // x: [ncols][x_slots][cols], y: [ncols][n_used][rows], ids: [ncols][n_used] (grouped only), all in
    // the device's memory; stream: a CUstream for CUDA devices (null: default stream), ignored on the CPU.
    void run(const float *x, float *y, uint32_t ncols, const int32_t *ids = nullptr, void *stream = nullptr) const;
    const std::string &provider() const;
    const kpr_op_desc &op() const;
    explicit operator bool() const { return handle_ != nullptr; }

private:
    friend class Plan;
    std::shared_ptr<const Plan> plan_;
    std::shared_ptr<struct LoadedProvider> provider_;
    kpr_prepared *handle_ = nullptr;
};

// ---- the runtime --------------------------------------------------------------------------------

struct RuntimeOptions {
    std::optional<std::filesystem::path> config_file;     // --config; else KPR_CONFIG; else none
    std::vector<std::filesystem::path> provider_paths;    // --provider-path, searched first
    bool use_environment = true;                          // read KPR_* variables
    bool probe_gpus = true;                               // false: CPU only
    std::vector<Device> extra_devices;                    // injected (simulated) devices
    std::string log_level;                                // "" = KPR_LOG or "warn"
    std::optional<std::filesystem::path> calibration_file; // else [runtime] calibration_file, else next to the config
};

class Runtime {
public:
    static Runtime create(const RuntimeOptions &options = {});

    const std::vector<Device> &devices() const;
    const Device &device(const std::string &id) const;     // throws kpr::Error naming the known ids
    std::vector<ProviderInfo> providers() const;           // every library found, loaded or not
    std::vector<std::string> config_files() const;         // the files read, in order
    std::vector<std::string> warnings() const;             // things a person should know (stale entries...)

    // Negotiate (cached per key). Throws kpr::Error for an impossible op, or when a provider forced
    // with `require = true` declines; otherwise returns a plan, ok() or not.
    std::shared_ptr<const Plan> plan(const kpr_op_desc &op, const std::string &device_id = "cpu",
                                     const std::string &only_provider = "") const;

    // The provider table of one loaded provider, for the self-test runner and tools.
    std::shared_ptr<struct LoadedProvider> loaded(const std::string &name) const;
    std::vector<std::shared_ptr<struct LoadedProvider>> loaded_providers() const;
    // The option values a provider gets on a device (config, rules and defaults merged).
    std::vector<std::pair<std::string, std::string>> options_for(const std::string &provider,
                                                                 const std::string &device_id) const;

    std::shared_ptr<struct RuntimeImpl> impl() const { return impl_; }

private:
    std::shared_ptr<struct RuntimeImpl> impl_;
};

std::string version();
// "4.8 KiB", "18.0 MiB", "1.25 GiB": sizes as explain and the CLI print them.
std::string human_bytes(uint64_t bytes);

} // namespace kpr
