//! Tessera checkpoints: block-sparse tensors and metadata saved to and loaded from `.npz`
//! files whose layout `docs/FORMAT.md` documents (version [`FORMAT_VERSION`]).
//!
//! Owns the [`Checkpoint`] (named tensors and metadata arrays, one file), its atomic save and
//! its checked load, the asynchronous save of tensors ([`Checkpoint::save_async`]), and the
//! codecs of sectors and element types ([`SectorCodec`], [`Element`]). Invariants: a save
//! replaces its file atomically (a crash leaves the previous file intact); a load either
//! returns exactly the tensor that was saved or a typed [`Error`] saying what was expected
//! and what was found: it never panics and never returns a silently different tensor (a
//! CRC-32 over every array of a tensor is checked).
//!
//! ```
//! use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
//! use tessera_io::Checkpoint;
//!
//! let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 1)])?;
//! let col = Leg::new(Direction::Out, [(U1(0), 3), (U1(1), 2)])?;
//! let a = AsyncArray::<f64, U1>::random(BlockStructure::new([row], [col], U1(0))?, 7);
//!
//! let dir = std::env::temp_dir().join(format!("tessera-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("state.npz");
//! let mut ck = Checkpoint::new();
//! ck.put_tensor("mps/0", &a)?;
//! ck.put_i64s("sweep", &[3]);
//! ck.save(&path)?;
//!
//! let ck = Checkpoint::load(&path)?;
//! let b = ck.tensor::<f64, U1>("mps/0")?;
//! assert_eq!(b.to_dense()?, a.to_dense()?);
//! assert_eq!(ck.i64s("sweep")?, vec![3]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod codec;
#[cfg(feature = "hdf5")]
mod h5;
#[cfg(feature = "ndarray")]
pub mod nd;
mod npz;

pub use codec::{Element, SectorCodec};

use npz::Array;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_blocks::{AsyncArray, BitVec, BlockStructure, Direction, Leg};
use tessera_core::Async;

/// The version of the on-disk layout this crate writes and reads (docs/FORMAT.md).
pub const FORMAT_VERSION: i64 = 1;

/// The name of the array that marks a file as a Tessera checkpoint.
const MARKER: &str = "tessera";

/// A checkpoint [`Error`] behind an `Arc`, so that error types which must be `Clone` and
/// `PartialEq` (the facade's, the MPS layer's) can hold one (an OS error can be neither); two
/// are equal when they are the same error.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct SharedError(pub std::sync::Arc<Error>);

