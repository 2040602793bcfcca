// Engine side of the installed SDK: create a runtime that sees the provider folder given as argv[1],
// negotiate a q8_0 gemv with the template provider only, run it, and check it against the core's
// double-precision reference. Prints "consumer ok" on success.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/runtime.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s PROVIDER_DIR\n", argv[0]);
        return 2;
    }
    try {
        kpr::RuntimeOptions o;
        o.provider_paths = {argv[1]};
        o.use_environment = false;
        o.probe_gpus = false;
        kpr::Runtime rt = kpr::Runtime::create(o);
        const uint64_t rows = 64, cols = 256;
        const uint32_t ncols = 2;
        auto plan = rt.plan(kpr::gemv(KPR_TYPE_Q8_0, rows, cols, ncols), "cpu", "example_q8");
        if (!plan->ok()) {
            std::fprintf(stderr, "%s", plan->explain().c_str());
            return 1;
        }
        std::vector<kpr_block_q8_0> w(rows * cols / KPR_QK);
        kpr::formats::fill_random_blocks(KPR_TYPE_Q8_0, 7, w.data(), w.size());
        std::vector<float> x(ncols * cols), y(ncols * rows, NAN);
        kpr::formats::fill_random_floats(11, x.data(), x.size());
        kpr::PreparedOp op = plan->prepare(w.data(), w.size() * sizeof(kpr_block_q8_0));
        op.run(x.data(), y.data(), ncols);
        double max_err = 0, max_ref = 0;
        for (uint32_t j = 0; j < ncols; ++j)
            for (uint64_t r = 0; r < rows; ++r) {
                const double ref = kpr::formats::dot_row(KPR_TYPE_Q8_0, &w[r * cols / KPR_QK], &x[j * cols], cols);
                max_err = std::fmax(max_err, std::fabs(y[j * rows + r] - ref));
                max_ref = std::fmax(max_ref, std::fabs(ref));
            }
        const double rel = max_err / max_ref;
        std::printf("provider %s, kpr %s, max|y - ref| / max|ref| = %.3e\n", op.provider().c_str(), kpr::version().c_str(), rel);
        if (!(rel < 1e-5)) return 1;
        std::printf("consumer ok\n");
        return 0;
    } catch (const kpr::Error &e) {
        std::fprintf(stderr, "kpr: %s\n", e.what());
        return 1;
    }
}
