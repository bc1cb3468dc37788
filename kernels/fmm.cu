// The fast multipole method on the GPU (docs/physics.md §8; src/summation/fmm/). The tree and the
// interaction lists come from fmm_tree.cu; the expansions are f64 (src/summation/fmm/expansions.rs,
// whose module docs give the normalisation and the operators line by line), the near field is
// summed in f32 with the regularised kernel of common.cuh. One warp per cell, its lanes over
// expansion coefficients (P2M, M2M, M2L in f64 or scaled f32, L2L; several cells per block, no
// block barriers), or one block per leaf, its threads over the leaf's targets (L2P and P2P
// together: the seed's "multiple walks", SC09 §2.3), so no sum is reduced across warps.
//
// Compiled per expansion order and charge count: -DFMM_P=<p> -DFMM_Q=<q>. The far-field kernels
// (P2M, M2M, M2L, L2L) are written once for q Laplace charges per source, the interaction's
// charge components (src/summation/interaction.rs): q = 3 for the Biot–Savart law (the vortex
// strengths; evaluated by the fmm_eval_* kernels); q = 1 is compiled and tested (gravity runs on
// the Cartesian expansions of fmm_cartesian.cu instead, which expand the softened kernel).
// Coefficients (n, m ≥ 0) at n(n+1)/2 + m, the q components adjacent (coef[q·index + c]);
// X_n^{−m} = (−1)^m conj(X_n^m).
//
// The periodic box (src/summation/fmm/cuda.rs's periodic mode, periodic.rs): the lists carry an
// image shift per entry (u16 indices into a table of 3 doubles per shift, both null in free
// space); M2L translates from the shifted source centre c_s + shift, P2P adds the shift to the
// source positions (in f64, relative to the target leaf's centre, before the f32 rounding);
// fmm_add_root adds the far images' local expansion to the target root's and fmm_vacuum
// subtracts the vacuum term (an affine velocity and its constant gradient).

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
                                         const float *rec, const unsigned short *__restrict__ m2l_sh,
                                         const double *__restrict__ shift_table)
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
        double rx = tx - scenter[3 * s], ry = ty - scenter[3 * s + 1], rz = tz - scenter[3 * s + 2];
        if (m2l_sh)
        {
            // c_t − (c_s + shift), as the host's (c_t − c_s) − shift.
            const size_t h = 3 * (size_t)m2l_sh[e];
            rx -= shift_table[h];
            ry -= shift_table[h + 1];
            rz -= shift_table[h + 2];
        }
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

// M2L in f64: L_n^m = (−1)^{n+m} Σ_sources Σ_{j,k} M_j^k I_{j+n}^{k−m}(c_t − c_s − shift), the
// sources in list order, every target cell written; mfull from fmm_m2l_expand; m2l_sh the
// entries' shift indices into shift_table (both null: no shifts). Block: 32·w threads
// (w ≤ M2L_WARPS), one target cell per warp; dynamic shared memory
// w · 16 (M2L_PAD + (2p+1)² + q (p+1)²) bytes.
extern "C" __global__ void __launch_bounds__(32 * M2L_WARPS)
    fmm_m2l(int n_cells, const double *__restrict__ tcenter, const double *__restrict__ scenter,
            const double *__restrict__ shalf, const unsigned *__restrict__ offsets,
            const unsigned *__restrict__ sources, const cx<double> *__restrict__ mfull,
            cplx *__restrict__ local, const unsigned short *__restrict__ m2l_sh,
            const double *__restrict__ shift_table)
{
    m2l_warp<double, false>(n_cells, tcenter, scenter, shalf, offsets, sources, mfull, local,
                            reinterpret_cast<cx<double> *>(m2l_shared), nullptr, nullptr, m2l_sh,
                            shift_table);
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
                cplx *__restrict__ local, const unsigned short *__restrict__ m2l_sh,
                const double *__restrict__ shift_table)
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
                          reinterpret_cast<cx<float> *>(m2l_shared), binom, rec, m2l_sh, shift_table);
}

// The periodic box's far images: local[i] += add[i] for the FMM_Q·NC coefficients of the target
// root (cell 0), after M2L and before L2L.
extern "C" __global__ void fmm_add_root(const cplx *__restrict__ add, cplx *__restrict__ local)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= FMM_Q * NC)
        return;
    local[i].re += add[i].re;
    local[i].im += add[i].im;
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

