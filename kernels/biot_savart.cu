// All-pairs regularised Biot–Savart on the GPU: velocity, velocity + vortex stretching (classical
// or transposed), velocity + velocity gradient, and the blob vorticity (docs/physics.md §2).
//
// Compiled at run time by NVRTC (src/device/cuda.rs), once per process, device and option set.
// The pair equations are those of common.cuh (src/kernel.rs on the device): G3 = g/ρ³,
// G5 = (3g − ρg')/ρ⁵ with the positive small-ρ series S5 below the same threshold (ρ < 2 in
// f32, ρ < 1 in f64); above it the erf form (in f32 with a shared-exponential erf, below).
//
// Options (-D): those of tiles.cuh (VPM_DOUBLE, VPM_BLOCK, VPM_TPT, VPM_UNROLL, VPM_MINB).
//
// Layout (packed on the host by src/summation/direct/all_pairs.rs), one 16-byte (f32) vector per
// item, in tiles.cuh's TileArgs:
//   src_a[q] = (x_q, y_q, z_q, 1/σ_q²)
//   src_b[q] = (α_q/(4π), (ρ_far σ_q)²)      ρ_far = 7 in f32, 10 in f64 (see far_kl)
//   tgt_a[i] = (x_i, y_i, z_i, unused)
//   tgt_b[i] = (3α_i, unused)                  stretching only (3α: see near_kl)
// Sources are padded to a multiple of VPM_BLOCK with α = 0, far² = 0 at (1e15, 1e15, 1e15): they
// add exact zeros. The kernels' real argument (TileArgs::param) is unused.
//
// The tile loop, the grid, the source splits and their reduction are tiles.cuh's (tile_body);
// here are the interaction structs (BiotSavart<MODE>) and NC, the outputs per target:
//   velocity:            NC = 3   u
//   stretching (both):   NC = 6   u, dα/dt
//   gradient:            NC = 12  u, ∂u_i/∂x_j row-major
//   vorticity:           NC = 3   ω_h
//
// Performance notes:
// * Far field: when every lane of a warp has ρ ≥ ρ_far for the current source (a warp vote),
//   the pair uses g = 1 and ρg' = 0, exact to rounding there (f32: 1 − g < 1e-10 and
//   ρ³g'·e-terms < 2e-9 relative at ρ = 7), so K = 1/r³, K'/r = −3/r⁵ from one rsqrt and no
//   exp/erf. Otherwise (rare at large N) the lanes with ρ < ρ_far take near_kl.
// * Stretching: Σ K (α_q × α_p) = (Σ K α_q) × α_p, so per pair only Σ K α_q is accumulated.
// * f32 sums are two-level (per tile, then into the totals): sequential f32 accumulation over
//   2^18 sources costs ~1e-5 relative, two-level ~1e-6.

#include "common.cuh"
#include "tiles.cuh"

// √(2/π), 1/√2, 1/3 (common.cuh: the f64 values, rounded to the precision).
constexpr real kSqrt2OverPi = (real)VPM_SQRT_2_OVER_PI;
constexpr real kFrac1Sqrt2 = (real)VPM_FRAC_1_SQRT_2;
constexpr real kThird = (real)VPM_THIRD;

// Series threshold on ρ² (common.cuh's threshold on ρ, squared).
#ifdef VPM_DOUBLE
constexpr real kSeriesX = VPM_SERIES_RHO_F64 * VPM_SERIES_RHO_F64;
#else
constexpr real kSeriesX = VPM_SERIES_RHO_F32 * VPM_SERIES_RHO_F32;
#endif

enum Mode { MODE_VEL = 0, MODE_CLASSICAL = 1, MODE_TRANSPOSED = 2, MODE_GRADIENT = 3, MODE_VORT = 4 };

template <int MODE> struct Nc;
template <> struct Nc<MODE_VEL> { static constexpr int value = 3; };
template <> struct Nc<MODE_CLASSICAL> { static constexpr int value = 6; };
template <> struct Nc<MODE_TRANSPOSED> { static constexpr int value = 6; };
template <> struct Nc<MODE_GRADIENT> { static constexpr int value = 12; };
template <> struct Nc<MODE_VORT> { static constexpr int value = 3; };

