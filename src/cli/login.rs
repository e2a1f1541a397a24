//! `ptc-mcp login NAME [--no-browser]` and `ptc-mcp logout NAME`: a person's OAuth login to a hosted server
//! (the authorization URL is always printed, and opened in `$BROWSER`, else the platform's opener, unless
//! `--no-browser`), and its undoing.

use std::process::Stdio;

use crate::config::{AuthConfig, Config, ServerConfig};
use crate::oauth::{self, OAuthError, login::APPROVAL_WAIT};

use super::{CONFIG_ERROR, FAILURE, INTERRUPTED, SUCCESS, print_err, print_out};

/// Logs in to the server `name`; exit status 0 once its tokens are stored.
pub async fn login(config: &Config, name: &str, open_browser: bool) -> u8 {
    let (server, store) = match server_and_store(config, name) {
        Ok(found) => found,
        Err(status) => return status,
    };
    if let Some(AuthConfig::ClientCredentials(_)) = &server.auth {
        print_err(&format!("ptc-mcp: {}\n", OAuthError::NotInteractive { server: name.into() }));
        return CONFIG_ERROR;
    }
    let login = async {
        let pending = oauth::login::start(server, &store).await?;
        print_out(&format!(
            "To log in to '{name}', open this URL in a browser:\n\n  {}\n\nWaiting up to {}s for the browser to \
             come back to {}...\n",
            pending.authorization_url,
            APPROVAL_WAIT.as_secs(),
            pending.redirect_uri()
        ));
        if open_browser && let Err(why) = open_in_browser(&pending.authorization_url) {
            print_err(&format!("ptc-mcp: cannot open a browser ({why}); open the URL above yourself\n"));
        }
        pending.finish(APPROVAL_WAIT).await
    };
    tokio::select! {
        done = login => match done {
            Ok(logged_in) => {
                print_out(&format!("ptc-mcp: '{name}' {logged_in}\n"));
                SUCCESS
            }
            Err(e) => {
                print_err(&format!("ptc-mcp: {e}\n"));
                FAILURE
            }
        },
        () = crate::stop::requested() => INTERRUPTED,
    }
}

/// Logs out of the server `name`: its tokens revoked where the server supports it, and deleted.
pub async fn logout(config: &Config, name: &str) -> u8 {
    let (server, store) = match server_and_store(config, name) {
        Ok(found) => found,
        Err(status) => return status,
    };
    match oauth::logout(server, &store).await {
        Ok(done) if done.deleted == 0 => {
            print_out(&format!("ptc-mcp: no tokens were stored for '{name}'\n"));
            SUCCESS
        }
        Ok(done) => {
            let revocation = done.revocation.map(|r| format!("; {r}")).unwrap_or_default();
            print_out(&format!(
                "ptc-mcp: logged out of '{name}': deleted {} token file(s){revocation}\n",
                done.deleted
            ));
            SUCCESS
        }
        Err(e) => {
            print_err(&format!("ptc-mcp: {e}\n"));
            FAILURE
        }
    }
}

fn server_and_store<'a>(config: &'a Config, name: &str) -> Result<(&'a ServerConfig, std::path::PathBuf), u8> {
    let Some(server) = config.servers.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
        let known = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        print_err(&format!("ptc-mcp: {} (servers: {known})\n", OAuthError::UnknownServer(name.into())));
        return Err(CONFIG_ERROR);
    };
    if server.auth.is_none() {
        print_err(&format!("ptc-mcp: {}\n", OAuthError::NoAuth { server: name.into() }));
        return Err(CONFIG_ERROR);
    }
    match config.oauth.token_store() {
        Some(store) => Ok((server, store)),
        None => {
            print_err(&format!("ptc-mcp: {}\n", OAuthError::NoStore));
            Err(CONFIG_ERROR)
        }
    }
}

/// Starts `$BROWSER` (its first entry; `%s` stands for the URL, else the URL is the last argument), else
/// the platform's opener, without waiting for it.
fn open_in_browser(url: &str) -> Result<(), String> {
    let configured = std::env::var("BROWSER")
        .ok()
        .and_then(|b| b.split(':').map(str::trim).find(|e| !e.is_empty()).map(str::to_string));
    let mut words: Vec<String> = match &configured {
        Some(entry) => entry.split_whitespace().map(str::to_string).collect(),
        None if cfg!(target_os = "macos") => vec!["open".into()],
        None => vec!["xdg-open".into()],
    };
    if words.iter().any(|w| w.contains("%s")) {
        words.iter_mut().for_each(|w| *w = w.replace("%s", url));
    } else {
        words.push(url.to_string());
    }
    let program = words.remove(0);
    let mut child = std::process::Command::new(&program)
        .args(&words)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    // Reaped in the background: the browser may outlive the login.
    std::thread::spawn(move || child.wait());
    Ok(())
}
