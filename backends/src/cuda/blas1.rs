//! cuBLAS level 1 over strided vectors in device buffers: axpy, scal, nrm2 and dot.
//!
//! Owns: [`VecLayout`], [`DeviceVec`], [`DeviceVecMut`], and [`CudaDevice::axpy`],
//! [`CudaDevice::scal`], [`CudaDevice::nrm2`], [`CudaDevice::dot`] with their device-result
//! forms [`CudaDevice::nrm2_into`] and [`CudaDevice::dot_into`].
//!
//! Results: the `_into` forms leave the reduction in an element of a device buffer and return
//! once it is enqueued (no host wait; a later call on the stream can read it). They run on the
//! device's second cuBLAS handle, which is in device pointer mode for its whole life. The plain
//! forms [`CudaDevice::nrm2`] and [`CudaDevice::dot`] return the value on the host: they run
//! the `_into` form into a one-element buffer and copy it back with
//! [`CudaDevice::copy_to_host`], which waits for the stream, so the value read is the finished
//! one (cuBLAS's own host-pointer mode is not used for results: its docs leave the host to
//! synchronise before reading).
//!
//! Invariant: cuBLAS is called only after [`check`] (a pure function) saw every vector on the
//! calling device, inside its buffer, with a positive increment, the vectors of one operation of
//! equal length, and every size within cuBLAS's 32-bit integers; otherwise the call returns a
//! [`CudaError`] and nothing is enqueued or written.

use super::device::{CudaDevice, CudaScalar, DeviceBuffer};
use super::{CudaError, cublas};
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use std::ffi::c_int;

/// Where a strided vector lies in a buffer: `len` elements from element `offset`, consecutive
/// ones `inc` elements apart (cuBLAS's increment; positive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VecLayout {
    /// The element the vector starts at.
    pub offset: usize,
    /// Elements in the vector.
    pub len: usize,
    /// Elements between consecutive ones; at least 1.
    pub inc: usize,
}

impl VecLayout {
    /// `len` consecutive elements from element 0.
    pub fn contiguous(len: usize) -> Self {
        Self {
            offset: 0,
            len,
            inc: 1,
        }
    }

    /// The elements the vector spans from `offset`: `(len - 1) * inc + 1`, or 0 for an empty
    /// vector; `None` on overflow.
    pub fn extent(&self) -> Option<usize> {
        if self.len == 0 {
            return Some(0);
        }
        (self.len - 1).checked_mul(self.inc)?.checked_add(1)
    }

    /// Checks that the vector has a positive increment and lies within `buf_len` elements.
    pub(crate) fn check(&self, operand: &'static str, buf_len: usize) -> Result<(), CudaError> {
        if self.inc == 0 {
            return Err(CudaError::ZeroIncrement { operand });
        }
        let needed = self.extent().and_then(|e| self.offset.checked_add(e));
        match needed {
            Some(needed) if needed <= buf_len => Ok(()),
            _ => Err(CudaError::OutOfBounds {
                operand,
                needed: needed.unwrap_or(usize::MAX),
                len: buf_len,
            }),
        }
    }
}

/// A strided vector to read, in a device buffer.
#[derive(Debug, Clone, Copy)]
pub struct DeviceVec<'a, T> {
    /// The buffer.
    pub buf: &'a DeviceBuffer<T>,
    /// Where the vector lies in it.
    pub layout: VecLayout,
}

/// A strided vector to write, in a device buffer.
#[derive(Debug)]
pub struct DeviceVecMut<'a, T> {
    /// The buffer.
    pub buf: &'a mut DeviceBuffer<T>,
    /// Where the vector lies in it.
    pub layout: VecLayout,
}

impl<T> DeviceBuffer<T> {
    /// The vector at `layout` in this buffer, to read (checked when used).
    pub fn vec(&self, layout: VecLayout) -> DeviceVec<'_, T> {
        DeviceVec { buf: self, layout }
    }

    /// The vector at `layout` in this buffer, to write (checked when used).
    pub fn vec_mut(&mut self, layout: VecLayout) -> DeviceVecMut<'_, T> {
        DeviceVecMut { buf: self, layout }
    }

    /// The whole buffer as one contiguous vector, to read.
    pub fn as_vec(&self) -> DeviceVec<'_, T> {
        self.vec(VecLayout::contiguous(self.len()))
    }

    /// The whole buffer as one contiguous vector, to write.
    pub fn as_vec_mut(&mut self) -> DeviceVecMut<'_, T> {
        let len = self.len();
        self.vec_mut(VecLayout::contiguous(len))
    }
}