// ---- precision-specific primitives -------------------------------------------------------------

#ifdef VPM_DOUBLE
__device__ __forceinline__ real exp_mhalf(real x) { return exp(-0.5 * x); }
__device__ __forceinline__ real sqrt_r(real x) { return sqrt(x); }
#else
// Built with --use_fast_math: exp2f, rsqrtf (tiles.cuh rsqrt_r), sqrtf and __fdividef are single
// MUFU instructions (ex2/rsqrt/sqrt/rcp.approx.ftz). e^{−x/2} = 2^{−x log2(e)/2}: relative error
// ~2 ulp plus the argument's rounding, < 2e-6 where it matters (ρ < 7).
__device__ __forceinline__ float exp_mhalf(float x) { return exp2f(x * -0.72134752044448170f); }
__device__ __forceinline__ float sqrt_r(float x) { return sqrtf(x); }
// erf(u) = 1 − t·P(t)·e^{−u²}, t = 1/(1 + p u) (Abramowitz & Stegun 7.1.26, |error| ≤ 1.5e-7
// for u ≥ 0), with e^{−u²} = e^{−ρ²/2} shared with g'. Used only for ρ ≥ 2 (u ≥ √2), where it
// keeps G3 and G5 within ~4e-7 relative of the f64 values (the f32 libm erff path of
// src/kernel.rs: 4.2e-7).
__device__ __forceinline__ float erf_shared(float u, float e)
{
    const float t = __fdividef(1.0f, fmaf(0.3275911f, u, 1.0f));
    const float p =
        t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    return fmaf(-p, e, 1.0f);
}
#endif

// ---- the pair kernel ----------------------------------------------------------------------------

// Far field (ρ ≥ ρ_far): g = 1, ρg' = 0, so K = g/r³ = 1/r³ and L3 = −(K'/r)/3 = 1/r⁵.
// (Inf at r = 0: such a pair is always near and overwritten by near_kl.)
__device__ __forceinline__ void far_kl(real r2, real &K, real &L3)
{
    const real ri = rsqrt_r(r2);
    const real ri2 = ri * ri;
    K = ri2 * ri;
    L3 = K * ri2;
}

// src/kernel.rs g3_g5 and pair_terms: from r² and 1/σ², K = G3/σ³ and L3 = G5/(3σ⁵) (the 1/4π is in
// the source strength, the factor 3 in the packed target strength 3α_p).
__device__ __forceinline__ void near_kl(real r2, real is2, real &K, real &L3)
{
    const real x = r2 * is2;     // ρ²
    const real e = exp_mhalf(x); // e^{−ρ²/2}
    const real ce = kSqrt2OverPi * e;
    real g3, g5;
    if (x < kSeriesX) {
        // G5 = c e S5(ρ²), G3 = c e (1 + ρ² S5)/3: positive terms only (no cancellation).
        vpm_g3_g5_series(x, ce, g3, g5);
    } else {
#ifdef VPM_DOUBLE
        // g = erf(ρ/√2) − cρe, ρg' = cρ³e (exactly the src/kernel.rs f64 expressions).
        const real rho = sqrt(x);
        const real g = erf(rho * kFrac1Sqrt2) - ce * rho;
        vpm_g3_g5_from_g(g, ce, rho, x, g3, g5);
#else
        // f32: the same expressions with the divisions by ρ³ and ρ⁵ as one rsqrt's powers (the
        // fast-math build's cheapest form).
        const float ri = rsqrt_r(x);
        const float rho = x * ri;
        const float g = erf_shared(rho * kFrac1Sqrt2, e) - ce * rho;
        const float ri3 = ri * ri * ri;
        g3 = g * ri3;
        g5 = (3.0f * g - ce * (x * rho)) * (ri3 * ri * ri);
#endif
    }
    const real is3 = is2 * sqrt_r(is2);
    K = g3 * is3;
    L3 = g5 * is3 * is2 * kThird;
}

