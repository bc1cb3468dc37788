//! The bodies of a gravity run: a struct of arrays (mass, position, velocity in f64, with each
//! body's component and galaxy for the per-component diagnostics and pictures).

use super::GravityError;

/// What a body belongs to inside its galaxy (or system): the per-component diagnostics and the
/// pictures group bodies by it. Stored as a byte (`as u8`; [`Component::from_u8`] reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Component {
    /// A body of a system with no components (Kepler, Plummer, cold collapse, a table's rows).
    Body = 0,
    /// The stellar disk of a galaxy.
    Disk = 1,
    /// The bulge of a galaxy.
    Bulge = 2,
    /// The dark halo of a galaxy.
    Halo = 3,
}

impl Component {
    /// Every component, in the order of their codes.
    pub const ALL: [Component; 4] = [
        Component::Body,
        Component::Disk,
        Component::Bulge,
        Component::Halo,
    ];

    /// The component with code `code`, if any.
    pub fn from_u8(code: u8) -> Option<Component> {
        Component::ALL.into_iter().find(|c| *c as u8 == code)
    }

    /// Its name in CSV columns and legends: "body", "disk", "bulge", "halo".
    pub fn name(self) -> &'static str {
        match self {
            Component::Body => "body",
            Component::Disk => "disk",
            Component::Bulge => "bulge",
            Component::Halo => "halo",
        }
    }
}

/// Bodies as a struct of arrays: body `i` has mass `mass[i]`, position `x[i]`, velocity `v[i]`,
/// component `component[i]` and galaxy `galaxy[i]` (0 for a single system; 0 and 1 for a
/// collision, in the order the case lists them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BodySet {
    pub mass: Vec<f64>,
    pub x: Vec<[f64; 3]>,
    pub v: Vec<[f64; 3]>,
    pub component: Vec<Component>,
    pub galaxy: Vec<u8>,
}

impl BodySet {
    /// No bodies, with room for `n`.
    pub fn with_capacity(n: usize) -> BodySet {
        BodySet {
            mass: Vec::with_capacity(n),
            x: Vec::with_capacity(n),
            v: Vec::with_capacity(n),
            component: Vec::with_capacity(n),
            galaxy: Vec::with_capacity(n),
        }
    }

    /// The number of bodies.
    pub fn len(&self) -> usize {
        self.mass.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mass.is_empty()
    }

    /// Appends one body.
    pub fn push(&mut self, mass: f64, x: [f64; 3], v: [f64; 3], component: Component, galaxy: u8) {
        self.mass.push(mass);
        self.x.push(x);
        self.v.push(v);
        self.component.push(component);
        self.galaxy.push(galaxy);
    }

    /// Appends every body of `other`, their galaxy set to `galaxy`.
    pub fn extend_as_galaxy(&mut self, other: &BodySet, galaxy: u8) {
        self.mass.extend_from_slice(&other.mass);
        self.x.extend_from_slice(&other.x);
        self.v.extend_from_slice(&other.v);
        self.component.extend_from_slice(&other.component);
        self.galaxy.extend(std::iter::repeat_n(galaxy, other.len()));
    }

    /// Σ m.
    pub fn total_mass(&self) -> f64 {
        self.mass.iter().sum()
    }

    /// The centre of mass and its velocity, (Σ m x / Σ m, Σ m v / Σ m); zeros without mass.
    pub fn centre_of_mass(&self) -> ([f64; 3], [f64; 3]) {
        centre_of_mass_of(self, |_| true)
    }

    /// Moves every body by `dx` and changes every velocity by `dv`.
    pub fn shift(&mut self, dx: [f64; 3], dv: [f64; 3]) {
        for (x, v) in self.x.iter_mut().zip(self.v.iter_mut()) {
            for k in 0..3 {
                x[k] += dx[k];
                v[k] += dv[k];
            }
        }
    }

    /// Puts the centre of mass at rest at the origin.
    pub fn to_centre_of_mass_frame(&mut self) {
        let (x, v) = self.centre_of_mass();
        self.shift(x.map(|c| -c), v.map(|c| -c));
    }

    /// Checks the arrays have one entry per body and every mass is finite and ≥ 0 and every
    /// position and velocity finite; the error names the first bad body (from 0).
    pub fn check(&self) -> Result<(), GravityError> {
        let n = self.len();
        if self.x.len() != n
            || self.v.len() != n
            || self.component.len() != n
            || self.galaxy.len() != n
        {
            return Err(GravityError::BadBodies(format!(
                "body arrays of unequal lengths: {n} masses, {} positions, {} velocities, {} \
                 components, {} galaxies",
                self.x.len(),
                self.v.len(),
                self.component.len(),
                self.galaxy.len()
            )));
        }
        for i in 0..n {
            let m = self.mass[i];
            if !m.is_finite() || m < 0.0 {
                return Err(GravityError::BadBodies(format!(
                    "body {i}: mass {m}; a mass must be finite and ≥ 0"
                )));
            }
            if self.x[i].iter().any(|c| !c.is_finite()) {
                return Err(GravityError::BadBodies(format!(
                    "body {i}: position {:?} is not finite",
                    self.x[i]
                )));
            }
            if self.v[i].iter().any(|c| !c.is_finite()) {
                return Err(GravityError::BadBodies(format!(
                    "body {i}: velocity {:?} is not finite",
                    self.v[i]
                )));
            }
        }
        Ok(())
    }
}

/// The centre of mass and its velocity of the bodies `select` keeps (by index); zeros when they
/// have no mass. Summed in body order (deterministic).
pub fn centre_of_mass_of(bodies: &BodySet, select: impl Fn(usize) -> bool) -> ([f64; 3], [f64; 3]) {
    let mut m = 0.0;
    let mut mx = [0.0; 3];
    let mut mv = [0.0; 3];
    for i in (0..bodies.len()).filter(|&i| select(i)) {
        let mi = bodies.mass[i];
        m += mi;
        for k in 0..3 {
            mx[k] += mi * bodies.x[i][k];
            mv[k] += mi * bodies.v[i][k];
        }
    }
    if m == 0.0 {
        return ([0.0; 3], [0.0; 3]);
    }
    (mx.map(|c| c / m), mv.map(|c| c / m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> BodySet {
        let mut b = BodySet::default();
        b.push(1.0, [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], Component::Body, 0);
        b.push(3.0, [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0], Component::Body, 0);
        b
    }

    #[test]
    fn centre_of_mass_frame_zeroes_both_moments() {
        let mut b = two();
        assert_eq!(b.centre_of_mass(), ([-0.5, 0.0, 0.0], [0.0, -0.5, 0.0]));
        b.to_centre_of_mass_frame();
        assert_eq!(b.centre_of_mass(), ([0.0; 3], [0.0; 3]));
    }

    #[test]
    fn check_names_the_bad_body() {
        let mut b = two();
        assert!(b.check().is_ok());
        b.mass[1] = -1.0;
        assert!(b
            .check()
            .unwrap_err()
            .to_string()
            .contains("body 1: mass -1"));
        b.mass[1] = 1.0;
        b.v[0][2] = f64::NAN;
        assert!(b
            .check()
            .unwrap_err()
            .to_string()
            .contains("body 0: velocity"));
    }

    #[test]
    fn component_codes_round_trip() {
        for c in Component::ALL {
            assert_eq!(Component::from_u8(c as u8), Some(c));
        }
        assert_eq!(Component::from_u8(9), None);
    }
}
