//! The seatbelt profile of one run: `profiles/seatbelt.sbpl` with its markers filled in, and the `-D`
//! parameters that carry every path. Paths never enter the profile's text: it names parameters only.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::layout::{Layout, canonical, with_ancestors};
use crate::Mount;

/// By absolute path: a `sandbox-exec` earlier on PATH must not be able to stand in for Apple's.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";
pub(crate) const TEMPLATE: &str = include_str!("../../../profiles/seatbelt.sbpl");

/// The markers of the template, each on a line of its own and each replaced exactly once: by one filter a
/// parameter, the parameters named `<PREFIX>_0`, `<PREFIX>_1`, ….
pub(crate) const MARKERS: [Marker; 7] = [
    Marker { mark: "@TREES@", prefix: "TREE", filter: Filter::Subpath },
    Marker { mark: "@LIBRARIES@", prefix: "LIBRARY", filter: Filter::Literal },
    Marker { mark: "@PACKAGES@", prefix: "PACKAGES", filter: Filter::Subpath },
    Marker { mark: "@HIDDEN@", prefix: "HIDDEN", filter: Filter::DenyReads },
    Marker { mark: "@METADATA@", prefix: "METADATA", filter: Filter::Literal },
    Marker { mark: "@READ_MOUNTS@", prefix: "MOUNT_RO", filter: Filter::AllowReads },
    Marker { mark: "@WRITE_MOUNTS@", prefix: "MOUNT_RW", filter: Filter::AllowWrites },
];

#[derive(Clone, Copy)]
pub(crate) struct Marker {
    pub mark: &'static str,
    prefix: &'static str,
    filter: Filter,
}

#[derive(Clone, Copy)]
enum Filter {
    Subpath,
    Literal,
    /// A whole rule: reads denied below the path.
    DenyReads,
    /// A whole rule: reads allowed below the path.
    AllowReads,
    /// A whole rule: reads and writes allowed below the path.
    AllowWrites,
}

impl Filter {
    fn render(self, param: &str) -> String {
        match self {
            Filter::Subpath => format!("(subpath (param \"{param}\"))"),
            Filter::Literal => format!("(literal (param \"{param}\"))"),
            Filter::DenyReads => format!("(deny file-read* file-map-executable (subpath (param \"{param}\")))"),
            Filter::AllowReads => format!("(allow file-read* (subpath (param \"{param}\")))"),
            Filter::AllowWrites => format!("(allow file-read* file-write* (subpath (param \"{param}\")))"),
        }
    }
}

/// A rendered profile and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub text: String,
    /// `NAME=value` pairs for `-D`, in the order the profile names them.
    pub params: Vec<(String, OsString)>,
}

/// What a run shows beyond the interpreter and its scratch directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    /// The interpreter's own package directories (`execution.site_packages`), read-only.
    pub packages: Vec<PathBuf>,
    /// `execution.mounts`, linked into scratch.
    pub mounts: Vec<Mount>,
}

impl Profile {
    /// The profile that confines `layout`'s interpreter to the scratch directory `scratch`, with `shown`.
    pub fn render(layout: &Layout, scratch: &Path, shown: &Shown) -> Profile {
        let scratch_canonical = canonical(scratch);
        let packages: Vec<PathBuf> = shown.packages.iter().map(|dir| canonical(dir)).collect();
        let hidden: Vec<PathBuf> = layout.hidden.iter().filter(|dir| !packages.contains(dir)).cloned().collect();
        let folders = |writable: bool| -> Vec<PathBuf> {
            shown.mounts.iter().filter(|m| m.writable == writable).map(|m| canonical(&m.path)).collect()
        };
        let (read_mounts, write_mounts) = (folders(false), folders(true));
        let mut walked = layout.walked.clone();
        walked.extend([scratch.to_path_buf(), scratch_canonical.clone()]);
        walked.extend(packages.iter().chain(&read_mounts).chain(&write_mounts).cloned());
        let lists: [&[PathBuf]; 7] = [
            &layout.trees,
            &layout.libraries,
            &packages,
            &hidden,
            &with_ancestors(&walked),
            &read_mounts,
            &write_mounts,
        ];
        let mut params = vec![
            ("PYTHON".to_string(), layout.interpreter.clone().into_os_string()),
            ("SCRATCH".to_string(), scratch_canonical.into_os_string()),
        ];
        let mut text = TEMPLATE.to_string();
        for (marker, paths) in MARKERS.iter().zip(lists) {
            let mut filters = Vec::with_capacity(paths.len());
            for (i, path) in paths.iter().enumerate() {
                let name = format!("{}_{i}", marker.prefix);
                filters.push(marker.filter.render(&name));
                params.push((name, path.clone().into_os_string()));
            }
            text = fill(&text, marker.mark, &filters);
        }
        Profile { text, params }
    }

