//! The api agent (`type: "api"` in agents.json): cascade calls a model API
//! itself instead of starting an agent CLI, and gives the model its own
//! sandboxed tools.
//!
//! One run: the prompt is written to `<cascade_dir>/prompts/` and the log
//! opened under `<cascade_dir>/logs/` as for a CLI run; the conversation is
//! started (or, for a continued session, loaded from
//! `<cascade_dir>/sessions/<id>.json`) with the prompt as the next user
//! message; then the tool loop ([`converse`]): send the conversation,
//! stream the reply, run the tool calls it asks for through [`tools`]
//! (confined by [`sandbox`]), send their results, until the model ends its
//! turn or `max_turns` is reached, all under the agent's timeout and the
//! caller's cancel token. The result is the same [`AgentRun`] a CLI run
//! gives: the final assistant text (review markers read from it), usage
//! and cost, the session id, and a provider failure classified as a
//! [`FailureSignal`] (auth, rate limit with Retry-After, provider error),
//! so the engine and the planning workflow do not know which kind ran.
//!
//! Providers: [`anthropic`] (Messages API) and [`openai`] (Chat
//! Completions, also local servers), over [`http`] (reqwest, rustls).

pub mod anthropic;
pub mod check;
pub mod conversation;
pub mod http;
pub mod openai;
pub mod sandbox;
pub mod sse;
pub mod tools;
pub mod transcript;
pub mod wire;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cascade_process::{CancelToken, Outcome};
use serde_json::Value;

use crate::config::{AgentDef, ApiSettings, Provider};
use crate::exec::{AgentRequest, AgentRun, ExecError};
use crate::signal::FailureSignal;
use crate::stream::{ReviewScanner, Usage};
use conversation::{Block, Conversation, Message, Role};
use sandbox::{Sandbox, Writable};
use tools::{ToolSpec, Tools};
use transcript::Transcript;
use wire::{CallError, Reply};

pub use tools::{GateFuture, GateHook};

/// What an api agent's tools may do; CLI agents ignore it.
#[derive(Debug, Clone, Default)]
pub struct ToolAccess {
    /// The only files the agent may write (a planning step's outputs);
    /// `None`: anything under the working directory.
    pub write_only: Option<Vec<PathBuf>>,
    /// The caller's "run the gates" (offered to the model as `RunGates`);
    /// `None`: no such tool.
    pub run_gates: Option<GateHook>,
}

/// How a run ended.
enum End {
    /// The model ended its turn.
    Done,
    /// `max_turns` requests and the model still asked for tools.
    TurnLimit,
    Failed(CallError),
    TimedOut,
    Cancelled,
}

/// What the turns added up to.
#[derive(Default)]
struct Tally {
    usage: Usage,
    model: Option<String>,
    review: ReviewScanner,
    final_text: Option<String>,
}

/// Runs api agent `agent` for `req` (see the module doc). `on_spawn` gets 0:
/// there is no process.
pub async fn execute(
    agent: &AgentDef,
    api: &ApiSettings,
    req: AgentRequest,
    on_spawn: impl FnOnce(u32),
    cancel: &CancelToken,
) -> Result<AgentRun, ExecError> {
    let key = api.key().map_err(|missing| ExecError::MissingKey {
        agent: agent.name.clone(),
        var: missing.var,
    })?;
    let prompt_path = req.prompt_path();
    let log_path = req.log_path();
    let writable = match &req.tools.write_only {
        Some(files) => Writable::Only(files.clone()),
        None => Writable::Tree,
    };
    let sandbox = Sandbox::new(&req.workdir, writable).map_err(|_| ExecError::NoWorkingDir {
        agent: agent.name.clone(),
        dir: req.workdir.clone(),
    })?;
    let tools = Tools::new(sandbox, req.tools.run_gates.clone());
    let mut t = open_files(agent, api, &req, &log_path)?;
    let mut conv = start(api, &req, &mut t);
    conv.push_user_text(req.prompt.clone());
    let system = system_prompt(&tools);
    on_spawn(0);

    let started = Instant::now();
    let timeout = req.timeout_override.unwrap_or_else(|| agent.timeout());
    let mut tally = Tally::default();
    let turns = Turns {
        api,
        key: key.as_deref(),
        system: &system,
        tools: &tools,
        cascade_dir: &req.cascade_dir,
    };
    let end = tokio::select! {
        end = converse(&turns, &mut conv, &mut t, &mut tally) => end,
        _ = tokio::time::sleep(timeout) => End::TimedOut,
        _ = cancel.cancelled() => End::Cancelled,
    };
    save(&conv, &req.cascade_dir, &mut t);
    let record = Record {
        tally,
        session: conv.id,
        duration: started.elapsed(),
        log_path,
        prompt_path,
    };
    Ok(finish(agent, api, end, timeout, t, record))
}

