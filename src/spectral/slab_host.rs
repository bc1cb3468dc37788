//! The host mirror of the spectral solver across ranks (docs/physics.md §5.6): [`HostSlabSolver`]
//! runs the slab decomposition of [`super::slab`] with P ranks as threads over 1-D rustfft
//! transforms, step by step as the GPU ranks do it (src/spectral/gpu_slab.rs), so that CI
//! checks the algorithm, the layout and the reductions against the one-rank
//! [`SpectralSolver`](super::SpectralSolver) without a GPU.
//!
//! One right-hand side N(v̂) on P ranks, rank r (each rank a thread of one
//! [`std::thread::scope`], the ranks meeting only in the collectives of [`ThreadComm`]):
//! 1. pencil gather: v̂ and ω̂ = i k × v̂ (6 fields) into the pencil buffer
//!    `[k_x DFT index (M)][iy][kz_local]`, zero where |k_x| > K;
//! 2. inverse complex x transforms of every (iy, kz_local) line;
//! 3. all-to-all: the chunk x ∈ x_range(q) of each field goes to slab rank q, at
//!    [`SlabLayout::exchange_chunk_offset`]`(r)` of that field there;
//! 4. [`SlabLayout::unpack`] into the half spectra of the local planes, inverse (y, z) real
//!    transforms per plane (y columns k_z ≤ K, then the z rows as complex-to-real);
//! 5. u × ω at the local nodes and the local max(|u| + |v| + |w|), max-reduced over the ranks;
//! 6. forward (y, z) transforms of the 3 products, [`SlabLayout::pack`], the all-to-all back,
//!    forward x transforms;
//! 7. store: the 1/M³ scale, the Leray projection and the Runge–Kutta stage update of the local
//!    retained modes (spectral.cu `sp_store`); after the last stage rank 0 makes the k_z = 0
//!    plane Hermitian (it holds all of it), and the non-finite flag is max-reduced so that no
//!    rank commits a bad step.
//!
//! Diagnostics: each rank's partial sums over its modes, gathered and added **in rank order**
//! (the same bits on every rank, whatever the timing or the thread count); max |∇·u|, max |ω|
//! and the velocity on the grid run steps 1–4 on the N grid (a second [`SlabLayout`] with
//! m = N, which N must then divide).
//!
//! Inside a rank the work is serial, so the results do not depend on rayon's thread count.

use super::gpu_slab::SlabSums;
use super::layout::ModeLayout;
use super::slab::{SlabError, SlabLayout};
use super::solver::{
    cross_and_speed, leray, make_real_solenoidal, NonFiniteState, SpectralGrid, VectorModes,
};
use super::stepper::{SpectralError, SpectralStepper};
use crate::device::Device;
use crate::diagnostics::flow::{shell_count, shell_of, vorticity_mode, FlowStats};
use num_complex::Complex64;
use rustfft::{Fft, FftPlanner};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

const ZERO: Complex64 = Complex64 { re: 0.0, im: 0.0 };

/// The communicator of the host ranks of one collective call: a barrier that fails (panics)
/// instead of hanging once a rank has died, and a mailbox per rank for the collectives.
pub struct ThreadComm {
    ranks: usize,
    barrier: Mutex<BarrierState>,
    wake: Condvar,
    mail: Vec<Mutex<Vec<Complex64>>>,
    small: Vec<Mutex<Vec<f64>>>,
}

#[derive(Default)]
struct BarrierState {
    waiting: usize,
    generation: u64,
    aborted: bool,
}

/// Where a piece of an all-to-all comes from in the sender's buffer and goes to in the
/// receiver's, and its length.
#[derive(Debug, Clone, Copy)]
struct Piece {
    src: usize,
    dst: usize,
    len: usize,
}

