//! Models by name: spin chains (Heisenberg, XXZ in a field, J1-J2), spinless t-V fermions
//! and the Fermi-Hubbard chain, on open chains.
//!
//! Owns: the [`ChainModel`] trait (a model's site type, [`Terms`], [`Mpo`], charge sector
//! and starting state), the typed models [`SpinChain`], [`SpinlessFermions`], [`Hubbard`],
//! and [`Model`], one of them parsed from strings for a driver. Invariant: a model that
//! exists has parameters in range and a charge sector its chain can reach (the
//! constructors and [`Model::parse`] check), so [`ChainModel::initial_state`] always gives
//! a product state of that sector.
//!
//! Hamiltonians (sums over the open chain):
//!
//! - spins (spin 1/2 or 1): `H = sum_i [Jxy/2 (S+_i S-_{i+1} + h.c.) + Jz Sz_i Sz_{i+1}] +
//!   J2 sum_i S_i . S_{i+2} - hz sum_i Sz_i`; `heisenberg` is `Jxy = Jz = J`, `j1j2` is
//!   `Jxy = Jz = J1`;
//! - `tv`: `H = -t sum_i (c+_i c_{i+1} + h.c.) - t2 sum_i (c+_i c_{i+2} + h.c.) + V sum_i
//!   n_i n_{i+1}`;
//! - `hubbard`: `H = -t sum_{i,s} (c+_{i,s} c_{i+1,s} + h.c.) + U sum_i n_{i,up} n_{i,dn}`.
//!
//! ```
//! use tessera_mps::exact;
//! use tessera_mps::models::{ChainModel, Model};
//!
//! let model: Model = "hubbard:L=4,U=4,filling=1".parse()?;
//! let Model::Hubbard(hubbard) = model else { unreachable!() };
//! let w = hubbard.mpo()?;
//! assert_eq!(w.max_bond(), 6);
//! let psi = hubbard.initial_state()?;
//! assert_eq!(psi.charge(), hubbard.sector());
//! let e0 = exact::ground_energy(&hubbard.terms()?, &hubbard.sector())?;
//! assert!(e0 < 0.0);
//! assert!("hubbard:L=4,V=1".parse::<Model>().is_err()); // Hubbard takes no V
//! # Ok::<(), tessera_mps::Error>(())
//! ```

use std::fmt;
use std::str::FromStr;

use tessera_blocks::{AbelianSector, FermionicU1, U1};

use crate::sites::{ElectronCharge, Site, electron_charge, fermion_charge};
use crate::terms::Terms;
use crate::{Error, Mpo, Mps, Result, mpo};

/// A model on an open chain: its site type, terms, MPO, charge sector and starting state.
pub trait ChainModel {
    /// The charge type of its sites.
    type Charge: AbelianSector + tessera_io::SectorCodec;

    /// The number of sites.
    fn len(&self) -> usize;

    /// Always `false`: a model has at least two sites.
    fn is_empty(&self) -> bool {
        false
    }

    /// The site type.
    fn site(&self) -> Site<Self::Charge>;

    /// The Hamiltonian as a sum of terms.
    fn terms(&self) -> Result<Terms<Self::Charge>>;

    /// The Hamiltonian's MPO ([`mpo::build`] of [`terms`](ChainModel::terms)).
    fn mpo(&self) -> Result<Mpo<Self::Charge>> {
        mpo::build(&self.terms()?)
    }

    /// The charge sector asked for (total `2 Sz`, particle number, ...).
    fn sector(&self) -> Self::Charge;

    /// The local basis state of every site of a product state in [`sector`](ChainModel::sector),
    /// the charge spread evenly along the chain.
    fn initial_states(&self) -> Vec<usize>;

    /// The product state of [`initial_states`](ChainModel::initial_states) (bond dimension 1).
    fn initial_state(&self) -> Result<Mps<Self::Charge>> {
        let leg = self.site().physical_leg()?;
        Mps::product_state(&vec![leg; self.len()], &self.initial_states())
    }
}

/// Which `k` of `n` positions to take, spread evenly (every second one for `k = n / 2`).
fn spread(k: usize, n: usize) -> Vec<bool> {
    (0..n).map(|i| (i + 1) * k / n > i * k / n).collect()
}

/// The spin of a spin chain's sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spin {
    /// Spin 1/2.
    Half,
    /// Spin 1.
    One,
}

