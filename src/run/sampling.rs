//! The particles a particle-defined flow (a ring, coaxial rings, a tube) starts with, sampled
//! from its case: each core resolved by blobs of the case's spacing and radius.

use crate::config::{Case, InitialCondition};
use crate::init::particles::{coaxial_rings, vortex_ring, vortex_tube, CoreSampling};
use crate::particles::ParticleSet;
use anyhow::{bail, Context, Result};
use std::f64::consts::TAU;

/// Core sampling cut-off (units of the sampled core's σ_c).
const CORE_EXTENT: f64 = 3.5;

/// How a case's cores are sampled (`[vortex]` spacing and blob radius), and the sampled σ_c of a
/// core: the core of standard deviation `core` is sampled with σ_c = √(core² − σ_p²) so that
/// the blobs (σ_p = overlap·h) add up to it.
pub(crate) fn core_sampling(
    case: &Case,
) -> Result<(CoreSampling, impl Fn(f64) -> Result<f64> + '_)> {
    let vc = case
        .vortex
        .as_ref()
        .with_context(|| format!("case `{}`: needs a [vortex] section", case.name))?;
    let sigma_p = vc.sigma0();
    let sampling = CoreSampling {
        spacing: vc.spacing(),
        particle_sigma: sigma_p,
        core_extent: CORE_EXTENT,
    };
    let sampled = move |core: f64| -> Result<f64> {
        let v = core * core - sigma_p * sigma_p;
        if v <= 0.0 {
            bail!(
                "case `{}`: the core {core} must exceed the blob radius overlap·h = {sigma_p}",
                case.name
            );
        }
        Ok(v.sqrt())
    };
    Ok((sampling, sampled))
}

/// The particles of a particle-defined case, each core sampled as [`core_sampling`] says.
pub fn initial_particles(case: &Case) -> Result<ParticleSet> {
    let (sampling, sampled) = core_sampling(case)?;
    Ok(match &case.initial {
        &InitialCondition::VortexRing {
            radius,
            circulation,
            core,
        } => vortex_ring(radius, circulation, sampled(core)?, [0.0; 3], &sampling),
        InitialCondition::CoaxialRings { rings } => {
            let cores = rings
                .iter()
                .map(|r| sampled(r.core))
                .collect::<Result<Vec<_>>>()?;
            coaxial_rings(rings, &cores, &sampling).0
        }
        &InitialCondition::VortexTube { circulation, core } => {
            vortex_tube(circulation, sampled(core)?, [0.0, 0.0], TAU, &sampling)
        }
        _ => bail!("case `{}`: not a particle-defined flow", case.name),
    })
}