/// Locks a mutex whether or not a dead rank poisoned it (the data are plain buffers).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ThreadComm {
    fn new(ranks: usize) -> Self {
        ThreadComm {
            ranks,
            barrier: Mutex::new(BarrierState::default()),
            wake: Condvar::new(),
            mail: (0..ranks).map(|_| Mutex::new(Vec::new())).collect(),
            small: (0..ranks).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Waits until every rank has arrived. Panics when a rank died (see [`ThreadComm::abort`]).
    fn barrier(&self) {
        let mut s = lock(&self.barrier);
        if s.aborted {
            std::panic::panic_any(RankAborted);
        }
        s.waiting += 1;
        if s.waiting == self.ranks {
            s.waiting = 0;
            s.generation += 1;
            self.wake.notify_all();
            return;
        }
        let generation = s.generation;
        while s.generation == generation && !s.aborted {
            s = self.wake.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.aborted {
            std::panic::panic_any(RankAborted);
        }
    }

    /// Wakes every waiting rank with a failure (a rank is dying).
    fn abort(&self) {
        lock(&self.barrier).aborted = true;
        self.wake.notify_all();
    }

    /// All-to-all: rank `me` posts `send`; once every rank has, it copies from each sender s,
    /// in rank order, the pieces `pieces(s, me)` into `recv`. Returns `send`.
    fn all_to_all(
        &self,
        me: usize,
        send: Vec<Complex64>,
        recv: &mut [Complex64],
        pieces: impl Fn(usize, usize) -> Vec<Piece>,
    ) -> Vec<Complex64> {
        *lock(&self.mail[me]) = send;
        self.barrier();
        for s in 0..self.ranks {
            let buf = lock(&self.mail[s]);
            for p in pieces(s, me) {
                recv[p.dst..p.dst + p.len].copy_from_slice(&buf[p.src..p.src + p.len]);
            }
        }
        self.barrier();
        std::mem::take(&mut *lock(&self.mail[me]))
    }

    /// All-gather: every rank's `part`, in rank order, on every rank.
    pub fn all_gather(&self, me: usize, part: Vec<f64>) -> Vec<Vec<f64>> {
        *lock(&self.small[me]) = part;
        self.barrier();
        let all = self.small.iter().map(|m| lock(m).clone()).collect();
        self.barrier();
        all
    }

    /// The maximum over the ranks of a non-negative value (order-free).
    pub fn all_max(&self, me: usize, x: f64) -> f64 {
        self.all_gather(me, vec![x])
            .iter()
            .fold(0.0, |a, v| if v[0] > a { v[0] } else { a })
    }

    /// Σ over the ranks of each component of `part`, added in rank order (the same bits on
    /// every rank).
    pub fn all_sum_in_rank_order(&self, me: usize, part: Vec<f64>) -> Vec<f64> {
        let parts = self.all_gather(me, part);
        let mut total = vec![0.0; parts[0].len()];
        for p in &parts {
            for (t, x) in total.iter_mut().zip(p) {
                *t += x;
            }
        }
        total
    }
}

/// The panic of a rank that found the communicator aborted by another rank's failure.
#[derive(Debug)]
struct RankAborted;

/// Aborts the communicator when its rank's thread unwinds, so the other ranks fail too.
struct AbortOnPanic<'a>(&'a ThreadComm);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// Runs `f(comm, r, &mut states[r])` on one thread per rank (a fresh [`ThreadComm`] between
/// them) and returns the results in rank order. A panic of any rank fails every rank, and the
/// failing rank's own panic (not the others' aborts) is passed on.
pub fn run_ranks<S: Send, R: Send>(
    states: &mut [S],
    f: impl Fn(&ThreadComm, usize, &mut S) -> R + Sync,
) -> Vec<R> {
    let comm = ThreadComm::new(states.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .iter_mut()
            .enumerate()
            .map(|(r, st)| {
                let (comm, f) = (&comm, &f);
                scope.spawn(move || {
                    let _guard = AbortOnPanic(comm);
                    f(comm, r, st)
                })
            })
            .collect();
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        if joined.iter().any(|j| j.is_err()) {
            let cause = joined
                .into_iter()
                .filter_map(Result::err)
                .reduce(|a, b| if a.is::<RankAborted>() { b } else { a })
                .expect("a rank failed");
            std::panic::resume_unwind(cause);
        }
        joined.into_iter().flatten().collect()
    })
}

/// The direction of an all-to-all transpose between the two sides of [`SlabLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Pencil → slab (step 3): pencil rank r's chunk for slab rank q, at
    /// `pencil_chunk_offset(r, q)` of each field, lands at `exchange_chunk_offset(r)` of that
    /// field of q's exchange buffer.
    ToSlabs,
    /// Slab → pencil (step 6): the reverse.
    ToPencils,
}

