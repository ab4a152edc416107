//! `cascade ui [--port N] [--bind ADDR] [--open]`: the local dashboard.
//!
//! Finds the repository (its main worktree, where `.cascade/` lives),
//! starts the `cascade-ui` server, prints the URL with the access token and
//! serves until Ctrl-C. `--bind` to anything but loopback is allowed on
//! purpose only, with a warning: the token is then all that protects the
//! runs and the plans. `--open` starts the system's browser on the URL
//! (an argv, never a shell string).

use std::net::IpAddr;

use clap::Args;

use super::{CliResult, Failure, Global, EXIT_OK};

#[derive(Debug, Args)]
pub struct UiArgs {
    /// Port to listen on (0 or absent: a free port)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub port: u16,
    /// Address to listen on (default 127.0.0.1; anything else is reachable from other machines)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Open the dashboard in the system's web browser
    #[arg(long)]
    pub open: bool,
}

pub fn run(g: &Global, args: UiArgs) -> CliResult {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the current directory: {e}")))?;
    let paths = cascade_git::RepoPaths::discover(&cwd).map_err(|e| {
        Failure::usage(anyhow::anyhow!(
            "{e} (run `cascade ui` inside the repository whose runs it should show, or pass -C DIR)"
        ))
    })?;
    let mut config = cascade_ui::UiConfig::new(paths.main_root.clone());
    config.bind = args.bind;
    config.port = args.port;
    config.workdir = cwd.clone();
    // The actions that are commands (`plan answer`, `plan approve`,
    // `resume`) run this very executable, with this --agents.
    config.cli = std::env::current_exe().ok().map(|exe| cascade_ui::Cli {
        exe,
        global: g
            .agents
            .iter()
            .flat_map(|p| ["--agents".to_string(), p.display().to_string()])
            .collect(),
        cwd: cwd.clone(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the async runtime: {e}")))?;
    rt.block_on(async move {
        let ui = cascade_ui::Ui::bind(config).await.map_err(Failure::usage)?;
        if !args.bind.is_loopback() {
            errln!(
                "warning: listening on {} (--bind): anyone who can reach this address and has the URL's token can steer runs and answer plans",
                ui.local_addr()
            );
        }
        let url = ui.url();
        // The URL alone on its line (scripts and tests read it).
        outln!("{url}");
        errln!(
            "cascade ui: dashboard of {} (Ctrl-C stops it; runs are not affected)",
            paths.main_root.display()
        );
        if args.open {
            open_browser(&url);
        }
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        ui.serve(shutdown).await.map_err(Failure::failed)?;
        Ok(EXIT_OK)
    })
}

/// Starts the platform's URL opener with the URL as one argument.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => {}
        Err(e) => errln!("warning: could not start '{opener}' to open the browser ({e}); open the URL above yourself"),
    }
}
