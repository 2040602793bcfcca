// The per-machine TOML configuration: every error names the file, line, column and key; names of
// providers and options are checked against what was loaded, with a "did you mean".
#include <kpr/config.hpp>
#include <kpr/error.hpp>
#include <kpr/ggml_blocks.h>
#include <kpr/runtime.hpp>

#include <gtest/gtest.h>

#include "test_support.hpp"

#include <regex>

namespace {

using namespace kpr_test;

// The error creating a runtime with `toml` as its config file (with the options mock loaded).
struct ConfigError {
    std::string file, message;
    int line = 0, column = 0;
    std::string rest;  // after "FILE:LINE:COL: "
};

ConfigError runtime_error_for(const TempDir &tmp, const std::string &toml,
                              const std::vector<fs::path> &dirs = {mock_dir("options"), mock_dir("gpu")}) {
    ConfigError ce;
    ce.file = tmp.write("kpr.toml", toml).string();
    kpr::RuntimeOptions o = isolated_options(dirs);
    o.config_file = ce.file;
    try {
        kpr::Runtime::create(o);
    } catch (const kpr::Error &e) {
        ce.message = e.what();
    }
    std::smatch m;
    static const std::regex pos("^(.*):([0-9]+):([0-9]+): (.*)$");
    if (std::regex_match(ce.message, m, pos) && m[1] == ce.file) {
        ce.line = std::stoi(m[2]);
        ce.column = std::stoi(m[3]);
        ce.rest = m[4];
    }
    return ce;
}

#define EXPECT_CONFIG_ERROR(ce, want_line, key, needle)                                                 \
    do {                                                                                              \
        ASSERT_FALSE((ce).message.empty()) << "the config was accepted";                              \
        EXPECT_EQ((ce).line, (want_line)) << "position: " << (ce).message;                            \
        EXPECT_GT((ce).column, 0) << (ce).message;                                                    \
        EXPECT_EQ((ce).rest.rfind(std::string(key) + ": ", 0), 0u) << "key first: " << (ce).message;  \
        EXPECT_TRUE(contains((ce).message, needle)) << (ce).message;                                  \
    } while (0)

// ---- syntax, keys and types (Config::load alone) ------------------------------------------------

TEST(ConfigErrors, SyntaxErrorHasFileLineColumn) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "# kpr\n[providers.generic_cpu]\nenabled = true\npriority = = 3\n");
    ASSERT_FALSE(ce.message.empty());
    EXPECT_EQ(ce.line, 4) << ce.message;
    EXPECT_GT(ce.column, 0) << ce.message;
    EXPECT_TRUE(contains(ce.message, "syntax error")) << ce.message;
}

TEST(ConfigErrors, UnclosedTableHeader) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "\n\n[providers.generic_cpu\nenabled = true\n");
    EXPECT_EQ(ce.line, 3) << ce.message;
    EXPECT_TRUE(contains(ce.message, "syntax error")) << ce.message;
}

TEST(ConfigErrors, UnknownKeyWithSuggestion) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[providers.generic_cpu]\nenabled = true\nenabeld = false\n");
    EXPECT_CONFIG_ERROR(ce, 3, "providers.generic_cpu.enabeld", "did you mean 'enabled'?");
}

TEST(ConfigErrors, UnknownTopLevelKey) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[runtim]\nlog_level = \"info\"\n");
    ASSERT_FALSE(ce.message.empty());
    EXPECT_EQ(ce.line, 1) << ce.message;
    EXPECT_TRUE(contains(ce.message, "runtim")) << ce.message;
    EXPECT_TRUE(contains(ce.message, "did you mean 'runtime'?")) << ce.message;
}

TEST(ConfigErrors, UnknownRuntimeKeyListsTheAllowedOnes) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[runtime]\nsearch = [\"x\"]\n");
    EXPECT_CONFIG_ERROR(ce, 2, "runtime.search", "provider_paths");
}

TEST(ConfigErrors, UnknownRuleKey) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[[rules]]\narch = \"6.0\"\ndevcie = \"cuda:0\"\n");
    EXPECT_CONFIG_ERROR(ce, 3, "rules[0].devcie", "did you mean 'device'?");
}

TEST(ConfigErrors, WrongValueTypes) {
    struct Case {
        const char *toml;
        int line;
        const char *key, *needle;
    } cases[] = {
        {"[providers.generic_cpu]\nenabled = \"yes\"\n", 2, "providers.generic_cpu.enabled", "boolean"},
        {"[providers.generic_cpu]\n\npriority = 1.5\n", 3, "providers.generic_cpu.priority", "integer"},
        {"[providers.generic_cpu]\nforce = 1\n", 2, "providers.generic_cpu.force", "boolean"},
        {"[runtime]\nprovider_paths = \"/opt/kpr\"\n", 2, "runtime.provider_paths", "array"},
        {"[runtime]\nprovider_paths = [1]\n", 2, "runtime.provider_paths", "string"},
        {"[runtime]\nlog_level = \"loud\"\n", 2, "runtime.log_level", "loud"},
        {"[[rules]]\narch = 6.0\n", 2, "rules[0].arch", "string"},
        {"[providers.generic_cpu]\noptions = 3\n", 2, "providers.generic_cpu.options", "table"},
    };
    for (auto &c : cases) {
        SCOPED_TRACE(c.toml);
        TempDir tmp;
        auto ce = runtime_error_for(tmp, c.toml);
        EXPECT_CONFIG_ERROR(ce, c.line, c.key, c.needle);
    }
}

