//! Biot–Savart results bit for bit (issue 24): the f64 bit patterns of the CPU all-pairs sum
//! and the CPU FMM (velocity, both stretching schemes, gradient) on a fixed seeded set, hashed
//! and compared with the hashes recorded from the code before the pair-interaction refactor.
//! A change of any bit of any result fails.

use vpm::summation::direct::DirectFreeSpace;
use vpm::summation::fmm::{plan_parameters, FmmBackend, FmmFreeSpace, FmmParams};
use vpm::summation::verify::{all_extras, Particles};
use vpm::summation::{Evaluation, Extra, Summation};

/// FNV-1a over the bit patterns of the values.
fn hash(values: impl IntoIterator<Item = f64>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in values {
        for b in v.to_bits().to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The hash of each evaluation (velocity, classical, transposed, gradient) of `s` on the set.
fn hashes(s: &mut dyn Summation, p: &Particles) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (name, extra) in all_extras(&p.alpha) {
        let mut e = Evaluation::default();
        s.evaluate(&p.sources(), &p.x, extra, &mut e).unwrap();
        let u = hash(e.velocity.iter().flatten().copied());
        let x = match extra {
            Extra::None => 0,
            Extra::Stretching { .. } => hash(e.stretching.iter().flatten().copied()),
            Extra::Gradient => hash(e.gradient.iter().flatten().flatten().copied()),
        };
        out.push((format!("{name} u"), u));
        out.push((format!("{name} extra"), x));
    }
    out
}

fn check(got: Vec<(String, u64)>, want: &[u64], what: &str) {
    let line: Vec<String> = got.iter().map(|(n, h)| format!("{n} {h:#018x}")).collect();
    println!("{what}: {}", line.join(", "));
    let got: Vec<u64> = got.iter().map(|g| g.1).collect();
    assert_eq!(got, want, "{what}: bits changed");
}

#[test]
fn direct_free_space_bits_unchanged() {
    let p = Particles::free_space(2000, 24);
    check(hashes(&mut DirectFreeSpace, &p), &DIRECT, "direct");
}

#[test]
fn fmm_free_space_bits_unchanged() {
    let p = Particles::plummer(2000, 0.5, 0.05, 24);
    // The leaves of the recording: since issue 25 the CPU plans larger ones at 1e-6.
    let params = plan_parameters(1e-6, FmmBackend::Cpu).unwrap();
    let mut fmm = FmmFreeSpace::with_params(
        FmmParams {
            leaf_size: 48,
            ..params
        },
        0,
    );
    check(hashes(&mut fmm, &p), &FMM, "fmm");
}

/// Recorded before issue 24's refactor (the summation sources of commit 89af00c).
const DIRECT: [u64; 8] = [
    0xc8c513df881d2174,
    0,
    0xc8c513df881d2174,
    0xb24f4a2c6cbe8cfc,
    0xc8c513df881d2174,
    0x29fe17f0fd3d461e,
    0xc8c513df881d2174,
    0xaa92e2be96984570,
];
const FMM: [u64; 8] = [
    0x7099ec0a603fa6d7,
    0,
    0x11c8a1f662a2d83a,
    0x2a36e9abd9455e22,
    0x11c8a1f662a2d83a,
    0x086f8fb702228659,
    0x11c8a1f662a2d83a,
    0xa23bc8d7eddb1351,
];