/// One vector as [`check`] sees it: where it lies, its buffer's length and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VecArg {
    pub(crate) operand: &'static str,
    pub(crate) layout: VecLayout,
    pub(crate) buf_len: usize,
    pub(crate) ordinal: usize,
}

impl<T> DeviceVec<'_, T> {
    fn arg(&self, operand: &'static str) -> VecArg {
        VecArg {
            operand,
            layout: self.layout,
            buf_len: self.buf.len(),
            ordinal: self.buf.ordinal(),
        }
    }
}

impl<T> DeviceVecMut<'_, T> {
    fn arg(&self, operand: &'static str) -> VecArg {
        VecArg {
            operand,
            layout: self.layout,
            buf_len: self.buf.len(),
            ordinal: self.buf.ordinal(),
        }
    }
}

/// The cuBLAS integers of one checked level-1 call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Level1 {
    /// Elements in each vector.
    pub(crate) n: c_int,
    /// The increments of the vectors, in the order given.
    pub(crate) incs: [c_int; 2],
}

fn int(what: &'static str, value: usize) -> Result<c_int, CudaError> {
    c_int::try_from(value).map_err(|_| CudaError::TooLarge {
        what,
        value,
        bits: 32,
    })
}

/// Checks the vectors of one level-1 operation run on device `device`: each on that device,
/// inside its buffer with a positive increment, all of the first one's length, and the sizes
/// within cuBLAS's integers. `result`, when given, is a one-element slot for a reduction.
/// Needs no device.
pub(crate) fn check(
    operation: &'static str,
    device: usize,
    vectors: &[VecArg],
    result: Option<VecArg>,
) -> Result<Level1, CudaError> {
    for v in vectors.iter().chain(result.as_ref()) {
        if v.ordinal != device {
            return Err(CudaError::WrongDevice {
                operand: v.operand,
                expected: device,
                given: v.ordinal,
            });
        }
    }
    for v in vectors.iter().chain(result.as_ref()) {
        v.layout.check(v.operand, v.buf_len)?;
    }
    if let Some(r) = result
        && r.layout.len != 1
    {
        return Err(CudaError::VectorLengths {
            operation,
            operand: r.operand,
            expected: 1,
            given: r.layout.len,
        });
    }
    let first = vectors.first().map_or(0, |v| v.layout.len);
    for v in vectors.iter().skip(1) {
        if v.layout.len != first {
            return Err(CudaError::VectorLengths {
                operation,
                operand: v.operand,
                expected: first,
                given: v.layout.len,
            });
        }
    }
    let mut incs = [1; 2];
    for (slot, v) in incs.iter_mut().zip(vectors) {
        *slot = int("a vector's increment", v.layout.inc)?;
    }
    Ok(Level1 {
        n: int("a vector's length", first)?,
        incs,
    })
}

/// The device address of element `offset` of an allocation starting at `base` (the offset was
/// checked to lie within the allocation, so this neither overflows nor leaves it).
pub(crate) fn element<T>(base: CUdeviceptr, offset: usize) -> CUdeviceptr {
    base + (offset * std::mem::size_of::<T>()) as CUdeviceptr
}

