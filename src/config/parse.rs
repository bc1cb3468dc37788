//! From TOML text to a validated [`Case`], with messages that point at file, line and key.
//!
//! The text is parsed into toml's spanned document tree ([`DeTable`]); every value is then
//! taken out by hand, so that each error can name the dotted key, its line and what is allowed.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{
    Cadence, Case, CaseError, CheckpointControl, CoaxialRing, Dealias, DeviceRequest,
    EvaluatorKind, FieldPrecision, Flow, InitialCondition, OutputControl, RbfSolver,
    SpectralConfig, TimeControl, TimeStep, VortexConfig,
};
use crate::console::Short;
use crate::kernel::StretchingScheme;
use crate::vortex::reinit::{LatticeConditioning, LatticeFilter};

mod gravity;

type Value<'i> = Spanned<DeValue<'i>>;

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "flow",
    "initial",
    "time",
    "output",
    "checkpoint",
    "spectral",
    "vortex",
    "device",
];
const KINDS: &str = r#"must be one of "taylor-green", "isotropic", "shear-wave", "vortex-ring", "coaxial-rings", "vortex-tube" (flows), "kepler", "plummer", "cold-collapse", "galaxy", "galaxy-collision", "bodies" (gravity)"#;
/// The `kind`s defined by particles (no spectral reference).
const PARTICLE_KINDS: [&str; 3] = ["vortex-ring", "coaxial-rings", "vortex-tube"];
const N_MIN: i64 = 8;
const N_MAX: i64 = 2048;
/// Largest particle lattice (particles per dimension) in `[vortex]`.
const VORTEX_N_MAX: i64 = 512;
const OVERLAP_MAX: f64 = 3.0;
const RBF_TOLERANCE_MAX: f64 = 1e-2;
const ACCURACY_RANGE: (f64, f64) = (1e-12, 1e-2);
const CFL_MAX: f64 = 2.5;
/// Relative tolerance of the polarisation ⟂ wavevector check.
const PERP_TOL: f64 = 1e-12;

/// The text being parsed and the name it goes by in messages.
struct Doc<'t> {
    origin: &'t str,
    text: &'t str,
}

impl Doc<'_> {
    /// 1-based line and column (in characters) of a byte offset.
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let bytes = self.text.as_bytes();
        let offset = offset.min(bytes.len());
        let before = &bytes[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        (line, column)
    }

    fn line(&self, span: &Range<usize>) -> usize {
        self.line_col(span.start).0
    }

    /// The source text of a value, as written (shortened to one line of moderate length).
    fn src(&self, span: &Range<usize>) -> String {
        let raw = self.text.get(span.clone()).unwrap_or("?");
        let one_line = if raw.contains('\n') {
            raw.split_whitespace().collect::<Vec<_>>().join(" ")
        } else {
            raw.to_string()
        };
        const MAX: usize = 60;
        if one_line.chars().count() > MAX {
            let short: String = one_line.chars().take(MAX).collect();
            format!("{short}…")
        } else {
            one_line
        }
    }

    fn error(&self, line: Option<usize>, key: &str, message: String) -> CaseError {
        CaseError::Invalid {
            origin: self.origin.to_string(),
            line,
            key: key.to_string(),
            message,
        }
    }
}

/// A value taken out of the document, with what messages need to point at it.
struct Item<T> {
    value: T,
    path: String,
    line: usize,
    src: String,
}

impl<T> Item<T> {
    /// `key `path` = src: allowed`.
    fn fail(&self, doc: &Doc, allowed: &str) -> CaseError {
        doc.error(
            Some(self.line),
            &self.path,
            format!("key `{}` = {}: {}", self.path, self.src, allowed),
        )
    }

    fn require(&self, doc: &Doc, ok: bool, allowed: &str) -> Result<(), CaseError> {
        if ok {
            Ok(())
        } else {
            Err(self.fail(doc, allowed))
        }
    }
}

/// A section (`[flow]`, ...), or the top level of the document (empty `name`).
struct Section<'a, 'i> {
    name: &'a str,
    table: Option<&'a DeTable<'i>>,
    /// Line where the section is defined, if it is.
    line: Option<usize>,
}

impl<'a, 'i> Section<'a, 'i> {
    fn path(&self, key: &str) -> String {
        if self.name.is_empty() {
            key.to_string()
        } else {
            format!("{}.{}", self.name, key)
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value<'i>> {
        self.table?.get(key)
    }

    /// Reject keys outside `allowed`, reporting the first one in the file.
    fn check_keys(&self, doc: &Doc, allowed: &[&str], context: &str) -> Result<(), CaseError> {
        let Some(table) = self.table else {
            return Ok(());
        };
        let first_unknown = table
            .iter()
            .filter(|(k, _)| !allowed.contains(&k.get_ref().as_ref()))
            .min_by_key(|(k, _)| k.span().start);
        let Some((key, _)) = first_unknown else {
            return Ok(());
        };
        let path = self.path(key.get_ref());
        let place = if self.name.is_empty() {
            "at the top level".to_string()
        } else {
            format!("in [{}]", self.name)
        };
        Err(doc.error(
            Some(doc.line(&key.span())),
            &path,
            format!(
                "unknown key `{path}`; allowed keys {place}{context}: {}",
                allowed.join(", ")
            ),
        ))
    }

    fn missing(&self, doc: &Doc, key: &str, what: &str) -> CaseError {
        let path = self.path(key);
        doc.error(self.line, &path, format!("missing key `{path}` ({what})"))
    }

    fn item<T>(&self, doc: &Doc, key: &str, v: &Value, value: T) -> Item<T> {
        Item {
            value,
            path: self.path(key),
            line: doc.line(&v.span()),
            src: doc.src(&v.span()),
        }
    }

    fn type_error(
        &self,
        doc: &Doc,
        key: &str,
        v: &Value,
        expected: &str,
        allowed: &str,
    ) -> CaseError {
        self.item(doc, key, v, ()).fail(
            doc,
            &format!(
                "expected {expected}, found {} {}; {allowed}",
                article(v.get_ref().type_str()),
                v.get_ref().type_str()
            ),
        )
    }

    /// A number (TOML integer or float).
    fn number(&self, doc: &Doc, key: &str, allowed: &str) -> Result<Option<Item<f64>>, CaseError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match as_f64(v.get_ref()) {
            Some(x) => Ok(Some(self.item(doc, key, v, x))),
            None => Err(self.type_error(doc, key, v, "a number", allowed)),
        }
    }