// ---------------------------------------------------------------------------------------------
// The near field with L2P: the fmm_eval_* kernels (Biot–Savart), one loop written once over an
// interaction (near_leaf<I>; the interaction NearBS<MODE> below).
//
// One warp per target leaf, NEAR_WARPS leaves per block, no block barrier. The leaf's targets
// go in chunks of at most NEAR_CHUNK = 32 NEAR_TPT; within a chunk of c targets the warp's lanes
// form G groups of L = 32/G lanes (L the smallest power of two with L NEAR_TPT ≥ c): lane
// (group g, slot s) keeps the targets s + L k, k < NEAR_TPT, in registers (indices clamped to
// the chunk so every lane runs every pair; only valid ones are stored) and sums the sources
// g, g + G, … of each stage, so one loaded source serves NEAR_TPT targets. The list's source
// leaves are streamed in stages of up to NEAR_STAGE sources across consecutive list entries
// (near_stage: 32 entries' ranges are read by the lanes at once and scanned, each lane finds its
// records' entries by a binary search of the scan), staged in the warp's slice of shared memory
// relative to the target leaf's centre (the packed positions relative to their own leaf's centre
// plus (c_s − c_t) rounded to f32: the small separations keep f32's precision) and padded to a
// multiple of G with records that add exact zeros. After the list, the groups' outputs are added
// by shuffles in a fixed tree order (deterministic), put in shared memory, and every lane takes
// targets i = lane, lane + 32, … for L2P (the local expansion shifted to the target in f64) and
// the stores at the targets' original indices.
//
// Biot–Savart: the exact (Gaussian) kernel for a pair within ρ_c σ_q (r² ≤ ρ_c² σ_q²), the
// singular 1/(4πr³) beyond, as the per-pair rule has it, with warp-uniform branches: per staged
// source a warp vote on whether any of the warp's pairs with it is near; if none, the singular
// kernel for all (the fast path); if some, a vote per target slot k (the lanes' k-th targets:
// 32 consecutive targets when the warp is one group) takes the exact path for the slot, where
// each lane selects the exact or the singular coefficients of its own pair.
#ifndef NEAR_WARPS
#define NEAR_WARPS 4
#endif
#ifndef NEAR_TPT
#define NEAR_TPT 4
#endif
// Blocks per SM the launch bound asks for: 16 warps per SM, so at most 128 registers a thread.
#ifndef NEAR_MINB
#define NEAR_MINB (NEAR_WARPS >= 16 ? 1 : 16 / NEAR_WARPS)
#endif
#define NEAR_CHUNK (32 * NEAR_TPT)
#define NEAR_STAGE 128
#define NEAR_FULL 0xffffffffu
static_assert(NEAR_STAGE % 32 == 0, "NEAR_STAGE: whole warps");
static_assert(NEAR_TPT >= 1 && NEAR_TPT <= 8, "NEAR_TPT: 1 to 8 targets per lane");

// One stage's window of list entries (lane i: entry e + i): the inclusive scan of their source
// counts, their first packed sources and their centres' offsets c_s − c_t in f32.
struct NearMeta
{
    unsigned end[32];
    unsigned begin[32];
    float shift[32][3];
};

// What both eval kernels read: the target leaves and their sorted targets, the P2P rows, the
// source leaves and their packed sources, the local expansions.
struct NearArgs
{
    const unsigned *tleaves;
    int n_tleaves;
    const double *tcenter;
    const unsigned *tbegin, *tend;
    const double *tx;
    const unsigned *torder;
    const unsigned *p2p_offsets, *p2p_sources;
    const double *scenter;
    const unsigned *sbegin, *send;
    const float4 *spos, *sstr;
    const cplx *local;
    // The P2P entries' image shifts (indices into 3 doubles per shift; both null: none).
    const unsigned short *p2p_shifts;
    const double *shift_table;
};

