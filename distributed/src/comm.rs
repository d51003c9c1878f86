//! The communication layer: this process's place in the MPI job, and the thread that moves
//! its messages.
//!
//! Owns: [`World`] (MPI initialised with thread level `Multiple`), [`Comm`] (the handle
//! arrays and operations hold), the progress thread, and the mailbox that matches arrived
//! frames with the receives waiting for them. Invariants:
//!
//! - Only the progress thread touches MPI after initialisation, through its own duplicate of
//!   the world communicator: tasks and the host hand it frames to send and register the
//!   frames they expect, and never block on MPI themselves. So a worker never waits for a
//!   peer, and no interleaving of two ranks' tasks can deadlock on a message.
//! - A frame is keyed by (source rank, operation, item). Operation numbers are drawn in
//!   program order, one per distributed operation, before the operation checks anything:
//!   operations are collective (every rank calls them, in the same order), so the numbers
//!   agree on every rank.
//! - A frame is delivered exactly once: to the receive registered for its key, or kept until
//!   that receive registers.
//! - A rank whose operation fails on it tells every rank (an *abort* frame) before it returns
//!   the error: every receive of that operation from it, registered or to come, fails with
//!   that error. Its operation numbers still agree with the others' (it drew this one), so a
//!   program that handles the error and goes on stays in step. A rank that stops (its
//!   `World` dropped, after an error or at the end) says so (a *leave* frame): every receive
//!   from it still undelivered fails, naming its last error. Frames between two ranks
//!   arrive in the order sent, so nothing it sent before is lost.
//! - Shutdown: a rank stops once every send task it scheduled has handed its frames over;
//!   then the progress thread stops once its sends have completed and every rank has
//!   reached the same point (a non-blocking barrier while it keeps receiving), so no rank
//!   finalises MPI while a peer still sends to it. After that every receive still waiting,
//!   and every one registered later, fails: no frame can arrive.

use crate::error::Error;
use mpi::Threading;
use mpi::collective::CommunicatorCollectives;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Why a receive fails once this rank's `World` is gone.
const CLOSED: &str = "this rank's World was dropped before the frame arrived";

/// The one tag every frame travels under (frames carry their key in their header).
const TAG: i32 = 7;
/// Bytes of a frame's header: operation, item, kind.
const HEADER: usize = 24;

/// What a frame carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u64)]
enum Kind {
    /// The bytes of a block or a value.
    Data = 0,
    /// The data is poisoned on the sender; the payload is the failure, as text.
    Poisoned = 1,
    /// The sender's operation failed; the payload is its error. Every receive of that
    /// operation from it fails.
    Abort = 2,
    /// The sender stopped (its `World` was dropped); the payload says why. Every receive
    /// from it that is still to be delivered fails.
    Leave = 3,
}

/// What a receive gets.
#[derive(Debug)]
pub(crate) enum Frame {
    /// The payload bytes: `bytes[HEADER..]`.
    Data(Vec<u8>),
    /// The sender's data was poisoned, or the sender failed: why, from `rank`.
    Failed {
        /// The rank the failure comes from.
        rank: usize,
        /// Its description.
        message: String,
    },
}

impl Frame {
    /// The payload of a data frame.
    pub(crate) fn payload(&self) -> Result<&[u8], Error> {
        match self {
            Frame::Data(bytes) => Ok(&bytes[HEADER..]),
            Frame::Failed { rank, message } => Err(Error::Remote {
                rank: *rank,
                message: message.clone(),
            }),
        }
    }
}

type Waiter = Box<dyn FnOnce(Frame) + Send>;

/// (source rank, operation, item).
type Key = (usize, u64, u64);

#[derive(Default)]
struct Mailbox {
    arrived: HashMap<Key, Frame>,
    waiting: HashMap<Key, Waiter>,
    /// Operations that failed on a rank: (rank, operation) and its error.
    aborted: HashMap<(usize, u64), String>,
    /// Ranks that stopped, and why.
    left: HashMap<usize, String>,
    /// This rank's `World` was dropped: no frame arrives any more.
    closed: bool,
}

impl Mailbox {
    /// Why a receive of `key` will never get its frame, if it will not.
    fn failure(&self, key: Key) -> Option<&str> {
        self.aborted
            .get(&(key.0, key.1))
            .or_else(|| self.left.get(&key.0))
            .map(String::as_str)
            .or(self.closed.then_some(CLOSED))
    }

