// kpr_cuda_util.cuh -- small device helpers shared by every CUDA provider: f16/bf16 decoding, the byte
// dot product (__dp4a or its emulation), 2-byte-aligned shared-memory word loads, warp reductions,
// 16-byte streaming loads and the programmatic-dependent-launch hooks.
#pragma once

#include <cstdint>
#include <utility>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// KPR_ARCH: the architecture whose code paths the device pass compiles. Normally __CUDA_ARCH__;
// scripts/check-pascal sets KPR_CUDA_PTX_AS_ARCH=600/610 to compile the Pascal paths with a CUDA 13
// front end (which cannot target compute_6x itself) and assembles the PTX with CUDA 12.9's ptxas.
#if defined(__CUDA_ARCH__) && defined(KPR_CUDA_PTX_AS_ARCH)
#define KPR_ARCH KPR_CUDA_PTX_AS_ARCH
#elif defined(__CUDA_ARCH__)
#define KPR_ARCH __CUDA_ARCH__
#else
#define KPR_ARCH 0
#endif

namespace kpr::cuda {

__device__ __forceinline__ float f16_to_float(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float bf16_to_float(uint16_t h) {
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// Signed byte dot product, emulated: the same integer result as __dp4a(a, b, c), built from signed
// byte extracts and integer multiply-adds, for compute capability 6.0 (which has no DP4A) and for tests.
// The extracts are inline PTX (bfe.s32) so that the optimizer cannot fuse the sequence back into a
// dp4a instruction where the target has one (it does, for plain C++ shifts, when compiling for 6.1+).
__device__ __forceinline__ int sbyte(int v, int pos) {
    int r;
    asm("bfe.s32 %0, %1, %2, 8;" : "=r"(r) : "r"(v), "r"(pos));
    return r;
}
__device__ __forceinline__ int dp4a_emulated(int a, int b, int c) {
    c += sbyte(a, 0) * sbyte(b, 0);
    c += sbyte(a, 8) * sbyte(b, 8);
    c += sbyte(a, 16) * sbyte(b, 16);
    c += sbyte(a, 24) * sbyte(b, 24);
    return c;
}

// __dp4a where the architecture has it (6.1 and later), the emulation elsewhere. EMULATE forces the
// emulation (sm60_q8's emulate_dp4a option, so the 6.0 path runs and is tested on newer GPUs).
template <bool EMULATE = false>
__device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 610
    if constexpr (!EMULATE) {
        return __dp4a(a, b, c);
    }
#endif
    return dp4a_emulated(a, b, c);
}

// Shared-memory reads of the staged weight blocks. On compute capability 8.0+ they are explicit
// shared-space loads (LDS): the block pointers reach the decoders as generic pointers, and generic loads
// (LD) go through the L1TEX path that the cp.async weight copies keep busy; on the H200 the one-column
// kernels stalled mostly on them (ncu), and LDS made the types 0.5-6% faster at one and two columns
// (docs/cuda-tuning-log.md, "Where the one-column kernels wait"). Below 8.0 (the register-staged path) they stay plain C++ loads: the same PTX as
// before, whose register allocation scripts/check-pascal holds to no spills.
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
#define KPR_EXPLICIT_LDS 1
#else
#define KPR_EXPLICIT_LDS 0
#endif

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t a) {
    uint16_t v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(a) : "memory");
    return v;
}
// N words (N a multiple of 4) from a 16-byte-aligned shared address: 128-bit shared loads.
template <int N>
__device__ __forceinline__ void lds_words_v4(uint32_t a, uint32_t (&out)[N]) {
    static_assert(N % 4 == 0);
#pragma unroll
    for (int i = 0; i < N / 4; ++i)
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(out[4 * i + 0]), "=r"(out[4 * i + 1]), "=r"(out[4 * i + 2]), "=r"(out[4 * i + 3])
                     : "r"(a + 16u * i)
                     : "memory");
}

