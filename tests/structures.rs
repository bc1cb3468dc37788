//! Vortex structures (docs/physics.md §6.2): Q, vorticity and velocity on the grid against closed
//! forms, the particle field's Q against the Gaussian-smoothed field's, and the field files
//! (npz, VTK ImageData, pvd) read back.

use std::f64::consts::{PI, TAU};
use std::fs;
use std::path::Path;

use base64::Engine as _;
use ndarray::{Array0, Array1, Array3, Array4, Ix0};
use ndarray_npy::NpzReader;
use vpm::config::InitialCondition;
use vpm::device::Device;
use vpm::diagnostics::structures::{grid_fields, GridFields};
use vpm::init::initial_modes;
use vpm::output::{write_fields, FieldPrecision, FieldsFrame};
use vpm::spectral::{Dealias, Fft3d, SpectralGrid};
use vpm::summation::{planner, Boundary, Evaluation, EvaluatorKind};
use vpm::vortex::field::velocity_modes_from_particles;
use vpm::vortex::particles_on_lattice;

/// Node coordinate x_i = −π + i·2π/n.
fn node(i: usize, n: usize) -> f64 {
    -PI + TAU * i as f64 / n as f64
}

/// Taylor–Green at t = 0 (amplitude 1): velocity, vorticity and Q at (x, y, z).
fn taylor_green(x: f64, y: f64, z: f64) -> ([f64; 3], [f64; 3], f64) {
    let (sx, cx, sy, cy, sz, cz) = (x.sin(), x.cos(), y.sin(), y.cos(), z.sin(), z.cos());
    let u = [sx * cy * cz, -cx * sy * cz, 0.0];
    let w = [-cx * sy * sz, -sx * cy * sz, 2.0 * sx * sy * cz];
    // −½ A_ij A_ji = −cos²z (cos²x cos²y − sin²x sin²y) = −¼(1 + cos 2z)(cos 2x + cos 2y).
    let q = -0.25 * (1.0 + (2.0 * z).cos()) * ((2.0 * x).cos() + (2.0 * y).cos());
    (u, w, q)
}

fn taylor_green_fields(n: usize, dealias: Dealias) -> GridFields {
    let grid = SpectralGrid::new(n, dealias);
    let layout = grid.layout();
    let modes = initial_modes(&InitialCondition::TaylorGreen { amplitude: 1.0 }, &layout).unwrap();
    grid_fields(&mut Fft3d::new(n, layout), &modes)
}

/// Largest |a − scale·f(x_i, y_j, z_k)| over the nodes.
fn max_err(n: usize, a: &[f64], f: impl Fn(f64, f64, f64) -> f64) -> f64 {
    let mut worst: f64 = 0.0;
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                let v = a[(i * n + j) * n + k];
                worst = worst.max((v - f(node(i, n), node(j, n), node(k, n))).abs());
            }
        }
    }
    worst
}

#[test]
fn taylor_green_q_vorticity_and_velocity_are_exact_on_the_grid() {
    for (n, dealias) in [(16, Dealias::ThreeHalves), (24, Dealias::TwoThirds)] {
        let f = taylor_green_fields(n, dealias);
        assert_eq!(f.n, n);
        let q_err = max_err(n, &f.q, |x, y, z| taylor_green(x, y, z).2);
        assert!(q_err < 1e-13, "n = {n}: Q off by {q_err:e}");
        for c in 0..3 {
            let u_err = max_err(n, &f.velocity[c], |x, y, z| taylor_green(x, y, z).0[c]);
            let w_err = max_err(n, &f.vorticity[c], |x, y, z| taylor_green(x, y, z).1[c]);
            assert!(
                u_err < 1e-14 && w_err < 1e-13,
                "n = {n}, c = {c}: {u_err:e} {w_err:e}"
            );
        }
        // Q_rms² = ⟨(1 + cos 2z)²⟩⟨(cos 2x + cos 2y)²⟩/16 = (3/2)(1)/16.
        assert!((f.q_rms() - (1.5f64 / 16.0).sqrt()).abs() < 1e-14);
    }
}

