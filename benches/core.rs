//! Core benchmarks (criterion). `cargo bench --bench core`.
//!
//! - merge: 1M field-ops into 10k rows (goal ≥ 10M field-ops/s);
//! - judge: a 1000-op batch in memory (goal ≥ 1M ops/s), with the changes a
//!   webhook hears listed and without (a server with no webhook); the same batch
//!   written two schema versions back, against current ops (goal ≥ 90%);
//!   sent into shared spaces by an editor, against the personal path (goal ≥ 90%);
//! - replica: rebuild 100k base rows + 1k pending ops (what `open` does);
//! - chunks: decode 100k stored base rows (the other half of `open`);
//! - device pull: a device takes the backfill of a 100k-row space it was
//!   just granted (in pages of 1000, as pulled), and the empty answer of a
//!   pull while following 1,000 spaces (the request built, the answer taken);
//! - json: a pull page of 1,000 rows read from its text by `marksync::json`
//!   (objects only) and by serde_json alone, side by side (goal: the same).
//!
//! The workloads come from `marksync::workload`, shared with the browser benchmarks.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use marksync::chunks::{decode_chunk, encode_chunks};
use marksync::judge::{judge_batch, Known, Limits};
use marksync::protocol::Op;
use marksync::replica::Replica;
use marksync::schema::Schema;
use marksync::workload::{base_rows, field_ops, merge_all, set_op};
use std::hint::black_box;

fn bench_merge(c: &mut Criterion) {
    let (ops, index) = field_ops(1_000_000, 10_000);
    let mut g = c.benchmark_group("merge");
    g.sample_size(10);
    g.throughput(Throughput::Elements(ops.len() as u64));
    g.bench_function("1M field-ops into 10k rows", |b| b.iter(|| black_box(merge_all(&ops, &index, 10_000))));
    g.finish();
}

fn bench_judge(c: &mut Criterion) {
    let schema = Schema::workout();
    let batch: Vec<_> = (0..1000).map(|i| set_op("dev", i, i % 700, 10 + i as u64)).collect();
    let mut g = c.benchmark_group("judge");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("1000-op batch in memory", |b| {
        b.iter(|| black_box(judge_batch(&schema, "u", &batch, Known::default(), &Limits::default()).map(|j| j.heads)))
    });
    // As a server without a webhook judges: no change listed for anyone.
    let unheard = Limits { list_changes: false, ..Limits::default() };
    g.bench_function("1000-op batch in memory, no webhook", |b| {
        b.iter(|| black_box(judge_batch(&schema, "u", &batch, Known::default(), &unheard).map(|j| j.heads)))
    });
    // The upgrade path (PROTOCOL §3b): the same sets judged by the version-3
    // workout schema, written under version 1 (`weightKg`, two versions old)
    // and under version 3 (`weight`). Goal: old ≥ 90% of current throughput.
    let v3 = Schema::workout_v3();
    let current: Vec<_> = batch.iter().map(|op| Op { schema: 3, ..v3.upgrade_op(op) }).collect();
    g.bench_function("1000-op batch, ops two versions old (v1 under v3)", |b| {
        b.iter(|| black_box(judge_batch(&v3, "u", &batch, Known::default(), &Limits::default()).map(|j| j.heads)))
    });
    g.bench_function("1000-op batch, current ops (v3 under v3)", |b| {
        b.iter(|| black_box(judge_batch(&v3, "u", &current, Known::default(), &Limits::default()).map(|j| j.heads)))
    });
    // Spaces (PROTOCOL §3c): the same batch sent by an editor into a shared
    // space (every op names it; the role is looked up per op), and spread
    // over 10 shared spaces, against the personal path above. Goal ≥ 90%.
    let mut editor = Known::default();
    let spaces: Vec<String> = (0..10).map(|i| format!("team-{i}")).collect();
    for s in &spaces {
        editor.roles.insert(s.as_str().into(), marksync::space::Role::Editor);
    }
    let shared: Vec<_> = batch.iter().map(|op| Op { space: Some("team-0".into()), ..op.clone() }).collect();
    let spread: Vec<_> = batch.iter().enumerate().map(|(i, op)| Op { space: Some(spaces[i % 10].clone()), ..op.clone() }).collect();
    g.bench_function("1000-op batch, an editor in one shared space", |b| {
        b.iter(|| black_box(judge_batch(&schema, "u", &shared, editor.clone(), &Limits::default()).map(|j| j.heads)))
    });
    g.bench_function("1000-op batch, an editor across 10 shared spaces", |b| {
        b.iter(|| black_box(judge_batch(&schema, "u", &spread, editor.clone(), &Limits::default()).map(|j| j.heads)))
    });
    g.finish();
}

