// The shared ggml vectors (tests/data): our GGUF reader reads ggml's files, our dot_row reproduces ggml's
// double-accumulated reference y.*, and dot_row_rounded lands where ggml's own mul_mat (yg.*) does.
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "test_util.hpp"

using namespace kpr;

namespace {

struct Files {
    gguf::File w, x, y;
};

const Files &files() {
    static const Files f{gguf::File(kpr_test::data_dir() + "/weights.gguf"),
                         gguf::File(kpr_test::data_dir() + "/activations.gguf"),
                         gguf::File(kpr_test::data_dir() + "/expected.gguf")};
    return f;
}

struct Case {
    std::string type_token, shape; // "q4_k", "96x512"
    uint64_t rows, K, ncols;
};

bool parse_y_name(const std::string &name, Case &c) {
    // y.<type>.<rows>x<K>.<ncols>
    if (name.rfind("y.", 0) != 0) return false;
    const size_t a = name.find('.', 2);
    const size_t b = name.find('.', a + 1);
    if (a == std::string::npos || b == std::string::npos) return false;
    c.type_token = name.substr(2, a - 2);
    c.shape = name.substr(a + 1, b - a - 1);
    c.ncols = std::stoull(name.substr(b + 1));
    const size_t xpos = c.shape.find('x');
    c.rows = std::stoull(c.shape.substr(0, xpos));
    c.K = std::stoull(c.shape.substr(xpos + 1));
    return true;
}

double max_abs(const std::vector<double> &v) {
    double m = 0;
    for (double d : v) m = std::max(m, std::fabs(d));
    return m;
}

} // namespace

TEST(Vectors, FilesReadAsGgmlWroteThem) {
    const Files &f = files();
    EXPECT_EQ(f.w.version(), 3u);
    EXPECT_EQ(f.w.alignment(), 32u);
    EXPECT_EQ(f.w.tensors().size(), 27u);
    EXPECT_EQ(f.x.tensors().size(), 9u);
    EXPECT_EQ(f.y.tensors().size(), 162u);
    for (const gguf::File *g : {&f.w, &f.x, &f.y}) {
        EXPECT_EQ(g->get_string("general.architecture"), "oracle") << g->path();
        EXPECT_FALSE(g->get_string("oracle.ggml_commit").empty());
    }
    const gguf::Tensor &t = f.w.tensor("w.q4_k.160x1536");
    EXPECT_EQ(t.type, static_cast<uint32_t>(KPR_TYPE_Q4_K));
    EXPECT_EQ(t.ne, (std::vector<uint64_t>{1536, 160}));
    EXPECT_EQ(t.bytes, 160u * formats::row_bytes(KPR_TYPE_Q4_K, 1536));
    const gguf::TensorOp op = gguf::tensor_op(t);
    EXPECT_EQ(op.rows, 160u);
    EXPECT_EQ(op.cols, 1536u);
    EXPECT_EQ(op.n_experts, 1u);
}

TEST(Vectors, Q8_0WeightsRequantizeToThemselves) {
    // quantize(dequantize(block)) must give ggml's block back, byte for byte.
    for (const gguf::Tensor &t : files().w.tensors()) {
        if (t.type != KPR_TYPE_Q8_0) continue;
        const uint64_t n = t.elements();
        std::vector<float> w(n);
        formats::dequantize_row(t.type, t.data, w.data(), n);
        std::vector<uint8_t> again(t.bytes);
        formats::quantize_row_q8_0(w.data(), again.data(), n);
        EXPECT_EQ(std::memcmp(again.data(), t.data, t.bytes), 0) << t.name;
    }
}

