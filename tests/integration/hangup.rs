//! SIGHUP while serving: the config is read again and what changed is said with "restart ptc-mcp to apply
//! it"; a config that cannot be used is reported; the server serves on with the config it started with.

use std::time::Duration;

use crate::common::*;

fn hang_up(ptc: &Ptc) {
    let pid = ptc.child.id().expect("the server is running") as i32;
    // SAFETY: kill with the pid of a child we own.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}

#[apply(integration_test!)]
async fn a_hangup_says_what_changed_in_the_config_and_serves_on_with_the_old_one() {
    let ptc = Ptc::start_logging("execution:\n  timeout_seconds: 5\n", &[], Some("info")).await;
    let config = ptc.dir.path().join("config.yaml");

    hang_up(&ptc);
    assert!(eventually(Duration::from_secs(30), || ptc.log().contains("is as it was at start")).await, "{}", ptc.log());

    std::fs::write(&config, "servers:\n  - name: extra\n    command: nowhere\nexecution:\n  timeout_seconds: 7\n")
        .unwrap();
    hang_up(&ptc);
    let changed = "changed: servers added: 'extra'; section 'execution'; restart ptc-mcp to apply it";
    assert!(eventually(Duration::from_secs(30), || ptc.log().contains(changed)).await, "{}", ptc.log());

    std::fs::write(&config, "execution: [\n").unwrap();
    hang_up(&ptc);
    let refused = "the config read at start stays in force";
    assert!(eventually(Duration::from_secs(30), || ptc.log().contains(refused)).await, "{}", ptc.log());

    // Still serving, with the config it started with: no server 'extra', and the 5 s limit.
    let text = ptc.execute("import time\ntime.sleep(6)").await.expect_error();
    assert!(text.contains("Execution exceeded 5"), "{text}");
    let (tools, _) = ptc.list_callable_tools().await;
    assert!(!tools.iter().any(|name| name.starts_with("mcp__extra__")), "{tools:?}");
}
