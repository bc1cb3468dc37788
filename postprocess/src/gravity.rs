//! The pictures of a gravity (N-body) run directory (layout in [`crate::layout`]):
//!
//! * `gravity/density-<step:08>.png`: log10 of the surface density of the bodies drawn (the
//!   stars, that is disk and bulge bodies, when the run has any; else every body), projected on
//!   the x–y plane and, beside it, the x–z plane, in viridis with a colour bar, a scale bar and
//!   the time in physical units (`gravity/units.json`; N-body units without it);
//! * `gravity/galaxies-<step:08>.png`: the same view with each galaxy in its own colour (only
//!   for runs with more than one galaxy);
//! * `gravity/animation.png`: an animated PNG (APNG) of the x–y surface density over every body
//!   snapshot, with one view box (covering every frame) and one colour range (the largest
//!   density of all frames and [`DECADES`] below) for all frames, [`FRAME_DELAY_MS`] a frame;
//! * `energy-error.png`: |ΔE/E| against time (log axis) and `lagrangian-radii.png`: the 10, 50
//!   and 90 % Lagrangian radii against time, from `gravity/energy.csv`.
//!
//! The body snapshots are `snapshots/bodies-<step:08>.npz` (arrays `mass`, `x`, `v`,
//! `component`, `galaxy`, `t`, `step`). Every picture costs O(N) per snapshot (the bodies are
//! binned into the picture's pixels); pictures are deterministic, drawn with the embedded font.

use crate::axis::{format_number, LinearAxis, LogAxis};
use crate::chart::{finite_points, positive_points, thin_evenly, ChartAxis, BLUE, RED};
use crate::layout::{
    bodies_stem, ANIMATION_PNG, DENSITY_PNG_PREFIX, GALAXIES_PNG_PREFIX, GRAVITY_CSV, GRAVITY_DIR,
    GRAVITY_ENERGY_PNG, GRAVITY_UNITS_JSON, LAGRANGIAN_PNG, SNAPSHOTS_DIR,
};
use crate::particles::{draw_panel, points_of, Curve};
use crate::render::{
    draw_legend, plot_err, render_png, render_rgb, write_atomic, Anchor, Canvas, LegendEntry,
    Stroke, FAMILY,
};
use crate::structures::{centred, draw_colorbar, draw_fitted, viridis, ColorBar};
use crate::table::read_csv_columns;
use anyhow::{bail, Context, Result};
use ndarray::{Array0, Array1, Array2};
use ndarray_npy::NpzReader;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::fs::File;
use std::io::BufReader;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One Julian year in seconds.
pub const JULIAN_YEAR_SECONDS: f64 = 365.25 * 86_400.0;
/// The colour range of the density pictures spans this many decades below the largest density.
pub const DECADES: f64 = 4.0;
/// The animation's frame delay in milliseconds.
pub const FRAME_DELAY_MS: u16 = 100;
/// At most this many snapshots go into the animation (thinned evenly beyond, first and last
/// kept).
pub const MAX_ANIMATION_FRAMES: usize = 400;
/// By default the density and galaxies pictures are drawn at this many snapshot steps at most,
/// spread evenly (first and last included).
pub const DEFAULT_STILLS: usize = 5;

/// Width of one projection panel, of the side area (colour bar or legend), and the heights of
/// the title band, the panel-title band, the square image and the caption band, in pixels.
const PANEL_W: u32 = 620;
const SIDE_W: u32 = 190;
const TITLE_H: u32 = 56;
const SUBTITLE_H: u32 = 36;
const IMAGE_SIDE: u32 = 512;
const Y_LABEL_W: u32 = 86;
const X_LABEL_H: u32 = 56;
const CAPTION_H: u32 = 40;

/// Pixel size (width, height) of a density or galaxies picture with `panels` projections side
/// by side (the animation's frames have one).
pub fn gravity_picture_size(panels: usize) -> (u32, u32) {
    (
        PANEL_W * panels.max(1) as u32 + SIDE_W,
        TITLE_H + SUBTITLE_H + 10 + IMAGE_SIDE + X_LABEL_H + CAPTION_H,
    )
}

/// Pixel size (width, height) of `energy-error.png` and `lagrangian-radii.png`.
pub const GRAVITY_HISTORY_SIZE: (u32, u32) = (1000, 700);

/// A duration in years written with the prefix that reads best, three significant digits:
/// "350 yr", "12.5 Myr", "1.23 Gyr" (vpm's `gravity::units` uses it too).
pub fn format_years(years: f64) -> String {
    let (scale, unit) = year_unit(years.abs());
    format!("{} {unit}", three_significant(years / scale))
}

/// The unit ("yr", "kyr", "Myr", "Gyr") that reads best for `years` (≥ 0): the largest of which
/// `years` is at least a half (0.978 Gyr, 350 yr), and its size.
fn year_unit(years: f64) -> (f64, &'static str) {
    [(1e9, "Gyr"), (1e6, "Myr"), (1e3, "kyr")]
        .into_iter()
        .find(|(size, _)| years >= 0.5 * size)
        .unwrap_or((1.0, "yr"))
}

/// `x` to three significant digits, without trailing zeros: 0.978, 12.5, 350.
pub fn three_significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x == 0.0 { "0".into() } else { format!("{x}") };
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A gravity run's physical units, from `gravity/units.json`: one length unit is `length`
/// `length_unit`, one mass unit `mass_msun` solar masses, one time unit `time_seconds`.
#[derive(Clone, Debug, PartialEq)]
pub struct GravityUnits {
    /// The length unit in `length_unit`s.
    pub length: f64,
    /// "au", "pc", "kpc" or "Mpc".
    pub length_unit: String,
    /// The mass unit in solar masses.
    pub mass_msun: f64,
    /// The time unit in seconds.
    pub time_seconds: f64,
}

impl GravityUnits {
    /// The units of the run in `run_dir`: `None` without `gravity/units.json` or when it is `{}`
    /// (N-body units).
    ///
    /// # Errors
    ///
    /// The file cannot be read, is not a JSON object, or lacks a positive `length`, `mass_msun`
    /// or `time_seconds` or a known `length_unit`: an error naming the file.
    pub fn read(run_dir: &Path) -> Result<Option<GravityUnits>> {
        let path = run_dir.join(GRAVITY_UNITS_JSON);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        let Some(object) = value.as_object() else {
            bail!("{}: expected a JSON object", path.display());
        };
        if object.is_empty() {
            return Ok(None);
        }
        let number = |key: &str| {
            object
                .get(key)
                .and_then(serde_json::Value::as_f64)
                .filter(|v| v.is_finite() && *v > 0.0)
                .with_context(|| format!("{}: {key} must be a positive number", path.display()))
        };
        let units = GravityUnits {
            length: number("length")?,
            length_unit: object
                .get("length_unit")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string(),
            mass_msun: number("mass_msun")?,
            time_seconds: number("time_seconds")?,
        };
        if units.parsecs().is_none() {
            bail!(
                "{}: length_unit {:?} is not one of au, pc, kpc, Mpc",
                path.display(),
                units.length_unit
            );
        }
        Ok(Some(units))
    }

