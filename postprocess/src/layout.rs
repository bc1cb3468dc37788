//! The run directory's layout: file names and CSV columns, defined once. `vpm` writes these
//! files and this crate reads them, both through the constants here; [`RUN_ENTRIES`] lists every
//! entry a run writes (what `vpm run --force` removes from an earlier run's directory).

/// The case as the run resolved it (every default filled in), in the run directory.
pub const CASE_TOML: &str = "case.toml";
/// What ran, where, and how it went, in the run directory.
pub const MANIFEST_JSON: &str = "manifest.json";
/// The checkpoints' folder.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// The particle snapshots' folder.
pub const SNAPSHOTS_DIR: &str = "snapshots";
/// The energy-decay plot of a turbulence run, in the run directory.
pub const ENERGY_PNG: &str = "energy.png";
/// The spectrum plot of a turbulence run, in the run directory.
pub const SPECTRUM_PNG: &str = "spectrum.png";
/// The vortex-ring plot, in the run directory.
pub const RING_PNG: &str = "ring.png";
/// The coaxial-rings plot, in the run directory.
pub const RINGS_PNG: &str = "rings.png";
/// The Lamb–Oseen plot, in the run directory.
pub const LAMB_OSEEN_PNG: &str = "lamb-oseen.png";
/// The start of the structures pictures' names ([`structures_png`]).
const STRUCTURES_PNG_PREFIX: &str = "structures-";
/// The start of the vorticity pictures' names ([`vorticity_slice_png`]).
const VORTICITY_PNG_PREFIX: &str = "vorticity-";

/// The spectral solver's folder.
pub const SPECTRAL_DIR: &str = "spectral";
/// The vortex particle solver's folder.
pub const VORTEX_DIR: &str = "vortex";

/// `spectral/energy.csv`: a row per output time.
pub const SPECTRAL_ENERGY_CSV: &str = "spectral/energy.csv";
/// `spectral/spectra.csv`: a row per shell at each spectrum time.
pub const SPECTRAL_SPECTRA_CSV: &str = "spectral/spectra.csv";
/// `vortex/energy.csv` (field-defined runs with particles).
pub const VORTEX_ENERGY_CSV: &str = "vortex/energy.csv";
/// `vortex/spectra.csv` (field-defined runs with particles).
pub const VORTEX_SPECTRA_CSV: &str = "vortex/spectra.csv";
/// `comparison.csv`: vortex against spectral, K at output times and E(k) at spectrum times.
pub const COMPARISON_CSV: &str = "comparison.csv";
/// The vortex-ring history, relative to the run directory.
pub const RING_CSV: &str = "vortex/ring.csv";
/// The coaxial rings' history (`kind = "coaxial-rings"`), relative to the run directory.
pub const RINGS_CSV: &str = "vortex/rings.csv";
/// The Lamb–Oseen velocity profiles, relative to the run directory.
pub const LAMB_OSEEN_CSV: &str = "vortex/lamb_oseen.csv";
/// The final spectral velocity field.
pub const FINAL_NPZ: &str = "spectral/final.npz";

