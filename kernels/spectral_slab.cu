// One rank of the pseudo-spectral solver across several GPUs, in f64 (docs/physics.md §5.6): the
// device side of src/spectral/gpu_slab.rs over the slab decomposition of src/spectral/slab.rs.
// The formulas are spectral.cu's (shared through "spectral.cuh"); only the layouts differ.
// sp_cross, sp_max_abs, sp_max_norm2 and sp_nonfinite of spectral.cu act on this rank's slab
// as they are.
//
// Layouts on rank r of P (K the largest retained |k_i|, side = 2K + 1, M the grid of the
// transforms, Mh = M/2 + 1, planes = M/P, nzl = nz_local(r), kz0 its first k_z):
// - local modes `[iy][ix][kzl]` (index (iy·side + ix)·nzl + kzl), components `len` apart;
// - pencil buffer `[x (DFT index of k_x, 0..M)][iy][kzl]`, fields `pstride` apart;
// - exchange buffer: the chunks `[x_local][iy][kzl(r')]` of the P pencil ranks r' in rank order
//   (chunk r' at planes·side·kz_start(r')), fields `estride` apart;
// - half spectra `[x_local][y][kz]` (planes·M·Mh per field, contiguous fields), real fields
//   `[x_local][y][z]`.

#include "spectral.cuh"

// The k_z split of slab.rs `kz_range`: nz = K + 1 values over P ranks, the first nz mod P ranks
// one more. The rank holding kz, the first k_z of that rank and its count.
__device__ __forceinline__ void sps_kz_owner(int kz, int kmax, int ranks, int &start, int &count)
{
    const int nz = kmax + 1, base = nz / ranks, extra = nz % ranks;
    const int bound = extra * (base + 1);
    if (kz < bound) {
        const int r = kz / (base + 1);
        start = r * (base + 1);
        count = base + 1;
    } else {
        const int r = extra + (kz - bound) / base;
        start = bound + (r - extra) * base;
        count = base;
    }
}

// Index, in one field of a slab rank's exchange buffer, of (x_local, iy, kz): slab.rs
// `exchange_index`.
__device__ __forceinline__ long long sps_exchange_index(int xl, int iy, int kz, int planes,
                                                        int kmax, int ranks)
{
    int start, count;
    sps_kz_owner(kz, kmax, ranks, start, count);
    const int side = 2 * kmax + 1;
    return (long long)planes * side * start + ((long long)xl * side + iy) * count + (kz - start);
}

// The three indices of position p = (a·nb + b)·nc + c.
__device__ __forceinline__ void sps_split3(long long p, int nb, int nc, int &a, int &b, int &c)
{
    c = (int)(p % nc);
    const long long ab = p / nc;
    b = (int)(ab % nb);
    a = (int)(ab / nb);
}

// Quantity q at a retained mode (wavevector k, velocity u): 0–2 velocity component q,
// 3 the divergence i k·v̂, 4–6 vorticity component q − 4 of i k × v̂.
__device__ __forceinline__ double2 sps_quantity(int q, const double k[3], const double2 u[3],
                                                const double2 w[3])
{
    if (q < 3) return u[q];
    if (q == 3) return sp_divergence(k, u[0], u[1], u[2]);
    return w[q - 4];
}

// The pencil buffer of `count` fields from the local modes v (3 components `len` apart; nzl
// values of k_z per line from kz0): field f holds quantity (codes >> 4f) & 15 (sps_quantity) at
// every retained mode, zero at the DFT indices x of k_x beyond K. Every position is written.
extern "C" __global__ void sps_gather(const double2 *__restrict__ v, long long len, int nzl,
                                      int kz0, double2 *__restrict__ pen, long long pstride,
                                      int m, int kmax, int codes, int count)
{
    const int side = 2 * kmax + 1;
    const long long line = (long long)side * nzl;
    const long long n = (long long)m * line;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (long long)gridDim.x * blockDim.x) {
        int x, iy, kzl;
        sps_split3(p, side, nzl, x, iy, kzl);
        const int kx = sp_dft_wavenumber(x, m);
        if (kx > kmax || kx < -kmax) {
            for (int f = 0; f < count; f++) pen[f * pstride + p] = make_double2(0.0, 0.0);
            continue;
        }
        const int ix = kx >= 0 ? kx : kx + side;
        const long long i = ((long long)iy * side + ix) * nzl + kzl;
        double k[3];
        k[0] = (double)kx;
        k[1] = (double)sp_compact_wavenumber(iy, kmax);
        k[2] = (double)(kz0 + kzl);
        double2 u[3], w[3];
#pragma unroll
        for (int c = 0; c < 3; c++) u[c] = v[c * len + i];
        sp_curl(k, u, w);
        for (int f = 0; f < count; f++) pen[f * pstride + p] = sps_quantity((codes >> (4 * f)) & 15, k, u, w);
    }
}

