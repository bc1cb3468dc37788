// The FMM's octree and interaction lists built on the GPU (src/summation/fmm/gpu_tree.rs), level
// synchronous, equal to the host's (src/summation/fmm/tree.rs `Octree::build`,
// traversal.rs `build_lists`) field for field and in the same order. Compiled with
// --fmad=false: every centre, half side, radius, distance and gap is rounded as the host rounds
// it (no fused multiply-add), so the comparisons of the opening criterion decide alike.
//
// Tree (one per set of points; the bounding cube and the 63-bit Morton keys as the host's):
//   tree_keys      the key of every point (corner and scale from the host's bounding_cube) and
//                  its index; then the shared radix sort (sort.cu) orders (key, index) pairs, ties
//                  by index as the host's sort of pairs;
//   tree_gather    positions (3) and cores (1) into tree order;
//   tree_root      cell 0;
//   tree_count     per cell of a level: its number of children (the distinct octant digits of its
//                  sorted keys, found by binary search as the host's partition_point) when it is
//                  split, else 0; the scan of the counts gives the next level's cell numbers;
//   tree_emit      writes the children (breadth first, contiguous, digit order) and the parent's
//                  child_begin and child_count;
//   tree_leaf_flags / (scan) / tree_leaf_write    the leaves in cell order;
//   tree_leaf_props  radius and largest core of each leaf from its particles;
//   tree_upward    radius and largest core of the cells of a level from their children.
// Lists (a target tree against a source tree; the same tree for targets = sources):
//   tree_lists_count / (scan) / tree_lists_write    per target level, one thread per cell
//                  resolves its parent's near sources (the root: the source root) depth first in
//                  the host's order, with the host's criterion; far sources make the M2L rows of
//                  the level's cells (rows in cell order, levels concatenated), near ones the rows
//                  the next level reads;
//   tree_p2p_count / (scan) / tree_p2p_write         the leaves' near rows compacted into the
//                  P2P rows in leaf order, and the number of particle pairs they sum.
// Images (the periodic box, traversal.rs build_image_lists): with a table of image shifts the
// target root's candidates are the source root once per shift, in table order; a candidate's
// subtree is seen through its shift (the distance uses c_t − c_s − shift, rounded as the host's),
// and every far and near entry carries the shift's index (u16) in arrays parallel to the rows.
// Without a table (null) every shift is zero and no shift arrays are read or written.
//   tree_wrap      positions wrapped into the box [−π, π) (cells.rs wrap, bit for bit).
// Cells: centre (3 doubles), half, radius, sigma_max, begin, end, child_begin, child_count (u8),
// parent, one array each.

#include "box.cuh"

#define TREE_MAX_LEVEL 21
// A source subtree's depth-first stack: a pop pushes at most 8 children, one per level.
#define TREE_STACK (1 + 7 * (TREE_MAX_LEVEL + 1))
// √3 as the host's 3f64.sqrt().
#define TREE_SQRT3 1.7320508075688772

typedef unsigned long long u64;

__device__ __forceinline__ u64 tree_spread(unsigned v)
{
    u64 x = (u64)v & 0x1fffffULL;
    x = (x | (x << 32)) & 0x1f00000000ffffULL;
    x = (x | (x << 16)) & 0x1f0000ff0000ffULL;
    x = (x | (x << 8)) & 0x100f00f00f00f00fULL;
    x = (x | (x << 4)) & 0x10c30c30c30c30c3ULL;
    x = (x | (x << 2)) & 0x1249249249249249ULL;
    return x;
}

// Rust's `(t as u32).min(max)`: NaN and negatives to 0, saturating above.
__device__ __forceinline__ unsigned tree_grid_index(double t)
{
    const unsigned top = (1u << TREE_MAX_LEVEL) - 1u;
    if (!(t > 0.0)) return 0u;
    if (t >= (double)top) return top;
    return (unsigned)t;
}

// Key and index of every point: q_k = ⌊(x_k − corner_k)·scale⌋ clamped, interleaved.
extern "C" __global__ void tree_keys(const double *__restrict__ x, int n, double c0, double c1,
                                     double c2, double scale, u64 *__restrict__ keys,
                                     unsigned *__restrict__ index)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned q0 = tree_grid_index((x[3 * (size_t)i] - c0) * scale);
    const unsigned q1 = tree_grid_index((x[3 * (size_t)i + 1] - c1) * scale);
    const unsigned q2 = tree_grid_index((x[3 * (size_t)i + 2] - c2) * scale);
    keys[i] = tree_spread(q0) | (tree_spread(q1) << 1) | (tree_spread(q2) << 2);
    index[i] = (unsigned)i;
}

