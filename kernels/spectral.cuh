// The pseudo-spectral solver's device helpers, written once and included by spectral.cu (one
// GPU) and spectral_slab.cu (one rank of the slab decomposition, src/spectral/gpu_slab.rs): the
// wavenumbers of compact and DFT indices, complex arithmetic, ω̂ = i k × v̂, i k·v̂, the Lawson RK4
// updates of one retained mode, the Hermitian k_z = 0 plane, the block reductions and the mode
// sums of one k_y row. Compiled by NVRTC as the named header "spectral.cuh" (src/spectral/gpu.rs
// SPECTRAL_HEADER).
//
// Mode layouts: a compact layout `[iy][ix][kz_local]` with `nz` values of k_z per line, starting
// at k_z = kz0 (the one-GPU solver: nz = K + 1, kz0 = 0; a rank of the slab solver: its
// nz_local and the first k_z of its range); components `len` apart.

#ifndef VPM_SPECTRAL_CUH
#define VPM_SPECTRAL_CUH

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

// exp(−ν|k|²Δt/2) with the CPU's order of operations (solver.rs `step`).
__device__ __forceinline__ double sp_ehalf(double nu, double k2, double dt)
{
    return exp(-nu * k2 * 0.5 * dt);
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

// Wavevector of mode i of a compact layout with nz values of k_z per line from kz0.
__device__ __forceinline__ void sp_local_mode_k(long long i, int kmax, int nz, int kz0, double k[3])
{
    const int side = 2 * kmax + 1;
    const int kz = (int)(i % nz);
    const long long b = i / nz;
    const int ix = (int)(b % side), iy = (int)(b / side);
    k[0] = (double)sp_compact_wavenumber(ix, kmax);
    k[1] = (double)sp_compact_wavenumber(iy, kmax);
    k[2] = (double)(kz0 + kz);
}

// i (k·v̂), as flow.rs `max_divergence` forms it.
__device__ __forceinline__ double2 sp_divergence(const double k[3], double2 a, double2 b, double2 c)
{
    const double2 d = sp_add(sp_add(sp_scale(a, k[0]), sp_scale(b, k[1])), sp_scale(c, k[2]));
    return make_double2(-d.y, d.x);
}

// The first stage of a Lawson RK4 step at mode i (wavevector k) from û and k1 = N(û)
// (solver.rs `step`): acc = E(û + Δt/6 k1), sa = E_h(û + Δt/2 k1), E_h = exp(−ν|k|²Δt/2),
// E = E_h².
__device__ __forceinline__ void sp_rk_begin_mode(const double k[3], long long i, long long len,
                                                 const double2 *__restrict__ uh,
                                                 const double2 *__restrict__ k1,
                                                 double2 *__restrict__ acc, double2 *__restrict__ sa,
                                                 double nu, double dt)
{
    const double h = sp_ehalf(nu, k[0] * k[0] + k[1] * k[1] + k[2] * k[2], dt);
    const double f = h * h;
#pragma unroll
    for (int c = 0; c < 3; c++) {
        const double2 u = uh[c * len + i], q = k1[c * len + i];
        acc[c * len + i] = sp_scale(sp_add(u, sp_scale(q, dt / 6.0)), f);
        sa[c * len + i] = sp_scale(sp_add(u, sp_scale(q, 0.5 * dt)), h);
    }
}

// What a stage does with the nonlinear term n (already scaled by 1/M³) of mode i, wavevector k
// (solver.rs `step`, with q = P n the projected term):
//   stage 0: k1 = n (not projected: the diagnostics of a field given on the grid);
//   stage 1: k1 = q;
//   stage 2: acc += Δt/3 E_h q;  sb = E_h û + Δt/2 q;
//   stage 3: acc += Δt/3 E_h q;  sa = E û + Δt E_h q;
//   stage 4: acc += Δt/6 q.
// The projection is solver.rs `leray`: zero at k = 0, else v − k (k·v)/|k|².
__device__ __forceinline__ void sp_store_mode(const double k[3], const double2 n[3], long long i,
                                              long long len, int stage, double nu, double dt,
                                              const double2 *__restrict__ uh,
                                              double2 *__restrict__ k1, double2 *__restrict__ acc,
                                              double2 *__restrict__ sa, double2 *__restrict__ sb)
{
    if (stage == 0) {
#pragma unroll
        for (int c = 0; c < 3; c++) k1[c * len + i] = n[c];
        return;
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
        return;
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

// The k_z = 0 plane (the first value of every line, lines nz apart) of each of the 3 components
// made Hermitian for line t = iy·side + ix (layout.rs `enforce_hermitian`): for every pair
// (k, −k) with (k_y, k_x) lexicographically positive, a = ½(a + conj b), b = conj a; and the
// mean mode real.
__device__ __forceinline__ void sp_hermitian_line(double2 *__restrict__ v, long long len, int kmax,
                                                  int nz, int t)
{
    const int side = 2 * kmax + 1;
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

// The mode sums of the diagnostics (flow.rs) over k_y row iy = blockIdx.x of a compact layout
// (nz values of k_z from kz0 per line; blockDim.x = SP_THREADS, thread t handling ix = t,
// t + SP_THREADS, …; side ≤ 4·SP_THREADS): with e = ½|û|² and w the multiplicity of the stored
// mode (1 at k_z = 0, else 2), the row's
//   scalars[4·iy ..] = Σ w e, Σ w e |k|², Σ_{k≠0} w e/|k|, Σ w Re(û*·(k1 − ν|k|²û)) (k1 null: 0),
//   shells[nshell·iy + s] = Σ_{shell(k) = s} w e.
__device__ __forceinline__ void sp_row_sums(const double2 *__restrict__ u,
                                            const double2 *__restrict__ k1, long long len,
                                            int kmax, int nz, int kz0, double nu, int nshell,
                                            double *__restrict__ scalars,
                                            double *__restrict__ shells)
{
    __shared__ double s[SP_THREADS];
    const int side = 2 * kmax + 1;
    const int iy = blockIdx.x;
    const double ky = (double)sp_compact_wavenumber(iy, kmax);
    double en = 0.0, ens = 0.0, inv = 0.0, dk = 0.0;
    for (int ix = threadIdx.x; ix < side; ix += SP_THREADS) {
        const double kx = (double)sp_compact_wavenumber(ix, kmax);
        const long long base = ((long long)iy * side + ix) * nz;
        for (int kl = 0; kl < nz; kl++) {
            const int kz = kz0 + kl;
            const long long i = base + kl;
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
                const int kz = kz0 + cur[j];
                const double k2 = kx * kx + ky * ky + (double)kz * kz;
                if (sp_shell(k2) != sh) break;
                const long long i = base + cur[j];
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

#endif // VPM_SPECTRAL_CUH
