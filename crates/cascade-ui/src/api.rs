//! The JSON endpoints: reads of the run, a story, the mega run and the
//! planning sessions, and the actions (see the API section of
//! docs/dashboard.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cascade_engine::state::{RunState, StoryState, StoryStatus};
use cascade_engine::store::StateFollower;
use cascade_plan::{Outline, Story};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::plans::{self, Ran};
use crate::records::PlanRecords;
use crate::routes::Shared;
use crate::snapshot::Shape;
use crate::stamp::FileStamp;
use crate::AppState;

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn ok(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// The run's state and plan as the dashboard last read them. Requests in a
/// row read only what changed in between: the state is followed (the
/// stories committed since the last look) and the PRD is read again when
/// it changed on disk.
///
/// The run view reads the stories' records and the plan's [`Outline`]. A
/// story's view shows every field of one story: its row of the run
/// database, and the plan's records kept as text ([`PlanRecords`]) from
/// the first story's view on, the one story shown parsed whole.
pub(crate) struct RunFiles {
    /// `.cascade/cascade.db`.
    state_path: PathBuf,
    view: StateFollower,
    outline: Cached<(Arc<Outline>, Shape)>,
    plan: Cached<PlanRecords>,
}

/// What was made of a file, read again when the file changed on disk: its
/// path and stamp as read, and the result (`None`: it could not be read).
struct Cached<T>(Option<(PathBuf, Option<FileStamp>, Option<T>)>);

impl<T> Cached<T> {
    /// What `read` makes of `path`, read again only when the path or the
    /// file changed since the last time.
    fn get(&mut self, path: &Path, read: impl FnOnce(&Path) -> Option<T>) -> Option<&T> {
        let stamp = FileStamp::of(path);
        let stale = match &self.0 {
            Some((p, s, _)) => p != path || *s != stamp,
            None => true,
        };
        if stale {
            self.0 = Some((path.to_path_buf(), stamp, read(path)));
        }
        self.0.as_ref().and_then(|(_, _, t)| t.as_ref())
    }
}

impl RunFiles {
    pub fn new(cascade_dir: &Path) -> RunFiles {
        let state = cascade_engine::store::db_path(cascade_dir);
        RunFiles {
            view: StateFollower::new(&state),
            outline: Cached(None),
            plan: Cached(None),
            state_path: state,
        }
    }
}

/// What a state document names before its stories, as far as the run view
/// needs it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Named {
    run_id: String,
    prd: String,
    project_root: String,
}

impl Named {
    /// What the latest run of the database at `path` names (one row read,
    /// before its stories are). `None`: no run.
    fn guess(path: &Path) -> Option<Named> {
        let head = RunState::load_head(path).ok()??;
        Some(Named {
            run_id: head.run_id,
            prd: head.prd,
            project_root: head.project_root,
        })
    }
}

/// What the run view is made of, as on disk now: the state, the PRD's path,
/// the plan's outline and its shape.
pub(crate) struct RunView<'a> {
    pub state: Option<&'a RunState>,
    pub prd_path: &'a Path,
    pub outline: Option<&'a Outline>,
    pub shape: Option<&'a Shape>,
}

impl AppState {
    fn cascade_dir(&self) -> PathBuf {
        self.config.repo_root.join(".cascade")
    }

    /// With no live run: shows the records of the run the state names
    /// (for event streams opened before any snapshot was asked for).
    pub(crate) fn show_last_run(&self) {
        let _ = self.with_view(|_| ());
    }

