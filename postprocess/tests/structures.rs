//! The 3-D field pictures: isosurfaces of known fields, synthetic
//! Taylor–Green run directories with field snapshots, determinism, bad
//! snapshot files.
//!
//! Set `POSTPROCESS_DEMO_DIR` to a directory to get copies of the pictures
//! there (and a Taylor–Green run at n = 64), for looking at them.

mod common;

use common::{decode_png, demo_copy, write_solver};
use ndarray::{arr0, Array, IxDyn};
use ndarray_npy::NpzWriter;
use postprocess::isosurface::{for_each_triangle, PeriodicGrid, Triangle};
use postprocess::layout::{
    fields_stem, structures_png, vorticity_slice_png, FIELDS_DIR, FIELD_Q, FIELD_STEP,
    FIELD_STRIDE, FIELD_T, FIELD_VELOCITY, FIELD_VORTICITY,
};
use postprocess::{
    draw_structures, draw_vorticity_slice, plot_fields_at, plot_run, plot_run_with, q_rms,
    read_fields, structures_size, vorticity_size, FieldPanel, FieldSnapshot, PlotOptions, QLevel,
    Solver, ENERGY_COMPARE_SIZE, SPECTRUM_COMPARE_SIZE,
};
use std::collections::HashSet;
use std::f64::consts::PI;
use std::fs;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------
// Isosurfaces of known fields
// ---------------------------------------------------------------------------

/// Node coordinate x_i = −π + 2πi/n.
fn node(i: usize, n: usize) -> f64 {
    -PI + 2.0 * PI * i as f64 / n as f64
}

/// The field f(x, y, z) sampled at the n³ nodes, C order.
fn sample(n: usize, f: impl Fn(f64, f64, f64) -> f64) -> Vec<f32> {
    let mut v = Vec::with_capacity(n * n * n);
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                v.push(f(node(i, n), node(j, n), node(k, n)) as f32);
            }
        }
    }
    v
}

/// `d` wrapped into [−π, π).
fn wrap(d: f64) -> f64 {
    (d + PI).rem_euclid(2.0 * PI) - PI
}

/// All triangles of the surface.
fn triangles(n: usize, values: &[f32], level: f32) -> Vec<Triangle> {
    let grid = PeriodicGrid::new(n, values).unwrap();
    let mut out = Vec::new();
    for_each_triangle(&grid, level, |t| out.push(*t));
    out
}

fn total_area(tris: &[Triangle]) -> f64 {
    tris.iter().map(|t| f64::from(t.area())).sum()
}

#[test]
fn sphere_isosurface() {
    let (n, r) = (32, 1.3);
    let c = [0.31, -0.2, 0.13];
    let values = sample(n, |x, y, z| {
        -((x - c[0]).powi(2) + (y - c[1]).powi(2) + (z - c[2]).powi(2))
    });
    let tris = triangles(n, &values, -(r * r) as f32);
    assert!(tris.len() > 500, "{} triangles", tris.len());
    let mut volume = 0.0;
    for t in &tris {
        for (p, nrm) in t.vertices.iter().zip(&t.normals) {
            let d = [0, 1, 2].map(|i| f64::from(p[i]) - c[i]);
            let dist = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            assert!((dist - r).abs() < 0.02, "vertex at radius {dist}");
            // Normals: unit, pointing out of the sphere (f decreases).
            let nn: f64 = nrm.iter().map(|&x| f64::from(x).powi(2)).sum();
            assert!((nn - 1.0).abs() < 1e-4, "{nrm:?}");
            let along: f64 = (0..3).map(|i| f64::from(nrm[i]) * d[i]).sum::<f64>() / dist;
            assert!(along > 0.99, "normal {nrm:?} at {p:?}");
        }
        // Oriented outwards: the divergence theorem gives the volume.
        let [a, b, cc] = t.vertices.map(|v| v.map(f64::from));
        let cross = [
            b[1] * cc[2] - b[2] * cc[1],
            b[2] * cc[0] - b[0] * cc[2],
            b[0] * cc[1] - b[1] * cc[0],
        ];
        volume += (a[0] * cross[0] + a[1] * cross[1] + a[2] * cross[2]) / 6.0;
    }
    let area = total_area(&tris);
    let exact = 4.0 * PI * r * r;
    assert!((area / exact - 1.0).abs() < 0.04, "area {area} vs {exact}");
    let exact_volume = 4.0 / 3.0 * PI * r.powi(3);
    assert!(
        (volume / exact_volume - 1.0).abs() < 0.02,
        "volume {volume} vs {exact_volume}"
    );

    // Above the maximum (and at non-finite levels): nothing.
    assert!(triangles(n, &values, 0.01).is_empty());
    assert!(triangles(n, &values, f32::NAN).is_empty());
    // Below the minimum: nothing either (all inside).
    assert!(triangles(n, &values, -100.0).is_empty());

    // Deterministic order.
    assert_eq!(tris, triangles(n, &values, -(r * r) as f32));
}

