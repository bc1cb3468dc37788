//! Where the vortex method's energy goes: a per-phase budget of the particle kinetic energy for a
//! field-defined case (docs/validation.md, "Under-resolved flows").
//!
//! ```text
//! cargo run --release --example vortex_energy_budget -- CASE T_STOP OUT.csv [PROJECTION FILTER]
//! ```
//!
//! Runs the case's `[vortex]` particles alone (CPU, the case's evaluator, step and
//! reinitialisation interval; PROJECTION `solenoidal|none` and FILTER `exponential|none` override
//! the case's conditioning) and writes one row per reinitialisation cycle:
//!
//! * `K0`, `Z0`: the particle kinetic energy and enstrophy at the start of the cycle (velocity at
//!   the n³ grid nodes, the shared diagnostics);
//! * `rate_advection`, `rate_stretching`, `rate_spreading`: dK/dt at that state from moving the
//!   particles, changing their strengths and spreading their cores alone (central differences
//!   of K along the step's own derivatives), beside `rate_physical` = −2νZ0;
//! * `dK_steps`: the change of K over the cycle's steps; `dK_reinit_*`: the change of K made by
//!   reinitialisation with the lattice vorticity as sampled (`none`), projected (`proj`), and
//!   projected and filtered (`proj_filt`); the run goes on with the chosen conditioning;
//! * `longitudinal`: the longitudinal share of the lattice enstrophy before the solve;
//!   `alpha_max_over_rms`: the largest strength over the rms strength; `high_band`: the share
//!   of K in shells k ≥ n/3.

use anyhow::{bail, Context, Result};
use std::f64::consts::TAU;
use std::io::Write;
use vpm::config::{resolve_case, LatticeConditioning, LatticeFilter};
use vpm::device::Device;
use vpm::diagnostics::flow::{flow_stats, shell_spectrum};
use vpm::init::initial_modes;
use vpm::particles::ParticleSet;
use vpm::spectral::ModeLayout;
use vpm::summation::planner::plan;
use vpm::summation::{Boundary, Evaluation, Sources, Summation};
use vpm::vortex::field::{grid_kmax, particles_from_modes, velocity_modes_from_particles};
use vpm::vortex::{particles_on_lattice, solve_strengths, VortexSettings, VortexSolver};

struct Energy {
    k: f64,
    z: f64,
    high_band: f64,
}

fn energy(eval: &mut dyn Summation, p: &ParticleSet, n: usize, nu: f64) -> Result<Energy> {
    let mut scratch = Evaluation::default();
    let (layout, modes) = velocity_modes_from_particles(eval, p, n, &mut scratch)?;
    let stats = flow_stats(&layout, &modes, nu);
    let spectrum = shell_spectrum(&layout, &modes);
    let high: f64 = spectrum.iter().skip(n / 3).sum();
    Ok(Energy {
        k: stats.energy,
        z: stats.enstrophy,
        high_band: high / stats.energy,
    })
}

