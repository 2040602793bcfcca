// What bad input gets: every command, given a missing file, a folder, an empty file, a file of the wrong
// kind or a value out of range, exits 1 (2 for a usage error) with one line naming the input and the
// problem, and leaves no output file behind.
#include "test_support.hpp"

#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/npy.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace kpr_test;

namespace {

const std::string kWeights = std::string(KPR_TEST_SOURCE_DIR) + "/tests/data/weights.gguf";
const std::string kTensor = "w.q8_0.32x256";

std::vector<std::string> lines_of(const std::string &s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string l;
    while (std::getline(ss, l))
        if (!l.empty()) out.push_back(l);
    return out;
}

struct Inputs {
    TempDir t;
    fs::path missing, dir, empty, text, npy, gguf, toml, out_dir;
    Inputs() {
        missing = t.path() / "missing.file";
        dir = t.dir("a_folder");
        empty = t.write("empty.file", "");
        text = t.write("text.file", "hello, I am a text file\n");
        npy = t.path() / "x.npy";
        std::vector<float> x(256, 0.25f);
        kpr::npy::write(npy.string(), {1, 256}, x.data());
        gguf = kWeights;
        toml = t.write("device.toml", "[device]\nkind = \"cuda\"\n");
        out_dir = t.dir("out");
    }
};

// Runs `args`; checks the exit code, that stderr has exactly one line and it names `subject`, and that
// nothing was written into `out_dir`.
void expect_bad(const Inputs &in, const std::vector<std::string> &args, int code, const std::string &subject) {
    std::vector<std::string> a = {"--no-gpu"};
    a.insert(a.end(), args.begin(), args.end());
    CommandResult r = run_kpr(a, {}, 120);
    std::string cmd;
    for (auto &x : a) cmd += x + " ";
    SCOPED_TRACE(cmd);
    EXPECT_EQ(r.exit_code, code) << r.all();
    auto err = lines_of(r.err);
    if (code == 1) {
        EXPECT_EQ(err.size(), 1u) << r.err;
        if (!err.empty()) {
            EXPECT_TRUE(err[0].rfind("kpr: error: ", 0) == 0) << err[0];
            EXPECT_TRUE(contains(err[0], subject)) << "the message does not name '" << subject << "': " << err[0];
        }
    } else {
        ASSERT_FALSE(err.empty());
        EXPECT_TRUE(contains(err[0], subject)) << "the message does not name '" << subject << "': " << err[0];
    }
    size_t written = 0;
    for (auto &e : fs::recursive_directory_iterator(in.out_dir)) {
        ++written;
        ADD_FAILURE() << "left behind: " << e.path();
    }
    EXPECT_EQ(written, 0u);
}

} // namespace

TEST(BadInputs, GlobalConfig) {
    Inputs in;
    for (const fs::path &p : {in.missing, in.dir, in.npy, in.text}) expect_bad(in, {"--config", p.string(), "providers"}, 1, p.string());
    // An empty config is a valid (empty) config.
    CommandResult r = run_kpr({"--no-gpu", "--config", in.empty.string(), "providers"});
    EXPECT_EQ(r.exit_code, 0) << r.all();
}

TEST(BadInputs, ConfigCheck) {
    Inputs in;
    for (const fs::path &p : {in.missing, in.dir, in.npy, in.text}) expect_bad(in, {"config", "check", p.string()}, 1, p.string());
}

TEST(BadInputs, PlanModel) {
    Inputs in;
    for (const fs::path &p : {in.missing, in.dir, in.empty, in.npy, in.text, in.toml})
        expect_bad(in, {"plan", "--model", p.string()}, 1, p.string());
}