impl CudaDevice {
    /// `y <- alpha x + y` with cuBLAS's axpy, enqueued on this device's stream (it returns
    /// before the update is done).
    ///
    /// # Errors
    ///
    /// [`CudaError::WrongDevice`], [`CudaError::OutOfBounds`], [`CudaError::ZeroIncrement`],
    /// [`CudaError::VectorLengths`] (x and y of different lengths), [`CudaError::TooLarge`]:
    /// in each case nothing is enqueued and y is untouched. [`CudaError::Cublas`] if cuBLAS
    /// refuses the call.
    pub fn axpy<T: CudaScalar>(
        &self,
        alpha: T,
        x: DeviceVec<'_, T>,
        y: DeviceVecMut<'_, T>,
    ) -> Result<(), CudaError> {
        let checked = check("axpy", self.ordinal(), &[x.arg("x"), y.arg("y")], None)?;
        if checked.n == 0 {
            return Ok(());
        }
        self.bind()?;
        let stream = self.stream();
        let (x_base, _x_read) = x.buf.as_cuda_slice().device_ptr(stream);
        let (y_base, _y_write) = y.buf.as_cuda_slice_mut().device_ptr_mut(stream);
        // SAFETY: `check` put x and y (n elements, positive increments) inside their buffers,
        // both on this device, whose context is current; y's buffer is borrowed mutably, so it
        // is not x's. The handle is in host pointer mode and `alpha` lives across the call
        // (cuBLAS reads a host scalar before returning). The guards, dropped after the call is
        // enqueued, record the buffers' use on the stream.
        unsafe {
            (T::AXPY)(
                *self.blas.handle(),
                checked.n,
                &alpha,
                element::<T>(x_base, x.layout.offset) as *const T,
                checked.incs[0],
                element::<T>(y_base, y.layout.offset) as *mut T,
                checked.incs[1],
            )
        }
        .result()
        .map_err(cublas("run axpy"))
    }

    /// `x <- alpha x` with cuBLAS's scal, enqueued on this device's stream.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::axpy`], for x alone.
    pub fn scal<T: CudaScalar>(&self, alpha: T, x: DeviceVecMut<'_, T>) -> Result<(), CudaError> {
        let checked = check("scal", self.ordinal(), &[x.arg("x")], None)?;
        if checked.n == 0 {
            return Ok(());
        }
        self.bind()?;
        let stream = self.stream();
        let (x_base, _x_write) = x.buf.as_cuda_slice_mut().device_ptr_mut(stream);
        // SAFETY: as in `axpy`, for x alone.
        unsafe {
            (T::SCAL)(
                *self.blas.handle(),
                checked.n,
                &alpha,
                element::<T>(x_base, x.layout.offset) as *mut T,
                checked.incs[0],
            )
        }
        .result()
        .map_err(cublas("run scal"))
    }

    /// `result[index] <- ||x||_2` with cuBLAS's nrm2, left in device memory and enqueued on this
    /// device's stream (no host wait). An empty x gives 0.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::axpy`]; `index` past the end of `result` is
    /// [`CudaError::OutOfBounds`] for `the result`.
    pub fn nrm2_into<T: CudaScalar>(
        &self,
        x: DeviceVec<'_, T>,
        result: &mut DeviceBuffer<T>,
        index: usize,
    ) -> Result<(), CudaError> {
        let slot = result_arg(result, index);
        let checked = check("nrm2", self.ordinal(), &[x.arg("x")], Some(slot))?;
        if checked.n == 0 {
            return self.zero_element(result, index);
        }
        self.bind()?;
        let stream = self.stream();
        let (x_base, _x_read) = x.buf.as_cuda_slice().device_ptr(stream);
        let (r_base, _r_write) = result.as_cuda_slice_mut().device_ptr_mut(stream);
        // SAFETY: as in `axpy`, for x; the result slot was checked to be inside `result`, on
        // this device, which is borrowed mutably (so it is not x's buffer). This handle is in
        // device pointer mode for its whole life, so cuBLAS writes the norm to device memory
        // in stream order and does not touch the host.
        unsafe {
            (T::NRM2)(
                *self.blas_device_results.handle(),
                checked.n,
                element::<T>(x_base, x.layout.offset) as *const T,
                checked.incs[0],
                element::<T>(r_base, index) as *mut T,
            )
        }
        .result()
        .map_err(cublas("run nrm2"))
    }

