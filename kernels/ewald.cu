// Periodic Biot–Savart by Ewald splitting on the GPU (docs/physics.md §4): the method, conventions and
// parameters of src/summation/ewald/ (read its module docs first), in f32 arithmetic with f64
// positions in and f64 results out. Driven by src/summation/ewald/engine.rs; compiled by NVRTC at
// run time.
//
// Smooth part (particle-mesh Ewald with a Kaiser–Bessel window of w = P nodes per axis and shape β
// on an M³ grid, nodes at x_g = −π + g·h, h = 2π/M; window.rs):
//   ew_grid_keys / sort_scan_* (sort.cu) / ew_scatter / ew_sort_buckets / ew_pack_grid
//       sort the sources by their first support node (a counting sort, made deterministic by
//       ordering each bucket by source index) and pack them: (δ, key) and α in f32;
//   ew_spread     H(x_g) = Σ_q α_q (φ/φ̂(0))³(x_g − x_q): one block per 16×16×8 tile of nodes, each
//                 thread owns an 8-node z column in registers and visits the sources whose support
//                 meets the tile (found through the bucket starts, row by row); no atomics, so the
//                 grid is bit-reproducible;
//   (cuFFT R2C, batch of 3)
//   ew_multiply   Ĥ → (i k × Ĥ)/k² · T(k_x) T(k_y) T(k_z) / M³, T(k) = e^{−k²η²/2}/(φ̂(k)/φ̂(0))²
//                 (a per-axis table), k = 0 and |k_i| > K (the band) dropped (the CPU's modes);
//   (cuFFT C2R, batch of 3)
//   ew_gather_*   u(x) = h³ Σ_g F(x_g) (φ/φ̂(0))³(x − x_g) and, for stretching or the gradient, the
//                 exact derivative of that sum; stretching from the gradient (classical
//                 Σ_j α_j ∂_j u_i, transposed Σ_j ∂_i u_j α_j).
// Real-space part (sources with σ_q ≠ η, cutoff r_c): ew_cell_keys … ew_pack_cells sort them into
// cells of side ≥ r_c/2; ew_real_* adds, per target, Σ [kernel(σ_q) − kernel(η)] over the 5³
// neighbour cells (minimum image), or over explicit images of every source when r_c ≥ π
// (cells = 0), to the mesh results.
// Blob vorticity: ew_vorticity sums α_q ζ_σq(x − x_q) over sources within 7σ_q, same cell lists,
// in f64.
//
// Layouts: positions, strengths, targets and outputs are f64 arrays of 3 (gradient: 9, row-major
// ∂u_i/∂x_j) per item. Grids: 3 real arrays of M³ (index (x·M + y)·M + z), spectra: 3 complex
// arrays of M·M·(M/2 + 1) (cuFFT's R2C layout).
//
// The pair kernel is common.cuh's (src/kernel.rs g3_g5 and pair_terms on the device) in f32: G5
// and G3 by the positive series S5 below ρ = 2 (13 terms), the erf form above.

#include "common.cuh"
#include "scan.cuh"
#include "box.cuh"

typedef unsigned int uint;

// (x, y, z, σ) of a cell-list source, one 32-byte load.
struct __align__(32) ew_d4 {
    double x, y, z, w;
};

#define EW_PI 3.141592653589793
#define EW_TAU 6.283185307179586

// ---- pair kernel (common.cuh, f32) -------------------------------------------------------------

// k = G3/(4πσ³), l = G5/(4πσ⁵) at distance² r2 for core 1/σ = inv_s (src/kernel.rs pair_terms).
__device__ __forceinline__ void ew_pair_kl(float r2, float inv_s, float &k, float &l)
{
    const float rho = sqrtf(r2) * inv_s;
    const float x = rho * rho;
    const float e = expf(-0.5f * x);
    const float ce = (float)VPM_SQRT_2_OVER_PI * e;
    float g3, g5;
    if (rho < VPM_SERIES_RHO_F32) {
        vpm_g3_g5_series(x, ce, g3, g5);
    } else {
        const float g = erff(rho * (float)VPM_FRAC_1_SQRT_2) - ce * rho;
        vpm_g3_g5_from_g(g, ce, rho, x, g3, g5);
    }
    const float inv_s3 = inv_s * inv_s * inv_s;
    k = (float)VPM_FRAC_1_4PI * g3 * inv_s3;
    l = (float)VPM_FRAC_1_4PI * g5 * inv_s3 * inv_s * inv_s;
}

// ---- positions ----------------------------------------------------------------------------------

// Window::locate: first support node (0..M) and δ = u − first (u the position in grid units).
__device__ __forceinline__ void ew_locate(const double *x, int M, int P, double h, int first[3],
                                          float delta[3])
{
#pragma unroll
    for (int d = 0; d < 3; d++) {
        const double u = (box_wrap(x[d]) + EW_PI) / h;
        const double s = floor(u + 1.0 - 0.5 * (double)P);
        delta[d] = (float)(u - s);
        long long si = (long long)s % M;
        if (si < 0) si += M;
        first[d] = (int)si;
    }
}

// Minimum image of a difference of two wrapped coordinates (src/summation/cells.rs `fold`).
__device__ __forceinline__ double ew_fold(double r)
{
    return r > EW_PI ? r - EW_TAU : (r < -EW_PI ? r + EW_TAU : r);
}

// Cell of a coordinate (Neighbours::build / visit): min(⌊(wrap(x) + π)/side⌋, n − 1).
__device__ __forceinline__ int ew_cell_axis(double w, double side, int n)
{
    int c = (int)((w + EW_PI) / side);
    return c < n - 1 ? c : n - 1;
}

// ---- counting sort ------------------------------------------------------------------------------

