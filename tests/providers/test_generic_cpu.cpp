// Kernel-level tests of generic_cpu, through its C ABI only (dlopen + handshake, no core).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "provider_loader.h"
#include "ref_quant.h"

using namespace kpr_test;

namespace {

LoadedProvider &provider() {
    static LoadedProvider p = [] {
        LoadedProvider l;
        l.load(std::string(KPR_PROVIDER_BUILD_DIR) + "/libkpr_generic_cpu.so");
        return l;
    }();
    return p;
}

const kpr_device_desc &device() {
    static kpr_device_desc d = [] {
        kpr_device_desc x = host_cpu_device();
        x.cpu_threads = std::max(1u, std::thread::hardware_concurrency());
        return x;
    }();
    return d;
}

std::vector<std::string> isas() {
    std::vector<std::string> v = {"portable"};
    if (host_has_avx2()) v.push_back("avx2");
    if (host_has_avx512()) v.push_back("avx512");
    return v;
}

kpr_op_desc make_op(uint32_t type, uint32_t ncols, uint64_t rows, uint64_t cols, uint32_t kind = KPR_OP_GEMV,
                    uint32_t ne = 1, uint32_t nu = 1, uint32_t xs = 1) {
    kpr_op_desc op{};
    op.struct_size = sizeof op;
    op.kind = kind;
    op.weight_type = type;
    op.ncols = ncols;
    op.rows = rows;
    op.cols = cols;
    op.n_experts = ne;
    op.n_used = nu;
    op.x_slots = xs;
    return op;
}

struct Opts {
    std::vector<kpr_option_value> items;
    kpr_option_set set{};
    Opts(const char *isa, const char *threads) {
        items.push_back({"isa", isa});
        items.push_back({"threads", threads});
        set.struct_size = sizeof set;
        set.count = (uint32_t)items.size();
        set.items = items.data();
    }
};

kpr_offer query(const kpr_op_desc &op, const kpr_option_set *opts, const kpr_device_desc *dev = nullptr) {
    kpr_offer offer{};
    offer.struct_size = sizeof offer;
    kpr_error err{sizeof err, {0}};
    EXPECT_EQ(provider().table->query(provider().state, &op, dev ? dev : &device(), opts, &offer, &err), KPR_OK)
        << err.message;
    return offer;
}

kpr_prepared *prepare(const kpr_op_desc &op, const kpr_option_set *opts, const std::vector<uint8_t> &w) {
    kpr_weights weights{sizeof weights, 0, w.data(), w.size(), 0};
    kpr_prepared *p = nullptr;
    kpr_error err{sizeof err, {0}};
    const kpr_status st = provider().table->prepare(provider().state, &op, &device(), opts, &weights, &p, &err);
    EXPECT_EQ(st, KPR_OK) << err.message;
    return p;
}

void run(kpr_prepared *p, uint32_t ncols, const float *x, float *y, const int32_t *ids = nullptr) {
    kpr_run_args a{sizeof a, ncols, x, y, ids, nullptr};
    kpr_error err{sizeof err, {0}};
    ASSERT_EQ(provider().table->run(provider().state, p, &a, &err), KPR_OK) << err.message;
}

double rel_err(const std::vector<float> &y, const std::vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        const double e = std::fabs((double)y[i] - ref[i]);
        if (!(e <= 1e300)) return INFINITY; // NaN or inf in the output
        num = std::max(num, e);
        den = std::max(den, std::fabs(ref[i]));
    }
    return den > 0 ? num / den : num;
}

std::vector<float> random_x(size_t n, std::mt19937_64 &rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto &v : x) v = nd(rng);
    return x;
}

