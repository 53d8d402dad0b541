//! conv2d forward and both gradients of f32 burn-flex tensors on the CPU: the convs placed on
//! the CPU, and the CPU side of an accelerator failure.
//!
//! burn-flex runs the forward as im2col and `gemm`, but its gradients are Burn's defaults (a
//! transposed convolution and a convolution of swapped operands, each with copies around it):
//! on 2 cores a `[32, 16, 32, 32]` 3×3 conv took 58 ms forward and backward (and burn-ndarray
//! 1.7 s). Here each phase is a set of independent tasks across rayon's threads, each an
//! im2col of a block of one image into a per-thread buffer and one single-threaded `gemm` call:
//!
//! - forward: per image and block of output positions, `out = W · cols (+ bias)`, written in
//!   place into the NCHW output;
//! - input gradient: per image and block of input channels, `Wᵀ · dy` into a buffer, then
//!   scattered back onto the input's positions (col2im), each channel written by one task;
//! - weight gradient: the images' blocks of output positions cut into a fixed number of parts,
//!   each part summing `dy · colsᵀ` into its own f32 partial, the partials then added in order.
//!
//! Where an image's output plane is under half a block (ResNet20's last stage: 64 positions),
//! a task takes several whole images side by side instead, gathered into its buffers and
//! written back after, so that each `gemm` call keeps a long side.
//!
//! A 1×1 kernel at stride 1 without padding reads and writes the NCHW planes directly (no im2col).
//! How the work is cut depends on the shapes only, never on the number of threads, so results
//! are the same bits on any machine with the same `gemm` kernels. Each output is a different
//! summation order than burn-flex's or burn-ndarray's, so results agree within f32 rounding, not
//! bit for bit (tested against an f64 reference).

use super::layout::flex_into_primitive;
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};
use burn_flex::{FlexTensor, Layout};
use burn_std::{Bytes, Shape};
use rayon::prelude::*;
use std::cell::RefCell;

/// Output positions per forward or weight-gradient task, at most: an im2col block of
/// `K × 512` values stays within a core's L2 for ResNet-sized `K`.
const COLUMN_BLOCK: usize = 512;

/// Rows of the input gradient's `Wᵀ · dy` per task, about: channels are grouped so that a task
/// holds this many `(channel, tap)` rows.
const DGRAD_ROWS: usize = 128;

/// Tasks a phase is cut into at least, where the batch allows, when whole images go together:
/// twice the 16 cores of the machines measured, whose pool runs 15 threads (with 16 tasks one
/// thread did two, doubling the phase).
const MIN_UNITS: usize = 32;

/// Partial sums of a weight gradient: enough to spread over the threads of a large CPU (32 for
/// the same reason as [`MIN_UNITS`]); the partials are added in parallel, slice by slice.
const WGRAD_PARTS: usize = 32;

/// Values per task when the weight gradient's partials are added.
const SUM_SLICE: usize = 4096;

/// A conv2d's geometry, validated: every size is non-zero and consistent.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    batch: usize,
    in_channels: usize,
    height: usize,
    width: usize,
    out_channels: usize,
    kernel: [usize; 2],
    out: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
}

impl Geometry {
    /// None where Burn's own op should decide (and report) what is wrong.
    fn new(x: &Shape, weight: &Shape, options: &ConvOptions<2>) -> Option<Self> {
        if x.num_dims() != 4 || weight.num_dims() != 4 {
            return None;
        }
        let groups = options.groups;
        let (batch, in_channels, height, width) = (x[0], x[1], x[2], x[3]);
        let (out_channels, kernel) = (weight[0], [weight[2], weight[3]]);
        let sizes_ok = [batch, in_channels, height, width, out_channels, groups]
            .iter()
            .chain(&kernel)
            .chain(&options.stride)
            .chain(&options.dilation)
            .all(|&v| v > 0);
        if !sizes_ok || weight[1] * groups != in_channels || !out_channels.is_multiple_of(groups) {
            return None;
        }
        let out_dim = |i: usize, size: usize| {
            let span = options.dilation[i] * (kernel[i] - 1) + 1;
            let padded = size + 2 * options.padding[i];
            (padded >= span).then(|| (padded - span) / options.stride[i] + 1)
        };
        Some(Self {
            batch,
            in_channels,
            height,
            width,
            out_channels,
            kernel,
            out: [out_dim(0, height)?, out_dim(1, width)?],
            stride: options.stride,
            padding: options.padding,
            dilation: options.dilation,
            groups,
        })
    }