fn bench_replica(c: &mut Criterion) {
    let base = base_rows(100_000);
    let (pending, _) = field_ops(1_000, 100_000);
    let mut g = c.benchmark_group("replica");
    g.sample_size(10);
    // From the chunks' bytes, as IndexedDB gives them: the rows stay packed.
    let mut sorted = base.clone();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let chunks: Vec<Vec<u8>> = marksync::chunks::encode_chunks(&sorted).unwrap().into_iter().map(|c| c.bytes).collect();
    g.bench_function("open 100k rows + 1k pending", |b| {
        b.iter_batched(|| chunks.clone(), |chunks| black_box(Replica::open(chunks, [], &pending)), BatchSize::LargeInput)
    });
    g.finish();
}

fn bench_chunks(c: &mut Criterion) {
    let mut rows = base_rows(100_000);
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let chunks: Vec<Vec<u8>> = encode_chunks(&rows).unwrap().into_iter().map(|c| c.bytes).collect();
    let mut g = c.benchmark_group("chunks");
    g.sample_size(10);
    g.throughput(Throughput::Elements(rows.len() as u64));
    g.bench_function("decode 100k rows", |b| {
        b.iter(|| black_box(chunks.iter().map(|c| decode_chunk(c).map(|r| r.len()).unwrap_or(0)).sum::<usize>()))
    });
    g.finish();
}

fn bench_device_pull(c: &mut Criterion) {
    use marksync::engine::{Config, Engine, Step};
    use marksync::protocol::{Change, SpacePage, SpacesPullResponse};
    use marksync::space::{Membership, Role};
    use marksync::store::{Meta, Snapshot};
    let open = || Engine::open(Snapshot { meta: Some(Meta::fresh("dev".into())), ..Snapshot::default() }, Config::default()).unwrap();
    let rows = base_rows(100_000);
    let pages: Vec<Vec<Change>> = rows
        .chunks(1000)
        .enumerate()
        .map(|(p, chunk)| {
            chunk.iter().enumerate().map(|(i, (k, r))| Change { key: k.clone(), row: r.clone(), seq: (p * 1000 + i + 1) as u64 }).collect()
        })
        .collect();
    let mut g = c.benchmark_group("device pull");
    g.sample_size(10);
    g.throughput(Throughput::Elements(rows.len() as u64));
    g.bench_function("backfill of a granted 100k-row space, 100 pages", |b| {
        b.iter_batched(
            open,
            |mut e| {
                let (_, mut step) = e.start_sync(0);
                for (p, changes) in pages.iter().enumerate() {
                    let Step::Pull(req) = step else { panic!("a pull") };
                    let answer = SpacesPullResponse {
                        personal: Some("~me".into()),
                        joined: if p == 0 { vec![Membership { space: "team".into(), role: Role::Editor }] } else { vec![] },
                        spaces: vec![SpacePage {
                            space: "team".into(),
                            changes: changes.clone(),
                            cursor: ((p + 1) * 1000) as u64,
                            has_more: p + 1 < pages.len(),
                        }],
                        has_more: p + 1 < pages.len(),
                        ..SpacesPullResponse::default()
                    };
                    step = e.on_pull_response(&req, answer, 0).unwrap().1;
                    // As the driver does after every committed step (live queries, indexes).
                    black_box(e.take_changes());
                }
                black_box(e)
            },
            BatchSize::LargeInput,
        )
    });
    // A device following 1,000 spaces, nothing new anywhere.
    let mut e = open();
    let (_, Step::Pull(req)) = e.start_sync(0) else { panic!("a pull") };
    let joined = (0..1000).map(|i| Membership { space: format!("space-{i}"), role: Role::Editor }).collect();
    e.on_pull_response(&req, SpacesPullResponse { personal: Some("~me".into()), joined, ..SpacesPullResponse::default() }, 0).unwrap();
    g.throughput(Throughput::Elements(1));
    g.bench_function("empty pull following 1000 spaces", |b| {
        b.iter(|| {
            let (_, Step::Pull(req)) = e.start_sync(0) else { panic!("a pull") };
            let answer = SpacesPullResponse { personal: Some("~me".into()), ..SpacesPullResponse::default() };
            black_box(e.on_pull_response(&req, answer, 0).unwrap())
        })
    });
    g.finish();
}

fn bench_json(c: &mut Criterion) {
    use marksync::protocol::{Change, SpacePage, SpacesPullResponse};
    let changes = base_rows(1000).into_iter().enumerate().map(|(i, (key, row))| Change { key, row, seq: i as u64 + 1 }).collect();
    let page = SpacesPullResponse {
        spaces: vec![SpacePage { space: "~me".into(), changes, cursor: 1000, has_more: false }],
        personal: Some("~me".into()),
        ..SpacesPullResponse::default()
    };
    let text = serde_json::to_string(&page).unwrap();
    let mut g = c.benchmark_group("json");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1000));
    g.bench_function("pull page of 1000 rows, objects only", |b| {
        b.iter(|| black_box(marksync::json::from_str::<SpacesPullResponse>(&text).unwrap()))
    });
    g.bench_function("pull page of 1000 rows, serde_json alone", |b| {
        b.iter(|| black_box(serde_json::from_str::<SpacesPullResponse>(&text).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench_merge, bench_judge, bench_replica, bench_chunks, bench_device_pull, bench_json);
criterion_main!(benches);
