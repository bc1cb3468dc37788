//! The named initial conditions of gravity runs (docs/physics.md §11.3), each seeded and the
//! same for any thread count (one ChaCha stream drawn in body order).

use super::bodies::BodySet;
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

/// The two bodies of `orbit`.
pub fn kepler(orbit: &KeplerOrbit) -> Result<BodySet, GravityError> {
    let _ = orbit;
    todo!("helper `nbody`")
}

/// A Plummer sphere of `n` equal masses in Hénon units (G = M = 1, E = −1/4, scale a = 3π/16),
/// sampled as Aarseth, Hénon & Wielen (1974), in its centre-of-mass frame.
pub fn plummer(n: usize, seed: u64) -> Result<BodySet, GravityError> {
    let _ = (n, seed);
    todo!("helper `nbody`")
}

/// A uniform sphere of `n` equal masses (M = 1, radius 1) with isotropic velocities scaled to the
/// virial ratio 2K/|W| = `virial_ratio` (0 ≤ it < 1), in its centre-of-mass frame.
pub fn cold_collapse(n: usize, virial_ratio: f64, seed: u64) -> Result<BodySet, GravityError> {
    let _ = (n, virial_ratio, seed);
    todo!("helper `nbody`")
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
