//! `execution.site_packages` and `execution.preload`: the installed packages of `execution.python` (a
//! virtualenv's: ci/test-deps.sh's with numpy and pandas, `PTC_TEST_PACKAGES_PYTHON`) are visible read-only
//! and work in the sandbox, the image's own under `docker` (ci/docker-setup.sh's `ptc-mcp-runner:packages`,
//! `PTC_TEST_DOCKER_PACKAGES_IMAGE`); preloaded modules are imported before the program arrives, and one that
//! cannot be imported is an error at start and in every run. `PTC_REQUIRE=packages` makes them required.

use crate::common::*;

/// The `execution` keys that run programs with the packages (and `extra`), or `None` (skipped) without them.
fn with_packages(extra: &str) -> Option<String> {
    if sandbox_under_test() == "docker" {
        let image =
            std::env::var("PTC_TEST_DOCKER_PACKAGES_IMAGE").unwrap_or_else(|_| "ptc-mcp-runner:packages".into());
        let found = std::process::Command::new("docker").args(["image", "inspect", &image]).output();
        let present = found.is_ok_and(|output| output.status.success());
        let why = format!(
            "image {image} is missing (PTC_RUNNER_PACKAGES_PYTHON=$PTC_TEST_PACKAGES_PYTHON ci/docker-setup.sh builds it)"
        );
        require("packages", if present { Ok(()) } else { Err(why) })?;
        // The image replaces the suite's runner image.
        let config = config(&[], extra).replace(&format!("image: {}", docker_image()), &format!("image: {image}"));
        return Some(config);
    }
    let python = required_path("packages", "PTC_TEST_PACKAGES_PYTHON")?;
    Some(config(&[], &format!("  python: {python}\n{extra}")))
}

async fn ptc(extra: &str) -> Option<Ptc> {
    let ptc = Ptc::start(&with_packages(extra)?).await;
    require_backend(&ptc).await.map(|()| ptc)
}

#[apply(integration_test!)]
async fn numpy_and_pandas_import_and_compute_with_the_interpreters_packages_shown() {
    let Some(ptc) = ptc("  site_packages: true\n").await else { return };
    let code = r#"
import numpy as np, pandas as pd
frame = pd.DataFrame({'city': ['Oslo', 'Lima', 'Oslo', 'Lima'], 'temp': [3.0, 19.5, 5.0, 20.5]})
print(frame.groupby('city')['temp'].mean().to_dict())
print(np.linalg.solve(np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([3.0, 5.0])).round(6).tolist())
print(frame.to_csv(index=False), end='')
import os
try:
    open(os.path.join(os.path.dirname(np.__file__), 'ptc-probe'), 'w')
    print('numpy is writable')
except OSError as e:
    print('numpy is read-only')
"#;
    let expected = "{'Lima': 20.0, 'Oslo': 4.0}\n[0.8, 1.4]\ncity,temp\nOslo,3.0\nLima,19.5\nOslo,5.0\nLima,20.5\n";
    let read_only = if sandbox_under_test() == "none" { "numpy is writable\n" } else { "numpy is read-only\n" };
    assert_eq!(ptc.execute(code).await.expect_output(), format!("{expected}{read_only}"));
    if sandbox_under_test() == "none" {
        // Under none the program really wrote into the venv: take it back.
        let python = std::env::var("PTC_TEST_PACKAGES_PYTHON").unwrap();
        let numpy = std::process::Command::new(python)
            .args(["-c", "import numpy, os; print(os.path.dirname(numpy.__file__))"])
            .output()
            .unwrap();
        let dir = String::from_utf8(numpy.stdout).unwrap();
        std::fs::remove_file(std::path::Path::new(dir.trim()).join("ptc-probe")).unwrap();
    }
}

#[apply(integration_test!)]
async fn without_site_packages_the_interpreters_packages_stay_hidden() {
    let Some(ptc) = ptc("").await else { return };
    let text = ptc.execute("import pandas").await.expect_error();
    assert!(text.contains("ModuleNotFoundError: No module named 'pandas'"), "{text}");
    assert!(text.contains("(only the standard library is available here)"), "{text}");
}

#[apply(integration_test!)]
async fn a_preloaded_module_is_imported_before_the_program_starts() {
    let Some(preloaded) = ptc("  site_packages: true\n  preload: [pandas]\n").await else { return };
    let code =
        "import sys\nprint('pandas' in sys.modules, 'numpy' in sys.modules)\nimport pandas\nprint(pandas.__version__)";
    assert_eq!(preloaded.execute(code).await.expect_output(), "True True\n2.2.3\n");
    let Some(plain) = ptc("  site_packages: true\n").await else { return };
    assert_eq!(plain.execute(code).await.expect_output(), "False False\n2.2.3\n", "without preload it is not");
}

#[apply(integration_test!)]
async fn a_preload_that_fails_is_an_error_at_start_and_in_every_run() {
    let Some(config) = with_packages("  site_packages: true\n  preload: [json, ptc_no_such_module]\n") else { return };
    let why = "execution.preload: module 'ptc_no_such_module' could not be imported here: ModuleNotFoundError: No \
               module named 'ptc_no_such_module'";
    let ptc = Ptc::start(&config).await;
    for _ in 0..2 {
        let text = ptc.execute("print('never runs')").await.expect_error();
        assert!(text.contains("SandboxError: ") && text.contains(why), "{text}");
        assert!(!text.contains("never runs"), "{text}");
    }
    let path = ptc.dir.path().join("config.yaml");
    let check = std::process::Command::new(binary()).arg("check").arg("--config").arg(&path).output().unwrap();
    let printed = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{printed}");
    assert!(printed.contains(why), "{printed}");
}

#[apply(integration_test!)]
async fn with_packages_shown_programs_still_have_no_network() {
    if sandbox_under_test() == "none" {
        skip("none has no OS isolation: programs there have the network");
        return;
    }
    let Some(ptc) = ptc("  site_packages: true\n  preload: [pandas]\n").await else { return };
    let code = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=2)\n    print('connected')\n\
                except OSError as e:\n    print('no network:', type(e).__name__)";
    let printed = ptc.execute(code).await.expect_output();
    assert!(printed.starts_with("no network: "), "{printed}");
}
