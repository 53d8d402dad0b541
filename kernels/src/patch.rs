//! The fast matrix-unit path for stride-1 convolutions: implicit GEMM over the zero-padded,
//! flattened input, with the input staged once per channel chunk as a channels-last patch.
//!
//! With stride 1, number the pixels of the zero-padded input of every image in one flat
//! sequence `q = (img*PH + y)*PW + x` (`PH = H + 2*pad_h`, `PW = W + 2*pad_w`), and let the
//! GEMM rows be the same sequence: row `m` is the output pixel whose window starts at padded
//! pixel `m` (rows whose window leaves the image, at the right and bottom edges, are computed
//! and dropped). Then tap `(kh, kw)` of row `m` is padded pixel `m + kh*dh*PW + kw*dw`: for a
//! chunk of 16 channels, the A operand of one tap is a plain strided matrix over a patch of
//! `bm + (KH-1)*dh*PW + (KW-1)*dw` consecutive padded pixels. The kernel
//! - keeps the cube's whole weight tile resident in shared memory as `[tap][n][c]` (`c`
//!   contiguous, leading dimension `cg_pad + 8`), loaded once per (persistent) cube;
//! - per tile of `bm` rows and chunk of 16 channels, gathers the patch once from the NCHW
//!   input (each unit owns fixed patch pixels; 8 channels per 16-byte vector store, so the patch
//!   is stored channels-last `[pixel][16]`), double-buffered through registers, one barrier
//!   per chunk;
//! - then, for every tap, loads its A fragments straight from the shifted patch and its B
//!   fragments from the resident weight, and multiplies-accumulates with `cmma` (f32). The
//!   patch is stored twice with 48-byte rows, the second copy shifted by 16 bytes: a fragment
//!   starting at an even pixel reads the first, one at an odd pixel the second, so that every
//!   fragment is 32-byte aligned whatever the shift (as fragment loads require) and its rows
//!   fall in distinct shared-memory banks (32-byte rows, the unskewed layout, put rows `r` and
//!   `r + 4` in the same banks).
//!
//! So each input element is read from global memory once per cube tile instead of once per
//! tap, and the gather needs no per-element im2col arithmetic. The epilogue is the one of the
//! general cmma kernel (per-warp 16x16 staging, bias, one rounding, NCHW stores).
//!
//! Used on CUDA for stride 1 when the channels per group fill 16-channel chunks well and the
//! weight tile fits in shared memory (see [`PatchConfig::plan`]); otherwise the general cmma
//! kernel runs.

use cubecl::cmma::{self as cm, MatrixIdent, MatrixLayout};
use cubecl::prelude::*;

use crate::gather::{bias_at, weight_offset};
use crate::shape::{ConvShape, Layout, WeightRead};

/// Channels per chunk (one fragment's `k`).
const CHUNK: u32 = 16;
/// Fragment size.
const FRAG: u32 = 16;
/// Padding of the resident weight's leading dimension.
const PAD_B: u32 = 8;
/// Largest resident weight tile, in bytes.
const MAX_WEIGHT_BYTES: usize = 100 * 1024;
/// Leading dimension of a skewed patch copy, in elements: 48-byte rows put the eight rows of
/// each 8x8 piece a fragment load reads in eight different 16-byte bank groups (32-byte rows
/// put rows `r` and `r + 4` in the same banks).
const SKEWED_LD: u32 = 24;

/// Tiling of the patch kernel (compile-time constants of one kernel).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct PatchConfig {
    /// Warps along `m`.
    pub warps_m: u32,
    /// Warps along `n`.
    pub warps_n: u32,
    /// Fragments per warp along `m`.
    pub frags_m: u32,
    /// Fragments per warp along `n`.
    pub frags_n: u32,
    /// Channels per group rounded up to the chunk.
    pub cg_pad: u32,
    /// Kernel height.
    pub kernel_h: u32,
    /// Kernel width.
    pub kernel_w: u32,
    /// Pixels of the patch of one tile.
    pub patch_len: u32,
    /// Whether the channels per group are a multiple of the chunk.
    pub full_chunks: bool,
    /// Whether the patch is stored skewed (see [`PatchConfig::patch_copy_vecs`]).
    pub skewed: bool,
}

