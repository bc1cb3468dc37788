//! The plan of a run, made once before anything is allocated: the devices of its solvers, the
//! particles a particle-defined flow starts with (sampled here, once), how many particles there
//! are, and the particle evaluator's [`Recipe`] (method, parameters, memory, time per
//! evaluation, description). The memory and disk checks, `vpm check`, the manifest and the
//! model's constructor all read this one value.

use crate::config::{Case, InitialCondition};
use crate::device::Device;
use crate::device::DeviceRequest;
use crate::gravity::bodies::BodySet;
use crate::gravity::planner::{choose_method, MethodChoice};
use crate::particles::ParticleSet;
use crate::summation::planner::{recipe, Problem, Recipe};
use crate::summation::Boundary;
use anyhow::{Context, Result};
use std::path::Path;

/// The devices of a run, opened once from the case and passed to every planner: the
/// spectral solver's and the particle solver's (each section's own `device`, else the run's).
#[derive(Debug, Clone)]
pub struct RunDevices {
    pub spectral: Option<Device>,
    pub vortex: Option<Device>,
    /// The gravity model's device (a gravity case).
    pub gravity: Option<Device>,
}

impl RunDevices {
    /// Opens the devices the case's solvers ask for; an unusable GPU that was asked for is an
    /// error naming the section.
    pub fn open(case: &Case) -> Result<RunDevices> {
        // Only the spectral solver runs across a group of GPUs.
        let open = |section: &str, own: Option<DeviceRequest>| -> Result<Device> {
            let request = own.unwrap_or(case.device);
            let opened = match section {
                "spectral" => Device::open(request),
                _ => Device::open_single(request),
            };
            let (device, note) =
                opened.with_context(|| format!("case `{}`: [{section}]", case.name))?;
            tracing::info!("{section} device: {note}");
            Ok(device)
        };
        // A grid that does not split over a group is refused before any rank starts (the
        // GPUs are counted only for a group; when they cannot be, opening it says why).
        let spectral_request = case
            .spectral
            .as_ref()
            .map(|s| s.device.unwrap_or(case.device));
        if spectral_request.is_some_and(|r| r.is_group()) {
            if let Ok(present) = crate::device::group::gpu_count() {
                check_group_split(case, present)?;
            }
        }
        let spectral = case
            .spectral
            .as_ref()
            .map(|s| open("spectral", s.device))
            .transpose()?;
        let vortex = case
            .vortex
            .as_ref()
            .map(|v| {
                let request = v.device.unwrap_or(case.device);
                if !request.is_group() {
                    return open("vortex", v.device);
                }
                // A compare case keeps its particles on rank 0's GPU of the spectral group.
                match spectral.as_ref().and_then(Device::group) {
                    Some(group) => {
                        tracing::info!(
                            "vortex device: cuda:{} (rank 0 of the spectral solver's {})",
                            group.ordinals()[0],
                            group.label()
                        );
                        Ok(Device::Cuda(group.gpu().clone()))
                    }
                    None => open("vortex", Some(request)),
                }
            })
            .transpose()?;
        Ok(RunDevices {
            spectral,
            vortex,
            gravity: case
                .gravity
                .as_ref()
                .map(|g| open("gravity", g.device))
                .transpose()?,
        })
    }
}

/// `Err` naming the case, its `[spectral]` keys and the GPUs when the spectral grid of `case`
/// cannot be split over the group of GPUs it asks for on a host with `present` GPUs (a
/// selection that names absent GPUs is left to the group's launch, which says so).
fn check_group_split(case: &Case, present: usize) -> Result<()> {
    let Some(s) = &case.spectral else {
        return Ok(());
    };
    let DeviceRequest::CudaGroup(selection) = s.device.unwrap_or(case.device) else {
        return Ok(());
    };
    let Ok(ordinals) = selection.ordinals(present) else {
        return Ok(());
    };
    let grid = crate::spectral::SpectralGrid::new(s.n, s.dealias);
    crate::spectral::distributed::check_split(grid, ordinals.len()).map_err(|e| {
        anyhow::anyhow!(
            "case `{}`: [spectral] n = {} with dealias = \"{}\" on {} GPUs (cuda:{selection}): \
             {e}",
            case.name,
            s.n,
            s.dealias,
            ordinals.len(),
        )
    })
}

