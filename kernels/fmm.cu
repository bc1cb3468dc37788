// The fast multipole method on the GPU (docs/physics.md §8; src/summation/fmm/). The tree and the
// interaction lists come from the host; the expansions are f64 (src/summation/fmm/expansions.rs,
// whose module docs give the normalisation and the operators line by line), the near field is
// summed in f32 with the regularised kernel of common.cuh. One warp per cell, its lanes over
// expansion coefficients (P2M, M2M, M2L in f64 or scaled f32, L2L; several cells per block, no
// block barriers), or one block per leaf, its threads over the leaf's targets (L2P and P2P
// together: the seed's "multiple walks", SC09 §2.3), so no sum is reduced across warps.
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

// P2M, M2M and L2L: one warp per cell, FAR_WARPS cells per block (the host's -DFAR_WARPS, the
// most whose shared tables fit 48 KiB: m2l_layout.rs far_warps), no block barrier; lane l owns
// the coefficients i = l, l + 32, … < NC (FAR_R of them) and adds their terms in registers in a
// fixed order, so the results are deterministic.
#ifndef FAR_WARPS
#define FAR_WARPS 4
#endif
#define FAR_R ((NC + 31) / 32)
static_assert(FAR_WARPS * (FMM_Q + 1) * NC * 16 <= 48 * 1024, "FAR_WARPS: M2M's and L2L's tables pass 48 KiB");

// The lane's coefficients (n, m), i = lane + 32 r; past NC a dummy (0, 0).
__device__ __forceinline__ void lane_outputs(int lane, int *on, int *om)
{
#pragma unroll
    for (int r = 0; r < FAR_R; r++)
    {
        const int i = lane + 32 * r;
        if (i < NC)
            cdecode(i, on[r], om[r]);
        else
            on[r] = om[r] = 0;
    }
}

// Writes the lane's coefficients (FMM_Q charges each) of one expansion to `out`.
__device__ __forceinline__ void store_lane(int lane, const cplx (*acc)[FMM_Q], cplx *out)
{
#pragma unroll
    for (int r = 0; r < FAR_R; r++)
    {
        const int i = lane + 32 * r;
        if (i < NC)
            for (int c = 0; c < FMM_Q; c++)
                out[FMM_Q * i + c] = acc[r][c];
    }
}

// P2M: one warp per source leaf: M_n^m = Σ q conj(R_n^m(y − c)) for each of the FMM_Q charges q
// (FMM_Q per source in `charge`), the sources in order.
extern "C" __global__ void __launch_bounds__(32 * FAR_WARPS)
    fmm_p2m(const unsigned *__restrict__ leaves, int n_leaves, const double *__restrict__ center,
            const unsigned *__restrict__ begin, const unsigned *__restrict__ end,
            const double *__restrict__ x, const double *__restrict__ charge, cplx *__restrict__ mult)
{
    const int lane = threadIdx.x & 31;
    const int leaf = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (leaf >= n_leaves)
        return;
    const unsigned cell = leaves[leaf];
    const double cx = center[3 * cell], cy = center[3 * cell + 1], cz = center[3 * cell + 2];
    int on[FAR_R], om[FAR_R];
    lane_outputs(lane, on, om);
    cplx acc[FAR_R][FMM_Q] = {};
    for (unsigned q = begin[cell]; q < end[cell]; q++)
    {
        const double dx = x[3 * q] - cx, dy = x[3 * q + 1] - cy, dz = x[3 * q + 2] - cz;
        const double r2 = dx * dx + dy * dy + dz * dz;
#pragma unroll
        for (int r = 0; r < FAR_R; r++)
        {
            const int n = on[r], m = om[r];
            // Column m only, R_m^m … R_n^m, the last two kept.
            cplx d = {1.0, 0.0};
            for (int k = 1; k <= m; k++)
            {
                const cplx xy = {-dx / (2 * k), -dy / (2 * k)};
                d = cmul(xy, d);
            }
            cplx b = d, a = {d.re * dz, d.im * dz};
            for (int nn = m + 2; nn <= n; nn++)
            {
                const double s = 1.0 / ((nn + m) * (nn - m)), f = (2 * nn - 1) * dz;
                const cplx v = {(a.re * f - b.re * r2) * s, (a.im * f - b.im * r2) * s};
                b = a;
                a = v;
            }
            const cplx rv = cconj(n > m ? a : d);
            for (int c = 0; c < FMM_Q; c++)
            {
                const double w = charge[FMM_Q * q + c];
                acc[r][c].re += rv.re * w;
                acc[r][c].im += rv.im * w;
            }
        }
    }
    store_lane(lane, acc, mult + (size_t)cell * FMM_Q * NC);
}

