// Sorting primitives shared by the GPU engines (src/device/sort.rs, DeviceSort): an exclusive scan
// of 32-bit counts, a stable LSD radix sort of (u64 key, u32 value) pairs and the bounding box of
// a set of points. Used by the Ewald engine (its counting sorts) and the FMM's tree
// (fmm_tree.cu). Everything is deterministic: integer sums, a stable sort, min/max reductions.
//
//   sort_scan_blocks / sort_scan_sums / sort_scan_add
//       exclusive scan in place of v[0..n) (ints or unsigned): each block of SORT_SCAN_THREADS
//       threads scans SORT_SCAN_THREADS·SORT_SCAN_ITEMS items and writes its total, one block
//       scans the totals, then every item gets its block's offset;
//   sort_radix_hist / (scan) / sort_radix_scatter
//       one pass of the radix sort on the 8-bit digit at `shift`: per block of RADIX_TILE items a
//       256-bin histogram, stored digit-major (count[d·nb + b]) so that the exclusive scan gives
//       every (digit, block) its first output slot; the scatter walks its tile in rounds of
//       RADIX_THREADS items in index order, ranks each item among the equal digits of its warp
//       (__match_any_sync and the population count of the lower lanes' mask), adds the counts of
//       the lower warps of the round (shared memory) and the running offset of the digit, so
//       equal digits keep their input order (stable);
//   sort_bounds_blocks / sort_bounds_final
//       min and max of x, y, z over n points (3 doubles each; or of n values): per block, then one block over the
//       block results (fmin/fmax: exact, so any order gives the same box).

#include "scan.cuh"

#define SORT_SCAN_THREADS 256
#define SORT_SCAN_ITEMS 8
#define RADIX_THREADS 256
#define RADIX_WARPS (RADIX_THREADS / 32)
#define RADIX_ROUNDS 8
#define RADIX_TILE (RADIX_THREADS * RADIX_ROUNDS)
#define BOUNDS_THREADS 256
#define SORT_INF __longlong_as_double(0x7ff0000000000000LL)

// ---- scan -----------------------------------------------------------------------------------------

// Exclusive scan in place of each block's 2048 items of v[0..n); block totals to sums.
extern "C" __global__ void __launch_bounds__(SORT_SCAN_THREADS)
    sort_scan_blocks(int *__restrict__ v, long long n, int *__restrict__ sums)
{
    __shared__ int s_warp[32];
    const long long base = (long long)blockIdx.x * (SORT_SCAN_THREADS * SORT_SCAN_ITEMS) +
                           (long long)threadIdx.x * SORT_SCAN_ITEMS;
    int a[SORT_SCAN_ITEMS];
    int t = 0;
#pragma unroll
    for (int k = 0; k < SORT_SCAN_ITEMS; k++) {
        a[k] = base + k < n ? v[base + k] : 0;
        t += a[k];
    }
    int total;
    int run = block_exclusive_scan(t, s_warp, total);
#pragma unroll
    for (int k = 0; k < SORT_SCAN_ITEMS; k++) {
        if (base + k < n) v[base + k] = run;
        run += a[k];
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// Exclusive scan in place of the nb block sums (one block).
extern "C" __global__ void __launch_bounds__(SORT_SCAN_THREADS)
    sort_scan_sums(int *__restrict__ sums, int nb)
{
    __shared__ int s_warp[32];
    int carry = 0;
    for (int base = 0; base < nb; base += SORT_SCAN_THREADS) {
        const int i = base + threadIdx.x;
        const int v = i < nb ? sums[i] : 0;
        int total;
        const int ex = block_exclusive_scan(v, s_warp, total);
        if (i < nb) sums[i] = carry + ex;
        carry += total;
    }
}

// Adds each block's offset to its items.
extern "C" __global__ void sort_scan_add(int *__restrict__ v, long long n,
                                         const int *__restrict__ sums)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] += sums[i / (SORT_SCAN_THREADS * SORT_SCAN_ITEMS)];
}

// ---- radix sort -----------------------------------------------------------------------------------

// Histogram of the digits (key >> shift) & 255 of block b's tile: count[d·nb + b].
extern "C" __global__ void __launch_bounds__(RADIX_THREADS)
    sort_radix_hist(const unsigned long long *__restrict__ keys, int n, int shift,
                    unsigned *__restrict__ count)
{
    __shared__ unsigned s_hist[256];
    const int nb = gridDim.x;
    s_hist[threadIdx.x] = 0;
    __syncthreads();
    const long long base = (long long)blockIdx.x * RADIX_TILE;
    for (int r = 0; r < RADIX_ROUNDS; r++) {
        const long long i = base + r * RADIX_THREADS + threadIdx.x;
        if (i < n) atomicAdd(&s_hist[(unsigned)(keys[i] >> shift) & 255u], 1u);
    }
    __syncthreads();
    count[(size_t)threadIdx.x * nb + blockIdx.x] = s_hist[threadIdx.x];
}