#[test]
fn surface_wraps_around_the_box() {
    // A bump centred on the corner node (−π, −π, −π) ≡ (π, π, π): its
    // sphere is cut into eight pieces, one at each corner of the box.
    let (n, r) = (28, 1.1);
    let values = sample(n, |x, y, z| {
        -(wrap(x + PI).powi(2) + wrap(y + PI).powi(2) + wrap(z + PI).powi(2))
    });
    let tris = triangles(n, &values, -(r * r) as f32);
    let mut corners = HashSet::new();
    for t in &tris {
        for p in &t.vertices {
            let d = p.map(|x| wrap(f64::from(x) + PI));
            let dist = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            assert!((dist - r).abs() < 0.02, "vertex at {p:?}, distance {dist}");
            assert!(p.iter().all(|x| x.abs() <= std::f32::consts::PI + 1e-6));
            corners.insert(p.map(|x| x > 0.0));
        }
    }
    assert_eq!(corners.len(), 8, "pieces at every corner");
    let area = total_area(&tris);
    let exact = 4.0 * PI * r * r;
    assert!((area / exact - 1.0).abs() < 0.04, "area {area} vs {exact}");

    // A slab periodic in x and y, through the wrap in z: two planes of
    // area (2π)² each.
    let values = sample(n, |_, _, z| z.cos());
    let area = total_area(&triangles(n, &values, 0.5));
    let exact = 2.0 * (2.0 * PI).powi(2);
    assert!((area / exact - 1.0).abs() < 1e-3, "area {area} vs {exact}");
}

// ---------------------------------------------------------------------------
// Taylor–Green field snapshots
// ---------------------------------------------------------------------------

/// Taylor–Green at t = 0 times `scale`: u = (sin x cos y cos z,
/// −cos x sin y cos z, 0), its vorticity and Q (Q scaled by `scale`²).
fn taylor_green(n: usize, scale: f64, t: f64, step: u64) -> (FieldSnapshot, Vec<f32>) {
    let mut q = Vec::with_capacity(n * n * n);
    let mut vorticity = Vec::with_capacity(3 * n * n * n);
    let mut velocity = Vec::with_capacity(3 * n * n * n);
    for i in 0..n {
        let (sx, cx) = node(i, n).sin_cos();
        for j in 0..n {
            let (sy, cy) = node(j, n).sin_cos();
            for k in 0..n {
                let z = node(k, n);
                let (sz, cz) = z.sin_cos();
                let x = node(i, n);
                let y = node(j, n);
                velocity.extend([sx * cy * cz, -cx * sy * cz, 0.0].map(|v| (scale * v) as f32));
                vorticity.extend(
                    [-cx * sy * sz, -sx * cy * sz, 2.0 * sx * sy * cz].map(|v| (scale * v) as f32),
                );
                let qv = -0.25 * (1.0 + (2.0 * z).cos()) * ((2.0 * x).cos() + (2.0 * y).cos());
                q.push((scale * scale * qv) as f32);
            }
        }
    }
    let snapshot = FieldSnapshot {
        n,
        t,
        step,
        stride: 1,
        q,
        vorticity,
    };
    (snapshot, velocity)
}

/// Element type of the arrays written.
#[derive(Clone, Copy)]
enum Precision {
    F32,
    F64,
}