// dst[width·i + c] = src[width·order[i] + c].
extern "C" __global__ void tree_gather(const unsigned *__restrict__ order, int n, int width,
                                       const double *__restrict__ src, double *__restrict__ dst)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t j = order[i];
    for (int c = 0; c < width; c++) dst[(size_t)width * i + c] = src[(size_t)width * j + c];
}

// Cell 0: the cube (centre, half) holding particles 0..n, its own parent.
extern "C" __global__ void tree_root(double c0, double c1, double c2, double half, int n,
                                     double *center, double *halfs, unsigned *begin,
                                     unsigned *end, unsigned *child_begin,
                                     unsigned char *child_count, unsigned *parent)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    center[0] = c0;
    center[1] = c1;
    center[2] = c2;
    halfs[0] = half;
    begin[0] = 0;
    end[0] = (unsigned)n;
    child_begin[0] = 0;
    child_count[0] = 0;
    parent[0] = 0;
}

// The octant digit of a key at a level.
__device__ __forceinline__ unsigned tree_digit(u64 key, int shift)
{
    return (unsigned)(key >> shift) & 7u;
}

// First index in [lo, hi) whose digit exceeds `digit` (keys sorted: the host's partition_point).
__device__ __forceinline__ unsigned tree_digit_end(const u64 *keys, unsigned lo, unsigned hi,
                                                  int shift, unsigned digit)
{
    while (lo < hi) {
        const unsigned mid = lo + (hi - lo) / 2;
        if (tree_digit(keys[mid], shift) <= digit)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// A count pass over n items with a closing zero (so that the scan's entry n is the total): true
// for the threads with nothing more to do, the one at n writing the zero.
__device__ __forceinline__ bool tree_past_end(int i, int n, unsigned *cnt)
{
    if (i == n) cnt[n] = 0;
    return i >= n;
}

// Whether a cell of `level` is split (the host's rule).
__device__ __forceinline__ bool tree_splits(unsigned len, int level, unsigned leaf_size,
                                            double half, double min_side)
{
    return len > leaf_size && level < TREE_MAX_LEVEL && 2.0 * half >= 2.0 * min_side;
}

// nchild[i] = the children of cell first + i (0 when not split), nchild[count] = 0.
extern "C" __global__ void tree_count(int first, int count, int level, unsigned leaf_size,
                                      double min_side, const u64 *__restrict__ keys,
                                      const double *__restrict__ halfs,
                                      const unsigned *__restrict__ begin,
                                      const unsigned *__restrict__ end,
                                      unsigned *__restrict__ nchild)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (tree_past_end(i, count, nchild)) return;
    const int c = first + i;
    const unsigned b = begin[c], e = end[c];
    unsigned k = 0;
    if (tree_splits(e - b, level, leaf_size, halfs[c], min_side)) {
        const int shift = 3 * (TREE_MAX_LEVEL - 1 - level);
        for (unsigned start = b; start < e; k++)
            start = tree_digit_end(keys, start, e, shift, tree_digit(keys[start], shift));
    }
    nchild[i] = k;
}

// The children of the split cells of a level (offs: the scanned counts): cells
// first + count + offs[i] … in digit order, and the parents' child_begin, child_count.
extern "C" __global__ void tree_emit(int first, int count, int level, const u64 *__restrict__ keys,
                                     const unsigned *__restrict__ offs, double *center,
                                     double *halfs, unsigned *begin, unsigned *end,
                                     unsigned *child_begin, unsigned char *child_count,
                                     unsigned *parent)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const int c = first + i;
    const unsigned k = offs[i + 1] - offs[i];
    if (k == 0) {
        child_begin[c] = 0;
        child_count[c] = 0;
        return;
    }
    const unsigned cb = (unsigned)(first + count) + offs[i];
    child_begin[c] = cb;
    child_count[c] = (unsigned char)k;
    const int shift = 3 * (TREE_MAX_LEVEL - 1 - level);
    const unsigned e = end[c];
    const double h = 0.5 * halfs[c];
    const double cc[3] = {center[3 * (size_t)c], center[3 * (size_t)c + 1],
                          center[3 * (size_t)c + 2]};
    unsigned ch = cb;
    for (unsigned start = begin[c]; start < e; ch++) {
        const unsigned digit = tree_digit(keys[start], shift);
        const unsigned stop = tree_digit_end(keys, start, e, shift, digit);
        for (int a = 0; a < 3; a++)
            center[3 * (size_t)ch + a] = cc[a] + (((digit >> a) & 1u) ? h : -h);
        halfs[ch] = h;
        begin[ch] = start;
        end[ch] = stop;
        child_begin[ch] = 0;
        child_count[ch] = 0;
        parent[ch] = (unsigned)c;
        start = stop;
    }
}