// Key (first support node) of every source; slot = its arrival in the bucket (made deterministic
// later by ew_sort_buckets).
extern "C" __global__ void ew_grid_keys(const double *__restrict__ x, int n, int M, int P,
                                        double h, int *__restrict__ keys,
                                        int *__restrict__ slots, int *__restrict__ counts)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int f[3];
    float d[3];
    ew_locate(x + 3 * (size_t)i, M, P, h, f, d);
    const int key = (f[0] * M + f[1]) * M + f[2];
    keys[i] = key;
    slots[i] = atomicAdd(&counts[key], 1);
}

// Cell key of selected source i (sel[i], or i when sel is null); cells = 0: one bucket.
extern "C" __global__ void ew_cell_keys(const double *__restrict__ x, const int *__restrict__ sel,
                                        int n, int cells, double side, int *__restrict__ keys,
                                        int *__restrict__ slots, int *__restrict__ counts)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t q = sel ? (size_t)sel[i] : (size_t)i;
    int key = 0;
    if (cells > 0) {
        const int cx = ew_cell_axis(box_wrap(x[3 * q]), side, cells);
        const int cy = ew_cell_axis(box_wrap(x[3 * q + 1]), side, cells);
        const int cz = ew_cell_axis(box_wrap(x[3 * q + 2]), side, cells);
        key = (cx * cells + cy) * cells + cz;
    }
    keys[i] = key;
    slots[i] = atomicAdd(&counts[key], 1);
}

extern "C" __global__ void ew_scatter(const int *__restrict__ keys, const int *__restrict__ slots,
                                      const int *__restrict__ start, int n,
                                      int *__restrict__ order)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    order[start[keys[i]] + slots[i]] = i;
}

// Orders each bucket by item index (insertion sort; buckets hold a handful of items).
extern "C" __global__ void ew_sort_buckets(const int *__restrict__ start, long long nb,
                                           int *__restrict__ order)
{
    const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nb) return;
    const int lo = start[b], hi = start[b + 1];
    for (int i = lo + 1; i < hi; i++) {
        const int v = order[i];
        int j = i - 1;
        while (j >= lo && order[j] > v) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
}

// Sorted mesh sources: sd = (δx, δy, δz, key as bits), sa = (α, 0).
extern "C" __global__ void ew_pack_grid(const int *__restrict__ order, const double *__restrict__ x,
                                        const double *__restrict__ alpha, int n, int M, int P,
                                        double h, float4 *__restrict__ sd,
                                        float4 *__restrict__ sa)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t q = (size_t)order[i];
    int f[3];
    float d[3];
    ew_locate(x + 3 * q, M, P, h, f, d);
    const int key = (f[0] * M + f[1]) * M + f[2];
    sd[i] = make_float4(d[0], d[1], d[2], __int_as_float(key));
    sa[i] = make_float4((float)alpha[3 * q], (float)alpha[3 * q + 1], (float)alpha[3 * q + 2], 0.0f);
}

// Sorted cell-list sources: sp = (wrapped x, σ) in f64 (distances are taken in f64: an f32
// coordinate near π is off by up to 1.2e-7, 2e-6 of a core of 0.05), sa = (α, 0).
extern "C" __global__ void ew_pack_cells(const int *__restrict__ order, const int *__restrict__ sel,
                                         const double *__restrict__ x,
                                         const double *__restrict__ alpha,
                                         const double *__restrict__ sigma, int n,
                                         ew_d4 *__restrict__ sp, float4 *__restrict__ sa)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int item = order[i];
    const size_t q = sel ? (size_t)sel[item] : (size_t)item;
    sp[i] = ew_d4{box_wrap(x[3 * q]), box_wrap(x[3 * q + 1]), box_wrap(x[3 * q + 2]), sigma[q]};
    sa[i] = make_float4((float)alpha[3 * q], (float)alpha[3 * q + 1], (float)alpha[3 * q + 2], 0.0f);
}

// ---- the Kaiser–Bessel window (src/summation/ewald/window.rs) -----------------------------------

// The 1-D weight I₀(β s)/I₀(β) at a node e grid units from the position, s² = 1 − e²·c4
// (c4 = 4/w²), zero outside the support; inv_i0b = 1/I₀(β) keeps every value ≤ 1 (β ≤ 16π).
__device__ __forceinline__ float ew_kb(float e, float beta, float c4, float inv_i0b)
{
    const float s2 = 1.0f - e * e * c4;
    return s2 >= 0.0f ? cyl_bessel_i0f(beta * sqrtf(s2)) * inv_i0b : 0.0f;
}

// The weight and, in dw, its derivative with respect to e: −β c4 e I₁(β s)/s / I₀(β) (I₁(β s)/s →
// β/2 (1 + (β s)²/8) as s → 0).
__device__ __forceinline__ float ew_kb_d(float e, float beta, float c4, float inv_i0b, float &dw)
{
    const float s2 = 1.0f - e * e * c4;
    if (s2 < 0.0f) {
        dw = 0.0f;
        return 0.0f;
    }
    const float s = sqrtf(s2);
    const float bs = beta * s;
    const float i1s = s > 1e-4f ? cyl_bessel_i1f(bs) / s : 0.5f * beta * (1.0f + 0.125f * bs * bs);
    dw = -beta * c4 * e * i1s * inv_i0b;
    return cyl_bessel_i0f(bs) * inv_i0b;
}

// ---- spreading ----------------------------------------------------------------------------------

#define SP_TX 16
#define SP_TY 16
#define SP_TZ 8
#define SP_THREADS (SP_TX * SP_TY)
#define SP_ROWS 512
#define SP_CH 128