// y[col][row] references for one matrix: exact (float x) and with x rounded as the kernel rounds it.
void reference(const TypeDesc &t, const uint8_t *w, size_t rows, size_t cols, const float *x, double *ref_f,
               double *ref_q) {
    std::vector<double> xr;
    if (t.act == 1) xr = round_q8_0(x, cols);
    else if (t.act == 2) xr = round_q8_K(x, cols);
    const size_t rb = cols / t.block * t.bytes;
    for (size_t r = 0; r < rows; ++r) {
        const std::vector<float> wr = dequant_row(t, w + r * rb, cols);
        double sf = 0, sq = 0;
        for (size_t k = 0; k < cols; ++k) {
            sf += (double)wr[k] * (double)x[k];
            if (t.act) sq += (double)wr[k] * xr[k];
        }
        ref_f[r] = sf;
        ref_q[r] = t.act ? sq : sf;
    }
}

double float_tol(const TypeDesc &t) { return t.act == 0 ? 1e-5 : (t.act == 1 ? 3e-2 : 4e-2); }
constexpr double kQuantTol = 1e-5;

class PerType : public ::testing::TestWithParam<TypeDesc> {};

} // namespace

TEST(GenericCpu, Handshake) {
    ASSERT_NE(provider().table, nullptr) << provider().error;
    const kpr_provider_v1 *t = provider().table;
    EXPECT_EQ(t->struct_size, sizeof(kpr_provider_v1));
    EXPECT_EQ(KPR_VERSION_MAJOR(t->abi_version), 1u);
    const kpr_provider_identity *id = t->identity(provider().state);
    EXPECT_STREQ(id->name, "generic_cpu");
    EXPECT_EQ(id->device_kind, (uint32_t)KPR_DEVICE_CPU);

    kpr_handshake_answer ans{sizeof ans, 0, nullptr};
    kpr_error err{sizeof err, {0}};
    kpr_handshake_offer wide{sizeof wide, KPR_MAKE_VERSION(1, 0), KPR_MAKE_VERSION(1, 9), 0, test_host()};
    EXPECT_EQ(provider().entry(&wide, &ans, &err), KPR_OK);
    EXPECT_EQ(ans.abi_version, KPR_ABI_VERSION);
    EXPECT_NE(ans.table, nullptr);

    kpr_handshake_offer v2{sizeof v2, KPR_MAKE_VERSION(2, 0), KPR_MAKE_VERSION(2, 3), 0, test_host()};
    ans = {sizeof ans, 0, nullptr};
    EXPECT_EQ(provider().entry(&v2, &ans, &err), KPR_ERR_VERSION);
    EXPECT_EQ(ans.table, nullptr);
    EXPECT_EQ(ans.abi_version, KPR_ABI_VERSION);
    EXPECT_NE(std::string(err.message).find("ABI"), std::string::npos);

    kpr_handshake_offer v0{sizeof v0, KPR_MAKE_VERSION(0, 1), KPR_MAKE_VERSION(0, 9), 0, test_host()};
    EXPECT_EQ(provider().entry(&v0, &ans, &err), KPR_ERR_VERSION);
}

TEST(GenericCpu, Options) {
    const kpr_provider_v1 *t = provider().table;
    ASSERT_EQ(t->option_count(provider().state), 2u);
    EXPECT_STREQ(t->option_get(provider().state, 0)->name, "isa");
    EXPECT_STREQ(t->option_get(provider().state, 0)->choices, "auto,avx512,avx2,portable");
    EXPECT_STREQ(t->option_get(provider().state, 1)->name, "threads");
    EXPECT_EQ(t->option_get(provider().state, 2), nullptr);
}

