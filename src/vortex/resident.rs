//! The GPU-resident particle stepper: the whole vortex step of [`super::VortexSolver`] with the
//! particles on the device for the whole run (docs/physics.md §2–3).
//!
//! Positions, strengths, core radii and the AB2 history are f64 device arrays; the update
//! (AB2 with variable step, Heun's start after every reinitialisation), core spreading
//! σ² ← σ² + 2νΔt, the periodic wrap and the non-finite check are the kernels of
//! `kernels/particles.cu`; velocity and stretching come from the evaluator's device form
//! ([`crate::summation::DeviceSummation`]: all pairs or PME with f32 sums, without host copies;
//! the FMM with its tree and lists built on the device too, a few small downloads per tree
//! level);
//! reinitialisation evaluates the blob vorticity at the lattice nodes on the device and solves
//! for the strengths by cuFFT in f64 ([`super::rbf_device::DeviceRbfSolver`]), with the same
//! conditioning (solenoidal projection, filter) and Σα = 0 as the CPU.
//!
//! The host receives data only when the run core asks for it: particles, derivatives and
//! checkpoint arrays at output, snapshot and checkpoint times, the velocity at the spectral
//! grid's nodes for the diagnostics, and one small copy per step.
//!
//! **One host wait per step.** The stepper, its evaluator and the RBF solve queue everything on
//! the GPU's one stream ([`crate::device::cuda::Gpu::stream`]), so nothing waits between them.
//! The host waits once per step, in [`ParticleStepper::prepare_step`], for one small copy: the
//! prepared state's finite flag and, when the step was chosen by CFL
//! ([`ParticleStepper::stable_dt`] was called before it), the maxima of the stability limits
//! where the next step starts. Before that copy the step also queues what follows its commit:
//! the reinitialisation due after it (built from the prepared state into a spare set, made
//! current by [`ParticleStepper::reinitialise`]) and, for CFL, the derivatives and limits at the
//! prepared state (or at the reinitialised set), which the next step then uses. So `stable_dt`
//! reads nothing, except in the first step after the stepper is made or restored. The phases
//! are timed by events on the stream ([`PhaseTimer`]). The GPU FMM is the exception: its device
//! form copies positions and cores to the host for its tree.
//!
//! Every kernel is elementwise, an order-independent reduction (a maximum) or a fixed-order one
//! (per-block sums added in block order), and the evaluators and the RBF solve are
//! deterministic, so two runs of a case, and a killed and resumed run, are bit-identical on the
//! same GPU; computing the next step's derivatives ahead evaluates the same sums on the same
//! values.
//!
//! The same equations as [`super::VortexSolver`]; the only differences in the f64 update are
//! fused multiply-adds, so GPU and CPU runs agree to round-off plus the f32 of the pair sums.

use super::rbf::SolveReport;
use super::rbf_device::{DeviceBlobs, DeviceRbfSolver};
use super::reinit::ConditioningReport;
use super::stepper::{HostDerivatives, ParticleStepper, ParticleSummary, TransferBytes};
use super::{
    stable_step, NamedArray, PhaseTimes, RbfSolver, VortexClock, VortexError, VortexSettings,
};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    kernel_source, launch, load_kernels, CompiledModule, CudaError, Gpu, KernelSource,
};
use crate::device::timer::PhaseTimer;
use crate::device::Device;
use crate::particles::ParticleSet;
use crate::spectral::gpu::{DeviceGridDiagnostics, GridDiagnostics};
use crate::spectral::{ModeLayout, VectorModes};
use crate::summation::{
    Boundary, DeviceEvaluation, DeviceExtra, DevicePoints, DeviceSources, DeviceTargets,
    DeviceWork, Evaluation, Summation, SummationError,
};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::f64::consts::TAU;
use std::sync::Arc;

/// The kernels of the particle update, embedded in the binary.
pub const KERNELS: KernelSource = kernel_source!("particles.cu");

/// Threads per block of the elementwise kernels and of `vp_max_norm` (VP_MAX_THREADS).
const THREADS: u32 = 256;

/// f64 values per particle the stepper keeps on the device: the state (x 3, α 3, σ 1), the
/// prepared state (7; also the new set of a reinitialisation), Heun's predictor (7), the AB2
/// history (6), the derivatives at the state and at the predictor (6 + 6), the blob vorticity
/// at the particles of the CFL limit (3), and the summary's partial sums (6 per block of 256:
/// under 1).
pub const DEVICE_F64_PER_PARTICLE: u64 = 7 + 7 + 7 + 6 + 6 + 6 + 3 + 1;

/// Device bytes of the stepper itself for `particles` particles, a reinitialisation lattice of
/// `n`³ nodes whose vorticity is sampled on `m`³ nodes (`lattice` = (n, m); `None`: never
/// reinitialised) and diagnostics on a `grid_n`³ grid (`None`: none): the per-particle arrays,
/// the sampling nodes and vorticity with the RBF solve's spectra, and the grid nodes with their
/// velocities. The evaluator's own buffers (mesh, cell lists, packed sources) are estimated by
/// the summation planner.
pub fn device_bytes(
    particles: usize,
    lattice: Option<(usize, usize)>,
    grid_n: Option<usize>,
) -> u64 {
    let mut bytes = 8 * DEVICE_F64_PER_PARTICLE * particles as u64;
    if let Some((n, m)) = lattice {
        let n3 = (n * n * n) as u64;
        // sampled vorticity and nodes (3 + 3 f64 per node; the nodes only for an evaluator
        // without a lattice method, counted anyway), the particles after the solve are
        // the state arrays above (sized for max(particles, n³))
        // (the RBF solve's estimate includes its output, the strengths: counted above)
        bytes += 8 * 6 * (m * m * m) as u64
            + DeviceRbfSolver::device_bytes(n, m).saturating_sub(24 * n3);
        bytes += 8 * DEVICE_F64_PER_PARTICLE * n3.saturating_sub(particles as u64);
    }
    if let Some(n) = grid_n {
        // grid nodes and velocities (3 + 3 f64 per node), and the diagnostics' transforms
        bytes += 8 * 6 * (n * n * n) as u64;
        bytes += DeviceGridDiagnostics::device_bytes(n, super::field::grid_kmax(n));
    }
    bytes
}