/// Write a snapshot as `vpm` does: `velocity`, `vorticity`, `Q`, `t`,
/// `step`, `stride`.
fn write_snapshot(path: &Path, f: &FieldSnapshot, velocity: &[f32], precision: Precision) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let n = f.n;
    let mut npz = NpzWriter::new(fs::File::create(path).unwrap());
    let arrays: [(&str, Vec<usize>, &[f32]); 3] = [
        (FIELD_VELOCITY, vec![n, n, n, 3], velocity),
        (FIELD_VORTICITY, vec![n, n, n, 3], &f.vorticity),
        (FIELD_Q, vec![n, n, n], &f.q),
    ];
    for (name, shape, data) in arrays {
        match precision {
            Precision::F32 => {
                let a = Array::from_shape_vec(IxDyn(&shape), data.to_vec()).unwrap();
                npz.add_array(name, &a).unwrap();
            }
            Precision::F64 => {
                let a = Array::from_shape_vec(IxDyn(&shape), data.to_vec())
                    .unwrap()
                    .mapv(f64::from);
                npz.add_array(name, &a).unwrap();
            }
        }
    }
    npz.add_array(FIELD_T, &arr0(f.t)).unwrap();
    npz.add_array(FIELD_STEP, &arr0(f.step)).unwrap();
    npz.add_array(FIELD_STRIDE, &arr0(f.stride)).unwrap();
    npz.finish().unwrap();
}

fn snapshot_path(run: &Path, solver: Solver, step: u64) -> PathBuf {
    run.join(FIELDS_DIR)
        .join(format!("{}.npz", fields_stem(solver.dir_name(), step)))
}

/// The spectral CSVs that `plot_run` needs.
fn minimal_spectral(run: &Path) {
    write_solver(
        run,
        "spectral",
        "t,K,T\n0,1,1\n0.5,0.9,1.05\n1,0.8,1.1\n",
        "t,k,E\n0,1,0.5\n0,2,0.125\n1,1,0.4\n1,2,0.1\n",
    );
}

/// A Taylor–Green run directory: spectral and vortex snapshots (the vortex
/// field scaled by 0.9) at `steps`, the energy decaying with time.
fn taylor_green_run(run: &Path, n: usize, steps: &[u64]) {
    minimal_spectral(run);
    write_solver(run, "vortex", "t,K\n0,1\n", "t,k,E\n0,1,0.5\n");
    for &step in steps {
        let t = step as f64 * 0.01;
        let decay = (-0.2 * t).exp();
        let (f, u) = taylor_green(n, decay, t, step);
        write_snapshot(
            &snapshot_path(run, Solver::Spectral, step),
            &f,
            &u,
            Precision::F32,
        );
        let (f, u) = taylor_green(n, 0.9 * decay, t, step);
        // The vortex file in f64: both element types are read.
        write_snapshot(
            &snapshot_path(run, Solver::Vortex, step),
            &f,
            &u,
            Precision::F64,
        );
    }
    // What else the main crate puts there is ignored.
    fs::write(run.join(FIELDS_DIR).join("spectral.pvd"), "<xml/>").unwrap();
    fs::write(
        run.join(FIELDS_DIR)
            .join(format!("{}.vti", fields_stem("spectral", 0))),
        "x",
    )
    .unwrap();
}

/// Pixels of `pixels` (an image `width` wide) in the rectangle `x0..x1`,
/// `y0..y1`.
fn region(pixels: &[[u8; 3]], width: u32, x: (u32, u32), y: (u32, u32)) -> Vec<[u8; 3]> {
    let mut out = Vec::new();
    for row in y.0..y.1 {
        for col in x.0..x.1 {
            out.push(pixels[(row * width + col) as usize]);
        }
    }
    out
}

/// The most frequent colour and how often it occurs.
fn most_common(pixels: &[[u8; 3]]) -> ([u8; 3], usize) {
    let mut counts = std::collections::HashMap::new();
    for p in pixels {
        *counts.entry(*p).or_insert(0usize) += 1;
    }
    counts.into_iter().max_by_key(|&(c, k)| (k, c)).unwrap()
}