// One block per tile of SP_TX × SP_TY × SP_TZ nodes; thread (tx, ty) accumulates the SP_TZ nodes
// of its z column. The sources whose support meets the tile have their first node in
// [x0 − P + 1, x0 + SP_TX − 1] × … (mod M): for each such (fx, fy) row the bucket starts give one
// or two contiguous runs of the sorted sources. Rows are taken SP_ROWS at a time, their sources
// SP_CH at a time into shared memory (with α·w at the tile's z nodes and the window's weights at
// the tile's SP_TX x and SP_TY y columns precomputed, zero outside the support), then every
// thread adds the sources that reach its column. Deterministic: fixed visiting order.
//   beta, c4 = 4/w², inv_i0b = 1/I₀(β): the Kaiser–Bessel window (ew_kb); norm3 = (I₀(β)/φ̂(0))³,
//   the factor that makes the product of three weights the normalised window (φ/φ̂(0))³.
extern "C" __global__ void __launch_bounds__(SP_THREADS)
    ew_spread(const float4 *__restrict__ sd, const float4 *__restrict__ sa,
              const int *__restrict__ start, int M, int P, float beta, float c4, float inv_i0b,
              float norm3, float *__restrict__ grid)
{
    __shared__ int s_off[SP_ROWS + 1];
    __shared__ int s_a0[SP_ROWS], s_a1[SP_ROWS], s_b0[SP_ROWS];
    __shared__ float4 s_xy[SP_CH];
    __shared__ float4 s_w[6][SP_CH];
    // Weights at the tile's columns, source-major (a warp reads 16 consecutive x values).
    __shared__ float s_wx[SP_CH][SP_TX];
    __shared__ float s_wy[SP_CH][SP_TY];
    __shared__ int s_warp[32];

    // One-dimensional block of SP_THREADS: thread (tx, ty) = (tid mod SP_TX, tid / SP_TX), so a
    // warp covers 16 × 2 columns.
    const int tid = threadIdx.x;
    const int x0 = blockIdx.x * SP_TX, y0 = blockIdx.y * SP_TY, z0 = blockIdx.z * SP_TZ;
    const int gx = x0 + tid % SP_TX, gy = y0 + tid / SP_TX;
    const bool valid = gx < M && gy < M;

    const int nrx = min(SP_TX + P - 1, M), nry = min(SP_TY + P - 1, M);
    const int nrz = min(SP_TZ + P - 1, M);
    const int rx0 = nrx == M ? 0 : (x0 - P + 1 + M) % M;
    const int ry0 = nry == M ? 0 : (y0 - P + 1 + M) % M;
    const int rz0 = nrz == M ? 0 : (z0 - P + 1 + M) % M;
    const int nrows = nrx * nry;

    float acc[SP_TZ][3];
#pragma unroll
    for (int k = 0; k < SP_TZ; k++) acc[k][0] = acc[k][1] = acc[k][2] = 0.0f;

    for (int rbase = 0; rbase < nrows; rbase += SP_ROWS) {
        const int nr = min(SP_ROWS, nrows - rbase);
        // Runs of each row: [a0, a1) and, when the z range wraps, [b0, b0 + cnt − (a1 − a0)).
        int cnt2[SP_ROWS / SP_THREADS];
        int tot = 0;
#pragma unroll
        for (int k = 0; k < SP_ROWS / SP_THREADS; k++) {
            const int r = tid * (SP_ROWS / SP_THREADS) + k;
            int cnt = 0;
            if (r < nr) {
                const int R = rbase + r;
                int fx = rx0 + R / nry, fy = ry0 + R % nry;
                if (fx >= M) fx -= M;
                if (fy >= M) fy -= M;
                const size_t base = ((size_t)fx * M + fy) * M;
                const int zend = rz0 + nrz;
                int a0, a1, b0 = 0;
                if (zend <= M) {
                    a0 = start[base + rz0];
                    a1 = start[base + zend];
                    cnt = a1 - a0;
                } else {
                    a0 = start[base + rz0];
                    a1 = start[base + M];
                    b0 = start[base];
                    cnt = (a1 - a0) + (start[base + zend - M] - b0);
                }
                s_a0[r] = a0;
                s_a1[r] = a1;
                s_b0[r] = b0;
            }
            cnt2[k] = cnt;
            tot += cnt;
        }
        int total;
        int run = block_exclusive_scan(tot, s_warp, total);
#pragma unroll
        for (int k = 0; k < SP_ROWS / SP_THREADS; k++) {
            s_off[tid * (SP_ROWS / SP_THREADS) + k] = run;
            run += cnt2[k];
        }
        if (tid == 0) s_off[SP_ROWS] = total;
        __syncthreads();

        for (int pbase = 0; pbase < total; pbase += SP_CH) {
            const int np = min(SP_CH, total - pbase);
            if (tid < np) {
                const int j = pbase + tid;
                // Last row r with s_off[r] ≤ j (it has j − s_off[r] < its count).
                int lo = 0, hi = SP_ROWS;
                while (hi - lo > 1) {
                    const int mid = (lo + hi) >> 1;
                    if (s_off[mid] <= j) lo = mid;
                    else hi = mid;
                }
                const int local = j - s_off[lo];
                const int na = s_a1[lo] - s_a0[lo];
                const int idx = local < na ? s_a0[lo] + local : s_b0[lo] + (local - na);
                const float4 d = sd[idx];
                const float4 a = sa[idx];
                const int key = __float_as_int(d.w);
                const int fz = key % M;
                const int fxy = key / M;
                const int fy = fxy % M, fx = fxy / M;
                s_xy[tid] = make_float4(d.x, d.y, __int_as_float(fx), __int_as_float(fy));
                float w[SP_TZ];
#pragma unroll
                for (int k = 0; k < SP_TZ; k++) {
                    const int gz = z0 + k;
                    int dz = gz - fz;
                    if (dz < 0) dz += M;
                    const float e = d.z - (float)dz;
                    w[k] = (gz < M && dz < P) ? norm3 * ew_kb(e, beta, c4, inv_i0b) : 0.0f;
                }
                // 24 floats α_c w_k, k-major: (w0·α, w1·α, …).
                s_w[0][tid] = make_float4(a.x * w[0], a.y * w[0], a.z * w[0], a.x * w[1]);
                s_w[1][tid] = make_float4(a.y * w[1], a.z * w[1], a.x * w[2], a.y * w[2]);
                s_w[2][tid] = make_float4(a.z * w[2], a.x * w[3], a.y * w[3], a.z * w[3]);
                s_w[3][tid] = make_float4(a.x * w[4], a.y * w[4], a.z * w[4], a.x * w[5]);
                s_w[4][tid] = make_float4(a.y * w[5], a.z * w[5], a.x * w[6], a.y * w[6]);
                s_w[5][tid] = make_float4(a.z * w[6], a.x * w[7], a.y * w[7], a.z * w[7]);
            }
            __syncthreads();
            // The x and y weights of the chunk's sources at the tile's columns, spread over all
            // threads (SP_TX + SP_TY per source).
            for (int item = tid; item < np * (SP_TX + SP_TY); item += SP_THREADS) {
                const int q = item / (SP_TX + SP_TY), c = item % (SP_TX + SP_TY);
                const float4 xy = s_xy[q];
                const bool is_x = c < SP_TX;
                const int col = is_x ? c : c - SP_TX;
                const int g = (is_x ? x0 : y0) + col;
                int dd = g - __float_as_int(is_x ? xy.z : xy.w);
                if (dd < 0) dd += M;
                const float e = (is_x ? xy.x : xy.y) - (float)dd;
                const float v = (g < M && dd < P) ? ew_kb(e, beta, c4, inv_i0b) : 0.0f;
                if (is_x) s_wx[q][col] = v;
                else s_wy[q][col] = v;
            }
            __syncthreads();
            if (valid) {
                const int tx = tid % SP_TX, ty = tid / SP_TX;
                for (int q = 0; q < np; q++) {
                    const float wxy = s_wx[q][tx] * s_wy[q][ty];
                    if (wxy != 0.0f) {
                        const float4 w0 = s_w[0][q], w1 = s_w[1][q], w2 = s_w[2][q];
                        const float4 w3 = s_w[3][q], w4 = s_w[4][q], w5 = s_w[5][q];
                        acc[0][0] += wxy * w0.x; acc[0][1] += wxy * w0.y; acc[0][2] += wxy * w0.z;
                        acc[1][0] += wxy * w0.w; acc[1][1] += wxy * w1.x; acc[1][2] += wxy * w1.y;
                        acc[2][0] += wxy * w1.z; acc[2][1] += wxy * w1.w; acc[2][2] += wxy * w2.x;
                        acc[3][0] += wxy * w2.y; acc[3][1] += wxy * w2.z; acc[3][2] += wxy * w2.w;
                        acc[4][0] += wxy * w3.x; acc[4][1] += wxy * w3.y; acc[4][2] += wxy * w3.z;
                        acc[5][0] += wxy * w3.w; acc[5][1] += wxy * w4.x; acc[5][2] += wxy * w4.y;
                        acc[6][0] += wxy * w4.z; acc[6][1] += wxy * w4.w; acc[6][2] += wxy * w5.x;
                        acc[7][0] += wxy * w5.y; acc[7][1] += wxy * w5.z; acc[7][2] += wxy * w5.w;
                    }
                }
            }
            __syncthreads();
        }
    }
    if (valid) {
        const size_t m3 = (size_t)M * M * M;
        const size_t row = ((size_t)gx * M + gy) * M;
#pragma unroll
        for (int k = 0; k < SP_TZ; k++) {
            const int gz = z0 + k;
            if (gz < M) {
                grid[row + gz] = acc[k][0];
                grid[m3 + row + gz] = acc[k][1];
                grid[2 * m3 + row + gz] = acc[k][2];
            }
        }
    }
}

