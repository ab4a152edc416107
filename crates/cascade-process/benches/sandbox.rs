//! What confinement costs per process start (issue 43): a supervised run of
//! `true` unconfined next to the same run under an attempt's Landlock
//! policy (worktree and temp dir writable, the default hidden paths under
//! `$HOME` unreadable), and building the ruleset alone (the part that grows
//! with the directories on the way to each hidden path), and a gate's run
//! (the same policy joining the network namespace its run shares; making
//! one per run, and per child as before, measured beside it) and an
//! agent's (the same policy connecting only to port 443). On a kernel
//! without Landlock only the unconfined run is measured.
//! Run quickly with `cargo bench -p cascade-process --bench sandbox -- --quick`.

use std::sync::Arc;
use std::time::Duration;

use cascade_process::sandbox::{self, Network, Policy, SharedNetwork};
use cascade_process::{CancelToken, Spec};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let (worktree, tmp) = (dir.path().join("wt"), dir.path().join("tmp"));
    for d in [&worktree, &tmp] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let policy = Arc::new(Policy {
        write: vec![worktree.clone()],
        hide: sandbox::home()
            .map(|h| sandbox::default_hidden(&h))
            .unwrap_or_default(),
        tmp: Some(tmp),
        network: sandbox::Network::Host,
        connect_ports: None,
    });
    let run = |spec: Spec| {
        let out = rt
            .block_on(spec.run(&CancelToken::new()))
            .expect("true runs");
        assert!(out.success());
    };
    let mut g = c.benchmark_group("sandbox");
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("run_true_unconfined", |b| {
        b.iter(|| run(Spec::new("true").cwd(&worktree)))
    });
    if sandbox::kernel_abi() > 0 {
        g.bench_function("run_true_confined", |b| {
            b.iter(|| {
                run(Spec::new("true")
                    .cwd(&worktree)
                    .sandbox(Arc::clone(&policy)))
            })
        });
        // What an agent gets: the same, connecting only to port 443.
        let agent = Arc::new(policy.with_connect_ports([443]));
        g.bench_function("run_true_confined_agent_ports", |b| {
            b.iter(|| run(Spec::new("true").cwd(&worktree).sandbox(Arc::clone(&agent))))
        });
        if sandbox::own_network_available() {
            // A child making a network namespace of its own.
            let own = Arc::new(policy.with_own_network());
            g.bench_function("run_true_confined_own_network", |b| {
                b.iter(|| run(Spec::new("true").cwd(&worktree).sandbox(Arc::clone(&own))))
            });
            // What a gate gets: the same policy joining the namespace its
            // run shares, and making that namespace (once per gate run).
            let gate = Arc::new(policy.with_network(Network::shared_or_own()));
            g.bench_function("run_true_confined_shared_network", |b| {
                b.iter(|| run(Spec::new("true").cwd(&worktree).sandbox(Arc::clone(&gate))))
            });
            g.bench_function("make_shared_network", |b| {
                b.iter(|| black_box(SharedNetwork::new().expect("network")))
            });
        }
        g.bench_function("prepare_ruleset", |b| {
            b.iter(|| black_box(policy.prepare().expect("ruleset")))
        });
    } else {
        eprintln!("sandbox: this kernel enforces no Landlock; only the unconfined run is measured");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
