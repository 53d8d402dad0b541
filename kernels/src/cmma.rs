//! The matrix-unit path: the same implicit GEMM as the tiled kernel, with the block product done
//! by CubeCL `cmma` fragments (16x16x16, f16/bf16 operands, f32 accumulators).
//!
//! A cube of `warps_m x warps_n` warps computes `bm x bn` blocks (`bm = warps_m*frags_m*16`,
//! `bn = warps_n*frags_n*16`); each warp owns `frags_m x frags_n` accumulator fragments, i.e. a
//! `frags_m*16 x frags_n*16` sub-block.
//!
//! - Persistent cubes: the grid's y axis is `(group, n tile)`, and each cube walks the m tiles
//!   `x, x + grid_x, ...`, so that everything that depends only on the columns (the weight
//!   tile) is set up once per cube. The grid holds about as many cubes as the device runs at
//!   once.
//! - Weight (B): when its `bn x K` tile fits (see [`CmmaConfig::resident_kpad`]), it is loaded
//!   once per cube into shared memory, column-major (`(k, n)` at `n*ldr + k`,
//!   `ldr = kpad + 8`), and stays there; otherwise it is streamed per reduction step like A.
//! - Input (A): per reduction step of `bk` (a multiple of 16), gathered from global memory into
//!   registers one step ahead (see `gather`), then stored column-major in one of two shared
//!   buffers (`(m, k)` at `k*lda + m`, `lda = bm + 8`); one barrier per step. The 8-element
//!   paddings stagger the fragment rows across banks and keep every fragment 32-byte aligned
//!   with a leading dimension that is a multiple of 8, as the matrix loads require.
//! - Each warp loads its `frags_m` A and `frags_n` B fragments per 16-wide slice of `k` and
//!   issues `frags_m*frags_n` multiply-accumulates.
//! - Epilogue, per warp and fragment: the f32 accumulator goes through a 16x16 shared staging
//!   area; lane `l` owns pixel `l % 16` of the fragment (decomposed once per fragment row) and
//!   writes 8 of its 16 channels, so that a warp stores two runs of 16 consecutive pixels (NCHW)
//!   per instruction, with the f32 bias added before the single rounding to the output type.

use cubecl::cmma::{self as cm, MatrixIdent, MatrixLayout};
use cubecl::prelude::*;

use crate::gather::{
    a_k_init, a_load, a_rows_init, a_store, b_load, b_store, bias_at, weight_offset,
};
use crate::shape::{ConvShape, Layout, WeightRead};

/// Tiling of the cmma kernel (compile-time constants of one kernel).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct CmmaConfig {
    /// Warps along `m`.
    pub warps_m: u32,
    /// Warps along `n`.
    pub warps_n: u32,
    /// 16x16 accumulator fragments per warp along `m`.
    pub frags_m: u32,
    /// 16x16 accumulator fragments per warp along `n`.
    pub frags_n: u32,
    /// Reduction step (a multiple of 16).
    pub bk: u32,
}

/// Fragment size (m = n = k).
const FRAG: u32 = 16;
/// Padding of the operand tiles' leading dimension, in elements.
const PAD_AB: u32 = 8;
/// Largest weight tile kept resident in shared memory, in bytes (two cubes of the largest
/// configuration then fit in the 228 KiB of an H100/H200 multiprocessor).
const MAX_RESIDENT_BYTES: u32 = 80 * 1024;

impl CmmaConfig {
    /// Block rows.
    pub fn bm(&self) -> u32 {
        self.warps_m * self.frags_m * FRAG
    }

    /// Block columns.
    pub fn bn(&self) -> u32 {
        self.warps_n * self.frags_n * FRAG
    }

