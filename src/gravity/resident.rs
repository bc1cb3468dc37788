//! The kick–drift–kick leapfrog with the bodies resident on one GPU (docs/physics.md §10):
//! masses, positions and velocities in f64 on the device, the kicks and the drift by
//! `kernels/nbody.cu`, the forces by the engine's device forms (all pairs, or the FMM with its tree
//! built on the device). The host sees the bodies only at outputs and checkpoints, and one finite
//! flag per step.
//!
//! A step computes into trial arrays (positions, velocities, potentials, accelerations) and swaps
//! them in only when the flag says every new position, velocity and potential is finite, so a
//! failed step leaves the state as it was. The update rounds every product and sum on its own,
//! as [`super::host::HostLeapfrog`] does: with the same force evaluator (the GPU all pairs or the
//! GPU FMM in their host forms) the two steppers agree bit for bit, and against the f64 host
//! leapfrog they differ by the f32 of the force sums. Every kernel is elementwise and the
//! evaluators are deterministic, so two runs are bit-identical on the same GPU.
//!
//! At ε = 0 the bodies are checked for coincidence (in f64 and once rounded to f32) when they
//! are set; during the run the all-pairs kernel skips a pair that comes to coincide in f32 (the
//! FMM checks at its built-in accuracy checks).
//!
//! Timings ([`BodyStepper::take_timings`]): "gravity forces" and "gravity update", device time
//! by CUDA events on the GPU's stream ([`PhaseTimer`]).

use super::bodies::BodySet;
use super::stepper::BodyStepper;
use super::GravityError;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    kernel_source, launch, load_kernels, CompiledModule, CudaError, Gpu, KernelSource,
};
use crate::device::timer::PhaseTimer;
use crate::summation::direct::cuda_gravity::{check_bodies_in, softening_squared_in};
use crate::summation::direct::CudaDirectGravity;
use crate::summation::fmm::{AccuracyCheck, CudaFmmGravity};
use crate::summation::interaction::{GravitySummation, PlummerGravity};
use crate::summation::planner::EvaluatorOptions;
use crate::summation::{EvaluatorKind, SumResult, SummationError};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// The kernels of the update, embedded in the binary.
pub const KERNELS: KernelSource = kernel_source!("nbody.cu");

/// The kernels [`ResidentLeapfrog`] loads from [`KERNELS`] (without the `nb_` prefix).
pub const KERNEL_NAMES: [&str; 3] = ["kick_drift", "kick", "check_forces"];

/// Threads per block of the update kernels.
const THREADS: u32 = 256;

/// The kernels of `kernels/nbody.cu`.
struct Kernels {
    kick_drift: CudaFunction,
    kick: CudaFunction,
    check_forces: CudaFunction,
}

/// The force evaluator's device form.
enum Forces {
    Direct(Box<CudaDirectGravity>),
    Fmm(Box<CudaFmmGravity>),
}

impl Forces {
    fn summation(&self) -> &dyn GravitySummation {
        match self {
            Forces::Direct(e) => e.as_ref(),
            Forces::Fmm(e) => e.as_ref(),
        }
    }

    /// φ and a at the positions of `at` (the first `n` bodies, masses `mass`) into its
    /// potentials and accelerations (queued).
    fn evaluate(&mut self, at: &mut DeviceState, mass: &DeviceBuffer<f64>, n: usize) -> SumResult {
        let (x, phi, acc) = (&at.x, &mut at.phi, &mut at.acc);
        match self {
            Forces::Direct(e) => e.evaluate_resident(x, mass, n, phi, acc),
            Forces::Fmm(e) => e.evaluate_resident(x, mass, n, phi, acc),
        }
    }
}

/// One state of the bodies on the device: positions and velocities (3 f64 per body), and the
/// potentials (1) and accelerations (3) at those positions.
#[derive(Default)]
struct DeviceState {
    x: DeviceBuffer<f64>,
    v: DeviceBuffer<f64>,
    phi: DeviceBuffer<f64>,
    acc: DeviceBuffer<f64>,
}

