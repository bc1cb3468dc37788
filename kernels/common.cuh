// The regularised pair kernel on the device (docs/physics.md §2), written once and included by both
// GPU families (biot_savart.cu: all pairs; ewald.cu: the real-space part of the Ewald split).
// It mirrors src/kernel.rs: the Gaussian-cutoff g(ρ) = erf(ρ/√2) − √(2/π) ρ e^{−ρ²/2}, the
// smooth forms G3 = g/ρ³ and G5 = (3g − ρg')/ρ⁵ with the positive small-ρ series
//   G5 = c e S5(ρ²),  G3 = c e (1 + ρ² S5(ρ²))/3,  c = √(2/π), e = e^{−ρ²/2},
//   S5(x) = Σ a_k x^k,  a_k = 1/(5·7·…·(2k+5))
// below the threshold (ρ < 2 in f32, ρ < 1 in f64: src/kernel.rs Real::SERIES_THRESHOLD) and the
// erf form above it, and the pair terms with c_q = α_q × r:
//   velocity    K c_q                                       K = G3/σ³ (/4π)
//   classical   K (α_q × α_p) − L (α_p·r) c_q               L = G5/σ⁵ (/4π)
//   transposed  K (α_p × α_q) − L (α_p·c_q) r
//   gradient    K [α_q]_× − L c_q rᵀ
//
// Compiled by NVRTC as the named header "common.cuh" (src/device/cuda.rs, KernelSource); with
// VPM_KERNELS_DIR set it is read from that directory like the .cu files. tests/kernel.rs checks
// that the coefficients and thresholds below are src/kernel.rs's.

#ifndef VPM_COMMON_CUH
#define VPM_COMMON_CUH

// √(2/π), 1/√2, 1/(4π), 1/3 (the f64 values; each kernel rounds them to its precision).
#define VPM_SQRT_2_OVER_PI 0.7978845608028654
#define VPM_FRAC_1_SQRT_2 0.7071067811865476
#define VPM_FRAC_1_4PI 0.07957747154594767
#define VPM_THIRD (1.0 / 3.0)

// Series thresholds on ρ (src/kernel.rs Real::SERIES_THRESHOLD).
#define VPM_SERIES_RHO_F32 2.0f
#define VPM_SERIES_RHO_F64 1.0

// S5(x) by Horner, 14 terms in f64: the shortest round-trip literals of src/kernel.rs
// series_coeffs_f64.
__device__ __forceinline__ double vpm_series_s5(double x)
{
    double s = 1.5633241326771934e-17;
    s = s * x + 4.846304811299299e-16;
    s = s * x + 1.4054283952767967e-14;
    s = s * x + 3.7946566672473513e-13;
    s = s * x + 9.486641668118378e-12;
    s = s * x + 2.181927583667227e-10;
    s = s * x + 4.582047925701176e-09;
    s = s * x + 8.705891058832235e-08;
    s = s * x + 1.48000148000148e-06;
    s = s * x + 2.22000222000222e-05;
    s = s * x + 0.0002886002886002886;
    s = s * x + 0.0031746031746031746;
    s = s * x + 0.02857142857142857;
    s = s * x + 0.2;
    return s;
}

// S5(x) in f32, 13 terms: the same values rounded to float.
__device__ __forceinline__ float vpm_series_s5(float x)
{
    float s = 4.846304811299299e-16f;
    s = s * x + 1.4054283952767967e-14f;
    s = s * x + 3.7946566672473513e-13f;
    s = s * x + 9.486641668118378e-12f;
    s = s * x + 2.181927583667227e-10f;
    s = s * x + 4.582047925701176e-09f;
    s = s * x + 8.705891058832235e-08f;
    s = s * x + 1.48000148000148e-06f;
    s = s * x + 2.22000222000222e-05f;
    s = s * x + 0.0002886002886002886f;
    s = s * x + 0.0031746031746031746f;
    s = s * x + 0.02857142857142857f;
    s = s * x + 0.2f;
    return s;
}

// Below the threshold: G3 and G5 from the series, positive terms only (no cancellation), from
// x = ρ² and ce = √(2/π) e^{−ρ²/2}.
template <typename R> __device__ __forceinline__ void vpm_g3_g5_series(R x, R ce, R &g3, R &g5)
{
    const R s = vpm_series_s5(x);
    g5 = ce * s;
    g3 = ce * (1 + x * s) * (R)VPM_THIRD;
}

// Above the threshold: G3 = g/ρ³, G5 = (3g − ρg')/ρ⁵ with ρg' = ce ρ³, from g, ce, ρ and x = ρ².
template <typename R>
__device__ __forceinline__ void vpm_g3_g5_from_g(R g, R ce, R rho, R x, R &g3, R &g5)
{
    const R rho3 = x * rho;
    g3 = g / rho3;
    g5 = (3 * g - ce * rho3) / (rho3 * x);
}

// c = a × b.
template <typename R>
__device__ __forceinline__ void vpm_cross(R ax, R ay, R az, R bx, R by, R bz, R &cx, R &cy, R &cz)
{
    cx = ay * bz - az * by;
    cy = az * bx - ax * bz;
    cz = ax * by - ay * bx;
}

// a·b: with it the L-coefficients of the stretching pair terms, classical L (α_p·r) (multiplies
// −c_q) and transposed L (α_p·c_q) (multiplies −r).
template <typename R>
__device__ __forceinline__ R vpm_dot(R ax, R ay, R az, R bx, R by, R bz)
{
    return ax * bx + ay * by + az * bz;
}

// The Plummer-softened gravity pair in f32 (docs/physics.md §10), shared by the FMMs' near fields:
// the source S = (x, y, z, m) and the target q in one frame, d = S − q, s² = |d|² + ε²; adds −m/s
// to v[0] and m d/s³ to v[1..3], nothing at s = 0 (ε = 0 and the target itself).
__device__ __forceinline__ void add_softened_pair(float4 S, float qx, float qy, float qz, float eps2, float *v)
{
    const float dx = S.x - qx, dy = S.y - qy, dz = S.z - qz;
    const float s2 = fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, eps2)));
    if (s2 > 0.0f)
    {
        const float is = rsqrtf(s2);
        const float mis = S.w * is, mis3 = mis * is * is;
        v[0] -= mis;
        v[1] = fmaf(mis3, dx, v[1]);
        v[2] = fmaf(mis3, dy, v[2]);
        v[3] = fmaf(mis3, dz, v[3]);
    }
}

#endif // VPM_COMMON_CUH
