// All-pairs Newtonian gravity with Plummer softening ε on the GPU (docs/physics.md §10, G = 1):
//   φ_i = −Σ_j m_j / s,   a_i = Σ_j m_j (x_j − x_i) / s³,   s = (|x_j − x_i|² + ε²)^{1/2},
// the potential and the acceleration (4 outputs per target: φ, a_x, a_y, a_z).
//
// Compiled at run time by NVRTC (src/device/cuda.rs) with the tile loop of tiles.cuh; its options
// (-D VPM_DOUBLE, VPM_BLOCK, VPM_TPT, VPM_UNROLL, VPM_MINB) pick the precision and the launch
// shape. f32 is built with --use_fast_math (rsqrtf: one MUFU instruction); f64 (VPM_DOUBLE) is
// the reference build.
//
// Layout (packed on the host by src/summation/direct/cuda_gravity.rs), one 16-byte (f32) vector
// per item, in tiles.cuh's TileArgs:
//   src_a[q] = (x_q, y_q, z_q, m_q)     padded to a whole tile with m = 0 at (1e15, 1e15, 1e15)
//   tgt_a[i] = (x_i, y_i, z_i, unused)
//   param    = ε² (grav_softened); unused by grav_newton
//
// Kernels:
//   grav_softened  ε > 0: every pair as is; the self pair (d = 0) adds −m/ε to φ and 0 to a.
//   grav_newton    ε = 0: a pair at d = 0 (the self pair) adds nothing (1/s taken as 0 there).
//   grav_pack      the device form: f64 device bodies (x 3, m 1 per body) into src_a and tgt_a,
//                  rounded as the host packs them
//   grav_unpack    the device form: the output into f64 device arrays φ (1) and a (3 per target)
//
// Per pair (f32): 3 FADD (d), 3 FFMA (s² = ε² + d·d), one MUFU rsqrt, 3 FMUL (m/s, 1/s², m/s³),
// 1 FADD (Σ m/s) and 3 FFMA (Σ (m/s³) d): 13 FP32 instructions and one rsqrt, plus one shared
// load per source for every VPM_TPT targets (the newton kernel adds a compare and a select).
// The potential is summed as Σ m/s (all terms positive) and negated at the end. Sums are
// tiles.cuh's two-level f32 sums (per tile, then totals). With NVRTC 12.9 for sm_90 and
// 256 × 4 × 8 the loop is 14.4 instructions per pair (6 FFMA, 4 FADD, 3 FMUL, 1 MUFU.RSQ,
// LDS.128 and loop control shared) in 63 registers; the default launch shape is the fastest
// measured on an H100, 128 × 4 × 16 with at least 4 blocks per SM (src/summation/direct/tiles.rs
// KernelConfig::GRAVITY; 95 registers with NVRTC 13.0; docs/performance.md).

#include "tiles.cuh"

// Plummer gravity for tiles.cuh's loop; NEWTON: ε = 0, pairs at d = 0 skipped.
template <bool NEWTON> struct Gravity {
    typedef real4 Source; // (x, y, z, m)
    struct Target {
        real x, y, z;
    };
    struct Acc {
        real phi, ax, ay, az; // Σ m/s, Σ m d/s³
    };
    static constexpr int kOutputs = 4;
    static constexpr bool kWarpVote = false;

    real eps2;

    __device__ __forceinline__ explicit Gravity(const TileArgs &a) : eps2(NEWTON ? (real)0 : a.param) {}

    static __device__ __forceinline__ Source load_source(const TileArgs &a, int q) { return a.src_a[q]; }

    static __device__ __forceinline__ Target load_target(const TileArgs &a, int i)
    {
        const real4 p = a.tgt_a[i];
        Target t;
        t.x = p.x;
        t.y = p.y;
        t.z = p.z;
        return t;
    }

    __device__ __forceinline__ void zero(Acc &s) const
    {
        s.phi = 0;
        s.ax = 0;
        s.ay = 0;
        s.az = 0;
    }

    __device__ __forceinline__ void add(Acc &t, const Acc &p) const
    {
        t.phi += p.phi;
        t.ax += p.ax;
        t.ay += p.ay;
        t.az += p.az;
    }

    __device__ __forceinline__ void pair(const Source &s, const Target &t, Acc &a) const
    {
        const real dx = s.x - t.x;
        const real dy = s.y - t.y;
        const real dz = s.z - t.z;
        const real s2 = fma_r(dz, dz, fma_r(dy, dy, fma_r(dx, dx, eps2)));
        real si = rsqrt_r(s2); // 1/s
        if (NEWTON) {
            si = s2 > (real)0 ? si : (real)0;
        }
        const real msi = s.w * si;          // m/s
        const real msi3 = msi * (si * si);  // m/s³
        a.phi += msi;
        a.ax = fma_r(msi3, dx, a.ax);
        a.ay = fma_r(msi3, dy, a.ay);
        a.az = fma_r(msi3, dz, a.az);
    }

    __device__ __forceinline__ void finish(const Acc &s, const Target &, real *o) const
    {
        o[0] = -s.phi;
        o[1] = s.ax;
        o[2] = s.ay;
        o[3] = s.az;
    }
};

VPM_TILE_KERNEL(grav_softened, Gravity<false>)
VPM_TILE_KERNEL(grav_newton, Gravity<true>)

// ---- the device form (CudaDirectGravityOf::evaluate_resident): packing on the device ----------

// Packs n bodies from f64 device arrays (x: 3 per body, m: 1) as the host packing does (each
// value rounded once to real): src[q] = (x_q, y_q, z_q, m_q) for q < n, the far-away massless
// padding for n ≤ q < padded; tgt[i] = (x_i, y_i, z_i, 0) for i < n (the bodies as targets).
extern "C" __global__ void grav_pack(const double *__restrict__ x, const double *__restrict__ m,
                                     int n, int padded, real4 *__restrict__ src,
                                     real4 *__restrict__ tgt)
{
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= padded) {
        return;
    }
    real4 s;
    if (q < n) {
        s.x = (real)x[3 * (size_t)q];
        s.y = (real)x[3 * (size_t)q + 1];
        s.z = (real)x[3 * (size_t)q + 2];
        s.w = 0;
        tgt[q] = s;
        s.w = (real)m[q];
    } else {
        s.x = s.y = s.z = (real)1e15;
        s.w = 0;
    }
    src[q] = s;
}

// Writes the output of the last launch (φ, a_x, a_y, a_z per target) into f64 device arrays:
// phi (1 per target) and acc (3 per target, interleaved).
extern "C" __global__ void grav_unpack(const real *__restrict__ out, int nt, double *__restrict__ phi,
                                       double *__restrict__ acc)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nt) {
        return;
    }
    const real *o = out + (size_t)i * Gravity<false>::kOutputs;
    phi[i] = (double)o[0];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        acc[3 * (size_t)i + k] = (double)o[1 + k];
    }
}