/// The kernels of `kernels/particles.cu`.
struct Kernels {
    euler: CudaFunction,
    heun: CudaFunction,
    ab2: CudaFunction,
    spread: CudaFunction,
    wrap: CudaFunction,
    lattice: CudaFunction,
    nonfinite: CudaFunction,
    max_norm: CudaFunction,
    summary: CudaFunction,
}

/// One particle state on the device, with the host's mirror of what the evaluators need to
/// plan (σ_max and whether all cores are equal, known without reading the cores back: they
/// change only by core spreading, the same for every particle, and by reinitialisation).
#[derive(Default)]
struct DeviceState {
    x: DeviceBuffer<f64>,
    alpha: DeviceBuffer<f64>,
    sigma: DeviceBuffer<f64>,
    n: usize,
    sigma_max: f64,
    equal_cores: bool,
}

impl DeviceState {
    fn sources(&self) -> DeviceSources<'_> {
        DeviceSources {
            x: &self.x,
            alpha: &self.alpha,
            sigma: &self.sigma,
            n: self.n,
            sigma_max: self.sigma_max,
            equal_cores: self.equal_cores,
        }
    }

    fn ensure(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<(), CudaError> {
        self.x.ensure(stream, 3 * n)?;
        self.alpha.ensure(stream, 3 * n)?;
        self.sigma.ensure(stream, n)?;
        self.n = n;
        Ok(())
    }
}

/// Velocity and stretching of `state`'s own strengths at its particles, by the evaluator's
/// device form (queued on the GPU's stream after whatever wrote the state).
fn derivatives_at(
    evaluator: &mut dyn Summation,
    state: &DeviceState,
    scheme: crate::kernel::StretchingScheme,
    out: &mut DeviceEvaluation,
) -> Result<(), VortexError> {
    let dev = evaluator
        .device_form()
        .expect("the device form was checked at construction");
    dev.evaluate_on_device(
        DeviceWork {
            sources: &state.sources(),
            targets: &DeviceTargets::Sources,
            extra: &DeviceExtra::Stretching {
                alpha: None,
                scheme,
            },
        },
        out,
    )?;
    Ok(())
}

/// Blob vorticity of `sources` at `targets`, by the evaluator's device form (queued), into
/// `out`.
fn vorticity_at(
    evaluator: &mut dyn Summation,
    sources: &DeviceSources,
    targets: &DeviceTargets,
    out: &mut DeviceBuffer<f64>,
) -> Result<(), VortexError> {
    let dev = evaluator
        .device_form()
        .expect("the device form was checked at construction");
    dev.vorticity_on_device(DevicePoints { sources, targets }, out)?;
    Ok(())
}

/// A particle set of the stepper and the derivatives that go with it.
#[derive(Debug, Clone, Copy)]
enum At {
    /// The current state (derivatives in `eval`).
    State,
    /// The prepared state (derivatives in `eval_heun`, once Heun's corrector has used it).
    Next,
    /// Heun's predictor, or the reinitialised set built ahead (derivatives in `eval_heun`).
    Pred,
}

/// The stability limits' maxima at a particle set: max|u_p| and max|ω_h(x_p)| (device maxima,
/// NaN when a value is not finite).
#[derive(Debug, Clone, Copy)]
struct Limits {
    u_max: f64,
    omega_max: f64,
}

impl Limits {
    /// The maxima in a per-step readback.
    fn of(words: &[u64; 3]) -> Limits {
        Limits {
            u_max: f64::from_bits(words[Word::UMax as usize]),
            omega_max: f64::from_bits(words[Word::OmegaMax as usize]),
        }
    }
}

/// What a prepared step computed beyond the prepared state, for after its commit.
#[derive(Debug, Clone, Copy)]
enum Ahead {
    /// Nothing: the derivatives at the committed state are evaluated when needed.
    Nothing,
    /// The derivatives at the prepared state (in `eval_heun`) and its limits.
    Derivatives(Limits),
    /// The reinitialised set built from the prepared state (in `pred`; with its derivatives in
    /// `eval_heun` when the limits were measured), for the reinitialisation due after the
    /// commit.
    Reinit(Option<Limits>),
}

/// The phases of [`PhaseTimes`], timed by events on the stream ([`PhaseTimer`] numbers).
#[derive(Debug, Clone, Copy)]
enum Phase {
    Evaluation,
    Update,
    ReinitVorticity,
    ReinitSolve,
}

/// The words of the per-step readback buffer (their indices): the finite flag (an int in the
/// low half), max|u| and max|ω| (f64 bits).
#[derive(Debug, Clone, Copy)]
enum Word {
    Flag,
    UMax,
    OmegaMax,
}

/// σ after one step of core spreading, rounded as `vp_spread` rounds it.
fn spread_core(sigma: f64, spread: f64) -> f64 {
    sigma.mul_add(sigma, spread).sqrt()
}

