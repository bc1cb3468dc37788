//! A small software rasteriser for isosurfaces in the periodic box
//! [−π, π]³: fixed perspective camera (z up, seen obliquely from above),
//! z-buffer, per-pixel shading from interpolated normals (ambient,
//! two-sided Lambert from a key and a fill light, Blinn–Phong highlights),
//! darkened outlines where a surface passes in front of another, a mild
//! fade with depth, the box's edges (lighter where the surface hides them)
//! and 2×2 supersampling.
//!
//! Triangles are scan-converted as they arrive, so the mesh is never held
//! in memory; the buffers are a few full-resolution images.
//!
//! Everything runs on one thread in a fixed order with a strict depth test
//! (the first triangle drawn wins ties), so the pixels are the same on
//! every run.

use crate::isosurface::{cross, dot, for_each_triangle, sub, PeriodicGrid, Triangle};
use std::f32::consts::PI;

/// Samples per pixel along each direction.
const SUPERSAMPLE: usize = 2;

/// Direction from the box centre to the camera: azimuth −58° from +x, 26°
/// above the x–y plane (x towards the viewer's lower right, y to the upper
/// right, z up).
const AZIMUTH_DEG: f32 = -58.0;
const ELEVATION_DEG: f32 = 26.0;
/// Camera distance from the box centre in box half-widths (π): mild
/// perspective.
const DISTANCE: f32 = 6.0;

/// Colour of the viewport behind the box.
pub(crate) const BACKGROUND: [u8; 3] = [242, 243, 246];
/// Colour of visible box edges.
const EDGE: [f32; 3] = [70.0, 70.0, 70.0];
/// Colour of box edges seen through the surface.
const HIDDEN_EDGE: [f32; 3] = [200.0, 200.0, 200.0];

/// Light directions in camera coordinates (right, up, towards the viewer)
/// and their weights: a key light from the upper left, a weak fill light
/// from the lower right.
const KEY_LIGHT: [f32; 3] = [-0.45, 0.65, 0.62];
const FILL_LIGHT: [f32; 3] = [0.6, -0.3, 0.45];
const AMBIENT: f32 = 0.2;
const KEY: f32 = 0.7;
const FILL: f32 = 0.25;
const SPECULAR: f32 = 0.3;
const SHININESS: i32 = 40;
/// Outlines: a surface pixel in front of a neighbour farther by more than
/// this (box units; the box is 2π wide) is darkened by the factor.
const OUTLINE_GAP: f32 = 0.3;
const OUTLINE: f32 = 0.45;
/// How far the back of the box fades towards the background (0: no depth
/// cue).
const FOG: f32 = 0.3;

fn normalize(v: [f32; 3]) -> [f32; 3] {
    let len = dot(v, v).sqrt();
    if len > 0.0 && len.is_finite() {
        [v[0] / len, v[1] / len, v[2] / len]
    } else {
        [0.0; 3]
    }
}

/// The 8 corners of the box [−π, π]³, corner c at (±π, ±π, ±π) with bit 0
/// of c for x, bit 1 for y, bit 2 for z.
fn box_corner(c: usize) -> [f32; 3] {
    let s = |bit: usize| if c & bit != 0 { PI } else { -PI };
    [s(1), s(2), s(4)]
}

/// The 12 box edges as pairs of corners.
const BOX_EDGES: [(usize, usize); 12] = [
    (0, 1),
    (2, 3),
    (4, 5),
    (6, 7),
    (0, 2),
    (1, 3),
    (4, 6),
    (5, 7),
    (0, 4),
    (1, 5),
    (2, 6),
    (3, 7),
];

/// The fixed perspective camera, fitted to a viewport.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    eye: [f32; 3],
    right: [f32; 3],
    up: [f32; 3],
    forward: [f32; 3],
    /// Pixels per unit of (view-plane coordinate / depth).
    scale: f32,
    /// Pixel position of the view axis.
    cx: f32,
    cy: f32,
    /// Nearest and farthest depth of the box corners (for the depth cue).
    near: f32,
    far: f32,
}