// Between the half spectra of `fields` fields (planes·M·Mh each, contiguous) and the exchange
// buffer (fields `estride` apart). to_half = 1: slab.rs `unpack`, every half-spectrum position
// written (zero where it holds no retained row or k_z); to_half = 0: slab.rs `pack`, the retained
// rows copied into the exchange buffer. One thread per half-spectrum position.
extern "C" __global__ void sps_halves(double2 *__restrict__ h, double2 *__restrict__ ex,
                                      long long estride, int fields, int planes, int m, int kmax,
                                      int ranks, int to_half)
{
    const int mh = m / 2 + 1;
    const long long hlen = (long long)planes * m * mh;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < hlen;
         p += (long long)gridDim.x * blockDim.x) {
        int xl, y, kz;
        sps_split3(p, m, mh, xl, y, kz);
        const int ky = sp_dft_wavenumber(y, m);
        if (kz > kmax || ky > kmax || ky < -kmax) {
            if (to_half)
                for (int f = 0; f < fields; f++) h[f * hlen + p] = make_double2(0.0, 0.0);
            continue;
        }
        const int iy = ky >= 0 ? ky : ky + 2 * kmax + 1;
        const long long e = sps_exchange_index(xl, iy, kz, planes, kmax, ranks);
        for (int f = 0; f < fields; f++) {
            if (to_half)
                h[f * hlen + p] = ex[f * estride + e];
            else
                ex[f * estride + e] = h[f * hlen + p];
        }
    }
}

// The nonlinear term of every local mode from the three forward-transformed products in the
// pencil buffer (pstride apart; scaled by `scale` = 1/M³ here), and what the stage does with it
// (spectral.cuh `sp_store_mode`).
extern "C" __global__ void sps_store(const double2 *__restrict__ pen, long long pstride, int m,
                                     int nzl, int kz0, double scale, int kmax, long long len,
                                     int stage, double nu, double dt,
                                     const double2 *__restrict__ uh, double2 *__restrict__ k1,
                                     double2 *__restrict__ acc, double2 *__restrict__ sa,
                                     double2 *__restrict__ sb)
{
    const int side = 2 * kmax + 1;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (long long)gridDim.x * blockDim.x) {
        double k[3];
        sp_local_mode_k(i, kmax, nzl, kz0, k);
        const int kzl = (int)(i % nzl);
        const int iy = (int)(i / nzl / side);
        const int x = k[0] >= 0 ? (int)k[0] : (int)k[0] + m;
        const long long p = ((long long)x * side + iy) * nzl + kzl;
        double2 n[3];
#pragma unroll
        for (int c = 0; c < 3; c++) n[c] = sp_scale(pen[c * pstride + p], scale);
        sp_store_mode(k, n, i, len, stage, nu, dt, uh, k1, acc, sa, sb);
    }
}

// The first stage of a Lawson RK4 step on the local modes (spectral.cuh `sp_rk_begin_mode`).
extern "C" __global__ void sps_rk_begin(const double2 *__restrict__ uh,
                                        const double2 *__restrict__ k1, double2 *__restrict__ acc,
                                        double2 *__restrict__ sa, long long len, int kmax, int nzl,
                                        int kz0, double nu, double dt)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (long long)gridDim.x * blockDim.x) {
        double k[3];
        sp_local_mode_k(i, kmax, nzl, kz0, k);
        sp_rk_begin_mode(k, i, len, uh, k1, acc, sa, nu, dt);
    }
}

// The k_z = 0 plane of the local modes (rank 0: kz0 = 0) made Hermitian. One thread per
// (iy, ix).
extern "C" __global__ void sps_hermitian(double2 *__restrict__ v, long long len, int kmax, int nzl)
{
    const int side = 2 * kmax + 1;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= side * side) return;
    sp_hermitian_line(v, len, kmax, nzl, t);
}

// The mode sums of the local modes, one block per k_y row (spectral.cuh `sp_row_sums`;
// gridDim.x = side, blockDim.x = SP_THREADS, side ≤ 4·SP_THREADS).
extern "C" __global__ void sps_mode_sums(const double2 *__restrict__ u,
                                         const double2 *__restrict__ k1, long long len, int kmax,
                                         int nzl, int kz0, double nu, int nshell,
                                         double *__restrict__ scalars,
                                         double *__restrict__ shells)
{
    sp_row_sums(u, k1, len, kmax, nzl, kz0, nu, nshell, scalars, shells);
}
