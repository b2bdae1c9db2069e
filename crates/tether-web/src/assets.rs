//! The page's stylesheet and script, built into the binary (no CDN, no build step).

pub const STYLE: &str = include_str!("../assets/tether.css");
pub const SCRIPT: &str = include_str!("../assets/tether.js");
