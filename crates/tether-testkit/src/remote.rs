//! A Git remote served by `git daemon` (pushed to with the `git` CLI), or over Git's
//! smart HTTP, and a plain HTTP client: what the daemon's tests and benchmarks share.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::git::{git, try_git};

/// A bare repository served by `git daemon`, and a work tree that pushes to it.
pub struct Remote {
    dir: tempfile::TempDir,
    _daemon: GitDaemon,
    pub url: String,
    log: PathBuf,
}

/// `git daemon` serving the repositories below a directory, read and push; stopped
/// when dropped.
pub struct GitDaemon {
    _process: KillOnDrop,
    pub port: u16,
}

impl GitDaemon {
    /// Serves `base` on loopback once it listens; its log (`--verbose`) goes to `log`.
    pub fn serve(base: &Path, log: &Path) -> GitDaemon {
        GitDaemon::serve_on(base, log, "127.0.0.1")
    }

    /// Serves `base` on `host` (an address of this machine: the real node's bridge,
    /// where its pods reach it) once it listens.
    pub fn serve_on(base: &Path, log: &Path, host: &str) -> GitDaemon {
        let port = free_port();
        // git-daemon itself, not `git daemon`: killing the `git` wrapper would leave
        // its git-daemon child running, holding the test run's output open.
        let exec_path = Command::new("git").arg("--exec-path").output().unwrap();
        let exec_path = PathBuf::from(String::from_utf8(exec_path.stdout).unwrap().trim());
        let process = Command::new(exec_path.join("git-daemon"))
            // Pushes too: discovery commits back to the remote.
            .args(["--export-all", "--reuseaddr", "--verbose"])
            .arg("--enable=receive-pack")
            .arg(format!("--base-path={}", base.display()))
            .arg(format!("--port={port}"))
            .arg(format!("--listen={host}"))
            .arg(base)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let daemon = GitDaemon {
            _process: KillOnDrop(process),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((host, port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        daemon
    }
}

/// Writes `files` (paths relative to `models/`, their directories made as needed).
fn write_models(work: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let path = work.join("models").join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }
}

/// Files made as owned strings, as [`Remote::new`] and [`Remote::push`] take them.
pub fn borrowed(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect()
}

impl Remote {
    /// `models/` on `main` holds `files`.
    pub fn new(files: &[(&str, &str)]) -> Remote {
        Remote::new_on("127.0.0.1", files)
    }

    /// A remote served on `host` (see [`GitDaemon::serve_on`]).
    pub fn new_on(host: &str, files: &[(&str, &str)]) -> Remote {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join("models")).unwrap();
        git(&work, &["init", "-q"]);
        write_models(&work, files);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "models"]);
        git(dir.path(), &["clone", "-q", "--bare", "work", "remote.git"]);
        git(&work, &["remote", "add", "origin", "../remote.git"]);
        let log = dir.path().join("git-daemon.log");
        let daemon = GitDaemon::serve_on(dir.path(), &log, host);
        Remote {
            url: format!("git://{host}:{}/remote.git", daemon.port),
            _daemon: daemon,
            dir,
            log,
        }
    }

    /// The same repository over Git's smart HTTP protocol (Flux's source-controller
    /// reaches Git only over HTTP(S) or SSH).
    pub fn serve_http(&self) -> crate::git_http::GitHttp {
        crate::git_http::GitHttp::serve(self.dir.path(), "remote.git")
    }

    /// Removes `name` from the models on `branch` and pushes; returns the commit.
    pub fn remove(&self, branch: &str, name: &str) -> String {
        let work = self.work();
        git(&work, &["fetch", "-q", "origin"]);
        git(
            &work,
            &["checkout", "-q", "-B", branch, &format!("origin/{branch}")],
        );
        git(&work, &["rm", "-q", &format!("models/{name}")]);
        git(&work, &["commit", "-qm", "remove"]);
        git(&work, &["push", "-q", "origin", branch]);
        git(&work, &["rev-parse", "HEAD"])
    }

    /// The same repository as a `file://` URL, which also takes pushes.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.bare().display())
    }

    /// The bare repository.
    pub fn bare(&self) -> PathBuf {
        self.dir.path().join("remote.git")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Commits `files` (on `branch`, on top of what the remote has, as others may
    /// push there too) and pushes; returns the commit.
    pub fn push(&self, branch: &str, files: &[(&str, &str)]) -> String {
        self.push_commit(branch, files, &[])
    }

    /// [`Remote::push`], the commit signed by git with the SSH private key `key`
    /// (`gpg.format=ssh`).
    pub fn push_signed(&self, branch: &str, files: &[(&str, &str)], key: &Path) -> String {
        let signing = format!("user.signingkey={}", key.display());
        self.push_commit(
            branch,
            files,
            &["-c", "gpg.format=ssh", "-c", &signing, "commit", "-S"],
        )
    }

    /// Commits `files` with `commit` (git's options and `commit` with its own; plain
    /// `commit` when empty) on `branch`, and pushes; returns the commit.
    fn push_commit(&self, branch: &str, files: &[(&str, &str)], commit: &[&str]) -> String {
        let work = self.work();
        git(&work, &["fetch", "-q", "origin"]);
        let upstream = format!("origin/{branch}");
        let exists = Command::new("git")
            .args(["rev-parse", "--verify", "-q", &upstream])
            .current_dir(&work)
            .output()
            .is_ok_and(|o| o.status.success());
        match exists {
            true => git(&work, &["checkout", "-q", "-B", branch, &upstream]),
            false => git(&work, &["checkout", "-q", "-B", branch]),
        };
        write_models(&work, files);
        git(&work, &["add", "-A"]);
        let commit = match commit.is_empty() {
            true => vec!["commit", "-qm", "change"],
            false => [commit, &["-qm", "change"]].concat(),
        };
        git(&work, &commit);
        // The daemon under test pushes to the remote too (discovery's commits): a
        // push it beat is rebased on its commit and pushed again, as a user would.
        let mut rejected = 0;
        while !try_git(&work, &["push", "-q", "origin", branch])
            .status
            .success()
        {
            rejected += 1;
            assert!(
                rejected < 5,
                "the push to {branch} was rejected {rejected} times"
            );
            git(&work, &["pull", "-q", "--rebase", "origin", branch]);
        }
        let head = git(&work, &["rev-parse", "HEAD"]);
        git(&work, &["checkout", "-q", "main"]);
        head
    }

    /// Moves `branch` to `commit` with a force-push, as someone rewriting history
    /// does (`git push --force`).
    pub fn force_push(&self, branch: &str, commit: &str) {
        let work = self.work();
        git(&work, &["fetch", "-q", "origin"]);
        git(
            &work,
            &[
                "push",
                "-q",
                "--force",
                "origin",
                &format!("{commit}:refs/heads/{branch}"),
            ],
        );
    }

    /// How many files the bare repository's `branch` holds below `directory`.
    pub fn files_of_bare(&self, branch: &str, directory: &str) -> usize {
        Command::new("git")
            .args(["ls-tree", "-r", "--name-only", branch, directory])
            .current_dir(self.bare())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
            .unwrap_or(0)
    }

    /// The commit `branch` names in the bare repository (which others push to).
    pub fn head_of_bare(&self, branch: &str) -> String {
        git(&self.bare(), &["rev-parse", branch])
    }

    pub fn head(&self, branch: &str) -> String {
        git(&self.work(), &["rev-parse", branch])
    }

    /// How many fetches and ref listings `git daemon` served (its readiness check, a
    /// bare connection, is not one).
    pub fn fetches(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("Request upload-pack")
            .count()
    }

    /// How many connections `git daemon` served (each fetch or ref listing is one).
    pub fn connections(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("Connection from")
            .count()
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A plain HTTP/1.1 request; returns the status and the body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    // A server may answer (413) before reading all of a large body.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    status_and_body(&String::from_utf8_lossy(&response))
}

/// An HTTP response's status and body (read to its end, not chunked).
pub(crate) fn status_and_body(response: &str) -> (u16, String) {
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_served_over_http_is_cloned_and_fetched_by_the_git_cli() {
        let remote = Remote::new(&[("a/m.yaml", "kind: TrustDomain\nname: a\n")]);
        let http = remote.serve_http();
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["clone", "-q", &http.url, "clone"]);
        let clone = dir.path().join("clone");
        assert_eq!(
            std::fs::read_to_string(clone.join("models/a/m.yaml")).unwrap(),
            "kind: TrustDomain\nname: a\n"
        );
        let pushed = remote.push("main", &[("b/m.yaml", "kind: TrustDomain\nname: b\n")]);
        git(&clone, &["pull", "-q"]);
        assert_eq!(git(&clone, &["rev-parse", "HEAD"]), pushed);
        let unknown = try_git(dir.path(), &["ls-remote", &format!("{}x", http.url)]);
        assert!(!unknown.status.success(), "a repository that is not there");
    }
}
