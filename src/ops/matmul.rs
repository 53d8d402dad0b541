//! f32 matrix products of burn-flex tensors for the linear layers, split across rayon's threads
//! by blocks of output rows or columns, one single-threaded `gemm` call per block.
//!
//! burn-flex hands a product above 192³ multiply-adds to `gemm` with its own rayon
//! parallelism, which does poorly on the thin products of a training step: in the MNIST net's
//! profile on the H200 (16 cores) the `[64, 800] · [800, 500]` layer took 0.32 ms forward,
//! 0.35 ms for its input gradient and 0.59 ms for its weight gradient, about 85 GFLOP/s. Here
//! the output is cut into one block per thread along its longer side, so every thread runs the
//! full reduction of its block with no synchronisation; operands are read through their
//! strides (a transposed weight or input is not copied). Each output is the same `k`-long
//! reduction as one `gemm` call computes, but `gemm`'s blocking depends on the block's size,
//! so results may differ from burn-flex's in the last bits (tests compare within 1e-5). On
//! burn-ndarray the large products come here too, through the bridge.

use super::layout::{flex_into_primitive, primitive_into_flex};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};
use burn_flex::{FlexTensor, Layout};
use burn_std::{Bytes, Shape};
use rayon::prelude::*;

/// Multiply-adds per task at least: below this a block's `gemm` call costs less than handing
/// it to another thread.
const MIN_TASK_MACS: usize = 1 << 19;

/// Multiply-adds from which a product on burn-ndarray is run here (the MNIST net's
/// `[64, 500] · [500, 10]` classifier has 320 000).
const NDARRAY_MIN_MACS: usize = 1 << 18;

/// Rows or columns of a block are a multiple of this (`gemm`'s register tiles).
const BLOCK_ALIGN: usize = 16;

/// A strided f32 matrix inside a burn-flex tensor's storage.
#[derive(Clone, Copy)]
struct Matrix<'a> {
    values: &'a [f32],
    offset: usize,
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
}

impl<'a> Matrix<'a> {
    /// The matrix view of a rank-2 f32 tensor with non-negative strides; None otherwise.
    fn of(tensor: &'a FlexTensor) -> Option<Self> {
        let layout = tensor.layout();
        if tensor.dtype() != DType::F32 || layout.num_dims() != 2 || !layout.has_positive_strides()
        {
            return None;
        }
        let (rows, cols) = (layout.shape()[0], layout.shape()[1]);
        let strides = layout.strides();
        let values = tensor.storage::<f32>();
        // The last element must lie inside the storage (a view always does; checked since the
        // `gemm` call reads through raw pointers).
        if rows > 0 && cols > 0 {
            let last = layout.start_offset() as isize
                + (rows as isize - 1) * strides[0]
                + (cols as isize - 1) * strides[1];
            if last < 0 || last as usize >= values.len() {
                return None;
            }
        }
        Some(Self {
            values,
            offset: layout.start_offset(),
            rows,
            cols,
            row_stride: strides[0],
            col_stride: strides[1],
        })
    }

