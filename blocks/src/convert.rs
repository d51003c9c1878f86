//! Conversions between real and complex tensors.
//!
//! Owns [`AsyncArray::to_complex`] (a real tensor as a complex one) and
//! [`AsyncArray::to_real`] (a complex tensor as a real one, refusing an imaginary part beyond
//! a tolerance). Invariant: a conversion makes a new array on the very same structure (the
//! `Arc` is shared, so the two layouts agree element for element) with scheduled tasks that
//! read exactly the blocks they convert and overwrite the same blocks of the output, as the
//! elementwise operations do (module `ops`); the input is never written. Whatever depends on
//! the data is decided by those tasks: a task that finds an element it must not convert
//! fails with [`Error::ImaginaryPart`], which poisons the output blocks of that task (the
//! other tasks' blocks are converted), so nothing reads a silently dropped imaginary part.

use crate::array::BlockRegion;
use crate::error::Error;
use crate::ops::Piece;
use crate::sector::AbelianSector;
use crate::structure::BlockStructure;
use crate::tensor::AsyncArray;
use num_complex::Complex;
use std::sync::Arc;
use tessera_backends::cpu::{ShapeMismatch, try_over_parts};
use tessera_backends::{Host, Placement, Scalar};
use tessera_core::{Alias, ReadBuffer, StridedMut, StridedRef, WriteBuffer};

impl<T: Scalar, S: AbelianSector> AsyncArray<T, S> {
    /// Block views of a piece, for one task: a span as one flat view, blocks one by one.
    fn piece_reads(&self, piece: &Piece<'_>) -> Vec<ReadBuffer<BlockRegion<T>>> {
        match piece {
            Piece::Span(sectors) => vec![self.sectors_span(sectors.clone()).into_read()],
            Piece::Blocks(ids) => ids
                .iter()
                .map(|&i| self.block(i).expect("ids were checked").into_read())
                .collect(),
        }
    }

    /// Overwrites of a piece, for one task, as [`piece_reads`](Self::piece_reads).
    fn piece_overwrites(&self, piece: &Piece<'_>) -> Vec<WriteBuffer<BlockRegion<T>>> {
        match piece {
            Piece::Span(sectors) => vec![self.sectors_span(sectors.clone()).into_overwrite()],
            Piece::Blocks(ids) => ids
                .iter()
                .map(|&i| self.block(i).expect("ids were checked"))
                .map(Alias::into_overwrite)
                .collect(),
        }
    }
}

/// `y <- f(x)` elementwise, or the mismatch (nothing written) when the dims differ.
fn assign<U: Copy, T: Copy>(
    y: &mut StridedMut<'_, T>,
    x: &StridedRef<'_, U>,
    f: impl Fn(U) -> T,
) -> Result<(), ShapeMismatch> {
    if tessera_backends::cpu::assign_map(y, x, f) {
        Ok(())
    } else {
        Err(ShapeMismatch {
            expected: y.dims().to_vec(),
            given: x.dims().to_vec(),
        })
    }
}

impl<R, S> AsyncArray<R, S>
where
    R: Scalar<Real = R> + Into<f64>,
    Complex<R>: Scalar<Real = R>,
    S: AbelianSector,
{
    /// This real tensor as a complex one (every imaginary part zero), in a new array on the
    /// same structure: what a real tensor (singular values or eigenvalues as a diagonal
    /// tensor, a real Hamiltonian) becomes before it is contracted with complex tensors.
    /// Scheduled like the elementwise operations; does not wait.
    ///
    /// ```
    /// use num_complex::Complex64;
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    ///
    /// let leg = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 1)])?;
    /// let s = BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?;
    /// let x = AsyncArray::<f64, U1>::random(s, 7);
    /// let z: AsyncArray<Complex64, U1> = x.to_complex()?;
    /// assert_eq!(z.get(&[2, 2])?, Complex64::new(x.get(&[2, 2])?, 0.0));
    /// # Ok::<(), tessera_blocks::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] only when the runtime refuses to enroll a task.
    pub fn to_complex(&self) -> Result<AsyncArray<Complex<R>, S>, Error> {
        // Every element is overwritten: the pieces of every block cover the allocation.
        let out = AsyncArray::<Complex<R>, S>::empty(Arc::clone(self.structure()));
        let ids: Vec<usize> = (0..self.num_blocks()).collect();
        let threads = tessera_core::Runtime::current().threads();
        for piece in &self.pieces(&ids, true) {
            let access = (self.piece_reads(piece), out.piece_overwrites(piece));
            let largest = self.largest(piece);
            <Host as Placement<R>>::schedule(
                "blocks.to_complex",
                largest,
                threads,
                false,
                access,
                move |(xs, ys)| {
                    for xy in xs.into_iter().zip(ys) {
                        try_over_parts(xy, threads, |(x, mut y)| {
                            assign(&mut y, &x, |v: R| Complex::new(v, R::ZERO))
                        })?;
                    }
                    Ok(())
                },
            )?;
        }
        Ok(out)
    }
}