    /// `sandbox-exec -p <profile> -D NAME=value … <interpreter> <args>`. Paths go as they are (any bytes).
    pub fn command_line(&self, interpreter: &Path, args: &[String]) -> Vec<OsString> {
        let mut line: Vec<OsString> = vec![SANDBOX_EXEC.into(), "-p".into(), self.text.clone().into()];
        for (name, value) in &self.params {
            line.push("-D".into());
            let mut definition = OsString::from(format!("{name}="));
            definition.push(value);
            line.push(definition);
        }
        line.push(interpreter.into());
        line.extend(args.iter().map(OsString::from));
        line
    }
}

/// `template` with the line holding `mark` replaced by `filters`, one a line at the marker's indentation
/// (nothing when there are none). The template holds each marker exactly once (a test says so).
fn fill(template: &str, mark: &str, filters: &[String]) -> String {
    let Some(at) = template.find(mark) else { return template.to_string() };
    let line_start = template[..at].rfind('\n').map_or(0, |i| i + 1);
    let indent = &template[line_start..at];
    let lines: Vec<String> = filters.iter().map(|filter| format!("{indent}{filter}")).collect();
    let mut text = String::with_capacity(template.len() + lines.iter().map(|l| l.len() + 1).sum::<usize>());
    text.push_str(&template[..line_start]);
    text.push_str(&lines.join("\n"));
    let rest = &template[at + mark.len()..];
    if lines.is_empty() {
        // The marker's line goes; what followed it on that line (a closing parenthesis) stays.
        text.truncate(text.trim_end_matches([' ', '\n']).len());
    }
    text.push_str(rest);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            interpreter: "/opt/py/bin/python3.11".into(),
            trees: vec!["/opt/py".into()],
            libraries: vec!["/opt/ssl/lib/libssl.3.dylib".into()],
            hidden: vec!["/opt/py/lib/python3.11/site-packages".into()],
            walked: vec!["/opt/py/bin/python3.11".into(), "/opt/ssl/lib/libssl.3.dylib".into()],
        }
    }

    #[test]
    fn every_marker_is_in_the_template_exactly_once_and_gone_after_rendering() {
        for marker in MARKERS {
            assert_eq!(TEMPLATE.matches(marker.mark).count(), 1, "{}", marker.mark);
            let line = TEMPLATE.lines().find(|l| l.contains(marker.mark)).unwrap();
            assert_eq!(line.trim().trim_end_matches(')'), marker.mark, "a marker stands alone on its line");
        }
        for layout in [layout(), Layout { libraries: vec![], hidden: vec![], ..layout() }] {
            let profile = Profile::render(&layout, Path::new("/nonexistent/run"), &Shown::default());
            assert!(!profile.text.contains('@'), "a marker is left:\n{}", profile.text);
        }
        // The template's own words never use a marker's form (a comment once held one, and its replacement
        // broke the comment open).
        let words = TEMPLATE.lines().filter(|l| l.trim_start().starts_with(';'));
        assert!(words.clone().all(|l| !l.contains('@')), "{:?}", words.collect::<Vec<_>>());
    }

    #[test]
    fn the_system_trees_that_spare_libraries_a_rule_are_those_the_template_allows() {
        for tree in super::super::layout::SYSTEM_TREES {
            assert!(TEMPLATE.contains(&format!("(subpath \"/{tree}\")")), "{tree}");
        }
    }

    #[test]
    fn rules_come_in_the_order_the_policy_needs() {
        let text = Profile::render(&layout(), Path::new("/nonexistent/run"), &Shown::default()).text;
        let forms: Vec<&str> = text.lines().filter(|l| l.starts_with('(')).collect();
        assert_eq!(
            &forms[..6],
            [
                "(version 1)",
                "(deny default)",
                "(deny process-info*)",
                "(deny iokit-get-properties)",
                "(deny nvram*)",
                "(allow process-info* (target self))"
            ]
        );
        let position = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{text}"));
        // Installed packages are denied after the trees that hold them are allowed (the last match wins).
        assert!(
            position("(subpath (param \"TREE_0\"))")
                < position("(deny file-read* file-map-executable (subpath (param \"HIDDEN_0\")))")
        );
        assert!(
            position("(allow file-read* file-write* file-ioctl (subpath (param \"SCRATCH\")))")
                < position("(deny file-link file-clone file-write-flags)")
        );
        assert!(text.trim_end().ends_with("(deny network*)"));
        assert!(!text.contains("(allow process-fork") && !text.contains("(allow sysctl-read)"));
    }

    #[test]
    fn paths_travel_as_parameters_with_every_ancestor_in_both_forms() {
        let profile = Profile::render(&layout(), Path::new("/nonexistent/run"), &Shown::default());
        assert!(!profile.text.contains("/opt") && !profile.text.contains("/nonexistent"));
        let params: Vec<(String, String)> =
            profile.params.iter().map(|(name, value)| (name.clone(), value.to_string_lossy().into_owned())).collect();
        let expected: Vec<(String, String)> = [
            ("PYTHON", "/opt/py/bin/python3.11"),
            ("SCRATCH", "/nonexistent/run"),
            ("TREE_0", "/opt/py"),
            ("LIBRARY_0", "/opt/ssl/lib/libssl.3.dylib"),
            ("HIDDEN_0", "/opt/py/lib/python3.11/site-packages"),
            ("METADATA_0", "/nonexistent"),
            ("METADATA_1", "/nonexistent/run"),
            ("METADATA_2", "/opt"),
            ("METADATA_3", "/opt/py"),
            ("METADATA_4", "/opt/py/bin"),
            ("METADATA_5", "/opt/py/bin/python3.11"),
            ("METADATA_6", "/opt/ssl"),
            ("METADATA_7", "/opt/ssl/lib"),
            ("METADATA_8", "/opt/ssl/lib/libssl.3.dylib"),
        ]
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .to_vec();
        assert_eq!(params, expected);
        for (name, _) in &profile.params {
            assert!(profile.text.contains(&format!("(param \"{name}\")")), "{name} is defined but never used");
        }
    }

    #[test]
    fn shown_packages_and_mounts_are_parameters_with_rules_of_their_own() {
        let shown = Shown {
            packages: vec!["/opt/py/lib/python3.11/site-packages".into(), "/venv/lib/site-packages".into()],
            mounts: vec![
                Mount { name: "data".into(), path: "/nonexistent/data".into(), writable: false },
                Mount { name: "out".into(), path: "/nonexistent/out".into(), writable: true },
            ],
        };
        let profile = Profile::render(&layout(), Path::new("/nonexistent/run"), &shown);
        let value = |name: &str| profile.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_string_lossy());
        assert_eq!(value("PACKAGES_1").as_deref(), Some("/venv/lib/site-packages"));
        assert_eq!(value("HIDDEN_0"), None, "a shown package directory is no longer hidden");
        assert_eq!(value("MOUNT_RO_0").as_deref(), Some("/nonexistent/data"));
        assert_eq!(value("MOUNT_RW_0").as_deref(), Some("/nonexistent/out"));
        assert!(profile.params.iter().any(|(n, v)| n.starts_with("METADATA_") && v == "/venv/lib"), "ancestors walk");
        let text = &profile.text;
        assert!(!text.contains("/nonexistent/data") && !text.contains("/venv"), "paths stay out of the text");
        let position = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{text}"));
        assert!(text.contains("  (subpath (param \"PACKAGES_0\"))"));
        let read_only = position("(allow file-read* (subpath (param \"MOUNT_RO_0\")))");
        let writable = position("(allow file-read* file-write* (subpath (param \"MOUNT_RW_0\")))");
        // After scratch's rule, and before the denial of links, clones and flags that holds for them too.
        assert!(position("(subpath (param \"SCRATCH\")))") < read_only);
        assert!(read_only < writable && writable < position("(deny file-link file-clone file-write-flags)"));
    }

    #[test]
    fn the_command_line_runs_the_interpreter_under_apples_sandbox_exec() {
        let profile = Profile::render(&layout(), Path::new("/nonexistent/run"), &Shown::default());
        let line = profile.command_line(Path::new("/opt/py/bin/python3.11"), &["-I".into()]);
        assert_eq!(line[..3], [OsString::from(SANDBOX_EXEC), "-p".into(), profile.text.clone().into()]);
        assert_eq!(line[3..5], [OsString::from("-D"), "PYTHON=/opt/py/bin/python3.11".into()]);
        assert_eq!(line[line.len() - 2..], [OsString::from("/opt/py/bin/python3.11"), "-I".into()]);
    }

    #[test]
    fn paths_that_are_not_utf8_reach_the_command_line_unchanged() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let scratch = PathBuf::from(OsString::from_vec(b"/nonexistent/\xff/scratch".to_vec()));
        let line = Profile::render(&layout(), &scratch, &Shown::default()).command_line(Path::new("/py"), &[]);
        assert!(line.iter().any(|a| a.as_bytes() == b"SCRATCH=/nonexistent/\xff/scratch"));
    }

    #[test]
    fn a_marker_without_filters_leaves_the_rule_around_it_well_formed() {
        let filled = fill("(allow x\n  (literal \"/a\")\n  @M@)\n(deny y)\n", "@M@", &[]);
        assert_eq!(filled, "(allow x\n  (literal \"/a\"))\n(deny y)\n");
        let filled = fill("(a)\n@M@\n(b)\n", "@M@", &[]);
        assert_eq!(filled, "(a)\n(b)\n");
        let filled = fill("(allow x\n  @M@)\n", "@M@", &["(p 1)".into(), "(p 2)".into()]);
        assert_eq!(filled, "(allow x\n  (p 1)\n  (p 2))\n");
    }
}