    /// One `length_unit` in parsecs.
    fn parsecs(&self) -> Option<f64> {
        match self.length_unit.as_str() {
            // 1 au / 1 pc (IAU 2012 B2, 2015 B2).
            "au" => Some(1.495_978_707e11 / 3.085_677_581_491_367e16),
            "pc" => Some(1.0),
            "kpc" => Some(1e3),
            "Mpc" => Some(1e6),
            _ => None,
        }
    }

    /// The time `t` (model units) in years.
    fn years(&self, t: f64) -> f64 {
        t * self.time_seconds / JULIAN_YEAR_SECONDS
    }
}

/// "t = 1.23 Gyr", or "t = 12.5 (N-body units)" without units.
fn time_caption(units: Option<&GravityUnits>, t: f64) -> String {
    match units {
        Some(u) => format!("t = {}", format_years(u.years(t))),
        None => format!("t = {} (N-body units)", three_significant(t)),
    }
}

/// A length `l` (model units) with its unit: "10 kpc", or "2.5 N-body units".
fn length_caption(units: Option<&GravityUnits>, l: f64) -> String {
    match units {
        Some(u) => format!("{} {}", three_significant(l * u.length), u.length_unit),
        None => format!("{} N-body units", three_significant(l)),
    }
}

/// The factor from model lengths to the axes' lengths and the axes' unit suffix (" (kpc)").
fn length_axis(units: Option<&GravityUnits>) -> (f64, String) {
    match units {
        Some(u) => (u.length, format!(" ({})", u.length_unit)),
        None => (1.0, String::new()),
    }
}

/// The factor from model times to the time axis and its description, for times up to `t_max`.
fn time_axis(units: Option<&GravityUnits>, t_max: f64) -> (f64, String) {
    match units {
        Some(u) => {
            let (scale, unit) = year_unit(u.years(t_max.abs()));
            (u.years(1.0) / scale, format!("t ({unit})"))
        }
        None => (1.0, "t (N-body units)".to_string()),
    }
}

/// The factor from model surface densities to the colour bar's and its unit.
fn density_unit(units: Option<&GravityUnits>) -> (f64, &'static str) {
    match units.and_then(|u| u.parsecs().map(|pc| (u, pc))) {
        Some((u, pc)) => (u.mass_msun / (u.length * pc).powi(2), "Msun/pc²"),
        None => (1.0, "N-body units"),
    }
}

/// One body snapshot as the pictures need it (velocities are not read).
#[derive(Clone, Debug, PartialEq)]
pub struct BodySnapshot {
    /// Time (model units).
    pub t: f64,
    /// Step.
    pub step: u64,
    /// Masses.
    pub mass: Vec<f64>,
    /// Positions.
    pub x: Vec<[f64; 3]>,
    /// Component codes (0 body, 1 disk, 2 bulge, 3 halo).
    pub component: Vec<u8>,
    /// Galaxy of each body (0, 1, …).
    pub galaxy: Vec<u8>,
}

/// The body snapshot of `step` in the run directory `run_dir`.
pub fn body_snapshot_npz(run_dir: &Path, step: u64) -> PathBuf {
    run_dir
        .join(SNAPSHOTS_DIR)
        .join(format!("{}.npz", bodies_stem(step)))
}

/// Reads a body snapshot `.npz`.
///
/// # Errors
///
/// A missing file or array, or arrays of the wrong shapes: an error naming the file.
pub fn read_body_snapshot(path: &Path) -> Result<BodySnapshot> {
    let read = || -> Result<BodySnapshot> {
        let file = File::open(path)?;
        let mut npz = NpzReader::new(BufReader::new(file))?;
        let t: Array0<f64> = npz.by_name("t")?;
        let step: Array0<u64> = npz.by_name("step")?;
        let mass: Array1<f64> = npz.by_name("mass")?;
        let x: Array2<f64> = npz.by_name("x")?;
        let component: Array1<u8> = npz.by_name("component")?;
        let galaxy: Array1<u8> = npz.by_name("galaxy")?;
        let n = mass.len();
        if x.dim() != (n, 3) || component.len() != n || galaxy.len() != n {
            bail!(
                "arrays of unequal lengths: mass ({n}), x {:?}, component ({}), galaxy ({})",
                x.shape(),
                component.len(),
                galaxy.len()
            );
        }
        Ok(BodySnapshot {
            t: t.into_scalar(),
            step: step.into_scalar(),
            mass: mass.to_vec(),
            x: x.rows().into_iter().map(|r| [r[0], r[1], r[2]]).collect(),
            component: component.to_vec(),
            galaxy: galaxy.to_vec(),
        })
    };
    read().with_context(|| format!("cannot read body snapshot {}", path.display()))
}

/// The time of a body snapshot `.npz` (its `t` array alone).
fn snapshot_time(path: &Path) -> Result<f64> {
    let read = || -> Result<f64> {
        let mut npz = NpzReader::new(BufReader::new(File::open(path)?))?;
        let t: Array0<f64> = npz.by_name("t")?;
        Ok(t.into_scalar())
    };
    read().with_context(|| format!("cannot read the time of body snapshot {}", path.display()))
}

/// The steps of the body snapshots at `times` (each the snapshot whose time is nearest, within
/// 1e-9 of the latest snapshot's time), in the order of `times`, each once; times without a
/// snapshot are left out (a run stopped before them).
///
/// # Errors
///
/// The folder cannot be listed or a snapshot's time cannot be read.
pub fn snapshot_steps_at(run_dir: &Path, times: &[f64]) -> Result<Vec<u64>> {
    let mut stamped = Vec::new();
    for step in body_snapshot_steps(run_dir)? {
        stamped.push((step, snapshot_time(&body_snapshot_npz(run_dir, step))?));
    }
    let scale = stamped.iter().map(|s| s.1.abs()).fold(1.0, f64::max);
    let mut steps: Vec<u64> = Vec::new();
    for &t in times {
        let nearest = stamped
            .iter()
            .filter(|s| (s.1 - t).abs() <= 1e-9 * scale)
            .min_by(|a, b| (a.1 - t).abs().total_cmp(&(b.1 - t).abs()));
        if let Some(&(step, _)) = nearest {
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
    }
    Ok(steps)
}

/// The steps of the body snapshots in `run_dir/snapshots`, increasing; none without the folder.
///
/// # Errors
///
/// The folder exists but cannot be listed.
pub fn body_snapshot_steps(run_dir: &Path) -> Result<Vec<u64>> {
    let dir = run_dir.join(SNAPSHOTS_DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut steps = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let digits = name
            .to_str()
            .and_then(|n| n.strip_prefix("bodies-"))
            .and_then(|n| n.strip_suffix(".npz"));
        if let Some(step) = digits
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
        {
            steps.push(step);
        }
    }
    steps.sort_unstable();
    steps.dedup();
    Ok(steps)
}

/// The bodies a picture draws: the stars (disk and bulge) when there are any, else all; and
/// what they are, for the caption.
fn drawn_bodies(snap: &BodySnapshot) -> (Vec<usize>, &'static str) {
    let stars: Vec<usize> = (0..snap.mass.len())
        .filter(|&i| matches!(snap.component[i], 1 | 2))
        .collect();
    if stars.is_empty() {
        ((0..snap.mass.len()).collect(), "bodies")
    } else {
        (stars, "stars (disk and bulge bodies)")
    }
}

/// A cube of the model space a picture shows: centre and half side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewBox {
    /// The centre.
    pub centre: [f64; 3],
    /// Half the side.
    pub half: f64,
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at least `x` (> 0).
fn nice_ceil(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&v| v >= x * (1.0 - 1e-12))
        .unwrap_or(10.0 * p)
}