/// The all-to-all transpose of `fields` fields on rank `me`: `send` is its pencil buffer
/// (`fields·pencil_len(me)`) or exchange buffer (`fields·exchange_len()`) by `dir`, `recv`
/// the other; only the chunks of `recv` are written. Returns `send`.
fn transpose_on_rank(
    s: &SlabLayout,
    comm: &ThreadComm,
    me: usize,
    (fields, dir): (usize, Direction),
    send: Vec<Complex64>,
    recv: &mut [Complex64],
) -> Vec<Complex64> {
    comm.all_to_all(me, send, recv, |from, to| {
        // The pencil rank r and the slab rank q of the pair.
        let (r, q) = match dir {
            Direction::ToSlabs => (from, to),
            Direction::ToPencils => (to, from),
        };
        (0..fields)
            .map(|f| {
                let pencil = f * s.pencil_len(r) + s.pencil_chunk_offset(r, q);
                let slab = f * s.exchange_len() + s.exchange_chunk_offset(r);
                let (src, dst) = match dir {
                    Direction::ToSlabs => (pencil, slab),
                    Direction::ToPencils => (slab, pencil),
                };
                Piece {
                    src,
                    dst,
                    len: s.chunk_len(r),
                }
            })
            .collect()
    })
}

/// One transpose alone, on host ranks: `send[r]` is rank r's buffer of `fields` fields on the
/// side `dir` leaves (pencil buffers `fields·pencil_len(r)` or exchange buffers
/// `fields·exchange_len()`), `recv[r]` its buffer on the other side, of which the chunks are
/// written and nothing else. The reference for the chunk placement of the GPU transpose.
pub fn transpose(
    s: &SlabLayout,
    (fields, dir): (usize, Direction),
    send: &[Vec<Complex64>],
    recv: &mut [Vec<Complex64>],
) {
    run_ranks(recv, |comm, r, buf| {
        transpose_on_rank(s, comm, r, (fields, dir), send[r].clone(), buf);
    });
}

/// One grid split over the ranks (the product grid, or the N grid of the diagnostics): its
/// layout and the 1-D transforms of length M.
struct SlabGrid {
    s: SlabLayout,
    fwd: Arc<dyn Fft<f64>>,
    inv: Arc<dyn Fft<f64>>,
}

/// Transforms, in place, the lines of `data` that start at `starts` with element j at
/// start + j·stride (length of the plan).
fn lines(
    fft: &dyn Fft<f64>,
    data: &mut [Complex64],
    stride: usize,
    starts: impl Iterator<Item = usize>,
) {
    let n = fft.len();
    let mut line = vec![ZERO; n];
    let mut scratch = vec![ZERO; fft.get_inplace_scratch_len()];
    for b in starts {
        for (j, v) in line.iter_mut().enumerate() {
            *v = data[b + j * stride];
        }
        fft.process_with_scratch(&mut line, &mut scratch);
        for (j, v) in line.iter().enumerate() {
            data[b + j * stride] = *v;
        }
    }
}

impl SlabGrid {
    fn new(s: SlabLayout) -> Self {
        let mut planner = FftPlanner::new();
        SlabGrid {
            s,
            fwd: planner.plan_fft_forward(s.m),
            inv: planner.plan_fft_inverse(s.m),
        }
    }

    /// Step 1 on rank `r`: the pencil buffer of F fields, `input(local index, k)` at every
    /// local retained mode and zero at the other k_x.
    fn pencil_gather<const F: usize>(
        &self,
        r: usize,
        input: impl Fn(usize, [i64; 3]) -> [Complex64; F],
    ) -> Vec<Complex64> {
        let s = &self.s;
        let (g, pl, kz0) = (s.modes(), s.pencil_len(r), s.kz_range(r).start);
        let mut p = vec![ZERO; F * pl];
        for iy in 0..s.side() {
            let ky = g.wavenumber(iy);
            for ix in 0..s.side() {
                let kx = g.wavenumber(ix);
                let x = kx.rem_euclid(s.m as i64) as usize;
                for kzl in 0..s.nz_local(r) {
                    let v = input(s.local_index(r, ix, iy, kzl), [kx, ky, (kz0 + kzl) as i64]);
                    for (f, v) in v.into_iter().enumerate() {
                        p[f * pl + s.pencil_index(r, x, iy, kzl)] = v;
                    }
                }
            }
        }
        p
    }

    /// The x transforms (steps 2 and 6) of every (iy, kz_local) line of every field of rank
    /// `r`'s pencil buffer: line l = iy·nz_local + kz_local has element x at x·side·nz_local + l.
    fn x_lines(&self, r: usize, fft: &dyn Fft<f64>, pencil: &mut [Complex64]) {
        let stride = self.s.side() * self.s.nz_local(r);
        for field in pencil.chunks_exact_mut(self.s.pencil_len(r)) {
            lines(fft, field, stride, 0..stride);
        }
    }

