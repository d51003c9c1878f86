//! Errors of the core runtime.
//!
//! Owns: [`Error`], the one error type of `tessera-core`, and [`TaskFailure`], the record of a
//! failed task that travels with the epochs it poisoned. Invariant: a failure is created once,
//! by the task that failed, and every dependant carries that same `Arc` (so an error always
//! names its origin, however far it travelled).

use std::fmt;
use std::sync::Arc;

/// The error a kernel returns: any error type, boxed.
pub type KernelError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The identity of a scheduled task: unique within the process, increasing in enrollment order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task #{}", self.0)
    }
}

/// The identity of a hazard record: unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(pub u64);

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hazard record r{}", self.0)
    }
}

/// Why a task failed.
#[derive(Debug)]
pub enum FailureCause {
    /// The kernel returned an error.
    Error(KernelError),
    /// The kernel panicked; the panic message, when it was a string.
    Panic(String),
    /// A buffer could not be resolved to a view (for example an unconstructed value).
    Resolve(Error),
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureCause::Error(e) => write!(f, "kernel returned an error: {e}"),
            FailureCause::Panic(m) => write!(f, "kernel panicked: {m}"),
            FailureCause::Resolve(e) => write!(f, "a buffer could not be resolved: {e}"),
        }
    }
}

/// The record of one failed task: which task, its name, and why.
#[derive(Debug)]
pub struct TaskFailure {
    /// The task that failed.
    pub task: TaskId,
    /// The name it was scheduled under.
    pub name: &'static str,
    /// What went wrong.
    pub cause: FailureCause,
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (`{}`) failed: {}", self.task, self.name, self.cause)
    }
}

impl Error {
    /// The typed error `E` that the failed task behind a [`Poisoned`](Error::Poisoned) value
    /// returned, if it returned one of that type: how a layer reads its own errors back
    /// out of a poison.
    pub fn task_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Poisoned { origin } => match &origin.cause {
                FailureCause::Error(e) => e.downcast_ref::<E>(),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Errors of the core runtime. Every variant says what was expected and what was given.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The value (or an input of the work that produced it) was poisoned by a failed task.
    #[error("expected a value computed without error, but it was poisoned: {origin}")]
    Poisoned {
        /// The task whose failure poisoned this value.
        origin: Arc<TaskFailure>,
    },
    /// One task declared the same hazard record as an output and as another access.
    #[error(
        "an output must not share a hazard record with another access of the same task, \
         but {record} was declared as {first} and as {second}"
    )]
    Alias {
        /// The shared record.
        record: RecordId,
        /// How the record was declared first.
        first: &'static str,
        /// How it was declared again.
        second: &'static str,
    },
    /// A host wait was attempted inside a task, where a worker must never block.
    #[error(
        "expected a host wait on a thread outside the worker pool, but it was called inside \
         {task}: a worker never blocks on another task; declare the value as an access instead"
    )]
    WaitInsideTask {
        /// The task that tried to wait.
        task: TaskId,
    },
    /// A host wait was attempted on a worker thread of a runtime (inside `Runtime::install`,
    /// or in a rayon job started by a kernel), where it could park the worker it waits for.
    #[error(
        "expected a host wait on a thread outside the worker pools, but it was called on \
         worker thread `{thread}`; declare the value as an access of a task instead"
    )]
    WaitOnWorker {
        /// The worker thread's name.
        thread: String,
    },
    /// A value was read before any write constructed it.
    #[error(
        "expected a constructed value, but {record} holds none (its producing write has not succeeded)"
    )]
    Unconstructed {
        /// The record of the value.
        record: RecordId,
    },
    /// A runtime could not be built.
    #[error("could not start a runtime with {threads} worker threads: {message}")]
    Runtime {
        /// The requested number of workers.
        threads: usize,
        /// What the thread pool reported.
        message: String,
    },
}

/// Errors compare by value; two poisoned errors are equal when they name the very same failure.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        use Error::*;
        match (self, other) {
            (Poisoned { origin: a }, Poisoned { origin: b }) => Arc::ptr_eq(a, b),
            (
                Alias {
                    record,
                    first,
                    second,
                },
                Alias {
                    record: r,
                    first: f,
                    second: s,
                },
            ) => (record, first, second) == (r, f, s),
            (WaitInsideTask { task: a }, WaitInsideTask { task: b }) => a == b,
            (WaitOnWorker { thread: a }, WaitOnWorker { thread: b }) => a == b,
            (Unconstructed { record: a }, Unconstructed { record: b }) => a == b,
            (
                Runtime { threads, message },
                Runtime {
                    threads: t,
                    message: m,
                },
            ) => (threads, message) == (t, m),
            _ => false,
        }
    }
}

/// `Result` with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
