//! The disk a run takes: every file `vpm run` writes into its run directory, counted from the
//! case before anything runs. `vpm check` prints the rows; [`super::memory::check_disk`] refuses
//! a run whose outputs would not fit.
//!
//! The estimate is of the peak: checkpoints are counted at `checkpoint.keep + 1`, as a new one is
//! written before the oldest is removed. It is meant never to be below what a run writes, and
//! at most about 25 % (or 1 MiB, for small runs) above it (`tests/disk_estimate.rs` checks both
//! on three small runs). Exact sizes are used where the format fixes them (arrays, checkpoints,
//! snapshots, fields); bounds where the content decides: 24 bytes per number in the CSV logs, and
//! for the pictures sizes measured on the noisiest content there is (see [`png_bounds`]).
//!
//! The number of steps is known for a fixed Δt (plus one for each output time off the Δt grid,
//! where the step is shortened to land on it); with an adaptive Δt it is estimated from the
//! initial field's speed, and only the outputs counted in steps depend on it (their rows say
//! "about").

use crate::config::{Cadence, Case, InitialCondition, TimeStep};
use crate::diagnostics::lamb_oseen::profile_radii;
use crate::diagnostics::shell_count;
use crate::output::{fields_disk_bytes, snapshot_disk_bytes};
use crate::spectral::{ModeLayout, SpectralGrid};
use crate::summation::EvaluatorKind;
use crate::vortex::field::grid_kmax;
use postprocess::layout::{
    vortex_energy_columns, COMPARISON_COLUMNS, ENERGY_COLUMNS, GRAVITY_COLUMNS,
    GRAVITY_COMPONENTS_COLUMNS, LAMB_OSEEN_COLUMNS, RINGS_COLUMNS, RING_COLUMNS, SPECTRA_COLUMNS,
};
use std::f64::consts::TAU;

/// Bytes of one complex f64.
const C64: u64 = 16;
/// A number in a CSV log with its separator: `format_f64` writes 17 significant digits, so
/// `-1.2345678901234567e-10,` at most (three-digit exponents aside).
const CSV_NUMBER_BYTES: u64 = 24;
/// The headers of one array in an npz file (zip entry and directory, npy header), at most.
const NPZ_ARRAY_OVERHEAD: u64 = 512;
/// A checkpoint's `meta.json` (clock, schedules, CSV lengths, devices, model scalars), at most.
const CHECKPOINT_META_BYTES: u64 = 4096;
/// `manifest.json` without accuracy checks (stage times, devices, evaluators, resumes), at most.
const MANIFEST_BYTES: u64 = 16 * 1024;
/// One FMM accuracy check recorded in the manifest, at most.
const MANIFEST_CHECK_BYTES: u64 = 512;
/// One entry of a `.pvd` collection file, and the file's own lines.
const PVD_ENTRY_BYTES: u64 = 128;
const PVD_HEADER_BYTES: u64 = 256;
/// Of the raw RGB bytes of a line plot (`energy.png`, `spectrum.png`), the most its PNG takes:
/// measured up to 6.4 % for the energy and spectrum plots of the cases.
const LINE_PLOT_FRACTION: f64 = 0.10;
/// The same for the particle runs' two-panel plots (`ring.png`, `rings.png`, `lamb-oseen.png`):
/// measured up to 10.4 %.
const PARTICLE_PLOT_FRACTION: f64 = 0.15;
/// The same for the gravity pictures and the animation's frames (colour maps over most of the
/// picture): half their raw size.
const PICTURE_FRACTION: f64 = 0.5;

