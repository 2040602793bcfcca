// Every (type, shape, ncols) of tests/data/expected.gguf through `kpr gemv`: the result must be within the
// error ggml's own CPU path reaches on the same inputs (yg.*, stored as oracle.relerr.*), or within 1e-5
// of the exact reference when the provider keeps activations in float.
#include <kpr/gguf.hpp>
#include <kpr/npy.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <regex>

namespace {

const std::string kData = KPR_TEST_DATA_DIR;
const std::string kKpr = std::string(KPR_BUILD_DIR) + "/bin/kpr";

struct Case {
    std::string type, shape;
    int ncols;
};

double relerr(const std::vector<float> &a, const float *ref, size_t n) {
    double m = 0, d = 0;
    for (size_t i = 0; i < n; ++i) {
        m = std::max(m, std::fabs((double)ref[i]));
        d = std::max(d, std::fabs((double)a[i] - ref[i]));
    }
    return d / m;
}

TEST(VectorsThroughCli, EveryTypeShapeAndNcolsMatchesGgml) {
    kpr::gguf::File expected = kpr::gguf::File::open(kData + "/expected.gguf");
    kpr::gguf::File acts = kpr::gguf::File::open(kData + "/activations.gguf");
    std::filesystem::path tmp = std::filesystem::temp_directory_path() / fmt::format("kpr_vectors_{}", getpid());
    std::filesystem::create_directories(tmp);
    std::regex name_re(R"(y\.([a-z0-9_]+)\.(\d+)x(\d+)\.(\d+))");
    int checked = 0;
    double worst_ratio = 0, worst_to_ggml = 0;
    std::string worst;
    for (const auto &t : expected.tensors()) {
        std::smatch m;
        if (!std::regex_match(t.name, m, name_re)) continue;
        std::string type = m[1], rows = m[2], k = m[3], ncols = m[4];
        std::string xname = fmt::format("x.{}.{}", k, ncols);
        const auto &x = acts.tensor(xname);
        std::string xfile = (tmp / (xname + ".npy")).string(), yfile = (tmp / (t.name + ".npy")).string();
        kpr::npy::write(xfile, {std::stoull(ncols), std::stoull(k)}, reinterpret_cast<const float *>(x.data));
        std::string cmd = fmt::format("'{}' --no-gpu gemv --model '{}/weights.gguf' --tensor w.{}.{}x{} --input '{}' --output '{}' 2>/dev/null",
                                      kKpr, kData, type, rows, k, xfile, yfile);
        int rc = std::system(cmd.c_str());
        ASSERT_EQ(rc, 0) << cmd;
        kpr::npy::Array y = kpr::npy::read(yfile);
        ASSERT_EQ(y.shape, (std::vector<uint64_t>{std::stoull(ncols), std::stoull(rows)})) << t.name;
        const float *ref = reinterpret_cast<const float *>(t.data);
        double err = relerr(y.data, ref, y.data.size());
        double ggml = expected.get_f64(fmt::format("oracle.relerr.yg.{}.{}x{}.{}", type, rows, k, ncols));
        // F16 weights: generic_cpu keeps activations in float, so it must reach the exact reference.
        // Quantized activations: the same rounding as ggml, so the same error up to float summation order
        // (a relative slack of 1e-3 on the error), and close to ggml's own output element by element.
        double bound = type == "f16" ? 1e-5 : ggml * (1 + 1e-3);
        double ratio = err / bound;
        if (ratio > worst_ratio) worst_ratio = ratio, worst = t.name;
        EXPECT_LE(err, bound) << t.name << ": kpr " << err << ", ggml's own CPU path " << ggml;
        if (type != "f16") {
            const auto &yg = expected.tensor("yg" + t.name.substr(1));
            double to_ggml = relerr(y.data, reinterpret_cast<const float *>(yg.data), y.data.size());
            worst_to_ggml = std::max(worst_to_ggml, to_ggml);
            EXPECT_LE(to_ggml, 5e-6) << t.name << ": kpr differs from ggml's own output by " << to_ggml;
        }
        ++checked;
    }
    std::filesystem::remove_all(tmp);
    EXPECT_EQ(checked, 81);
    std::printf("checked %d cases; worst err / bound = %.4f (%s); worst distance to ggml's output %.2e\n", checked,
                worst_ratio, worst.c_str(), worst_to_ggml);
}

} // namespace
