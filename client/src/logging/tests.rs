use super::*;
use tracing::Level;

#[test]
fn frames_stay_at_debug_and_nothing_is_widened() {
    // The default: nothing above `info` anywhere, so the hint stays `info`.
    let guard = frame_guard(Some(LevelFilter::INFO));
    assert_eq!(guard.default_level(), Some(LevelFilter::INFO));
    assert!(guard.would_enable("tunefleet_server", &Level::INFO));
    assert!(!guard.would_enable("tunefleet_server", &Level::DEBUG));
    assert!(!guard.would_enable("tungstenite::protocol", &Level::DEBUG));
    // `RUST_LOG=trace`: everything but the frames.
    let guard = frame_guard(Some(LevelFilter::TRACE));
    assert!(guard.would_enable("tunefleet_server", &Level::TRACE));
    assert!(guard.would_enable("tungstenite::protocol", &Level::DEBUG));
    assert!(!guard.would_enable("tungstenite::protocol", &Level::TRACE));
    assert!(!guard.would_enable("tokio_tungstenite", &Level::TRACE));
}