// M2M: one warp per cell of cells[first, first + count) that has children (leaves return):
// M'_n^m = Σ_children Σ_{j,k} M_j^k conj(R_{n−j}^{m−k}(c_child − c)), the children in order.
extern "C" __global__ void __launch_bounds__(32 * FAR_WARPS)
    fmm_m2m(int first, int count, const double *__restrict__ center, const unsigned *__restrict__ child_begin,
            const unsigned char *__restrict__ child_count, cplx *__restrict__ mult)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x * (blockDim.x >> 5) + warp;
    if (b >= count)
        return;
    const int cell = first + b;
    const int nch = child_count[cell];
    if (nch == 0)
        return;
    __shared__ cplx Rs[FAR_WARPS][NC];
    __shared__ cplx Ms[FAR_WARPS][FMM_Q * NC];
    cplx *R = Rs[warp], *M = Ms[warp];
    int on[FAR_R], om[FAR_R];
    lane_outputs(lane, on, om);
    cplx acc[FAR_R][FMM_Q] = {};
    for (int ch = 0; ch < nch; ch++)
    {
        const unsigned c = child_begin[cell] + ch;
        __syncwarp(); // the previous child's tables are read
        if (lane <= FMM_P)
            regular_column(center[3 * c] - center[3 * cell], center[3 * c + 1] - center[3 * cell + 1],
                           center[3 * c + 2] - center[3 * cell + 2], lane, FMM_P, R);
        for (int k = lane; k < FMM_Q * NC; k += 32)
            M[k] = mult[(size_t)c * FMM_Q * NC + k];
        __syncwarp();
#pragma unroll
        for (int r = 0; r < FAR_R; r++)
        {
            const int n = on[r], m = om[r];
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
                        acc[r][cc].re += v.re;
                        acc[r][cc].im += v.im;
                    }
                }
            }
        }
    }
    store_lane(lane, acc, mult + (size_t)cell * FMM_Q * NC);
}
// ---------------------------------------------------------------------------------------------
// M2L: one warp per target cell, several cells per block (M2L_WARPS, the host's launch: at most
// that many warps, fewer where the warps' shared tables would pass 48 KiB), no block barrier
// inside the list loop. Once after the upward pass, fmm_m2l_expand[_f32] writes every source
// cell's multipole as a complete table (both signs of k) in the M2L's precision and layout,
// M_j^k at FMM_Q (j² + j + k) + c for |k| ≤ j ≤ p: in f64 as it is, in f32 scaled by the
// pair-independent j! ρ_s^{−j} (ρ_s = √3 h_s, the source cell's half diagonal). Per list entry
// the warp copies that table into its slice of (dynamic) shared memory (coalesced; the next
// entry's table is loaded into registers while the current one is summed), builds the order-2p
// irregular harmonics of c_t − c_s, lane μ the column μ (and μ + 32, …; 2p serial steps a lane,
// no division: reciprocals from a per-block table), __syncwarp, then every lane adds its
// outputs' terms in registers.
//
// Outputs by slots: slot s is (n, m0), m0 = 0, B, 2B, … ≤ n, and holds the B = M2L_B outputs
// (n, m0 … m0 + B − 1) of one degree (those past m = n are computed and not written); lane l
// owns slots l, l + 32, … (M2L_R rounds). The B outputs of a slot read I_{j+n}^{k−m0−b}: along
// the (unrolled) k loop a window of B values slides, so one load of I serves B·FMM_Q complex
// FMAs and one broadcast load of M_j^k serves M2L_R·B of them. The j and k loops are unrolled at
// compile time (FMM_P is a macro): no loop counters, immediate shared offsets. Every output is
// summed over the list in list order by one lane: deterministic. src/summation/fmm/m2l_layout.rs
// mirrors the slots, columns, tables and the f32 arithmetic and tests them.
//
// Cost per (target, source) pair, per warp (docs/performance.md, "warp-per-cell far field"):
// useful 8 q NC (p+1)² flops (p = 9, q = 3: 132 000; p = 11: 274 560; p = 7, q = 1: 18 432).
// Inner loop per (j, k) and warp: M2L_R·B·q·4 FMAs, M2L_R I loads (8 B a lane in f32: 2
// wavefronts each) and q broadcast M loads (1 wavefront each):
//   p = 9,  q = 3, B = 2, R = 1: 24 FFMA (6 issue cycles of an SM's 4 schedulers), 5 wavefronts
//   p = 11, q = 3, B = 3, R = 1: 36 FFMA (9 cycles), 5 wavefronts
//   p = 7,  q = 1, B = 2, R = 1:  8 FFMA (2 cycles), 3 wavefronts
// before (B = 1, lanes over coefficients, rolled loops): p = 9: 24 FFMA and 7 wavefronts plus
// loop and address arithmetic, p = 11: 36 FFMA and 9 wavefronts, p = 7, q = 1: 8 FFMA and 5
// wavefronts (R = 2, 28 of 64 lanes idle in the second round); per pair before, the staging
// (a `while` decode, f64 scaling and one dependent global load per lane and round), 2 columns
// of 2p + 2 values per lane with f32 divisions (4p serial steps); now one coalesced copy, one
// column per lane (2p steps), weights (ρ/ℓ)^j C(n+j, j) per j and slot.
//
// f32 (fmm_m2l_f32): dimensionless, with ℓ = |R|, R = c_t − c_s, u = R/ℓ, ρ = ρ_s:
//   Ĩ_N^μ = I_N^μ(u) / N!          (|Ĩ| ≤ √(C(2N, N)) ≤ 2^N, ≤ 1.1e12 at N = 40)
//   M̂_j^k = M_j^k j! ρ^{−j}        (|M̂| ≤ Σ|q| (r_s/ρ)^j ≤ Σ|q|: the particles lie in the cell)
//   L_n^m = (−1)^{n+m} n! ℓ^{−(n+1)} Σ_j C(n+j, j) (ρ/ℓ)^j Σ_k M̂_j^k Ĩ_{j+n}^{k−m}
// since I_{j+n}(R) = ℓ^{−(j+n+1)} I_{j+n}(u), (j+n)!/j! = n! C(n+j, j) and M_j^k j! ℓ^{−j} =
// M̂_j^k (ρ/ℓ)^j. Listed cells are disjoint cubes, so ℓ ≥ h_s + h_t > h_s and ρ/ℓ < √3 (below θ
// for the θ criterion's pairs of equal cells): the weight C(n+j, j)(ρ/ℓ)^j ≤ 1.4e11 · 3^10 <
// 1e16 at p = 20, the inner sums ≤ (2p+1) 2^{2p} Σ|q|; the pair's result is scaled by
// n! ℓ^{−(n+1)} and added in f64: nothing under- or overflows in f32 up to 2p = 40 for
// Σ|q| < 1e9 (m2l_layout.rs checks the identity in f32 on the CPU).
#ifndef M2L_WARPS
#define M2L_WARPS 4
#endif
// The order-2p table, I_N^μ at irow(N) + μ: triangular, irow(N) = N² + N ((2p+1)² values), or
// in the f32 kernel with -DM2L_W=W > 0 (W ≥ 4p + 1, the host's choice: m2l_layout.rs
// table_stride, up to p = 12) rectangular, irow(N) = N W + 2p ((2p+1) W values): rows a stride
// apart that spreads the lanes' windowed reads over the banks (at p = 9 in f32 4 wavefronts a
// load against 6.4 triangular; m2l_layout.rs counts them).
#ifndef M2L_W
#define M2L_W 0
#endif
#define M2L_RECT(SCALED) ((SCALED) && M2L_W > 0)
#define M2L_NI(SCALED) (M2L_RECT(SCALED) ? (2 * FMM_P + 1) * M2L_W : (2 * FMM_P + 1) * (2 * FMM_P + 1))
static_assert(M2L_W == 0 || M2L_W >= 4 * FMM_P + 1, "M2L_W: rows of the order-2p table overlap");
template <bool SCALED> __device__ __forceinline__ int irow(int N)
{
    return M2L_RECT(SCALED) ? N * M2L_W + 2 * FMM_P : N * N + N;
}
#define M2L_NM (FMM_Q * (FMM_P + 1) * (FMM_P + 1))

