//! The named initial conditions of gravity runs (docs/physics.md §11.3), each seeded and the
//! same for any thread count (one ChaCha stream drawn in body order).

use super::bodies::{BodySet, Component};
use super::sampling::{gaussian_vector, isotropic_vector, stream, uniform, uniform_in_ball};
use super::GravityError;

/// Two bodies on a Kepler orbit (ε = 0), their centre of mass at rest at the origin, started at
/// pericentre in the x–y plane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeplerOrbit {
    pub masses: [f64; 2],
    pub semi_major_axis: f64,
    pub eccentricity: f64,
}

impl KeplerOrbit {
    /// P = 2π (a³ / (m1 + m2))^{1/2} (G = 1).
    pub fn period(&self) -> f64 {
        let m = self.masses[0] + self.masses[1];
        2.0 * std::f64::consts::PI * (self.semi_major_axis.powi(3) / m).sqrt()
    }

    /// E = −m1 m2 / 2a.
    pub fn energy(&self) -> f64 {
        -self.masses[0] * self.masses[1] / (2.0 * self.semi_major_axis)
    }
}

/// The two bodies of `orbit`: body 0 (mass m1) on +x and body 1 (m2) on −x at the pericentre
/// separation a(1 − e), moving along ±y with the relative speed ((m1 + m2)(1 + e)/(a(1 − e)))^{1/2}
/// (vis-viva), so the orbit turns anticlockwise in the x–y plane about the centre of mass at rest
/// at the origin. Refuses masses that are not finite and > 0, a that is not finite and > 0, and
/// e outside [0, 1).
pub fn kepler(orbit: &KeplerOrbit) -> Result<BodySet, GravityError> {
    let [m1, m2] = orbit.masses;
    let (a, e) = (orbit.semi_major_axis, orbit.eccentricity);
    if !(m1.is_finite() && m2.is_finite() && m1 > 0.0 && m2 > 0.0) {
        return Err(GravityError::BadBodies(format!(
            "kepler: masses {m1} and {m2}; both must be finite and > 0"
        )));
    }
    if !(a.is_finite() && a > 0.0) {
        return Err(GravityError::BadBodies(format!(
            "kepler: semi-major axis {a}; it must be finite and > 0"
        )));
    }
    if !(0.0..1.0).contains(&e) {
        return Err(GravityError::BadBodies(format!(
            "kepler: eccentricity {e}; a bound orbit needs 0 ≤ e < 1"
        )));
    }
    let m = m1 + m2;
    let separation = a * (1.0 - e);
    let speed = (m * (1.0 + e) / separation).sqrt();
    let mut b = BodySet::with_capacity(2);
    let (f1, f2) = (m2 / m, m1 / m);
    b.push(
        m1,
        [f1 * separation, 0.0, 0.0],
        [0.0, f1 * speed, 0.0],
        Component::Body,
        0,
    );
    b.push(
        m2,
        [-f2 * separation, 0.0, 0.0],
        [0.0, -f2 * speed, 0.0],
        Component::Body,
        0,
    );
    Ok(b)
}

/// The Plummer scale radius in Hénon units, a = 3π/16.
pub const PLUMMER_SCALE: f64 = 3.0 * std::f64::consts::PI / 16.0;

/// The mass fraction the Plummer sampler draws radii from: M(r)/M ∈ (0, 0.999], which cuts the
/// extreme tail beyond r ≈ 38.7 a (≈ 22.8 in Hénon units), as Aarseth's NBODY codes do. The
/// model's mass is still M = 1 (the bodies share it equally), so its Lagrangian radii shrink a
/// little: r10 by 0.04 %, r50 by 0.09 %, r90 by 0.5 % (2.184 → 2.173), inside the sampling noise
/// (at N = 2048 one standard deviation is 2.8 %, 2.0 %, 3.6 %).
pub const PLUMMER_MASS_CUT: f64 = 0.999;