    /// `result[index] <- x . y` with cuBLAS's dot, left in device memory and enqueued on this
    /// device's stream (no host wait). Empty vectors give 0.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::nrm2_into`], and [`CudaError::VectorLengths`] for x and y of different
    /// lengths.
    pub fn dot_into<T: CudaScalar>(
        &self,
        x: DeviceVec<'_, T>,
        y: DeviceVec<'_, T>,
        result: &mut DeviceBuffer<T>,
        index: usize,
    ) -> Result<(), CudaError> {
        let slot = result_arg(result, index);
        let checked = check("dot", self.ordinal(), &[x.arg("x"), y.arg("y")], Some(slot))?;
        if checked.n == 0 {
            return self.zero_element(result, index);
        }
        self.bind()?;
        let stream = self.stream();
        let (x_base, _x_read) = x.buf.as_cuda_slice().device_ptr(stream);
        let (y_base, _y_read) = y.buf.as_cuda_slice().device_ptr(stream);
        let (r_base, _r_write) = result.as_cuda_slice_mut().device_ptr_mut(stream);
        // SAFETY: as in `nrm2_into`, for x and y (which may share a buffer: both are read).
        unsafe {
            (T::DOT)(
                *self.blas_device_results.handle(),
                checked.n,
                element::<T>(x_base, x.layout.offset) as *const T,
                checked.incs[0],
                element::<T>(y_base, y.layout.offset) as *const T,
                checked.incs[1],
                element::<T>(r_base, index) as *mut T,
            )
        }
        .result()
        .map_err(cublas("run dot"))
    }

    /// `||x||_2` on the host: [`CudaDevice::nrm2_into`] a one-element device buffer, then a copy
    /// back that waits for the stream (so the value is the finished norm).
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::nrm2_into`], and the driver's error from the copy.
    pub fn nrm2<T: CudaScalar>(&self, x: DeviceVec<'_, T>) -> Result<T, CudaError> {
        // Checked before allocating, so a bad x costs no device call.
        check("nrm2", self.ordinal(), &[x.arg("x")], None)?;
        let mut slot = self.alloc_zeros::<T>(1)?;
        self.nrm2_into(x, &mut slot, 0)?;
        let mut host = [T::ZERO];
        self.copy_to_host(&slot, &mut host)?;
        Ok(host[0])
    }

    /// `x . y` on the host: [`CudaDevice::dot_into`] a one-element device buffer, then a copy
    /// back that waits for the stream.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::dot_into`], and the driver's error from the copy.
    pub fn dot<T: CudaScalar>(
        &self,
        x: DeviceVec<'_, T>,
        y: DeviceVec<'_, T>,
    ) -> Result<T, CudaError> {
        check("dot", self.ordinal(), &[x.arg("x"), y.arg("y")], None)?;
        let mut slot = self.alloc_zeros::<T>(1)?;
        self.dot_into(x, y, &mut slot, 0)?;
        let mut host = [T::ZERO];
        self.copy_to_host(&slot, &mut host)?;
        Ok(host[0])
    }

    /// Writes a zero to `buf[index]` (checked in bounds by the caller), stream-ordered.
    fn zero_element<T: CudaScalar>(
        &self,
        buf: &mut DeviceBuffer<T>,
        index: usize,
    ) -> Result<(), CudaError> {
        self.bind()?;
        let stream = self.stream().clone();
        let mut one = buf.as_cuda_slice_mut().slice_mut(index..index + 1);
        stream
            .memset_zeros(&mut one)
            .map_err(super::driver("zero a result element"))
    }
}

