//! The portable path: an implicit GEMM with shared-memory tiles and a register tile per unit,
//! in f32 arithmetic whatever the operand type. Runs on every CubeCL runtime.
//!
//! GEMM view of one group `g`: `out[m, n] = sum_k A[m, k] * B[k, n]` with `m = (img, oh, ow)`,
//! `n` the output channel inside the group and `k = (c, kh, kw)` in the order of the OIHW weight,
//! so that `B[k, n] = weight[g*OCg + n, k]` is contiguous along `k`, and
//! `A[m, k] = input[img, g*Cg + c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]` (0 in the padding) is
//! gathered on the fly (im2col is never materialised).
//!
//! A cube computes a `bm x bn` block of the output, stepping through `K` by `bk`:
//! - A tile: the cube's units are laid out as 32 lanes along `m` times `units/32` rows along `k`;
//!   each unit loads `bm/32` rows `m` (decomposed once, before the `K` loop) for `bk/(units/32)`
//!   values of `k` (decomposed once per tile and shared by its rows). A warp reads 32 consecutive
//!   output pixels, i.e. consecutive input addresses (for stride 1), and writes 32 consecutive
//!   words of shared memory.
//! - B tile: `bk` lanes along `k` (contiguous in the weight) times `units/bk` rows along `n`.
//! - Compute: unit `(tx, ty)` holds a `tm x tn` register tile, rows `tx + i*(bm/tm)` and columns
//!   `ty + j*(bn/tn)`; this strided assignment makes the shared-memory reads of a warp
//!   consecutive (A) or broadcast (B), and the output stores of a warp consecutive along `m`
//!   (contiguous in NCHW).
//! - Epilogue: bias (f32) added to the f32 sums, cast to the output type, bounds-checked store.

use cubecl::prelude::*;

use crate::gather::{a_k_init, a_load, a_rows_init, a_store, b_load, b_store, bias_at};
use crate::shape::{ConvShape, Layout, WeightRead};

/// Tile sizes of the tiled kernel (compile-time constants of one kernel).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct TiledConfig {
    /// Block rows (output pixels) per cube; a multiple of 32.
    pub bm: u32,
    /// Block columns (output channels) per cube.
    pub bn: u32,
    /// Reduction step.
    pub bk: u32,
    /// Register rows per unit.
    pub tm: u32,
    /// Register columns per unit.
    pub tn: u32,
}

impl TiledConfig {
    /// Units along `m`.
    pub fn units_m(&self) -> u32 {
        self.bm / self.tm
    }

    /// Units along `n`.
    pub fn units_n(&self) -> u32 {
        self.bn / self.tn
    }

    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.units_m() * self.units_n()
    }

    /// Whether the load mappings described in the module documentation cover the tiles exactly.
    pub fn is_valid(&self) -> bool {
        let units = self.units();
        self.tm > 0
            && self.tn > 0
            && self.bk > 0
            && self.bm.is_multiple_of(self.tm)
            && self.bn.is_multiple_of(self.tn)
            && units.is_multiple_of(32)
            && self.bm.is_multiple_of(32)
            && self.bk.is_multiple_of(units / 32)
            && units.is_multiple_of(self.bk)
            && self.bn.is_multiple_of(units / self.bk)
    }

    /// Shared memory of one cube, in bytes.
    pub fn shared_memory_bytes(&self) -> usize {
        (2 * (self.bk * self.bm + self.bk * (self.bn + 1)) * 4) as usize
    }

    /// The configuration for `out_channels_per_group` output channels per group: the block is
    /// narrowed to the channel count so that few columns are wasted.
    pub fn for_problem(out_channels_per_group: usize) -> Self {
        let config = match out_channels_per_group {
            0..=8 => TiledConfig {
                bm: 128,
                bn: 8,
                bk: 16,
                tm: 4,
                tn: 2,
            },
            9..=16 => TiledConfig {
                bm: 128,
                bn: 16,
                bk: 16,
                tm: 4,
                tn: 4,
            },
            17..=32 => TiledConfig {
                bm: 128,
                bn: 32,
                bk: 16,
                tm: 4,
                tn: 4,
            },
            _ => TiledConfig {
                bm: 64,
                bn: 64,
                bk: 16,
                tm: 4,
                tn: 4,
            },
        };
        debug_assert!(config.is_valid(), "{config:?}");
        config
    }
}