TEST(BadInputs, PlanSimulateDeviceFile) {
    Inputs in;
    fs::path missing = in.t.path() / "nope.toml";
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--simulate-device", missing.string()}, 1,
               missing.string());
    fs::path bad = in.t.write("bad.toml", "[device]\nkind = \"cuda\"\ncc = \"banana\"\n");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--simulate-device", bad.string()}, 1, bad.string());
    // Said plainly, not as a TOML syntax error at 0:0 or a missing [device] table.
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--simulate-device", missing.string()}, 1,
               missing.string() + ": cannot open: No such file or directory");
    fs::path folder = in.t.dir("folder.toml");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--simulate-device", folder.string()}, 1,
               folder.string() + ": cannot open: is a directory");
    // A key of the wrong type is an error even where `like` would have supplied the value.
    fs::path typed = in.t.write("typed.toml", "[device]\nlike = \"p100\"\ncc = 7.5\n");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--simulate-device", typed.string()}, 1,
               typed.string() + ":3:");
    fs::path zero = in.t.write("zero.toml", "[device]\nlike = \"p100\"\nsm_count = 0\n");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--simulate-device", zero.string()}, 1,
               "device.sm_count: 0 is out of range");
}

// A valid shape too large for this machine: an error naming the op and the bytes, not std::bad_alloc.
TEST(BadInputs, BenchShapeTooLargeForMemory) {
    // bench reports its progress on stderr first ("measuring the read bandwidth", "[1/1] ..."), so the error
    // is the last line rather than the only one.
    CommandResult r = run_kpr({"--no-gpu", "bench", "--type", "q8_0", "--rows", "1000000000", "--cols", "1000000000"});
    EXPECT_EQ(r.exit_code, 1) << r.all();
    auto err = lines_of(r.err);
    ASSERT_FALSE(err.empty());
    const std::string &last = err.back();
    EXPECT_EQ(last.rfind("kpr: error: bench gemv q8_0 1000000000x1000000000 ncols 1 ", 0), 0u) << last;
    EXPECT_TRUE(contains(last, "(1062500000000000000 bytes of weights)")) << last;  // 10^18 / 32 * 34
    EXPECT_TRUE(contains(last, "of host memory, but only")) << last;
    EXPECT_FALSE(contains(r.err, "bad_alloc")) << r.err;
}

// Names from a file need not be UTF-8; --json output must still be valid JSON (exit 0), not a type_error.
TEST(BadInputs, PlanModelJsonWithNonUtf8TensorName) {
    Inputs in;
    const fs::path model = in.t.path() / "latin1.gguf";
    {
        kpr::gguf::Writer w;
        w.add_string("general.architecture", "t\xe9st");
        w.add_tensor("w\xff.weight", KPR_TYPE_F32, {4, 2}, std::vector<uint8_t>(32, 0));
        w.write(model.string());
    }
    // broken_control is a correct F32 provider: the tensor is served whether or not generic_cpu is built.
    const std::string control = std::string(KPR_BROKEN_PROVIDER_DIR) + "/control";
    CommandResult r = run_kpr({"--no-gpu", "--provider-path", control, "plan", "--model", model.string(), "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.all();
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
    ASSERT_EQ(j["tensors"].size(), 1u) << r.out;
    EXPECT_EQ(j["tensors"][0]["name"], "w\xef\xbf\xbd.weight") << "the bad byte becomes U+FFFD";
}

TEST(BadInputs, PlanValuesOutOfRange) {
    Inputs in;
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--ncols", "9"}, 1, "ncols 9");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--ncols", "0"}, 1, "ncols 0");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "33"}, 1, "cols 33");
    expect_bad(in, {"plan", "--type", "q9_9", "--rows", "64", "--cols", "64"}, 2, "q9_9");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "0", "--cols", "64"}, 2, "--rows");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "-5", "--cols", "64"}, 2, "--rows");
    // CLI11 alone would clamp a number too large for uint64 to 18446744073709551615 (and wrap -1 to it); kpr
    // checks every integer option first: a usage error naming the option and the value, never a clamped value.
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "99999999999999999999999", "--cols", "64"}, 2,
               "--rows: 99999999999999999999999 is out of range");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "18446744073709551616"}, 2, "--cols");
    expect_bad(in, {"plan", "--op", "gemv_grouped", "--type", "q8_0", "--rows", "64", "--cols", "64", "--experts", "-1",
                    "--experts-used", "1"},
               2, "--experts: -1 is negative");
    expect_bad(in, {"bench", "--type", "q8_0", "--rows", "99999999999999999999999", "--cols", "64"}, 2, "--rows");
    expect_bad(in, {"selftest", "--seed", "99999999999999999999999"}, 2, "--seed");
    expect_bad(in, {"plan", "--type", "f32", "--rows", "18446744073709551615", "--cols", "18446744073709551615"}, 1,
               "overflows");
    expect_bad(in, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "64", "--device", "cuda:7"}, 1, "cuda:7");
    expect_bad(in, {"plan", "--op", "gemv_grouped", "--type", "q8_0", "--rows", "64", "--cols", "64", "--experts", "2",
                    "--experts-used", "3"},
               1, "experts used");
}