    fn in_per_group(&self) -> usize {
        self.in_channels / self.groups
    }

    fn out_per_group(&self) -> usize {
        self.out_channels / self.groups
    }

    fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    /// The reduction of one output: `(channel, tap)` pairs of a group.
    fn reduction(&self) -> usize {
        self.in_per_group() * self.taps()
    }

    fn in_plane(&self) -> usize {
        self.height * self.width
    }

    fn out_plane(&self) -> usize {
        self.out[0] * self.out[1]
    }

    fn x_len(&self) -> usize {
        self.batch * self.in_channels * self.in_plane()
    }

    fn y_len(&self) -> usize {
        self.batch * self.out_channels * self.out_plane()
    }

    fn weight_len(&self) -> usize {
        self.out_channels * self.reduction()
    }

    /// A 1×1 kernel at stride 1 without padding: the input planes are the im2col matrix.
    fn pointwise(&self) -> bool {
        self.kernel == [1, 1] && self.stride == [1, 1] && self.padding == [0, 0]
    }

    /// The output positions along `axis` whose tap `k` reads inside the input, `lo..hi`.
    fn valid_outputs(&self, axis: usize, k: usize) -> (usize, usize) {
        let size = [self.height, self.width][axis];
        let (s, p, offset) = (
            self.stride[axis],
            self.padding[axis],
            k * self.dilation[axis],
        );
        // input = o·s + offset − p must lie in 0..size.
        let lo = p.saturating_sub(offset).div_ceil(s);
        let hi = if size + p > offset {
            ((size - 1 + p - offset) / s + 1).min(self.out[axis])
        } else {
            0
        };
        (lo.min(hi), hi)
    }

    /// The input index along `axis` read by output `o` through tap `k` (inside the valid range).
    fn input_at(&self, axis: usize, o: usize, k: usize) -> usize {
        o * self.stride[axis] + k * self.dilation[axis] - self.padding[axis]
    }

    /// The im2col columns of the tasks, in order: blocks of one image's output positions, or,
    /// where an image has fewer than half a block, whole images together (so that each `gemm`
    /// call still has a long side: at `[32, 64, 8, 8]` one image is 64 positions), as many as
    /// fit a block while the batch still makes [`MIN_UNITS`] tasks. With
    /// `whole_images` only the latter (an input gradient's task scatters onto whole planes).
    fn column_units(&self, whole_images: bool) -> Vec<Columns> {
        let plane = self.out_plane();
        if plane * 2 >= COLUMN_BLOCK && !whole_images {
            let blocks = plane.div_ceil(COLUMN_BLOCK);
            let block = plane.div_ceil(blocks);
            return (0..self.batch * blocks)
                .map(|i| {
                    let start = (i % blocks) * block;
                    Columns {
                        first: i / blocks,
                        images: 1,
                        start,
                        len: block.min(plane - start),
                    }
                })
                .collect();
        }
        let per = (COLUMN_BLOCK / plane).clamp(1, self.batch.div_ceil(MIN_UNITS).max(1));
        (0..self.batch.div_ceil(per))
            .map(|i| Columns {
                first: i * per,
                images: per.min(self.batch - i * per),
                start: 0,
                len: plane,
            })
            .collect()
    }

    /// The input channels of a group per input-gradient task.
    fn dgrad_channels(&self) -> usize {
        let chunks = self.reduction().div_ceil(DGRAD_ROWS);
        self.in_per_group().div_ceil(chunks)
    }
}

/// The im2col columns of one task: output positions `start..start + len` of each of `images`
/// images from `first` (a block of one image, or whole planes of several).
#[derive(Clone, Copy, Debug)]
struct Columns {
    first: usize,
    images: usize,
    start: usize,
    len: usize,
}

impl Columns {
    fn width(&self) -> usize {
        self.images * self.len
    }

    /// Whether the columns are one block of one image, which the NCHW planes hold as a dense
    /// run: operands and results are then read and written in place.
    fn in_place(&self) -> bool {
        self.images == 1
    }
}