/// A spin chain: `H = sum_i [Jxy/2 (S+_i S-_{i+1} + h.c.) + Jz Sz_i Sz_{i+1}] + J2 sum_i
/// S_i . S_{i+2} - hz sum_i Sz_i`, in the sector of total `2 Sz = two_sz`.
#[derive(Clone, Debug, PartialEq)]
pub struct SpinChain {
    /// The number of sites.
    pub len: usize,
    /// The spin of the sites.
    pub spin: Spin,
    /// The nearest-neighbour exchange in the plane.
    pub jxy: f64,
    /// The nearest-neighbour exchange along z.
    pub jz: f64,
    /// The isotropic next-nearest-neighbour exchange.
    pub j2: f64,
    /// The field along z.
    pub hz: f64,
    /// Twice the total `Sz` of the sector.
    pub two_sz: i32,
}

impl ChainModel for SpinChain {
    type Charge = U1;

    fn len(&self) -> usize {
        self.len
    }

    fn site(&self) -> Site<U1> {
        match self.spin {
            Spin::Half => Site::spin_half(),
            Spin::One => Site::spin_one(),
        }
    }

    fn terms(&self) -> Result<Terms<U1>> {
        let mut h = Terms::new(self.site(), self.len)?;
        for (range, jxy, jz) in [(1, self.jxy, self.jz), (2, self.j2, self.j2)] {
            for i in 0..self.len.saturating_sub(range) {
                let j = i + range;
                if jxy != 0.0 {
                    h.add(0.5 * jxy, [("Sp", i), ("Sm", j)])?;
                    h.add(0.5 * jxy, [("Sm", i), ("Sp", j)])?;
                }
                if jz != 0.0 {
                    h.add(jz, [("Sz", i), ("Sz", j)])?;
                }
            }
        }
        if self.hz != 0.0 {
            for i in 0..self.len {
                h.add(-self.hz, [("Sz", i)])?;
            }
        }
        Ok(h)
    }

    fn sector(&self) -> U1 {
        U1(self.two_sz)
    }

    fn initial_states(&self) -> Vec<usize> {
        let (l, max) = (self.len, usize::from(self.spin == Spin::One) + 1);
        // Raise from all-down: each raise adds 2 to 2 Sz.
        let raises = (i64::from(self.two_sz) + (max * l) as i64) as usize / 2;
        let mut states = vec![0; l];
        let mut left = raises;
        for _ in 0..max {
            let now = left.min(l);
            for (s, up) in states.iter_mut().zip(spread(now, l)) {
                *s += usize::from(up);
            }
            left -= now;
        }
        states
    }
}

/// Spinless fermions: `H = -t sum_i (c+_i c_{i+1} + h.c.) - t2 sum_i (c+_i c_{i+2} + h.c.)
/// + V sum_i n_i n_{i+1}`, with `n` particles.
#[derive(Clone, Debug, PartialEq)]
pub struct SpinlessFermions {
    /// The number of sites.
    pub len: usize,
    /// The nearest-neighbour hopping.
    pub t: f64,
    /// The next-nearest-neighbour hopping.
    pub t2: f64,
    /// The nearest-neighbour interaction.
    pub v: f64,
    /// The particle number of the sector.
    pub n: usize,
}

impl ChainModel for SpinlessFermions {
    type Charge = FermionicU1;

    fn len(&self) -> usize {
        self.len
    }

    fn site(&self) -> Site<FermionicU1> {
        Site::spinless_fermion()
    }

    fn terms(&self) -> Result<Terms<FermionicU1>> {
        let mut h = Terms::new(self.site(), self.len)?;
        for (range, t) in [(1, self.t), (2, self.t2)] {
            if t == 0.0 {
                continue;
            }
            for i in 0..self.len.saturating_sub(range) {
                h.add(-t, [("Cdag", i), ("C", i + range)])?;
                h.add(-t, [("Cdag", i + range), ("C", i)])?;
            }
        }
        if self.v != 0.0 {
            for i in 0..self.len - 1 {
                h.add(self.v, [("N", i), ("N", i + 1)])?;
            }
        }
        Ok(h)
    }

    fn sector(&self) -> FermionicU1 {
        fermion_charge(self.n as i32)
    }

    fn initial_states(&self) -> Vec<usize> {
        spread(self.n, self.len)
            .into_iter()
            .map(usize::from)
            .collect()
    }
}