impl PartialEq for SharedError {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<Error> for SharedError {
    fn from(e: Error) -> Self {
        SharedError(std::sync::Arc::new(e))
    }
}

/// What can go wrong saving or loading: each variant names what was expected and what was
/// found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused a file operation.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The zip container is malformed (including a member CRC mismatch).
    #[error("{path}: not a readable npz archive: {reason}")]
    Archive {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Fewer (or more) bytes than the layout says.
    #[error("truncated: {what} needs {expected} bytes, found {found}")]
    Truncated {
        /// The part of the file.
        what: String,
        /// The length the layout needs.
        expected: usize,
        /// The length present.
        found: usize,
    },
    /// An npy member's header is malformed.
    #[error("npy member {member}: {reason}")]
    Npy {
        /// The member.
        member: String,
        /// What is wrong.
        reason: String,
    },
    /// A layout version this crate does not read.
    #[error("{what}: format version {found}, this reader reads version {expected}")]
    Version {
        /// The file or tensor.
        what: String,
        /// The version read.
        expected: i64,
        /// The version found.
        found: i64,
    },
    /// The tensor was saved with another sector type.
    #[error("tensor {name}: sector type {found} in the file, {expected} requested")]
    SectorType {
        /// The tensor.
        name: String,
        /// The requested sector type.
        expected: String,
        /// The saved sector type.
        found: String,
    },
    /// The array has another element type.
    #[error("{name}: element type {found} in the file, {expected} requested")]
    ElementType {
        /// The array.
        name: String,
        /// The requested npy descriptor.
        expected: String,
        /// The saved npy descriptor.
        found: String,
    },
    /// A block's offset disagrees with the block lengths the legs give.
    #[error(
        "tensor {name}: block {block} at offset {found}, its predecessors' lengths give {expected}"
    )]
    Offsets {
        /// The tensor.
        name: String,
        /// The block (file order; `n_blocks` is the end offset).
        block: usize,
        /// The offset the legs give.
        expected: u64,
        /// The offset in the file.
        found: i64,
    },
    /// The stored checksum disagrees with the data.
    #[error("tensor {name}: checksum {found:#010x} computed, {expected:#010x} stored")]
    Checksum {
        /// The tensor.
        name: String,
        /// The stored CRC-32.
        expected: u64,
        /// The CRC-32 of the bytes read.
        found: u64,
    },
    /// A named array or tensor is not in the file.
    #[error("no {what} named {name:?} in the checkpoint")]
    Missing {
        /// A tensor, an array, a field.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// An array has the wrong shape.
    #[error("{name}: shape {found:?}, expected {expected:?}")]
    Shape {
        /// The array.
        name: String,
        /// The shape the layout needs.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A value in the file is not a valid part of a tensor.
    #[error("tensor {name}: {reason}")]
    Invalid {
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The block layer refused the structure or data read.
    #[error("tensor {name}: {source}")]
    Blocks {
        /// The tensor.
        name: String,
        /// Its error.
        source: tessera_blocks::Error,
    },
    /// The runtime reported an error (a poisoned block, or the failure of an asynchronous
    /// save, whose cause this error's chain carries).
    #[error("runtime: {0}")]
    Task(#[from] tessera_core::Error),
}

/// Named tensors and metadata arrays (sweep numbers, energies, notes) destined for, or read
/// from, one file. Names use `/` to form groups (`"mps/3"`, `"env/left/3"`).
#[derive(Clone, Debug, Default)]
pub struct Checkpoint {
    arrays: BTreeMap<String, Array>,
}

impl Checkpoint {
    /// An empty checkpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) tensor `name`, after waiting for the writes pending on its blocks
    /// (only those).
    ///
    /// # Errors
    ///
    /// [`Error::Task`] for a poisoned block.
    pub fn put_tensor<T: Element, S: SectorCodec>(
        &mut self,
        name: &str,
        a: &AsyncArray<T, S>,
    ) -> Result<(), Error> {
        let blocks = a.to_blocks().map_err(|source| Error::Blocks {
            name: name.to_owned(),
            source,
        })?;
        self.put_blocks(name, a.structure(), blocks.iter().map(Vec::as_slice));
        Ok(())
    }

    fn put_blocks<'a, T: Element, S: SectorCodec>(
        &mut self,
        name: &str,
        s: &BlockStructure<S>,
        blocks: impl Iterator<Item = &'a [T]>,
    ) {
        self.remove_tensor(name);
        for (field, array) in encode_tensor(s, blocks) {
            self.arrays.insert(format!("{name}/{field}"), array);
        }
    }

    fn remove_tensor(&mut self, name: &str) {
        let prefix = format!("{name}/");
        self.arrays.retain(|k, _| !k.starts_with(&prefix));
    }

    /// Adds (or replaces) a metadata array of `f64`s.
    pub fn put_f64s(&mut self, name: &str, values: &[f64]) {
        let mut data = Vec::new();
        f64::put(values, &mut data);
        self.arrays
            .insert(name.to_owned(), Array::new("<f8", vec![values.len()], data));
    }

    /// Adds (or replaces) a metadata array of `i64`s.
    pub fn put_i64s(&mut self, name: &str, values: &[i64]) {
        self.arrays.insert(
            name.to_owned(),
            Array::new("<i8", vec![values.len()], i64_bytes(values)),
        );
    }

    /// Adds (or replaces) a metadata string (UTF-8 bytes, `|u1`).
    pub fn put_str(&mut self, name: &str, value: &str) {
        self.arrays.insert(
            name.to_owned(),
            Array::new("|u1", vec![value.len()], value.as_bytes().to_vec()),
        );
    }

    /// The names of the tensors held, sorted.
    pub fn tensor_names(&self) -> Vec<String> {
        self.arrays
            .keys()
            .filter_map(|k| k.strip_suffix("/header").map(str::to_owned))
            .collect()
    }

    /// Tensor `name` as a new array, ready at once.
    ///
    /// # Errors
    ///
    /// [`Error::Missing`], [`Error::SectorType`], [`Error::ElementType`], [`Error::Version`],
    /// [`Error::Checksum`], [`Error::Offsets`], [`Error::Shape`], [`Error::Invalid`] or
    /// [`Error::Blocks`] when the stored arrays do not describe a tensor of this type.
    pub fn tensor<T: Element, S: SectorCodec>(
        &self,
        name: &str,
    ) -> Result<AsyncArray<T, S>, Error> {
        decode_tensor(name, |field| {
            self.arrays
                .get(&format!("{name}/{field}"))
                .ok_or_else(|| Error::Missing {
                    what: if field == "header" {
                        "tensor"
                    } else {
                        "tensor field"
                    },
                    name: format!("{name}/{field}"),
                })
        })
    }

    fn meta(&self, name: &str, descr: &str) -> Result<&Array, Error> {
        let a = self.arrays.get(name).ok_or_else(|| Error::Missing {
            what: "array",
            name: name.to_owned(),
        })?;
        if a.descr != descr {
            return Err(Error::ElementType {
                name: name.to_owned(),
                expected: descr.to_owned(),
                found: a.descr.clone(),
            });
        }
        Ok(a)
    }

    /// Metadata array `name` of `f64`s (any shape, flattened in C order).
    ///
    /// # Errors
    ///
    /// [`Error::Missing`]; [`Error::ElementType`] for an array of another type.
    pub fn f64s(&self, name: &str) -> Result<Vec<f64>, Error> {
        Ok(f64::get(&self.meta(name, "<f8")?.data))
    }

    /// Metadata array `name` of `i64`s (any shape, flattened in C order).
    ///
    /// # Errors
    ///
    /// As [`f64s`](Self::f64s).
    pub fn i64s(&self, name: &str) -> Result<Vec<i64>, Error> {
        Ok(i64s_of(&self.meta(name, "<i8")?.data))
    }

    /// Metadata string `name`.
    ///
    /// # Errors
    ///
    /// As [`f64s`](Self::f64s); [`Error::Invalid`] for bytes that are not UTF-8.
    pub fn string(&self, name: &str) -> Result<String, Error> {
        String::from_utf8(self.meta(name, "|u1")?.data.clone()).map_err(|_| Error::Invalid {
            name: name.to_owned(),
            reason: "the string is not UTF-8".to_owned(),
        })
    }

    /// Writes the checkpoint to `path` atomically (a temporary file in the same directory,
    /// synced, renamed over `path`, directory synced): a process killed meanwhile leaves
    /// the previous file intact.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] or [`Error::Archive`]; `path` is then unchanged.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        npz::write_atomic(path.as_ref(), &self.marked())
    }

    /// Like [`save`](Self::save), to an HDF5 file (feature `hdf5`): one dataset per array,
    /// `/` in names making groups, complex numbers as the compound `{r, i}` h5py reads.
    ///
    /// # Errors
    ///
    /// As [`save`](Self::save); libhdf5's errors as [`Error::Archive`].
    #[cfg(feature = "hdf5")]
    pub fn save_h5(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        h5::write_atomic(path.as_ref(), &self.marked())
    }

    /// Like [`load`](Self::load), from an HDF5 file written by [`save_h5`](Self::save_h5)
    /// (or h5py, following docs/FORMAT.md).
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    #[cfg(feature = "hdf5")]
    pub fn load_h5(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        Self::checked(path, h5::read(path)?)
    }

    fn marked(&self) -> BTreeMap<String, Array> {
        let mut arrays = self.arrays.clone();
        arrays.insert(
            MARKER.to_owned(),
            Array::new("<i8", vec![1], i64_bytes(&[FORMAT_VERSION])),
        );
        arrays
    }

    /// Reads the checkpoint at `path`. Tensors are decoded (and checked) by
    /// [`tensor`](Self::tensor).
    ///
    /// # Errors
    ///
    /// [`Error::Io`], [`Error::Archive`], [`Error::Truncated`] or [`Error::Npy`] for a file
    /// that is not a readable npz archive; [`Error::Missing`] or [`Error::Version`] for one
    /// that is not a Tessera checkpoint of this version.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        Self::checked(path, npz::read(path)?)
    }

    fn checked(path: &Path, mut arrays: BTreeMap<String, Array>) -> Result<Self, Error> {
        let marker = arrays.remove(MARKER).ok_or_else(|| Error::Missing {
            what: "format marker array",
            name: MARKER.to_owned(),
        })?;
        let version = (marker.descr == "<i8" && marker.shape == [1])
            .then(|| i64s_of(&marker.data)[0])
            .ok_or_else(|| Error::Shape {
                name: MARKER.to_owned(),
                expected: vec![1],
                found: marker.shape.clone(),
            })?;
        if version != FORMAT_VERSION {
            return Err(Error::Version {
                what: path.display().to_string(),
                expected: FORMAT_VERSION,
                found: version,
            });
        }
        Ok(Self { arrays })
    }

    /// Saves this checkpoint plus `tensors` to `path` as a task: it waits for the writes
    /// pending on those tensors' blocks only (unrelated work runs on), snapshots them, and
    /// writes the file atomically, on a worker. Returns at once; the caller may keep
    /// enrolling work, including writes to the tensors, which wait for the snapshot.
    ///
    /// # Errors
    ///
    /// [`Error::Task`] when the task cannot be enrolled; the save's own errors come from
    /// [`Saving::wait`].
    pub fn save_async<T: Element, S: SectorCodec>(
        self,
        path: impl AsRef<Path>,
        tensors: &[(&str, &AsyncArray<T, S>)],
    ) -> Result<Saving, Error> {
        let path = path.as_ref().to_owned();
        let done = Async::new(());
        let names: Vec<String> = tensors.iter().map(|(n, _)| (*n).to_owned()).collect();
        let structures: Vec<Arc<BlockStructure<S>>> =
            tensors.iter().map(|(_, a)| a.structure().clone()).collect();
        let reads: Vec<_> = tensors.iter().map(|(_, a)| a.read()).collect();
        let mut ck = self;
        tessera_core::schedule((reads, done.overwrite()), move |(views, _)| {
            for ((name, s), blocks) in names.iter().zip(&structures).zip(views.iter()) {
                let data: Vec<Vec<T>> = blocks.iter().map(|v| v.to_vec()).collect();
                ck.put_blocks(name, s, data.iter().map(Vec::as_slice));
            }
            ck.save(&path)?;
            Ok(())
        })?;
        Ok(Saving { done })
    }
}