fn cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.max(1) as u32).div_ceil(THREADS), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The GPU-resident stepper (module docs).
pub struct ResidentStepper {
    gpu: Arc<Gpu>,
    /// The GPU's one stream (everything is queued on it).
    stream: Arc<CudaStream>,
    _module: Arc<CompiledModule>,
    k: Kernels,
    evaluator: Box<dyn Summation>,
    settings: VortexSettings,
    boundary: Boundary,
    device: Device,
    description: String,
    state: DeviceState,
    next: DeviceState,
    /// Heun's predictor; between steps free, or the reinitialised set built ahead.
    pred: DeviceState,
    /// Velocity and stretching at `state` (valid when `derivatives_current`).
    eval: DeviceEvaluation,
    /// At Heun's predictor, then at the prepared state or the set built ahead ([`Ahead`]).
    eval_heun: DeviceEvaluation,
    derivatives_current: bool,
    /// The limits at `state`, when known on the host.
    limits: Option<Limits>,
    /// [`ParticleStepper::stable_dt`] was called since the last prepared step: the next one
    /// measures the limits where the following step starts.
    limits_asked: bool,
    /// What the prepared step computed ahead (valid with `pending`).
    ahead: Ahead,
    /// The reinitialised set in `pred` (with its limits, when measured), made from the state
    /// just committed; taken by [`ResidentStepper::reinitialise`].
    reinit_ready: Option<Option<Limits>>,
    history_u: DeviceBuffer<f64>,
    history_s: DeviceBuffer<f64>,
    history_dt: Option<f64>,
    /// The step size of the prepared step in `next`.
    pending: Option<f64>,
    steps_since_reinit: u64,
    ids: Vec<u64>,
    rbf: Option<DeviceRbfSolver>,
    lattice_x: DeviceBuffer<f64>,
    lattice_ready: usize,
    omega: DeviceBuffer<f64>,
    grid_x: DeviceBuffer<f64>,
    grid_ready: usize,
    grid_eval: DeviceEvaluation,
    /// The shared diagnostics of the velocity at the grid nodes, on the device (grid n, made
    /// at the first output).
    grid_diagnostics: Option<(usize, DeviceGridDiagnostics)>,
    points: DeviceBuffer<f64>,
    /// The per-step readback ([`Word`]).
    readback: DeviceBuffer<u64>,
    partials: DeviceBuffer<f64>,
    vorticity_scratch: DeviceBuffer<f64>,
    last_solve: Option<SolveReport>,
    /// The conditioning of the last reinitialisation, once read.
    last_conditioning: Option<ConditioningReport>,
    /// The last reinitialisation's conditioning is still on the device (in the RBF solver).
    conditioning_on_device: bool,
    host: Option<ParticleSet>,
    timer: PhaseTimer,
    transfers: TransferBytes,
}

impl ResidentStepper {
    /// The stepper for `particles` with `evaluator`, which must have a device form (a GPU
    /// evaluator). Errors: no device form, `rbf = "cg"` (the device solves exactly, by FFT; no
    /// silent host fallback), reinitialisation outside the periodic box, kernels that do not
    /// compile or load, memory.
    pub fn new(
        particles: ParticleSet,
        mut evaluator: Box<dyn Summation>,
        settings: VortexSettings,
        device: Device,
        description: String,
    ) -> Result<Self, VortexError> {
        let boundary = evaluator.boundary();
        let gpu = match evaluator.device_form() {
            Some(d) => d.gpu().clone(),
            None => {
                return Err(VortexError::Unsupported(format!(
                    "the GPU-resident stepper needs a GPU evaluator, not {}",
                    evaluator.name()
                )))
            }
        };
        if settings.reinit_every.is_some() {
            if !matches!(boundary, Boundary::Periodic { .. }) {
                return Err(VortexError::ReinitNeedsPeriodicBox);
            }
            if let RbfSolver::ConjugateGradient { .. } = settings.rbf {
                return Err(VortexError::Unsupported(
                    "[vortex] rbf = \"cg\" has no GPU version: the GPU-resident stepper solves \
                     for the strengths by FFT on the lattice; set rbf = \"spectral\" (the \
                     default) or \"exact\" (or run the particles on the CPU with device = \
                     \"cpu\")"
                        .into(),
                ));
            }
        }
        let module = gpu.module_from(&KERNELS, &[])?;
        let k = load_kernels!(
            module,
            "vp_",
            Kernels {
                euler,
                heun,
                ab2,
                spread,
                wrap,
                lattice,
                nonfinite,
                max_norm,
                summary
            }
        );
        let stream = gpu.stream().clone();
        let rbf = if settings.reinit_every.is_some() {
            Some(DeviceRbfSolver::new(gpu.clone())?)
        } else {
            None
        };
        let mut s = ResidentStepper {
            gpu: gpu.clone(),
            stream,
            _module: module,
            k,
            evaluator,
            settings,
            boundary,
            device,
            description,
            state: DeviceState::default(),
            next: DeviceState::default(),
            pred: DeviceState::default(),
            eval: DeviceEvaluation::default(),
            eval_heun: DeviceEvaluation::default(),
            derivatives_current: false,
            limits: None,
            limits_asked: false,
            ahead: Ahead::Nothing,
            reinit_ready: None,
            history_u: DeviceBuffer::new(),
            history_s: DeviceBuffer::new(),
            history_dt: None,
            pending: None,
            steps_since_reinit: 0,
            ids: Vec::new(),
            rbf,
            lattice_x: DeviceBuffer::new(),
            lattice_ready: 0,
            omega: DeviceBuffer::new(),
            grid_x: DeviceBuffer::new(),
            grid_ready: 0,
            grid_eval: DeviceEvaluation::default(),
            grid_diagnostics: None,
            points: DeviceBuffer::new(),
            readback: DeviceBuffer::new(),
            partials: DeviceBuffer::new(),
            vorticity_scratch: DeviceBuffer::new(),
            last_solve: None,
            last_conditioning: None,
            conditioning_on_device: false,
            host: None,
            timer: PhaseTimer::new(gpu, 4),
            transfers: TransferBytes::default(),
        };
        s.upload_particles(&particles)?;
        s.host = Some(particles);
        Ok(s)
    }

    /// What the last reinitialisation's conditioning found (read from the device on the first
    /// call after it: a host wait).
    pub fn last_conditioning(&mut self) -> Result<Option<ConditioningReport>, VortexError> {
        if std::mem::take(&mut self.conditioning_on_device) {
            if let Some(rbf) = self.rbf.as_mut() {
                self.last_conditioning = Some(rbf.report()?);
            }
        }
        Ok(self.last_conditioning)
    }

    fn upload(
        &mut self,
        which: fn(&mut Self) -> &mut DeviceBuffer<f64>,
        host: &[f64],
        what: &str,
    ) -> Result<(), VortexError> {
        let stream = self.stream.clone();
        which(self).upload(&stream, host, what)?;
        self.transfers.to_device += 8 * host.len() as u64;
        Ok(())
    }