// Slots of B outputs for degrees 0..p: Σ_n ⌈(n+1)/B⌉.
__host__ __device__ constexpr int m2l_slots(int b)
{
    int s = 0;
    for (int n = 0; n <= FMM_P; n++)
        s += (n + b) / b;
    return s;
}
// Outputs per slot: the smallest B ≤ 3 whose slots fit one round of 32 lanes, else 2
// (m2l_layout.rs slot_width).
__host__ __device__ constexpr int m2l_width()
{
    return m2l_slots(1) <= 32 ? 1 : m2l_slots(2) <= 32 ? 2 : m2l_slots(3) <= 32 ? 3 : 2;
}
#ifndef M2L_B
#define M2L_B m2l_width()
#endif
#define M2L_S m2l_slots(M2L_B)
#define M2L_RR ((M2L_S + 31) / 32)
// Values before the harmonic table (read only by outputs past m = n, never written): B − 1.
#define M2L_PAD (M2L_B - 1)

template <typename T> struct cx
{
    T re, im;
};

// X_N^μ and X_N^{−μ} = (−1)^μ conj(X_N^μ) into a complete table (rows at irow).
template <typename T, bool SCALED> __device__ __forceinline__ void put_pm(cx<T> *t, int N, int mu, cx<T> v)
{
    t[irow<SCALED>(N) + mu] = v;
    if (mu > 0)
        t[irow<SCALED>(N) - mu] = (mu & 1) ? cx<T>{-v.re, v.im} : cx<T>{v.re, -v.im};
}