    /// Runs `f` on what the run view is made of, as on disk now (see
    /// [`RunFiles`]), once the hub shows the run the state names (with no
    /// live run). On the first view (a dashboard just started reads all
    /// three files before it), what the state most likely names
    /// ([`Named::guess`]) is read while the state is, the plan and the
    /// run's records each on a thread of their own; later views find them
    /// read already, and re-read only what changed. What the state does name
    /// is read after it (nothing, when the guess was right).
    fn with_view<T>(&self, f: impl FnOnce(RunView<'_>) -> T) -> Result<T, String> {
        let mut files = crate::lock(&self.files);
        let RunFiles {
            state_path,
            view,
            outline,
            ..
        } = &mut *files;
        let fallback = self.config.workdir.join("prd.json");
        let read_outline = |p: &Path| {
            let o = cascade_plan::load_outline(p).ok()?;
            let shape = Shape::of(&o);
            Some((Arc::new(o), shape))
        };
        let first = outline.0.is_none();
        let state = std::thread::scope(|scope| {
            if let Some(named) = first.then(|| Named::guess(state_path)).flatten() {
                let path =
                    crate::snapshot::prd_named(Some((&named.prd, &named.project_root)), &fallback);
                let run_id = named.run_id.clone();
                let ahead = &mut *outline;
                scope.spawn(move || self.hub.show_finished(Some(&run_id)));
                scope.spawn(move || {
                    ahead.get(&path, read_outline);
                });
            }
            view.refresh()
        });
        let state = state.map_err(|e| e.to_string())?;
        let path = crate::snapshot::prd_path(state, &fallback);
        self.hub.show_finished(state.map(|s| s.run_id.as_str()));
        let outline = outline.get(&path, read_outline);
        Ok(f(RunView {
            state,
            prd_path: &path,
            outline: outline.map(|o| &*o.0),
            shape: outline.map(|o| &o.1),
        }))
    }

    /// Runs `f` on the whole record of story `id` in the run state and in
    /// the PRD (where they have one), as on disk now (see [`RunFiles`]).
    fn with_story<T>(
        &self,
        id: &str,
        f: impl FnOnce(Option<&StoryState>, Option<&Story>) -> T,
    ) -> Result<T, String> {
        let mut files = crate::lock(&self.files);
        let RunFiles {
            state_path,
            plan,
            outline,
            ..
        } = &mut *files;
        let head = RunState::load_head(state_path).map_err(|e| e.to_string())?;
        let path = crate::snapshot::prd_path(head.as_ref(), &self.config.workdir.join("prd.json"));
        let record = cascade_engine::store::story_record(state_path, id)
            .map_err(|e| format!("the run state's record of story '{id}' does not read: {e}"))?;
        // The run view's outline of the same file, when it has one.
        let known = match &outline.0 {
            Some((p, Some(stamp), Some((o, _)))) if *p == path => Some((Arc::clone(o), *stamp)),
            _ => None,
        };
        let story = plan
            .get(&path, |p| PlanRecords::load(p, known))
            .and_then(|p| p.story(id));
        Ok(f(record.as_ref(), story.as_ref()))
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        )
    })
}

/// A response body written by a blocking task: what is written goes to the
/// response in pieces of [`crate::sse::PIECE`] bytes, at most two of them
/// waiting for the client, so the whole body is never held at once. An
/// `Err` piece is what went wrong (before the first piece: the response is
/// that error; after it: the connection is cut).
struct Pieces {
    piece: Vec<u8>,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, String>>,
    runtime: tokio::runtime::Handle,
}

/// How long a piece waits for the client to take the one before. The
/// writer holds the run's files meanwhile: a client that stopped reading
/// must not hold every other request.
const PIECE_WAIT: Duration = Duration::from_secs(30);