// ---- k-space multiplier -------------------------------------------------------------------------

// spec: 3 arrays of M·M·(M/2+1) complex; table: T(k) = e^{−k²η²/2}/(φ̂(k)/φ̂(0))² for k = 0..K
// (src/summation/ewald/window.rs multiplier_table), scale = 1/M³, 2K < M.
extern "C" __global__ void ew_multiply(float2 *__restrict__ spec, int M, int K,
                                       const float *__restrict__ table, float scale)
{
    const int nz = M / 2 + 1;
    const long long len = (long long)M * M * nz;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    const int iz = (int)(i % nz);
    const long long ixy = i / nz;
    const int iy = (int)(ixy % M), ix = (int)(ixy / M);
    const int kx = ix <= M / 2 ? ix : ix - M;
    const int ky = iy <= M / 2 ? iy : iy - M;
    const int kz = iz;
    float2 *h0 = spec + i, *h1 = spec + len + i, *h2 = spec + 2 * len + i;
    const int k2i = kx * kx + ky * ky + kz * kz;
    if (k2i == 0 || abs(kx) > K || abs(ky) > K || kz > K) {
        *h0 = make_float2(0.0f, 0.0f);
        *h1 = make_float2(0.0f, 0.0f);
        *h2 = make_float2(0.0f, 0.0f);
        return;
    }
    const float fkx = (float)kx, fky = (float)ky, fkz = (float)kz, k2 = (float)k2i;
    const float f = __ldg(table + abs(kx)) * __ldg(table + abs(ky)) * __ldg(table + kz) / k2 * scale;
    const float2 a = *h0, b = *h1, d = *h2;
    // k × Ĥ, then multiply by i f: i z = (−Im z, Re z).
    const float2 x0 = make_float2(d.x * fky - b.x * fkz, d.y * fky - b.y * fkz);
    const float2 x1 = make_float2(a.x * fkz - d.x * fkx, a.y * fkz - d.y * fkx);
    const float2 x2 = make_float2(b.x * fkx - a.x * fky, b.y * fkx - a.y * fky);
    *h0 = make_float2(-x0.y * f, x0.x * f);
    *h1 = make_float2(-x1.y * f, x1.x * f);
    *h2 = make_float2(-x2.y * f, x2.x * f);
}