    fn integer(&self, doc: &Doc, key: &str, allowed: &str) -> Result<Option<Item<i64>>, CaseError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(x) => Ok(Some(self.item(doc, key, v, x))),
                Err(_) => Err(self
                    .item(doc, key, v, ())
                    .fail(doc, &format!("integer out of range; {allowed}"))),
            },
            _ => Err(self.type_error(doc, key, v, "an integer", allowed)),
        }
    }

    fn string(
        &self,
        doc: &Doc,
        key: &str,
        allowed: &str,
    ) -> Result<Option<Item<String>>, CaseError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::String(s) => Ok(Some(self.item(doc, key, v, s.to_string()))),
            _ => Err(self.type_error(doc, key, v, "a string", allowed)),
        }
    }

    /// A device request (`"auto" | "cpu" | "cuda" | "cuda:N"`, or a group `"cuda:all" |
    /// "cuda:0,1,…"`); `None` when absent.
    fn device(&self, doc: &Doc, key: &str) -> Result<Option<DeviceRequest>, CaseError> {
        let Some(item) = self.string(doc, key, DeviceRequest::ALLOWED)? else {
            return Ok(None);
        };
        match DeviceRequest::parse_or_reason(&item.value) {
            Ok(d) => Ok(Some(d)),
            Err(why) => Err(item.fail(doc, &why)),
        }
    }

    /// [`Section::device`] for a solver that runs on one device (`solver` names it): a group
    /// of GPUs is refused.
    pub(crate) fn single_device(
        &self,
        doc: &Doc,
        key: &str,
        solver: &str,
    ) -> Result<Option<DeviceRequest>, CaseError> {
        let device = self.device(doc, key)?;
        match (device, self.get(key)) {
            (Some(d), Some(v)) if d.is_group() => Err(self.item(doc, key, v, ()).fail(
                doc,
                &format!(
                    "several GPUs for {solver}, which runs on one device: only the spectral \
                         solver runs across GPUs; use \"cuda\" or \"cuda:N\""
                ),
            )),
            _ => Ok(device),
        }
    }

    /// A string that must be one of `options` (TOML spelling, value); `default` when absent.
    fn choice<T: Copy>(
        &self,
        doc: &Doc,
        key: &str,
        options: &[(&str, T)],
        default: T,
    ) -> Result<T, CaseError> {
        let spellings: Vec<String> = options.iter().map(|(s, _)| format!("\"{s}\"")).collect();
        let allowed = format!("must be one of {}", spellings.join(", "));
        let Some(item) = self.string(doc, key, &allowed)? else {
            return Ok(default);
        };
        options
            .iter()
            .find(|(s, _)| *s == item.value)
            .map(|&(_, value)| value)
            .ok_or_else(|| item.fail(doc, &allowed))
    }

    /// An array of numbers; `len` fixes its length.
    fn numbers(
        &self,
        doc: &Doc,
        key: &str,
        len: Option<usize>,
        allowed: &str,
    ) -> Result<Option<Item<Vec<Item<f64>>>>, CaseError> {
        self.array(doc, key, len, allowed, "a number", as_f64)
    }

    /// An array of integers; `len` fixes its length.
    fn integers(
        &self,
        doc: &Doc,
        key: &str,
        len: Option<usize>,
        allowed: &str,
    ) -> Result<Option<Item<Vec<Item<i64>>>>, CaseError> {
        self.array(doc, key, len, allowed, "an integer", |v| match v {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        })
    }

    fn array<T>(
        &self,
        doc: &Doc,
        key: &str,
        len: Option<usize>,
        allowed: &str,
        expected: &str,
        convert: impl Fn(&DeValue) -> Option<T>,
    ) -> Result<Option<Item<Vec<Item<T>>>>, CaseError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Array(array) = v.get_ref() else {
            return Err(self.type_error(doc, key, v, "an array", allowed));
        };
        let whole = self.item(doc, key, v, ());
        if let Some(len) = len {
            if array.len() != len {
                return Err(whole.fail(
                    doc,
                    &format!("expected {len} elements, found {}; {allowed}", array.len()),
                ));
            }
        }
        let mut items = Vec::with_capacity(array.len());
        for (index, element) in array.iter().enumerate() {
            let item = self.item(doc, key, element, ());
            let Some(x) = convert(element.get_ref()) else {
                let found = element.get_ref().type_str();
                return Err(doc.error(
                    Some(item.line),
                    &whole.path,
                    format!(
                        "key `{}` = {}: element {} is {} {found} ({}), expected {expected}; {allowed}",
                        whole.path,
                        whole.src,
                        index + 1,
                        article(found),
                        item.src,
                    ),
                ));
            };
            items.push(Item {
                value: x,
                path: item.path,
                line: item.line,
                src: item.src,
            });
        }
        Ok(Some(Item {
            value: items,
            path: whole.path,
            line: whole.line,
            src: whole.src,
        }))
    }
}

fn article(type_name: &str) -> &'static str {
    if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn as_f64(v: &DeValue) -> Option<f64> {
    match v {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|x| x as f64),
        DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
        _ => None,
    }
}

/// The section `name` of the top-level table: absent is fine (defaults), not a table is not.
fn section<'a, 'i>(
    doc: &Doc,
    root: &'a DeTable<'i>,
    name: &'static str,
) -> Result<Section<'a, 'i>, CaseError> {
    match root.get(name) {
        None => Ok(Section {
            name,
            table: None,
            line: None,
        }),
        Some(v) => match v.get_ref() {
            DeValue::Table(table) => Ok(Section {
                name,
                table: Some(table),
                line: Some(doc.line(&v.span())),
            }),
            other => Err(doc.error(
                Some(doc.line(&v.span())),
                name,
                format!(
                    "key `{name}` = {}: expected a table (a [{name}] section), found {} {}",
                    doc.src(&v.span()),
                    article(other.type_str()),
                    other.type_str()
                ),
            )),
        },
    }
}