    /// Step 4's transforms: the real fields `[f][x_local][y][z]` of the half spectra `half`
    /// (`[f][x_local][y][k_z]`, overwritten): y columns k_z ≤ K, then each z row as a
    /// complex-to-real transform (the half row extended by û(−k_z) = conj û(k_z)).
    fn yz_inverse(&self, half: &mut [Complex64]) -> Vec<f64> {
        let (m, mh) = (self.s.m, self.s.m / 2 + 1);
        let inv = &*self.inv;
        let mut real = vec![0.0; half.len() / mh * m];
        let mut row = vec![ZERO; m];
        let mut scratch = vec![ZERO; inv.get_inplace_scratch_len()];
        for (plane, out) in half
            .chunks_exact_mut(m * mh)
            .zip(real.chunks_exact_mut(m * m))
        {
            lines(inv, plane, mh, 0..(self.s.kmax + 1).min(mh));
            for (h, out) in plane.chunks_exact(mh).zip(out.chunks_exact_mut(m)) {
                for (z, v) in row.iter_mut().enumerate() {
                    *v = if z < mh { h[z] } else { h[m - z].conj() };
                }
                inv.process_with_scratch(&mut row, &mut scratch);
                for (o, v) in out.iter_mut().zip(&row) {
                    *o = v.re;
                }
            }
        }
        real
    }

    /// Step 6's (y, z) transforms: the half spectra `[f][x_local][y][k_z]` (unnormalised DFT;
    /// the y transforms only on the columns k_z ≤ K that [`SlabLayout::pack`] reads) of the real
    /// fields `real` (`[f][x_local][y][z]`).
    fn yz_forward(&self, real: &[f64]) -> Vec<Complex64> {
        let (m, mh) = (self.s.m, self.s.m / 2 + 1);
        let fwd = &*self.fwd;
        let mut half = vec![ZERO; real.len() / m * mh];
        let mut row = vec![ZERO; m];
        let mut scratch = vec![ZERO; fwd.get_inplace_scratch_len()];
        for (plane, inp) in half.chunks_exact_mut(m * mh).zip(real.chunks_exact(m * m)) {
            for (h, inp) in plane.chunks_exact_mut(mh).zip(inp.chunks_exact(m)) {
                for (v, &x) in row.iter_mut().zip(inp) {
                    *v = Complex64::new(x, 0.0);
                }
                fwd.process_with_scratch(&mut row, &mut scratch);
                h.copy_from_slice(&row[..mh]);
            }
            lines(fwd, plane, mh, 0..(self.s.kmax + 1).min(mh));
        }
        half
    }

    /// Steps 1–4 on rank `r`: the F real fields of `input` at the nodes of the rank's x planes,
    /// `[f][x_local][y][z]`.
    fn to_physical<const F: usize>(
        &self,
        comm: &ThreadComm,
        r: usize,
        input: impl Fn(usize, [i64; 3]) -> [Complex64; F],
    ) -> Vec<f64> {
        let s = &self.s;
        let mut pencil = self.pencil_gather(r, input);
        self.x_lines(r, &*self.inv, &mut pencil);
        let mut exchange = vec![ZERO; F * s.exchange_len()];
        transpose_on_rank(s, comm, r, (F, Direction::ToSlabs), pencil, &mut exchange);
        let mut half = vec![ZERO; F * s.planes() * s.half_plane()];
        s.unpack(F, &exchange, &mut half);
        self.yz_inverse(&mut half)
    }

    /// Step 6 on rank `r`: the pencil buffer (unnormalised DFT along every axis) of the
    /// `fields` real fields `real` of the rank's planes.
    fn to_spectral(
        &self,
        comm: &ThreadComm,
        r: usize,
        fields: usize,
        real: &[f64],
    ) -> Vec<Complex64> {
        let s = &self.s;
        let half = self.yz_forward(real);
        let mut exchange = vec![ZERO; fields * s.exchange_len()];
        s.pack(fields, &half, &mut exchange);
        let mut pencil = vec![ZERO; fields * s.pencil_len(r)];
        transpose_on_rank(
            s,
            comm,
            r,
            (fields, Direction::ToPencils),
            exchange,
            &mut pencil,
        );
        self.x_lines(r, &*self.fwd, &mut pencil);
        pencil
    }
}