/// A Plummer sphere of `n` equal masses in Hénon units (G = M = 1, E = −1/4, scale a = 3π/16),
/// sampled as Aarseth, Hénon & Wielen (1974), in its centre-of-mass frame.
///
/// Per body, in order (one ChaCha8 stream, [`super::sampling`]): the radius
/// r = a (X^{−2/3} − 1)^{−1/2} with X uniform in (0, [`PLUMMER_MASS_CUT`]] (the inverted M(r)), its
/// isotropic direction, the speed q v_esc with v_esc = (2/a)^{1/2} (1 + r²/a²)^{−1/4} and q drawn
/// by rejection from g(q) = q²(1 − q²)^{7/2} (q uniform in [0, 1), accepted when 0.1 Y < g(q)
/// with Y uniform in [0, 1); max g ≈ 0.0920), and its isotropic direction. The sampled energy
/// differs from −1/4 by the sampling noise (O(N^{−1/2})); nothing is rescaled. Refuses n < 2.
pub fn plummer(n: usize, seed: u64) -> Result<BodySet, GravityError> {
    check_count("plummer", n)?;
    let a = PLUMMER_SCALE;
    let mut rng = stream(seed);
    let mut b = BodySet::with_capacity(n);
    let m = 1.0 / n as f64;
    for _ in 0..n {
        // 1 − u ∈ (0, 1]: X > 0 so the radius is finite.
        let x_mass = PLUMMER_MASS_CUT * (1.0 - uniform(&mut rng));
        let s = 1.0 / (x_mass.powf(-2.0 / 3.0) - 1.0).sqrt();
        let position = isotropic_vector(&mut rng, a * s);
        let q = loop {
            let q = uniform(&mut rng);
            let y = 0.1 * uniform(&mut rng);
            if y < q * q * (1.0 - q * q).powf(3.5) {
                break q;
            }
        };
        let v_escape = (2.0 / a).sqrt() * (1.0 + s * s).powf(-0.25);
        let velocity = isotropic_vector(&mut rng, q * v_escape);
        b.push(m, position, velocity, Component::Body, 0);
    }
    b.to_centre_of_mass_frame();
    Ok(b)
}

/// A uniform sphere of `n` equal masses (M = 1, radius 1) with isotropic velocities scaled to the
/// virial ratio 2K/|W| = `virial_ratio` (0 ≤ it < 1), in its centre-of-mass frame.
///
/// Per body, in order: its position uniform in the unit ball, then a Gaussian velocity (six
/// draws, [`super::sampling::gaussian_vector`]). After the move to the centre-of-mass frame the
/// velocities are scaled so that 2K = `virial_ratio` |W| with the *analytic* W = −3/5 M²/R of the
/// uniform sphere (not the sampled one: the sampled W differs by O(N^{−1/2}) noise and, with
/// softening ε, by O(ε²); computing it would cost an all-pairs sum here). Refuses n < 2 and a
/// virial ratio outside [0, 1).
pub fn cold_collapse(n: usize, virial_ratio: f64, seed: u64) -> Result<BodySet, GravityError> {
    check_count("cold-collapse", n)?;
    if !(0.0..1.0).contains(&virial_ratio) {
        return Err(GravityError::BadBodies(format!(
            "cold-collapse: virial ratio {virial_ratio}; it must lie in [0, 1) (a collapsing sphere)"
        )));
    }
    let mut rng = stream(seed);
    let mut b = BodySet::with_capacity(n);
    let m = 1.0 / n as f64;
    for _ in 0..n {
        let position = uniform_in_ball(&mut rng, 1.0);
        let velocity = gaussian_vector(&mut rng, 1.0);
        b.push(m, position, velocity, Component::Body, 0);
    }
    b.to_centre_of_mass_frame();
    let kinetic: f64 = (0..n)
        .map(|i| 0.5 * b.mass[i] * b.v[i].iter().map(|c| c * c).sum::<f64>())
        .sum();
    let target = 0.5 * virial_ratio * UNIFORM_SPHERE_POTENTIAL.abs();
    let scale = if kinetic > 0.0 {
        (target / kinetic).sqrt()
    } else {
        0.0
    };
    for v in &mut b.v {
        *v = v.map(|c| c * scale);
    }
    Ok(b)
}

/// The potential energy of a uniform sphere of mass 1 and radius 1, W = −3/5 (G = 1).
pub const UNIFORM_SPHERE_POTENTIAL: f64 = -0.6;