// ---- gathering ----------------------------------------------------------------------------------

#define GA_THREADS 128
#define GA_PMAX 16

enum EwMode { EW_VEL = 0, EW_CLASSICAL = 1, EW_TRANSPOSED = 2, EW_GRADIENT = 3 };

// u(x) = h³ Σ_g F(x_g) (φ/φ̂(0))³(x − x_g) and, unless MODE = EW_VEL, its exact gradient; written
// to u_out (3 per target) and ex_out (stretching: 3, gradient: 9). Targets are visited in `order`
// (null: 0..nt) so that neighbouring threads read neighbouring nodes. The y and z weights (and
// derivatives) of each thread's target live in shared memory (P ≤ GA_PMAX), the x weights are
// computed as needed. beta, c4, inv_i0b: the window (ew_kb); inv_h = 1/h turns d/de into d/dx;
// scale = (h I₀(β)/φ̂(0))³.
template <int MODE>
__device__ __forceinline__ void ew_gather(const float *__restrict__ grid, int M, int P, double h,
                                          float beta, float c4, float inv_i0b, float inv_h,
                                          float scale, const double *__restrict__ targets,
                                          const int *__restrict__ order, int nt,
                                          const double *__restrict__ alpha_t,
                                          double *__restrict__ u_out, double *__restrict__ ex_out)
{
    constexpr bool GRAD = MODE != EW_VEL;
    __shared__ float s_wz[GA_PMAX][GA_THREADS];
    __shared__ float s_dz[GRAD ? GA_PMAX : 1][GA_THREADS];
    __shared__ float s_wy[GA_PMAX][GA_THREADS];
    __shared__ float s_dy[GRAD ? GA_PMAX : 1][GA_THREADS];
    const int j = blockIdx.x * GA_THREADS + threadIdx.x;
    if (j >= nt) return;
    const size_t i = order ? (size_t)order[j] : (size_t)j;
    const int t = threadIdx.x;
    int f[3];
    float d[3];
    ew_locate(targets + 3 * i, M, P, h, f, d);
    const size_t m3 = (size_t)M * M * M;
    const float *g0 = grid, *g1 = grid + m3, *g2 = grid + 2 * m3;
    for (int c = 0; c < P; c++) {
        if (GRAD) {
            float dw, dv;
            s_wz[c][t] = ew_kb_d(d[2] - (float)c, beta, c4, inv_i0b, dw);
            s_wy[c][t] = ew_kb_d(d[1] - (float)c, beta, c4, inv_i0b, dv);
            s_dz[GRAD ? c : 0][t] = dw * inv_h;
            s_dy[GRAD ? c : 0][t] = dv * inv_h;
        } else {
            s_wz[c][t] = ew_kb(d[2] - (float)c, beta, c4, inv_i0b);
            s_wy[c][t] = ew_kb(d[1] - (float)c, beta, c4, inv_i0b);
        }
    }
    float s[3] = {0.0f, 0.0f, 0.0f};
    float g[3][3] = {{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}};
    for (int a = 0; a < P; a++) {
        int xg = f[0] + a;
        if (xg >= M) xg -= M;
        float dx = 0.0f;
        const float wx = GRAD ? ew_kb_d(d[0] - (float)a, beta, c4, inv_i0b, dx)
                              : ew_kb(d[0] - (float)a, beta, c4, inv_i0b);
        dx *= inv_h;
        float y00[3] = {0.0f, 0.0f, 0.0f}, y10[3] = {0.0f, 0.0f, 0.0f},
              y01[3] = {0.0f, 0.0f, 0.0f};
        for (int b = 0; b < P; b++) {
            int yg = f[1] + b;
            if (yg >= M) yg -= M;
            const float wy = s_wy[b][t];
            const float dy = GRAD ? s_dy[GRAD ? b : 0][t] : 0.0f;
            const size_t row = ((size_t)xg * M + yg) * M;
            float z0[3] = {0.0f, 0.0f, 0.0f}, z1[3] = {0.0f, 0.0f, 0.0f};
            int zg = f[2];
            for (int c = 0; c < P; c++) {
                const float v0 = __ldg(g0 + row + zg), v1 = __ldg(g1 + row + zg),
                            v2 = __ldg(g2 + row + zg);
                const float w = s_wz[c][t];
                z0[0] += v0 * w;
                z0[1] += v1 * w;
                z0[2] += v2 * w;
                if (GRAD) {
                    const float dw = s_dz[GRAD ? c : 0][t];
                    z1[0] += v0 * dw;
                    z1[1] += v1 * dw;
                    z1[2] += v2 * dw;
                }
                zg = zg + 1 == M ? 0 : zg + 1;
            }
#pragma unroll
            for (int q = 0; q < 3; q++) {
                y00[q] += wy * z0[q];
                if (GRAD) {
                    y10[q] += dy * z0[q];
                    y01[q] += wy * z1[q];
                }
            }
        }
#pragma unroll
        for (int q = 0; q < 3; q++) {
            s[q] += wx * y00[q];
            if (GRAD) {
                g[q][0] += dx * y00[q];
                g[q][1] += wx * y10[q];
                g[q][2] += wx * y01[q];
            }
        }
    }
#pragma unroll
    for (int q = 0; q < 3; q++) u_out[3 * i + q] = (double)(s[q] * scale);
    if (MODE == EW_GRADIENT) {
#pragma unroll
        for (int q = 0; q < 3; q++)
#pragma unroll
            for (int r = 0; r < 3; r++) ex_out[9 * i + 3 * q + r] = (double)(g[q][r] * scale);
    } else if (MODE == EW_CLASSICAL || MODE == EW_TRANSPOSED) {
        const float ap[3] = {(float)alpha_t[3 * i], (float)alpha_t[3 * i + 1],
                             (float)alpha_t[3 * i + 2]};
#pragma unroll
        for (int q = 0; q < 3; q++) {
            float st;
            if (MODE == EW_CLASSICAL)
                st = g[q][0] * ap[0] + g[q][1] * ap[1] + g[q][2] * ap[2];
            else
                st = g[0][q] * ap[0] + g[1][q] * ap[1] + g[2][q] * ap[2];
            ex_out[3 * i + q] = (double)(st * scale);
        }
    }
}

