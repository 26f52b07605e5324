//! Types shared by every tunefleet component: the wire protocol, the workload
//! format and targets. Compiled for the native master and worker and for the
//! wasm32 web app, so it must stay free of I/O, threads and clocks.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

// So that `#[derive(FromTree)]` output (paths `::tunefleet_shared::tree`) also
// compiles inside this crate.
#[cfg(feature = "tree")]
extern crate self as tunefleet_shared;

pub mod cpus;
pub mod device;
pub mod export;
pub mod fleet;
pub mod import;
pub mod lorien;
pub mod model;
pub mod onnx;
pub mod protocol;
pub mod target;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(feature = "tree")]
pub mod tree;
pub mod workload;
mod yaml_tree;

/// The master URLs in a `--server` value: `ws://A,ws://B` names a leader and
/// its standby (in any order); workers, the CLI and the page try them in turn
/// and stay with whichever answers. Blanks are ignored.
pub fn server_urls(text: &str) -> Vec<&str> {
    text.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect()
}

/// Constant-time comparison for secrets and tokens: the time taken does not
/// depend on where the first differing byte is.
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= x ^ y;
    }
    diff == 0
}