// Loads N 32-bit words starting at a 2-byte-aligned shared-memory address: N+1 aligned word loads and
// funnel shifts (GGUF blocks are only 2-byte aligned).
template <int N>
__device__ __forceinline__ void load_words_a2(const uint8_t *p, uint32_t (&out)[N]) {
#if KPR_EXPLICIT_LDS
    const uint32_t a = smem_addr(p);
    const uint32_t sh = (a & 3u) * 8u;
    uint32_t w[N + 1];
#pragma unroll
    for (int i = 0; i <= N; ++i) {
        if (i < N || sh != 0) w[i] = lds_u32((a & ~3u) + 4u * i);
        else w[i] = 0;
    }
#else
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t *base = reinterpret_cast<const uint32_t *>(a & ~uintptr_t(3));
    const uint32_t sh = static_cast<uint32_t>(a & 3u) * 8u;
    uint32_t w[N + 1];
#pragma unroll
    for (int i = 0; i <= N; ++i) {
        if (i < N || sh != 0) w[i] = base[i];
        else w[i] = 0;
    }
#endif
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

__device__ __forceinline__ uint16_t load_u16(const uint8_t *p) {
#if KPR_EXPLICIT_LDS
    uint16_t v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(smem_addr(p)) : "memory");
    return v;
#else
    return *reinterpret_cast<const uint16_t *>(p);
#endif
}

// Words that start 4-byte aligned.
template <int N>
__device__ __forceinline__ void load_words_a4(const uint8_t *p, uint32_t (&out)[N]) {
#if KPR_EXPLICIT_LDS
    const uint32_t a = smem_addr(p);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = lds_u32(a + 4u * i);
#else
    const uint32_t *w = reinterpret_cast<const uint32_t *>(p);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = w[i];
#endif
}

// Words that start 8-byte aligned (N even): 64-bit shared loads.
template <int N>
__device__ __forceinline__ void load_words_a8(const uint8_t *p, uint32_t (&out)[N]) {
    static_assert(N % 2 == 0);
#if KPR_EXPLICIT_LDS
    const uint32_t a = smem_addr(p);
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];"
                     : "=r"(out[2 * i]), "=r"(out[2 * i + 1])
                     : "r"(a + 8u * i)
                     : "memory");
#else
    const uint2 *v = reinterpret_cast<const uint2 *>(p);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const uint2 t = v[i];
        out[2 * i] = t.x;
        out[2 * i + 1] = t.y;
    }
#endif
}

// Words that start 16-byte aligned (N a multiple of 4): 128-bit shared loads.
template <int N>
__device__ __forceinline__ void load_words_a16(const uint8_t *p, uint32_t (&out)[N]) {
    static_assert(N % 4 == 0);
#if KPR_EXPLICIT_LDS
    lds_words_v4<N>(smem_addr(p), out);
#else
    const uint4 *v = reinterpret_cast<const uint4 *>(p);
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
        const uint4 t = v[i];
        out[4 * i + 0] = t.x;
        out[4 * i + 1] = t.y;
        out[4 * i + 2] = t.z;
        out[4 * i + 3] = t.w;
    }
#endif
}

// PTX prmt in its generic mode: bytes of {b, a} picked by the four selector nibbles of c; a nibble
// with its top bit set replicates the sign bit of the picked byte (0x00 / 0xFF) instead of copying it.
// (__byte_perm is documented to use only the low three bits of each nibble.)
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// (a & b) ^ c in one instruction. Written as two operations with constant b and c, ptxas emits two
// LOP3s (an instruction takes one immediate); through PTX lop3 it keeps one, with c in a register.
__device__ __forceinline__ uint32_t and_xor(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); // 0x6A: (F0 & CC) ^ AA
    return d;
}

// Bits 4 half .. 4 half + 3 of the byte b (0..255) -> four bytes of 0x00 / 0xFF (bit 4 half + j -> byte j), without
// isolating the nibble first: the multiplier puts bit 4 half + 3 - j on the top bit of byte j, its four copies of b
// 9 bits apart and 8 bits wide (nothing overlaps, nothing carries), and the prmt replicates each top bit in reverse
// byte order. Two instructions; the same masks as nibble_to_bytemask((b >> (4 half)) & 0xF).
__device__ __forceinline__ uint32_t byte_half_to_bytemask(uint32_t b, uint32_t half) {
    return prmt(b * (half == 0 ? 0x80402010u : 0x08040201u), 0u, 0x89ABu);
}

// Per-byte sign select: bytes of g where m is 0x00, of -g where m is 0xFF (g's bytes in 1..127).
__device__ __forceinline__ uint32_t select_neg(uint32_t g, uint32_t m) {
    const uint32_t ng = 0x01010100u - g; // per-byte negation: no byte of g is 0, so no borrow crosses
    return (g & ~m) | (ng & m);
}

