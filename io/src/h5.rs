//! The HDF5 container (feature `hdf5`): the same arrays as the npz layout, one dataset per
//! array, `/` in names making HDF5 groups.
//!
//! Owns the mapping between npy descriptors and HDF5 types (complex numbers are the
//! compound `{r, i}` that h5py reads as complex) and the atomic write of an HDF5 file.
//! Invariant: `read(write(arrays)) == arrays`. The robustness against hostile files is
//! libhdf5's; the tensor checksum still refuses corrupted data.

use crate::Error;
use crate::npz::{Array, atomic};
use hdf5::types::{FloatSize, IntSize, TypeDescriptor};
use hdf5::{File, Group, H5Type};
use num_complex::Complex;
use std::collections::BTreeMap;
use std::path::Path;

fn h5err(path: &Path) -> impl Fn(hdf5::Error) -> Error + '_ {
    move |e| Error::Archive {
        path: path.to_owned(),
        reason: format!("HDF5: {e}"),
    }
}

fn typed<T: Copy>(bytes: &[u8], f: impl Fn(&[u8]) -> T, size: usize) -> Vec<T> {
    bytes.chunks_exact(size).map(f).collect()
}

macro_rules! le {
    ($t:ty) => {
        |c: &[u8]| <$t>::from_le_bytes(c.try_into().expect("element bytes"))
    };
}

fn cle<T: Copy>(f: impl Fn(&[u8]) -> T, half: usize) -> impl Fn(&[u8]) -> Complex<T> {
    move |c: &[u8]| Complex::new(f(&c[..half]), f(&c[half..]))
}

fn put<T: H5Type>(group: &Group, leaf: &str, shape: &[usize], data: &[T]) -> hdf5::Result<()> {
    let ds = group.new_dataset::<T>().shape(shape).create(leaf)?;
    if !data.is_empty() {
        ds.write_raw(data)?;
    }
    Ok(())
}

/// Writes `arrays` to an HDF5 file at `path`, atomically.
pub(crate) fn write_atomic(path: &Path, arrays: &BTreeMap<String, Array>) -> Result<(), Error> {
    atomic(path, |temp| {
        let err = h5err(path);
        let file = File::create(temp).map_err(&err)?;
        for (name, a) in arrays {
            let (dir, leaf) = name.rsplit_once('/').unwrap_or(("", name));
            let mut group: Group = (*file).clone();
            for part in dir.split('/').filter(|p| !p.is_empty()) {
                group = if group.link_exists(part) {
                    group.group(part)
                } else {
                    group.create_group(part)
                }
                .map_err(&err)?;
            }
            let (d, s) = (&a.data, a.shape.as_slice());
            match a.descr.as_str() {
                "<i8" => put(&group, leaf, s, &typed(d, le!(i64), 8)),
                "<u8" => put(&group, leaf, s, &typed(d, le!(u64), 8)),
                "<u4" => put(&group, leaf, s, &typed(d, le!(u32), 4)),
                "|u1" => put(&group, leaf, s, d),
                "<f8" => put(&group, leaf, s, &typed(d, le!(f64), 8)),
                "<f4" => put(&group, leaf, s, &typed(d, le!(f32), 4)),
                "<c16" => put(&group, leaf, s, &typed(d, cle(le!(f64), 8), 16)),
                "<c8" => put(&group, leaf, s, &typed(d, cle(le!(f32), 4), 8)),
                other => {
                    return Err(Error::Archive {
                        path: path.to_owned(),
                        reason: format!("no HDF5 type for {other}"),
                    });
                }
            }
            .map_err(&err)?;
        }
        file.close().map_err(&err)
    })
}

fn bytes_of<T: H5Type>(
    ds: &hdf5::Dataset,
    put: impl Fn(&T, &mut Vec<u8>),
) -> hdf5::Result<Vec<u8>> {
    let mut out = Vec::new();
    if ds.size() > 0 {
        for v in ds.read_raw::<T>()? {
            put(&v, &mut out);
        }
    }
    Ok(out)
}

fn visit(path: &Path, g: &Group, out: &mut BTreeMap<String, Array>) -> Result<(), Error> {
    let err = h5err(path);
    for ds in g.datasets().map_err(&err)? {
        let name = ds.name().trim_start_matches('/').to_owned();
        let td = ds.dtype().and_then(|t| t.to_descriptor()).map_err(&err)?;
        let c64 = <Complex<f64>>::type_descriptor();
        let c32 = <Complex<f32>>::type_descriptor();
        let (descr, data) = match td {
            TypeDescriptor::Integer(IntSize::U8) => (
                "<i8",
                bytes_of::<i64>(&ds, |v, o| o.extend(v.to_le_bytes())),
            ),
            TypeDescriptor::Unsigned(IntSize::U8) => (
                "<u8",
                bytes_of::<u64>(&ds, |v, o| o.extend(v.to_le_bytes())),
            ),
            TypeDescriptor::Unsigned(IntSize::U4) => (
                "<u4",
                bytes_of::<u32>(&ds, |v, o| o.extend(v.to_le_bytes())),
            ),
            TypeDescriptor::Unsigned(IntSize::U1) => {
                ("|u1", bytes_of::<u8>(&ds, |v, o| o.push(*v)))
            }
            TypeDescriptor::Float(FloatSize::U8) => (
                "<f8",
                bytes_of::<f64>(&ds, |v, o| o.extend(v.to_le_bytes())),
            ),
            TypeDescriptor::Float(FloatSize::U4) => (
                "<f4",
                bytes_of::<f32>(&ds, |v, o| o.extend(v.to_le_bytes())),
            ),
            t if t == c64 => (
                "<c16",
                bytes_of::<Complex<f64>>(&ds, |v, o| {
                    o.extend(v.re.to_le_bytes());
                    o.extend(v.im.to_le_bytes());
                }),
            ),
            t if t == c32 => (
                "<c8",
                bytes_of::<Complex<f32>>(&ds, |v, o| {
                    o.extend(v.re.to_le_bytes());
                    o.extend(v.im.to_le_bytes());
                }),
            ),
            other => {
                return Err(Error::Archive {
                    path: path.to_owned(),
                    reason: format!("dataset {name}: unsupported HDF5 type {other:?}"),
                });
            }
        };
        let data = data.map_err(&err)?;
        out.insert(name, Array::new(descr, ds.shape(), data));
    }
    for sub in g.groups().map_err(&err)? {
        visit(path, &sub, out)?;
    }
    Ok(())
}

/// Reads every dataset of the HDF5 file at `path`.
pub(crate) fn read(path: &Path) -> Result<BTreeMap<String, Array>, Error> {
    let file = File::open(path).map_err(h5err(path))?;
    let mut out = BTreeMap::new();
    visit(path, &file, &mut out)?;
    Ok(out)
}