/// The tiled conv2d kernel. `FA`, `FB`: types of the input and weight buffers (`FI`, or a wider
/// type rounded to `FI` as it is loaded), `FI`: operand type, `FO`: output type; sums in f32.
/// The operands and the output are read and written where `shape`'s offsets say, the weight as
/// `read` says.
#[cube(launch_unchecked)]
// `div_ceil` is not part of the CubeCL language.
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
pub(crate) fn conv2d_tiled_kernel<FA: Float, FB: Float, FI: Float, FO: Float>(
    input: &Array<FA>,
    weight: &Array<FB>,
    bias: &Array<f32>,
    output: &mut Array<FO>,
    shape: ConvShape,
    has_bias: u32,
    tiles_n: u32,
    tiles_m: u32,
    tiles_total: u32,
    #[comptime] cfg: TiledConfig,
    #[comptime] use_mask: bool,
    #[comptime] read: WeightRead,
    #[define(FA, FB, FI, FO)] _types: [StorageType; 4],
) {
    let bm = comptime!(cfg.bm);
    let bn = comptime!(cfg.bn);
    let bk = comptime!(cfg.bk);
    let tm = comptime!(cfg.tm as usize);
    let tn = comptime!(cfg.tn as usize);
    let units = comptime!(cfg.units());
    let units_m = comptime!(cfg.units_m());
    let units_n = comptime!(cfg.units_n());
    // B is stored k-major with one padding column, so that the 16 lanes writing consecutive k
    // hit distinct banks.
    let ldb = comptime!(cfg.bn + 1);

    // Linear cube index -> (group, m tile, n tile), n fastest so that the cubes reading the
    // same input rows run together.
    let cube = CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    if cube >= tiles_total {
        terminate!();
    }
    let tile_n = cube % tiles_n;
    let rest = cube / tiles_n;
    let tile_m = rest % tiles_m;
    let group = rest / tiles_m;

    let m_start = tile_m * bm;
    let n_start = tile_n * bn;
    let tid = UNIT_POS;

    // Two buffers of each operand tile (double buffering, one barrier per step).
    let a_size = comptime!(bk * bm);
    let b_size = comptime!(bk * ldb);
    let mut smem_a = SharedMemory::<f32>::new(comptime!((2 * a_size) as usize));
    let mut smem_b = SharedMemory::<f32>::new(comptime!((2 * b_size) as usize));

    let a_rows = comptime!(units / 32);
    let a_per_m = comptime!((bm / 32) as usize);
    let a_per_k = comptime!((bk / (units / 32)) as usize);
    let a_lane = tid % 32u32;
    let a_row = tid / 32u32;
    let mut a_origin = Array::<i32>::new(a_per_m);
    let mut a_ih = Array::<i32>::new(a_per_m);
    let mut a_iw = Array::<i32>::new(a_per_m);
    let mut a_mask = Array::<u32>::new(a_per_m);
    a_rows_init(
        &shape,
        m_start,
        group,
        a_lane,
        &mut a_origin,
        &mut a_ih,
        &mut a_iw,
        &mut a_mask,
        a_per_m,
        use_mask,
    );
    let mut a_cs = Array::<u32>::new(a_per_k);
    let mut a_khs = Array::<u32>::new(a_per_k);
    let mut a_kws = Array::<u32>::new(a_per_k);
    a_k_init(
        &shape, a_row, &mut a_cs, &mut a_khs, &mut a_kws, a_rows, a_per_k,
    );

    let b_rows = comptime!(units / bk);
    let b_per_n = comptime!((bn / (units / bk)) as usize);
    let b_lane = tid % bk;
    let b_row = tid / bk;
    let w_group = group * shape.w_group;

    let tx = tid % units_m;
    let ty = tid / units_m;

    let mut acc = Array::<f32>::new(comptime!(tm * tn));
    #[unroll]
    for i in 0..comptime!(tm * tn) {
        acc[i] = 0.0f32;
    }
    let mut a_reg = Array::<f32>::new(tm);
    let mut b_reg = Array::<f32>::new(tn);

    let mut a_next = Array::<f32>::new(comptime!(a_per_k * a_per_m));
    let mut b_next = Array::<f32>::new(b_per_n);
    a_load::<FA, FI, f32>(
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
    b_load::<FB, FI, f32>(
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

    let num_k_tiles = (shape.gemm_k + bk - 1u32) / bk;
    for k_tile in 0u32..num_k_tiles {
        // The step writes the buffer that no unit reads any more (every unit passed this
        // step's barrier after computing on it two steps ago).
        let parity = k_tile % 2u32;
        let a_buf = parity * a_size;
        let b_buf = parity * b_size;
        a_store::<f32>(
            &a_next,
            &mut smem_a,
            a_buf,
            a_row,
            a_lane,
            a_rows,
            a_per_k,
            a_per_m,
            bm,
        );
        b_store::<f32>(
            &b_next,
            &mut smem_b,
            b_buf,
            b_lane,
            b_row,
            b_rows,
            b_per_n,
            ldb,
            1u32,
        );
        sync_cube();

        // Issue the global loads of the next step before computing this one.
        if k_tile + 1u32 < num_k_tiles {
            let k0 = (k_tile + 1u32) * bk;
            a_load::<FA, FI, f32>(
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
            b_load::<FB, FI, f32>(
                weight,
                &shape,
                w_group,
                n_start,
                k0,
                b_lane,
                b_row,
                &mut b_next,
                b_rows,
                b_per_n,
                read,
            );
        }

        #[unroll]
        for kk in 0u32..bk {
            #[unroll]
            for i in 0..tm {
                a_reg[i] = smem_a[(a_buf + kk * bm + tx + (i as u32) * units_m) as usize];
            }
            #[unroll]
            for j in 0..tn {
                b_reg[j] = smem_b[(b_buf + kk * ldb + ty + (j as u32) * units_n) as usize];
            }
            #[unroll]
            for i in 0..tm {
                #[unroll]
                for j in 0..tn {
                    acc[i * tn + j] += a_reg[i] * b_reg[j];
                }
            }
        }
    }

    #[unroll]
    for i in 0..tm {
        let m = m_start + tx + (i as u32) * units_m;
        if m < shape.gemm_m {
            let img = m / shape.out_hw;
            let pix = m % shape.out_hw;
            #[unroll]
            for j in 0..tn {
                let n = n_start + ty + (j as u32) * units_n;
                if n < shape.out_channels_per_group {
                    let oc = group * shape.out_channels_per_group + n;
                    let value = acc[i * tn + j] + bias_at(bias, has_bias, oc);
                    output[(img * shape.o_img + oc * shape.o_chan + pix) as usize] =
                        FO::cast_from(value);
                }
            }
        }
    }
}

/// Launches the tiled kernel on `problem` in `layout`; the caller has validated the problem,
/// the layout and the buffers. `types`: input, weight, operand and output types.
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
    let cfg = TiledConfig::for_problem(problem.out_channels_per_group());
    let tiles_m = layout.gemm_m(problem).div_ceil(cfg.bm as usize);
    let tiles_n = problem.gemm_n().div_ceil(cfg.bn as usize);
    let (cube_count, total) = crate::launch::cube_count(client, tiles_m, tiles_n, problem.groups)?;
    let smem = cfg.shared_memory_bytes();
    let max_smem = client.properties().hardware.max_shared_memory_size;
    if smem > max_smem {
        return Err(crate::ConvError::Unsupported(format!(
            "the tiled kernel needs {smem} bytes of shared memory, the device has {max_smem}"
        )));
    }
    // SAFETY: every read and write of the kernel is bounds-checked against the problem's sizes,
    // and the caller has checked that the buffers hold at least the problem's element counts.
    unsafe {
        conv2d_tiled_kernel::launch_unchecked::<R>(
            client,
            cube_count,
            CubeDim::new_1d(cfg.units()),
            input,
            weight,
            bias.0,
            output,
            ConvShape::launch_arg(problem, layout, cfg.bk),
            bias.1 as u32,
            tiles_n as u32,
            tiles_m as u32,
            total,
            cfg,
            problem.kernel_height * problem.kernel_width <= 32,
            layout.weight,
            types,
        );
    }
    Ok(())
}
