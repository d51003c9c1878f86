//! Environments on disk: the store that keeps the environment tensors a step does not touch
//! in files, writing them behind the computation and loading them back as tasks that
//! overlap it.
//!
//! Owns: the [`SpillStore`] interface the environments use and its one implementation, a
//! directory of `.npz` files ([`DiskSpill`], one [`Checkpoint`] per environment) with its
//! writer thread. Invariants: an environment handed to the store is written by the writer
//! thread, which waits only for the tensor's own pending writes (a plain host read there)
//! and frees the tensor once its file is written; at most [`QUEUED`] writes wait for that
//! thread, so a slow disk slows the sweep instead of piling environments up in memory; a
//! load of an environment is enrolled only after its write has finished (so it reads that
//! write's file, never an older one); the files the store wrote are removed when it is
//! dropped.
//!
//! Why a thread for the writes and tasks for the loads: a write ends in `fsync` (a
//! checkpoint's atomic save), which would hold one of the runtime's compute workers for the
//! whole disk round trip; a load reads a file written moments ago, from the page cache, and
//! decodes it, which is work like any other.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use tessera_backends::{Host, Placement};
use tessera_blocks::AbelianSector;
use tessera_core::Async;
use tessera_io::{Checkpoint, SectorCodec};

use super::environments::Key;
use super::heff::Tensor;
use crate::{Error, Result};

/// How many environments may wait for the writer thread before the sweep waits for it.
pub(crate) const QUEUED: usize = 2;

/// Where the environments a step does not touch go, and how they come back.
pub(crate) trait SpillStore<S: AbelianSector, P: Placement<f64> = Host>:
    std::fmt::Debug
{
    /// Takes `tensor` (environment `key`) out of memory: writes it, asynchronously.
    fn write(&mut self, key: Key, tensor: Tensor<S, P>) -> Result<()>;
    /// Starts loading `key` back, as a task, if that has not started.
    fn prefetch(&mut self, key: Key) -> Result<()>;
    /// Environment `key`, waiting for its load (starting it first if need be).
    fn take(&mut self, key: Key) -> Result<Tensor<S, P>>;
    /// Forgets `key` (it is invalid now).
    fn forget(&mut self, key: Key);
}

/// A load in flight: the task writes the tensor into `slot` and then publishes `done`.
#[derive(Debug)]
struct Load<S: AbelianSector> {
    done: Async<()>,
    slot: Arc<Mutex<Option<Tensor<S>>>>,
}

/// One write for the writer thread: the tensor, its file, and where to say it is written.
struct Job<S: SectorCodec> {
    tensor: Tensor<S>,
    path: PathBuf,
    done: SyncSender<std::result::Result<(), tessera_io::Error>>,
}

/// The writer thread and its queue.
struct Writer<S: SectorCodec> {
    jobs: Option<SyncSender<Job<S>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S: SectorCodec> Writer<S> {
    fn start() -> Result<Self> {
        let (jobs, queue) = sync_channel::<Job<S>>(QUEUED);
        let thread = std::thread::Builder::new()
            .name("tessera-dmrg-spill".into())
            .spawn(move || {
                for job in queue {
                    let mut ck = Checkpoint::new();
                    // The host read waits for the tensor's own pending writes only.
                    let written = ck.put_tensor(NAME, &job.tensor);
                    drop(job.tensor);
                    let _ = job.done.send(written.and_then(|()| ck.save(&job.path)));
                }
            })
            .map_err(|e| Error::Dmrg {
                what: "spill writer thread".into(),
                expected: "a thread".into(),
                found: e.to_string(),
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }
}

/// The spill store of a directory: environment `key` lives in `DIR/env-{key}.npz`.
pub(crate) struct DiskSpill<S: SectorCodec> {
    dir: PathBuf,
    writer: Writer<S>,
    /// Writes handed to the writer, by environment, until a load or a new write of that
    /// environment has waited for them.
    saves: HashMap<Key, Receiver<std::result::Result<(), tessera_io::Error>>>,
    loads: HashMap<Key, Load<S>>,
    /// Every file written, to remove them at the end.
    written: Vec<PathBuf>,
}

impl<S: SectorCodec> std::fmt::Debug for DiskSpill<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskSpill")
            .field("dir", &self.dir)
            .field("saves", &self.saves.len())
            .field("loads", &self.loads.len())
            .finish()
    }
}

impl<S: SectorCodec> DiskSpill<S> {
    /// A store in `dir` (created if missing).
    pub(crate) fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|source| tessera_io::Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(Self {
            dir: dir.to_owned(),
            writer: Writer::start()?,
            saves: HashMap::new(),
            loads: HashMap::new(),
            written: Vec::new(),
        })
    }

    fn path(&self, key: Key) -> PathBuf {
        self.dir.join(format!("env-{key}.npz"))
    }

    /// Waits for the write of `key`, if one was handed to the writer.
    fn written(&mut self, key: Key) -> Result<()> {
        if let Some(done) = self.saves.remove(&key) {
            match done.recv() {
                Ok(result) => result?,
                Err(_) => return Err(writer_gone()),
            }
        }
        Ok(())
    }
}