    /// Copies the first `host.len()` values of `which` to the host (waits for the stream).
    fn download(
        &mut self,
        which: fn(&Self) -> &DeviceBuffer<f64>,
        host: &mut [f64],
        what: &str,
    ) -> Result<(), VortexError> {
        which(self).download(&self.gpu, host, what)?;
        self.transfers.to_host += 8 * host.len() as u64;
        Ok(())
    }

    /// Makes `p` the device state (and its ids the host's).
    fn upload_particles(&mut self, p: &ParticleSet) -> Result<(), VortexError> {
        for &s in &p.sigma {
            if !(s > 0.0 && s.is_finite()) {
                return Err(VortexError::Summation(SummationError::BadSources(format!(
                    "core radius {s} (must be positive and finite)"
                ))));
            }
        }
        self.upload(|s| &mut s.state.x, p.x.as_flattened(), "particle positions")?;
        self.upload(
            |s| &mut s.state.alpha,
            p.alpha.as_flattened(),
            "particle strengths",
        )?;
        self.upload(|s| &mut s.state.sigma, &p.sigma, "core radii")?;
        let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
        self.state.n = p.len();
        self.state.sigma_max = sigma_max;
        self.state.equal_cores = p.sigma.iter().all(|&s| s == sigma_max);
        self.ids = p.id.clone();
        self.state_replaced();
        Ok(())
    }

    /// Forgets everything computed from the state (after it was replaced from the host).
    fn state_replaced(&mut self) {
        self.derivatives_current = false;
        self.limits = None;
        self.ahead = Ahead::Nothing;
        self.reinit_ready = None;
    }

    /// Queues velocity and stretching (the evaluator's device form) at the set `at`.
    fn derivatives_at(&mut self, at: At) -> Result<(), VortexError> {
        self.timer.begin(Phase::Evaluation as usize)?;
        let (state, out) = match at {
            At::State => (&self.state, &mut self.eval),
            At::Next => (&self.next, &mut self.eval_heun),
            At::Pred => (&self.pred, &mut self.eval_heun),
        };
        derivatives_at(self.evaluator.as_mut(), state, self.settings.scheme, out)?;
        Ok(self.timer.end()?)
    }

    /// Velocity and stretching at the current state into `eval` (queued, when not current).
    fn ensure_derivatives(&mut self) -> Result<(), VortexError> {
        if self.derivatives_current {
            return Ok(());
        }
        self.derivatives_at(At::State)?;
        self.derivatives_current = true;
        Ok(())
    }

    /// Zeroes the per-step readback (flag and maxima).
    fn clear_readback(&mut self) -> Result<(), VortexError> {
        Ok(self.readback.zero(&self.stream, 3)?)
    }

    /// The device address of readback word `word`.
    fn readback_word(&self, word: usize) -> u64 {
        self.readback.addr(&self.stream) + 8 * word as u64
    }

    /// Queues max_p |v_p| over the first `n` 3-vectors at device address `v` into readback
    /// word `word` (an order-independent device maximum; the word zeroed before).
    fn queue_max_norm(&mut self, v: u64, n: usize, word: usize) -> Result<(), VortexError> {
        let s = &self.stream;
        let n_i = n as i64;
        let out = self.readback_word(word);
        // SAFETY: vp_max_norm(long long n, const double* v, u64* out): v holds ≥ 3·n doubles
        // (a state-sized buffer of the caller), out one u64 of the readback (3 words, ensured
        // by clear_readback); blocks of 256 threads (VP_MAX_THREADS).
        launch!(s, &self.k.max_norm, "vp_max_norm", cfg(n); &n_i, &v, &out)?;
        Ok(())
    }

    /// Queues the limits' maxima at the set `at` (whose derivatives are queued already): the
    /// blob vorticity at its particles, then max|u| and max|ω| into the readback.
    fn queue_limits(&mut self, at: At) -> Result<(), VortexError> {
        self.timer.begin(Phase::Evaluation as usize)?;
        let (state, eval) = match at {
            At::State => (&self.state, &self.eval),
            At::Next => (&self.next, &self.eval_heun),
            At::Pred => (&self.pred, &self.eval_heun),
        };
        let n = state.n;
        let u = eval.velocity.addr(&self.stream);
        vorticity_at(
            self.evaluator.as_mut(),
            &state.sources(),
            &DeviceTargets::Sources,
            &mut self.vorticity_scratch,
        )?;
        let w = self.vorticity_scratch.addr(&self.stream);
        self.queue_max_norm(u, n, Word::UMax as usize)?;
        self.queue_max_norm(w, n, Word::OmegaMax as usize)?;
        Ok(self.timer.end()?)
    }

    /// The step's one copy to the host: the first `words` readback words (the flag, and the
    /// maxima when 3). The phases queued before it are timed then (no further wait).
    fn read_back(&mut self, words: usize) -> Result<[u64; 3], VortexError> {
        let mut w = [0u64; 3];
        let what = "the finite flag and the step's maxima";
        self.readback.download(&self.gpu, &mut w[..words], what)?;
        self.transfers.to_host += 8 * words as u64;
        self.timer.collect()?;
        Ok(w)
    }

    /// Measures the limits at the current state now (a host wait): the first step after the
    /// stepper was made, restored or reinitialised without a prepared step seeing it coming.
    fn measure_limits(&mut self) -> Result<Limits, VortexError> {
        self.ensure_derivatives()?;
        self.clear_readback()?;
        self.queue_limits(At::State)?;
        Ok(Limits::of(&self.read_back(3)?))
    }

