// libFuzzer target: the TOML configuration (kpr::Config::parse) with its rules and provider options,
// then what the runtime does with a parsed config: effective settings per device, and the check of every
// option value against declared options of each type.
#include <kpr/config.hpp>
#include <kpr/error.hpp>

#include <map>
#include <string>
#include <vector>

namespace {

std::map<std::string, std::vector<kpr_option_decl>> known_providers() {
    auto decl = [](uint32_t type, const char *name, const char *def, int64_t lo, int64_t hi, const char *choices) {
        kpr_option_decl d{};
        d.struct_size = sizeof d;
        d.type = type;
        d.name = name;
        d.default_value = def;
        d.doc = "fuzz";
        d.min_value = lo;
        d.max_value = hi;
        d.choices = choices;
        return d;
    };
    std::vector<kpr_option_decl> opts = {
        decl(KPR_OPTION_BOOL, "fast", "false", 0, 0, nullptr),
        decl(KPR_OPTION_INT, "blocks_per_sm", "4", 1, 16, nullptr),
        decl(KPR_OPTION_INT, "unbounded", "0", 0, 0, nullptr),
        decl(KPR_OPTION_FLOAT, "ratio", "0.5", 0, 0, nullptr),
        decl(KPR_OPTION_STRING, "mode", "auto", 0, 0, "auto,fast,exact"),
        decl(KPR_OPTION_STRING, "label", "", 0, 0, nullptr),
    };
    return {{"generic_cpu", {}}, {"generic_cuda", opts}, {"sm60_q8", opts}, {"iq_stage_tables", {}}};
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const auto known = known_providers();
    std::string text(reinterpret_cast<const char *>(data), size);
    try {
        kpr::Config c = kpr::Config::parse(text, "/fuzz/kpr.toml");
        for (const char *p : {"generic_cpu", "generic_cuda", "sm60_q8", "nope"})
            for (const char *dev : {"cpu", "cuda:0", "cuda:1"}) {
                kpr::ProviderSettings s = c.effective(p, dev, dev[0] == 'c' && dev[1] == 'p' ? "cpu" : "6.0", "Tesla P100-PCIE-16GB");
                (void)s;
            }
        for (const std::string &e : c.check_against(known)) (void)e.size();
        for (auto &[name, s] : c.providers) {
            auto it = known.find(name);
            if (it == known.end()) continue;
            for (auto &[oname, oval] : s.options)
                for (const kpr_option_decl &d : it->second)
                    if (oname == d.name) {
                        try {
                            (void)kpr::canonical_option_value(d, oval);
                        } catch (const kpr::Error &) {
                        }
                    }
        }
    } catch (const kpr::Error &) {
    }
    return 0;
}
