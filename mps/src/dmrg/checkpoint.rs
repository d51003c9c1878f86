//! Checkpoints of a DMRG run: written after a sweep, read back to continue it.
//!
//! Owns: the checkpoint's contents ([`Dmrg::save`]), [`Dmrg::resume`] and the per-sweep
//! writer ([`Dmrg::save_every_sweep`]). Invariants: a checkpoint is one file,
//! [`CHECKPOINT_FILE`] in its directory, replaced atomically (a run killed during a save
//! leaves the previous one); a resume accepts only a checkpoint of the same model (the MPO,
//! compared tensor by tensor), chain length, sector type, bond dimension and solver
//! settings, and otherwise says what was expected and what was found; a resumed run builds
//! its environments from the saved MPS exactly as the uninterrupted run built them, so it
//! sweeps through the same numbers.
//!
//! Layout (names in the [`Checkpoint`]): `dmrg/version`, `dmrg/sector_type`,
//! `dmrg/sites`, `dmrg/sweeps_done`, `dmrg/energies` and `dmrg/cut_short` (one per sweep;
//! the second, the steps an early Lanczos budget stopped short of its tolerance, is read
//! as zeros from a checkpoint written without it), `dmrg/settings/{chi,
//! sweeps, lanczos_iter, lanczos_iter_early}` (integers; the last is not compared when a
//! checkpoint was written without it), `dmrg/settings/{tol, lanczos_tol}` (floats),
//! `dmrg/settings/bra` (a string), `dmrg/discarded` (one per bond), per bond `b` its
//! spectrum as `dmrg/spectrum/{b}/{charges, dims, values}` (the charges' encoded words, the
//! values per charge, all values), and the tensors `mpo/{i}` and `mps/{i}`. The
//! environments are not saved: they are a function of the MPS and the MPO, rebuilt on
//! resume in a fraction of a sweep, and would take several times the space of the MPS.

use std::path::{Path, PathBuf};

use tessera_blocks::AsyncArray;
use tessera_io::{Checkpoint, Saving, SectorCodec};

use super::{AfterSweep, BondSpectrum, Dmrg, Settings};
use crate::{Error, Mpo, Mps, Result};

/// The name of the checkpoint file in a checkpoint directory.
pub const CHECKPOINT_FILE: &str = "dmrg.npz";

/// The version of this layout.
const VERSION: i64 = 1;

fn path_in(dir: &Path) -> PathBuf {
    dir.join(CHECKPOINT_FILE)
}

/// Writes a checkpoint after every sweep, one save in flight at a time.
#[derive(Debug)]
struct EverySweep {
    dir: PathBuf,
    pending: Option<Saving>,
}

impl<S: SectorCodec> AfterSweep<S> for EverySweep {
    fn after_sweep(&mut self, run: &Dmrg<S>) -> Result<()> {
        // The previous save (a sweep ago) must be done before this one replaces its file.
        if let Some(previous) = self.pending.take() {
            previous.wait()?;
        }
        self.pending = Some(run.save(&self.dir)?);
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(previous) = self.pending.take() {
            previous.wait()?;
        }
        Ok(())
    }
}

