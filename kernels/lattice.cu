// The RBF solves of reinitialisation on the GPU, in f64 (docs/physics.md §3.3, §3.5, §3.7): the
// device side of src/vortex/rbf_device.rs, which reproduces `solve_strengths` with
// `RbfSolver::Exact` (src/vortex/mod.rs; its one pass over the lattice spectrum is
// `condition_and_solve_exact` in src/vortex/reinit.rs). Compiled by NVRTC at run time.
//
//   (cuFFT D2Z, batch of 3: the node-major lattice vorticity ω, stride 3, into 3 half spectra;
//    for the spectral solve, `RbfSolver::Spectral`, the band |q_d| ≤ N/2 of the spectra of ω
//    sampled on a finer M³ lattice, D2Z(ω)/M³, taken by lm_band of kernels/lattice_modes.cu, or
//    the band modes of the particles themselves by that file's non-uniform FFT, with the symbol
//    ĉ below replaced by the band's Gaussian ĝ: docs/physics.md §3.7)
//   lat_condition  per stored mode m of the half spectrum, ω̂ = D2Z(ω)/N³ (the band's D2Z(ω)/M³
//                  for the spectral solve: `scale`) and
//                    β̂(m) = ½ [M(q_m) + M(q_m')] ω̂(m),
//                    M(q) ω̂ = F(q) P(q) ω̂ / (ĉ(m_x) ĉ(m_y) ĉ(m_z)),
//                  with P(q) ω̂ = ω̂ − q (q·ω̂)/|q|² (solenoidal, q ≠ 0; identity otherwise),
//                  F(q) = f(m_x) f(m_y) f(m_z) the filter, ĉ the 1-D symbol; β̂(0) = 0 when the
//                  total strength is zeroed; and the per-block partial sums of the conditioning
//                  report's energies;
//   (cuFFT Z2D, batch of 3: the half spectra into the node-major strengths β, stride 3)
//
// Why the average over m and its mirror m' = −m (mod N): the CPU transforms the full complex
// spectrum, conditions every one of the N³ modes with its own signed wavenumber q (DFT index
// d ↦ d for d ≤ N/2, d − N above: a Nyquist index N/2 is +N/2 on both sides) and keeps the real
// part of the inverse transform. Re IDFT(X) = IDFT(H) with H(m) = ½ [X(m) + conj X(m')], and for
// a real field X(m') = M(q_m') conj ω̂(m), so H(m) is the expression above. Off the Nyquist
// planes q_m' = −q_m and both terms are equal; on them (a component at N/2) the two projectors
// differ and H is what the CPU's real part keeps. The report sums over all N³ modes as the CPU
// does: a stored mode whose mirror is stored too (planes m_z = 0 and, for even N, m_z = N/2)
// counts once; any other stands for itself (wavenumber q_m) and its mirror (q_m', same |ω̂|).
//
// Layouts: spectra are 3 complex arrays of N·N·(N/2 + 1) (cuFFT's D2Z layout, index
// (m_x·N + m_y)·(N/2 + 1) + m_z; m_x is the lattice's slowest index i, m_z its fastest k).
// Reductions: a fixed grid and a fixed tree per block; the host adds the block partials in block
// order, so a solve is bit-reproducible.

#define LAT_THREADS 256

// Signed integer wavenumber of DFT index d on an N-point line (rbf.rs `signed_wavenumber`).
__device__ __forceinline__ double lat_wavenumber(int d, int n)
{
    return d <= n / 2 ? (double)d : (double)(d - n);
}

// M(q) w for the mode with DFT indices (ix, iy, iz) and wavenumber q, written to out; adds
// |q·w|²/|q|² to lon and (1 − F²)|P w|² to fil, in the CPU's order of operations
// (reinit.rs `condition_spectrum`).
__device__ __forceinline__ void lat_apply(const double q[3], int ix, int iy, int iz,
                                          const double2 w[3], const double *__restrict__ sym,
                                          const double *__restrict__ filt, int solenoidal,
                                          double2 out[3], double &lon, double &fil)
{
    const double k2 = q[0] * q[0] + q[1] * q[1] + q[2] * q[2];
    double2 kept[3] = {w[0], w[1], w[2]};
    if (k2 > 0.0) {
        double2 kw;
        kw.x = w[0].x * q[0] + w[1].x * q[1] + w[2].x * q[2];
        kw.y = w[0].y * q[0] + w[1].y * q[1] + w[2].y * q[2];
        lon += (kw.x * kw.x + kw.y * kw.y) / k2;
        if (solenoidal) {
#pragma unroll
            for (int d = 0; d < 3; d++) {
                const double r = q[d] / k2;
                kept[d].x = w[d].x - kw.x * r;
                kept[d].y = w[d].y - kw.y * r;
            }
        }
    }
    const double f = (filt[ix] * filt[iy]) * filt[iz];
    double kept2 = 0.0;
#pragma unroll
    for (int d = 0; d < 3; d++) kept2 += kept[d].x * kept[d].x + kept[d].y * kept[d].y;
    fil += (1.0 - f * f) * kept2;
    const double s = f / ((sym[ix] * sym[iy]) * sym[iz]);
#pragma unroll
    for (int d = 0; d < 3; d++) out[d] = make_double2(kept[d].x * s, kept[d].y * s);
}