// Stable scatter of block b's tile by digit: offset = the scanned count[d·nb + b].
extern "C" __global__ void __launch_bounds__(RADIX_THREADS)
    sort_radix_scatter(const unsigned long long *__restrict__ keys,
                       const unsigned *__restrict__ vals, int n, int shift,
                       const unsigned *__restrict__ offset, unsigned long long *__restrict__ keys_out,
                       unsigned *__restrict__ vals_out)
{
    __shared__ unsigned s_off[256];
    __shared__ unsigned s_cnt[RADIX_WARPS][256];
    const int nb = gridDim.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    s_off[tid] = offset[(size_t)tid * nb + blockIdx.x];
    const unsigned lower = (1u << lane) - 1u;
    const long long base = (long long)blockIdx.x * RADIX_TILE;
    for (int r = 0; r < RADIX_ROUNDS; r++) {
#pragma unroll
        for (int w = 0; w < RADIX_WARPS; w++) s_cnt[w][tid] = 0;
        __syncthreads();
        const long long i = base + r * RADIX_THREADS + tid;
        const bool valid = i < n;
        unsigned long long key = 0;
        unsigned val = 0;
        if (valid) {
            key = keys[i];
            val = vals[i];
        }
        const unsigned d = (unsigned)(key >> shift) & 255u;
        // Items past n form their own group (256) and are never written.
        const unsigned peers = __match_any_sync(0xffffffffu, valid ? d : 256u);
        const unsigned rank = __popc(peers & lower);
        if (valid && rank == 0) s_cnt[warp][d] = __popc(peers);
        __syncthreads();
        if (valid) {
            unsigned pos = s_off[d] + rank;
            for (int w = 0; w < warp; w++) pos += s_cnt[w][d];
            keys_out[pos] = key;
            vals_out[pos] = val;
        }
        __syncthreads();
        unsigned add = 0;
#pragma unroll
        for (int w = 0; w < RADIX_WARPS; w++) add += s_cnt[w][tid];
        s_off[tid] += add;
        __syncthreads();
    }
}

// ---- bounding box ---------------------------------------------------------------------------------

// The block's min and max of the per-thread (lo, hi): out = (3 minima, 3 maxima).
__device__ __forceinline__ void bounds_reduce(const double *lo, const double *hi, double *out)
{
    __shared__ double s_lo[3][BOUNDS_THREADS], s_hi[3][BOUNDS_THREADS];
#pragma unroll
    for (int k = 0; k < 3; k++) {
        s_lo[k][threadIdx.x] = lo[k];
        s_hi[k][threadIdx.x] = hi[k];
    }
    __syncthreads();
    for (int h = BOUNDS_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
#pragma unroll
            for (int k = 0; k < 3; k++) {
                s_lo[k][threadIdx.x] = fmin(s_lo[k][threadIdx.x], s_lo[k][threadIdx.x + h]);
                s_hi[k][threadIdx.x] = fmax(s_hi[k][threadIdx.x], s_hi[k][threadIdx.x + h]);
            }
        }
        __syncthreads();
    }
    if (threadIdx.x < 3) {
        out[threadIdx.x] = s_lo[threadIdx.x][0];
        out[3 + threadIdx.x] = s_hi[threadIdx.x][0];
    }
}

// Per block: min and max of the n points x (`width` doubles each, 1 to 3; components past
// width stay ±inf), 6 doubles per block to part.
extern "C" __global__ void __launch_bounds__(BOUNDS_THREADS)
    sort_bounds_blocks(const double *__restrict__ x, long long n, int width,
                       double *__restrict__ part)
{
    double lo[3] = {SORT_INF, SORT_INF, SORT_INF}, hi[3] = {-SORT_INF, -SORT_INF, -SORT_INF};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        for (int k = 0; k < width; k++) {
            lo[k] = fmin(lo[k], x[width * i + k]);
            hi[k] = fmax(hi[k], x[width * i + k]);
        }
    }
    bounds_reduce(lo, hi, part + 6 * blockIdx.x);
}

// One block: min and max over the nb block results; out = (min x, min y, min z, max x, max y,
// max z).
extern "C" __global__ void __launch_bounds__(BOUNDS_THREADS)
    sort_bounds_final(const double *__restrict__ part, int nb, double *__restrict__ out)
{
    double lo[3] = {SORT_INF, SORT_INF, SORT_INF}, hi[3] = {-SORT_INF, -SORT_INF, -SORT_INF};
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
#pragma unroll
        for (int k = 0; k < 3; k++) {
            lo[k] = fmin(lo[k], part[6 * b + k]);
            hi[k] = fmax(hi[k], part[6 * b + 3 + k]);
        }
    }
    bounds_reduce(lo, hi, out);
}