    /// Queues the finite check of the prepared state's positions and strengths (readback word
    /// [`Word::Flag`] becomes non-zero when one is not finite).
    fn queue_nonfinite(&mut self) -> Result<(), VortexError> {
        let s = &self.stream;
        let flag = self.readback_word(Word::Flag as usize);
        let m = (3 * self.next.n) as i64;
        for buf in [&self.next.x, &self.next.alpha] {
            // SAFETY: vp_nonfinite(long long m, const double* v, int* flag): buf holds 3·n
            // doubles of the prepared state, flag the low half of a zeroed readback word (an
            // int, 8-byte aligned); the grid covers m.
            launch!(s, &self.k.nonfinite, "vp_nonfinite", cfg(m as usize);
                &m, buf.get(), &flag)?;
        }
        Ok(())
    }

    /// `which`'s core radii after spreading by `spread` from `state`'s (σ_max mirrored).
    fn spread_into(&mut self, to_pred: bool, spread: f64) -> Result<(), VortexError> {
        let s = self.stream.clone();
        let n = self.state.n;
        let n_i = n as i64;
        let sigma_max = spread_core(self.state.sigma_max, spread);
        let equal = self.state.equal_cores;
        let out = if to_pred {
            &mut self.pred
        } else {
            &mut self.next
        };
        // SAFETY: vp_spread(long long n, const double* sigma, double spread, double* out): the
        // state's σ holds n doubles, out (ensured to n by the caller) n doubles.
        launch!(s, &self.k.spread, "vp_spread", cfg(n);
            &n_i, self.state.sigma.get(), &spread, out.sigma.get_mut())?;
        out.sigma_max = sigma_max;
        out.equal_cores = equal;
        Ok(())
    }

    /// Computes the next state into `next` (module docs of [`super`] for the scheme), and
    /// ahead of the commit the reinitialisation due after it and, when the limits were asked
    /// for, the limits where the next step starts (module docs); one host wait.
    fn prepare(&mut self, dt: f64) -> Result<(), VortexError> {
        self.ahead = Ahead::Nothing;
        self.reinit_ready = None;
        let limits_asked = std::mem::take(&mut self.limits_asked);
        self.ensure_derivatives()?;
        self.timer.begin(Phase::Update as usize)?;
        let s = self.stream.clone();
        let n = self.state.n;
        let m = 3 * n;
        let m_i = m as i64;
        let spread = 2.0 * self.settings.nu * dt;
        self.next.ensure(&s, n)?;
        match self.history_dt {
            Some(h_dt) => {
                let r = dt / h_dt;
                let (a, b) = (1.0 + 0.5 * r, -0.5 * r);
                // SAFETY: vp_ab2(long long m, const double* y, const double* f,
                // const double* f_old, double dt, double a, double b, double* out): the
                // state's x/α, the derivatives at it, the history and next's x/α all hold
                // m = 3·n doubles; the grid covers m.
                launch!(s, &self.k.ab2, "vp_ab2", cfg(m);
                    &m_i, self.state.x.get(), self.eval.velocity.get(), self.history_u.get(),
                    &dt, &a, &b, self.next.x.get_mut())?;
                // SAFETY: as above, strengths and stretching.
                launch!(s, &self.k.ab2, "vp_ab2", cfg(m);
                    &m_i, self.state.alpha.get(), self.eval.stretching.get(),
                    self.history_s.get(), &dt, &a, &b, self.next.alpha.get_mut())?;
            }
            None => {
                // Heun: Euler predictor, derivatives there, trapezoidal corrector.
                self.pred.ensure(&s, n)?;
                // SAFETY: vp_euler(long long m, const double* y, const double* f, double dt,
                // double* out): the state's x, the velocity at it and pred's x hold 3·n doubles.
                launch!(s, &self.k.euler, "vp_euler", cfg(m);
                    &m_i, self.state.x.get(), self.eval.velocity.get(), &dt,
                    self.pred.x.get_mut())?;
                // SAFETY: as above, strengths and stretching.
                launch!(s, &self.k.euler, "vp_euler", cfg(m);
                    &m_i, self.state.alpha.get(), self.eval.stretching.get(), &dt,
                    self.pred.alpha.get_mut())?;
                self.spread_into(true, spread)?;
                self.pred.n = n;
                self.derivatives_at(At::Pred)?;
                self.timer.begin(Phase::Update as usize)?;
                // SAFETY: vp_heun(long long m, const double* y, const double* f,
                // const double* f2, double dt, double* out): all hold 3·n doubles.
                launch!(s, &self.k.heun, "vp_heun", cfg(m);
                    &m_i, self.state.x.get(), self.eval.velocity.get(),
                    self.eval_heun.velocity.get(), &dt, self.next.x.get_mut())?;
                // SAFETY: as above, strengths and stretching.
                launch!(s, &self.k.heun, "vp_heun", cfg(m);
                    &m_i, self.state.alpha.get(), self.eval.stretching.get(),
                    self.eval_heun.stretching.get(), &dt, self.next.alpha.get_mut())?;
            }
        }
        self.spread_into(false, spread)?;
        if let Boundary::Periodic { length } = self.boundary {
            // SAFETY: vp_wrap(long long m, double length, double* x): next's x holds 3·n
            // doubles; the grid covers m.
            launch!(s, &self.k.wrap, "vp_wrap", cfg(m); &m_i, &length, self.next.x.get_mut())?;
        }
        self.next.n = n;
        // σ spreads uniformly and monotonically, so its exact host mirror covers every core.
        if !self.next.sigma_max.is_finite() {
            return Err(VortexError::NonFinite);
        }
        self.clear_readback()?;
        self.queue_nonfinite()?;
        self.timer.end()?;
        let reinit_due = self.settings.reinit_due(self.steps_since_reinit + 1);
        let ahead = self.queue_ahead(limits_asked, reinit_due);
        let w = self.read_back(if matches!(ahead, Ok(Some(_))) { 3 } else { 1 })?;
        if w[Word::Flag as usize] != 0 {
            return Err(VortexError::NonFinite);
        }
        // The work ahead failed on a finite state: the step's error.
        let ahead_at = ahead?;
        let limits = Limits::of(&w);
        self.ahead = match (reinit_due, ahead_at) {
            (true, _) => Ahead::Reinit(ahead_at.map(|_| limits)),
            (false, Some(_)) => Ahead::Derivatives(limits),
            (false, None) => Ahead::Nothing,
        };
        Ok(())
    }

