//! The `type: "api"` part of an agent definition: which model API the
//! agent speaks and how ([`ApiSettings`]), and the walk that reads it from
//! agents.json with the key path of every problem.
//!
//! The fields are CLI.md's: `provider`, `model`, `base_url`, `api_key_env`,
//! `max_tokens`, `max_turns`, `price` (and `timeout`, shared with every
//! agent). The walk reads them through a [`Tracked`] object, so the check
//! for unknown fields knows them without a list of its own.

use cascade_plan::strict::Tracked;
use serde_json::Value;

use super::Walk;
use crate::pricing::Price;

/// Output tokens per model reply when agents.json does not say.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Model turns (requests) per run when agents.json does not say.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// The wire protocol of a model API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic's Messages API (`POST {base_url}/v1/messages`, `x-api-key`).
    Anthropic,
    /// OpenAI's Chat Completions API (`POST {base_url}/v1/chat/completions`,
    /// `Authorization: Bearer`), which local model servers speak too.
    OpenAi,
}

impl Provider {
    /// The name used in agents.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    /// The provider's own endpoint, used when `base_url` is not given.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::OpenAi => "https://api.openai.com",
        }
    }

    /// The key variable of the provider's own endpoint.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAi => "OPENAI_API_KEY",
        }
    }
}

/// How a `type: "api"` agent reaches its model.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    pub provider: Provider,
    pub model: String,
    /// Without a trailing slash; the `/v1/...` path is added to it (a
    /// `base_url` that already ends in `/v1` is not given a second one).
    pub base_url: String,
    /// The environment variable holding the key; `None`: no key is sent
    /// (a local model server). Without `api_key_env` in the file, the
    /// provider's usual variable when `base_url` is the provider's own,
    /// else none.
    pub api_key_env: Option<String>,
    pub max_tokens: u32,
    pub max_turns: u32,
    /// USD per million tokens; the run's cost is computed from the
    /// provider's token counts at this price.
    pub price: Option<Price>,
}

impl ApiSettings {
    /// The URL of `path` (e.g. `messages`) under the API's `/v1`.
    pub fn endpoint(&self, path: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/{path}")
        } else {
            format!("{base}/v1/{path}")
        }
    }

    /// The key, read from the environment: `Ok(None)` when none is needed,
    /// an error naming the variable when it is unset or empty.
    pub fn key(&self) -> Result<Option<String>, MissingKey> {
        match &self.api_key_env {
            None => Ok(None),
            Some(var) => match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
                _ => Err(MissingKey { var: var.clone() }),
            },
        }
    }

    /// What `agents list` shows in the command column: `anthropic:<model>`.
    pub fn label(&self) -> String {
        format!("{}:{}", self.provider.as_str(), self.model)
    }
}

/// An api agent's key variable is unset or empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("API key variable {var} is not set")]
pub struct MissingKey {
    /// The variable `api_key_env` names.
    pub var: String,
}

impl Walk {
    /// The api fields of agent `key` (`agents.<name>`).
    pub(super) fn api(&mut self, obj: &Tracked<'_>, key: &str) -> Option<ApiSettings> {
        let provider = match obj.get("provider") {
            None | Some(Value::Null) => {
                self.problem(
                    format!("{key}.provider"),
                    "missing provider for an \"api\" agent (\"anthropic\" or \"openai\")",
                );
                None
            }
            Some(v) => match self.string(v, &format!("{key}.provider")).as_deref() {
                None => None,
                Some("anthropic") => Some(Provider::Anthropic),
                Some("openai") => Some(Provider::OpenAi),
                Some(other) => {
                    self.problem(
                        format!("{key}.provider"),
                        format!("unknown provider '{other}' (expected \"anthropic\" for the Messages API or \"openai\" for Chat Completions, which local model servers speak)"),
                    );
                    None
                }
            },
        };
        // Outer None: not a string (reported); inner None: missing or blank.
        let model = match obj.get("model") {
            Some(v) if !v.is_null() => self
                .string(v, &format!("{key}.model"))
                .map(|m| Some(m).filter(|m| !m.trim().is_empty())),
            _ => Some(None),
        };
        if model == Some(None) {
            self.problem(
                format!("{key}.model"),
                "missing model for an \"api\" agent (e.g. \"claude-sonnet-4-5\", \"gpt-5\", or the name your local server gives it)",
            );
        }
        // Outer None: invalid (reported); inner None: not given.
        let base_url = match obj.get("base_url") {
            None | Some(Value::Null) => Some(None),
            Some(v) => {
                let k = format!("{key}.base_url");
                match self.string(v, &k) {
                    None => None,
                    Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                        self.problem(k, format!("'{url}' is not an http:// or https:// URL"));
                        None
                    }
                    Some(url) => Some(Some(url.trim_end_matches('/').to_string())),
                }
            }
        };
        // Outer None: invalid (reported).
        let api_key_env = match obj.get("api_key_env") {
            Some(Value::Null) => Some(None),
            Some(v) => {
                let k = format!("{key}.api_key_env");
                match self.string(v, &k) {
                    None => None,
                    Some(var) if var.is_empty() || var.contains('=') || var.contains('\0') => {
                        self.problem(k, "invalid environment variable name");
                        None
                    }
                    Some(var) => Some(Some(var)),
                }
            }
            // The provider's own endpoint needs its key; a server of your
            // own (another base_url) usually needs none.
            None => match (provider, &base_url) {
                (Some(p), Some(None)) => Some(Some(p.default_key_env().to_string())),
                _ => Some(None),
            },
        };
        let max_tokens = self.count(obj, "max_tokens", key, DEFAULT_MAX_TOKENS);
        let max_turns = self.count(obj, "max_turns", key, DEFAULT_MAX_TURNS);
        let price = match obj.get("price") {
            None | Some(Value::Null) => None,
            Some(v) => self.price(v, &format!("{key}.price")),
        };
        let provider = provider?;
        Some(ApiSettings {
            provider,
            model: model??,
            base_url: base_url?.unwrap_or_else(|| provider.default_base_url().to_string()),
            api_key_env: api_key_env?,
            max_tokens: max_tokens?,
            max_turns: max_turns?,
            price,
        })
    }

    /// A positive whole number field, or its default.
    fn count(&mut self, obj: &Tracked<'_>, field: &str, key: &str, default: u32) -> Option<u32> {
        match obj.get(field) {
            None | Some(Value::Null) => Some(default),
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => Some(n),
                _ => {
                    self.problem(format!("{key}.{field}"), "expected a whole number above 0");
                    None
                }
            },
        }
    }
}