// Per-target accumulators: u = Σ K c (c = α'_q × r), a = Σ K α'_q, s = stretching rest,
// gr = Σ L3 c_i r_j (gradient). Unused fields are dead code in each mode.
struct Acc {
    real u0, u1, u2;
    real a0, a1, a2;
    real s0, s1, s2;
    real gr[9];
};

template <int MODE> __device__ __forceinline__ void acc_zero(Acc &a)
{
    a.u0 = 0; a.u1 = 0; a.u2 = 0;
    if (MODE != MODE_VEL && MODE != MODE_VORT) {
        a.a0 = 0; a.a1 = 0; a.a2 = 0;
    }
    if (MODE == MODE_CLASSICAL || MODE == MODE_TRANSPOSED) {
        a.s0 = 0; a.s1 = 0; a.s2 = 0;
    }
    if (MODE == MODE_GRADIENT) {
#pragma unroll
        for (int k = 0; k < 9; ++k) a.gr[k] = 0;
    }
}

template <int MODE> __device__ __forceinline__ void acc_add(Acc &t, const Acc &p)
{
    t.u0 += p.u0; t.u1 += p.u1; t.u2 += p.u2;
    if (MODE != MODE_VEL && MODE != MODE_VORT) {
        t.a0 += p.a0; t.a1 += p.a1; t.a2 += p.a2;
    }
    if (MODE == MODE_CLASSICAL || MODE == MODE_TRANSPOSED) {
        t.s0 += p.s0; t.s1 += p.s1; t.s2 += p.s2;
    }
    if (MODE == MODE_GRADIENT) {
#pragma unroll
        for (int k = 0; k < 9; ++k) t.gr[k] += p.gr[k];
    }
}

// One source (P = position and 1/σ², Q = α/4π and far²) acting on one target (p, 3α_p = q).
template <int MODE>
__device__ __forceinline__ void bs_pair(const real4 &P, const real4 &Q, real px, real py, real pz, real qx,
                                     real qy, real qz, Acc &acc)
{
    const real rx = px - P.x;
    const real ry = py - P.y;
    const real rz = pz - P.z;
    const real r2 = rx * rx + ry * ry + rz * rz;
    if (MODE == MODE_VORT) {
        // ζ_σ(r) α = (2π)^{-3/2} σ⁻³ e^{−ρ²/2} α; the 4π of α/4π and (2π)^{-3/2} make √(2/π),
        // applied once at the end.
        const real z = exp_mhalf(r2 * P.w) * (P.w * sqrt_r(P.w));
        acc.u0 += z * Q.x;
        acc.u1 += z * Q.y;
        acc.u2 += z * Q.z;
        return;
    }
    real K, L3;
    far_kl(r2, K, L3);
    if (tile_any(r2 < Q.w)) {
        if (r2 < Q.w) {
            near_kl(r2, P.w, K, L3);
        }
    }
    real cx, cy, cz; // α'_q × r
    vpm_cross(Q.x, Q.y, Q.z, rx, ry, rz, cx, cy, cz);
    acc.u0 += K * cx;
    acc.u1 += K * cy;
    acc.u2 += K * cz;
    if (MODE == MODE_VEL) {
        return;
    }
    acc.a0 += K * Q.x;
    acc.a1 += K * Q.y;
    acc.a2 += K * Q.z;
    if (MODE == MODE_CLASSICAL) {
        // −G5/σ⁵ (α_p·r)(α_q × r)
        const real b = L3 * vpm_dot(qx, qy, qz, rx, ry, rz);
        acc.s0 -= b * cx;
        acc.s1 -= b * cy;
        acc.s2 -= b * cz;
    } else if (MODE == MODE_TRANSPOSED) {
        // −G5/σ⁵ (α_p·(α_q × r)) r
        const real b = L3 * vpm_dot(qx, qy, qz, cx, cy, cz);
        acc.s0 -= b * rx;
        acc.s1 -= b * ry;
        acc.s2 -= b * rz;
    } else if (MODE == MODE_GRADIENT) {
        const real lx = L3 * cx;
        const real ly = L3 * cy;
        const real lz = L3 * cz;
        acc.gr[0] += lx * rx; acc.gr[1] += lx * ry; acc.gr[2] += lx * rz;
        acc.gr[3] += ly * rx; acc.gr[4] += ly * ry; acc.gr[5] += ly * rz;
        acc.gr[6] += lz * rx; acc.gr[7] += lz * ry; acc.gr[8] += lz * rz;
    }
}