/// Check a 3-D panel (the rectangle `x`, `y` of the picture): a good part
/// is plain background, a substantial part is surface of the colour family
/// (`blue`: blue dominates, else red does) in many shades.
fn check_surface_panel(pixels: &[[u8; 3]], width: u32, x: (u32, u32), y: (u32, u32), blue: bool) {
    let panel = region(pixels, width, x, y);
    let (background, count) = most_common(&panel);
    assert!(
        count > panel.len() / 5,
        "background {background:?} only {count} of {}",
        panel.len()
    );
    let family = |p: &[u8; 3]| {
        let (r, g, b) = (i32::from(p[0]), i32::from(p[1]), i32::from(p[2]));
        if blue {
            b > r + 40 && b > g + 10
        } else {
            r > b + 60 && r > g + 20
        }
    };
    let surface: Vec<[u8; 3]> = panel.iter().copied().filter(family).collect();
    assert!(
        surface.len() > panel.len() / 20,
        "only {} surface pixels of {}",
        surface.len(),
        panel.len()
    );
    let shades: HashSet<[u8; 3]> = surface.iter().copied().collect();
    assert!(shades.len() > 100, "only {} shades", shades.len());
}

/// Pixels of a one-panel structures picture's 3-D view that belong to a spectral (blue)
/// surface.
fn blue_surface_pixels(pixels: &[[u8; 3]], size: (u32, u32)) -> usize {
    region(pixels, size.0, (0, size.0), (100, size.1 - 60))
        .iter()
        .filter(|p| i32::from(p[2]) > i32::from(p[0]) + 40)
        .count()
}

#[test]
fn taylor_green_pictures() {
    let run = tempfile::tempdir().unwrap();
    let n = 32;
    taylor_green_run(run.path(), n, &[0, 10]);
    let options = PlotOptions {
        q_level: 0.8,
        ..Default::default()
    };
    let written = plot_run_with(run.path(), "TG", &options).unwrap();
    let expected: Vec<PathBuf> = [
        "energy.png".to_string(),
        "spectrum.png".to_string(),
        structures_png(0),
        vorticity_slice_png(0),
        structures_png(10),
        vorticity_slice_png(10),
    ]
    .iter()
    .map(|f| run.path().join(f))
    .collect();
    assert_eq!(written, expected);
    assert_eq!(structures_png(125), "structures-00000125.png");
    assert_eq!(vorticity_slice_png(125), "vorticity-00000125.png");
    common::check_pngs(&written, &[ENERGY_COMPARE_SIZE, SPECTRUM_COMPARE_SIZE]);

    for step in [0, 10] {
        // Structures: two 3-D panels side by side, blue and red.
        let path = run.path().join(structures_png(step));
        let size = structures_size(2);
        let pixels = decode_png(&path, size);
        let half = size.0 / 2;
        let rows = (100, size.1 - 60);
        check_surface_panel(&pixels, size.0, (0, half), rows, true);
        check_surface_panel(&pixels, size.0, (half, size.0), rows, false);
        // Text (title, caption, labels) is there.
        let dark = pixels.iter().filter(|p| p.iter().all(|&c| c < 60)).count();
        assert!(dark > 1000, "{dark} dark pixels");

        // Vorticity slice: two panels of many colours.
        let path = run.path().join(vorticity_slice_png(step));
        let size = vorticity_size(2);
        let pixels = decode_png(&path, size);
        let panel_w = vorticity_size(2).0 - vorticity_size(1).0;
        for p in 0..2 {
            let colours: HashSet<[u8; 3]> = region(
                &pixels,
                size.0,
                (p * panel_w, (p + 1) * panel_w),
                (60, size.1),
            )
            .into_iter()
            .collect();
            assert!(colours.len() > 300, "panel {p}: {} colours", colours.len());
        }
    }
    let names = common::dir_names(run.path());
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    demo_copy(&written, "tg32-");

    // Only the spectral solver: one panel each.
    let single = tempfile::tempdir().unwrap();
    minimal_spectral(single.path());
    let (f, u) = taylor_green(25, 1.0, 0.25, 7);
    write_snapshot(
        &snapshot_path(single.path(), Solver::Spectral, 7),
        &f,
        &u,
        Precision::F64,
    );
    let written = plot_run(single.path(), "TG spectral only").unwrap();
    assert_eq!(written.len(), 4);
    let size = structures_size(1);
    let pixels = decode_png(&written[2], size);
    check_surface_panel(&pixels, size.0, (0, size.0), (100, size.1 - 60), true);
    let pixels = decode_png(&written[3], vorticity_size(1));
    let colours: HashSet<[u8; 3]> = pixels.into_iter().collect();
    assert!(colours.len() > 300);
    demo_copy(&written[2..], "tg25-single-");

    // A level above the maximum: the panels say there is no surface, the
    // picture is still drawn.
    let written = plot_fields_at(
        single.path(),
        7,
        "TG",
        &PlotOptions {
            q_level: 100.0,
            ..Default::default()
        },
    )
    .unwrap();
    let pixels = decode_png(&written[0], size);
    assert_eq!(blue_surface_pixels(&pixels, size), 0);
    demo_copy(&written[..1], "empty-");
}

