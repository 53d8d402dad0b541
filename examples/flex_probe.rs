use burn::tensor::{Distribution, Tensor};
use std::time::Instant;
fn time<F: FnMut()>(name: &str, mut f: F) {
    f();
    let t = Instant::now();
    for _ in 0..20 {
        f();
    }
    println!("{name}: {:.3} ms", t.elapsed().as_secs_f64() * 1e3 / 20.0);
}
fn run<B: burn::tensor::backend::Backend>(label: &str) {
    let d = Default::default();
    let x = Tensor::<B, 4>::random([32, 16, 32, 32], Distribution::Default, &d);
    let y = Tensor::<B, 4>::random([32, 16, 32, 32], Distribution::Default, &d);
    let c = Tensor::<B, 4>::random([1, 16, 1, 1], Distribution::Default, &d);
    println!("== {label}");
    time("same-shape mul", || {
        let _ = (x.clone() * y.clone()).into_data();
    });
    time("broadcast mul [1,C,1,1]", || {
        let _ = (x.clone() * c.clone()).into_data();
    });
    time("broadcast add [1,C,1,1]", || {
        let _ = (x.clone() + c.clone()).into_data();
    });
    let x2 = x.clone().reshape([512, 1024]);
    let col = Tensor::<B, 2>::random([512, 1], Distribution::Default, &d);
    let row = Tensor::<B, 2>::random([1, 1024], Distribution::Default, &d);
    time("[M,K] * [M,1]", || {
        let _ = (x2.clone() * col.clone()).into_data();
    });
    time("[M,K] * [1,K]", || {
        let _ = (x2.clone() * row.clone()).into_data();
    });
    let c3 = Tensor::<B, 3>::random([1, 16, 1], Distribution::Default, &d);
    let x3 = x.clone().reshape([32, 16, 1024]);
    time("[N,C,HW] * [1,C,1]", || {
        let _ = (x3.clone() * c3.clone()).into_data();
    });
    time("expand+reshape route", || {
        let ce = c.clone().expand([32, 16, 1, 1]).reshape([512, 1]);
        let _ = (x2.clone() * ce).reshape([32, 16, 32, 32]).into_data();
    });
    time("into_data only", || {
        let _ = x.clone().into_data();
    });
    time("mean_dim 0,2,3", || {
        let _ = x.clone().mean_dim(0).mean_dim(2).mean_dim(3).into_data();
    });
}
fn main() {
    run::<burn_flex::Flex>("flex");
    run::<burn_hetero::NdArray>("ndarray");
}