#define EW_GATHER_ENTRY(NAME, MODE)                                                               \
    extern "C" __global__ void __launch_bounds__(GA_THREADS)                                      \
        NAME(const float *__restrict__ grid, int M, int P, double h, float beta, float c4,        \
             float inv_i0b, float inv_h, float scale, const double *__restrict__ targets,         \
             const int *__restrict__ order, int nt, const double *__restrict__ alpha_t,           \
             double *__restrict__ u_out, double *__restrict__ ex_out)                             \
    {                                                                                             \
        ew_gather<MODE>(grid, M, P, h, beta, c4, inv_i0b, inv_h, scale, targets, order, nt,       \
                        alpha_t, u_out, ex_out);                                                  \
    }
EW_GATHER_ENTRY(ew_gather_velocity, EW_VEL)
EW_GATHER_ENTRY(ew_gather_classical, EW_CLASSICAL)
EW_GATHER_ENTRY(ew_gather_transposed, EW_TRANSPOSED)
EW_GATHER_ENTRY(ew_gather_gradient, EW_GRADIENT)

// ---- neighbour sums (real-space part, blob vorticity) -------------------------------------------

#define RS_THREADS 128

// Calls f(j, r0, r1, r2) (r = x − x_j, f64) for every stored source (or image) j within r_cut of
// the target x in a fixed order: Neighbours::visit of src/summation/cells.rs. cells > 0: cell
// lists with the ±2 stencil (every cell once when the stencil would wrap onto itself); cells = 0:
// explicit images (2m+1)³ of every source.
template <typename F>
__device__ __forceinline__ void ew_visit(const double *xt, const ew_d4 *__restrict__ sp,
                                         const int *__restrict__ start, int ns, int cells,
                                         double side, int m_img, double r_cut2, F &&f)
{
    const double x0 = box_wrap(xt[0]), x1 = box_wrap(xt[1]), x2 = box_wrap(xt[2]);
    if (cells == 0) {
        for (int j = 0; j < ns; j++) {
            const ew_d4 p = sp[j];
            const double r0 = ew_fold(x0 - p.x), r1 = ew_fold(x1 - p.y), r2 = ew_fold(x2 - p.z);
            for (int a = -m_img; a <= m_img; a++)
                for (int b = -m_img; b <= m_img; b++)
                    for (int c = -m_img; c <= m_img; c++) {
                        const double s0 = r0 + a * EW_TAU, s1 = r1 + b * EW_TAU,
                                     s2 = r2 + c * EW_TAU;
                        if (s0 * s0 + s1 * s1 + s2 * s2 < r_cut2) f(j, s0, s1, s2);
                    }
        }
        return;
    }
    const int n = cells;
    const int c0 = ew_cell_axis(x0, side, n), c1 = ew_cell_axis(x1, side, n),
              c2 = ew_cell_axis(x2, side, n);
    const int width = n >= 5 ? 5 : n;
    for (int ia = 0; ia < width; ia++) {
        const int cx = n >= 5 ? (c0 + n + ia - 2) % n : ia;
        for (int ib = 0; ib < width; ib++) {
            const int cy = n >= 5 ? (c1 + n + ib - 2) % n : ib;
            for (int ic = 0; ic < width; ic++) {
                const int cz = n >= 5 ? (c2 + n + ic - 2) % n : ic;
                const int cell = (cx * n + cy) * n + cz;
                const int hi = start[cell + 1];
                for (int j = start[cell]; j < hi; j++) {
                    const ew_d4 p = sp[j];
                    const double r0 = ew_fold(x0 - p.x), r1 = ew_fold(x1 - p.y),
                                 r2 = ew_fold(x2 - p.z);
                    if (r0 * r0 + r1 * r1 + r2 * r2 < r_cut2) f(j, r0, r1, r2);
                }
            }
        }
    }
}

