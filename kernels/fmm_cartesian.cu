// The gravity FMM with Cartesian Taylor expansions of the Plummer-softened kernel
// Φ(R) = (|R|² + ε²)^{−1/2} (docs/physics.md §8.1), one charge per body (its mass). The device form
// of src/summation/fmm/cartesian.rs, whose module docs give the operators and the derivative
// recurrence line by line; the same term order (by total order d, then n_x descending, n_y
// descending: index d(d+1)(d+2)/6 + e(e+1)/2 + n_z with e = n_y + n_z), the same signed moments
// M_n = Σ m (c − y)ⁿ/n! and the same recurrence. Expansions in f64; the near field in f32 with
// positions relative to the leaf centres. The tree and lists come from the caller
// (src/summation/fmm/cuda_cartesian.rs).
//
// Compiled per order: -DCART_P=<p>. Kernels:
//   cart_p2m    one block per source leaf, a thread per term, bodies in tiles of 32 whose scaled
//               powers x^a/a! sit in shared memory;
//   cart_m2m    one launch per level (deepest first), one block per cell, a thread per term;
//   cart_m2l    one warp per target cell, four per block, no block barrier after the start: per
//               list entry (in list order) the warp loads the source's moments and computes the
//               derivatives ∂^m Φ, |m| ≤ p, degree by degree into its shared slice (lanes over
//               the terms of a degree, __syncwarp between degrees), then each lane adds to the
//               output terms it owns (k = lane + 32 j, in registers): deterministic;
//   cart_l2l    one launch per level (top first), one block per cell, a thread per term;
//   cart_eval   L2P and P2P fused, one block per target leaf, a thread per target: φ = −ψ and
//               a = ∇ψ from the local expansion in f64, plus the softened pairs of the P2P list
//               in f32 over shared-memory tiles, each body loaded as (y − c_leaf, m) in f32 (a
//               pair at distance 0 adds nothing, so ε = 0 skips the self pair).
// M2L writes every target cell's local expansion (zero without a list) and P2M/M2M every source
// cell's moments, so no buffer needs clearing; L2L adds the parent's to the M2L result.

#include "common.cuh"

#ifndef CART_P
#define CART_P 8
#endif
#define NT ((CART_P + 1) * (CART_P + 2) * (CART_P + 3) / 6)
#define NP (CART_P + 1)
#define CART_THREADS 128
#define TERMS_PER_THREAD ((NT + CART_THREADS - 1) / CART_THREADS)
#define M2L_WARPS 4
#define TERMS_PER_LANE ((NT + 31) / 32)
#define P2M_TILE 32

// The index of multi-index (i, j, k), i + j + k ≤ CART_P.
__device__ __forceinline__ int cart_index(int i, int j, int k)
{
    const int d = i + j + k, e = j + k;
    return d * (d + 1) * (d + 2) / 6 + e * (e + 1) / 2 + k;
}

// The multi-index of term t.
__device__ __forceinline__ void cart_decode(int t, int &i, int &j, int &k)
{
    int d = 0;
    while ((d + 1) * (d + 2) * (d + 3) / 6 <= t)
        d++;
    int r = t - d * (d + 1) * (d + 2) / 6, e = 0;
    while ((e + 1) * (e + 2) / 2 <= r)
        e++;
    k = r - e * (e + 1) / 2;
    j = e - k;
    i = d - e;
}

// out[a] = x^a / a!, a = 0 … CART_P.
__device__ __forceinline__ void scaled_powers(double x, double *out)
{
    out[0] = 1.0;
    for (int a = 1; a <= CART_P; a++)
        out[a] = out[a - 1] * x / (double)a;
}

// The terms' multi-indices in shared memory (every thread of the block calls it, once).
__device__ __forceinline__ void fill_terms(uchar4 *tm)
{
    for (int t = threadIdx.x; t < NT; t += blockDim.x)
    {
        int i, j, k;
        cart_decode(t, i, j, k);
        tm[t] = make_uchar4((unsigned char)i, (unsigned char)j, (unsigned char)k, (unsigned char)(i + j + k));
    }
    __syncthreads();
}