/// The first element of `x` (column-major position and value) whose imaginary part is not
/// at most `tol` in magnitude (a NaN never is).
fn first_imaginary<R: Scalar<Real = R> + Into<f64>>(
    x: &StridedRef<'_, Complex<R>>,
    tol: f64,
) -> Option<(usize, Complex<R>)> {
    let mut found = None;
    x.for_each_run(|k, run| {
        if found.is_none()
            && let Some(i) = run.iter().position(|z| {
                let im: f64 = z.im.into();
                im.is_nan() || im.abs() > tol
            })
        {
            found = Some((k + i, run[i]));
        }
    });
    found
}

/// The tensor index of element `k` (column-major, first leg fastest) of block `id`.
fn element_index<S: AbelianSector>(s: &BlockStructure<S>, id: usize, mut k: usize) -> Vec<usize> {
    let block = s.block(id).expect("a block of the structure");
    block
        .shape()
        .iter()
        .zip(block.segments())
        .zip(s.legs())
        .map(|((&d, &seg), leg)| {
            let local = k % d;
            k /= d;
            leg.offset(seg).expect("a segment of the leg") + local
        })
        .collect()
}

impl<R, S> AsyncArray<Complex<R>, S>
where
    R: Scalar<Real = R> + Into<f64>,
    Complex<R>: Scalar<Real = R>,
    S: AbelianSector,
{
    /// This complex tensor as a real one (the real parts), in a new array on the same
    /// structure, when every imaginary part is at most `tol` in magnitude: the way back from
    /// [`to_complex`](AsyncArray::to_complex), or a result known to be real up to rounding.
    /// `tol = 0.0` asks for exactly real elements, `f64::INFINITY` takes the real parts of
    /// any finite-imaginary tensor. Scheduled like the elementwise operations (one task per
    /// run of blocks); does not wait.
    ///
    /// ```
    /// use num_complex::Complex64;
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Error, Leg, U1};
    ///
    /// let leg = Leg::new(Direction::In, [(U1(0), 1)])?;
    /// let s = BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?;
    /// let z = AsyncArray::<Complex64, U1>::from_blocks(s.clone(), &[vec![Complex64::new(2.0, 1e-15)]])?;
    /// assert_eq!(z.to_real(1e-12)?.get(&[0, 0])?, 2.0);
    ///
    /// let w = AsyncArray::<Complex64, U1>::from_blocks(s, &[vec![Complex64::new(2.0, 0.5)]])?;
    /// let x = w.to_real(1e-12)?; // submitted; the task finds the imaginary part
    /// let Err(Error::Runtime(e)) = x.to_dense() else { panic!() };
    /// assert!(matches!(Error::from_task_failure(&e), Some(Error::ImaginaryPart { .. })));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTolerance`] for a negative or NaN `tol`, before anything is enrolled.
    /// What the data decides surfaces through the result: a task that meets an element
    /// whose imaginary part exceeds `tol` (or is NaN) fails with [`Error::ImaginaryPart`]
    /// (its tensor index, block and value), poisoning the result's blocks of that task;
    /// [`Error::from_task_failure`] reads it out of the poison a wait gives.
    pub fn to_real(&self, tol: f64) -> Result<AsyncArray<R, S>, Error> {
        if tol.is_nan() || tol < 0.0 {
            return Err(Error::InvalidTolerance {
                what: "imaginary-part tolerance",
                given: tol,
            });
        }
        let out = AsyncArray::<R, S>::empty(Arc::clone(self.structure()));
        let ids: Vec<usize> = (0..self.num_blocks()).collect();
        let threads = tessera_core::Runtime::current().threads();
        // Block by block (not flat sector spans), so that an error names its element.
        for piece in &self.pieces(&ids, false) {
            let Piece::Blocks(run) = piece else {
                unreachable!("the pieces of selected blocks are runs of blocks")
            };
            let (run, structure) = (run.to_vec(), Arc::clone(self.structure()));
            let access = (self.piece_reads(piece), out.piece_overwrites(piece));
            let largest = self.largest(piece);
            <Host as Placement<Complex<R>>>::schedule(
                "blocks.to_real",
                largest,
                threads,
                false,
                access,
                move |(xs, ys)| {
                    for (x, &id) in xs.iter().zip(&run) {
                        if let Some((k, z)) = first_imaginary(x, tol) {
                            return Err(Box::new(Error::ImaginaryPart {
                                index: element_index(&structure, id, k),
                                block: id,
                                value: z.to_string(),
                                tol,
                            }));
                        }
                    }
                    for xy in xs.into_iter().zip(ys) {
                        try_over_parts(xy, threads, |(x, mut y)| {
                            assign(&mut y, &x, |z: Complex<R>| z.re)
                        })?;
                    }
                    Ok(())
                },
            )?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Kind, for_each_kind, random_mask, random_structure};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    type C64 = Complex<f64>;

    /// Random structures (half masked, so packed sectors too) over every kind: a real tensor
    /// becomes complex with its values as real parts, and back bit for bit; a complex one
    /// with small imaginary parts becomes its real parts; one imaginary part too large (or
    /// NaN) fails the task that holds it with the element's index and poisons only that
    /// task's blocks.
    fn conversions<S: Kind>(seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..30 {
            let mut s = random_structure::<S>(&mut rng);
            if rng.gen_bool(0.5) {
                s = s
                    .with_present(&random_mask(&mut rng, s.num_allowed()))
                    .unwrap();
            }
            let s = Arc::new(s);
            let x = AsyncArray::<f64, S>::random(Arc::clone(&s), seed ^ case);
            let dense = x.to_dense().unwrap();
            let z = x.to_complex().unwrap();
            assert!(Arc::ptr_eq(z.structure(), &s));
            let want: Vec<C64> = dense.iter().map(|&v| C64::new(v, 0.0)).collect();
            assert_eq!(z.to_dense().unwrap(), want);
            assert_eq!(z.to_real(0.0).unwrap().to_dense().unwrap(), dense);
            // The same through f32.
            let x32 = AsyncArray::<f32, S>::random(Arc::clone(&s), seed ^ case);
            let back = x32.to_complex().unwrap().to_real(0.0).unwrap();
            assert_eq!(back.to_dense().unwrap(), x32.to_dense().unwrap());
            if s.num_blocks() == 0 {
                continue;
            }
            // Imaginary parts within the tolerance are dropped.
            let w = AsyncArray::<C64, S>::random(Arc::clone(&s), seed ^ case ^ 1);
            let small = w.scale_imaginary(1e-14);
            let re: Vec<f64> = small.to_dense().unwrap().iter().map(|z| z.re).collect();
            assert_eq!(small.to_real(1e-13).unwrap().to_dense().unwrap(), re);
            // One element too far from real: its task fails, naming it.
            let mut blocks = small.to_blocks().unwrap();
            let id = rng.gen_range(0..s.num_blocks());
            let k = rng.gen_range(0..blocks[id].len());
            let im = if rng.gen_bool(0.3) { f64::NAN } else { 1e-3 };
            blocks[id][k].im = im;
            let bad = AsyncArray::from_blocks(Arc::clone(&s), &blocks).unwrap();
            let r = bad.to_real(1e-13).unwrap();
            let Err(Error::Runtime(e)) = r.block(id).unwrap().wait().map_err(Error::from) else {
                panic!("the block holding the imaginary part was converted");
            };
            let Some(Error::ImaginaryPart {
                index,
                block,
                value,
                tol,
            }) = Error::from_task_failure(&e)
            else {
                panic!("expected ImaginaryPart, got {e}");
            };
            assert_eq!((*block, *tol), (id, 1e-13));
            let at = bad.get(index).unwrap();
            assert_eq!(at.re, blocks[id][k].re);
            assert!(at.im.is_nan() || at.im == im, "{at} at {index:?}");
            assert_eq!(*value, blocks[id][k].to_string());
            // Blocks of other tasks are converted.
            let blocks_ok = (0..s.num_blocks())
                .filter(|&b| r.block(b).unwrap().wait().is_ok())
                .count();
            assert!(blocks_ok < s.num_blocks());
            // The input is untouched (bit for bit: it may hold a NaN).
            let bits = |b: Vec<Vec<C64>>| -> Vec<(u64, u64)> {
                b.iter()
                    .flatten()
                    .map(|z| (z.re.to_bits(), z.im.to_bits()))
                    .collect()
            };
            assert!(bits(bad.to_blocks().unwrap()) == bits(blocks.clone()));
        }
    }

    impl<S: AbelianSector> AsyncArray<C64, S> {
        /// The real parts with the imaginary parts scaled by `f` (a test helper).
        fn scale_imaginary(&self, f: f64) -> Self {
            let blocks: Vec<Vec<C64>> = self
                .to_blocks()
                .unwrap()
                .into_iter()
                .map(|b| b.into_iter().map(|z| C64::new(z.re, z.im * f)).collect())
                .collect();
            AsyncArray::from_blocks(Arc::clone(self.structure()), &blocks).unwrap()
        }
    }

    #[test]
    fn real_and_complex_convert_both_ways_over_every_sector_kind() {
        for_each_kind!(conversions);
    }

    /// A block big enough to be cut over the workers: the conversion covers every part, and
    /// an element past the first part is still found and named.
    #[test]
    fn a_block_cut_over_the_workers_converts_whole() {
        let leg = crate::Leg::new(crate::Direction::In, [(crate::U1(0), 600)]).unwrap();
        let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], crate::U1(0)).unwrap());
        let rt = tessera_core::Runtime::new(2).unwrap();
        rt.enter(|| {
            let x = AsyncArray::<f64, crate::U1>::random(Arc::clone(&s), 5);
            let z = x.to_complex().unwrap();
            let back = z.to_real(0.0).unwrap();
            assert_eq!(back.to_dense().unwrap(), x.to_dense().unwrap());
            let mut blocks = z.to_blocks().unwrap();
            blocks[0][599 * 600 + 17].im = 0.25;
            let bad = AsyncArray::from_blocks(Arc::clone(&s), &blocks).unwrap();
            let Err(Error::Runtime(e)) = bad.to_real(0.1).unwrap().to_dense() else {
                panic!("converted");
            };
            let Some(Error::ImaginaryPart { index, .. }) = Error::from_task_failure(&e) else {
                panic!("expected ImaginaryPart, got {e}");
            };
            assert_eq!(index, &[17, 599]);
        });
    }

    #[test]
    fn an_invalid_tolerance_is_refused_before_anything_runs() {
        let leg = crate::Leg::new(crate::Direction::In, [(crate::U1(0), 2)]).unwrap();
        let s = BlockStructure::new([leg.clone()], [leg.dual()], crate::U1(0)).unwrap();
        let z = AsyncArray::<C64, crate::U1>::random(s, 3);
        for tol in [-1e-12, f64::NAN, f64::NEG_INFINITY] {
            assert!(matches!(
                z.to_real(tol),
                Err(Error::InvalidTolerance { given, .. }) if given.to_bits() == tol.to_bits()
            ));
        }
        // +inf takes the real parts of anything with finite imaginary parts.
        let re: Vec<f64> = z.to_dense().unwrap().iter().map(|z| z.re).collect();
        assert_eq!(z.to_real(f64::INFINITY).unwrap().to_dense().unwrap(), re);
    }
}