/// The largest of 1, 2, 5 × 10^k at most `x` (> 0).
fn nice_floor(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&v| v <= x * (1.0 + 1e-12))
        .unwrap_or(p)
}

impl ViewBox {
    /// The view of the bodies `drawn` of `snap`: centred on their centre of mass, its half side
    /// 1.25 times the radius holding 90 % of their mass, rounded up to 1, 2, 2.5 or 5 × 10^k.
    fn of(snap: &BodySnapshot, drawn: &[usize]) -> ViewBox {
        let total: f64 = drawn.iter().map(|&i| snap.mass[i]).sum();
        let mut centre = [0.0; 3];
        if total > 0.0 {
            for &i in drawn {
                for (c, x) in centre.iter_mut().zip(snap.x[i]) {
                    *c += snap.mass[i] * x;
                }
            }
            centre = centre.map(|c| c / total);
        }
        let mut by_radius: Vec<(f64, f64)> = drawn
            .iter()
            .map(|&i| {
                let d = snap.x[i]
                    .iter()
                    .zip(centre)
                    .map(|(x, c)| (x - c).powi(2))
                    .sum::<f64>();
                (d.sqrt(), snap.mass[i])
            })
            .filter(|(r, _)| r.is_finite())
            .collect();
        by_radius.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut acc = 0.0;
        let r90 = by_radius
            .iter()
            .find(|(_, m)| {
                acc += m;
                acc >= 0.9 * total
            })
            .or(by_radius.last())
            .map_or(1.0, |p| p.0);
        let half = if r90 > 0.0 && r90.is_finite() {
            nice_ceil(1.25 * r90)
        } else {
            1.0
        };
        ViewBox { centre, half }
    }

    /// The smallest view box holding `self` and `other`, its half side rounded up as in
    /// [`ViewBox::of`].
    fn union(&self, other: &ViewBox) -> ViewBox {
        let lo: [f64; 3] =
            std::array::from_fn(|k| (self.centre[k] - self.half).min(other.centre[k] - other.half));
        let hi: [f64; 3] =
            std::array::from_fn(|k| (self.centre[k] + self.half).max(other.centre[k] + other.half));
        let half = (0..3).map(|k| 0.5 * (hi[k] - lo[k])).fold(0.0, f64::max);
        ViewBox {
            centre: std::array::from_fn(|k| 0.5 * (lo[k] + hi[k])),
            half: nice_ceil(half),
        }
    }
}

/// A plane the bodies are projected on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    /// Seen from +z: x to the right, y up.
    XY,
    /// Seen from −y: x to the right, z up.
    XZ,
}

impl Plane {
    /// The coordinates drawn right and up.
    fn axes(self) -> (usize, usize) {
        match self {
            Plane::XY => (0, 1),
            Plane::XZ => (0, 2),
        }
    }

    /// Their names.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Plane::XY => ("x", "y"),
            Plane::XZ => ("x", "z"),
        }
    }
}

/// The side of the square grid the bodies are binned on: about two cells per √N across (so a
/// cell holds a few bodies where they are dense), from 64 to 512.
fn grid_side(bodies: usize) -> usize {
    ((2.0 * (bodies as f64).sqrt()).round() as usize).clamp(64, 512)
}

/// The mass of the bodies `drawn` of `snap` on a `g` × `g` grid over `view` projected on `plane`
/// (rows from the top), by cloud-in-cell weights, one value per channel `channel(i)` of body `i`
/// (`channels` a cell). Mass beyond the view's edge cells is left out. O(N).
fn bin_mass(
    snap: &BodySnapshot,
    drawn: &[usize],
    (view, plane): (&ViewBox, Plane),
    g: usize,
    channels: usize,
    channel: impl Fn(usize) -> usize,
) -> Vec<f64> {
    let (a, b) = plane.axes();
    let mut grid = vec![0.0; g * g * channels];
    let cells = g as f64 / (2.0 * view.half);
    for &i in drawn {
        // Cell coordinates of the body, cell centres at integers.
        let u = (snap.x[i][a] - view.centre[a] + view.half) * cells - 0.5;
        let v = (view.centre[b] + view.half - snap.x[i][b]) * cells - 0.5;
        if !(-1.0..g as f64).contains(&u) || !(-1.0..g as f64).contains(&v) {
            continue;
        }
        let (i0, j0) = (u.floor(), v.floor());
        let (fu, fv) = (u - i0, v - j0);
        let c = channel(i);
        for (dj, wv) in [(0, 1.0 - fv), (1, fv)] {
            for (di, wu) in [(0, 1.0 - fu), (1, fu)] {
                let (col, row) = (i0 as i64 + di, j0 as i64 + dj);
                if (0..g as i64).contains(&col) && (0..g as i64).contains(&row) {
                    grid[(row as usize * g + col as usize) * channels + c] +=
                        snap.mass[i] * wu * wv;
                }
            }
        }
    }
    grid
}

/// The `w` × `h` pixels of the `g` × `g` grid `grid` (`channels` values a cell), interpolated
/// bilinearly between cell centres.
fn upsample(grid: &[f64], g: usize, channels: usize, (w, h): (usize, usize)) -> Vec<f64> {
    let axis = |p: usize, n: usize| {
        let u = ((p as f64 + 0.5) / n as f64 * g as f64 - 0.5).clamp(0.0, (g - 1) as f64);
        let i0 = (u.floor() as usize).min(g.saturating_sub(2));
        (i0, u - i0 as f64)
    };
    let mut out = Vec::with_capacity(w * h * channels);
    for py in 0..h {
        let (j0, fy) = axis(py, h);
        for px in 0..w {
            let (i0, fx) = axis(px, w);
            for c in 0..channels {
                let at =
                    |i: usize, j: usize| grid[(j.min(g - 1) * g + i.min(g - 1)) * channels + c];
                out.push(
                    (1.0 - fy) * ((1.0 - fx) * at(i0, j0) + fx * at(i0 + 1, j0))
                        + fy * ((1.0 - fx) * at(i0, j0 + 1) + fx * at(i0 + 1, j0 + 1)),
                );
            }
        }
    }
    out
}