// flags[c] = 1 for a leaf, flags[n_cells] = 0.
extern "C" __global__ void tree_leaf_flags(int n_cells,
                                           const unsigned char *__restrict__ child_count,
                                           unsigned *__restrict__ flags)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c > n_cells) return;
    flags[c] = c < n_cells && child_count[c] == 0 ? 1u : 0u;
}

// leaves[offs[c]] = c for every leaf c (offs: the scanned flags).
extern "C" __global__ void tree_leaf_write(int n_cells,
                                           const unsigned char *__restrict__ child_count,
                                           const unsigned *__restrict__ offs,
                                           unsigned *__restrict__ leaves)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells || child_count[c] != 0) return;
    leaves[offs[c]] = (unsigned)c;
}

// Radius (largest distance from the centre to a particle) and largest core of each leaf: the
// sorted positions xs, the sorted cores sig (null: every core is `uniform`).
extern "C" __global__ void tree_leaf_props(int n_leaves, const unsigned *__restrict__ leaves,
                                           const double *__restrict__ center,
                                           const unsigned *__restrict__ begin,
                                           const unsigned *__restrict__ end,
                                           const double *__restrict__ xs,
                                           const double *__restrict__ sig, double uniform,
                                           double *__restrict__ radius,
                                           double *__restrict__ sigma)
{
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= n_leaves) return;
    const size_t c = leaves[l];
    const double c0 = center[3 * c], c1 = center[3 * c + 1], c2 = center[3 * c + 2];
    double r2 = 0.0, s = 0.0;
    for (size_t i = begin[c]; i < end[c]; i++) {
        const double d0 = xs[3 * i] - c0, d1 = xs[3 * i + 1] - c1, d2 = xs[3 * i + 2] - c2;
        r2 = fmax(r2, d0 * d0 + d1 * d1 + d2 * d2);
        s = fmax(s, sig ? sig[i] : uniform);
    }
    radius[c] = sqrt(r2);
    sigma[c] = s;
}

// Radius and largest core of the split cells of a level from their children's.
extern "C" __global__ void tree_upward(int first, int count, const double *__restrict__ center,
                                       const double *__restrict__ halfs,
                                       const unsigned *__restrict__ child_begin,
                                       const unsigned char *__restrict__ child_count,
                                       double *radius, double *sigma)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const size_t c = first + i;
    if (child_count[c] == 0) return;
    double r = 0.0, s = 0.0;
    for (size_t k = child_begin[c]; k < child_begin[c] + child_count[c]; k++) {
        const double d0 = center[3 * k] - center[3 * c], d1 = center[3 * k + 1] - center[3 * c + 1],
                     d2 = center[3 * k + 2] - center[3 * c + 2];
        const double d = sqrt(d0 * d0 + d1 * d1 + d2 * d2);
        r = fmax(r, d + radius[k]);
        s = fmax(s, sigma[k]);
    }
    radius[c] = fmin(r, halfs[c] * TREE_SQRT3);
    sigma[c] = s;
}

// x[i] wrapped into [−π, π) for i < n3 (box_wrap: src/summation/cells.rs wrap, bit for bit).
extern "C" __global__ void tree_wrap(const double *__restrict__ x, int n3, double *__restrict__ out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n3) return;
    out[i] = box_wrap(x[i]);
}

// ---- interaction lists ----------------------------------------------------------------------------

// One tree as the lists read it.
struct TreeView {
    const double *center, *radius, *sigma;
    const unsigned *child_begin;
    const unsigned char *child_count;
};