impl DeviceState {
    fn ensure(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<(), CudaError> {
        self.x.ensure(stream, 3 * n)?;
        self.v.ensure(stream, 3 * n)?;
        self.phi.ensure(stream, n)?;
        self.acc.ensure(stream, 3 * n)
    }
}

/// The phases of [`BodyStepper::take_timings`] ([`PhaseTimer`] numbers).
#[derive(Debug, Clone, Copy)]
enum Phase {
    Forces,
    Update,
}

/// One thread per body.
fn cfg(n: usize) -> LaunchConfig {
    crate::device::sort::cfg_items(n, THREADS)
}

/// The GPU leapfrog (module docs).
pub struct ResidentLeapfrog {
    gpu: Arc<Gpu>,
    /// The GPU's one stream (everything is queued on it).
    stream: Arc<CudaStream>,
    _module: Arc<CompiledModule>,
    k: Kernels,
    forces: Forces,
    gravity: PlummerGravity,
    /// The bodies' masses, components and galaxies (which the steps do not change); positions
    /// and velocities empty (they live on the device).
    host: BodySet,
    mass: DeviceBuffer<f64>,
    state: DeviceState,
    trial: DeviceState,
    /// The finite flag of a step (one u32: non-zero when something was not finite).
    flag: DeviceBuffer<u32>,
    timer: PhaseTimer,
}

impl ResidentLeapfrog {
    /// A leapfrog over `bodies` on `gpu` with forces by `method` (`Direct` or `Fmm`) at
    /// `options` (the FMM's accuracy and check cadence), evaluated here at the bodies.
    pub fn new(
        gpu: Arc<Gpu>,
        method: EvaluatorKind,
        gravity: PlummerGravity,
        options: &EvaluatorOptions,
        bodies: BodySet,
    ) -> Result<ResidentLeapfrog, GravityError> {
        // The f32 force sums take ε² in f32: refused where it underflows.
        softening_squared_in::<f32>(&gravity)?;
        let forces = match method {
            EvaluatorKind::Direct => {
                Forces::Direct(Box::new(CudaDirectGravity::new(gpu.clone(), gravity)?))
            }
            EvaluatorKind::Fmm => Forces::Fmm(Box::new(CudaFmmGravity::new(
                gpu.clone(),
                gravity,
                options.accuracy,
                options.check_every,
            )?)),
            other => {
                return Err(SummationError::Unsupported(format!(
                    "the GPU leapfrog has no \"{other}\" force method; allowed: \"direct\", \
                     \"fmm\""
                ))
                .into())
            }
        };
        let module = gpu.module_from(&KERNELS, &[])?;
        let k = load_kernels!(
            module,
            "nb_",
            Kernels {
                kick_drift,
                kick,
                check_forces
            }
        );
        let mut s = ResidentLeapfrog {
            stream: gpu.stream().clone(),
            _module: module,
            k,
            forces,
            gravity,
            host: BodySet::default(),
            mass: DeviceBuffer::new(),
            state: DeviceState::default(),
            trial: DeviceState::default(),
            flag: DeviceBuffer::new(),
            timer: PhaseTimer::new(gpu.clone(), 2),
            gpu,
        };
        s.set_bodies(bodies)?;
        Ok(s)
    }

    /// The GPU the bodies live on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Zeroes the finite flag (queued).
    fn clear_flag(&mut self) -> Result<(), CudaError> {
        self.flag.zero(&self.stream, 1)
    }

    /// Waits for the stream and reads the finite flag (the step's one copy to the host); the
    /// phases queued before it are timed then (no further wait).
    fn flag_set(&mut self) -> Result<bool, CudaError> {
        let mut f = [0u32];
        self.flag
            .download(&self.gpu, &mut f, "the leapfrog's finite flag")?;
        self.timer.collect()?;
        Ok(f[0] != 0)
    }

    /// φ and a at the trial positions into the trial state (queued), timed as the forces.
    fn trial_forces(&mut self) -> Result<(), GravityError> {
        self.timer.begin(Phase::Forces as usize)?;
        let n = self.host.len();
        self.forces.evaluate(&mut self.trial, &self.mass, n)?;
        self.timer.end()?;
        Ok(())
    }

    /// `n` 3-vectors from device buffer `b` (a host wait).
    fn download3(&self, b: &DeviceBuffer<f64>, what: &str) -> Result<Vec<[f64; 3]>, CudaError> {
        let n = self.host.len();
        let mut flat = vec![0.0; 3 * n];
        b.download(&self.gpu, &mut flat, what)?;
        Ok(flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
    }
}

impl BodyStepper for ResidentLeapfrog {
    fn describe(&self) -> String {
        format!(
            "kick–drift–kick leapfrog (GPU-resident, f64 bodies on {}), forces: {}",
            self.gpu.info().name,
            self.forces.summation().name()
        )
    }

    fn len(&self) -> usize {
        self.host.len()
    }

    fn softening(&self) -> f64 {
        self.gravity.softening
    }

