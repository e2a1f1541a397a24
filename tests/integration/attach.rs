//! `attach(path, mime_type=None)`: a program returns a file of its working directory to the client as an
//! embedded resource after the text (text for text types, base64 otherwise), within the `max_attachments` and
//! `max_attachment_bytes` that `show()` uses too; paths outside the working directory, directories and FIFOs
//! are refused, and what the program sends past the bounds is never held.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{ContentBlock, ResourceContents};
use serde_json::json;

use crate::common::*;

/// The resource of each embedded-resource block, after the text.
fn resources(run: &Run) -> Vec<ResourceContents> {
    run.0
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Resource(embedded) => Some(embedded.resource.clone()),
            _ => None,
        })
        .collect()
}

async fn ptc(execution: &str) -> Option<Ptc> {
    let ptc = Ptc::start(&config(&[mock_server("mock", &["--media"])], execution)).await;
    require_backend(&ptc).await.map(|()| ptc)
}

#[apply(integration_test!)]
async fn a_csv_the_program_wrote_comes_back_as_a_text_resource_with_its_exact_bytes() {
    let Some(ptc) = ptc("").await else { return };
    let code = "import pathlib\n\
                pathlib.Path('data.csv').write_bytes('day,temp\\r\\nMon,\u{e9}t\u{e9} 21\\n'.encode())\n\
                pathlib.Path('summary').write_text('{\"rows\": 1}')\n\
                attach('data.csv')\n\
                attach('summary', mime_type='application/json')\n\
                print('done')";
    let run = ptc.execute(code).await;
    let text = run.expect_ok();
    assert_eq!(
        text,
        "[Script executed successfully]\ndone\n[attached: file data.csv (text/csv), file summary (application/json)]"
    );
    assert_eq!(
        resources(&run),
        [
            ResourceContents::TextResourceContents {
                uri: "ptc-mcp://attachments/data.csv".into(),
                mime_type: Some("text/csv".into()),
                text: "day,temp\r\nMon,\u{e9}t\u{e9} 21\n".into(),
                meta: None,
            },
            ResourceContents::TextResourceContents {
                uri: "ptc-mcp://attachments/summary".into(),
                mime_type: Some("application/json".into()),
                text: "{\"rows\": 1}".into(),
                meta: None,
            },
        ]
    );
    assert_eq!(run.structured()["output"], json!("done\n"));
}

#[apply(integration_test!)]
async fn a_binary_file_comes_back_as_a_base64_blob_and_text_that_is_not_utf8_too() {
    let Some(ptc) = ptc("").await else { return };
    let code = "import os\n\
                os.makedirs('out/charts')\n\
                open('out/charts/plot 1.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(256)))\n\
                open('latin1.txt', 'wb').write(b'caf\\xe9')\n\
                os.chdir('out')\n\
                attach('charts/plot 1.png')\n\
                attach('../latin1.txt')";
    let run = ptc.execute(code).await;
    run.expect_ok();
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n".iter().copied().chain(0..=255).collect();
    assert_eq!(
        resources(&run),
        [
            ResourceContents::blob(STANDARD.encode(&png), "ptc-mcp://attachments/out/charts/plot%201.png")
                .with_mime_type("image/png"),
            ResourceContents::blob(STANDARD.encode(b"caf\xe9"), "ptc-mcp://attachments/latin1.txt")
                .with_mime_type("text/plain"),
        ]
    );
}

#[apply(integration_test!)]
async fn show_and_attach_share_the_bounds_and_attach_says_what_was_left_out() {
    let Some(ptc) = ptc("  max_attachments: 3\n  max_attachment_bytes: 100\n").await else { return };
    // show() takes 80 bytes (an image and an audio block of 40), in the order asked.
    let code = "r = await mcp__mock__media(size=40)\n\
                show(r)\n\
                open('a.csv', 'w').write('x' * 30)\n\
                open('b.csv', 'w').write('y' * 10)\n\
                open('c.csv', 'w').write('z')\n\
                open('big.csv', 'w').write('w' * 101)\n\
                open('blob.bin', 'wb').write(bytes(80))\n\
                for name in ['a.csv', 'big.csv', 'blob.bin', 'b.csv', 'c.csv']:\n    attach(name)";
    let run = ptc.execute(code).await;
    run.expect_ok();
    assert_eq!(run.kinds(), ["text", "image image/png 40", "audio audio/wav 40", "text ptc-mcp://attachments/b.csv"]);
    assert_eq!(
        run.structured()["output"],
        json!(
            "[attach(): left out file a.csv (text/csv): the attachments would pass max_attachment_bytes (100)]\n\
             [attach(): left out file big.csv (text/csv): 101 bytes, more than max_attachment_bytes (100)]\n\
             [attach(): left out file blob.bin (application/octet-stream): 108 bytes of base64, more than \
             max_attachment_bytes (100)]\n\
             [attach(): left out file c.csv (text/csv): max_attachments (3) already attached]\n"
        )
    );
    assert!(run.text().contains("\n[attached: file b.csv (text/csv)]"), "{}", run.text());
}