// Conditions and divides the 3 half spectra in place (see the top of this file) and writes the
// block's partial sums (Σ|ω̂|², Σ|q·ω̂|²/|q|², Σ(1 − F²)|Pω̂|²) to partials[3·block ..].
// spec: 3·N·N·(N/2+1) double2; sym, filt: N doubles (ĉ(d) or ĝ(d), f(d) for DFT index d);
// scale = 1/M³, M the lattice ω was sampled on (M = N for the exact solve);
// blockDim.x must be LAT_THREADS; any gridDim.x (threads stride over the modes).
extern "C" __global__ void lat_condition(double2 *__restrict__ spec, const double *__restrict__ sym,
                                         const double *__restrict__ filt, int n, int solenoidal,
                                         int zero_total, double scale,
                                         double *__restrict__ partials)
{
    __shared__ double s_tot[LAT_THREADS], s_lon[LAT_THREADS], s_fil[LAT_THREADS];
    const int nh = n / 2 + 1;
    const long long len = (long long)n * n * nh;
    double tot = 0.0, lon = 0.0, fil = 0.0;
    for (long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x; m < len;
         m += (long long)gridDim.x * blockDim.x) {
        const int iz = (int)(m % nh);
        const long long ixy = m / nh;
        const int iy = (int)(ixy % n), ix = (int)(ixy / n);
        // The mirror mode −m (mod N) and the two wavenumbers.
        const int jx = (n - ix) % n, jy = (n - iy) % n, jz = (n - iz) % n;
        const double q[3] = {lat_wavenumber(ix, n), lat_wavenumber(iy, n), lat_wavenumber(iz, n)};
        const double qm[3] = {lat_wavenumber(jx, n), lat_wavenumber(jy, n),
                              lat_wavenumber(jz, n)};
        double2 w[3];
#pragma unroll
        for (int d = 0; d < 3; d++) {
            const double2 v = spec[d * len + m];
            w[d] = make_double2(v.x * scale, v.y * scale);
        }
        double2 a[3], b[3];
        double lon_a = 0.0, fil_a = 0.0, lon_b = 0.0, fil_b = 0.0;
        lat_apply(q, ix, iy, iz, w, sym, filt, solenoidal, a, lon_a, fil_a);
        lat_apply(qm, jx, jy, jz, w, sym, filt, solenoidal, b, lon_b, fil_b);
        const double w2 = (w[0].x * w[0].x + w[0].y * w[0].y) + (w[1].x * w[1].x + w[1].y * w[1].y) +
                          (w[2].x * w[2].x + w[2].y * w[2].y);
        // Planes whose mirror modes are stored as well: each mode counted where it is stored.
        const bool self_plane = iz == 0 || 2 * iz == n;
        if (self_plane) {
            tot += w2;
            lon += lon_a;
            fil += fil_a;
        } else {
            tot += 2.0 * w2;
            lon += lon_a + lon_b;
            fil += fil_a + fil_b;
        }
        const bool zero = zero_total && m == 0;
#pragma unroll
        for (int d = 0; d < 3; d++) {
            spec[d * len + m] = zero ? make_double2(0.0, 0.0)
                                     : make_double2(0.5 * (a[d].x + b[d].x), 0.5 * (a[d].y + b[d].y));
        }
    }
    // Fixed-order tree reduction over the block.
    const int t = threadIdx.x;
    s_tot[t] = tot;
    s_lon[t] = lon;
    s_fil[t] = fil;
    __syncthreads();
    for (int off = LAT_THREADS / 2; off > 0; off >>= 1) {
        if (t < off) {
            s_tot[t] += s_tot[t + off];
            s_lon[t] += s_lon[t + off];
            s_fil[t] += s_fil[t + off];
        }
        __syncthreads();
    }
    if (t == 0) {
        partials[3 * blockIdx.x] = s_tot[0];
        partials[3 * blockIdx.x + 1] = s_lon[0];
        partials[3 * blockIdx.x + 2] = s_fil[0];
    }
}