// Stages the next sources of the row (entries [e, e_end), the first `off` sources of entry e
// already summed) into buf, advances (e, off) past them and returns the staged count padded to a
// multiple of G (≤ NEAR_STAGE). Every lane of the warp calls it.
template <class I>
__device__ __forceinline__ int near_stage(const I &in, const NearArgs &a, NearMeta &m, typename I::Src *buf,
                                          unsigned &e, unsigned &off, unsigned e_end, int G, double cx,
                                          double cy, double cz, int lane)
{
    const unsigned ei = e + lane;
    const bool valid = ei < e_end;
    unsigned b = 0, c = 0;
    float h0 = 0, h1 = 0, h2 = 0;
    if (valid)
    {
        const unsigned sl = a.p2p_sources[ei];
        b = a.sbegin[sl];
        c = a.send[sl] - b;
        if (lane == 0)
        {
            b += off;
            c -= off;
        }
        double d0 = a.scenter[3 * sl] - cx, d1 = a.scenter[3 * sl + 1] - cy, d2 = a.scenter[3 * sl + 2] - cz;
        if (a.p2p_shifts)
        {
            // The image's centre c_s + shift relative to c_t, in f64 (small for a near pair).
            const size_t h = 3 * (size_t)a.p2p_shifts[ei];
            d0 += a.shift_table[h];
            d1 += a.shift_table[h + 1];
            d2 += a.shift_table[h + 2];
        }
        h0 = (float)d0;
        h1 = (float)d1;
        h2 = (float)d2;
    }
    unsigned incl = c;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1)
    {
        const unsigned v = __shfl_up_sync(NEAR_FULL, incl, d);
        if (lane >= d)
            incl += v;
    }
    const unsigned total = __shfl_sync(NEAR_FULL, incl, 31);
    const int n = (int)min(total, (unsigned)NEAR_STAGE);
    __syncwarp(); // the previous stage's records and window are read
    m.end[lane] = incl;
    m.begin[lane] = b;
    m.shift[lane][0] = h0;
    m.shift[lane][1] = h1;
    m.shift[lane][2] = h2;
    __syncwarp();
    const int padded = (n + G - 1) / G * G;
    for (int v = lane; v < padded; v += 32)
    {
        if (v < n)
        {
            // The entry of record v: the number of entries that end at or before it.
            int i = 0;
#pragma unroll
            for (int s = 16; s > 0; s >>= 1)
                if (m.end[i + s - 1] <= (unsigned)v)
                    i += s;
            const unsigned q = m.begin[i] + ((unsigned)v - (i > 0 ? m.end[i - 1] : 0u));
            buf[v] = in.load(a, q, m.shift[i][0], m.shift[i][1], m.shift[i][2]);
        }
        else
            buf[v] = I::pad();
    }
    // Entries summed to their end, and where the next stage starts.
    const int k = __popc(__ballot_sync(NEAR_FULL, valid && incl <= (unsigned)n));
    unsigned before = __shfl_sync(NEAR_FULL, incl, (k + 31) & 31);
    if (k == 0)
        before = 0;
    off = (k == 0 ? off : 0u) + ((unsigned)n - before);
    e += k;
    __syncwarp(); // records written
    return padded;
}

