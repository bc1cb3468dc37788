// The blob vorticity's Fourier modes on the particle lattice's band by a type-1 non-uniform FFT
// in f64 (docs/physics.md §3.7; src/vortex/lattice_modes.rs holds the method, the window rule
// and the CPU mirror `blob_band_spectrum`; src/vortex/rbf_device.rs launches these). Compiled by
// NVRTC at run time, no options.
//
//   lm_keys     per particle: its mesh coordinate p ∈ [0, M)³ (lm_coordinate) and the key of
//               its cell of LM_CELL³ mesh nodes; counts particles per cell (integer atomics:
//               the counts, and so the cell starts after the scan, do not depend on order)
//   (DeviceSort: exclusive scan of the counts into cell starts; stable radix sort of (key,
//    particle index): particles by cell, in index order within a cell)
//   lm_permute  positions (as mesh coordinates) and strengths in sorted order
//   lm_spread   the gather-style spread: one block per tile of LM_TILE³ mesh nodes, each thread
//               a column of LM_TILE nodes along z; the block visits the cells whose particles'
//               windows reach the tile (`lo`, `span` from the host's `sweep`) in a fixed order
//               and each thread adds their contributions to its nodes in that order, so the
//               mesh is bit-reproducible (no floating-point atomics); every real node of the
//               mesh is written once (the padding of the in-place transform is left alone)
//   (cuFFT D2Z in place, batch of 3)
//   lm_band     the band |q_d| ≤ N/2 of the mesh spectra as N³ lattice half spectra (a Nyquist
//               component takes the sum of the modes +N/2 and −N/2), each mode times
//               fac[m_x]·fac[m_y]·fac[m_z] (the deconvolution and the Gaussian; null: 1)
//
// The window: φ₁(d) = I₀(β√(1 − t²))/I₀(β), t = 2d/w, d the distance in mesh spacings, zero for
// |t| ≥ 1 (lattice_modes.rs `KaiserBessel::weight`).
//
// Layouts: x, alpha 3 doubles per particle; the mesh 3 components of M·M·Mp doubles,
// Mp = 2(M/2 + 1), node (i, j, k) of component c at c·M·M·Mp + (i·M + j)·Mp + k (cuFFT's
// in-place real layout), read after the transform as 3 half spectra of M·M·(M/2 + 1) double2.

#define LM_TILE 8
#define LM_CELL 2
#define LM_THREADS (LM_TILE * LM_TILE)
#define LM_CHUNK 64
#define LM_PI 3.141592653589793
#define LM_TAU 6.283185307179586

// The mesh coordinate in [0, M) of a position in the periodic box [−π, π) (lattice_modes.rs
// `mesh_coordinate`).
__device__ __forceinline__ double lm_coordinate(double x, int m)
{
    double s = x + LM_PI;
    s -= LM_TAU * floor(s / LM_TAU);
    double p = s * ((double)m / LM_TAU);
    return p >= (double)m ? p - (double)m : p;
}

__device__ __forceinline__ int lm_cell(double p, int cells)
{
    return min((int)(p * (1.0 / LM_CELL)), cells - 1);
}

extern "C" __global__ void lm_keys(const double *__restrict__ x, int np, int m, int cells,
                                   unsigned long long *__restrict__ keys,
                                   unsigned int *__restrict__ vals, int *__restrict__ counts)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= np) return;
    const int cx = lm_cell(lm_coordinate(x[3 * (size_t)i], m), cells);
    const int cy = lm_cell(lm_coordinate(x[3 * (size_t)i + 1], m), cells);
    const int cz = lm_cell(lm_coordinate(x[3 * (size_t)i + 2], m), cells);
    const int key = (cx * cells + cy) * cells + cz;
    keys[i] = (unsigned long long)key;
    vals[i] = (unsigned int)i;
    atomicAdd(counts + key, 1);
}

extern "C" __global__ void lm_permute(const unsigned int *__restrict__ order,
                                      const double *__restrict__ x,
                                      const double *__restrict__ alpha, int np, int m,
                                      double *__restrict__ pos, double *__restrict__ al)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= np) return;
    const size_t q = order[i];
#pragma unroll
    for (int d = 0; d < 3; d++) {
        pos[3 * (size_t)i + d] = lm_coordinate(x[3 * q + d], m);
        al[3 * (size_t)i + d] = alpha[3 * q + d];
    }
}

// φ₁ at node `node` for a particle at mesh coordinate p (periodic distance).
__device__ __forceinline__ double lm_weight(int node, double p, int m, double half_w, double beta,
                                            double inv_i0b)
{
    double d = (double)node - p;
    d -= (double)m * floor((d + 0.5 * m) / (double)m);
    const double t = d / half_w;
    const double s = 1.0 - t * t;
    return s > 0.0 ? cyl_bessel_i0(beta * sqrt(s)) * inv_i0b : 0.0;
}