fn result_arg<T>(result: &DeviceBuffer<T>, index: usize) -> VecArg {
    VecArg {
        operand: "the result",
        layout: VecLayout {
            offset: index,
            len: 1,
            inc: 1,
        },
        buf_len: result.len(),
        ordinal: result.ordinal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(operand: &'static str, offset: usize, len: usize, inc: usize, buf_len: usize) -> VecArg {
        VecArg {
            operand,
            layout: VecLayout { offset, len, inc },
            buf_len,
            ordinal: 0,
        }
    }

    /// Runs everywhere: extents, bounds and increments.
    #[test]
    fn vector_layouts_are_checked_against_their_buffers() {
        let v = VecLayout {
            offset: 2,
            len: 4,
            inc: 3,
        };
        assert_eq!(v.extent(), Some(10));
        assert_eq!(v.check("x", 12), Ok(()));
        assert_eq!(
            v.check("x", 11),
            Err(CudaError::OutOfBounds {
                operand: "x",
                needed: 12,
                len: 11
            })
        );
        assert_eq!(
            VecLayout { inc: 0, ..v }.check("y", 100),
            Err(CudaError::ZeroIncrement { operand: "y" })
        );
        // An empty vector spans nothing and may start at the end.
        let empty = VecLayout {
            offset: 5,
            len: 0,
            inc: 1,
        };
        assert_eq!(empty.extent(), Some(0));
        assert_eq!(empty.check("x", 5), Ok(()));
        assert!(empty.check("x", 4).is_err());
        // Overflow is out of bounds, not a wrap.
        let huge = VecLayout {
            offset: 1,
            len: usize::MAX,
            inc: 2,
        };
        assert_eq!(huge.extent(), None);
        assert!(matches!(
            huge.check("x", 10),
            Err(CudaError::OutOfBounds {
                needed: usize::MAX,
                ..
            })
        ));
    }

    /// Runs everywhere: what an axpy, scal, nrm2 or dot checks before it reaches cuBLAS.
    #[test]
    fn level1_calls_are_checked_before_any_call() {
        // axpy on strided vectors: x every 2nd of 9, y every 3rd from 1 of 14.
        let x = arg("x", 0, 5, 2, 9);
        let y = arg("y", 1, 5, 3, 14);
        assert_eq!(
            check("axpy", 0, &[x, y], None),
            Ok(Level1 { n: 5, incs: [2, 3] })
        );
        // Wrong length: y holds 4 elements, x 5.
        let err = check("axpy", 0, &[x, arg("y", 1, 4, 3, 14)], None).unwrap_err();
        assert_eq!(
            err,
            CudaError::VectorLengths {
                operation: "axpy",
                operand: "y",
                expected: 5,
                given: 4
            }
        );
        assert_eq!(
            err.to_string(),
            "expected y of axpy to hold 5 elements, but it holds 4"
        );
        // Wrong device: y on device 1, the call on device 0; checked before bounds.
        let on_one = VecArg {
            ordinal: 1,
            buf_len: 0,
            ..y
        };
        let err = check("axpy", 0, &[x, on_one], None).unwrap_err();
        assert_eq!(
            err,
            CudaError::WrongDevice {
                operand: "y",
                expected: 0,
                given: 1
            }
        );
        assert_eq!(
            err.to_string(),
            "expected y on device 0, but it lives on device 1"
        );
        // A buffer too short, a zero increment.
        assert!(matches!(
            check("scal", 0, &[arg("x", 0, 5, 2, 8)], None),
            Err(CudaError::OutOfBounds {
                operand: "x",
                needed: 9,
                len: 8
            })
        ));
        assert_eq!(
            check("scal", 0, &[arg("x", 0, 5, 0, 8)], None),
            Err(CudaError::ZeroIncrement { operand: "x" })
        );
        // Result slots: inside the buffer, on the device, one element.
        let slot = arg("the result", 3, 1, 1, 4);
        assert_eq!(
            check("dot", 0, &[x, x], Some(slot)),
            Ok(Level1 { n: 5, incs: [2, 2] })
        );
        assert!(matches!(
            check("nrm2", 0, &[x], Some(arg("the result", 4, 1, 1, 4))),
            Err(CudaError::OutOfBounds {
                operand: "the result",
                needed: 5,
                len: 4
            })
        ));
        assert!(matches!(
            check("nrm2", 2, &[VecArg { ordinal: 2, ..x }], Some(slot)),
            Err(CudaError::WrongDevice {
                operand: "the result",
                expected: 2,
                given: 0
            })
        ));
        // Sizes past cuBLAS's 32-bit integers.
        let long = 1_usize << 31;
        assert_eq!(
            check("scal", 0, &[arg("x", 0, long, 1, long)], None),
            Err(CudaError::TooLarge {
                what: "a vector's length",
                value: long,
                bits: 32
            })
        );
        assert_eq!(
            check("scal", 0, &[arg("x", 0, 2, long, long + 1)], None),
            Err(CudaError::TooLarge {
                what: "a vector's increment",
                value: long,
                bits: 32
            })
        );
        // Empty vectors pass with n = 0 (the calls then do nothing or write a zero).
        assert_eq!(
            check(
                "dot",
                0,
                &[arg("x", 0, 0, 1, 0), arg("y", 0, 0, 1, 0)],
                None
            )
            .unwrap()
            .n,
            0
        );
    }

    #[test]
    fn element_addresses_step_by_the_element_size() {
        assert_eq!(element::<f64>(0x1000, 3), 0x1018);
        assert_eq!(element::<f32>(0x1000, 3), 0x100c);
        assert_eq!(element::<f32>(0x1000, 0), 0x1000);
    }
}
