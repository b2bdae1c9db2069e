//! The `git` CLI, as the second, independent Git client of the tests.

use std::path::Path;
use std::process::Command;

/// Runs `git` in `dir` with a fixed identity and default branch; returns its output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = try_git(dir, args);
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Runs `git` in `dir` as [`git`] does, and returns how it ended.
pub fn try_git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.org",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}