// P2M: M_n = Σ m (c − y)ⁿ/n! over the leaf's bodies, in body order.
extern "C" __global__ void __launch_bounds__(CART_THREADS)
    cart_p2m(const unsigned *__restrict__ leaves, int n_leaves, const double *__restrict__ center,
             const unsigned *__restrict__ begin, const unsigned *__restrict__ end, const double *__restrict__ x,
             const double *__restrict__ mass, double *__restrict__ mult)
{
    __shared__ uchar4 tm[NT];
    __shared__ double pw[P2M_TILE][3][NP];
    fill_terms(tm);
    if ((int)blockIdx.x >= n_leaves)
        return;
    const unsigned cell = leaves[blockIdx.x];
    const double *c = center + 3 * (size_t)cell;
    double acc[TERMS_PER_THREAD];
#pragma unroll
    for (int u = 0; u < TERMS_PER_THREAD; u++)
        acc[u] = 0.0;
    for (unsigned tile = begin[cell]; tile < end[cell]; tile += P2M_TILE)
    {
        __syncthreads();
        if (threadIdx.x < 3 * P2M_TILE)
        {
            const unsigned b = threadIdx.x / 3, ax = threadIdx.x % 3, q = tile + b;
            if (q < end[cell])
            {
                scaled_powers(c[ax] - x[3 * (size_t)q + ax], pw[b][ax]);
                if (ax == 0)
                    for (int a = 0; a <= CART_P; a++)
                        pw[b][0][a] *= mass[q];
            }
            else
                for (int a = 0; a <= CART_P; a++)
                    pw[b][ax][a] = 0.0;
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < TERMS_PER_THREAD; u++)
        {
            const int t = threadIdx.x + u * CART_THREADS;
            if (t >= NT)
                break;
            const uchar4 n = tm[t];
            for (int b = 0; b < P2M_TILE; b++)
                acc[u] += pw[b][0][n.x] * pw[b][1][n.y] * pw[b][2][n.z];
        }
    }
#pragma unroll
    for (int u = 0; u < TERMS_PER_THREAD; u++)
    {
        const int t = threadIdx.x + u * CART_THREADS;
        if (t < NT)
            mult[(size_t)cell * NT + t] = acc[u];
    }
}

// M2M for the cells first … first + count − 1 (one level): M_n = Σ_children Σ_{a ≤ n} M_a(child)
// (c − c_child)^{n−a}/(n−a)!, children in cell order. Leaves (no children) are left to P2M.
extern "C" __global__ void __launch_bounds__(CART_THREADS)
    cart_m2m(int first, int count, const double *__restrict__ center, const unsigned *__restrict__ child_begin,
             const unsigned char *__restrict__ child_count, double *__restrict__ mult)
{
    __shared__ uchar4 tm[NT];
    __shared__ double pw[8][3][NP];
    fill_terms(tm);
    if ((int)blockIdx.x >= count)
        return;
    const unsigned cell = first + blockIdx.x, c0 = child_begin[cell];
    const int nch = child_count[cell];
    if (nch == 0)
        return;
    if ((int)threadIdx.x < 3 * nch)
    {
        const int ch = threadIdx.x / 3, ax = threadIdx.x % 3;
        scaled_powers(center[3 * (size_t)cell + ax] - center[3 * (size_t)(c0 + ch) + ax], pw[ch][ax]);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < NT; t += blockDim.x)
    {
        const uchar4 n = tm[t];
        double acc = 0.0;
        for (int ch = 0; ch < nch; ch++)
        {
            const double *m = mult + (size_t)(c0 + ch) * NT;
            for (int a = 0; a <= n.x; a++)
                for (int b = 0; b <= n.y; b++)
                    for (int g = 0; g <= n.z; g++)
                        acc += m[cart_index(a, b, g)] * pw[ch][0][n.x - a] * pw[ch][1][n.y - b] * pw[ch][2][n.z - g];
        }
        mult[(size_t)cell * NT + t] = acc;
    }
}

