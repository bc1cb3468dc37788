// The pseudo-spectral Navier–Stokes solver on the GPU, in f64 (docs/physics.md §5): the device
// side of src/spectral/gpu.rs, which reproduces src/spectral/solver.rs (rotational form, Leray
// projection, 3/2 padding or 2/3 truncation, Lawson RK4) and the diagnostics of
// src/diagnostics/flow.rs. Compiled by NVRTC at run time.
//
// Layouts (K the largest retained |k_i|, side = 2K + 1, nz = K + 1, M the product grid,
// Mh = M/2 + 1):
// - retained modes ("compact"), as src/spectral/layout.rs: index (iy·side + ix)·nz + kz, the
//   signed wavenumber of ix (or iy) is ix for ix ≤ K, ix − side above; one component after the
//   other, `len` = side²·nz apart;
// - half spectrum on the M grid, as cuFFT's 3-D D2Z output: index (x·M + y)·Mh + kz, x and y the
//   DFT indices (signed wavenumber d for d ≤ M/2, d − M above); fields `hlen` = M²·Mh apart;
// - real field on the M grid: index (x·M + y)·M + z; fields M³ apart.
//
// Coefficients are those of u(x) = Σ_k û(k) e^{ik·x} (the DFT divided by M³), as on the CPU:
// cuFFT's Z2D is that sum, and the store kernel scales cuFFT's D2Z by 1/M³.
//
// One right-hand side N(v̂) = P F[v × ω] is: sp_gather (v̂ and ω̂ = i k × v̂ into six half spectra,
// zero outside the retained modes), six inverse transforms, sp_cross (v × ω in place, and
// max(|v_x| + |v_y| + |v_z|)), three forward transforms, sp_store (projection and the Runge–Kutta
// stage update of the retained modes). Reductions: maxima by an integer atomicMax on the bits of
// non-negative doubles (order-free), sums by a fixed grid and a fixed tree per block, the host
// adding the block partials in block order: every result is bit-reproducible.

#include "spectral.cuh"




// Compact index of the retained mode at half-spectrum position (x, y, kz) of the m grid, or −1.
__device__ __forceinline__ long long sp_compact_index(int x, int y, int kz, int m, int kmax)
{
    const int kx = sp_dft_wavenumber(x, m), ky = sp_dft_wavenumber(y, m);
    if (kz > kmax || kx > kmax || kx < -kmax || ky > kmax || ky < -kmax) return -1;
    const int side = 2 * kmax + 1;
    const int ix = kx >= 0 ? kx : kx + side, iy = ky >= 0 ? ky : ky + side;
    return ((long long)iy * side + ix) * (kmax + 1) + kz;
}

// Position p of a half spectrum on the m grid: its wavevector k, and the compact index of the
// retained mode there (−1 when it holds none).
__device__ __forceinline__ long long sp_half_position(long long p, int m, int kmax, double k[3])
{
    const int mh = m / 2 + 1;
    const int kz = (int)(p % mh);
    const long long xy = p / mh;
    const int y = (int)(xy % m), x = (int)(xy / m);
    k[0] = (double)sp_dft_wavenumber(x, m);
    k[1] = (double)sp_dft_wavenumber(y, m);
    k[2] = (double)kz;
    return sp_compact_index(x, y, kz, m, kmax);
}


// Six half spectra on the m grid from the retained modes v̂ (3 components, `len` apart): v̂ in
// fields 0–2 and ω̂ = i k × v̂ in fields 3–5 (`hstride` apart), zero at every position that is
// not a retained mode. Every position is written (cuFFT's Z2D may overwrite its input).
extern "C" __global__ void sp_gather(const double2 *__restrict__ v, long long len,
                                     double2 *__restrict__ h, long long hstride, int m, int kmax)
{
    const long long hlen = (long long)m * m * (m / 2 + 1);
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < hlen;
         p += (long long)gridDim.x * blockDim.x) {
        double k[3];
        const long long i = sp_half_position(p, m, kmax, k);
        double2 u[3], w[3];
        if (i >= 0) {
#pragma unroll
            for (int c = 0; c < 3; c++) u[c] = v[c * len + i];
            sp_curl(k, u, w);
        } else {
#pragma unroll
            for (int c = 0; c < 3; c++) u[c] = w[c] = make_double2(0.0, 0.0);
        }
#pragma unroll
        for (int c = 0; c < 3; c++) {
            h[c * hstride + p] = u[c];
            h[(3 + c) * hstride + p] = w[c];
        }
    }
}

// One half spectrum on the m grid from the retained modes v̂: what = 0, 1, 2: component `what`;
// what = 3: the divergence i k·v̂; what = 4, 5, 6: vorticity component what − 4 of i k × v̂.
// Zero at every other position; every position written.
extern "C" __global__ void sp_scatter(const double2 *__restrict__ v, long long len,
                                      double2 *__restrict__ h, int m, int kmax, int what)
{
    const long long hlen = (long long)m * m * (m / 2 + 1);
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < hlen;
         p += (long long)gridDim.x * blockDim.x) {
        double k[3];
        const long long i = sp_half_position(p, m, kmax, k);
        double2 out = make_double2(0.0, 0.0);
        if (i >= 0) {
            if (what < 3) {
                out = v[what * len + i];
            } else if (what == 3) {
                out = sp_divergence(k, v[i], v[len + i], v[2 * len + i]);
            } else {
                // ω̂ component what − 4, as flow.rs `vorticity_mode` forms it.
                double2 u[3], w[3];
#pragma unroll
                for (int c = 0; c < 3; c++) u[c] = v[c * len + i];
                sp_curl(k, u, w);
                out = w[what - 4];
            }
        }
        h[p] = out;
    }
}