    /// Units per cube (32 per warp).
    pub fn units(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// Leading dimension of the A tile.
    pub fn lda(&self) -> u32 {
        self.bm() + PAD_AB
    }

    /// Leading dimension of a streamed B tile.
    pub fn ldb(&self) -> u32 {
        self.bk + PAD_AB
    }

    /// The padded reduction length with which the whole `bn x K` weight tile stays in shared
    /// memory (K rounded up to `bk`), or 0 when it is too large and B is streamed.
    pub fn resident_kpad(&self, gemm_k: usize) -> u32 {
        let kpad = gemm_k.div_ceil(self.bk as usize) * self.bk as usize;
        let bytes = self.bn() as usize * (kpad + PAD_AB as usize) * 2;
        if bytes <= MAX_RESIDENT_BYTES as usize {
            kpad as u32
        } else {
            0
        }
    }

    /// Shared memory of one cube in bytes (2-byte operands), for the weight tile resident with
    /// reduction length `kpad`, or streamed when `kpad` is 0.
    pub fn shared_memory_bytes(&self, kpad: u32) -> usize {
        let a = 2 * self.bk * self.lda() * 2;
        let b = if kpad > 0 {
            self.bn() * (kpad + PAD_AB) * 2
        } else {
            2 * self.bn() * self.ldb() * 2
        };
        let c = self.warps_m * self.warps_n * FRAG * FRAG * 4;
        (a + b + c) as usize
    }

    /// Whether the load mappings cover the tiles exactly.
    pub fn is_valid(&self) -> bool {
        let units = self.units();
        let rows = units / 32;
        self.bk.is_multiple_of(FRAG)
            && self.bm().is_multiple_of(32)
            && self.bk.is_multiple_of(rows)
            && units.is_multiple_of(self.bk)
            && self.bn().is_multiple_of(units / self.bk)
    }

    /// The configuration with the most units and the most shared memory when streaming B.
    pub fn largest() -> Self {
        Self::candidates(usize::MAX)[0]
    }

    /// The tilings for `out_channels_per_group` output channels per group, largest first:
    /// 4 warps along `m`, 16, 32 or 64 columns, 32 or 16 rows per warp.
    fn candidates(out_channels_per_group: usize) -> &'static [CmmaConfig] {
        const fn tiling(warps_n: u32, frags_m: u32, frags_n: u32) -> CmmaConfig {
            CmmaConfig {
                warps_m: 4,
                warps_n,
                frags_m,
                frags_n,
                bk: 32,
            }
        }
        const NARROW: [CmmaConfig; 2] = [tiling(1, 2, 1), tiling(1, 1, 1)];
        const MEDIUM: [CmmaConfig; 2] = [tiling(1, 2, 2), tiling(1, 1, 2)];
        const WIDE: [CmmaConfig; 3] = [tiling(2, 2, 2), tiling(2, 1, 2), tiling(1, 1, 2)];
        match out_channels_per_group {
            0..=16 => &NARROW,
            17..=32 => &MEDIUM,
            _ => &WIDE,
        }
    }

    /// The configuration for `problem` on a device of `sms` multiprocessors: the largest tiles
    /// that still give every multiprocessor a cube, else the smallest. A small problem is
    /// bound by the latency of each cube's reduction steps (a global gather and a barrier
    /// each), not by its loads: on an H200, ResNet20's 16 -> 32 stride-2 layer at batch 32 ran
    /// 64 cubes of 128 x 32 on 132 multiprocessors (14 us in Nsight Compute).
    pub fn for_problem(problem: &crate::Conv2dProblem, sms: Option<u32>) -> Self {
        let n = problem.out_channels_per_group();
        let candidates = Self::candidates(n);
        let sms = sms.unwrap_or(0) as usize;
        let cubes = |cfg: &CmmaConfig| {
            problem.gemm_m().div_ceil(cfg.bm() as usize)
                * n.div_ceil(cfg.bn() as usize)
                * problem.groups
        };
        let config = candidates
            .iter()
            .copied()
            .find(|cfg| cubes(cfg) >= sms)
            .unwrap_or(candidates[candidates.len() - 1]);
        debug_assert!(config.is_valid(), "{config:?}");
        config
    }
}