impl View {
    /// The camera for a viewport of `width` × `height` pixels, the whole
    /// box inside it with at least `margin` pixels to spare on each side.
    pub(crate) fn fitted(width: f32, height: f32, margin: f32) -> Self {
        let (az, el) = (AZIMUTH_DEG.to_radians(), ELEVATION_DEG.to_radians());
        let towards_eye = [el.cos() * az.cos(), el.cos() * az.sin(), el.sin()];
        let eye = towards_eye.map(|c| c * DISTANCE * PI);
        let forward = towards_eye.map(|c| -c);
        let right = normalize(cross(forward, [0.0, 0.0, 1.0]));
        let up = cross(right, forward);
        let mut view = View {
            eye,
            right,
            up,
            forward,
            scale: 1.0,
            cx: 0.0,
            cy: 0.0,
            near: f32::INFINITY,
            far: 0.0,
        };
        let (mut x0, mut x1, mut y0, mut y1) =
            (f32::INFINITY, -f32::INFINITY, f32::INFINITY, -f32::INFINITY);
        for c in 0..8 {
            let (x, y, depth) = view.camera_coords(box_corner(c));
            let (x, y) = (x / depth, y / depth);
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
            view.near = view.near.min(depth);
            view.far = view.far.max(depth);
        }
        let avail_w = (width - 2.0 * margin).max(1.0);
        let avail_h = (height - 2.0 * margin).max(1.0);
        view.scale = (avail_w / (x1 - x0)).min(avail_h / (y1 - y0));
        view.cx = 0.5 * width - view.scale * 0.5 * (x0 + x1);
        view.cy = 0.5 * height + view.scale * 0.5 * (y0 + y1);
        view
    }

    /// (right, up, depth) of a world point relative to the camera.
    fn camera_coords(&self, p: [f32; 3]) -> (f32, f32, f32) {
        let d = sub(p, self.eye);
        (dot(d, self.right), dot(d, self.up), dot(d, self.forward))
    }

    /// Pixel position (x right, y down) and 1/depth of a world point.
    pub(crate) fn project(&self, p: [f32; 3]) -> [f32; 3] {
        let (x, y, depth) = self.camera_coords(p);
        let inv = 1.0 / depth;
        [
            self.cx + self.scale * x * inv,
            self.cy - self.scale * y * inv,
            inv,
        ]
    }

    /// How far towards the back of the box a point at 1/depth `inv_depth`
    /// is: 0 at the nearest box corner, 1 at the farthest.
    fn depth_fraction(&self, inv_depth: f32) -> f32 {
        ((1.0 / inv_depth - self.near) / (self.far - self.near)).clamp(0.0, 1.0)
    }

    /// A world direction in camera coordinates (right, up, towards the
    /// viewer) turned into world coordinates.
    fn camera_to_world(&self, v: [f32; 3]) -> [f32; 3] {
        let v = normalize(v);
        [0, 1, 2].map(|i| v[0] * self.right[i] + v[1] * self.up[i] - v[2] * self.forward[i])
    }
}

/// A text label for the box (axis names and end values), in pixels of the
/// final (not supersampled) panel, to be drawn centred at `at`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BoxLabel {
    pub text: &'static str,
    pub at: (i32, i32),
}

/// A rendered panel.
pub(crate) struct Picture {
    /// Width and height in pixels.
    pub size: (usize, usize),
    /// RGB, row by row.
    pub rgb: Vec<u8>,
    /// How many triangles were drawn.
    pub triangles: u64,
    /// Axis labels to print next to the box.
    pub labels: Vec<BoxLabel>,
}

/// The depth and normal buffers of a panel being drawn, at supersampled
/// resolution.
struct Scene {
    w: usize,
    h: usize,
    view: View,
    /// 1/depth of the nearest surface so far; 0 where there is none.
    inv_depth: Vec<f32>,
    /// Interpolated (not normalised) surface normal there.
    normal: Vec<[f32; 3]>,
}

impl Scene {
    fn new(w: usize, h: usize, view: View) -> Self {
        Self {
            w,
            h,
            view,
            inv_depth: vec![0.0; w * h],
            normal: vec![[0.0; 3]; w * h],
        }
    }