// Column μ = m, N = m..top, of I_N^m(x) (SCALED false; ir2 = 1/|x|²) or of Ĩ_N^m = I_N^m(u)/N!
// at the unit vector u = x (SCALED true; rec[n] = 1/n in f32) into a complete table (put_pm).
template <typename T, bool SCALED>
__device__ void irregular_column_full(T x, T y, T z, T ir2, int m, int top, cx<T> *t, const float *rec)
{
    cx<T> d = {SCALED ? (T)1 : sqrt(ir2), (T)0};
    for (int k = 1; k <= m; k++)
    {
        const T f = SCALED ? -(T)(2 * k - 1) * (T)rec[k] : -(T)(2 * k - 1) * ir2;
        const cx<T> xy = {x * f, y * f};
        d = {xy.re * d.re - xy.im * d.im, xy.re * d.im + xy.im * d.re};
    }
    put_pm<T, SCALED>(t, m, m, d);
    if (m + 1 > top)
        return;
    const T f1 = SCALED ? (T)(2 * m + 1) * (T)rec[m + 1] * z : (T)(2 * m + 1) * z * ir2;
    cx<T> b = d, a = {d.re * f1, d.im * f1};
    put_pm<T, SCALED>(t, m + 1, m, a);
    for (int n = m + 2; n <= top; n++)
    {
        cx<T> v;
        if (SCALED)
        {
            const T f = (T)(2 * n - 1) * (T)rec[n] * z,
                    g = (T)((n - 1) * (n - 1) - m * m) * ((T)rec[n] * (T)rec[n - 1]);
            v = {a.re * f - b.re * g, a.im * f - b.im * g};
        }
        else
        {
            const T f = (T)(2 * n - 1) * z, g = (T)((n - 1) * (n - 1) - m * m);
            v = {(a.re * f - b.re * g) * ir2, (a.im * f - b.im * g) * ir2};
        }
        put_pm<T, SCALED>(t, n, m, v);
        b = a;
        a = v;
    }
}