fn writer_gone() -> Error {
    Error::Dmrg {
        what: "spill writer thread".into(),
        expected: "a thread that reports every write".into(),
        found: "a thread that stopped".into(),
    }
}

/// The name of an environment's tensor in its file.
const NAME: &str = "environment";

impl<S: SectorCodec> SpillStore<S> for DiskSpill<S> {
    fn write(&mut self, key: Key, tensor: Tensor<S>) -> Result<()> {
        // A load still in flight for this key reads the previous file: finish it.
        if let Some(load) = self.loads.remove(&key) {
            load.done.wait()?;
        }
        // Two writes of one file must not overlap (they share its temporary name).
        self.written(key)?;
        let path = self.path(key);
        if !self.written.contains(&path) {
            self.written.push(path.clone());
        }
        let (done, report) = sync_channel(1);
        let jobs = self
            .writer
            .jobs
            .as_ref()
            .expect("the writer runs until drop");
        jobs.send(Job { tensor, path, done })
            .map_err(|_| writer_gone())?;
        self.saves.insert(key, report);
        Ok(())
    }

    fn prefetch(&mut self, key: Key) -> Result<()> {
        if self.loads.contains_key(&key) {
            return Ok(());
        }
        // The load must read this write's file: wait for it (long done in a sweep, which
        // spills an environment at least two steps before it needs it back).
        self.written(key)?;
        let path = self.path(key);
        let done = Async::new(());
        let slot = Arc::new(Mutex::new(None));
        let out = Arc::clone(&slot);
        tessera_core::schedule_named("dmrg.spill.load", done.overwrite(), move |_| {
            let t = Checkpoint::load(&path)?.tensor::<f64, S>(NAME)?;
            *out.lock().expect("the load slot is not poisoned") = Some(t);
            Ok(())
        })?;
        self.loads.insert(key, Load { done, slot });
        Ok(())
    }

    fn take(&mut self, key: Key) -> Result<Tensor<S>> {
        self.prefetch(key)?;
        let load = self.loads.remove(&key).expect("prefetch enrolled a load");
        load.done.wait().map_err(load_error)?;
        let t = load
            .slot
            .lock()
            .expect("the load slot is not poisoned")
            .take();
        t.ok_or_else(|| Error::Dmrg {
            what: format!("spilled environment {key}"),
            expected: "the tensor its load task read".into(),
            found: "nothing".into(),
        })
    }

    fn forget(&mut self, key: Key) {
        // The file is overwritten by the next write of `key` or removed at the end; a load
        // in flight finishes on its own and its tensor is dropped with it, a write in flight
        // is waited for by the next write of `key` or at the end.
        self.loads.remove(&key);
    }
}

/// A failed load as the I/O error that caused it, when it was one.
fn load_error(e: tessera_core::Error) -> Error {
    match e.task_error::<tessera_io::Error>() {
        Some(io) => Error::Dmrg {
            what: "loading a spilled environment".into(),
            expected: "the file it was written to".into(),
            found: io.to_string(),
        },
        None => Error::Core(e),
    }
}

impl<S: SectorCodec> Drop for DiskSpill<S> {
    fn drop(&mut self) {
        // Let every load finish and the writer drain its queue, then remove the files;
        // errors here have no one left to report to (a failed write already failed its
        // load, or concerned an environment no longer needed).
        for (_, load) in self.loads.drain() {
            let _ = load.done.wait();
        }
        self.writer.jobs = None;
        if let Some(thread) = self.writer.thread.take() {
            let _ = thread.join();
        }
        for path in &self.written {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl<S: SectorCodec> super::Dmrg<S> {
    /// Keeps the environment tensors that the current step does not touch in files in `dir`
    /// (created if missing) from now on: after each step of a [`sweep`](Self::sweep), every
    /// environment of at least `min_bytes` bytes that the next two steps do not need is
    /// handed to a writer thread, which writes it and frees it; before each step the one
    /// the next step needs is loaded back by a task that overlaps the step. Smaller
    /// environments stay in memory (writing a few kilobytes saves nothing and costs a disk
    /// round trip; [`SPILL_MIN_BYTES`](super::SPILL_MIN_BYTES) is a sensible threshold, 0
    /// spills everything). The numbers are those of a run without spilling. The files are
    /// removed when the run is dropped.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when `dir` cannot be created; the errors of writing the environments
    /// not needed now.
    pub fn spill_to(&mut self, dir: impl AsRef<Path>, min_bytes: usize) -> Result<()> {
        let store = DiskSpill::<S>::new(dir.as_ref())?;
        self.envs.set_spill(Box::new(store), min_bytes)?;
        let keep: Vec<Key> = self
            .envs
            .pairs()
            .flat_map(|i| [Key::Left(i), Key::Right(i + 2)])
            .collect();
        self.envs.spill_except(&keep)
    }
}