/// A base address shared by tasks that each write their own elements of one allocation.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the tasks write disjoint elements of one allocation that outlives them.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The address (a method, so that closures capture the whole `Send` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}

thread_local! {
    /// Each thread's im2col / col2im buffer, grown as needed and never shrunk.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with two parts of this thread's scratch buffer, of `a` and `b` values (contents
/// unspecified).
fn with_scratch<R>(a: usize, b: usize, f: impl FnOnce(&mut [f32], &mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut buffer = cell.borrow_mut();
        if buffer.len() < a + b {
            buffer.resize(a + b, 0.0);
        }
        let (first, rest) = buffer.split_at_mut(a);
        f(first, &mut rest[..b])
    })
}

/// `y (m×n) = alpha·y + a (m×k) · b (k×n)` in one single-threaded `gemm` call; each matrix is
/// a pointer with its row and column strides (in values).
///
/// # Safety
/// Every element addressed by the three matrices lies inside a live allocation, `y`'s elements
/// are written by this call alone, and `y` holds values when `accumulate` is set.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    [m, n, k]: [usize; 3],
    y: (*mut f32, isize, isize),
    a: (*const f32, isize, isize),
    b: (*const f32, isize, isize),
    accumulate: bool,
) {
    // SAFETY: as the caller promises.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            y.0,
            y.2,
            y.1,
            accumulate,
            a.0,
            a.2,
            a.1,
            b.0,
            b.2,
            b.1,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Writes the im2col rows of `image` (all its channels, NCHW) for `group` and output positions
/// `start..start + len` into `cols`, row `r` at `cols[r * row_stride..][..len]`, zeros where a
/// tap falls in the padding.
fn im2col(
    g: &Geometry,
    image: &[f32],
    group: usize,
    (start, len): (usize, usize),
    cols: &mut [f32],
    row_stride: usize,
) {
    let [kh, kw] = g.kernel;
    let ow = g.out[1];
    for c in 0..g.in_per_group() {
        let plane = &image[(group * g.in_per_group() + c) * g.in_plane()..][..g.in_plane()];
        for ky in 0..kh {
            let (y_lo, y_hi) = g.valid_outputs(0, ky);
            for kx in 0..kw {
                let (x_lo, x_hi) = g.valid_outputs(1, kx);
                let row = &mut cols[((c * kh + ky) * kw + kx) * row_stride..][..len];
                let mut p = start;
                while p < start + len {
                    let (oy, ox0) = (p / ow, p % ow);
                    let ox1 = ow.min(ox0 + start + len - p);
                    let segment = &mut row[p - start..][..ox1 - ox0];
                    if oy < y_lo || oy >= y_hi {
                        segment.fill(0.0);
                    } else {
                        let line = &plane[g.input_at(0, oy, ky) * g.width..][..g.width];
                        let (lo, hi) = (x_lo.clamp(ox0, ox1), x_hi.clamp(ox0, ox1));
                        segment[..lo - ox0].fill(0.0);
                        segment[hi - ox0..].fill(0.0);
                        let inside = &mut segment[lo - ox0..hi - ox0];
                        if lo < hi {
                            let first = g.input_at(1, lo, kx);
                            if g.stride[1] == 1 {
                                inside.copy_from_slice(&line[first..][..hi - lo]);
                            } else {
                                let taps = (first..).step_by(g.stride[1]);
                                for (v, i) in inside.iter_mut().zip(taps) {
                                    *v = line[i];
                                }
                            }
                        }
                    }
                    p += ox1 - ox0;
                }
            }
        }
    }
}

/// The im2col matrix of `columns` for `group`: `[reduction, columns.width()]`, the images side
/// by side.
fn gather_columns(g: &Geometry, x: &[f32], group: usize, columns: Columns, cols: &mut [f32]) {
    let image_len = g.in_channels * g.in_plane();
    for j in 0..columns.images {
        let image = &x[(columns.first + j) * image_len..][..image_len];
        let block = (columns.start, columns.len);
        im2col(
            g,
            image,
            group,
            block,
            &mut cols[j * columns.len..],
            columns.width(),
        );
    }
}

/// The output gradient's rows of `group` for `columns`, `[out_per_group, columns.width()]`, the
/// images side by side.
fn gather_output_grad(
    g: &Geometry,
    output_grad: &[f32],
    group: usize,
    columns: Columns,
    dy: &mut [f32],
) {
    let (plane, ocg, width) = (g.out_plane(), g.out_per_group(), columns.width());
    for j in 0..columns.images {
        let first = ((columns.first + j) * g.out_channels + group * ocg) * plane + columns.start;
        for o in 0..ocg {
            dy[o * width + j * columns.len..][..columns.len]
                .copy_from_slice(&output_grad[first + o * plane..][..columns.len]);
        }
    }
}

/// Adds the rows of `cols` (`[(channel, tap), out_plane]` for `channels` consecutive input
/// channels, row `r` at `cols[r * row_stride..]`) onto their input positions in `planes`, those
/// channels' gradient planes.
fn col2im(g: &Geometry, cols: &[f32], row_stride: usize, channels: usize, planes: &mut [f32]) {
    let [kh, kw] = g.kernel;
    let (ow, plane_len) = (g.out[1], g.out_plane());
    for c in 0..channels {
        let plane = &mut planes[c * g.in_plane()..][..g.in_plane()];
        for ky in 0..kh {
            let (y_lo, y_hi) = g.valid_outputs(0, ky);
            for kx in 0..kw {
                let (x_lo, x_hi) = g.valid_outputs(1, kx);
                if x_lo >= x_hi {
                    continue;
                }
                let row = &cols[((c * kh + ky) * kw + kx) * row_stride..][..plane_len];
                let first = g.input_at(1, x_lo, kx);
                for oy in y_lo..y_hi {
                    let line = &mut plane[g.input_at(0, oy, ky) * g.width..][..g.width];
                    let values = &row[oy * ow + x_lo..oy * ow + x_hi];
                    if g.stride[1] == 1 {
                        for (d, v) in line[first..][..values.len()].iter_mut().zip(values) {
                            *d += v;
                        }
                    } else {
                        for (v, i) in values.iter().zip((first..).step_by(g.stride[1])) {
                            line[i] += v;
                        }
                    }
                }
            }
        }
    }
}

/// The forward conv: `x` `[N, C, H, W]`, `weight` `[OC, C / groups, KH, KW]`, `bias` `[OC]`,
/// all dense; the output `[N, OC, OH, OW]`.
fn forward(g: &Geometry, x: &[f32], weight: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (k, plane, ocg) = (g.reduction(), g.out_plane(), g.out_per_group());
    let units = g.column_units(false);
    super::elementwise::filled(g.y_len(), |slots| {
        let out = SharedOut(slots.as_mut_ptr().cast::<f32>());
        let task = |columns: &Columns| {
            let width = columns.width();
            for group in 0..g.groups {
                let w = &weight[group * ocg * k..][..ocg * k];
                // y = w · cols (+ bias) into `y` (row stride `y_row`), `cols` `k × width`.
                let run = |y: *mut f32, y_row: usize, cols: *const f32, cols_row: usize| {
                    if let Some(bias) = bias {
                        for o in 0..ocg {
                            // SAFETY: row `o` of the destination block is this task's alone.
                            unsafe { core::slice::from_raw_parts_mut(y.add(o * y_row), width) }
                                .fill(bias[group * ocg + o]);
                        }
                    }
                    // SAFETY: `w` is `ocg × k` dense, `cols` addresses `k × width` values of
                    // its buffer, the destination block is this task's (filled above when
                    // accumulating onto the bias).
                    unsafe {
                        product(
                            [ocg, width, k],
                            (y, y_row as isize, 1),
                            (w.as_ptr(), k as isize, 1),
                            (cols, cols_row as isize, 1),
                            bias.is_some(),
                        );
                    }
                };
                let first_out = |image: usize| (image * g.out_channels + group * ocg) * plane;
                if columns.in_place() {
                    let y = out
                        .get()
                        .wrapping_add(first_out(columns.first) + columns.start);
                    if g.pointwise() {
                        let image = columns.first * g.in_channels + group * g.in_per_group();
                        let cols = x[image * g.in_plane() + columns.start..].as_ptr();
                        run(y, plane, cols, g.in_plane());
                    } else {
                        with_scratch(k * width, 0, |cols, _| {
                            gather_columns(g, x, group, *columns, cols);
                            run(y, plane, cols.as_ptr(), width);
                        });
                    }
                    continue;
                }
                with_scratch(k * width, ocg * width, |cols, y| {
                    gather_columns(g, x, group, *columns, cols);
                    run(y.as_mut_ptr(), width, cols.as_ptr(), width);
                    for j in 0..columns.images {
                        for o in 0..ocg {
                            let dst = first_out(columns.first + j) + o * plane;
                            // SAFETY: plane `o` of image `first + j` in this group is this
                            // task's alone.
                            unsafe {
                                core::slice::from_raw_parts_mut(out.get().add(dst), plane)
                                    .copy_from_slice(&y[o * width + j * plane..][..plane]);
                            }
                        }
                    }
                });
            }
        };
        units.par_iter().for_each(task);
    })
}

/// The input gradient: `weight` and `output_grad` dense; the gradient `[N, C, H, W]`.
fn x_backward(g: &Geometry, weight: &[f32], output_grad: &[f32]) -> Vec<f32> {
    let (k, plane, ocg, taps) = (g.reduction(), g.out_plane(), g.out_per_group(), g.taps());
    let per_task = g.dgrad_channels();
    let chunks = g.in_per_group().div_ceil(per_task);
    let units = g.column_units(true);
    super::elementwise::filled(g.x_len(), |slots| {
        let out = SharedOut(slots.as_mut_ptr().cast::<f32>());
        let task = |index: usize| {
            let chunk = index % chunks;
            let group = (index / chunks) % g.groups;
            let columns = units[index / (chunks * g.groups)];
            let width = columns.width();
            let c0 = chunk * per_task;
            let channels = per_task.min(g.in_per_group() - c0);
            // These channels' planes of image `first + j`, this task's alone.
            let planes = |j: usize| {
                let first = (columns.first + j) * g.in_channels + group * g.in_per_group() + c0;
                // SAFETY: the planes lie inside the output, and no other task writes them.
                unsafe {
                    core::slice::from_raw_parts_mut(
                        out.get().add(first * g.in_plane()),
                        channels * g.in_plane(),
                    )
                }
            };
            // The rows `(c, tap)` of Wᵀ for these channels: Wᵀ[(c, t), o] = W[o, c, t].
            let w = weight[group * ocg * k + c0 * taps..].as_ptr();
            let rows = channels * taps;
            // cols (rows × width) = Wᵀ · dy (ocg × width, row stride `dy_row`).
            let run = |cols: *mut f32, dy: *const f32, dy_row: usize| {
                // SAFETY: `cols` holds rows × width values, the operands lie inside `weight`
                // and `dy`'s buffer.
                unsafe {
                    product(
                        [rows, width, ocg],
                        (cols, width as isize, 1),
                        (w, 1, k as isize),
                        (dy, dy_row as isize, 1),
                        false,
                    );
                }
            };
            if columns.in_place() {
                let dy =
                    output_grad[(columns.first * g.out_channels + group * ocg) * plane..].as_ptr();
                if g.pointwise() {
                    run(planes(0).as_mut_ptr(), dy, plane);
                } else {
                    with_scratch(rows * width, 0, |cols, _| {
                        run(cols.as_mut_ptr(), dy, plane);
                        let planes = planes(0);
                        planes.fill(0.0);
                        col2im(g, cols, width, channels, planes);
                    });
                }
                return;
            }
            with_scratch(rows * width, ocg * width, |cols, dy| {
                gather_output_grad(g, output_grad, group, columns, dy);
                run(cols.as_mut_ptr(), dy.as_ptr(), width);
                for j in 0..columns.images {
                    let planes = planes(j);
                    planes.fill(0.0);
                    col2im(g, &cols[j * plane..], width, channels, planes);
                }
            });
        };
        (0..units.len() * g.groups * chunks)
            .into_par_iter()
            .for_each(task);
    })
}

/// The weight gradient: `x` and `output_grad` dense; the gradient `[OC, C / groups, KH, KW]`.
fn weight_backward(g: &Geometry, x: &[f32], output_grad: &[f32]) -> Vec<f32> {
    let (k, plane, ocg) = (g.reduction(), g.out_plane(), g.out_per_group());
    let units = g.column_units(false);
    let parts = units.len().min(WGRAD_PARTS);
    let per_part = units.len().div_ceil(parts);
    let parts = units.len().div_ceil(per_part);
    let partials: Vec<Vec<f32>> = (0..parts)
        .into_par_iter()
        .map(|part| {
            let mut sum = vec![0f32; g.weight_len()];
            for columns in &units[part * per_part..units.len().min((part + 1) * per_part)] {
                let width = columns.width();
                for group in 0..g.groups {
                    let dw = sum[group * ocg * k..][..ocg * k].as_mut_ptr();
                    // dW (ocg × k) += dy (ocg × width) · colsᵀ (width × k).
                    let run = |dy: *const f32, dy_row: usize, cols: *const f32, cols_row: usize| {
                        // SAFETY: `dw` is this part's own `ocg × k` block, the operands lie
                        // inside `output_grad`, `x` or the task's buffers.
                        unsafe {
                            product(
                                [ocg, k, width],
                                (dw, k as isize, 1),
                                (dy, dy_row as isize, 1),
                                (cols, 1, cols_row as isize),
                                true,
                            );
                        }
                    };
                    if columns.in_place() {
                        let first = (columns.first * g.out_channels + group * ocg) * plane;
                        let dy = output_grad[first + columns.start..].as_ptr();
                        if g.pointwise() {
                            let image = columns.first * g.in_channels + group * g.in_per_group();
                            let cols = x[image * g.in_plane() + columns.start..].as_ptr();
                            run(dy, plane, cols, g.in_plane());
                        } else {
                            with_scratch(k * width, 0, |cols, _| {
                                gather_columns(g, x, group, *columns, cols);
                                run(dy, plane, cols.as_ptr(), width);
                            });
                        }
                        continue;
                    }
                    with_scratch(k * width, ocg * width, |cols, dy| {
                        gather_columns(g, x, group, *columns, cols);
                        gather_output_grad(g, output_grad, group, *columns, dy);
                        run(dy.as_ptr(), width, cols.as_ptr(), width);
                    });
                }
            }
            sum
        })
        .collect();
    // Each value is the partials added in order, whichever thread adds its slice.
    let (first, rest) = partials.split_first().expect("at least one part");
    let mut total = first.clone();
    total
        .par_chunks_mut(SUM_SLICE)
        .enumerate()
        .for_each(|(i, slice)| {
            for partial in rest {
                let values = &partial[i * SUM_SLICE..][..slice.len()];
                slice.iter_mut().zip(values).for_each(|(t, p)| *t += p);
            }
        });
    total
}

/// The dense f32 values of a burn-flex tensor (copied first when it is a strided view).
fn dense_values(tensor: &FlexTensor) -> Option<std::borrow::Cow<'_, [f32]>> {
    if tensor.dtype() != DType::F32 {
        return None;
    }
    let layout = tensor.layout();
    match layout.contiguous_offsets() {
        Some((start, end)) => Some(std::borrow::Cow::Borrowed(
            &tensor.storage::<f32>()[start..end],
        )),
        None => Some(std::borrow::Cow::Owned(
            super::layout::flex_strided_values::<f32>(tensor),
        )),
    }
}