/// A launchable plan: the configuration and the sizes of the virtual GEMM.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PatchPlan {
    pub cfg: PatchConfig,
    /// Padded width `PW`.
    pub pw: u32,
    /// Padded plane `PH*PW`.
    pub phw: u32,
    /// Rows of the virtual GEMM, `N*PH*PW`.
    pub rows: u32,
}

impl PatchConfig {
    /// Block rows.
    pub fn bm(&self) -> u32 {
        self.warps_m * self.frags_m * FRAG
    }

    /// Block columns.
    pub fn bn(&self) -> u32 {
        self.warps_n * self.frags_n * FRAG
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// Leading dimension of the resident weight.
    pub fn ldr(&self) -> u32 {
        self.cg_pad + PAD_B
    }

    /// 8-channel vectors of one patch buffer. Plain: `[pixel][16]`, two vectors a pixel.
    /// Skewed: two copies with rows of [`SKEWED_LD`] elements (three vectors a pixel), the
    /// second shifted by one vector, so that a fragment starting at an even pixel reads the
    /// first copy and one at an odd pixel the second, each 32-byte aligned as fragment loads
    /// require.
    pub fn patch_copy_vecs(&self) -> u32 {
        if self.skewed {
            (3 * self.patch_len + 1).next_multiple_of(2)
        } else {
            2 * self.patch_len
        }
    }

    /// 8-channel vectors of one patch buffer, both copies.
    pub fn patch_buffer_vecs(&self) -> u32 {
        self.patch_copy_vecs() * if self.skewed { 2 } else { 1 }
    }

    /// Shared memory of one cube, in bytes (2-byte operands).
    pub fn shared_memory_bytes(&self) -> usize {
        let weight = self.kernel_h * self.kernel_w * self.bn() * self.ldr() * 2;
        let patch = 2 * self.patch_buffer_vecs() * 16;
        let stage = self.warps_m * self.warps_n * FRAG * FRAG * 4;
        (weight + patch + stage) as usize
    }

    /// The plan for `problem` on a device with `max_shared` bytes of shared memory per cube and
    /// `sms` multiprocessors, or `None` when the kernel does not apply.
    pub fn plan(
        problem: &crate::Conv2dProblem,
        max_shared: usize,
        sms: Option<u32>,
    ) -> Option<PatchPlan> {
        if problem.stride != [1, 1] {
            return None;
        }
        let cg = problem.in_channels_per_group();
        let cg_pad = cg.div_ceil(CHUNK as usize) * CHUNK as usize;
        // At most a quarter of the chunk lanes wasted on padding channels.
        if cg < CHUNK as usize || (cg_pad - cg) * 4 > cg {
            return None;
        }
        let pw = problem.in_width + 2 * problem.padding[1];
        let ph = problem.in_height + 2 * problem.padding[0];
        let phw = ph.checked_mul(pw)?;
        let rows = phw.checked_mul(problem.batch)?;
        if rows > crate::problem::MAX_ELEMENTS {
            return None;
        }
        // 16x(16, 32 or 64) per warp: the columns of the block.
        let frags_n = match problem.out_channels_per_group() {
            0..=16 => 1,
            17..=32 => 2,
            _ => 4,
        };
        let halo = (problem.kernel_height - 1) * problem.dilation[0] * pw
            + (problem.kernel_width - 1) * problem.dilation[1];
        let make = |warps_m: u32, frags_m: u32, skewed: bool| -> Option<PatchConfig> {
            Some(PatchConfig {
                warps_m,
                warps_n: 1,
                frags_m,
                frags_n,
                cg_pad: cg_pad as u32,
                kernel_h: problem.kernel_height as u32,
                kernel_w: problem.kernel_width as u32,
                patch_len: ((warps_m * frags_m * FRAG) as usize + halo)
                    .try_into()
                    .ok()?,
                full_chunks: cg == cg_pad,
                skewed,
            })
        };
        // 16 warps of 32 rows each (two fragments) and a skewed patch: 512 rows per cube. The
        // 512 units cap the registers at 128 per unit, which the accumulators and fragments
        // fit. Measured on an H200 on 256x64x56x56 -> 64 (f16 / bf16, device time): 466 / 590
        // us with one fragment a warp and the plain patch, 465 / 594 skewed alone, 525 / 770
        // with two fragments alone (the doubled A loads meet the plain patch's bank
        // conflicts), 375 / 467 with both. Earlier: 8 warps of 32x64, 2x2 warp layouts, and
        // two cubes of 8 warps per multiprocessor were all slower than 16 warps of 16x64.
        // 8 warps of one fragment (128 rows) when there are too few tiles to fill the device;
        // the unskewed patch where the skewed one does not fit in shared memory.
        let sms = sms.unwrap_or(0) as usize;
        let candidates = if rows.div_ceil(512) >= sms {
            [make(16, 2, true)?, make(16, 1, false)?]
        } else {
            [make(8, 1, true)?, make(8, 1, false)?]
        };
        let cfg = *candidates
            .iter()
            .find(|c| c.shared_memory_bytes() <= max_shared)?;
        let weight_bytes = (cfg.kernel_h * cfg.kernel_w * cfg.bn() * cfg.ldr() * 2) as usize;
        if weight_bytes > MAX_WEIGHT_BYTES {
            return None;
        }
        Some(PatchPlan {
            cfg,
            pw: pw as u32,
            phw: phw as u32,
            rows: rows as u32,
        })
    }
}

/// The patch kernel. `FS`: type of the input and weight buffers (`FI`, or f32 cast to `FI` as
/// it is loaded), `FI`: operand type (f16 or bf16), `FO`: output type.
#[cube(launch_unchecked)]
// `div_ceil` is not part of the CubeCL language.
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
pub(crate) fn conv2d_patch_kernel<FS: Float, FI: Float, FO: Float>(
    input: &Array<FS>,
    weight: &Array<FS>,
    bias: &Array<f32>,
    output: &mut Array<FO>,
    shape: ConvShape,
    has_bias: u32,
    batch: u32,
    out_h: u32,
    pw: u32,
    phw: u32,
    tiles_m: u32,
    tiles_n: u32,
    #[comptime] cfg: PatchConfig,
    #[comptime] read: WeightRead,
    #[define(FS, FI, FO)] _types: [StorageType; 3],
) {
    let bm = comptime!(cfg.bm());
    let bn = comptime!(cfg.bn());
    let units = comptime!(cfg.units());
    let frags_m = comptime!(cfg.frags_m as usize);
    let frags_n = comptime!(cfg.frags_n as usize);
    let warps_m = comptime!(cfg.warps_m);
    let warps = comptime!(cfg.warps_m * cfg.warps_n);
    let cg_pad = comptime!(cfg.cg_pad);
    let ldr = comptime!(cfg.ldr());
    let taps = comptime!(cfg.kernel_h * cfg.kernel_w);
    let patch_len = comptime!(cfg.patch_len);
    // Patch pixels per unit, and the patch buffer size in 8-channel vectors.
    let per_unit = comptime!(cfg.patch_len.div_ceil(cfg.units()) as usize);
    let patch_vecs = comptime!(cfg.patch_buffer_vecs());
    let copy_vecs = comptime!(cfg.patch_copy_vecs());
    let skewed = comptime!(cfg.skewed);
    let patch_ld = comptime!(if cfg.skewed { SKEWED_LD } else { CHUNK });
    let weight_len = comptime!((cfg.kernel_h * cfg.kernel_w * cfg.bn() * cfg.ldr()) as usize);
    // Whether every chunk holds 16 real channels (no channel bound checks).
    let full_chunks = comptime!(cfg.full_chunks);

    let tile_n = CUBE_POS_Y % tiles_n;
    let group = CUBE_POS_Y / tiles_n;
    let n_start = tile_n * bn;
    let in_hw = shape.in_h * shape.in_w;
    let cg = shape.channels_per_group;

    let tid = UNIT_POS;
    let lane = tid % 32u32;
    let warp = tid / 32u32;
    let warp_m = warp % warps_m;
    let warp_n = warp / warps_m;
    let a_frag_base = warp_m * comptime!(cfg.frags_m * FRAG);
    let b_frag_base = warp_n * comptime!(cfg.frags_n * FRAG);

    let mut smem_w = SharedMemory::<FI>::new_aligned(weight_len, 128usize);
    let mut smem_p = SharedMemory::<Vector<FI, Const<8>>>::new_aligned(
        comptime!((2 * patch_vecs) as usize),
        128usize,
    );
    let mut smem_c =
        SharedMemory::<f32>::new_aligned(comptime!((warps * FRAG * FRAG) as usize), 128usize);

    // The cube's weight tile, once: [tap][n][c], zero past the channels and columns.
    let count = comptime!(cfg.kernel_h * cfg.kernel_w * cfg.bn() * cfg.cg_pad);
    for e in range_stepped(tid, count, units) {
        let c = e % cg_pad;
        let rest = e / cg_pad;
        let nl = rest % bn;
        let tap = rest / bn;
        let n = n_start + nl;
        let mut v = FI::from_int(0);
        if n < shape.out_channels_per_group && c < cg {
            let offset = weight_offset(&shape, n, c * taps + tap, read);
            v = FI::cast_from(weight[(group * shape.w_group + offset) as usize]);
        }
        smem_w[((tap * bn + nl) * ldr + c) as usize] = v;
    }

    let mut pix_base = Array::<u32>::new(per_unit);
    let mut pix_ok = Array::<u32>::new(per_unit);
    let mut next = Array::<Vector<FI, Const<8>>>::new(comptime!(per_unit * 2));

    let mut accs = Sequence::<cm::Matrix<f32>>::new();
    #[unroll]
    for _ in 0..comptime!(frags_m * frags_n) {
        accs.push(cm::Matrix::<f32>::from_value(
            MatrixIdent::Accumulator,
            16usize,
            16usize,
            16usize,
            MatrixLayout::Undefined,
            0.0f32,
        ));
    }

    // Runtime loop bounds (the chunk and tap loops): fully unrolled, they would keep too many
    // fragments live.
    let chunks = (cg + CHUNK - 1u32) / CHUNK;
    let mut tile_m = CUBE_POS_X;
    loop {
        if tile_m >= tiles_m {
            break;
        }
        let m_start = tile_m * bm;

        // This unit's patch pixels: input offset of (image, group, y, x) and whether the pixel
        // is inside the input (else it is padding, or past the last image).
        #[unroll]
        for j in 0..per_unit {
            let p = tid + (j as u32) * units;
            let q = m_start + p;
            let img = q / phw;
            let r = q % phw;
            let y = (r / pw) as i32 - shape.pad_h as i32;
            let x = (r % pw) as i32 - shape.pad_w as i32;
            let inside =
                p < patch_len && img < batch && (y as u32) < shape.in_h && (x as u32) < shape.in_w;
            pix_ok[j] = select(inside, 1u32, 0u32);
            // Outside the input the unit reads channel planes from offset 0 (in bounds) and
            // discards the values.
            let base =
                (img * shape.channels + group * cg) * in_hw + (y as u32) * shape.in_w + x as u32;
            pix_base[j] = select(inside, base, 0u32);
        }
        #[unroll]
        for f in 0..comptime!(frags_m * frags_n) {
            cm::fill(accs.index(f), 0.0f32);
        }

        patch_load::<FS, FI>(
            input,
            &shape,
            &pix_base,
            &pix_ok,
            0u32,
            &mut next,
            per_unit,
            full_chunks,
        );

        for chunk in 0u32..chunks {
            let buf = (chunk % 2u32) * patch_vecs;
            #[unroll]
            for j in 0..per_unit {
                let p = tid + (j as u32) * units;
                if p < patch_len {
                    if comptime!(skewed) {
                        let even = buf + p * 3u32;
                        let odd = buf + copy_vecs + 1u32 + p * 3u32;
                        smem_p[even as usize] = next[j * 2];
                        smem_p[(even + 1u32) as usize] = next[j * 2 + 1];
                        smem_p[odd as usize] = next[j * 2];
                        smem_p[(odd + 1u32) as usize] = next[j * 2 + 1];
                    } else {
                        smem_p[(buf + p * 2u32) as usize] = next[j * 2];
                        smem_p[(buf + p * 2u32 + 1u32) as usize] = next[j * 2 + 1];
                    }
                }
            }
            sync_cube();

            if chunk + 1u32 < chunks {
                patch_load::<FS, FI>(
                    input,
                    &shape,
                    &pix_base,
                    &pix_ok,
                    (chunk + 1u32) * CHUNK,
                    &mut next,
                    per_unit,
                    full_chunks,
                );
            }

            for kh in 0u32..shape.kernel_h {
                for kw in 0u32..shape.kernel_w {
                    let shift = kh * shape.dil_h * pw + kw * shape.dil_w;
                    let tap = kh * shape.kernel_w + kw;
                    let mut a_frags = Sequence::<cm::Matrix<FI>>::new();
                    #[unroll]
                    for fm in 0..frags_m {
                        let pixel = a_frag_base + comptime!(fm as u32 * FRAG) + shift;
                        let frag = unsafe {
                            cm::Matrix::<FI>::uninitialized(
                                MatrixIdent::A,
                                16usize,
                                16usize,
                                16usize,
                                MatrixLayout::RowMajor,
                            )
                        };
                        // Offset in 8-channel vectors, stride in elements.
                        let mut offset = buf + pixel * 2u32;
                        if comptime!(skewed) {
                            offset = select(
                                pixel % 2u32 == 1u32,
                                buf + copy_vecs + 1u32 + pixel * 3u32,
                                buf + pixel * 3u32,
                            );
                        }
                        cm::load(
                            &frag,
                            &smem_p.slice(offset as usize, comptime!((2 * patch_vecs) as usize)),
                            patch_ld,
                        );
                        a_frags.push(frag);
                    }
                    #[unroll]
                    for fn_ in 0..frags_n {
                        let col = b_frag_base + comptime!(fn_ as u32 * FRAG);
                        let start = (tap * bn + col) * ldr + chunk * CHUNK;
                        let b_frag = cm::Matrix::<FI>::from_slice(
                            MatrixIdent::B,
                            16usize,
                            16usize,
                            16usize,
                            MatrixLayout::ColMajor,
                            &smem_w.slice(start as usize, weight_len),
                            ldr,
                        );
                        #[unroll]
                        for fm in 0..frags_m {
                            let acc = accs.index(fm * frags_n + fn_);
                            cm::execute::<FI, FI, f32, f32>(a_frags.index(fm), &b_frag, acc, acc);
                        }
                    }
                }
            }
        }

        // Epilogue, per warp and fragment, through the warp's 16x16 staging area.
        let stage = warp * comptime!(FRAG * FRAG);
        let stage_end = stage + comptime!(FRAG * FRAG);
        let pixel = lane % 16u32;
        let channel = lane / 16u32;
        #[unroll]
        for fm in 0..frags_m {
            let m = m_start + a_frag_base + comptime!(fm as u32 * FRAG) + pixel;
            let img = m / phw;
            let r = m % phw;
            let oh = r / pw;
            let ow = r % pw;
            let m_ok = img < batch && oh < out_h && ow < shape.out_w;
            let out_base = img * shape.out_channels * shape.out_hw + oh * shape.out_w + ow;
            #[unroll]
            for fn_ in 0..frags_n {
                cm::store(
                    &mut smem_c.slice_mut(stage as usize, stage_end as usize),
                    accs.index(fm * frags_n + fn_),
                    16u32,
                    MatrixLayout::ColMajor,
                );
                sync_plane();
                #[unroll]
                for i in 0..8u32 {
                    let nl = channel + i * 2u32;
                    let n = n_start + b_frag_base + comptime!(fn_ as u32 * FRAG) + nl;
                    if m_ok && n < shape.out_channels_per_group {
                        let oc = group * shape.out_channels_per_group + n;
                        let value = smem_c[(stage + nl * 16u32 + pixel) as usize]
                            + bias_at(bias, has_bias, oc);
                        output[(out_base + oc * shape.out_hw) as usize] = FO::cast_from(value);
                    }
                }
                sync_plane();
            }
        }

        // The next tile's first store goes to buffer 0, which slow warps may still read.
        sync_cube();
        tile_m += CUBE_COUNT_X;
    }
}

/// Loads 16 channels (from `c0`) of this unit's patch pixels into `next` (two 8-channel
/// vectors per pixel), zero outside the input and past the group's channels.
#[cube]
#[allow(clippy::too_many_arguments)]
fn patch_load<FS: Float, FI: Float>(
    input: &Array<FS>,
    shape: &ConvShape,
    pix_base: &Array<u32>,
    pix_ok: &Array<u32>,
    c0: u32,
    next: &mut Array<Vector<FI, Const<8>>>,
    #[comptime] per_unit: usize,
    #[comptime] full_chunks: bool,
) {
    let in_hw = shape.in_h * shape.in_w;
    #[unroll]
    for j in 0..per_unit {
        let ok = pix_ok[j] != 0u32;
        let mut idx = pix_base[j] + c0 * in_hw;
        #[unroll]
        for h in 0..2usize {
            let mut v = Vector::<FI, Const<8>>::empty();
            #[unroll]
            for i in 0..8usize {
                if comptime!(full_chunks) {
                    // c < C/groups: `idx` is in bounds even for pixels outside the input.
                    let x = FI::cast_from(input[idx as usize]);
                    v[i] = select(ok, x, FI::from_int(0));
                } else {
                    let c = c0 + comptime!((h * 8 + i) as u32);
                    let valid = ok && c < shape.channels_per_group;
                    let x = FI::cast_from(input[select(valid, idx, 0u32) as usize]);
                    v[i] = select(valid, x, FI::from_int(0));
                }
                idx += in_hw;
            }
            next[j * 2 + h] = v;
        }
    }
}

/// Launches the patch kernel for `plan`; the caller has validated the problem, the buffers and
/// cmma support.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch<R: Runtime>(
    client: &ComputeClient<R>,
    input: ArrayArg<R>,
    weight: ArrayArg<R>,
    bias: (ArrayArg<R>, bool),
    output: ArrayArg<R>,
    problem: &crate::Conv2dProblem,
    plan: PatchPlan,
    read: WeightRead,
    types: [StorageType; 3],
) -> Result<(), crate::ConvError> {
    let cfg = plan.cfg;
    let hw = &client.properties().hardware;
    let layout = if read.flipped {
        Layout::flipped_weight(problem)
    } else {
        Layout::dense(problem)
    };
    let tiles_m = (plan.rows as usize).div_ceil(cfg.bm() as usize);
    let tiles_n = problem.gemm_n().div_ceil(cfg.bn() as usize);
    let columns = tiles_n * problem.groups;
    let (max_x, max_y, _) = hw.max_cube_count;
    if columns > max_y as usize {
        return Err(crate::ConvError::TooLarge {
            what: "number of cubes (groups x channel tiles)",
            elements: columns,
        });
    }
    // One cube per multiprocessor runs at a time (registers), each walking several tiles.
    let resident_cubes = hw
        .num_streaming_multiprocessors
        .map(|sms| sms as usize)
        .unwrap_or(usize::MAX);
    let cubes_m = tiles_m
        .min(resident_cubes.div_ceil(columns))
        .min(max_x as usize)
        .max(1);
    // SAFETY: every global read and write of the kernel is bounds-checked against the
    // problem's sizes (reads out of range are redirected to element 0 and discarded), and the
    // caller has checked that the buffers hold at least the problem's element counts; the
    // shared-memory offsets stay inside the tiles by construction of the plan.
    unsafe {
        conv2d_patch_kernel::launch_unchecked::<R>(
            client,
            CubeCount::Static(cubes_m as u32, columns as u32, 1),
            CubeDim::new_1d(cfg.units()),
            input,
            weight,
            bias.0,
            output,
            ConvShape::launch_arg(problem, &layout, CHUNK),
            bias.1 as u32,
            problem.batch as u32,
            problem.out_height() as u32,
            plan.pw,
            plan.phw,
            tiles_m as u32,
            tiles_n as u32,
            cfg,
            read,
            types,
        );
    }
    Ok(())
}
