//! `burn_hetero::sums`: every form this CPU can run against the portable one bit for bit, and
//! all of them against sums taken in f64 one value at a time.

use crate::common::{random_vec, rng_for};
use burn_hetero::sums::{
    Lanes, available, detected, gradient_sums_with, shifted_sums_with, sum_with,
};

/// Lengths around the eight lanes and a plane of ResNet20's first stage (with a tail).
const LENGTHS: [usize; 10] = [0, 1, 7, 8, 9, 15, 16, 17, 1024, 1027];

/// Relative error of `got` against `expected`, scaled by the sum of magnitudes `scale`.
fn error(got: f64, expected: f64, scale: f64) -> f64 {
    (got - expected).abs() / scale.max(f64::MIN_POSITIVE)
}

#[test]
fn sums_agree_across_forms_and_with_f64() {
    let forms = available();
    assert_eq!(
        forms.last(),
        Some(&detected()),
        "detected() is the last form available"
    );
    assert_eq!(forms[0], Lanes::Portable);
    #[cfg(target_arch = "x86_64")]
    assert!(forms.contains(&Lanes::Sse2), "SSE2 is part of x86-64");
    let mut rng = rng_for("sums");
    for n in LENGTHS {
        // An offset mean against a small spread, where a lost value or a wrong shift shows.
        let x = random_vec(&mut rng, n, 99.0, 101.0);
        let dy = random_vec(&mut rng, n, -1.0, 1.0);
        let (shift, mean) = (x.first().copied().unwrap_or(100.0), 100.25f32);
        let (s, m) = (shift as f64, mean as f64);
        let reference = [
            x.iter().map(|&v| v as f64 - s).sum::<f64>(),
            x.iter().map(|&v| (v as f64 - s).powi(2)).sum::<f64>(),
        ];
        let scale = n as f64 * 2.0;
        let portable = shifted_sums_with(Lanes::Portable, &x, shift);
        for (k, (&got, &expected)) in portable.iter().zip(&reference).enumerate() {
            let e = error(got, expected, scale * if k == 0 { 1.0 } else { 2.0 });
            assert!(e < 1e-14, "shifted sum {k} of {n} values off by {e:.2e}");
        }
        let reference = [
            dy.iter().map(|&g| g as f64).sum::<f64>(),
            dy.iter()
                .zip(&x)
                .map(|(&g, &v)| g as f64 * (v as f64 - m))
                .sum::<f64>(),
            x.iter().map(|&v| v as f64 - m).sum::<f64>(),
        ];
        let gradient = gradient_sums_with(Lanes::Portable, &dy, &x, mean);
        for (k, (&got, &expected)) in gradient.iter().zip(&reference).enumerate() {
            let e = error(got, expected, scale);
            assert!(e < 1e-14, "gradient sum {k} of {n} values off by {e:.2e}");
        }
        let total = sum_with(Lanes::Portable, &x);
        let e = error(total, x.iter().map(|&v| v as f64).sum(), n as f64 * 101.0);
        assert!(e < 1e-14, "sum of {n} values off by {e:.2e}");
        // A shorter input gradient: only the values both have are summed.
        let short = gradient_sums_with(Lanes::Portable, &dy[..n / 2], &x, mean);
        let expected = dy[..n / 2].iter().map(|&g| g as f64).sum::<f64>();
        assert!(
            error(short[0], expected, scale) < 1e-14,
            "{n}: summed past the shorter slice"
        );

        for &form in &forms {
            let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&shifted_sums_with(form, &x, shift)),
                bits(&portable),
                "{form:?} shifted sums of {n} values"
            );
            assert_eq!(
                bits(&gradient_sums_with(form, &dy, &x, mean)),
                bits(&gradient),
                "{form:?} gradient sums of {n} values"
            );
            assert_eq!(
                sum_with(form, &x).to_bits(),
                total.to_bits(),
                "{form:?} sum of {n} values"
            );
        }
    }
}