/// An asynchronous save in flight ([`Checkpoint::save_async`]).
#[derive(Debug)]
pub struct Saving {
    done: Async<()>,
}

impl Saving {
    /// Waits for the save to finish.
    ///
    /// # Errors
    ///
    /// [`Error::Task`], whose [`task_error`](tessera_core::Error::task_error) is this
    /// crate's [`Error`] (I/O, archive) when the write failed.
    pub fn wait(&self) -> Result<(), Error> {
        Ok(self.done.wait()?)
    }
}

fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i64s_of(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The fields of a tensor group in checksum order (docs/FORMAT.md).
const FIELDS: [&str; 9] = [
    "header",
    "sector_type",
    "legs",
    "sectors",
    "dims",
    "flux",
    "blocks",
    "offsets",
    "data",
];

fn checksum<'a>(payloads: impl Iterator<Item = &'a [u8]>) -> u64 {
    let mut h = crc32fast::Hasher::new();
    for p in payloads {
        h.update(p);
    }
    u64::from(h.finalize())
}

fn encode_tensor<'a, T: Element, S: SectorCodec>(
    s: &BlockStructure<S>,
    blocks: impl Iterator<Item = &'a [T]>,
) -> Vec<(&'static str, Array)> {
    let words = S::ENCODED_WORDS;
    let legs = s.legs();
    let mut leg_rows = Vec::new();
    let mut sectors = Vec::new();
    let mut dims = Vec::new();
    for leg in legs {
        leg_rows.extend([i64::from(leg.direction().sign()), leg.num_segments() as i64]);
        for seg in leg.segments() {
            seg.sector.encode(&mut sectors);
            dims.push(seg.dim as i64);
        }
    }
    let mut flux = Vec::new();
    s.flux().encode(&mut flux);
    let mut block_rows = Vec::new();
    let mut offsets = vec![0i64];
    for b in s.blocks() {
        block_rows.extend(b.segments().iter().map(|&x| x as i64));
        offsets.push(offsets.last().expect("nonempty") + b.len() as i64);
    }
    let n_elements = *offsets.last().expect("nonempty") as usize;
    let mut data = Vec::with_capacity(n_elements * T::SIZE);
    for b in blocks {
        T::put(b, &mut data);
    }
    let header = [
        FORMAT_VERSION,
        legs.len() as i64,
        s.n_codomain() as i64,
        words as i64,
        s.num_blocks() as i64,
        n_elements as i64,
    ];
    let n_segments = dims.len();
    let type_name = S::type_name();
    let mut fields = vec![
        ("header", Array::new("<i8", vec![6], i64_bytes(&header))),
        (
            "sector_type",
            Array::new("|u1", vec![type_name.len()], type_name.into_bytes()),
        ),
        (
            "legs",
            Array::new("<i8", vec![legs.len(), 2], i64_bytes(&leg_rows)),
        ),
        (
            "sectors",
            Array::new("<u4", vec![n_segments, words], u32_bytes(&sectors)),
        ),
        (
            "dims",
            Array::new("<i8", vec![n_segments], i64_bytes(&dims)),
        ),
        ("flux", Array::new("<u4", vec![words], u32_bytes(&flux))),
        (
            "blocks",
            Array::new(
                "<i8",
                vec![s.num_blocks(), legs.len()],
                i64_bytes(&block_rows),
            ),
        ),
        (
            "offsets",
            Array::new("<i8", vec![offsets.len()], i64_bytes(&offsets)),
        ),
        ("data", Array::new(T::DESCR, vec![n_elements], data)),
    ];
    let sum = checksum(fields.iter().map(|(_, a)| a.data.as_slice()));
    fields.push((
        "checksum",
        Array::new("<u8", vec![1], sum.to_le_bytes().to_vec()),
    ));
    fields
}

