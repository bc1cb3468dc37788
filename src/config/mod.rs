//! Case files: what to simulate, read from TOML.
//!
//! A case file describes one run: the fluid ([`Flow`]), the initial field ([`InitialCondition`]),
//! the time span and step ([`TimeControl`]), what to write and when ([`OutputControl`],
//! [`CheckpointControl`]), the pseudo-spectral reference grid ([`SpectralConfig`]) and,
//! optionally, the vortex particle solver ([`VortexConfig`]). `cases/README.md` documents every
//! key.
//!
//! Parsing is strict: unknown keys, wrong types and values out of range are rejected with a
//! message that names the file, the line, the dotted key and what is allowed. The case files
//! under `cases/` are embedded in the binary at build time ([`named_cases`]), so `vpm run quick`
//! works from any directory; [`resolve_case`] turns a command-line CASE argument into a [`Case`].
//! [`compare`] says which keys a resumed run may change.

pub mod compare;
mod parse;
mod write;

// Physics owns its enums; the case file parses into them (re-exported here for convenience).
pub use crate::device::DeviceRequest;
pub use crate::init::particles::CoaxialRing;
pub use crate::output::FieldPrecision;
pub use crate::spectral::Dealias;
pub use crate::summation::EvaluatorKind;
pub use crate::vortex::reinit::{LatticeConditioning, LatticeFilter};
pub use crate::vortex::RbfSolver;

use std::path::Path;

use serde::Serialize;

/// One simulation case, validated, with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Key `name`; defaults to the file stem (or the named case's name).
    pub name: String,
    /// Key `description`; defaults to "".
    pub description: String,
    /// Key `device`: where the run's solvers run unless a section overrides it; default
    /// `"auto"`.
    pub device: DeviceRequest,
    /// Section `[flow]`.
    pub flow: Flow,
    /// Section `[initial]`.
    pub initial: InitialCondition,
    /// Section `[time]`.
    pub time: TimeControl,
    /// Section `[output]`.
    pub output: OutputControl,
    /// Section `[checkpoint]`.
    pub checkpoint: CheckpointControl,
    /// Section `[spectral]`: required for field-defined flows, absent (`None`) for
    /// particle-defined ones ([`InitialCondition::is_particle_defined`]).
    pub spectral: Option<SpectralConfig>,
    /// Section `[vortex]` (optional for field-defined flows, required for particle-defined
    /// ones): the vortex particle solver; `None` when the section is absent.
    pub vortex: Option<VortexConfig>,
    /// `[units]` of a gravity case (`None`: N-body units).
    pub units: Option<crate::gravity::units::Units>,
    /// `[gravity]`: present exactly for gravity cases (a gravity `initial.kind`).
    pub gravity: Option<crate::gravity::cases::GravityConfig>,
}

/// Section `[flow]`: the fluid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flow {
    /// Kinematic viscosity (box [-π, π]³, velocity units of the initial field); finite, ≥ 0.
    pub nu: f64,
}

