// kpr devices, kpr providers, kpr config check.
#include "cli.hpp"

#include <kpr/config.hpp>

#include <iostream>

namespace kpr::cli {

nlohmann::json device_json(const Device &d) {
    const kpr_device_desc &k = d.desc;
    nlohmann::json j = {{"id", d.id}, {"kind", d.is_cuda() ? "cuda" : "cpu"}, {"name", k.name},
                        {"simulated", k.simulated != 0}};
    if (d.is_cpu()) {
        j["features"] = cpu_feature_names(k.cpu_features);
        j["threads"] = k.cpu_threads;
        j["cores"] = k.cpu_cores;
        j["l1d_bytes"] = k.cache_l1d_bytes;
        j["l2_bytes"] = k.cache_l2_bytes;
        j["l3_bytes"] = k.cache_l3_bytes;
    } else {
        j["uuid"] = k.uuid;
        j["compute_capability"] = d.arch();
        j["sm_count"] = k.sm_count;
        j["smem_per_block"] = k.smem_per_block;
        j["smem_per_block_optin"] = k.smem_per_block_optin;
        j["smem_per_sm"] = k.smem_per_sm;
        j["l2_bytes"] = k.l2_bytes;
        j["memory_bytes"] = k.memory_bytes;
        j["peak_bandwidth_gbps"] = k.peak_bandwidth_gbps;
        j["dp4a"] = k.has_dp4a != 0;
        j["driver_version"] = k.driver_version;
    }
    return j;
}

std::string device_line(const Device &d) {
    const kpr_device_desc &k = d.desc;
    if (d.is_cpu())
        return fmt::format("{:<8} {} | {} threads, {} cores | L1d {} L2 {} L3 {} | {}", d.id, k.name, k.cpu_threads,
                           k.cpu_cores, human_bytes(k.cache_l1d_bytes), human_bytes(k.cache_l2_bytes),
                           human_bytes(k.cache_l3_bytes), cpu_feature_names(k.cpu_features));
    return fmt::format("{:<8} {} | cc {} | {} SMs | smem {}/block ({} opt-in), {}/SM | L2 {} | {} | peak {:.0f} GB/s | dp4a {}{}",
                       d.id, k.name, d.arch(), k.sm_count, human_bytes(k.smem_per_block), human_bytes(k.smem_per_block_optin),
                       human_bytes(k.smem_per_sm), human_bytes(k.l2_bytes), human_bytes(k.memory_bytes),
                       k.peak_bandwidth_gbps, k.has_dp4a ? "yes" : "no", k.simulated ? " | simulated" : "");
}

Command add_devices(CLI::App &root, Globals &g) {
    auto *sub = root.add_subcommand("devices", "list the devices kpr found (CPU and NVIDIA GPUs)");
    auto json = std::make_shared<bool>(false);
    sub->add_flag("--json", *json, "machine-readable output");
    return {sub, [&g, json] {
                Runtime rt = make_runtime(g);
                if (*json) {
                    nlohmann::json j = nlohmann::json::array();
                    for (auto &d : rt.devices()) j.push_back(device_json(d));
                    std::cout << json_text(j, 2) << "\n";
                } else {
                    for (auto &d : rt.devices()) std::cout << device_line(d) << "\n";
                }
                return 0;
            }};
}

nlohmann::json provider_json(const ProviderInfo &p) {
    nlohmann::json opts = nlohmann::json::array();
    for (auto &o : p.options)
        opts.push_back({{"name", o.name}, {"type", o.type}, {"default", o.default_value}, {"doc", o.doc}});
    return {{"name", p.name},
            {"file", p.file},
            {"version", p.version},
            {"abi", p.abi_version ? fmt::format("{}.{}", KPR_VERSION_MAJOR(p.abi_version), KPR_VERSION_MINOR(p.abi_version)) : ""},
            {"device_kind", p.device_kind == KPR_DEVICE_CUDA ? "cuda" : "cpu"},
            {"family", p.family},
            {"description", p.description},
            {"sass_archs", p.sass_archs},
            {"ptx_archs", p.ptx_archs},
            {"opt_in", p.opt_in},
            {"state", to_string(p.state)},
            {"reason", p.reason},
            {"options", opts}};
}

std::string archs_string(const ProviderInfo &p) {
    if (p.device_kind != KPR_DEVICE_CUDA) return "-";
    std::string s = fmt::format("{}", fmt::join(p.sass_archs, ","));
    if (!p.ptx_archs.empty()) s += fmt::format(" +ptx{}", fmt::join(p.ptx_archs, ","));
    return s;
}

Command add_providers(CLI::App &root, Globals &g) {
    auto *sub = root.add_subcommand("providers", "list provider libraries: loaded, failed (and why) or disabled (by what)");
    auto json = std::make_shared<bool>(false);
    auto verbose = std::make_shared<bool>(false);
    sub->add_flag("--json", *json, "machine-readable output");
    sub->add_flag("-v,--verbose", *verbose, "also list each provider's options");
    return {sub, [&g, json, verbose] {
                Runtime rt = make_runtime(g);
                auto ps = rt.providers();
                if (*json) {
                    nlohmann::json j = nlohmann::json::array();
                    for (auto &p : ps) j.push_back(provider_json(p));
                    std::cout << json_text(j, 2) << "\n";
                    return 0;
                }
                if (ps.empty()) {
                    std::cout << "no provider libraries found (search: --provider-path, [runtime] provider_paths, "
                                 "KPR_PROVIDER_PATH, the build tree, <prefix>/lib/kpr/providers)\n";
                    return 0;
                }
                Table t({"name", "version", "device", "abi", "archs", "state", "file / reason"});
                for (auto &p : ps) {
                    std::string abi = p.abi_version ? fmt::format("{}.{}", KPR_VERSION_MAJOR(p.abi_version), KPR_VERSION_MINOR(p.abi_version)) : "-";
                    std::string detail = p.file + (p.reason.empty() ? "" : "\n      -> " + p.reason);
                    t.add({p.name, p.version.empty() ? "-" : p.version, p.device_kind == KPR_DEVICE_CUDA ? "cuda" : "cpu",
                           abi, archs_string(p), to_string(p.state), p.file});
                }
                std::cout << t.str();
                for (auto &p : ps)
                    if (!p.reason.empty()) std::cout << fmt::format("  {}: {}\n", p.name, p.reason);
                if (*verbose)
                    for (auto &p : ps) {
                        if (p.options.empty()) continue;
                        std::cout << fmt::format("\n{} options:\n", p.name);
                        for (auto &o : p.options)
                            std::cout << fmt::format("  {} ({}, default {}){}: {}\n", o.name, o.type, o.default_value,
                                                     o.choices.empty() ? "" : " one of " + o.choices, o.doc);
                    }
                for (auto &w : rt.warnings()) std::cout << "warning: " << w << "\n";
                return 0;
            }};
}

Command add_config(CLI::App &root, Globals &g) {
    auto *sub = root.add_subcommand("config", "configuration tools");
    sub->require_subcommand(1);
    auto *check = sub->add_subcommand("check", "check a configuration file against the loaded providers");
    auto file = std::make_shared<std::string>();
    check->add_option("file", *file, "the file (default: --config, else $KPR_CONFIG)");
    return {sub, [&g, file] {
                Globals g2 = g;
                if (!file->empty()) g2.config = *file;
                if (g2.config.empty())
                    if (const char *e = std::getenv("KPR_CONFIG")) g2.config = e;
                if (g2.config.empty()) throw Error("config check: no file given (pass FILE, --config or KPR_CONFIG)", 2);
                Runtime rt = make_runtime(g2);  // parses, loads providers, checks names and options
                std::cout << fmt::format("{}: ok\n", g2.config);
                auto infos = rt.providers();
                for (auto &d : rt.devices())
                    for (auto &pi : infos) {
                        if (pi.state == ProviderState::Failed || pi.device_kind != d.desc.kind) continue;
                        std::string o;
                        for (auto &[k, v] : rt.options_for(pi.name, d.id)) o += fmt::format("{}{}={}", o.empty() ? "" : ", ", k, v);
                        std::cout << fmt::format("  {} on {}: {}{}\n", pi.name, d.id,
                                                 pi.state == ProviderState::Disabled ? "disabled (" + pi.reason + ")" : "enabled",
                                                 o.empty() ? "" : " [" + o + "]");
                    }
                return 0;
            }};
}

static const bool add_devices_registered = register_command(10, add_devices);
static const bool add_providers_registered = register_command(20, add_providers);
static const bool add_config_registered = register_command(80, add_config);

} // namespace kpr::cli