/// A density picture's colour range: log10 Σ from `lo` to `hi`, Σ in the colour bar's unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DensityRange {
    /// log10 Σ at the bottom of the colour bar.
    pub lo: f64,
    /// log10 Σ at its top.
    pub hi: f64,
}

impl DensityRange {
    /// The range from the densest pixel of `density` (values in the colour bar's unit) down
    /// [`DECADES`]; `None` without mass in view.
    fn of(density: &[f64]) -> Option<DensityRange> {
        let max = density
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        (max > 0.0).then(|| {
            let hi = (max.log10() * 10.0).ceil() / 10.0;
            DensityRange {
                lo: hi - DECADES,
                hi,
            }
        })
    }

    /// The wider of two ranges (either may be missing).
    fn widest(a: Option<DensityRange>, b: Option<DensityRange>) -> Option<DensityRange> {
        match (a, b) {
            (Some(a), Some(b)) if b.hi > a.hi => Some(b),
            (Some(a), _) => Some(a),
            (None, b) => b,
        }
    }
}

/// The surface density of the bodies `drawn` of `snap` on the `g` × `g` grid of [`bin_mass`],
/// in the colour bar's unit.
fn surface_density(
    snap: &BodySnapshot,
    drawn: &[usize],
    (view, plane): (&ViewBox, Plane),
    g: usize,
    units: Option<&GravityUnits>,
) -> Vec<f64> {
    let cell = 2.0 * view.half / g as f64;
    let factor = density_unit(units).0 / (cell * cell);
    let mut grid = bin_mass(snap, drawn, (view, plane), g, 1, |_| 0);
    grid.iter_mut().for_each(|v| *v *= factor);
    grid
}

/// What the image of one panel is.
enum Coloring<'a> {
    /// log10 of the surface density in viridis over the range.
    Density(DensityRange),
    /// Each galaxy in its colour of [`GALAXY_COLORS`], brightness by log density over
    /// [`DECADES`] below the densest pixel.
    Galaxies,
    /// Nothing to draw (no mass in view).
    Empty(&'a str),
}

/// The colours of galaxies 0, 1, … in the galaxies picture (orange and sky blue, told apart
/// with the common colour-vision deficiencies), cycled beyond.
const GALAXY_COLORS: [[u8; 3]; 4] = [
    [240, 150, 40],
    [80, 170, 255],
    [120, 220, 120],
    [230, 90, 200],
];

/// The RGB pixels of one panel's image.
fn panel_image(
    snap: &BodySnapshot,
    drawn: &[usize],
    (view, plane): (&ViewBox, Plane),
    size: (usize, usize),
    units: Option<&GravityUnits>,
    coloring: &Coloring<'_>,
) -> Vec<u8> {
    let g = grid_side(drawn.len());
    match coloring {
        Coloring::Density(range) => {
            let density = surface_density(snap, drawn, (view, plane), g, units);
            upsample(&density, g, 1, size)
                .iter()
                .flat_map(|&s| {
                    let v = if s > 0.0 { s.log10() } else { range.lo };
                    viridis(v - range.lo, range.hi - range.lo)
                })
                .collect()
        }
        Coloring::Galaxies => {
            let ng = GALAXY_COLORS.len();
            let cells = bin_mass(snap, drawn, (view, plane), g, ng, |i| {
                snap.galaxy[i] as usize % ng
            });
            let grid = upsample(&cells, g, ng, size);
            let max = grid
                .chunks(ng)
                .map(|p| p.iter().sum::<f64>())
                .fold(0.0, f64::max);
            let lo = max.log10() - DECADES;
            grid.chunks(ng)
                .flat_map(|p| {
                    let total: f64 = p.iter().sum();
                    if total <= 0.0 {
                        return [0u8; 3];
                    }
                    let bright = ((total.log10() - lo) / DECADES).clamp(0.0, 1.0);
                    std::array::from_fn(|k| {
                        let c: f64 = p
                            .iter()
                            .zip(GALAXY_COLORS)
                            .map(|(m, col)| m / total * f64::from(col[k]))
                            .sum();
                        (c * (0.15 + 0.85 * bright)).round() as u8
                    })
                })
                .collect()
        }
        Coloring::Empty(_) => vec![60; size.0 * size.1 * 3],
    }
}

/// Everything one density, galaxies or animation picture draws.
struct Picture<'a> {
    title: &'a str,
    snap: &'a BodySnapshot,
    drawn: &'a [usize],
    what: &'a str,
    view: ViewBox,
    planes: &'a [Plane],
    units: Option<&'a GravityUnits>,
    coloring: Coloring<'a>,
}

/// "750000 stars (disk and bulge bodies) of 1000000 bodies", or "all 1000 bodies".
fn drawn_caption(pic: &Picture<'_>) -> String {
    let n = pic.snap.mass.len();
    if pic.drawn.len() == n {
        format!("all {n} {}", pic.what)
    } else {
        format!("{} {} of {n} bodies", pic.drawn.len(), pic.what)
    }
}