/// See the module docs.
pub struct RunPlan {
    /// The devices of the run's solvers.
    pub devices: RunDevices,
    /// The particles the run starts from (a case with `[vortex]`): at t = 0, n³ lattice
    /// particles for a field-defined flow or the sampled set for a particle-defined one; at a
    /// resume, the checkpoint's.
    pub particle_count: usize,
    /// The particle evaluator, planned and not yet built (a case with `[vortex]`).
    pub evaluator: Option<Recipe>,
    /// A particle-defined flow's particles, sampled once; the model takes them.
    initial_particles: Option<ParticleSet>,
    /// A gravity case's bodies at t = 0, made once; the model takes them.
    initial_bodies: Option<BodySet>,
    /// A gravity case's force method (`auto` resolved from the body count and the device).
    pub gravity_method: Option<MethodChoice>,
}

impl RunPlan {
    /// The plan of a new run of `case`: opens its devices, samples a particle-defined flow's
    /// particles and plans the evaluator for them.
    pub fn new(case: &Case) -> Result<RunPlan> {
        let devices = RunDevices::open(case)?;
        if let InitialCondition::Bodies(initial) = &case.initial {
            let softening = case.gravity.as_ref().map_or(0.0, |g| g.softening);
            let bodies = initial
                .bodies(Path::new(""), softening)
                .with_context(|| format!("case `{}`: [initial]", case.name))?;
            let count = bodies.len();
            let mut plan = Self::with(case, devices, count, None)?;
            plan.initial_bodies = Some(bodies);
            return Ok(plan);
        }
        let initial_particles = match &case.vortex {
            Some(_) if case.initial.is_particle_defined() => {
                Some(crate::run::sampling::initial_particles(case)?)
            }
            _ => None,
        };
        let particle_count = match (&case.vortex, &initial_particles) {
            (_, Some(p)) => p.len(),
            (Some(vc), None) => vc.n.pow(3),
            (None, None) => 0,
        };
        Self::with(case, devices, particle_count, initial_particles)
    }

    /// The plan of a resumed run of `case` with `particle_count` particles (its checkpoint's):
    /// nothing is sampled.
    pub fn for_resume(case: &Case, particle_count: usize) -> Result<RunPlan> {
        Self::with(case, RunDevices::open(case)?, particle_count, None)
    }

    /// A plan with no particles and no evaluator on `devices` (a model without a particle
    /// solver, e.g. the run core's tests).
    pub fn without_solvers(devices: RunDevices) -> RunPlan {
        RunPlan {
            devices,
            particle_count: 0,
            evaluator: None,
            initial_particles: None,
            initial_bodies: None,
            gravity_method: None,
        }
    }

    fn with(
        case: &Case,
        devices: RunDevices,
        particle_count: usize,
        initial_particles: Option<ParticleSet>,
    ) -> Result<RunPlan> {
        let evaluator = match &devices.vortex {
            Some(device) if case.vortex.is_some() => {
                let r = evaluator_recipe(case, device, particle_count)?;
                tracing::info!("vortex evaluator: {}", r.description);
                if let Some(c) = &r.choice {
                    tracing::info!("vortex evaluator: {c}");
                }
                Some(r)
            }
            _ => None,
        };
        let gravity_method = match (&case.gravity, &devices.gravity) {
            (Some(g), Some(device)) => {
                let threads = rayon::current_num_threads();
                let choice = choose_method(g.evaluator, particle_count, device, threads)
                    .with_context(|| format!("case `{}`: [gravity]", case.name))?;
                tracing::info!(
                    "gravity forces: {} ({})",
                    choice.method,
                    choice.reason.as_deref().unwrap_or("as the case asks")
                );
                Some(choice)
            }
            _ => None,
        };
        Ok(RunPlan {
            devices,
            particle_count,
            evaluator,
            initial_particles,
            initial_bodies: None,
            gravity_method,
        })
    }