// Writes the NC outputs of one target.
template <int MODE>
__device__ __forceinline__ void bs_finish(const Acc &t, real qx, real qy, real qz, real *o)
{
    if (MODE == MODE_VORT) {
        o[0] = kSqrt2OverPi * t.u0;
        o[1] = kSqrt2OverPi * t.u1;
        o[2] = kSqrt2OverPi * t.u2;
        return;
    }
    o[0] = t.u0;
    o[1] = t.u1;
    o[2] = t.u2;
    if (MODE == MODE_CLASSICAL || MODE == MODE_TRANSPOSED) {
        const real px = qx * kThird, py = qy * kThird, pz = qz * kThird; // α_p
        // classical: Σ K (α_q × α_p) = A × α_p; transposed: Σ K (α_p × α_q) = α_p × A.
        real cx = t.a1 * pz - t.a2 * py;
        real cy = t.a2 * px - t.a0 * pz;
        real cz = t.a0 * py - t.a1 * px;
        if (MODE == MODE_TRANSPOSED) {
            cx = -cx;
            cy = -cy;
            cz = -cz;
        }
        o[3] = t.s0 + cx;
        o[4] = t.s1 + cy;
        o[5] = t.s2 + cz;
    } else if (MODE == MODE_GRADIENT) {
        // ∂u_i/∂x_j = [A]×_ij − 3 Σ L3 c_i r_j  ([A]× v = A × v).
        o[3] = -3 * t.gr[0];
        o[4] = -t.a2 - 3 * t.gr[1];
        o[5] = t.a1 - 3 * t.gr[2];
        o[6] = t.a2 - 3 * t.gr[3];
        o[7] = -3 * t.gr[4];
        o[8] = -t.a0 - 3 * t.gr[5];
        o[9] = -t.a1 - 3 * t.gr[6];
        o[10] = t.a0 - 3 * t.gr[7];
        o[11] = -3 * t.gr[8];
    }
}

// The Biot–Savart interaction of mode MODE for tiles.cuh's loop: a source is (P, Q) = (x, 1/σ²)
// and (α/4π, far²), a target its position and 3α (zero unless stretching).
template <int MODE> struct BiotSavart {
    struct Source {
        real4 p, q;
    };
    struct Target {
        real px, py, pz, qx, qy, qz;
    };
    typedef ::Acc Acc;
    static constexpr int kOutputs = Nc<MODE>::value;
    static constexpr bool kWarpVote = MODE != MODE_VORT;
    static constexpr bool kHasAlpha = (MODE == MODE_CLASSICAL || MODE == MODE_TRANSPOSED);

    __device__ __forceinline__ explicit BiotSavart(const TileArgs &) {}

    static __device__ __forceinline__ Source load_source(const TileArgs &a, int q)
    {
        Source s;
        s.p = a.src_a[q];
        s.q = a.src_b[q];
        return s;
    }

    static __device__ __forceinline__ Target load_target(const TileArgs &a, int i)
    {
        Target t;
        const real4 p = a.tgt_a[i];
        t.px = p.x;
        t.py = p.y;
        t.pz = p.z;
        if (kHasAlpha) {
            const real4 q = a.tgt_b[i];
            t.qx = q.x;
            t.qy = q.y;
            t.qz = q.z;
        } else {
            t.qx = 0;
            t.qy = 0;
            t.qz = 0;
        }
        return t;
    }

    __device__ __forceinline__ void zero(Acc &a) const { acc_zero<MODE>(a); }
    __device__ __forceinline__ void add(Acc &t, const Acc &p) const { acc_add<MODE>(t, p); }

    __device__ __forceinline__ void pair(const Source &s, const Target &t, Acc &a) const
    {
        bs_pair<MODE>(s.p, s.q, t.px, t.py, t.pz, t.qx, t.qy, t.qz, a);
    }

    __device__ __forceinline__ void finish(const Acc &a, const Target &t, real *o) const
    {
        bs_finish<MODE>(a, t.qx, t.qy, t.qz, o);
    }
};