/// Draw `pic` on `root` ([`gravity_picture_size`] of its planes).
fn draw_picture_on(root: &Canvas<'_>, pic: &Picture<'_>) -> Result<()> {
    let (w, _) = root.dim_in_pixel();
    let snap = pic.snap;
    let heading = match pic.coloring {
        Coloring::Galaxies => "bodies by galaxy",
        _ => "surface density",
    };
    draw_fitted(
        root,
        &format!(
            "{}: {heading}, {}, step {}",
            pic.title,
            time_caption(pic.units, snap.t),
            snap.step
        ),
        ((w / 2) as i32, (TITLE_H / 2) as i32),
        26,
        w as i32 - 20,
    )?;
    let (_, area) = root.split_vertically(TITLE_H as i32);
    let (aw, _) = area.dim_in_pixel();
    let (panels_area, side_area) = area.split_horizontally(aw as i32 - SIDE_W as i32);
    let areas = panels_area.split_evenly((1, pic.planes.len()));
    let (scale, unit) = length_axis(pic.units);
    let mut rows = 0..0;
    for (k, (plane, sub)) in pic.planes.iter().zip(&areas).enumerate() {
        rows = draw_projection(root, sub, pic, (*plane, k == 0), (scale, &unit))?;
    }
    let caption = match &pic.coloring {
        Coloring::Density(range) => {
            let (_, unit) = density_unit(pic.units);
            let bar = ColorBar {
                lo: range.lo,
                hi: range.hi,
                label: "log10 Σ",
                note: unit.to_string(),
                color: &|v| viridis(v - range.lo, range.hi - range.lo),
            };
            draw_colorbar(root, &side_area, rows.clone(), &bar)?;
            format!(
                "{}: log10 Σ from {} to {} ({unit})",
                drawn_caption(pic),
                format_number(range.lo, 3),
                format_number(range.hi, 3)
            )
        }
        Coloring::Galaxies => {
            let mut galaxies: Vec<u8> = pic.drawn.iter().map(|&i| snap.galaxy[i]).collect();
            galaxies.sort_unstable();
            galaxies.dedup();
            let entries: Vec<LegendEntry> = galaxies
                .iter()
                .map(|&g| {
                    let [r, gr, b] = GALAXY_COLORS[g as usize % GALAXY_COLORS.len()];
                    LegendEntry {
                        label: format!("galaxy {g}"),
                        style: RGBColor(r, gr, b).stroke_width(12),
                        stroke: Stroke::Solid,
                    }
                })
                .collect();
            let (sx, _) = side_area.get_pixel_range();
            draw_legend(
                root,
                Anchor::TopLeft(sx.start + 8, rows.start),
                &entries,
                None,
                18,
                28,
            )?;
            format!(
                "{}, brightness: log density over {DECADES} decades",
                drawn_caption(pic)
            )
        }
        Coloring::Empty(why) => why.to_string(),
    };
    let (_, h) = root.dim_in_pixel();
    draw_fitted(
        root,
        &caption,
        ((w / 2) as i32, (h - CAPTION_H / 2) as i32),
        18,
        w as i32 - 20,
    )
}

/// Draw the projection of `pic` on `plane` in the panel `sub`: its title, axes (model lengths
/// times `scale`, unit suffix `unit`), the image, the scale bar and, when `with_time`, the time;
/// returns the image's pixel rows.
fn draw_projection(
    root: &Canvas<'_>,
    sub: &Canvas<'_>,
    pic: &Picture<'_>,
    (plane, with_time): (Plane, bool),
    (scale, unit): (f64, &str),
) -> Result<Range<i32>> {
    let (right, up) = plane.names();
    let (sw, _) = sub.dim_in_pixel();
    let (top, rest) = sub.split_vertically(SUBTITLE_H as i32);
    top.draw(&Text::new(
        format!("{right}–{up} plane"),
        ((sw / 2) as i32, (SUBTITLE_H / 2) as i32),
        centred(20),
    ))
    .map_err(plot_err)?;
    let (a, b) = plane.axes();
    let axis = |k: usize| {
        let c = pic.view.centre[k];
        LinearAxis::covering(
            [(c - pic.view.half) * scale, (c + pic.view.half) * scale],
            0.0,
        )
    };
    let (xa, ya) = (axis(a), axis(b));
    let (rw, rh) = rest.dim_in_pixel();
    let ml = rw.saturating_sub(Y_LABEL_W + IMAGE_SIDE) / 2;
    let mut chart = ChartBuilder::on(&rest)
        .margin_top(10)
        .margin_left(ml)
        .margin_right(rw.saturating_sub(Y_LABEL_W + IMAGE_SIDE + ml))
        .margin_bottom(rh.saturating_sub(X_LABEL_H + IMAGE_SIDE + 10))
        .x_label_area_size(X_LABEL_H)
        .y_label_area_size(Y_LABEL_W)
        .build_cartesian_2d(xa.coord(), ya.coord())
        .map_err(plot_err)?;
    let (x_fmt, y_fmt) = (|v: &f64| xa.label(*v), |v: &f64| ya.label(*v));
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(format!("{right}{unit}"))
        .y_desc(format!("{up}{unit}"))
        .axis_desc_style((FAMILY, 20))
        .label_style((FAMILY, 16))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .axis_style(BLACK.stroke_width(1))
        .draw()
        .map_err(plot_err)?;
    let (px, py) = chart.plotting_area().get_pixel_range();
    let (w, h) = ((px.end - px.start) as usize, (py.end - py.start) as usize);
    let image = panel_image(
        pic.snap,
        pic.drawn,
        (&pic.view, plane),
        (w, h),
        pic.units,
        &pic.coloring,
    );
    let element =
        BitMapElement::with_owned_buffer((px.start, py.start), (w as u32, h as u32), image)
            .context("internal error: image of the wrong size")?;
    root.draw(&element).map_err(plot_err)?;
    root.draw(&Rectangle::new(
        [(px.start - 1, py.start - 1), (px.end, py.end)],
        BLACK.stroke_width(1),
    ))
    .map_err(plot_err)?;
    // The scale bar: a round length near a quarter of the view, bottom left, with its length.
    let length = nice_floor(0.5 * pic.view.half);
    let bar_px = (length / (2.0 * pic.view.half) * w as f64).round() as i32;
    let (x0, y0) = (px.start + 20, py.end - 22);
    let white = |px: u32| {
        (FAMILY, px)
            .into_font()
            .color(&WHITE)
            .pos(Pos::new(HPos::Left, VPos::Bottom))
    };
    root.draw(&Rectangle::new(
        [(x0, y0 - 2), (x0 + bar_px, y0 + 2)],
        WHITE.filled(),
    ))
    .map_err(plot_err)?;
    root.draw(&Text::new(
        length_caption(pic.units, length),
        (x0, y0 - 8),
        white(18),
    ))
    .map_err(plot_err)?;
    if with_time {
        root.draw(&Text::new(
            time_caption(pic.units, pic.snap.t),
            (px.start + 12, py.start + 34),
            white(22),
        ))
        .map_err(plot_err)?;
    }
    Ok(py)
}

/// Settings of the gravity pictures.
#[derive(Clone, Debug, PartialEq)]
pub struct GravityPlotOptions {
    /// The snapshot steps whose density (and galaxies) pictures are drawn; `None`: at most
    /// [`DEFAULT_STILLS`] of them, spread evenly, first and last included. Steps without a
    /// snapshot are an error.
    pub steps: Option<Vec<u64>>,
    /// Whether to draw x–z beside x–y in the density and galaxies pictures (default true).
    pub side_view: bool,
    /// Whether to draw the animation (default true; it needs two snapshots or more).
    pub animation: bool,
}

impl Default for GravityPlotOptions {
    fn default() -> Self {
        Self {
            steps: None,
            side_view: true,
            animation: true,
        }
    }
}

/// `<run_dir>/gravity/<prefix><step:08>.png`.
fn step_png(run_dir: &Path, prefix: &str, step: u64) -> PathBuf {
    run_dir
        .join(GRAVITY_DIR)
        .join(format!("{prefix}{step:08}.png"))
}

