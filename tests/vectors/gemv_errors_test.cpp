// Bad input to `kpr gemv`: every case exits 1 with one message naming the problem, and writes no output.
#include <kpr/npy.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <sys/wait.h>

namespace {

namespace fs = std::filesystem;
const std::string kKpr = std::string(KPR_BUILD_DIR) + "/bin/kpr";

struct Result {
    int code;
    std::string output;
};

Result run(const std::string &args) {
    std::string cmd = fmt::format("'{}' --no-gpu {} 2>&1", kKpr, args);
    FILE *p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// A raw GGUF v3 file with one tensor, so each field can be made to lie.
struct RawTensor {
    std::string name = "w";
    std::vector<uint64_t> ne = {256, 4};
    uint32_t type = 8;  // q8_0
    uint64_t offset = 0;
};

std::string raw_gguf(const RawTensor &t, uint64_t data_bytes) {
    std::string s = "GGUF";
    auto put = [&](auto v) { s.append(reinterpret_cast<const char *>(&v), sizeof v); };
    put(uint32_t(3));
    put(uint64_t(1));  // tensors
    put(uint64_t(0));  // kv
    put(uint64_t(t.name.size()));
    s += t.name;
    put(uint32_t(t.ne.size()));
    for (auto n : t.ne) put(n);
    put(t.type);
    put(t.offset);
    while (s.size() % 32) s.push_back(0);
    s.append(data_bytes, '\x01');
    return s;
}

class GemvErrors : public ::testing::Test {
protected:
    fs::path dir = fs::temp_directory_path() / fmt::format("kpr_gemv_err_{}", getpid());
    std::string x, out;
    void SetUp() override {
        fs::create_directories(dir);
        x = (dir / "x.npy").string();
        out = (dir / "y.npy").string();
        std::vector<float> v(256, 0.5f);
        kpr::npy::write(x, {1, 256}, v.data());
    }
    void TearDown() override { fs::remove_all(dir); }
    std::string write(const std::string &name, const std::string &bytes) {
        std::string p = (dir / name).string();
        std::ofstream(p, std::ios::binary) << bytes;
        return p;
    }
    void expect_error(const std::string &args, const std::string &needle) {
        Result r = run(args);
        EXPECT_EQ(r.code, 1) << r.output;
        EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.output;
        EXPECT_FALSE(fs::exists(out)) << "a failed run left an output file";
    }
    std::string gemv(const std::string &model, const std::string &input) {
        return fmt::format("gemv --model '{}' --tensor w --input '{}' --output '{}'", model, input, out);
    }
};

TEST_F(GemvErrors, ValidFileWorks) {
    std::string m = write("ok.gguf", raw_gguf({}, 4 * 8 * 34));
    Result r = run(gemv(m, x));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(fs::exists(out));
}

TEST_F(GemvErrors, TruncatedHeader) {
    std::string full = raw_gguf({}, 4 * 8 * 34);
    expect_error(gemv(write("trunc.gguf", full.substr(0, 30)), x), "trunc.gguf");
}

TEST_F(GemvErrors, TensorRunsPastEndOfFile) {
    std::string m = write("short.gguf", raw_gguf({}, 100));
    expect_error(gemv(m, x), "short.gguf");
    expect_error(gemv(m, x), "'w'");
}

TEST_F(GemvErrors, DimensionProductOverflows) {
    RawTensor t;
    t.ne = {256, 1ull << 40, 1ull << 40};
    expect_error(gemv(write("overflow.gguf", raw_gguf(t, 64)), x), "overflow.gguf");
}

TEST_F(GemvErrors, UnknownTypeId) {
    RawTensor t;
    t.type = 77;
    expect_error(gemv(write("type.gguf", raw_gguf(t, 4 * 8 * 34)), x), "77");
}

TEST_F(GemvErrors, WrongShapedInput) {
    std::string m = write("ok.gguf", raw_gguf({}, 4 * 8 * 34));
    std::string bad = (dir / "bad.npy").string();
    std::vector<float> v(200, 1.0f);
    kpr::npy::write(bad, {2, 100}, v.data());
    expect_error(gemv(m, bad), "bad.npy");
    std::vector<float> nine(9 * 256, 1.0f);
    kpr::npy::write(bad, {9, 256}, nine.data());
    expect_error(gemv(m, bad), "1..8");
}

TEST_F(GemvErrors, NotAGgufAndMissingFiles) {
    expect_error(gemv(write("text.gguf", "hello, not a gguf file at all........................"), x), "text.gguf");
    expect_error(gemv((dir / "missing.gguf").string(), x), "missing.gguf");
    expect_error(gemv(dir.string(), x), dir.string());
    std::string m = write("ok.gguf", raw_gguf({}, 4 * 8 * 34));
    expect_error(gemv(m, write("x.txt", "not npy")), "x.txt");
    expect_error(fmt::format("gemv --model '{}' --tensor nope --input '{}' --output '{}'", m, x, out), "nope");
}

std::string slurp(const std::string &p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// An input named like the output's temporary in older versions (OUTPUT.tmp) is kept: the temporary has a
// unique name of its own, and nothing but the output is left in the folder.
TEST_F(GemvErrors, InputNamedLikeTheOutputsTemporaryIsKept) {
    std::string m = write("ok.gguf", raw_gguf({}, 4 * 8 * 34));
    const std::string in = out + ".tmp";
    fs::copy_file(x, in);
    const std::string before = slurp(in);
    Result r = run(gemv(m, in));
    ASSERT_EQ(r.code, 0) << r.output;
    ASSERT_TRUE(fs::exists(in));
    EXPECT_TRUE(slurp(in) == before) << "the input changed";
    EXPECT_EQ(kpr::npy::read(out).shape, (std::vector<uint64_t>{1, 4}));
    std::set<std::string> names;
    for (auto &e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, (std::set<std::string>{"ok.gguf", "x.npy", "y.npy", "y.npy.tmp"}));
}

// --output naming the --model, --input or --ids file (by its own path, another spelling, a symlink) is
// refused with exit 2 and a message naming the file; the file is unchanged.
TEST_F(GemvErrors, OutputThatIsAnInputIsRefused) {
    std::string m = write("ok.gguf", raw_gguf({}, 4 * 8 * 34));
    std::string ids = (dir / "ids.npy").string();
    std::vector<float> one = {0.0f};
    kpr::npy::write(ids, {1, 1}, one.data());
    fs::create_symlink(m, dir / "link.gguf");
    struct Case {
        std::string output, victim, option;
    };
    const std::vector<Case> cases = {
        {m, m, "--model"},
        {(dir / "." / "ok.gguf").string(), m, "--model"},
        {(dir / "link.gguf").string(), m, "--model"},
        {x, x, "--input"},
        {ids, ids, "--ids"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.output);
        const std::string before = slurp(c.victim);
        Result r = run(fmt::format("gemv --model '{}' --tensor w --input '{}' --ids '{}' --output '{}'", m, x, ids, c.output));
        EXPECT_EQ(r.code, 2) << r.output;
        EXPECT_NE(r.output.find(c.victim), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(c.option), std::string::npos) << r.output;
        EXPECT_TRUE(slurp(c.victim) == before) << c.victim << " changed";
    }
    EXPECT_FALSE(fs::exists(out));
    std::set<std::string> names;
    for (auto &e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, (std::set<std::string>{"ok.gguf", "x.npy", "ids.npy", "link.gguf"}));
}

TEST_F(GemvErrors, UsageErrorsExitTwo) {
    EXPECT_EQ(run("gemv --model a.gguf").code, 2);
    EXPECT_EQ(run("plan --type nonsense --rows 1 --cols 32").code, 2);
}

} // namespace