// Resolves the candidates of target cell a (traversal.rs `resolve`): counts its far and near
// sources and, with WRITE, stores them at far_out and near_out (and, with a shift table, their
// shift indices at far_sh and near_sh). Each candidate's source subtree is walked depth first
// with the host's stack discipline, seen through the candidate's shift, candidates in order,
// which is the host's order (everything pushed while a candidate is resolved lies above the
// later ones). Candidate j: cell cand[j] with shift cand_sh[j] (cand null: the source root with
// shift j; cand_sh null: shift 0).
template <bool WRITE>
__device__ void tree_resolve(const TreeView &t, const TreeView &s, const double *shift_table,
                             unsigned a, const unsigned *cand, const unsigned short *cand_sh,
                             unsigned n_cand, double theta, double rho_cut, unsigned &n_far,
                             unsigned &n_near, unsigned *far_out, unsigned short *far_sh,
                             unsigned *near_out, unsigned short *near_sh)
{
    const double a0 = t.center[3 * (size_t)a], a1 = t.center[3 * (size_t)a + 1],
                 a2 = t.center[3 * (size_t)a + 2];
    const double ra = t.radius[a];
    const bool a_leaf = t.child_count[a] == 0;
    unsigned stack[TREE_STACK];
    n_far = 0;
    n_near = 0;
    for (unsigned j = 0; j < n_cand; j++) {
        const unsigned sj = cand ? (cand_sh ? (unsigned)cand_sh[j] : 0u) : j;
        double h0 = 0.0, h1 = 0.0, h2 = 0.0;
        if (shift_table) {
            h0 = shift_table[3 * (size_t)sj];
            h1 = shift_table[3 * (size_t)sj + 1];
            h2 = shift_table[3 * (size_t)sj + 2];
        }
        int sp = 0;
        stack[sp++] = cand ? cand[j] : 0u;
        while (sp > 0) {
            const unsigned b = stack[--sp];
            // (c_t − c_s) − shift, as the host's; x − 0.0 is x, so free space is unchanged.
            const double d0 = a0 - s.center[3 * (size_t)b] - h0,
                         d1 = a1 - s.center[3 * (size_t)b + 1] - h1,
                         d2 = a2 - s.center[3 * (size_t)b + 2] - h2;
            const double d = sqrt(d0 * d0 + d1 * d1 + d2 * d2);
            const double rb = s.radius[b];
            const double gap = d - ra - rb;
            if (ra + rb <= theta * d && gap >= rho_cut * s.sigma[b]) {
                if (WRITE) {
                    far_out[n_far] = b;
                    if (far_sh) far_sh[n_far] = (unsigned short)sj;
                }
                n_far++;
                continue;
            }
            const unsigned cc = s.child_count[b];
            if (cc != 0 && (a_leaf || rb > ra)) {
                const unsigned cb = s.child_begin[b];
                for (unsigned k = cc; k > 0; k--) stack[sp++] = cb + k - 1;
            } else {
                if (WRITE) {
                    near_out[n_near] = b;
                    if (near_sh) near_sh[n_near] = (unsigned short)sj;
                }
                n_near++;
            }
        }
    }
}

// The candidates of target cell a: its parent's near row with its shifts (level 0: the source
// root once per shift, cand null, n_shifts of them).
__device__ __forceinline__ void tree_candidates(int level, unsigned a, unsigned n_shifts,
                                                const unsigned *__restrict__ t_parent,
                                                const unsigned *__restrict__ near_off,
                                                const unsigned *__restrict__ near_src,
                                                const unsigned short *__restrict__ near_sh,
                                                const unsigned *&cand,
                                                const unsigned short *&cand_sh, unsigned &n_cand)
{
    if (level == 0) {
        cand = nullptr;
        cand_sh = nullptr;
        n_cand = n_shifts;
        return;
    }
    const unsigned p = t_parent[a];
    cand = near_src + near_off[p];
    cand_sh = near_sh ? near_sh + near_off[p] : nullptr;
    n_cand = near_off[p + 1] - near_off[p];
}

#define TREE_LIST_ARGS                                                                             \
    int level, int first, int count, const double *t_center, const double *t_radius,             \
        const unsigned *t_child_begin, const unsigned char *t_child_count,                       \
        const unsigned *t_parent, const double *s_center, const double *s_radius,                \
        const double *s_sigma, const unsigned *s_child_begin,                                    \
        const unsigned char *s_child_count, double theta, double rho_cut,                        \
        const unsigned *near_off, const unsigned *near_src, const double *shift_table,           \
        unsigned n_shifts, const unsigned short *near_sh
#define TREE_LIST_VIEWS                                                                            \
    const TreeView t = {t_center, t_radius, nullptr, t_child_begin, t_child_count};              \
    const TreeView s = {s_center, s_radius, s_sigma, s_child_begin, s_child_count};              \
    const unsigned *cand;                                                                         \
    const unsigned short *cand_sh;                                                                \
    unsigned n_cand;                                                                              \
    tree_candidates(level, (unsigned)(first + i), n_shifts, t_parent, near_off, near_src,        \
                    near_sh, cand, cand_sh, n_cand)

