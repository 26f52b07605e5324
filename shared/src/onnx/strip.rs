//! Stripping weights: large initializers' data removed, the length
//! prefixes around them rewritten, every other byte copied.

use super::read::read_tensor;
use super::wire::{malformed, Field, Payload, Reader, TENSOR_DATA_FIELDS, TENSOR_EXTERNAL_FIELDS};
use super::{is_floating, shown, OnnxError, StripReport};

/// A change to the model: the bytes `start..end` (offsets in the model) are
/// dropped, or replaced by a new length prefix.
#[derive(Debug)]
pub(super) struct Edit {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) new_len: Option<u64>,
}

/// Collects the edits that strip a model: dropped tensor data fields, and new
/// length prefixes for every message around them. Working on offsets keeps the
/// output a single copy of the input, however deep the nesting.
pub(super) struct Stripper<'r> {
    pub(super) min_elements: u64,
    pub(super) report: &'r mut StripReport,
    pub(super) edits: &'r mut Vec<Edit>,
}

impl Stripper<'_> {
    pub(super) fn model(&mut self, data: &[u8]) -> Result<(), OnnxError> {
        let mut reader = Reader::new(data, 0, "ModelProto");
        while let Some(f) = reader.next()? {
            if let (7, Payload::Len(b)) = (f.number, f.payload) {
                let removed = self.graph(b, f.payload_at, 0)?;
                self.shrink(&f, removed);
            }
        }
        Ok(())
    }

    /// After `removed` bytes were cut from the payload of `f`, rewrites its
    /// length prefix; returns how many bytes `f` lost in all.
    pub(super) fn shrink(&mut self, f: &Field<'_>, removed: u64) -> u64 {
        let Payload::Len(body) = f.payload else {
            return 0;
        };
        if removed == 0 {
            return 0;
        }
        let new_len = (body.len() as u64).saturating_sub(removed);
        let prefix_start = f.at + f.tag_len;
        let old_prefix = f.payload_at.saturating_sub(prefix_start) as u64;
        self.edits.push(Edit {
            start: prefix_start,
            end: f.payload_at,
            new_len: Some(new_len),
        });
        removed + old_prefix.saturating_sub(varint_len(new_len))
    }

    pub(super) fn graph(&mut self, data: &[u8], at: usize, depth: usize) -> Result<u64, OnnxError> {
        let mut removed = 0;
        let mut reader = Reader::new(data, at, "GraphProto");
        while let Some(f) = reader.next()? {
            let inner = match (f.number, f.payload) {
                (1, Payload::Len(b)) => self.node(b, f.payload_at, depth)?,
                (5, Payload::Len(b)) => self.tensor(b, f.payload_at)?,
                _ => continue,
            };
            removed += self.shrink(&f, inner);
        }
        Ok(removed)
    }

    pub(super) fn node(&mut self, data: &[u8], at: usize, depth: usize) -> Result<u64, OnnxError> {
        let mut removed = 0;
        let mut reader = Reader::new(data, at, "NodeProto");
        while let Some(f) = reader.next()? {
            if let (5, Payload::Len(b)) = (f.number, f.payload) {
                let inner = self.attribute(b, f.payload_at, depth)?;
                removed += self.shrink(&f, inner);
            }
        }
        Ok(removed)
    }

    pub(super) fn attribute(
        &mut self,
        data: &[u8],
        at: usize,
        depth: usize,
    ) -> Result<u64, OnnxError> {
        let mut removed = 0;
        let mut reader = Reader::new(data, at, "AttributeProto");
        while let Some(f) = reader.next()? {
            if let (6 | 11, Payload::Len(b)) = (f.number, f.payload) {
                // Depth was checked when the model was summarized.
                let inner = self.graph(b, f.payload_at, depth + 1)?;
                removed += self.shrink(&f, inner);
            }
        }
        Ok(removed)
    }

    pub(super) fn tensor(&mut self, data: &[u8], at: usize) -> Result<u64, OnnxError> {
        let info = read_tensor(data, at)?;
        if !(is_floating(info.data_type) && info.elements > self.min_elements) {
            if let Some(location) = info.external {
                return Err(OnnxError::ExternalData {
                    name: shown(&info.name),
                    location: shown(&location),
                });
            }
            return Ok(0);
        }
        let (mut removed, mut data_removed) = (0u64, 0u64);
        let mut reader = Reader::new(data, at, "TensorProto");
        while let Some(f) = reader.next()? {
            let is_data = TENSOR_DATA_FIELDS.contains(&f.number);
            if is_data || TENSOR_EXTERNAL_FIELDS.contains(&f.number) {
                self.edits.push(Edit {
                    start: f.at,
                    end: f.at + f.raw.len(),
                    new_len: None,
                });
                removed += f.raw.len() as u64;
                if is_data {
                    data_removed += f.payload_len();
                }
            }
        }
        if removed > 0 {
            self.report.tensors += 1;
            self.report.bytes_removed += data_removed;
        }
        Ok(removed)
    }
}

pub(super) fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub(super) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Copies `bytes` with the edits applied.
pub(super) fn apply_edits(bytes: &[u8], edits: &mut [Edit]) -> Result<Vec<u8>, OnnxError> {
    edits.sort_by_key(|e| e.start);
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    for edit in edits.iter() {
        let Some(kept) = bytes.get(pos..edit.start) else {
            // Edits come from disjoint fields, so this cannot happen; refuse
            // rather than write a corrupt model if it ever does.
            return Err(malformed(
                edit.start,
                "overlapping edits while stripping (a bug)".to_string(),
            ));
        };
        out.extend_from_slice(kept);
        if let Some(n) = edit.new_len {
            write_varint(&mut out, n);
        }
        pos = edit.end;
    }
    out.extend_from_slice(bytes.get(pos..).unwrap_or_default());
    Ok(out)
}