/// Columns of `energy.csv` (both solvers; the vortex file adds [`VORTEX_EXTRA_COLUMNS`] and
/// [`VORTEX_DISSIPATION_COLUMNS`]). `max_vorticity` is max |ω| over the nodes of the spectral
/// grid (for the particles: of their velocity sampled there, as every particle diagnostic).
pub const ENERGY_COLUMNS: [&str; 14] = [
    "t",
    "step",
    "dt",
    "K",
    "eps",
    "Z",
    "minus_dKdt",
    "u_rms",
    "L",
    "T",
    "lambda",
    "Re_lambda",
    "max_div",
    "max_vorticity",
];
/// Columns of `spectra.csv`.
pub const SPECTRA_COLUMNS: [&str; 3] = ["t", "k", "E"];
/// Extra columns of `vortex/energy.csv` (after the [`ENERGY_COLUMNS`]; there `minus_dKdt` is
/// the backward difference over the output rows, (K_{i−1} − K_i)/(t_i − t_{i−1}): the central
/// difference at the midpoint (t_{i−1} + t_i)/2, since an append-only row cannot wait for the
/// next one; `nan` in the first row. The particle method has no right-hand side in Fourier
/// space to take it from, as the spectral solver does).
pub const VORTEX_EXTRA_COLUMNS: [&str; 8] = [
    "sigma_max_over_sigma0",
    "rbf_iterations",
    "rbf_residual",
    "total_strength",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "particles",
];
/// The numerical-dissipation columns of `vortex/energy.csv` (after [`VORTEX_EXTRA_COLUMNS`]),
/// each over the steps since the previous row (docs/physics.md §3.6): `reinits`, the
/// reinitialisations done; `reinits_measured`, those measured (every `vortex.dissipation_every`-th):
/// K of the particle velocity on the spectral grid just before and just after; `reinit_dK`,
/// Σ (K_after − K_before) over them; `reinit_dK_rel`, their mean (K_after − K_before)/K_before;
/// `K_before_reinit`, K just before the last of them; `stepping_dK_excess_rel`, over the
/// stretches of steps from a measured reinitialisation to the next reinitialisation that ended
/// since the previous row, the mean of (K_end − K_start + ∫2νZ dt)/K_start (∫ by the trapezoid
/// of its two ends): the change by stepping beyond the viscous loss. Means are `nan` when there
/// is nothing to average.
pub const VORTEX_DISSIPATION_COLUMNS: [&str; 6] = [
    "reinits",
    "reinits_measured",
    "reinit_dK",
    "reinit_dK_rel",
    "K_before_reinit",
    "stepping_dK_excess_rel",
];
/// Columns of `comparison.csv`: `quantity` is `K` (k = 0) or `E` (shell k); rel_diff =
/// (vortex − spectral)/spectral.
pub const COMPARISON_COLUMNS: [&str; 6] = ["t", "quantity", "k", "spectral", "vortex", "rel_diff"];
/// Columns of `vortex/ring.csv`.
pub const RING_COLUMNS: [&str; 14] = [
    "t",
    "step",
    "dt",
    "z",
    "radius",
    "speed",
    "saffman_speed",
    "core",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "total_strength",
    "particles",
    "sigma_max_over_sigma0",
];
/// Columns of `vortex/rings.csv`: one row per output time and ring (`ring` = 1, 2, … in the
/// case's order). Per ring: its impulse-weighted axial position `z`, impulse radius `radius`,
/// speed dz/dt, Saffman's speed for its radius and `core` (the case's core, spread by
/// viscosity, times √(R/radius): a ring keeps its volume 2π²Rσ² as its radius changes; so
/// `speed − saffman_speed` is what the other rings induce), and its particle count; then the
/// totals over all particles, the same in every ring's row at one time: the impulse ½Σx×α, Σα
/// (`total_strength_*`) and the largest core radius `sigma_max`.
pub const RINGS_COLUMNS: [&str; 17] = [
    "t",
    "step",
    "dt",
    "ring",
    "z",
    "radius",
    "speed",
    "saffman_speed",
    "core",
    "particles",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "total_strength_x",
    "total_strength_y",
    "total_strength_z",
    "sigma_max",
];
/// Columns of `vortex/lamb_oseen.csv` (one row per output time and radius).
pub const LAMB_OSEEN_COLUMNS: [&str; 5] = ["t", "r", "u_theta", "u_exact", "rel_err"];

/// The columns of `vortex/energy.csv`: [`ENERGY_COLUMNS`], [`VORTEX_EXTRA_COLUMNS`], then
/// [`VORTEX_DISSIPATION_COLUMNS`].
pub fn vortex_energy_columns() -> Vec<&'static str> {
    ENERGY_COLUMNS
        .iter()
        .chain(VORTEX_EXTRA_COLUMNS.iter())
        .chain(VORTEX_DISSIPATION_COLUMNS.iter())
        .copied()
        .collect()
}

