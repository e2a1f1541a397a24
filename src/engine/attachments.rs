//! What `show()` and `attach()` attach to a run's result. The run keeps the image and audio blocks of its
//! calls' results — the latest ones, within `max_attachment_bytes` — and attaches those the program shows, and
//! the files it attaches, at most `max_attachments` of them and `max_attachment_bytes` in all, in the order
//! asked. Whatever the program sends, what is kept and attached stays within those bounds.

use std::collections::{BTreeMap, BTreeSet};

use rmcp::model::ContentBlock;
use serde_json::{Value, json};

use super::files::{File, FileError};
use crate::registry::result::Media;

/// A `show()` request that names what the run never had: only a forged one does.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShowError {
    #[error("show(): call {0} returned no image or audio")]
    NoMedia(u64),
    #[error("show(): call {call} has no block {index}")]
    NoBlock { call: u64, index: usize },
}

/// One kept block, or why it is not kept.
enum Kept {
    Block(Box<Media>),
    /// Larger than `max_attachment_bytes` on its own.
    TooLarge {
        what: String,
        bytes: usize,
    },
    /// Left out to keep a later result's blocks.
    Dropped {
        what: String,
    },
    Attached,
}

pub struct Attachments {
    max_count: usize,
    max_bytes: usize,
    /// By call id, in the order the calls finished being kept.
    kept: BTreeMap<u64, Vec<Kept>>,
    /// Calls in the order their blocks were kept (oldest first), for making room.
    order: Vec<u64>,
    kept_bytes: usize,
    attached: Vec<ContentBlock>,
    attached_bytes: usize,
    /// The files among them, in words.
    files: Vec<String>,
}

impl Attachments {
    pub fn new(max_count: usize, max_bytes: usize) -> Self {
        Attachments {
            max_count,
            max_bytes,
            kept: BTreeMap::new(),
            order: Vec::new(),
            kept_bytes: 0,
            attached: Vec::new(),
            attached_bytes: 0,
            files: Vec::new(),
        }
    }

    /// Keeps the blocks of call `call`'s result, making room by dropping those of older calls; returns
    /// their placeholders, for the runner.
    pub fn keep(&mut self, call: u64, media: Vec<Media>) -> Vec<String> {
        let placeholders = media.iter().map(Media::placeholder).collect();
        let mut kept = Vec::with_capacity(media.len());
        for block in media {
            let bytes = block.bytes();
            if bytes > self.max_bytes {
                kept.push(Kept::TooLarge { what: block.what, bytes });
                continue;
            }
            while self.kept_bytes + bytes > self.max_bytes && self.drop_oldest() {}
            if self.kept_bytes + bytes > self.max_bytes {
                // This result's own earlier blocks fill the room.
                kept.push(Kept::Dropped { what: block.what });
                continue;
            }
            self.kept_bytes += bytes;
            kept.push(Kept::Block(Box::new(block)));
        }
        self.kept.insert(call, kept);
        self.order.push(call);
        placeholders
    }

    /// Drops the kept blocks of the oldest call that has any; false when there is none.
    fn drop_oldest(&mut self) -> bool {
        for call in &self.order {
            let Some(blocks) = self.kept.get_mut(call) else { continue };
            let mut freed = 0;
            for kept in blocks.iter_mut() {
                if let Kept::Block(media) = kept {
                    freed += media.bytes();
                    *kept = Kept::Dropped { what: media.what.clone() };
                }
            }
            if freed > 0 {
                self.kept_bytes -= freed;
                return true;
            }
        }
        false
    }

