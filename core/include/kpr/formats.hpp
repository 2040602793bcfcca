// kpr/formats.hpp -- the reference truth for GGML weight block formats.
//
// Every provider is tested against what is declared here: block geometry, dequantization exactly as
// ggml's `to_float`, a double-precision dot product, and the activation quantizers ggml's kernels use
// (q8_0, q8_1, q8_K) so a reference can round its activations the same way a kernel does.
//
// All functions are thread-safe and allocation-light. Errors are thrown as kpr::Error.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <kpr/ggml_blocks.h>

namespace kpr::formats {

// One GGML type. `supported` types have a dequantizer and a dot product here; the others are known
// (the GGUF reader accepts and sizes them) but nothing computes with them.
struct TypeInfo {
    uint32_t id;          // GGML type id (also GGUF's)
    const char *name;     // ggml's name: "f32", "q8_0", "q4_K", "iq3_xxs", "bf16"
    uint32_t block_size;  // elements per block (1 for F32/F16/BF16)
    uint32_t block_bytes; // bytes per block
    bool supported;
};

// Null for an id ggml does not define (4, 5, 31.. except the few listed known-but-unsupported ones).
const TypeInfo *type_info(uint32_t id);
// Case-insensitive ggml name ("Q4_K", "q4_k", "iq3_xxs"); nullopt when unknown.
std::optional<uint32_t> type_from_name(std::string_view name);
// The supported types, in id order.
std::vector<const TypeInfo *> supported_types();
// The name of `id`, or "type#<id>" for an unknown one (for messages).
std::string type_name(uint32_t id);

// Bytes of `cols` elements of `type`. Throws kpr::Error for an unknown type, cols not a multiple of
// the block size, or a size that overflows uint64.
uint64_t row_bytes(uint32_t type, uint64_t cols);

// IEEE binary16 / bfloat16 <-> binary32. The conversions to 16 bits round to nearest even; NaN stays
// NaN (quiet), overflow goes to infinity.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// Dequantize `n` elements (a multiple of the block size) from `src`, exactly as ggml's to_float.
// Throws kpr::Error for an unsupported type or n not a multiple of the block.
void dequantize_row(uint32_t type, const void *src, float *dst, uint64_t n);

// sum_k (double)dequant(row)[k] * (double)x[k], accumulated in double in increasing k.
double dot_row(uint32_t type, const void *row, const float *x, uint64_t n);

// ---- activation quantizers, as ggml defines them ---------------------------------------------------
// q8_0: per 32 values d = amax/127, q = roundf(x * (1/d)) (half away from zero), d stored f16.
void quantize_q8_0(const float *x, kpr_block_q8_0 *dst, uint64_t n);
// q8_1, as ggml's CUDA quantizer writes it: d = amax/127, q = roundf(x / d), d stored f16, and
// s = f16(sum of the unquantized floats of the block).
void quantize_q8_1(const float *x, kpr_block_q8_1 *dst, uint64_t n);
// q8_K: per 256 values, max = the element of largest magnitude (with its sign), iscale = -127/max,
// q = min(127, nearest_int(iscale * x)) (ties to even), d = 1/iscale (f32), bsums = sum of each 16.
// An all-zero block has d = 0 and q = 0.
void quantize_q8_K(const float *x, kpr_block_q8_K *dst, uint64_t n);
// The Q8_0 weight quantizer (ggml's quantize_row_q8_0_ref): bit-identical to quantize_q8_0.
void quantize_row_q8_0(const float *x, void *dst, uint64_t n);

// How a kernel rounds its activations before the dot product (values match kpr_activation_rounding;
// F16 is an extension: activations rounded to binary16, as ggml's CPU does for F16 weights).
enum class ActRounding : uint32_t { Float = 0, Q8_0 = 1, Q8_1 = 2, Q8_K = 3, F16 = 4 };
const char *act_rounding_name(ActRounding r);

// Round x[0..n) as `r` says (quantize, then dequantize with the stored d: f16 for q8_0/q8_1, f32 for
// q8_K). n must be a multiple of the rounding's block (32 or 256).
void round_activations(ActRounding r, const float *x, float *dst, uint64_t n);

// dot_row against the rounded activations: the reference that rounds activations like the kernel.
double dot_row_rounded(uint32_t type, const void *row, const float *x, uint64_t n, ActRounding r);

// The activation rounding ggml's CPU vec_dot uses for a weight type: Q8_0 for q8_0/q4_0/q5_0/iq4_nl and
// also for q4_1/q5_1 (ggml's CPU pairs those with q8_1, whose values it rounds exactly as q8_0's: x * (1/d);
// ActRounding::Q8_1 is the CUDA quantizer's x / d), Q8_K for the K-quants and IQ types, F16 for f16,
// Float for f32 and bf16 (ggml rounds bf16's activations to bf16; not modelled).
ActRounding ggml_cpu_act_rounding(uint32_t type);

// ---- random data -----------------------------------------------------------------------------------
// `n_blocks` valid random blocks of `type`, deterministic per seed: finite f16 scales of the size a
// quantization of ~N(0, 0.02) weights produces; random quant fields. F32/F16/BF16: 0.02 * an approximate
// N(0,1) (sum of four uniforms, bounded by +-3.46), rounded to the type.
void fill_random_blocks(uint32_t type, uint64_t seed, void *dst, uint64_t n_blocks);
// N(0,1), deterministic per seed (splitmix64 + Box-Muller).
void fill_random_floats(uint64_t seed, float *dst, uint64_t n);

// ---- checks --------------------------------------------------------------------------------------
// CRC-32 (IEEE 802.3, as zlib's crc32) of `bytes`.
uint32_t crc32(const void *data, uint64_t bytes, uint32_t crc = 0);
// Compares the codebooks of ggml_blocks.h with their KPR_*_CRC32 constants; throws kpr::Error naming
// the table that does not match.
void verify_tables();

} // namespace kpr::formats
