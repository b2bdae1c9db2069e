//! How a benchmark runs: measuring (`cargo bench --bench NAME`, which passes
//! `--bench`), or as a smoke run (`cargo test --bench NAME`, and so in `cargo test`):
//! the same steps at a small size, to show it still runs and prints its table. A smoke
//! run asserts nothing about speed.

/// Whether this is a smoke run: the binary was not started by `cargo bench`.
pub fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// `full` when measuring, `small` in a smoke run.
pub fn size<T>(full: T, small: T) -> T {
    if smoke() { small } else { full }
}

/// The number after `name` on the command line (`cargo bench -- --pods 500`), else
/// `full` when measuring and `small` in a smoke run.
pub fn arg(name: &str, full: usize, small: usize) -> usize {
    given(name).unwrap_or_else(|| size(full, small))
}

/// The number after `name` on the command line, if there is one.
pub fn given(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}
