// The kick–drift–kick leapfrog of the GPU-resident N-body stepper (src/gravity/resident.rs),
// f64 throughout (docs/physics.md §10): v ← v + a Δt/2; x ← x + v Δt; v ← v + a Δt/2, the forces
// between the two kicks by the engine's device forms (all pairs or the FMM, f32 sums).
//
// Layouts: positions, velocities and accelerations are f64 arrays of 3 per body (x, y, z
// interleaved); potentials 1 per body. One thread per body. Every product and sum is rounded
// on its own (__dmul_rn, __dadd_rn: no fused multiply-add), as the host leapfrog
// (src/gravity/host.rs) computes them, so with the same forces the two agree bit for bit.
//
// The finite check: a kernel sets *flag to 1 when a body's new position, velocity or potential
// is not finite (a plain store of the same value from any thread: order-independent, so the
// result is the same run to run); the host reads the flag once per step and keeps the pre-step
// state when it is set. The drift writes the old position where the new one is not finite, so
// the force evaluation of a failing step still sees finite positions (the FMM builds its tree
// from them); that step is discarded anyway.

// Whether the three values of body i at p are finite.
__device__ __forceinline__ bool nb_finite3(const double *__restrict__ p, long long i)
{
    return isfinite(p[3 * i]) && isfinite(p[3 * i + 1]) && isfinite(p[3 * i + 2]);
}

// The first kick and the drift into the trial arrays: v1 = v + a·h, x1 = x + v1·dt (x1 = x where
// x1 is not finite); *flag = 1 when a v1 or x1 of the body is not finite.
extern "C" __global__ void nb_kick_drift(long long n, const double *__restrict__ x,
                                         const double *__restrict__ v,
                                         const double *__restrict__ a, double h, double dt,
                                         double *__restrict__ x_out, double *__restrict__ v_out,
                                         unsigned int *__restrict__ flag)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bool ok = true;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const long long j = 3 * i + k;
        const double w = __dadd_rn(v[j], __dmul_rn(a[j], h));
        const double y = __dadd_rn(x[j], __dmul_rn(w, dt));
        ok = ok && isfinite(w) && isfinite(y);
        v_out[j] = w;
        x_out[j] = isfinite(y) ? y : x[j];
    }
    if (!ok) *flag = 1u;
}

// The second kick in place, v ← v + a·h, with the check of the new velocity and of the
// potential at the new positions (*flag = 1 when one of the body's is not finite).
extern "C" __global__ void nb_kick(long long n, double *__restrict__ v,
                                   const double *__restrict__ a,
                                   const double *__restrict__ phi, double h,
                                   unsigned int *__restrict__ flag)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const long long j = 3 * i + k;
        v[j] = __dadd_rn(v[j], __dmul_rn(a[j], h));
    }
    if (!(nb_finite3(v, i) && isfinite(phi[i]))) *flag = 1u;
}

// The check of a fresh evaluation (new bodies): *flag = 1 when a body's acceleration or
// potential is not finite.
extern "C" __global__ void nb_check_forces(long long n, const double *__restrict__ a,
                                           const double *__restrict__ phi,
                                           unsigned int *__restrict__ flag)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (!(nb_finite3(a, i) && isfinite(phi[i]))) *flag = 1u;
}
