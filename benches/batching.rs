//! Batching at scale: parse + validate + batch a synthetic PRD in-process.
//!
//! The generator is deterministic: story `i` depends on up to 3 distinct
//! earlier stories picked from the previous 2,000 (a DAG with ~3 edges per
//! story and realistic depth), with rotating priorities and about 5% of the
//! stories complete. `parse+validate+batch` builds the full model (what the
//! engine does); `lean_parse+validate+batch` is `cascade batches --json`'s
//! path. Run quickly with
//! `cargo bench --bench batching -- --quick`.
//!
//! To measure the whole `cascade batches` process, write the same file with
//! `CASCADE_BENCH_WRITE=/tmp/big.json cargo bench --bench batching` (it writes
//! the 100,000-story PRD and exits), then time
//! `target/release/cascade batches --json --prd /tmp/big.json > /dev/null`.

use std::path::Path;
use std::time::Duration;

use cascade_plan::{validate_prd, validate_prd_json, Prd};
use criterion::{black_box, criterion_group, BenchmarkId, Criterion, Throughput};

/// A small xorshift generator: deterministic across runs and platforms.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The PRD text for `n` stories (about 3 dependencies each).
fn generate(n: usize) -> String {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(n * 330);
    out.push_str("{\n  \"metadata\": {\"version\": \"1.0\", \"generator\": \"cascade bench\"},\n");
    out.push_str("  \"goal\": \"Synthetic plan for the batching benchmark\",\n");
    out.push_str("  \"objectives\": [\"scale\"],\n  \"stories\": [\n");
    let mut deps = Vec::with_capacity(3);
    for i in 0..n {
        deps.clear();
        let want = i.min(3);
        let window = i.min(2000) as u64;
        while deps.len() < want {
            let d = i - 1 - rng.below(window) as usize;
            if !deps.contains(&d) {
                deps.push(d);
            }
        }
        let priority = ["high", "medium", "low"][(rng.below(3)) as usize];
        let status = if rng.below(20) == 0 {
            "complete"
        } else {
            "pending"
        };
        let dep_list: Vec<String> = deps.iter().map(|d| format!("\"story-{d:06}\"")).collect();
        if i > 0 {
            out.push_str(",\n");
        }
        out.push_str(&format!(
            "    {{\"id\": \"story-{i:06}\", \"title\": \"Story number {i}\", \
             \"description\": \"Implement part {i} of the synthetic system.\", \
             \"priority\": \"{priority}\", \"dependencies\": [{}], \"status\": \"{status}\", \
             \"acceptance_criteria\": [\"part {i} works\", \"tests for part {i} pass\"], \
             \"context_estimate\": \"small\"}}",
            dep_list.join(", ")
        ));
    }
    out.push_str("\n  ]\n}\n");
    out
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
        let text = generate(100_000);
        std::fs::write(&path, &text).expect("write the generated PRD");
        eprintln!(
            "wrote {} ({} bytes, 100000 stories)",
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