// The complete multipole tables of cells 0..n_cells (fmm_m2l_expand[_f32]): entry e =
// FMM_Q (j² + j + k) + c of cell `cell`, scaled by j! ρ^{−j} (SCALED, ρ = √3 h).
template <typename T, bool SCALED>
__device__ __forceinline__ void m2l_expand(int n_cells, const double *__restrict__ half,
                                           const cplx *__restrict__ mult, cx<T> *__restrict__ out)
{
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n_cells * M2L_NM)
        return;
    const int cell = (int)(t / M2L_NM), e = (int)(t - (size_t)cell * M2L_NM);
    const int jk = e / FMM_Q, c = e - FMM_Q * jk;
    int j = 0;
    while ((j + 1) * (j + 1) <= jk)
        j++;
    const int k = jk - j * j - j;
    const cplx v = csignedq(mult + (size_t)cell * FMM_Q * NC, j, k, c);
    double sc = 1.0;
    if (SCALED)
    {
        const double irho = 1.0 / (1.7320508075688772 * half[cell]);
        for (int a = 1; a <= j; a++)
            sc *= a * irho;
    }
    out[t] = {(T)(v.re * sc), (T)(v.im * sc)};
}

extern "C" __global__ void fmm_m2l_expand(int n_cells, const double *__restrict__ half,
                                          const cplx *__restrict__ mult, cx<double> *__restrict__ out)
{
    m2l_expand<double, false>(n_cells, half, mult, out);
}

extern "C" __global__ void fmm_m2l_expand_f32(int n_cells, const double *__restrict__ half,
                                              const cplx *__restrict__ mult, cx<float> *__restrict__ out)
{
    m2l_expand<float, true>(n_cells, half, mult, out);
}

// Zeroes a lane's sums of its slots' outputs (M2L_RR rounds, M2L_B outputs, FMM_Q charges).
template <typename U> __device__ __forceinline__ void zero_slots(U (*a)[M2L_B][FMM_Q][2])
{
#pragma unroll
    for (int r = 0; r < M2L_RR; r++)
#pragma unroll
        for (int b = 0; b < M2L_B; b++)
#pragma unroll
            for (int c = 0; c < FMM_Q; c++)
                a[r][b][c][0] = a[r][b][c][1] = (U)0;
}

// One pair's terms of row j: s[r][b][c] += Σ_{|k| ≤ j} M_j^k I_{j+n_r}^{k−m0_r−b} (complete
// tables; I offset by M2L_PAD), k ascending, each complex product as four chained FMAs.
template <typename T, bool SCALED>
__device__ __forceinline__ void m2l_row(const cx<T> *I, const cx<T> *M, int j, const int *sn, const int *sm,
                                        T (*s)[M2L_B][FMM_Q][2])
{
    const cx<T> *row[M2L_RR];
    cx<T> win[M2L_RR][M2L_B]; // win[r][b] = I_N^{k − m0 − b}
#pragma unroll
    for (int r = 0; r < M2L_RR; r++)
    {
        const int N = j + sn[r];
        row[r] = I + (irow<SCALED>(N) - sm[r]); // I_N^{k − m0} at row[r][k]
#pragma unroll
        for (int b = 1; b < M2L_B; b++)
            win[r][b] = row[r][-j - b];
    }
    const cx<T> *mrow = M + FMM_Q * (j * j + j);
#pragma unroll
    for (int k = -j; k <= j; k++)
    {
        cx<T> mv[FMM_Q];
#pragma unroll
        for (int c = 0; c < FMM_Q; c++)
            mv[c] = mrow[FMM_Q * k + c];
#pragma unroll
        for (int r = 0; r < M2L_RR; r++)
        {
            win[r][0] = row[r][k];
#pragma unroll
            for (int b = 0; b < M2L_B; b++)
            {
                const cx<T> h = win[r][b];
#pragma unroll
                for (int c = 0; c < FMM_Q; c++)
                {
                    // Four FMAs (written out: `s += a·b − c·d` would be two products, a
                    // subtraction and an addition).
                    s[r][b][c][0] = fma(mv[c].re, h.re, s[r][b][c][0]);
                    s[r][b][c][0] = fma(-mv[c].im, h.im, s[r][b][c][0]);
                    s[r][b][c][1] = fma(mv[c].re, h.im, s[r][b][c][1]);
                    s[r][b][c][1] = fma(mv[c].im, h.re, s[r][b][c][1]);
                }
            }
#pragma unroll
            for (int b = M2L_B - 1; b > 0; b--)
                win[r][b] = win[r][b - 1];
        }
    }
}

