// kpr requant (kpr/requant.hpp): conversion, what is kept, split models, refusals, clean failure.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/requant.hpp>

#include <gtest/gtest.h>

#include "test_support.hpp"

#include <csignal>
#include <cstring>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace kpr;
using kpr_test::TempDir;
namespace fs = std::filesystem;

const std::string kWeights = std::string(KPR_TEST_DATA_DIR) + "/weights.gguf";

std::string slurp(const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// Every file in `dir`, by name.
std::set<std::string> listing(const fs::path &dir) {
    std::set<std::string> s;
    for (auto &e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
    return s;
}

// max|w' - w| / max|w| recomputed from the two files' tensors.
double rel_error(const gguf::Tensor &a, const gguf::Tensor &b) {
    const uint64_t cols = a.ne[0], rows = a.elements() / cols;
    std::vector<float> wa(cols), wb(cols);
    double amax = 0, emax = 0;
    for (uint64_t r = 0; r < rows; ++r) {
        formats::dequantize_row(a.type, a.data + r * formats::row_bytes(a.type, cols), wa.data(), cols);
        formats::dequantize_row(b.type, b.data + r * formats::row_bytes(b.type, cols), wb.data(), cols);
        for (uint64_t i = 0; i < cols; ++i) {
            amax = std::max(amax, (double)std::fabs(wa[i]));
            emax = std::max(emax, std::fabs((double)wb[i] - (double)wa[i]));
        }
    }
    return amax > 0 ? emax / amax : 0;
}

std::vector<uint8_t> random_tensor(uint32_t type, const std::vector<uint64_t> &ne, uint64_t seed) {
    uint64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const formats::TypeInfo *ti = formats::type_info(type);
    std::vector<uint8_t> d(formats::row_bytes(type, ne[0]) * rows);
    formats::fill_random_blocks(type, seed, d.data(), ne[0] / ti->block_size * rows);
    return d;
}

// Every metadata type, nested and empty arrays, a non-default alignment.
void add_metadata(gguf::Writer &w, uint32_t alignment = 64) {
    w.add_string("general.architecture", "llama");
    w.add_u32("general.alignment", alignment);
    w.add_u8("t.u8", 200);
    w.add_i8("t.i8", -100);
    w.add_u16("t.u16", 60000);
    w.add_i16("t.i16", -30000);
    w.add_u32("t.u32", 3000000000u);
    w.add_i32("t.i32", -2000000000);
    w.add_f32("t.f32", 1.5f);
    w.add_bool("t.bool", true);
    w.add_u64("t.u64", (1ull << 63) + 5);
    w.add_i64("t.i64", -(1ll << 62));
    w.add_f64("t.f64", 0.1);
    w.add_array("t.arr_str", gguf::Array{gguf::ValueType::String, {gguf::Value::string("a"), gguf::Value::string("")}});
    w.add_array("t.arr_empty", gguf::Array{gguf::ValueType::F32, {}});
    gguf::Array inner{gguf::ValueType::I16, {gguf::Value::i16(1), gguf::Value::i16(-2)}};
    w.add_array("t.arr_nested", gguf::Array{gguf::ValueType::Array, {gguf::Value::array(inner), gguf::Value::array(inner)}});
}

struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
};

// A small llama-like model: what the default pattern must convert and what it must leave.
const std::vector<T> kModel = {
    {"token_embd.weight", KPR_TYPE_Q4_K, {256, 64}},
    {"blk.0.attn_norm.weight", KPR_TYPE_F32, {256}},
    {"blk.0.attn_q.weight", KPR_TYPE_F16, {256, 64}},
    {"blk.0.attn_k.weight", KPR_TYPE_BF16, {256, 32}},
    {"blk.0.attn_v.weight", KPR_TYPE_Q4_K, {256, 32}},
    {"blk.0.attn_output.weight", KPR_TYPE_F32, {256, 64}},
    {"blk.0.ffn_gate.weight", KPR_TYPE_IQ3_S, {256, 96}},
    {"blk.0.ffn_up.weight", KPR_TYPE_Q6_K, {256, 96}},
    {"blk.0.ffn_down.weight", KPR_TYPE_Q4_0, {96, 256}},
    {"blk.1.attn_q.weight", KPR_TYPE_Q8_0, {256, 64}},          // already q8_0
    {"blk.1.ffn_down.weight", KPR_TYPE_F32, {100, 40}},          // cols not a multiple of 32
    {"blk.1.ffn_gate_inp.weight", KPR_TYPE_F32, {256, 8}},       // router
    {"blk.1.ffn_gate_exps.weight", KPR_TYPE_Q4_K, {256, 32, 8}}, // experts
    {"blk.1.ffn_up_shexp.weight", KPR_TYPE_Q4_K, {256, 32}},     // shared expert
    {"output_norm.weight", KPR_TYPE_F32, {256}},
    {"output.weight", KPR_TYPE_Q6_K, {256, 128}},
};
const std::set<std::string> kDefaultConverted = {
    "blk.0.attn_q.weight",  "blk.0.attn_k.weight", "blk.0.attn_v.weight",   "blk.0.attn_output.weight",
    "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output.weight"};

void write_model(const fs::path &path, const std::vector<T> &tensors, uint32_t alignment = 64,
                 std::vector<std::pair<std::string, uint32_t>> extra_u32 = {}) {
    gguf::Writer w;
    add_metadata(w, alignment);
    for (auto &[k, v] : extra_u32) w.add_u32(k, v);
    uint64_t seed = 1;
    for (auto &t : tensors) w.add_tensor(t.name, t.type, t.ne, random_tensor(t.type, t.ne, seed++));
    w.write(path.string());
}

// Input and output agree on everything but the converted tensors, which are q8_0 of the input's values.
void expect_faithful(const gguf::File &in, const gguf::File &out, const requant::Report &rep) {
    std::map<std::string, const requant::TensorReport *> byname;
    for (auto &t : rep.tensors) byname[t.name] = &t;
    ASSERT_EQ(in.metadata().size(), out.metadata().size());
    for (size_t i = 0; i < in.metadata().size(); ++i) {
        EXPECT_EQ(in.metadata()[i].key, out.metadata()[i].key) << i;
        EXPECT_TRUE(in.metadata()[i].value == out.metadata()[i].value) << in.metadata()[i].key;
    }
    EXPECT_EQ(in.alignment(), out.alignment());
    ASSERT_EQ(in.tensors().size(), out.tensors().size());
    for (size_t i = 0; i < in.tensors().size(); ++i) {
        const gguf::Tensor &a = in.tensors()[i], &b = out.tensors()[i];
        EXPECT_EQ(a.name, b.name);
        EXPECT_EQ(a.ne, b.ne) << a.name;
        EXPECT_EQ(b.offset % out.alignment(), 0u) << a.name;
        auto it = byname.find(a.name);
        if (it != byname.end() && it->second->action == requant::TensorReport::Action::Converted) {
            EXPECT_EQ(b.type, (uint32_t)KPR_TYPE_Q8_0) << a.name;
            const double rel = rel_error(a, b);
            EXPECT_NEAR(rel, it->second->rel_error, 1e-12) << a.name;
            // Q8_0's bound: half a step of amax/127 per block plus the f16 rounding of the scale.
            EXPECT_LE(rel, 0.5 / 127 + 128.0 / 127 * std::ldexp(1.0, -11)) << a.name;
            // Bit for bit what ggml's reference quantizer makes of the dequantized input.
            const uint64_t cols = a.ne[0], rows = a.elements() / cols;
            std::vector<float> row(cols);
            std::vector<uint8_t> q(formats::row_bytes(KPR_TYPE_Q8_0, cols));
            for (uint64_t r = 0; r < rows; ++r) {
                formats::dequantize_row(a.type, a.data + r * formats::row_bytes(a.type, cols), row.data(), cols);
                formats::quantize_row_q8_0(row.data(), q.data(), cols);
                ASSERT_EQ(0, std::memcmp(q.data(), b.data + r * q.size(), q.size())) << a.name << " row " << r;
            }
        } else {
            EXPECT_EQ(a.type, b.type) << a.name;
            ASSERT_EQ(a.bytes, b.bytes) << a.name;
            EXPECT_EQ(0, std::memcmp(a.data, b.data, a.bytes)) << a.name;
        }
    }
}

// ---- the shared vectors --------------------------------------------------------------------------------

TEST(Requant, SharedVectorsAllTensors) {
    TempDir tmp;
    const fs::path out = tmp.path() / "weights-q8.gguf";
    requant::Options o;
    o.match = {"^w\\."};
    requant::Report rep = requant::run(kWeights, out.string(), o);
    gguf::File in = gguf::File::open(kWeights), res = gguf::File::open(out.string());
    expect_faithful(in, res, rep);
    ASSERT_EQ(rep.tensors.size(), 27u);
    EXPECT_EQ(rep.converted(), 24u);  // the three q8_0 tensors are kept
    for (auto &t : rep.tensors) {
        if (t.from_type == KPR_TYPE_Q8_0) {
            EXPECT_EQ(t.note, "already q8_0");
            continue;
        }
        EXPECT_GT(t.rel_error, 0) << t.name;
        std::printf("  %-22s %-8s -> q8_0  max|w'-w|/max|w| = %.3e\n", t.name.c_str(), formats::type_name(t.from_type).c_str(),
                    t.rel_error);
    }
    ASSERT_EQ(rep.shards.size(), 1u);
    EXPECT_EQ(rep.shards[0].action, requant::ShardReport::Action::Written);
}

// ---- the default pattern, every metadata type, alignment ----------------------------------------------

TEST(Requant, DefaultPatternConvertsDenseProjectionsOnly) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf", out = tmp.path() / "model-q8.gguf";
    write_model(in, kModel);
    requant::Report rep = requant::run(in.string(), out.string(), {});
    std::set<std::string> conv;
    std::map<std::string, std::string> notes;
    for (auto &t : rep.tensors) {
        if (t.action == requant::TensorReport::Action::Converted) conv.insert(t.name);
        else notes[t.name] = t.note;
    }
    EXPECT_EQ(conv, kDefaultConverted);
    EXPECT_EQ(notes["blk.1.attn_q.weight"], "already q8_0");
    EXPECT_NE(notes["blk.1.ffn_down.weight"].find("not a multiple of 32"), std::string::npos) << notes["blk.1.ffn_down.weight"];
    EXPECT_EQ(notes.size(), 2u);  // experts, router, shared expert, embeddings, norms: not even matched
    gguf::File a = gguf::File::open(in.string()), b = gguf::File::open(out.string());
    EXPECT_EQ(b.alignment(), 64u);
    expect_faithful(a, b, rep);
    // The metadata section is byte-identical: same keys, order, types and values.
    const std::string sa = slurp(in), sb = slurp(out);
    const size_t kv_end = [&] {
        // header (24 bytes) + KVs: find where the first tensor name's length field begins.
        const std::string first = "token_embd.weight";
        return sa.find(first) - 8;
    }();
    EXPECT_EQ(sa.substr(0, kv_end), sb.substr(0, kv_end));
}

