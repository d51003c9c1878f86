//! Paired timing: two workloads run in alternating batches, so that both meet the same state
//! of a shared machine (memory bandwidth and core speed drift between the moments criterion
//! measures two benchmarks of one group), and the median of their per-pair ratio.
//!
//! Owns [`paired`] and [`wanted`], shared by the benches that print a paired line beside
//! their criterion figures. Invariant: every pair is one batch of each workload run back to
//! back, and the ratio is taken within a pair, never across pairs.

use std::time::{Duration, Instant};

/// The medians of a paired comparison, in seconds, and of the per-pair ratio `b / a`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Paired {
    /// The median batch time of `a`.
    pub(crate) a: f64,
    /// The median batch time of `b`.
    pub(crate) b: f64,
    /// The median of the per-pair ratios `b / a` (with `a` the measured code and `b` its
    /// baseline: the fraction of the baseline's speed `a` reaches).
    pub(crate) ratio: f64,
    /// How many pairs of batches ran.
    pub(crate) pairs: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One batch: `f` run repeatedly for 30 ms and at least 8 times, its first quarter discarded
/// (so that it runs hot, and the other workload's idle threads have gone to sleep, as when
/// criterion measures it alone); the median of the rest. Also one workload's time alone.
pub(crate) fn batch(f: &mut impl FnMut()) -> f64 {
    let (start, mut times) = (Instant::now(), Vec::new());
    while start.elapsed() < Duration::from_millis(30) || times.len() < 8 {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    let settled = times.len() / 4;
    median(&mut times[settled..])
}

/// Runs `a` and `b` in alternating batches for `span` (and at least 11 pairs), each pair in
/// the other order than the one before (so neither always follows the other).
pub(crate) fn paired(span: Duration, mut a: impl FnMut(), mut b: impl FnMut()) -> Paired {
    let (mut ta, mut tb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let start = Instant::now();
    while start.elapsed() < span || ta.len() < 11 {
        let (t1, t2) = if ta.len() % 2 == 0 {
            let t1 = batch(&mut a);
            (t1, batch(&mut b))
        } else {
            let t2 = batch(&mut b);
            (batch(&mut a), t2)
        };
        ta.push(t1);
        tb.push(t2);
        ratio.push(t2 / t1);
    }
    Paired {
        a: median(&mut ta),
        b: median(&mut tb),
        ratio: median(&mut ratio),
        pairs: ratio.len(),
    }
}

/// Criterion's options that take a value as the next argument (so that value is not the
/// filter).
const WITH_VALUE: [&str; 16] = [
    "--baseline",
    "--baseline-lenient",
    "--color",
    "--confidence-level",
    "--format",
    "--load-baseline",
    "--measurement-time",
    "--noise-threshold",
    "--nresamples",
    "--output-format",
    "--plotting-backend",
    "--profile-time",
    "--sample-size",
    "--save-baseline",
    "--significance-level",
    "--warm-up-time",
];

/// Whether the paired comparison `id` runs: when benchmarking (not `--test` or `--list`),
/// with no filter or one that is part of `id` (a substring: criterion reads its filter as a
/// regular expression, these lines do not).
pub(crate) fn wanted(id: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filter = args.iter().enumerate().find_map(|(i, a)| {
        let value_of_option = i > 0 && WITH_VALUE.contains(&args[i - 1].as_str());
        (!a.starts_with('-') && !value_of_option).then_some(a)
    });
    args.iter().any(|a| a == "--bench") && filter.is_none_or(|f| id.contains(f.as_str()))
}