/// A shear flow u = (sin y, 0, 0) has Q = 0 (strain and rotation balance): with Q at
/// round-off level no surface is drawn through the noise, and the panel says why.
#[test]
fn no_surface_through_round_off_when_q_vanishes() {
    let n = 16;
    let run = tempfile::tempdir().unwrap();
    minimal_spectral(run.path());
    let (mut f, _) = taylor_green(n, 1.0, 0.0, 4);
    let mut velocity = Vec::with_capacity(3 * n * n * n);
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                let (x, y, z) = (node(i, n), node(j, n), node(k, n));
                let p = (i * n + j) * n + k;
                velocity.extend([y.sin() as f32, 0.0, 0.0]);
                f.vorticity[3 * p..3 * p + 3].copy_from_slice(&[0.0, 0.0, -y.cos() as f32]);
                // Round-off of a spectral computation: about 1e-16 of |ω|², any sign.
                f.q[p] = (1e-16 * (7.0 * x + 3.0 * y - 5.0 * z).sin()) as f32;
            }
        }
    }
    write_snapshot(
        &snapshot_path(run.path(), Solver::Spectral, 4),
        &f,
        &velocity,
        Precision::F32,
    );
    let written = plot_fields_at(run.path(), 4, "shear", &PlotOptions::default()).unwrap();
    let size = structures_size(1);
    let pixels = decode_png(&written[0], size);
    assert_eq!(
        blue_surface_pixels(&pixels, size),
        0,
        "a surface was drawn through round-off"
    );
}

/// Orientation of the slice: a vorticity blob at (x, y) = (−π/2, +π/2) is drawn left of and
/// above the panel's centre (x to the right, y upwards), not transposed or mirrored.
#[test]
fn vorticity_slice_is_not_transposed_or_mirrored() {
    let n = 32;
    let run = tempfile::tempdir().unwrap();
    minimal_spectral(run.path());
    let (mut f, velocity) = taylor_green(n, 1.0, 0.0, 2);
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                let (x, y) = (node(i, n), node(j, n));
                let r2 = (x + PI / 2.0).powi(2) + (y - PI / 2.0).powi(2);
                let p = (i * n + j) * n + k;
                f.vorticity[3 * p..3 * p + 3].copy_from_slice(&[
                    0.0,
                    0.0,
                    (-r2 / 0.2).exp() as f32,
                ]);
            }
        }
    }
    write_snapshot(
        &snapshot_path(run.path(), Solver::Spectral, 2),
        &f,
        &velocity,
        Precision::F32,
    );
    let written = plot_fields_at(run.path(), 2, "blob", &PlotOptions::default()).unwrap();
    let size = vorticity_size(1);
    let pixels = decode_png(&written[1], size);
    // Bright (yellow end of viridis) pixels left of the colour bar.
    let (mut sx, mut sy, mut count) = (0u64, 0u64, 0u64);
    for (idx, p) in pixels.iter().enumerate() {
        let (x, y) = ((idx as u32 % size.0) as u64, (idx as u32 / size.0) as u64);
        if x < 640 && p[0] > 180 && p[1] > 180 && p[2] < 120 {
            sx += x;
            sy += y;
            count += 1;
        }
    }
    assert!(count > 200, "{count} bright pixels");
    let (cx, cy) = (sx / count, sy / count);
    // The plot area spans about x ∈ [95, 625], y ∈ [80, 610]: the blob's centre is near
    // (227, 212); the area's centre near (360, 345).
    assert!(cx < 300 && cy < 300, "blob drawn at ({cx}, {cy})");
}

