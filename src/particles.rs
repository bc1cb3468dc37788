//! Vortex particles stored as a struct of arrays (docs/physics.md §2).
//!
//! Particle p has position x_p, vector strength α_p = ω_p·vol_p, Gaussian core radius σ_p and a
//! stable id. The particle vorticity is ω_h(x) = Σ_p α_p ζ_σp(x − x_p).

/// A set of vortex particles (struct of arrays: one vector per quantity, same length).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParticleSet {
    pub x: Vec<[f64; 3]>,
    pub alpha: Vec<[f64; 3]>,
    pub sigma: Vec<f64>,
    pub id: Vec<u64>,
}

impl ParticleSet {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            x: Vec::with_capacity(n),
            alpha: Vec::with_capacity(n),
            sigma: Vec::with_capacity(n),
            id: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.x.len()
    }

    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// Appends a particle; its id is its index at insertion.
    pub fn push(&mut self, x: [f64; 3], alpha: [f64; 3], sigma: f64) {
        self.id.push(self.x.len() as u64);
        self.x.push(x);
        self.alpha.push(alpha);
        self.sigma.push(sigma);
    }

    /// Σ_p α_p (conserved for a periodic flow; zero for the box's flows).
    pub fn total_strength(&self) -> [f64; 3] {
        let mut s = [0.0; 3];
        for a in &self.alpha {
            for c in 0..3 {
                s[c] += a[c];
            }
        }
        s
    }

    /// Linear impulse I = ½ Σ_p x_p × α_p.
    pub fn impulse(&self) -> [f64; 3] {
        let mut s = [0.0; 3];
        for (x, a) in self.x.iter().zip(&self.alpha) {
            s[0] += 0.5 * (x[1] * a[2] - x[2] * a[1]);
            s[1] += 0.5 * (x[2] * a[0] - x[0] * a[2]);
            s[2] += 0.5 * (x[0] * a[1] - x[1] * a[0]);
        }
        s
    }

    /// Wraps positions into the periodic box [−L/2, L/2)^3.
    pub fn wrap_periodic(&mut self, length: f64) {
        let half = 0.5 * length;
        for x in &mut self.x {
            for c in x.iter_mut() {
                *c = (*c + half).rem_euclid(length) - half;
            }
        }
    }

    /// True when every position, strength and core radius is finite.
    pub fn is_finite(&self) -> bool {
        self.x.iter().flatten().all(|v| v.is_finite())
            && self.alpha.iter().flatten().all(|v| v.is_finite())
            && self.sigma.iter().all(|v| v.is_finite())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impulse_strength_and_wrap() {
        let mut p = ParticleSet::default();
        p.push([1.0, 0.0, 0.0], [0.0, 0.0, 2.0], 0.1);
        p.push([-1.0, 0.0, 0.0], [0.0, 0.0, -2.0], 0.1);
        assert_eq!(p.total_strength(), [0.0, 0.0, 0.0]);
        // ½ (x1 × α1 + x2 × α2) = ½((0,−2,0) + (0,−2,0)) = (0,−2,0)
        assert_eq!(p.impulse(), [0.0, -2.0, 0.0]);
        let l = std::f64::consts::TAU;
        p.x[0] = [3.5, -3.5, 10.0];
        p.wrap_periodic(l);
        for c in p.x[0] {
            assert!((-std::f64::consts::PI..std::f64::consts::PI).contains(&c));
        }
        assert!((p.x[0][0] - (3.5 - l)).abs() < 1e-15);
        assert_eq!(p.id, vec![0, 1]);
    }
}
