//! The container: `.npz` archives (zip, stored members) of `.npy` arrays, written atomically.
//!
//! Owns the npy header codec ([`Array`]), the archive reader and writer, and the atomic
//! replace (temporary file in the target's directory, fsync, rename, fsync of the directory).
//! Invariant: a path either keeps its previous complete content or holds the new complete
//! content; a reader never sees a partial archive under the target name. Every length read
//! from a file is checked against the bytes actually present before anything is allocated
//! for it.

use crate::Error;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// One npy array: its type descriptor, shape, and raw little-endian payload (C order; the
/// writer never sets `fortran_order`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Array {
    pub(crate) descr: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<u8>,
}

impl Array {
    pub(crate) fn new(descr: &str, shape: Vec<usize>, data: Vec<u8>) -> Self {
        Self {
            descr: descr.to_owned(),
            shape,
            data,
        }
    }

    /// The npy v1 (or v2 for a long header) encoding.
    fn encode_header(&self) -> Vec<u8> {
        let shape = match self.shape.as_slice() {
            [n] => format!("({n},)"),
            dims => format!(
                "({})",
                dims.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut dict = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
            self.descr
        );
        // Pad so that the payload starts at a multiple of 64 bytes; the header ends in '\n'.
        let (version, prefix) = if dict.len() + 1 + 10 <= usize::from(u16::MAX) {
            (1u8, 10)
        } else {
            (2u8, 12)
        };
        let total = (prefix + dict.len() + 1).div_ceil(64) * 64;
        while prefix + dict.len() + 1 < total {
            dict.push(' ');
        }
        dict.push('\n');
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out
    }

    /// Parses a whole npy member (strictly: the header must be exactly what a numpy or
    /// Tessera writer produces, and the payload exactly as long as the shape says).
    fn decode(member: &str, bytes: Vec<u8>) -> Result<Self, Error> {
        let bad = |reason: String| Error::Npy {
            member: member.to_owned(),
            reason,
        };
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(bad("no npy magic".to_owned()));
        }
        let (len, start): (usize, usize) = match bytes[6] {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            ),
            v => return Err(bad(format!("npy version {v} (expected 1, 2 or 3)"))),
        };
        let end = start
            .checked_add(len)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| Error::Truncated {
                what: format!("the npy header of {member}"),
                expected: start.saturating_add(len),
                found: bytes.len(),
            })?;
        let header = std::str::from_utf8(&bytes[start..end])
            .map_err(|_| bad("header is not UTF-8".to_owned()))?;
        let dict = header
            .strip_suffix('\n')
            .map(str::trim_end)
            .ok_or_else(|| bad("header does not end in a newline".to_owned()))?;
        let descr = field(dict, "'descr': '", "'").ok_or_else(|| bad("no descr".to_owned()))?;
        let fortran = field(dict, "'fortran_order': ", ",")
            .ok_or_else(|| bad("no fortran_order".to_owned()))?;
        if fortran != "False" {
            return Err(bad(format!("fortran_order {fortran} (expected False)")));
        }
        let shape_text =
            field(dict, "'shape': (", ")").ok_or_else(|| bad("no shape".to_owned()))?;
        let mut shape = Vec::new();
        for part in shape_text
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            shape.push(
                part.parse::<usize>()
                    .map_err(|_| bad(format!("shape entry {part:?}")))?,
            );
        }
        // The dict must hold these three keys and nothing else.
        let canonical =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({shape_text}), }}");
        if dict != canonical && dict != canonical.replace(", }", "}") {
            return Err(bad(format!("unexpected header {dict:?}")));
        }
        let elem = elem_size(descr).ok_or_else(|| bad(format!("unsupported descr {descr}")))?;
        let expected = shape
            .iter()
            .try_fold(elem, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        let found = bytes.len() - end;
        if found != expected {
            return Err(Error::Truncated {
                what: format!("the payload of {member}"),
                expected,
                found,
            });
        }
        let descr = descr.to_owned();
        let mut data = bytes;
        data.drain(..end);
        Ok(Self { descr, shape, data })
    }
}

/// The text between `key` and the next `until` in `dict`.
fn field<'a>(dict: &'a str, key: &str, until: &str) -> Option<&'a str> {
    let rest = &dict[dict.find(key)? + key.len()..];
    Some(&rest[..rest.find(until)?])
}

/// The element size of the descriptors this crate reads.
pub(crate) fn elem_size(descr: &str) -> Option<usize> {
    Some(match descr {
        "|u1" | "|i1" | "|b1" => 1,
        "<f4" | "<i4" | "<u4" => 4,
        "<f8" | "<i8" | "<u8" | "<c8" => 8,
        "<c16" => 16,
        _ => return None,
    })
}

static TEMP: AtomicU64 = AtomicU64::new(0);

/// Writes `arrays` as an npz archive at `path`, atomically (see [`atomic`]).
pub(crate) fn write_atomic(path: &Path, arrays: &BTreeMap<String, Array>) -> Result<(), Error> {
    atomic(path, |temp| {
        let io = |e: std::io::Error| Error::Io {
            path: temp.to_owned(),
            source: e,
        };
        let file = File::create(temp).map_err(io)?;
        let mut file = write_zip(BufWriter::with_capacity(1 << 20, file), arrays, path)?
            .into_inner()
            .map_err(|e| io(e.into_error()))?;
        file.flush().map_err(io)
    })
}