/// The folder of the 3-D field snapshots: `fields/<solver>-<step:08>.npz` (and `.vti`/`.pvd`
/// files for ParaView, which this crate ignores).
pub const FIELDS_DIR: &str = "fields";
/// Array of a field snapshot: velocity, shape (n, n, n, 3), f32 or f64.
pub const FIELD_VELOCITY: &str = "velocity";
/// Array of a field snapshot: vorticity, shape (n, n, n, 3), f32 or f64.
pub const FIELD_VORTICITY: &str = "vorticity";
/// Array of a field snapshot: Q = ½(‖Ω‖² − ‖S‖²), shape (n, n, n), f32 or f64.
pub const FIELD_Q: &str = "Q";
/// Array of a field snapshot: the simulation time, 0-d f64.
pub const FIELD_T: &str = "t";
/// Array of a field snapshot: the step, 0-d u64.
pub const FIELD_STEP: &str = "step";
/// Array of a field snapshot: the subsampling of the solver grid, 0-d u64.
pub const FIELD_STRIDE: &str = "stride";

/// The name, without extension, of a solver's field snapshot at `step` inside [`FIELDS_DIR`]:
/// `fields_stem("spectral", 125)` is `"spectral-00000125"`. `solver` is a solver's folder name
/// ([`SPECTRAL_DIR`] or [`VORTEX_DIR`]).
pub fn fields_stem(solver: &str, step: u64) -> String {
    format!("{solver}-{step:08}")
}

/// The picture of the Q isosurfaces at `step`, in the run directory: `"structures-00000125.png"`.
pub fn structures_png(step: u64) -> String {
    format!("{STRUCTURES_PNG_PREFIX}{step:08}.png")
}

/// The picture of |ω| on the mid-plane z = 0 at `step`, in the run directory:
/// `"vorticity-00000125.png"`.
pub fn vorticity_slice_png(step: u64) -> String {
    format!("{VORTICITY_PNG_PREFIX}{step:08}.png")
}

/// The folder of a gravity run's logs and pictures.
pub const GRAVITY_DIR: &str = "gravity";
/// A gravity run's diagnostics, one row per output.
pub const GRAVITY_CSV: &str = "gravity/energy.csv";
/// Columns of [`GRAVITY_CSV`]: time (model units), step, kinetic, potential and total energy,
/// the relative energy error (E − E₀)/|E₀|, linear and angular momentum, the virial ratio 2K/|W|
/// and the 10/50/90 % Lagrangian radii about the centre of mass.
pub const GRAVITY_COLUMNS: [&str; 16] = [
    "t",
    "step",
    "kinetic",
    "potential",
    "energy",
    "energy_error",
    "px",
    "py",
    "pz",
    "lx",
    "ly",
    "lz",
    "virial_ratio",
    "r10",
    "r50",
    "r90",
];
/// A gravity run's per-component mass centres, one row per (output, galaxy, component).
pub const GRAVITY_COMPONENTS_CSV: &str = "gravity/components.csv";
/// Columns of [`GRAVITY_COMPONENTS_CSV`]: the component's name ("body", "disk", "bulge", "halo").
pub const GRAVITY_COMPONENTS_COLUMNS: [&str; 10] = [
    "t",
    "galaxy",
    "component",
    "mass",
    "x",
    "y",
    "z",
    "vx",
    "vy",
    "vz",
];
/// A gravity run's units, written at its start for the pictures (JSON: `length` (number),
/// `length_unit` ("au", "pc", "kpc", "Mpc"), `mass_msun`, `time_seconds`; `{}` for N-body units).
pub const GRAVITY_UNITS_JSON: &str = "gravity/units.json";
/// The body snapshot at `step` inside [`SNAPSHOTS_DIR`], without extension:
/// `"bodies-00000125"` (`.npz` with arrays `mass` (n), `x`, `v` (n×3), `component`, `galaxy`
/// (n, u8), `t`, `step` (scalars); `.vtp` for ParaView).
pub fn bodies_stem(step: u64) -> String {
    format!("bodies-{step:08}")
}
/// The log surface density picture at `step`, in [`GRAVITY_DIR`]: `"density-00000125.png"`.
pub const DENSITY_PNG_PREFIX: &str = "density-";
/// The picture of the bodies coloured by galaxy at `step`, in [`GRAVITY_DIR`].
pub const GALAXIES_PNG_PREFIX: &str = "galaxies-";
/// The animation (APNG) of the surface density over every body snapshot, in [`GRAVITY_DIR`].
pub const ANIMATION_PNG: &str = "gravity/animation.png";
/// The energy error against time, in the run directory.
pub const GRAVITY_ENERGY_PNG: &str = "energy-error.png";
/// The Lagrangian radii against time, in the run directory.
pub const LAGRANGIAN_PNG: &str = "lagrangian-radii.png";

