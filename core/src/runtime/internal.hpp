// Internals shared by the loader, negotiation and the self-test runner. Not installed.
#pragma once

#include <kpr/config.hpp>
#include <kpr/runtime.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace kpr {

// The option values one provider gets on one device, laid out as the ABI wants them. Immutable.
struct OptionStore {
    std::vector<std::string> names, values;
    std::vector<kpr_option_value> items;
    kpr_option_set set{};
    void finish();  // point items/set at names/values
    std::string get(const std::string &name) const;
};

// A provider library that got through the loader (or a record of one that did not).
struct LoadedProvider {
    ProviderInfo info;
    const kpr_provider_v1 *table = nullptr;  // null when failed
    void *state = nullptr;
    std::vector<kpr_option_decl> option_decls;  // copies whose strings point into option_strings
    std::deque<std::string> option_strings;     // the core's own copies (a deque never moves its elements)
    struct LogContext *log = nullptr;        // lives as long as the process (libraries are never unloaded)

    bool ok() const { return table != nullptr && info.state != ProviderState::Failed; }
    // Whether the provider's table is long enough to hold `slot` and the slot is set.
    template <typename F> bool has(F kpr_provider_v1::*slot) const {
        size_t off = reinterpret_cast<size_t>(&(static_cast<kpr_provider_v1 *>(nullptr)->*slot));
        return table && table->struct_size >= off + sizeof(F) && (table->*slot) != nullptr;
    }

    // Calls into the provider. Each catches anything thrown through the C boundary and turns a failure
    // into a kpr::Error naming the provider ("provider 'x': prepare: ...").
    kpr_offer query(const kpr_op_desc &op, const kpr_device_desc &dev, const OptionStore &opts) const;
    kpr_prepared *prepare(const kpr_op_desc &op, const kpr_device_desc &dev, const OptionStore &opts,
                          const void *weights, uint64_t bytes, uint64_t identity) const;
    void run(kpr_prepared *p, const kpr_run_args &args) const;
    void release(kpr_prepared *p) const noexcept;
    uint32_t selftest_count(const kpr_device_desc &dev) const;
    kpr_selftest_case selftest_get(const kpr_device_desc &dev, uint32_t index) const;
    // INTERNAL cases: returns the provider's message when it failed, "" when it passed.
    std::string selftest_run(const kpr_device_desc &dev, uint32_t index, double *measured) const;
};

struct RuntimeImpl : std::enable_shared_from_this<RuntimeImpl> {
    Config config;
    std::vector<Device> devices;
    std::vector<std::shared_ptr<LoadedProvider>> providers;  // in load order; failures included
    std::vector<std::string> warnings;
    std::string gpu_note;
    kpr_host_api host{};

    // Measured winners (issue: calibration); returns the time in microseconds for (provider, op, device).
    std::function<std::optional<double>(const std::string &, const kpr_op_desc &, const Device &)> calibration;

    mutable std::mutex mu;
    mutable std::map<std::string, std::shared_ptr<const Plan>> plans;
    mutable std::map<std::string, std::shared_ptr<const OptionStore>> option_stores;

    std::shared_ptr<LoadedProvider> find(const std::string &name) const;
    const Device &device(const std::string &id) const;
    ProviderSettings settings(const LoadedProvider &p, const Device &d) const;
    // Is the provider enabled on the device? When not, *why says which setting (or the opt-in default).
    bool enabled(const LoadedProvider &p, const ProviderSettings &s, std::string *why) const;
    std::shared_ptr<const OptionStore> options(const LoadedProvider &p, const Device &d,
                                               const kpr_option_value *overrides = nullptr, uint32_t n = 0) const;
    std::shared_ptr<const Plan> negotiate(const kpr_op_desc &op, const Device &d, const std::string &only) const;

    void load_providers(const std::vector<std::filesystem::path> &dirs);
    void load_one(const std::filesystem::path &file);
};

// Reads the calibration file (if any) and sets impl.calibration; stale entries become impl.warnings.
// Implemented in core/src/calibration/.
void attach_calibration(RuntimeImpl &impl, const RuntimeOptions &opts);

// Search order for provider libraries, deduplicated.
std::vector<std::filesystem::path> provider_search_path(const RuntimeOptions &opts, const Config &config,
                                                        bool use_env);

} // namespace kpr
