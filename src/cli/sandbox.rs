//! `ptc-mcp --check-sandbox SANDBOX`: can this sandbox run programs here, and what does it guarantee?

use ptc_backends::{SandboxKind, guarantees};

use crate::app::{SHUTDOWN_LIMIT, backend_settings};
use crate::config::Config;

use super::{CONFIG_ERROR, FAILURE, INTERRUPTED, SUCCESS, print_err, print_out};

/// Probes one backend and prints what it enforces and guarantees, or why it cannot run; exit status 0 when
/// it can run programs. What the probe left behind (a scratch directory, a container) is removed before it
/// returns, also when SIGINT or SIGTERM cuts the probe short.
pub async fn check_sandbox(sandbox: &str, config: &Config) -> u8 {
    let Some(kind) = parse(sandbox) else { return CONFIG_ERROR };
    let settings = match backend_settings(config) {
        Ok(settings) => settings,
        Err(e) => {
            print_err(&format!("ptc-mcp: {e}\n"));
            return FAILURE;
        }
    };
    let backend = ptc_backends::select(kind, &settings);
    let status = tokio::select! {
        availability = backend.probe() => {
            print_out(&report(kind, &availability));
            if availability.is_usable() { SUCCESS } else { FAILURE }
        }
        () = crate::stop::requested() => INTERRUPTED,
    };
    crate::stop::exit_at_next_signal();
    if tokio::time::timeout(SHUTDOWN_LIMIT, backend.shutdown()).await.is_err() {
        tracing::warn!("the sandbox was not cleaned up within {}s", SHUTDOWN_LIMIT.as_secs());
    }
    status
}

/// A sandbox named on the command line, or `None` after saying which names there are.
pub(super) fn parse(sandbox: &str) -> Option<SandboxKind> {
    let kind = serde_yaml_ng::from_str(sandbox).ok();
    if kind.is_none() {
        print_err(&format!(
            "ptc-mcp: unknown sandbox '{sandbox}'; expected auto, seatbelt, landlock, docker, kubernetes or none\n"
        ));
    }
    kind
}

fn report(kind: SandboxKind, availability: &ptc_backends::Availability) -> String {
    let mut report = format!("{}: {}\n", kind.resolve_auto(), availability.describe());
    if let Some(mode) = guarantees::mode_of(kind, availability) {
        let what = if availability.is_usable() {
            "what it guarantees here"
        } else {
            "what it would guarantee with execution.allow_degraded: true"
        };
        report.push_str(&format!("{what} ({}, README \"Sandboxes\"):\n", guarantees::name(mode).replace('`', "")));
        for line in guarantees::lines(mode) {
            report.push_str(&format!("  {}\n", line.replace('`', "")));
        }
    }
    report
}
