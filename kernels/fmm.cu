// The fast multipole method on the GPU (docs/physics.md §8; src/summation/fmm/). The tree and the
// interaction lists come from the host; the expansions are f64 (src/summation/fmm/expansions.rs,
// whose module docs give the normalisation and the operators line by line), the near field is
// summed in f32 with the regularised kernel of common.cuh. One block per cell or leaf, its
// threads over expansion coefficients (P2M, M2M, M2L, L2L) or over the leaf's targets (L2P and
// P2P together: the seed's "multiple walks", SC09 §2.3), so no sum is reduced across blocks.
//
// Compiled per expansion order and charge count: -DFMM_P=<p> -DFMM_Q=<q>. The far-field kernels
// (P2M, M2M, M2L, L2L) are written once for q Laplace charges per source, the interaction's
// charge components (src/summation/interaction.rs): q = 3 for the Biot–Savart law (the vortex
// strengths; evaluated by fmm_eval), q = 1 for gravity (the masses; fmm_eval_gravity).
// Coefficients (n, m ≥ 0) at n(n+1)/2 + m, the q components adjacent (coef[q·index + c]);
// X_n^{−m} = (−1)^m conj(X_n^m).

#include "common.cuh"

#ifndef FMM_P
#define FMM_P 8
#endif
#ifndef FMM_Q
#define FMM_Q 3
#endif
#define NC ((FMM_P + 1) * (FMM_P + 2) / 2)
#define NC2 ((2 * FMM_P + 1) * (2 * FMM_P + 2) / 2)

struct cplx
{
    double re, im;
};