// pos, al: 3·np doubles in cell order; start: cells³ + 1 cell starts; mesh as above.
// Grid: (M/LM_TILE)³ blocks of LM_THREADS; span ≤ cells (the host checks), so no cell is
// visited twice.
extern "C" __global__ void __launch_bounds__(LM_THREADS)
    lm_spread(const double *__restrict__ pos, const double *__restrict__ al,
              const int *__restrict__ start, int cells, int m, int w, double beta,
              double inv_i0b, int lo, int span, double *__restrict__ mesh)
{
    __shared__ double wt[LM_CHUNK][3 * LM_TILE];
    __shared__ double as[LM_CHUNK][3];
    const int tiles = m / LM_TILE;
    const int b = blockIdx.x;
    const int bx = b / (tiles * tiles), by = (b / tiles) % tiles, bz = b % tiles;
    const int t = threadIdx.x;
    const int lx = t / LM_TILE, ly = t % LM_TILE;
    const int ox0 = LM_TILE * bx, oy0 = LM_TILE * by, oz0 = LM_TILE * bz;
    const int per = LM_TILE / LM_CELL;
    const double half_w = 0.5 * w;
    double acc[LM_TILE][3];
#pragma unroll
    for (int j = 0; j < LM_TILE; j++) {
        acc[j][0] = 0.0;
        acc[j][1] = 0.0;
        acc[j][2] = 0.0;
    }
    // The z-run of `span` cells from z0 is one range of cells, or two when it wraps: run r = 0
    // from z0 (zlen0 cells), r = 1 from 0 (the rest, possibly none).
    const int z0 = ((per * bz + lo) % cells + cells) % cells;
    const int zlen0 = min(span, cells - z0);
    // (ox, oy, r) in lexicographic order: a fixed order of cells, hence of sums.
    for (int run = 0; run < 2 * span * span; ++run) {
        const int ox = run / (2 * span), oy = (run / 2) % span, r = run % 2;
        const int zlo = r == 0 ? z0 : 0, zlen = r == 0 ? zlen0 : span - zlen0;
        if (zlen <= 0) continue;
        const int cx = ((per * bx + lo + ox) % cells + cells) % cells;
        const int cy = ((per * by + lo + oy) % cells + cells) % cells;
        const int first = (cx * cells + cy) * cells + zlo;
        const int s0 = start[first], s1 = start[first + zlen];
        for (int s = s0; s < s1; s += LM_CHUNK) {
            const int len = min(LM_CHUNK, s1 - s);
            for (int item = t; item < len * 3 * LM_TILE; item += LM_THREADS) {
                const int q = item / (3 * LM_TILE), e = item % (3 * LM_TILE);
                const int d = e / LM_TILE, l = e % LM_TILE;
                const int node = (d == 0 ? ox0 : (d == 1 ? oy0 : oz0)) + l;
                wt[q][e] = lm_weight(node, pos[3 * (size_t)(s + q) + d], m, half_w, beta, inv_i0b);
            }
            for (int item = t; item < len * 3; item += LM_THREADS)
                as[item / 3][item % 3] = al[3 * (size_t)s + item];
            __syncthreads();
            for (int q = 0; q < len; ++q) {
                const double wxy = wt[q][lx] * wt[q][LM_TILE + ly];
                if (wxy != 0.0) {
                    const double a0 = as[q][0] * wxy, a1 = as[q][1] * wxy,
                                 a2 = as[q][2] * wxy;
#pragma unroll
                    for (int j = 0; j < LM_TILE; j++) {
                        const double wz = wt[q][2 * LM_TILE + j];
                        acc[j][0] += a0 * wz;
                        acc[j][1] += a1 * wz;
                        acc[j][2] += a2 * wz;
                    }
                }
            }
            __syncthreads();
        }
    }
    const size_t mp = 2 * (size_t)(m / 2 + 1);
    const size_t comp = (size_t)m * m * mp;
    const size_t base = ((size_t)(ox0 + lx) * m + (oy0 + ly)) * mp + oz0;
#pragma unroll
    for (int j = 0; j < LM_TILE; j++) {
        mesh[base + j] = acc[j][0];
        mesh[comp + base + j] = acc[j][1];
        mesh[2 * comp + base + j] = acc[j][2];
    }
}

// Fine DFT indices of coarse index d (one, or ±N/2 at the Nyquist index of even N), as signed
// wavenumbers (reinit.rs `band_indices`).
__device__ __forceinline__ int lm_band_axis(int d, int n, int q[2])
{
    if (n % 2 == 0 && 2 * d == n) {
        q[0] = d;
        q[1] = -d;
        return 2;
    }
    q[0] = d <= n / 2 ? d : d - n;
    return 1;
}

// fine: 3·M·M·(M/2+1) double2 (component stride M·M·(M/2+1)); spec: 3·N·N·(N/2+1) double2;
// fac: N doubles or null. Fine modes with a negative z wavenumber are not stored: the value at
// (q_x, q_y, q_z < 0) is conj of (−q_x, −q_y, −q_z). Any grid (threads stride over the modes).
extern "C" __global__ void lm_band(const double2 *__restrict__ fine, int m,
                                   double2 *__restrict__ spec, int n,
                                   const double *__restrict__ fac)
{
    const int nh = n / 2 + 1, mh = m / 2 + 1;
    const long long len = (long long)n * n * nh, flen = (long long)m * m * mh;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < len;
         t += (long long)gridDim.x * blockDim.x) {
        const int iz = (int)(t % nh);
        const long long ixy = t / nh;
        const int iy = (int)(ixy % n), ix = (int)(ixy / n);
        int qx[2], qy[2], qz[2];
        const int cx = lm_band_axis(ix, n, qx), cy = lm_band_axis(iy, n, qy),
                  cz = lm_band_axis(iz, n, qz);
        const double f = fac ? (fac[ix] * fac[iy]) * fac[iz] : 1.0;
        for (int d = 0; d < 3; d++) {
            double2 sum = make_double2(0.0, 0.0);
            for (int a = 0; a < cx; a++) {
                for (int b = 0; b < cy; b++) {
                    for (int c = 0; c < cz; c++) {
                        const int sgn = qz[c] < 0 ? -1 : 1;
                        const int fx = ((sgn * qx[a]) % m + m) % m;
                        const int fy = ((sgn * qy[b]) % m + m) % m;
                        const double2 v =
                            fine[d * flen + ((long long)fx * m + fy) * mh + sgn * qz[c]];
                        sum.x += v.x;
                        sum.y += sgn * v.y;
                    }
                }
            }
            spec[d * len + t] = make_double2(sum.x * f, sum.y * f);
        }
    }
}
