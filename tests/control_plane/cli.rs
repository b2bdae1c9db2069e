//! tether and kubectl against one control plane, as the tests of this binary run them.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tether_testkit::cluster::binaries;

pub(crate) struct Cli<'a> {
    pub(crate) kubeconfig: &'a Path,
}

impl Cli<'_> {
    pub(crate) fn tether(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(args)
            .env("KUBECONFIG", self.kubeconfig)
            .env("TETHER_COLOR", "never")
            .output()
            .unwrap()
    }

    /// tether's standard output; it must exit 0.
    pub(crate) fn tether_ok(&self, args: &[&str]) -> String {
        let out = self.tether(args);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "tether {args:?}: {stdout}{}",
            text(&out.stderr)
        );
        stdout
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(binaries().join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args(args)
            .output()
            .unwrap()
    }

    /// kubectl's standard output; it must succeed.
    pub(crate) fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl get ARGS -o json`.
    pub(crate) fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&all)).unwrap()
    }

    /// Polls `done` every 200 ms; panics with `what` after `timeout`.
    pub(crate) fn eventually(&self, what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !done() {
            assert!(Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls `read` every 200 ms until it gives `want`; panics with `what` and the last
    /// value read after `timeout`.
    pub(crate) fn eventually_eq<T: PartialEq + std::fmt::Debug>(
        &self,
        what: &str,
        timeout: Duration,
        want: &T,
        mut read: impl FnMut() -> T,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let last = read();
            if last == *want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out: {what}: {last:?}, not {want:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