    /// Queues, before the prepared step's copy (module docs), the reinitialisation due after it
    /// (so the step's time includes it) and, when the limits were asked for, the derivatives and
    /// limits where the next step starts; returns that set (`None`: limits not asked for).
    fn queue_ahead(
        &mut self,
        limits_asked: bool,
        reinit_due: bool,
    ) -> Result<Option<At>, VortexError> {
        if reinit_due {
            self.build_reinit(At::Next)?;
        }
        let at = match (limits_asked, reinit_due) {
            (false, _) => return Ok(None),
            (true, false) => At::Next,
            (true, true) => At::Pred,
        };
        self.derivatives_at(at)?;
        self.queue_limits(at)?;
        Ok(Some(at))
    }

    /// Makes the prepared state current, the step's derivatives the AB2 history (and what was
    /// computed ahead current); returns whether a reinitialisation is due
    /// ([`VortexSettings::reinit_due`]).
    fn commit(&mut self, dt: f64) -> bool {
        std::mem::swap(&mut self.state, &mut self.next);
        std::mem::swap(&mut self.history_u, &mut self.eval.velocity);
        std::mem::swap(&mut self.history_s, &mut self.eval.stretching);
        self.history_dt = Some(dt);
        self.derivatives_current = false;
        self.limits = None;
        match std::mem::replace(&mut self.ahead, Ahead::Nothing) {
            Ahead::Nothing => {}
            Ahead::Derivatives(limits) => {
                std::mem::swap(&mut self.eval, &mut self.eval_heun);
                self.derivatives_current = true;
                self.limits = Some(limits);
            }
            Ahead::Reinit(limits) => self.reinit_ready = Some(limits),
        }
        self.host = None;
        self.steps_since_reinit += 1;
        self.settings.reinit_due(self.steps_since_reinit)
    }

    /// The n³ lattice nodes into `buf` (once per n: `ready` remembers), and σ0 into `sigma`.
    fn lattice_nodes_into(&mut self, to_grid: bool, n: usize) -> Result<(), VortexError> {
        let s = self.stream.clone();
        let (buf, ready) = if to_grid {
            (&mut self.grid_x, &mut self.grid_ready)
        } else {
            (&mut self.lattice_x, &mut self.lattice_ready)
        };
        if *ready == n {
            return Ok(());
        }
        let n3 = n * n * n;
        buf.ensure(&s, 3 * n3)?;
        let (n_i, h, zero, null) = (n as i32, TAU / n as f64, 0.0f64, 0u64);
        // SAFETY: vp_lattice(int n, double h, double sigma0, double* x, double* sigma): buf
        // holds 3·n³ doubles; sigma null (not written); the grid covers n³.
        launch!(s, &self.k.lattice, "vp_lattice", cfg(n3);
            &n_i, &h, &zero, buf.get_mut(), &null)?;
        *ready = n;
        Ok(())
    }

    /// Blob vorticity of the set `from` (the state, or the prepared state ahead of its commit)
    /// at the lattice nodes, the conditioned RBF solve on the device, particles at the nodes
    /// with σ0: the reinitialised set, built in `pred` (free between steps), all queued
    /// (docs/physics.md §3.3, §3.5).
    fn build_reinit(&mut self, from: At) -> Result<(), VortexError> {
        let n = self.settings.lattice_n;
        let n3 = n * n * n;
        // The lattice ω is sampled on: finer than n for the spectral solve.
        let m = self.settings.sampling_lattice();
        self.timer.begin(Phase::ReinitVorticity as usize)?;
        let s = self.stream.clone();
        let rbf = self.rbf.as_mut().expect("made when reinitialisation is on");
        let src = if let At::Next = from {
            &self.next
        } else {
            &self.state
        };
        // Spectral with one core: the band modes of the particles themselves by non-uniform
        // FFT (rbf_device.rs, docs/physics.md §3.7), no sampling lattice.
        let from_particles = self.settings.rbf == RbfSolver::Spectral && src.equal_cores;
        if from_particles {
            let blobs = DeviceBlobs {
                x: &src.x,
                alpha: &src.alpha,
                count: src.n,
                sigma: src.sigma_max,
            };
            rbf.queue_band_modes(blobs, n, self.settings.sigma0)?;
        }
        // Otherwise the evaluator's lattice method where it has one (GPU Ewald: separable
        // weights), else its pair sums at the nodes (made only then).
        let on_lattice = from_particles || {
            let src = if let At::Next = from {
                &self.next
            } else {
                &self.state
            };
            let dev = self
                .evaluator
                .device_form()
                .expect("checked at construction");
            dev.vorticity_on_lattice_device(&src.sources(), m, &mut self.omega)?
        };
        if !on_lattice {
            self.lattice_nodes_into(false, m)?;
            let src = if let At::Next = from {
                &self.next
            } else {
                &self.state
            };
            let targets = DeviceTargets::Points {
                x: &self.lattice_x,
                n: m * m * m,
            };
            vorticity_at(
                self.evaluator.as_mut(),
                &src.sources(),
                &targets,
                &mut self.omega,
            )?;
        }
        self.timer.begin(Phase::ReinitSolve as usize)?;
        let rbf = self.rbf.as_mut().expect("made when reinitialisation is on");
        // A report on the device not read yet is overwritten by this solve.
        self.conditioning_on_device = false;
        if from_particles {
            rbf.solve_band_modes(
                n,
                self.settings.sigma0,
                self.settings.conditioning,
                self.settings.zero_total_strength,
                &mut self.pred.alpha,
            )?;
        } else {
            rbf.solve(
                &self.omega,
                m,
                n,
                self.settings.sigma0,
                self.settings.rbf,
                self.settings.conditioning,
                self.settings.zero_total_strength,
                &mut self.pred.alpha,
            )?;
        }
        self.pred.x.ensure(&s, 3 * n3)?;
        self.pred.sigma.ensure(&s, n3)?;
        let (n_i, h, sigma0) = (n as i32, TAU / n as f64, self.settings.sigma0);
        // SAFETY: vp_lattice(int n, double h, double sigma0, double* x, double* sigma): pred's
        // x holds 3·n³ and σ n³ doubles (ensured above); the grid covers n³.
        launch!(s, &self.k.lattice, "vp_lattice", cfg(n3);
            &n_i, &h, &sigma0, self.pred.x.get_mut(), self.pred.sigma.get_mut())?;
        self.timer.end()?;
        self.pred.n = n3;
        self.pred.sigma_max = sigma0;
        self.pred.equal_cores = true;
        Ok(())
    }