// M2L: one warp per target cell (module comment). L_k = Σ_{|n| ≤ p − |k|} M_n D_{n+k}(c_t − c_s).
extern "C" __global__ void __launch_bounds__(32 * M2L_WARPS)
    cart_m2l(int n_cells, const double *__restrict__ tcenter, const double *__restrict__ scenter,
             const unsigned *__restrict__ offsets, const unsigned *__restrict__ sources,
             const double *__restrict__ mult, double eps2, double *__restrict__ local)
{
    __shared__ uchar4 tm[NT];
    __shared__ double Msh[M2L_WARPS][NT];
    __shared__ double Dsh[M2L_WARPS][NT];
    fill_terms(tm);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tc = blockIdx.x * M2L_WARPS + warp;
    if (tc >= n_cells)
        return;
    double *M = Msh[warp], *D = Dsh[warp];
    double acc[TERMS_PER_LANE];
#pragma unroll
    for (int u = 0; u < TERMS_PER_LANE; u++)
        acc[u] = 0.0;
    const double cx = tcenter[3 * (size_t)tc], cy = tcenter[3 * (size_t)tc + 1], cz = tcenter[3 * (size_t)tc + 2];
    for (unsigned e = offsets[tc]; e < offsets[tc + 1]; e++)
    {
        const unsigned sc = sources[e];
        const double R[3] = {cx - scenter[3 * (size_t)sc], cy - scenter[3 * (size_t)sc + 1],
                             cz - scenter[3 * (size_t)sc + 2]};
        const double s = R[0] * R[0] + R[1] * R[1] + R[2] * R[2] + eps2, inv_s = 1.0 / s;
        __syncwarp();
        for (int t = lane; t < NT; t += 32)
            M[t] = mult[(size_t)sc * NT + t];
        if (lane == 0)
            D[0] = sqrt(inv_s);
        // Degree d's terms from degrees d − 1 and d − 2 (cartesian.rs `derivatives`): with i the
        // first axis where n_i ≥ 1, s D_n = −(2n_i − 1) R_i D_{n−e_i} − (n_i − 1)² D_{n−2e_i}
        // − Σ_{j≠i} [2 n_j R_j D_{n−e_j} + n_j (n_j − 1) D_{n−2e_j}].
        for (int d = 1; d <= CART_P; d++)
        {
            __syncwarp();
            const int base = d * (d + 1) * (d + 2) / 6, width = (d + 1) * (d + 2) / 2;
            for (int o = lane; o < width; o += 32)
            {
                const uchar4 q = tm[base + o];
                const int n[3] = {q.x, q.y, q.z};
                const int i = n[0] > 0 ? 0 : (n[1] > 0 ? 1 : 2);
                double sum = 0.0;
                for (int j = 0; j < 3; j++)
                {
                    const int nj = n[j];
                    if (nj >= 1)
                    {
                        int m[3] = {n[0], n[1], n[2]};
                        m[j] -= 1;
                        const double c1 = j == i ? 2.0 * nj - 1.0 : 2.0 * nj;
                        sum += c1 * R[j] * D[cart_index(m[0], m[1], m[2])];
                        if (nj >= 2)
                        {
                            m[j] -= 1;
                            const double c2 = j == i ? (nj - 1.0) * (nj - 1.0) : nj * (nj - 1.0);
                            sum += c2 * D[cart_index(m[0], m[1], m[2])];
                        }
                    }
                }
                D[base + o] = -sum * inv_s;
            }
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < TERMS_PER_LANE; u++)
        {
            const int t = lane + 32 * u;
            if (t < NT)
            {
                const uchar4 k = tm[t];
                const int q = CART_P - k.w;
                double a = 0.0;
                for (int n0 = 0; n0 <= q; n0++)
                    for (int n1 = 0; n1 <= q - n0; n1++)
                        for (int n2 = 0; n2 <= q - n0 - n1; n2++)
                            a += M[cart_index(n0, n1, n2)] * D[cart_index(n0 + k.x, n1 + k.y, n2 + k.z)];
                acc[u] += a;
            }
        }
    }
#pragma unroll
    for (int u = 0; u < TERMS_PER_LANE; u++)
    {
        const int t = lane + 32 * u;
        if (t < NT)
            local[(size_t)tc * NT + t] = acc[u];
    }
}

// L2L for the cells first … first + count − 1 (one level below the root at least):
// L_a += Σ_{n ≥ a} L_n(parent) (c − c_parent)^{n−a}/(n−a)!.
extern "C" __global__ void __launch_bounds__(CART_THREADS)
    cart_l2l(int first, int count, const double *__restrict__ center, const unsigned *__restrict__ parent,
             double *__restrict__ local)
{
    __shared__ uchar4 tm[NT];
    __shared__ double pw[3][NP];
    fill_terms(tm);
    if ((int)blockIdx.x >= count)
        return;
    const unsigned cell = first + blockIdx.x, up = parent[cell];
    if (threadIdx.x < 3)
        scaled_powers(center[3 * (size_t)cell + threadIdx.x] - center[3 * (size_t)up + threadIdx.x], pw[threadIdx.x]);
    __syncthreads();
    const double *L = local + (size_t)up * NT;
    for (int t = threadIdx.x; t < NT; t += blockDim.x)
    {
        const uchar4 a = tm[t];
        const int q = CART_P - a.w;
        double acc = 0.0;
        for (int b0 = 0; b0 <= q; b0++)
            for (int b1 = 0; b1 <= q - b0; b1++)
                for (int b2 = 0; b2 <= q - b0 - b1; b2++)
                    acc += L[cart_index(a.x + b0, a.y + b1, a.z + b2)] * pw[0][b0] * pw[1][b1] * pw[2][b2];
        local[(size_t)cell * NT + t] += acc;
    }
}