TEST(ConfigErrors, MissingFileAndDirectory) {
    TempDir tmp;
    kpr::RuntimeOptions o = isolated_options();
    o.config_file = tmp.path() / "nope.toml";
    try {
        kpr::Runtime::create(o);
        FAIL();
    } catch (const kpr::Error &e) {
        EXPECT_TRUE(contains(e.what(), "nope.toml")) << e.what();
    }
    o.config_file = tmp.path();
    EXPECT_THROW(kpr::Runtime::create(o), kpr::Error);
}

// ---- names checked against the loaded providers ----------------------------------------------------

TEST(ConfigErrors, UnknownProviderWithSuggestion) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "# my machine\n[providers.generic_cpux]\nenabled = true\n");
    EXPECT_CONFIG_ERROR(ce, 2, "providers.generic_cpux", "did you mean 'generic_cpu'?");
    EXPECT_TRUE(contains(ce.message, "unknown provider")) << ce.message;
}

TEST(ConfigErrors, UnknownProviderInARule) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[[rules]]\narch = \"6.0\"\n[rules.providers.mock_gpux]\nenabled = true\n");
    EXPECT_CONFIG_ERROR(ce, 3, "rules[0].providers.mock_gpux", "did you mean 'mock_gpu'?");
}

TEST(ConfigErrors, UnknownProviderFarFromEverything) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[providers.zzzzzzzzzzzz]\nenabled = true\n");
    ASSERT_FALSE(ce.message.empty());
    EXPECT_FALSE(contains(ce.message, "did you mean")) << ce.message;
    EXPECT_TRUE(contains(ce.message, "generic_cpu")) << "lists the known providers: " << ce.message;
}

TEST(ConfigErrors, UndeclaredOptionWithSuggestion) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[providers.mock_opts.options]\nfast = true\nblocks_per_smm = 2\n");
    EXPECT_CONFIG_ERROR(ce, 3, "providers.mock_opts.options.blocks_per_smm", "did you mean 'blocks_per_sm'?");
}

TEST(ConfigErrors, OptionOfAProviderThatTakesNone) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[providers.mock_high]\noptions = { turbo = true }\n", {mock_dir("high")});
    EXPECT_CONFIG_ERROR(ce, 2, "providers.mock_high.options.turbo", "no option");
}

TEST(ConfigErrors, OptionValuesOfTheWrongTypeOrOutOfRange) {
    struct Case {
        const char *value, *key, *needle;
    } cases[] = {
        {"blocks_per_sm = 99", "blocks_per_sm", "out of range [1, 16]"},
        {"blocks_per_sm = 0", "blocks_per_sm", "out of range"},
        {"blocks_per_sm = 2.5", "blocks_per_sm", "integer"},
        {"blocks_per_sm = true", "blocks_per_sm", "integer"},
        {"fast = 1", "fast", "boolean"},
        {"fast = \"maybe\"", "fast", "boolean"},
        {"mode = \"diagonal\"", "mode", "not one of auto,wide,narrow"},
        {"mode = 3", "mode", "string"},
        {"ratio = true", "ratio", "number"},
    };
    for (auto &c : cases) {
        SCOPED_TRACE(c.value);
        TempDir tmp;
        auto ce = runtime_error_for(tmp, std::string("\n[providers.mock_opts.options]\n") + c.value + "\n");
        EXPECT_CONFIG_ERROR(ce, 3, std::string("providers.mock_opts.options.") + c.key, c.needle);
    }
}

TEST(ConfigErrors, OptionOutOfRangeInARule) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[[rules]]\narch = \"6.0\"\n[rules.providers.mock_gpu.options]\nblocks_per_sm = 17\n");
    EXPECT_CONFIG_ERROR(ce, 4, "rules[0].providers.mock_gpu.options.blocks_per_sm", "out of range");
}

TEST(ConfigErrors, SeveralErrorsAreCounted) {
    TempDir tmp;
    auto ce = runtime_error_for(tmp, "[providers.nope_one]\nenabled = true\n[providers.nope_two]\nenabled = true\n");
    EXPECT_TRUE(contains(ce.message, "and 1 more")) << ce.message;
}