/// Section `[initial]`: the initial velocity field, chosen by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum InitialCondition {
    /// `kind = "taylor-green"`: u = A sin x cos y cos z, v = −A cos x sin y cos z, w = 0.
    TaylorGreen {
        /// `amplitude` A; finite, > 0; default 1.
        amplitude: f64,
    },
    /// `kind = "isotropic"`: solenoidal random field with E(k) ∝ k⁴ exp(−2k²/kp²).
    Isotropic {
        /// `kp`, the wavenumber of the spectrum's peak; finite, > 0; required.
        kp: f64,
        /// `u0`, the rms velocity per component (K = 3/2 u0²); finite, > 0; required.
        u0: f64,
        /// `seed` of the random phases; default 1.
        seed: u64,
        /// `k_cut`, band limit (integer-wavenumber units); finite, ≥ 1; default 3·kp.
        k_cut: f64,
    },
    /// `kind = "shear-wave"`: u = A â sin(k·x), one Fourier mode, â ⟂ k.
    ShearWave {
        /// `wavevector` k (integer components), not all zero; required.
        wavevector: [i64; 3],
        /// `amplitude` A; finite, > 0; default 1.
        amplitude: f64,
        /// `polarisation` â: unit vector ⟂ k (stored normalised).
        polarisation: [f64; 3],
    },
    /// `kind = "vortex-ring"`: a vortex ring in free space, defined by its vorticity and carried
    /// by particles only (no spectral reference). Axis z, centre at the origin, moving towards
    /// +z; a Gaussian core of standard deviation `core` resolved by the particles of `[vortex]`
    /// (spacing h = 2π/n, blob radius overlap·h < core).
    VortexRing {
        /// `radius` R; finite, > 0; required.
        radius: f64,
        /// `circulation` Γ; finite, ≠ 0; required.
        circulation: f64,
        /// `core` σ: standard deviation of the Gaussian core the particles represent; finite,
        /// 0 < core < radius/2; required.
        core: f64,
    },
    /// `kind = "coaxial-rings"`: vortex rings about the z axis in free space (leapfrogging
    /// rings), each sampled like `vortex-ring` and centred at (0, 0, z); particles only. The
    /// particles are ring after ring, in the order of `rings` (the per-ring diagnostics of
    /// `vortex/rings.csv` rely on it).
    CoaxialRings {
        /// `rings`: an array of tables `{ radius, z, circulation, core }` (one or more; each
        /// like `vortex-ring`'s keys, `z` the axial position of its plane, default 0), no two
        /// cores closer than the sum of their `core`s.
        rings: Vec<CoaxialRing>,
    },
    /// `kind = "vortex-tube"`: a straight vortex tube along z through the periodic box, axis
    /// x = y = 0, Gaussian core `core`, particles only (the Lamb–Oseen check of docs/physics.md §7).
    VortexTube {
        /// `circulation` Γ; finite, ≠ 0; required.
        circulation: f64,
        /// `core` σ0: standard deviation of the Gaussian core at t = 0; finite, 0 < core ≤ 1;
        /// required.
        core: f64,
    },
    /// A gravity kind (`kepler`, `plummer`, `cold-collapse`, `galaxy`, `galaxy-collision`,
    /// `bodies`): bodies, run by the gravity model (written by [`Case`]'s serializer, which
    /// writes the [`crate::gravity::cases::BodyInitial`] with its own `kind`).
    #[serde(skip)]
    Bodies(crate::gravity::cases::BodyInitial),
}

impl InitialCondition {
    /// True for flows defined by particles (vortex ring, tube): they run the particle solver
    /// only, with no `[spectral]` reference.
    pub fn is_particle_defined(&self) -> bool {
        matches!(
            self,
            InitialCondition::VortexRing { .. }
                | InitialCondition::CoaxialRings { .. }
                | InitialCondition::VortexTube { .. }
        )
    }

    /// True for gravity cases (bodies, run by the gravity model).
    pub fn is_gravity(&self) -> bool {
        matches!(self, InitialCondition::Bodies(_))
    }

    /// True for the flows in free space (rings); the others live in the periodic box.
    pub fn is_free_space(&self) -> bool {
        matches!(
            self,
            InitialCondition::VortexRing { .. } | InitialCondition::CoaxialRings { .. }
        )
    }

    /// The smallest ring core of a free-space flow and its dotted key (`initial.core`,
    /// `initial.rings[k].core`, k from 1); `None` for the other kinds.
    pub fn smallest_ring_core(&self) -> Option<(f64, String)> {
        match self {
            InitialCondition::VortexRing { core, .. } => Some((*core, "initial.core".into())),
            InitialCondition::CoaxialRings { rings } => rings
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.core.total_cmp(&b.1.core))
                .map(|(k, r)| (r.core, format!("initial.rings[{}].core", k + 1))),
            _ => None,
        }
    }

    /// The TOML spelling of `kind`.
    pub fn kind_str(&self) -> &'static str {
        match self {
            InitialCondition::TaylorGreen { .. } => "taylor-green",
            InitialCondition::Isotropic { .. } => "isotropic",
            InitialCondition::ShearWave { .. } => "shear-wave",
            InitialCondition::VortexRing { .. } => "vortex-ring",
            InitialCondition::CoaxialRings { .. } => "coaxial-rings",
            InitialCondition::VortexTube { .. } => "vortex-tube",
            InitialCondition::Bodies(b) => b.kind_str(),
        }
    }
}