/// A mismatch between a checkpoint and the run resuming from it.
fn mismatch(path: &Path, what: &str, expected: impl ToString, found: impl ToString) -> Error {
    Error::Resume {
        path: path.to_owned(),
        what: what.to_owned(),
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

impl<S: SectorCodec> Dmrg<S> {
    /// Writes a checkpoint to `dir` after every sweep of [`run`](Self::run) (`dir` is
    /// created if missing); `run` waits for the last one before it returns.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when `dir` cannot be created.
    pub fn save_every_sweep(&mut self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| tessera_io::Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        self.after_sweep = Some(Box::new(EverySweep {
            dir: dir.to_owned(),
            pending: None,
        }));
        Ok(())
    }

    /// Starts writing the checkpoint of the run as it is to `dir/`[`CHECKPOINT_FILE`]: the
    /// MPS, the MPO, the sweeps done, the energies, the spectra and discarded weights, the
    /// settings. The save is a task that waits only for the pending writes of the MPS and
    /// MPO tensors; the run may go on at once (the next step replaces tensors rather than
    /// writing them, so it never waits for the save).
    ///
    /// Call it between sweeps: a checkpoint taken elsewhere resumes as if a sweep had just
    /// ended.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the task cannot be enrolled; the write's own errors come from
    /// [`Saving::wait`].
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<Saving> {
        let mut ck = Checkpoint::new();
        ck.put_i64s("dmrg/version", &[VERSION]);
        ck.put_str("dmrg/sector_type", &S::type_name());
        ck.put_i64s("dmrg/sites", &[self.len() as i64]);
        ck.put_i64s("dmrg/sweeps_done", &[self.sweeps_done as i64]);
        ck.put_f64s("dmrg/energies", &self.energies);
        let cut_short: Vec<i64> = self.cut_short.iter().map(|&n| n as i64).collect();
        ck.put_i64s("dmrg/cut_short", &cut_short);
        let s = &self.settings;
        ck.put_i64s("dmrg/settings/chi", &[s.chi as i64]);
        ck.put_i64s("dmrg/settings/sweeps", &[s.sweeps as i64]);
        ck.put_i64s("dmrg/settings/lanczos_iter", &[s.lanczos_iter as i64]);
        ck.put_i64s(
            "dmrg/settings/lanczos_iter_early",
            &[s.lanczos_iter_early as i64],
        );
        ck.put_f64s("dmrg/settings/tol", &[s.tol]);
        ck.put_f64s("dmrg/settings/lanczos_tol", &[s.lanczos_tol]);
        ck.put_str("dmrg/settings/bra", s.bra.name());
        ck.put_f64s("dmrg/discarded", &self.discarded);
        for (b, spectrum) in self.spectra.iter().enumerate() {
            let Some(spectrum) = spectrum else { continue };
            let mut words = Vec::new();
            let mut dims = Vec::new();
            let mut values = Vec::new();
            for (q, v) in spectrum.iter() {
                q.encode(&mut words);
                dims.push(v.len() as i64);
                values.extend_from_slice(v);
            }
            let words: Vec<i64> = words.into_iter().map(i64::from).collect();
            ck.put_i64s(&format!("dmrg/spectrum/{b}/charges"), &words);
            ck.put_i64s(&format!("dmrg/spectrum/{b}/dims"), &dims);
            ck.put_f64s(&format!("dmrg/spectrum/{b}/values"), &values);
        }
        let names: Vec<String> = (0..self.len())
            .flat_map(|i| [format!("mpo/{i}"), format!("mps/{i}")])
            .collect();
        let tensors: Vec<(&str, &AsyncArray<f64, S>)> = names
            .iter()
            .zip(
                self.mpo
                    .tensors()
                    .iter()
                    .zip(&self.mps)
                    .flat_map(|(w, a)| [w, a]),
            )
            .map(|(n, t)| (n.as_str(), t))
            .collect();
        Ok(ck.save_async(path_in(dir.as_ref()), &tensors)?)
    }

    /// The run of `mpo` continued from the checkpoint in `dir` (written by
    /// [`save`](Self::save) or [`save_every_sweep`](Self::save_every_sweep)) with
    /// `settings`: its MPS, sweeps, energies and spectra restored, its environments rebuilt.
    /// `settings.sweeps` and `settings.tol` may differ from the checkpoint's (they say when
    /// to stop); everything else must agree.
    ///
    /// # Errors
    ///
    /// [`Error::Resume`] naming what differs (sector type, chain length, the MPO, bond
    /// dimension, solver settings, a layout version) with what was expected and what was
    /// found; the checkpoint layer's errors for a missing, truncated or corrupt file; as
    /// [`new`](Self::new) for invalid settings.
    pub fn resume(mpo: Mpo<S>, dir: impl AsRef<Path>, settings: Settings) -> Result<Self> {
        let path = path_in(dir.as_ref());
        let ck = Checkpoint::load(&path)?;
        let int = |name: &str| -> Result<i64> {
            match ck.i64s(name)?.as_slice() {
                [x] => Ok(*x),
                other => Err(mismatch(&path, name, "one integer", format!("{other:?}"))),
            }
        };
        let float = |name: &str| -> Result<f64> {
            match ck.f64s(name)?.as_slice() {
                [x] => Ok(*x),
                other => Err(mismatch(&path, name, "one number", format!("{other:?}"))),
            }
        };
        let version = int("dmrg/version")?;
        if version != VERSION {
            return Err(mismatch(&path, "DMRG checkpoint version", VERSION, version));
        }
        let sector_type = ck.string("dmrg/sector_type")?;
        if sector_type != S::type_name() {
            return Err(mismatch(&path, "sector type", S::type_name(), sector_type));
        }
        let sites = int("dmrg/sites")?;
        if sites != mpo.len() as i64 {
            return Err(mismatch(
                &path,
                "number of sites",
                format!("{} (the MPO's)", mpo.len()),
                sites,
            ));
        }
        let chi = int("dmrg/settings/chi")?;
        if chi != settings.chi as i64 {
            return Err(mismatch(&path, "bond dimension chi", settings.chi, chi));
        }
        let lanczos_iter = int("dmrg/settings/lanczos_iter")?;
        if lanczos_iter != settings.lanczos_iter as i64 {
            return Err(mismatch(
                &path,
                "Lanczos iterations",
                settings.lanczos_iter,
                lanczos_iter,
            ));
        }
        let name = "dmrg/settings/lanczos_iter_early";
        match optional(ck.i64s(name))?.as_deref() {
            None => {}
            Some(&[early]) if early == settings.lanczos_iter_early as i64 => {}
            Some(&[early]) => {
                return Err(mismatch(
                    &path,
                    "Lanczos iterations of an early sweep",
                    settings.lanczos_iter_early,
                    early,
                ));
            }
            Some(other) => return Err(mismatch(&path, name, "one integer", format!("{other:?}"))),
        }
        let lanczos_tol = float("dmrg/settings/lanczos_tol")?;
        if lanczos_tol != settings.lanczos_tol {
            return Err(mismatch(
                &path,
                "Lanczos tolerance",
                settings.lanczos_tol,
                lanczos_tol,
            ));
        }
        let bra = ck.string("dmrg/settings/bra")?;
        if bra != settings.bra.name() {
            return Err(mismatch(&path, "bra", settings.bra.name(), bra));
        }
        // The model: every MPO tensor, structure and values.
        for (i, w) in mpo.tensors().iter().enumerate() {
            let saved = ck.tensor::<f64, S>(&format!("mpo/{i}"))?;
            let differs = if saved.structure() != w.structure() {
                Some(format!(
                    "another MPO tensor at site {i}: {}",
                    saved.structure().summary()
                ))
            } else if saved.to_blocks()? != w.to_blocks()? {
                Some(format!("other MPO values at site {i}"))
            } else {
                None
            };
            if let Some(found) = differs {
                return Err(mismatch(
                    &path,
                    "model",
                    format!(
                        "the MPO of this run (site {i}: {})",
                        w.structure().summary()
                    ),
                    found,
                ));
            }
        }
        let mps = (0..mpo.len())
            .map(|i| ck.tensor::<f64, S>(&format!("mps/{i}")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mps = Mps::new(mps)?;
        let sweeps_done = usize::try_from(int("dmrg/sweeps_done")?).unwrap_or(0);
        let energies = ck.f64s("dmrg/energies")?;
        if energies.len() != sweeps_done || sweeps_done == 0 {
            return Err(mismatch(
                &path,
                "energies",
                format!("one per sweep done ({sweeps_done}), at least one"),
                energies.len(),
            ));
        }
        let cut_short: Vec<usize> = match optional(ck.i64s("dmrg/cut_short"))? {
            None => vec![0; sweeps_done],
            Some(counts) => counts
                .into_iter()
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .collect(),
        };
        if cut_short.len() != sweeps_done {
            return Err(mismatch(
                &path,
                "Lanczos solves cut short",
                format!("one count per sweep done ({sweeps_done})"),
                cut_short.len(),
            ));
        }
        let discarded = ck.f64s("dmrg/discarded")?;
        if discarded.len() != mpo.len() - 1 {
            return Err(mismatch(
                &path,
                "discarded weights",
                format!("one per bond ({})", mpo.len() - 1),
                discarded.len(),
            ));
        }
        let mut spectra = Vec::with_capacity(mpo.len() - 1);
        for b in 0..mpo.len() - 1 {
            spectra.push(spectrum::<S>(&ck, &path, b)?);
        }
        let mut run = Self::unprepared(&tessera_backends::Host, mpo, mps, settings)?;
        // The state of a finished sweep: the centre at the pair (1, 2) after the step on
        // (0, 1) moved right, so left[1] and right[2..] are valid. Built as the sweep built
        // them: right[i] from right[i + 1] (those the back half-sweep built), then left[1].
        let l = run.len();
        for i in (2..l).rev() {
            run.build_right(i)?;
        }
        run.build_left(0)?;
        debug_assert!(run.envs.has_pair(1.min(l - 2)));
        run.sweeps_done = sweeps_done;
        run.energies = energies;
        run.cut_short = cut_short;
        run.discarded = discarded;
        run.spectra = spectra;
        Ok(run)
    }
}

/// An array a checkpoint written before it was added does not have: `None` when missing.
fn optional<T>(found: std::result::Result<T, tessera_io::Error>) -> Result<Option<T>> {
    match found {
        Err(tessera_io::Error::Missing { .. }) => Ok(None),
        found => Ok(Some(found?)),
    }
}

/// The spectrum of bond `b` in `ck`, `None` if none was saved.
fn spectrum<S: SectorCodec>(
    ck: &Checkpoint,
    path: &Path,
    b: usize,
) -> Result<Option<BondSpectrum<S>>> {
    let name = |field: &str| format!("dmrg/spectrum/{b}/{field}");
    let words = match ck.i64s(&name("charges")) {
        Ok(words) => words,
        Err(tessera_io::Error::Missing { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let dims = ck.i64s(&name("dims"))?;
    let values = ck.f64s(&name("values"))?;
    let w = S::ENCODED_WORDS;
    let bad = |expected: String, found: String| mismatch(path, &name("charges"), expected, found);
    if words.len() != dims.len() * w {
        return Err(bad(
            format!("{w} words for each of {} charges", dims.len()),
            format!("{} words", words.len()),
        ));
    }
    let total: i64 = dims.iter().sum();
    if dims.iter().any(|&d| d < 0) || total != values.len() as i64 {
        return Err(bad(
            format!("{} values", values.len()),
            format!("dimensions {dims:?}"),
        ));
    }
    let mut charges = Vec::with_capacity(dims.len());
    for k in 0..dims.len() {
        let chunk: Vec<u32> = words[k * w..(k + 1) * w]
            .iter()
            .map(|&x| x as u32)
            .collect();
        let q = S::decode(&chunk).ok_or_else(|| {
            bad(
                format!("the words of a {} charge", S::type_name()),
                format!("{chunk:?}"),
            )
        })?;
        charges.push(q);
    }
    let mut at = 0;
    let values = dims
        .iter()
        .map(|&d| {
            let v = values[at..at + d as usize].to_vec();
            at += d as usize;
            v
        })
        .collect();
    Ok(Some(BondSpectrum::from_parts(charges, values)))
}