    /// Makes the reinitialised set current: the one built ahead from the state just committed
    /// when there is one, else one built now from the state; restarts the AB2 history. A failure
    /// leaves the state as it was (and a checkpoint of it good).
    fn reinitialise(&mut self) -> Result<(), VortexError> {
        let limits = match self.reinit_ready.take() {
            Some(limits) => limits,
            None => {
                self.build_reinit(At::State)?;
                None
            }
        };
        std::mem::swap(&mut self.state, &mut self.pred);
        match limits {
            Some(l) => {
                std::mem::swap(&mut self.eval, &mut self.eval_heun);
                self.derivatives_current = true;
                self.limits = Some(l);
            }
            None => {
                self.derivatives_current = false;
                self.limits = None;
            }
        }
        self.ids = (0..self.state.n as u64).collect();
        self.history_dt = None;
        self.host = None;
        self.steps_since_reinit = 0;
        self.conditioning_on_device = true;
        Ok(())
    }

    /// The current state on the host (cached until the state changes).
    fn pull_particles(&mut self) -> Result<&ParticleSet, VortexError> {
        if self.host.is_none() {
            let n = self.state.n;
            let mut x = vec![0.0; 3 * n];
            let mut alpha = vec![0.0; 3 * n];
            let mut sigma = vec![0.0; n];
            self.download(|s| &s.state.x, &mut x, "particle positions")?;
            self.download(|s| &s.state.alpha, &mut alpha, "particle strengths")?;
            self.download(|s| &s.state.sigma, &mut sigma, "core radii")?;
            let v3 = |v: Vec<f64>| -> Vec<[f64; 3]> {
                v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()
            };
            self.host = Some(ParticleSet {
                x: v3(x),
                alpha: v3(alpha),
                sigma,
                id: self.ids.clone(),
            });
        }
        Ok(self.host.as_ref().expect("just pulled"))
    }

    /// The velocity at `nt` points on the device (the grid nodes when `grid`, else the probe
    /// points), pulled to the host.
    fn velocity_at_points(&mut self, grid: bool, nt: usize) -> Result<Vec<[f64; 3]>, VortexError> {
        self.evaluate_at_points(grid, nt)?;
        self.download3(|s| &s.grid_eval.velocity, nt, "velocities at points")
    }

    /// Queues the velocity at the first `nt` grid nodes (`grid`) or points on the device,
    /// into the first 3·nt values (node-major) of `grid_eval.velocity`.
    fn evaluate_at_points(&mut self, grid: bool, nt: usize) -> Result<(), VortexError> {
        let sources = self.state.sources();
        let t = DeviceTargets::Points {
            x: if grid { &self.grid_x } else { &self.points },
            n: nt,
        };
        let dev = self
            .evaluator
            .device_form()
            .expect("checked at construction");
        dev.evaluate_on_device(
            DeviceWork {
                sources: &sources,
                targets: &t,
                extra: &DeviceExtra::None,
            },
            &mut self.grid_eval,
        )?;
        Ok(())
    }

    fn download3(
        &mut self,
        which: fn(&Self) -> &DeviceBuffer<f64>,
        n: usize,
        what: &str,
    ) -> Result<Vec<[f64; 3]>, VortexError> {
        let mut v = vec![0.0; 3 * n];
        self.download(which, &mut v, what)?;
        Ok(v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
    }
}

impl ParticleStepper for ResidentStepper {
    fn describe(&self) -> String {
        format!("{} (particles resident on the GPU)", self.description)
    }

    fn settings(&self) -> &VortexSettings {
        &self.settings
    }

    fn device(&self) -> Device {
        self.device.clone()
    }

    /// As [`super::VortexSolver::stable_dt`]: Δt ≤ cfl·h/max|u_p| and Δt ≤ 0.2·cfl/max|ω_h(x_p)|,
    /// the maxima reduced on the device: those the previous step measured ahead (module docs),
    /// else measured now (one host wait). The next prepared step measures them ahead again.
    fn stable_dt(&mut self, cfl: f64) -> Result<f64, VortexError> {
        let h = TAU / self.settings.lattice_n as f64;
        self.limits_asked = true;
        let l = match self.limits {
            Some(l) => l,
            None => {
                let l = self.measure_limits()?;
                self.limits = Some(l);
                l
            }
        };
        // The device maxima propagate a NaN (its bits order above +∞).
        if !l.u_max.is_finite() || !l.omega_max.is_finite() {
            return Err(VortexError::NonFinite);
        }
        Ok(stable_step(cfl, h, l.u_max, l.omega_max))
    }

    fn prepare_step(&mut self, dt: f64) -> Result<(), VortexError> {
        self.pending = None;
        self.prepare(dt)?;
        self.pending = Some(dt);
        Ok(())
    }

    fn commit_step_deferring_reinit(&mut self) -> Result<bool, VortexError> {
        Ok(self.pending.take().is_some_and(|dt| self.commit(dt)))
    }

    fn reinitialise(&mut self) -> Result<(), VortexError> {
        ResidentStepper::reinitialise(self)
    }

    fn discard_step(&mut self) {
        self.pending = None;
        self.ahead = Ahead::Nothing;
    }

    fn particles(&mut self) -> Result<&ParticleSet, VortexError> {
        self.pull_particles()
    }