fn dense_tensor(values: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(values),
        Layout::contiguous(shape),
        DType::F32,
    )
}

/// conv2d of f32 burn-flex tensors (any layout), threaded; None when an operand is not f32 or
/// the shapes do not make a convolution (Burn's own op then reports it).
pub fn conv2d(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
    options: &ConvOptions<2>,
) -> Option<FlexTensor> {
    let g = Geometry::new(x.layout().shape(), weight.layout().shape(), options)?;
    let bias = match bias {
        Some(b) if b.layout().shape().num_elements() != g.out_channels => return None,
        Some(b) => Some(dense_values(b)?),
        None => None,
    };
    let (x, weight) = (dense_values(x)?, dense_values(weight)?);
    let out = forward(&g, &x, &weight, bias.as_deref());
    Some(dense_tensor(
        out,
        Shape::new([g.batch, g.out_channels, g.out[0], g.out[1]]),
    ))
}

/// The input gradient of [`conv2d`] for an input of `x_shape`; None as for [`conv2d`].
pub fn conv2d_x_backward(
    x_shape: &Shape,
    weight: &FlexTensor,
    output_grad: &FlexTensor,
    options: &ConvOptions<2>,
) -> Option<FlexTensor> {
    let g = Geometry::new(x_shape, weight.layout().shape(), options)?;
    if output_grad.layout().shape().as_slice() != [g.batch, g.out_channels, g.out[0], g.out[1]] {
        return None;
    }
    let (weight, output_grad) = (dense_values(weight)?, dense_values(output_grad)?);
    Some(dense_tensor(
        x_backward(&g, &weight, &output_grad),
        x_shape.clone(),
    ))
}

