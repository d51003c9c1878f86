//! Deferred tasks: tasks whose work completes outside the runtime (a message that arrives, a
//! transfer another thread drives).
//!
//! Owns: [`Completion`], the handle of a started deferred task, and the scheduling of such
//! tasks ([`Runtime::schedule_deferred_named`]). Invariants:
//!
//! - A deferred task is enrolled like any task: at the call, in program order, on every
//!   record it declares. Once it is ready its `start` runs with a [`Completion`], and the
//!   task stays *running* until that handle is completed, failed or dropped, on any thread:
//!   until then its buffers (the owner tokens of the storage it touches) stay held, and
//!   every later access of what it writes, or later write of what it reads, keeps waiting.
//! - Exactly one outcome is published: [`Completion::complete`] and [`Completion::fail`]
//!   consume the handle, and dropping a handle that was neither fails the task (so no
//!   successor, and no host read, waits forever for work that was abandoned).
//! - As for any task, the outcome is published on the written records, then the buffers are
//!   dropped, then the successors are released.
//! - `start` runs even when an input is poisoned (the work it starts may have to happen
//!   anyway: a receiver on another process waits for a message, which must then say that
//!   the data is poisoned). [`Completion::poisoned`] says so, and completing such a task
//!   runs no closure: it publishes the inherited failure.

use crate::access::{Access, AccessList};
use crate::error::{FailureCause, KernelError, Result, TaskFailure, TaskId};
use crate::primitive::Arc;
use crate::runtime::{Body, Placement, Runtime, complete_and_dispatch, publish, run_kernel};
use crate::task::TaskNode;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The type-erased state of a started deferred task: what publishing its outcome needs.
pub(crate) struct Deferred {
    pub(crate) node: Arc<TaskNode>,
    pub(crate) runtime: Runtime,
    pub(crate) name: &'static str,
    pub(crate) accesses: AccessList,
    /// The failure a poisoned input carries.
    pub(crate) inherited: Option<std::sync::Arc<TaskFailure>>,
    /// When the task started, while the runtime records a trace.
    pub(crate) started: Option<std::time::Instant>,
}

/// The handle of a started deferred task (see [`Runtime::schedule_deferred_named`]): the task
/// is running until this is completed, failed or dropped, on whatever thread holds it.
pub struct Completion<A: Access> {
    /// `None` once the outcome is published.
    state: Option<Deferred>,
    /// The task's buffers; `None` once dropped (after publishing).
    access: Option<A>,
}

impl<A: Access> std::fmt::Debug for Completion<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Completion");
        if let Some(state) = &self.state {
            d.field("task", &state.node.id()).field("name", &state.name);
        }
        d.finish_non_exhaustive()
    }
}

impl<A: Access> Completion<A> {
    fn state(&self) -> &Deferred {
        self.state
            .as_ref()
            .expect("a completion is published only when consumed or dropped")
    }

    /// The task this completes.
    pub fn task(&self) -> TaskId {
        self.state().node.id()
    }

    /// The failure an input of the task carries, if one is poisoned: completing the task
    /// then publishes that failure and runs nothing.
    pub fn poisoned(&self) -> Option<&TaskFailure> {
        self.state().inherited.as_deref()
    }