pub(super) fn parse_case(text: &str, origin: &str, default_name: &str) -> Result<Case, CaseError> {
    let doc = Doc { origin, text };
    let root = DeTable::parse(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let (line, column) = doc.line_col(span.start);
        let mut message = e.message().trim().to_string();
        if message.starts_with("duplicate key") && !span.is_empty() {
            message = format!("{message} `{}`", doc.src(&span));
        }
        CaseError::Syntax {
            origin: origin.to_string(),
            line,
            column,
            message,
        }
    })?;
    let root = root.get_ref();
    let is_gravity = root.get("initial").is_some_and(|v| match v.get_ref() {
        DeValue::Table(t) => t.get("kind").is_some_and(|k| match k.get_ref() {
            DeValue::String(k) => gravity::GRAVITY_KINDS.contains(&k.as_ref()),
            _ => false,
        }),
        _ => false,
    });
    if is_gravity {
        return gravity::parse_gravity_case(&doc, root, default_name);
    }
    let top = Section {
        name: "",
        table: Some(root),
        line: None,
    };
    top.check_keys(&doc, TOP_KEYS, "")?;

    let name = match top.string(&doc, "name", NAME_ALLOWED)? {
        Some(item) => {
            item.require(&doc, valid_name(&item.value), NAME_ALLOWED)?;
            item.value
        }
        None => default_name.to_string(),
    };
    let description = top
        .string(&doc, "description", "any string")?
        .map_or_else(String::new, |item| item.value);
    let device = top.device(&doc, "device")?.unwrap_or_default();

    let flow = parse_flow(&doc, &section(&doc, root, "flow")?)?;
    let time = parse_time(&doc, &section(&doc, root, "time")?)?;
    let initial_sec = section(&doc, root, "initial")?;
    let spectral_sec = section(&doc, root, "spectral")?;
    let particle_kind = match initial_sec.get("kind").map(|v| v.get_ref()) {
        Some(DeValue::String(k)) => PARTICLE_KINDS.iter().find(|&&p| p == k.as_ref()).copied(),
        _ => None,
    };
    if particle_kind.is_some() {
        // No spectral solver: the run-level device is the particle solver's.
        top.single_device(&doc, "device", PARTICLES)?;
    }
    let spectral = match particle_kind {
        None => Some(parse_spectral(&doc, &spectral_sec)?),
        Some(kind) => {
            if spectral_sec.table.is_some() {
                return Err(doc.error(
                    spectral_sec.line,
                    "spectral",
                    format!(
                        "section [spectral]: initial.kind = \"{kind}\" is defined by particles \
                         and runs the vortex particle solver only (there is no spectral \
                         reference for it); remove [spectral]"
                    ),
                ));
            }
            None
        }
    };
    let initial = parse_initial(&doc, &initial_sec, spectral.as_ref())?;
    let output_sec = section(&doc, root, "output")?;
    for (key, what) in [
        ("spectra_times", "energy spectra"),
        ("fields_times", "grid fields"),
        ("fields_stride", "grid fields"),
        ("fields_precision", "grid fields"),
        ("structures_level", "grid fields"),
    ] {
        if let (Some(kind), Some(v)) = (particle_kind, output_sec.get(key)) {
            return Err(doc.error(
                Some(doc.line(&v.span())),
                &format!("output.{key}"),
                format!(
                    "key `output.{key}`: initial.kind = \"{kind}\" has no {what} \
                     (particle-defined flows write their own diagnostics); remove the key"
                ),
            ));
        }
    }
    let output = parse_output(&doc, &output_sec, time.t_end, spectral.as_ref())?;
    let checkpoint = parse_checkpoint(&doc, &section(&doc, root, "checkpoint")?, time.t_end)?;
    let vortex = parse_vortex(
        &doc,
        &section(&doc, root, "vortex")?,
        spectral.as_ref(),
        &initial,
    )?;
    check_resolved(
        &doc,
        &initial_sec,
        &initial,
        spectral.as_ref(),
        vortex.as_ref(),
    )?;

    Ok(Case {
        name,
        description,
        flow,
        initial,
        time,
        output,
        checkpoint,
        spectral,
        vortex,
        device,
        units: None,
        gravity: None,
    })
}

/// Refuses a field-defined initial condition with modes a grid of the case does not keep (the
/// solvers would refuse it when they start): the spectral grid (|k_i| up to its `kmax` after
/// dealiasing) and the particle lattice (|k_i| < vortex.n/2). The error points at the key that
/// sets the wavenumber (`kp` when `k_cut` is its default 3·kp) and says what would fix it.
fn check_resolved(
    doc: &Doc,
    sec: &Section,
    initial: &InitialCondition,
    spectral: Option<&SpectralConfig>,
    vortex: Option<&VortexConfig>,
) -> Result<(), CaseError> {
    let Some(reach) = initial.reach() else {
        return Ok(());
    };
    let spectral = spectral.map(|s| {
        (
            crate::spectral::SpectralGrid::new(s.n, s.dealias).kmax(),
            format!("spectral.n = {} with dealias = \"{}\"", s.n, s.dealias),
            "raise spectral.n",
        )
    });
    let lattice = vortex.map(|v| {
        (
            crate::vortex::field::grid_kmax(v.n),
            format!("the particle lattice of vortex.n = {}", v.n),
            "raise vortex.n",
        )
    });
    let Some((kept, grid, raise)) = spectral
        .into_iter()
        .chain(lattice)
        .find(|(kept, _, _)| reach.kmax > *kept)
    else {
        return Ok(());
    };
    let default_cut = reach.key == "k_cut" && sec.get("k_cut").is_none();
    let (key, reaches, fix) = if default_cut {
        (
            "kp",
            format!("k_cut = 3·kp = {}", reach.wavenumber),
            format!("{raise}, lower initial.kp or give initial.k_cut ≤ {kept}"),
        )
    } else {
        (
            reach.key,
            format!("{}", reach.wavenumber),
            format!("{raise} or lower initial.{}", reach.key),
        )
    };
    let message = format!(
        "the initial field has wavenumbers up to {reaches}, but {grid} keeps |k_i| ≤ {kept}: \
         {fix}"
    );
    Err(match sec.get(key) {
        Some(v) => sec.item(doc, key, v, ()).fail(doc, &message),
        None => doc.error(sec.line, &sec.path(key), message),
    })
}

/// The particle solver, in the refusal of a group of GPUs for it.
const PARTICLES: &str = "the particle solver ([vortex])";

const NAME_ALLOWED: &str =
    "must be a non-empty string without '/', '\\' or control characters (it names output files)";

fn valid_name(name: &str) -> bool {
    !name.trim().is_empty() && !name.contains(['/', '\\']) && !name.chars().any(char::is_control)
}

fn parse_flow(doc: &Doc, sec: &Section) -> Result<Flow, CaseError> {
    const NU: &str = "kinematic viscosity: must be a finite number ≥ 0";
    sec.check_keys(doc, &["nu"], "")?;
    let nu = sec
        .number(doc, "nu", NU)?
        .ok_or_else(|| sec.missing(doc, "nu", "kinematic viscosity, ≥ 0"))?;
    nu.require(doc, nu.value.is_finite() && nu.value >= 0.0, NU)?;
    Ok(Flow { nu: nu.value })
}