/// Draw the density picture (and the galaxies picture, for more than one galaxy) of each of
/// `steps` in the run directory `run_dir`, each from its own snapshot (its own view box and
/// colour range); returns the PNGs written, step by step.
///
/// # Errors
///
/// A snapshot that is missing or cannot be read, or a picture that cannot be drawn or written,
/// naming the file.
pub fn plot_gravity_steps(
    run_dir: &Path,
    title: &str,
    steps: &[u64],
    side_view: bool,
) -> Result<Vec<PathBuf>> {
    let units = GravityUnits::read(run_dir)?;
    let planes: &[Plane] = if side_view {
        &[Plane::XY, Plane::XZ]
    } else {
        &[Plane::XY]
    };
    let mut written = Vec::new();
    for &step in steps {
        let snap = read_body_snapshot(&body_snapshot_npz(run_dir, step))?;
        let (drawn, what) = drawn_bodies(&snap);
        let view = ViewBox::of(&snap, &drawn);
        let g = grid_side(drawn.len());
        let range = planes
            .iter()
            .map(|&p| {
                DensityRange::of(&surface_density(
                    &snap,
                    &drawn,
                    (&view, p),
                    g,
                    units.as_ref(),
                ))
            })
            .fold(None, DensityRange::widest);
        let coloring = range.map_or(Coloring::Empty("no mass in view"), Coloring::Density);
        let mut pic = Picture {
            title,
            snap: &snap,
            drawn: &drawn,
            what,
            view,
            planes,
            units: units.as_ref(),
            coloring,
        };
        let png = step_png(run_dir, DENSITY_PNG_PREFIX, step);
        draw_picture(&png, &pic)?;
        written.push(png);
        let mut galaxies: Vec<u8> = snap.galaxy.clone();
        galaxies.sort_unstable();
        galaxies.dedup();
        if galaxies.len() > 1 && range.is_some() {
            pic.coloring = Coloring::Galaxies;
            let png = step_png(run_dir, GALAXIES_PNG_PREFIX, step);
            draw_picture(&png, &pic)?;
            written.push(png);
        }
    }
    Ok(written)
}

/// Render `pic` and write it atomically to `png`.
fn draw_picture(png: &Path, pic: &Picture<'_>) -> Result<()> {
    let bytes = render_png(gravity_picture_size(pic.planes.len()), |root| {
        draw_picture_on(root, pic)
    })
    .and_then(|bytes| write_atomic(png, &bytes));
    bytes.with_context(|| format!("cannot draw {}", png.display()))
}

