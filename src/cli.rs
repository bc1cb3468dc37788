//! Command-line interface: `vpm run`, `resume`, `check`, `cases`, `plot`, `bench`, `verify`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Vortex particle method for turbulence, checked against a pseudo-spectral solver.
///
/// `vpm --version` prints the package version and the commit built (`VPM_VERSION`, set by
/// build.rs), e.g. `vpm 0.1.0 (commit c1eb1a3f0e2d)`.
#[derive(Debug, Parser)]
#[command(
    name = "vpm",
    version = env!("VPM_VERSION"),
    about,
    propagate_version = true
)]
pub struct Cli {
    /// Print only errors (no progress, no summary).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print more detail (repeat for debug output).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a case: a named case (see `vpm cases`) or the path of a case file.
    Run(RunArgs),
    /// Continue a run that was stopped or killed, from its latest checkpoint (from t = 0 when it
    /// stopped before its first), or extend a finished one with --t-end.
    Resume(ResumeArgs),
    /// Validate a case and print it resolved, with its memory and a rough time estimate.
    Check(CheckArgs),
    /// List the named cases, one line each.
    Cases,
    /// Redraw energy.png and spectrum.png of a run directory from its CSV files.
    Plot {
        /// The run directory.
        run_dir: PathBuf,
    },
    /// Benchmarks; each prints a table, states the hardware and can write JSON.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Checks of one method against another on a case's particles.
    #[command(subcommand)]
    Verify(VerifyCommand),
    /// One rank of a run on several GPUs, started by `vpm run` itself (one process per GPU;
    /// the join message and the commands come on stdin as JSON lines).
    #[command(hide = true)]
    Rank,
}

#[derive(Debug, Subcommand)]
pub enum VerifyCommand {
    /// Evaluates a periodic case's initial particles by both periodic far fields (Ewald and
    /// the periodic FMM, at the case's accuracy) on a sample of targets and prints their
    /// relative L2 and maximum differences per quantity; exits non-zero when an L2 difference
    /// exceeds 3 × the accuracy. A free-space case is refused.
    Periodic(VerifyPeriodicArgs),
}