/// Writes the prompt file and starts the log as the CLI executor does; the
/// transcript appends to that log, within the request's log limit.
fn open_files(
    agent: &AgentDef,
    api: &ApiSettings,
    req: &AgentRequest,
    log_path: &Path,
) -> Result<Transcript, ExecError> {
    let ran = format!("{} at {}", api.label(), api.base_url);
    crate::exec::start_files(agent, req, &ran)?;
    Ok(Transcript::new(
        log_path,
        req.log_limit,
        req.on_output.clone(),
    ))
}

/// The conversation to continue (`req.resume`) or a new one. A session that
/// is gone or unreadable starts anew, saying so: every prompt cascade sends
/// stands on its own.
fn start(api: &ApiSettings, req: &AgentRequest, t: &mut Transcript) -> Conversation {
    let Some(resume) = &req.resume else {
        return Conversation::new(api.label());
    };
    match Conversation::load(&req.cascade_dir, &resume.session_id) {
        Ok(Some(conv)) => {
            t.line(&format!(
                "[session] continuing {} ({} messages)",
                conv.id,
                conv.messages.len()
            ));
            conv
        }
        Ok(None) => {
            t.error(&format!(
                "[session] {} is not kept under {}: starting a new conversation",
                resume.session_id,
                req.cascade_dir.join("sessions").display()
            ));
            Conversation::new(api.label())
        }
        Err(e) => {
            t.error(&format!("[session] {e}: starting a new conversation"));
            Conversation::new(api.label())
        }
    }
}

/// Keeps the conversation; a failure to write it costs only continuing it.
fn save(conv: &Conversation, cascade_dir: &Path, t: &mut Transcript) {
    if let Err(e) = conv.save(cascade_dir) {
        t.error(&format!("[session] {e}"));
    }
}

/// The system prompt: the working directory, the confinement and the tools.
fn system_prompt(tools: &Tools) -> String {
    let sb = tools.sandbox();
    let mut p = String::from(
        "You are a coding agent run by cascade. You act only through the tools you are given; \
         there is no shell and no way to run other commands.\n",
    );
    p.push_str(&format!(
        "Primary working directory: {}\n",
        sb.root().display()
    ));
    p.push_str(
        "Name files by their absolute path under the working directory (or relative to it). \
         Paths outside it, paths containing '..' and symlinks leading out are refused.\n",
    );
    if let Some(files) = sb.write_only() {
        p.push_str("In this step you may read the project but write only these files:\n");
        for f in files {
            p.push_str(&format!("- {}\n", f.display()));
        }
    }
    if tools.specs().any(|s| s.name == "RunGates") {
        p.push_str(
            "RunGates runs the project's quality gates and reports what they found: run it \
             before you finish and fix what it reports.\n",
        );
    }
    p.push_str(
        "When the task is done, end your turn with a short account of what you did: that \
         answer is your output.\n",
    );
    p
}

/// What every turn of a run uses.
struct Turns<'a> {
    api: &'a ApiSettings,
    key: Option<&'a str>,
    system: &'a str,
    tools: &'a Tools,
    cascade_dir: &'a Path,
}

