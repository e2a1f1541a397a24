//! `ptc-mcp check`: is the config valid, can the sandbox run programs, does every server connect?

use std::time::Duration;

use crate::config::{Config, ConfigSource};
use crate::discovery::no_servers;
use crate::registry::ServerStatus;

use super::{FAILURE, INTERRUPTED, SUCCESS, print_out, with_app};

/// Prints the config, the sandbox and one row per server (status, tools, time to connect, error); exit
/// status 0 only when a config file was found, the sandbox can run programs and every server connected
/// without tool collisions.
pub async fn check(config: &Config, source: &ConfigSource) -> u8 {
    let found = matches!(source, ConfigSource::File(_));
    print_out(&format!("config   {}{}\n", source.describe(), if found { ": valid" } else { "" }));
    with_app(config, async |app, stop| {
        let probed = async {
            let availability = app.engine.availability().await;
            print_out(&format!("sandbox  {}: {}\n", app.engine.backend_kind().resolve_auto(), availability.describe()));
            app.wait_for_servers().await;
            availability
        };
        let availability = tokio::select! {
            availability = probed => availability,
            () = stop.cancelled() => return INTERRUPTED,
        };
        let times = app.registry.first_attempt_times();
        let rows: Vec<Row> = app
            .registry
            .statuses()
            .into_iter()
            .map(|(name, status)| {
                let time = times.get(&name).copied().flatten();
                Row::new(name, &status, time)
            })
            .collect();
        let collisions = app.registry.catalog().collisions.clone();
        let mut report = if rows.is_empty() { format!("servers  {}\n", no_servers(source)) } else { table(&rows) };
        for collision in &collisions {
            report.push_str(&format!("collision: {collision}\n"));
        }
        print_out(&report);
        let all_connected = rows.iter().all(|row| row.status == "connected");
        if found && availability.is_usable() && all_connected && collisions.is_empty() { SUCCESS } else { FAILURE }
    })
    .await
}

/// One server as the table shows it.
struct Row {
    name: String,
    status: &'static str,
    tools: usize,
    time: String,
    error: String,
}

impl Row {
    fn new(name: String, status: &ServerStatus, settled_after: Option<Duration>) -> Row {
        let status_word = match (status.connected, settled_after) {
            (true, _) => "connected",
            (false, _) if status.needs_login => "needs login",
            (false, Some(_)) => "unavailable",
            (false, None) => "starting",
        };
        Row {
            name,
            status: status_word,
            tools: status.tools,
            time: settled_after.map_or_else(|| "-".to_string(), |t| format!("{:.1}s", t.as_secs_f64())),
            error: status.error.clone().unwrap_or_default(),
        }
    }
}

fn table(rows: &[Row]) -> String {
    let width = |header: &str, cell: &dyn Fn(&Row) -> usize| rows.iter().map(cell).max().unwrap_or(0).max(header.len());
    let name_w = width("server", &|r| r.name.chars().count());
    let status_w = width("status", &|r| r.status.len());
    let time_w = width("time", &|r| r.time.len());
    let mut out = format!("{:name_w$}  {:status_w$}  tools  {:>time_w$}  error\n", "server", "status", "time");
    for row in rows {
        let line = format!(
            "{:name_w$}  {:status_w$}  {:>5}  {:>time_w$}  {}",
            row.name, row.status, row.tools, row.time, row.error
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_one_aligned_row_per_server_with_the_error_in_words() {
        let up = ServerStatus { connected: true, tools: 3, error: None, needs_login: false };
        let down = ServerStatus {
            connected: false,
            tools: 0,
            error: Some("exited with status 1: boom".into()),
            needs_login: false,
        };
        let rows = [
            Row::new("financial-data".into(), &up, Some(Duration::from_millis(420))),
            Row::new("db".into(), &down, Some(Duration::from_secs(2))),
        ];
        assert_eq!(
            table(&rows),
            "server          status       tools  time  error\n\
             financial-data  connected        3  0.4s\n\
             db              unavailable      0  2.0s  exited with status 1: boom\n"
        );
    }
}