/// Refuses fewer than two bodies for the model `name`.
fn check_count(name: &str, n: usize) -> Result<(), GravityError> {
    if n < 2 {
        return Err(GravityError::BadBodies(format!(
            "{name}: {n} bodies; the model needs at least 2"
        )));
    }
    Ok(())
}

/// One disk galaxy (docs/physics.md §11.3): an exponential disk with a sech² vertical profile,
/// a Hernquist bulge and a Hernquist dark halo, with velocities from the Jeans equations in the
/// epicyclic approximation at Toomre Q (Hernquist 1993). Units: G = 1, typically kpc and
/// 2.325e5 M☉ (velocities in km/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GalaxyModel {
    pub disk_mass: f64,
    /// R_d.
    pub disk_scale_length: f64,
    /// z_0 of ρ ∝ sech²(z/z_0).
    pub disk_scale_height: f64,
    pub bulge_mass: f64,
    /// Hernquist a of the bulge.
    pub bulge_scale: f64,
    /// Radius beyond which the bulge is cut (its profile rescaled so the bodies hold
    /// `bulge_mass`).
    pub bulge_truncation: f64,
    /// The halo's mass inside `halo_truncation` (the mass of its bodies).
    pub halo_mass: f64,
    /// Hernquist a of the halo.
    pub halo_scale: f64,
    /// Radius beyond which the halo is cut.
    pub halo_truncation: f64,
    /// Toomre Q of the disk at the reference radius (2.43 R_d in Hernquist 1993).
    pub toomre_q: f64,
    /// The Plummer softening ε of the run: the disk's rotation is set up in the softened field.
    pub softening: f64,
    /// Bodies per component: disk, bulge, halo.
    pub bodies: [usize; 3],
}

impl GalaxyModel {
    /// A Milky-Way-like galaxy in kpc and 2.325e5 M☉ with `n` bodies in all (split disk 1/4,
    /// bulge 1/8, halo 5/8; parameters in docs/physics.md §11.3).
    pub fn milky_way(n: usize) -> GalaxyModel {
        super::galaxy::milky_way(n)
    }

    /// An Andromeda-like galaxy in the same units with `n` bodies in all.
    pub fn andromeda(n: usize) -> GalaxyModel {
        super::galaxy::andromeda(n)
    }

    /// The circular period 2πR/v_c at radius `r` in the disk plane.
    pub fn rotation_period(&self, r: f64) -> f64 {
        std::f64::consts::TAU * r / self.circular_speed(r)
    }
}

/// The bodies of `model` (disk, then bulge, then halo), galaxy 0, centre-of-mass frame.
pub fn galaxy(model: &GalaxyModel, seed: u64) -> Result<BodySet, GravityError> {
    super::galaxy::galaxy(model, seed)
}

/// Two galaxies approaching on a parabolic orbit (docs/physics.md §11.3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Collision {
    pub galaxies: [GalaxyModel; 2],
    /// Pericentre distance of the point-mass parabolic orbit.
    pub pericentre: f64,
    /// Initial separation of the two centres.
    pub separation: f64,
    /// Inclination of each disk to the orbital plane (degrees): its spin axis tilted from the
    /// orbit's angular momentum (+z) about the x axis (the pericentre direction of x_1 − x_0).
    pub inclination_deg: [f64; 2],
    /// Then the tilted disk turned about +z by this angle (degrees): the azimuth of its line of
    /// nodes from the pericentre direction.
    pub argument_deg: [f64; 2],
}

impl Collision {
    /// The Milky Way (galaxy 0) and Andromeda (galaxy 1) with `n_total` bodies split in
    /// proportion to their masses, on the parabolic orbit of docs/physics.md §11.3.
    pub fn milky_way_andromeda(n_total: usize) -> Collision {
        super::galaxy::milky_way_andromeda(n_total)
    }
}

/// The bodies of both galaxies (galaxy 0 first), placed on the orbit, centre-of-mass frame.
pub fn galaxy_collision(collision: &Collision, seed: u64) -> Result<BodySet, GravityError> {
    super::galaxy::galaxy_collision(collision, seed)
}