#[test]
fn read_back_and_rms() {
    let dir = tempfile::tempdir().unwrap();
    let (f, u) = taylor_green(12, 1.0, 0.5, 3);
    for (name, precision) in [("a.npz", Precision::F32), ("b.npz", Precision::F64)] {
        let path = dir.path().join(name);
        write_snapshot(&path, &f, &u, precision);
        let back = read_fields(&path).unwrap();
        assert_eq!(back, f);
    }
    // Q_rms of Taylor–Green: ¼·√(mean (1 + cos 2z)²)·√(mean (cos 2x + cos 2y)²)
    // = ¼·√(3/2)·1.
    let rms = q_rms(&f.q);
    assert!((rms - 0.25 * 1.5f64.sqrt()).abs() < 1e-6, "{rms}");
}

#[test]
fn pictures_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = taylor_green(24, 1.0, 0.0, 0);
    let (b, _) = taylor_green(20, 0.8, 0.0, 0);
    let panels = [
        FieldPanel {
            solver: Solver::Spectral,
            fields: &a,
        },
        FieldPanel {
            solver: Solver::Vortex,
            fields: &b,
        },
    ];
    let level = QLevel {
        factor: 1.5,
        q_rms: q_rms(&a.q),
        reference: Solver::Spectral,
    };
    let mut bytes = Vec::new();
    for name in ["s1.png", "s2.png"] {
        let path = dir.path().join(name);
        draw_structures(&path, "det", &panels, level).unwrap();
        bytes.push(fs::read(&path).unwrap());
    }
    assert!(bytes[0] == bytes[1], "structures differ between two draws");
    let mut bytes = Vec::new();
    for name in ["v1.png", "v2.png"] {
        let path = dir.path().join(name);
        draw_vorticity_slice(&path, "det", &panels).unwrap();
        bytes.push(fs::read(&path).unwrap());
    }
    assert!(bytes[0] == bytes[1], "slices differ between two draws");
}

