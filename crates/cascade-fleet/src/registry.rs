//! The live workers, from their heartbeats in the workers bucket, and
//! whether one of them can take a job.

use async_nats::jetstream::kv;
use cascade_engine::executor::Job;
use futures_util::StreamExt;

use crate::protocol::Heartbeat;

/// Why the workers bucket could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot list the workers' heartbeats: {0}")]
    Keys(#[from] kv::HistoryError),
    #[error("cannot read the workers' heartbeats: {0}")]
    Read(#[from] kv::WatcherError),
}

/// Every worker with a heartbeat that has not expired.
pub async fn live_workers(store: &kv::Store) -> Result<Vec<Heartbeat>, RegistryError> {
    let mut keys = store.keys().await?;
    let mut names = Vec::new();
    while let Some(k) = keys.next().await {
        names.push(k?);
    }
    let mut out = Vec::new();
    for name in names {
        if let Ok(Some(bytes)) = store.get(&name).await {
            if let Ok(hb) = serde_json::from_slice::<Heartbeat>(&bytes) {
                out.push(hb);
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Whether `w` can take `job`: not draining, every label the job needs,
/// and one of its candidate agents on its PATH.
pub fn can_run(w: &Heartbeat, job: &Job) -> bool {
    !w.draining
        && job.labels.iter().all(|l| w.labels.contains(l))
        && (job.agents.candidates.is_empty()
            || job.agents.candidates.iter().any(|a| w.agents.contains(a)))
}

/// Why no live worker can take `job`, in words.
pub fn why_not(workers: &[Heartbeat], job: &Job) -> String {
    let needs_labels = if job.labels.is_empty() {
        String::new()
    } else {
        format!(" and labels [{}]", job.labels.join(", "))
    };
    let seen: Vec<String> = workers
        .iter()
        .map(|w| {
            format!(
                "{} (agents: {}; labels: {}{})",
                w.id,
                if w.agents.is_empty() {
                    "none".to_string()
                } else {
                    w.agents.join(", ")
                },
                if w.labels.is_empty() {
                    "none".to_string()
                } else {
                    w.labels.join(", ")
                },
                if w.draining { "; draining" } else { "" }
            )
        })
        .collect();
    format!(
        "no live worker can run story '{}': it needs one of the agents [{}]{needs_labels}; live workers: {}. Start a worker with one of those agents on its PATH (and --labels), or choose another agent (--agent)",
        job.story,
        job.agents.candidates.join(", "),
        seen.join(", ")
    )
}