#[test]
fn q_of_a_periodic_flow_has_zero_mean() {
    // ⟨Q⟩ = ½⟨∂_i∂_j(u_i u_j)⟩ = 0 in a periodic box: a check of the gradient's off-diagonal
    // pairs on a field with every component and many modes.
    let n = 24;
    let grid = SpectralGrid::new(n, Dealias::TwoThirds);
    let layout = grid.layout();
    let ic = InitialCondition::Isotropic {
        kp: 3.0,
        u0: 1.0,
        seed: 7,
        k_cut: 7.0,
    };
    let modes = initial_modes(&ic, &layout).unwrap();
    let f = grid_fields(&mut Fft3d::new(n, layout), &modes);
    let mean = f.q.iter().sum::<f64>() / f.q.len() as f64;
    assert!(f.q_rms() > 1.0, "Q_rms = {}", f.q_rms());
    assert!(mean.abs() < 1e-12 * f.q_rms(), "⟨Q⟩ = {mean:e}");
    // The enstrophy ½⟨|ω|²⟩ from the grid vorticity equals the one from the modes (§6.2).
    let z_grid = f.vorticity.iter().flatten().map(|w| w * w).sum::<f64>() / (2 * n * n * n) as f64;
    let z_modes = vpm::diagnostics::flow_stats(&layout, &modes, 1.0).enstrophy;
    assert!(
        (z_grid - z_modes).abs() < 1e-12 * z_modes,
        "{z_grid} vs {z_modes}"
    );
}

