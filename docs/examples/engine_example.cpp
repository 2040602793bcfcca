// engine_example: how an inference engine uses kpr, start to finish.
//
//   1. Runtime::create   probe the machine, read the config, load the providers
//   2. Runtime::plan     negotiate which provider serves this op on this device (cached per key)
//   3. Plan::prepare     bind the weights once (the provider may repack them)
//   4. PreparedOp::run   the kernel, as often as wanted, from any thread
//
// It quantizes a random matrix to Q8_0, runs y = W . x for three activation columns through whichever
// provider wins, and checks every output against kpr::formats::dot_row (the core's double-precision
// reference with activations rounded as the kernel says it rounds them). Exit status 0 when it matches.
//
// Built and run as a test (tests/unit/CMakeLists.txt registers it as `engine_example`).
#include <kpr/formats.hpp>
#include <kpr/runtime.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

int main() {
    try {
        const uint64_t rows = 256, cols = 1024;
        const uint32_t ncols = 3;

        // 1. The runtime: the config from KPR_CONFIG (if set), providers from the usual search path.
        kpr::Runtime rt = kpr::Runtime::create();

        // 2. Negotiate the op on the CPU; explain() says why when nothing serves it.
        const kpr_op_desc op = kpr::gemv(KPR_TYPE_Q8_0, rows, cols, ncols);
        std::shared_ptr<const kpr::Plan> plan = rt.plan(op, "cpu");
        if (!plan->ok()) {
            std::fprintf(stderr, "nothing serves %s:\n%s", kpr::describe(op).c_str(), plan->explain().c_str());
            return 1;
        }
        std::printf("%s -> %s (%s)\n", kpr::describe(op).c_str(), plan->provider().c_str(), plan->decision().c_str());

        // Weights: random floats quantized to Q8_0 blocks, as they would come out of a GGUF file.
        std::mt19937 rng(2024);
        std::normal_distribution<float> normal(0.f, 1.f);
        std::vector<float> wf(rows * cols), x(ncols * cols), y(ncols * rows, NAN);
        for (auto &v : wf) v = 0.02f * normal(rng);
        for (auto &v : x) v = normal(rng);
        const uint64_t row_bytes = kpr::formats::row_bytes(KPR_TYPE_Q8_0, cols);
        std::vector<uint8_t> w(kpr::weight_bytes(op));
        for (uint64_t r = 0; r < rows; ++r) kpr::formats::quantize_row_q8_0(&wf[r * cols], &w[r * row_bytes], cols);

        // 3. Bind the weights once. They stay owned by us and must outlive the prepared op.
        kpr::PreparedOp prepared = plan->prepare(w.data(), w.size());

        // 4. Run: y[ncols][rows] = W[rows][cols] . x[ncols][cols].
        prepared.run(x.data(), y.data(), ncols);

        // Check against the reference. The provider rounds activations to q8_0 like ggml's CPU, so
        // compare with the same rounding tightly and with the float reference loosely.
        const auto rounding = kpr::formats::ggml_cpu_act_rounding(KPR_TYPE_Q8_0);
        double max_err = 0, max_err_float = 0, max_ref = 0;
        for (uint32_t j = 0; j < ncols; ++j)
            for (uint64_t r = 0; r < rows; ++r) {
                const float got = y[j * rows + r];
                const double ref_rounded =
                    kpr::formats::dot_row_rounded(KPR_TYPE_Q8_0, &w[r * row_bytes], &x[j * cols], cols, rounding);
                const double ref = kpr::formats::dot_row(KPR_TYPE_Q8_0, &w[r * row_bytes], &x[j * cols], cols);
                if (!std::isfinite(got)) {
                    std::fprintf(stderr, "y[%u][%llu] = %g\n", j, (unsigned long long)r, got);
                    return 1;
                }
                max_err = std::max(max_err, std::fabs(got - ref_rounded));
                max_err_float = std::max(max_err_float, std::fabs(got - ref));
                max_ref = std::max(max_ref, std::fabs(ref));
            }
        const double rel = max_err / max_ref, rel_float = max_err_float / max_ref;
        std::printf("max relative error %.3g vs the q8_0-rounded reference, %.3g vs the float reference\n", rel,
                    rel_float);
        if (!(rel <= 1e-4) || !(rel_float <= 3e-2)) {
            std::fprintf(stderr, "engine_example: %s does not match the reference\n", plan->provider().c_str());
            return 1;
        }
        std::printf("ok\n");
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "engine_example: %s\n", e.what());
        return 1;
    }
}