// L2P and P2P: one block per target leaf, a thread per target (module comment). φ to out_phi,
// a to out_acc (3 per target), at the targets' original indices.
extern "C" __global__ void __launch_bounds__(CART_THREADS)
    cart_eval(const unsigned *__restrict__ tleaves, int n_tleaves, const double *__restrict__ tcenter,
              const unsigned *__restrict__ tbegin, const unsigned *__restrict__ tend, const double *__restrict__ tx,
              const unsigned *__restrict__ torder, const unsigned *__restrict__ p2p_offsets,
              const unsigned *__restrict__ p2p_sources, const double *__restrict__ scenter,
              const unsigned *__restrict__ sbegin, const unsigned *__restrict__ send, const double *__restrict__ sx,
              const double *__restrict__ smass, const double *__restrict__ local, float eps2, double *__restrict__ out_phi,
              double *__restrict__ out_acc)
{
    __shared__ double L[NT];
    __shared__ float4 P[CART_THREADS];
    if ((int)blockIdx.x >= n_tleaves)
        return;
    const unsigned leaf = tleaves[blockIdx.x];
    for (int t = threadIdx.x; t < NT; t += blockDim.x)
        L[t] = local[(size_t)leaf * NT + t];
    const double cx = tcenter[3 * (size_t)leaf], cy = tcenter[3 * (size_t)leaf + 1], cz = tcenter[3 * (size_t)leaf + 2];
    __syncthreads();
    for (unsigned base = tbegin[leaf]; base < tend[leaf]; base += CART_THREADS)
    {
        const unsigned t = base + threadIdx.x;
        const bool active = t < tend[leaf];
        double dx = 0, dy = 0, dz = 0, psi = 0, g[3] = {0, 0, 0};
        if (active)
        {
            dx = tx[3 * (size_t)t] - cx;
            dy = tx[3 * (size_t)t + 1] - cy;
            dz = tx[3 * (size_t)t + 2] - cz;
            double px[NP], py[NP], pz[NP];
            scaled_powers(dx, px);
            scaled_powers(dy, py);
            scaled_powers(dz, pz);
            // ψ = Σ_k L_k w_k(t), ∂_i ψ = Σ_{|k| < p} L_{k+e_i} w_k(t).
            for (int i = 0; i <= CART_P; i++)
                for (int j = 0; j <= CART_P - i; j++)
                    for (int k = 0; k <= CART_P - i - j; k++)
                    {
                        const double w = px[i] * py[j] * pz[k];
                        psi += L[cart_index(i, j, k)] * w;
                        if (i + j + k < CART_P)
                        {
                            g[0] += L[cart_index(i + 1, j, k)] * w;
                            g[1] += L[cart_index(i, j + 1, k)] * w;
                            g[2] += L[cart_index(i, j, k + 1)] * w;
                        }
                    }
        }
        float v[4] = {0, 0, 0, 0};
        for (unsigned e = p2p_offsets[blockIdx.x]; e < p2p_offsets[blockIdx.x + 1]; e++)
        {
            const unsigned sl = p2p_sources[e];
            const double *sc = scenter + 3 * (size_t)sl;
            const float qx = (float)(dx + (cx - sc[0]));
            const float qy = (float)(dy + (cy - sc[1]));
            const float qz = (float)(dz + (cz - sc[2]));
            for (unsigned tile = sbegin[sl]; tile < send[sl]; tile += CART_THREADS)
            {
                const unsigned cnt = min((unsigned)CART_THREADS, send[sl] - tile);
                __syncthreads();
                if (threadIdx.x < cnt)
                {
                    const size_t q = tile + threadIdx.x;
                    P[threadIdx.x] = make_float4((float)(sx[3 * q] - sc[0]), (float)(sx[3 * q + 1] - sc[1]),
                                                 (float)(sx[3 * q + 2] - sc[2]), (float)smass[q]);
                }
                __syncthreads();
                if (!active)
                    continue;
                for (unsigned q = 0; q < cnt; q++)
                    add_softened_pair(P[q], qx, qy, qz, eps2, v);
            }
        }
        if (!active)
            continue;
        const unsigned o = torder[t];
        out_phi[o] = -psi + (double)v[0];
        for (int a = 0; a < 3; a++)
            out_acc[3 * (size_t)o + a] = g[a] + (double)v[1 + a];
    }
}