/// Section `[time]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeControl {
    /// `t_end`: final time; finite, > 0; required.
    pub t_end: f64,
    /// Fixed (`dt`) or adaptive (`cfl`) step.
    #[serde(flatten)]
    pub step: TimeStep,
    /// `max_steps`: the run stops with an error after this many steps; `None`: no limit
    /// (a fixed-Δt case with more than [`TimeControl::MAX_FIXED_STEPS`] steps is refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
}

impl TimeControl {
    /// The most steps a fixed-Δt case may take.
    pub const MAX_FIXED_STEPS: f64 = 1e9;
}

/// The time step: exactly one of `dt` and `cfl` is given in `[time]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum TimeStep {
    /// `dt`: fixed step, > 0 and ≤ t_end.
    Fixed {
        /// Step size.
        dt: f64,
    },
    /// `cfl`: adaptive step from a CFL number in (0, 2.5], optionally capped by `dt_max` > 0.
    Cfl {
        /// CFL number.
        cfl: f64,
        /// Upper bound on the step.
        #[serde(skip_serializing_if = "Option::is_none")]
        dt_max: Option<f64>,
    },
}

/// How often something happens: `every_steps = N` (≥ 1) or `every_time = T` (> 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Cadence {
    /// Every N steps.
    #[serde(rename = "every_steps")]
    Steps(u64),
    /// Every T units of simulated time.
    #[serde(rename = "every_time")]
    Time(f64),
}

/// Section `[output]`: diagnostics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputControl {
    /// How often scalar diagnostics are written; default every step.
    #[serde(flatten)]
    pub cadence: Cadence,
    /// Times at which spectra are written: within [0, t_end], sorted, no duplicates;
    /// default [0, t_end].
    pub spectra_times: Vec<f64>,
    /// Times at which velocity, vorticity and Q are written on the grid (`fields/`) and drawn
    /// (`structures-*.png`, `vorticity-*.png`): within [0, t_end], sorted, no duplicates;
    /// default none.
    pub fields_times: Vec<f64>,
    /// The fields keep every s-th node of the spectral grid; s divides `spectral.n`; default 1.
    pub fields_stride: usize,
    /// Floating-point type of the written fields; default f32.
    pub fields_precision: FieldPrecision,
    /// The isosurface level c of the structures pictures, Q = c·Q_rms of the spectral field;
    /// default [`postprocess::DEFAULT_Q_LEVEL`].
    pub structures_level: f64,
}

/// Section `[checkpoint]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointControl {
    /// How often a checkpoint is written; default every t_end/10.
    #[serde(flatten)]
    pub cadence: Cadence,
    /// How many checkpoints are kept (older ones are deleted); ≥ 1; default 2.
    pub keep: usize,
}

/// Section `[spectral]`: the pseudo-spectral reference solver.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpectralConfig {
    /// Grid points per dimension: even, 8 ≤ n ≤ 2048; required.
    pub n: usize,
    /// Dealiasing rule; default 3/2.
    #[serde(serialize_with = "write::display")]
    pub dealias: Dealias,
    /// `device`: where the spectral solver runs, overriding the run's `device`; `None` (the
    /// default): the run's.
    #[serde(
        serialize_with = "write::display_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub device: Option<DeviceRequest>,
}

