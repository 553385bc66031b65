//! Native side of the wasm-vs-native merge comparison (`www/bench/client.mjs`):
//! prints the median milliseconds of merging 1M field-ops into 10k rows.
use marksync::workload::{field_ops, merge_all};

fn main() {
    let (ops, index) = field_ops(1_000_000, 10_000);
    let mut ms: Vec<f64> = (0..7)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(merge_all(&ops, &index, 10_000));
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    println!("{{\"mergeMedianMs\": {:.2}}}", ms[ms.len() / 2]);
}
