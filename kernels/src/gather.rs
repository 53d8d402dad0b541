//! Loads of the implicit-GEMM operand tiles from global memory, shared by both paths.
//!
//! Both kernels stage a `bk x bm` tile of A (im2col of the input, gathered on the fly) and a
//! `bk x bn` tile of B (the weight) per step of the reduction, through registers: the global
//! loads of step `t + 1` are issued before the tile of step `t` is consumed, and written to
//! shared memory (the other of two buffers) after it.
//!
//! - A: the units of a cube are 32 lanes along `m` times `units / 32` rows along `k`. A unit
//!   owns `per_m` GEMM rows `m = m_start + lane + 32*j`, whose window origin (input offset and
//!   top-left position, possibly in the padding) is computed once per cube ([`a_rows_init`]),
//!   and `per_k` reduction slots `k = k0 + row + rows*i`, whose `(c, kh, kw)` are decomposed
//!   once per cube ([`a_k_init`]) and then advanced by `bk` with carries (no division in the
//!   loop). Per slot and step, one offset `c*x_chan + kh*dh*W + kw*dw` is shared by the unit's rows;
//!   per element remain one AND with the row's tap mask (kernels of at most 32 taps; else two
//!   additions and two unsigned compares), one addition and the load. The 32 lanes of a
//!   warp read 32 consecutive output pixels: for stride 1, consecutive input addresses.
//! - B: `bk` lanes along `k` (contiguous in the OIHW weight) times `units / bk` rows along `n`.
//!   A weight that is not a dense OIHW tensor (a transposed view, a flipped kernel: see
//!   `WeightRead`) costs one division per unit and step to split `k` into channel and tap.
//!
//! The input's images and channels, the weight's groups, rows and channels, and the output's
//! images and channels are where `ConvShape`'s offsets say, so that the same loads read the
//! transposed views of a conv's gradients.
//!
//! Every element is bounds-checked (rows past `M`, columns past `OC/groups`, `k` past `K`, and
//! the padding), and out-of-range elements are zeros, so any size works.

use cubecl::prelude::*;

use crate::shape::{ConvShape, WeightRead};

/// Sets up the GEMM rows of this unit: `origin[j]` is the input offset of the top-left corner of
/// the window of row `j` (image, first channel of the group, `(top, left)`; negative in the
/// padding), `ih[j]`/`iw[j]` that corner's position. Rows past `M` get a height far below zero
/// so that every later bound check fails.
///
/// With `use_mask` (kernels of at most 32 taps), `mask[j]` gets bit `kh*KW + kw` set where that
/// tap of row `j` falls inside the input (0 for rows past `M`), so that [`a_load`] checks an
/// element with one AND.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn a_rows_init(
    shape: &ConvShape,
    m_start: u32,
    group: u32,
    lane: u32,
    origin: &mut Array<i32>,
    ih: &mut Array<i32>,
    iw: &mut Array<i32>,
    mask: &mut Array<u32>,
    #[comptime] per_m: usize,
    #[comptime] use_mask: bool,
) {
    #[unroll]
    for j in 0..per_m {
        let m = m_start + lane + (j as u32) * 32;
        let img = m / shape.out_hw;
        let pix = m % shape.out_hw;
        let oh = pix / shape.out_w;
        let ow = pix % shape.out_w;
        let top = (oh * shape.stride_h) as i32 - shape.pad_h as i32;
        let left = (ow * shape.stride_w) as i32 - shape.pad_w as i32;
        let base = img * shape.x_img + group * shape.channels_per_group * shape.x_chan;
        origin[j] = base as i32 + top * shape.in_w as i32 + left;
        ih[j] = select(m < shape.gemm_m, top, -1073741824i32);
        iw[j] = left;
        if comptime!(use_mask) {
            let mut xmask = 0u32;
            for kw in 0u32..shape.kernel_w {
                let x = (left + (kw * shape.dil_w) as i32) as u32;
                xmask |= select(x < shape.in_w, 1u32 << kw, 0u32);
            }
            let mut row_mask = 0u32;
            for kh in 0u32..shape.kernel_h {
                let y = (top + (kh * shape.dil_h) as i32) as u32;
                row_mask |= select(y < shape.in_h, xmask << (kh * shape.kernel_w), 0u32);
            }
            mask[j] = select(m < shape.gemm_m, row_mask, 0u32);
        }
    }
}