    /// `show()`: attaches blocks `blocks` of call `call`'s result. The answer for the program says what
    /// was left out and why: `{"attached": N, "left_out": "..." | null}`.
    pub fn show(&mut self, call: u64, blocks: &[usize]) -> Result<Value, ShowError> {
        let Some(kept) = self.kept.get_mut(&call) else {
            return Err(ShowError::NoMedia(call));
        };
        // The protocol reads at most 1024 indices (BlockIndices); the same one twice is attached once.
        let wanted: BTreeSet<usize> = blocks.iter().copied().collect();
        let (mut attached, mut left_out) = (0, Vec::new());
        for index in wanted {
            let Some(slot) = kept.get_mut(index) else {
                return Err(ShowError::NoBlock { call, index });
            };
            match slot {
                Kept::Attached => {}
                Kept::TooLarge { what, bytes } => {
                    left_out.push(format!("{what}: {bytes} bytes, more than max_attachment_bytes ({})", self.max_bytes))
                }
                Kept::Dropped { what } => left_out.push(format!(
                    "{what}: no longer kept, later results' images and audio took the room (max_attachment_bytes)"
                )),
                Kept::Block(media) if self.attached.len() >= self.max_count => {
                    left_out.push(format!("{}: max_attachments ({}) already attached", media.what, self.max_count));
                }
                Kept::Block(media) if self.attached_bytes + media.bytes() > self.max_bytes => left_out.push(format!(
                    "{}: the attachments would pass max_attachment_bytes ({})",
                    media.what, self.max_bytes
                )),
                Kept::Block(_) => {
                    let Kept::Block(media) = std::mem::replace(slot, Kept::Attached) else { unreachable!() };
                    self.kept_bytes -= media.bytes();
                    self.attached_bytes += media.bytes();
                    self.attached.push(media.block);
                    attached += 1;
                }
            }
        }
        let left_out = (!left_out.is_empty()).then(|| left_out.join("; "));
        Ok(json!({"attached": attached, "left_out": left_out}))
    }

    /// `attach()`: attaches file `file` from its bytes in base64, `data` (`None` when the program found it
    /// larger than `max_attachment_bytes`: `size` bytes). The answer is `show()`'s.
    pub fn attach(&mut self, file: File, size: u64, data: Option<String>) -> Result<Value, FileError> {
        let what = file.what();
        let max_bytes = self.max_bytes;
        let left_out = match data {
            None if size > max_bytes as u64 => {
                Some(format!("{what}: {size} bytes, more than max_attachment_bytes ({max_bytes})"))
            }
            None => return Err(FileError::NoData(size)),
            Some(_) if self.attached.len() >= self.max_count => {
                Some(format!("{what}: max_attachments ({}) already attached", self.max_count))
            }
            Some(data) => {
                let resource = file.resource(data)?;
                let (bytes, counted) = (resource.bytes, if resource.base64 { " of base64" } else { "" });
                if bytes > max_bytes {
                    Some(format!("{what}: {bytes} bytes{counted}, more than max_attachment_bytes ({max_bytes})"))
                } else if self.attached_bytes + resource.bytes > max_bytes {
                    Some(format!("{what}: the attachments would pass max_attachment_bytes ({max_bytes})"))
                } else {
                    self.attached_bytes += resource.bytes;
                    self.attached.push(resource.block);
                    self.files.push(what);
                    None
                }
            }
        };
        Ok(json!({"attached": usize::from(left_out.is_none()), "left_out": left_out}))
    }

    /// The attached blocks, in the order they were shown or attached, and the files among them in words.
    pub fn into_parts(self) -> (Vec<ContentBlock>, Vec<String>) {
        (self.attached, self.files)
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    fn image(bytes: usize) -> Media {
        Media { what: "image (image/png)".into(), block: ContentBlock::image("x".repeat(bytes), "image/png") }
    }

    #[test]
    fn shown_blocks_are_attached_once_in_order() {
        let mut attachments = Attachments::new(4, 100);
        let audio = Media { what: "audio (audio/wav)".into(), block: ContentBlock::audio("AAAA", "audio/wav") };
        assert_eq!(
            attachments.keep(1, vec![image(10), audio.clone()]),
            ["[non-text content omitted: image (image/png)]", "[non-text content omitted: audio (audio/wav)]"]
        );
        assert_eq!(attachments.show(1, &[1]), Ok(json!({"attached": 1, "left_out": null})));
        assert_eq!(attachments.show(1, &[0, 1, 1]), Ok(json!({"attached": 1, "left_out": null})));
        assert_eq!(attachments.into_parts().0, [audio.block, image(10).block]);
    }

    #[test]
    fn the_count_and_the_size_are_bounded_and_show_says_what_was_left_out() {
        let mut attachments = Attachments::new(2, 100);
        attachments.keep(1, vec![image(40), image(40), image(10), image(101)]);
        assert_eq!(
            attachments.show(1, &[0, 1, 2, 3]),
            Ok(json!({"attached": 2, "left_out": "image (image/png): max_attachments (2) already attached; \
                image (image/png): 101 bytes, more than max_attachment_bytes (100)"}))
        );
        let mut attachments = Attachments::new(4, 100);
        attachments.keep(1, vec![image(60)]);
        attachments.keep(2, vec![image(30)]);
        attachments.show(1, &[0]).unwrap();
        attachments.keep(3, vec![image(60)]);
        assert_eq!(
            attachments.show(3, &[0]),
            Ok(
                json!({"attached": 0, "left_out": "image (image/png): the attachments would pass max_attachment_bytes (100)"})
            )
        );
        assert_eq!(attachments.show(2, &[0]), Ok(json!({"attached": 1, "left_out": null})));
    }

    #[test]
    fn older_blocks_make_room_for_newer_ones() {
        let mut attachments = Attachments::new(4, 100);
        attachments.keep(1, vec![image(60)]);
        attachments.keep(2, vec![image(60)]);
        assert_eq!(
            attachments.show(1, &[0]),
            Ok(json!({"attached": 0, "left_out": "image (image/png): no longer kept, later results' images and audio \
                took the room (max_attachment_bytes)"}))
        );
        assert_eq!(attachments.show(2, &[0]), Ok(json!({"attached": 1, "left_out": null})));
        assert!(attachments.kept_bytes == 0 && attachments.attached_bytes == 60);
    }

    fn csv(path: &str) -> File {
        File::new(path.into(), "text/csv".into()).unwrap()
    }

    fn mime_type(path: &str) -> &'static str {
        if path.ends_with(".csv") { "text/csv" } else { "application/octet-stream" }
    }

