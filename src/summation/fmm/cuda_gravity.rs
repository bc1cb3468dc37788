//! Softened gravity by the FMM on one GPU ([`CudaFmmGravity`]): the structure of the CPU
//! [`super::FmmGravity`] (the same trees and lists: the opening criterion alone, built on the
//! device by [`GpuTree`] from the bodies uploaded in the caller's order) and its softened
//! Cartesian expansions ([`super::cartesian`]) in f64 on the device
//! ([`CartesianGravityKernels`], kernels/fmm_cartesian.cu), then L2P with the exact softened
//! pairs of the near field in f32 (docs/physics.md §8.1). With ε = 0 a pair at distance 0 adds
//! nothing, so `targets = None` skips each body's self pair, and coincident bodies are refused.

use super::cuda::{flat, Buffers, Staged, Timeline};
use super::cuda_cartesian::{CartesianGravityKernels, SofteningSquared};
use super::gpu_tree::{Cores, GpuTree, TreeRequest};
use super::params::{plan_gravity_parameters, FmmBackend, FmmParams};
use super::{AccuracyCheck, Fmm, FmmState, FmmStats, GravityFmmState};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{CudaError, Gpu};
use crate::summation::direct::cuda_gravity::{check_bodies_in, softening_squared_in};
use crate::summation::interaction::{
    Bodies, GravityEvaluation, GravitySummation, GravityWork, PlummerGravity,
};
use crate::summation::{SumResult, SummationError};
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// Plummer-softened gravity by the FMM on one GPU: f64 Cartesian expansions, f32 near field
/// (module docs).
pub struct CudaFmmGravity {
    core: GravityFmmState,
    engine: Engine,
}

/// The device side: kernels and buffers, which stay allocated between calls and grow only.
struct Engine {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    kernels: CartesianGravityKernels,
    buf: Buffers,
    /// The trees and lists, built on the device.
    tree: GpuTree,
    /// The host form's bodies (and targets) uploaded in the caller's order.
    staged: Staged,
    /// The host form's outputs: the accelerations (3 per target) and the potentials (1 per
    /// target).
    out_acc: DeviceBuffer<f64>,
    out_phi: DeviceBuffer<f64>,
}

/// Bodies (and other targets) on the device for one evaluation, in the caller's order.
struct OnDevice<'a> {
    x: &'a cudarc::driver::CudaSlice<f64>,
    mass: &'a cudarc::driver::CudaSlice<f64>,
    n: usize,
    targets: Option<(&'a cudarc::driver::CudaSlice<f64>, usize)>,
}