    /// The transposed matrix when `transpose` is set (the same values read through exchanged
    /// strides), else the matrix.
    fn transposed_if(self, transpose: bool) -> Self {
        if !transpose {
            return self;
        }
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Pointer to element `(row, col)`; `row`/`col` may be one past the end of an empty range.
    fn at(&self, row: usize, col: usize) -> *const f32 {
        let index =
            self.offset as isize + row as isize * self.row_stride + col as isize * self.col_stride;
        self.values.as_ptr().wrapping_offset(index)
    }
}

/// The output's base address, shared by the tasks that each write their own block.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the tasks write disjoint blocks of one allocation that outlives them.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The address (a method, so that closures capture the whole `Send` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `lhs · rhs (+ bias)` as a dense row-major `[m, n]` vector. `bias` (length `n`) is added to
/// each row's product in one rounding, as a separate addition would.
fn product(lhs: Matrix, rhs: Matrix, bias: Option<&[f32]>) -> Vec<f32> {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    debug_assert_eq!(rhs.rows, k);
    if m == 0 || n == 0 {
        return vec![0f32; m * n];
    }
    let macs = m * n * k.max(1);
    let tasks = (macs / MIN_TASK_MACS)
        .clamp(1, rayon::current_num_threads())
        .min(m.max(n).div_ceil(BLOCK_ALIGN));
    // Split the longer side; blocks of whole register tiles.
    let split_rows = m >= n;
    let side = if split_rows { m } else { n };
    let block = side.div_ceil(tasks).next_multiple_of(BLOCK_ALIGN).min(side);
    let blocks = side.div_ceil(block);
    // Every element is written once, by the task of its block (`gemm` writes its whole
    // destination), so the output is not zeroed first.
    super::elementwise::filled(m * n, |slots| {
        let base = OutPtr(slots.as_mut_ptr().cast::<f32>());
        let run = |index: usize| {
            let start = index * block;
            let len = block.min(side - start);
            let (r0, rows, c0, cols) = if split_rows {
                (start, len, 0, n)
            } else {
                (0, m, start, len)
            };
            let dst = base.get().wrapping_add(r0 * n + c0);
            if let Some(bias) = bias {
                for r in 0..rows {
                    // SAFETY: row `r0 + r`, columns `c0..c0 + cols` of the `[m, n]` output are
                    // this task's alone (written, not read, here).
                    unsafe {
                        core::ptr::copy_nonoverlapping(bias[c0..].as_ptr(), dst.add(r * n), cols);
                    }
                }
            }
            // SAFETY: the operand pointers address `rows x k` and `k x cols` sub-matrices inside
            // their tensors' storage (checked in `Matrix::of`), the destination block is inside
            // `out` and written by this task only; `gemm` reads the destination only when asked
            // to (`bias`), after it was written above.
            unsafe {
                gemm::gemm(
                    rows,
                    cols,
                    k,
                    dst,
                    1,
                    n as isize,
                    bias.is_some(),
                    lhs.at(r0, 0),
                    lhs.col_stride,
                    lhs.row_stride,
                    rhs.at(0, c0),
                    rhs.col_stride,
                    rhs.row_stride,
                    if bias.is_some() { 1.0 } else { 0.0 },
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        };
        if blocks == 1 {
            run(0);
        } else {
            (0..blocks).into_par_iter().for_each(run);
        }
    })
}

/// Which operands of a product are read transposed.
#[derive(Clone, Copy)]
struct Transposed {
    lhs: bool,
    rhs: bool,
}

/// Neither operand transposed.
const AS_GIVEN: Transposed = Transposed {
    lhs: false,
    rhs: false,
};

/// `lhs · rhs (+ bias)` of burn-flex tensors, each operand read transposed where `transposed`
/// says so, when `C` is burn-flex and both operands are rank-2 f32 matrices (and the bias a
/// rank-1 f32 tensor of the output's width); the operands back, as given, otherwise.
///
/// The transposition is a matter of strides here, after the operands became burn-flex tensors:
/// a transposed burn-ndarray view would be copied dense by the bridge first (the MNIST net's
/// `[800, 500]` weight, 1.6 MB, on every input gradient of its first linear layer).
#[allow(clippy::type_complexity)]
fn flex_product<C: Backend>(
    lhs: FloatTensor<C>,
    rhs: FloatTensor<C>,
    bias: Option<FloatTensor<C>>,
    transposed: Transposed,
) -> Result<FloatTensor<C>, (FloatTensor<C>, FloatTensor<C>, Option<FloatTensor<C>>)> {
    if !(super::layout::is_flex::<C>() || large_on_ndarray::<C>(&lhs, &rhs, transposed)) {
        return Err((lhs, rhs, bias));
    }
    let into = |t: FloatTensor<C>| primitive_into_flex::<FloatTensor<C>>(t).ok();
    let (lhs, rhs, bias) = (
        into(lhs).expect("C is burn-flex or burn-ndarray"),
        into(rhs).expect("C is burn-flex or burn-ndarray"),
        bias.map(|b| into(b).expect("C is burn-flex or burn-ndarray")),
    );
    let bias_values = bias.as_ref().map(|b| {
        let layout = b.layout();
        (b.dtype() == DType::F32)
            .then(|| layout.contiguous_offsets())
            .flatten()
            .map(|(s, e)| &b.storage::<f32>()[s..e])
    });
    let operands = (
        Matrix::of(&lhs).map(|m| m.transposed_if(transposed.lhs)),
        Matrix::of(&rhs).map(|m| m.transposed_if(transposed.rhs)),
    );
    let result = match (operands, bias_values) {
        ((Some(l), Some(r)), bias)
            if l.cols == r.rows && bias.is_none_or(|b| b.is_some_and(|b| b.len() == r.cols)) =>
        {
            let shape = Shape::new([l.rows, r.cols]);
            Some(FlexTensor::new(
                Bytes::from_elems(product(l, r, bias.flatten())),
                Layout::contiguous(shape),
                DType::F32,
            ))
        }
        _ => None,
    };
    match result {
        Some(out) => Ok(flex_into_primitive(out)),
        None => Err((
            flex_into_primitive(lhs),
            flex_into_primitive(rhs),
            bias.map(flex_into_primitive),
        )),
    }
}

/// Whether `C` is burn-ndarray and the product is a large f32 one, which goes to the threaded
/// blocks here through the bridge. burn-ndarray runs a 2D product as one `matrixmultiply` call;
/// small ones (a ResNet's classifier) stay its own, bit for bit. Empty ones come here too:
/// burn-ndarray's divides by the matrix size and panics on them (an empty batch).
fn large_on_ndarray<C: Backend>(
    lhs: &FloatTensor<C>,
    rhs: &FloatTensor<C>,
    transposed: Transposed,
) -> bool {
    use burn_backend::TensorMetadata;
    let (l, r) = (lhs.shape(), rhs.shape());
    if !(super::layout::is_ndarray::<C>()
        && lhs.dtype() == DType::F32
        && rhs.dtype() == DType::F32
        && l.num_dims() == 2
        && r.num_dims() == 2)
    {
        return false;
    }
    // `[m, k] · [k, n]` as the operands are read.
    let (m, k) = if transposed.lhs {
        (l[1], l[0])
    } else {
        (l[0], l[1])
    };
    let n = if transposed.rhs { r[0] } else { r[1] };
    matches!(m * k * n, 0 | NDARRAY_MIN_MACS..)
}

/// `x` as a matrix: every leading dimension folded into the rows.
pub(crate) fn as_matrix<C: Backend>(x: FloatTensor<C>) -> FloatTensor<C> {
    let shape = burn_backend::TensorMetadata::shape(&x);
    let cols = shape[shape.num_dims() - 1];
    let rows = shape.num_elements() / cols.max(1);
    super::layout::float_reshape::<C>(x, Shape::new([rows, cols]))
}

/// `C`'s `linear` on the CPU: `[..., d_in] · [d_in, d_out] (+ bias)`, threaded for burn-flex and
/// large products on burn-ndarray.
pub(crate) fn linear<C: Backend>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    bias: Option<FloatTensor<C>>,
) -> FloatTensor<C> {
    let x_shape = burn_backend::TensorMetadata::shape(&x);
    let mut out_shape = x_shape.clone();
    let last = out_shape.num_dims() - 1;
    out_shape[last] = burn_backend::TensorMetadata::shape(&weight)[1];
    match flex_product::<C>(as_matrix::<C>(x), weight, bias, AS_GIVEN) {
        Ok(out) => super::layout::float_reshape::<C>(out, out_shape),
        Err((x, weight, bias)) => {
            C::linear(super::layout::float_reshape::<C>(x, x_shape), weight, bias)
        }
    }
}

/// `C`'s `linear_x_backward` on the CPU: `output_grad · weightᵀ`, threaded for burn-flex and
/// large products on burn-ndarray.
pub(crate) fn linear_x_backward<C: Backend>(
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
) -> FloatTensor<C> {
    let mut x_shape = burn_backend::TensorMetadata::shape(&output_grad);
    let last = x_shape.num_dims() - 1;
    x_shape[last] = burn_backend::TensorMetadata::shape(&weight)[0];
    let grad_shape = burn_backend::TensorMetadata::shape(&output_grad);
    let weight_t = Transposed {
        lhs: false,
        rhs: true,
    };
    match flex_product::<C>(as_matrix::<C>(output_grad), weight, None, weight_t) {
        Ok(grad) => super::layout::float_reshape::<C>(grad, x_shape),
        Err((output_grad, weight, _)) => C::linear_x_backward(
            weight,
            super::layout::float_reshape::<C>(output_grad, grad_shape),
        ),
    }
}

/// `C`'s `linear_weight_backward` on the CPU: `xᵀ · output_grad` over all rows, threaded for
/// burn-flex and large products on burn-ndarray.
pub(crate) fn linear_weight_backward<C: Backend>(
    x: FloatTensor<C>,
    output_grad: FloatTensor<C>,
) -> FloatTensor<C> {
    let (x_shape, grad_shape) = (
        burn_backend::TensorMetadata::shape(&x),
        burn_backend::TensorMetadata::shape(&output_grad),
    );
    let x_t = Transposed {
        lhs: true,
        rhs: false,
    };
    match flex_product::<C>(as_matrix::<C>(x), as_matrix::<C>(output_grad), None, x_t) {
        Ok(grad) => grad,
        Err((x, output_grad, _)) => C::linear_weight_backward(
            super::layout::float_reshape::<C>(x, x_shape),
            super::layout::float_reshape::<C>(output_grad, grad_shape),
        ),
    }
}