    /// Takes the waiters `which` selects, each with the failure `message` from `rank`.
    fn fail_waiting(
        &mut self,
        rank: usize,
        message: &str,
        which: impl Fn(&Key) -> bool,
    ) -> Vec<(Waiter, Frame)> {
        let keys: Vec<Key> = self.waiting.keys().filter(|k| which(k)).copied().collect();
        keys.into_iter()
            .map(|k| {
                let w = self.waiting.remove(&k).expect("listed");
                let f = Frame::Failed {
                    rank,
                    message: message.to_owned(),
                };
                (w, f)
            })
            .collect()
    }
}

struct Outgoing {
    dest: i32,
    bytes: Vec<u8>,
}

/// The state the host, the tasks and the progress thread share.
struct Shared {
    outbox: Mutex<Vec<Outgoing>>,
    mailbox: Mutex<Mailbox>,
    stop: AtomicBool,
    /// The progress thread, to wake when there is something to send.
    thread: std::sync::OnceLock<std::thread::Thread>,
    sent_bytes: AtomicU64,
    sent_frames: AtomicU64,
    /// The last error an operation of this rank aborted with (told to the others when it
    /// stops).
    last_error: Mutex<Option<String>>,
    /// Send tasks scheduled that have not handed their frames over yet: a rank stops only
    /// when there are none (its leave frame must follow everything it was to send).
    pending_sends: AtomicU64,
}

/// Counts one send task from its scheduling until it has handed its frames over (or was
/// dropped unrun): dropping the guard ends it.
pub(crate) struct SendGuard(Arc<Shared>);

impl Drop for SendGuard {
    fn drop(&mut self) {
        self.0.pending_sends.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks (waiters run after they are released).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    fn post(&self, dest: usize, op: u64, item: u64, kind: Kind, payload: &[u8]) {
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        for word in [op, item, kind as u64] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(payload);
        self.sent_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.sent_frames.fetch_add(1, Ordering::Relaxed);
        let dest = i32::try_from(dest).expect("ranks fit an MPI rank");
        lock(&self.outbox).push(Outgoing { dest, bytes });
        self.wake();
    }

    /// Hands an arrived frame to its receive, or keeps it.
    fn deliver(&self, source: usize, bytes: Vec<u8>) {
        let word = |i: usize| {
            let b: [u8; 8] = bytes[8 * i..8 * i + 8].try_into().expect("8 bytes");
            u64::from_le_bytes(b)
        };
        let (op, item, kind) = (word(0), word(1), word(2));
        let text = || String::from_utf8_lossy(&bytes[HEADER..]).into_owned();
        let key = (source, op, item);
        let ready: Vec<(Waiter, Frame)> = {
            let mut mb = lock(&self.mailbox);
            match kind {
                k if k == Kind::Abort as u64 => {
                    let message = text();
                    let failed = mb.fail_waiting(source, &message, |k| k.0 == source && k.1 == op);
                    mb.aborted.insert((source, op), message);
                    failed
                }
                k if k == Kind::Leave as u64 => {
                    let message = text();
                    let failed = mb.fail_waiting(source, &message, |k| k.0 == source);
                    mb.left.insert(source, message);
                    failed
                }
                _ => {
                    let frame = if kind == Kind::Data as u64 {
                        Frame::Data(bytes)
                    } else {
                        Frame::Failed {
                            rank: source,
                            message: text(),
                        }
                    };
                    match mb.waiting.remove(&key) {
                        Some(w) => vec![(w, frame)],
                        None => {
                            mb.arrived.insert(key, frame);
                            Vec::new()
                        }
                    }
                }
            }
        };
        // Outside the lock: a waiter completes a task, which may release others.
        for (w, f) in ready {
            w(f);
        }
    }

    /// Calls `waiter` with the frame for `key` once it is here (now, if it is).
    fn expect(&self, key: Key, waiter: Waiter) {
        let frame = {
            let mut mb = lock(&self.mailbox);
            if let Some(f) = mb.arrived.remove(&key) {
                f
            } else if let Some(message) = mb.failure(key) {
                Frame::Failed {
                    rank: key.0,
                    message: message.to_owned(),
                }
            } else {
                mb.waiting.insert(key, waiter);
                return;
            }
        };
        waiter(frame);
    }
}

/// The handle distributed arrays and operations hold: this rank, the job's size, and the way
/// to the progress thread. Cheap to clone.
#[derive(Clone)]
pub struct Comm {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
    next_op: Arc<AtomicU64>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// The identity of one distributed operation: its number, the same on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Op(pub(crate) u64);

impl Comm {
    /// This process's rank, `0..size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes and frames this rank has handed to MPI so far (headers included).
    pub fn sent(&self) -> (u64, u64) {
        (
            self.shared.sent_bytes.load(Ordering::Relaxed),
            self.shared.sent_frames.load(Ordering::Relaxed),
        )
    }