/// The disk rows of a case with `particles` initial particles: (what, bytes) per part.
pub fn estimate(case: &Case, particles: usize) -> Vec<(String, u64)> {
    let counts = Counts::of(case);
    let np = particles as u64;
    let mut rows = Vec::new();
    let solvers = 1 + u64::from(case.vortex.is_some());
    // Counts of a schedule in steps are estimates when Δt is adaptive.
    let about = |cadence: Cadence| match cadence {
        Cadence::Steps(_) if counts.steps_estimated => "about ",
        _ => "",
    };
    let csv = csv_bytes(case, &counts, np);
    rows.push((
        format!(
            "CSV logs: {}{} output rows{}",
            about(case.output.cadence),
            counts.outputs,
            if case.spectral.is_some() {
                format!(", spectra at {} times", counts.spectra)
            } else {
                String::new()
            }
        ),
        csv,
    ));
    if let Some(s) = &case.spectral {
        let o = &case.output;
        // With both solvers each picture has its comparison panel.
        let sizes = if case.vortex.is_some() {
            [
                postprocess::ENERGY_COMPARE_SIZE,
                postprocess::SPECTRUM_COMPARE_SIZE,
            ]
        } else {
            [postprocess::ENERGY_SIZE, postprocess::SPECTRUM_SIZE]
        };
        let [energy, spectrum] = sizes.map(|size| png_bound(size, LINE_PLOT_FRACTION));
        rows.push(("energy.png, spectrum.png".into(), energy + spectrum));
        if counts.fields > 0 {
            rows.push((
                format!(
                    "fields at {} times, {} solver(s), {}",
                    counts.fields, solvers, o.fields_precision
                ),
                // (fields_disk_bytes' allowance for headers covers the .pvd files.)
                counts.fields
                    * solvers
                    * fields_disk_bytes(s.n, o.fields_stride, o.fields_precision),
            ));
            // A panel per solver in each picture.
            let (structures, vorticity) = png_bounds(s.n / o.fields_stride.max(1));
            rows.push((
                format!(
                    "structures and vorticity pictures at {} times",
                    counts.fields
                ),
                counts.fields * solvers * (structures + vorticity),
            ));
        }
        // u, v, w and the 0-d t and step.
        rows.push((
            "final field".into(),
            3 * (s.n as u64).pow(3) * 8 + 5 * NPZ_ARRAY_OVERHEAD,
        ));
    } else if let Some(g) = &case.gravity {
        rows.extend(gravity_rows(case, g, &counts, particles));
    } else {
        let (name, size) = match case.initial {
            InitialCondition::CoaxialRings { .. } => {
                (postprocess::RINGS_PNG, postprocess::RINGS_SIZE)
            }
            InitialCondition::VortexTube { .. } => {
                (postprocess::LAMB_OSEEN_PNG, postprocess::LAMB_OSEEN_SIZE)
            }
            _ => (postprocess::RING_PNG, postprocess::RING_SIZE),
        };
        rows.push((name.into(), png_bound(size, PARTICLE_PLOT_FRACTION)));
    }
    if let Some(cadence) = case.vortex.as_ref().and_then(|v| v.snapshots) {
        rows.push((
            format!(
                "particle snapshots at {}{} times",
                about(cadence),
                counts.snapshots
            ),
            counts.snapshots * snapshot_disk_bytes(particles) + pvd_bytes(counts.snapshots),
        ));
    }
    let kept = (case.checkpoint.keep as u64 + 1).min(counts.checkpoints);
    rows.push((
        format!("checkpoints (up to {kept} at once)"),
        kept * checkpoint_bytes(case, np),
    ));
    rows.push((
        "case.toml, manifest.json".into(),
        case.to_toml_string().len() as u64 + manifest_bytes(case, &counts),
    ));
    rows
}

/// How often things happen in a run of the case.
#[derive(Debug, Clone, PartialEq)]
struct Counts {
    /// Steps to t_end (an upper bound with a fixed Δt, an estimate with `cfl`).
    steps: u64,
    /// Whether `steps` is an estimate (adaptive Δt).
    steps_estimated: bool,
    /// Outputs (`[output]` cadence and the end).
    outputs: u64,
    /// Spectrum times.
    spectra: u64,
    /// Fields times.
    fields: u64,
    /// Particle snapshots.
    snapshots: u64,
    /// Checkpoints (their cadence and the end).
    checkpoints: u64,
}

impl Counts {
    fn of(case: &Case) -> Counts {
        let (steps, steps_estimated) = steps(case);
        let t_end = case.time.t_end;
        let o = &case.output;
        let (spectra, fields) = if case.spectral.is_some() {
            (o.spectra_times.len() as u64, o.fields_times.len() as u64)
        } else {
            (0, 0)
        };
        Counts {
            steps,
            steps_estimated,
            outputs: firings(o.cadence, true, t_end, steps),
            spectra,
            fields,
            snapshots: case
                .vortex
                .as_ref()
                .and_then(|v| v.snapshots)
                .map_or(0, |c| firings(c, false, t_end, steps)),
            checkpoints: firings(case.checkpoint.cadence, true, t_end, steps),
        }
    }
}

