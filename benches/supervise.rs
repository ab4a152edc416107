//! What supervising a child costs (issue 25): the `/proc` scan a child's
//! end does in a process that is not a subreaper, the walk of its own tree
//! a subreaper does instead (the `cascade` binary is one), a whole
//! supervised run of `true` (spawn, output pumps, sweep) in both next to a
//! bare tokio spawn of it, and the throughput of the capped agent log (head
//! kept, tail in a ring on disk, put in order at the end).
//! Run quickly with `cargo bench --bench supervise -- --quick`.

use std::time::Duration;

use cascade_process::{procs, CancelToken, CappedLog, LogLimit, Spec};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("supervise");
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("proc_table_scan", |b| {
        b.iter(|| black_box(procs::list().len()))
    });
    g.bench_function("bare_tokio_spawn_true", |b| {
        b.iter(|| {
            rt.block_on(async {
                let status = tokio::process::Command::new("true")
                    .status()
                    .await
                    .expect("true runs");
                assert!(status.success());
            })
        })
    });
    let supervised_true = || {
        let out = rt
            .block_on(Spec::new("true").run(&CancelToken::new()))
            .expect("true runs");
        assert!(out.success());
    };
    g.bench_function("supervised_run_true", |b| b.iter(supervised_true));
    // From here on this process adopts orphans, as the binary does: its
    // sweeps walk its own tree instead of the whole table.
    if cascade_process::become_subreaper() {
        let me = std::process::id();
        g.bench_function("descendants_walk", |b| {
            b.iter(|| black_box(procs::descendants(me).map(|t| t.len())))
        });
        g.bench_function("supervised_run_true_as_subreaper", |b| {
            b.iter(supervised_true)
        });
    }
    g.finish();

    // 64 MiB through a 16 MiB log in 32 KiB pieces (what the output pumps
    // write), then the tail put in order.
    let dir = tempfile::tempdir().expect("temp dir");
    let chunk = vec![b'x'; 32 * 1024];
    let total: u64 = 64 * 1024 * 1024;
    let mut g = c.benchmark_group("capped_log");
    g.throughput(Throughput::Bytes(total));
    g.sample_size(10);
    g.bench_function("write_64mib_into_16mib_log", |b| {
        let path = dir.path().join("agent.log");
        b.iter(|| {
            let _ = std::fs::remove_file(&path);
            let mut log = CappedLog::append(&path, LogLimit::default()).expect("log");
            for _ in 0..total / chunk.len() as u64 {
                log.write(&chunk);
            }
            log.finish();
            assert_eq!(log.failed_writes(), 0);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