/// Section `[vortex]`: the vortex particle solver (docs/physics.md §2–3). It steps with the `[time]`
/// step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VortexConfig {
    /// `n`: particles per dimension; they start at the nodes of the n³ lattice on [-π, π)³,
    /// spacing h = 2π/n. Even, 8 ≤ n ≤ 512; default `spectral.n`.
    pub n: usize,
    /// `overlap`: core radius over lattice spacing, σ0 = overlap · h; in (0, 3]; default 1.
    pub overlap: f64,
    /// `stretching`: `"classical"` (default) or `"transposed"`.
    #[serde(serialize_with = "write::stretching")]
    pub stretching: crate::kernel::StretchingScheme,
    /// `reinit_every`: steps between RBF reinitialisations, ≥ 1 (default 10); `None` for
    /// `"never"`.
    #[serde(serialize_with = "write::reinit_every")]
    pub reinit_every: Option<u64>,
    /// `rbf`, `rbf_tolerance`, `rbf_max_iterations`: how reinitialisation solves for the
    /// strengths; default conjugate gradients to 1e-8 in at most 200 iterations.
    #[serde(flatten, serialize_with = "write::rbf_keys")]
    pub rbf: RbfSolver,
    /// `reinit_projection` (`"solenoidal"` or `"none"`) and `reinit_filter` (`"exponential"` or
    /// `"none"`): what reinitialisation, and the initial strengths' solve, do to the lattice
    /// vorticity before solving (docs/physics.md §3); see [`crate::vortex::reinit`].
    #[serde(flatten, serialize_with = "write::conditioning_keys")]
    pub conditioning: LatticeConditioning,
    /// `evaluator`: the Biot–Savart summation; in the periodic box `"auto"` (the default: the
    /// planner picks the cheaper of Ewald and the FMM on the run's device), `"ewald"` or
    /// `"fmm"` (CPU or GPU); in free space `"direct"` (the default), `"fmm"` or `"auto"` (direct).
    #[serde(serialize_with = "write::display")]
    pub evaluator: EvaluatorKind,
    /// `accuracy`: requested relative accuracy of the Ewald or FMM evaluator; in [1e-12, 1e-2]
    /// (≥ 1e-10 with `"fmm"`; a GPU's FMM is planned down to 5e-5 and refuses finer, the GPU's Ewald 1e-5); default 1e-4
    /// ([`VortexConfig::DEFAULT_ACCURACY`], docs/physics.md §4.4).
    pub accuracy: f64,
    /// `accuracy_check_every`: with `evaluator = "fmm"` (or `"auto"`, used if it picks the
    /// FMM), evaluations between the FMM's built-in
    /// checks against the direct sum (0: only at the first evaluation; the FMM also checks
    /// whenever the largest core has grown); default 100. `None` for the other evaluators, where
    /// the key is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy_check_every: Option<u64>,
    /// `device` (alias `backend`): where the particle solver runs, overriding the run's
    /// `device`; `None` (the default): the run's.
    #[serde(
        serialize_with = "write::display_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub device: Option<DeviceRequest>,
    /// `snapshot_every_steps` / `snapshot_every_time`: how often the particles are written;
    /// `None` (the default): never.
    #[serde(flatten, serialize_with = "write::snapshot_keys")]
    pub snapshots: Option<Cadence>,
    /// `dissipation_every`: K of the particle field is measured just before and just after
    /// every this many reinitialisations (docs/physics.md §3.6); ≥ 1; default
    /// [`VortexConfig::default_dissipation_every`]. `None` for the particle-defined flows,
    /// which have no spectral grid to measure on (the key is refused there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dissipation_every: Option<u64>,
}

impl VortexConfig {
    /// Default `overlap`.
    pub const DEFAULT_OVERLAP: f64 = 0.75;
    /// Default `reinit_every`.
    pub const DEFAULT_REINIT_EVERY: u64 = 10;
    /// Default `accuracy` (every evaluator that takes one, the FMM on the CPU included): a
    /// hundred times below the method's own error (docs/physics.md §4.4), and above the GPU
    /// evaluators' f32 floors.
    pub const DEFAULT_ACCURACY: f64 = 1e-4;
    /// The steps the default `dissipation_every` spans at least: a measurement costs at most
    /// three evaluations of the particle velocity at the grid's nodes, each less than a step's
    /// evaluation at the particles, so one every 50 steps costs a few per cent of a run.
    pub const DISSIPATION_STEPS: u64 = 50;

    /// Default `dissipation_every` for a reinitialisation every `reinit_every` steps: the
    /// fewest reinitialisations that span [`VortexConfig::DISSIPATION_STEPS`] steps (10 for
    /// `reinit_every = 5`); 1 without reinitialisation (nothing to measure).
    pub fn default_dissipation_every(reinit_every: Option<u64>) -> u64 {
        reinit_every.map_or(1, |r| Self::DISSIPATION_STEPS.div_ceil(r.max(1)))
    }