VPM_TILE_KERNEL(bs_velocity, BiotSavart<MODE_VEL>)
VPM_TILE_KERNEL(bs_stretching_classical, BiotSavart<MODE_CLASSICAL>)
VPM_TILE_KERNEL(bs_stretching_transposed, BiotSavart<MODE_TRANSPOSED>)
VPM_TILE_KERNEL(bs_gradient, BiotSavart<MODE_GRADIENT>)
VPM_TILE_KERNEL(bs_vorticity, BiotSavart<MODE_VORT>)

// ---- the device form (src/summation/direct/cuda.rs DeviceSummation): packing on the device --

// Packs n f64 sources (x, α: 3 per source; σ: 1) into the layout above, as the host packing
// does (the same f64 operations, then one rounding): pos = (x, 1/σ²), str = (α·f4pi, far2·σ²);
// items n … padded − 1 are the far-away zero-strength padding.
extern "C" __global__ void bs_pack_sources(const double *__restrict__ x,
                                           const double *__restrict__ alpha,
                                           const double *__restrict__ sigma, int n, int padded,
                                           double f4pi, double far2, real4 *__restrict__ pos,
                                           real4 *__restrict__ str)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= padded) {
        return;
    }
    real4 p, q;
    if (i < n) {
        const double s2 = sigma[i] * sigma[i];
        p.x = (real)x[3 * (size_t)i];
        p.y = (real)x[3 * (size_t)i + 1];
        p.z = (real)x[3 * (size_t)i + 2];
        p.w = (real)(1.0 / s2);
        q.x = (real)(alpha[3 * (size_t)i] * f4pi);
        q.y = (real)(alpha[3 * (size_t)i + 1] * f4pi);
        q.z = (real)(alpha[3 * (size_t)i + 2] * f4pi);
        q.w = (real)(far2 * s2);
    } else {
        p.x = (real)1e15;
        p.y = (real)1e15;
        p.z = (real)1e15;
        p.w = (real)1;
        q.x = 0;
        q.y = 0;
        q.z = 0;
        q.w = 0;
    }
    pos[i] = p;
    str[i] = q;
}

// Packs n f64 points (3 each) as targets (x, y, z, 0) and, when alpha is not null, their
// strengths as (3α, 0), as the host packing does.
extern "C" __global__ void bs_pack_targets(const double *__restrict__ x,
                                           const double *__restrict__ alpha, int n,
                                           real4 *__restrict__ pos, real4 *__restrict__ alp)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    real4 p;
    p.x = (real)x[3 * (size_t)i];
    p.y = (real)x[3 * (size_t)i + 1];
    p.z = (real)x[3 * (size_t)i + 2];
    p.w = 0;
    pos[i] = p;
    if (alpha) {
        real4 a;
        a.x = (real)(3.0 * alpha[3 * (size_t)i]);
        a.y = (real)(3.0 * alpha[3 * (size_t)i + 1]);
        a.z = (real)(3.0 * alpha[3 * (size_t)i + 2]);
        a.w = 0;
        alp[i] = a;
    }
}

// Splits the output (nc reals per target) into f64 arrays: u (3 per target) and, when ex is not
// null, the nc − 3 further values per target.
extern "C" __global__ void bs_unpack(const real *__restrict__ out, int nt, int nc,
                                     double *__restrict__ u, double *__restrict__ ex)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nt) {
        return;
    }
    const real *o = out + (size_t)i * nc;
    u[3 * (size_t)i] = (double)o[0];
    u[3 * (size_t)i + 1] = (double)o[1];
    u[3 * (size_t)i + 2] = (double)o[2];
    if (ex) {
        for (int k = 3; k < nc; ++k) {
            ex[(size_t)i * (nc - 3) + (k - 3)] = (double)o[k];
        }
    }
}
