//! Core benchmarks (criterion). `cargo bench --bench core`.
//!
//! - merge: 1M field-ops into 10k rows (goal ≥ 10M field-ops/s);
//! - judge: a 1000-op batch in memory (goal ≥ 1M ops/s);
//! - replica: rebuild 100k base rows + 1k pending ops (an `open`).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use marksync::judge::{judge_batch, Known};
use marksync::order::merge;
use marksync::protocol::{Cell, Fields, Mark, Op, OpId, Row, RowKey, Value};
use marksync::replica::Replica;
use marksync::schema::Schema;
use std::hint::black_box;

const FIELDS: [&str; 3] = ["exercise", "weightKg", "reps"];

fn ops(n: usize, rows: usize) -> Vec<Op> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let field = FIELDS[(x % 3) as usize];
            let value = if field == "exercise" { Value::from("squat") } else { Value::from(((x >> 8) % 100 + 1) as i64) };
            let mut fields = Fields::new();
            fields.insert(field.to_owned(), value);
            Op {
                op_id: OpId::new(format!("dev{}:{}", x % 4, i)),
                table: "sets".into(),
                row_id: format!("r{}", (x >> 20) as usize % rows),
                fields,
                at: 1_000 + (x >> 30) % 100_000,
                schema: 1,
            }
        })
        .collect()
}

fn bench_merge(c: &mut Criterion) {
    let ops = ops(1_000_000, 10_000);
    let index: Vec<usize> = ops.iter().map(|o| o.row_id[1..].parse().unwrap_or(0)).collect();
    let mut g = c.benchmark_group("merge");
    g.sample_size(10);
    g.throughput(Throughput::Elements(ops.len() as u64));
    g.bench_function("1M field-ops into 10k rows", |b| {
        b.iter_batched(
            || vec![Row::default(); 10_000],
            |mut rows| {
                for (op, i) in ops.iter().zip(&index) {
                    merge(&mut rows[*i], op);
                }
                black_box(rows)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn full_op(i: usize) -> Op {
    let mut fields = Fields::new();
    fields.insert("exercise".into(), Value::from("squat"));
    fields.insert("weightKg".into(), Value::from(80.0));
    fields.insert("reps".into(), Value::from((i % 100 + 1) as i64));
    Op { op_id: OpId::new(format!("dev:{i}")), table: "sets".into(), row_id: format!("dev-{}", i % 700), fields, at: 10 + i as u64, schema: 1 }
}

fn bench_judge(c: &mut Criterion) {
    let schema = Schema::workout();
    let batch: Vec<Op> = (0..1000).map(full_op).collect();
    let mut g = c.benchmark_group("judge");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("1000-op batch in memory", |b| {
        b.iter(|| black_box(judge_batch(&schema, &batch, Known::default()).map(|j| j.head)))
    });
    g.finish();
}

fn bench_replica(c: &mut Criterion) {
    let base: Vec<(RowKey, Row)> = (0..100_000)
        .map(|i| {
            let mut r = Row::default();
            for (k, v) in [("exercise", Value::from("squat")), ("weightKg", 80.0.into()), ("reps", 5i64.into())] {
                r.cells.insert(k.into(), Cell { value: v, mark: Mark { at: i, op_id: OpId::new(format!("srv:{i}")) } });
            }
            (RowKey::new("sets", format!("r{i}")), r)
        })
        .collect();
    let pending: Vec<Op> = ops(1_000, 100_000);
    let mut g = c.benchmark_group("replica");
    g.sample_size(10);
    g.bench_function("open 100k rows + 1k pending", |b| {
        b.iter_batched(|| base.clone(), |base| black_box(Replica::new(base, &pending)), BatchSize::LargeInput)
    });
    g.finish();
}

criterion_group!(benches, bench_merge, bench_judge, bench_replica);
criterion_main!(benches);