    /// The sampled particles of a particle-defined flow (once; `None` after).
    pub fn take_initial_particles(&mut self) -> Option<ParticleSet> {
        self.initial_particles.take()
    }

    /// A gravity case's bodies at t = 0 (once; `None` after).
    pub fn take_initial_bodies(&mut self) -> Option<BodySet> {
        self.initial_bodies.take()
    }

    /// The particle evaluator's recipe, or an error naming the missing `[vortex]` section.
    pub fn evaluator(&self, case: &Case) -> Result<&Recipe> {
        self.evaluator.as_ref().with_context(|| {
            format!(
                "case `{}`: initial.kind = \"{}\" needs a [vortex] section",
                case.name,
                case.initial.kind_str()
            )
        })
    }
}

/// The recipe of the particle evaluator of `case` (its `[vortex]` section) for `particles`
/// particles on `device`.
pub fn evaluator_recipe(case: &Case, device: &Device, particles: usize) -> Result<Recipe> {
    let vc = case
        .vortex
        .as_ref()
        .with_context(|| format!("case `{}`: needs a [vortex] section", case.name))?;
    let problem = Problem {
        boundary: boundary_of(case),
        particles,
        sigma_max: vc.sigma0(),
        lattice_n: vc.reinit_lattices().map_or(0, |(_, m)| m),
    };
    recipe(problem, vc.evaluator, device, vc.evaluator_options())
        .with_context(|| evaluator_context(case, device))
}

/// The boundary of a case's particles: free space for rings, the periodic box otherwise.
pub fn boundary_of(case: &Case) -> Boundary {
    if case.initial.is_free_space() {
        Boundary::FreeSpace
    } else {
        Boundary::Periodic {
            length: std::f64::consts::TAU,
        }
    }
}

/// What an error of the summation planner is about: the case's `[vortex]` section and, for an
/// evaluator planned from `accuracy` (the FMM, which refuses an accuracy its device cannot
/// deliver), that key with its value and the device.
pub(crate) fn evaluator_context(case: &Case, device: &Device) -> String {
    match &case.vortex {
        Some(vc) if vc.evaluator == crate::summation::EvaluatorKind::Fmm => format!(
            "case `{}`: [vortex] accuracy = {:e} with evaluator = \"fmm\" on {}",
            case.name,
            vc.accuracy,
            device.label()
        ),
        _ => format!("case `{}`: [vortex]", case.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spectral_case(n: usize, dealias: &str, device: &str) -> Case {
        let text = format!(
            "device = \"{device}\"\n[flow]\nnu = 0.01\n[initial]\nkind = \"taylor-green\"\n\
             [time]\nt_end = 0.1\ncfl = 1.0\n[spectral]\nn = {n}\ndealias = \"{dealias}\"\n"
        );
        Case::from_toml_str(&text, "split.toml").unwrap()
    }

    /// A grid that does not split over the group is refused before any rank starts, naming
    /// the case, the keys and the GPUs; a grid that splits, one GPU, or absent GPUs (left to
    /// the launch) pass.
    #[test]
    fn a_grid_that_does_not_split_is_refused_before_the_ranks_start() {
        let e = check_group_split(&spectral_case(30, "2/3", "cuda:all"), 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("case `split`")
                && e.contains("[spectral] n = 30 with dealias = \"2/3\" on 4 GPUs (cuda:all)"),
            "{e}"
        );
        // 3/2 over 3 GPUs: the product grid 48 splits, the diagnostics grid 32 does not.
        let e = check_group_split(&spectral_case(32, "3/2", "cuda:0,1,2"), 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("on 3 GPUs (cuda:0,1,2)"), "{e}");
        assert!(check_group_split(&spectral_case(32, "2/3", "cuda:all"), 4).is_ok());
        assert!(check_group_split(&spectral_case(30, "2/3", "cuda:0"), 4).is_ok());
        assert!(check_group_split(&spectral_case(30, "2/3", "cuda:0,5"), 4).is_ok());
    }
}