TEST(Vectors, DotRowMatchesTheReferenceAndRoundedMatchesGgml) {
    const Files &f = files();
    struct PerType {
        double ref_relerr = 0;       // max over cases of relerr(dot_row vs y)
        double rounded_relerr = 0;   // relerr(dot_row_rounded vs y)
        double oracle_relerr = 0;    // relerr(yg vs y), from the KV
        double rounded_vs_yg = 0;    // relerr(dot_row_rounded vs yg)
        int cases = 0;
    };
    std::map<std::string, PerType> summary;
    std::map<std::string, uint64_t> p_bit_exact;
    int n_cases = 0;
    for (const gguf::Tensor &yt : f.y.tensors()) {
        Case c;
        if (!parse_y_name(yt.name, c)) continue;
        ++n_cases;
        SCOPED_TRACE(yt.name);
        const gguf::Tensor &wt = f.w.tensor("w." + c.type_token + "." + c.shape);
        const gguf::Tensor &xt = f.x.tensor("x." + std::to_string(c.K) + "." + std::to_string(c.ncols));
        const gguf::Tensor &ygt = f.y.tensor("yg." + c.type_token + "." + c.shape + "." + std::to_string(c.ncols));
        ASSERT_EQ(formats::type_info(wt.type)->name == nullptr, false);
        ASSERT_EQ(wt.ne, (std::vector<uint64_t>{c.K, c.rows}));
        ASSERT_EQ(xt.type, static_cast<uint32_t>(KPR_TYPE_F32));
        ASSERT_EQ(yt.elements(), c.rows * c.ncols); // ggml drops trailing 1 dimensions (ncols = 1 is 1-D)
        ASSERT_EQ(yt.ne[0], c.rows);
        const uint64_t rb = formats::row_bytes(wt.type, c.K);
        const auto *x = reinterpret_cast<const float *>(xt.data);
        const auto *y = reinterpret_cast<const float *>(yt.data);
        const auto *yg = reinterpret_cast<const float *>(ygt.data);
        const formats::ActRounding r = formats::ggml_cpu_act_rounding(wt.type);

        std::vector<double> ref, yv, d_ref, d_r, d_ryg;
        uint64_t not_bit_exact = 0;
        for (uint64_t j = 0; j < c.ncols; ++j)
            for (uint64_t row = 0; row < c.rows; ++row) {
                const double v = formats::dot_row(wt.type, wt.data + row * rb, x + j * c.K, c.K);
                const double vr = formats::dot_row_rounded(wt.type, wt.data + row * rb, x + j * c.K, c.K, r);
                const double yy = y[j * c.rows + row], ygg = yg[j * c.rows + row];
                ref.push_back(v);
                if (static_cast<float>(v) != y[j * c.rows + row]) ++not_bit_exact;
                yv.push_back(yy);
                d_ref.push_back(yy - v);
                d_r.push_back(vr - yy);
                d_ryg.push_back(vr - ygg);
            }
        const double relerr_ref = max_abs(d_ref) / max_abs(ref);
        const double relerr_r = max_abs(d_r) / max_abs(yv);
        const double relerr_ryg = max_abs(d_ryg) / max_abs(yv);
        const double oracle = f.y.get_f64("oracle.relerr.yg." + c.type_token + "." + c.shape + "." + std::to_string(c.ncols));
        EXPECT_LE(relerr_ref, 1e-5) << "dot_row vs y";
        // y is the same double sum rounded to f32 once: with ggml's to_float reproduced bit for bit, every
        // output matches exactly.
        EXPECT_EQ(not_bit_exact, 0u) << "outputs whose f32 rounding differs from y";
        p_bit_exact[c.type_token] += not_bit_exact;
        EXPECT_LE(relerr_r, 2.0 * oracle) << "dot_row_rounded(" << formats::act_rounding_name(r) << ") vs y, oracle "
                                          << oracle;
        PerType &p = summary[c.type_token];
        p.ref_relerr = std::max(p.ref_relerr, relerr_ref);
        p.rounded_relerr = std::max(p.rounded_relerr, relerr_r);
        p.oracle_relerr = std::max(p.oracle_relerr, oracle);
        p.rounded_vs_yg = std::max(p.rounded_vs_yg, relerr_ryg);
        ++p.cases;
    }
    EXPECT_EQ(n_cases, 81);
    std::printf("%-8s %5s %12s %9s %14s %14s %14s\n", "type", "cases", "ref-vs-y", "inexact", "rounded-vs-y",
                "oracle(yg-y)", "rounded-vs-yg");
    for (const auto &[type, p] : summary) {
        std::printf("%-8s %5d %12.3e %9llu %14.3e %14.3e %14.3e\n", type.c_str(), p.cases, p.ref_relerr,
                    static_cast<unsigned long long>(p_bit_exact[type]), p.rounded_relerr, p.oracle_relerr,
                    p.rounded_vs_yg);
        ::testing::Test::RecordProperty("relerr_ref_" + type, std::to_string(p.ref_relerr));
        ::testing::Test::RecordProperty("relerr_rounded_" + type, std::to_string(p.rounded_relerr));
    }
}