fn decode_tensor<'f, T: Element, S: SectorCodec>(
    name: &str,
    get: impl Fn(&str) -> Result<&'f Array, Error>,
) -> Result<AsyncArray<T, S>, Error> {
    let invalid = |reason: String| Error::Invalid {
        name: name.to_owned(),
        reason,
    };
    let typed = |field: &str, descr: &str, shape: &[usize]| -> Result<&'f Array, Error> {
        let a = get(field)?;
        if a.descr != descr {
            return Err(Error::ElementType {
                name: format!("{name}/{field}"),
                expected: descr.to_owned(),
                found: a.descr.clone(),
            });
        }
        if a.shape != shape {
            return Err(Error::Shape {
                name: format!("{name}/{field}"),
                expected: shape.to_vec(),
                found: a.shape.clone(),
            });
        }
        Ok(a)
    };
    let header = i64s_of(&typed("header", "<i8", &[6])?.data);
    if header[0] != FORMAT_VERSION {
        return Err(Error::Version {
            what: format!("tensor {name}"),
            expected: FORMAT_VERSION,
            found: header[0],
        });
    }
    // The checksum covers every field, so nothing below reads unverified bytes.
    let stored = typed("checksum", "<u8", &[1])?;
    let stored = u64::from_le_bytes(stored.data[..8].try_into().expect("8 bytes"));
    let mut payloads = Vec::with_capacity(FIELDS.len());
    for field in FIELDS {
        payloads.push(get(field)?.data.as_slice());
    }
    let found = checksum(payloads.into_iter());
    if found != stored {
        return Err(Error::Checksum {
            name: name.to_owned(),
            expected: stored,
            found,
        });
    }
    let sector_type = get("sector_type")?;
    let found_type = String::from_utf8_lossy(&sector_type.data).into_owned();
    if found_type != S::type_name() {
        return Err(Error::SectorType {
            name: name.to_owned(),
            expected: S::type_name(),
            found: found_type,
        });
    }
    let data = get("data")?;
    if data.descr != T::DESCR {
        return Err(Error::ElementType {
            name: format!("{name}/data"),
            expected: T::DESCR.to_owned(),
            found: data.descr.clone(),
        });
    }
    let count = |v: i64, what: &str| {
        usize::try_from(v).map_err(|_| invalid(format!("{what} {v} is negative")))
    };
    let n_legs = count(header[1], "the number of legs")?;
    let n_codomain = count(header[2], "the number of codomain legs")?;
    let words = count(header[3], "the sector word count")?;
    let n_blocks = count(header[4], "the number of blocks")?;
    let n_elements = count(header[5], "the number of elements")?;
    if words != S::ENCODED_WORDS {
        return Err(invalid(format!(
            "{words} words per sector, {} has {}",
            S::type_name(),
            S::ENCODED_WORDS
        )));
    }
    if n_codomain > n_legs {
        return Err(invalid(format!("{n_codomain} codomain legs of {n_legs}")));
    }
    let leg_rows = i64s_of(&typed("legs", "<i8", &[n_legs, 2])?.data);
    let mut n_segments = 0usize;
    for row in leg_rows.chunks_exact(2) {
        n_segments = n_segments
            .checked_add(count(row[1], "a leg's segment count")?)
            .ok_or_else(|| invalid("segment counts overflow".to_owned()))?;
    }
    let sectors = typed("sectors", "<u4", &[n_segments, words])?;
    let sectors: Vec<u32> = sectors
        .data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    let dims = i64s_of(&typed("dims", "<i8", &[n_segments])?.data);
    let decode = |w: &[u32]| {
        S::decode(w).ok_or_else(|| invalid(format!("words {w:?} encode no {}", S::type_name())))
    };
    let mut legs = Vec::with_capacity(n_legs);
    let mut at = 0;
    for (i, row) in leg_rows.chunks_exact(2).enumerate() {
        let direction = Direction::from_sign(row[0]).map_err(|source| Error::Blocks {
            name: name.to_owned(),
            source,
        })?;
        let n = row[1] as usize;
        let mut segs = Vec::with_capacity(n);
        for k in at..at + n {
            let dim = usize::try_from(dims[k])
                .ok()
                .filter(|&d| d >= 1)
                .ok_or_else(|| invalid(format!("leg {i}: segment dimension {}", dims[k])))?;
            segs.push((decode(&sectors[k * words..(k + 1) * words])?, dim));
        }
        at += n;
        legs.push(Leg::tiled(direction, segs).map_err(|source| Error::Blocks {
            name: name.to_owned(),
            source,
        })?);
    }
    let flux = decode(&u32_words(&typed("flux", "<u4", &[words])?.data))?;
    let blocks_err = |source| Error::Blocks {
        name: name.to_owned(),
        source,
    };
    let full = BlockStructure::from_legs(legs, n_codomain, flux).map_err(blocks_err)?;
    let rows = i64s_of(&typed("blocks", "<i8", &[n_blocks, n_legs])?.data);
    let offsets = i64s_of(&typed("offsets", "<i8", &[n_blocks + 1])?.data);
    typed("data", T::DESCR, &[n_elements])?;
    // Each saved block: its id in the unmasked structure, and its length.
    let mut mask = BitVec::repeat(false, full.num_blocks());
    let mut order = Vec::with_capacity(n_blocks);
    let mut expected = 0u64;
    for k in 0..n_blocks {
        if offsets[k] < 0 || offsets[k] as u64 != expected {
            return Err(Error::Offsets {
                name: name.to_owned(),
                block: k,
                expected,
                found: offsets[k],
            });
        }
        let row = &rows[k * n_legs..(k + 1) * n_legs];
        let segs: Vec<usize> = row
            .iter()
            .zip(full.legs())
            .map(|(&x, leg)| usize::try_from(x).ok().filter(|&x| x < leg.num_segments()))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid(format!("block {k}: segments {row:?} out of range")))?;
        let id = full
            .block_id(&segs)
            .ok_or_else(|| invalid(format!("block {k}: segments {segs:?} are not allowed")))?;
        if mask.replace(id, true) {
            return Err(invalid(format!(
                "block {k}: segments {segs:?} appear twice"
            )));
        }
        let len = full.block(id).expect("an id from the structure").len();
        expected += len as u64;
        order.push(segs);
    }
    if offsets[n_blocks] < 0 || offsets[n_blocks] as u64 != expected {
        return Err(Error::Offsets {
            name: name.to_owned(),
            block: n_blocks,
            expected,
            found: offsets[n_blocks],
        });
    }
    if expected != n_elements as u64 {
        return Err(invalid(format!(
            "{n_elements} elements, the blocks hold {expected}"
        )));
    }
    let structure = if mask.all() {
        full
    } else {
        full.with_present(&mask).map_err(blocks_err)?
    };
    let values = T::get(&data.data);
    let mut blocks: Vec<Vec<T>> = vec![Vec::new(); n_blocks];
    for (k, segs) in order.iter().enumerate() {
        let id = structure
            .block_id(segs)
            .expect("the masked structure holds every saved block");
        blocks[id] = values[offsets[k] as usize..offsets[k + 1] as usize].to_vec();
    }
    AsyncArray::from_blocks(structure, &blocks).map_err(blocks_err)
}