// Adds Σ_j [kernel(σ_j) − kernel(η)] (velocity, and stretching or gradient per MODE) to the
// outputs of target i (which already hold the mesh part).
template <int MODE>
__device__ __forceinline__ void ew_real(const ew_d4 *__restrict__ sp,
                                        const float4 *__restrict__ sa,
                                        const int *__restrict__ start, int ns, int cells,
                                        double side, int m_img, double r_cut2, float inv_eta,
                                        const double *__restrict__ targets,
                                        const int *__restrict__ order, int nt,
                                        const double *__restrict__ alpha_t,
                                        double *__restrict__ u_out, double *__restrict__ ex_out)
{
    const int jt = blockIdx.x * RS_THREADS + threadIdx.x;
    if (jt >= nt) return;
    const size_t i = order ? (size_t)order[jt] : (size_t)jt;
    float ap[3] = {0.0f, 0.0f, 0.0f};
    if (MODE == EW_CLASSICAL || MODE == EW_TRANSPOSED) {
        ap[0] = (float)alpha_t[3 * i];
        ap[1] = (float)alpha_t[3 * i + 1];
        ap[2] = (float)alpha_t[3 * i + 2];
    }
    float u[3] = {0.0f, 0.0f, 0.0f};
    float e[9] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    ew_visit(targets + 3 * i, sp, start, ns, cells, side, m_img, r_cut2,
             [&](int j, double d0, double d1, double d2) {
                 const float r0 = (float)d0, r1 = (float)d1, r2 = (float)d2;
                 const float inv_s = (float)(1.0 / sp[j].w);
                 const float4 a = sa[j];
                 const float rr = r0 * r0 + r1 * r1 + r2 * r2;
                 float k1, l1, k2, l2;
                 ew_pair_kl(rr, inv_s, k1, l1);
                 ew_pair_kl(rr, inv_eta, k2, l2);
                 const float k = k1 - k2, l = l1 - l2;
                 float c0, c1, c2; // α_q × r
                 vpm_cross(a.x, a.y, a.z, r0, r1, r2, c0, c1, c2);
                 u[0] += k * c0;
                 u[1] += k * c1;
                 u[2] += k * c2;
                 if (MODE == EW_CLASSICAL) {
                     // K (α_q × α_p) − G5/σ⁵ (α_p·r)(α_q × r)
                     const float b = l * vpm_dot(ap[0], ap[1], ap[2], r0, r1, r2);
                     e[0] += k * (a.y * ap[2] - a.z * ap[1]) - b * c0;
                     e[1] += k * (a.z * ap[0] - a.x * ap[2]) - b * c1;
                     e[2] += k * (a.x * ap[1] - a.y * ap[0]) - b * c2;
                 } else if (MODE == EW_TRANSPOSED) {
                     // K (α_p × α_q) − G5/σ⁵ (α_p·(α_q × r)) r
                     const float b = l * vpm_dot(ap[0], ap[1], ap[2], c0, c1, c2);
                     e[0] += k * (ap[1] * a.z - ap[2] * a.y) - b * r0;
                     e[1] += k * (ap[2] * a.x - ap[0] * a.z) - b * r1;
                     e[2] += k * (ap[0] * a.y - ap[1] * a.x) - b * r2;
                 } else if (MODE == EW_GRADIENT) {
                     // K [α_q]_× − G5/σ⁵ c r^T
                     e[0] += -l * c0 * r0;
                     e[1] += -k * a.z - l * c0 * r1;
                     e[2] += k * a.y - l * c0 * r2;
                     e[3] += k * a.z - l * c1 * r0;
                     e[4] += -l * c1 * r1;
                     e[5] += -k * a.x - l * c1 * r2;
                     e[6] += -k * a.y - l * c2 * r0;
                     e[7] += k * a.x - l * c2 * r1;
                     e[8] += -l * c2 * r2;
                 }
             });
#pragma unroll
    for (int q = 0; q < 3; q++) u_out[3 * i + q] += (double)u[q];
    if (MODE == EW_CLASSICAL || MODE == EW_TRANSPOSED) {
#pragma unroll
        for (int q = 0; q < 3; q++) ex_out[3 * i + q] += (double)e[q];
    } else if (MODE == EW_GRADIENT) {
#pragma unroll
        for (int q = 0; q < 9; q++) ex_out[9 * i + q] += (double)e[q];
    }
}

#define EW_REAL_ENTRY(NAME, MODE)                                                                 \
    extern "C" __global__ void __launch_bounds__(RS_THREADS)                                      \
        NAME(const ew_d4 *__restrict__ sp, const float4 *__restrict__ sa,                       \
             const int *__restrict__ start, int ns, int cells, double side, int m_img,            \
             double r_cut2, float inv_eta, const double *__restrict__ targets,                    \
             const int *__restrict__ order, int nt, const double *__restrict__ alpha_t,           \
             double *__restrict__ u_out, double *__restrict__ ex_out)                             \
    {                                                                                             \
        ew_real<MODE>(sp, sa, start, ns, cells, side, m_img, r_cut2, inv_eta, targets, order, nt, \
                      alpha_t, u_out, ex_out);                                                    \
    }
EW_REAL_ENTRY(ew_real_velocity, EW_VEL)
EW_REAL_ENTRY(ew_real_classical, EW_CLASSICAL)
EW_REAL_ENTRY(ew_real_transposed, EW_TRANSPOSED)
EW_REAL_ENTRY(ew_real_gradient, EW_GRADIENT)

// ω_h(x) = Σ_q α_q ζ_σq(x − x_q) over the sources within cut·σ_q (cut² = cut2), written to w_out.
// Entirely in f64 (distances, the Gaussian, the strengths — read from the f64 input through the
// cell order `order`, not the f32 copies of ew_pack_cells — and the sums): the reinitialisation
// solves an ill-conditioned system with these values (docs/physics.md §3), so they are kept at the
// CPU's precision.
extern "C" __global__ void __launch_bounds__(RS_THREADS)
    ew_vorticity(const ew_d4 *__restrict__ sp, const int *__restrict__ order,
                 const double *__restrict__ alpha, const int *__restrict__ start, int ns,
                 int cells, double side, int m_img, double r_cut2, double cut2,
                 const double *__restrict__ targets, int nt, double *__restrict__ w_out)
{
    const int i = blockIdx.x * RS_THREADS + threadIdx.x;
    if (i >= nt) return;
    double w0 = 0.0, w1 = 0.0, w2 = 0.0;
    ew_visit(targets + 3 * (size_t)i, sp, start, ns, cells, side, m_img, r_cut2,
             [&](int j, double r0, double r1, double r2) {
                 const double sg = sp[j].w;
                 const double rr = r0 * r0 + r1 * r1 + r2 * r2;
                 if (rr < cut2 * sg * sg) {
                     const double is = 1.0 / sg;
                     const double is2 = is * is;
                     // (2π)^{−3/2} σ^{−3} e^{−r²/(2σ²)} (src/kernel.rs gaussian_zeta)
                     const double z = 0.06349363593424097 * is2 * is * exp(-0.5 * rr * is2);
                     const double *a = alpha + 3 * (size_t)order[j];
                     w0 += a[0] * z;
                     w1 += a[1] * z;
                     w2 += a[2] * z;
                 }
             });
    w_out[3 * (size_t)i] = w0;
    w_out[3 * (size_t)i + 1] = w1;
    w_out[3 * (size_t)i + 2] = w2;
}