    /// Scan-convert one triangle: pixels whose centre lies inside (edges
    /// included) and nearer than what is there take its depth and
    /// interpolated normal.
    fn triangle(&mut self, tri: &Triangle) {
        let [a, b, c] = tri.vertices.map(|v| self.view.project(v));
        let area = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
        // Degenerate (edge-on) or not finite: nothing to draw.
        if !area.is_finite() || area.abs() <= 1e-9 {
            return;
        }
        let x_lo = (a[0].min(b[0]).min(c[0]) - 0.5).ceil().max(0.0);
        let x_hi = (a[0].max(b[0]).max(c[0]) - 0.5)
            .floor()
            .min(self.w as f32 - 1.0);
        let y_lo = (a[1].min(b[1]).min(c[1]) - 0.5).ceil().max(0.0);
        let y_hi = (a[1].max(b[1]).max(c[1]) - 0.5)
            .floor()
            .min(self.h as f32 - 1.0);
        if !(x_lo <= x_hi && y_lo <= y_hi) {
            return;
        }
        let mut normals = tri.normals;
        if normals.iter().all(|n| *n == [0.0; 3]) {
            let face = normalize(cross(
                sub(tri.vertices[1], tri.vertices[0]),
                sub(tri.vertices[2], tri.vertices[0]),
            ));
            normals = [face; 3];
        }
        let inv_area = 1.0 / area;
        let edge = |p: [f32; 3], q: [f32; 3], x: f32, y: f32| {
            (q[0] - p[0]) * (y - p[1]) - (q[1] - p[1]) * (x - p[0])
        };
        for py in y_lo as usize..=y_hi as usize {
            let y = py as f32 + 0.5;
            for px in x_lo as usize..=x_hi as usize {
                let x = px as f32 + 0.5;
                let wa = edge(b, c, x, y) * inv_area;
                let wb = edge(c, a, x, y) * inv_area;
                let wc = edge(a, b, x, y) * inv_area;
                if wa < 0.0 || wb < 0.0 || wc < 0.0 {
                    continue;
                }
                let z = wa * a[2] + wb * b[2] + wc * c[2];
                let idx = py * self.w + px;
                if z > self.inv_depth[idx] {
                    self.inv_depth[idx] = z;
                    self.normal[idx] = [0, 1, 2]
                        .map(|i| wa * normals[0][i] + wb * normals[1][i] + wc * normals[2][i]);
                }
            }
        }
    }

    /// Shade the surface in `base` colour over the background: ambient,
    /// two-sided Lambert from the key and fill lights, Blinn–Phong
    /// highlights, faded towards the background with depth. RGB values in
    /// 0..=255 as f32.
    fn shade(&self, base: [u8; 3]) -> Vec<[f32; 3]> {
        let view = &self.view;
        let to_viewer = view.forward.map(|c| -c);
        let key = view.camera_to_world(KEY_LIGHT);
        let fill = view.camera_to_world(FILL_LIGHT);
        let half = normalize([0, 1, 2].map(|i| key[i] + to_viewer[i]));
        let background = BACKGROUND.map(f32::from);
        let base = base.map(f32::from);
        let outline = self.outline();
        self.inv_depth
            .iter()
            .zip(&self.normal)
            .zip(&outline)
            .map(|((&z, &n), &edge)| {
                if z <= 0.0 {
                    return background;
                }
                let mut n = normalize(n);
                if dot(n, to_viewer) < 0.0 {
                    n = n.map(|c| -c);
                }
                let diffuse = AMBIENT + KEY * dot(n, key).max(0.0) + FILL * dot(n, fill).max(0.0);
                let specular = SPECULAR * dot(n, half).max(0.0).powi(SHININESS);
                let fog = FOG * view.depth_fraction(z);
                let darken = if edge { OUTLINE } else { 1.0 };
                [0, 1, 2].map(|i| {
                    let lit = darken * (base[i] * diffuse + 255.0 * specular).min(255.0);
                    lit + fog * (background[i] - lit)
                })
            })
            .collect()
    }

    /// Which surface pixels lie on an outline: a 4-neighbour is background
    /// or farther away by more than [`OUTLINE_GAP`] (in box units), so
    /// that overlapping structures stay apart.
    fn outline(&self) -> Vec<bool> {
        let (w, h) = (self.w, self.h);
        let depth = |idx: usize| {
            let z = self.inv_depth[idx];
            if z > 0.0 {
                1.0 / z
            } else {
                f32::INFINITY
            }
        };
        let mut edge = vec![false; w * h];
        for y in 0..h {
            for x in 0..w {
                let idx = y * w + x;
                if self.inv_depth[idx] <= 0.0 {
                    continue;
                }
                let d = depth(idx) + OUTLINE_GAP;
                let far = |q: usize| depth(q) > d;
                edge[idx] = (x > 0 && far(idx - 1))
                    || (x + 1 < w && far(idx + 1))
                    || (y > 0 && far(idx - w))
                    || (y + 1 < h && far(idx + w));
            }
        }
        edge
    }