/// The tool loop.
async fn converse(
    turns: &Turns<'_>,
    conv: &mut Conversation,
    t: &mut Transcript,
    tally: &mut Tally,
) -> End {
    let specs: Vec<&ToolSpec> = turns.tools.specs().collect();
    for _ in 0..turns.api.max_turns {
        let reply = match call(turns, &specs, &conv.messages, t).await {
            Ok(r) => r,
            Err(e) => return End::Failed(e),
        };
        let Reply {
            message,
            usage,
            model,
            invalid_inputs,
            ..
        } = reply;
        add(&mut tally.usage, &usage);
        if model.is_some() {
            tally.model = model;
        }
        let text = message.text();
        tally.review.feed(&text);
        let calls: Vec<(String, String, Value)> = message
            .tool_uses()
            .map(|(id, name, input)| (id.to_string(), name.to_string(), input.clone()))
            .collect();
        // An empty reply is "done, nothing said": not kept (see push_reply).
        if conv.push_reply(message) {
            save(conv, turns.cascade_dir, t);
        } else {
            t.line("[model] ended its turn with an empty reply");
        }
        if calls.is_empty() {
            tally.final_text = Some(text);
            return End::Done;
        }
        let mut results = Vec::with_capacity(calls.len());
        for (id, name, input) in calls {
            t.line(format!("[tool] {name} {}", shown_input(&input)).trim_end());
            let out = match invalid_inputs.iter().find(|(bad, _)| *bad == id) {
                Some((_, raw)) => tools::ToolOutput {
                    content: format!(
                        "the input of this call is not a JSON object (cut off at max_tokens?): {}",
                        wire::excerpt(raw)
                    ),
                    is_error: true,
                },
                None => turns.tools.call(&name, &input).await,
            };
            if out.is_error {
                t.line(&format!(
                    "[tool error] {}",
                    out.content.lines().next().unwrap_or("")
                ));
            }
            results.push(Block::ToolResult {
                tool_use_id: id,
                content: out.content,
                is_error: out.is_error,
            });
        }
        conv.messages.push(Message {
            role: Role::User,
            content: results,
        });
        save(conv, turns.cascade_dir, t);
    }
    End::TurnLimit
}

/// One request to the provider.
async fn call(
    turns: &Turns<'_>,
    specs: &[&ToolSpec],
    messages: &[Message],
    t: &mut Transcript,
) -> Result<Reply, CallError> {
    let api = turns.api;
    let (path, headers, body) = match api.provider {
        Provider::Anthropic => (
            "messages",
            anthropic::headers(turns.key),
            anthropic::request(api, turns.system, specs, messages),
        ),
        Provider::OpenAi => (
            "chat/completions",
            openai::headers(turns.key),
            openai::request(api, turns.system, specs, messages),
        ),
    };
    let url = api.endpoint(path);
    let body = serde_json::to_vec(&body)
        .map_err(|e| CallError::malformed(format!("cannot encode the request: {e}"), ""))?;
    let req = http::Request {
        url: &url,
        headers,
        body,
    };
    match api.provider {
        Provider::Anthropic => {
            http::post(req, &mut anthropic::Stream::new(), anthropic::whole, t).await
        }
        Provider::OpenAi => http::post(req, &mut openai::Stream::new(), openai::whole, t).await,
    }
}

