//! `ptc-mcp sandbox-profile seatbelt`: the seatbelt profile exactly as a run would use it, with its
//! parameters, on any OS, so that it can be read and checked without a Mac.

use ptc_backends::SandboxKind;

use crate::config::Config;

use super::{CONFIG_ERROR, FAILURE, SUCCESS};

/// Prints the profile of `sandbox` for the configured interpreter (`execution.python`).
pub async fn sandbox_profile(sandbox: SandboxKind, config: &Config) -> u8 {
    if sandbox != SandboxKind::Seatbelt {
        eprintln!(
            "ptc-mcp: only the seatbelt sandbox has a profile to print; {sandbox} is set up by code (see \
             `ptc-mcp --check-sandbox {sandbox}`)"
        );
        return CONFIG_ERROR;
    }
    match ptc_backends::seatbelt_profile(&config.execution.python).await {
        Ok(profile) => {
            // A reader that stopped early (`| head`) is no error of ours.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), profile.as_bytes());
            SUCCESS
        }
        Err(e) => {
            eprintln!("ptc-mcp: cannot render the seatbelt profile: {e}");
            FAILURE
        }
    }
}