    /// Draw the 12 box edges over `rgb`: dark where nothing of the surface
    /// is in front, light grey where the surface hides them.
    fn box_edges(&self, rgb: &mut [[f32; 3]]) {
        // 0: no edge, 1: hidden edge, 2: visible edge (visible wins).
        let mut mark = vec![0u8; self.w * self.h];
        let radius = SUPERSAMPLE as f32 * 0.55;
        for &(c0, c1) in &BOX_EDGES {
            let p = self.view.project(box_corner(c0));
            let q = self.view.project(box_corner(c1));
            let len = ((q[0] - p[0]).powi(2) + (q[1] - p[1]).powi(2)).sqrt();
            let steps = (len * 2.0).ceil().max(1.0) as usize;
            for s in 0..=steps {
                let t = s as f32 / steps as f32;
                let x = p[0] + t * (q[0] - p[0]);
                let y = p[1] + t * (q[1] - p[1]);
                let z = p[2] + t * (q[2] - p[2]);
                let r = radius.ceil() as i64;
                for dy in -r..=r {
                    for dx in -r..=r {
                        let (px, py) = ((x + dx as f32).floor(), (y + dy as f32).floor());
                        if px < 0.0 || py < 0.0 || px >= self.w as f32 || py >= self.h as f32 {
                            continue;
                        }
                        let (cx, cy) = (px + 0.5 - x, py + 0.5 - y);
                        if cx * cx + cy * cy > radius * radius {
                            continue;
                        }
                        let idx = py as usize * self.w + px as usize;
                        let hidden = self.inv_depth[idx] > z * (1.0 + 1e-4);
                        mark[idx] = mark[idx].max(if hidden { 1 } else { 2 });
                    }
                }
            }
        }
        for (px, m) in rgb.iter_mut().zip(&mark) {
            match m {
                1 => *px = [0, 1, 2].map(|i| 0.5 * px[i] + 0.5 * HIDDEN_EDGE[i]),
                2 => *px = EDGE,
                _ => {}
            }
        }
    }
}