// Four bits -> four bytes of 0x00 / 0xFF (bit j -> byte j).
__device__ __forceinline__ uint32_t nibble_to_bytemask(uint32_t nib) {
    return ((nib * 0x00204081u) & 0x01010101u) * 0xFFu;
}

// Four bits -> four bytes of 0 / 1.
__device__ __forceinline__ uint32_t nibble_to_bytebits(uint32_t nib) {
    return (nib * 0x00204081u) & 0x01010101u;
}

// Per-byte negation where a mask byte is 0xFF (never carries: no grid byte is 0).
__device__ __forceinline__ uint32_t apply_sign_mask(uint32_t g, uint32_t m) {
    return (g ^ m) + (m & 0x01010101u);
}

// Per-byte v - sub with v, sub in [0, 127] and the result seen as int8 (no borrow between bytes).
__device__ __forceinline__ uint32_t bytes_sub(uint32_t v, uint32_t sub) {
    return ((v | 0x80808080u) - sub) ^ 0x80808080u;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// 16-byte streaming load of weights: read-only path, not kept in L1 (the activations live there).
__device__ __forceinline__ uint4 ldg_stream16(const void *p) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
#elif defined(__CUDA_ARCH__) && KPR_ARCH >= 700
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
#else
    return __ldg(reinterpret_cast<const uint4 *>(p));
#endif
}

// cp.async (compute capability 8.0+): 16 bytes global -> shared, cached in L2 only; with THROUGH_L1,
// also in L1 (cp.async.ca: for data that many warps of a multiprocessor copy, the activations).
template <bool THROUGH_L1 = false>
__device__ __forceinline__ void cp_async16(void *smem_dst, const void *gmem_src) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    const uint32_t d = smem_addr(smem_dst);
    if constexpr (THROUGH_L1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
    else
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
#else
    *reinterpret_cast<uint4 *>(smem_dst) = __ldg(reinterpret_cast<const uint4 *>(gmem_src));
#endif
}
// cp.async of the 16-byte aligned line at gmem_src of which only the first n bytes (1..16) are read; the
// rest of the 16 shared bytes are zero-filled (a line that may end past the data).
__device__ __forceinline__ void cp_async16_n(void *smem_dst, const void *gmem_src, uint32_t n) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem_dst)), "l"(gmem_src), "r"(n)
                 : "memory");
#else
    for (uint32_t i = 0; i < 16; ++i)
        static_cast<uint8_t *>(smem_dst)[i] = i < n ? static_cast<const uint8_t *>(gmem_src)[i] : uint8_t(0);
