// kpr bench / calibrate / synth / --report: the pieces in kpr::core, and `kpr` end to end on tiny shapes
// (a 2-core CI machine: a few MiB of rotation, three samples, the `tiny` model).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <kpr/bench.hpp>
#include <kpr/calibration.hpp>
#include <kpr/error.hpp>
#include <kpr/ggml_blocks.h>
#include <kpr/gguf.hpp>

#include <cstring>
#include <set>

#include "test_support.hpp"

#include <fstream>
#include <map>
#include <regex>

namespace {

using namespace kpr_test;
using json = nlohmann::json;

std::string show(const CommandResult &r) {
    return "exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

json parse_json(const CommandResult &r) {
    try {
        return json::parse(r.out);
    } catch (const std::exception &e) {
        ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n" << show(r);
        return json();
    }
}

std::string read_file(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// Small and quick: a few MiB of rotation, a small bandwidth read, three samples.
const std::vector<std::string> kQuick = {"--reps", "3", "--warmup", "1", "--rotate-mb", "2", "--bandwidth-mb", "16"};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string> &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

class Bench : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_TRUE(fs::exists(kpr_binary())) << kpr_binary() << " was not built"; }
    TempDir tmp;
    // No KPR_* from the caller; a private config home so nothing reads or writes the user's calibration.
    CommandResult run_kpr(const std::vector<std::string> &args, std::vector<std::pair<std::string, std::string>> env = {},
                          int timeout_s = 120) {
        env.emplace_back("XDG_STATE_HOME", (tmp.path() / "state").string());
        env.emplace_back("XDG_CONFIG_HOME", (tmp.path() / "confighome").string());
        return kpr_test::run_kpr(args, env, timeout_s);
    }
    fs::path tiny_model() {
        fs::path m = tmp.path() / "tiny.gguf";
        if (!fs::exists(m)) {
            auto r = run_kpr({"synth", "--shape", "tiny", "--types", "q8_0", "-o", m.string()});
            EXPECT_EQ(r.exit_code, 0) << show(r);
        }
        return m;
    }
};

// ---- pieces -----------------------------------------------------------------------------------------

TEST(Sha256, KnownVectors) {
    using kpr::calibration::sha256_hex;
    EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 bytes: padding spills a block
    EXPECT_EQ(sha256_hex(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    std::string million(1000000, 'a');
    EXPECT_EQ(sha256_hex(million.data(), million.size()),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    TempDir t;
    fs::path f = t.write("x.bin", "abc");
    EXPECT_EQ(kpr::calibration::sha256_file(f), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_THROW(kpr::calibration::sha256_file(t.path() / "missing"), kpr::Error);
}

TEST(Ncols, Lists) {
    using kpr::bench::parse_ncols;
    EXPECT_EQ(parse_ncols("1-8"), (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(parse_ncols("8,1"), (std::vector<uint32_t>{1, 8}));
    EXPECT_EQ(parse_ncols("1,2,4-6"), (std::vector<uint32_t>{1, 2, 4, 5, 6}));
    for (const char *bad : {"0", "9", "1-9", "3-2", "", "1,", "x", "1-2-3"}) EXPECT_THROW(parse_ncols(bad), kpr::Error) << bad;
}

TEST(Calibration, FileRoundTrip) {
    TempDir t;
    kpr::calibration::File f;
    f.devices["cpu"] = {"cpu", "Some \"CPU\"", "", "", "avx2 fma", 0};
    f.devices["cuda:0"] = {"cuda:0", "NVIDIA H200", "GPU-1234", "9.0", "", 13000};
    f.providers["generic_cpu"] = {"generic_cpu", "1.0", "/x/libkpr_generic_cpu.so", std::string(64, 'a')};
    kpr::calibration::Entry e;
    e.device = "cuda:0";
    e.op = kpr::gemv_grouped(KPR_TYPE_Q4_K, 768, 2048, 2, 128, 8, 8);
    e.winner = "generic_cpu";
    e.times = {{"generic_cpu", 12.5}, {"other", 20.25}};
    e.excluded = {{"bad", "self-test 'x' failed"}};
    f.put(e);
    e.times["generic_cpu"] = 11.0;
    f.put(e);  // same key: replaced
    kpr::calibration::Entry e2;
    e2.device = "cpu";
    e2.op = kpr::gemv(KPR_TYPE_Q8_0, 64, 256, 1);
    e2.winner = "generic_cpu";
    e2.times = {{"generic_cpu", 3.0}};
    f.put(e2);
    fs::path p = t.path() / "sub" / "cal.toml";
    f.save(p);
    auto g = kpr::calibration::File::load(p);
    ASSERT_EQ(g.entries.size(), 2u);
    EXPECT_EQ(g.devices.at("cpu").name, "Some \"CPU\"");
    EXPECT_EQ(g.devices.at("cuda:0").driver, 13000u);
    EXPECT_EQ(g.providers.at("generic_cpu").sha256, std::string(64, 'a'));
    EXPECT_EQ(kpr::calibration::key_of(g.entries[0].device, g.entries[0].op), kpr::calibration::key_of("cuda:0", e.op));
    EXPECT_DOUBLE_EQ(g.entries[0].times.at("generic_cpu"), 11.0);
    EXPECT_EQ(g.entries[0].excluded.at("bad"), "self-test 'x' failed");
    EXPECT_EQ(g.entries[0].op.x_slots, 8u);
    fs::path broken = t.write("broken.toml", "version = 1\n[[entries]]\ndevice = \"cpu\"\nkind = \"gemv\"\n");
    try {
        kpr::calibration::File::load(broken);
        ADD_FAILURE() << "a broken file loaded";
    } catch (const kpr::Error &err) {
        EXPECT_NE(std::string(err.what()).find("broken.toml"), std::string::npos) << err.what();
    }
}

TEST(Decode, Categories) {
    using kpr::bench::tensor_category;
    EXPECT_EQ(tensor_category("blk.0.attn_q.weight", 2), "attention");
    EXPECT_EQ(tensor_category("blk.3.attn_output.weight", 2), "attention");
    EXPECT_EQ(tensor_category("blk.0.ffn_down.weight", 2), "ffn");
    EXPECT_EQ(tensor_category("blk.0.ffn_up_exps.weight", 3), "experts");
    EXPECT_EQ(tensor_category("blk.0.ffn_gate_inp.weight", 2), "experts");
    EXPECT_EQ(tensor_category("output.weight", 2), "output");
    EXPECT_EQ(tensor_category("token_embd.weight", 2), "");
    EXPECT_EQ(tensor_category("blk.0.attn_norm.weight", 1), "");
}

// ---- kpr synth ---------------------------------------------------------------------------------------

TEST_F(Bench, SynthTinyHasFamilyNamesShapesAndMetadata) {
    fs::path m = tiny_model();
    auto f = kpr::gguf::File::open(m.string());
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_u64("llama.block_count"), 2u);
    EXPECT_EQ(f.get_u64("llama.expert_count"), 4u);
    EXPECT_EQ(f.get_u64("llama.expert_used_count"), 2u);
    EXPECT_EQ(f.tensor("blk.0.attn_q.weight").ne, (std::vector<uint64_t>{256, 256}));
    EXPECT_EQ(f.tensor("blk.0.attn_k.weight").ne, (std::vector<uint64_t>{256, 128}));
    EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{512, 256}));
    EXPECT_EQ(f.tensor("blk.1.ffn_gate_exps.weight").ne, (std::vector<uint64_t>{256, 256, 4}));
    EXPECT_EQ(f.tensor("blk.1.ffn_down_exps.weight").ne, (std::vector<uint64_t>{256, 256, 4}));
    EXPECT_EQ(f.tensor("output.weight").type, (uint32_t)KPR_TYPE_Q8_0);
    EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, (uint32_t)KPR_TYPE_F32);
    // Random, not zero: the q8_0 scales of a weight are finite and not all equal.
    const auto &t = f.tensor("blk.0.attn_q.weight");
    EXPECT_NE(std::memcmp(t.data, t.data + 34, 34), 0);
}

TEST_F(Bench, SynthTypesByRoleAndFewerLayers) {
    // Described, not written: the qwen shape's 2048 x 151936 head alone is 300 MiB at q8_0.
    auto r = run_kpr({"synth", "--shape", "qwen-moe-30b", "--layers", "1", "--types", "q4_K,q6_K,q8_0", "--list"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json j = parse_json(r);
    EXPECT_EQ(j["architecture"], "qwen3moe");
    EXPECT_EQ(j["metadata"]["general.architecture"], "qwen3moe");
    EXPECT_EQ(j["metadata"]["qwen3moe.expert_count"], "128");
    EXPECT_EQ(j["metadata"]["qwen3moe.expert_used_count"], "8");
    EXPECT_EQ(j["metadata"]["qwen3moe.block_count"], "1");
    EXPECT_EQ(j["metadata"]["qwen3moe.expert_feed_forward_length"], "768");
    std::map<std::string, json> t;
    for (auto &x : j["tensors"]) t[x["name"]] = x;
    EXPECT_EQ(t["blk.0.attn_q.weight"]["ne"], json({2048, 4096}));
    EXPECT_EQ(t["blk.0.attn_k.weight"]["ne"], json({2048, 512}));
    EXPECT_EQ(t["blk.0.ffn_down_exps.weight"]["ne"], json({768, 2048, 128}));
    EXPECT_EQ(t["blk.0.ffn_up_exps.weight"]["type"], "q4_K");
    EXPECT_EQ(t["blk.0.ffn_down_exps.weight"]["type"], "q6_K");
    EXPECT_EQ(t["blk.0.ffn_gate_inp.weight"]["type"], "f32");
    EXPECT_EQ(t["output.weight"]["ne"], json({2048, 151936}));
    EXPECT_EQ(t["output.weight"]["type"], "q8_0");
    EXPECT_TRUE(t.count("blk.0.attn_q_norm.weight"));
    EXPECT_FALSE(t.count("blk.1.attn_q.weight"));
    // llama-8b as the family has it: 32 layers, GQA 8 kv heads, FFN 14336, vocab 128256 (~8 GiB at q8_0).
    r = run_kpr({"synth", "--shape", "llama-8b", "--list"});
    j = parse_json(r);
    t.clear();
    for (auto &x : j["tensors"]) t[x["name"]] = x;
    EXPECT_EQ(j["tensors"].size(), 1u + 32 * 9 + 2);
    EXPECT_EQ(t["blk.31.attn_v.weight"]["ne"], json({4096, 1024}));
    EXPECT_EQ(t["blk.31.ffn_down.weight"]["ne"], json({14336, 4096}));
    EXPECT_EQ(t["output.weight"]["ne"], json({4096, 128256}));
    EXPECT_NEAR(j["bytes"].get<double>(), 8.53e9, 0.01e9);
}

TEST_F(Bench, SynthRejectsUnknownShapeAndType) {
    auto r = run_kpr({"synth", "--shape", "llama-9000", "-o", (tmp.path() / "x.gguf").string()});
    EXPECT_EQ(r.exit_code, 2) << show(r);
    EXPECT_NE(r.err.find("tiny"), std::string::npos) << show(r);
    r = run_kpr({"synth", "--shape", "tiny", "--types", "q9_9", "-o", (tmp.path() / "x.gguf").string()});
    EXPECT_EQ(r.exit_code, 2) << show(r);
    EXPECT_FALSE(fs::exists(tmp.path() / "x.gguf"));
}

// ---- kpr bench ---------------------------------------------------------------------------------------

TEST_F(Bench, OneOpSweepJson) {
    auto r = run_kpr(cat({"bench", "--type", "q8_0,f16", "--rows", "64", "--cols", "256", "--ncols", "1-2", "--json"}, kQuick));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json j = parse_json(r);
    ASSERT_TRUE(j.is_array());
    ASSERT_GE(j.size(), 4u) << j.dump(1);  // generic_cpu at least, 2 types x 2 ncols
    std::set<std::pair<std::string, int>> seen;
    for (auto &o : j) {
        for (const char *k : {"provider", "device", "type", "rows", "cols", "ncols", "median_us", "gbps", "bandwidth_fraction"})
            EXPECT_TRUE(o.contains(k)) << k << " missing in " << o.dump();
        EXPECT_EQ(o["device"], "cpu");
        EXPECT_EQ(o["rows"], 64);
        EXPECT_EQ(o["cols"], 256);
        EXPECT_GT(o["median_us"].get<double>(), 0);
        EXPECT_GT(o["gbps"].get<double>(), 0);
        EXPECT_GT(o["bandwidth_fraction"].get<double>(), 0);
        EXPECT_LE(o["p10_us"].get<double>(), o["p90_us"].get<double>());
        EXPECT_EQ(o["samples"], 3);
        // GB/s is the weight bytes over the median.
        double bytes = o["type"] == "q8_0" ? 64 * 256 / 32 * 34 : 64 * 256 * 2;
        EXPECT_NEAR(o["gbps"].get<double>(), bytes / (o["median_us"].get<double>() * 1e3), 1e-6 * bytes);
        seen.insert({o["type"].get<std::string>() + "/" + o["provider"].get<std::string>(), o["ncols"].get<int>()});
    }
    EXPECT_TRUE(seen.count({"q8_0/generic_cpu", 1}) && seen.count({"q8_0/generic_cpu", 2}) &&
                seen.count({"f16/generic_cpu", 1}) && seen.count({"f16/generic_cpu", 2}));
}

TEST_F(Bench, EveryAcceptingProviderSideBySide) {
    // mock_high accepts everything (and runs only f32): both it and generic_cpu are timed in one run.
    auto r = run_kpr(cat({"--provider-path", mock_dir("high").string(), "bench", "--type", "f32", "--rows", "32", "--cols",
                          "64", "--json", "--no-bandwidth"},
                         kQuick));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json j = parse_json(r);
    std::set<std::string> providers;
    int winners = 0;
    for (auto &o : j) {
        providers.insert(o["provider"]);
        winners += o["winner"].get<bool>();
        EXPECT_EQ(o["bandwidth_fraction"], 0.0);
    }
    EXPECT_TRUE(providers.count("generic_cpu") && providers.count("mock_high")) << j.dump(1);
    EXPECT_EQ(winners, 1);
}

TEST_F(Bench, PlainLinesWithoutATerminalAndATable) {
    auto r = run_kpr(cat({"bench", "--type", "q8_0", "--rows", "64", "--cols", "256", "--ncols", "1,4"}, kQuick));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_NE(r.err.find("bench: [1/2] gemv q8_0 64x256 ncols 1"), std::string::npos) << show(r);
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << "no progress bar when stderr is not a terminal";
    EXPECT_NE(r.out.find("read bandwidth"), std::string::npos) << show(r);
    EXPECT_NE(r.out.find("generic_cpu"), std::string::npos) << show(r);
}

TEST_F(Bench, GroupedOp) {
    auto r = run_kpr(cat({"bench", "--op", "gemv_grouped", "--type", "q8_0", "--rows", "64", "--cols", "256", "--experts",
                          "8", "--experts-used", "2", "--ncols", "2", "--json"},
                         kQuick));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json j = parse_json(r);
    ASSERT_FALSE(j.empty());
    EXPECT_EQ(j[0]["op"], "gemv_grouped");
    EXPECT_EQ(j[0]["experts"], 8);
    // Weight bytes are the distinct experts the routing touched (2 columns x 2 distinct: 2..4 experts).
    uint64_t per = 64 * 256 / 32 * 34, wb = j[0]["weight_bytes"];
    EXPECT_TRUE(wb >= 2 * per && wb <= 4 * per) << wb;
}

TEST_F(Bench, UsageErrors) {
    EXPECT_EQ(run_kpr({"bench", "--type", "q8_0", "--rows", "64", "--cols", "256", "--ncols", "0-9"}).exit_code, 2);
    EXPECT_EQ(run_kpr({"bench", "--type", "nope", "--rows", "64", "--cols", "256"}).exit_code, 2);
    EXPECT_EQ(run_kpr({"bench", "--rows", "64"}).exit_code, 2);
    auto r = run_kpr({"bench", "--type", "q8_0", "--rows", "64", "--cols", "100", "--no-bandwidth"});
    EXPECT_EQ(r.exit_code, 1) << show(r);
    EXPECT_NE(r.err.find("multiple of"), std::string::npos) << show(r);
}

TEST_F(Bench, DecodeWindowOfTinyModel) {
    fs::path m = tiny_model();
    auto r = run_kpr({"bench", "--model", m.string(), "--ncols", "1,2", "--steps", "3", "--bandwidth-mb", "16", "--json"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json j = parse_json(r);
    ASSERT_EQ(j.size(), 2u);
    for (auto &w : j) {
        EXPECT_GT(w["step_us"].get<double>(), 0);
        EXPECT_NEAR(w["tokens_per_s"].get<double>(), w["ncols"].get<double>() * 1e6 / w["step_us"].get<double>(), 1e-6);
        for (const char *c : {"attention", "ffn", "experts", "output"}) EXPECT_TRUE(w["categories"].contains(c)) << c;
        // 2 layers x 4 attention + layer 0: 3 FFN + layer 1: router and 3 expert tensors + output; no embeddings.
        EXPECT_EQ(w["tensors"].size(), 2u * 4 + 3 + 4 + 1);
        bool grouped = false;
        for (auto &t : w["tensors"]) {
            EXPECT_NE(t["name"], "token_embd.weight");
            EXPECT_EQ(t["provider"], "generic_cpu");
            if (t["name"] == "blk.1.ffn_down_exps.weight") {
                grouped = true;
                EXPECT_NE(t["op"].get<std::string>().find("gemv_grouped"), std::string::npos);
                EXPECT_EQ(t["experts_used"], 2);
            }
        }
        EXPECT_TRUE(grouped);
    }
}

// ---- kpr calibrate -----------------------------------------------------------------------------------

// A folder with a copy of the build's generic_cpu (so a test can change its bytes) and a config beside
// which the calibration file lands.
struct CalibrationSetup {
    fs::path providers, config, calibration;
};

CalibrationSetup calibration_setup(const TempDir &tmp) {
    CalibrationSetup s;
    s.providers = tmp.dir("providers");
    fs::copy_file(provider_build_dir() / "libkpr_generic_cpu.so", s.providers / "libkpr_generic_cpu.so");
    s.config = tmp.write("conf/kpr.toml", "[runtime]\nlog_level = \"warn\"\n");
    s.calibration = tmp.path() / "conf" / "calibration.toml";
    return s;
}

TEST_F(Bench, CalibrateThenExplainThenStaleAfterTheProviderChanges) {
    auto s = calibration_setup(tmp);
    fs::path shapes = tmp.write("shapes.txt", "# type rows cols\nq8_0 64 256\nf32 32 64\n");
    std::vector<std::string> g = {"--config", s.config.string(), "--provider-path", s.providers.string(),
                                  "--provider-path", mock_dir("high").string()};
    auto r = run_kpr(cat(g, {"calibrate", "--shapes", shapes.string(), "--reps", "3", "--rotate-mb", "1"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    ASSERT_TRUE(fs::exists(s.calibration)) << show(r);
    std::string text = read_file(s.calibration);
    EXPECT_NE(text.find("[devices.cpu]"), std::string::npos) << text;
    EXPECT_NE(text.find("[providers.generic_cpu]"), std::string::npos) << text;
    EXPECT_NE(text.find(kpr::calibration::sha256_file(s.providers / "libkpr_generic_cpu.so")), std::string::npos) << text;
    auto cal = kpr::calibration::File::load(s.calibration);
    ASSERT_EQ(cal.entries.size(), 2u);
    // mock_high's f32 runs really run; both providers were timed for f32.
    for (auto &e : cal.entries)
        if (e.op.weight_type == KPR_TYPE_F32) EXPECT_EQ(e.times.size(), 2u) << text;

    // plan --explain shows the measured time per answer, and the calibrated winner.
    r = run_kpr(cat(g, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "256", "--explain"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_NE(r.out.find("[calibrated "), std::string::npos) << show(r);
    r = run_kpr(cat(g, {"plan", "--type", "f32", "--rows", "32", "--cols", "64", "--json"}));
    json pj = parse_json(r);
    std::string winner;
    for (auto &e : cal.entries)
        if (e.op.weight_type == KPR_TYPE_F32) winner = e.winner;
    EXPECT_EQ(pj["provider"], winner) << show(r);
    int with_time = 0;
    for (auto &a : pj["answers"]) with_time += a.contains("calibrated_us");
    EXPECT_EQ(with_time, 2) << show(r);
    EXPECT_EQ(r.err.find("stale"), std::string::npos) << show(r);

    // A rebuild with another hash: one byte more. The entries are stale, ignored and reported.
    { std::ofstream(s.providers / "libkpr_generic_cpu.so", std::ios::app | std::ios::binary) << '\n'; }
    r = run_kpr(cat(g, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "256", "--explain"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_EQ(r.out.find("[calibrated "), std::string::npos) << show(r);
    EXPECT_NE(r.err.find("stale"), std::string::npos) << show(r);
    EXPECT_NE(r.err.find("generic_cpu"), std::string::npos) << show(r);
    r = run_kpr(cat(g, {"providers"}));
    EXPECT_NE(r.out.find("stale"), std::string::npos) << show(r);
}

TEST_F(Bench, StaleWhenTheDeviceChanged) {
    auto s = calibration_setup(tmp);
    fs::path shapes = tmp.write("shapes.txt", "q8_0 64 256\n");
    std::vector<std::string> g = {"--config", s.config.string(), "--provider-path", s.providers.string()};
    auto r = run_kpr(cat(g, {"calibrate", "--shapes", shapes.string(), "--reps", "2", "--rotate-mb", "1"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    auto cal = kpr::calibration::File::load(s.calibration);
    cal.devices["cpu"].name = "Some Other CPU";
    cal.save(s.calibration);
    r = run_kpr(cat(g, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "256", "--explain"}));
    EXPECT_NE(r.err.find("device cpu changed"), std::string::npos) << show(r);
    EXPECT_EQ(r.out.find("[calibrated "), std::string::npos) << show(r);
}

TEST_F(Bench, AProviderFailingItsSelftestNeverWins) {
    // mock_selftest accepts f32 and runs it, but one of its self-test cases computes wrongly.
    auto s = calibration_setup(tmp);
    fs::path shapes = tmp.write("shapes.txt", "f32 32 64\n");
    fs::path out = tmp.path() / "cal.toml";
    std::vector<std::string> g = {"--config", s.config.string(), "--provider-path", s.providers.string(),
                                  "--provider-path", mock_dir("selftest").string()};
    auto r = run_kpr(cat(g, {"calibrate", "--shapes", shapes.string(), "--reps", "2", "--rotate-mb", "1", "--output",
                             out.string(), "--provider", "generic_cpu,mock_selftest"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    auto cal = kpr::calibration::File::load(out);
    ASSERT_EQ(cal.entries.size(), 1u);
    EXPECT_EQ(cal.entries[0].winner, "generic_cpu");
    EXPECT_EQ(cal.entries[0].times.count("mock_selftest"), 0u);
    ASSERT_EQ(cal.entries[0].excluded.count("mock_selftest"), 1u) << read_file(out);
    EXPECT_NE(cal.entries[0].excluded["mock_selftest"].find("self-test"), std::string::npos);
    EXPECT_FALSE(fs::exists(s.calibration)) << "--output is where it goes";
}

// Names in a folder; for checking that no temporary is left beside what was written.
std::set<std::string> names_in(const fs::path &dir) {
    std::set<std::string> s;
    for (auto &e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
    return s;
}

// An existing calibration file that cannot be read is never replaced silently: exit 1 naming the file,
// the file byte for byte as it was. --replace-invalid starts a new one in its place.
TEST_F(Bench, CalibrateRefusesAnUnreadableFileUnlessReplaceInvalid) {
    auto s = calibration_setup(tmp);
    fs::path shapes = tmp.write("shapes.txt", "q8_0 64 256\n");
    std::vector<std::string> g = {"--config", s.config.string(), "--provider-path", s.providers.string()};
    fs::path dir = tmp.dir("cal");
    const fs::path out = dir / "calibration.toml";
    const std::vector<std::string> bad = {
        "version = 1\n[[entries]\n",                                   // TOML syntax error
        "version = 2\n",                                                // a newer kpr's file
        "version = 1\n[[entries]]\ndevice = \"cpu\"\nkind = \"gemv\"\ntype = \"nonsense\"\nrows = 1\ncols = 32\nncols = 1\n",
    };
    const std::vector<std::string> calibrate = {"calibrate", "--shapes", shapes.string(), "--reps", "2", "--rotate-mb", "1",
                                                "--no-selftest", "--output", out.string()};
    for (const std::string &text : bad) {
        SCOPED_TRACE(text);
        std::ofstream(out, std::ios::binary | std::ios::trunc) << text;
        auto r = run_kpr(cat(g, calibrate));
        EXPECT_EQ(r.exit_code, 1) << show(r);
        EXPECT_NE(r.err.find(out.string()), std::string::npos) << show(r);
        EXPECT_NE(r.err.find("--replace-invalid"), std::string::npos) << show(r);
        EXPECT_EQ(read_file(out), text);
        EXPECT_EQ(names_in(dir), (std::set<std::string>{"calibration.toml"}));
    }
    auto r = run_kpr(cat(cat(g, calibrate), {"--replace-invalid"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_NE(r.err.find("--replace-invalid"), std::string::npos) << show(r);  // the warning says what was lost
    auto cal = kpr::calibration::File::load(out);
    EXPECT_EQ(cal.entries.size(), 1u) << read_file(out);
    EXPECT_EQ(names_in(dir), (std::set<std::string>{"calibration.toml"}));
    // A valid file is merged into, flag or not.
    fs::path shapes2 = tmp.write("shapes2.txt", "f32 32 64\n");
    r = run_kpr(cat(g, {"calibrate", "--shapes", shapes2.string(), "--reps", "2", "--rotate-mb", "1", "--no-selftest",
                        "--output", out.string()}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_EQ(kpr::calibration::File::load(out).entries.size(), 2u) << read_file(out);
}

TEST_F(Bench, CalibrateModelKeysAndMissingInput) {
    fs::path m = tiny_model();
    fs::path out = tmp.path() / "c.toml";
    auto r = run_kpr({"calibrate", "--model", m.string(), "--reps", "2", "--rotate-mb", "1", "--output", out.string(),
                      "--no-selftest", "--json"},
                     {}, 300);
    ASSERT_EQ(r.exit_code, 0) << show(r);
    auto cal = kpr::calibration::File::load(out);
    // tiny's distinct keys: attn_q/attn_output 256x256 (one), attn_k/v 128x256 (one), ffn gate/up 512x256, ffn_down
    // 256x512, output 1024x256, router (f32 4x256), experts gate/up (x broadcast) and down (x per slot).
    EXPECT_EQ(cal.entries.size(), 8u) << read_file(out);
    EXPECT_EQ(run_kpr({"calibrate", "--reps", "1"}).exit_code, 2);
}

// ---- --report ----------------------------------------------------------------------------------------

std::string find_chromium() {
    for (const char *c : {"chromium", "chromium-browser", "google-chrome", "chrome"}) {
        auto r = run_command({"/bin/sh", "-c", std::string("command -v ") + c});
        if (r.exit_code == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
    }
    return "";
}

TEST_F(Bench, ReportIsSelfContained) {
    fs::path m = tiny_model();
    fs::path dir = tmp.path() / "report";
    auto r = run_kpr({"bench", "--model", m.string(), "--ncols", "1,2", "--steps", "2", "--bandwidth-mb", "16", "--report",
                      dir.string()});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    std::string html = read_file(dir / "report.html");
    json j = json::parse(read_file(dir / "report.json"));
    EXPECT_EQ(j["decode"].size(), 2u);
    EXPECT_TRUE(j["conditions"].contains("device_name"));
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg")) << "no network resources";
    EXPECT_EQ(html.find("https://"), std::string::npos);
    EXPECT_EQ(html.find("<script"), std::string::npos);
}

// The report's files are written through temporaries renamed into place: both appear, complete, with
// nothing else in the folder, and a second run replaces them (a file already there is not appended to).
TEST_F(Bench, ReportLeavesNoTemporary) {
    fs::path dir = tmp.path() / "report";
    fs::create_directories(dir);
    { std::ofstream(dir / "report.json") << "old, not JSON"; }
    for (int run = 0; run < 2; ++run) {
        auto r = run_kpr(cat({"bench", "--type", "q8_0", "--rows", "64", "--cols", "256", "--ncols", "1", "--report",
                              dir.string()},
                             kQuick));
        ASSERT_EQ(r.exit_code, 0) << show(r);
        EXPECT_EQ(names_in(dir), (std::set<std::string>{"report.html", "report.json"}));
        EXPECT_NO_THROW(json::parse(read_file(dir / "report.json")));
        const std::string html = read_file(dir / "report.html");
        EXPECT_NE(html.find("</html>"), std::string::npos) << "truncated page";
    }
}

// A write that fails part way (a file-size limit stands in for a full disk: SIGXFSZ ignored, so write(2)
// says EFBIG) is an error naming the report file, exit 1, and leaves neither a truncated report nor a
// temporary behind.
TEST_F(Bench, ReportWriteFailureIsAnErrorAndLeavesNothing) {
    fs::path dir = tmp.dir("report");
    std::vector<std::string> argv = {"/bin/sh", "-c", "trap '' XFSZ; ulimit -f 1 || exit 99; exec \"$0\" \"$@\"",
                                     kpr_binary().string(), "bench", "--type", "q8_0", "--rows", "64", "--cols", "256",
                                     "--ncols", "1", "--report", dir.string()};
    argv.insert(argv.end(), kQuick.begin(), kQuick.end());
    auto r = kpr_test::run_command(argv, {{"XDG_STATE_HOME", (tmp.path() / "state").string()},
                                          {"XDG_CONFIG_HOME", (tmp.path() / "confighome").string()}});
    ASSERT_NE(r.exit_code, 99) << "ulimit -f is not available: " << show(r);
    EXPECT_EQ(r.exit_code, 1) << show(r);
    EXPECT_NE(r.err.find((dir / "report.json").string()), std::string::npos) << show(r);
    EXPECT_EQ(names_in(dir), std::set<std::string>{}) << show(r);
}

TEST_F(Bench, ReportRendersInHeadlessChromium) {
    std::string chromium = find_chromium();
    if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian: apt-get install chromium)";
    fs::path m = tiny_model();
    fs::path dir = tmp.path() / "report";
    auto r = run_kpr(cat({"bench", "--type", "q8_0", "--rows", "64", "--cols", "256", "--ncols", "1-3", "--report",
                          dir.string()},
                         kQuick));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    r = run_kpr({"bench", "--model", m.string(), "--ncols", "1,2", "--steps", "2", "--no-bandwidth", "--report",
                 (tmp.path() / "report2").string()});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    for (fs::path page : {dir / "report.html", tmp.path() / "report2" / "report.html"}) {
        fs::path profile = tmp.dir("chromium-profile");
        auto c = run_command({chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                              "--user-data-dir=" + profile.string(), "--dump-dom", "file://" + page.string()},
                             {{"HOME", tmp.path().string()}}, 120);
        ASSERT_EQ(c.exit_code, 0) << c.err;
        // The DOM Chromium built holds the plots, with their drawn elements.
        std::regex svg("<svg[^>]*class=\"plot\"");
        auto n = std::distance(std::sregex_iterator(c.out.begin(), c.out.end(), svg), std::sregex_iterator());
        EXPECT_GE(n, page.parent_path() == dir ? 1 : 3) << c.out.substr(0, 2000);
        EXPECT_NE(c.out.find("<circle"), std::string::npos);
        EXPECT_NE(c.out.find("kpr bench report"), std::string::npos);
    }
}

} // namespace