TEST(GenericCpu, DeclineReasons) {
    auto reason = [](const kpr_op_desc &op, const kpr_option_set *o = nullptr) {
        const kpr_offer off = query(op, o);
        EXPECT_EQ(off.accepted, 0u);
        return std::pair<std::string, uint32_t>(off.reason, off.decline_code);
    };
    auto r = reason(make_op(KPR_TYPE_Q4_K, 1, 64, 100));
    EXPECT_EQ(r.first, "cols 100 is not a multiple of q4_K's block of 256");
    EXPECT_EQ(r.second, (uint32_t)KPR_ERR_UNSUPPORTED);
    r = reason(make_op(KPR_TYPE_IQ2_XXS, 1, 64, 256));
    EXPECT_EQ(r.first, "type iq2_xxs is not implemented by generic_cpu");
    EXPECT_EQ(r.second, (uint32_t)KPR_ERR_UNSUPPORTED);
    r = reason(make_op(KPR_TYPE_Q8_0, 9, 64, 256));
    EXPECT_EQ(r.first, "ncols 9 exceeds 8");
    EXPECT_EQ(r.second, (uint32_t)KPR_ERR_UNSUPPORTED);
    r = reason(make_op(KPR_TYPE_Q8_0, 1, 64, 256, KPR_OP_GEMV_GROUPED, 8, 2, 3));
    EXPECT_NE(r.first.find("x_slots 3"), std::string::npos) << r.first;
    r = reason(make_op(KPR_TYPE_Q8_0, 1, 0, 256));
    EXPECT_NE(r.first.find("rows"), std::string::npos) << r.first;
    if (!host_has_avx512()) {
        Opts o("avx512", "0");
        r = reason(make_op(KPR_TYPE_Q8_0, 1, 64, 256), &o.set);
        EXPECT_EQ(r.second, (uint32_t)KPR_ERR_WRONG_ARCH);
        EXPECT_NE(r.first.find("isa=avx512"), std::string::npos) << r.first;
    }
    // A simulated device with nothing but SSE: the portable path is still offered; avx2 is declined.
    kpr_device_desc old = device();
    old.cpu_features = KPR_CPU_SSE42;
    old.simulated = 1;
    const kpr_offer ok = query(make_op(KPR_TYPE_Q4_K, 4, 64, 512), nullptr, &old);
    EXPECT_EQ(ok.accepted, 1u);
    EXPECT_EQ(ok.score, 100);
    EXPECT_EQ(ok.prepared_bytes, 0u);
    EXPECT_NE(std::string(ok.reason).find("portable"), std::string::npos) << ok.reason;
    Opts o2("avx2", "0");
    EXPECT_EQ(query(make_op(KPR_TYPE_Q4_K, 4, 64, 512), &o2.set, &old).accepted, 0u);
}