/// An entry of the run directory that a run writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEntry {
    /// The folder of this name.
    Folder(&'static str),
    /// The file of this name.
    File(&'static str),
    /// A file per step: `<prefix><digits>.png`.
    PicturePerStep(&'static str),
}

/// Every entry of the run directory that a run writes (the lock file `.vpm.lock` aside, which
/// belongs to the process writing into the directory).
pub const RUN_ENTRIES: [RunEntry; 18] = [
    RunEntry::Folder(GRAVITY_DIR),
    RunEntry::File(GRAVITY_ENERGY_PNG),
    RunEntry::File(LAGRANGIAN_PNG),
    RunEntry::Folder(SPECTRAL_DIR),
    RunEntry::Folder(VORTEX_DIR),
    RunEntry::Folder(FIELDS_DIR),
    RunEntry::Folder(CHECKPOINTS_DIR),
    RunEntry::Folder(SNAPSHOTS_DIR),
    RunEntry::File(CASE_TOML),
    RunEntry::File(MANIFEST_JSON),
    RunEntry::File(COMPARISON_CSV),
    RunEntry::File(ENERGY_PNG),
    RunEntry::File(SPECTRUM_PNG),
    RunEntry::File(RING_PNG),
    RunEntry::File(RINGS_PNG),
    RunEntry::File(LAMB_OSEEN_PNG),
    RunEntry::PicturePerStep(STRUCTURES_PNG_PREFIX),
    RunEntry::PicturePerStep(VORTICITY_PNG_PREFIX),
];

impl RunEntry {
    /// Whether `name` (a name in the run directory) is this entry.
    pub fn matches(&self, name: &str) -> bool {
        match *self {
            RunEntry::Folder(n) | RunEntry::File(n) => name == n,
            RunEntry::PicturePerStep(prefix) => name
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(".png"))
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())),
        }
    }
}

/// The entry of [`RUN_ENTRIES`] that `name` (a name in the run directory) is, if any. The
/// temporary sibling of a file being replaced, left behind by a killed run, counts as that file:
/// `.<name>.tmp-<pid>` (vpm's files) or `<name>.tmp-<pid>-<k>` (this crate's pictures).
pub fn run_entry(name: &str) -> Option<RunEntry> {
    let name = match name.rsplit_once(".tmp-") {
        Some((file, tail))
            if tail.starts_with(|c: char| c.is_ascii_digit())
                && tail.bytes().all(|b| b.is_ascii_digit() || b == b'-') =>
        {
            file.strip_prefix('.').unwrap_or(file)
        }
        _ => name,
    };
    RUN_ENTRIES.into_iter().find(|e| e.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_entries_name_what_a_run_writes_and_nothing_else() {
        for name in [
            "fields",
            "checkpoints",
            "case.toml",
            "comparison.csv",
            "lamb-oseen.png",
            &structures_png(125),
            &vorticity_slice_png(0),
            ".energy.png.tmp-4242",
            ".manifest.json.tmp-7",
            "spectrum.png.tmp-12-0",
        ] {
            assert!(run_entry(name).is_some(), "{name}");
        }
        for name in [
            "notes.txt",
            "fields.bak",
            "structures-.png",
            "structures-12a.png",
            "vorticity-00000001.png.orig",
            ".energy.png.tmp-",
            ".notes.txt.tmp-12",
            ".vpm.lock",
            "Energy.png",
        ] {
            assert_eq!(run_entry(name), None, "{name}");
        }
    }
}