/// Sets up the reduction indices of this unit's `per_k` A slots for the first step:
/// `k = row + rows*i` as `(c, kh, kw)` in `cs`, `khs`, `kws`. The only divisions of the
/// reduction; [`a_load`] then advances the slots by `bk` with additions and compares.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn a_k_init(
    shape: &ConvShape,
    row: u32,
    cs: &mut Array<u32>,
    khs: &mut Array<u32>,
    kws: &mut Array<u32>,
    #[comptime] rows: u32,
    #[comptime] per_k: usize,
) {
    let khw = shape.kernel_h * shape.kernel_w;
    #[unroll]
    for i in 0..per_k {
        let k = row + (i as u32) * rows;
        let r = k % khw;
        cs[i] = k / khw;
        khs[i] = r / shape.kernel_w;
        kws[i] = r % shape.kernel_w;
    }
}

/// Loads this unit's part of the A tile of the current reduction step into `regs`
/// (`regs[i*per_m + j]` for slot `i` and row `j`), rounded to the operand type `FI` and held
/// as `S`, then advances the slots by `bk`. A slot is in range while `c < C/groups`
/// (`k < K`). The buffer holds `FS`: `FI` itself, or f32 rounded here (the cast fused into
/// the load).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn a_load<FS: Float, FI: Float, S: Float>(
    input: &Array<FS>,
    shape: &ConvShape,
    origin: &Array<i32>,
    ih: &Array<i32>,
    iw: &Array<i32>,
    mask: &Array<u32>,
    cs: &mut Array<u32>,
    khs: &mut Array<u32>,
    kws: &mut Array<u32>,
    regs: &mut Array<S>,
    #[comptime] per_k: usize,
    #[comptime] per_m: usize,
    #[comptime] use_mask: bool,
) {
    #[unroll]
    for i in 0..per_k {
        let c = cs[i];
        let kh = khs[i];
        let kw = kws[i];
        let dh = kh * shape.dil_h;
        let dw = kw * shape.dil_w;
        let offset = (c * shape.x_chan + dh * shape.in_w + dw) as i32;
        let k_ok = c < shape.channels_per_group;
        if comptime!(use_mask) {
            let bit = select(k_ok, 1u32 << (kh * shape.kernel_w + kw), 0u32);
            #[unroll]
            for j in 0..per_m {
                let mut v = S::from_int(0);
                if (mask[j] & bit) != 0u32 {
                    v = S::cast_from(FI::cast_from(input[(origin[j] + offset) as usize]));
                }
                regs[i * per_m + j] = v;
            }
        } else {
            #[unroll]
            for j in 0..per_m {
                // Negative positions wrap to large unsigned values: one compare per axis.
                let y = (ih[j] + dh as i32) as u32;
                let x = (iw[j] + dw as i32) as u32;
                let mut v = S::from_int(0);
                if k_ok && y < shape.in_h && x < shape.in_w {
                    v = S::cast_from(FI::cast_from(input[(origin[j] + offset) as usize]));
                }
                regs[i * per_m + j] = v;
            }
        }
        // k += bk, i.e. (c, kh, kw) += (step_c, step_kh, step_kw) with carries.
        let kw_next = kw + shape.step_kw;
        let carry_w = kw_next >= shape.kernel_w;
        kws[i] = kw_next - select(carry_w, shape.kernel_w, 0u32);
        let kh_next = kh + shape.step_kh + select(carry_w, 1u32, 0u32);
        let carry_h = kh_next >= shape.kernel_h;
        khs[i] = kh_next - select(carry_h, shape.kernel_h, 0u32);
        cs[i] = c + shape.step_c + select(carry_h, 1u32, 0u32);
    }
}