#[derive(Debug, Args)]
pub struct VerifyPeriodicArgs {
    /// A named case or the path of a case file (TOML), in the periodic box with [vortex].
    pub case: String,
    /// Targets sampled from the particles (all sources are summed).
    #[arg(long, default_value_t = 1000)]
    pub sample: usize,
    /// Requested relative accuracy of both methods (default: the case's `vortex.accuracy`).
    #[arg(long)]
    pub accuracy: Option<f64>,
    /// Where the Ewald sum runs: `cpu` (the default), `cuda`, `cuda:N` or `auto`; the periodic
    /// FMM runs there too on a GPU when the accuracy is within its floor (5e-5), else on the CPU.
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    pub device: crate::device::DeviceRequest,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A named case or the path of a case file (TOML).
    pub case: String,
    /// Run directory (default: runs/<case>-<UTC time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Reuse a non-empty run directory, replacing vpm's outputs in it.
    #[arg(long)]
    pub force: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where the run's solvers run, overriding the case's `device` (`--backend` is the older
    /// name): `auto` (a GPU when one is usable), `cpu`, `cuda` or `cuda:N` (an error without
    /// that GPU), or `cuda:all` / `cuda:0,1,…`: the spectral solver across several GPUs, one
    /// process per GPU (a compare case's particles on the first GPU).
    #[arg(long, alias = "backend", value_name = "DEVICE")]
    pub device: Option<crate::device::DeviceRequest>,
    #[command(flatten)]
    pub testing: TestingArgs,
}

/// Testing aids of `vpm run` and `vpm resume` (hidden from `--help`): stops and failures at
/// chosen points, for the tests that a run stopped anywhere resumes to the same bytes.
#[derive(Debug, Args)]
pub struct TestingArgs {
    /// Stop abruptly after this many steps, as if the process were killed.
    #[arg(long, hide = true)]
    pub abort_after_steps: Option<u64>,
    /// Send this process SIGINT as its N-th step begins (the step finishes, as with a Ctrl-C
    /// during it).
    #[arg(long, hide = true, value_name = "N")]
    pub signal_in_step: Option<u64>,
    /// Make every write of a file of this name (e.g. `final.npz`) fail as on a full disk.
    #[arg(long, hide = true, value_name = "NAME")]
    pub fail_write: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A named case or the path of a case file (TOML).
    pub case: String,
    /// Threads the time estimate assumes (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run directory to continue.
    pub run_dir: PathBuf,
    /// A later end time: extends the run (a finished one too), with a spectrum at T, and
    /// records it in case.toml.
    #[arg(long, value_name = "T", value_parser = parse_t_end, allow_hyphen_values = true)]
    pub t_end: Option<f64>,
    /// Resume on another device (every solver): `auto`, `cpu`, `cuda`, `cuda:N` or several GPUs
    /// (`cuda:all`, `cuda:0,1,…`: a checkpoint resumes on any number of GPUs that splits its grid); recorded in
    /// case.toml. The checkpoint's device is reported when it differs.
    #[arg(long, alias = "backend", value_name = "DEVICE")]
    pub device: Option<crate::device::DeviceRequest>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub testing: TestingArgs,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Milliseconds per RK4 step and per 3-D transform of the pseudo-spectral solver.
    Spectral(BenchSpectralArgs),
    /// Pair interactions per second of the all-pairs evaluators: Biot–Savart or Plummer gravity
    /// (`--interaction`), on the CPU or a GPU.
    Direct(BenchDirectArgs),
    /// Particles per second of the periodic Ewald evaluator on lattice particles.
    Ewald(BenchEwaldArgs),
    /// Pair interactions per second of the GPU all-pairs kernels (needs a CUDA GPU).
    Kernel(BenchKernelArgs),
    /// Milliseconds per full vortex step, reinitialisation and output step of a turbulence run
    /// (the GPU-resident stepper with a GPU).
    Step(BenchStepArgs),
    /// Seconds per velocity + stretching evaluation (or, with `--interaction gravity`, per
    /// potential + acceleration evaluation) of the fast multipole method in free space, its
    /// phases, parameters and error against the direct sum, and its scaling with N.
    Fmm(BenchFmmArgs),
    /// Gravitational N-body: interactions per second of all pairs, seconds and force error of
    /// the FMM, the leapfrog step with each, and the N where the FMM becomes faster.
    Gravity(BenchGravityArgs),
}

#[derive(Debug, Args)]
pub struct BenchGravityArgs {
    /// Body counts, comma separated, as integers or like 1e5 (default: 1e3,1e4 on the CPU,
    /// 1e3,1e4,1e5,1e6 on a GPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub n: Vec<usize>,
    /// The force methods to time, comma separated: `all-pairs` (or `direct`) and `fmm`.
    #[arg(long, value_delimiter = ',', default_value = "all-pairs,fmm", value_parser = crate::bench::gravity::parse_method)]
    pub method: Vec<crate::summation::EvaluatorKind>,
    /// `cpu` (f64, rayon), `cuda`/`cuda:N` (one GPU: the f32 tiles, the GPU FMM and the
    /// GPU-resident leapfrog; an error without it) or `auto`.
    #[arg(long, alias = "backend", default_value = "cpu", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
    /// The FMM's requested relative accuracy.
    #[arg(long, default_value_t = 1e-4)]
    pub accuracy: f64,
    /// The Plummer softening ε ≥ 0 (Hénon units; the bodies are a Plummer sphere of mass 1).
    #[arg(long, default_value_t = 0.01)]
    pub softening: f64,
    /// Bodies checked against the CPU f64 all-pairs sum per size (0: no error columns).
    #[arg(long, default_value_t = 200)]
    pub sample: usize,
    /// Timed leapfrog steps per method and size, after one untimed (0: no step times).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Args)]
pub struct BenchFmmArgs {
    /// Particle counts, comma separated, as integers or like 1e5 or 16.7e6 (default: 1e5,1e6 on
    /// the CPU, 1e5,1e6,4e6,16.7e6 on a GPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub n: Vec<usize>,
    /// Requested relative accuracy.
    #[arg(long, default_value_t = 1e-4)]
    pub accuracy: f64,
    /// Targets checked against the CPU f64 direct sum per size (fewer at the largest sizes; 0:
    /// no check and no all-pairs estimate).
    #[arg(long, default_value_t = 200)]
    pub sample: usize,
    /// The evaluator to time: `cpu` (f64, rayon), `cuda`/`cuda:N` (one GPU; an error without
    /// it) or `auto`. `--backend` is another name for it.
    #[arg(long, alias = "backend", default_value = "cpu", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
    /// The pair interaction: `biot-savart` (velocity + stretching of vortex particles) or
    /// `gravity` (potential and acceleration of bodies in the unit cube, softening a tenth of
    /// the mean spacing; either device).
    #[arg(long, default_value = "biot-savart", value_parser = crate::summation::interaction::InteractionKind::parse)]
    pub interaction: crate::summation::interaction::InteractionKind,
    /// The periodic box: the periodic FMM on a jittered lattice of about N particles (σ = h),
    /// checked against the CPU f64 Ewald sum (Biot–Savart only).
    #[arg(long)]
    pub periodic: bool,
    /// Tuning: the opening angle θ instead of the device's (the order is re-planned for it
    /// unless --order is given).
    #[arg(long)]
    pub theta: Option<f64>,
    /// Tuning: the largest number of particles in a leaf instead of the device's.
    #[arg(long)]
    pub leaf_size: Option<usize>,
    /// Tuning: the expansion order instead of the planned one.
    #[arg(long)]
    pub order: Option<usize>,
    /// Tuning: the GPU M2L's precision, `f64` or `f32` (scaled), instead of the planned one.
    #[arg(long, value_parser = crate::summation::fmm::params::M2lPrecision::parse)]
    pub m2l: Option<crate::summation::fmm::params::M2lPrecision>,
    #[command(flatten)]
    pub common: BenchCommon,
}

/// A particle count: an integer (`100000`) or a number in exponent form that is a whole number
/// (`1e5`, `16.7e6`).
pub fn parse_count(s: &str) -> Result<usize, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<usize>() {
        return Ok(n);
    }
    let bad = || format!("`{s}`: expected a particle count such as 100000, 1e5 or 16.7e6");
    let x: f64 = t.parse().map_err(|_| bad())?;
    if !(x.is_finite() && (0.0..=1e15).contains(&x)) {
        return Err(bad());
    }
    let r = x.round();
    if (x - r).abs() > 1e-9 * r.max(1.0) {
        return Err(format!("`{s}`: a particle count must be a whole number"));
    }
    Ok(r as usize)
}

/// An end time (`--t-end`): a finite number > 0; `nan`, `inf` and negative times are refused
/// by name.
pub fn parse_t_end(s: &str) -> Result<f64, String> {
    let t: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number; expected a time > 0 such as 2.5"))?;
    if t.is_nan() {
        Err(format!(
            "`{s}` is not a number (NaN); expected a time > 0 such as 2.5"
        ))
    } else if t.is_infinite() {
        Err(format!(
            "`{s}` is infinite; expected a finite time > 0 such as 2.5"
        ))
    } else if t <= 0.0 {
        Err(format!(
            "`{s}` is not after t = 0; expected a time > 0 such as 2.5"
        ))
    } else {
        Ok(t)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvaluatorArg {
    /// Periodic Ewald (particle-mesh) summation: the periodic box, with reinitialisation.
    Ewald,
    /// All pairs in free space (no reinitialisation; O(N²), for small n).
    Direct,
    /// The fast multipole method in free space (no reinitialisation).
    Fmm,
}

/// `vpm bench step --rbf`: the GPU-resident stepper's reinitialisation solves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RbfArg {
    Spectral,
    Exact,
}

#[derive(Debug, Args)]
pub struct BenchStepArgs {
    /// Lattice sizes n (n³ particles each; comma separated; even, ≥ 8).
    #[arg(long, value_delimiter = ',', default_value = "64,128")]
    pub n: Vec<usize>,
    /// Core overlaps σ0/h (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "0.75,1")]
    pub overlap: Vec<f64>,
    #[arg(long, value_enum, default_value = "ewald")]
    pub evaluator: EvaluatorArg,
    /// Requested relative accuracy of the evaluator (default: the vortex runs' default).
    #[arg(long, default_value_t = crate::config::VortexConfig::DEFAULT_ACCURACY)]
    pub accuracy: f64,
    /// Timed steps per size (after the warm-up steps).
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Reinitialise every this many steps.
    #[arg(long, default_value_t = 10)]
    pub reinit_every: u64,
    /// How reinitialisation solves for the strengths (`[vortex] rbf`): `spectral` (the default)
    /// or `exact` interpolation at the nodes.
    #[arg(long, value_enum, default_value = "spectral")]
    pub rbf: RbfArg,
    /// Particles checked against the CPU f64 evaluator per size (0: no accuracy check).
    #[arg(long, default_value_t = 2000)]
    pub sample: usize,
    /// Where the particles live: `cuda`/`cuda:N` (the GPU-resident stepper), `cpu`, `auto`.
    #[arg(long, default_value = "cuda", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Args)]
pub struct BenchKernelArgs {
    /// Particle counts (comma separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16384,65536,262144,1048576"
    )]
    pub n: Vec<usize>,
    /// Targets checked against the CPU f64 evaluator per size (0: no accuracy check).
    #[arg(long, default_value_t = 2000)]
    pub sample: usize,
    #[command(flatten)]
    pub common: BenchCommon,
    /// Tuning: launch configurations to compare, BLOCKxTARGETSxUNROLL[xMINBLOCKS] (e.g.
    /// 256x2x4,128x4x2x4).
    #[arg(long, value_delimiter = ',', hide = true)]
    pub configs: Vec<String>,
    /// Tuning: write the compiled cubins and NVRTC logs into this directory.
    #[arg(long, hide = true)]
    pub dump: Option<PathBuf>,
    /// The GPU to time: `cuda` (GPU 0) or `cuda:N`. `--backend` is the older name.
    #[arg(long, alias = "backend", default_value = "cuda", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
}

/// Options every benchmark takes.
#[derive(Debug, Args)]
pub struct BenchCommon {
    /// Timed repetitions per measurement, the median reported (default: 5 for spectral and
    /// kernel, 3 for direct and ewald).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Worker threads (default: all cores; with a GPU, those of the CPU reference).
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct BenchEwaldArgs {
    /// Lattice sizes n (n^3 particles each; comma separated).
    #[arg(long, value_delimiter = ',', default_value = "16,32")]
    pub n: Vec<usize>,
    /// Requested relative accuracy (default: the vortex runs' default).
    #[arg(long, default_value_t = crate::config::VortexConfig::DEFAULT_ACCURACY)]
    pub accuracy: f64,
    #[command(flatten)]
    pub common: BenchCommon,
    /// The evaluator to time: `cpu` (f64, rayon), `cuda`/`cuda:N` (the GPU, f32; an error
    /// without a usable GPU) or `auto` (the GPU when one is usable). `--backend` is the older
    /// name.
    #[arg(long, alias = "backend", default_value = "cpu", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
    /// GPU: particles checked against the CPU f64 evaluator per size (0: no accuracy check).
    #[arg(long, default_value_t = 2000)]
    pub sample: usize,
}

#[derive(Debug, Args)]
pub struct BenchDirectArgs {
    /// Particle counts, comma separated, as integers or like 1e5 (default: 1024,4096,16384 on
    /// the CPU, 16384,65536,262144,1048576 on a GPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub n: Vec<usize>,
    /// The pair interaction: `biot-savart` (velocity, and velocity + stretching) or `gravity`
    /// (Plummer-softened potential and acceleration; f64 on the CPU, f32 on a GPU).
    #[arg(long, default_value = "biot-savart", value_parser = crate::summation::interaction::InteractionKind::parse)]
    pub interaction: crate::summation::interaction::InteractionKind,
    /// The evaluator to time: `cpu` (f64, rayon), `cuda`/`cuda:N` (the GPU tile kernels, f32,
    /// CUDA events; Biot–Savart gives `vpm bench kernel`'s table) or `auto`.
    #[arg(long, alias = "backend", default_value = "cpu", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
    /// Gravity: the Plummer softening ε ≥ 0 (0: Newtonian, the self pairs skipped).
    #[arg(long, default_value_t = 0.01)]
    pub softening: f64,
    /// GPU: targets checked against the CPU f64 sum per size (0: no accuracy check).
    #[arg(long, default_value_t = 2000)]
    pub sample: usize,
    /// GPU tuning: launch configurations to compare, BLOCKxTARGETSxUNROLL[xMINBLOCKS] (e.g.
    /// 256x4x4,128x4x8x4).
    #[arg(long, value_delimiter = ',', hide = true)]
    pub configs: Vec<String>,
    /// GPU tuning: write the compiled cubins and NVRTC logs into this directory.
    #[arg(long, hide = true)]
    pub dump: Option<PathBuf>,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DealiasArg {
    #[value(name = "2/3")]
    TwoThirds,
    #[value(name = "3/2")]
    ThreeHalves,
}

#[derive(Debug, Args)]
pub struct BenchSpectralArgs {
    /// Grid sizes N (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "32,64,128")]
    pub n: Vec<usize>,
    /// Dealiasing rules (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "2/3,3/2")]
    pub dealias: Vec<DealiasArg>,
    /// The solver to time: `cpu` (rayon), `cuda`/`cuda:N` (the GPU solver, f64; an error
    /// without a usable GPU), `cuda:all`/`cuda:0,1,…` (the solver across those GPUs, one
    /// process each, against the one-GPU solver on the first) or `auto` (the GPU when one is
    /// usable). `--backend` is the older name.
    #[arg(long, alias = "backend", default_value = "cpu", value_name = "DEVICE")]
    pub device: crate::device::DeviceRequest,
    /// GPU: how the 3-D transforms are done: `pruned` (x transforms only on the rows that hold
    /// retained modes, then (y, z); what runs use), `full` (cuFFT's 3-D plans), or both (comma
    /// separated).
    #[arg(long, value_delimiter = ',', default_value = "pruned,full")]
    pub transforms: Vec<TransformArg>,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransformArg {
    Pruned,
    Full,
}

#[cfg(test)]
mod tests {
    use super::{parse_count, parse_t_end};

