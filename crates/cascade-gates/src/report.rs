//! Gate results: [`GateReport`], [`GateResult`], [`GateError`] and the summary a
//! retry prompt quotes.

use serde::{Deserialize, Serialize};

/// How bad a parsed diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Note,
}

/// One diagnostic parsed from a tool's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateError {
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub code: Option<String>,
    pub message: String,
    pub severity: Severity,
}

impl GateError {
    /// An error with only a message.
    pub fn message(severity: Severity, message: impl Into<String>) -> GateError {
        GateError {
            file: None,
            line: None,
            column: None,
            code: None,
            message: message.into(),
            severity,
        }
    }

    /// `file:line:col: [code] message`, leaving out what is unknown.
    pub fn display_line(&self) -> String {
        let mut s = String::new();
        if let Some(f) = &self.file {
            s.push_str(f);
            if let Some(l) = self.line {
                s.push_str(&format!(":{l}"));
                if let Some(c) = self.column {
                    s.push_str(&format!(":{c}"));
                }
            }
            s.push_str(": ");
        }
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        s.push_str(sev);
        if let Some(c) = &self.code {
            s.push_str(&format!("[{c}]"));
        }
        s.push_str(": ");
        s.push_str(self.message.lines().next().unwrap_or(""));
        s
    }
}

/// Where a gate's result came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSource {
    /// This repository's cache.
    Local,
    /// The remote cache (and then copied into the local one).
    Remote,
    /// Looked up, not found: the gate ran.
    Miss,
    /// The cache was not consulted (`--no-cache`, skipped gate, no fingerprint).
    #[default]
    Off,
}

impl CacheSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheSource::Local => "local",
            CacheSource::Remote => "remote",
            CacheSource::Miss => "miss",
            CacheSource::Off => "off",
        }
    }
}

/// The result of one gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateResult {
    pub name: String,
    pub passed: bool,
    pub required: bool,
    /// Taken from the cache: nothing ran.
    pub cached: bool,
    /// `local`, `remote`, `miss` or `off`.
    #[serde(default)]
    pub cache: CacheSource,
    /// Not run (incremental with nothing relevant, fail-fast, cancelled, disabled).
    pub skipped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// Failed, then passed when re-run.
    #[serde(default)]
    pub flaky: bool,
    /// The gate's program could not be found.
    #[serde(default)]
    pub tool_missing: bool,
    #[serde(default)]
    pub timed_out: bool,
    pub duration_ms: u64,
    /// For a cached result: how long the run that produced it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_duration_ms: Option<u64>,
    /// The command line, for humans (`cargo test --quiet`).
    #[serde(default)]
    pub command: String,
    /// Folder the gate ran in, relative to the repository root (`.` for the root).
    #[serde(default)]
    pub working_dir: String,
    /// "exit code 1", "timed out after 5.0s", "command 'ruff' not found"...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    pub errors: Vec<GateError>,
    #[serde(default)]
    pub output_excerpt: String,
    /// The tests the gate ran and how each ended, when its runner is one
    /// the census reads and the run asked for it ([`crate::census`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub census: Option<crate::census::Census>,
}

/// The results of a gate run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateReport {
    /// Every required gate passed.
    pub passed: bool,
    pub gates: Vec<GateResult>,
}

impl GateReport {
    /// Gates that ran (or were cached) and failed.
    pub fn failed(&self) -> impl Iterator<Item = &GateResult> {
        self.gates.iter().filter(|g| !g.passed && !g.skipped)
    }

    /// Gates that did not run.
    pub fn skipped(&self) -> impl Iterator<Item = &GateResult> {
        self.gates.iter().filter(|g| g.skipped)
    }

    /// Gates answered from the cache.
    pub fn cached(&self) -> impl Iterator<Item = &GateResult> {
        self.gates.iter().filter(|g| g.cached)
    }