// The near field and L2P of one target leaf per warp (the layout above), for interaction I:
//   Src, Tgt, Acc                          a staged source, a target's registers, its sums
//   kOut                                   f32 outputs per target (near_leaf's shared results)
//   kSplit                                 whether pair<true> (exact) and pair<false> differ
//   load(args, q, shift…), pad()           a staged source (from packed source q), a zero one
//   target(args, t, c…)                    sorted target t relative to the leaf centre
//   zero(acc), near(src, tgt)              sums zeroed; whether the pair needs the exact kernel
//   pair<EXACT>(src, tgt, acc)             one pair into the sums
//   finish(acc, tgt, out)                  the kOut outputs (linear in the sums)
//   l2p_write(args, leaf, t, c…, near)     L2P at sorted target t plus its near-field outputs,
//                                          stored at its original index
// smem: the warp's slice (NEAR_STAGE records or NEAR_CHUNK kOut floats); m its window.
template <class I>
__device__ __forceinline__ void near_leaf(const I &in, const NearArgs &a, unsigned char *smem, NearMeta &m)
{
    typedef typename I::Src Src;
    constexpr int kChunk = 32 * I::kTpt;
    const int lane = threadIdx.x & 31;
    const int w = blockIdx.x * NEAR_WARPS + (threadIdx.x >> 5);
    if (w >= a.n_tleaves)
        return;
    Src *buf = reinterpret_cast<Src *>(smem);
    float *res = reinterpret_cast<float *>(smem);
    const unsigned leaf = a.tleaves[w];
    const double cx = a.tcenter[3 * leaf], cy = a.tcenter[3 * leaf + 1], cz = a.tcenter[3 * leaf + 2];
    const unsigned first = a.tbegin[leaf], last = a.tend[leaf];
    const unsigned e0 = a.p2p_offsets[w], e1 = a.p2p_offsets[w + 1];
    for (unsigned base = first; base < last; base += kChunk)
    {
        const int nc = (int)min(last - base, (unsigned)kChunk);
        int L = 1;
        while (L * I::kTpt < nc)
            L <<= 1;
        const int G = 32 / L, g = lane / L, slot = lane % L;
        typename I::Tgt tg[I::kTpt];
        typename I::Acc acc[I::kTpt];
#pragma unroll
        for (int k = 0; k < I::kTpt; k++)
        {
            tg[k] = in.target(a, base + min(slot + L * k, nc - 1), cx, cy, cz);
            in.zero(acc[k]);
        }
        unsigned e = e0, off = 0;
        while (e < e1)
        {
            const int padded = near_stage(in, a, m, buf, e, off, e1, G, cx, cy, cz, lane);
            for (int j = g; j < padded; j += G)
            {
                const Src s = buf[j];
                if (I::kSplit)
                {
                    // Any pair near: then per target slot k (32 consecutive targets when the
                    // warp is one group), the exact kernel for the warp's slot-k pairs if any
                    // of them is near.
                    bool nk[I::kTpt], nr = false;
#pragma unroll
                    for (int k = 0; k < I::kTpt; k++)
                    {
                        nk[k] = in.near(s, tg[k]);
                        nr |= nk[k];
                    }
                    if (__any_sync(NEAR_FULL, nr))
                    {
#pragma unroll
                        for (int k = 0; k < I::kTpt; k++)
                            if (__any_sync(NEAR_FULL, nk[k]))
                                in.template pair<true>(s, tg[k], acc[k]);
                            else
                                in.template pair<false>(s, tg[k], acc[k]);
                        continue;
                    }
                }
#pragma unroll
                for (int k = 0; k < I::kTpt; k++)
                    in.template pair<false>(s, tg[k], acc[k]);
            }
        }
        // Each target's outputs, the groups' added in a fixed order (lane l gets l + 16, then
        // l + 8, …), into the shared results (group 0).
        __syncwarp(); // the last stage's records are read
#pragma unroll
        for (int k = 0; k < I::kTpt; k++)
        {
            float o[I::kOut];
            in.finish(acc[k], tg[k], o);
            for (int d = 16; d >= L; d >>= 1)
#pragma unroll
                for (int c = 0; c < I::kOut; c++)
                    o[c] += __shfl_down_sync(NEAR_FULL, o[c], d);
            const int i = slot + L * k;
            if (g == 0 && i < nc)
#pragma unroll
                for (int c = 0; c < I::kOut; c++)
                    res[I::kOut * i + c] = o[c];
        }
        __syncwarp();
        for (int i = lane; i < nc; i += 32)
            in.l2p_write(a, leaf, base + i, cx, cy, cz, res + I::kOut * i);
        __syncwarp(); // the results are read before the next chunk's records overwrite them
    }
}

// The eval kernels' first parameters (NearArgs's, in its order up to spos).
#define NEAR_LEAF_PARAMS                                                                                     \
    const unsigned *__restrict__ tleaves, int n_tleaves, const double *__restrict__ tcenter,                \
        const unsigned *__restrict__ tbegin, const unsigned *__restrict__ tend, const double *__restrict__ tx, \
        const unsigned *__restrict__ torder, const unsigned *__restrict__ p2p_offsets,                      \
        const unsigned *__restrict__ p2p_sources, const double *__restrict__ scenter,                       \
        const unsigned *__restrict__ sbegin, const unsigned *__restrict__ send