/// The error of `plot_run` (causes included), checked to name `parts`.
fn fields_error(run: &Path, options: &PlotOptions, parts: &[&str]) {
    let err = format!("{:#}", plot_run_with(run, "x", options).unwrap_err());
    for part in parts {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
}

#[test]
fn bad_snapshots_are_named() {
    let run = tempfile::tempdir().unwrap();
    minimal_spectral(run.path());
    let path = snapshot_path(run.path(), Solver::Spectral, 5);
    let name = path.display().to_string();
    let (f, u) = taylor_green(8, 1.0, 0.0, 5);

    // Not an npz at all.
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, "not a zip").unwrap();
    fields_error(run.path(), &PlotOptions::default(), &[&name]);

    // Q missing.
    let mut npz = NpzWriter::new(fs::File::create(&path).unwrap());
    let vort = Array::from_shape_vec(IxDyn(&[8, 8, 8, 3]), f.vorticity.clone()).unwrap();
    npz.add_array(FIELD_VORTICITY, &vort).unwrap();
    npz.add_array(FIELD_T, &arr0(0.0)).unwrap();
    npz.add_array(FIELD_STEP, &arr0(5u64)).unwrap();
    npz.finish().unwrap();
    fields_error(run.path(), &PlotOptions::default(), &[&name, "\"Q\""]);

    // Q of the wrong shape.
    let mut bad = f.clone();
    bad.q.truncate(8 * 8 * 4);
    let mut npz = NpzWriter::new(fs::File::create(&path).unwrap());
    let q = Array::from_shape_vec(IxDyn(&[8, 8, 4]), bad.q.clone()).unwrap();
    npz.add_array(FIELD_Q, &q).unwrap();
    npz.add_array(FIELD_VORTICITY, &vort).unwrap();
    npz.add_array(FIELD_T, &arr0(0.0)).unwrap();
    npz.add_array(FIELD_STEP, &arr0(5u64)).unwrap();
    npz.finish().unwrap();
    fields_error(run.path(), &PlotOptions::default(), &[&name, "shape"]);

    // Integer Q: neither f32 nor f64.
    let mut npz = NpzWriter::new(fs::File::create(&path).unwrap());
    let q = Array::from_shape_vec(IxDyn(&[8, 8, 8]), vec![1i32; 512]).unwrap();
    npz.add_array(FIELD_Q, &q).unwrap();
    npz.finish().unwrap();
    fields_error(run.path(), &PlotOptions::default(), &[&name, "\"Q\""]);

    // n = 1.
    let tiny = FieldSnapshot {
        n: 1,
        t: 0.0,
        step: 5,
        stride: 1,
        q: vec![0.0],
        vorticity: vec![0.0; 3],
    };
    write_snapshot(&path, &tiny, &[0.0; 3], Precision::F32);
    fields_error(run.path(), &PlotOptions::default(), &[&name, "n = 1"]);

    // A good file, but a non-finite level.
    write_snapshot(&path, &f, &u, Precision::F32);
    fields_error(
        run.path(),
        &PlotOptions {
            q_level: f64::NAN,
            ..Default::default()
        },
        &[&name, "not finite"],
    );
    assert_eq!(
        plot_run(run.path(), "ok").unwrap().len(),
        4,
        "the good file is drawn"
    );

    // The draw functions check their input too.
    let png = run.path().join("x.png");
    let level = |factor: f64| QLevel {
        factor,
        q_rms: 1.0,
        reference: Solver::Spectral,
    };
    let err = format!(
        "{:#}",
        draw_structures(&png, "x", &[], level(1.0)).unwrap_err()
    );
    assert!(err.contains("x.png"), "{err}");
    let panels = [FieldPanel {
        solver: Solver::Spectral,
        fields: &f,
    }];
    let err = format!(
        "{:#}",
        draw_structures(&png, "x", &panels, level(f64::INFINITY)).unwrap_err()
    );
    assert!(
        err.contains("x.png") && err.contains("not a finite"),
        "{err}"
    );
    let mut short = f.clone();
    short.vorticity.pop();
    let panels = [FieldPanel {
        solver: Solver::Vortex,
        fields: &short,
    }];
    let err = format!(
        "{:#}",
        draw_vorticity_slice(&png, "x", &panels).unwrap_err()
    );
    assert!(err.contains("x.png") && err.contains("vortex"), "{err}");
    assert!(!png.exists());

    // No snapshot of the step asked for.
    let err = format!(
        "{:#}",
        plot_fields_at(run.path(), 6, "x", &PlotOptions::default()).unwrap_err()
    );
    assert!(err.contains("00000006"), "{err}");
}

/// Rendering stays fast: Taylor–Green at n = 128 (≈ 2·10⁶ nodes) in well
/// under the time limit below, in the optimised test profile.
#[test]
fn large_grid_renders_quickly() {
    let (a, _) = taylor_green(128, 1.0, 0.0, 0);
    let dir = tempfile::tempdir().unwrap();
    let panels = [FieldPanel {
        solver: Solver::Spectral,
        fields: &a,
    }];
    let level = QLevel {
        factor: 1.0,
        q_rms: q_rms(&a.q),
        reference: Solver::Spectral,
    };
    let start = std::time::Instant::now();
    draw_structures(&dir.path().join("s.png"), "big", &panels, level).unwrap();
    draw_vorticity_slice(&dir.path().join("v.png"), "big", &panels).unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    assert!(elapsed < 20.0, "{elapsed} s");
}

