//! `cascade agents check` for an api agent: its key variable is set (when
//! it needs one) and its server answers a cheap request, the models list
//! (`GET {base_url}/v1/models`, which costs no tokens), with the key.
//!
//! A missing key makes the agent unavailable (`missing`, as an agent CLI
//! that is not installed); a refused key or a server that cannot be reached
//! fails the check; a server without a models list, or one busy right now,
//! is a warning.

use cascade_process::CancelToken;
use serde_json::Value;

use super::http;
use super::wire::error_message;
use crate::check::{AgentCheck, CheckStatus, ProblemKind, PROBE_TIMEOUT};
use crate::config::{AgentDef, ApiSettings, Provider};

/// Checks api agent `def`.
pub async fn check(def: &AgentDef, api: &ApiSettings, cancel: &CancelToken) -> AgentCheck {
    let mut check = AgentCheck {
        agent: def.name.clone(),
        command: def.command.clone(),
        path: None,
        version: None,
        status: CheckStatus::Missing,
        problems: Vec::new(),
        cached: false,
    };
    let key = match api.key() {
        Ok(k) => k,
        Err(missing) => {
            let var = &missing.var;
            check.problem(
                ProblemKind::ApiKey,
                false,
                missing.to_string(),
                Some(format!(
                    "export {var}=<your key> before running cascade (or name another variable in this agent's api_key_env)"
                )),
            );
            return check;
        }
    };
    let headers = match api.provider {
        Provider::Anthropic => super::anthropic::headers(key.as_deref()),
        Provider::OpenAi => super::openai::headers(key.as_deref()),
    };
    let url = api.endpoint("models");
    let answer = tokio::select! {
        a = http::get(&url, &headers) => Some(a),
        _ = tokio::time::sleep(PROBE_TIMEOUT) => None,
        _ = cancel.cancelled() => None,
    };
    // Shown after the command (`openai:<model>`): where it is served.
    check.version = Some(format!("at {}", api.base_url));
    match answer {
        None => check.problem(
            ProblemKind::Server,
            true,
            format!("{url} did not answer within {}s", PROBE_TIMEOUT.as_secs()),
            Some("check that the server is running and base_url is right".into()),
        ),
        Some(Err(e)) => check.problem(
            ProblemKind::Server,
            true,
            e.to_string(),
            Some("start the server, or fix base_url in agents.json".into()),
        ),
        Some(Ok((200..=299, body))) => {
            if !lists_model(&body, &api.model) {
                check.problem(
                    ProblemKind::Server,
                    false,
                    format!("the server's model list does not name '{}'", api.model),
                    Some("an alias may still work; otherwise pick a model the server lists".into()),
                );
            }
        }
        Some(Ok((status @ (401 | 403), body))) => check.problem(
            ProblemKind::Login,
            true,
            format!(
                "the server refused the key (HTTP {status}): {}",
                error_message(&body).0
            ),
            Some(match &api.api_key_env {
                Some(var) => format!("check the key in {var}"),
                None => "set api_key_env in agents.json to the variable holding the key".into(),
            }),
        ),
        Some(Ok((status, body))) => check.problem(
            ProblemKind::Server,
            false,
            format!(
                "{url} answered HTTP {status}: {}; the server could not be verified",
                error_message(&body).0
            ),
            None,
        ),
    }
    check.finish()
}

/// Whether a models list (`{"data": [{"id": ...}]}`, both APIs) names `model`.
fn lists_model(body: &str, model: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return false;
    };
    v.get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .any(|id| id == model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_list_names_the_model_or_not() {
        let body = r#"{"object": "list", "data": [{"id": "qwen2.5-coder:7b"}, {"id": "llama3"}]}"#;
        assert!(lists_model(body, "llama3"));
        assert!(!lists_model(body, "gpt-5"));
        assert!(!lists_model("nope", "llama3"));
    }
}