TEST(Requant, RepeatableMatch) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf", out = tmp.path() / "o.gguf";
    write_model(in, kModel);
    requant::Options o;
    o.match = {"token_embd", "ffn_gate_exps"};
    requant::Report rep = requant::run(in.string(), out.string(), o);
    std::set<std::string> conv;
    for (auto &t : rep.tensors)
        if (t.action == requant::TensorReport::Action::Converted) conv.insert(t.name);
    EXPECT_EQ(conv, (std::set<std::string>{"token_embd.weight", "blk.1.ffn_gate_exps.weight"}));
    gguf::File b = gguf::File::open(out.string());
    EXPECT_EQ(b.tensor("blk.1.ffn_gate_exps.weight").type, (uint32_t)KPR_TYPE_Q8_0);
    EXPECT_EQ(b.tensor("blk.1.ffn_gate_exps.weight").ne, (std::vector<uint64_t>{256, 32, 8}));
}

// ---- refusals -------------------------------------------------------------------------------------------

TEST(Requant, NeverOverwritesItsInput) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf";
    write_model(in, kModel);
    const std::string before = slurp(in);
    for (bool force : {false, true}) {
        requant::Options o;
        o.force = force;
        try {
            requant::run(in.string(), in.string(), o);
            ADD_FAILURE() << "output == input accepted";
        } catch (const Error &e) {
            EXPECT_EQ(e.exit_code(), 2);
            EXPECT_NE(std::string(e.what()).find("never overwrites its input"), std::string::npos) << e.what();
        }
        // The same file under another name (a symlink, a path with ./) is the input too.
        fs::create_symlink(in, tmp.path() / "link.gguf");
        EXPECT_THROW(requant::run(in.string(), (tmp.path() / "link.gguf").string(), o), Error);
        EXPECT_THROW(requant::run(in.string(), (tmp.path() / "." / "model.gguf").string(), o), Error);
        fs::remove(tmp.path() / "link.gguf");
    }
    EXPECT_EQ(slurp(in), before);
    EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"model.gguf"}));
}