    /// Count, σ_max, Σα and the impulse ½Σ x × α, reduced on the device in a fixed order
    /// (per-block partial sums, added on the host in block order).
    fn summary(&mut self) -> Result<ParticleSummary, VortexError> {
        let s = self.stream.clone();
        let n = self.state.n;
        let blocks = n.div_ceil(THREADS as usize).max(1);
        self.partials.ensure(&s, 6 * blocks)?;
        let n_i = n as i64;
        // SAFETY: vp_summary(long long n, const double* x, const double* alpha,
        // double* partials): x and α hold 3·n doubles, partials 6 per block (ensured above);
        // blocks of 256 threads (VP_MAX_THREADS).
        launch!(s, &self.k.summary, "vp_summary", cfg(n);
            &n_i, self.state.x.get(), self.state.alpha.get(), self.partials.get_mut())?;
        let mut p = vec![0.0; 6 * blocks];
        self.download(|s| &s.partials, &mut p, "summary partial sums")?;
        let mut sums = [0.0; 6];
        for row in p.chunks_exact(6) {
            for (a, b) in sums.iter_mut().zip(row) {
                *a += b;
            }
        }
        Ok(ParticleSummary {
            count: n,
            sigma_max: self.state.sigma_max,
            total_strength: [sums[0], sums[1], sums[2]],
            impulse: [sums[3], sums[4], sums[5]],
        })
    }

    fn derivatives(&mut self) -> Result<HostDerivatives, VortexError> {
        self.ensure_derivatives()?;
        let n = self.state.n;
        let u = self.download3(|s| &s.eval.velocity, n, "velocities")?;
        let st = self.download3(|s| &s.eval.stretching, n, "stretching")?;
        Ok((u, st))
    }

    fn velocity_at(
        &mut self,
        targets: &[[f64; 3]],
        out: &mut Evaluation,
    ) -> Result<(), VortexError> {
        let nt = targets.len();
        self.upload(|s| &mut s.points, targets.as_flattened(), "probe points")?;
        out.velocity = self.velocity_at_points(false, nt)?;
        Ok(())
    }

    /// The velocity at the n³ grid nodes evaluated on the device, then the shared diagnostics
    /// reduced there ([`DeviceGridDiagnostics`]), all on the GPU's stream.
    fn grid_diagnostics(
        &mut self,
        n: usize,
        nu: f64,
    ) -> Result<Option<GridDiagnostics>, VortexError> {
        self.lattice_nodes_into(true, n)?;
        self.evaluate_at_points(true, n * n * n)?;
        let kmax = super::field::grid_kmax(n);
        if self.grid_diagnostics.as_ref().is_none_or(|d| d.0 != n) {
            self.grid_diagnostics = None;
            let gpu = self
                .device
                .gpu()
                .expect("the resident stepper runs on a GPU");
            let d = DeviceGridDiagnostics::new(gpu, n, kmax)?;
            self.grid_diagnostics = Some((n, d));
        }
        let (_, d) = self.grid_diagnostics.as_mut().expect("just made");
        Ok(Some(d.of_node_velocity(&self.grid_eval.velocity, nu)?))
    }

    /// The velocity at the n³ grid nodes evaluated on the device, then transformed on the host
    /// ([`super::field::modes_from_node_velocities`]).
    fn velocity_modes_on_grid(
        &mut self,
        n: usize,
    ) -> Result<(ModeLayout, VectorModes), VortexError> {
        self.lattice_nodes_into(true, n)?;
        let u = self.velocity_at_points(true, n * n * n)?;
        Ok(super::field::modes_from_node_velocities(n, &u))
    }

    fn state_arrays(&mut self) -> Result<(Vec<NamedArray>, VortexClock), VortexError> {
        let n = self.state.n;
        let p = self.pull_particles()?.clone();
        let history = match self.history_dt {
            Some(_) => {
                let mut u = vec![0.0; 3 * n];
                let mut st = vec![0.0; 3 * n];
                self.download(|s| &s.history_u, &mut u, "AB2 history")?;
                self.download(|s| &s.history_s, &mut st, "AB2 history")?;
                Some((u, st))
            }
            None => None,
        };
        Ok(super::checkpoint_arrays(
            &p,
            history,
            VortexClock {
                history_dt: self.history_dt,
                steps_since_reinit: self.steps_since_reinit,
            },
        ))
    }

    fn restore_state(
        &mut self,
        get: &dyn Fn(&str) -> Option<Vec<f64>>,
        clock: VortexClock,
    ) -> Result<(), String> {
        let (p, history) = super::parse_checkpoint(get, clock)?;
        self.upload_particles(&p).map_err(|e| e.to_string())?;
        if let Some((u, st)) = history {
            self.upload(|s| &mut s.history_u, u.as_flattened(), "AB2 history")
                .map_err(|e| e.to_string())?;
            self.upload(|s| &mut s.history_s, st.as_flattened(), "AB2 history")
                .map_err(|e| e.to_string())?;
        }
        self.history_dt = clock.history_dt;
        self.steps_since_reinit = clock.steps_since_reinit;
        self.pending = None;
        self.host = Some(p);
        Ok(())
    }

    /// Device time of the phases since the last call (events on the stream; waits for the
    /// phases still running, which a run's step never leaves).
    fn take_timings(&mut self) -> PhaseTimes {
        match self.timer.take() {
            Ok(t) => PhaseTimes {
                evaluation: t[Phase::Evaluation as usize],
                update: t[Phase::Update as usize],
                reinit_vorticity: t[Phase::ReinitVorticity as usize],
                reinit_solve: t[Phase::ReinitSolve as usize],
            },
            Err(e) => {
                tracing::warn!("GPU phase timings could not be read: {e}");
                PhaseTimes::default()
            }
        }
    }

    fn last_solve(&self) -> Option<SolveReport> {
        self.last_solve
    }

    fn take_accuracy_checks(&mut self) -> Vec<crate::summation::fmm::AccuracyCheck> {
        self.evaluator.take_accuracy_checks()
    }

    fn transfer_bytes(&self) -> Option<TransferBytes> {
        Some(self.transfers)
    }
}
