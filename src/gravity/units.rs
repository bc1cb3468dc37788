//! A gravity case's units (docs/physics.md §11.1): with G = 1, a length unit L and a mass unit M
//! set the time unit T = (L³ / (G M))^{1/2} and the velocity unit L/T. A case without units is in
//! N-body (Hénon) units, and its times are shown as such.

/// G M☉ in m³ s⁻² (IAU 2015 Resolution B3, the nominal solar mass parameter).
pub const GM_SUN: f64 = 1.327_124_4e20;
/// One parsec in metres (IAU 2015 Resolution B2).
pub const PARSEC: f64 = 3.085_677_581_491_367e16;
/// One astronomical unit in metres (IAU 2012 Resolution B2).
pub const AU: f64 = 1.495_978_707e11;
/// One Julian year in seconds.
pub const YEAR: f64 = 365.25 * 86_400.0;

/// A length unit a case may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthUnit {
    Au,
    Pc,
    Kpc,
    Mpc,
}

impl LengthUnit {
    /// Every unit, as the case file spells it.
    pub const ALL: [(LengthUnit, &'static str); 4] = [
        (LengthUnit::Au, "au"),
        (LengthUnit::Pc, "pc"),
        (LengthUnit::Kpc, "kpc"),
        (LengthUnit::Mpc, "Mpc"),
    ];

    /// The unit in metres.
    pub fn metres(self) -> f64 {
        match self {
            LengthUnit::Au => AU,
            LengthUnit::Pc => PARSEC,
            LengthUnit::Kpc => 1e3 * PARSEC,
            LengthUnit::Mpc => 1e6 * PARSEC,
        }
    }

    /// Its spelling.
    pub fn as_str(self) -> &'static str {
        LengthUnit::ALL.iter().find(|(u, _)| *u == self).unwrap().1
    }
}

/// Physical units of a gravity case: one length unit is `length` of `length_unit`, one mass unit
/// is `mass_msun` solar masses; G = 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Units {
    pub length: f64,
    pub length_unit: LengthUnit,
    pub mass_msun: f64,
}

impl Units {
    /// The galaxy units of docs/physics.md §10: 1 kpc and 2.325e5 M☉ (velocity 1 km/s, time
    /// 0.978 Gyr).
    pub const GALACTIC: Units = Units {
        length: 1.0,
        length_unit: LengthUnit::Kpc,
        mass_msun: 2.325e5,
    };

    /// One length unit in metres.
    pub fn length_metres(&self) -> f64 {
        self.length * self.length_unit.metres()
    }

    /// One time unit in seconds: (L³ / (G M))^{1/2}.
    pub fn time_seconds(&self) -> f64 {
        (self.length_metres().powi(3) / (GM_SUN * self.mass_msun)).sqrt()
    }

    /// One velocity unit in km/s.
    pub fn velocity_km_s(&self) -> f64 {
        self.length_metres() / self.time_seconds() / 1e3
    }

    /// A time in these units written in years, Myr or Gyr (whichever reads best), e.g.
    /// "1.23 Gyr".
    pub fn format_time(&self, t: f64) -> String {
        format_years(t * self.time_seconds() / YEAR)
    }

    /// A length in these units with its unit, e.g. "10 kpc".
    pub fn format_length(&self, l: f64) -> String {
        format!(
            "{} {}",
            trim_number(l * self.length),
            self.length_unit.as_str()
        )
    }

    /// "1 kpc, 2.325e5 M☉ (time unit 0.978 Gyr, velocity unit 1.00 km/s)".
    pub fn describe(&self) -> String {
        format!(
            "{}, {:e} M☉ (time unit {}, velocity unit {:.3} km/s)",
            self.format_length(1.0),
            self.mass_msun,
            self.format_time(1.0),
            self.velocity_km_s()
        )
    }
}

/// A duration in years written with the prefix that reads best: "350 yr", "12.5 Myr", "1.23 Gyr"
/// (the pictures' own formatting, [`postprocess::gravity::format_years`]).
pub fn format_years(years: f64) -> String {
    postprocess::gravity::format_years(years)
}

/// Three significant digits, no trailing zeros: 0.978, 12.5, 350.
fn trim_number(x: f64) -> String {
    postprocess::gravity::three_significant(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn galactic_units_give_the_known_time_and_velocity() {
        // docs/physics.md §10: 1 kpc and 2.325e5 M☉ make 1 km/s and 0.978 Gyr.
        let u = Units::GALACTIC;
        assert!(
            (u.velocity_km_s() - 1.0).abs() < 2e-3,
            "{}",
            u.velocity_km_s()
        );
        let gyr = u.time_seconds() / YEAR / 1e9;
        assert!((gyr - 0.978).abs() < 1e-3, "{gyr}");
        assert_eq!(u.format_time(1.0), "0.978 Gyr");
        assert_eq!(u.format_time(3.0), "2.93 Gyr");
        assert_eq!(u.format_time(0.1), "97.8 Myr");
    }

    #[test]
    fn solar_units_make_a_year_of_two_pi() {
        // 1 au and 1 M☉: an orbit of a = 1 around a unit mass takes 2π time units = 1 year.
        let u = Units {
            length: 1.0,
            length_unit: LengthUnit::Au,
            mass_msun: 1.0,
        };
        let year = 2.0 * std::f64::consts::PI * u.time_seconds() / YEAR;
        assert!((year - 1.0).abs() < 1e-4, "{year}");
        assert_eq!(u.format_length(10.0), "10 au");
    }
}