/// Particles rebuilt at the n³ lattice from `omega` (sampled on the settings' sampling lattice)
/// with the given conditioning.
fn reinitialised(
    omega: &[[f64; 3]],
    n: usize,
    settings: &VortexSettings,
    conditioning: LatticeConditioning,
) -> (ParticleSet, f64) {
    let m = settings.sampling_lattice();
    let (alpha, _, report) = solve_strengths(
        omega,
        m,
        n,
        settings.sigma0,
        settings.rbf,
        conditioning,
        true,
    );
    (
        particles_on_lattice(n, &alpha, settings.sigma0),
        report.longitudinal_fraction,
    )
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 3 && args.len() != 5 {
        bail!("usage: vortex_energy_budget CASE T_STOP OUT.csv [PROJECTION FILTER]");
    }
    let (case, _) = resolve_case(&args[0])?;
    let t_stop: f64 = args[1].parse().context("T_STOP")?;
    let vc = case
        .vortex
        .clone()
        .context("the case has no [vortex] section")?;
    let mut conditioning = vc.conditioning;
    if args.len() == 5 {
        conditioning.solenoidal = match args[3].as_str() {
            "solenoidal" => true,
            "none" => false,
            other => bail!("PROJECTION: {other}: solenoidal or none"),
        };
        conditioning.filter = match args[4].as_str() {
            "exponential" => LatticeFilter::Exponential,
            "none" => LatticeFilter::None,
            other => bail!("FILTER: {other}: exponential or none"),
        };
    }
    let dt = match case.time.step {
        vpm::config::TimeStep::Fixed { dt } => dt,
        _ => bail!("the case needs a fixed time.dt"),
    };
    let every = vc.reinit_every.context("the case must reinitialise")?;
    let n = vc.n;
    let nu = case.flow.nu;
    let layout = ModeLayout::new(grid_kmax(n));
    let modes = initial_modes(&case.initial, &layout)?;
    let (particles, _) = particles_from_modes(&layout, &modes, n, vc.overlap, vc.rbf, conditioning);
    let settings = VortexSettings {
        nu,
        scheme: vc.stretching,
        reinit_every: None,
        lattice_n: n,
        sigma0: vc.sigma0(),
        rbf: vc.rbf,
        conditioning,
        zero_total_strength: true,
    };
    let boundary = Boundary::Periodic { length: TAU };
    let mut probe = plan(boundary, vc.evaluator, &Device::Cpu, vc.accuracy)?.evaluator;
    let evaluator = plan(boundary, vc.evaluator, &Device::Cpu, vc.accuracy)?.evaluator;
    let mut solver = VortexSolver::new(particles, evaluator, settings);
    let mut out = std::fs::File::create(&args[2])?;
    writeln!(
        out,
        "t,K0,Z0,rate_physical,rate_advection,rate_stretching,rate_spreading,dK_steps,\
         dK_reinit_none,dK_reinit_proj,dK_reinit_proj_filt,longitudinal,alpha_max_over_rms,high_band"
    )?;
    let mut t = 0.0;
    let delta = 1e-3;
    while t < t_stop - 0.5 * dt {
        let p0 = solver.particles().clone();
        let e0 = energy(probe.as_mut(), &p0, n, nu)?;
        let (u, s) = {
            let (u, s) = solver.derivatives()?;
            (u.to_vec(), s.to_vec())
        };
        // Central differences of K along each phase's own direction.
        let mut rate = |apply: &dyn Fn(&mut ParticleSet, f64)| -> Result<f64> {
            let (mut a, mut b) = (p0.clone(), p0.clone());
            apply(&mut a, delta);
            apply(&mut b, -delta);
            let ka = energy(probe.as_mut(), &a, n, nu)?.k;
            let kb = energy(probe.as_mut(), &b, n, nu)?.k;
            Ok((ka - kb) / (2.0 * delta))
        };
        let rate_adv = rate(&|p, d| {
            for (x, v) in p.x.iter_mut().zip(&u) {
                (0..3).for_each(|c| x[c] += d * v[c]);
            }
        })?;
        let rate_str = rate(&|p, d| {
            for (a, v) in p.alpha.iter_mut().zip(&s) {
                (0..3).for_each(|c| a[c] += d * v[c]);
            }
        })?;
        let rate_spr = rate(&|p, d| {
            for sg in p.sigma.iter_mut() {
                *sg = (*sg * *sg + 2.0 * nu * d).max(1e-12).sqrt();
            }
        })?;
        let norms: Vec<f64> = p0
            .alpha
            .iter()
            .map(|a| (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt())
            .collect();
        let rms = (norms.iter().map(|v| v * v).sum::<f64>() / norms.len() as f64).sqrt();
        let amax = norms.iter().cloned().fold(0.0, f64::max);
        for _ in 0..every {
            solver.step(dt)?;
            t += dt;
        }
        let p5 = solver.particles().clone();
        let k5 = energy(probe.as_mut(), &p5, n, nu)?.k;
        let mut omega = Vec::new();
        let m = solver.settings().sampling_lattice();
        probe.vorticity_on_lattice(&Sources::of(&p5), m, &mut omega)?;
        let mut dk = [0.0; 3];
        let mut longitudinal = 0.0;
        let variants = [
            LatticeConditioning::NONE,
            LatticeConditioning {
                solenoidal: true,
                filter: LatticeFilter::None,
            },
            LatticeConditioning {
                solenoidal: true,
                filter: LatticeFilter::Exponential,
            },
        ];
        for (d, v) in dk.iter_mut().zip(variants) {
            let (p, l) = reinitialised(&omega, n, solver.settings(), v);
            longitudinal = l;
            *d = energy(probe.as_mut(), &p, n, nu)?.k - k5;
        }
        solver.reinitialise()?;
        writeln!(
            out,
            "{t:.4},{:.9e},{:.9e},{:.6e},{rate_adv:.6e},{rate_str:.6e},{rate_spr:.6e},{:.6e},{:.6e},{:.6e},{:.6e},{longitudinal:.6e},{:.4},{:.6e}",
            e0.k,
            e0.z,
            -2.0 * nu * e0.z,
            k5 - e0.k,
            dk[0],
            dk[1],
            dk[2],
            amax / rms,
            e0.high_band
        )?;
        out.flush()?;
        if !solver.particles().is_finite() {
            bail!("non-finite particles at t = {t}");
        }
    }
    Ok(())
}
