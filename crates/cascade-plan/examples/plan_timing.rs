//! Times each stage of reading, validating and batching a plan file
//! in-process, for both readers (the full model and the lean one):
//! `cargo run --release -p cascade-plan --example plan_timing -- /tmp/big.json`.
//! With `--print` it writes the full model's batches as `cascade batches
//! --json` would (to compare the two paths' output).

use std::path::Path;
use std::time::Instant;

use cascade_plan::{validate_prd, validate_prd_json, Prd};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: plan_timing [--print] PRD.json");
        std::process::exit(2);
    };
    let path = Path::new(path);
    let t = Instant::now();
    let bytes = std::fs::read(path).expect("read");
    let read = t.elapsed();
    let t = Instant::now();
    let prd = Prd::from_json(&bytes, path).expect("parse");
    let parse = t.elapsed();
    let t = Instant::now();
    let plan = validate_prd(&prd).expect("valid");
    let validate = t.elapsed();
    let t = Instant::now();
    drop(plan);
    drop(prd);
    let free = t.elapsed();
    let t = Instant::now();
    let lean = validate_prd_json(&bytes, path).expect("valid");
    let lean_t = t.elapsed();
    eprintln!(
        "read {read:?}; model: parse {parse:?}, validate+batch {validate:?}, free {free:?}; \
         lean parse+validate+batch {lean_t:?}"
    );
    if args.iter().any(|a| a == "--print") {
        let prd = Prd::from_json(&bytes, path).expect("parse");
        let plan = validate_prd(&prd).expect("valid");
        let batches: Vec<Vec<&str>> = plan
            .batch_positions()
            .map(|b| b.iter().map(|&p| plan.id_str(p as usize)).collect())
            .collect();
        println!("{}", serde_json::json!({ "batches": batches }));
    }
    drop(lean);
}