/// Draw the animation `gravity/animation.png` of the run directory `run_dir` over the body
/// snapshots of `steps` (at most [`MAX_ANIMATION_FRAMES`], thinned evenly): the x–y surface
/// density, one view box covering every frame's and one colour range for all (from the densest
/// pixel of every frame, [`DECADES`] down), [`FRAME_DELAY_MS`] a frame, looping. Reads every
/// snapshot three times (view, range, frame) and holds one at a time.
///
/// # Errors
///
/// No steps, a snapshot that cannot be read, or a failure to encode or write, naming the file.
pub fn draw_gravity_animation(run_dir: &Path, title: &str, steps: &[u64]) -> Result<PathBuf> {
    let png = run_dir.join(ANIMATION_PNG);
    let steps: Vec<u64> = thin_evenly(
        &steps.iter().map(|&s| s as f64).collect::<Vec<_>>(),
        MAX_ANIMATION_FRAMES,
    )
    .into_iter()
    .map(|s| s as u64)
    .collect();
    if steps.is_empty() {
        bail!("{}: no body snapshots to animate", png.display());
    }
    let units = GravityUnits::read(run_dir)?;
    let read = |step: u64| -> Result<(BodySnapshot, Vec<usize>, &'static str)> {
        let snap = read_body_snapshot(&body_snapshot_npz(run_dir, step))?;
        let (drawn, what) = drawn_bodies(&snap);
        Ok((snap, drawn, what))
    };
    let mut view: Option<ViewBox> = None;
    for &step in &steps {
        let (snap, drawn, _) = read(step)?;
        let v = ViewBox::of(&snap, &drawn);
        view = Some(view.map_or(v, |u| u.union(&v)));
    }
    let view = view.expect("at least one frame");
    let mut range = None;
    for &step in &steps {
        let (snap, drawn, _) = read(step)?;
        let g = grid_side(drawn.len());
        let density = surface_density(&snap, &drawn, (&view, Plane::XY), g, units.as_ref());
        range = DensityRange::widest(range, DensityRange::of(&density));
    }
    let (w, h) = gravity_picture_size(1);
    let mut bytes = Vec::new();
    let encoded = (|| -> Result<()> {
        let mut encoder = png::Encoder::new(&mut bytes, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_animated(steps.len() as u32, 0)?;
        encoder.set_frame_delay(FRAME_DELAY_MS, 1000)?;
        let mut writer = encoder.write_header()?;
        for &step in &steps {
            let (snap, drawn, what) = read(step)?;
            let pic = Picture {
                title,
                snap: &snap,
                drawn: &drawn,
                what,
                view,
                planes: &[Plane::XY],
                units: units.as_ref(),
                coloring: range.map_or(Coloring::Empty("no mass in view"), Coloring::Density),
            };
            let rgb = render_rgb((w, h), |root| draw_picture_on(root, &pic))?;
            writer.write_image_data(&rgb)?;
        }
        writer.finish()?;
        Ok(())
    })();
    encoded
        .and_then(|()| write_atomic(&png, &bytes))
        .with_context(|| format!("cannot draw {}", png.display()))?;
    Ok(png)
}

/// Draw `energy-error.png` (|ΔE/E| against t, log axis) and `lagrangian-radii.png` (r10, r50,
/// r90 against t) of the run directory `run_dir` from `gravity/energy.csv`; returns the two
/// paths. Times and radii are in physical units when `gravity/units.json` gives them.
///
/// # Errors
///
/// A missing file or column ([`crate::layout::GRAVITY_COLUMNS`]), or a failure to draw or
/// write, naming the file.
pub fn plot_gravity_history(run_dir: &Path, title: &str) -> Result<Vec<PathBuf>> {
    let table = read_csv_columns(run_dir.join(GRAVITY_CSV))?;
    let units = GravityUnits::read(run_dir)?;
    let [t, error, r10, r50, r90] = table.columns(["t", "energy_error", "r10", "r50", "r90"])?;
    let t_max = t
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (t_scale, t_desc) = time_axis(units.as_ref(), t_max);
    let t: Vec<f64> = t.iter().map(|v| v * t_scale).collect();
    let (l_scale, l_unit) = length_axis(units.as_ref());

    let abs_error: Vec<f64> = error.iter().map(|e| e.abs()).collect();
    let error_curve = [Curve {
        label: String::new(),
        points: positive_points(&t, &abs_error),
        style: BLUE.stroke_width(3),
        stroke: Stroke::Solid,
    }];
    let radii: Vec<Curve> = [("r10", r10), ("r50", r50), ("r90", r90)]
        .into_iter()
        .zip([BLUE, RED, RGBColor(40, 140, 60)])
        .map(|((label, r), color)| Curve {
            label: format!("{label}: {} % of the mass", &label[1..]),
            points: finite_points(&t, &r.iter().map(|v| v * l_scale).collect::<Vec<_>>()),
            style: color.stroke_width(3),
            stroke: Stroke::Solid,
        })
        .collect();

    let energy_png = run_dir.join(GRAVITY_ENERGY_PNG);
    let lagrangian_png = run_dir.join(LAGRANGIAN_PNG);
    let xa = LinearAxis::covering(t.iter().copied(), 0.0);
    let draw = |png: &Path, heading: &str, y_desc: &str, curves: &[Curve], log: bool| {
        let bytes = render_png(GRAVITY_HISTORY_SIZE, |root| {
            let area = root
                .titled(&format!("{title}: {heading}"), (FAMILY, 28))
                .map_err(plot_err)?;
            let desc = (t_desc.as_str(), y_desc);
            let legend = (Vec::new(), None);
            if log {
                let ya = LogAxis::covering(points_of(curves).map(|p| p.1));
                draw_panel(root, &area, &xa, &ya, desc, curves, legend)
            } else {
                // From 0, with room above the curves for the legend.
                let top = points_of(curves).map(|p| 1.3 * p.1).fold(0.0, f64::max);
                let ya =
                    LinearAxis::covering(points_of(curves).map(|p| p.1).chain([0.0, top]), 0.0);
                draw_panel(root, &area, &xa, &ya, desc, curves, legend)
            }
        })?;
        write_atomic(png, &bytes).with_context(|| format!("cannot draw {}", png.display()))
    };
    draw(
        &energy_png,
        "relative energy error",
        "|ΔE/E|",
        &error_curve,
        true,
    )?;
    draw(
        &lagrangian_png,
        "Lagrangian radii",
        &format!("radius{l_unit}"),
        &radii,
        false,
    )?;
    Ok(vec![energy_png, lagrangian_png])
}

/// Draw every picture of the gravity run in `run_dir` that its files allow; returns the PNGs
/// written: [`plot_gravity_history`] (with `gravity/energy.csv`), [`plot_gravity_steps`] at
/// `options.steps` (with body snapshots), then [`draw_gravity_animation`] (two snapshots or
/// more, unless `options.animation` is off). `title` starts each picture's title.
///
/// # Errors
///
/// Neither `gravity/energy.csv` nor a body snapshot: an error naming the run directory; else the
/// errors of the functions above.
pub fn plot_gravity_run(
    run_dir: &Path,
    title: &str,
    options: &GravityPlotOptions,
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let has_history = run_dir.join(GRAVITY_CSV).is_file();
    if has_history {
        written.extend(plot_gravity_history(run_dir, title)?);
    }
    let all = body_snapshot_steps(run_dir)?;
    if !has_history && all.is_empty() {
        bail!(
            "{}: nothing to plot: no {GRAVITY_CSV} and no body snapshots in {SNAPSHOTS_DIR}/",
            run_dir.display()
        );
    }
    let steps = match &options.steps {
        Some(steps) => steps.clone(),
        None => thin_evenly(
            &all.iter().map(|&s| s as f64).collect::<Vec<_>>(),
            DEFAULT_STILLS,
        )
        .into_iter()
        .map(|s| s as u64)
        .collect(),
    };
    if !steps.is_empty() {
        std::fs::create_dir_all(run_dir.join(GRAVITY_DIR))
            .with_context(|| format!("cannot create {}", run_dir.join(GRAVITY_DIR).display()))?;
    }
    written.extend(plot_gravity_steps(
        run_dir,
        title,
        &steps,
        options.side_view,
    )?);
    if options.animation && all.len() >= 2 {
        written.push(draw_gravity_animation(run_dir, title, &all)?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_read_as_vpm_writes_them() {
        assert_eq!(format_years(0.978e9), "0.978 Gyr");
        assert_eq!(format_years(0.4e9), "400 Myr");
        assert_eq!(format_years(1.234e9), "1.23 Gyr");
        assert_eq!(format_years(12.5e6), "12.5 Myr");
        assert_eq!(format_years(350.0), "350 yr");
        assert_eq!(three_significant(0.0), "0");
        assert_eq!(three_significant(0.97777), "0.978");
    }

    /// A small deterministic generator (SplitMix64) giving numbers in [0, 1).
    struct Mix(u64);
    impl Mix {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Two galaxies (disk and halo bodies) `separation` apart along x, `n` bodies each.
    fn two_galaxies(
        n: usize,
        separation: f64,
        seed: u64,
    ) -> (Vec<f64>, Vec<[f64; 3]>, Vec<u8>, Vec<u8>) {
        let mut rng = Mix(seed);
        let (mut mass, mut x, mut component, mut galaxy) = (vec![], vec![], vec![], vec![]);
        for g in 0..2u8 {
            let cx = if g == 0 {
                -0.5 * separation
            } else {
                0.5 * separation
            };
            for i in 0..n {
                let halo = i % 4 == 3;
                let r = if halo { 8.0 } else { 2.0 } * rng.uniform().sqrt();
                let phi = 2.0 * std::f64::consts::PI * rng.uniform();
                let z = if halo {
                    r * (rng.uniform() - 0.5)
                } else {
                    0.1 * (rng.uniform() - 0.5)
                };
                mass.push(1.0 / n as f64);
                x.push([cx + r * phi.cos(), r * phi.sin(), z]);
                component.push(if halo { 3 } else { 1 });
                galaxy.push(g);
            }
        }
        (mass, x, component, galaxy)
    }

    fn write_snapshot(run: &Path, step: u64, t: f64, separation: f64) {
        let (mass, x, component, galaxy) = two_galaxies(400, separation, step + 1);
        std::fs::create_dir_all(run.join(SNAPSHOTS_DIR)).unwrap();
        let file = File::create(body_snapshot_npz(run, step)).unwrap();
        let mut npz = ndarray_npy::NpzWriter::new(file);
        let n = mass.len();
        npz.add_array("t", &ndarray::arr0(t)).unwrap();
        npz.add_array("step", &ndarray::arr0(step)).unwrap();
        npz.add_array("mass", &Array1::from(mass)).unwrap();
        let x = Array2::from_shape_vec((n, 3), x.as_flattened().to_vec()).unwrap();
        npz.add_array("x", &x).unwrap();
        npz.add_array("v", &Array2::<f64>::zeros((n, 3))).unwrap();
        npz.add_array("component", &Array1::from(component))
            .unwrap();
        npz.add_array("galaxy", &Array1::from(galaxy)).unwrap();
        npz.finish().unwrap();
    }

    fn write_history(run: &Path) {
        std::fs::create_dir_all(run.join(GRAVITY_DIR)).unwrap();
        let mut text = crate::layout::GRAVITY_COLUMNS.join(",") + "\n";
        for i in 0..6 {
            let t = i as f64 * 0.5;
            let row: Vec<String> = crate::layout::GRAVITY_COLUMNS
                .iter()
                .map(|c| match *c {
                    "t" => t.to_string(),
                    "step" => (i * 50).to_string(),
                    "energy_error" => {
                        if i == 0 {
                            "0".into()
                        } else {
                            format!("{}", -1e-5 * i as f64)
                        }
                    }
                    "r10" => "0.3".into(),
                    "r50" => format!("{}", 0.77 + 0.01 * t),
                    "r90" => "2.2".into(),
                    _ => "1".into(),
                })
                .collect();
            text += &(row.join(",") + "\n");
        }
        std::fs::write(run.join(GRAVITY_CSV), text).unwrap();
    }

    fn galactic_units(run: &Path) {
        std::fs::create_dir_all(run.join(GRAVITY_DIR)).unwrap();
        std::fs::write(
            run.join(GRAVITY_UNITS_JSON),
            r#"{"length": 1.0, "length_unit": "kpc", "mass_msun": 232500.0, "time_seconds": 3.0857e16}"#,
        )
        .unwrap();
    }

    /// Width, height and frame count (acTL; 1 without) of a PNG file.
    fn png_info(path: &Path) -> (u32, u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(&bytes[..]));
        let reader = decoder.read_info().unwrap();
        let info = reader.info();
        let frames = info.animation_control.map_or(1, |a| a.num_frames);
        // the acTL chunk itself, found by hand: its frame count follows the chunk type
        if let Some(at) = bytes.windows(4).position(|w| w == b"acTL") {
            let n = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().unwrap());
            assert_eq!(n, frames);
        }
        (info.width, info.height, frames)
    }

    #[test]
    fn a_gravity_run_gets_every_picture() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        write_history(run);
        galactic_units(run);
        for (k, step) in [0u64, 100, 200].into_iter().enumerate() {
            write_snapshot(run, step, k as f64, 30.0 - 10.0 * k as f64);
        }
        // dispatched from the crate's entry point
        let written = crate::plot_run(run, "collision").unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.strip_prefix(run).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "energy-error.png",
                "lagrangian-radii.png",
                "gravity/density-00000000.png",
                "gravity/galaxies-00000000.png",
                "gravity/density-00000100.png",
                "gravity/galaxies-00000100.png",
                "gravity/density-00000200.png",
                "gravity/galaxies-00000200.png",
                "gravity/animation.png"
            ]
        );
        for p in &written[..2] {
            let (w, h, f) = png_info(p);
            assert_eq!(((w, h), f), (GRAVITY_HISTORY_SIZE, 1), "{}", p.display());
        }
        for p in &written[2..8] {
            let (w, h, f) = png_info(p);
            assert_eq!(((w, h), f), (gravity_picture_size(2), 1), "{}", p.display());
        }
        let (w, h, frames) = png_info(&written[8]);
        assert_eq!(((w, h), frames), (gravity_picture_size(1), 3));
        // every frame decodes
        let file = File::open(&written[8]).unwrap();
        let mut reader = png::Decoder::new(BufReader::new(file)).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        for _ in 0..3 {
            reader.next_frame(&mut buf).unwrap();
        }
        // no temporary files left
        let leftovers: Vec<_> = std::fs::read_dir(run.join(GRAVITY_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// The RGB pixels of a PNG.
    fn pixels(path: &Path) -> Vec<u8> {
        let mut reader = png::Decoder::new(File::open(path).unwrap())
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut buf).unwrap();
        buf
    }

    #[test]
    fn density_pictures_follow_the_data_and_are_deterministic() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        std::fs::create_dir_all(run.join(GRAVITY_DIR)).unwrap();
        write_snapshot(run, 1, 0.5, 10.0);
        let draw = || {
            let p = plot_gravity_steps(run, "t", &[1], false).unwrap();
            (std::fs::read(&p[0]).unwrap(), pixels(&p[0]))
        };
        let (first, first_pixels) = draw();
        let (again, _) = draw();
        assert_eq!(first, again, "the same data draw the same bytes");
        write_snapshot(run, 1, 0.5, 14.0);
        let (_, moved) = draw();
        let changed = first_pixels
            .iter()
            .zip(&moved)
            .filter(|(a, b)| a != b)
            .count();
        assert!(changed > 1000, "only {changed} bytes changed");
        // N-body units (no units.json): the caption says so
        let snap = read_body_snapshot(&body_snapshot_npz(run, 1)).unwrap();
        assert_eq!(time_caption(None, snap.t), "t = 0.5 (N-body units)");
    }

    #[test]
    fn one_galaxy_has_no_galaxies_picture_and_units_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        galactic_units(run);
        write_snapshot(run, 7, 1.0, 0.0);
        let path = body_snapshot_npz(run, 7);
        let mut snap = read_body_snapshot(&path).unwrap();
        assert_eq!(snap.mass.len(), 800);
        snap.galaxy.iter_mut().for_each(|g| *g = 0);
        let units = GravityUnits::read(run).unwrap().unwrap();
        assert_eq!(units.length_unit, "kpc");
        assert_eq!(time_caption(Some(&units), 1.0), "t = 0.978 Gyr");
        assert_eq!(length_caption(Some(&units), 5.0), "5 kpc");
        // 1 mass unit per kpc² is 0.2325 Msun/pc²
        assert!((density_unit(Some(&units)).0 - 0.2325).abs() < 1e-12);
        // a bad units file is named
        std::fs::write(
            run.join(GRAVITY_UNITS_JSON),
            r#"{"length": 1, "length_unit": "ly"}"#,
        )
        .unwrap();
        let e = GravityUnits::read(run).unwrap_err().to_string();
        assert!(e.contains("units.json"), "{e}");
        std::fs::write(run.join(GRAVITY_UNITS_JSON), "{}").unwrap();
        assert_eq!(GravityUnits::read(run).unwrap(), None);
        // nothing to plot, and a missing snapshot, are errors naming the file
        let empty = tempfile::tempdir().unwrap();
        let e = plot_gravity_run(empty.path(), "t", &GravityPlotOptions::default()).unwrap_err();
        assert!(e.to_string().contains("nothing to plot"), "{e}");
        let e = plot_gravity_steps(run, "t", &[8], true).unwrap_err();
        assert!(format!("{e:#}").contains("bodies-00000008.npz"), "{e:#}");
    }

    #[test]
    fn nice_numbers() {
        assert_eq!(nice_ceil(3.1), 5.0);
        assert_eq!(nice_ceil(2.2), 2.5);
        assert_eq!(nice_ceil(0.09), 0.1);
        assert_eq!(nice_floor(3.1), 2.0);
        assert_eq!(nice_floor(0.6), 0.5);
        assert_eq!(nice_floor(10.0), 10.0);
    }
}
