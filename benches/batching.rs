//! Batching at scale: parse + validate + batch a synthetic PRD in-process.
//!
//! The plan comes from `cascade_plan::synthetic` (deterministic: story `i`
//! depends on up to 3 distinct earlier stories picked from the previous
//! 2,000, a DAG with ~3 edges per story and realistic depth, with rotating
//! priorities and about 5% of the stories complete). `parse+validate+batch`
//! builds the full model (what the engine does); `lean_parse+validate+batch`
//! is `cascade batches --json`'s path. Run quickly with
//! `cargo bench --bench batching -- --quick`.
//!
//! To measure the whole `cascade batches` process, write the same file with
//! `CASCADE_BENCH_WRITE=/tmp/big.json cargo bench --bench batching` (it writes
//! the 100,000-story PRD and exits; `CASCADE_BENCH_STORIES` changes the
//! size), then time
//! `target/release/cascade batches --json --prd /tmp/big.json > /dev/null`.

use std::path::Path;
use std::time::Duration;

use cascade_plan::synthetic::{prd_json, Shape};
use cascade_plan::{validate_prd, validate_prd_json, Prd};
use criterion::{black_box, criterion_group, BenchmarkId, Criterion, Throughput};

/// The PRD text for `n` stories (about 3 dependencies each).
fn generate(n: usize) -> String {
    prd_json(&Shape::new(n))
}

fn pipeline(text: &[u8]) -> usize {
    let prd = Prd::from_json(text, Path::new("bench.json")).expect("parses");
    let plan = validate_prd(&prd).expect("valid");
    plan.batch_positions().map(|b| b.len()).sum()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("batching");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for n in [10_000usize, 100_000] {
        let text = generate(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("parse", n), &text, |b, t| {
            b.iter(|| Prd::from_json(black_box(t.as_bytes()), Path::new("b.json")).expect("ok"))
        });
        let prd = Prd::from_json(text.as_bytes(), Path::new("b.json")).expect("ok");
        group.bench_with_input(BenchmarkId::new("validate+batch", n), &prd, |b, p| {
            b.iter(|| validate_prd(black_box(p)).expect("valid").batch_count())
        });
        group.bench_with_input(
            BenchmarkId::new("parse+validate+batch", n),
            &text,
            |b, t| b.iter(|| pipeline(black_box(t.as_bytes()))),
        );
        // What `cascade batches --json` does: the lean reader, no model.
        group.bench_with_input(
            BenchmarkId::new("lean_parse+validate+batch", n),
            &text,
            |b, t| {
                b.iter(|| {
                    validate_prd_json(black_box(t.as_bytes()), Path::new("b.json"))
                        .expect("valid")
                        .batch_count()
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    if let Some(path) = std::env::var_os("CASCADE_BENCH_WRITE") {
        let n = std::env::var("CASCADE_BENCH_STORIES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        let text = generate(n);
        std::fs::write(&path, &text).expect("write the generated PRD");
        eprintln!(
            "wrote {} ({} bytes, {n} stories)",
            Path::new(&path).display(),
            text.len()
        );
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
