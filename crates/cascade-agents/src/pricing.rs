//! What an agent's run cost when the agent reports tokens but no cost.
//!
//! Claude Code reports `total_cost_usd`; Codex, Gemini and others report
//! token counts only. For those, a price table per model turns tokens into
//! US dollars. The model is the agent's `--model`/`-m` argument, else the
//! usual default model of its CLI. A shipped table holds list prices per
//! million tokens (input, cached input, output); agents.json's top-level
//! `prices` overrides or extends it, keyed by model or by agent name:
//!
//! ```json
//! {"prices": {"gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
//!             "my-agent": {"input": 0.0, "output": 0.0}}}
//! ```
//!
//! An agent whose model has no price gets no estimate: its spend stays
//! unknown (budgets say so), never 0.

use crate::config::AgentDef;
use crate::stream::Usage;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    /// Cached input tokens; `None`: priced as input.
    pub cached_input: Option<f64>,
    pub output: f64,
}

impl Price {
    /// The cost of `usage` at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, usd: f64| tokens as f64 * usd / 1_000_000.0;
        per(usage.input_tokens, self.input)
            + per(
                usage.cached_input_tokens,
                self.cached_input.unwrap_or(self.input),
            )
            + per(usage.output_tokens, self.output)
    }
}

/// List prices (USD per million tokens) of common models, longest prefix
/// first so `gpt-5-mini` is not priced as `gpt-5`.
const SHIPPED: &[(&str, Price)] = &[
    ("claude-opus-4", p(15.0, 1.5, 75.0)),
    ("claude-sonnet-4", p(3.0, 0.3, 15.0)),
    ("claude-3-7-sonnet", p(3.0, 0.3, 15.0)),
    ("claude-3-5-haiku", p(0.8, 0.08, 4.0)),
    ("claude-haiku-4", p(1.0, 0.1, 5.0)),
    ("gpt-5-mini", p(0.25, 0.025, 2.0)),
    ("gpt-5-nano", p(0.05, 0.005, 0.4)),
    ("gpt-5-codex", p(1.25, 0.125, 10.0)),
    ("gpt-5", p(1.25, 0.125, 10.0)),
    ("gpt-4.1-mini", p(0.4, 0.1, 1.6)),
    ("gpt-4.1", p(2.0, 0.5, 8.0)),
    ("o4-mini", p(1.1, 0.275, 4.4)),
    ("o3", p(2.0, 0.5, 8.0)),
    ("gemini-2.5-flash", p(0.3, 0.075, 2.5)),
    ("gemini-2.5-pro", p(1.25, 0.31, 10.0)),
];

const fn p(input: f64, cached: f64, output: f64) -> Price {
    Price {
        input,
        cached_input: Some(cached),
        output,
    }
}

/// The model an agent CLI uses when none is given.
fn default_model(command: &str) -> Option<&'static str> {
    let name = std::path::Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(command);
    Some(match name {
        "claude" => "claude-sonnet-4",
        "codex" => "gpt-5",
        "gemini" => "gemini-2.5-pro",
        _ => return None,
    })
}

/// The model of an api agent, else the one named in an agent's arguments
/// (`--model X`, `--model=X`, `-m X`).
pub fn model_of(def: &AgentDef) -> Option<String> {
    if let Some(api) = &def.api {
        return Some(api.model.clone());
    }
    let mut args = def.args.iter();
    while let Some(a) = args.next() {
        if let Some(v) = a.strip_prefix("--model=") {
            return Some(v.to_string());
        }
        if a == "--model" || a == "-m" {
            return args.next().cloned();
        }
    }
    None
}

/// Prices of a run: the shipped table plus agents.json's `prices`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    /// From agents.json, keyed by model or agent name.
    pub overrides: Vec<(String, Price)>,
}

impl PriceTable {
    /// The price for `def`'s runs and the model (or agent) it is for.
    pub fn price_for(&self, def: &AgentDef) -> Option<(String, Price)> {
        if let Some((k, p)) = self.overrides.iter().find(|(k, _)| *k == def.name) {
            return Some((k.clone(), *p));
        }
        let model = model_of(def).or_else(|| default_model(&def.command).map(str::to_string))?;
        if let Some((_, p)) = self.overrides.iter().find(|(k, _)| *k == model) {
            return Some((model, *p));
        }
        let lower = model.to_ascii_lowercase();
        SHIPPED
            .iter()
            .find(|(prefix, _)| lower.starts_with(prefix))
            .map(|(_, p)| (model.clone(), *p))
    }

    /// The cost of `usage` by `def`: its own report, else the estimate from
    /// its tokens; `None` when neither is known. The flag says "estimated".
    pub fn cost(&self, def: &AgentDef, usage: &Usage) -> Option<(f64, bool)> {
        if let Some(c) = usage.cost_usd {
            return Some((c, false));
        }
        let tokens = usage.input_tokens + usage.output_tokens + usage.cached_input_tokens;
        if tokens == 0 {
            return None;
        }
        self.price_for(def).map(|(_, p)| (p.cost(usage), true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentsConfig;

    fn def(command: &str, args: &[&str]) -> AgentDef {
        let text =
            serde_json::json!({"agents": {"a": {"type": "cli", "command": command, "args": args}}})
                .to_string();
        AgentsConfig::parse(&text, "agents.json")
            .unwrap()
            .agent("a")
            .unwrap()
            .clone()
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn reported_cost_wins_and_tokens_are_priced_by_model() {
        let t = PriceTable::default();
        let mut u = usage(1_000_000, 1_000_000);
        u.cost_usd = Some(0.5);
        assert_eq!(t.cost(&def("codex", &[]), &u), Some((0.5, false)));
        let u = usage(1_000_000, 100_000);
        // codex defaults to gpt-5: 1.25 + 0.1 * 10.
        let (c, est) = t.cost(&def("codex", &[]), &u).unwrap();
        assert!((c - 2.25).abs() < 1e-9 && est);
        // An explicit model, with the longer prefix winning.
        let (c, _) = t
            .cost(&def("codex", &["exec", "-m", "gpt-5-mini"]), &u)
            .unwrap();
        assert!((c - 0.45).abs() < 1e-9, "{c}");
        // Unknown model and no override: unknown, not 0.
        assert_eq!(t.cost(&def("my-tool", &[]), &u), None);
        // No tokens at all: unknown.
        assert_eq!(t.cost(&def("codex", &[]), &usage(0, 0)), None);
    }

    #[test]
    fn agents_json_prices_override_by_agent_or_model() {
        let t = PriceTable {
            overrides: vec![
                (
                    "a".into(),
                    Price {
                        input: 1.0,
                        cached_input: None,
                        output: 1.0,
                    },
                ),
                (
                    "gpt-5".into(),
                    Price {
                        input: 0.0,
                        cached_input: None,
                        output: 0.0,
                    },
                ),
            ],
        };
        let (c, _) = t
            .cost(&def("my-tool", &[]), &usage(500_000, 500_000))
            .unwrap();
        assert!((c - 1.0).abs() < 1e-9);
        let mut d = def("codex", &[]);
        d.name = "codex".into();
        assert_eq!(t.price_for(&d).unwrap().0, "gpt-5");
        assert_eq!(t.cost(&d, &usage(10, 10)), Some((0.0, true)));
    }
}
