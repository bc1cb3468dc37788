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

#define SP_THREADS 256

// Signed wavenumber of a compact index (ix or iy) for the largest retained |k| kmax.
__device__ __forceinline__ int sp_compact_wavenumber(int i, int kmax)
{
    return i <= kmax ? i : i - (2 * kmax + 1);
}

// Signed wavenumber of a DFT index on an m-point line.
__device__ __forceinline__ int sp_dft_wavenumber(int d, int m)
{
    return d <= m / 2 ? d : d - m;
}

__device__ __forceinline__ double2 sp_scale(double2 a, double s) { return make_double2(a.x * s, a.y * s); }
__device__ __forceinline__ double2 sp_add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ double2 sp_sub(double2 a, double2 b) { return make_double2(a.x - b.x, a.y - b.y); }

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

// ω̂ = i k × v̂ with the CPU's arithmetic (solver.rs `RotationalForm::input`):
// ω̂_c = i (k_a v̂_b − k_b v̂_a), (c, a, b) cyclic.
__device__ __forceinline__ void sp_curl(const double k[3], const double2 v[3], double2 w[3])
{
#pragma unroll
    for (int c = 0; c < 3; c++) {
        const int a = (c + 1) % 3, b = (c + 2) % 3;
        const double2 d = sp_sub(sp_scale(v[b], k[a]), sp_scale(v[a], k[b]));
        w[c] = make_double2(-d.y, d.x);
    }
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
                // i (k·v̂), as flow.rs `max_divergence` forms it.
                const double2 a = v[i], b = v[len + i], c = v[2 * len + i];
                const double2 d = sp_add(sp_add(sp_scale(a, k[0]), sp_scale(b, k[1])), sp_scale(c, k[2]));
                out = make_double2(-d.y, d.x);
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

// Block maximum of non-negative doubles, then one atomicMax on their bits (order-free).
__device__ __forceinline__ void sp_block_max(double x, unsigned long long *__restrict__ out)
{
    __shared__ double s[SP_THREADS];
    const int t = threadIdx.x;
    s[t] = x;
    __syncthreads();
    for (int off = SP_THREADS / 2; off > 0; off >>= 1) {
        if (t < off) s[t] = fmax(s[t], s[t + off]);
        __syncthreads();
    }
    if (t == 0) atomicMax(out, (unsigned long long)__double_as_longlong(s[0]));
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

// Wavevector of compact mode i.
__device__ __forceinline__ void sp_mode_k(long long i, int kmax, double k[3])
{
    const int side = 2 * kmax + 1, nz = kmax + 1;
    const int kz = (int)(i % nz);
    const long long b = i / nz;
    const int ix = (int)(b % side), iy = (int)(b / side);
    k[0] = (double)sp_compact_wavenumber(ix, kmax);
    k[1] = (double)sp_compact_wavenumber(iy, kmax);
    k[2] = (double)kz;
}

// exp(−ν|k|²Δt/2) with the CPU's order of operations (solver.rs `step`).
__device__ __forceinline__ double sp_ehalf(double nu, double k2, double dt)
{
    return exp(-nu * k2 * 0.5 * dt);
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
        sp_mode_k(i, kmax, k);
        const double h = sp_ehalf(nu, k[0] * k[0] + k[1] * k[1] + k[2] * k[2], dt);
        const double f = h * h;
#pragma unroll
        for (int c = 0; c < 3; c++) {
            const double2 u = uh[c * len + i], q = k1[c * len + i];
            acc[c * len + i] = sp_scale(sp_add(u, sp_scale(q, dt / 6.0)), f);
            sa[c * len + i] = sp_scale(sp_add(u, sp_scale(q, 0.5 * dt)), h);
        }
    }
}

// The projected nonlinear term of every retained mode from the three forward-transformed
// products (half spectra on the m grid, hstride apart; scaled by 1/m³ here), and what the stage
// does with it (solver.rs `step`, with k = P F[u × ω] of this right-hand side):
//   stage 0: k1 = the retained modes as transformed, not projected (the diagnostics of a field
//            given on the grid, src/spectral/gpu.rs `DeviceGridDiagnostics`);
//   stage 1: k1 = k;
//   stage 2: acc += Δt/3 E_h k;  sb = E_h û + Δt/2 k;
//   stage 3: acc += Δt/3 E_h k;  sa = E û + Δt E_h k;
//   stage 4: acc += Δt/6 k.
// The projection is solver.rs `leray`: zero at k = 0, else v − k (k·v)/|k|².
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
        sp_mode_k(i, kmax, k);
        const int x = k[0] >= 0 ? (int)k[0] : (int)k[0] + m;
        const int y = k[1] >= 0 ? (int)k[1] : (int)k[1] + m;
        const long long p = ((long long)x * m + y) * mh + (long long)k[2];
        double2 n[3];
#pragma unroll
        for (int c = 0; c < 3; c++) n[c] = sp_scale(h[c * hstride + p], scale);
        if (stage == 0) {
#pragma unroll
            for (int c = 0; c < 3; c++) k1[c * len + i] = n[c];
            continue;
        }
        const double k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
        double2 q[3];
        if (k2 == 0.0) {
#pragma unroll
            for (int c = 0; c < 3; c++) q[c] = make_double2(0.0, 0.0);
        } else {
            const double2 kv = sp_add(sp_add(sp_scale(n[0], k[0]), sp_scale(n[1], k[1])), sp_scale(n[2], k[2]));
            const double2 dot = make_double2(kv.x / k2, kv.y / k2);
#pragma unroll
            for (int c = 0; c < 3; c++) q[c] = sp_sub(n[c], sp_scale(dot, k[c]));
        }
        if (stage == 1) {
#pragma unroll
            for (int c = 0; c < 3; c++) k1[c * len + i] = q[c];
            continue;
        }
        const double eh = stage == 4 ? 1.0 : sp_ehalf(nu, k2, dt);
#pragma unroll
        for (int c = 0; c < 3; c++) {
            const long long j = c * len + i;
            if (stage == 2) {
                acc[j] = sp_add(acc[j], sp_scale(q[c], dt / 3.0 * eh));
                sb[j] = sp_add(sp_scale(uh[j], eh), sp_scale(q[c], 0.5 * dt));
            } else if (stage == 3) {
                acc[j] = sp_add(acc[j], sp_scale(q[c], dt / 3.0 * eh));
                sa[j] = sp_add(sp_scale(uh[j], eh * eh), sp_scale(q[c], dt * eh));
            } else {
                acc[j] = sp_add(acc[j], sp_scale(q[c], dt / 6.0));
            }
        }
    }
}