    #[test]
    fn files_share_the_bounds_with_shown_blocks_in_the_order_asked() {
        let mut attachments = Attachments::new(3, 100);
        let mut attach = |path: &str, size: u64, data: Option<String>| {
            let file = File::new(path.into(), mime_type(path).into()).unwrap();
            attachments.attach(file, size, data).unwrap()["left_out"].as_str().map(str::to_string)
        };
        assert_eq!(attach("a.csv", 50, Some(STANDARD.encode("x".repeat(50)))), None);
        let pass = "the attachments would pass max_attachment_bytes (100)";
        assert_eq!(
            attach("b.csv", 60, Some(STANDARD.encode("y".repeat(60)))),
            Some(format!("file b.csv (text/csv): {pass}"))
        );
        assert_eq!(
            attach("c.bin", 90, Some("A".repeat(120))),
            Some(
                "file c.bin (application/octet-stream): 120 bytes of base64, more than max_attachment_bytes (100)"
                    .into()
            )
        );
        assert_eq!(
            attach("d.csv", 500, None),
            Some("file d.csv (text/csv): 500 bytes, more than max_attachment_bytes (100)".into())
        );
        assert_eq!(attach("e.csv", 3, Some("eg==".into())), None);
        attachments.keep(1, vec![image(60)]);
        assert_eq!(
            attachments.show(1, &[0]),
            Ok(json!({"attached": 0, "left_out": format!("image (image/png): {pass}")}))
        );
        attachments.keep(2, vec![image(4)]);
        attachments.show(2, &[0]).unwrap();
        let full = attachments.attach(csv("f.csv"), 0, Some(String::new())).unwrap();
        assert_eq!(
            full,
            json!({"attached": 0, "left_out": "file f.csv (text/csv): max_attachments (3) already attached"})
        );
        let (blocks, files) = attachments.into_parts();
        assert_eq!(blocks.len(), 3);
        assert_eq!(files, ["file a.csv (text/csv)", "file e.csv (text/csv)"]);
    }

    #[test]
    fn forged_requests_are_refused() {
        let mut attachments = Attachments::new(4, 100);
        attachments.keep(1, vec![image(1)]);
        assert_eq!(attachments.show(9, &[0]), Err(ShowError::NoMedia(9)));
        assert_eq!(attachments.show(9, &[0]).unwrap_err().to_string(), "show(): call 9 returned no image or audio");
        assert_eq!(attachments.show(1, &[5]), Err(ShowError::NoBlock { call: 1, index: 5 }));
        assert_eq!(attachments.show(1, &[5]).unwrap_err().to_string(), "show(): call 1 has no block 5");
        assert_eq!(attachments.attach(csv("a.csv"), 5, None), Err(FileError::NoData(5)));
        assert_eq!(attachments.attach(csv("a.csv"), 5, Some("%%".into())), Err(FileError::Data));
    }
}
