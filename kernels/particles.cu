// The particle update of the GPU-resident vortex stepper (src/vortex/resident.rs), f64 throughout
// (the pair sums are the evaluators' business, in f32): the time integrators of docs/physics.md §3
// (AB2 with variable step, Heun's start), core spreading, the periodic wrap, the lattice after a
// reinitialisation, the finite check and the max-norm reductions of the stability limits (§3.4).
//
// Layouts: positions, strengths, velocities and stretchings are f64 arrays of 3 per particle
// (x, y, z); core radii 1 per particle. Every kernel is elementwise, an order-independent
// reduction (a maximum, a flag) or a fixed-order one (vp_summary's per-block sums), so the
// results are bit-identical run to run.

typedef unsigned long long u64;

// out = y + dt·f (Euler; Heun's predictor).
extern "C" __global__ void vp_euler(long long m, const double *__restrict__ y,
                                    const double *__restrict__ f, double dt,
                                    double *__restrict__ out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    out[i] = y[i] + dt * f[i];
}

// out = y + ½dt·(f + f2) (Heun's corrector: the trapezoidal average).
extern "C" __global__ void vp_heun(long long m, const double *__restrict__ y,
                                   const double *__restrict__ f, const double *__restrict__ f2,
                                   double dt, double *__restrict__ out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    out[i] = y[i] + 0.5 * dt * (f[i] + f2[i]);
}

// out = y + dt·(a·f + b·f_old), a = 1 + r/2, b = −r/2, r = Δt_n/Δt_{n−1} (AB2, variable step).
extern "C" __global__ void vp_ab2(long long m, const double *__restrict__ y,
                                  const double *__restrict__ f, const double *__restrict__ f_old,
                                  double dt, double a, double b, double *__restrict__ out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    out[i] = y[i] + dt * (a * f[i] + b * f_old[i]);
}

// Core spreading σ ← sqrt(σ² + 2νΔt), with the product and sum fused (the host mirror of σ_max
// uses f64::mul_add, so both round alike).
extern "C" __global__ void vp_spread(long long n, const double *__restrict__ sigma, double spread,
                                     double *__restrict__ out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double s = sigma[i];
    out[i] = sqrt(fma(s, s, spread));
}

// Periodic wrap into [−L/2, L/2): x ← ((x + L/2) rem_euclid L) − L/2, as ParticleSet::wrap_periodic.
extern "C" __global__ void vp_wrap(long long m, double length, double *__restrict__ x)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const double half = 0.5 * length;
    double r = fmod(x[i] + half, length);
    if (r < 0.0) r += length;
    x[i] = r - half;
}

// The n³ lattice nodes x_(i,j,k) = −π + (i, j, k)·h, node (i·n + j)·n + k (lattice_nodes order),
// and, when `sigma` is not null, σ0 at every node (the particle set after a reinitialisation).
extern "C" __global__ void vp_lattice(int n, double h, double sigma0, double *__restrict__ x,
                                      double *__restrict__ sigma)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n3 = (long long)n * n * n;
    if (p >= n3) return;
    const int k = (int)(p % n);
    const int j = (int)((p / n) % n);
    const int i = (int)(p / ((long long)n * n));
    const double pi = 3.141592653589793;
    // Rounded product, then rounded sum (no fused multiply-add), as the host computes them.
    x[3 * p] = __dadd_rn(-pi, __dmul_rn((double)i, h));
    x[3 * p + 1] = __dadd_rn(-pi, __dmul_rn((double)j, h));
    x[3 * p + 2] = __dadd_rn(-pi, __dmul_rn((double)k, h));
    if (sigma) sigma[p] = sigma0;
}

// flag ← 1 when any of the m values is NaN or infinite (a benign race: every writer writes 1).
extern "C" __global__ void vp_nonfinite(long long m, const double *__restrict__ v,
                                        int *__restrict__ flag)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    if (!isfinite(v[i])) *flag = 1;
}

#define VP_MAX_THREADS 256

// out ← max(out, max_p |v_p|) over n 3-vectors, as the bits of a non-negative double (their
// order is the order of the values, so an integer atomicMax is exact and order-independent; a
// NaN's bits exceed every finite value's and +∞'s, so a NaN propagates). Blocks of 256 threads.
extern "C" __global__ void vp_max_norm(long long n, const double *__restrict__ v,
                                       u64 *__restrict__ out)
{
    __shared__ u64 best[VP_MAX_THREADS];
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    u64 mine = 0;
    if (i < n) {
        const double a = v[3 * i], b = v[3 * i + 1], c = v[3 * i + 2];
        const double norm = sqrt(a * a + b * b + c * c);
        mine = (u64)__double_as_longlong(norm);
    }
    best[threadIdx.x] = mine;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && best[threadIdx.x + s] > best[threadIdx.x])
            best[threadIdx.x] = best[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicMax(out, best[0]);
}

// Per-block partial sums of Σα (3) and of the impulse ½Σ x × α (3) over n particles, written
// as 6 doubles per block (the host adds the blocks in order: a fixed-order reduction). The tree
// inside a block is fixed too. Blocks of 256 threads.
extern "C" __global__ void vp_summary(long long n, const double *__restrict__ x,
                                      const double *__restrict__ alpha,
                                      double *__restrict__ partials)
{
    __shared__ double acc[6][VP_MAX_THREADS];
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double v[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    if (i < n) {
        const double *p = x + 3 * i, *a = alpha + 3 * i;
        v[0] = a[0];
        v[1] = a[1];
        v[2] = a[2];
        v[3] = 0.5 * (p[1] * a[2] - p[2] * a[1]);
        v[4] = 0.5 * (p[2] * a[0] - p[0] * a[2]);
        v[5] = 0.5 * (p[0] * a[1] - p[1] * a[0]);
    }
    for (int c = 0; c < 6; ++c) acc[c][threadIdx.x] = v[c];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            for (int c = 0; c < 6; ++c) acc[c][threadIdx.x] += acc[c][threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int c = 0; c < 6; ++c) partials[6 * (long long)blockIdx.x + c] = acc[c][0];
}
