//! The conformance suite of burn-hetero: one test binary, run on the Vulkan accelerator
//! (lavapipe on machines without a GPU).

mod common;

mod smoke {
    use crate::common::*;
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;

    #[test]
    fn smoke_conv_on_accelerator() {
        let _g = settings_lock();
        let dev = device();
        println!("{:?}", burn_hetero::Hetero::<N, Accel>::accelerator_status(&dev));
        let mut rng = rng_for("smoke");
        let x = float::<H, 4>(&mut rng, &dev, [2, 3, 8, 8]);
        let w = float::<H, 4>(&mut rng, &dev, [4, 3, 3, 3]);
        burn_hetero::reset_stats();
        let t = std::time::Instant::now();
        let y = conv2d(x, w, None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
        println!("{:?} {:?}", y.dims(), t.elapsed());
        println!("{}", burn_hetero::stats());
    }
}