    /// Default `accuracy_check_every` (with `evaluator = "fmm"`).
    pub const DEFAULT_ACCURACY_CHECK_EVERY: u64 = crate::summation::planner::DEFAULT_CHECK_EVERY;
    /// Default `reinit_projection` and `reinit_filter`.
    pub const DEFAULT_CONDITIONING: LatticeConditioning = LatticeConditioning {
        solenoidal: true,
        filter: LatticeFilter::None,
    };

    /// The settings of an empty `[vortex]` section on an n³ lattice (n = `spectral.n` in a case
    /// file): every other key at its default.
    pub fn with_defaults(n: usize) -> VortexConfig {
        VortexConfig {
            n,
            overlap: Self::DEFAULT_OVERLAP,
            stretching: crate::kernel::StretchingScheme::Classical,
            reinit_every: Some(Self::DEFAULT_REINIT_EVERY),
            rbf: RbfSolver::DEFAULT,
            conditioning: Self::DEFAULT_CONDITIONING,
            evaluator: EvaluatorKind::Auto,
            accuracy: Self::DEFAULT_ACCURACY,
            accuracy_check_every: None,
            device: None,
            snapshots: None,
            dissipation_every: Some(Self::default_dissipation_every(Some(
                Self::DEFAULT_REINIT_EVERY,
            ))),
        }
    }

    /// Lattice spacing h = 2π/n.
    pub fn spacing(&self) -> f64 {
        std::f64::consts::TAU / self.n as f64
    }

    /// Initial (and post-reinitialisation) core radius σ0 = overlap · h.
    pub fn sigma0(&self) -> f64 {
        self.overlap * self.spacing()
    }

    /// The reinitialisation lattices (n, m): the particle lattice n and the lattice m the blob
    /// vorticity is sampled on (finer for `rbf = "spectral"`); `None` when never reinitialised.
    pub fn reinit_lattices(&self) -> Option<(usize, usize)> {
        self.reinit_every?;
        let m = match self.rbf {
            RbfSolver::Spectral => crate::vortex::reinit::sampling_lattice(self.n),
            _ => self.n,
        };
        Some((self.n, m))
    }

    /// What the summation planner is given: the accuracy and the FMM's check cadence.
    pub fn evaluator_options(&self) -> crate::summation::planner::EvaluatorOptions {
        crate::summation::planner::EvaluatorOptions {
            accuracy: self.accuracy,
            check_every: self
                .accuracy_check_every
                .unwrap_or(Self::DEFAULT_ACCURACY_CHECK_EVERY),
        }
    }
}

/// The TOML spelling of a stretching scheme (`vortex.stretching`).
fn stretching_str(scheme: crate::kernel::StretchingScheme) -> &'static str {
    match scheme {
        crate::kernel::StretchingScheme::Classical => "classical",
        crate::kernel::StretchingScheme::Transposed => "transposed",
    }
}

/// Why a case could not be read. `Display` gives the full message, starting with the file
/// (and line, where there is one).
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The file could not be read.
    #[error("{path}: cannot read case file: {error}")]
    Io {
        /// The file as given.
        path: String,
        /// The I/O error (part of the message, so not also chained as a source).
        error: std::io::Error,
    },
    /// The text is not valid TOML.
    #[error("{origin}:{line}:{column}: TOML syntax error: {message}")]
    Syntax {
        /// File name used in messages.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Valid TOML, but not a valid case: unknown key, wrong type, value out of range, missing
    /// key, or keys that contradict each other.
    #[error("{origin}{}: {message}", fmt_line(.line))]
    Invalid {
        /// File name used in messages.
        origin: String,
        /// 1-based line of the offending key (or of its section, for a missing key), if any.
        line: Option<usize>,
        /// Dotted key, e.g. `spectral.n` (a section name such as `time` for section-wide
        /// problems).
        key: String,
        /// What is wrong and what is allowed (includes the key).
        message: String,
    },
    /// The CASE argument is neither a file nor a named case.
    #[error(
        "unknown case `{name}`: no such file and no named case of that name; named cases: {}; \
         or give the path of a .toml case file",
        .available.join(", ")
    )]
    UnknownCase {
        /// The argument as given.
        name: String,
        /// The named cases built into the binary.
        available: Vec<String>,
    },
}