fn u32_words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_blocks::{U1, Z2};

    fn tensor() -> AsyncArray<f64, U1> {
        let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 1)]).unwrap();
        let col = Leg::new(Direction::Out, [(U1(0), 3), (U1(1), 2)]).unwrap();
        AsyncArray::random(BlockStructure::new([row], [col], U1(0)).unwrap(), 3)
    }

    /// Rewrites field `field` of tensor `t` with `f` and re-seals the checksum.
    fn tamper(ck: &mut Checkpoint, field: &str, f: impl FnOnce(&mut Array)) {
        f(ck.arrays.get_mut(&format!("t/{field}")).unwrap());
        let sum = checksum(
            FIELDS
                .iter()
                .map(|x| ck.arrays[&format!("t/{x}")].data.as_slice()),
        );
        ck.arrays.get_mut("t/checksum").unwrap().data = sum.to_le_bytes().to_vec();
    }

    fn sealed() -> Checkpoint {
        let mut ck = Checkpoint::new();
        ck.put_tensor("t", &tensor()).unwrap();
        ck
    }

    #[test]
    fn wrong_types_name_expected_and_found() {
        let ck = sealed();
        let e = ck.tensor::<f64, Z2>("t").unwrap_err();
        assert!(
            matches!(&e, Error::SectorType { expected, found, .. } if expected == "Z2" && found == "U1"),
            "{e}"
        );
        let e = ck.tensor::<num_complex::Complex64, U1>("t").unwrap_err();
        assert!(
            matches!(&e, Error::ElementType { expected, found, .. } if expected == "<c16" && found == "<f8"),
            "{e}"
        );
        let e = ck.tensor::<f64, U1>("u").unwrap_err();
        assert!(matches!(e, Error::Missing { .. }), "{e}");
    }

    #[test]
    fn wrong_version_offsets_and_checksum_are_typed() {
        let mut ck = sealed();
        tamper(&mut ck, "header", |a| a.data[0] = 2);
        let e = ck.tensor::<f64, U1>("t").unwrap_err();
        assert!(
            matches!(
                e,
                Error::Version {
                    expected: 1,
                    found: 2,
                    ..
                }
            ),
            "{e}"
        );

        let mut ck = sealed();
        tamper(&mut ck, "offsets", |a| a.data[8] += 1);
        let e = ck.tensor::<f64, U1>("t").unwrap_err();
        assert!(
            matches!(
                e,
                Error::Offsets {
                    block: 1,
                    expected: 6,
                    found: 7,
                    ..
                }
            ),
            "{e}"
        );

        let mut ck = sealed();
        ck.arrays.get_mut("t/data").unwrap().data[3] ^= 1;
        let e = ck.tensor::<f64, U1>("t").unwrap_err();
        assert!(matches!(e, Error::Checksum { .. }), "{e}");

        let mut ck = sealed();
        tamper(&mut ck, "sectors", |a| a.data[0] = 5);
        assert!(ck.tensor::<f64, U1>("t").is_err());
    }

    #[test]
    fn a_file_of_another_version_is_refused() {
        let dir = std::env::temp_dir().join(format!("tessera-io-v-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v.npz");
        let mut arrays = sealed().arrays;
        arrays.insert(
            MARKER.to_owned(),
            Array::new("<i8", vec![1], i64_bytes(&[9])),
        );
        npz::write_atomic(&path, &arrays).unwrap();
        let e = Checkpoint::load(&path).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Version {
                    expected: 1,
                    found: 9,
                    ..
                }
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