TEST(Config, AGoodFileLoads) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", R"(# a full example
[runtime]
provider_paths = ["providers-here"]
log_level = "warn"

[providers.generic_cpu]
enabled = true
priority = 0
options = { threads = 2, isa = "auto" }

[providers.mock_opts]
force = false
require = false
options = { fast = true, blocks_per_sm = "8", mode = "wide", ratio = 1 }

[[rules]]
arch = "cpu"
device = "cpu"
device_name = "*"
[rules.providers.mock_opts]
priority = 2
)");
    kpr::RuntimeOptions o = isolated_options({mock_dir("options")});
    o.config_file = cfg;
    auto rt = kpr::Runtime::create(o);
    EXPECT_EQ(rt.config_files(), std::vector<std::string>{cfg.string()});
    auto opts = rt.options_for("mock_opts", "cpu");
    ASSERT_EQ(opts.size(), 4u);
    EXPECT_EQ(opts[0].second, "true");
    EXPECT_EQ(opts[1].second, "8");
    EXPECT_EQ(opts[2].second, "wide");
    EXPECT_EQ(std::stod(opts[3].second), 1.0);
    EXPECT_EQ(rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 256, 1), "cpu")->provider(), "mock_opts");
}

// ---- Config as a library ------------------------------------------------------------------------

TEST(Config, ParseKeepsPositionsForExplain) {
    kpr::Config c = kpr::Config::parse("\n[providers.a]\nenabled = false\npriority = 4\n", "/etc/kpr.toml");
    ASSERT_EQ(c.providers.count("a"), 1u);
    const auto &a = c.providers.at("a");
    ASSERT_TRUE(a.enabled.has_value());
    EXPECT_FALSE(a.enabled->value);
    EXPECT_EQ(a.enabled->where.rfind("/etc/kpr.toml:3:", 0), 0u) << a.enabled->where;
    EXPECT_EQ(a.priority->value, 4);
    EXPECT_EQ(a.priority->where.rfind("/etc/kpr.toml:4:", 0), 0u) << a.priority->where;
}

TEST(Config, EffectiveLayersFileThenRulesThenEnvironment) {
    kpr::Config c = kpr::Config::parse(R"(
[providers.p]
priority = 1
enabled = true
[[rules]]
arch = "6.0"
[rules.providers.p]
priority = 2
[[rules]]
device_name = "*p100*"
[rules.providers.p]
priority = 3
)",
                                       "cfg.toml");
    EXPECT_EQ(c.effective("p", "cpu", "cpu", "Some CPU").priority->value, 1);
    EXPECT_EQ(c.effective("p", "sim:v100", "7.0", "Tesla V100").priority->value, 1);
    EXPECT_EQ(c.effective("p", "sim:x", "6.0", "Other 6.0").priority->value, 2);
    EXPECT_EQ(c.effective("p", "sim:p100", "6.0", "Tesla P100-PCIE-16GB").priority->value, 3)
        << "device_name globs ignore case and later rules win";
    EXPECT_FALSE(c.effective("q", "cpu", "cpu", "x").priority.has_value());

    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_DISABLE", "p");
    c.apply_environment();
    auto s = c.effective("p", "sim:p100", "6.0", "Tesla P100-PCIE-16GB");
    ASSERT_TRUE(s.enabled.has_value());
    EXPECT_FALSE(s.enabled->value);
    EXPECT_EQ(s.enabled->where, "KPR_DISABLE");
    EXPECT_EQ(s.priority->value, 3) << "the environment only overrides what it sets";
}

TEST(Config, ClosestName) {
    std::vector<std::string> names = {"generic_cpu", "generic_cuda", "sm60_q8"};
    EXPECT_EQ(kpr::closest_name("generic_cpux", names), "generic_cpu");
    EXPECT_EQ(kpr::closest_name("sm60q8", names), "sm60_q8");
    EXPECT_EQ(kpr::closest_name("generic_cud", names), "generic_cuda");
    EXPECT_EQ(kpr::closest_name("iq_stage_tables", names), "");
    EXPECT_EQ(kpr::closest_name("x", {}), "");
}

TEST(Config, CanonicalOptionValues) {
    kpr_option_decl b{sizeof(kpr_option_decl), KPR_OPTION_BOOL, "b", "false", "", 0, 0, nullptr};
    kpr_option_decl i{sizeof(kpr_option_decl), KPR_OPTION_INT, "i", "4", "", 1, 16, nullptr};
    kpr_option_decl s{sizeof(kpr_option_decl), KPR_OPTION_STRING, "s", "a", "", 0, 0, "a,b"};
    kpr_option_decl f{sizeof(kpr_option_decl), KPR_OPTION_FLOAT, "f", "0.5", "", 0, 0, nullptr};
    EXPECT_EQ(kpr::canonical_option_value(b, {"true", "bool", ""}), "true");
    EXPECT_EQ(kpr::canonical_option_value(i, {"16", "int", ""}), "16");
    EXPECT_EQ(kpr::canonical_option_value(i, {"1", "int", ""}), "1");
    EXPECT_EQ(kpr::canonical_option_value(s, {"b", "string", ""}), "b");
    EXPECT_DOUBLE_EQ(std::stod(kpr::canonical_option_value(f, {"2", "int", ""})), 2.0);
    EXPECT_THROW(kpr::canonical_option_value(b, {"1", "int", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(i, {"17", "int", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(i, {"0", "int", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(i, {"4x", "string", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(i, {"99999999999999999999", "string", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(s, {"c", "string", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(s, {"true", "bool", ""}), kpr::Error);
    EXPECT_THROW(kpr::canonical_option_value(f, {"x", "string", ""}), kpr::Error);
}

} // namespace