    /// Draws the next operation number. Every distributed operation calls this first, before
    /// it checks anything, so the numbers agree on every rank.
    pub(crate) fn begin(&self) -> Op {
        Op(self.next_op.fetch_add(1, Ordering::Relaxed))
    }

    /// Counts a send task until the guard is dropped (see [`SendGuard`]).
    pub(crate) fn send_guard(&self) -> SendGuard {
        self.shared.pending_sends.fetch_add(1, Ordering::AcqRel);
        SendGuard(Arc::clone(&self.shared))
    }

    /// Sends `payload` to `dest` as item `item` of `op`.
    pub(crate) fn send(&self, dest: usize, op: Op, item: u64, payload: &[u8]) {
        self.shared.post(dest, op.0, item, Kind::Data, payload);
    }

    /// Tells `dest` that item `item` of `op` is poisoned here, and why.
    pub(crate) fn send_poison(&self, dest: usize, op: Op, item: u64, why: &str) {
        self.shared
            .post(dest, op.0, item, Kind::Poisoned, why.as_bytes());
    }

    /// Calls `waiter` (on whatever thread delivers it) with item `item` of `op` from `source`.
    pub(crate) fn expect(
        &self,
        source: usize,
        op: Op,
        item: u64,
        waiter: impl FnOnce(Frame) + Send + 'static,
    ) {
        self.shared.expect((source, op.0, item), Box::new(waiter));
    }

    /// Tells every other rank that `op` failed here with `error`, and returns the error: they
    /// fail what they expect from this rank instead of waiting for it.
    pub(crate) fn abort(&self, op: Op, error: Error) -> Error {
        let message = error.to_string();
        *lock(&self.shared.last_error) = Some(message.clone());
        for dest in (0..self.size).filter(|&r| r != self.rank) {
            self.shared
                .post(dest, op.0, u64::MAX, Kind::Abort, message.as_bytes());
        }
        error
    }