// An input named like a temporary of its output (OUT.part, OUT.part.tmp: the names older versions used)
// is never truncated or removed, on the convert path, the hard-link path and the copy path. Temporaries
// have unique names of their own: nothing but the output is left beside the input.
TEST(Requant, AnInputNamedLikeATemporaryIsKept) {
    for (const char *suffix : {".part", ".part.tmp"})
        for (int path = 0; path < 3; ++path) {  // 0 convert, 1 hard link (nothing to convert), 2 copy
            SCOPED_TRACE(std::string(suffix) + (path == 0 ? " convert" : path == 1 ? " hard link" : " copy"));
            TempDir tmp;
            const fs::path out = tmp.path() / "m.gguf";
            const fs::path in = tmp.path() / ("m.gguf" + std::string(suffix));
            write_model(in, kModel);
            const std::string before = slurp(in);
            requant::Options o;
            o.match = {path == 0 ? ".*" : "^blk\\.1\\.attn_q\\.weight$"};  // the latter is q8_0 already
            o.copy = path == 2;
            requant::Report rep = requant::run(in.string(), out.string(), o);
            ASSERT_TRUE(fs::exists(in));
            EXPECT_TRUE(slurp(in) == before) << "the input changed";
            EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"m.gguf", in.filename().string()}));
            ASSERT_EQ(rep.shards.size(), 1u);
            EXPECT_EQ(rep.shards[0].action, path == 0 ? requant::ShardReport::Action::Written
                                            : path == 1 ? requant::ShardReport::Action::HardLinked
                                                        : requant::ShardReport::Action::Copied);
            gguf::File a = gguf::File::open(in.string()), b = gguf::File::open(out.string());
            expect_faithful(a, b, rep);
        }
}