#[apply(integration_test!)]
async fn paths_outside_the_working_directory_directories_and_fifos_are_refused_at_once() {
    let Some(ptc) = ptc("").await else { return };
    let code = "import os, time\n\
                os.symlink('/etc/passwd', 'passwd')\n\
                os.mkdir('dir')\n\
                os.mkfifo('fifo')\n\
                start = time.monotonic()\n\
                for path in ['../x', '/etc/passwd', 'passwd', 'dir', 'fifo']:\n    \
                    try:\n        attach(path)\n    except ValueError as e:\n        \
                        print(str(e).replace(os.getcwd(), 'CWD'))\n\
                print(time.monotonic() - start < 5)";
    let run = ptc.execute(code).await;
    run.expect_ok();
    assert_eq!(run.kinds(), ["text"]);
    let outside = "is outside the working directory (CWD): only its files (symlinks followed) can be attached";
    assert_eq!(
        run.structured()["output"],
        json!(format!(
            "attach(): '../x' {outside}\nattach(): '/etc/passwd' {outside}\nattach(): 'passwd' {outside}\n\
             attach(): 'dir' is a directory: only regular files can be attached\n\
             attach(): 'fifo' is not a regular file (a FIFO, a socket or a device): only regular files can be \
             attached\nTrue\n"
        ))
    );
}

#[apply(integration_test!)]
async fn forged_attach_messages_are_checked_and_bounded_like_real_ones() {
    let Some(ptc) = ptc("  max_attachments: 2\n").await else { return };
    // Straight to the channel's fd: a path outside the working directory, then four files past the count.
    let code = r#"import os, json
def forge(name, data="eA=="):
    line = json.dumps({"type": "attach", "id": 900, "name": name, "mime_type": "text/plain", "size": 1, "data": data})
    for fd in range(3, 64):
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
            pass
forge("../secret")
forge("/etc/passwd")
forge("a.txt", data="not base64")
for i in range(4):
    forge(f"f{i}.txt")
import time
time.sleep(0.5)"#;
    let run = ptc.execute(code).await;
    run.expect_ok();
    assert_eq!(run.kinds(), ["text", "text ptc-mcp://attachments/f0.txt", "text ptc-mcp://attachments/f1.txt"]);
}

#[apply(integration_test!)]
async fn a_lying_program_sending_a_huge_file_is_cut_off_at_the_line_limit() {
    let Some(ptc) = ptc("  max_attachment_bytes: 1000\n  max_tool_result_bytes: 100000\n").await else { return };
    let server = ptc.child.id().expect("the server runs") as i32;
    let before = peak_rss_kib(server);
    // 100 MB of base64 claimed to be a small file, in one line, straight to the channel's fd.
    let code = r#"import os
head = b'{"type":"attach","id":900,"name":"a.bin","mime_type":"image/png","size":1,"data":"'
line = head + b"A" * 100_000_000 + b'"}\n'
for fd in range(3, 64):
    try:
        os.write(fd, line)
    except OSError:
        pass
print("sent")"#;
    let started = Instant::now();
    let run = ptc.execute(code).await;
    let grew_mib = (peak_rss_kib(server) - before) / 1024;
    eprintln!("the server's peak RSS grew by {grew_mib} MiB reading a 100 MB line in {:?}", started.elapsed());
    let text = run.expect_error();
    assert_corrupted_channel(&text, "a message of ");
    assert!(grew_mib < 64, "the server's peak RSS grew by {grew_mib} MiB");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(ptc.execute("print('still usable')").await.kinds(), ["text"]);
}

#[apply(integration_test!)]
async fn a_file_of_max_attachment_bytes_arrives_whole_whatever_the_other_limits() {
    // Its line (the base64 of 10 MiB) is far longer than a call's arguments or the output may be.
    let Some(ptc) = ptc("  max_tool_result_bytes: 100000\n  max_output_bytes: 1000\n").await else { return };
    let code = "open('big.csv', 'w').write('0123456789abcde\\n' * (10 << 16))\nattach('big.csv')";
    let started = Instant::now();
    let run = ptc.execute(code).await;
    eprintln!("a 10 MiB file attached in {:?}", started.elapsed());
    run.expect_ok();
    let [ResourceContents::TextResourceContents { text, .. }] = &resources(&run)[..] else { panic!("{}", run.text()) };
    assert!(text.len() == 10 << 20 && text.starts_with("0123456789abcde\n0123"), "{} bytes", text.len());
}