/// How many times a schedule of `cadence` fires in a run of `steps` steps to `t_end` (at the
/// start, on its cadence, and at the end when `at_end`), as `run::schedule` fires it.
fn firings(cadence: Cadence, at_end: bool, t_end: f64, steps: u64) -> u64 {
    match cadence {
        Cadence::Steps(n) => steps / n + 1 + u64::from(at_end && !steps.is_multiple_of(n)),
        Cadence::Time(d) => {
            let k = (t_end / d + 1e-9).floor();
            let last_at_end = t_end - k * d <= 1e-9 * t_end;
            k as u64 + 1 + u64::from(at_end && !last_at_end)
        }
    }
}

/// The steps of a run to t_end and whether that is an estimate. With a fixed Δt, ⌈t_end/Δt⌉,
/// plus one step for each event time in (0, t_end) when some event time is off the Δt grid
/// (the step before it is shortened to land on it, shifting the grid). With `cfl`, t_end over
/// the initial field's CFL step ([`cfl_step_guess`]), at most `dt_max` (one step when that is
/// below the run core's floor, where the run stops). `time.max_steps` caps both.
fn steps(case: &Case) -> (u64, bool) {
    let t_end = case.time.t_end;
    let (steps, estimated) = match case.time.step {
        TimeStep::Fixed { dt } => {
            let base = (t_end / dt - 1e-6).ceil().max(1.0) as u64;
            let on_grid = |t: f64| ((t / dt) - (t / dt).round()).abs() <= 1e-6;
            let o = &case.output;
            let mut cadences = vec![o.cadence, case.checkpoint.cadence];
            cadences.extend(case.vortex.as_ref().and_then(|v| v.snapshots));
            let mut lists = vec![&o.spectra_times, &o.fields_times];
            if case.spectral.is_none() {
                lists.clear();
            }
            let off_grid = cadences
                .iter()
                .any(|c| matches!(c, Cadence::Time(d) if !on_grid(*d)))
                || lists.iter().any(|l| l.iter().any(|&t| !on_grid(t)));
            let events: u64 = if off_grid {
                cadences
                    .iter()
                    .filter(|c| matches!(c, Cadence::Time(_)))
                    .map(|&c| firings(c, false, t_end, 0))
                    .sum::<u64>()
                    + lists.iter().map(|l| l.len() as u64).sum::<u64>()
            } else {
                0
            };
            (base + events, false)
        }
        TimeStep::Cfl { cfl, dt_max } => {
            let dt = cfl_step_guess(case, cfl).min(dt_max.unwrap_or(f64::INFINITY));
            // A step below the run core's floor stops the run at its first step.
            let floor = crate::run::simulation::DT_FLOOR_OVER_T_END * t_end;
            let steps = if dt < floor { 1.0 } else { (t_end / dt).ceil() };
            (steps.max(1.0) as u64, true)
        }
    };
    match case.time.max_steps {
        Some(m) => (steps.min(m), estimated),
        None => (steps, estimated),
    }
}

/// The adaptive step at t = 0, roughly: CFL × the finest grid spacing over the initial field's
/// largest speed (|u| + |v| + |w| for the fields, Γ/(2πσ) for the particle-defined flows).
fn cfl_step_guess(case: &Case, cfl: f64) -> f64 {
    let h = [
        case.spectral.as_ref().map(|s| s.n),
        case.vortex.as_ref().map(|v| v.n),
    ]
    .into_iter()
    .flatten()
    .map(|n| TAU / n as f64)
    .fold(f64::INFINITY, f64::min);
    let core_speed = |circulation: f64, core: f64| circulation.abs() / (TAU * core);
    let speed = match &case.initial {
        InitialCondition::TaylorGreen { amplitude } => *amplitude,
        InitialCondition::ShearWave {
            amplitude,
            polarisation,
            ..
        } => amplitude * polarisation.iter().map(|a| a.abs()).sum::<f64>(),
        // A Gaussian field's largest |u| + |v| + |w| over a grid: about 8 u0.
        InitialCondition::Isotropic { u0, .. } => 8.0 * u0,
        InitialCondition::VortexRing {
            circulation, core, ..
        }
        | InitialCondition::VortexTube { circulation, core } => core_speed(*circulation, *core),
        InitialCondition::CoaxialRings { rings } => rings
            .iter()
            .map(|r| core_speed(r.circulation, r.core))
            .fold(0.0, f64::max),
        // Gravity cases take a fixed step (the parser refuses `cfl` there).
        InitialCondition::Bodies(_) => return f64::INFINITY,
    };
    cfl * h / speed
}

