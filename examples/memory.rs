//! Where the device's memory goes, natively: the engine opened on N stored
//! rows shaped as the query benchmark's (`bench/`, workload 6: `{ exercise,
//! weightKg, at }`, one index on `[exercise, at]`), then one indexed query;
//! live and peak heap bytes after each step, from a counting allocator.
//! Native pointers are 8 bytes where wasm32's are 4, so the browser's
//! figures are lower; the split between steps is what this is for.
//!
//! With `lazy`, the engine opens as over a lazy store (PROTOCOL §7, "The
//! lazy store"): no row held at open; one row read as an edit reads it (the
//! chunk that holds it); then the query, which reads its table whole.
//!
//! ```text
//! cargo run --release --example memory -- 100000
//! cargo run --release --example memory -- 100000 lazy
//! ```
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use marksync::engine::{Config, Engine};
use marksync::protocol::{Cell, Mark, OpId, Row, RowKey, Value};
use marksync::query::{Dir, Filter, IndexDef, Order, Pred, Query};
use marksync::store::{Meta, Snapshot};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn mb(b: usize) -> f64 {
    b as f64 / 1_048_576.0
}

fn report(step: &str, rows: usize) {
    let (live, peak) = (LIVE.load(Relaxed), PEAK.load(Relaxed));
    println!("{step:<34} live {:>7.1} MB ({:>4} B/row)   peak {:>7.1} MB", mb(live), live / rows.max(1), mb(peak));
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    report("start", n);
    println!(
        "sizes: RowKey {} Row {} Cell {} Value {} (key, Row) {}",
        std::mem::size_of::<RowKey>(),
        std::mem::size_of::<Row>(),
        std::mem::size_of::<Cell>(),
        std::mem::size_of::<Value>(),
        std::mem::size_of::<(RowKey, Row)>()
    );
    let mut made: Vec<(RowKey, Row)> = (0..n)
        .map(|i| {
            let mut r = Row::default();
            let mark = Mark { at: i as u64 + 1, op_id: OpId::new(format!("srv:{i}")) };
            for (k, v) in [
                ("exercise", Value::from(format!("ex{}", i % 50))),
                ("weightKg", Value::from((i % 300) as f64)),
                ("at", Value::from(i as f64)),
            ] {
                r.cells.insert(k.into(), Cell { value: v, mark: mark.clone() });
            }
            (RowKey::new("sets", format!("q{i}")), r)
        })
        .collect();
    // Through the store's encoding: IndexedDB gives the chunks' bytes at
    // open, their rows in key order.
    made.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let chunks = match marksync::chunks::encode_chunks(&made) {
        Ok(c) => c,
        Err(e) => panic!("encode: {e}"),
    };
    drop(made);
    // Each chunk's first key, as the store keys it.
    let firsts: Vec<RowKey> = chunks.iter().map(|c| c.first.clone()).collect();
    let base_chunks: Vec<Vec<u8>> = chunks.into_iter().map(|c| c.bytes).collect();
    PEAK.store(LIVE.load(Relaxed), Relaxed);
    report("chunks read (as the store gives)", n);
    let lazy = std::env::args().nth(2).as_deref() == Some("lazy");
    let config =
        Config { indexes: vec![IndexDef { table: "sets".into(), fields: vec!["exercise".into(), "at".into()] }], ..Config::default() };
    let mut engine = if lazy {
        open_lazily(base_chunks, &firsts, config, n)
    } else {
        let snapshot = Snapshot { meta: Some(Meta::fresh("device".into())), base_chunks, ..Snapshot::default() };
        let t = std::time::Instant::now();
        let engine = match Engine::open(snapshot, config) {
            Ok(e) => e,
            Err(e) => panic!("open: {e}"),
        };
        let open_ms = t.elapsed().as_secs_f64() * 1e3;
        report("engine open", n);
        println!("engine open {open_ms:.0} ms");
        engine
    };
    let q = Query {
        filters: vec![Filter { field: "exercise".into(), preds: vec![Pred::Eq(Value::from("ex7"))] }],
        order: vec![Order { field: "at".into(), dir: Dir::Desc }],
        limit: Some(50),
        ..Query::default()
    };
    let t = std::time::Instant::now();
    let rows = engine.query("sets", &q);
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(rows.len(), 50.min(n / 50));
    report("first query (indexes built)", n);
    println!("held after the query {} KB", engine.held() / 1024);
    println!("first query (the index built) {first_ms:.0} ms");
    // The time of the same query once the indexes are built (the rows
    // read are decoded from their packed runs each time).
    let mut times: Vec<f64> = (0..200)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(engine.query("sets", &q));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!("query p50 {:.3} ms", times[100]);
}

/// Opens as over a lazy store, then reads what an edit of one row reads and
/// what a query of the table reads, from `chunks` as the store would answer
/// (each chunk with the span it answers for). The chunks stand for the
/// disk: counted in the figures until it returns, then freed.
fn open_lazily(chunks: Vec<Vec<u8>>, firsts: &[RowKey], config: Config, n: usize) -> Engine {
    use marksync::store::{Provided, ProvidedRows, Want};
    let answer = |w: &Want| -> Vec<Provided> {
        (0..chunks.len())
            .filter(|i| firsts.get(i + 1).is_none_or(|next| *next > w.from) && w.to.as_ref().is_none_or(|to| firsts[*i] < *to))
            .map(|i| Provided {
                from: if i == 0 { RowKey::new("", "") } else { firsts[i].clone() },
                to: firsts.get(i + 1).cloned(),
                rows: ProvidedRows::Chunk(chunks[i].clone()),
            })
            .collect()
    };
    let snapshot = Snapshot { meta: Some(Meta::fresh("device".into())), lazy: true, more_on_disk: true, ..Snapshot::default() };
    let t = std::time::Instant::now();
    let mut engine = match Engine::open(snapshot, config) {
        Ok(e) => e,
        Err(e) => panic!("open: {e}"),
    };
    println!("engine open (lazy) {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    report("engine open (lazy)", n);
    let one = Engine::wants_edit("sets", &format!("q{}", n / 2));
    let t = std::time::Instant::now();
    let missing = engine.missing(vec![one.clone()]);
    let read: Vec<Provided> = missing.iter().flat_map(&answer).collect();
    if let Err(e) = engine.provide(read) {
        panic!("provide: {e}");
    }
    println!("one row's read (its chunk) {:.3} ms, {} KB held", t.elapsed().as_secs_f64() * 1e3, engine.held() / 1024);
    report("one row read", n);
    let table = engine.wants_table("sets");
    let t = std::time::Instant::now();
    let read: Vec<Provided> = engine.missing(vec![table]).iter().flat_map(&answer).collect();
    if let Err(e) = engine.provide(read) {
        panic!("provide: {e}");
    }
    println!("the table's read {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    report("table read", n);
    engine
}
