//! The vortex method against the spectral reference at the same time (`comparison.csv`).

/// Relative difference (vortex − spectral)/spectral, undefined (`nan`) where the spectral value
/// is round-off: below `1e-14 · k_ref` (k_ref the kinetic energy of the flow), e.g. the empty
/// shells of Taylor–Green.
pub fn relative_difference(spectral: f64, vortex: f64, k_ref: f64) -> f64 {
    if spectral.abs() > 1e-14 * k_ref.abs() {
        (vortex - spectral) / spectral
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_round_off() {
        assert_eq!(relative_difference(2.0, 3.0, 1.0), 0.5);
        assert!(relative_difference(1e-20, 1.0, 1.0).is_nan());
        assert_eq!(relative_difference(-1.0, -1.5, 1.0), 0.5);
    }
}