// Rows 0..p of one pair: f64 straight into acc; f32 per row into a partial weighted by
// w_j = C(n+j, j) (ρ/ℓ)^j (binom[j (p+1) + n] times pw = (ρ/ℓ)^j, advanced by rl a row). The
// rows are unrolled up to p = 12 (constant j: the k loops unroll too, immediate offsets);
// above, rolled (compile time and registers).
template <typename T, bool SCALED>
__device__ __forceinline__ void m2l_rows(const cx<T> *I, const cx<T> *M, const int *sn, const int *sm,
                                         T (*acc)[M2L_B][FMM_Q][2], const float *binom, T rl)
{
    T pw = (T)1;
#if FMM_P <= 12
#pragma unroll
#else
#pragma unroll 1
#endif
    for (int j = 0; j <= FMM_P; j++)
    {
        if (!SCALED)
            m2l_row<T, SCALED>(I, M, j, sn, sm, acc);
        else
        {
            T sj[M2L_RR][M2L_B][FMM_Q][2];
            zero_slots(sj);
            m2l_row<T, SCALED>(I, M, j, sn, sm, sj);
#pragma unroll
            for (int r = 0; r < M2L_RR; r++)
            {
                const T w = (T)binom[j * (FMM_P + 1) + sn[r]] * pw;
#pragma unroll
                for (int b = 0; b < M2L_B; b++)
#pragma unroll
                    for (int c = 0; c < FMM_Q; c++)
                    {
                        acc[r][b][c][0] = fma(w, sj[r][b][c][0], acc[r][b][c][0]);
                        acc[r][b][c][1] = fma(w, sj[r][b][c][1], acc[r][b][c][1]);
                    }
            }
            pw *= rl;
        }
    }
}

// The copy unit of a multipole table: one complex value of the M2L's precision.
#define M2L_U ((M2L_NM + 31) / 32)

// The body of fmm_m2l (T = double, SCALED false) and fmm_m2l_f32 (T = float, SCALED true);
// binom (SCALED only) holds C(n+j, j) at j (p+1) + n, rec 1/n at n ≤ 2p + 1.
template <typename T, bool SCALED>
__device__ __forceinline__ void m2l_warp(int n_cells, const double *__restrict__ tcenter,
                                         const double *__restrict__ scenter, const double *__restrict__ shalf,
                                         const unsigned *__restrict__ offsets,
                                         const unsigned *__restrict__ sources, const cx<T> *__restrict__ mfull,
                                         cplx *__restrict__ local, cx<T> *smem, const float *binom,
                                         const float *rec)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int cell = blockIdx.x * (blockDim.x >> 5) + warp;
    if (cell >= n_cells)
        return;
    cx<T> *I = smem + (size_t)warp * (M2L_PAD + M2L_NI(SCALED) + M2L_NM) + M2L_PAD;
    cx<T> *M = I + M2L_NI(SCALED);
    // The lane's slots (n, m0); past the last slot a dummy (0, 0), computed and not written.
    int sn[M2L_RR], sm[M2L_RR];