/// Render the surface `grid` = `level` in colour `base` into a panel of
/// `size` pixels, with the box edges, and the positions of the axis labels.
pub(crate) fn render_isosurface(
    size: (u32, u32),
    grid: &PeriodicGrid<'_>,
    level: f32,
    base: [u8; 3],
) -> Picture {
    let (w, h) = (size.0 as usize, size.1 as usize);
    let (sw, sh) = (w * SUPERSAMPLE, h * SUPERSAMPLE);
    let ss = SUPERSAMPLE as f32;
    let margin = 0.09 * w.min(h) as f32;
    let view = View::fitted(sw as f32, sh as f32, margin * ss);
    let mut scene = Scene::new(sw, sh, view);
    let mut triangles = 0u64;
    for_each_triangle(grid, level, |tri| {
        triangles += 1;
        scene.triangle(tri);
    });
    let mut fine = scene.shade(base);
    scene.box_edges(&mut fine);

    // Box filter down to the panel's resolution.
    let mut rgb = vec![0u8; w * h * 3];
    let norm = 1.0 / (ss * ss);
    for y in 0..h {
        for x in 0..w {
            let mut sum = [0.0f32; 3];
            for sy in 0..SUPERSAMPLE {
                let row = (y * SUPERSAMPLE + sy) * sw;
                for sx in 0..SUPERSAMPLE {
                    let p = fine[row + x * SUPERSAMPLE + sx];
                    for i in 0..3 {
                        sum[i] += p[i];
                    }
                }
            }
            for i in 0..3 {
                rgb[(y * w + x) * 3 + i] = (sum[i] * norm).round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    let labels = box_labels(&view, ss);
    Picture {
        size: (w, h),
        rgb,
        triangles,
        labels,
    }
}

/// Axis names and the end values −π, π on three box edges: the nearer of
/// the two bottom edges along x and along y, and the vertical edge furthest
/// left on screen. `ss`: supersampling of `view`'s pixels.
fn box_labels(view: &View, ss: f32) -> Vec<BoxLabel> {
    let to_panel = |p: [f32; 3]| (p[0] / ss, p[1] / ss);
    let centre = to_panel(view.project([0.0; 3]));
    // The edges along `axis` (bit of the corner number) with `fixed` bits
    // chosen among `choices`; the best by `score` of its projected middle.
    let pick = |axis: usize, choices: &[usize], score: &dyn Fn([f32; 3]) -> f32| {
        let mut best: Option<(usize, f32)> = None;
        for &c in choices {
            let mid = [0, 1, 2].map(|i| 0.5 * (box_corner(c)[i] + box_corner(c | axis)[i]));
            let s = score(view.project(mid));
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((c, s));
            }
        }
        best.map_or(0, |(c, _)| c)
    };
    let nearer = |p: [f32; 3]| p[2];
    let lefter = |p: [f32; 3]| -p[0];
    // Bottom edges along x start at corners 0 (y = −π) or 2 (y = π); along
    // y at 0 or 1; vertical edges at 0, 1, 2, 3.
    let x_edge = pick(1, &[0, 2], &nearer);
    let y_edge = pick(2, &[0, 1], &nearer);
    let z_edge = pick(4, &[0, 1, 2, 3], &lefter);
    let mut labels = Vec::new();
    for (axis, start, name) in [(1, x_edge, "x"), (2, y_edge, "y"), (4, z_edge, "z")] {
        let a = to_panel(view.project(box_corner(start)));
        let b = to_panel(view.project(box_corner(start | axis)));
        let mid = ((a.0 + b.0) * 0.5, (a.1 + b.1) * 0.5);
        // Offsets go across the edge, on the side away from the box centre,
        // so that the labels of two edges meeting at a corner separate.
        let (ex, ey) = (b.0 - a.0, b.1 - a.1);
        let len = (ex * ex + ey * ey).sqrt().max(1.0);
        let (mut nx, mut ny) = (-ey / len, ex / len);
        if nx * (mid.0 - centre.0) + ny * (mid.1 - centre.1) < 0.0 {
            nx = -nx;
            ny = -ny;
        }
        let at = |p: (f32, f32), dist: f32| {
            (
                (p.0 + dist * nx).round() as i32,
                (p.1 + dist * ny).round() as i32,
            )
        };
        labels.push(BoxLabel {
            text: name,
            at: at(mid, 28.0),
        });
        // The bottom of the z edge is at z = −π; when the x or the y edge
        // starts there too, its "−π" already says so.
        if axis != 4 || (start != x_edge && start != y_edge) {
            labels.push(BoxLabel {
                text: "−π",
                at: at(a, 18.0),
            });
        }
        labels.push(BoxLabel {
            text: "π",
            at: at(b, 18.0),
        });
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_box_in_view() {
        let (w, h) = (400.0, 300.0);
        let view = View::fitted(w, h, 20.0);
        for c in 0..8 {
            let p = view.project(box_corner(c));
            assert!(p[0] >= 19.0 && p[0] <= w - 19.0, "{p:?}");
            assert!(p[1] >= 19.0 && p[1] <= h - 19.0, "{p:?}");
            assert!(p[2] > 0.0);
        }
        // z up: the top of the box is higher on screen than the bottom.
        let top = view.project([0.0, 0.0, PI]);
        let bottom = view.project([0.0, 0.0, -PI]);
        assert!(top[1] < bottom[1]);
    }

    #[test]
    fn empty_surface_is_background_and_edges() {
        let values = vec![0.0f32; 8 * 8 * 8];
        let grid = PeriodicGrid::new(8, &values).unwrap();
        let pic = render_isosurface((120, 100), &grid, 1.0, [200, 50, 50]);
        assert_eq!(pic.triangles, 0);
        assert_eq!(pic.rgb.len(), 120 * 100 * 3);
        let background = pic.rgb.chunks_exact(3).filter(|p| *p == BACKGROUND).count();
        assert!(background > 120 * 100 / 2);
        assert!(pic.rgb.chunks_exact(3).any(|p| p[0] < 150));
        assert_eq!(pic.labels.len(), 8);
    }
}
