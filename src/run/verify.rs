//! `vpm verify periodic`: the two periodic far fields checked against each other. A case's
//! initial particles are evaluated by the Ewald sum (on the requested device) and by the
//! periodic FMM (on a GPU device the GPU's when the accuracy is within its f32 floor, else the
//! CPU's, f64; its name says which) at the case's accuracy, all particles as sources and a sample of
//! them as targets; the relative L2 and maximum differences of the velocity and the stretching
//! are the table `vpm` prints (docs/physics.md §4).

use crate::config::Case;
use crate::device::Device;
use crate::particles::ParticleSet;
use crate::summation::fmm::params::GPU_ACCURACY_FLOOR;
use crate::summation::fmm::{CudaFmm, Fmm, FmmPeriodic};
use crate::summation::planner::{plan, BoundaryKind};
use crate::summation::verify::{sample, ErrorStats};
use crate::summation::{Evaluation, EvaluatorKind, Extra, Sources, Summation};
use anyhow::{bail, Context, Result};
use std::time::Instant;

/// The comparison fails when a relative L2 difference exceeds the accuracy by this factor
/// (each method is held to the accuracy against the exact sum, so they may differ by twice
/// it; the rest is margin for the sample).
pub const FAILURE_FACTOR: f64 = 3.0;

/// What `vpm verify periodic` was asked.
#[derive(Debug, Clone, Copy)]
pub struct VerifyRequest {
    /// Targets sampled from the particles (all when there are fewer).
    pub sample: usize,
    /// The requested accuracy; `None`: the case's `vortex.accuracy`.
    pub accuracy: Option<f64>,
}

/// One method's evaluation: its name and wall seconds.
#[derive(Debug, Clone)]
pub struct MethodRun {
    pub name: String,
    pub seconds: f64,
}

/// The differences of the two periodic methods on a sample.
#[derive(Debug, Clone)]
pub struct PeriodicComparison {
    pub particles: usize,
    pub sample: usize,
    pub accuracy: f64,
    pub ewald: MethodRun,
    pub fmm: MethodRun,
    /// (quantity, relative L2 and maximum |difference| over the rms of the Ewald result).
    pub rows: Vec<(&'static str, ErrorStats)>,
}

impl PeriodicComparison {
    /// Whether every relative L2 difference is within [`FAILURE_FACTOR`] × the accuracy.
    pub fn agrees(&self) -> bool {
        self.rows
            .iter()
            .all(|(_, e)| e.rel_l2 <= FAILURE_FACTOR * self.accuracy)
    }
}

impl std::fmt::Display for PeriodicComparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "# {} particles, {} sampled targets, accuracy {:e}",
            self.particles, self.sample, self.accuracy
        )?;
        for (what, m) in [("Ewald", &self.ewald), ("FMM", &self.fmm)] {
            writeln!(f, "# {what}: {} ({:.3} s)", m.name, m.seconds)?;
        }
        writeln!(f, "{:<12} {:>12} {:>12}", "quantity", "rel_L2", "max/rms")?;
        for (q, e) in &self.rows {
            writeln!(f, "{q:<12} {:>12.3e} {:>12.3e}", e.rel_l2, e.max_rel)?;
        }
        let verdict = if self.agrees() { "agree" } else { "DISAGREE" };
        write!(
            f,
            "# the two methods {verdict} (relative L2 ≤ {FAILURE_FACTOR} × {:e})",
            self.accuracy
        )
    }
}

/// The initial particles of `case` (particle- or field-defined), with an error when it has
/// none or lives in free space.
fn periodic_particles(case: &Case) -> Result<ParticleSet> {
    let boundary = crate::run::plan::boundary_of(case);
    if BoundaryKind::of(&boundary) == BoundaryKind::FreeSpace {
        bail!(
            "case `{}` lives in free space (initial.kind = \"{}\"): `vpm verify periodic` \
             compares the two periodic far fields (Ewald and the periodic FMM); give a case in \
             the periodic box",
            case.name,
            case.initial.kind_str()
        );
    }
    if case.vortex.is_none() {
        bail!(
            "case `{}` has no [vortex] section: `vpm verify periodic` evaluates the initial \
             particles; add [vortex] with at least `n`",
            case.name
        );
    }
    if case.initial.is_particle_defined() {
        return crate::run::sampling::initial_particles(case);
    }
    let (p, _) = crate::run::field::initial_particles(case)?
        .context("the case's [vortex] section has no particles")?;
    Ok(p)
}

/// Evaluates the initial particles of `case` by the Ewald sum on `device` and by the periodic
/// FMM (on `device` when it is a GPU and the accuracy is within its floor, else the CPU), on `request.sample` targets, and measures their differences.
pub fn verify_periodic(
    case: &Case,
    request: VerifyRequest,
    device: &Device,
) -> Result<PeriodicComparison> {
    let particles = periodic_particles(case)?;
    let vc = case.vortex.as_ref().expect("checked above");
    let accuracy = request.accuracy.unwrap_or(vc.accuracy);
    let sources = Sources::of(&particles);
    let idx = sample(particles.len(), request.sample, 1);
    let targets: Vec<[f64; 3]> = idx.iter().map(|&i| particles.x[i]).collect();
    let target_alpha: Vec<[f64; 3]> = idx.iter().map(|&i| particles.alpha[i]).collect();
    let extra = Extra::Stretching {
        alpha: &target_alpha,
        scheme: vc.stretching,
    };
    let run = |e: &mut dyn Summation, out: &mut Evaluation| -> Result<MethodRun> {
        let t = Instant::now();
        e.evaluate(&sources, &targets, extra, out)?;
        Ok(MethodRun {
            name: e.name(),
            seconds: t.elapsed().as_secs_f64(),
        })
    };
    let boundary = crate::run::plan::boundary_of(case);
    let mut ewald = plan(boundary, EvaluatorKind::Ewald, device, accuracy)
        .with_context(|| {
            format!(
                "the Ewald sum on {} at accuracy {accuracy:e}",
                device.label()
            )
        })?
        .evaluator;
    let context = || format!("the periodic FMM at accuracy {accuracy:e}");
    let mut fmm: Box<dyn Summation> = match device {
        Device::Cuda(gpu) if accuracy >= GPU_ACCURACY_FLOOR => {
            let mut f = CudaFmm::periodic(gpu.clone(), accuracy, 0).with_context(context)?;
            f.disable_checks();
            Box::new(f)
        }
        _ => {
            let mut f = FmmPeriodic::new(accuracy, 0).with_context(context)?;
            f.disable_checks();
            Box::new(f)
        }
    };
    let (mut a, mut b) = (Evaluation::default(), Evaluation::default());
    let ewald_run = run(ewald.as_mut(), &mut a)?;
    let fmm_run = run(fmm.as_mut(), &mut b)?;
    Ok(PeriodicComparison {
        particles: particles.len(),
        sample: targets.len(),
        accuracy,
        ewald: ewald_run,
        fmm: fmm_run,
        rows: vec![
            ("velocity", ErrorStats::of(&b.velocity, &a.velocity)),
            ("stretching", ErrorStats::of(&b.stretching, &a.stretching)),
        ],
    })
}