#endif
}
// Where a 2-byte aligned run of global bytes starts within its 16-byte line.
__device__ __forceinline__ uint32_t chunk_skew(const void *p) {
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)) & 15u;
}
// A warp's cp.async of the 16-byte lines that hold the run [src, src + bytes) (src 2-byte aligned), lane by
// lane, so that dst holds the run from byte chunk_skew(src) (< 16: the caller leaves the room); the last line
// copies only the run's own bytes (zero-filled), so nothing past the run is read.
__device__ __forceinline__ void cp_async_lines(uint8_t *dst, const uint8_t *src, uint32_t bytes, uint32_t lane) {
    const uint32_t skew = chunk_skew(src), span = skew + bytes;
    for (uint32_t v = lane; 16u * v < span; v += 32)
        cp_async16_n(dst + 16u * v, src - skew + 16u * v, min(16u, span - 16u * v));
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Bulk copies (compute capability 9.0): one instruction moves a whole 16-byte-aligned run of bytes
// global -> shared (the copy engine, not one load per lane), and completes on an mbarrier that counts
// the bytes it expects.
// Without them (KPR_BULK_COPY 0) the functions are empty and never called.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && KPR_ARCH >= 900
#define KPR_BULK_COPY 1
#else
#define KPR_BULK_COPY 0
#endif
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if KPR_BULK_COPY
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
// makes the initialised barriers visible to the copy engine
__device__ __forceinline__ void mbar_init_fence() {
#if KPR_BULK_COPY
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// orders this thread's earlier shared-memory reads before later copy-engine writes (a stage read into
// registers may be refilled by a bulk copy that lane 0 issues after a warp barrier)
__device__ __forceinline__ void fence_proxy_async_smem() {
#if KPR_BULK_COPY
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// this thread's arrival, and the bytes the phase waits for besides
__device__ __forceinline__ void mbar_arrive_expect(uint32_t bar, uint32_t bytes) {
#if KPR_BULK_COPY
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
#if KPR_BULK_COPY
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}
// cp.async of 8 bytes (both addresses 8-byte aligned), for runs that are not 16-byte aligned; completes
// on an mbarrier through cp_async_mbar_arrive
__device__ __forceinline__ void cp_async8(uint32_t dst, const void *src) {
#if KPR_BULK_COPY
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
#endif
}
// an arrival on bar once every cp.async this thread issued before has landed (noinc: the barrier's count
// includes this arrival)
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
#if KPR_BULK_COPY
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
#endif
}
// A 2-D tensor copy (the copy engine's tiled mode) of the box at element (x, y) of the tensor that map
// describes, into shared memory at dst (128-byte aligned); rows past the tensor's end arrive as zeros and
// count toward the barrier's bytes like the others. map: the address of a kernel parameter (TmaMap).
__device__ __forceinline__ void tensor_copy_2d_g2s(uint32_t dst, const void *map, int x, int y, uint32_t bar) {
#if KPR_BULK_COPY
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(dst),
                 "l"(map), "r"(x), "r"(y), "r"(bar)
                 : "memory");
#endif
}
// waits until the phase of the given parity has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if KPR_BULK_COPY
    uint32_t done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}

// Programmatic dependent launch (compute capability 9.0): a kernel launched with the attribute may
// start while the previous one (the activation quantizer) still runs; it must wait before reading
// what that one writes. No-ops elsewhere.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Launches `kernel` on `stream`; with `pdl`, with programmatic stream serialization (9.0: it may start
// while the kernel before it finishes, and meets it at pdl_wait()).
template <class... P, class... A>
inline cudaError_t launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, bool pdl,
                              cudaStream_t stream, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

// A tensor map (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned), built on the host by
// tma_map_2d and passed to a kernel as a __grid_constant__ parameter. Declared here rather than taken
// from cuda.h, which the CUDA 12 wheels that build the Pascal code do not ship.
struct alignas(64) TmaMap {
    uint64_t opaque[16];
};
static_assert(sizeof(TmaMap) == 128, "CUtensorMap is 128 bytes");
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
#define KPR_GRID_CONSTANT __grid_constant__
#else
#define KPR_GRID_CONSTANT
#endif

// The 2-D map of a row-major matrix of rows x row_bytes (16-byte aligned base, row_bytes a multiple of 16)
// in 4-byte elements, boxes of box_bytes x box_rows. cuTensorMapEncodeTiled through the runtime's driver
// entry point (so the provider needs no libcuda at link time). false: no driver support, or the shape is
// not one a map can describe (the caller takes another path).
inline bool tma_map_2d(TmaMap &m, const void *base, uint64_t row_bytes, uint32_t rows, uint32_t box_bytes,
                       uint32_t box_rows, int l2_promotion = 0) {
    using Encode = int (*)(void *, int, uint32_t, void *, const uint64_t *, const uint64_t *, const uint32_t *,
                           const uint32_t *, int, int, int, int);
    static const Encode encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
#else // CUDA 12.0-12.4 (the Pascal builds may use one): the unversioned query
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q);
#endif
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) return static_cast<Encode>(nullptr);
        return reinterpret_cast<Encode>(fn);
    }();
    if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || row_bytes % 16 != 0 || box_bytes % 16 != 0 ||
        box_bytes / 4 > 256 || box_rows > 256 || rows == 0)
        return false;
    const uint64_t dims[2] = {row_bytes / 4, rows}, strides[1] = {row_bytes};
    const uint32_t box[2] = {box_bytes / 4, box_rows}, estr[2] = {1, 1};
    // UINT32 elements (2), no interleave, no swizzle, the L2 promotion given, no float fill
    return encode(&m, 2, 2, const_cast<void *>(base), dims, strides, box, estr, 0, 0, l2_promotion, 0) == 0;
}

} // namespace kpr::cuda