/// The cmma conv2d kernel. `FA`, `FB`: types of the input and weight buffers (`FI`, or a wider
/// type rounded to `FI` as it is loaded), `FI`: operand type (f16 or bf16), `FO`: output type.
/// `b_kpad`: padded reduction length of the resident weight tile, 0 to stream it. The operands
/// and the output are read and written where `shape`'s offsets say, the weight as `read` says.
#[cube(launch_unchecked)]
// `div_ceil` is not part of the CubeCL language.
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
pub(crate) fn conv2d_cmma_kernel<FA: Float, FB: Float, FI: Float, FO: Float>(
    input: &Array<FA>,
    weight: &Array<FB>,
    bias: &Array<f32>,
    output: &mut Array<FO>,
    shape: ConvShape,
    has_bias: u32,
    tiles_m: u32,
    tiles_n: u32,
    #[comptime] cfg: CmmaConfig,
    #[comptime] b_kpad: u32,
    #[comptime] use_mask: bool,
    #[comptime] read: WeightRead,
    #[define(FA, FB, FI, FO)] _types: [StorageType; 4],
) {
    let bm = comptime!(cfg.bm());
    let bn = comptime!(cfg.bn());
    let bk = comptime!(cfg.bk);
    let units = comptime!(cfg.units());
    let lda = comptime!(cfg.lda());
    let ldb = comptime!(cfg.ldb());
    let frags_m = comptime!(cfg.frags_m as usize);
    let frags_n = comptime!(cfg.frags_n as usize);
    let warps_m = comptime!(cfg.warps_m);
    let warps = comptime!(cfg.warps_m * cfg.warps_n);
    let resident = comptime!(b_kpad > 0);
    // Leading dimension of the resident weight tile.
    let ldr = comptime!(b_kpad + PAD_AB);
    let a_size = comptime!(bk * lda);
    let b_size = comptime!(bn * ldb);
    let a_len = comptime!((2 * a_size) as usize);
    let b_len = comptime!(if b_kpad > 0 {
        (bn * (b_kpad + PAD_AB)) as usize
    } else {
        (2 * b_size) as usize
    });

    let tile_n = CUBE_POS_Y % tiles_n;
    let group = CUBE_POS_Y / tiles_n;
    let n_start = tile_n * bn;
    let w_group = group * shape.w_group;

    let tid = UNIT_POS;
    let lane = tid % 32u32;
    let warp = tid / 32u32;
    let warp_m = warp % warps_m;
    let warp_n = warp / warps_m;
    let a_frag_base = warp_m * comptime!(cfg.frags_m * FRAG);
    let b_frag_base = warp_n * comptime!(cfg.frags_n * FRAG);

    let mut smem_a = SharedMemory::<FI>::new_aligned(a_len, 128usize);
    let mut smem_b = SharedMemory::<FI>::new_aligned(b_len, 128usize);
    let mut smem_c =
        SharedMemory::<f32>::new_aligned(comptime!((warps * FRAG * FRAG) as usize), 128usize);

    // The weight tile of this cube's columns, once (ordered before its first use by the first
    // step's barrier).
    if comptime!(resident) {
        let count = comptime!(bn * b_kpad);
        for e in range_stepped(tid, count, units) {
            let nl = e / b_kpad;
            let k = e % b_kpad;
            let n = n_start + nl;
            let mut v = FI::from_int(0);
            if n < shape.out_channels_per_group && k < shape.gemm_k {
                v = FI::cast_from(weight[(w_group + weight_offset(&shape, n, k, read)) as usize]);
            }
            smem_b[(nl * ldr + k) as usize] = v;
        }
    }

    let a_rows = comptime!(units / 32);
    let a_per_m = comptime!((bm / 32) as usize);
    let a_per_k = comptime!((bk / (units / 32)) as usize);
    let a_row = warp;
    let b_rows = comptime!(units / bk);
    let b_per_n = comptime!((bn / (units / bk)) as usize);
    let b_lane = tid % bk;
    let b_row = tid / bk;

    let mut a_origin = Array::<i32>::new(a_per_m);
    let mut a_ih = Array::<i32>::new(a_per_m);
    let mut a_iw = Array::<i32>::new(a_per_m);
    let mut a_mask = Array::<u32>::new(a_per_m);
    let mut a_cs = Array::<u32>::new(a_per_k);
    let mut a_khs = Array::<u32>::new(a_per_k);
    let mut a_kws = Array::<u32>::new(a_per_k);
    let mut a_next = Array::<FI>::new(comptime!(a_per_k * a_per_m));
    let mut b_next = Array::<FI>::new(b_per_n);

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

    let num_k_tiles = (shape.gemm_k + bk - 1u32) / bk;
    let mut tile_m = CUBE_POS_X;
    loop {
        if tile_m >= tiles_m {
            break;
        }
        let m_start = tile_m * bm;

        a_rows_init(
            &shape,
            m_start,
            group,
            lane,
            &mut a_origin,
            &mut a_ih,
            &mut a_iw,
            &mut a_mask,
            a_per_m,
            use_mask,
        );
        a_k_init(
            &shape, a_row, &mut a_cs, &mut a_khs, &mut a_kws, a_rows, a_per_k,
        );
        #[unroll]
        for f in 0..comptime!(frags_m * frags_n) {
            cm::fill(accs.index(f), 0.0f32);
        }

        a_load::<FA, FI, FI>(
            input,
            &shape,
            &a_origin,
            &a_ih,
            &a_iw,
            &a_mask,
            &mut a_cs,
            &mut a_khs,
            &mut a_kws,
            &mut a_next,
            a_per_k,
            a_per_m,
            use_mask,
        );
        if comptime!(!resident) {
            b_load::<FB, FI, FI>(
                weight,
                &shape,
                w_group,
                n_start,
                0u32,
                b_lane,
                b_row,
                &mut b_next,
                b_rows,
                b_per_n,
                read,
            );
        }

        for k_tile in 0u32..num_k_tiles {
            // Double buffering: the step writes the buffer that no unit reads any more (every
            // unit passed this step's barrier after computing on it two steps ago).
            let parity = k_tile % 2u32;
            let a_buf = parity * a_size;
            a_store::<FI>(
                &a_next,
                &mut smem_a,
                a_buf,
                a_row,
                lane,
                a_rows,
                a_per_k,
                a_per_m,
                lda,
            );
            if comptime!(!resident) {
                b_store::<FI>(
                    &b_next,
                    &mut smem_b,
                    parity * b_size,
                    b_lane,
                    b_row,
                    b_rows,
                    b_per_n,
                    1u32,
                    ldb,
                );
            }
            sync_cube();

            // Issue the global loads of the next step before computing this one.
            if k_tile + 1u32 < num_k_tiles {
                a_load::<FA, FI, FI>(
                    input,
                    &shape,
                    &a_origin,
                    &a_ih,
                    &a_iw,
                    &a_mask,
                    &mut a_cs,
                    &mut a_khs,
                    &mut a_kws,
                    &mut a_next,
                    a_per_k,
                    a_per_m,
                    use_mask,
                );
                if comptime!(!resident) {
                    b_load::<FB, FI, FI>(
                        weight,
                        &shape,
                        w_group,
                        n_start,
                        (k_tile + 1u32) * bk,
                        b_lane,
                        b_row,
                        &mut b_next,
                        b_rows,
                        b_per_n,
                        read,
                    );
                }
            }

            #[unroll]
            for ks in 0..comptime!((bk / FRAG) as usize) {
                let k_off = comptime!(ks as u32 * FRAG);
                let mut a_frags = Sequence::<cm::Matrix<FI>>::new();
                #[unroll]
                for fm in 0..frags_m {
                    let start = a_buf + k_off * lda + a_frag_base + comptime!(fm as u32 * FRAG);
                    a_frags.push(cm::Matrix::<FI>::from_slice(
                        MatrixIdent::A,
                        16usize,
                        16usize,
                        16usize,
                        MatrixLayout::ColMajor,
                        &smem_a.slice(start as usize, a_len),
                        lda,
                    ));
                }
                #[unroll]
                for fn_ in 0..frags_n {
                    let col = b_frag_base + comptime!(fn_ as u32 * FRAG);
                    let mut start = parity * b_size + col * ldb + k_off;
                    if comptime!(resident) {
                        start = col * ldr + k_tile * bk + k_off;
                    }
                    let b_frag = cm::Matrix::<FI>::from_slice(
                        MatrixIdent::B,
                        16usize,
                        16usize,
                        16usize,
                        MatrixLayout::ColMajor,
                        &smem_b.slice(start as usize, b_len),
                        comptime!(if b_kpad > 0 {
                            b_kpad + PAD_AB
                        } else {
                            bk + PAD_AB
                        }),
                    );
                    #[unroll]
                    for fm in 0..frags_m {
                        let acc = accs.index(fm * frags_n + fn_);
                        cm::execute::<FI, FI, f32, f32>(a_frags.index(fm), &b_frag, acc, acc);
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
            let m_ok = m < shape.gemm_m;
            let img = m / shape.out_hw;
            let pix = m % shape.out_hw;
            let out_base = img * shape.o_img + pix;
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
                        output[(out_base + oc * shape.o_chan) as usize] = FO::cast_from(value);
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

/// Launches the cmma kernel on `problem` in `layout`; the caller has validated the problem, the
/// layout, the buffers and cmma support. `types`: input, weight, operand and output types.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch<R: Runtime>(
    client: &ComputeClient<R>,
    input: ArrayArg<R>,
    weight: ArrayArg<R>,
    bias: (ArrayArg<R>, bool),
    output: ArrayArg<R>,
    problem: &crate::Conv2dProblem,
    layout: &Layout,
    types: [StorageType; 4],
) -> Result<(), crate::ConvError> {
    let hw = &client.properties().hardware;
    let cfg = CmmaConfig::for_problem(problem, hw.num_streaming_multiprocessors);
    let mut kpad = cfg.resident_kpad(problem.gemm_k());
    if cfg.shared_memory_bytes(kpad) > hw.max_shared_memory_size {
        kpad = 0;
    }
    let smem = cfg.shared_memory_bytes(kpad);
    if smem > hw.max_shared_memory_size {
        return Err(crate::ConvError::Unsupported(format!(
            "the cmma kernel needs {smem} bytes of shared memory, the device has {}",
            hw.max_shared_memory_size
        )));
    }
    let tiles_m = layout.gemm_m(problem).div_ceil(cfg.bm() as usize);
    let tiles_n = problem.gemm_n().div_ceil(cfg.bn() as usize);
    let columns = tiles_n * problem.groups;
    let (max_x, max_y, _) = hw.max_cube_count;
    if columns > max_y as usize || tiles_m > u32::MAX as usize {
        return Err(crate::ConvError::TooLarge {
            what: "number of cubes (groups x channel tiles)",
            elements: columns,
        });
    }
    // About as many cubes as run at once (two cubes of 256 units per multiprocessor), each
    // walking several m tiles; all the m tiles where the multiprocessor count is unknown.
    let resident_cubes = hw
        .num_streaming_multiprocessors
        .map(|sms| sms as usize * (512 / cfg.units() as usize).max(1))
        .unwrap_or(usize::MAX);
    let cubes_m = tiles_m
        .min(resident_cubes.div_ceil(columns))
        .min(max_x as usize)
        .max(1);
    let use_mask = problem.kernel_height * problem.kernel_width <= 32;
    // SAFETY: every global read and write of the kernel is bounds-checked against the
    // problem's sizes, and the caller has checked that the buffers hold at least the problem's
    // element counts; the shared-memory offsets stay inside the tiles by construction.
    unsafe {
        conv2d_cmma_kernel::launch_unchecked::<R>(
            client,
            CubeCount::Static(cubes_m as u32, columns as u32, 1),
            CubeDim::new_1d(cfg.units()),
            input,
            weight,
            bias.0,
            output,
            ConvShape::launch_arg(problem, layout, cfg.bk),
            bias.1 as u32,
            tiles_m as u32,
            tiles_n as u32,
            cfg,
            kpad,
            use_mask,
            layout.weight,
            types,
        );
    }
    Ok(())
}