/// The modes one rank holds, in its local compact layout: the state, the first stage
/// k1 = N(û), the two stage inputs and the accumulator of a step.
struct RankModes {
    uhat: VectorModes,
    k1: VectorModes,
    acc: VectorModes,
    sa: VectorModes,
    sb: VectorModes,
}

/// Which local modes a right-hand side reads.
#[derive(Clone, Copy)]
enum Input {
    State,
    StageA,
    StageB,
}

/// Calls `f(local index, k)` for every local retained mode of rank `r`, in local order.
fn for_each_local_mode(s: &SlabLayout, r: usize, mut f: impl FnMut(usize, [i64; 3])) {
    let (g, kz0) = (s.modes(), s.kz_range(r).start);
    for iy in 0..s.side() {
        for ix in 0..s.side() {
            for kzl in 0..s.nz_local(r) {
                let k = [g.wavenumber(ix), g.wavenumber(iy), (kz0 + kzl) as i64];
                f(s.local_index(r, ix, iy, kzl), k);
            }
        }
    }
}

/// |k|² with the solver's arithmetic.
fn norm2(k: [i64; 3]) -> f64 {
    let k = k.map(|x| x as f64);
    k[0] * k[0] + k[1] * k[1] + k[2] * k[2]
}

/// exp(−ν|k|²Δt/2) with the solver's order of operations.
fn ehalf(nu: f64, k2: f64, dt: f64) -> f64 {
    (-nu * k2 * 0.5 * dt).exp()
}

/// The first stage of a step on one rank (spectral.cu `sp_rk_begin`): acc = E(û + Δt/6 k1),
/// sa = E_h(û + Δt/2 k1).
fn rk_begin(s: &SlabLayout, r: usize, st: &mut RankModes, nu: f64, dt: f64) {
    for_each_local_mode(s, r, |i, k| {
        let h = ehalf(nu, norm2(k), dt);
        for c in 0..3 {
            let (u, q) = (st.uhat[c][i], st.k1[c][i]);
            st.acc[c][i] = (u + q * (dt / 6.0)) * (h * h);
            st.sa[c][i] = (u + q * (0.5 * dt)) * h;
        }
    });
}

/// Step 7 on rank `r`: the retained modes of the forward-transformed products `pencil`
/// (3 fields), scaled by 1/M³ and projected, into the stage `stage` (spectral.cu `sp_store`:
/// 1: k1 = k; 2: acc += Δt/3 E_h k, sb = E_h û + Δt/2 k; 3: acc += Δt/3 E_h k,
/// sa = E û + Δt E_h k; 4: acc += Δt/6 k).
fn store(
    s: &SlabLayout,
    r: usize,
    pencil: &[Complex64],
    stage: u8,
    (nu, dt): (f64, f64),
    st: &mut RankModes,
) {
    let (pl, g) = (s.pencil_len(r), s.modes());
    let scale = 1.0 / (s.m as f64).powi(3);
    for iy in 0..s.side() {
        for ix in 0..s.side() {
            let x = g.wavenumber(ix).rem_euclid(s.m as i64) as usize;
            for kzl in 0..s.nz_local(r) {
                let i = s.local_index(r, ix, iy, kzl);
                let k = [
                    g.wavenumber(ix),
                    g.wavenumber(iy),
                    (s.kz_range(r).start + kzl) as i64,
                ];
                let n = std::array::from_fn(|c| pencil[c * pl + s.pencil_index(r, x, iy, kzl)]);
                let q = leray(k, n.map(|v: Complex64| v * scale));
                let h = ehalf(nu, norm2(k), dt);
                for (c, q) in q.into_iter().enumerate() {
                    match stage {
                        1 => st.k1[c][i] = q,
                        2 => {
                            st.acc[c][i] += q * (dt / 3.0 * h);
                            st.sb[c][i] = st.uhat[c][i] * h + q * (0.5 * dt);
                        }
                        3 => {
                            st.acc[c][i] += q * (dt / 3.0 * h);
                            st.sa[c][i] = st.uhat[c][i] * (h * h) + q * (dt * h);
                        }
                        _ => st.acc[c][i] += q * (dt / 6.0),
                    }
                }
            }
        }
    }
}

