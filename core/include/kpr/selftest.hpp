// kpr/selftest.hpp -- running providers' self-test cases against the core's double-precision reference.
//
// Each run draws fresh random weights and activations from a seed (printed; pass it back to reproduce),
// poisons outputs with NaN and surrounds every buffer with guard bytes, checks every element, and
// reports max|y - ref| / max|ref| against the case's tolerance. A kernel that rounds its activations
// (q8_0, q8_1, q8_K) is also checked against a reference that rounds them the same way and then computes
// in double, within the case's quantized tolerance: only float rounding separates it from a correct kernel.
#pragma once

#include <kpr/runtime.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kpr {

struct SelftestOptions {
    std::string provider;   // "" = every loaded provider for the device
    std::string device = "cpu";
    uint64_t seed = 0;      // 0 = draw one (reported in each result)
    std::string filter;     // substring of the case name; "" = all
};

struct SelftestResult {
    std::string provider, device, case_name, kind;  // kind: reference, parity, internal
    std::string op;                                 // describe(op)
    double error = 0, tolerance = 0;                // vs the float reference
    double quantized_error = -1, quantized_tolerance = 0;  // vs the rounded-activation reference (-1: n/a)
    std::string act_rounding;                       // "float", "q8_0", "q8_1", "q8_K"
    double ms = 0;                                  // the provider's run, wall time incl. synchronisation
    uint64_t seed = 0;
    enum class Outcome { Passed, Failed, Skipped } outcome = Outcome::Passed;
    std::string message;                            // why it failed or was skipped
};
const char *to_string(SelftestResult::Outcome o);

// Runs the cases; `progress` (optional) is called after each one. Never throws for a provider's
// failure (it is a failed result); throws kpr::Error for bad options (unknown device or provider).
std::vector<SelftestResult> run_selftests(const Runtime &rt, const SelftestOptions &opts,
                                          const std::function<void(const SelftestResult &)> &progress = {});

} // namespace kpr