    /// One line: "3 gates: 2 passed (1 cached), 1 failed: test; skipped: lint".
    pub fn summary_line(&self) -> String {
        let total = self.gates.len();
        let passed = self.gates.iter().filter(|g| g.passed).count();
        let cached = self.cached().count();
        let failed: Vec<&str> = self.failed().map(|g| g.name.as_str()).collect();
        let skipped: Vec<&str> = self.skipped().map(|g| g.name.as_str()).collect();
        let mut s = format!(
            "{total} gate{}: {passed} passed",
            if total == 1 { "" } else { "s" }
        );
        if cached > 0 {
            s.push_str(&format!(" ({cached} cached)"));
        }
        if !failed.is_empty() {
            s.push_str(&format!(", {} failed: {}", failed.len(), failed.join(", ")));
        }
        if !skipped.is_empty() {
            s.push_str(&format!("; skipped: {}", skipped.join(", ")));
        }
        s
    }

    /// Markdown for a retry prompt: each failing gate with its diagnostics,
    /// errors before warnings, at most `max_errors` in all, then
    /// "... and K more".
    pub fn summary_for_prompt(&self, max_errors: usize) -> String {
        let failing: Vec<&GateResult> = self.failed().collect();
        if failing.is_empty() {
            return "All quality gates passed.".to_string();
        }
        let mut out = String::new();
        for g in &failing {
            let req = if g.required { "required" } else { "optional" };
            let how = g.outcome.as_deref().unwrap_or("failed");
            out.push_str(&format!("- gate '{}' ({req}) failed: {how}", g.name));
            if !g.command.is_empty() {
                out.push_str(&format!(" — `{}`", g.command));
            }
            out.push('\n');
        }
        let mut all: Vec<(&GateResult, &GateError)> = failing
            .iter()
            .flat_map(|g| g.errors.iter().map(move |e| (*g, e)))
            .collect();
        // Stable: errors first, then warnings, then notes; tool order kept.
        all.sort_by_key(|(_, e)| e.severity);
        if !all.is_empty() {
            out.push_str("\nDiagnostics:\n");
        }
        for (g, e) in all.iter().take(max_errors) {
            out.push_str(&format!("- [{}] {}\n", g.name, e.display_line()));
        }
        if all.len() > max_errors {
            out.push_str(&format!("... and {} more\n", all.len() - max_errors));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(sev: Severity, msg: &str) -> GateError {
        GateError {
            file: Some("src/a.rs".into()),
            line: Some(3),
            column: Some(7),
            code: Some("E0308".into()),
            message: msg.into(),
            severity: sev,
        }
    }

    fn result(name: &str, passed: bool, errors: Vec<GateError>) -> GateResult {
        GateResult {
            name: name.into(),
            passed,
            required: true,
            cached: false,
            cache: Default::default(),
            skipped: false,
            skip_reason: None,
            flaky: false,
            tool_missing: false,
            timed_out: false,
            duration_ms: 1,
            original_duration_ms: None,
            command: "cargo test".into(),
            working_dir: ".".into(),
            outcome: Some("exit code 1".into()),
            errors,
            output_excerpt: String::new(),
            census: None,
        }
    }

    #[test]
    fn prompt_summary_lists_errors_first_and_caps() {
        let report = GateReport {
            passed: false,
            gates: vec![
                result(
                    "lint",
                    false,
                    vec![err(Severity::Warning, "w1"), err(Severity::Warning, "w2")],
                ),
                result(
                    "test",
                    false,
                    vec![err(Severity::Error, "e1"), err(Severity::Error, "e2")],
                ),
                result("fmt", true, vec![]),
            ],
        };
        let s = report.summary_for_prompt(3);
        let e1 = s.find("e1").unwrap();
        let w1 = s.find("w1").unwrap();
        assert!(e1 < w1, "{s}");
        assert!(s.contains("src/a.rs:3:7: error[E0308]: e1"));
        assert!(s.contains("... and 1 more"), "{s}");
        assert!(!s.contains("w2"));
        assert!(s.contains("gate 'test' (required) failed: exit code 1"));
        assert!(!s.contains("'fmt'"));
        assert!(report.summary_line().contains("2 failed: lint, test"));
    }
}