/// The Fermi-Hubbard chain: `H = -t sum_{i,s} (c+_{i,s} c_{i+1,s} + h.c.) + U sum_i
/// n_{i,up} n_{i,dn}`, with `n` electrons and total `2 Sz = two_sz`.
#[derive(Clone, Debug, PartialEq)]
pub struct Hubbard {
    /// The number of sites.
    pub len: usize,
    /// The hopping.
    pub t: f64,
    /// The on-site interaction.
    pub u: f64,
    /// The electron number of the sector.
    pub n: usize,
    /// Twice the total `Sz` of the sector.
    pub two_sz: i32,
}

impl ChainModel for Hubbard {
    type Charge = ElectronCharge;

    fn len(&self) -> usize {
        self.len
    }

    fn site(&self) -> Site<ElectronCharge> {
        Site::electron()
    }

    fn terms(&self) -> Result<Terms<ElectronCharge>> {
        let mut h = Terms::new(self.site(), self.len)?;
        if self.t != 0.0 {
            for i in 0..self.len - 1 {
                for (dag, c) in [("Cdagup", "Cup"), ("Cdagdn", "Cdn")] {
                    h.add(-self.t, [(dag, i), (c, i + 1)])?;
                    h.add(-self.t, [(dag, i + 1), (c, i)])?;
                }
            }
        }
        if self.u != 0.0 {
            for i in 0..self.len {
                h.add(self.u, [("NupNdn", i)])?;
            }
        }
        Ok(h)
    }

    fn sector(&self) -> ElectronCharge {
        electron_charge(self.n as i32, self.two_sz)
    }

    fn initial_states(&self) -> Vec<usize> {
        // Basis [empty, up, down, up down]: doubles where needed, singles spread over the
        // rest, their spins spread to give 2 Sz.
        let l = self.len;
        let doubles = self.n.saturating_sub(l);
        let singles = self.n - 2 * doubles;
        let n_up = (self.n as i64 + i64::from(self.two_sz)) as usize / 2;
        let mut single_spread = spread(singles, l - doubles).into_iter();
        let mut up_spread = spread(n_up - doubles, singles).into_iter();
        spread(doubles, l)
            .into_iter()
            .map(|double| {
                if double {
                    3
                } else if single_spread.next().expect("one per free site") {
                    if up_spread.next().expect("one per single") {
                        1
                    } else {
                        2
                    }
                } else {
                    0
                }
            })
            .collect()
    }
}

/// A model by name with its parameters, for a driver: one of the typed models.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    /// `heisenberg`, `xxz` or `j1j2`.
    Spin(SpinChain),
    /// `tv`.
    SpinlessFermions(SpinlessFermions),
    /// `hubbard`.
    Hubbard(Hubbard),
}

/// The model names and their parameters with defaults, for messages and `--help`.
pub const MODELS: [(&str, &str); 5] = [
    (
        "heisenberg",
        "L=16 J=1 hz=0 S=1/2 Sz=0 (0.5 for odd L and S=1/2)",
    ),
    ("xxz", "L=16 Jxy=1 Jz=1 hz=0 S=1/2 Sz=0"),
    ("j1j2", "L=16 J1=1 J2=0.5 hz=0 S=1/2 Sz=0"),
    ("tv", "L=16 t=1 V=0 t2=0 N=L/2"),
    (
        "hubbard",
        "L=8 t=1 U=4 filling=1 Sz=0 (0.5 for an odd electron number)",
    ),
];

/// The parameters of one model, checked and read off one by one.
struct Params<'a> {
    model: &'static str,
    given: Vec<(&'a str, &'a str)>,
}

impl<'a> Params<'a> {
    fn new(model: &'static str, accepted: &[&str], given: Vec<(&'a str, &'a str)>) -> Result<Self> {
        for (k, _) in &given {
            if !accepted.contains(k) {
                return Err(Error::UnknownParameter {
                    model: model.into(),
                    given: (*k).into(),
                    accepted: accepted.join(", "),
                });
            }
        }
        Ok(Self { model, given })
    }

    fn invalid(&self, key: &str, given: &str, expected: &str) -> Error {
        Error::InvalidParameter {
            model: self.model.into(),
            key: key.into(),
            given: given.into(),
            expected: expected.into(),
        }
    }