impl Pieces {
    fn send(&self, piece: Result<Bytes, String>) -> std::io::Result<()> {
        let sent = self
            .runtime
            .block_on(tokio::time::timeout(PIECE_WAIT, self.tx.send(piece)));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(std::io::ErrorKind::BrokenPipe.into()),
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
}

impl std::io::Write for Pieces {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.piece.extend_from_slice(buf);
        if self.piece.len() >= crate::sse::PIECE {
            self.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(
            &mut self.piece,
            Vec::with_capacity(crate::sse::PIECE + 8192),
        );
        self.send(Ok(Bytes::from(full)))
    }
}

/// `GET /api/run`: the snapshot, written from the state and the plan
/// straight into the response as it is made (no tree of values in between,
/// never the whole document in memory).
pub(crate) async fn run(State(app): State<Shared>) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::channel(2);
    let mut out = Pieces {
        piece: Vec::with_capacity(crate::sse::PIECE + 8192),
        tx,
        runtime: tokio::runtime::Handle::current(),
    };
    tokio::task::spawn_blocking(move || {
        let dir = app.cascade_dir();
        let art = crate::detail::Artifacts {
            dir: &dir,
            repo: &app.config.repo_root,
        };
        let gates = |story: &str, n: u32| art.gates(story, n);
        let written = app.with_view(|view| {
            let summary = app.hub.summary();
            let status = app.hub.status();
            let snapshot = crate::snapshot::build(&crate::snapshot::Input {
                state: view.state,
                prd: view.outline,
                shape: view.shape,
                prd_path: Some(view.prd_path),
                summary: &summary,
                status: &status,
                now_ms: chrono::Utc::now().timestamp_millis(),
                gates: &gates,
            });
            snapshot
                .write_json(&mut out)
                .and_then(|()| std::io::Write::flush(&mut out))
                .map_err(|e| format!("cannot write the run snapshot: {e}"))
        });
        // The client gone: nobody to tell.
        if let Err(e) | Ok(Err(e)) = written {
            let _ = out.send(Err(e));
        }
    });
    let first = match rx.recv().await {
        Some(Ok(piece)) => piece,
        Some(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
        None => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error: the run snapshot was not written",
            )
        }
    };
    let body = futures_util::stream::unfold((Some(first), rx), |(first, mut rx)| async move {
        let piece = match first {
            Some(p) => Ok(p),
            None => rx.recv().await?.map_err(std::io::Error::other),
        };
        Some((piece, (None, rx)))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

pub(crate) async fn story(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    let r = blocking(move || {
        let dir = app.cascade_dir();
        let art = crate::detail::Artifacts {
            dir: &dir,
            repo: &app.config.repo_root,
        };
        // The story's records and its state and plan entries come from
        // different files, each read whole the first time: side by side.
        std::thread::scope(|scope| {
            let events = scope.spawn(|| app.hub.story_events(&id));
            app.with_story(&id, |story, prd| {
                let events = events
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                crate::detail::build(&id, story, prd, &events, &art)
            })
        })
    })
    .await;
    match r {
        Ok(Ok(Some(v))) => ok(StatusCode::OK, v),
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            "no story with that id in the plan or the run",
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(resp) => resp,
    }
}

pub(crate) async fn mega(State(app): State<Shared>) -> Response {
    let r = blocking(move || {
        let summary = app.hub.summary();
        crate::mega::view(&app.cascade_dir(), &summary, &app.hub.status())
    })
    .await;
    match r {
        Ok(v) => ok(StatusCode::OK, v),
        Err(r) => r,
    }
}

pub(crate) async fn plans(State(app): State<Shared>) -> Response {
    match blocking(move || plans::list(&app.cascade_dir())).await {
        Ok(v) => ok(StatusCode::OK, v),
        Err(r) => r,
    }
}

pub(crate) async fn plan(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match blocking(move || plans::show(&app.cascade_dir(), &id)).await {
        Ok(Ok(v)) => ok(StatusCode::OK, v),
        Ok(Err((code, m))) => error(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            m,
        ),
        Err(r) => r,
    }
}

/// Sends `action` (about `story` of `feature`, in a mega run) to the live
/// run; 409 when none is live or it refuses.
async fn steer(
    app: &AppState,
    action: &str,
    story: Option<&str>,
    feature: Option<&str>,
) -> Response {
    let Some(client) = app.hub.client() else {
        return error(
            StatusCode::CONFLICT,
            "no run is live in this repository (start one with `cascade approve` or `cascade resume`)",
        );
    };
    // The engine takes requests between two scheduling decisions; one
    // stuck elsewhere (a confirmation prompt on its terminal) must not
    // hold the page forever.
    let asked = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(action, story, feature, "ui"),
    );
    match asked.await {
        Ok(Ok(r)) if r.ok => ok(StatusCode::OK, json!({ "ok": true, "message": r.message })),
        Ok(Ok(r)) => error(StatusCode::CONFLICT, r.message),
        Ok(Err(e)) => error(StatusCode::CONFLICT, format!("the run went away: {e}")),
        Err(_) => error(
            StatusCode::GATEWAY_TIMEOUT,
            "the run did not take the request within 30 s (is it waiting at a prompt?); it may still apply it",
        ),
    }
}

pub(crate) async fn pause(State(app): State<Shared>) -> Response {
    steer(&app, "pause", None, None).await
}

pub(crate) async fn resume(State(app): State<Shared>) -> Response {
    steer(&app, "resume", None, None).await
}

pub(crate) async fn cancel(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    steer(&app, "cancel", Some(&id), None).await
}

/// A live run requeues the story; a finished one is continued by
/// `cascade resume --yes` (which retries every failed and blocked story),
/// started as a child of the dashboard.
pub(crate) async fn retry(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    if app.hub.client().is_some() {
        return steer(&app, "retry", Some(&id), None).await;
    }
    let found = app.with_view(|v| v.state.map(|st| st.story(&id).map(|s| s.status)));
    let status = match found {
        Ok(Some(s)) => s,
        Ok(None) => return error(StatusCode::CONFLICT, "there is no run to retry a story of"),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    match status {
        None => {
            return error(
                StatusCode::NOT_FOUND,
                format!("no story '{id}' in the last run"),
            )
        }
        Some(StoryStatus::Failed | StoryStatus::Blocked) => {}
        Some(other) => {
            return error(
                StatusCode::CONFLICT,
                format!(
                    "{id} is {}: only a failed story can be retried",
                    other.as_str()
                ),
            )
        }
    }
    resume_finished(&app, &["resume", "--yes"], &id).await
}

/// `POST /api/mega/features/{feature}/stories/{id}/cancel`: the story of
/// that feature in the live mega run.
pub(crate) async fn mega_cancel(
    State(app): State<Shared>,
    UrlPath((feature, id)): UrlPath<(String, String)>,
) -> Response {
    steer(&app, "cancel", Some(&id), Some(&feature)).await
}

/// `POST /api/mega/features/{feature}/stories/{id}/retry`: a live mega run
/// requeues the story in its feature's engine; a finished one is continued
/// by `cascade mega resume --yes` (which retries every failed and blocked
/// story and feature), started as a child of the dashboard.
pub(crate) async fn mega_retry(
    State(app): State<Shared>,
    UrlPath((feature, id)): UrlPath<(String, String)>,
) -> Response {
    if app.hub.client().is_some() {
        return steer(&app, "retry", Some(&id), Some(&feature)).await;
    }
    let checked = {
        let (dir, feature, id) = (app.cascade_dir(), feature.clone(), id.clone());
        blocking(move || crate::mega::retryable(&dir, &feature, &id)).await
    };
    match checked {
        Ok(Ok(())) => {}
        Ok(Err((code, message))) => return error(code, message),
        Err(r) => return r,
    }
    resume_finished(
        &app,
        &["mega", "resume", "--yes"],
        &format!("{id} of {feature}"),
    )
    .await
}

/// Starts `cascade <args>` (a resume of the finished run, which retries
/// `what` with every other failed or blocked story) as a child of the
/// dashboard: `202 {pid, log}` while it runs, its output in
/// `.cascade/ui/<command>-<ts>.log`.
async fn resume_finished(app: &AppState, args: &[&str], what: &str) -> Response {
    let Some(cli) = &app.config.cli else {
        return error(
            StatusCode::CONFLICT,
            "this dashboard cannot start cascade (no executable configured)",
        );
    };
    let command = format!("cascade {}", args.join(" "));
    let words: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-'))
        .collect();
    let log = app.cascade_dir().join("ui").join(format!(
        "{}-{}.log",
        words.join("-"),
        crate::live::unix_ms()
    ));
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    match plans::run_cli(cli, &args, &log, Duration::from_secs(2)).await {
        Ok(Ran::Running { pid, log }) => ok(
            StatusCode::ACCEPTED,
            json!({ "ok": true, "message": format!("started `{command}` (pid {pid}): it retries {what} and every other failed or blocked story"), "pid": pid, "log": log }),
        ),
        Ok(Ran::Ended {
            code: 0 | 1,
            output,
        }) => ok(
            StatusCode::OK,
            json!({ "ok": true, "message": format!("`{command}` ran to its end"), "output": output }),
        ),
        Ok(Ran::Ended { output, .. }) => error(StatusCode::CONFLICT, plans::error_line(&output)),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot start cascade: {e}"),
        ),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct AnswerBody {
    key: String,
    value: String,
}

/// `cascade plan answer ID KEY VALUE`, as a person would type it.
pub(crate) async fn answer(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    body: Result<Json<AnswerBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "an answer holds at most {} bytes",
                    cascade_planning::MAX_ANSWER_BYTES
                ),
            )
        }
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "the body must be JSON: {\"key\": \"q-1\", \"value\": \"...\"}",
            )
        }
    };
    // After `--`, a key or answer that starts with `-` is text, not a flag.
    plan_command(
        &app,
        &id,
        vec![
            "answer".into(),
            "--".into(),
            id.clone(),
            body.key,
            body.value,
        ],
    )
    .await
}

