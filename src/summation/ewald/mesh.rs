//! The smooth part of the Ewald split on the CPU (particle-mesh Ewald with a Kaiser–Bessel window,
//! module docs of [`super`], steps 1–5): spread the strengths onto the M³ grid, transform,
//! multiply by the Ewald factor and the curl, transform back, gather at the targets (with the
//! exact gradient of the gather when asked).

use super::params::EwaldParameters;
use super::window::KaiserBessel;
use crate::spectral::{Fft3d, ModeLayout};
use crate::summation::cells::wrap;
use crate::summation::Sources;
use num_complex::Complex64;
use rayon::prelude::*;
use std::f64::consts::{PI, TAU};
use std::time::Instant;

/// The Kaiser–Bessel window ([`KaiserBessel`]) on the M³ grid with nodes −π + g·h, w = `p`
/// nodes per direction.
#[derive(Clone, Copy)]
struct Window {
    m: usize,
    p: usize,
    h: f64,
    kb: KaiserBessel,
}

impl Window {
    fn new(m: usize, p: usize, beta: f64) -> Self {
        Self {
            m,
            p,
            h: TAU / m as f64,
            kb: KaiserBessel::new(m, p, beta),
        }
    }

    /// The factor of a 3-D product of the weights below that makes it the normalised window
    /// (φ/φ̂(0))³, and the gather's h³ on top of it.
    fn norm3(&self) -> f64 {
        self.kb.norm().powi(3)
    }

    /// First support node per axis (in 0..M) and δ = u − first (u the position in grid units).
    /// The support is the P nodes first..first+P−1 (mod M); every node outside it is at least
    /// P h/2 away.
    #[inline]
    fn locate(&self, x: &[f64; 3]) -> ([usize; 3], [f64; 3]) {
        let mut first = [0usize; 3];
        let mut delta = [0.0; 3];
        let mf = self.m as f64;
        for d in 0..3 {
            let u = (wrap(x[d]) + PI) / self.h;
            let s = (u + 1.0 - 0.5 * self.p as f64).floor();
            delta[d] = u - s;
            first[d] = (s as i64).rem_euclid(self.m as i64) as usize;
            debug_assert!(u < mf + 1.0);
        }
        (first, delta)
    }

    /// 1-D weights I₀(β s)/I₀(β) at the nodes m = 0..P, e = δ − m grid units from the
    /// position (see [`KaiserBessel::weight`]).
    #[inline]
    fn weights(&self, delta: f64, w: &mut [f64]) {
        for (m, wm) in w.iter_mut().enumerate() {
            *wm = self.kb.weight(delta - m as f64);
        }
    }

    /// Weights and their derivatives with respect to the position (1/h · d/de).
    #[inline]
    fn weights_and_derivatives(&self, delta: f64, w: &mut [f64], dw: &mut [f64]) {
        let inv_h = 1.0 / self.h;
        for (m, (wm, dm)) in w.iter_mut().zip(dw.iter_mut()).enumerate() {
            let (v, d) = self.kb.weight_and_derivative(delta - m as f64);
            *wm = v;
            *dm = d * inv_h;
        }
    }

    /// The two contiguous runs (grid start, weight range) of an axis' support starting at
    /// `first`.
    #[inline]
    fn runs(&self, first: usize) -> [(usize, usize, usize); 2] {
        let n1 = self.p.min(self.m - first);
        [(first, 0, n1), (0, n1, self.p)]
    }
}

/// Result of the mesh part at the targets.
pub(crate) struct MeshOut {
    pub(crate) velocity: Vec<[f64; 3]>,
    pub(crate) gradient: Vec<[[f64; 3]; 3]>,
}

/// Wall-clock seconds of the mesh phases of one evaluation: spreading, transforms (forward,
/// multiplier, inverse), gathering.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct MeshTimings {
    pub(crate) spread: f64,
    pub(crate) transforms: f64,
    pub(crate) gather: f64,
}