    fn raw(&self, key: &str) -> Option<&'a str> {
        self.given
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// A finite real number, `default` when absent.
    fn real(&self, key: &str, default: f64) -> Result<f64> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| self.invalid(key, v, "a finite real number")),
        }
    }

    /// A count in `range`, `default` when absent.
    fn count(&self, key: &str, default: usize, min: usize, max: usize) -> Result<usize> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|x| (min..=max).contains(x))
                .ok_or_else(|| self.invalid(key, v, &format!("an integer in {min}..={max}"))),
        }
    }

    /// Twice a half-integer (`0.5`, `-3/2`, `1`), `default` when absent.
    fn twice_half(&self, key: &str, default: i32) -> Result<i32> {
        let Some(v) = self.raw(key) else {
            return Ok(default);
        };
        let x = match v.split_once('/') {
            Some((p, "2")) => p.parse::<i32>().ok().map(f64::from).map(|p| p / 2.0),
            Some(_) => None,
            None => v.parse::<f64>().ok(),
        };
        x.map(|x| 2.0 * x)
            .filter(|t| t.fract() == 0.0 && t.abs() < 1e9)
            .map(|t| t as i32)
            .ok_or_else(|| self.invalid(key, v, "a multiple of 1/2 (0, 0.5, -3/2, ...)"))
    }

    /// The number of sites.
    fn len(&self, default: usize) -> Result<usize> {
        self.count("L", default, 2, 1 << 20)
    }
}

/// Splits `"name:k=v,k=v"` (or spaces) into the name and its pairs.
fn split(spec: &str) -> Result<(&str, Vec<(&str, &str)>)> {
    let spec = spec.trim();
    let (name, rest) = spec
        .split_once(|c: char| c == ':' || c.is_whitespace())
        .unwrap_or((spec, ""));
    let mut pairs = Vec::new();
    for item in rest.split(|c: char| c == ',' || c.is_whitespace()) {
        if item.is_empty() {
            continue;
        }
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| Error::InvalidParameter {
                model: name.into(),
                key: item.into(),
                given: String::new(),
                expected: "key=value".into(),
            })?;
        pairs.push((k.trim(), v.trim()));
    }
    Ok((name, pairs))
}

impl Model {
    /// The model of a spec `"name"` or `"name:key=value,key=value"` (spaces also separate);
    /// see [`MODELS`] for the names, keys and defaults. [`Error::UnknownModel`],
    /// [`Error::UnknownParameter`] or [`Error::InvalidParameter`] (with what is accepted)
    /// otherwise.
    pub fn parse(spec: &str) -> Result<Self> {
        let (name, pairs) = split(spec)?;
        Self::from_parameters(name, &pairs)
    }

