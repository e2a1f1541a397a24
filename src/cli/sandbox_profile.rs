//! `ptc-mcp sandbox-profile seatbelt`: the seatbelt profile exactly as a run would use it, with its
//! parameters, on any OS, so that it can be read and checked without a Mac.

use ptc_backends::SandboxKind;

use crate::config::Config;

use super::{CONFIG_ERROR, FAILURE, SUCCESS, print_err, print_out};

/// Prints the profile of the sandbox named `sandbox` for the configured interpreter (`execution.python`).
pub async fn sandbox_profile(sandbox: &str, config: &Config) -> u8 {
    let Some(kind) = super::sandbox::parse(sandbox) else { return CONFIG_ERROR };
    if kind != SandboxKind::Seatbelt {
        print_err(&format!(
            "ptc-mcp: only the seatbelt sandbox has a profile to print; {kind} is set up by code (see \
             `ptc-mcp --check-sandbox {kind}`)\n"
        ));
        return CONFIG_ERROR;
    }
    let settings = match crate::app::backend_settings(config) {
        Ok(settings) => settings,
        Err(e) => {
            print_err(&format!("ptc-mcp: {e}\n"));
            return FAILURE;
        }
    };
    match ptc_backends::seatbelt_profile(&settings).await {
        Ok(profile) => {
            print_out(&profile);
            SUCCESS
        }
        Err(e) => {
            print_err(&format!("ptc-mcp: cannot render the seatbelt profile: {e}\n"));
            FAILURE
        }
    }
}