TEST(BadInputs, Gemv) {
    Inputs in;
    std::string out = (in.out_dir / "y.npy").string();
    auto gemv = [&](const std::string &model, const std::string &x, const std::string &tensor = kTensor) {
        return std::vector<std::string>{"gemv", "--model", model, "--tensor", tensor, "--input", x, "--output", out};
    };
    for (const fs::path &p : {in.missing, in.dir, in.empty, in.npy, in.text}) expect_bad(in, gemv(p.string(), in.npy.string()), 1, p.string());
    for (const fs::path &p : {in.missing, in.empty, in.gguf, in.text}) expect_bad(in, gemv(kWeights, p.string()), 1, p.string());
    expect_bad(in, gemv(kWeights, in.npy.string(), "no.such.tensor"), 1, "no.such.tensor");
    // x of the wrong width, and of too many columns.
    fs::path narrow = in.t.path() / "narrow.npy", tall = in.t.path() / "tall.npy";
    std::vector<float> v(9 * 256, 0.5f);
    kpr::npy::write(narrow.string(), {1, 128}, v.data());
    kpr::npy::write(tall.string(), {9, 256}, v.data());
    expect_bad(in, gemv(kWeights, narrow.string()), 1, narrow.string());
    expect_bad(in, gemv(kWeights, tall.string()), 1, tall.string());
    if (!fs::exists(provider_build_dir() / "libkpr_generic_cpu.so")) GTEST_SKIP() << "generic_cpu not built: no provider to compute with";
    // An output that cannot be written: into a missing folder, or onto a folder.
    std::vector<std::string> a = gemv(kWeights, in.npy.string());
    a.back() = (in.t.path() / "no" / "such" / "dir" / "y.npy").string();
    expect_bad(in, a, 1, "y.npy");
    a.back() = in.dir.string();
    expect_bad(in, a, 1, in.dir.string());
    // The good call works and writes exactly the output.
    CommandResult ok = run_kpr({"--no-gpu", "gemv", "--model", kWeights, "--tensor", kTensor, "--input", in.npy.string(), "--output", out});
    EXPECT_EQ(ok.exit_code, 0) << ok.all();
    EXPECT_TRUE(fs::exists(out));
}

TEST(BadInputs, Selftest) {
    Inputs in;
    expect_bad(in, {"selftest", "--device", "cuda:7"}, 1, "cuda:7");
    expect_bad(in, {"selftest", "--provider", "no_such_provider"}, 1, "no_such_provider");
    expect_bad(in, {"selftest", "--case-timeout", "-1"}, 2, "--case-timeout");
}

TEST(BadInputs, ModelCommands) {
    Inputs in;
    std::string out = (in.out_dir / "o.gguf").string();
    for (const fs::path &p : {in.missing, in.dir, in.empty, in.npy, in.text}) {
        expect_bad(in, {"bench", "--model", p.string(), "--reps", "1"}, 1, p.string());
        expect_bad(in, {"requant", p.string(), out}, 1, p.string());
        expect_bad(in, {"calibrate", "--model", p.string(), "--output", (in.out_dir / "c.toml").string()}, 1, p.string());
    }
    for (const fs::path &p : {in.missing, in.dir, in.empty, in.text})
        expect_bad(in, {"calibrate", "--shapes", p.string(), "--output", (in.out_dir / "c.toml").string()}, 1, p.string());
    expect_bad(in, {"synth", "--shape", "no_such_shape", "-o", out}, 2, "no_such_shape");
}

// A folder given as the .npy input is named in the error (npy::read checks for it first).
TEST(BadInputs, GemvInputFolder) {
    Inputs in;
    expect_bad(in, {"gemv", "--model", kWeights, "--tensor", kTensor, "--input", in.dir.string(), "--output",
                    (in.out_dir / "y.npy").string()},
               1, in.dir.string());
}