// ---- blob vorticity at the nodes of a lattice (reinitialisation) ---------------------------------

// ω_h at the n³ lattice nodes x = −π + (i, j, k)·h, in f64, by the separable Gaussian (the GPU
// form of src/summation/lattice.rs): ζ_σ(x − x_q) = (2π)^{−3/2} σ^{−3} Π_d e^{−d_d²/(2σ²)},
// each factor zero where |d_d| ≥ cut·σ_q (the CPU's cube cutoff). One block of 512 threads per
// 8×8×8 tile of nodes; the sources come from the cell lists of ew_cell_keys … ew_pack_cells with
// cells of 4 lattice spacings (cells = n/4): the tile's two cells per axis plus `reach` on each
// side, read as runs of consecutive cells along z (contiguous in the sorted order). For every
// chunk of LV_CHUNK sources all threads compute the chunk's one-dimensional weights (24 per
// source: 8 nodes × 3 axes) once, instead of one exponential per pair, then every thread adds
// the products at its node, in the fixed order of cells and sources: deterministic. Needs
// n % 8 == 0, 2 + 2·reach ≤ cells and 8h + cut·σ_max < π (the host checks; positions then need
// only the minimum image per axis).
#define LV_TILE 8
#define LV_THREADS 512
#define LV_CHUNK 128
#define LV_W (3 * LV_TILE)
extern "C" __global__ void __launch_bounds__(LV_THREADS)
    ew_lattice_vorticity(const ew_d4 *__restrict__ sp, const int *__restrict__ order,
                         const double *__restrict__ alpha, const int *__restrict__ start,
                         int cells, int n, double h, int reach, double cut,
                         double *__restrict__ w_out)
{
    __shared__ double wt[LV_CHUNK][LV_W];
    __shared__ double as[LV_CHUNK][3];
    const int tiles = n / LV_TILE;
    const int b = blockIdx.x;
    const int bx = b / (tiles * tiles), by = (b / tiles) % tiles, bz = b % tiles;
    const int t = threadIdx.x;
    const int lx = t / (LV_TILE * LV_TILE), ly = (t / LV_TILE) % LV_TILE, lz = t % LV_TILE;
    const double org[3] = {-EW_PI + LV_TILE * bx * h, -EW_PI + LV_TILE * by * h,
                           -EW_PI + LV_TILE * bz * h};
    double acc0 = 0.0, acc1 = 0.0, acc2 = 0.0;
    const int span = 2 + 2 * reach;
    const int z0 = ((2 * bz - reach) % cells + cells) % cells;
    // The z-run of `span` cells from z0 is one range of sources, or two when it wraps.
    const int zlen1 = min(span, cells - z0);
    for (int ox = 0; ox < span; ++ox) {
        const int cx = ((2 * bx - reach + ox) % cells + cells) % cells;
        for (int oy = 0; oy < span; ++oy) {
            const int cy = ((2 * by - reach + oy) % cells + cells) % cells;
            const int row = (cx * cells + cy) * cells;
            for (int part = 0; part < 2; ++part) {
                const int za = part == 0 ? z0 : 0;
                const int zl = part == 0 ? zlen1 : span - zlen1;
                if (zl <= 0) continue;
                const int s0 = start[row + za], s1 = start[row + za + zl];
                for (int s = s0; s < s1; s += LV_CHUNK) {
                    const int len = min(LV_CHUNK, s1 - s);
                    for (int item = t; item < len * LV_W; item += LV_THREADS) {
                        const int q = item / LV_W, r = item % LV_W;
                        const int d = r / LV_TILE, l = r % LV_TILE;
                        const ew_d4 p = sp[s + q];
                        const double pos = d == 0 ? p.x : (d == 1 ? p.y : p.z);
                        double dq = pos - org[d];
                        dq -= EW_TAU * floor((dq + EW_PI) / EW_TAU);
                        const double e = l * h - dq;
                        const double e2 = e * e;
                        const double sg2 = p.w * p.w;
                        wt[q][r] = e2 < cut * cut * sg2 ? exp(-0.5 * e2 / sg2) : 0.0;
                    }
                    if (t < len) {
                        const double sg = sp[s + t].w;
                        // (2π)^{−3/2} σ^{−3} (src/kernel.rs gaussian_zeta)
                        const double norm = 0.06349363593424097 / (sg * sg * sg);
                        const double *al = alpha + 3 * (size_t)order[s + t];
                        as[t][0] = al[0] * norm;
                        as[t][1] = al[1] * norm;
                        as[t][2] = al[2] * norm;
                    }
                    __syncthreads();
                    for (int q = 0; q < len; ++q) {
                        const double w = wt[q][lx] * wt[q][LV_TILE + ly] * wt[q][2 * LV_TILE + lz];
                        acc0 += as[q][0] * w;
                        acc1 += as[q][1] * w;
                        acc2 += as[q][2] * w;
                    }
                    __syncthreads();
                }
            }
        }
    }
    const size_t i = LV_TILE * (size_t)bx + lx, j = LV_TILE * (size_t)by + ly,
                 k = LV_TILE * (size_t)bz + lz;
    double *o = w_out + 3 * ((i * n + j) * n + k);
    o[0] = acc0;
    o[1] = acc1;
    o[2] = acc2;
}