/// Runs `write` on a temporary path next to `path`, then syncs the temporary file, renames
/// it over `path` and syncs the directory. On error the temporary file is removed and
/// `path` is untouched. After a successful save, the temporary files of earlier saves of
/// `path` by processes that no longer run (killed mid-save) are removed
/// ([`remove_stale_temps`]).
pub(crate) fn atomic(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), Error>,
) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::Io {
        path: path.to_owned(),
        source: e,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io(std::io::Error::other("the path names no file")))?;
    let prefix = temp_prefix(name);
    let temp = dir.join(format!(
        "{prefix}{}-{}",
        std::process::id(),
        TEMP.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        write(&temp)?;
        File::open(&temp).and_then(|f| f.sync_all()).map_err(io)?;
        fs::rename(&temp, path).map_err(io)?;
        // The rename is durable once the directory entry is.
        #[cfg(unix)]
        File::open(&dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    } else {
        remove_stale_temps(&dir, &prefix);
    }
    result
}

/// The start of the names of the temporary files of saves of the file `name`:
/// `.{name}.tmp-`, followed by the saving process's id and a counter.
fn temp_prefix(name: &std::ffi::OsStr) -> String {
    format!(".{}.tmp-", name.to_string_lossy())
}

/// Removes the temporary files in `dir` named `{prefix}{pid}-{n}` whose process `pid` is not
/// running: what a save killed between creating and renaming its file left behind. Best
/// effort and conservative: only where the system lists its processes (`/proc`), never this
/// process's files (another thread may be saving), and a file whose id was reused by a live
/// process stays.
fn remove_stale_temps(dir: &Path, prefix: &str) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.filter_map(Result::ok) {
        let file = entry.file_name();
        let Some(pid) = file
            .to_str()
            .and_then(|f| f.strip_prefix(prefix))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        if pid != me && !proc.join(pid.to_string()).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn write_zip<W: Write + Seek>(
    out: W,
    arrays: &BTreeMap<String, Array>,
    path: &Path,
) -> Result<W, Error> {
    let zerr = |e: zip::result::ZipError| Error::Archive {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let io = |e: std::io::Error| Error::Io {
        path: path.to_owned(),
        source: e,
    };
    let mut zip = zip::ZipWriter::new(out);
    for (name, array) in arrays {
        let header = array.encode_header();
        let len = header.len() as u64 + array.data.len() as u64;
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(len >= u64::from(u32::MAX));
        zip.start_file(format!("{name}.npy"), options)
            .map_err(zerr)?;
        zip.write_all(&header).map_err(io)?;
        zip.write_all(&array.data).map_err(io)?;
    }
    zip.finish().map_err(zerr)
}

/// Reads every member of the npz archive at `path`.
pub(crate) fn read(path: &Path) -> Result<BTreeMap<String, Array>, Error> {
    let io = |e: std::io::Error| Error::Io {
        path: path.to_owned(),
        source: e,
    };
    let zerr = |e: zip::result::ZipError| Error::Archive {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(zerr)?;
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).map_err(zerr)?;
        let name = member.name().to_owned();
        let Some(key) = name.strip_suffix(".npy") else {
            return Err(Error::Archive {
                path: path.to_owned(),
                reason: format!("member {name:?} is not an .npy array"),
            });
        };
        if member.compression() != zip::CompressionMethod::Stored {
            return Err(Error::Archive {
                path: path.to_owned(),
                reason: format!(
                    "member {name:?} is compressed ({}); only stored members are read",
                    member.compression()
                ),
            });
        }
        let size = member.size();
        if size > file_len {
            return Err(Error::Truncated {
                what: format!("member {name:?}"),
                expected: usize::try_from(size).unwrap_or(usize::MAX),
                found: usize::try_from(file_len).unwrap_or(usize::MAX),
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        (&mut member)
            .take(size)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::Archive {
                path: path.to_owned(),
                reason: format!("member {name:?}: {e}"),
            })?;
        if bytes.len() as u64 != size {
            return Err(Error::Truncated {
                what: format!("member {name:?}"),
                expected: size as usize,
                found: bytes.len(),
            });
        }
        // Reading past the end checks the member's CRC-32.
        let mut probe = [0u8; 1];
        match member.read(&mut probe) {
            Ok(0) => {}
            Ok(_) => {
                return Err(Error::Archive {
                    path: path.to_owned(),
                    reason: format!("member {name:?} is longer than its recorded size"),
                });
            }
            Err(e) => {
                return Err(Error::Archive {
                    path: path.to_owned(),
                    reason: format!("member {name:?}: {e}"),
                });
            }
        }
        let array = Array::decode(&name, bytes)?;
        if out.insert(key.to_owned(), array).is_some() {
            return Err(Error::Archive {
                path: path.to_owned(),
                reason: format!("member {name:?} appears twice"),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_headers_round_trip_and_align_to_64_bytes() {
        for shape in [vec![], vec![3], vec![2, 5]] {
            let n: usize = shape.iter().product();
            let a = Array::new("<f8", shape, vec![7; 8 * n]);
            let mut bytes = a.encode_header();
            assert_eq!(bytes.len() % 64, 0);
            bytes.extend_from_slice(&a.data);
            assert_eq!(Array::decode("x", bytes).unwrap(), a);
        }
    }

    #[test]
    fn numpy_written_headers_parse() {
        // What numpy 1.x/2.x writes for np.save(f, np.zeros((2, 3))).
        let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
        let mut h = dict.to_owned();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
        bytes.extend_from_slice(h.as_bytes());
        bytes.extend_from_slice(&[0; 48]);
        assert_eq!(Array::decode("x", bytes).unwrap().shape, vec![2, 3]);
    }
}