__device__ __forceinline__ cplx cmul(cplx a, cplx b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
__device__ __forceinline__ cplx cconj(cplx a) { return {a.re, -a.im}; }
__device__ __forceinline__ int cindex(int n, int m) { return n * (n + 1) / 2 + m; }

// X_n^m for any m from the stored m ≥ 0 half.
__device__ __forceinline__ cplx csigned(const cplx *t, int n, int m)
{
    if (m >= 0)
        return t[cindex(n, m)];
    cplx v = t[cindex(n, -m)];
    v.im = -v.im;
    if (m & 1)
    {
        v.re = -v.re;
        v.im = -v.im;
    }
    return v;
}

// Component c of X_n^m in a table of FMM_Q expansions stored coefficient-major.
__device__ __forceinline__ cplx csignedq(const cplx *t, int n, int m, int c)
{
    if (m >= 0)
        return t[FMM_Q * cindex(n, m) + c];
    cplx v = t[FMM_Q * cindex(n, -m) + c];
    v.im = -v.im;
    if (m & 1)
    {
        v.re = -v.re;
        v.im = -v.im;
    }
    return v;
}

// (n, m) of coefficient index i < NC.
__device__ __forceinline__ void cdecode(int i, int &n, int &m)
{
    n = 0;
    while ((n + 1) * (n + 2) / 2 <= i)
        n++;
    m = i - n * (n + 1) / 2;
}

// Column m (n = m..top) of the regular solid harmonics R_n^m(x) into t (expansions.rs
// regular_harmonics).
__device__ void regular_column(double x, double y, double z, int m, int top, cplx *t)
{
    const double r2 = x * x + y * y + z * z;
    cplx d = {1.0, 0.0};
    for (int k = 1; k <= m; k++)
    {
        const cplx xy = {-x / (2 * k), -y / (2 * k)};
        d = cmul(xy, d);
    }
    if (m > top)
        return;
    t[cindex(m, m)] = d;
    if (m + 1 <= top)
        t[cindex(m + 1, m)] = {d.re * z, d.im * z};
    for (int n = m + 2; n <= top; n++)
    {
        const cplx a = t[cindex(n - 1, m)], b = t[cindex(n - 2, m)];
        const double s = 1.0 / ((n + m) * (n - m)), f = (2 * n - 1) * z;
        t[cindex(n, m)] = {(a.re * f - b.re * r2) * s, (a.im * f - b.im * r2) * s};
    }
}

// Column m of the irregular solid harmonics I_n^m(x), n = m..top (expansions.rs
// irregular_harmonics).
__device__ void irregular_column(double x, double y, double z, int m, int top, cplx *t)
{
    const double r2 = x * x + y * y + z * z, ir2 = 1.0 / r2;
    cplx d = {sqrt(ir2), 0.0};
    for (int k = 1; k <= m; k++)
    {
        const double f = (2 * k - 1) * ir2;
        const cplx xy = {-x * f, -y * f};
        d = cmul(xy, d);
    }
    if (m > top)
        return;
    t[cindex(m, m)] = d;
    if (m + 1 <= top)
    {
        const double f = (2 * m + 1) * z * ir2;
        t[cindex(m + 1, m)] = {d.re * f, d.im * f};
    }
    for (int n = m + 2; n <= top; n++)
    {
        const cplx a = t[cindex(n - 1, m)], b = t[cindex(n - 2, m)];
        const double f = (2 * n - 1) * z, g = (double)((n - 1) * (n - 1) - m * m);
        t[cindex(n, m)] = {(a.re * f - b.re * g) * ir2, (a.im * f - b.im * g) * ir2};
    }
}

// P2M: one block per source leaf, thread i < NC owns coefficient i: M_n^m = Σ q conj(R_n^m(y − c))
// for each of the FMM_Q charges q (FMM_Q per source in `charge`).
extern "C" __global__ void fmm_p2m(const unsigned *__restrict__ leaves, int n_leaves,
                                   const double *__restrict__ center, const unsigned *__restrict__ begin,
                                   const unsigned *__restrict__ end, const double *__restrict__ x,
                                   const double *__restrict__ charge, cplx *__restrict__ mult)
{
    const int leaf = blockIdx.x;
    if (leaf >= n_leaves)
        return;
    const unsigned cell = leaves[leaf];
    const int i = threadIdx.x;
    if (i >= NC)
        return;
    int n, m;
    cdecode(i, n, m);
    const double cx = center[3 * cell], cy = center[3 * cell + 1], cz = center[3 * cell + 2];
    cplx acc[FMM_Q] = {};
    cplx col[FMM_P + 1 + 1];
    for (unsigned q = begin[cell]; q < end[cell]; q++)
    {
        const double dx = x[3 * q] - cx, dy = x[3 * q + 1] - cy, dz = x[3 * q + 2] - cz;
        // Column m only, indexed by n − m.
        const double r2 = dx * dx + dy * dy + dz * dz;
        cplx d = {1.0, 0.0};
        for (int k = 1; k <= m; k++)
        {
            const cplx xy = {-dx / (2 * k), -dy / (2 * k)};
            d = cmul(xy, d);
        }
        col[0] = d;
        if (n > m)
            col[1] = {d.re * dz, d.im * dz};
        for (int nn = m + 2; nn <= n; nn++)
        {
            const cplx a = col[nn - 1 - m], b = col[nn - 2 - m];
            const double s = 1.0 / ((nn + m) * (nn - m)), f = (2 * nn - 1) * dz;
            col[nn - m] = {(a.re * f - b.re * r2) * s, (a.im * f - b.im * r2) * s};
        }
        const cplx r = cconj(col[n - m]);
        for (int c = 0; c < FMM_Q; c++)
        {
            const double a = charge[FMM_Q * q + c];
            acc[c].re += r.re * a;
            acc[c].im += r.im * a;
        }
    }
    for (int c = 0; c < FMM_Q; c++)
        mult[(size_t)cell * FMM_Q * NC + FMM_Q * i + c] = acc[c];
}

// M2M: one block per cell of cells[first, first + count) that has children (leaves return):
// M'_n^m = Σ_children Σ_{j,k} M_j^k conj(R_{n−j}^{m−k}(c_child − c)).
extern "C" __global__ void fmm_m2m(int first, int count, const double *__restrict__ center,
                                   const unsigned *__restrict__ child_begin,
                                   const unsigned char *__restrict__ child_count, cplx *__restrict__ mult)
{
    if ((int)blockIdx.x >= count)
        return;
    const int cell = first + blockIdx.x;
    const int nch = child_count[cell];
    if (nch == 0)
        return;
    __shared__ cplx R[NC];
    __shared__ cplx M[FMM_Q * NC];
    const int i = threadIdx.x;
    int n = 0, m = 0;
    if (i < NC)
        cdecode(i, n, m);
    cplx acc[FMM_Q] = {};
    for (int ch = 0; ch < nch; ch++)
    {
        const unsigned c = child_begin[cell] + ch;
        __syncthreads();
        if (i <= FMM_P)
            regular_column(center[3 * c] - center[3 * cell], center[3 * c + 1] - center[3 * cell + 1],
                           center[3 * c + 2] - center[3 * cell + 2], i, FMM_P, R);
        for (int k = i; k < FMM_Q * NC; k += blockDim.x)
            M[k] = mult[(size_t)c * FMM_Q * NC + k];
        __syncthreads();
        if (i < NC)
        {
            for (int j = 0; j <= n; j++)
            {
                const int nj = n - j;
                const int klo = max(-j, m - nj), khi = min(j, m + nj);
                for (int k = klo; k <= khi; k++)
                {
                    const cplx t = cconj(csigned(R, nj, m - k));
                    for (int cc = 0; cc < FMM_Q; cc++)
                    {
                        const cplx v = cmul(csignedq(M, j, k, cc), t);
                        acc[cc].re += v.re;
                        acc[cc].im += v.im;
                    }
                }
            }
        }
    }
    if (i < NC)
        for (int cc = 0; cc < FMM_Q; cc++)
            mult[(size_t)cell * FMM_Q * NC + FMM_Q * i + cc] = acc[cc];
}

// Sources an M2L block takes per barrier (their tables built side by side). Shared memory:
// M2L_BATCH · (NC2 + 3·NC) complex values. Measured on the H100 at p = 9, 1e6 particles: 4 per
// barrier made M2L slower (0.316 s against 0.244 s with 1; fewer blocks fit an SM), so 1.
#ifndef M2L_BATCH
#define M2L_BATCH 1
#endif

// M2L: one block per target cell (all of them, so every local expansion is written):
// L_n^m = (−1)^{n+m} Σ_sources Σ_{j,k} M_j^k I_{j+n}^{k−m}(c_t − c_s), the sources in list order.
extern "C" __global__ void fmm_m2l(int n_cells, const double *__restrict__ tcenter,
                                   const double *__restrict__ scenter, const unsigned *__restrict__ offsets,
                                   const unsigned *__restrict__ sources, const cplx *__restrict__ mult,
                                   cplx *__restrict__ local)
{
    const int cell = blockIdx.x;
    if (cell >= n_cells)
        return;
    __shared__ cplx I[M2L_BATCH][NC2];
    __shared__ cplx M[M2L_BATCH][FMM_Q * NC];
    const int i = threadIdx.x;
    int n = 0, m = 0;
    if (i < NC)
        cdecode(i, n, m);
    cplx acc[FMM_Q] = {};
    const double tx = tcenter[3 * cell], ty = tcenter[3 * cell + 1], tz = tcenter[3 * cell + 2];
    const unsigned last = offsets[cell + 1];
    for (unsigned e0 = offsets[cell]; e0 < last; e0 += M2L_BATCH)
    {
        const int nb = min((unsigned)M2L_BATCH, last - e0);
        __syncthreads();
        for (int idx = i; idx < nb * (2 * FMM_P + 1); idx += blockDim.x)
        {
            const int bq = idx / (2 * FMM_P + 1), col = idx % (2 * FMM_P + 1);
            const unsigned s = sources[e0 + bq];
            irregular_column(tx - scenter[3 * s], ty - scenter[3 * s + 1], tz - scenter[3 * s + 2], col,
                             2 * FMM_P, I[bq]);
        }
        for (int idx = i; idx < nb * FMM_Q * NC; idx += blockDim.x)
        {
            const int bq = idx / (FMM_Q * NC), k = idx % (FMM_Q * NC);
            M[bq][k] = mult[(size_t)sources[e0 + bq] * FMM_Q * NC + k];
        }
        __syncthreads();
        if (i < NC)
        {
            for (int bq = 0; bq < nb; bq++)
                for (int j = 0; j <= FMM_P; j++)
                    for (int k = -j; k <= j; k++)
                    {
                        const cplx h = csigned(I[bq], j + n, k - m);
                        for (int cc = 0; cc < FMM_Q; cc++)
                        {
                            const cplx v = cmul(csignedq(M[bq], j, k, cc), h);
                            acc[cc].re += v.re;
                            acc[cc].im += v.im;
                        }
                    }
        }
    }
    if (i < NC)
    {
        const double sign = ((n + m) & 1) ? -1.0 : 1.0;
        for (int cc = 0; cc < FMM_Q; cc++)
            local[(size_t)cell * FMM_Q * NC + FMM_Q * i + cc] = {acc[cc].re * sign, acc[cc].im * sign};
    }
}

// One coefficient of the local expansion L shifted to a point, for each of the FMM_Q charges:
// Σ_{j ≥ n, k} L_j^k R_{j−n}^{k−m}(d), the regular harmonics of d in R (expansions.rs
// shifted_local; L2L is this at a child's centre, L2P at a point for n ≤ 2).
__device__ __forceinline__ void shifted_local(const cplx *R, const cplx *L, int n, int m, cplx *out)
{
    for (int cc = 0; cc < FMM_Q; cc++)
        out[cc] = {0, 0};
    for (int j = n; j <= FMM_P; j++)
    {
        const int jn = j - n;
        const int klo = max(-j, m - jn), khi = min(j, m + jn);
        for (int k = klo; k <= khi; k++)
        {
            const cplx r = csigned(R, jn, k - m);
            for (int cc = 0; cc < FMM_Q; cc++)
            {
                const cplx v = cmul(csignedq(L, j, k, cc), r);
                out[cc].re += v.re;
                out[cc].im += v.im;
            }
        }
    }
}

// L2L: one block per cell of cells[first, first + count) (a level below the root):
// L'_n^m += Σ_{j ≥ n, k} L_j^k R_{j−n}^{k−m}(c − c_parent).
extern "C" __global__ void fmm_l2l(int first, int count, const double *__restrict__ center,
                                   const unsigned *__restrict__ parent, cplx *__restrict__ local)
{
    if ((int)blockIdx.x >= count)
        return;
    const int cell = first + blockIdx.x;
    const unsigned pc = parent[cell];
    __shared__ cplx R[NC];
    __shared__ cplx L[FMM_Q * NC];
    const int i = threadIdx.x;
    if (i <= FMM_P)
        regular_column(center[3 * cell] - center[3 * pc], center[3 * cell + 1] - center[3 * pc + 1],
                       center[3 * cell + 2] - center[3 * pc + 2], i, FMM_P, R);
    for (int k = i; k < FMM_Q * NC; k += blockDim.x)
        L[k] = local[(size_t)pc * FMM_Q * NC + k];
    __syncthreads();
    if (i >= NC)
        return;
    int n, m;
    cdecode(i, n, m);
    cplx acc[FMM_Q];
    shifted_local(R, L, n, m, acc);
    for (int cc = 0; cc < FMM_Q; cc++)
    {
        cplx &o = local[(size_t)cell * FMM_Q * NC + FMM_Q * i + cc];
        o.re += acc[cc].re;
        o.im += acc[cc].im;
    }
}

#define EVAL_THREADS 128

// The near-field sums of a leaf's targets split among G groups of T threads (fmm_eval's and
// fmm_eval_gravity's layout): group 0 adds the other groups' W partial values v in group order
// g = 1, 2, …, so the result is deterministic. Every thread of the block must call it.
template <int W>
__device__ __forceinline__ void add_group_partials(float (*part)[12], float *v, unsigned G, unsigned T,
                                                   unsigned group, unsigned slot)
{
    if (G <= 1)
        return;
    __syncthreads();
    for (int a = 0; a < W; a++)
        part[threadIdx.x][a] = v[a];
    __syncthreads();
    if (group == 0)
        for (unsigned g = 1; g < G; g++)
            for (int a = 0; a < W; a++)
                v[a] += part[g * T + slot][a];
}

#if FMM_Q == 3
// Packs the sorted sources of each leaf for P2P: (y − c_leaf, σ) and (α, 0) in f32. One block per
// source leaf.
extern "C" __global__ void fmm_pack(const unsigned *__restrict__ leaves, int n_leaves,
                                    const double *__restrict__ center, const unsigned *__restrict__ begin,
                                    const unsigned *__restrict__ end, const double *__restrict__ x,
                                    const double *__restrict__ alpha, const double *__restrict__ sigma,
                                    float4 *__restrict__ pos, float4 *__restrict__ str)
{
    if ((int)blockIdx.x >= n_leaves)
        return;
    const unsigned cell = leaves[blockIdx.x];
    for (unsigned q = begin[cell] + threadIdx.x; q < end[cell]; q += blockDim.x)
    {
        pos[q] = make_float4((float)(x[3 * q] - center[3 * cell]), (float)(x[3 * q + 1] - center[3 * cell + 1]),
                             (float)(x[3 * q + 2] - center[3 * cell + 2]), (float)sigma[q]);
        str[q] = make_float4((float)alpha[3 * q], (float)alpha[3 * q + 1], (float)alpha[3 * q + 2], 0.0f);
    }
}

// What fmm_eval writes besides the velocity.
#define OUT_VELOCITY 0
#define OUT_GRADIENT 1
#define OUT_CLASSICAL 2
#define OUT_TRANSPOSED 3

// L2P and P2P: one block per target leaf. The local expansion is shifted to each target (n ≤ 2)
// in f64 (expansions.rs l2p); the near field is summed in f32 over tiles of each source leaf of
// the list, positions relative to the leaf centres so that f32 keeps the small separations;
// exact kernel within ρ_c σ, 1/(4πr) beyond (§8). A leaf with fewer targets than threads splits
// each tile among G = EVAL_THREADS / T groups of T threads (T the leaf's size rounded up to a
// power of two, at least 32): group g takes sources g, g + G, …, and group 0 adds the groups'
// partial sums in order g = 0, 1, …, so the result stays deterministic. Results go to the
// targets' original indices.
extern "C" __global__ void __launch_bounds__(EVAL_THREADS)
    fmm_eval(const unsigned *__restrict__ tleaves, int n_tleaves, const double *__restrict__ tcenter,
             const unsigned *__restrict__ tbegin, const unsigned *__restrict__ tend,
             const double *__restrict__ tx, const unsigned *__restrict__ torder,
             const unsigned *__restrict__ p2p_offsets, const unsigned *__restrict__ p2p_sources,
             const double *__restrict__ scenter, const unsigned *__restrict__ sbegin,
             const unsigned *__restrict__ send, const float4 *__restrict__ spos,
             const float4 *__restrict__ sstr, const cplx *__restrict__ local, float rho_cut2, int mode,
             const double *__restrict__ talpha, double *__restrict__ out_u, double *__restrict__ out_x)
{
    if ((int)blockIdx.x >= n_tleaves)
        return;
    const unsigned leaf = tleaves[blockIdx.x];
    const double cx = tcenter[3 * leaf], cy = tcenter[3 * leaf + 1], cz = tcenter[3 * leaf + 2];
    __shared__ float4 P[EVAL_THREADS];
    __shared__ float4 S[EVAL_THREADS];
    __shared__ float part[EVAL_THREADS][12];
    const bool grad = mode != OUT_VELOCITY;
    const cplx *L = local + (size_t)leaf * FMM_Q * NC;
    const unsigned count = tend[leaf] - tbegin[leaf];
    unsigned T = 32;
    while (T < count && T < EVAL_THREADS)
        T *= 2;
    const unsigned G = EVAL_THREADS / T, slot = threadIdx.x % T, group = threadIdx.x / T;
    for (unsigned base = tbegin[leaf]; base < tend[leaf]; base += T)
    {
        const unsigned t = base + slot;
        const bool active = t < tend[leaf];
        const bool lead = active && group == 0;
        double dx = 0, dy = 0, dz = 0;
        // f64 results from the local expansion.
        double u[3] = {0, 0, 0}, du[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
        if (active)
        {
            dx = tx[3 * t] - cx;
            dy = tx[3 * t + 1] - cy;
            dz = tx[3 * t + 2] - cz;
        }
        if (lead)
        {
            cplx R[NC];
            for (int mm = 0; mm <= FMM_P; mm++)
                regular_column(dx, dy, dz, mm, FMM_P, R);
            // Shifted coefficients L'_n^m, n = 1, 2, m ≥ 0, three components.
            cplx sh[5][3];
            const int top = grad ? 2 : 1;
            for (int n = 1; n <= top; n++)
                for (int m = 0; m <= n; m++)
                    shifted_local(R, L, n, m, sh[cindex(n, m) - 1]);
            // ∇φ_c = (−Re L_1^1, Im L_1^1, L_1^0); Hessian as expansions.rs l2p.
            double g[3][3], h[3][3][3];
            for (int cc = 0; cc < 3; cc++)
            {
                g[cc][0] = -sh[1][cc].re;
                g[cc][1] = sh[1][cc].im;
                g[cc][2] = sh[0][cc].re;
                if (grad)
                {
                    const double l20 = sh[2][cc].re;
                    const cplx l21 = sh[3][cc], l22 = sh[4][cc];
                    const double hxx = (l22.re - l20) / 2, hyy = -(l22.re + l20) / 2, hzz = l20;
                    const double hxy = -l22.im / 2, hxz = -l21.re, hyz = l21.im;
                    h[cc][0][0] = hxx; h[cc][0][1] = hxy; h[cc][0][2] = hxz;
                    h[cc][1][0] = hxy; h[cc][1][1] = hyy; h[cc][1][2] = hyz;
                    h[cc][2][0] = hxz; h[cc][2][1] = hyz; h[cc][2][2] = hzz;
                }
            }
            const double f = VPM_FRAC_1_4PI;
            u[0] = f * (g[2][1] - g[1][2]);
            u[1] = f * (g[0][2] - g[2][0]);
            u[2] = f * (g[1][0] - g[0][1]);
            if (grad)
                for (int j = 0; j < 3; j++)
                {
                    du[0][j] = f * (h[2][1][j] - h[1][2][j]);
                    du[1][j] = f * (h[0][2][j] - h[2][0][j]);
                    du[2][j] = f * (h[1][0][j] - h[0][1][j]);
                }
        }
        // P2P in f32.
        float fu[3] = {0, 0, 0}, fg[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
        for (unsigned e = p2p_offsets[blockIdx.x]; e < p2p_offsets[blockIdx.x + 1]; e++)
        {
            const unsigned sl = p2p_sources[e];
            // Target relative to the source leaf's centre.
            const float px = (float)(dx + (cx - scenter[3 * sl]));
            const float py = (float)(dy + (cy - scenter[3 * sl + 1]));
            const float pz = (float)(dz + (cz - scenter[3 * sl + 2]));
            for (unsigned tile = sbegin[sl]; tile < send[sl]; tile += EVAL_THREADS)
            {
                const int cnt = min((unsigned)EVAL_THREADS, send[sl] - tile);
                __syncthreads();
                if ((int)threadIdx.x < cnt)
                {
                    P[threadIdx.x] = spos[tile + threadIdx.x];
                    S[threadIdx.x] = sstr[tile + threadIdx.x];
                }
                __syncthreads();
                if (!active)
                    continue;
                for (int q = group; q < cnt; q += G)
                {
                    const float4 Q = P[q], A = S[q];
                    const float rx = px - Q.x, ry = py - Q.y, rz = pz - Q.z;
                    const float r2 = rx * rx + ry * ry + rz * rz;
                    const float s2 = Q.w * Q.w;
                    float k, l;
                    if (r2 > rho_cut2 * s2)
                    {
                        const float ri = rsqrtf(r2);
                        k = (float)VPM_FRAC_1_4PI * ri * ri * ri;
                        l = 3.0f * k * ri * ri;
                    }
                    else
                    {
                        const float is = 1.0f / Q.w;
                        const float x = r2 * is * is;
                        const float ce = (float)VPM_SQRT_2_OVER_PI * expf(-0.5f * x);
                        float g3, g5;
                        if (x < VPM_SERIES_RHO_F32 * VPM_SERIES_RHO_F32)
                            vpm_g3_g5_series(x, ce, g3, g5);
                        else
                        {
                            const float rho = sqrtf(x);
                            const float gg = erff(rho * (float)VPM_FRAC_1_SQRT_2) - ce * rho;
                            vpm_g3_g5_from_g(gg, ce, rho, x, g3, g5);
                        }
                        const float is3 = is * is * is;
                        k = (float)VPM_FRAC_1_4PI * g3 * is3;
                        l = (float)VPM_FRAC_1_4PI * g5 * is3 * is * is;
                    }
                    float c0, c1, c2;
                    vpm_cross(A.x, A.y, A.z, rx, ry, rz, c0, c1, c2);
                    fu[0] += k * c0;
                    fu[1] += k * c1;
                    fu[2] += k * c2;
                    if (grad)
                    {
                        // ∂u_i/∂x_j = k ε_ikj α_k − l c_i r_j.
                        const float c[3] = {c0, c1, c2}, r[3] = {rx, ry, rz};
                        for (int a = 0; a < 3; a++)
                            for (int b = 0; b < 3; b++)
                                fg[a][b] -= l * c[a] * r[b];
                        fg[0][1] -= k * A.z;
                        fg[0][2] += k * A.y;
                        fg[1][0] += k * A.z;
                        fg[1][2] -= k * A.x;
                        fg[2][0] -= k * A.y;
                        fg[2][1] += k * A.x;
                    }
                }
            }
        }
        // The groups' partial sums, added by group 0 in group order.
        if (G > 1)
        {
            float w[12];
            for (int a = 0; a < 3; a++)
                w[a] = fu[a];
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    w[3 + 3 * a + b] = fg[a][b];
            add_group_partials<12>(part, w, G, T, group, slot);
            for (int a = 0; a < 3; a++)
                fu[a] = w[a];
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    fg[a][b] = w[3 + 3 * a + b];
        }
        if (!lead)
            continue;
        const unsigned o = torder[t];
        for (int a = 0; a < 3; a++)
            out_u[3 * (size_t)o + a] = u[a] + (double)fu[a];
        if (!grad)
            continue;
        double G[3][3];
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                G[a][b] = du[a][b] + (double)fg[a][b];
        if (mode == OUT_GRADIENT)
        {
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    out_x[9 * (size_t)o + 3 * a + b] = G[a][b];
        }
        else
        {
            const double al[3] = {talpha[3 * (size_t)o], talpha[3 * (size_t)o + 1], talpha[3 * (size_t)o + 2]};
            for (int a = 0; a < 3; a++)
            {
                // classical (α·∇)u: Σ_j α_j ∂_j u_i; transposed (∇u)ᵀα: Σ_j ∂_i u_j α_j.
                double s = 0;
                for (int b = 0; b < 3; b++)
                    s += (mode == OUT_CLASSICAL ? G[a][b] : G[b][a]) * al[b];
                out_x[3 * (size_t)o + a] = s;
            }
        }
    }
}

#endif // FMM_Q == 3

#if FMM_Q == 1
// Packs the sorted bodies of each leaf for P2P: (y − c_leaf, m) in f32. One block per source leaf.
extern "C" __global__ void fmm_pack_gravity(const unsigned *__restrict__ leaves, int n_leaves,
                                            const double *__restrict__ center, const unsigned *__restrict__ begin,
                                            const unsigned *__restrict__ end, const double *__restrict__ x,
                                            const double *__restrict__ mass, float4 *__restrict__ pos)
{
    if ((int)blockIdx.x >= n_leaves)
        return;
    const unsigned cell = leaves[blockIdx.x];
    for (unsigned q = begin[cell] + threadIdx.x; q < end[cell]; q += blockDim.x)
        pos[q] = make_float4((float)(x[3 * q] - center[3 * cell]), (float)(x[3 * q + 1] - center[3 * cell + 1]),
                             (float)(x[3 * q + 2] - center[3 * cell + 2]), (float)mass[q]);
}

// L2P and P2P of Newtonian gravity with Plummer softening ε (docs/physics.md §10), laid out as
// fmm_eval: one block per target leaf. The expansions carry Φ(x) = Σ m/|x − y| (one charge per
// body, its mass); from the local expansion shifted to the target in f64, φ = −Φ = −Re L'_0^0 and
// a = ∇Φ = (−Re L'_1^1, Im L'_1^1, Re L'_1^0). The near field is the softened pair in f32,
// φ −= m/s, a += m d/s³ with d = y − x, s² = |d|² + ε² (the lists put in the near field every
// pair closer than the radius where the softened and Newtonian kernels differ by more than the
// accuracy); at ε = 0 a pair with d = 0 (the target itself) adds nothing. φ to out_phi, a to
// out_acc (3 per target), at the targets' original indices.
extern "C" __global__ void __launch_bounds__(EVAL_THREADS)
    fmm_eval_gravity(const unsigned *__restrict__ tleaves, int n_tleaves, const double *__restrict__ tcenter,
                     const unsigned *__restrict__ tbegin, const unsigned *__restrict__ tend,
                     const double *__restrict__ tx, const unsigned *__restrict__ torder,
                     const unsigned *__restrict__ p2p_offsets, const unsigned *__restrict__ p2p_sources,
                     const double *__restrict__ scenter, const unsigned *__restrict__ sbegin,
                     const unsigned *__restrict__ send, const float4 *__restrict__ spos,
                     const cplx *__restrict__ local, float eps2, double *__restrict__ out_phi,
                     double *__restrict__ out_acc)
{
    if ((int)blockIdx.x >= n_tleaves)
        return;
    const unsigned leaf = tleaves[blockIdx.x];
    const double cx = tcenter[3 * leaf], cy = tcenter[3 * leaf + 1], cz = tcenter[3 * leaf + 2];
    __shared__ float4 P[EVAL_THREADS];
    __shared__ float part[EVAL_THREADS][12];
    const cplx *L = local + (size_t)leaf * NC;
    const unsigned count = tend[leaf] - tbegin[leaf];
    unsigned T = 32;
    while (T < count && T < EVAL_THREADS)
        T *= 2;
    const unsigned G = EVAL_THREADS / T, slot = threadIdx.x % T, group = threadIdx.x / T;
    for (unsigned base = tbegin[leaf]; base < tend[leaf]; base += T)
    {
        const unsigned t = base + slot;
        const bool active = t < tend[leaf];
        const bool lead = active && group == 0;
        double dx = 0, dy = 0, dz = 0, phi = 0, acc[3] = {0, 0, 0};
        if (active)
        {
            dx = tx[3 * t] - cx;
            dy = tx[3 * t + 1] - cy;
            dz = tx[3 * t + 2] - cz;
        }
        if (lead)
        {
            cplx R[NC];
            for (int mm = 0; mm <= FMM_P; mm++)
                regular_column(dx, dy, dz, mm, FMM_P, R);
            cplx l00, l10, l11;
            shifted_local(R, L, 0, 0, &l00);
            shifted_local(R, L, 1, 0, &l10);
            shifted_local(R, L, 1, 1, &l11);
            phi = -l00.re;
            acc[0] = -l11.re;
            acc[1] = l11.im;
            acc[2] = l10.re;
        }
        // P2P in f32: v = (φ, a).
        float v[4] = {0, 0, 0, 0};
        for (unsigned e = p2p_offsets[blockIdx.x]; e < p2p_offsets[blockIdx.x + 1]; e++)
        {
            const unsigned sl = p2p_sources[e];
            const float px = (float)(dx + (cx - scenter[3 * sl]));
            const float py = (float)(dy + (cy - scenter[3 * sl + 1]));
            const float pz = (float)(dz + (cz - scenter[3 * sl + 2]));
            for (unsigned tile = sbegin[sl]; tile < send[sl]; tile += EVAL_THREADS)
            {
                const int cnt = min((unsigned)EVAL_THREADS, send[sl] - tile);
                __syncthreads();
                if ((int)threadIdx.x < cnt)
                    P[threadIdx.x] = spos[tile + threadIdx.x];
                __syncthreads();
                if (!active)
                    continue;
                for (int q = group; q < cnt; q += G)
                    add_softened_pair(P[q], px, py, pz, eps2, v);
            }
        }
        add_group_partials<4>(part, v, G, T, group, slot);
        if (!lead)
            continue;
        const unsigned o = torder[t];
        out_phi[o] = phi + (double)v[0];
        for (int a = 0; a < 3; a++)
            out_acc[3 * (size_t)o + a] = acc[a] + (double)v[1 + a];
    }
}
#endif // FMM_Q == 1

// Copies `width` doubles per item from src[order[i]] to dst[i] (the device form's gather of
// resident particles into tree order).
extern "C" __global__ void fmm_gather(const unsigned *__restrict__ order, int n, int width,
                                      const double *__restrict__ src, double *__restrict__ dst)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const size_t from = (size_t)order[i] * width;
    for (int k = 0; k < width; k++)
        dst[(size_t)i * width + k] = src[from + k];
}