/// Bytes of a CSV line of `numbers` numbers and integers of up to `ints`' values.
fn csv_line(numbers: usize, ints: &[u64]) -> u64 {
    numbers as u64 * CSV_NUMBER_BYTES + ints.iter().map(|&m| digits(m) + 1).sum::<u64>()
}

/// Bytes of a CSV header line.
fn csv_header(columns: &[&str]) -> u64 {
    columns.iter().map(|c| c.len() as u64 + 1).sum()
}

/// Decimal digits of `m`.
fn digits(m: u64) -> u64 {
    m.checked_ilog10().map_or(1, |d| d as u64 + 1)
}

/// Bytes of every CSV log the case writes ([`postprocess::layout`]'s files), from the counts of
/// outputs and spectra and the rows each writes.
fn csv_bytes(case: &Case, c: &Counts, np: u64) -> u64 {
    let outputs = c.outputs;
    match (&case.spectral, &case.initial) {
        (Some(s), _) => {
            let shells = shell_count(&SpectralGrid::new(s.n, s.dealias).layout()) as u64;
            let energy = csv_header(&ENERGY_COLUMNS)
                + outputs * csv_line(ENERGY_COLUMNS.len() - 1, &[c.steps]);
            let spectra = |shells: u64| {
                csv_header(&SPECTRA_COLUMNS) + c.spectra * shells * csv_line(2, &[shells])
            };
            let mut bytes = energy + spectra(shells);
            if case.vortex.is_some() {
                let vortex_shells = shell_count(&ModeLayout::new(grid_kmax(s.n))) as u64;
                let columns = vortex_energy_columns();
                // step, rbf_iterations (or nan) and particles are integers.
                let vortex_energy = csv_header(&columns)
                    + outputs * csv_line(columns.len() - 3, &[c.steps, 9999, np]);
                // K rows (quantity K, k = 0) and E rows of the shells both spectra have.
                let comparison = csv_header(&COMPARISON_COLUMNS)
                    + outputs * csv_line(4, &[0, 0])
                    + c.spectra * (shells.min(vortex_shells) - 1) * csv_line(4, &[0, shells]);
                bytes += vortex_energy + spectra(vortex_shells) + comparison;
            }
            bytes
        }
        (None, InitialCondition::CoaxialRings { rings }) => {
            csv_header(&RINGS_COLUMNS)
                + outputs * rings.len() as u64 * csv_line(RINGS_COLUMNS.len(), &[])
        }
        (None, InitialCondition::VortexTube { core, .. }) => {
            csv_header(&LAMB_OSEEN_COLUMNS)
                + outputs
                    * profile_radii(*core).len() as u64
                    * csv_line(LAMB_OSEEN_COLUMNS.len(), &[])
        }
        (None, InitialCondition::Bodies(_)) => {
            // A row per output and one per (galaxy, component): at most 2 × 4.
            csv_header(&GRAVITY_COLUMNS)
                + outputs * csv_line(GRAVITY_COLUMNS.len() - 1, &[c.steps])
                + csv_header(&GRAVITY_COMPONENTS_COLUMNS)
                + outputs * 8 * csv_line(GRAVITY_COMPONENTS_COLUMNS.len(), &[])
        }
        (None, _) => csv_header(&RING_COLUMNS) + outputs * csv_line(RING_COLUMNS.len(), &[]),
    }
}

/// Bytes of a `.pvd` collection of `entries` data sets.
fn pvd_bytes(entries: u64) -> u64 {
    PVD_HEADER_BYTES + entries * PVD_ENTRY_BYTES
}