/// The weight gradient of [`conv2d`] for a weight of `weight_shape`; None as for [`conv2d`].
pub fn conv2d_weight_backward(
    x: &FlexTensor,
    weight_shape: &Shape,
    output_grad: &FlexTensor,
    options: &ConvOptions<2>,
) -> Option<FlexTensor> {
    let g = Geometry::new(x.layout().shape(), weight_shape, options)?;
    if output_grad.layout().shape().as_slice() != [g.batch, g.out_channels, g.out[0], g.out[1]] {
        return None;
    }
    let (x, output_grad) = (dense_values(x)?, dense_values(output_grad)?);
    Some(dense_tensor(
        weight_backward(&g, &x, &output_grad),
        weight_shape.clone(),
    ))
}

/// Environment variable: `backend` leaves the convs placed on the CPU to the CPU backend's own
/// ops, `own` (the default) runs them here; for measuring one against the other.
pub const ENV_CPU_CONV: &str = "BURN_HETERO_CPU_CONV";

/// Whether the convs placed on the CPU run here ([`ENV_CPU_CONV`], read once).
fn own_convs() -> bool {
    static OWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| match std::env::var(ENV_CPU_CONV).as_deref() {
        Err(_) | Ok("own") => true,
        Ok("backend") => {
            log::info!("{ENV_CPU_CONV}=backend: convs placed on the CPU run the CPU backend's ops");
            false
        }
        Ok(other) => {
            log::warn!("{ENV_CPU_CONV}={other}: expected `own` or `backend`; using `own`");
            true
        }
    })
}

