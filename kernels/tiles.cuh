// The all-pairs tile loop on the device, written once over a pair interaction: every target
// sums one interaction over every source (the GPU Gems 3 ch. 31 scheme). Included by each
// all-pairs family (biot_savart.cu: the regularised Biot–Savart law; gravity.cu: Plummer
// gravity), which supplies the interaction structs and instantiates the kernels with
// VPM_TILE_KERNEL. Compiled by NVRTC as the named header "tiles.cuh"
// (src/summation/direct/tiles.rs, TILE_HEADER; read from VPM_KERNELS_DIR when set).
//
// Options (-D), the launch shape (src/summation/direct/tiles.rs KernelConfig):
//   VPM_DOUBLE   real = double (the reference build); default float
//   VPM_BLOCK    threads per block = sources per shared-memory tile (default 256)
//   VPM_TPT      targets per thread (register blocking; default 2)
//   VPM_UNROLL   unroll factor of the loop over one tile's sources (default 4)
//   VPM_MINB     minimum resident blocks per SM for __launch_bounds__ (0: none; default 0)
//
// The loop (tile_body<I>): each thread keeps VPM_TPT targets in registers (thread t of block b
// has targets b·VPM_BLOCK·VPM_TPT + t + k·VPM_BLOCK, k < VPM_TPT, their indices clamped to nt − 1
// so that every lane runs every pair, and only the valid ones stored); the block walks the tiles
// of its source split, each thread copying one source of the tile into shared memory, then every
// thread runs the pair of every source of the tile (read from shared memory: a broadcast) on
// each of its targets, the loop over the tile unrolled VPM_UNROLL times. Sums are two-level: per
// tile, then into the totals (sequential f32 sums over 2^20 sources lose ~1e-5 relative,
// two-level ~1e-6). Sources are padded to a whole number of tiles with records that add exact
// zeros (the host's packing).
//
// Grid: x over target blocks of VPM_BLOCK·VPM_TPT targets, y over source splits (blockIdx.y
// sums tiles [y·tiles_per_split, min((y+1)·tiles_per_split, n_tiles))). Output: kOutputs reals
// per target at out[(blockIdx.y·nt + i)·kOutputs + c]; with several splits the host sums them
// with tile_reduce_splits (fixed order: deterministic).
//
// An interaction I is a struct with this interface (all __device__, inlined):
//   typedef … Source;          one source as kept in shared memory (a plain struct of real4)
//   typedef … Target;          one target's registers
//   typedef … Acc;             one target's sums
//   static constexpr int kOutputs;    reals stored per target
//   static constexpr bool kWarpVote;  pair() calls tile_any() (a warp-uniform shortcut, e.g.
//                                     the far field when no lane of the warp is near)
//   explicit I(const TileArgs &);     per-launch constants (e.g. ε²)
//   static Source load_source(const TileArgs &, int q);
//   static Target load_target(const TileArgs &, int i);
//   void zero(Acc &) const;
//   void add(Acc &total, const Acc &part) const;
//   void pair(const Source &, const Target &, Acc &) const;
//   void finish(const Acc &, const Target &, real *out) const;   stores kOutputs reals

#ifndef VPM_TILES_CUH
#define VPM_TILES_CUH

#ifndef VPM_BLOCK
#define VPM_BLOCK 256
#endif
#ifndef VPM_TPT
#define VPM_TPT 2
#endif
#ifndef VPM_UNROLL
#define VPM_UNROLL 4
#endif
#ifndef VPM_MINB
#define VPM_MINB 0
#endif

constexpr int kBlock = VPM_BLOCK;
constexpr int kTpt = VPM_TPT;
constexpr int kUnroll = VPM_UNROLL;

#ifdef VPM_DOUBLE
typedef double real;
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 13
typedef double4_32a real4; // CUDA 13 deprecates plain double4; same 32-byte layout
#else
typedef double4 real4;
#endif
__device__ __forceinline__ real rsqrt_r(real x) { return rsqrt(x); }
__device__ __forceinline__ real fma_r(real a, real b, real c) { return fma(a, b, c); }
#else
typedef float real;
typedef float4 real4;
// With --use_fast_math rsqrtf is one MUFU instruction (rsqrt.approx.ftz).
__device__ __forceinline__ float rsqrt_r(float x) { return rsqrtf(x); }
__device__ __forceinline__ float fma_r(float a, float b, float c) { return fmaf(a, b, c); }
#endif