/// Makes the k_z = 0 plane of rank 0's local modes Hermitian, pair by pair as
/// [`ModeLayout::enforce_hermitian`] does on the global layout (rank 0 holds the whole plane).
fn enforce_hermitian_rank0(s: &SlabLayout, data: &mut [Complex64]) {
    let g = s.modes();
    let at = |ix: usize, iy: usize| s.local_index(0, ix, iy, 0);
    for iy in 0..s.side() {
        for ix in 0..s.side() {
            let (kx, ky) = (g.wavenumber(ix), g.wavenumber(iy));
            if (ky, kx) > (0, 0) {
                let partner = |k: i64| g.index_of(-k).expect("retained");
                let (a, b) = (at(ix, iy), at(partner(kx), partner(ky)));
                let avg = 0.5 * (data[a] + data[b].conj());
                data[a] = avg;
                data[b] = avg.conj();
            }
        }
    }
    data[0].im = 0.0;
}

/// One right-hand side N(input) on rank `r` (steps 1–7, module docs) stored as stage `stage`;
/// returns max(|v_x| + |v_y| + |v_z|) over the product grid (all ranks).
fn rhs(
    grid: &SlabGrid,
    comm: &ThreadComm,
    r: usize,
    st: &mut RankModes,
    (input, stage): (Input, u8),
    nu_dt: (f64, f64),
) -> f64 {
    let v = match input {
        Input::State => &st.uhat,
        Input::StageA => &st.sa,
        Input::StageB => &st.sb,
    };
    let mut real = grid.to_physical(comm, r, |i, k| {
        let kf = k.map(|x| x as f64);
        let w: [Complex64; 3] = std::array::from_fn(|c| vorticity_mode(v, c, i, kf));
        [v[0][i], v[1][i], v[2][i], w[0], w[1], w[2]]
    });
    // Step 5: u × ω in place of u (spectral.cu `sp_cross`).
    let n = real.len() / 6;
    let (u, w) = real.split_at_mut(3 * n);
    let mut speed = 0.0f64;
    for p in 0..n {
        let node = [u[p], u[n + p], u[2 * n + p], w[p], w[n + p], w[2 * n + p]];
        let ([cx, cy, cz], s) = cross_and_speed(&node);
        (u[p], u[n + p], u[2 * n + p]) = (cx, cy, cz);
        speed = speed.max(s);
    }
    let speed = comm.all_max(r, speed);
    let pencil = grid.to_spectral(comm, r, 3, &real[..3 * n]);
    store(&grid.s, r, &pencil, stage, nu_dt, st);
    speed
}

/// The spectral solver of [`super::solver`] across P host ranks (module docs): the same
/// results as [`SpectralSolver`](super::SpectralSolver) to round-off, through the slab
/// decomposition the GPU ranks use.
pub struct HostSlabSolver {
    grid: SpectralGrid,
    nu: f64,
    /// The product grid M (3N/2 or N).
    product: SlabGrid,
    /// The N grid of the diagnostics when it is not the product grid.
    solution: Option<SlabGrid>,
    ranks: Vec<RankModes>,
    k1_valid: bool,
    speed_sum_max: Option<f64>,
    /// The state gathered on the host (velocity_modes), until the state changes.
    host: Option<VectorModes>,
}

impl HostSlabSolver {
    /// A solver with zero velocity on `ranks` host ranks. `Err` when the product grid or the N
    /// grid cannot be split over the ranks.
    pub fn new(grid: SpectralGrid, nu: f64, ranks: usize) -> Result<Self, SlabError> {
        let kmax = grid.kmax();
        let product = SlabLayout::new(grid.product_grid(), kmax, ranks)?;
        let solution = SlabLayout::solution(grid, ranks)?;
        let zero =
            |r: usize| -> VectorModes { std::array::from_fn(|_| vec![ZERO; product.local_len(r)]) };
        Ok(HostSlabSolver {
            grid,
            nu,
            product: SlabGrid::new(product),
            solution: (solution != product).then(|| SlabGrid::new(solution)),
            ranks: (0..ranks)
                .map(|r| RankModes {
                    uhat: zero(r),
                    k1: zero(r),
                    acc: zero(r),
                    sa: zero(r),
                    sb: zero(r),
                })
                .collect(),
            k1_valid: false,
            speed_sum_max: None,
            host: None,
        })
    }

    pub fn grid(&self) -> SpectralGrid {
        self.grid
    }

    pub fn nu(&self) -> f64 {
        self.nu
    }