/// The operands as burn-flex tensors when `C` is burn-flex (and the own convs are on).
fn as_flex<C: Backend>(tensor: &FloatTensor<C>) -> Option<&FlexTensor> {
    if !super::layout::is_flex::<C>() || !own_convs() {
        return None;
    }
    (tensor as &dyn core::any::Any).downcast_ref::<FlexTensor>()
}

/// `C`'s conv2d on the CPU, through [`conv2d`] where `C` is burn-flex and it applies.
pub(crate) fn cpu_conv2d<C: Backend>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    bias: Option<FloatTensor<C>>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let own = match (as_flex::<C>(&x), as_flex::<C>(&weight)) {
        (Some(fx), Some(fw)) => match bias.as_ref().map(as_flex::<C>) {
            Some(None) => None,
            fb => conv2d(fx, fw, fb.flatten(), &options),
        },
        _ => None,
    };
    match own {
        Some(out) => flex_into_primitive(out),
        None => C::conv2d(x, weight, bias, options),
    }
}

/// `C`'s conv2d input gradient on the CPU, through [`conv2d_x_backward`] where it applies.
pub(crate) fn cpu_conv2d_x_backward<C: Backend>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let own = match (as_flex::<C>(&weight), as_flex::<C>(&output_grad)) {
        (Some(fw), Some(fg)) if x.dtype() == DType::F32 => {
            conv2d_x_backward(&x.shape(), fw, fg, &options)
        }
        _ => None,
    };
    match own {
        Some(out) => flex_into_primitive(out),
        None => C::conv2d_x_backward(x, weight, output_grad, options),
    }
}

/// `C`'s conv2d weight gradient on the CPU, through [`conv2d_weight_backward`] where it applies.
pub(crate) fn cpu_conv2d_weight_backward<C: Backend>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let own = match (as_flex::<C>(&x), as_flex::<C>(&output_grad)) {
        (Some(fx), Some(fg)) if weight.dtype() == DType::F32 => {
            conv2d_weight_backward(fx, &weight.shape(), fg, &options)
        }
        _ => None,
    };
    match own {
        Some(out) => flex_into_primitive(out),
        None => C::conv2d_weight_backward(x, weight, output_grad, options),
    }
}