impl CudaFmmGravity {
    /// Plans the parameters for `accuracy` and the softening of `gravity` on the GPU (refused
    /// below [`super::params::GPU_ACCURACY_FLOOR`]: the near field is summed in f32, and above
    /// the kernels' largest Cartesian order) and
    /// compiles the kernels; checks at the first evaluation and every `check_every` after (0:
    /// only the first).
    pub fn new(
        gpu: Arc<Gpu>,
        gravity: PlummerGravity,
        accuracy: f64,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        let params = plan_gravity_parameters(accuracy, FmmBackend::Cuda, gravity)?;
        Self::with_params(gpu, gravity, params, check_every)
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn with_params(
        gpu: Arc<Gpu>,
        gravity: PlummerGravity,
        params: FmmParams,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        let kernels = CartesianGravityKernels::new(&gpu, params.order)?;
        let engine = Engine {
            tree: GpuTree::new(&gpu)?,
            staged: Staged::default(),
            stream: gpu.stream().clone(),
            gpu,
            kernels,
            buf: Buffers::default(),
            out_acc: DeviceBuffer::default(),
            out_phi: DeviceBuffer::default(),
        };
        Ok(Self {
            core: GravityFmmState::new(gravity, params, check_every),
            engine,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.engine.gpu
    }
}

impl Engine {
    /// φ and a at `tx` from `bodies` with the squared softening `eps2` and `params` on the GPU
    /// into `out` (sized for `tx`): the host form (uploads, [`Self::compute`], downloads); the
    /// phase times and counts.
    fn run(
        &mut self,
        eps2: SofteningSquared,
        params: &FmmParams,
        bodies: &Bodies,
        tx: &[[f64; 3]],
        out: &mut GravityEvaluation,
    ) -> Result<FmmStats, CudaError> {
        let s = self.stream.clone();
        let (n, nt) = (bodies.len(), tx.len());
        // The targets are the bodies when they are the same array (one tree for both).
        let same = std::ptr::eq(tx.as_ptr(), bodies.x.as_ptr()) && nt == n;
        let mut st = std::mem::take(&mut self.staged);
        st.x.upload(&s, &flat(bodies.x), "positions")?;
        st.alpha.upload(&s, bodies.mass, "masses")?;
        if !same {
            st.targets.upload(&s, &flat(tx), "targets")?;
        }
        let (mut phi, mut acc) = (
            std::mem::take(&mut self.out_phi),
            std::mem::take(&mut self.out_acc),
        );
        let on = OnDevice {
            x: st.x.get(),
            mass: st.alpha.get(),
            n,
            targets: (!same).then(|| (st.targets.get(), nt)),
        };
        let stats = self.compute(eps2, params, on, &mut phi, &mut acc);
        self.staged = st;
        self.out_phi = phi;
        self.out_acc = acc;
        let stats = stats?;
        self.out_phi
            .download(&self.gpu, &mut out.potential[..nt], "potentials")?;
        let mut flat = vec![0.0f64; 3 * nt];
        self.out_acc
            .download(&self.gpu, &mut flat, "accelerations")?;
        for (o, v) in out.acceleration.iter_mut().zip(flat.chunks(3)) {
            *o = [v[0], v[1], v[2]];
        }
        let finite = |v: &f64| v.is_finite();
        if !(out.potential.iter().all(finite) && flat.iter().all(finite)) {
            return Err(CudaError::Invalid(
                "the gravity FMM left a potential or an acceleration unwritten or not finite"
                    .into(),
            ));
        }
        Ok(stats)
    }

    /// The evaluation on bodies already on the device: the trees and lists built there, the
    /// masses gathered into tree order, the Cartesian far field and the near field, φ into
    /// `phi` (one per target) and a into `acc` (three), at the targets' original indices; waits
    /// for the GPU at the end (the phase times).
    fn compute(
        &mut self,
        eps2: SofteningSquared,
        params: &FmmParams,
        on: OnDevice,
        phi: &mut DeviceBuffer<f64>,
        acc: &mut DeviceBuffer<f64>,
    ) -> Result<FmmStats, CudaError> {
        let p = params.order;
        debug_assert_eq!(self.kernels.order(), p);
        let s = self.stream.clone();
        let nt = on.targets.map_or(on.n, |t| t.1);
        let mut stats = FmmStats::default();
        self.tree.build(&TreeRequest {
            x: on.x,
            n: on.n,
            cores: Cores::Uniform(1.0),
            targets: on.targets,
            leaf_size: params.leaf_size,
            theta: params.theta,
            rho_cut: params.rho_cut_velocity,
            scale_max: 1.0,
        })?;
        let shape = self.tree.shape();
        let b = &mut self.buf;
        b.adopt(&s, &self.tree, false, 1, p)?;
        self.tree.gather_sources(1, on.mass, &mut b.s_alpha)?;
        let timeline = Timeline::new(&self.gpu)?;
        timeline.record(0, &s)?;
        self.kernels
            .run(&s, b, &shape, nt, eps2, &timeline, phi, acc)?;
        timeline.finish(&self.gpu, &s, &self.tree, &mut stats)?;
        Ok(stats)
    }
}

impl CudaFmmGravity {
    /// The device form, targets = the bodies: φ (n values) and a (3n, x y z per body) of the `n`
    /// bodies at `x` (3 f64 each) with masses `mass` resident on this engine's GPU, into `phi`
    /// and `acc` (grown as needed), the bodies' order kept; the tree and lists are built on the
    /// device (a few small counts come back per level). The built-in check runs when due, as in
    /// the host form: then the bodies and results come to the host for the sampled comparison.
    pub fn evaluate_resident(
        &mut self,
        x: &DeviceBuffer<f64>,
        mass: &DeviceBuffer<f64>,
        n: usize,
        phi: &mut DeviceBuffer<f64>,
        acc: &mut DeviceBuffer<f64>,
    ) -> SumResult {
        let gravity = self.core.gravity();
        softening_squared_in::<f32>(&gravity)?;
        if n == 0 {
            return Ok(());
        }
        let eps2 = SofteningSquared::of(&gravity);
        let params = self.core.fmm.params;
        let on = OnDevice {
            x: x.get(),
            mass: mass.get(),
            n,
            targets: None,
        };
        let stats = self.engine.compute(eps2, &params, on, phi, acc)?;
        self.core.fmm.stats = stats;
        let schedule = &mut self.core.fmm.schedule;
        if schedule.count_evaluation(0.0).is_none() {
            return Ok(());
        }
        // Due: the sampled check on the host, as GravityFmmState::evaluate does.
        let gpu = &self.engine.gpu;
        let mut xs = vec![0.0; 3 * n];
        x.download(gpu, &mut xs, "positions")?;
        let xs: Vec<[f64; 3]> = xs.chunks(3).map(|c| [c[0], c[1], c[2]]).collect();
        check_bodies_in::<f32>(&gravity, &xs)?;
        let mut ms = vec![0.0; n];
        mass.download(gpu, &mut ms, "masses")?;
        let mut out = GravityEvaluation::default();
        out.resize(n);
        phi.download(gpu, &mut out.potential, "potentials")?;
        let mut flat = vec![0.0; 3 * n];
        acc.download(gpu, &mut flat, "accelerations")?;
        for (o, v) in out.acceleration.iter_mut().zip(flat.chunks(3)) {
            *o = [v[0], v[1], v[2]];
        }
        self.core.check(&Bodies { x: &xs, mass: &ms }, None, &out)
    }
}

impl GravitySummation for CudaFmmGravity {
    fn name(&self) -> String {
        self.core
            .name("GPU (f64 Cartesian expansions, f32 near field)")
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.core.fmm.schedule.take()
    }

    fn gravity(&self) -> PlummerGravity {
        self.core.gravity()
    }

    fn evaluate_bodies(&mut self, work: GravityWork, out: &mut GravityEvaluation) -> SumResult {
        let gravity = self.core.gravity();
        let bodies = work.bodies;
        // The f32 near field: ε² must not underflow, and at ε = 0 bodies apart in f64 must stay
        // apart in f32 (the checks of the all-pairs engine).
        softening_squared_in::<f32>(&gravity)?;
        let eps2 = SofteningSquared::of(&gravity);
        if work.targets.is_none() {
            check_bodies_in::<f32>(&gravity, bodies.x)?;
        }
        let engine = &mut self.engine;
        self.core.evaluate(work, out, |params, tx, out| {
            Ok(engine.run(eps2, params, bodies, tx, out)?)
        })
    }
}

impl Fmm for CudaFmmGravity {
    fn state(&self) -> &FmmState {
        &self.core.fmm
    }
    fn state_mut(&mut self) -> &mut FmmState {
        &mut self.core.fmm
    }
}
