//! A job's base from the coordinator, over NATS: a worker whose clone lacks
//! its job's base commit asks on `cascade.bases.<repo>` (request-reply,
//! [`BaseRequest`]: the base and the commits its clone has), and the
//! coordinator answers from its own repository with a pack of what the
//! base adds to those commits (in-process, a few KB after a story's merge).
//! So neither the coordinator's push of the base nor the worker's `git
//! fetch` stands between a merge and the start of the stories it unblocks:
//! the coordinator publishes a job without waiting for its base's push.
//!
//! The shared remote stays the fallback: a coordinator that cannot make a
//! small pack (it knows none of the worker's commits, or the pack is over
//! [`max_pack_bytes`]) answers `fetch` once its push of the base is done; a
//! worker without an answer (no coordinator listening: an older one, or
//! none running) or with a pack it cannot use fetches the base itself.
//! Any coordinator of the repository that has the commits may answer (a
//! pack is the same whoever makes it); one that has not stays silent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use crate::protocol::{max_pack_bytes, BaseRequest};
use crate::refs::RemoteRefs;

/// The header saying what an answer is: [`PACK`] (the body is a git pack)
/// or [`FETCH`] (fetch the base from the shared remote, it is there).
pub const ANSWER: &str = "Cascade-Base";
pub const PACK: &str = "pack";
pub const FETCH: &str = "fetch";

/// How long a worker waits for an answer (a coordinator that has to finish
/// its push first answers after it).
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Coordinator: answers base requests for the repository at `repo` until
/// dropped (the caller aborts the task).
pub(crate) fn serve(
    client: async_nats::Client,
    subject: String,
    repo: PathBuf,
    refs: Arc<RemoteRefs>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Subscribing again after a failure (the client reconnects by itself
        // and keeps the subscription; this only guards the first one).
        let mut requests = loop {
            match client.subscribe(subject.clone()).await {
                Ok(s) => break s,
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        };
        while let Some(msg) = requests.next().await {
            let (client, repo, refs) = (client.clone(), repo.clone(), Arc::clone(&refs));
            tokio::spawn(async move { answer(&client, msg, repo, &refs).await });
        }
    })
}

async fn answer(
    client: &async_nats::Client,
    msg: async_nats::Message,
    repo: PathBuf,
    refs: &RemoteRefs,
) {
    let Some(reply) = msg.reply else { return };
    let Ok(req) = serde_json::from_slice::<BaseRequest>(&msg.payload) else {
        return;
    };
    let base = req.base.clone();
    let packed = tokio::task::spawn_blocking(move || {
        cascade_git::transfer::pack_for(&repo, &req.base, &req.have)
    })
    .await;
    let limit = max_pack_bytes();
    let (kind, body) = match packed {
        Ok(Ok(Some(pack))) if limit > 0 && pack.len() <= limit => (PACK, pack),
        // No pack: the remote, once this coordinator's push of the base is
        // done; not this coordinator's base: another may answer.
        _ if refs.pushed(&base).await => (FETCH, Vec::new()),
        _ => return,
    };
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(ANSWER, kind);
    let _ = client
        .publish_with_headers(reply, headers, body.into())
        .await;
}

/// Worker: asks the coordinator for `base` and stores the pack it answers
/// with in the clone at `dir`. `true`: the base is in the clone now;
/// `false`: fetch it from the shared remote.
pub(crate) async fn ask(
    client: &async_nats::Client,
    subject: &str,
    dir: &Path,
    base: &str,
) -> bool {
    let have = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let names = crate::git::have_refs();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            cascade_git::transfer::ref_commits(&dir, &names)
        })
        .await
        .unwrap_or_default()
    };
    let Ok(payload) = serde_json::to_vec(&BaseRequest {
        base: base.to_string(),
        have,
    }) else {
        return false;
    };
    let request = async_nats::Request::new()
        .payload(payload.into())
        .timeout(Some(ASK_TIMEOUT));
    let Ok(answer) = client.send_request(subject.to_string(), request).await else {
        return false;
    };
    let is_pack = answer
        .headers
        .as_ref()
        .and_then(|h| h.get(ANSWER))
        .is_some_and(|v| v.as_str() == PACK);
    if !is_pack {
        return false;
    }
    let dir = dir.to_path_buf();
    let (pack, base) = (answer.payload, base.to_string());
    tokio::task::spawn_blocking(move || {
        cascade_git::transfer::import_pack(&dir, &pack[..]).is_ok()
            && cascade_git::transfer::has_commit(&dir, &base)
    })
    .await
    .unwrap_or(false)
}