// Whether interaction I's staged records and results fit the warp's shared slice of `bytes`.
template <class I> __host__ __device__ constexpr bool near_fits(int bytes)
{
    return (int)sizeof(typename I::Src) * NEAR_STAGE <= bytes && I::kOut * 32 * I::kTpt * 4 <= bytes;
}

// An eval kernel's body over NEAR_LEAF_PARAMS, spos, local: the warps' shared slices of
// NEAR_BYTES (checked against the interaction's records and results), the arguments, and
// near_leaf for the interaction given after `sstr` (the packed strengths or nullptr).
#define NEAR_LEAF_BODY(sstr, ...)                                                                           \
    {                                                                                                       \
        __shared__ __align__(16) unsigned char smem[NEAR_WARPS][NEAR_BYTES];                                \
        __shared__ NearMeta meta[NEAR_WARPS];                                                               \
        const NearArgs a = {tleaves, n_tleaves, tcenter, tbegin, tend, tx, torder, p2p_offsets,            \
                            p2p_sources, scenter, sbegin, send, spos, sstr, local, p2p_shifts,             \
                            shift_table};                                                                   \
        near_run<NEAR_BYTES>(__VA_ARGS__, a, smem[threadIdx.x >> 5], meta[threadIdx.x >> 5]);               \
    }

// near_leaf for interaction I once its records and results are known to fit BYTES.
template <int BYTES, class I>
__device__ __forceinline__ void near_run(const I &in, const NearArgs &a, unsigned char *smem, NearMeta &m)
{
    static_assert(near_fits<I>(BYTES), "NEAR_BYTES: the warp's shared slice is too small");
    near_leaf(in, a, smem, m);
}

// Far-away padding coordinate of a staged record (relative to the target leaf's centre): with a
// zero strength or mass it adds exact zeros, and its r² = 3e36 stays finite in f32.
#define NEAR_PAD 1e18f

#if FMM_Q == 3
// Targets per lane of the gradient (15 sums per target: 3 fit 128 registers, 4 do not).
#define NEAR_GRAD_TPT (NEAR_TPT > 3 ? 3 : NEAR_TPT)

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

// The exact pair coefficients (K, L) = (G3/σ³, G5/σ⁵) from r² and 1/σ: src/kernel.rs
// pair_coefficients in f32 (common.cuh's G3, G5; the 1/4π is in the staged strength).
__device__ __forceinline__ float2 near_exact_kl(float r2, float is)
{
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
    return make_float2(g3 * is3, g5 * is3 * is * is);
}