/// The path or pattern of a tool call, for the transcript.
fn shown_input(input: &Value) -> String {
    ["file_path", "pattern", "path"]
        .iter()
        .filter_map(|k| input.get(*k).and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

fn add(total: &mut Usage, turn: &Usage) {
    total.input_tokens += turn.input_tokens;
    total.output_tokens += turn.output_tokens;
    total.cached_input_tokens += turn.cached_input_tokens;
}

/// What a run leaves besides how it ended.
struct Record {
    tally: Tally,
    /// The conversation's id (the session to continue).
    session: String,
    duration: Duration,
    log_path: PathBuf,
    prompt_path: PathBuf,
}

/// The run's record, as a CLI run's would be.
fn finish(
    agent: &AgentDef,
    api: &ApiSettings,
    end: End,
    timeout: Duration,
    mut t: Transcript,
    record: Record,
) -> AgentRun {
    let Record {
        tally,
        session,
        duration,
        log_path,
        prompt_path,
    } = record;
    let timed_out = matches!(end, End::TimedOut);
    let cancelled = matches!(end, End::Cancelled);
    let (exit_code, reported, signal) = match end {
        End::Done => (Some(0), None, None),
        End::TurnLimit => (
            Some(1),
            Some(format!(
                "the model was still calling tools after max_turns ({}) requests (raise max_turns in agents.json, or split the story)",
                api.max_turns
            )),
            None,
        ),
        End::Failed(e) => {
            let signal = match &e {
                CallError::Provider(s) => Some(with_advice(s.clone(), agent, api)),
                _ => None,
            };
            (Some(1), Some(e.to_string()), signal)
        }
        End::TimedOut => {
            t.error(&format!(
                "the model API did not finish within the agent's timeout of {}s",
                timeout.as_secs()
            ));
            (None, None, None)
        }
        End::Cancelled => (None, None, None),
    };
    if let Some(r) = &reported {
        t.error(&format!("error: {r}"));
    }
    let (stdout, stderr) = t.captured();
    let mut usage = tally.usage;
    usage.cost_usd = api.price.map(|p| p.cost(&usage));
    AgentRun {
        agent: agent.name.clone(),
        outcome: Outcome {
            pid: 0,
            exit_code,
            signal: None,
            timed_out,
            cancelled,
            stopped: false,
            leaked: false,
            duration,
            stdout,
            stderr,
        },
        log_path,
        prompt_path,
        usage: Some(usage),
        final_text: tally.final_text,
        session_id: Some(session),
        model: tally.model,
        review: tally.review.verdict(),
        reported_error: reported,
        signal,
        hint: None,
    }
}

/// A provider signal with what to do about it, naming this agent's key.
fn with_advice(mut s: FailureSignal, agent: &AgentDef, api: &ApiSettings) -> FailureSignal {
    let auth = match &api.api_key_env {
        Some(var) => format!(
            "check the key in {var} (api_key_env of agent '{}' in agents.json)",
            agent.name
        ),
        None => format!(
            "agent '{}' sends no key: set api_key_env in agents.json to the variable holding one",
            agent.name
        ),
    };
    s.advice = Some(crate::watch::advice(s.kind, &auth));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentsConfig;
    use crate::phase::Phase;

    /// An api agent of a server on `addr` that needs no key.
    fn agent(addr: &str, timeout: u64) -> AgentDef {
        let text = serde_json::json!({"agents": {"m": {"type": "api", "provider": "openai",
            "model": "m", "base_url": format!("http://{addr}"), "timeout": timeout}}})
        .to_string();
        AgentsConfig::parse(&text, "agents.json")
            .unwrap()
            .agent("m")
            .unwrap()
            .clone()
    }

    /// A server that accepts connections and never answers.
    fn silent_server() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                held.push(conn);
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_silent_server_ends_the_run_at_its_timeout_or_on_cancel() {
        let addr = silent_server();
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let req = || {
            AgentRequest::new(
                "story-1",
                1,
                Phase::Implementation,
                "do it",
                &work,
                dir.path().join(".cascade"),
            )
        };
        let def = agent(&addr, 1);
        let run = execute(
            &def,
            def.api.as_ref().unwrap(),
            req(),
            |_| {},
            &CancelToken::new(),
        )
        .await
        .unwrap();
        assert!(run.outcome.timed_out && !run.success(), "{:?}", run.outcome);
        assert!(run
            .outcome
            .stderr
            .text_lossy()
            .contains("did not finish within the agent's timeout of 1s"));
        // The prompt is kept as the start of a session to continue.
        let id = run.session_id.unwrap();
        let kept = Conversation::load(&dir.path().join(".cascade"), &id)
            .unwrap()
            .unwrap();
        assert_eq!(kept.messages[0].text(), "do it");
        assert!(run.prompt_path.is_file() && run.log_path.is_file());

        let cancel = CancelToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            trigger.cancel();
        });
        let def = agent(&addr, 3600);
        let run = execute(&def, def.api.as_ref().unwrap(), req(), |_| {}, &cancel)
            .await
            .unwrap();
        assert!(
            run.outcome.cancelled && !run.outcome.timed_out,
            "{:?}",
            run.outcome
        );
    }

    #[tokio::test]
    async fn a_missing_key_is_an_exec_error_naming_the_variable() {
        let text = r#"{"agents": {"m": {"type": "api", "provider": "anthropic", "model": "m",
            "api_key_env": "CASCADE_API_TEST_NEVER_SET"}}}"#;
        let config = AgentsConfig::parse(text, "agents.json").unwrap();
        let def = config.agent("m").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let req = AgentRequest::new("s", 1, Phase::Planning, "p", dir.path(), dir.path());
        let e = crate::exec::execute(def, req, |_| {}, &CancelToken::new())
            .await
            .unwrap_err();
        assert!(matches!(e, ExecError::MissingKey { .. }));
        assert!(e.to_string().contains("CASCADE_API_TEST_NEVER_SET"), "{e}");
    }
}