/// Particles carrying the Taylor–Green vorticity with quadrature strengths α = ω(x_p) h³ on an
/// n³ lattice represent ω * ζ_σ, the Gaussian-smoothed field (to e^{−(2πσ/h)²/2}): its velocity
/// is e^{−3σ²/2} times Taylor–Green's (every mode has |k|² = 3) and its Q is e^{−3σ²} times Q.
/// The particle velocity sampled at the N³ nodes and fed to [`grid_fields`], as a run does,
/// gives that Q.
#[test]
fn particle_q_at_t0_is_the_q_of_the_gaussian_smoothed_field() {
    let (n_lattice, n_grid): (usize, usize) = (16, 16);
    let h = TAU / n_lattice as f64;
    let sigma = h;
    let mut alpha = Vec::with_capacity(n_lattice.pow(3));
    for i in 0..n_lattice {
        for j in 0..n_lattice {
            for k in 0..n_lattice {
                let (x, y, z) = (node(i, n_lattice), node(j, n_lattice), node(k, n_lattice));
                alpha.push(taylor_green(x, y, z).1.map(|w| w * h.powi(3)));
            }
        }
    }
    let particles = particles_on_lattice(n_lattice, &alpha, sigma);
    let mut plan = planner::plan(
        Boundary::Periodic { length: TAU },
        EvaluatorKind::Ewald,
        &Device::Cpu,
        1e-9,
    )
    .unwrap();
    let mut scratch = Evaluation::default();
    let (layout, modes) =
        velocity_modes_from_particles(plan.evaluator.as_mut(), &particles, n_grid, &mut scratch)
            .unwrap();
    let f = grid_fields(&mut Fft3d::new(n_grid, layout), &modes);
    let damp = (-3.0 * sigma * sigma).exp();
    let q_err = max_err(n_grid, &f.q, |x, y, z| damp * taylor_green(x, y, z).2);
    let q_max = damp;
    assert!(
        q_err < 1e-6 * q_max,
        "Q off by {:e} of its maximum",
        q_err / q_max
    );
    let u_err = max_err(n_grid, &f.velocity[0], |x, y, z| {
        damp.sqrt() * taylor_green(x, y, z).0[0]
    });
    assert!(u_err < 1e-6, "u off by {u_err:e}");
    // Not the unsmoothed field: the smoothing is visible (e^{−3σ²} = 0.63 at σ = h = 2π/16).
    let raw_err = max_err(n_grid, &f.q, |x, y, z| taylor_green(x, y, z).2);
    assert!(raw_err > 0.3, "{raw_err}");
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

fn npz(path: &Path) -> NpzReader<fs::File> {
    NpzReader::new(fs::File::open(path).unwrap()).unwrap()
}

/// The value of attribute `name` in the first tag `tag` of `xml`.
fn attr(xml: &str, tag: &str, name: &str) -> String {
    let start = xml
        .find(&format!("<{tag} "))
        .unwrap_or_else(|| panic!("no <{tag}>"));
    let end = start + xml[start..].find('>').unwrap();
    let t = &xml[start..end];
    let a = t
        .find(&format!(" {name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {t}"))
        + name.len()
        + 3;
    t[a..a + t[a..].find('"').unwrap()].to_string()
}

/// The decoded values (little-endian bytes after the UInt64 byte count) of the `DataArray`
/// named `name`, with its type and component count.
fn vti_array(xml: &str, name: &str) -> (String, usize, Vec<u8>) {
    let key = format!("Name=\"{name}\"");
    let at = xml.find(&key).unwrap_or_else(|| panic!("no array {name}"));
    let open = xml[..at].rfind("<DataArray").unwrap();
    let close_tag = at + xml[at..].find('>').unwrap();
    let tag = &xml[open..close_tag];
    let ty = attr(&xml[open..], "DataArray", "type");
    let comps = if tag.contains("NumberOfComponents") {
        attr(&xml[open..], "DataArray", "NumberOfComponents")
            .parse()
            .unwrap()
    } else {
        1
    };
    let body_end = close_tag + xml[close_tag..].find("</DataArray>").unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(xml[close_tag + 1..body_end].trim())
        .unwrap();
    let len = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    assert_eq!(len, raw.len() - 8, "{name}: header byte count");
    (ty, comps, raw[8..].to_vec())
}

#[test]
fn field_files_read_back_npz_vti_and_pvd() {
    let n = 16;
    let f = taylor_green_fields(n, Dealias::ThreeHalves);
    let dir = tempfile::tempdir().unwrap();
    for (stride, precision) in [(1, FieldPrecision::F32), (2, FieldPrecision::F64)] {
        let run = dir.path().join(format!("run-{stride}"));
        fs::create_dir_all(&run).unwrap();
        let m = n / stride;
        for (step, t) in [(40u64, 2.0), (0, 0.0), (40, 2.0)] {
            let frame = FieldsFrame {
                solver: "spectral",
                t,
                step,
                stride,
                precision,
                fields: &f,
            };
            let paths = write_fields(&run, &frame).unwrap();
            assert_eq!(paths.len(), 3);
        }
        let fields = run.join("fields");
        // npz: shapes, values, scalars.
        let p = fields.join("spectral-00000040.npz");
        let mut r = npz(&p);
        let t: Array0<f64> = r.by_name::<ndarray::OwnedRepr<f64>, Ix0>("t").unwrap();
        assert_eq!(t.into_scalar(), 2.0);
        let step: Array0<u64> = r.by_name::<ndarray::OwnedRepr<u64>, Ix0>("step").unwrap();
        assert_eq!(step.into_scalar(), 40);
        let x: Array1<f64> = r.by_name("x").unwrap();
        assert_eq!(x.len(), m);
        assert!((x[1] - x[0] - TAU / m as f64).abs() < 1e-15 && x[0] == -PI);
        let (q, vel): (Vec<f64>, Array4<f64>) = match precision {
            FieldPrecision::F32 => {
                let q: Array3<f32> = r.by_name("Q").unwrap();
                let v: Array4<f32> = r.by_name("velocity").unwrap();
                (q.iter().map(|&x| x as f64).collect(), v.mapv(f64::from))
            }
            FieldPrecision::F64 => {
                let q: Array3<f64> = r.by_name("Q").unwrap();
                (q.iter().copied().collect(), r.by_name("velocity").unwrap())
            }
        };
        assert_eq!(vel.shape(), &[m, m, m, 3]);
        let tol = if precision == FieldPrecision::F32 {
            1e-6
        } else {
            1e-13
        };
        for i in 0..m {
            for j in 0..m {
                for k in 0..m {
                    let (xi, yj, zk) = (
                        node(i * stride, n),
                        node(j * stride, n),
                        node(k * stride, n),
                    );
                    let (u, _, qq) = taylor_green(xi, yj, zk);
                    assert!((q[(i * m + j) * m + k] - qq).abs() < tol);
                    assert!((vel[[i, j, k, 1]] - u[1]).abs() < tol);
                }
            }
        }
        // vti: extents, origin, spacing, arrays in VTK order (x fastest).
        let xml = fs::read_to_string(fields.join("spectral-00000040.vti")).unwrap();
        assert_eq!(attr(&xml, "VTKFile", "type"), "ImageData");
        let e = m - 1;
        assert_eq!(
            attr(&xml, "ImageData", "WholeExtent"),
            format!("0 {e} 0 {e} 0 {e}")
        );
        assert_eq!(attr(&xml, "Piece", "Extent"), format!("0 {e} 0 {e} 0 {e}"));
        let origin: Vec<f64> = attr(&xml, "ImageData", "Origin")
            .split(' ')
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(origin, vec![-PI; 3]);
        let spacing: f64 = attr(&xml, "ImageData", "Spacing")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((spacing - TAU / m as f64).abs() < 1e-15);
        let width = precision.bytes() as usize;
        let value = |bytes: &[u8], idx: usize| -> f64 {
            let b = &bytes[idx * width..(idx + 1) * width];
            match precision {
                FieldPrecision::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
                FieldPrecision::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            }
        };
        let want_type = if precision == FieldPrecision::F32 {
            "Float32"
        } else {
            "Float64"
        };
        let (ty, comps, qv) = vti_array(&xml, "Q");
        assert_eq!(
            (ty.as_str(), comps, qv.len()),
            (want_type, 1, m * m * m * width)
        );
        let (ty, comps, wv) = vti_array(&xml, "vorticity");
        assert_eq!(
            (ty.as_str(), comps, wv.len()),
            (want_type, 3, 3 * m * m * m * width)
        );
        let (_, comps, uv) = vti_array(&xml, "velocity");
        assert_eq!(comps, 3);
        for (i, j, k) in [
            (0, 0, 0),
            (1, 0, 0),
            (0, 1, 0),
            (0, 0, 1),
            (m - 1, 2, m / 2),
        ] {
            let p = (k * m + j) * m + i;
            let (xi, yj, zk) = (
                node(i * stride, n),
                node(j * stride, n),
                node(k * stride, n),
            );
            let (u, w, qq) = taylor_green(xi, yj, zk);
            assert!((value(&qv, p) - qq).abs() < tol, "Q at {i} {j} {k}");
            for c in 0..3 {
                assert!(
                    (value(&wv, 3 * p + c) - w[c]).abs() < 2.0 * tol,
                    "ω_{c} at {i} {j} {k}"
                );
                assert!(
                    (value(&uv, 3 * p + c) - u[c]).abs() < tol,
                    "u_{c} at {i} {j} {k}"
                );
            }
        }
        let (ty, _, tv) = vti_array(&xml, "TimeValue");
        assert_eq!(
            (ty.as_str(), f64::from_le_bytes(tv[..8].try_into().unwrap())),
            ("Float64", 2.0)
        );
        // pvd: one entry per step (the rewrite of step 40 added none), sorted.
        let pvd = fs::read_to_string(fields.join("spectral.pvd")).unwrap();
        assert_eq!(pvd.matches("<DataSet").count(), 2, "{pvd}");
        let first = pvd.find("spectral-00000000.vti").unwrap();
        let second = pvd.find("spectral-00000040.vti").unwrap();
        assert!(first < second, "{pvd}");
        let tag = pvd[..second].rfind("<DataSet").unwrap();
        let t40: f64 = attr(&pvd[tag..], "DataSet", "timestep").parse().unwrap();
        assert_eq!(t40, 2.0, "{pvd}");
    }
}

/// ParaView's reader is VTK's XML parser: check that Python's XML parser accepts the `.vti` and
/// `.pvd` as well-formed and finds the arrays. Skipped (with a message) without `python3`.
#[test]
fn python_xml_parser_reads_vti_and_pvd() {
    let dir = tempfile::tempdir().unwrap();
    let f = taylor_green_fields(8, Dealias::ThreeHalves);
    let frame = FieldsFrame {
        solver: "vortex",
        t: 0.5,
        step: 3,
        stride: 1,
        precision: FieldPrecision::F32,
        fields: &f,
    };
    write_fields(dir.path(), &frame).unwrap();
    let script = r#"
import base64, struct, sys, xml.etree.ElementTree as ET
d = sys.argv[1] + "/fields"
pvd = ET.parse(d + "/vortex.pvd").getroot()
assert pvd.get("type") == "Collection"
ds = pvd.find("Collection").findall("DataSet")
assert [e.get("file") for e in ds] == ["vortex-00000003.vti"]
root = ET.parse(d + "/vortex-00000003.vti").getroot()
img = root.find("ImageData")
assert img.get("WholeExtent") == "0 7 0 7 0 7"
arrays = {a.get("Name"): a for a in img.find("Piece").find("PointData").findall("DataArray")}
assert sorted(arrays) == ["Q", "velocity", "vorticity"], sorted(arrays)
raw = base64.b64decode(arrays["Q"].text.strip())
(nbytes,) = struct.unpack("<Q", raw[:8])
assert nbytes == 4 * 8 ** 3 == len(raw) - 8
print("ok")
"#;
    match std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(dir.path())
        .output()
    {
        Ok(o) => assert!(
            o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "ok",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => println!("skipped: python3 not available ({e})"),
    }
}

/// The disk estimate counts the fields at their written size, and a run whose outputs cannot fit
/// on the run directory's file system is refused, naming both figures.
#[test]
fn disk_estimate_counts_the_fields_and_refuses_what_does_not_fit() {
    use vpm::output::fields_disk_bytes;
    use vpm::run::{memory, RunPlan};
    // The estimate of one solver at one time against the files written (n = 32, f32).
    let dir = tempfile::tempdir().unwrap();
    let f = taylor_green_fields(32, Dealias::ThreeHalves);
    let frame = FieldsFrame {
        solver: "spectral",
        t: 0.0,
        step: 0,
        stride: 1,
        precision: FieldPrecision::F32,
        fields: &f,
    };
    let written: u64 = write_fields(dir.path(), &frame)
        .unwrap()
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    let estimate = fields_disk_bytes(32, 1, FieldPrecision::F32);
    assert!(
        estimate >= written && estimate < written + written / 20,
        "estimate {estimate} for {written} bytes written"
    );
    // In the run's estimate: two times, one solver.
    let text = |n: usize, times: &str| {
        format!(
            "name = \"d\"\ndevice = \"cpu\"\n[flow]\nnu = 0.01\n[initial]\nkind = \"taylor-green\"\n\
             [time]\nt_end = 1.0\ndt = 0.1\n[output]\nfields_times = {times}\n[spectral]\nn = {n}\n"
        )
    };
    let case = vpm::config::Case::from_toml_str(&text(64, "[0.0, 1.0]"), "d.toml").unwrap();
    let plan = RunPlan::new(&case).unwrap();
    let e = memory::estimate(&case, &plan).unwrap();
    let fields = e
        .disk
        .iter()
        .find(|(what, _)| what.starts_with("fields"))
        .expect("a fields row");
    assert_eq!(fields.1, 2 * fields_disk_bytes(64, 1, FieldPrecision::F32));
    assert!(e.host.iter().any(|(what, _)| what.starts_with("fields")));
    memory::check_disk(&case, &plan, dir.path()).unwrap();
    // 2048³ fields at eleven times: several TB.
    let times = format!(
        "[{}]",
        (0..=10)
            .map(|i| format!("{}", i as f64 / 10.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let huge = vpm::config::Case::from_toml_str(&text(2048, &times), "d.toml").unwrap();
    let err = memory::check_disk(&huge, &plan, dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("free") && err.contains("fields at 11 times") && err.contains("fields_stride"),
        "{err}"
    );
}
