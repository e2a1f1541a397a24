//! `show()`: a program attaches the images and audio of tool results to its `execute_program` result, after
//! the text, within `max_attachments` and `max_attachment_bytes`. Without it nothing changes.

use rmcp::model::ContentBlock;
use serde_json::json;

use crate::common::*;

async fn ptc_with_media(execution: &str) -> Ptc {
    Ptc::start(&config(&[mock_server("mock", &["--media"])], execution)).await
}

/// The mock's base64 of `size` bytes: what its media tool sends for an image or an audio block.
fn blob(size: usize) -> String {
    "A".repeat(size / 4 * 4)
}

#[apply(integration_test!)]
async fn without_show_the_result_is_text_only_and_placeholders_keep_their_words() {
    let ptc = ptc_with_media("").await;
    let run = ptc.execute("r = await mcp__mock__media(n=1)\nprint(r)").await;
    assert_eq!(run.kinds(), ["text"]);
    assert_eq!(
        without_call_time(&run.expect_ok()),
        "[Script executed successfully]\n{'result': 'media #1', '_notes': ['[non-text content omitted: image \
         (image/png)]', '[non-text content omitted: audio (audio/wav)]']}\n[tool calls: 1; Ts]"
    );
}

#[apply(integration_test!)]
async fn show_attaches_a_results_images_and_audio_after_the_text() {
    let ptc = ptc_with_media("").await;
    let run = ptc.execute("r = await mcp__mock__media(n=1, size=8)\nshow(r)\nprint('shown')").await;
    run.expect_ok();
    assert_eq!(run.kinds(), ["text", "image image/png 8", "audio audio/wav 8"]);
    let ContentBlock::Image(image) = &run.0.content[1] else { unreachable!() };
    assert_eq!(image.data, blob(8));
    assert_eq!(run.structured()["output"], json!("shown\n"));
}

#[apply(integration_test!)]
async fn a_placeholder_shows_only_its_own_block_and_a_failed_run_keeps_what_was_shown() {
    let ptc = ptc_with_media("").await;
    let code = "a = await mcp__mock__media(n=1)\nb = await mcp__mock__media(n=2, size=12)\nshow(b['_notes'][1])\n\
                show(a['_notes'][0])\nraise RuntimeError('after showing')";
    let run = ptc.execute(code).await;
    assert!(run.expect_error().contains("RuntimeError: after showing"));
    assert_eq!(run.kinds(), ["text", "audio audio/wav 12", "image image/png 8"]);
}

#[apply(integration_test!)]
async fn the_count_and_the_size_are_bounded_and_show_says_what_was_left_out() {
    let ptc = ptc_with_media("  max_attachments: 1\n  max_attachment_bytes: 100\n").await;
    let code = "r = await mcp__mock__media(size=40)\nshow(r)\nbig = await mcp__mock__media(size=400)\nshow(big)";
    let run = ptc.execute(code).await;
    run.expect_ok();
    assert_eq!(run.kinds(), ["text", "image image/png 40"]);
    assert_eq!(
        run.structured()["output"],
        json!(
            "[show(): left out audio (audio/wav): max_attachments (1) already attached]\n\
             [show(): left out image (image/png): 400 bytes, more than max_attachment_bytes (100); audio (audio/wav): \
             400 bytes, more than max_attachment_bytes (100)]\n"
        )
    );
}

#[apply(integration_test!)]
async fn show_refuses_what_carries_no_image_or_audio() {
    let ptc = ptc_with_media("").await;
    let run = ptc.execute("r = await mcp__mock__echo(x=1)\nshow(r)").await;
    assert!(
        run.expect_error().contains(
            "ValueError: show() takes a tool result that carries images or audio, or one of its \
             '[non-text content omitted: ...]' placeholders; got dict"
        ),
        "{}",
        run.text()
    );
}