TEST(GenericCpu, ErrorsLeaveOutputsUntouched) {
    const kpr_op_desc op = make_op(KPR_TYPE_Q8_0, 1, 4, 64);
    std::vector<uint8_t> w(4 * 2 * 34 - 1);
    kpr_weights weights{sizeof weights, 0, w.data(), w.size(), 0};
    kpr_prepared *sentinel = reinterpret_cast<kpr_prepared *>(0x1234);
    kpr_prepared *p = sentinel;
    kpr_error err{sizeof err, {0}};
    EXPECT_EQ(provider().table->prepare(provider().state, &op, &device(), nullptr, &weights, &p, &err),
              KPR_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(p, sentinel);
    EXPECT_NE(std::string(err.message).find("bytes"), std::string::npos) << err.message;

    // Bad ids in a grouped run: error, y untouched.
    std::mt19937_64 rng(7);
    const TypeDesc &t = all_types()[3];
    const kpr_op_desc g = make_op(t.type, 1, 8, 64, KPR_OP_GEMV_GROUPED, 2, 1, 1);
    std::vector<uint8_t> gw = random_weights(t, 2 * 8 * 2, rng);
    kpr_prepared *gp = prepare(g, nullptr, gw);
    ASSERT_NE(gp, nullptr);
    std::vector<float> x(64, 1.0f), y(8, 42.0f);
    int32_t ids[1] = {2};
    kpr_run_args a{sizeof a, 1, x.data(), y.data(), ids, nullptr};
    EXPECT_EQ(provider().table->run(provider().state, gp, &a, &err), KPR_ERR_INVALID_ARGUMENT);
    for (float v : y) EXPECT_EQ(v, 42.0f);
    provider().table->release(provider().state, gp);
}

// Every type x ncols 1..8 x ISA path against the scalar reference.
TEST_P(PerType, AllNcolsAllIsas) {
    const TypeDesc t = GetParam();
    std::mt19937_64 rng(1000 + t.type);
    const size_t rows = 67;
    const size_t cols = t.block == 1 ? 1000 : (t.block == 32 ? 32 * 13 : 256 * 3);
    const std::vector<uint8_t> w = random_weights(t, rows * cols / t.block, rng);
    const std::vector<float> x = random_x(8 * cols, rng);
    std::vector<double> rf(8 * rows), rq(8 * rows);
    for (int j = 0; j < 8; ++j)
        reference(t, w.data(), rows, cols, x.data() + j * cols, rf.data() + j * rows, rq.data() + j * rows);
    std::vector<std::vector<float>> per_isa;
    for (const std::string &isa : isas()) {
        Opts o(isa.c_str(), "2");
        for (uint32_t nc = 1; nc <= 8; ++nc) {
            const kpr_op_desc op = make_op(t.type, nc, rows, cols);
            ASSERT_EQ(query(op, &o.set).accepted, 1u);
            kpr_prepared *p = prepare(op, &o.set, w);
            ASSERT_NE(p, nullptr);
            std::vector<float> y(nc * rows, NAN);
            run(p, nc, x.data(), y.data());
            const std::vector<double> ef(rf.begin(), rf.begin() + nc * rows), eq(rq.begin(), rq.begin() + nc * rows);
            EXPECT_LE(rel_err(y, ef), float_tol(t)) << t.name << " " << isa << " ncols " << nc;
            EXPECT_LE(rel_err(y, eq), t.act ? kQuantTol : 1e-5) << t.name << " " << isa << " ncols " << nc;
            if (nc == 8) per_isa.push_back(y);
            // run with fewer columns than prepared
            if (nc == 8) {
                std::vector<float> y3(3 * rows, NAN);
                run(p, 3, x.data(), y3.data());
                for (size_t i = 0; i < y3.size(); ++i) EXPECT_EQ(y3[i], y[i]);
            }
            provider().table->release(provider().state, p);
        }
    }
    // All paths agree closely.
    for (size_t i = 1; i < per_isa.size(); ++i) {
        std::vector<double> a(per_isa[0].begin(), per_isa[0].end());
        EXPECT_LE(rel_err(per_isa[i], a), 1e-5) << t.name << " path " << isas()[i] << " vs portable";
    }
}

TEST_P(PerType, OddRowsAndThreads) {
    const TypeDesc t = GetParam();
    std::mt19937_64 rng(2000 + t.type);
    const size_t cols = t.block == 1 ? 256 : t.block * 2;
    for (size_t rows : {1, 2, 5, 37, 131}) {
        const std::vector<uint8_t> w = random_weights(t, rows * cols / t.block, rng);
        const std::vector<float> x = random_x(4 * cols, rng);
        std::vector<double> rf(4 * rows), rq(4 * rows);
        for (int j = 0; j < 4; ++j)
            reference(t, w.data(), rows, cols, x.data() + j * cols, rf.data() + j * rows, rq.data() + j * rows);
        for (const char *thr : {"1", "3", "0"}) {
            Opts o("auto", thr);
            const kpr_op_desc op = make_op(t.type, 4, rows, cols);
            kpr_prepared *p = prepare(op, &o.set, w);
            ASSERT_NE(p, nullptr);
            std::vector<float> y(4 * rows, NAN);
            run(p, 4, x.data(), y.data());
            EXPECT_LE(rel_err(y, rq), t.act ? kQuantTol : 1e-5) << t.name << " rows " << rows << " threads " << thr;
            provider().table->release(provider().state, p);
        }
    }
}

TEST_P(PerType, Grouped) {
    const TypeDesc t = GetParam();
    std::mt19937_64 rng(3000 + t.type);
    const uint32_t ne = 8, nu = 2;
    const size_t rows = 45, cols = t.block == 1 ? 96 : t.block * 2;
    const size_t rb = cols / t.block * t.bytes;
    const std::vector<uint8_t> w = random_weights(t, ne * rows * cols / t.block, rng);
    for (uint32_t xs : {1u, 2u}) {
        for (uint32_t nc : {1u, 3u, 8u}) {
            const std::vector<float> x = random_x(nc * xs * cols, rng);
            std::vector<int32_t> ids(nc * nu);
            for (auto &id : ids) id = (int32_t)(rng() % ne);
            if (nc >= 3) ids[2] = ids[0]; // two columns on one expert
            if (nc == 8) ids[5] = ids[4]; // one column on the same expert twice
            for (const std::string &isa : isas()) {
                Opts o(isa.c_str(), "2");
                const kpr_op_desc op = make_op(t.type, nc, rows, cols, KPR_OP_GEMV_GROUPED, ne, nu, xs);
                kpr_prepared *p = prepare(op, &o.set, w);
                ASSERT_NE(p, nullptr);
                std::vector<float> y(nc * nu * rows, NAN);
                run(p, nc, x.data(), y.data(), ids.data());
                std::vector<double> rf(y.size()), rq(y.size());
                for (uint32_t j = 0; j < nc; ++j)
                    for (uint32_t s = 0; s < nu; ++s) {
                        const float *xv = x.data() + ((size_t)j * xs + (xs == 1 ? 0 : s)) * cols;
                        const size_t o2 = ((size_t)j * nu + s) * rows;
                        reference(t, w.data() + (size_t)ids[j * nu + s] * rows * rb, rows, cols, xv, rf.data() + o2,
                                  rq.data() + o2);
                    }
                EXPECT_LE(rel_err(y, rf), float_tol(t)) << t.name << " " << isa << " xs " << xs << " nc " << nc;
                EXPECT_LE(rel_err(y, rq), t.act ? kQuantTol : 1e-5) << t.name << " " << isa << " xs " << xs;
                provider().table->release(provider().state, p);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, PerType, ::testing::ValuesIn(all_types()),
                         [](const ::testing::TestParamInfo<TypeDesc> &i) { return std::string(i.param.name); });

TEST(GenericCpu, ConcurrentRunsOnOnePreparedOp) {
    const TypeDesc t = all_types()[11]; // q4_K
    ASSERT_EQ(t.type, (uint32_t)KPR_TYPE_Q4_K);
    std::mt19937_64 rng(99);
    const size_t rows = 512, cols = 1024;
    const std::vector<uint8_t> w = random_weights(t, rows * cols / t.block, rng);
    Opts o("auto", "2");
    const kpr_op_desc op = make_op(t.type, 4, rows, cols);
    kpr_prepared *p = prepare(op, &o.set, w);
    ASSERT_NE(p, nullptr);
    std::vector<std::vector<float>> xs(4), expect(4);
    for (int i = 0; i < 4; ++i) {
        xs[i] = random_x(4 * cols, rng);
        expect[i].assign(4 * rows, 0.0f);
        run(p, 4, xs[i].data(), expect[i].data());
    }
    std::atomic<int> mismatches{0}, failures{0};
    std::vector<std::thread> th;
    for (int i = 0; i < 4; ++i)
        th.emplace_back([&, i] {
            std::vector<float> y(4 * rows);
            for (int it = 0; it < 50; ++it) {
                kpr_run_args a{sizeof a, 4, xs[i].data(), y.data(), nullptr, nullptr};
                kpr_error err{sizeof err, {0}};
                if (provider().table->run(provider().state, p, &a, &err) != KPR_OK) ++failures;
                if (std::memcmp(y.data(), expect[i].data(), y.size() * 4) != 0) ++mismatches;
            }
        });
    for (auto &x : th) x.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(mismatches.load(), 0);
    provider().table->release(provider().state, p);
}

TEST(GenericCpu, SelfTestCases) {
    const kpr_provider_v1 *t = provider().table;
    const uint32_t n = t->selftest_count(provider().state, &device());
    ASSERT_GT(n, 17u * 5);
    std::set<std::string> names;
    std::set<uint32_t> types;
    for (uint32_t i = 0; i < n; ++i) {
        kpr_selftest_case c{};
        c.struct_size = sizeof c;
        kpr_error err{sizeof err, {0}};
        ASSERT_EQ(t->selftest_get(provider().state, &device(), i, &c, &err), KPR_OK) << err.message;
        EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
        types.insert(c.op.weight_type);
        EXPECT_GT(c.tolerance, 0.0);
        kpr_option_set os{sizeof os, c.n_options, c.options};
        const kpr_offer off = query(c.op, &os);
        EXPECT_EQ(off.accepted, 1u) << c.name << ": " << off.reason;
    }
    EXPECT_EQ(types.size(), all_types().size());
    kpr_selftest_case c{};
    c.struct_size = sizeof c;
    kpr_error err{sizeof err, {0}};
    EXPECT_EQ(t->selftest_get(provider().state, &device(), n, &c, &err), KPR_ERR_INVALID_ARGUMENT);
}

// One-hot weights read back each quantized activation, so every path's q8_0 / q8_K rounding (ties
// included) must match ggml's exactly: q8_0 rounds half away from zero, q8_K half to even.
TEST(GenericCpu, ActivationRoundingMatchesGgml) {
    const uint16_t one = f2h(1.0f);
    // q8_0 through Q8_0 weights: row r = one-hot at element r (32 x 64).
    {
        const size_t cols = 64, rows = 64;
        std::vector<uint8_t> w(rows * 2 * 34, 0);
        for (size_t r = 0; r < rows; ++r) {
            for (size_t b = 0; b < 2; ++b) put16(w.data() + (r * 2 + b) * 34, one);
            w[(r * 2 + r / 32) * 34 + 2 + r % 32] = 1;
        }
        std::vector<float> x(cols);
        x[0] = 127.0f; // d = 1 for block 0: ties at .5
        for (size_t i = 1; i < 32; ++i) x[i] = (float)((int)i % 9 - 4) + ((i & 1) ? 0.5f : -0.5f);
        x[32] = -63.5f; // block 1: d = 0.5
        for (size_t i = 33; i < 64; ++i) x[i] = 0.25f * (float)((int)i - 48);
        const std::vector<double> xr = round_q8_0(x.data(), cols);
        for (const std::string &isa : isas()) {
            Opts o(isa.c_str(), "1");
            kpr_prepared *p = prepare(make_op(KPR_TYPE_Q8_0, 1, rows, cols), &o.set, w);
            ASSERT_NE(p, nullptr);
            std::vector<float> y(rows);
            run(p, 1, x.data(), y.data());
            for (size_t r = 0; r < rows; ++r) EXPECT_EQ((double)y[r], xr[r]) << isa << " q8_0 element " << r;
            provider().table->release(provider().state, p);
        }
    }
    // q8_K through Q4_K weights: d = 1, dmin = 0, every scale 1, nibble 1 at element r (256 x 256).
    {
        const size_t cols = 256, rows = 256;
        std::vector<uint8_t> w(rows * 144, 0);
        const uint8_t scales[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
        for (size_t r = 0; r < rows; ++r) {
            uint8_t *b = w.data() + r * 144;
            put16(b, one);
            std::memcpy(b + 4, scales, 12);
            const size_t c = r / 64, l = r % 64;
            b[16 + 32 * c + (l % 32)] = l < 32 ? 0x01 : 0x10;
        }
        std::vector<float> x(cols);
        for (size_t i = 0; i < cols; ++i) x[i] = (float)((int)(i % 13) - 6) + 0.5f; // x * iscale hits .5 exactly
        x[7] = -127.0f;                                                                // max: iscale = 1
        x[100] = 127.0f;                                                               // same magnitude, later
        const std::vector<double> xr = round_q8_K(x.data(), cols);
        for (const std::string &isa : isas()) {
            Opts o(isa.c_str(), "1");
            kpr_prepared *p = prepare(make_op(KPR_TYPE_Q4_K, 1, rows, cols), &o.set, w);
            ASSERT_NE(p, nullptr);
            std::vector<float> y(rows);
            run(p, 1, x.data(), y.data());
            for (size_t r = 0; r < rows; ++r) EXPECT_EQ((double)y[r], xr[r]) << isa << " q8_K element " << r;
            provider().table->release(provider().state, p);
        }
    }
}

// The shared ggml reference vectors (tests/data): our result must be within ggml's own distance of the
// float reference (y.*), and, for the types whose activations we quantize exactly as ggml's CPU path
// does, essentially equal to ggml's own CPU result (yg.*).
#include "gguf_mini.h"

TEST(GenericCpu, GgmlReferenceVectors) {
    const std::string dir = KPR_TEST_DATA_DIR;
    std::unique_ptr<GgufFile> wf, xf, ef;
    try {
        wf = std::make_unique<GgufFile>(dir + "/weights.gguf");
        xf = std::make_unique<GgufFile>(dir + "/activations.gguf");
        ef = std::make_unique<GgufFile>(dir + "/expected.gguf");
    } catch (const std::exception &e) {
        GTEST_SKIP() << "reference vectors not available: " << e.what();
    }
    int checked = 0;
    for (const auto &[name, wt] : wf->tensors()) {
        // w.<type>.<rows>x<K>
        const size_t d1 = name.find('.', 2);
        const std::string token = name.substr(2, d1 - 2), shape = name.substr(d1 + 1);
        const uint64_t K = wt.ne[0], rows = wt.ne[1];
        const TypeDesc *t = nullptr;
        for (const TypeDesc &c : all_types())
            if (c.type == wt.type) t = &c;
        ASSERT_NE(t, nullptr) << name;
        const size_t bytes = rows * (K / t->block) * t->bytes;
        std::vector<uint8_t> w(wt.data, wt.data + bytes);
        for (uint32_t nc : {1u, 4u, 8u}) {
            const GgufTensor *x = xf->find("x." + std::to_string(K) + "." + std::to_string(nc));
            const GgufTensor *y = ef->find("y." + token + "." + shape + "." + std::to_string(nc));
            const GgufTensor *yg = ef->find("yg." + token + "." + shape + "." + std::to_string(nc));
            ASSERT_TRUE(x && y && yg) << name << " ncols " << nc;
            const float *xv = reinterpret_cast<const float *>(x->data);
            std::vector<double> ref(rows * nc), refg(rows * nc);
            for (size_t i = 0; i < ref.size(); ++i) {
                float a, b;
                std::memcpy(&a, y->data + 4 * i, 4);
                std::memcpy(&b, yg->data + 4 * i, 4);
                ref[i] = a;
                refg[i] = b;
            }
            // ggml's own distance from the reference for this case, for the bound below.
            const std::vector<float> ggml_out(refg.begin(), refg.end());
            const double ggml_err = rel_err(ggml_out, ref);
            std::vector<float> xcopy(xv, xv + K * nc);
            for (const std::string &isa : isas()) {
                Opts o(isa.c_str(), "2");
                kpr_prepared *p = prepare(make_op(t->type, nc, rows, K), &o.set, w);
                ASSERT_NE(p, nullptr);
                std::vector<float> out(rows * nc);
                run(p, nc, xcopy.data(), out.data());
                provider().table->release(provider().state, p);
                const double e = rel_err(out, ref);
                if (t->act == 0) {
                    EXPECT_LE(e, 1e-5) << name << " ncols " << nc << " " << isa;
                } else {
                    EXPECT_LE(e, ggml_err * 1.05 + 1e-5) << name << " ncols " << nc << " " << isa;
                    EXPECT_LE(rel_err(out, refg), 2e-5) << name << " ncols " << nc << " " << isa << " vs ggml";
                }
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 0);
}