    /// The model `name` with `(key, value)` parameters (the last of a repeated key wins).
    pub fn from_parameters(name: &str, parameters: &[(&str, &str)]) -> Result<Self> {
        let given = parameters.to_vec();
        let spin_keys = |extra: &[&'static str]| -> Vec<&'static str> {
            let mut k = vec!["L", "hz", "S", "Sz"];
            k.extend_from_slice(extra);
            k
        };
        match name {
            "heisenberg" | "xxz" | "j1j2" => {
                let (model, extra): (&'static str, &[&'static str]) = match name {
                    "heisenberg" => ("heisenberg", &["J"]),
                    "xxz" => ("xxz", &["Jxy", "Jz"]),
                    _ => ("j1j2", &["J1", "J2"]),
                };
                let p = Params::new(model, &spin_keys(extra), given)?;
                let len = p.len(16)?;
                let spin = match p.raw("S") {
                    None | Some("1/2" | "0.5") => Spin::Half,
                    Some("1") => Spin::One,
                    Some(v) => return Err(p.invalid("S", v, "1/2 or 1")),
                };
                let (jxy, jz, j2) = match model {
                    "heisenberg" => {
                        let j = p.real("J", 1.0)?;
                        (j, j, 0.0)
                    }
                    "xxz" => (p.real("Jxy", 1.0)?, p.real("Jz", 1.0)?, 0.0),
                    _ => {
                        let j1 = p.real("J1", 1.0)?;
                        (j1, j1, p.real("J2", 0.5)?)
                    }
                };
                let per_site = if spin == Spin::Half { 1 } else { 2 };
                let max = (per_site * len) as i32;
                let parity = if spin == Spin::Half { len % 2 } else { 0 } as i32;
                let two_sz = p.twice_half("Sz", parity)?;
                if two_sz.abs() > max || (two_sz - parity) % 2 != 0 {
                    let v = p.raw("Sz").unwrap_or_default();
                    return Err(p.invalid(
                        "Sz",
                        v,
                        &format!(
                            "a total Sz of {len} sites: |Sz| <= {}, {}",
                            f64::from(max) / 2.0,
                            if parity == 1 {
                                "a half-odd integer"
                            } else {
                                "an integer"
                            }
                        ),
                    ));
                }
                Ok(Model::Spin(SpinChain {
                    len,
                    spin,
                    jxy,
                    jz,
                    j2,
                    hz: p.real("hz", 0.0)?,
                    two_sz,
                }))
            }
            "tv" => {
                let p = Params::new("tv", &["L", "t", "V", "t2", "N"], given)?;
                let len = p.len(16)?;
                Ok(Model::SpinlessFermions(SpinlessFermions {
                    len,
                    t: p.real("t", 1.0)?,
                    t2: p.real("t2", 0.0)?,
                    v: p.real("V", 0.0)?,
                    n: p.count("N", len / 2, 0, len)?,
                }))
            }
            "hubbard" => {
                let p = Params::new("hubbard", &["L", "t", "U", "filling", "Sz"], given)?;
                let len = p.len(8)?;
                let filling = p.real("filling", 1.0)?;
                let electrons = filling * len as f64;
                if !(0.0..=2.0).contains(&filling) || (electrons - electrons.round()).abs() > 1e-9 {
                    let v = p.raw("filling").unwrap_or_default();
                    return Err(p.invalid(
                        "filling",
                        v,
                        &format!("electrons per site in 0..=2 with filling * L ({len}) an integer"),
                    ));
                }
                let n = electrons.round() as usize;
                let parity = (n % 2) as i32;
                let two_sz = p.twice_half("Sz", parity)?;
                let max = n.min(2 * len - n) as i32;
                if two_sz.abs() > max || (two_sz - parity) % 2 != 0 {
                    let v = p.raw("Sz").unwrap_or_default();
                    return Err(p.invalid(
                        "Sz",
                        v,
                        &format!(
                            "a total Sz of {n} electrons on {len} sites: |Sz| <= {}, {}",
                            f64::from(max) / 2.0,
                            if parity == 1 {
                                "a half-odd integer"
                            } else {
                                "an integer"
                            }
                        ),
                    ));
                }
                Ok(Model::Hubbard(Hubbard {
                    len,
                    t: p.real("t", 1.0)?,
                    u: p.real("U", 4.0)?,
                    n,
                    two_sz,
                }))
            }
            _ => Err(Error::UnknownModel {
                given: name.into(),
                known: MODELS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The number of sites.
    pub fn len(&self) -> usize {
        match self {
            Model::Spin(m) => m.len,
            Model::SpinlessFermions(m) => m.len,
            Model::Hubbard(m) => m.len,
        }
    }

    /// Always `false`: a model has at least two sites.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A computation generic over the model type, run by [`Model::visit`] on whichever model a
/// [`Model`] holds: a driver writes its run once, for every `M: ChainModel`.
///
/// ```
/// use tessera_mps::models::{ChainModel, Model, ModelVisitor};
///
/// struct BondDimension;
/// impl ModelVisitor for BondDimension {
///     type Output = tessera_mps::Result<usize>;
///     fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
///         Ok(model.mpo()?.max_bond())
///     }
/// }
/// assert_eq!(Model::parse("j1j2:L=8")?.visit(BondDimension)?, 8);
/// assert_eq!(Model::parse("hubbard:L=4")?.visit(BondDimension)?, 6);
/// # Ok::<(), tessera_mps::Error>(())
/// ```
pub trait ModelVisitor {
    /// What the computation returns.
    type Output;
    /// The computation on one typed model.
    fn visit<M: ChainModel>(self, model: &M) -> Self::Output;
}

impl Model {
    /// Runs `visitor` on the typed model this holds.
    pub fn visit<V: ModelVisitor>(&self, visitor: V) -> V::Output {
        match self {
            Model::Spin(m) => visitor.visit(m),
            Model::SpinlessFermions(m) => visitor.visit(m),
            Model::Hubbard(m) => visitor.visit(m),
        }
    }
}

impl FromStr for Model {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Model::Spin(m) => write!(
                f,
                "spin-{} chain L={} Jxy={} Jz={} J2={} hz={} Sz={}",
                if m.spin == Spin::Half { "1/2" } else { "1" },
                m.len,
                m.jxy,
                m.jz,
                m.j2,
                m.hz,
                f64::from(m.two_sz) / 2.0
            ),
            Model::SpinlessFermions(m) => write!(
                f,
                "t-V fermions L={} t={} t2={} V={} N={}",
                m.len, m.t, m.t2, m.v, m.n
            ),
            Model::Hubbard(m) => write!(
                f,
                "Hubbard chain L={} t={} U={} N={} Sz={}",
                m.len,
                m.t,
                m.u,
                m.n,
                f64::from(m.two_sz) / 2.0
            ),
        }
    }
}