fn fmt_line(line: &Option<usize>) -> String {
    match line {
        Some(l) => format!(":{l}"),
        None => String::new(),
    }
}

impl CaseError {
    /// The 1-based line the error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            CaseError::Syntax { line, .. } => Some(*line),
            CaseError::Invalid { line, .. } => *line,
            _ => None,
        }
    }

    /// The dotted key the error is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            CaseError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}

impl Case {
    /// Parse and validate case text. `origin` is the file name used in messages
    /// (e.g. `cases/quick.toml` or `<named case quick>`); the default `name` is its stem
    /// (for `<named case X>`, X).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Case, CaseError> {
        parse::parse_case(text, origin, &default_name(origin))
    }

    /// Read, parse and validate a case file; errors (I/O included) name the file.
    pub fn from_file(path: &Path) -> Result<Case, CaseError> {
        read_case_file(path).map(|(case, _)| case)
    }

    /// Check a case built in code against the same rules as a case file
    /// (through [`Case::to_toml_string`] and back).
    pub fn validate(&self) -> Result<(), CaseError> {
        let origin = format!("<case {}>", self.name);
        parse::parse_case(&self.to_toml_string(), &origin, &self.name).map(|_| ())
    }

    /// Makes every solver of the case run on `device` (`--device`): the run's `device`, with
    /// the sections' own `device` keys cleared.
    pub fn set_device(&mut self, device: DeviceRequest) {
        self.device = device;
        if let Some(s) = self.spectral.as_mut() {
            s.device = None;
        }
        if let Some(v) = self.vortex.as_mut() {
            v.device = None;
        }
    }

    /// The resolved case as TOML: every key written with its value, defaults filled in
    /// (through `Serialize` and `toml`), after two comment lines.
    /// [`Case::from_toml_str`] parses it back to an equal `Case` (floats round-trip exactly).
    pub fn to_toml_string(&self) -> String {
        write::to_toml_string(self)
    }
}

/// The default `name` for a case read from `origin`: the file stem, or X for
/// `<named case X>`.
fn default_name(origin: &str) -> String {
    if let Some(inner) = origin
        .strip_prefix("<named case ")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return inner.to_string();
    }
    Path::new(origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty() && !s.starts_with('<'))
        .unwrap_or_else(|| "case".to_string())
}

fn read_case_file(path: &Path) -> Result<(Case, String), CaseError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| CaseError::Io {
        path: origin.clone(),
        error,
    })?;
    let case = Case::from_toml_str(&text, &origin)?;
    Ok((case, text))
}

/// A case file from `cases/`, embedded in the binary at build time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedCase {
    /// The file stem, e.g. `quick`.
    pub name: &'static str,
    /// The file's first comment paragraph (up to an empty comment line), without the `#`s,
    /// in one line.
    pub summary: &'static str,
    /// The file's text.
    pub text: &'static str,
}

impl NamedCase {
    /// Parse and validate this case (origin `<named case NAME>` in messages).
    pub fn parse(&self) -> Result<Case, CaseError> {
        parse::parse_case(self.text, &format!("<named case {}>", self.name), self.name)
    }
}

// Generated by build.rs from cases/*.toml: `static NAMED_CASES: &[NamedCase] = &[...];`,
// sorted by name.
include!(concat!(env!("OUT_DIR"), "/named_cases.rs"));

/// The named cases (the files `cases/*.toml` at build time), sorted by name.
pub fn named_cases() -> &'static [NamedCase] {
    NAMED_CASES
}

/// The named case called `name`, if there is one.
pub fn named_case(name: &str) -> Option<&'static NamedCase> {
    NAMED_CASES.iter().find(|c| c.name == name)
}