/// The transform and the grids of the smooth part, kept between evaluations (rebuilt when the
/// grid size changes).
#[derive(Default)]
pub(crate) struct Mesh {
    fft: Option<Fft3d>,
    grids: [Vec<f64>; 3],
    modes: [Vec<Complex64>; 3],
}

impl Mesh {
    /// The smooth part at the targets: velocity, and the gradient when `want_grad`.
    pub(crate) fn evaluate(
        &mut self,
        p: &EwaldParameters,
        sources: &Sources,
        targets: &[[f64; 3]],
        want_grad: bool,
    ) -> (MeshOut, MeshTimings) {
        let (m, pp) = (p.grid, p.support);
        let win = Window::new(m, pp, p.beta);
        let layout = ModeLayout::new(p.kmax);
        if self
            .fft
            .as_ref()
            .is_none_or(|f| f.m() != m || f.layout() != layout)
        {
            self.fft = Some(Fft3d::new(m, layout));
        }
        let m3 = m * m * m;
        for g in &mut self.grids {
            g.clear();
            g.resize(m3, 0.0);
        }
        for md in &mut self.modes {
            md.clear();
            md.resize(layout.len(), Complex64::new(0.0, 0.0));
        }

        // 1. Spread.
        let t0 = Instant::now();
        let locs: Vec<([usize; 3], [f64; 3])> =
            sources.x.par_iter().map(|x| win.locate(x)).collect();
        spread(&win, &locs, sources.alpha, &mut self.grids);

        let t1 = Instant::now();
        // 2.–4. Transform, multiply, transform back.
        let fft = self.fft.as_mut().unwrap();
        for (g, md) in self.grids.iter_mut().zip(self.modes.iter_mut()) {
            fft.forward(g, md);
        }
        let table = win.kb.multiplier_table(p.eta, p.kmax);
        multiply(&layout, &table, &mut self.modes);
        for (g, md) in self.grids.iter_mut().zip(self.modes.iter()) {
            fft.inverse(md, g);
        }

        // 5. Gather.
        let t2 = Instant::now();
        let res = gather(&win, &self.grids, targets, want_grad);
        let timings = MeshTimings {
            spread: (t1 - t0).as_secs_f64(),
            transforms: (t2 - t1).as_secs_f64(),
            gather: t2.elapsed().as_secs_f64(),
        };
        (res, timings)
    }
}