// Counts of the level's cells: cnt[i] far sources, cnt[count + i] near ones, cnt[2·count] = 0
// (one exclusive scan of the 2·count + 1 values then gives both rows' offsets).
extern "C" __global__ void tree_lists_count(TREE_LIST_ARGS, unsigned *__restrict__ cnt)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) cnt[2 * count] = 0;
    if (i >= count) return;
    TREE_LIST_VIEWS;
    unsigned nf, nn;
    tree_resolve<false>(t, s, shift_table, first + i, cand, cand_sh, n_cand, theta, rho_cut, nf,
                        nn, nullptr, nullptr, nullptr, nullptr);
    cnt[i] = nf;
    cnt[count + i] = nn;
}

// The level's rows: far sources at m2l_src[far_base + scanned cnt[i]] (M2L row of cell first + i),
// near ones at near_out[near_base + scanned cnt[count + i] − total_far]; the last cell also writes
// the offsets that close the level's rows. With a shift table the entries' shifts go to m2l_sh
// and near_sh_out at the same positions (both null without one).
extern "C" __global__ void tree_lists_write(TREE_LIST_ARGS, const unsigned *__restrict__ cnt,
                                            unsigned total_far, unsigned far_base,
                                            unsigned near_base, unsigned *m2l_off,
                                            unsigned *__restrict__ m2l_src,
                                            unsigned *near_off_out,
                                            unsigned *__restrict__ near_out,
                                            unsigned short *__restrict__ m2l_sh,
                                            unsigned short *near_sh_out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    TREE_LIST_VIEWS;
    const unsigned fo = far_base + cnt[i], no = near_base + cnt[count + i] - total_far;
    unsigned nf, nn;
    tree_resolve<true>(t, s, shift_table, first + i, cand, cand_sh, n_cand, theta, rho_cut, nf,
                       nn, m2l_src + fo, m2l_sh ? m2l_sh + fo : nullptr, near_out + no,
                       near_sh_out ? near_sh_out + no : nullptr);
    m2l_off[first + i] = fo;
    near_off_out[first + i] = no;
    if (i == count - 1) {
        m2l_off[first + count] = fo + nf;
        near_off_out[first + count] = no + nn;
    }
}

// cnt[i] = the length of leaf i's near row, cnt[n_leaves] = 0.
extern "C" __global__ void tree_p2p_count(int n_leaves, const unsigned *__restrict__ leaves,
                                          const unsigned *__restrict__ near_off,
                                          unsigned *__restrict__ cnt)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (tree_past_end(i, n_leaves, cnt)) return;
    const unsigned l = leaves[i];
    cnt[i] = near_off[l + 1] - near_off[l];
}

// P2P row i = leaf i's near row at the scanned offs[i] (with its shifts near_sh into p2p_sh when
// both are given); pairs += its targets × its sources.
extern "C" __global__ void tree_p2p_write(int n_leaves, unsigned total,
                                          const unsigned *__restrict__ leaves,
                                          const unsigned *__restrict__ near_off,
                                          const unsigned *__restrict__ near_src,
                                          const unsigned *__restrict__ offs,
                                          const unsigned *__restrict__ t_begin,
                                          const unsigned *__restrict__ t_end,
                                          const unsigned *__restrict__ s_begin,
                                          const unsigned *__restrict__ s_end,
                                          unsigned *__restrict__ p2p_off,
                                          unsigned *__restrict__ p2p_src, u64 *pairs,
                                          const unsigned short *__restrict__ near_sh,
                                          unsigned short *__restrict__ p2p_sh)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > n_leaves) return;
    if (i == n_leaves) {
        p2p_off[i] = total;
        return;
    }
    const unsigned l = leaves[i], o = offs[i];
    p2p_off[i] = o;
    u64 ns = 0;
    for (unsigned j = near_off[l]; j < near_off[l + 1]; j++) {
        const unsigned b = near_src[j];
        p2p_src[o + (j - near_off[l])] = b;
        if (p2p_sh) p2p_sh[o + (j - near_off[l])] = near_sh[j];
        ns += s_end[b] - s_begin[b];
    }
    if (ns) atomicAdd(pairs, ns * (u64)(t_end[l] - t_begin[l]));
}