    #[test]
    fn end_times_are_finite_and_positive() {
        assert_eq!(parse_t_end("2.5"), Ok(2.5));
        assert_eq!(parse_t_end("1e1"), Ok(10.0));
        assert!(parse_t_end("nan").unwrap_err().contains("not a number"));
        assert!(parse_t_end("NaN").unwrap_err().contains("not a number"));
        assert!(parse_t_end("ten").unwrap_err().contains("not a number"));
        assert!(parse_t_end("inf").unwrap_err().contains("infinite"));
        assert!(parse_t_end("-inf").unwrap_err().contains("infinite"));
        assert!(parse_t_end("-1").unwrap_err().contains("not after t = 0"));
        assert!(parse_t_end("0").unwrap_err().contains("not after t = 0"));
    }

    #[test]
    fn particle_counts_in_either_form() {
        assert_eq!(parse_count("100000"), Ok(100_000));
        assert_eq!(parse_count("1e5"), Ok(100_000));
        assert_eq!(parse_count(" 16.7e6"), Ok(16_700_000));
        assert_eq!(parse_count("4E6"), Ok(4_000_000));
        assert!(parse_count("1.5").unwrap_err().contains("whole number"));
        for bad in ["", "ten", "-1e3", "inf", "1e20"] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
    }
}