fn parse_time(doc: &Doc, sec: &Section) -> Result<TimeControl, CaseError> {
    const T_END: &str = "final time: must be a finite number > 0";
    const CFL: &str = "CFL number: must be in (0, 2.5]";
    const DT_MAX: &str = "largest adaptive step: must be a finite number > 0";
    const ONE_OF: &str = "give exactly one of `dt` (fixed step) or `cfl` (adaptive step)";
    const MAX_STEPS: &str = "the most steps the run may take: must be an integer ≥ 1";
    sec.check_keys(doc, &["t_end", "dt", "cfl", "dt_max", "max_steps"], "")?;
    let t_end = sec
        .number(doc, "t_end", T_END)?
        .ok_or_else(|| sec.missing(doc, "t_end", "final time, > 0"))?;
    t_end.require(doc, t_end.value.is_finite() && t_end.value > 0.0, T_END)?;
    let t_end = t_end.value;

    let dt_allowed = format!(
        "fixed time step: must be a number > 0 and ≤ t_end (= {})",
        Short(t_end)
    );
    let dt = sec.number(doc, "dt", &dt_allowed)?;
    let cfl = sec.number(doc, "cfl", CFL)?;
    let dt_max = sec.number(doc, "dt_max", DT_MAX)?;
    let step = match (dt, cfl) {
        (Some(dt), Some(cfl)) => {
            let line = dt.line.max(cfl.line);
            return Err(doc.error(Some(line), "time", format!("[time]: {ONE_OF}, not both")));
        }
        (None, None) => {
            return Err(doc.error(sec.line, "time", format!("[time]: {ONE_OF}")));
        }
        (Some(dt), None) => {
            if let Some(dt_max) = dt_max {
                return Err(dt_max.fail(
                    doc,
                    "only allowed with `cfl` (adaptive step); with a fixed `dt` leave it out",
                ));
            }
            dt.require(doc, dt.value > 0.0 && dt.value <= t_end, &dt_allowed)?;
            let steps = (t_end / dt.value).ceil();
            if steps > TimeControl::MAX_FIXED_STEPS {
                return Err(dt.fail(
                    doc,
                    &format!(
                        "t_end / dt = {} / {} = {steps:.3e} steps, more than the {:.0e} a \
                         run may take: raise dt or shorten t_end",
                        Short(t_end),
                        Short(dt.value),
                        TimeControl::MAX_FIXED_STEPS
                    ),
                ));
            }
            TimeStep::Fixed { dt: dt.value }
        }
        (None, Some(cfl)) => {
            cfl.require(doc, cfl.value > 0.0 && cfl.value <= CFL_MAX, CFL)?;
            let dt_max = match dt_max {
                Some(d) => {
                    d.require(doc, d.value.is_finite() && d.value > 0.0, DT_MAX)?;
                    Some(d.value)
                }
                None => None,
            };
            TimeStep::Cfl {
                cfl: cfl.value,
                dt_max,
            }
        }
    };
    let max_steps = match sec.integer(doc, "max_steps", MAX_STEPS)? {
        Some(m) => {
            m.require(doc, m.value >= 1, MAX_STEPS)?;
            Some(m.value as u64)
        }
        None => None,
    };
    Ok(TimeControl {
        t_end,
        step,
        max_steps,
    })
}

fn parse_spectral(doc: &Doc, sec: &Section) -> Result<SpectralConfig, CaseError> {
    const N: &str = "must be an even integer ≥ 8 and ≤ 2048";
    const DEALIAS: &str = r#"must be one of "3/2", "2/3""#;
    sec.check_keys(doc, &["n", "dealias", "device"], "")?;
    let n = sec
        .integer(doc, "n", N)?
        .ok_or_else(|| sec.missing(doc, "n", "grid points per dimension: an even integer ≥ 8"))?;
    n.require(
        doc,
        n.value % 2 == 0 && (N_MIN..=N_MAX).contains(&n.value),
        N,
    )?;
    let dealias = match sec.string(doc, "dealias", DEALIAS)? {
        None => Dealias::ThreeHalves,
        Some(item) => match item.value.as_str() {
            "3/2" => Dealias::ThreeHalves,
            "2/3" => Dealias::TwoThirds,
            _ => return Err(item.fail(doc, DEALIAS)),
        },
    };
    Ok(SpectralConfig {
        // 8 ≤ n ≤ 2048: the conversion is exact.
        n: n.value as usize,
        dealias,
        device: sec.device(doc, "device")?,
    })
}

fn parse_initial(
    doc: &Doc,
    sec: &Section,
    spectral: Option<&SpectralConfig>,
) -> Result<InitialCondition, CaseError> {
    const AMPLITUDE: &str = "must be a finite number > 0";
    let kind = sec.string(doc, "kind", KINDS)?.ok_or_else(|| {
        sec.missing(
            doc,
            "kind",
            r#"one of "taylor-green", "isotropic", "shear-wave", "vortex-ring", "coaxial-rings", "vortex-tube""#,
        )
    })?;
    // Field-defined kinds come with a [spectral] section (parse_case checks it first).
    let spectral_n = spectral.map_or(0, |s| s.n);
    let context = format!(" with kind = \"{}\"", kind.value);
    let amplitude = |sec: &Section| -> Result<f64, CaseError> {
        match sec.number(doc, "amplitude", AMPLITUDE)? {
            None => Ok(1.0),
            Some(a) => {
                a.require(doc, a.value.is_finite() && a.value > 0.0, AMPLITUDE)?;
                Ok(a.value)
            }
        }
    };
    match kind.value.as_str() {
        "taylor-green" => {
            sec.check_keys(doc, &["kind", "amplitude"], &context)?;
            Ok(InitialCondition::TaylorGreen {
                amplitude: amplitude(sec)?,
            })
        }
        "isotropic" => {
            const KP: &str = "peak wavenumber of the spectrum: must be a finite number > 0";
            const U0: &str = "rms velocity per component: must be a finite number > 0";
            const SEED: &str = "random seed: must be an integer ≥ 0";
            const K_CUT: &str = "band limit of the random field: must be a finite number ≥ 1";
            sec.check_keys(doc, &["kind", "kp", "u0", "seed", "k_cut"], &context)?;
            let kp = sec
                .number(doc, "kp", KP)?
                .ok_or_else(|| sec.missing(doc, "kp", "peak wavenumber of the spectrum, > 0"))?;
            kp.require(doc, kp.value.is_finite() && kp.value > 0.0, KP)?;
            let u0 = sec
                .number(doc, "u0", U0)?
                .ok_or_else(|| sec.missing(doc, "u0", "rms velocity per component, > 0"))?;
            u0.require(doc, u0.value.is_finite() && u0.value > 0.0, U0)?;
            let seed = match sec.integer(doc, "seed", SEED)? {
                None => 1,
                Some(s) => {
                    s.require(doc, s.value >= 0, SEED)?;
                    s.value as u64
                }
            };
            let k_cut = match sec.number(doc, "k_cut", K_CUT)? {
                Some(k) => {
                    k.require(doc, k.value.is_finite() && k.value >= 1.0, K_CUT)?;
                    k.value
                }
                None => {
                    let k = 3.0 * kp.value;
                    kp.require(
                        doc,
                        k.is_finite() && k >= 1.0,
                        "without `k_cut` (default 3·kp) kp must be ≥ 1/3 and 3·kp finite, \
                         or give `k_cut` ≥ 1",
                    )?;
                    k
                }
            };
            Ok(InitialCondition::Isotropic {
                kp: kp.value,
                u0: u0.value,
                seed,
                k_cut,
            })
        }
        "shear-wave" => {
            sec.check_keys(
                doc,
                &["kind", "wavevector", "amplitude", "polarisation"],
                &context,
            )?;
            let half = spectral_n as i64 / 2;
            let k_allowed = format!(
                "must be 3 integers, not all zero, each of magnitude < n/2 (= {half} for \
                 spectral.n = {spectral_n})"
            );
            let k_item = sec
                .integers(doc, "wavevector", Some(3), &k_allowed)?
                .ok_or_else(|| sec.missing(doc, "wavevector", "3 integers, not all zero"))?;
            let k = [
                k_item.value[0].value,
                k_item.value[1].value,
                k_item.value[2].value,
            ];
            k_item.require(
                doc,
                k.iter().any(|&c| c != 0) && k.iter().all(|&c| c.unsigned_abs() < half as u64),
                &k_allowed,
            )?;
            let amplitude = amplitude(sec)?;
            let kf = k.map(|c| c as f64);
            let a_allowed =
                "must be 3 finite numbers, not all zero, perpendicular to `wavevector` \
                 (|a·k| ≤ 1e-12 |a||k|)";
            let polarisation = match sec.numbers(doc, "polarisation", Some(3), a_allowed)? {
                None => default_polarisation(k),
                Some(a) => {
                    let v = [a.value[0].value, a.value[1].value, a.value[2].value];
                    a.require(doc, v.iter().all(|x| x.is_finite()), a_allowed)?;
                    let unit = normalise(v).ok_or_else(|| a.fail(doc, a_allowed))?;
                    let k_norm = kf.iter().map(|x| x * x).sum::<f64>().sqrt();
                    let dot = dot(unit, kf);
                    if dot.abs() > PERP_TOL * k_norm {
                        return Err(a.fail(
                            doc,
                            &format!(
                                "not perpendicular to wavevector = {} (a·k/(|a||k|) = {:.3e}); \
                                 {a_allowed}",
                                k_item.src,
                                dot / k_norm
                            ),
                        ));
                    }
                    unit
                }
            };
            Ok(InitialCondition::ShearWave {
                wavevector: k,
                amplitude,
                polarisation,
            })
        }
        "vortex-ring" => {
            const RADIUS: &str = "ring radius R: must be a finite number > 0";
            sec.check_keys(doc, &["kind", "radius", "circulation", "core"], &context)?;
            let radius = sec
                .number(doc, "radius", RADIUS)?
                .ok_or_else(|| sec.missing(doc, "radius", "the ring radius R, > 0"))?;
            radius.require(doc, radius.value.is_finite() && radius.value > 0.0, RADIUS)?;
            let (circulation, core) = ring_circulation_and_core(doc, sec, radius.value)?;
            Ok(InitialCondition::VortexRing {
                radius: radius.value,
                circulation,
                core,
            })
        }
        "coaxial-rings" => {
            sec.check_keys(doc, &["kind", "rings"], &context)?;
            Ok(InitialCondition::CoaxialRings {
                rings: parse_coaxial_rings(doc, sec)?,
            })
        }
        "vortex-tube" => {
            const CORE: &str =
                "core standard deviation σ0: must be a finite number > 0 and ≤ 1 (box [-π, π)³)";
            sec.check_keys(doc, &["kind", "circulation", "core"], &context)?;
            let circulation = circulation(doc, sec)?;
            let core = sec
                .number(doc, "core", CORE)?
                .ok_or_else(|| sec.missing(doc, "core", "the core's standard deviation σ0"))?;
            core.require(
                doc,
                core.value.is_finite() && core.value > 0.0 && core.value <= 1.0,
                CORE,
            )?;
            Ok(InitialCondition::VortexTube {
                circulation,
                core: core.value,
            })
        }
        _ => Err(kind.fail(doc, KINDS)),
    }
}

