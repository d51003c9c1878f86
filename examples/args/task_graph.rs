//! The `task_graph` driver's flags. Owns their ranges; invariant: a [`Prepared`] run has
//! every flag in range, at most [`MAX_TASKS`] tasks, and its `--trace` file (if any) open.

use super::{Output, Threads, in_range, threads_parser, usage_error};
use clap::Parser;
use std::path::PathBuf;

/// The most records `--records` takes.
pub(crate) const MAX_RECORDS: u64 = 1 << 20;
/// The most sweeps `--rounds` takes.
pub(crate) const MAX_ROUNDS: u64 = 1 << 24;
/// The most tasks (`--records` x `--rounds`) one run enrolls: every task is enrolled before
/// the first result is read, so this bounds the runtime's memory (about 10 GiB here).
pub(crate) const MAX_TASKS: usize = 1 << 26;

/// A ring of values swept in program order by dependent tasks, checked against a sequential
/// replay.
#[derive(Parser, Debug, Clone)]
#[command(name = "task_graph", allow_negative_numbers = true)]
pub(crate) struct Args {
    /// Values on the ring (3..=1048576).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = in_range(3, MAX_RECORDS))]
    pub(crate) records: usize,
    /// Sweeps over the ring (1..=16777216; records x rounds at most 2^26 tasks).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = in_range(1, MAX_ROUNDS))]
    pub(crate) rounds: usize,
    /// Worker threads (0..=1024; 0: one per available core).
    #[arg(long, value_name = "T", default_value_t = 0, value_parser = threads_parser())]
    pub(crate) threads: usize,
    /// Write the runtime's task timeline here as Chrome trace-event JSON (Perfetto opens it);
    /// opened before the run.
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<PathBuf>,
}

/// A run the flags allow.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The flags.
    pub(crate) args: Args,
    /// `--records` x `--rounds`.
    pub(crate) tasks: usize,
    /// The workers, `--threads` resolved.
    pub(crate) threads: Threads,
    /// `--trace`, open.
    pub(crate) trace: Option<Output>,
}

impl Args {
    /// Checks the task count, resolves `--threads` and opens `--trace`, or the usage error
    /// naming the flag.
    pub(crate) fn prepare(self) -> Result<Prepared, clap::Error> {
        let tasks = self
            .records
            .checked_mul(self.rounds)
            .filter(|&t| t <= MAX_TASKS)
            .ok_or_else(|| {
                usage_error::<Args>(
                    "--rounds",
                    format!(
                        "--records {} x --rounds {} is above the {MAX_TASKS} tasks one run \
                         enrolls; lower one of them",
                        self.records, self.rounds
                    ),
                )
            })?;
        let trace = match &self.trace {
            Some(path) => Some(Output::open::<Args>("--trace", path)?),
            None => None,
        };
        Ok(Prepared {
            tasks,
            threads: Threads::resolve(self.threads),
            trace,
            args: self,
        })
    }
}