/// The most a PNG of `size` pixels (RGB) takes when it compresses to `fraction` of its raw
/// bytes or better.
fn png_bound(size: (u32, u32), fraction: f64) -> u64 {
    (size.0 as f64 * size.1 as f64 * 3.0 * fraction).ceil() as u64
}

/// The most a panel of the structures picture and of the vorticity picture of an n³ field take
/// (bytes): measured on white noise, the least compressible field there is (Q isosurfaces and
/// slices of noise at n = 16 … 256, one and two panels: structures 428, 598, 718, 787 and 796
/// kB per panel, vorticity 357, 426, 517, 631 and 740 kB), with a few percent to spare; the
/// smooth fields of the cases take less (Taylor–Green at 16³: 183 and 327 kB). Both grow with
/// log₂ n; the structures picture levels off, the vorticity slice is capped at its raw size.
pub fn png_bounds(n: usize) -> (u64, u64) {
    let doublings = (n.max(16) as f64 / 16.0).log2();
    let kib = |x: f64| (x * 1024.0) as u64;
    let structures = kib((440.0 + 170.0 * doublings).min(850.0));
    let vorticity = kib((360.0 + 100.0 * doublings).min(1024.0));
    (structures, vorticity)
}

/// Bytes of one checkpoint: the spectral modes (3 complex values per retained mode), the
/// particles' state (x, α, σ, id and the AB2 history of velocity and stretching: 14 numbers per
/// particle), the npz headers and `meta.json`.
fn checkpoint_bytes(case: &Case, np: u64) -> u64 {
    let mut bytes = CHECKPOINT_META_BYTES;
    if let Some(s) = &case.spectral {
        bytes +=
            SpectralGrid::new(s.n, s.dealias).layout().len() as u64 * 3 * C64 + NPZ_ARRAY_OVERHEAD;
    }
    if case.vortex.is_some() {
        bytes += np * 14 * 8 + 8 * NPZ_ARRAY_OVERHEAD;
    }
    if case.gravity.is_some() {
        // Mass, position, velocity, component and galaxy: 9 numbers per body.
        bytes += np * 9 * 8 + 5 * NPZ_ARRAY_OVERHEAD;
    }
    bytes
}

/// A gravity run's body snapshots and pictures.
fn gravity_rows(
    case: &Case,
    g: &crate::gravity::cases::GravityConfig,
    counts: &Counts,
    bodies: usize,
) -> Vec<(String, u64)> {
    let t_end = case.time.t_end;
    let snapshots = g
        .snapshots
        .map_or(0, |c| firings(c, true, t_end, counts.steps))
        + g.pictures_times.len() as u64;
    let formats = g.written_formats();
    let names: Vec<&str> = formats.iter().map(|f| f.as_str()).collect();
    let per_snapshot = crate::output::bodies::body_snapshot_disk_bytes(bodies, &formats);
    // A picture has two panels; an animation frame one (both RGB, compressing to at least
    // the field pictures' fraction).
    let picture = png_bound(
        postprocess::gravity::gravity_picture_size(2),
        PICTURE_FRACTION,
    );
    let frame = png_bound(
        postprocess::gravity::gravity_picture_size(1),
        PICTURE_FRACTION,
    );
    vec![
        (
            format!(
                "body snapshots at up to {snapshots} times ({})",
                names.join(", ")
            ),
            snapshots * per_snapshot + pvd_bytes(snapshots),
        ),
        (
            format!(
                "pictures at {} times, the animation, energy and Lagrangian radii plots",
                g.pictures_times.len()
            ),
            // The density and galaxies pictures at each picture time; the animation's frames.
            2 * g.pictures_times.len() as u64 * picture
                + snapshots.min(postprocess::gravity::MAX_ANIMATION_FRAMES as u64) * frame
                + 2 * png_bound(postprocess::ENERGY_SIZE, LINE_PLOT_FRACTION),
        ),
    ]
}