    /// Runs `f`; if it fails, aborts `op` with its error (see [`abort`](Self::abort)).
    pub(crate) fn or_abort<R>(
        &self,
        op: Op,
        f: impl FnOnce() -> Result<R, Error>,
    ) -> Result<R, Error> {
        f().map_err(|e| self.abort(op, e))
    }
}

/// MPI for this process: initialised (thread level `Multiple`) when made, finalised when
/// dropped, with the progress thread that moves this rank's messages in between.
///
/// One per process. Every distributed operation is collective: every rank calls it, in the
/// same order (the usual SPMD program), and none blocks on a peer: results are arrays whose
/// blocks are written by tasks, and host reads wait for exactly the blocks they read.
pub struct World {
    comm: Comm,
    progress: Option<JoinHandle<()>>,
    // Dropped last: finalises MPI.
    _universe: mpi::environment::Universe,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("comm", &self.comm).finish()
    }
}

/// The progress thread's communicator.
struct SendComm(SimpleCommunicator);

// SAFETY: MPI is initialised with thread level Multiple (checked in `World::init`), so any
// thread may call it; this communicator is used by the progress thread alone.
unsafe impl Send for SendComm {}

/// A send in flight: MPI reads `buf` until the request completes.
struct InFlight {
    request: Request<'static, [u8], StaticScope>,
    buf: *mut [u8],
}

impl World {
    /// Initialises MPI with thread level `Multiple` and starts the progress thread.
    ///
    /// # Errors
    ///
    /// [`Error::Init`] when MPI was initialised already, or grants less than `Multiple`.
    pub fn init() -> Result<Self, Error> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| Error::Init {
                given: "MPI was initialised already".to_owned(),
            })?;
        if threading != Threading::Multiple {
            return Err(Error::Init {
                given: format!("the MPI library grants only {threading:?}"),
            });
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let p2p = SendComm(world.duplicate());
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Vec::new()),
            mailbox: Mutex::new(Mailbox::default()),
            stop: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            sent_bytes: AtomicU64::new(0),
            sent_frames: AtomicU64::new(0),
            last_error: Mutex::new(None),
            pending_sends: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let progress = std::thread::Builder::new()
            .name(format!("tessera-mpi-{rank}"))
            .spawn(move || progress(p2p, &s))
            .map_err(|e| Error::Init {
                given: format!("the progress thread could not start: {e}"),
            })?;
        shared
            .thread
            .set(progress.thread().clone())
            .expect("set once");
        Ok(Self {
            comm: Comm {
                rank,
                size,
                shared,
                next_op: Arc::new(AtomicU64::new(0)),
            },
            progress: Some(progress),
            _universe: universe,
        })
    }

    /// The handle arrays and operations take.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Every send task hands its frames over first (the progress thread runs meanwhile):
        // a send may wait for a block that a frame from a peer is still to fill.
        while self.comm.shared.pending_sends.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        // Whatever a peer still expects from this rank will not come: say so, and why.
        let why = match lock(&self.comm.shared.last_error).take() {
            Some(e) => format!("it stopped after an error: {e}"),
            None => "it stopped before sending what this rank expected".to_owned(),
        };
        let me = self.comm.rank;
        for dest in (0..self.comm.size).filter(|&r| r != me) {
            self.comm
                .shared
                .post(dest, u64::MAX, u64::MAX, Kind::Leave, why.as_bytes());
        }
        self.comm.shared.stop.store(true, Ordering::Release);
        self.comm.shared.wake();
        if let Some(t) = self.progress.take() {
            let _ = t.join();
        }
        // Nothing delivers frames any more: what still waits, and what will, fails.
        let failed = {
            let mut mb = lock(&self.comm.shared.mailbox);
            mb.closed = true;
            mb.fail_waiting(me, CLOSED, |_| true)
        };
        for (w, f) in failed {
            w(f);
        }
    }
}

/// The progress loop: posts queued sends, completes sends in flight, receives every frame
/// that arrives and delivers it; on stop, finishes the sends and meets every rank in a
/// non-blocking barrier while still receiving.
fn progress(comm: SendComm, shared: &Shared) {
    let comm = comm.0;
    let mut in_flight: Vec<InFlight> = Vec::new();
    let mut barrier: Option<Request<'static, ()>> = None;
    let mut idle = 0_u32;
    loop {
        let mut busy = false;
        let queued = std::mem::take(&mut *lock(&shared.outbox));
        for out in queued {
            busy = true;
            let buf: &'static mut [u8] = Box::leak(out.bytes.into_boxed_slice());
            let ptr: *mut [u8] = buf;
            // SAFETY: `ptr` comes from the leaked box just above; the shared borrow handed to
            // MPI is the only use of it until the request completes, after which the box is
            // reclaimed below (never twice: the entry is consumed).
            let buf: &'static [u8] = unsafe { &*ptr };
            let request =
                comm.process_at_rank(out.dest)
                    .immediate_send_with_tag(StaticScope, buf, TAG);
            in_flight.push(InFlight { request, buf: ptr });
        }
        for f in std::mem::take(&mut in_flight) {
            match f.request.test() {
                Ok(_) => {
                    busy = true;
                    // SAFETY: the send completed, so MPI no longer reads the buffer; it was
                    // leaked from a box above and is reclaimed once.
                    drop(unsafe { Box::from_raw(f.buf) });
                }
                Err(request) => in_flight.push(InFlight {
                    request,
                    buf: f.buf,
                }),
            }
        }
        while let Some(probed) = comm.any_process().immediate_matched_probe_with_tag(TAG) {
            busy = true;
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            shared.deliver(status.source_rank() as usize, bytes);
        }
        if shared.stop.load(Ordering::Acquire) && in_flight.is_empty() {
            let queued = !lock(&shared.outbox).is_empty();
            match barrier.take() {
                None if !queued => barrier = Some(comm.immediate_barrier()),
                None => {}
                Some(b) => match b.test() {
                    Ok(_) => return,
                    Err(b) => barrier = Some(b),
                },
            }
        }
        if busy {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::thread::yield_now();
            } else {
                // Woken early by a send to post; incoming frames wait at most this long.
                std::thread::park_timeout(Duration::from_micros(100));
            }
        }
    }
}