// u × ω at the n3 nodes of the m³ grid, in place of u (fields 0–2; ω in fields 3–5; fields
// `rs` apart), as solver.rs `RotationalForm::point` forms it; the maximum of |u_x| + |u_y| +
// |u_z| goes to *speed_max (bits of a non-negative double, atomicMax). blockDim = SP_THREADS.
extern "C" __global__ void sp_cross(double *__restrict__ r, long long n3, long long rs,
                                    unsigned long long *__restrict__ speed_max)
{
    double smax = 0.0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n3;
         p += (long long)gridDim.x * blockDim.x) {
        const double a = r[p], b = r[rs + p], c = r[2 * rs + p];
        const double x = r[3 * rs + p], y = r[4 * rs + p], z = r[5 * rs + p];
        r[p] = b * z - c * y;
        r[rs + p] = c * x - a * z;
        r[2 * rs + p] = a * y - b * x;
        smax = fmax(smax, fabs(a) + fabs(b) + fabs(c));
    }
    sp_block_max(smax, speed_max);
}

// max |r| over n values, to *out (bits, atomicMax). blockDim = SP_THREADS.
extern "C" __global__ void sp_max_abs(const double *__restrict__ r, long long n,
                                      unsigned long long *__restrict__ out)
{
    double m = 0.0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (long long)gridDim.x * blockDim.x)
        m = fmax(m, fabs(r[p]));
    sp_block_max(m, out);
}

// max of a² + b² + c² over n nodes of three fields `rs` apart (|ω|², the host takes the root),
// to *out (bits, atomicMax). blockDim = SP_THREADS.
extern "C" __global__ void sp_max_norm2(const double *__restrict__ r, long long n, long long rs,
                                        unsigned long long *__restrict__ out)
{
    double m = 0.0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (long long)gridDim.x * blockDim.x) {
        const double a = r[p], b = r[rs + p], c = r[2 * rs + p];
        m = fmax(m, a * a + b * b + c * c);
    }
    sp_block_max(m, out);
}


// The first stage of a Lawson RK4 step from û and k1 = N(û) (solver.rs `step`):
// acc = E(û + Δt/6 k1), sa = E_h(û + Δt/2 k1), E_h = exp(−ν|k|²Δt/2), E = E_h².
extern "C" __global__ void sp_rk_begin(const double2 *__restrict__ uh, const double2 *__restrict__ k1,
                                       double2 *__restrict__ acc, double2 *__restrict__ sa,
                                       long long len, int kmax, double nu, double dt)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (long long)gridDim.x * blockDim.x) {
        double k[3];
        sp_local_mode_k(i, kmax, kmax + 1, 0, k);
        sp_rk_begin_mode(k, i, len, uh, k1, acc, sa, nu, dt);
    }
}

// The projected nonlinear term of every retained mode from the three forward-transformed
// products (half spectra on the m grid, hstride apart; scaled by 1/m³ here), and what the stage
// does with it (spectral.cuh `sp_store_mode`).
extern "C" __global__ void sp_store(const double2 *__restrict__ h, long long hstride, int m,
                                    double scale, int kmax, long long len, int stage, double nu,
                                    double dt, const double2 *__restrict__ uh,
                                    double2 *__restrict__ k1, double2 *__restrict__ acc,
                                    double2 *__restrict__ sa, double2 *__restrict__ sb)
{
    const int mh = m / 2 + 1;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (long long)gridDim.x * blockDim.x) {
        double k[3];
        sp_local_mode_k(i, kmax, kmax + 1, 0, k);
        const int x = k[0] >= 0 ? (int)k[0] : (int)k[0] + m;
        const int y = k[1] >= 0 ? (int)k[1] : (int)k[1] + m;
        const long long p = ((long long)x * m + y) * mh + (long long)k[2];
        double2 n[3];
#pragma unroll
        for (int c = 0; c < 3; c++) n[c] = sp_scale(h[c * hstride + p], scale);
        sp_store_mode(k, n, i, len, stage, nu, dt, uh, k1, acc, sa, sb);
    }
}

// Makes the k_z = 0 plane of each of the 3 components Hermitian (spectral.cuh
// `sp_hermitian_line`). One thread per (iy, ix).
extern "C" __global__ void sp_hermitian(double2 *__restrict__ v, long long len, int kmax)
{
    const int side = 2 * kmax + 1;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= side * side) return;
    sp_hermitian_line(v, len, kmax, kmax + 1, t);
}

// Three real fields (rs apart) from n3 node-major 3-vectors u[3·p + c].
extern "C" __global__ void sp_deinterleave(const double *__restrict__ u, long long n3,
                                           double *__restrict__ r, long long rs)
{
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n3;
         p += (long long)gridDim.x * blockDim.x) {
#pragma unroll
        for (int c = 0; c < 3; c++) r[c * rs + p] = u[3 * p + c];
    }
}

// *flag = 1 when any of n doubles is not finite.
extern "C" __global__ void sp_nonfinite(const double *__restrict__ v, long long n,
                                        unsigned int *__restrict__ flag)
{
    bool bad = false;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (long long)gridDim.x * blockDim.x)
        bad |= !isfinite(v[p]);
    if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1u);
}



// The mode sums of the diagnostics (spectral.cuh `sp_row_sums`), one block per k_y row iy
// (gridDim.x = side, blockDim.x = SP_THREADS; side ≤ 4·SP_THREADS). The host adds the rows in
// row order (as flow.rs adds its per-row partial spectra).
extern "C" __global__ void sp_mode_sums(const double2 *__restrict__ u, const double2 *__restrict__ k1,
                                        long long len, int kmax, double nu, int nshell,
                                        double *__restrict__ scalars, double *__restrict__ shells)
{
    sp_row_sums(u, k1, len, kmax, kmax + 1, 0, nu, nshell, scalars, shells);
}