    /// Runs `f` over the task's views (unless an input is poisoned), here, on this thread;
    /// publishes its outcome (an error or a panic poisons what the task writes) and
    /// releases the task's successors.
    pub fn complete(mut self, f: impl FnOnce(A::View<'_>) -> std::result::Result<(), KernelError>) {
        let state = self.state();
        let outcome = match &state.inherited {
            Some(origin) => Err(std::sync::Arc::clone(origin)),
            None => {
                let (id, name) = (state.node.id(), state.name);
                let access = self.access.as_mut().expect("buffers held until published");
                run_kernel(id, name, move || {
                    // SAFETY: `start` ran only once the node was ready, that is once every
                    // epoch the access declares was reached, and the node is not complete
                    // (its successors wait) until `finish` below; the views live only for
                    // this call, while `self` holds the buffers.
                    let views = unsafe { access.resolve() }.map_err(FailureCause::Resolve)?;
                    f(views).map_err(FailureCause::Error)
                })
            }
        };
        self.finish(outcome);
    }

    /// Fails the task with `error` (or with the inherited failure of a poisoned input):
    /// what it writes is poisoned, and its successors are released.
    pub fn fail(mut self, error: KernelError) {
        let outcome = self.failure(FailureCause::Error(error));
        self.finish(outcome);
    }

    fn failure(&self, cause: FailureCause) -> std::result::Result<(), std::sync::Arc<TaskFailure>> {
        let state = self.state();
        Err(match &state.inherited {
            Some(origin) => std::sync::Arc::clone(origin),
            None => std::sync::Arc::new(TaskFailure {
                task: state.node.id(),
                name: state.name,
                cause,
            }),
        })
    }

    /// Publishes `outcome`, drops the buffers, then releases the successors.
    fn finish(&mut self, outcome: std::result::Result<(), std::sync::Arc<TaskFailure>>) {
        let Some(state) = self.state.take() else {
            return;
        };
        publish(
            &state.runtime,
            state.node.id(),
            state.name,
            &state.accesses,
            outcome,
            state.started,
        );
        // The buffers hold user values: a panicking `Drop` must not unwind out of here.
        let access = self.access.take();
        let _ = catch_unwind(AssertUnwindSafe(move || drop(access)));
        complete_and_dispatch(&state.node);
    }
}

impl<A: Access> Drop for Completion<A> {
    fn drop(&mut self) {
        if self.state.is_some() {
            let outcome = self.failure(FailureCause::Panic(
                "a deferred task's completion was dropped before it completed".to_owned(),
            ));
            self.finish(outcome);
        }
    }
}

impl Runtime {
    /// Schedules a *deferred* task over `access`: enrolled here like any task; once it is
    /// ready, `start` runs with the task's [`Completion`] and hands it to whatever finishes
    /// the work (a communication thread, a callback), which completes it on its own thread.
    /// Until then the task is running: what it writes is not readable and what it reads is
    /// not writable, by later tasks and host accesses alike.
    ///
    /// `start` must return promptly, without waiting for the work: it runs on a worker, or
    /// on this thread before this returns when the task waits for nothing (like
    /// [`schedule_eager_named`](Runtime::schedule_eager_named)). It runs even when an input is
    /// poisoned ([`Completion::poisoned`]). A `start` that panics, or drops the completion,
    /// fails the task.
    ///
    /// ```
    /// use tessera_core::{Async, Runtime};
    ///
    /// let rt = Runtime::new(2)?;
    /// let a = Async::new(0.0_f64);
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// // The task starts at once (nothing to wait for) and hands its completion over.
    /// rt.schedule_deferred_named("arrives later", a.write(), move |done| {
    ///     tx.send(done).unwrap();
    /// })?;
    /// let other = std::thread::spawn(move || {
    ///     let done = rx.recv().unwrap();
    ///     done.complete(|a| {
    ///         *a = 42.0;
    ///         Ok(())
    ///     });
    /// });
    /// // The host read waits for the completion, on whatever thread it happens.
    /// assert_eq!(a.get()?, 42.0);
    /// other.join().unwrap();
    /// # Ok::<(), tessera_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule`](crate::schedule).
    pub fn schedule_deferred_named<A, F>(
        &self,
        name: &'static str,
        access: A,
        start: F,
    ) -> Result<TaskId>
    where
        A: Access,
        F: FnOnce(Completion<A>) + Send + 'static,
    {
        let (node, accesses) = self.enroll_access(&access)?;
        let id = node.id();
        let body = Body::Defer(Box::new(move |state: Deferred| {
            start(Completion {
                state: Some(state),
                access: Some(access),
            });
        }));
        self.attach_and_release(node, name, accesses, body, Placement::Eager);
        Ok(id)
    }
}

/// [`Runtime::schedule_deferred_named`] on the [current](Runtime::current) runtime.
///
/// # Errors
///
/// As [`schedule`](crate::schedule).
pub fn schedule_deferred_named<A, F>(name: &'static str, access: A, start: F) -> Result<TaskId>
where
    A: Access,
    F: FnOnce(Completion<A>) + Send + 'static,
{
    Runtime::current().schedule_deferred_named(name, access, start)
}
