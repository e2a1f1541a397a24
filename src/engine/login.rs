//! A hosted server that needs login, named by a program whose client can open URLs (MCP URL-mode
//! elicitation): before the run starts, ptc-mcp starts the login itself, sends the person the authorization
//! URL through the client, waits for the browser to come back to its loopback port, and runs the program once
//! the server is connected. Without such a client (or if the person declines) the run goes on, and the
//! program's call fails with the `needs login` error that names `ptc-mcp login NAME`.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Approver;
use crate::oauth::login::{self, APPROVAL_WAIT};
use crate::registry::{FIRST_CONNECT_WAIT, Registry};

/// How long a server may take to connect after a login.
const CONNECT_AFTER_LOGIN: Duration = Duration::from_secs(30);

/// Logs in to every server that needs it and that `code` names, through `approver`; stops early if either of
/// `stop` is cancelled (the client's cancel, the server's shutdown).
pub async fn log_in_where_needed(
    registry: &Registry,
    code: &str,
    approver: &dyn Approver,
    stop: [&CancellationToken; 2],
) {
    let named = registry.login_servers_named_in(code);
    if named.is_empty() {
        return;
    }
    let names = named.iter().cloned().collect();
    registry.wait_for_first_attempts_of(&names, FIRST_CONNECT_WAIT).await;
    for name in named {
        tokio::select! {
            () = log_in(registry, &name, approver) => {}
            () = stop[0].cancelled() => return,
            () = stop[1].cancelled() => return,
        }
    }
}

async fn log_in(registry: &Registry, name: &str, approver: &dyn Approver) {
    if !registry.needs_login(name) {
        return;
    }
    let _turn = registry.login_turn().await;
    // Another run may have logged in while this one waited for its turn.
    let Some((config, store)) = registry.login_target(name).filter(|_| registry.needs_login(name)) else { return };
    let pending = match login::start(&config, &store).await {
        Ok(pending) => pending,
        Err(e) => return tracing::warn!(server = %name, "cannot start a login: {e}"),
    };
    let message = format!(
        "The program calls tools of '{name}', which needs you to log in. Open this page to log in; ptc-mcp \
         receives the result on {} and then runs the program.",
        pending.redirect_uri()
    );
    if !approver.send_to_url(&message, &pending.authorization_url).await {
        return;
    }
    match pending.finish(APPROVAL_WAIT).await {
        Ok(logged_in) => tracing::info!(server = %name, "{logged_in}"),
        Err(e) => return tracing::warn!(server = %name, "the login failed: {e}"),
    }
    registry.wait_until_connected(name, CONNECT_AFTER_LOGIN).await;
}