// Makes the k_z = 0 plane of each of the 3 components Hermitian (layout.rs
// `enforce_hermitian`): for every pair (k, −k) with (k_y, k_x) lexicographically positive,
// a = ½(a + conj b), b = conj a; and the mean mode real. One thread per (iy, ix).
extern "C" __global__ void sp_hermitian(double2 *__restrict__ v, long long len, int kmax)
{
    const int side = 2 * kmax + 1, nz = kmax + 1;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= side * side) return;
    const int iy = t / side, ix = t % side;
    const int ky = sp_compact_wavenumber(iy, kmax), kx = sp_compact_wavenumber(ix, kmax);
#pragma unroll
    for (int c = 0; c < 3; c++) {
        double2 *d = v + c * len;
        if (ky > 0 || (ky == 0 && kx > 0)) {
            const int jx = kx == 0 ? 0 : side - ix, jy = ky == 0 ? 0 : side - iy;
            const long long a = ((long long)iy * side + ix) * nz;
            const long long b = ((long long)jy * side + jx) * nz;
            const double2 da = d[a], db = d[b];
            const double2 avg = make_double2(0.5 * (da.x + db.x), 0.5 * (da.y - db.y));
            d[a] = avg;
            d[b] = make_double2(avg.x, -avg.y);
        } else if (kx == 0 && ky == 0) {
            d[0].y = 0.0;
        }
    }
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

// Fixed-order tree sum over the block of SP_THREADS values (all threads take part).
__device__ __forceinline__ double sp_block_sum(double x, double *s)
{
    const int t = threadIdx.x;
    __syncthreads();
    s[t] = x;
    __syncthreads();
    for (int off = SP_THREADS / 2; off > 0; off >>= 1) {
        if (t < off) s[t] += s[t + off];
        __syncthreads();
    }
    return s[0];
}