    /// The split of the product grid.
    pub fn slabs(&self) -> SlabLayout {
        self.product.s
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    fn state_changed(&mut self) {
        self.k1_valid = false;
        self.speed_sum_max = None;
        self.host = None;
    }

    /// Hands each rank its k_z range of the global field `uhat`, exactly.
    pub fn scatter_modes(&mut self, uhat: &VectorModes) {
        let s = self.product.s;
        assert!(uhat.iter().all(|c| c.len() == s.modes().len()));
        for (r, st) in self.ranks.iter_mut().enumerate() {
            st.uhat = s.local_modes(r, uhat);
        }
        self.state_changed();
    }

    /// The global state from the ranks' modes, in rank order.
    pub fn gather_modes(&self) -> VectorModes {
        let parts: Vec<VectorModes> = self.ranks.iter().map(|st| st.uhat.clone()).collect();
        self.product.s.global_modes(&parts)
    }

    /// N(û) at the current state into every rank's k1, and the speed maximum (once per state).
    fn ensure_k1(&mut self) {
        if self.k1_valid {
            return;
        }
        let (grid, nu) = (&self.product, self.nu);
        let speeds = run_ranks(&mut self.ranks, |comm, r, st| {
            rhs(grid, comm, r, st, (Input::State, 1), (nu, 0.0))
        });
        self.speed_sum_max = Some(speeds[0]);
        self.k1_valid = true;
    }

    /// max(|u| + |v| + |w|) over the product grid at the current state.
    pub fn speed_sum_max(&mut self) -> f64 {
        self.ensure_k1();
        self.speed_sum_max.expect("set with k1")
    }

    /// One Lawson RK4 step on every rank; when any rank's result is not finite no rank commits
    /// it (the flag is max-reduced).
    pub fn step(&mut self, dt: f64) -> Result<(), NonFiniteState> {
        self.ensure_k1();
        let (grid, nu) = (&self.product, self.nu);
        let committed = run_ranks(&mut self.ranks, |comm, r, st| {
            let s = &grid.s;
            rk_begin(s, r, st, nu, dt);
            for (input, stage) in [(Input::StageA, 2), (Input::StageB, 3), (Input::StageA, 4)] {
                rhs(grid, comm, r, st, (input, stage), (nu, dt));
            }
            if r == 0 {
                for c in st.acc.iter_mut() {
                    enforce_hermitian_rank0(s, c);
                }
            }
            let finite = st.acc.iter().flatten().all(|z| z.is_finite());
            let bad = comm.all_max(r, if finite { 0.0 } else { 1.0 });
            if bad == 0.0 {
                std::mem::swap(&mut st.uhat, &mut st.acc);
            }
            bad == 0.0
        });
        if !committed[0] {
            return Err(NonFiniteState);
        }
        self.state_changed();
        Ok(())
    }

    /// The mode sums of the current state (Σ w e, Σ w e |k|², Σ_{k≠0} w e/|k|, dK/dt) and the
    /// shell spectrum, as the one-GPU solver's `sp_mode_sums` forms them: each rank's partials
    /// over its modes, added in rank order (identical on every rank).
    pub fn sums(&mut self) -> SlabSums {
        self.ensure_k1();
        let (s, nu) = (self.product.s, self.nu);
        let nshell = shell_count(&s.modes());
        let totals = run_ranks(&mut self.ranks, |comm, r, st| {
            let mut part = vec![0.0; 4 + nshell];
            let u = &st.uhat;
            for_each_local_mode(&s, r, |i, k| {
                let k2 = norm2(k);
                let w = ModeLayout::weight(k[2] as usize);
                let e = 0.5 * (u[0][i].norm_sqr() + u[1][i].norm_sqr() + u[2][i].norm_sqr());
                let dk: f64 = (0..3)
                    .map(|c| (u[c][i].conj() * (st.k1[c][i] - u[c][i] * (nu * k2))).re)
                    .sum();
                part[0] += w * e;
                part[1] += w * e * k2;
                if k2 > 0.0 {
                    part[2] += w * e / k2.sqrt();
                }
                part[3] += w * dk;
                part[4 + shell_of(k2)] += w * e;
            });
            comm.all_sum_in_rank_order(r, part)
        });
        debug_assert!(totals.iter().all(|t| t == &totals[0]));
        let mut spectrum = totals.into_iter().next().expect("at least one rank");
        let sums = std::array::from_fn(|i| spectrum[i]);
        spectrum.drain(..4);
        SlabSums { sums, spectrum }
    }

    /// K, Z, ε, u', L, T, λ, Re_λ of the current state.
    pub fn flow_stats(&mut self) -> FlowStats {
        let [energy, enstrophy, inv_k, _] = self.sums().sums;
        FlowStats::from_mode_sums(energy, enstrophy, inv_k, self.nu)
    }

    /// The N grid (the product grid when they coincide).
    fn solution(&self) -> &SlabGrid {
        self.solution.as_ref().unwrap_or(&self.product)
    }

    /// The F real fields of `input` (of the state û) on the N grid, each rank's planes.
    fn on_solution_grid<const F: usize, R: Send>(
        &mut self,
        input: impl Fn(&VectorModes, usize, [f64; 3]) -> [Complex64; F] + Sync,
        reduce: impl Fn(&ThreadComm, usize, Vec<f64>) -> R + Sync,
    ) -> R {
        let grid = self.solution.as_ref().unwrap_or(&self.product);
        let out = run_ranks(&mut self.ranks, |comm, r, st| {
            let u = &st.uhat;
            let real = grid.to_physical(comm, r, |i, k| input(u, i, k.map(|x| x as f64)));
            reduce(comm, r, real)
        });
        out.into_iter().next().expect("at least one rank")
    }

    /// max |∇·u| over the N³ nodes (max-reduced over the ranks).
    pub fn max_divergence(&mut self) -> f64 {
        self.on_solution_grid(
            |u, i, k| {
                let d = u[0][i] * k[0] + u[1][i] * k[1] + u[2][i] * k[2];
                [Complex64::new(-d.im, d.re)]
            },
            |comm, r, real| comm.all_max(r, real.iter().fold(0.0, |a, x| a.max(x.abs()))),
        )
    }

    /// max |ω| over the N³ nodes (max-reduced over the ranks).
    pub fn max_vorticity(&mut self) -> f64 {
        self.on_solution_grid::<3, _>(
            |u, i, k| std::array::from_fn(|c| vorticity_mode(u, c, i, k)),
            |comm, r, real| {
                let n = real.len() / 3;
                let m2 = (0..n).fold(0.0f64, |a, p| {
                    let (x, y, z) = (real[p], real[n + p], real[2 * n + p]);
                    a.max(x * x + y * y + z * z)
                });
                comm.all_max(r, m2).sqrt()
            },
        )
    }

    /// The velocity on the N³ grid, `[i][j][k]` order: each rank's planes, gathered in rank
    /// order.
    pub fn velocity_on_grid(&mut self) -> [Vec<f64>; 3] {
        let n = self.grid.n;
        let parts = self.on_solution_grid(
            |u, i, _| [u[0][i], u[1][i], u[2][i]],
            |comm, r, real| comm.all_gather(r, real),
        );
        let per = self.solution().s.planes() * n * n;
        std::array::from_fn(|c| {
            parts
                .iter()
                .flat_map(|p| p[c * per..(c + 1) * per].iter().copied())
                .collect()
        })
    }
}

impl SpectralStepper for HostSlabSolver {
    fn grid(&self) -> SpectralGrid {
        self.grid
    }
    fn nu(&self) -> f64 {
        self.nu
    }
    fn set_velocity_modes(&mut self, mut uhat: VectorModes) -> Result<(), SpectralError> {
        make_real_solenoidal(&self.grid.layout(), &mut uhat);
        self.scatter_modes(&uhat);
        Ok(())
    }
    fn restore_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        self.scatter_modes(&uhat);
        Ok(())
    }
    fn velocity_modes(&mut self) -> Result<&VectorModes, SpectralError> {
        if self.host.is_none() {
            self.host = Some(self.gather_modes());
        }
        Ok(self.host.as_ref().expect("just gathered"))
    }
    fn cfl_dt(&mut self, cfl: f64) -> Result<f64, SpectralError> {
        let s = self.speed_sum_max();
        Ok(self.grid.cfl_dt(cfl, s))
    }
    fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        Ok(HostSlabSolver::step(self, dt)?)
    }
    fn dkdt_from_rhs(&mut self) -> Result<f64, SpectralError> {
        Ok(self.sums().sums[3])
    }
    fn flow_stats(&mut self) -> Result<FlowStats, SpectralError> {
        Ok(HostSlabSolver::flow_stats(self))
    }
    fn shell_spectrum(&mut self) -> Result<Vec<f64>, SpectralError> {
        Ok(self.sums().spectrum)
    }
    fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        Ok(HostSlabSolver::max_divergence(self))
    }
    fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        Ok(HostSlabSolver::max_vorticity(self))
    }
    fn velocity_on_grid(&mut self) -> Result<[Vec<f64>; 3], SpectralError> {
        Ok(HostSlabSolver::velocity_on_grid(self))
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
}