/// Resolve the CASE argument of the command line. If it names an existing file, contains a
/// path separator or ends in `.toml`, the file is read; otherwise it is looked up among the
/// named cases; otherwise the error lists the named cases. Returns the case and its source text.
pub fn resolve_case(arg: &str) -> Result<(Case, String), CaseError> {
    let path = Path::new(arg);
    let looks_like_path =
        arg.contains('/') || arg.contains(std::path::MAIN_SEPARATOR) || arg.ends_with(".toml");
    if looks_like_path || path.is_file() {
        return read_case_file(path);
    }
    if let Some(named) = named_case(arg) {
        return Ok((named.parse()?, named.text.to_string()));
    }
    Err(CaseError::UnknownCase {
        name: arg.to_string(),
        available: NAMED_CASES.iter().map(|c| c.name.to_string()).collect(),
    })
}

/// How far in wavenumber a field-defined initial condition reaches: a grid that keeps
/// |k_i| ≤ K holds it when K ≥ `kmax`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reach {
    /// The largest |k_i| of the field's modes.
    pub kmax: usize,
    /// The wavenumber as the case gives it (`k_cut` may have a fraction).
    pub wavenumber: f64,
    /// The key of `[initial]` that sets it (`kind`, `wavevector` or `k_cut`).
    pub key: &'static str,
}

impl InitialCondition {
    /// The [`Reach`] of an initial condition; `None` for the particle-defined flows.
    pub fn reach(&self) -> Option<Reach> {
        match *self {
            InitialCondition::TaylorGreen { .. } => Some(Reach {
                kmax: 1,
                wavenumber: 1.0,
                key: "kind",
            }),
            InitialCondition::ShearWave { wavevector, .. } => {
                let kmax = wavevector
                    .iter()
                    .map(|k| k.unsigned_abs())
                    .max()
                    .unwrap_or(0) as usize;
                Some(Reach {
                    kmax,
                    wavenumber: kmax as f64,
                    key: "wavevector",
                })
            }
            // Modes with |k| ≤ k_cut: their components reach ⌊k_cut⌋.
            InitialCondition::Isotropic { k_cut, .. } => Some(Reach {
                kmax: k_cut.floor() as usize,
                wavenumber: k_cut,
                key: "k_cut",
            }),
            InitialCondition::VortexRing { .. }
            | InitialCondition::CoaxialRings { .. }
            | InitialCondition::VortexTube { .. }
            | InitialCondition::Bodies(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_round_trip() {
        let mut xs = vec![
            0.0,
            -0.0,
            1.0,
            0.1,
            0.02,
            1.0 / 3.0,
            1e-7,
            6.02e23,
            1e300,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            std::f64::consts::PI,
            -2.5,
        ];
        // xorshift: finite values of every exponent, subnormals included.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..5000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f64::from_bits(state);
            if x.is_finite() {
                xs.push(x);
            }
        }
        for x in xs {
            let text = toml::to_string(&Flow { nu: x }).unwrap();
            let table: toml::Table = text.parse().unwrap();
            let y = table["nu"].as_float().unwrap();
            assert_eq!(x.to_bits(), y.to_bits(), "{text}");
        }
    }

    #[test]
    fn default_names() {
        let origins = ["cases/quick.toml", "<named case hit-64>", "<string>", ""];
        assert_eq!(
            origins.map(default_name),
            ["quick", "hit-64", "case", "case"]
        );
    }

    #[test]
    fn named_cases_sorted_and_parse() {
        let cases = named_cases();
        assert!(cases.windows(2).all(|w| w[0].name < w[1].name));
        assert!(named_case("quick").is_some());
        for c in cases {
            let case = c.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(case.name, c.name);
            assert!(!c.summary.is_empty() && !c.summary.starts_with('#'));
        }
    }

    #[test]
    fn polarisation_normalisation_is_idempotent() {
        // xorshift: deterministic pseudo-random vectors of all scales.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for i in 0..20_000 {
            let scale = 10f64.powi(i % 41 - 20);
            let a = [next() * scale, next() * scale, next() * scale];
            let Some(b) = parse::normalise(a) else {
                continue;
            };
            let c = parse::normalise(b).unwrap();
            assert_eq!(b, c, "{a:?}");
            let n2: f64 = b.iter().map(|x| x * x).sum();
            assert!((n2 - 1.0).abs() < 1e-15);
        }
    }
}
