// kpr/requant.hpp -- rewrite a GGUF model with chosen tensors converted to Q8_0 (`kpr requant`).
//
// Tensors whose name matches one of the patterns are dequantized from whatever type they had
// (formats::dequantize_row, exactly as ggml) and quantized to Q8_0 (formats::quantize_row_q8_0, ggml's
// reference quantizer), so a Q8_0-only provider such as sm60_q8 can serve them. Everything else --
// metadata (every key, in order, with its type), tensor order, the alignment, the other tensors' bytes --
// is kept. Split models (name-00001-of-00003.gguf) are handled as a set: shards holding a converted
// tensor are rewritten, the others hard-linked (or copied).
//
// Safety: the input is never written; an existing output is refused unless `force`; every output is
// written under a temporary name and renamed into place only when the whole set is written, so an error
// or an interruption leaves no file under a final name (and removes the temporaries).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kpr::requant {

// The default --match: dense attention and FFN projections and the output head, not the experts
// (ffn_*_exps) nor the shared experts (ffn_*_shexp), not embeddings, norms or biases.
const char *default_pattern();

struct Options {
    std::vector<std::string> match;  // ECMAScript regexes searched in the tensor name; empty = default_pattern()
    bool copy = false;               // copy unchanged shards instead of hard-linking them
    bool force = false;              // replace existing outputs (never the input)
    unsigned threads = 0;            // 0 = hardware concurrency
};

struct TensorReport {
    std::string file;             // the output shard it lands in
    std::string name;
    uint32_t from_type = 0, to_type = 0;
    std::vector<uint64_t> ne;
    enum class Action { Converted, Kept } action = Action::Kept;
    double max_abs = 0;           // max |w| of the original
    double max_err = 0;           // max |w' - w|
    double rel_error = 0;         // max_err / max_abs (0 when max_abs is 0)
    std::string note;             // why a matching tensor was kept ("cols 100 not a multiple of 32", ...)
};

struct ShardReport {
    std::string input, output;
    enum class Action { Written, HardLinked, Copied } action = Action::Written;
    size_t converted = 0;         // tensors converted in this shard
    std::string note;             // e.g. "hard link failed (cross-device), copied"
};

struct Report {
    std::vector<ShardReport> shards;
    std::vector<TensorReport> tensors;  // every matching tensor, converted or kept with a note
    size_t converted() const;
};

// The shard set of `path`: itself alone, or every name-0000K-of-0000N.gguf for K = 1..N (all must exist).
std::vector<std::string> shard_set(const std::string &path);

// Runs the conversion. `progress` (optional) is called after each matching tensor is handled; an
// exception thrown from it aborts the run like any error (temporaries removed). Throws kpr::Error (exit
// code 2 for usage problems: bad regex, output == input, output exists without force).
Report run(const std::string &input, const std::string &output, const Options &options,
           const std::function<void(const TensorReport &)> &progress = {});

// For a SIGINT/SIGTERM handler: unlinks the temporaries of a run in progress. Async-signal-safe.
void remove_temporaries_from_signal_handler() noexcept;
// Installs SIGINT/SIGTERM/SIGHUP handlers that call remove_temporaries_from_signal_handler() and then
// die of the signal (the default action), as `kpr requant` does.
void install_signal_cleanup();

} // namespace kpr::requant