/// Bytes of `manifest.json`: its fixed part and, with the FMM, its accuracy checks (one every
/// `accuracy_check_every` evaluations, one per step and output).
fn manifest_bytes(case: &Case, c: &Counts) -> u64 {
    let checks = match &case.vortex {
        Some(v) if matches!(v.evaluator, EvaluatorKind::Fmm | EvaluatorKind::Auto) => {
            let every = v.evaluator_options().check_every.max(1);
            (c.steps + c.outputs) / every + 2
        }
        _ => 0,
    };
    MANIFEST_BYTES + checks * MANIFEST_CHECK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Case;

    fn case(text: &str) -> Case {
        Case::from_toml_str(text, "t.toml").unwrap()
    }

    const BASE: &str =
        "[flow]\nnu = 0.01\n[initial]\nkind = \"taylor-green\"\n[spectral]\nn = 16\n";

    #[test]
    fn schedules_fire_as_the_run_core_fires_them() {
        // 25 steps of 0.02 to 0.5, outputs every step and at 0, 0.5 (spectra).
        let c = case(&format!(
            "{BASE}[time]\nt_end = 0.5\ndt = 0.02\n[output]\nevery_steps = 1\n\
             spectra_times = [0.0, 0.5]\n[checkpoint]\nevery_steps = 10\n"
        ));
        let n = Counts::of(&c);
        assert_eq!(
            (n.steps, n.outputs, n.spectra, n.checkpoints),
            (25, 26, 2, 4)
        );
        // Time cadences on the grid: 0, 0.1, …, 0.5 and t_end; off it, a step more per event.
        let c = case(&format!(
            "{BASE}[time]\nt_end = 0.5\ndt = 0.02\n[output]\nevery_time = 0.1\n\
             [checkpoint]\nevery_time = 0.2\n"
        ));
        let n = Counts::of(&c);
        assert_eq!((n.steps, n.outputs, n.checkpoints), (25, 6, 4));
        let c = case(&format!(
            "{BASE}[time]\nt_end = 0.5\ndt = 0.02\n[output]\nevery_time = 0.03\n"
        ));
        let n = Counts::of(&c);
        // An event off the grid: every event time may cost a step (0, 0.03, …, 0.48; the
        // default checkpoints every 0.05 and spectra at 0 and 0.5).
        assert_eq!(n.steps, 25 + 17 + 11 + 2, "{n:?}");
        assert_eq!(n.outputs, 18);
        assert!(!n.steps_estimated);
    }

    #[test]
    fn adaptive_steps_are_estimated_and_capped() {
        let c = case(&format!(
            "{BASE}[time]\nt_end = 1.0\ncfl = 0.5\n[output]\nevery_steps = 1\n"
        ));
        let n = Counts::of(&c);
        // Δt ≈ 0.5 · (2π/16) / 1.
        assert_eq!(n.steps, (1.0 / (0.5 * TAU / 16.0)).ceil() as u64);
        assert!(n.steps_estimated);
        let c = case(&format!(
            "{BASE}[time]\nt_end = 1.0\ncfl = 0.5\nmax_steps = 3\n[output]\nevery_steps = 1\n"
        ));
        assert_eq!(Counts::of(&c).steps, 3);
        // A step the run core refuses: the run stops at once.
        let c = case(&format!(
            "{BASE}[time]\nt_end = 1.0\ncfl = 1e-14\n[output]\nevery_steps = 1\n"
        ));
        assert_eq!(Counts::of(&c).steps, 1);
        let c = case(&format!(
            "{BASE}[time]\nt_end = 1.0\ncfl = 0.5\n[output]\nevery_steps = 2\n"
        ));
        assert!(estimate(&c, 0)[0].0.starts_with("CSV logs: about "));
        let c = case(&format!(
            "{BASE}[time]\nt_end = 1.0\ncfl = 0.5\n[output]\nevery_time = 0.5\n"
        ));
        assert_eq!(
            estimate(&c, 0)[0].0,
            "CSV logs: 3 output rows, spectra at 2 times"
        );
    }

    #[test]
    fn picture_bounds_grow_with_the_grid_and_level_off() {
        let (s16, v16) = png_bounds(16);
        let (s256, v256) = png_bounds(256);
        assert_eq!(png_bounds(8), (s16, v16));
        assert!(s256 > s16 && v256 > v16);
        assert_eq!(png_bounds(2048).0, png_bounds(4096).0);
        assert!(png_bounds(1 << 20).1 <= 1 << 20);
    }
}