/// Spreads α_q (φ/φ̂(0))³(x_g − x_q) onto the three grids (module docs: determinism).
fn spread(
    win: &Window,
    locs: &[([usize; 3], [f64; 3])],
    alpha: &[[f64; 3]],
    grids: &mut [Vec<f64>; 3],
) {
    let (m, p) = (win.m, win.p);
    // Bucket the particles by the first x plane of their support (stable).
    let mut start = vec![0usize; m + 1];
    for l in locs {
        start[l.0[0] + 1] += 1;
    }
    for i in 0..m {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut order = vec![0usize; locs.len()];
    for (q, l) in locs.iter().enumerate() {
        order[fill[l.0[0]]] = q;
        fill[l.0[0]] += 1;
    }
    // Slab width: any value gives the same bits; ~4 slabs per thread balance the work.
    let slab = m.div_ceil(4 * rayon::current_num_threads()).max(1);
    let plane = m * m;
    let [g0, g1, g2] = grids;
    g0.par_chunks_mut(slab * plane)
        .zip(g1.par_chunks_mut(slab * plane))
        .zip(g2.par_chunks_mut(slab * plane))
        .enumerate()
        .for_each(|(si, ((s0, s1), s2))| {
            let ia = (si * slab) as i64;
            let ib = ia + (s0.len() / plane) as i64;
            let mut wx = vec![0.0; p];
            let mut wy = vec![0.0; p];
            let mut wz = vec![0.0; p];
            let norm3 = win.norm3();
            let (o0, o1, o2) = (s0, s1, s2);
            // Unwrapped first planes v in increasing order: a node of plane i sees the buckets
            // v = i−P+1..=i in this order whatever the slab.
            for v in (ia - p as i64 + 1)..ib {
                let b = v.rem_euclid(m as i64) as usize;
                let lo = v.max(ia);
                let hi = (v + p as i64).min(ib);
                if lo >= hi {
                    continue;
                }
                for &q in &order[start[b]..start[b + 1]] {
                    let (first, delta) = locs[q];
                    win.weights(delta[0], &mut wx);
                    win.weights(delta[1], &mut wy);
                    win.weights(delta[2], &mut wz);
                    let runs = win.runs(first[2]);
                    let a = alpha[q].map(|c| c * norm3);
                    for i in lo..hi {
                        let mi = (i - v) as usize;
                        let wx = wx[mi];
                        let base = (i - ia) as usize * plane;
                        for (bi, &wyb) in wy.iter().enumerate() {
                            let mut y = first[1] + bi;
                            if y >= m {
                                y -= m;
                            }
                            let c = wx * wyb;
                            let (a0, a1, a2) = (a[0] * c, a[1] * c, a[2] * c);
                            let row = base + y * m;
                            for &(z0, w0, w1) in &runs {
                                let n = w1 - w0;
                                let r0 = &mut o0[row + z0..row + z0 + n];
                                let r1 = &mut o1[row + z0..row + z0 + n];
                                let r2 = &mut o2[row + z0..row + z0 + n];
                                let w = &wz[w0..w1];
                                for k in 0..n {
                                    r0[k] += a0 * w[k];
                                    r1[k] += a1 * w[k];
                                    r2[k] += a2 * w[k];
                                }
                            }
                        }
                    }
                }
            }
        });
}

/// Multiplies the spectrum of the spread field by (i k × ·)/k² T(k_x) T(k_y) T(k_z), the
/// per-axis `table` T(k) = e^{−k²η²/2}/(φ̂(k)/φ̂(0))² ([`KaiserBessel::multiplier_table`],
/// k = 0..=K); k = 0 → 0.
fn multiply(layout: &ModeLayout, table: &[f64], modes: &mut [Vec<Complex64>; 3]) {
    let (side, nz) = (layout.side(), layout.nz());
    let t = |k: i64| table[k.unsigned_abs() as usize];
    let [m0, m1, m2] = modes;
    m0.par_chunks_mut(side * nz)
        .zip(m1.par_chunks_mut(side * nz))
        .zip(m2.par_chunks_mut(side * nz))
        .enumerate()
        .for_each(|(iy, ((a, b), cc))| {
            let kyi = layout.wavenumber(iy);
            let ky = kyi as f64;
            for ix in 0..side {
                let kxi = layout.wavenumber(ix);
                let kx = kxi as f64;
                let txy = t(kxi) * t(kyi);
                for kz in 0..nz {
                    let i = ix * nz + kz;
                    let kzf = kz as f64;
                    let k2 = kx * kx + ky * ky + kzf * kzf;
                    if k2 == 0.0 {
                        a[i] = Complex64::new(0.0, 0.0);
                        b[i] = Complex64::new(0.0, 0.0);
                        cc[i] = Complex64::new(0.0, 0.0);
                        continue;
                    }
                    let f = txy * t(kz as i64) / k2;
                    let h = [a[i], b[i], cc[i]];
                    let x = [
                        h[2] * ky - h[1] * kzf,
                        h[0] * kzf - h[2] * kx,
                        h[1] * kx - h[0] * ky,
                    ];
                    // i z = (−Im z, Re z).
                    let u = x.map(|z| Complex64::new(-z.im * f, z.re * f));
                    a[i] = u[0];
                    b[i] = u[1];
                    cc[i] = u[2];
                }
            }
        });
}

/// u(x) = h³ Σ_g F(x_g) (φ/φ̂(0))³(x − x_g) and, when `want_grad`, its exact gradient.
fn gather(win: &Window, grids: &[Vec<f64>; 3], targets: &[[f64; 3]], want_grad: bool) -> MeshOut {
    let (m, p) = (win.m, win.p);
    let h3 = win.h * win.h * win.h * win.norm3();
    let [g0, g1, g2] = grids;
    let res: Vec<([f64; 3], [[f64; 3]; 3])> = targets
        .par_iter()
        .map_init(
            || vec![0.0; 6 * p],
            |buf, x| {
                let (first, delta) = win.locate(x);
                let (wx, rest) = buf.split_at_mut(p);
                let (wy, rest) = rest.split_at_mut(p);
                let (wz, rest) = rest.split_at_mut(p);
                let (dx, rest) = rest.split_at_mut(p);
                let (dy, dz) = rest.split_at_mut(p);
                if want_grad {
                    win.weights_and_derivatives(delta[0], wx, dx);
                    win.weights_and_derivatives(delta[1], wy, dy);
                    win.weights_and_derivatives(delta[2], wz, dz);
                } else {
                    win.weights(delta[0], wx);
                    win.weights(delta[1], wy);
                    win.weights(delta[2], wz);
                }
                let runs = win.runs(first[2]);
                // s[f]: Σ F w w w; g[f][j]: Σ F ∂_j(w w w).
                let mut s = [0.0; 3];
                let mut g = [[0.0; 3]; 3];
                for a in 0..p {
                    let mut xg = first[0] + a;
                    if xg >= m {
                        xg -= m;
                    }
                    let mut y00 = [0.0; 3];
                    let mut y10 = [0.0; 3];
                    let mut y01 = [0.0; 3];
                    for b in 0..p {
                        let mut yg = first[1] + b;
                        if yg >= m {
                            yg -= m;
                        }
                        let row = (xg * m + yg) * m;
                        // The three fields in one pass: six independent accumulation chains.
                        let (mut z0, mut z1) = ([0.0; 3], [0.0; 3]);
                        for &(zs, w0, w1) in &runs {
                            let n = w1 - w0;
                            let (v0, v1, v2) = (
                                &g0[row + zs..row + zs + n],
                                &g1[row + zs..row + zs + n],
                                &g2[row + zs..row + zs + n],
                            );
                            let (w, dw) = (&wz[w0..w1], &dz[w0..w1]);
                            if want_grad {
                                for k in 0..n {
                                    z0[0] += v0[k] * w[k];
                                    z0[1] += v1[k] * w[k];
                                    z0[2] += v2[k] * w[k];
                                    z1[0] += v0[k] * dw[k];
                                    z1[1] += v1[k] * dw[k];
                                    z1[2] += v2[k] * dw[k];
                                }
                            } else {
                                for k in 0..n {
                                    z0[0] += v0[k] * w[k];
                                    z0[1] += v1[k] * w[k];
                                    z0[2] += v2[k] * w[k];
                                }
                            }
                        }
                        for f in 0..3 {
                            y00[f] += wy[b] * z0[f];
                            if want_grad {
                                y10[f] += dy[b] * z0[f];
                                y01[f] += wy[b] * z1[f];
                            }
                        }
                    }
                    for f in 0..3 {
                        s[f] += wx[a] * y00[f];
                        if want_grad {
                            g[f][0] += dx[a] * y00[f];
                            g[f][1] += wx[a] * y10[f];
                            g[f][2] += wx[a] * y01[f];
                        }
                    }
                }
                (s.map(|v| v * h3), g.map(|r| r.map(|v| v * h3)))
            },
        )
        .collect();
    MeshOut {
        velocity: res.iter().map(|r| r.0).collect(),
        gradient: if want_grad {
            res.iter().map(|r| r.1).collect()
        } else {
            Vec::new()
        },
    }
}