/// The required key `circulation` of `sec`: a finite number ≠ 0.
fn circulation(doc: &Doc, sec: &Section) -> Result<f64, CaseError> {
    const ALLOWED: &str = "circulation Γ: must be a finite number ≠ 0";
    let circulation = sec
        .number(doc, "circulation", ALLOWED)?
        .ok_or_else(|| sec.missing(doc, "circulation", "the circulation Γ, ≠ 0"))?;
    circulation.require(
        doc,
        circulation.value.is_finite() && circulation.value != 0.0,
        ALLOWED,
    )?;
    Ok(circulation.value)
}

/// A ring's `circulation` (finite, ≠ 0) and `core` (finite, > 0, < radius/2) in `sec`: the
/// keys `vortex-ring` and each table of `coaxial-rings` share.
fn ring_circulation_and_core(
    doc: &Doc,
    sec: &Section,
    radius: f64,
) -> Result<(f64, f64), CaseError> {
    let circulation = circulation(doc, sec)?;
    let core_allowed = format!(
        "core standard deviation σ: must be a finite number > 0 and < radius/2 (= {})",
        radius / 2.0
    );
    let core = sec
        .number(doc, "core", &core_allowed)?
        .ok_or_else(|| sec.missing(doc, "core", "the core's standard deviation σ"))?;
    core.require(
        doc,
        core.value.is_finite() && core.value > 0.0 && core.value < radius / 2.0,
        &core_allowed,
    )?;
    Ok((circulation, core.value))
}