#pragma unroll
    for (int r = 0; r < M2L_RR; r++)
    {
        int s = lane + 32 * r, n = 0;
        if (s >= M2L_S)
            s = 0;
        while (s >= (n + M2L_B) / M2L_B)
        {
            s -= (n + M2L_B) / M2L_B;
            n++;
        }
        sn[r] = n;
        sm[r] = M2L_B * s;
    }
    double acc[M2L_RR][M2L_B][FMM_Q][2];
    zero_slots(acc);
    const double tx = tcenter[3 * cell], ty = tcenter[3 * cell + 1], tz = tcenter[3 * cell + 2];
    const unsigned first = offsets[cell], last = offsets[cell + 1];
    // f32 up to 16 values a lane (p = 11, q = 3): the next entry's table, in flight while the
    // current one is summed; f64 (twice the registers) and larger tables: the entry's own
    // table, loaded after the barrier.
    constexpr bool ahead = SCALED && M2L_U <= 16;
    cx<T> pre[M2L_U];
    auto fetch = [&](unsigned e) {
        const cx<T> *src = mfull + (size_t)sources[e] * M2L_NM;
#pragma unroll
        for (int u = 0; u < M2L_U; u++)
        {
            const int f = lane + 32 * u;
            if (f < M2L_NM)
                pre[u] = src[f];
        }
    };
    if (ahead && first < last)
        fetch(first);
    for (unsigned e = first; e < last; e++)
    {
        const unsigned s = sources[e];
        const double rx = tx - scenter[3 * s], ry = ty - scenter[3 * s + 1], rz = tz - scenter[3 * s + 2];
        const double r2 = rx * rx + ry * ry + rz * rz;
        const double il = SCALED ? 1.0 / sqrt(r2) : 1.0;
        __syncwarp(); // the previous pair's tables are read
        if (!ahead)
            fetch(e);
#pragma unroll
        for (int u = 0; u < M2L_U; u++)
        {
            const int f = lane + 32 * u;
            if (f < M2L_NM)
                M[f] = pre[u];
        }
        if (ahead && e + 1 < last)
            fetch(e + 1);
        {
            const T x = SCALED ? (T)(rx * il) : (T)rx, y = SCALED ? (T)(ry * il) : (T)ry,
                    z = SCALED ? (T)(rz * il) : (T)rz, ir2 = SCALED ? (T)1 : (T)(1.0 / r2);
            for (int mu = lane; mu <= 2 * FMM_P; mu += 32)
                irregular_column_full<T, SCALED>(x, y, z, ir2, mu, 2 * FMM_P, I, rec);
        }
        __syncwarp(); // tables complete
        if (!SCALED)
        {
            // f64: every term straight into the list's sums.
            m2l_rows<T, false>(I, M, sn, sm, (T(*)[M2L_B][FMM_Q][2])acc, nullptr, (T)1);
        }
        else
        {
            T part[M2L_RR][M2L_B][FMM_Q][2];
            zero_slots(part);
            const T rl = (T)(1.7320508075688772 * shalf[s] * il);
            m2l_rows<T, true>(I, M, sn, sm, part, binom, rl);
#pragma unroll
            for (int r = 0; r < M2L_RR; r++)
            {
                // n! ℓ^{−(n+1)}, then the pair's terms into the f64 sums.
                double f = il;
                for (int n = 1; n <= sn[r]; n++)
                    f *= n * il;
#pragma unroll
                for (int b = 0; b < M2L_B; b++)
#pragma unroll
                    for (int c = 0; c < FMM_Q; c++)
                    {
                        acc[r][b][c][0] += f * (double)part[r][b][c][0];
                        acc[r][b][c][1] += f * (double)part[r][b][c][1];
                    }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < M2L_RR; r++)
    {
        if (lane + 32 * r >= M2L_S)
            continue;
#pragma unroll
        for (int b = 0; b < M2L_B; b++)
        {
            const int n = sn[r], m = sm[r] + b;
            if (m > n)
                continue;
            const double sign = ((n + m) & 1) ? -1.0 : 1.0;
            const int i = cindex(n, m);
#pragma unroll
            for (int c = 0; c < FMM_Q; c++)
                local[(size_t)cell * FMM_Q * NC + FMM_Q * i + c] = {acc[r][b][c][0] * sign,
                                                                    acc[r][b][c][1] * sign};
        }
    }
}

extern __shared__ __align__(16) unsigned char m2l_shared[];

// M2L in f64: L_n^m = (−1)^{n+m} Σ_sources Σ_{j,k} M_j^k I_{j+n}^{k−m}(c_t − c_s), the sources in
// list order, every target cell written; mfull from fmm_m2l_expand. Block: 32·w threads
// (w ≤ M2L_WARPS), one target cell per warp; dynamic shared memory
// w · 16 (M2L_PAD + (2p+1)² + q (p+1)²) bytes.
extern "C" __global__ void __launch_bounds__(32 * M2L_WARPS)
    fmm_m2l(int n_cells, const double *__restrict__ tcenter, const double *__restrict__ scenter,
            const double *__restrict__ shalf, const unsigned *__restrict__ offsets,
            const unsigned *__restrict__ sources, const cx<double> *__restrict__ mfull,
            cplx *__restrict__ local)
{
    m2l_warp<double, false>(n_cells, tcenter, scenter, shalf, offsets, sources, mfull, local,
                            reinterpret_cast<cx<double> *>(m2l_shared), nullptr, nullptr);
}

// The same in f32 with scaling (above; mfull from fmm_m2l_expand_f32; at least one block per
// SM in the launch bounds, so ptxas takes the registers it needs: without, it spilled 4 bytes
// at p = 9, q = 1 with 64 registers); dynamic shared memory
// w · 8 (M2L_PAD + M2L_NI(true) + q (p+1)²) bytes, static 4 ((p+1)² + 2p + 2) (the binomial and
// reciprocal tables, built before the block's only barrier).
extern "C" __global__ void __launch_bounds__(32 * M2L_WARPS, 1)
    fmm_m2l_f32(int n_cells, const double *__restrict__ tcenter, const double *__restrict__ scenter,
                const double *__restrict__ shalf, const unsigned *__restrict__ offsets,
                const unsigned *__restrict__ sources, const cx<float> *__restrict__ mfull,
                cplx *__restrict__ local)
{
    __shared__ float binom[(FMM_P + 1) * (FMM_P + 1)];
    __shared__ float rec[2 * FMM_P + 2];
    for (int t = threadIdx.x; t < (FMM_P + 1) * (FMM_P + 1); t += blockDim.x)
    {
        const int j = t / (FMM_P + 1), n = t - j * (FMM_P + 1);
        double b = 1.0; // C(n + j, j), exact in f64 (≤ C(40, 20))
        for (int a = 1; a <= j; a++)
            b = b * (n + a) / a;
        binom[t] = (float)b;
    }
    for (int t = threadIdx.x; t < 2 * FMM_P + 2; t += blockDim.x)
        rec[t] = t == 0 ? 0.0f : 1.0f / (float)t;
    __syncthreads();
    m2l_warp<float, true>(n_cells, tcenter, scenter, shalf, offsets, sources, mfull, local,
                          reinterpret_cast<cx<float> *>(m2l_shared), binom, rec);
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

// L2L: one warp per cell of cells[first, first + count) (a level below the root):
// L'_n^m += Σ_{j ≥ n, k} L_j^k R_{j−n}^{k−m}(c − c_parent).
extern "C" __global__ void __launch_bounds__(32 * FAR_WARPS)
    fmm_l2l(int first, int count, const double *__restrict__ center, const unsigned *__restrict__ parent,
            cplx *__restrict__ local)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x * (blockDim.x >> 5) + warp;
    if (b >= count)
        return;
    const int cell = first + b;
    const unsigned pc = parent[cell];
    __shared__ cplx Rs[FAR_WARPS][NC];
    __shared__ cplx Ls[FAR_WARPS][FMM_Q * NC];
    cplx *R = Rs[warp], *L = Ls[warp];
    if (lane <= FMM_P)
        regular_column(center[3 * cell] - center[3 * pc], center[3 * cell + 1] - center[3 * pc + 1],
                       center[3 * cell + 2] - center[3 * pc + 2], lane, FMM_P, R);
    for (int k = lane; k < FMM_Q * NC; k += 32)
        L[k] = local[(size_t)pc * FMM_Q * NC + k];
    __syncwarp();
    int on[FAR_R], om[FAR_R];
    lane_outputs(lane, on, om);
#pragma unroll
    for (int r = 0; r < FAR_R; r++)
    {
        const int i = lane + 32 * r;
        if (i >= NC)
            continue;
        cplx acc[FMM_Q];
        shifted_local(R, L, on[r], om[r], acc);
        for (int cc = 0; cc < FMM_Q; cc++)
        {
            cplx &o = local[(size_t)cell * FMM_Q * NC + FMM_Q * i + cc];
            o.re += acc[cc].re;
            o.im += acc[cc].im;
        }
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