/// `cascade plan approve ID`.
pub(crate) async fn approve(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    plan_command(&app, &id, vec!["approve".into(), id.clone()]).await
}

async fn plan_command(app: &AppState, id: &str, args: Vec<String>) -> Response {
    if !cascade_planning::session::valid_id(id)
        || !app
            .cascade_dir()
            .join("plans")
            .join(id)
            .join("session.json")
            .is_file()
    {
        return error(StatusCode::NOT_FOUND, format!("no planning session '{id}'"));
    }
    let Some(cli) = &app.config.cli else {
        return error(
            StatusCode::CONFLICT,
            "this dashboard cannot start cascade (no executable configured)",
        );
    };
    let mut argv = vec!["plan".to_string()];
    argv.extend(args);
    let log = app.cascade_dir().join("ui").join(format!(
        "plan-{}-{}.log",
        argv[1],
        crate::live::unix_ms()
    ));
    // The planner may go on to ask agents (minutes): the answer is kept
    // at once; what follows is seen in the session.
    match plans::run_cli(cli, &argv, &log, Duration::from_secs(3)).await {
        Ok(Ran::Ended { code, output }) if code == 0 || code == 3 => ok(
            StatusCode::OK,
            json!({ "ok": true, "exit_code": code, "output": output }),
        ),
        Ok(Ran::Ended { code: 2, output }) => {
            error(StatusCode::CONFLICT, plans::error_line(&output))
        }
        Ok(Ran::Ended { code, output }) => ok(
            StatusCode::OK,
            json!({ "ok": false, "exit_code": code, "error": plans::error_line(&output), "output": output }),
        ),
        Ok(Ran::Running { pid, log }) => ok(
            StatusCode::ACCEPTED,
            json!({ "ok": true, "running": true, "pid": pid, "log": log, "message": "the planning session goes on (agents are working); it shows here as it changes" }),
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot start cascade: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cascade_engine::state::RunState;
    use cascade_engine::store::db_path;

    use super::*;

    fn state(prd: &str, stories: usize) -> RunState {
        let ids = (0..stories).map(|i| format!("s{i}"));
        RunState::new("run-1".into(), prd.into(), "main".into(), "/p".into(), ids)
    }

    #[test]
    fn the_guess_is_what_the_latest_run_names() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = db_path(dir.path());
        assert_eq!(Named::guess(&path), None);
        state("plan/prd.json", 3).save(&path).expect("saved");
        let named = Named {
            run_id: "run-1".into(),
            prd: "plan/prd.json".into(),
            project_root: "/p".into(),
        };
        assert_eq!(Named::guess(&path), Some(named));
    }

    fn app(repo: &Path) -> AppState {
        let config = crate::UiConfig::new(repo);
        let cascade = repo.join(".cascade");
        AppState {
            hub: crate::hub::Hub::new(cascade.clone()),
            files: std::sync::Mutex::new(RunFiles::new(&cascade)),
            token: crate::auth::Token::generate().expect("random bytes"),
            local: "127.0.0.1:1".parse().expect("an address"),
            config,
        }
    }

    /// A plan of stories `ids` at `path`.
    fn plan(path: &Path, ids: &[&str]) {
        let stories: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "title": format!("T {id}")}))
            .collect();
        std::fs::write(path, json!({ "stories": stories }).to_string()).expect("a plan");
    }

    #[test]
    fn a_story_view_finds_its_story_through_the_run_views_outline_of_the_same_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let repo = dir.path();
        std::fs::create_dir_all(repo.join(".cascade")).expect("the state's directory");
        let prd = repo.join("prd.json");
        plan(&prd, &["a1", "a2"]);
        let app = app(repo);
        app.with_view(|v| assert!(v.outline.is_some()))
            .expect("a view");
        let title = |id: &str| {
            app.with_story(id, |_, story| story.map(|s| s.title.clone()))
                .expect("a story view")
        };
        assert_eq!(title("a2").as_deref(), Some("T a2"));
        let shared = {
            let files = crate::lock(&app.files);
            let run_view = &files.outline.0.as_ref().expect("read").2;
            let records = files.plan.0.as_ref().expect("read").2.as_ref();
            Arc::ptr_eq(
                &run_view.as_ref().expect("an outline").0,
                records.expect("records").outline(),
            )
        };
        assert!(shared, "the outline was read again");
        // The file changed since the run view read it: read again, whole.
        plan(&prd, &["b1", "a2", "a3"]);
        assert_eq!(title("a3").as_deref(), Some("T a3"));
        assert_eq!(title("a1"), None);
    }

    #[test]
    fn the_run_view_reads_the_plan_the_latest_run_names() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let repo = dir.path();
        let cascade = repo.join(".cascade");
        plan(&repo.join("a.json"), &["a1"]);
        plan(&repo.join("b.json"), &["b1", "b2"]);
        let root = repo.display().to_string();
        let mut st = state("a.json", 3);
        st.project_root = root.clone();
        let path = db_path(&cascade);
        st.save(&path).expect("the first run");
        // A later run of another plan: the latest is the one shown.
        let mut run = state("b.json", 0);
        run.run_id = "run-2".into();
        run.project_root = root;
        run.save(&path).expect("the second run");
        let app = Arc::new(app(repo));
        let seen = app
            .with_view(|v| {
                let ids: Vec<String> = v
                    .outline
                    .map(|o| o.stories().map(|s| s.id.to_string()).collect())
                    .unwrap_or_default();
                (v.prd_path.to_path_buf(), ids, v.shape.is_some())
            })
            .expect("a view");
        assert_eq!(
            seen,
            (repo.join("b.json"), vec!["b1".into(), "b2".into()], true)
        );
        assert_eq!(app.hub.status().run_id.as_deref(), Some("run-2"));
    }
}
