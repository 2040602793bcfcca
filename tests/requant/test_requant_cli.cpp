// `kpr requant` end to end: the command on the shared vectors and on a synthetic model, its output read
// back by `kpr plan --model` and by PyPI's gguf (check_gguf.py; skipped when `import gguf` fails).
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

#include <fstream>
#include <map>
#include <set>

namespace {

using namespace kpr_test;
using json = nlohmann::json;

const std::string kWeights = std::string(KPR_TEST_DATA_DIR) + "/weights.gguf";

std::string show(const CommandResult &r) {
    return "exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

bool have_python_gguf() {
    static const bool ok = std::system("python3 -c 'import gguf' >/dev/null 2>&1") == 0;
    return ok;
}

// A llama-shaped model with float and quantized projections, written with kpr's writer.
void write_synth(const fs::path &path) {
    kpr::gguf::Writer w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 1);
    w.add_array("tokenizer.ggml.tokens", kpr::gguf::Array{kpr::gguf::ValueType::String,
                                                           {kpr::gguf::Value::string("<s>"), kpr::gguf::Value::string("a")}});
    auto add = [&](const std::string &name, uint32_t type, std::vector<uint64_t> ne, uint64_t seed) {
        uint64_t rows = 1;
        for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
        std::vector<uint8_t> d(kpr::formats::row_bytes(type, ne[0]) * rows);
        kpr::formats::fill_random_blocks(type, seed, d.data(), ne[0] / kpr::formats::type_info(type)->block_size * rows);
        w.add_tensor(name, type, ne, std::move(d));
    };
    add("token_embd.weight", KPR_TYPE_Q4_K, {512, 64}, 1);
    add("blk.0.attn_norm.weight", KPR_TYPE_F32, {512}, 2);
    add("blk.0.attn_q.weight", KPR_TYPE_F16, {512, 512}, 3);
    add("blk.0.attn_k.weight", KPR_TYPE_Q4_K, {512, 128}, 4);
    add("blk.0.attn_v.weight", KPR_TYPE_Q6_K, {512, 128}, 5);
    add("blk.0.attn_output.weight", KPR_TYPE_BF16, {512, 512}, 6);
    add("blk.0.ffn_gate.weight", KPR_TYPE_IQ3_XXS, {512, 1024}, 7);
    add("blk.0.ffn_up.weight", KPR_TYPE_Q4_0, {512, 1024}, 8);
    add("blk.0.ffn_down.weight", KPR_TYPE_Q2_K, {1024, 512}, 9);
    add("blk.0.ffn_gate_exps.weight", KPR_TYPE_Q4_K, {512, 256, 4}, 10);
    add("output.weight", KPR_TYPE_Q6_K, {512, 256}, 11);
    w.write(path.string());
}

struct RequantRun {
    CommandResult r;
    json report;
};

RequantRun requant(const std::vector<std::string> &args) {
    RequantRun rr;
    std::vector<std::string> a = {"requant"};
    a.insert(a.end(), args.begin(), args.end());
    a.push_back("--json");
    rr.r = run_kpr(a);
    try {
        rr.report = json::parse(rr.r.out);
    } catch (...) {
    }
    return rr;
}

// `kpr plan --model` reads the file; every converted tensor is q8_0 in its eyes and has a provider.
void expect_plan_reads(const fs::path &model, const json &report) {
    CommandResult p = run_kpr({"--no-gpu", "plan", "--model", model.string(), "--json"});
    ASSERT_EQ(p.exit_code, 0) << show(p);
    json j = json::parse(p.out);
    std::map<std::string, json> by;
    for (auto &t : j["tensors"]) by[t["name"]] = t;
    for (auto &t : report["tensors"]) {
        if (!t["converted"].get<bool>()) continue;
        ASSERT_TRUE(by.count(t["name"])) << t["name"];
        EXPECT_EQ(by[t["name"]]["type"], "q8_0") << t["name"];
        EXPECT_FALSE(by[t["name"]]["provider"].is_null()) << t["name"];
    }
}

void expect_python_reads(const TempDir &tmp, const std::string &in, const fs::path &out, const json &report, size_t converted) {
    if (!have_python_gguf()) GTEST_SKIP() << "PyPI gguf is not importable by python3 (pip install gguf)";
    const fs::path rep = tmp.write("report.json", report.dump());
    CommandResult c = run_command({"/usr/bin/env", "python3", KPR_REQUANT_CHECK_SCRIPT, in, out.string(), rep.string()});
    ASSERT_EQ(c.exit_code, 0) << show(c);
    json j = json::parse(c.out);
    EXPECT_EQ(j["converted"].get<size_t>(), converted);
}

TEST(RequantCli, SharedVectors) {
    TempDir tmp;
    const fs::path out = tmp.path() / "weights-q8.gguf";
    RequantRun rr = requant({kWeights, out.string(), "--match", "^w\\.(q4_0|iq4_nl|iq3_xxs|iq3_s)", "--match", "^w\\.(q2_k|q4_k|q6_k|f16|q8_0)"});
    ASSERT_EQ(rr.r.exit_code, 0) << show(rr.r);
    ASSERT_EQ(rr.report["converted"].get<size_t>(), 24u) << rr.r.out;
    for (auto &t : rr.report["tensors"])
        if (t["converted"].get<bool>()) {
            EXPECT_GT(t["rel_error"].get<double>(), 0.0) << t["name"];
            EXPECT_LT(t["rel_error"].get<double>(), 0.0045) << t["name"];
        }
    expect_plan_reads(out, rr.report);
    expect_python_reads(tmp, kWeights, out, rr.report, 24);
}

TEST(RequantCli, SynthModelDefaultPatternTableAndRefusals) {
    TempDir tmp;
    const fs::path in = tmp.path() / "synth.gguf", out = tmp.path() / "synth-q8.gguf";
    write_synth(in);
    // The table: one line per matching tensor with its error, and the summary.
    CommandResult t = run_kpr({"requant", in.string(), out.string()});
    ASSERT_EQ(t.exit_code, 0) << show(t);
    EXPECT_NE(t.out.find("blk.0.attn_q.weight"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("8 tensor(s) converted to q8_0"), std::string::npos) << t.out;
    EXPECT_EQ(t.out.find("ffn_gate_exps"), std::string::npos) << t.out;
    // Exists: refused with exit 2 unless --force.
    RequantRun again = requant({in.string(), out.string()});
    EXPECT_EQ(again.r.exit_code, 2) << show(again.r);
    EXPECT_NE(again.r.err.find("--force"), std::string::npos) << show(again.r);
    RequantRun rr = requant({in.string(), out.string(), "--force"});
    ASSERT_EQ(rr.r.exit_code, 0) << show(rr.r);
    EXPECT_EQ(rr.report["converted"].get<size_t>(), 8u);
    // Its own input: refused, even with --force.
    RequantRun self = requant({in.string(), in.string(), "--force"});
    EXPECT_EQ(self.r.exit_code, 2) << show(self.r);
    expect_plan_reads(out, rr.report);
    expect_python_reads(tmp, in.string(), out, rr.report, 8);
}

// `kpr requant --match '.*' m.gguf.part m.gguf` (and an input named m.gguf.part.tmp): the input is kept byte
// for byte, converted or hard-linked, and nothing else is left beside it.
TEST(RequantCli, AnInputNamedLikeATemporaryIsKept) {
    for (const char *suffix : {".part", ".part.tmp"})
        // '.*' converts; a 1-D norm alone matches but converts nothing: the shard is hard-linked.
        for (const std::string m : {".*", "^blk\\.0\\.attn_norm\\.weight$"}) {
            SCOPED_TRACE(std::string(suffix) + " --match " + m);
            TempDir tmp;
            const fs::path out = tmp.path() / "m.gguf", in = tmp.path() / ("m.gguf" + std::string(suffix));
            write_synth(in);
            auto slurp = [](const fs::path &p) {
                std::ifstream f(p, std::ios::binary);
                return std::string(std::istreambuf_iterator<char>(f), {});
            };
            const std::string before = slurp(in);
            CommandResult r = run_kpr({"requant", "--match", m, in.string(), out.string()});
            ASSERT_EQ(r.exit_code, 0) << show(r);
            ASSERT_TRUE(fs::exists(in)) << show(r);
            EXPECT_TRUE(slurp(in) == before) << "the input changed";
            std::set<std::string> names;
            for (auto &e : fs::directory_iterator(tmp.path())) names.insert(e.path().filename().string());
            EXPECT_EQ(names, (std::set<std::string>{"m.gguf", in.filename().string()}));
            EXPECT_NO_THROW(kpr::gguf::File::open(out.string()));
        }
}

// A `kpr synth` model (llama names, a mixture-of-experts layer): the dense projections become q8_0, the
// experts stay as they were.
TEST(RequantCli, KprSynthModel) {
    TempDir tmp;
    const fs::path in = tmp.path() / "tiny.gguf", out = tmp.path() / "tiny-q8.gguf";
    CommandResult s = run_kpr({"synth", "--shape", "tiny", "--types", "q4_K,q6_K,q5_K", "-o", in.string()});
    ASSERT_EQ(s.exit_code, 0) << show(s);
    RequantRun rr = requant({in.string(), out.string()});
    ASSERT_EQ(rr.r.exit_code, 0) << show(rr.r);
    size_t converted = 0;
    std::set<std::string> seen;
    for (auto &t : rr.report["tensors"]) {
        const std::string name = t["name"];
        seen.insert(name);
        EXPECT_EQ(name.find("_exps"), std::string::npos) << name;
        if (t["converted"].get<bool>()) {
            ++converted;
            EXPECT_EQ(t["to"], "q8_0") << name;
            EXPECT_LT(t["rel_error"].get<double>(), 0.0045) << name;
        }
    }
    EXPECT_TRUE(seen.count("blk.0.attn_q.weight") && seen.count("blk.0.ffn_down.weight")) << rr.r.out;
    EXPECT_GE(converted, 8u) << rr.r.out;
    kpr::gguf::File f = kpr::gguf::File::open(out.string());
    for (auto &t : f.tensors())
        if (t.name.find("_exps") != std::string::npos) EXPECT_NE(t.type, (uint32_t)KPR_TYPE_Q8_0) << t.name;
    expect_plan_reads(out, rr.report);
    expect_python_reads(tmp, in.string(), out, rr.report, converted);
}

} // namespace