// The regularised Biot–Savart interaction for near_leaf, writing the velocity and (MODE) the
// gradient or a stretching. Staged source: p = (y − c_t, (ρ_c σ)²), s = (α/4π, 1/σ). Target:
// position relative to c_t and, when stretching, its strength α_p (f32). Sums per target:
// u = Σ K c (c = α' × r, α' = α/4π, r = x − y), A = Σ K α', s = −Σ L (α_p·r) c (classical) or
// −Σ L (α_p·c) r (transposed), gr = Σ L c rᵀ (gradient), with (K, L) = (G3/σ³, G5/σ⁵) (exact)
// or (1/r³, 3/r⁵) (singular). Outputs: u, then ∂u/∂x = [A]× − gr (9, row-major), or the
// stretching A × α_p + s (classical) or α_p × A + s (transposed).
template <int MODE> struct NearBS
{
    struct Src
    {
        float4 p, s;
    };
    struct Tgt
    {
        float x, y, z, ax, ay, az;
    };
    struct Acc
    {
        float u[3], A[3], s[3], gr[9];
    };
    static constexpr bool kSplit = true;
    static constexpr bool kGrad = MODE != OUT_VELOCITY;
    static constexpr bool kAlpha = MODE == OUT_CLASSICAL || MODE == OUT_TRANSPOSED;
    static constexpr int kOut = MODE == OUT_VELOCITY ? 3 : MODE == OUT_GRADIENT ? 12 : 6;
    static constexpr int kTpt = MODE == OUT_GRADIENT ? NEAR_GRAD_TPT : NEAR_TPT;

    float rho_cut2;
    const double *talpha;
    double *out_u, *out_x;

    __device__ __forceinline__ Src load(const NearArgs &a, unsigned q, float h0, float h1, float h2) const
    {
        const float4 P = a.spos[q], S = a.sstr[q];
        const float f = (float)VPM_FRAC_1_4PI;
        return {make_float4(P.x + h0, P.y + h1, P.z + h2, rho_cut2 * (P.w * P.w)),
                make_float4(S.x * f, S.y * f, S.z * f, 1.0f / P.w)};
    }

    // α = 0, never near, 1/σ tiny so that the exact kernel's ρ² stays small and finite.
    static __device__ __forceinline__ Src pad()
    {
        return {make_float4(NEAR_PAD, NEAR_PAD, NEAR_PAD, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 1.0f / NEAR_PAD)};
    }

    __device__ __forceinline__ Tgt target(const NearArgs &a, unsigned t, double cx, double cy, double cz) const
    {
        Tgt r;
        r.x = (float)(a.tx[3 * t] - cx);
        r.y = (float)(a.tx[3 * t + 1] - cy);
        r.z = (float)(a.tx[3 * t + 2] - cz);
        r.ax = r.ay = r.az = 0.0f;
        if (kAlpha)
        {
            const size_t o = a.torder[t];
            r.ax = (float)talpha[3 * o];
            r.ay = (float)talpha[3 * o + 1];
            r.az = (float)talpha[3 * o + 2];
        }
        return r;
    }

    __device__ __forceinline__ void zero(Acc &c) const
    {
#pragma unroll
        for (int i = 0; i < 3; i++)
            c.u[i] = c.A[i] = c.s[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < 9; i++)
            c.gr[i] = 0.0f;
    }

    __device__ __forceinline__ bool near(const Src &q, const Tgt &t) const
    {
        const float rx = t.x - q.p.x, ry = t.y - q.p.y, rz = t.z - q.p.z;
        return rx * rx + ry * ry + rz * rz <= q.p.w;
    }

    template <bool EXACT> __device__ __forceinline__ void pair(const Src &q, const Tgt &t, Acc &c) const
    {
        const float rx = t.x - q.p.x, ry = t.y - q.p.y, rz = t.z - q.p.z;
        const float r2 = rx * rx + ry * ry + rz * rz;
        // Singular (1/r³, 3/r⁵); on the exact path the Gaussian kernel's where r² ≤ (ρ_c σ)²
        // (per lane: the per-pair rule), so r = 0 never takes the singular values.
        const float ri = rsqrtf(r2);
        float K = ri * ri * ri, L = 3.0f * K * ri * ri;
        if (EXACT)
        {
            const float2 kl = near_exact_kl(r2, q.s.w);
            const bool inside = r2 <= q.p.w;
            K = inside ? kl.x : K;
            L = inside ? kl.y : L;
        }
        float c0, c1, c2;
        vpm_cross(q.s.x, q.s.y, q.s.z, rx, ry, rz, c0, c1, c2);
        c.u[0] = fmaf(K, c0, c.u[0]);
        c.u[1] = fmaf(K, c1, c.u[1]);
        c.u[2] = fmaf(K, c2, c.u[2]);
        if (!kGrad)
            return;
        c.A[0] = fmaf(K, q.s.x, c.A[0]);
        c.A[1] = fmaf(K, q.s.y, c.A[1]);
        c.A[2] = fmaf(K, q.s.z, c.A[2]);
        if (MODE == OUT_CLASSICAL)
        {
            const float b = L * vpm_dot(t.ax, t.ay, t.az, rx, ry, rz);
            c.s[0] = fmaf(-b, c0, c.s[0]);
            c.s[1] = fmaf(-b, c1, c.s[1]);
            c.s[2] = fmaf(-b, c2, c.s[2]);
        }
        else if (MODE == OUT_TRANSPOSED)
        {
            const float b = L * vpm_dot(t.ax, t.ay, t.az, c0, c1, c2);
            c.s[0] = fmaf(-b, rx, c.s[0]);
            c.s[1] = fmaf(-b, ry, c.s[1]);
            c.s[2] = fmaf(-b, rz, c.s[2]);
        }
        else
        {
            const float cc[3] = {L * c0, L * c1, L * c2}, r[3] = {rx, ry, rz};
#pragma unroll
            for (int i = 0; i < 3; i++)
#pragma unroll
                for (int j = 0; j < 3; j++)
                    c.gr[3 * i + j] = fmaf(cc[i], r[j], c.gr[3 * i + j]);
        }
    }

    __device__ __forceinline__ void finish(const Acc &c, const Tgt &t, float *o) const
    {
        o[0] = c.u[0];
        o[1] = c.u[1];
        o[2] = c.u[2];
        if (MODE == OUT_GRADIENT)
        {
            // [A]× v = A × v.
            const float ax[9] = {0.0f, -c.A[2], c.A[1], c.A[2], 0.0f, -c.A[0], -c.A[1], c.A[0], 0.0f};
#pragma unroll
            for (int i = 0; i < 9; i++)
                o[3 + i] = ax[i] - c.gr[i];
        }
        else if (kAlpha)
        {
            float x0, x1, x2;
            if (MODE == OUT_CLASSICAL)
                vpm_cross(c.A[0], c.A[1], c.A[2], t.ax, t.ay, t.az, x0, x1, x2);
            else
                vpm_cross(t.ax, t.ay, t.az, c.A[0], c.A[1], c.A[2], x0, x1, x2);
            o[3] = x0 + c.s[0];
            o[4] = x1 + c.s[1];
            o[5] = x2 + c.s[2];
        }
    }

    // L2P (expansions.rs l2p): the local expansion shifted to the target in f64, ∇φ_c and (MODE)
    // the Hessian, the velocity u = (1/4π) ∇ × φ and its gradient; plus the near outputs.
    __device__ void l2p_write(const NearArgs &a, unsigned leaf, unsigned t, double cx, double cy, double cz,
                              const float *nr) const
    {
        const double dx = a.tx[3 * t] - cx, dy = a.tx[3 * t + 1] - cy, dz = a.tx[3 * t + 2] - cz;
        const cplx *Lc = a.local + (size_t)leaf * FMM_Q * NC;
        cplx R[NC];
#pragma unroll 1
        for (int mm = 0; mm <= FMM_P; mm++)
            regular_column(dx, dy, dz, mm, FMM_P, R);
        // Shifted coefficients L'_n^m, n = 1, 2, m ≥ 0, three components.
        cplx sh[5][3];
        // (Loops kept rolled: L2P runs once per target, its registers are the pair loop's.)
#pragma unroll 1
        for (int i = 0; i < (kGrad ? 5 : 2); i++)
        {
            const int n = i < 2 ? 1 : 2, m = i < 2 ? i : i - 2;
            shifted_local(R, Lc, n, m, sh[i]);
        }
        // ∇φ_c = (−Re L_1^1, Im L_1^1, L_1^0); Hessian as expansions.rs l2p.
        double g[3][3], h[3][3][3];
        for (int cc = 0; cc < 3; cc++)
        {
            g[cc][0] = -sh[1][cc].re;
            g[cc][1] = sh[1][cc].im;
            g[cc][2] = sh[0][cc].re;
            if (kGrad)
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
        const size_t o = a.torder[t];
        out_u[3 * o] = f * (g[2][1] - g[1][2]) + (double)nr[0];
        out_u[3 * o + 1] = f * (g[0][2] - g[2][0]) + (double)nr[1];
        out_u[3 * o + 2] = f * (g[1][0] - g[0][1]) + (double)nr[2];
        if (!kGrad)
            return;
        double du[3][3];
        for (int j = 0; j < 3; j++)
        {
            du[0][j] = f * (h[2][1][j] - h[1][2][j]);
            du[1][j] = f * (h[0][2][j] - h[2][0][j]);
            du[2][j] = f * (h[1][0][j] - h[0][1][j]);
        }
        if (MODE == OUT_GRADIENT)
        {
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    out_x[9 * o + 3 * i + j] = du[i][j] + (double)nr[3 + 3 * i + j];
            return;
        }
        const double al[3] = {talpha[3 * o], talpha[3 * o + 1], talpha[3 * o + 2]};
        for (int i = 0; i < 3; i++)
        {
            // classical (α·∇)u: Σ_j α_j ∂_j u_i; transposed (∇u)ᵀα: Σ_j ∂_i u_j α_j.
            double s = 0;
            for (int j = 0; j < 3; j++)
                s += (MODE == OUT_CLASSICAL ? du[i][j] : du[j][i]) * al[j];
            out_x[3 * o + i] = s + (double)nr[3 + i];
        }
    }
};

// The warp's shared slice: NEAR_STAGE staged sources (32 bytes) or a chunk's outputs (6 floats
// per target, 12 for the gradient's smaller chunks).
#define NEAR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define NEAR_BYTES NEAR_MAX(NEAR_STAGE * 32, NEAR_MAX(NEAR_CHUNK * 24, 32 * NEAR_GRAD_TPT * 48))

// L2P and P2P of the Biot–Savart law (near_leaf's layout, one warp per target leaf), one kernel
// per output mode (each its own registers): the velocity at every target into out_u (3 per
// target) and the gradient (fmm_eval_gradient, 9) or the classical or transposed stretching with
// the targets' strengths talpha (3) into out_x, at the targets' original indices; the exact
// kernel within ρ_c σ (rho_cut2 = ρ_c²), 1/(4πr) beyond. Arguments (all four alike): tleaves,
// n_tleaves, tcenter, tbegin, tend, tx, torder, p2p_offsets, p2p_sources, scenter, sbegin,
// send, spos, sstr, local, rho_cut2, talpha, out_u, out_x, p2p_shifts, shift_table (the last
// two null without images).
#define NEAR_BS_KERNEL(NAME, MODE)                                                                           \
    extern "C" __global__ void __launch_bounds__(32 * NEAR_WARPS, NEAR_MINB) NAME(                           \
        NEAR_LEAF_PARAMS,                                                                                   \
        const float4 *__restrict__ spos, const float4 *__restrict__ sstr, const cplx *__restrict__ local,   \
        float rho_cut2, const double *__restrict__ talpha, double *__restrict__ out_u,                      \
        double *__restrict__ out_x, const unsigned short *__restrict__ p2p_shifts,                          \
        const double *__restrict__ shift_table)                                                             \
    NEAR_LEAF_BODY(sstr, NearBS<MODE>{rho_cut2, talpha, out_u, out_x})

NEAR_BS_KERNEL(fmm_eval_velocity, OUT_VELOCITY)
NEAR_BS_KERNEL(fmm_eval_gradient, OUT_GRADIENT)
NEAR_BS_KERNEL(fmm_eval_classical, OUT_CLASSICAL)
NEAR_BS_KERNEL(fmm_eval_transposed, OUT_TRANSPOSED)

// The periodic box's vacuum term (periodic.rs VacuumTerm) subtracted at the n sorted targets:
// an affine velocity c + G x at the wrapped position x (tx, 3 per target) with its constant
// gradient G (vac: c at 0..3, G row-major at 3..12), so out_u −= c + G x and, by mode
// (OUT_*), out_x −= G (gradient, 9) or the stretching of G with the target's strength (classical
// G α, transposed Gᵀ α; talpha, 3); at the targets' original indices torder.
extern "C" __global__ void fmm_vacuum(int n, const double *__restrict__ tx, const unsigned *__restrict__ torder,
                                      const double *__restrict__ vac, int mode, const double *__restrict__ talpha,
                                      double *__restrict__ out_u, double *__restrict__ out_x)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    const size_t o = torder[t];
    const double *G = vac + 3;
    const double x[3] = {tx[3 * (size_t)t], tx[3 * (size_t)t + 1], tx[3 * (size_t)t + 2]};
    for (int k = 0; k < 3; k++)
        out_u[3 * o + k] -= vac[k] + G[3 * k] * x[0] + G[3 * k + 1] * x[1] + G[3 * k + 2] * x[2];
    if (mode == OUT_GRADIENT)
    {
        for (int i = 0; i < 9; i++)
            out_x[9 * o + i] -= G[i];
    }
    else if (mode == OUT_CLASSICAL || mode == OUT_TRANSPOSED)
    {
        const double al[3] = {talpha[3 * o], talpha[3 * o + 1], talpha[3 * o + 2]};
        for (int i = 0; i < 3; i++)
        {
            double s = 0;
            for (int j = 0; j < 3; j++)
                s += (mode == OUT_CLASSICAL ? G[3 * i + j] : G[3 * j + i]) * al[j];
            out_x[3 * o + i] -= s;
        }
    }
}

#endif // FMM_Q == 3