/// Writes the registers of [`a_load`] to the A tile at `base` in shared memory, element
/// `(m, k)` (tile coordinates) at `base + k * stride_k + m`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn a_store<S: Float>(
    regs: &Array<S>,
    smem: &mut SharedMemory<S>,
    base: u32,
    row: u32,
    lane: u32,
    #[comptime] rows: u32,
    #[comptime] per_k: usize,
    #[comptime] per_m: usize,
    #[comptime] stride_k: u32,
) {
    #[unroll]
    for i in 0..per_k {
        let kl = row + (i as u32) * rows;
        #[unroll]
        for j in 0..per_m {
            smem[(base + kl * stride_k + lane + (j as u32) * 32) as usize] = regs[i * per_m + j];
        }
    }
}

/// The offset of weight element `(n, k)` of a group from the group's start: `n*w_out + k` for a
/// dense weight, else `n*w_out + c*w_chan + tap` with `k = c*KH*KW + tap` (the tap reversed
/// for a flipped kernel).
#[cube]
pub(crate) fn weight_offset(
    shape: &ConvShape,
    n: u32,
    k: u32,
    #[comptime] read: WeightRead,
) -> u32 {
    let mut offset = k;
    if comptime!(read.strided) {
        let taps = shape.kernel_h * shape.kernel_w;
        let c = k / taps;
        let mut tap = k - c * taps;
        if comptime!(read.flipped) {
            tap = taps - 1u32 - tap;
        }
        offset = c * shape.w_chan + tap;
    }
    n * shape.w_out + offset
}

/// Loads this unit's part of the B tile (`k = k0 + lane`, columns `n_start + row + rows*i`) of
/// the group whose weight starts at `w_group` into `regs`, rounded to `FI` and held as `S` (the
/// buffer holds `FS`, as for [`a_load`]), read as `read` says.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn b_load<FS: Float, FI: Float, S: Float>(
    weight: &Array<FS>,
    shape: &ConvShape,
    w_group: u32,
    n_start: u32,
    k0: u32,
    lane: u32,
    row: u32,
    regs: &mut Array<S>,
    #[comptime] rows: u32,
    #[comptime] per_n: usize,
    #[comptime] read: WeightRead,
) {
    let k = k0 + lane;
    let k_ok = k < shape.gemm_k;
    // The offset of column 0; columns are `w_out` apart.
    let k_offset = w_group + weight_offset(shape, 0u32, k, read);
    #[unroll]
    for i in 0..per_n {
        let n = n_start + row + (i as u32) * rows;
        let mut v = S::from_int(0);
        if k_ok && n < shape.out_channels_per_group {
            v = S::cast_from(FI::cast_from(weight[(k_offset + n * shape.w_out) as usize]));
        }
        regs[i] = v;
    }
}

/// Writes the registers of [`b_load`] to the B tile at `base` in shared memory, element
/// `(k, n)` (tile coordinates) at `base + k * stride_k + n * stride_n`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn b_store<S: Float>(
    regs: &Array<S>,
    smem: &mut SharedMemory<S>,
    base: u32,
    lane: u32,
    row: u32,
    #[comptime] rows: u32,
    #[comptime] per_n: usize,
    #[comptime] stride_k: u32,
    #[comptime] stride_n: u32,
) {
    #[unroll]
    for i in 0..per_n {
        let nl = row + (i as u32) * rows;
        smem[(base + lane * stride_k + nl * stride_n) as usize] = regs[i];
    }
}

/// The bias of output channel `oc`, 0 when `has_bias` is 0 (then `bias` is a placeholder that
/// is never read).
#[cube]
pub(crate) fn bias_at(bias: &Array<f32>, has_bias: u32, oc: u32) -> f32 {
    let mut b = 0.0f32;
    if has_bias != 0u32 {
        b = bias[oc as usize];
    }
    b
}