// Shell of a mode (flow.rs `shell_of`): ⌊|k| + ½⌋.
__device__ __forceinline__ int sp_shell(double k2) { return (int)floor(sqrt(k2) + 0.5); }

// The mode sums of the diagnostics (flow.rs), one block per k_y row iy (gridDim.x = side,
// blockDim.x = SP_THREADS, thread t handling ix = t, t + SP_THREADS, …; side ≤ 4·SP_THREADS):
// with e = ½|û|² and w the multiplicity of the stored mode (1 at k_z = 0, else 2), the row's
//   scalars[4·iy ..] = Σ w e, Σ w e |k|², Σ_{k≠0} w e/|k|, Σ w Re(û*·(k1 − ν|k|²û)) (k1 null: 0),
//   shells[nshell·iy + s] = Σ_{shell(k) = s} w e.
// The host adds the rows in row order (as flow.rs adds its per-row partial spectra).
extern "C" __global__ void sp_mode_sums(const double2 *__restrict__ u, const double2 *__restrict__ k1,
                                        long long len, int kmax, double nu, int nshell,
                                        double *__restrict__ scalars, double *__restrict__ shells)
{
    __shared__ double s[SP_THREADS];
    const int side = 2 * kmax + 1, nz = kmax + 1;
    const int iy = blockIdx.x;
    const double ky = (double)sp_compact_wavenumber(iy, kmax);
    double en = 0.0, ens = 0.0, inv = 0.0, dk = 0.0;
    for (int ix = threadIdx.x; ix < side; ix += SP_THREADS) {
        const double kx = (double)sp_compact_wavenumber(ix, kmax);
        const long long base = ((long long)iy * side + ix) * nz;
        for (int kz = 0; kz < nz; kz++) {
            const long long i = base + kz;
            const double2 a = u[i], b = u[len + i], c = u[2 * len + i];
            const double e = 0.5 * ((a.x * a.x + a.y * a.y) + (b.x * b.x + b.y * b.y) +
                                    (c.x * c.x + c.y * c.y));
            const double w = kz == 0 ? 1.0 : 2.0;
            const double k2 = kx * kx + ky * ky + (double)kz * kz;
            en += w * e;
            ens += w * e * k2;
            if (k2 > 0.0) inv += w * e / sqrt(k2);
            if (k1) {
                double d = 0.0;
#pragma unroll
                for (int q = 0; q < 3; q++) {
                    const double2 uu = u[q * len + i], kk = k1[q * len + i];
                    const double2 r = sp_sub(kk, sp_scale(uu, nu * k2));
                    d += uu.x * r.x + uu.y * r.y;
                }
                dk += w * d;
            }
        }
    }
    const double t_en = sp_block_sum(en, s);
    const double t_ens = sp_block_sum(ens, s);
    const double t_inv = sp_block_sum(inv, s);
    const double t_dk = sp_block_sum(dk, s);
    if (threadIdx.x == 0) {
        scalars[4 * iy] = t_en;
        scalars[4 * iy + 1] = t_ens;
        scalars[4 * iy + 2] = t_inv;
        scalars[4 * iy + 3] = t_dk;
    }
    // The shell spectrum: along each k_z line the shell never decreases, so every thread walks
    // its lines with one cursor each while the block goes through the shells in order.
    int cur[4] = {0, 0, 0, 0};
    for (int sh = 0; sh < nshell; sh++) {
        double part = 0.0;
        int j = 0;
        for (int ix = threadIdx.x; ix < side; ix += SP_THREADS, j++) {
            const double kx = (double)sp_compact_wavenumber(ix, kmax);
            const long long base = ((long long)iy * side + ix) * nz;
            while (cur[j] < nz) {
                const int kz = cur[j];
                const double k2 = kx * kx + ky * ky + (double)kz * kz;
                if (sp_shell(k2) != sh) break;
                const long long i = base + kz;
                const double2 a = u[i], b = u[len + i], c = u[2 * len + i];
                const double e = 0.5 * ((a.x * a.x + a.y * a.y) + (b.x * b.x + b.y * b.y) +
                                        (c.x * c.x + c.y * c.y));
                part += (kz == 0 ? 1.0 : 2.0) * e;
                cur[j]++;
            }
        }
        const double tot = sp_block_sum(part, s);
        if (threadIdx.x == 0) shells[(long long)nshell * iy + sh] = tot;
    }
}
