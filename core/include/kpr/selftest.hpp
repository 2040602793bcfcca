// kpr/selftest.hpp -- running providers' self-test cases against the core's double-precision reference.
//
// Each run draws fresh random weights and activations from a seed (printed; pass it back to reproduce),
// poisons outputs with NaN and surrounds every buffer with guard bytes, checks every element, and
// reports max|y - ref| / max|ref| against the case's tolerance. A kernel that rounds its activations
// (q8_0, q8_1, q8_K) is also checked against a reference that rounds them the same way and then computes
// in double, within the case's quantized tolerance: only float rounding separates it from a correct kernel.
#pragma once

#include <kpr/config.hpp>
#include <kpr/runtime.hpp>

#include <filesystem>

#include <functional>
#include <string>
#include <vector>

namespace kpr {

struct SelftestOptions {
    std::string provider;   // "" = every loaded provider for the device
    std::string device = "cpu";
    uint64_t seed = 0;      // 0 = draw one (reported in each result)
    std::string filter;     // substring of the case name; "" = all

    // Contained: each provider's cases run in a child process (child_command, fork + exec), so a case
    // that crashes or hangs fails that provider ("crashed: signal 11 in case q8_0 4096x4096 ncols 3",
    // "hung: ...") and the run goes on with the next case in a fresh child. Off: in this process.
    bool contained = false;
    // argv of the runner, up to (and including) its subcommand; the runner is given
    //   --provider P --device D --seed S [--filter F] --from N --result-fd 3
    // and speaks run_selftest_child's protocol. `kpr selftest` passes {kpr, globals..., "selftest-child"}.
    std::vector<std::string> child_command;
    double case_timeout_s = 60;   // contained: a case running longer is killed and reported as hung
    double startup_timeout_s = 60; // contained: the child's start-up (probe, config, loading) before the first case
    uint32_t first_case = 0;      // start at this case index (the child runner uses it to resume)
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

// What a self-test case checks, read without running it (`kpr selftest --list`).
struct SelftestCaseInfo {
    std::string provider, device, case_name, kind;  // kind: reference, parity, internal
    std::string op;                                 // describe(op); "" for internal cases
    std::string act_rounding;                       // as SelftestResult; "-" for internal cases
    std::string parity_provider;                    // parity cases: the provider compared with
    double tolerance = 0, quantized_tolerance = 0;  // quantized_tolerance: 0 where act_rounding is float or "-"
    std::string error; // non-empty: the provider could not describe this case (or, case_name "(enumerate)", any)
};

// The cases run_selftests would run with `opts` (its provider, device and filter; the seed, containment and
// first_case do not matter), read from each provider's case table in this process. No case runs and nothing is
// allocated on the device. A case the provider cannot describe is listed with its error. Throws kpr::Error for an
// unknown device or provider, or a simulated device (as run_selftests).
std::vector<SelftestCaseInfo> list_selftests(const Runtime &rt, const SelftestOptions &opts);

// The child side of a contained run: runs `opts.provider`'s cases on `opts.device` from opts.first_case
// in this process and reports each on `fd`, one line per event:
//   "T <count>", "B <index>" (about to run), "R <result JSON>" (finished), "E" (all done).
// Returns the exit status for the runner (0, or 1 when the options are bad: the message goes to stderr).
int run_selftest_child(const Runtime &rt, const SelftestOptions &opts, int fd);

// ---- quarantine: self-test failures remembered on this machine ------------------------------------
//
// `kpr selftest` (and `kpr doctor`) record, per provider and device, the first failure of the last run
// that failed, with the SHA-256 of the library that failed; a later clean full run removes the record.
// With quarantine_on_failure = true (for all providers in [runtime], or per provider), negotiation
// declines a provider that has a record for the device and whose library still has that hash, with the
// recorded reason. Rebuilding or replacing the library lifts the quarantine.
struct SelftestRecord {
    std::string provider, device, file, sha256, reason, when, host;
};

// [runtime] state_file; else $XDG_STATE_HOME/kpr/selftest-state.json; else
// ~/.local/state/kpr/selftest-state.json. Under secure execution (setuid, capabilities) only the config
// key counts. Empty when none can be determined.
std::filesystem::path selftest_state_file(const Config &config);
// The records in `file`; empty when it does not exist. A malformed file is reported through *warning
// (when given) and reads as empty.
std::vector<SelftestRecord> read_selftest_state(const std::filesystem::path &file, std::string *warning = nullptr);
// Folds a run's results into the state file of `rt`'s config: providers that failed on a device get a
// record; providers that ran every case on a device without a failure lose theirs when `complete` (the
// run was not filtered). Returns "" or a warning (the file could not be written).
std::string record_selftest_results(const Runtime &rt, const std::vector<SelftestResult> &results, bool complete);

namespace detail {
// Self-tests must reach a quarantined provider: while set on this thread, queries ignore quarantine.
void set_quarantine_bypass(bool on);
} // namespace detail

} // namespace kpr
