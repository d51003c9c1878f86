//! The example drivers' command lines: the flags of `dmrg`, `block_gemm`, `task_graph` and `ccsd`,
//! each a clap derive `Args` in one style, and the checks made before a run starts.
//!
//! Owns: every flag's range (stated in its help and in the driver's module docs), `--threads`
//! (`0`: all cores), and the output files (`--trace`, `--json`), which are opened for writing
//! before anything runs. Invariant: a driver runs only once its flags parsed into their ranges,
//! the combined checks (`prepare`) passed and every output file is open; anything else is a
//! [`clap::Error`], which prints the usage, names the flag and exits with status 2. A flag
//! given twice is an error (clap's `ArgAction::Set`), as is one the driver does not know.
//!
//! Shared by the four drivers (each includes this directory with `#[path]`) and by
//! `tests/drivers.rs`, which parses through it directly.

pub(crate) mod block_gemm;
pub(crate) mod ccsd;
pub(crate) mod dmrg;
pub(crate) mod task_graph;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use std::fs::{File, OpenOptions};
use std::io::{Seek as _, Write as _};
use std::path::{Path, PathBuf};

/// The most worker threads `--threads` takes.
pub(crate) const MAX_THREADS: usize = 1024;

/// A `usize` flag's parser that takes `lo..=hi` only (clap's error names the flag and the
/// range).
pub(crate) fn in_range(lo: u64, hi: u64) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::<usize>::new().range(lo..=hi)
}

/// `--threads`: `0..=MAX_THREADS`, `0` meaning one per available core.
pub(crate) fn threads_parser() -> RangedU64ValueParser<usize> {
    in_range(0, MAX_THREADS as u64)
}

/// The worker count that a `--threads` value means, and how to say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Threads {
    /// The value given (`0`: all cores).
    pub(crate) requested: usize,
    /// The workers started.
    pub(crate) count: usize,
}

impl Threads {
    /// `requested` resolved: `0` is the number of available cores (1 where that is unknown).
    pub(crate) fn resolve(requested: usize) -> Self {
        let count = if requested == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            requested
        };
        Self { requested, count }
    }
}

impl std::fmt::Display for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.count == 1 { "thread" } else { "threads" };
        if self.requested == 0 {
            write!(f, "{} {noun} (--threads 0: all cores)", self.count)
        } else {
            write!(f, "{} {noun}", self.count)
        }
    }
}

/// The flags of this process's command line, checked by `prepare`, or (a bad flag, an
/// output that cannot be opened) the error and the usage on stderr and exit status 2.
/// `--help` prints the help and exits with status 0.
pub(crate) fn parse_or_exit<A: Parser, P>(prepare: impl FnOnce(A) -> Result<P, clap::Error>) -> P {
    match A::try_parse().and_then(prepare) {
        Ok(p) => p,
        Err(e) => exit(&with_usage::<A>(e)),
    }
}

/// `e` as printed: clap's message, with the usage added where clap leaves it out (an invalid
/// value names the flag but shows no usage line).
pub(crate) fn with_usage<A: CommandFactory>(e: clap::Error) -> Result<String, clap::Error> {
    if !e.use_stderr() {
        return Err(e); // --help, --version: clap prints them and exits with status 0
    }
    let text = e.render().to_string();
    if text.contains("Usage:") {
        return Ok(text);
    }
    let usage = A::command().render_usage().to_string();
    Ok(match text.find("\nFor more information") {
        Some(at) => format!("{}\n{usage}\n{}", &text[..at], &text[at..]),
        None => format!("{}\n{usage}\n", text.trim_end()),
    })
}

fn exit(message: &Result<String, clap::Error>) -> ! {
    match message {
        Ok(text) => {
            eprint!("{text}");
            std::process::exit(USAGE_EXIT);
        }
        Err(e) => e.exit(),
    }
}

/// The exit status of a refused command line (clap's).
pub(crate) const USAGE_EXIT: i32 = 2;

/// A non-negative finite `f64` (a tolerance).
pub(crate) fn non_negative(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number >= 0"))
    }
}

/// The error a driver reports for `flag` before its run: clap's usage, `message`, exit
/// status 2.
pub(crate) fn usage_error<A: CommandFactory>(
    flag: &str,
    message: impl std::fmt::Display,
) -> clap::Error {
    A::command().error(ErrorKind::ValueValidation, format!("{flag}: {message}"))
}

/// An output file opened for writing before the run (so an unwritable path is reported
/// before any work, naming it). The file is created if missing and left as it was until
/// [`Output::write`]; if it was created here and is never written (the run failed), dropping
/// the `Output` removes it again.
#[derive(Debug)]
pub(crate) struct Output {
    flag: &'static str,
    path: PathBuf,
    file: File,
    created: bool,
    written: bool,
}

impl Output {
    /// Opens `path` for `flag` (for writing, creating it, not truncating it), or the usage
    /// error of command `A` naming the flag, the path and why.
    pub(crate) fn open<A: CommandFactory>(
        flag: &'static str,
        path: &Path,
    ) -> Result<Self, clap::Error> {
        let existed = path.exists();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| {
                usage_error::<A>(
                    flag,
                    format!("cannot open {} for writing: {e}", path.display()),
                )
            })?;
        Ok(Self {
            flag,
            path: path.to_owned(),
            file,
            created: !existed,
            written: false,
        })
    }

    /// The path, as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents with `bytes`; an error names the flag and the path.
    pub(crate) fn write(mut self, bytes: &[u8]) -> Result<(), String> {
        let result = (|| -> std::io::Result<()> {
            self.file.set_len(0)?;
            self.file.rewind()?;
            self.file.write_all(bytes)?;
            self.file.flush()
        })();
        self.written = true;
        result.map_err(|e| format!("{} {}: writing failed: {e}", self.flag, self.path.display()))
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if self.created && !self.written {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