/// `initial.rings` of `kind = "coaxial-rings"`: one or more tables `{ radius, z, circulation,
/// core }` (inline or `[[initial.rings]]`), each checked like `vortex-ring`'s keys; no two cores
/// closer than the sum of their `core`s (in the (r, z) half-plane).
fn parse_coaxial_rings(doc: &Doc, sec: &Section) -> Result<Vec<CoaxialRing>, CaseError> {
    const RINGS: &str = "must be a non-empty array of tables { radius, z, circulation, core }, \
                         e.g. rings = [{ radius = 1.0, z = 0.0, circulation = 1.0, core = 0.1 }]";
    const RADIUS: &str = "ring radius R: must be a finite number > 0";
    const Z: &str = "axial position of the ring's plane: must be a finite number";
    let v = sec.get("rings").ok_or_else(|| {
        sec.missing(
            doc,
            "rings",
            "an array of rings { radius, z, circulation, core }",
        )
    })?;
    let whole = sec.item(doc, "rings", v, ());
    let DeValue::Array(array) = v.get_ref() else {
        return Err(sec.type_error(doc, "rings", v, "an array", RINGS));
    };
    whole.require(doc, !array.is_empty(), RINGS)?;
    let mut rings: Vec<CoaxialRing> = Vec::with_capacity(array.len());
    for (index, element) in array.iter().enumerate() {
        let name = format!("{}[{}]", whole.path, index + 1);
        let line = doc.line(&element.span());
        let DeValue::Table(table) = element.get_ref() else {
            let found = element.get_ref().type_str();
            return Err(doc.error(
                Some(line),
                &name,
                format!(
                    "key `{name}` = {}: expected a table, found {} {found}; {RINGS}",
                    doc.src(&element.span()),
                    article(found)
                ),
            ));
        };
        let ring = Section {
            name: &name,
            table: Some(table),
            line: Some(line),
        };
        ring.check_keys(doc, &["radius", "z", "circulation", "core"], "")?;
        let radius = ring
            .number(doc, "radius", RADIUS)?
            .ok_or_else(|| ring.missing(doc, "radius", "the ring radius R, > 0"))?;
        radius.require(doc, radius.value.is_finite() && radius.value > 0.0, RADIUS)?;
        let z = match ring.number(doc, "z", Z)? {
            Some(z) => {
                z.require(doc, z.value.is_finite(), Z)?;
                z.value
            }
            None => 0.0,
        };
        let (circulation, core) = ring_circulation_and_core(doc, &ring, radius.value)?;
        let this = CoaxialRing {
            radius: radius.value,
            z,
            circulation,
            core,
        };
        for (k, other) in rings.iter().enumerate() {
            let gap = (this.radius - other.radius).hypot(this.z - other.z);
            if gap <= this.core + other.core {
                return Err(doc.error(
                    Some(line),
                    &name,
                    format!(
                        "key `{name}`: its core (radius {}, z {}) is {gap:.4} from the core of \
                         {}[{}] (radius {}, z {}), not more than the sum of their cores, {}: \
                         the rings would overlap; move them apart",
                        this.radius,
                        this.z,
                        whole.path,
                        k + 1,
                        other.radius,
                        other.z,
                        this.core + other.core
                    ),
                ));
            }
        }
        rings.push(this);
    }
    Ok(rings)
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// a/|a|, or None for a zero (or non-finite) vector. A vector whose squared norm is within a
/// few ulps of 1 is returned unchanged, so that normalising is idempotent and a resolved case
/// parses back to the same bits.
pub(super) fn normalise(a: [f64; 3]) -> Option<[f64; 3]> {
    if !a.iter().all(|x| x.is_finite()) {
        return None;
    }
    let n2 = dot(a, a);
    if (n2 - 1.0).abs() <= 8.0 * f64::EPSILON {
        return Some(a);
    }
    // Scale first so that tiny or huge components neither underflow nor overflow.
    let m = a.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
    if m == 0.0 {
        return None;
    }
    let b = a.map(|x| x / m);
    let norm = dot(b, b).sqrt();
    Some(b.map(|x| x / norm))
}

/// k × e normalised, e the axis along which |k| has its smallest component (the first such).
fn default_polarisation(k: [i64; 3]) -> [f64; 3] {
    let axis = (0..3).min_by_key(|&i| k[i].unsigned_abs()).unwrap_or(0);
    let mut e = [0.0; 3];
    e[axis] = 1.0;
    let k = k.map(|c| c as f64);
    let cross = [
        k[1] * e[2] - k[2] * e[1],
        k[2] * e[0] - k[0] * e[2],
        k[0] * e[1] - k[1] * e[0],
    ];
    // k ≠ 0 and e is the axis of k's smallest component, so k × e ≠ 0.
    normalise(cross).unwrap_or([1.0, 0.0, 0.0])
}

fn parse_cadence(doc: &Doc, sec: &Section, default: Cadence) -> Result<Cadence, CaseError> {
    Ok(parse_cadence_keys(doc, sec, "every_steps", "every_time")?.unwrap_or(default))
}

/// The cadence given by at most one of `steps_key` (every N steps) and `time_key` (every T
/// time units); `None` when neither is given.
fn parse_cadence_keys(
    doc: &Doc,
    sec: &Section,
    steps_key: &str,
    time_key: &str,
) -> Result<Option<Cadence>, CaseError> {
    const STEPS: &str = "must be an integer ≥ 1";
    const TIME: &str = "must be a finite number > 0";
    let steps = sec.integer(doc, steps_key, STEPS)?;
    let time = sec.number(doc, time_key, TIME)?;
    match (steps, time) {
        (Some(s), Some(t)) => Err(doc.error(
            Some(s.line.max(t.line)),
            sec.name,
            format!(
                "[{}]: give at most one of `{steps_key}` (every N steps) or `{time_key}` \
                 (every T time units), not both",
                sec.name
            ),
        )),
        (Some(s), None) => {
            s.require(doc, s.value >= 1, STEPS)?;
            Ok(Some(Cadence::Steps(s.value as u64)))
        }
        (None, Some(t)) => {
            t.require(doc, t.value.is_finite() && t.value > 0.0, TIME)?;
            Ok(Some(Cadence::Time(t.value)))
        }
        (None, None) => Ok(None),
    }
}

/// A list of times within [0, t_end] (`output.spectra_times`, `output.fields_times`): sorted,
/// duplicates dropped; `None` when the key is absent.
fn parse_times(
    doc: &Doc,
    sec: &Section,
    key: &str,
    t_end: f64,
) -> Result<Option<Vec<f64>>, CaseError> {
    let allowed = format!(
        "each time must be a number in [0, t_end] = [0, {}]",
        Short(t_end)
    );
    let Some(times) = sec.numbers(doc, key, None, &allowed)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(times.value.len());
    for t in &times.value {
        if !(t.value.is_finite() && (0.0..=t_end).contains(&t.value)) {
            return Err(doc.error(
                Some(t.line),
                &times.path,
                format!(
                    "key `{}` = {}: time {} is outside [0, t_end]; {allowed}",
                    times.path, times.src, t.src
                ),
            ));
        }
        // + 0.0 turns −0 into +0.
        out.push(t.value + 0.0);
    }
    out.sort_by(f64::total_cmp);
    out.dedup_by(|a, b| a == b);
    Ok(Some(out))
}

fn parse_output(
    doc: &Doc,
    sec: &Section,
    t_end: f64,
    spectral: Option<&SpectralConfig>,
) -> Result<OutputControl, CaseError> {
    const LEVEL: &str = "the isosurface level c in Q = c·Q_rms: must be a finite number > 0";
    sec.check_keys(
        doc,
        &[
            "every_steps",
            "every_time",
            "spectra_times",
            "fields_times",
            "fields_stride",
            "fields_precision",
            "structures_level",
        ],
        "",
    )?;
    let cadence = parse_cadence(doc, sec, Cadence::Steps(1))?;
    let spectra_times = parse_times(doc, sec, "spectra_times", t_end)?.unwrap_or(vec![0.0, t_end]);
    let fields_times = parse_times(doc, sec, "fields_times", t_end)?.unwrap_or_default();
    let n = spectral.map_or(0, |s| s.n);
    let stride_allowed = format!(
        "the fields keep every s-th grid node: must be an integer ≥ 1 that divides spectral.n = {n}"
    );
    let fields_stride = match sec.integer(doc, "fields_stride", &stride_allowed)? {
        None => 1,
        Some(s) => {
            s.require(
                doc,
                s.value >= 1 && n > 0 && (n as i64) % s.value == 0 && s.value < n as i64,
                &stride_allowed,
            )?;
            s.value as usize
        }
    };
    let fields_precision = sec.choice(
        doc,
        "fields_precision",
        &[("f32", FieldPrecision::F32), ("f64", FieldPrecision::F64)],
        FieldPrecision::F32,
    )?;
    let structures_level = match sec.number(doc, "structures_level", LEVEL)? {
        None => postprocess::DEFAULT_Q_LEVEL,
        Some(c) => {
            c.require(doc, c.value.is_finite() && c.value > 0.0, LEVEL)?;
            c.value
        }
    };
    Ok(OutputControl {
        cadence,
        spectra_times,
        fields_times,
        fields_stride,
        fields_precision,
        structures_level,
    })
}

fn parse_checkpoint(doc: &Doc, sec: &Section, t_end: f64) -> Result<CheckpointControl, CaseError> {
    const KEEP: &str = "number of checkpoints kept: must be an integer ≥ 1";
    sec.check_keys(doc, &["every_steps", "every_time", "keep"], "")?;
    let tenth = t_end / 10.0;
    let default = Cadence::Time(if tenth > 0.0 { tenth } else { t_end });
    let cadence = parse_cadence(doc, sec, default)?;
    let keep = match sec.integer(doc, "keep", KEEP)? {
        None => 2,
        Some(k) => {
            k.require(doc, k.value >= 1, KEEP)?;
            usize::try_from(k.value).map_err(|_| k.fail(doc, KEEP))?
        }
    };
    Ok(CheckpointControl { cadence, keep })
}

const VORTEX_KEYS: &[&str] = &[
    "n",
    "overlap",
    "stretching",
    "reinit_every",
    "rbf",
    "rbf_tolerance",
    "rbf_max_iterations",
    "reinit_projection",
    "reinit_filter",
    "evaluator",
    "accuracy",
    "accuracy_check_every",
    "device",
    "backend",
    "snapshot_every_steps",
    "snapshot_every_time",
    "dissipation_every",
];

/// The optional `[vortex]` section: `None` when absent, otherwise every default filled in.
fn parse_vortex(
    doc: &Doc,
    sec: &Section,
    spectral: Option<&SpectralConfig>,
    initial: &InitialCondition,
) -> Result<Option<VortexConfig>, CaseError> {
    const N: &str = "particles per dimension: must be an even integer ≥ 8 and ≤ 512";
    const OVERLAP: &str =
        "core radius over lattice spacing (σ0 = overlap · h): must be a number > 0 and ≤ 3";
    const REINIT: &str =
        r#"steps between reinitialisations: must be an integer ≥ 1 or the string "never""#;
    const TOLERANCE: &str =
        "relative residual of the conjugate-gradient solve: must be a number > 0 and ≤ 1e-2";
    const MAX_ITERATIONS: &str =
        "iteration cap of the conjugate-gradient solve: must be an integer ≥ 1";
    const ACCURACY: &str = "requested relative accuracy of the Ewald or FMM evaluator: must be \
                            a number ≥ 1e-12 and ≤ 1e-2";
    const CHECK_EVERY: &str = "evaluations between the FMM's checks against the direct sum: \
                               must be an integer ≥ 0 (0: only at the first evaluation)";
    const ONLY_FMM: &str = "only allowed with `vortex.evaluator` = \"fmm\" or \"auto\" (the \
                            FMM's built-in check against the direct or Ewald sum); the other \
                            evaluators need no check, leave it out";
    const ONLY_CG: &str = "only allowed with `vortex.rbf` = \"cg\" (conjugate gradients); with \
                           rbf = \"spectral\" or \"exact\" leave it out";
    const DISSIPATION_EVERY: &str = "reinitialisations between measurements of the numerical \
                                     dissipation: must be an integer ≥ 1 (1: every one)";
    let ring = initial.is_free_space();
    if sec.table.is_none() {
        if initial.is_particle_defined() {
            return Err(doc.error(
                None,
                "vortex",
                format!(
                    "missing section [vortex]: initial.kind = \"{}\" is carried by particles; \
                     add [vortex] with at least `n` (particle spacing h = 2π/n)",
                    initial.kind_str()
                ),
            ));
        }
        return Ok(None);
    }
    sec.check_keys(doc, VORTEX_KEYS, "")?;
    let mut defaults = VortexConfig::with_defaults(spectral.map_or(0, |s| s.n));
    if ring {
        // Free space: all pairs, and no periodic lattice to reinitialise on.
        defaults.evaluator = EvaluatorKind::Direct;
        defaults.reinit_every = None;
    }
    let valid_n = |n: i64| n % 2 == 0 && (N_MIN..=VORTEX_N_MAX).contains(&n);

    let n_item = sec.integer(doc, "n", N)?;
    let n = match &n_item {
        Some(n) => {
            n.require(doc, valid_n(n.value), N)?;
            // 8 ≤ n ≤ 512: the conversion is exact.
            n.value as usize
        }
        None if spectral.is_none() => {
            return Err(sec.missing(
                doc,
                "n",
                "particles per dimension (spacing h = 2π/n): an even integer ≥ 8 and ≤ 512",
            ));
        }
        None => {
            let spectral = spectral.expect("checked above");
            if !valid_n(spectral.n as i64) {
                let path = sec.path("n");
                return Err(doc.error(
                    sec.line,
                    &path,
                    format!(
                        "missing key `{path}`: its default, spectral.n = {}, is too large for \
                         the particles; {N}",
                        spectral.n
                    ),
                ));
            }
            defaults.n
        }
    };

    let overlap_item = sec.number(doc, "overlap", OVERLAP)?;
    let overlap = match &overlap_item {
        Some(o) => {
            o.require(doc, o.value > 0.0 && o.value <= OVERLAP_MAX, OVERLAP)?;
            o.value
        }
        None => defaults.overlap,
    };
    if let Some((core, core_key)) = initial.smallest_ring_core() {
        // The particles sample a core of variance core² − σ_p²: their blobs must be narrower.
        let sigma_p = overlap * std::f64::consts::TAU / n as f64;
        if sigma_p >= 0.9 * core {
            let allowed = format!(
                "the blob radius σ_p = overlap·h = overlap·2π/n = {sigma_p:.4} must be below \
                 0.9 × {core_key} = {:.4} so that the particles resolve the core (raise n or \
                 lower overlap)",
                0.9 * core
            );
            return Err(match (&overlap_item, &n_item) {
                (Some(o), _) => o.fail(doc, &allowed),
                (None, Some(n)) => n.fail(doc, &allowed),
                (None, None) => doc.error(sec.line, "vortex.n", allowed),
            });
        }
    }

    let stretching = sec.choice(
        doc,
        "stretching",
        &[
            ("classical", StretchingScheme::Classical),
            ("transposed", StretchingScheme::Transposed),
        ],
        defaults.stretching,
    )?;

    if let (true, Some(v)) = (ring, sec.get("reinit_every")) {
        if !matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == "never") {
            return Err(sec.item(doc, "reinit_every", v, ()).fail(
                doc,
                r#"a vortex ring lives in free space, where there is no periodic lattice to reinitialise on: must be "never""#,
            ));
        }
    }
    let reinit_every = match sec.get("reinit_every") {
        // A string ("never") or a wrong type; integers are read below.
        Some(v) if !matches!(v.get_ref(), DeValue::Integer(_)) => match v.get_ref() {
            DeValue::String(s) if s.as_ref() == "never" => None,
            DeValue::String(_) => {
                return Err(sec.item(doc, "reinit_every", v, ()).fail(doc, REINIT));
            }
            _ => {
                return Err(sec.type_error(
                    doc,
                    "reinit_every",
                    v,
                    r#"an integer or the string "never""#,
                    REINIT,
                ));
            }
        },
        _ => match sec.integer(doc, "reinit_every", REINIT)? {
            Some(k) => {
                k.require(doc, k.value >= 1, REINIT)?;
                Some(k.value as u64)
            }
            None => defaults.reinit_every,
        },
    };

    #[derive(Clone, Copy, PartialEq)]
    enum Rbf {
        Spectral,
        Exact,
        Cg,
    }
    let tolerance = sec.number(doc, "rbf_tolerance", TOLERANCE)?;
    let max_iterations = sec.integer(doc, "rbf_max_iterations", MAX_ITERATIONS)?;
    // Conjugate gradients were the default before the spectral solve: a case that sets their
    // keys without `rbf` keeps them.
    let default = if tolerance.is_some() || max_iterations.is_some() {
        Rbf::Cg
    } else {
        Rbf::Spectral
    };
    let chosen = sec.choice(
        doc,
        "rbf",
        &[
            ("spectral", Rbf::Spectral),
            ("exact", Rbf::Exact),
            ("cg", Rbf::Cg),
        ],
        default,
    )?;
    let rbf = if chosen != Rbf::Cg {
        // The first of the CG-only keys in the file is reported.
        let conflicts = [
            tolerance.map(|t| (t.line, t.fail(doc, ONLY_CG))),
            max_iterations.map(|m| (m.line, m.fail(doc, ONLY_CG))),
        ];
        if let Some((_, e)) = conflicts
            .into_iter()
            .flatten()
            .min_by_key(|(line, _)| *line)
        {
            return Err(e);
        }
        if chosen == Rbf::Exact {
            RbfSolver::Exact
        } else {
            RbfSolver::Spectral
        }
    } else {
        let tolerance = match tolerance {
            Some(t) => {
                t.require(
                    doc,
                    t.value > 0.0 && t.value <= RBF_TOLERANCE_MAX,
                    TOLERANCE,
                )?;
                t.value
            }
            None => RbfSolver::DEFAULT_TOLERANCE,
        };
        let max_iterations = match max_iterations {
            Some(m) => {
                m.require(doc, m.value >= 1, MAX_ITERATIONS)?;
                usize::try_from(m.value).map_err(|_| m.fail(doc, MAX_ITERATIONS))?
            }
            None => RbfSolver::DEFAULT_MAX_ITERATIONS,
        };
        RbfSolver::ConjugateGradient {
            tolerance,
            max_iterations,
        }
    };

    let solenoidal = sec.choice(
        doc,
        "reinit_projection",
        &[("solenoidal", true), ("none", false)],
        defaults.conditioning.solenoidal,
    )?;
    let filter = sec.choice(
        doc,
        "reinit_filter",
        &[
            ("exponential", LatticeFilter::Exponential),
            ("none", LatticeFilter::None),
        ],
        defaults.conditioning.filter,
    )?;
    let conditioning = LatticeConditioning { solenoidal, filter };

    let evaluator = sec.choice(
        doc,
        "evaluator",
        &[
            ("direct", EvaluatorKind::Direct),
            ("ewald", EvaluatorKind::Ewald),
            ("fmm", EvaluatorKind::Fmm),
            ("auto", EvaluatorKind::Auto),
        ],
        defaults.evaluator,
    )?;
    if let Some(v) = sec.get("evaluator") {
        let bad = match evaluator {
            EvaluatorKind::Ewald if ring => Some(
                r#"a vortex ring lives in free space: must be "direct", "fmm" or "auto" (Ewald sums are periodic)"#,
            ),
            EvaluatorKind::Direct if !ring => Some(
                r#"the periodic box needs "auto" (the default), "ewald" or "fmm" ("direct" sums in free space; a truncated image sum is only conditionally convergent)"#,
            ),
            _ => None,
        };
        if let Some(allowed) = bad {
            return Err(sec.item(doc, "evaluator", v, ()).fail(doc, allowed));
        }
    }
    let fmm = evaluator == EvaluatorKind::Fmm;
    let checked = fmm || evaluator == EvaluatorKind::Auto;
    let accuracy = match sec.number(doc, "accuracy", ACCURACY)? {
        Some(a) => {
            let (lo, hi) = ACCURACY_RANGE;
            a.require(doc, (lo..=hi).contains(&a.value), ACCURACY)?;
            let floor = crate::summation::fmm::params::CPU_ACCURACY_FLOOR;
            if fmm && a.value < floor {
                return Err(a.fail(
                    doc,
                    &format!(
                        "with `vortex.evaluator` = \"fmm\" must be ≥ {floor:e}, the finest the \
                         FMM is planned for (f64 on the CPU; a GPU sums its near field in f32 \
                         and is planned down to {:e})",
                        crate::summation::fmm::params::GPU_ACCURACY_FLOOR
                    ),
                ));
            }
            a.value
        }
        None => defaults.accuracy,
    };
    let accuracy_check_every = match sec.integer(doc, "accuracy_check_every", CHECK_EVERY)? {
        Some(k) if !checked => return Err(k.fail(doc, ONLY_FMM)),
        Some(k) => {
            k.require(doc, k.value >= 0, CHECK_EVERY)?;
            Some(k.value as u64)
        }
        None => fmm.then_some(VortexConfig::DEFAULT_ACCURACY_CHECK_EVERY),
    };
    // `backend` is the older name of `device` (case files and run directories written before
    // the run-level device); both at once is ambiguous.
    let device = match (sec.get("device"), sec.get("backend")) {
        (Some(_), Some(b)) => {
            return Err(sec.item(doc, "backend", b, ()).fail(
                doc,
                "`backend` is the older name of `device`: give one of them, not both",
            ))
        }
        (_, Some(_)) => sec.single_device(doc, "backend", PARTICLES)?,
        _ => sec.single_device(doc, "device", PARTICLES)?,
    };
    let snapshots = parse_cadence_keys(doc, sec, "snapshot_every_steps", "snapshot_every_time")?;
    let dissipation_every = match sec.integer(doc, "dissipation_every", DISSIPATION_EVERY)? {
        Some(k) if initial.is_particle_defined() => {
            return Err(k.fail(
                doc,
                &format!(
                    "initial.kind = \"{}\" is carried by particles alone: there is no spectral \
                     grid to measure their K on; leave it out",
                    initial.kind_str()
                ),
            ))
        }
        Some(k) => {
            k.require(doc, k.value >= 1, DISSIPATION_EVERY)?;
            Some(k.value as u64)
        }
        None => (!initial.is_particle_defined())
            .then(|| VortexConfig::default_dissipation_every(reinit_every)),
    };

    Ok(Some(VortexConfig {
        n,
        overlap,
        stretching,
        reinit_every,
        rbf,
        conditioning,
        evaluator,
        accuracy,
        accuracy_check_every,
        device,
        snapshots,
        dissipation_every,
    }))
}