// The arguments every tile kernel takes (one signature for all: src/summation/direct/tiles.rs
// launches them all alike): up to two vectors per source and per target, packed by the host,
// and one real the interaction reads (ε² for gravity; unused by Biot–Savart). A vector an
// interaction does not use points at any valid array.
struct TileArgs {
    const real4 *src_a;
    const real4 *src_b;
    const real4 *tgt_a;
    const real4 *tgt_b;
    real param;
};

// Whether any lane of the warp has p. Legal inside pair(): tile_body keeps all 32 lanes of a
// warp converged there (clamped targets, whole warps per block, one tile range per block).
__device__ __forceinline__ bool tile_any(bool p) { return __any_sync(0xffffffffu, p); }

template <class I>
__device__ __forceinline__ void tile_body(const TileArgs &args, int n_tiles, int tiles_per_split, int nt,
                                          real *__restrict__ out)
{
    typedef typename I::Source Source;
    typedef typename I::Target Target;
    typedef typename I::Acc Acc;
    constexpr int NC = I::kOutputs;
    static_assert(!I::kWarpVote || kBlock % 32 == 0, "a warp vote needs whole warps per block");
    static_assert(kBlock % kUnroll == 0, "the unroll factor must divide the block");
    const I in(args);
    __shared__ Source sh[kBlock];
    const int tid = threadIdx.x;
    const int first = blockIdx.x * (kBlock * kTpt) + tid;

    Target tg[kTpt];
    Acc tot[kTpt];
#pragma unroll
    for (int t = 0; t < kTpt; ++t) {
        tg[t] = I::load_target(args, min(first + t * kBlock, nt - 1));
        in.zero(tot[t]);
    }

    const int tile_begin = blockIdx.y * tiles_per_split;
    const int tile_end = min(tile_begin + tiles_per_split, n_tiles);
    for (int tile = tile_begin; tile < tile_end; ++tile) {
        __syncthreads();
        sh[tid] = I::load_source(args, tile * kBlock + tid);
        __syncthreads();
        Acc part[kTpt];
#pragma unroll
        for (int t = 0; t < kTpt; ++t) {
            in.zero(part[t]);
        }
#pragma unroll (kUnroll)
        for (int j = 0; j < kBlock; ++j) {
            const Source s = sh[j];
#pragma unroll
            for (int t = 0; t < kTpt; ++t) {
                in.pair(s, tg[t], part[t]);
            }
        }
#pragma unroll
        for (int t = 0; t < kTpt; ++t) {
            in.add(tot[t], part[t]);
        }
    }

    real *o = out + (size_t)blockIdx.y * (size_t)nt * NC;
#pragma unroll
    for (int t = 0; t < kTpt; ++t) {
        const int i = first + t * kBlock;
        if (i < nt) {
            in.finish(tot[t], tg[t], o + (size_t)i * NC);
        }
    }
}

#if VPM_MINB > 0
#define VPM_BOUNDS __launch_bounds__(VPM_BLOCK, VPM_MINB)
#else
#define VPM_BOUNDS __launch_bounds__(VPM_BLOCK)
#endif

// An extern "C" tile kernel NAME over the interaction given after it (a type; may hold commas).
#define VPM_TILE_KERNEL(NAME, ...)                                                                      \
    extern "C" __global__ void VPM_BOUNDS                                                               \
        NAME(const real4 *__restrict__ src_a, const real4 *__restrict__ src_b, int n_tiles,             \
             int tiles_per_split, const real4 *__restrict__ tgt_a, const real4 *__restrict__ tgt_b,     \
             int nt, real param, real *__restrict__ out)                                                \
    {                                                                                                   \
        const TileArgs args = {src_a, src_b, tgt_a, tgt_b, param};                                      \
        tile_body<__VA_ARGS__>(args, n_tiles, tiles_per_split, nt, out);                                \
    }

// out[i] = Σ_s part[s·len + i], s = 0 … splits − 1 in order (deterministic).
extern "C" __global__ void tile_reduce_splits(const real *__restrict__ part, int splits, long long len,
                                              real *__restrict__ out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) {
        return;
    }
    real s = part[i];
    for (int k = 1; k < splits; ++k) {
        s += part[(long long)k * len + i];
    }
    out[i] = s;
}

#endif // VPM_TILES_CUH
