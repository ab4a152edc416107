//! The lean build (`cargo test --no-default-features --test e2e lean_build`,
//! which `.ci/run` runs): the default build has the fleet, the dashboard and
//! the cloud stores; a build without them still parses their commands and
//! flags and exits 2 saying how to get them, instead of ignoring a flag the
//! user gave. In the default build this module is empty.

#[cfg(not(feature = "fleet"))]
#[test]
fn fleet_commands_say_how_to_build_them() {
    let repo = crate::common::init_repo();
    for args in [
        vec!["worker", "--fleet", "nats://127.0.0.1:4222"],
        vec!["fleet", "status"],
        vec!["approve", "--auto-run", "--fleet", "nats://127.0.0.1:4222"],
    ] {
        let out = crate::common::cascade(repo.path())
            .args(&args)
            .output()
            .expect("runs");
        assert_eq!(
            crate::common::code(&out),
            2,
            "{args:?}: {}",
            crate::common::explain(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("without the fleet") && stderr.contains("--features fleet"),
            "{}",
            crate::common::explain(&out)
        );
    }
}

#[cfg(not(feature = "remote-cache-cloud"))]
#[test]
fn a_cloud_store_says_how_to_build_it() {
    let repo = crate::common::init_repo();
    let out = crate::common::cascade(repo.path())
        .args(["gates", "run", "--remote-cache", "s3://bucket/prefix"])
        .env("CASCADE_CACHE_SECRET", "lean-build-secret")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("remote-cache"),
        "the message names the feature: {}",
        crate::common::explain(&out)
    );
    assert_eq!(
        crate::common::code(&out),
        2,
        "{}",
        crate::common::explain(&out)
    );
}

#[cfg(not(feature = "ui"))]
#[test]
fn the_dashboard_command_is_not_there() {
    let repo = crate::common::init_repo();
    let out = crate::common::cascade(repo.path())
        .args(["ui"])
        .output()
        .expect("runs");
    assert_eq!(
        crate::common::code(&out),
        2,
        "{}",
        crate::common::explain(&out)
    );
}