// Files that merely look like temporaries of the output (another run's, a user's) are left alone.
TEST(Requant, OtherFilesBesideTheOutputAreLeftAlone) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf", out = tmp.path() / "o.gguf";
    write_model(in, kModel);
    for (const char *name : {"o.gguf.part", "o.gguf.part.tmp", "o.gguf.tmp"}) tmp.write(name, std::string("keep ") + name);
    requant::run(in.string(), out.string(), {});
    for (const char *name : {"o.gguf.part", "o.gguf.part.tmp", "o.gguf.tmp"})
        EXPECT_EQ(slurp(tmp.path() / name), std::string("keep ") + name);
    EXPECT_EQ(listing(tmp.path()).size(), 5u);
}

TEST(Requant, ExistingOutputNeedsForce) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf", out = tmp.path() / "out.gguf";
    write_model(in, kModel);
    tmp.write("out.gguf", "precious");
    try {
        requant::run(in.string(), out.string(), {});
        ADD_FAILURE() << "existing output replaced without --force";
    } catch (const Error &e) {
        EXPECT_EQ(e.exit_code(), 2);
        EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
    }
    EXPECT_EQ(slurp(out), "precious");
    requant::Options o;
    o.force = true;
    requant::run(in.string(), out.string(), o);
    EXPECT_NO_THROW(gguf::File::open(out.string()));
}

TEST(Requant, NoMatchIsAnErrorNamingTheNames) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf";
    write_model(in, kModel);
    requant::Options o;
    o.match = {"no_such_tensor"};
    try {
        requant::run(in.string(), (tmp.path() / "o.gguf").string(), o);
        ADD_FAILURE();
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
    }
    o.match = {"(unclosed"};
    try {
        requant::run(in.string(), (tmp.path() / "o.gguf").string(), o);
        ADD_FAILURE();
    } catch (const Error &e) {
        EXPECT_EQ(e.exit_code(), 2);
    }
    EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"model.gguf"}));
}

// ---- split models ---------------------------------------------------------------------------------------

// Three shards: 1 and 3 hold dense projections, 2 only experts and norms.
std::vector<fs::path> write_split(const fs::path &dir, const std::string &stem) {
    const std::vector<std::vector<T>> shards = {
        {kModel[0], kModel[1], kModel[2], kModel[3]},
        {kModel[12], kModel[14]},
        {kModel[6], kModel[7], kModel[15]},
    };
    std::vector<fs::path> paths;
    for (unsigned k = 0; k < 3; ++k) {
        char name[64];
        std::snprintf(name, sizeof name, "-%05u-of-%05u.gguf", k + 1, 3u);
        paths.push_back(dir / (stem + name));
        write_model(paths.back(), shards[k], 32, {{"split.no", k}, {"split.count", 3}});
    }
    return paths;
}