    fn step(&mut self, dt: f64) -> Result<(), GravityError> {
        let n = self.host.len();
        if n == 0 {
            return Ok(());
        }
        let s = self.stream.clone();
        let (n_i, half) = (n as i64, 0.5 * dt);
        self.trial.ensure(&s, n)?;
        self.clear_flag()?;
        self.timer.begin(Phase::Update as usize)?;
        let (st, tr) = (&self.state, &mut self.trial);
        // SAFETY: nb_kick_drift(long long n, const double* x, const double* v, const double* a,
        // double h, double dt, double* x_out, double* v_out, unsigned* flag): the state's x, v
        // and acc and the trial's x and v hold 3·n doubles (set_bodies(), ensure()), flag one
        // u32 (clear_flag()); the grid covers n.
        launch!(s, &self.k.kick_drift, "nb_kick_drift", cfg(n);
            &n_i, st.x.get(), st.v.get(), st.acc.get(), &half, &dt, tr.x.get_mut(),
            tr.v.get_mut(), self.flag.get_mut())?;
        self.trial_forces()?;
        self.timer.begin(Phase::Update as usize)?;
        let tr = &mut self.trial;
        // SAFETY: nb_kick(long long n, double* v, const double* a, const double* phi, double h,
        // unsigned* flag): the trial's v and acc hold 3·n doubles and phi n (ensure(), and the
        // evaluation just queued wrote them), flag one u32; the grid covers n.
        launch!(s, &self.k.kick, "nb_kick", cfg(n);
            &n_i, tr.v.get_mut(), tr.acc.get(), tr.phi.get(), &half, self.flag.get_mut())?;
        self.timer.end()?;
        if self.flag_set()? {
            return Err(GravityError::NonFinite(format!(
                "a position, velocity or potential of the {n} bodies became non-finite in the \
                 step (Δt = {dt}); the state before the step is kept"
            )));
        }
        std::mem::swap(&mut self.state, &mut self.trial);
        Ok(())
    }

    fn bodies(&mut self) -> Result<BodySet, GravityError> {
        let mut b = self.host.clone();
        b.x = self.download3(&self.state.x, "body positions")?;
        b.v = self.download3(&self.state.v, "body velocities")?;
        Ok(b)
    }

    fn potentials(&mut self) -> Result<Vec<f64>, GravityError> {
        let mut phi = vec![0.0; self.host.len()];
        self.state
            .phi
            .download(&self.gpu, &mut phi, "body potentials")?;
        Ok(phi)
    }

    fn set_bodies(&mut self, bodies: BodySet) -> Result<(), GravityError> {
        bodies.check()?;
        // At ε = 0: no two bodies at one position, in f64 or once rounded to the f32 of the
        // force sums.
        self.gravity.check_bodies(&bodies.x)?;
        check_bodies_in::<f32>(&self.gravity, &bodies.x)?;
        let n = bodies.len();
        let s = self.stream.clone();
        // Into the trial state (and a new mass array), swapped in once the forces are finite.
        let mut mass = DeviceBuffer::new();
        mass.upload(&s, &bodies.mass, "body masses")?;
        self.trial.ensure(&s, n)?;
        self.trial
            .x
            .upload(&s, bodies.x.as_flattened(), "body positions")?;
        self.trial
            .v
            .upload(&s, bodies.v.as_flattened(), "body velocities")?;
        let old_mass = std::mem::replace(&mut self.mass, mass);
        let old_host = std::mem::replace(&mut self.host, strip(bodies));
        let checked = self.evaluate_new_bodies();
        if let Err(e) = checked {
            self.mass = old_mass;
            self.host = old_host;
            return Err(e);
        }
        std::mem::swap(&mut self.state, &mut self.trial);
        Ok(())
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        match &mut self.forces {
            Forces::Direct(_) => Vec::new(),
            Forces::Fmm(e) => e.take_accuracy_checks(),
        }
    }

    fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
        // A failed event read (a broken context) reports no time rather than failing the run.
        let t = self.timer.take().unwrap_or_else(|_| vec![0.0; 2]);
        vec![
            ("gravity forces", t[Phase::Forces as usize]),
            ("gravity update", t[Phase::Update as usize]),
        ]
    }
}

impl ResidentLeapfrog {
    /// The forces at the new bodies in the trial state, checked finite (one flag read).
    fn evaluate_new_bodies(&mut self) -> Result<(), GravityError> {
        let n = self.host.len();
        if n == 0 {
            return Ok(());
        }
        self.trial_forces()?;
        self.clear_flag()?;
        let s = self.stream.clone();
        let (n_i, tr) = (n as i64, &self.trial);
        // SAFETY: nb_check_forces(long long n, const double* a, const double* phi, unsigned*
        // flag): the trial's acc holds 3·n doubles and phi n (ensure(), written by the
        // evaluation just queued), flag one u32; the grid covers n.
        launch!(s, &self.k.check_forces, "nb_check_forces", cfg(n);
            &n_i, tr.acc.get(), tr.phi.get(), self.flag.get_mut())?;
        if self.flag_set()? {
            return Err(GravityError::NonFinite(format!(
                "the forces on the {n} new bodies are not finite (bodies too far apart for the \
                 f32 force sums?)"
            )));
        }
        Ok(())
    }
}

/// `bodies` without positions and velocities (the host mirror of what does not change).
fn strip(mut bodies: BodySet) -> BodySet {
    bodies.x = Vec::new();
    bodies.v = Vec::new();
    bodies
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels the stepper loads are those nbody.cu declares, in order.
    #[test]
    fn the_launch_code_names_the_declared_kernels() {
        let declared: Vec<&str> = KERNELS
            .text
            .lines()
            .filter_map(|l| l.strip_prefix("extern \"C\" __global__ void nb_"))
            .filter_map(|l| l.split('(').next())
            .collect();
        assert_eq!(declared, KERNEL_NAMES);
    }
}