/// With `POSTPROCESS_DEMO_DIR` set: a Taylor–Green run at n = 64, both
/// solvers, for looking at the pictures.
#[test]
fn taylor_green_demo_n64() {
    if std::env::var_os("POSTPROCESS_DEMO_DIR").is_none() {
        return;
    }
    let run = tempfile::tempdir().unwrap();
    taylor_green_run(run.path(), 64, &[0]);
    let written = plot_run_with(
        run.path(),
        "Taylor–Green",
        &PlotOptions {
            q_level: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    demo_copy(&written[2..], "tg64-");
}

/// A smooth random periodic field: a few hundred Fourier modes with
/// |k| ≤ `kmax`, fixed pseudo-random amplitudes and phases.
fn random_field(n: usize, kmax: i32, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut modes = Vec::new();
    for kx in -kmax..=kmax {
        for ky in -kmax..=kmax {
            for kz in 0..=kmax {
                let k2 = kx * kx + ky * ky + kz * kz;
                if k2 == 0 || k2 > kmax * kmax {
                    continue;
                }
                let amp = (f64::from(k2)).powf(-0.8) * (next() + 0.5);
                modes.push(([kx, ky, kz].map(f64::from), amp, 2.0 * PI * next()));
            }
        }
    }
    // Separable evaluation would be faster; this is only for the demo.
    sample(n, |x, y, z| {
        modes
            .iter()
            .map(|(k, a, p)| a * (k[0] * x + k[1] * y + k[2] * z + p).cos())
            .sum()
    })
}

/// Timings of the pictures at n = 64 and 128 (Taylor–Green, and a random
/// field with many structures), printed; run with `--ignored --nocapture`.
/// With `POSTPROCESS_DEMO_DIR` set, the random-field pictures are copied
/// there.
#[test]
#[ignore]
fn timings() {
    let dir = tempfile::tempdir().unwrap();
    for n in [64, 128] {
        let (tg, _) = taylor_green(n, 1.0, 0.0, 0);
        let (mut rnd, _) = taylor_green(n, 1.0, 0.0, 0);
        rnd.q = random_field(n, 6, 7);
        for (name, f) in [("tg", &tg), ("random", &rnd)] {
            let panels = [
                FieldPanel {
                    solver: Solver::Spectral,
                    fields: f,
                },
                FieldPanel {
                    solver: Solver::Vortex,
                    fields: f,
                },
            ];
            let level = QLevel {
                factor: 1.0,
                q_rms: q_rms(&f.q),
                reference: Solver::Spectral,
            };
            let mut count = 0u64;
            let grid = PeriodicGrid::new(n, &f.q).unwrap();
            for_each_triangle(&grid, level.value() as f32, |_| count += 1);
            let s = dir.path().join(format!("{name}{n}-structures.png"));
            let v = dir.path().join(format!("{name}{n}-vorticity.png"));
            let start = std::time::Instant::now();
            draw_structures(&s, name, &panels, level).unwrap();
            let t_s = start.elapsed().as_secs_f64();
            let start = std::time::Instant::now();
            draw_vorticity_slice(&v, name, &panels).unwrap();
            let t_v = start.elapsed().as_secs_f64();
            eprintln!(
                "{name} n = {n}: {count} triangles per panel; structures (2 panels) {t_s:.3} s, \
                 vorticity {t_v:.3} s"
            );
            demo_copy(&[s, v], "timing-");
        }
    }
    // n = 256 with many small structures (Taylor–Green's Q at wavenumber
    // 5): millions of triangles, as in a turbulent field.
    let n = 256;
    let m = 5.0;
    let (mut f, _) = taylor_green(2, 1.0, 0.0, 0);
    f.n = n;
    f.q = sample(n, |x, y, z| {
        -0.25 * (1.0 + (2.0 * m * z).cos()) * ((2.0 * m * x).cos() + (2.0 * m * y).cos())
    });
    f.vorticity = vec![0.0; 3 * n * n * n];
    let panels = [FieldPanel {
        solver: Solver::Spectral,
        fields: &f,
    }];
    let level = QLevel {
        factor: 1.0,
        q_rms: q_rms(&f.q),
        reference: Solver::Spectral,
    };
    let mut count = 0u64;
    let grid = PeriodicGrid::new(n, &f.q).unwrap();
    let start = std::time::Instant::now();
    for_each_triangle(&grid, level.value() as f32, |_| count += 1);
    let t_iso = start.elapsed().as_secs_f64();
    let s = dir.path().join("tg5-256-structures.png");
    let start = std::time::Instant::now();
    draw_structures(&s, "TG k = 5", &panels, level).unwrap();
    let t_s = start.elapsed().as_secs_f64();
    eprintln!(
        "k = 5 n = {n}: {count} triangles; extraction alone {t_iso:.3} s, structures (1 panel) \
         {t_s:.3} s"
    );
    demo_copy(&[s], "timing-");
}