TEST(Requant, SplitModelConvertsShardsAndHardLinksTheRest) {
    TempDir tmp;
    auto in = write_split(tmp.path(), "m");
    // Any shard names the set; the output may be given as a plain name.
    requant::Report rep = requant::run(in[1].string(), (tmp.path() / "q.gguf").string(), {});
    ASSERT_EQ(rep.shards.size(), 3u);
    EXPECT_EQ(rep.shards[0].action, requant::ShardReport::Action::Written);
    EXPECT_EQ(rep.shards[1].action, requant::ShardReport::Action::HardLinked);
    EXPECT_EQ(rep.shards[2].action, requant::ShardReport::Action::Written);
    EXPECT_EQ(rep.converted(), 5u);
    struct stat si {}, so {};
    ASSERT_EQ(0, ::stat(in[1].c_str(), &si));
    ASSERT_EQ(0, ::stat((tmp.path() / "q-00002-of-00003.gguf").c_str(), &so));
    EXPECT_EQ(si.st_ino, so.st_ino);
    for (unsigned k = 0; k < 3; ++k) {
        char name[64];
        std::snprintf(name, sizeof name, "q-%05u-of-%05u.gguf", k + 1, 3u);
        gguf::File a = gguf::File::open(in[k].string()), b = gguf::File::open((tmp.path() / name).string());
        expect_faithful(a, b, rep);
        EXPECT_EQ(b.get_u64("split.no"), k);
    }
    EXPECT_EQ(listing(tmp.path()).size(), 6u);  // no temporaries left

    // Again with --force: the hard link left in place is replaced by name; the input shard is untouched.
    const std::string shard2 = slurp(in[1]);
    requant::Options force;
    force.force = true;
    rep = requant::run(in[0].string(), (tmp.path() / "q.gguf").string(), force);
    EXPECT_EQ(rep.shards[1].action, requant::ShardReport::Action::HardLinked);
    EXPECT_EQ(slurp(in[1]), shard2);
    EXPECT_EQ(listing(tmp.path()).size(), 6u);

    // --copy: a copy, not a link; the output named as the first shard.
    requant::Options o;
    o.copy = true;
    rep = requant::run(in[0].string(), (tmp.path() / "c-00001-of-00003.gguf").string(), o);
    EXPECT_EQ(rep.shards[1].action, requant::ShardReport::Action::Copied);
    ASSERT_EQ(0, ::stat((tmp.path() / "c-00002-of-00003.gguf").c_str(), &so));
    EXPECT_NE(si.st_ino, so.st_ino);
    EXPECT_EQ(slurp(in[1]), slurp(tmp.path() / "c-00002-of-00003.gguf"));

    // An output set that is the input set, or a shard count that disagrees, is refused.
    EXPECT_THROW(requant::run(in[0].string(), (tmp.path() / "m.gguf").string(), o), Error);
    EXPECT_THROW(requant::run(in[0].string(), (tmp.path() / "x-00001-of-00004.gguf").string(), o), Error);
    // A missing shard is named.
    fs::remove(in[2]);
    try {
        requant::run(in[0].string(), (tmp.path() / "z.gguf").string(), o);
        ADD_FAILURE();
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("m-00003-of-00003.gguf"), std::string::npos) << e.what();
    }
}

// ---- failures leave nothing behind ------------------------------------------------------------------------

TEST(Requant, AnErrorMidRunLeavesNoOutput) {
    TempDir tmp;
    auto in = write_split(tmp.path(), "m");
    const auto before = listing(tmp.path());
    int seen = 0;
    // The third converted tensor lies in the last shard: shards 1 and 2 are complete by then.
    EXPECT_THROW(requant::run(in[0].string(), (tmp.path() / "o.gguf").string(), {},
                              [&](const requant::TensorReport &t) {
                                  if (t.action == requant::TensorReport::Action::Converted && ++seen == 4)
                                      throw Error("interrupted by the test");
                              }),
                 Error);
    EXPECT_EQ(seen, 4);
    EXPECT_EQ(listing(tmp.path()), before);
}

TEST(Requant, ASignalMidRunLeavesNoOutput) {
    TempDir tmp;
    const fs::path in = tmp.path() / "model.gguf";
    write_model(in, kModel);
    const auto before = listing(tmp.path());
    std::fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        requant::install_signal_cleanup();
        int seen = 0;
        try {
            requant::run(in.string(), (tmp.path() / "o.gguf").string(), {}, [&](const requant::TensorReport &t) {
                if (t.action == requant::TensorReport::Action::Converted && ++seen == 3) ::kill(::getpid(), SIGTERM);
            });
        } catch (...) {
        }
        _exit(3);  // not reached: SIGTERM's default action ends the process
    }
    int status = 0;
    ASSERT_EQ(pid, ::waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
    EXPECT_EQ(listing(tmp.path()), before);
}

} // namespace
