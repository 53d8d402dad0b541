//! Per-channel work on `[batch, channels, ...]` burn-flex f32 tensors across rayon's threads:
//! the layout helpers batch norm uses, and the bias gradient of a convolution (a sum per
//! channel, which burn-flex computes through Burn's default: a copy of a `swap_dims(0, 1)` view,
//! then a sum along rows).

use super::elementwise::dense;
use super::layout::{from_flex, into_flex, is_flex};
use crate::sums::sum;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};
use burn_flex::FlexTensor;
use burn_std::Shape;
use rayon::prelude::*;

/// Values per rayon task at least, when planes are short, by default. On a 16-core H200 host
/// the fused batch norm passes at ResNet20's batch-32 activations were slowest with 1 024 and
/// with 16 384 or more (fewer tasks than threads at the smallest), 2 048 and 4 096 alike
/// (`benches/RESULTS.md`, 2026-12-07 m1/m2).
const MIN_TASK: usize = 1 << 12;

/// Environment variable setting the fewest values per rayon task (256 to 16 777 216), to
/// measure task sizes against each other on another machine. The results do not depend on it:
/// each plane is summed whole and the sums are added in plane order.
const ENV_MIN_TASK: &str = "BURN_HETERO_MIN_TASK";

/// Values per rayon task at least: [`MIN_TASK`], or as [`ENV_MIN_TASK`] sets (read once).
fn min_task() -> usize {
    static VALUES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *VALUES.get_or_init(|| {
        crate::tuning::usize_from_env(ENV_MIN_TASK, "values", 256..=1 << 24, MIN_TASK)
    })
}

/// An `[batch, channels, ...]` f32 tensor's values as `batch · channels` planes.
pub(crate) struct Planes {
    pub(crate) batch: usize,
    pub(crate) channels: usize,
    pub(crate) len: usize,
}

impl Planes {
    /// Tensors of rank ≥ 2 only; a rank-2 tensor has planes of one value.
    pub(crate) fn of(shape: &Shape) -> Option<Self> {
        let dims = shape.as_slice();
        if dims.len() < 2 {
            return None;
        }
        Some(Self {
            batch: dims[0],
            channels: dims[1],
            len: dims[2..].iter().product(),
        })
    }

    /// Values per channel.
    pub(crate) fn count(&self) -> usize {
        self.batch * self.len
    }

    /// Planes per rayon task, so that short planes are not one task each.
    pub(crate) fn min_planes(&self) -> usize {
        (min_task() / self.len.max(1)).max(1)
    }

    /// `sums(plane, channel)` (`N` sums) for every plane across threads, added up per channel
    /// in f64.
    pub(crate) fn per_channel<const N: usize, F>(&self, sums: F) -> Vec<[f64; N]>
    where
        F: Fn(usize, usize) -> [f64; N] + Sync,
    {
        let channels = self.channels;
        let planes: Vec<[f64; N]> = (0..self.batch * channels)
            .into_par_iter()
            .with_min_len(self.min_planes())
            .map(|p| sums(p, p % channels))
            .collect();
        self.add_up(planes)
    }

    /// [`Self::per_channel`] with each plane of `data` (the tensor's values, or an output of
    /// its shape) handed to `sums` to write as well: `sums(plane, channel, values)`.
    pub(crate) fn per_channel_mut<T: Send, const N: usize, F>(
        &self,
        data: &mut [T],
        sums: F,
    ) -> Vec<[f64; N]>
    where
        F: Fn(usize, usize, &mut [T]) -> [f64; N] + Sync,
    {
        let channels = self.channels;
        let planes: Vec<[f64; N]> = data
            .par_chunks_mut(self.len.max(1))
            .with_min_len(self.min_planes())
            .enumerate()
            .map(|(p, plane)| sums(p, p % channels, plane))
            .collect();
        self.add_up(planes)
    }

    /// Per-plane sums added up per channel, in plane order.
    fn add_up<const N: usize>(&self, planes: Vec<[f64; N]>) -> Vec<[f64; N]> {
        let mut out = vec![[0.0; N]; self.channels];
        for (p, plane) in planes.into_iter().enumerate() {
            for (total, value) in out[p % self.channels].iter_mut().zip(plane) {
                *total += value;
            }
        }
        out
    }
}

/// A contiguous f32 burn-flex tensor's values; None for other dtypes or strided views.
pub(crate) fn values(tensor: &FlexTensor) -> Option<&[f32]> {
    if tensor.dtype() != DType::F32 {
        return None;
    }
    let (start, end) = tensor.layout().contiguous_offsets()?;
    Some(&tensor.storage::<f32>()[start..end])
}

/// A convolution's bias gradient, the output gradient summed per channel, when `C` is burn-flex
/// and the output gradient a contiguous f32 tensor, or `C` is burn-ndarray and the gradient a
/// large one; `C`'s own otherwise. burn-ndarray's small sums stay its own, the reference the
/// conformance suite holds `Hetero<NdArray, _>` to bit for bit; its large ones took 1.3–2.2 ms
/// a call for the MNIST net's convs at batch 64 on the H100 (2026-12-06), where these sums (f64,
/// threaded) are more exact too.
pub(crate) fn conv2d_bias_backward<C: Backend>(
    x: FloatTensor<C>,
    bias: FloatTensor<C>,
    output_grad: FloatTensor<C>,
) -> FloatTensor<C> {
    let large_on_ndarray = super::layout::is_ndarray::<C>()
        && output_grad.shape().num_elements() >= super::elementwise::PARALLEL_MIN;
    if !(is_flex::<C>() || large_on_ndarray) {
        return C::conv2d_bias_backward(x, bias, output_grad);
    }
    let grad = match into_flex::<C>(output_grad) {
        Ok(grad) => grad,
        Err(grad) => return C::conv2d_bias_backward(x, bias, grad),
    };
    let planes = Planes::of(grad.layout().shape());
    let (Some(planes), Some(dy)) = (planes, values(&grad)) else {
        return C::conv2d_bias_backward(x, bias, from_flex::<C>(grad));
    };
    if bias.shape().num_elements() != planes.channels {
        return C::conv2d_bias_backward(x, bias, from_flex::<C>(grad));
    }
    let len = planes.len;
    let sums = planes.per_channel(|p, _| [sum(&dy[p * len..(p + 1) * len])]);
    let out: Vec<f32> = sums.iter().map(|&[s]| s as f32).collect();
    from_flex::<C>(dense(out, bias.shape()))
}
