//! The book's Install page (`docs/book/src/operations/install.md`), followed as
//! written: every `tether` and `kubectl` command of the shell blocks of its sections
//! "Install the daemon" and "Next" runs, in order, against an empty control plane of
//! its own, and must succeed. (`cargo install` is not run here: the image test builds
//! the release binary; the commands run the binary under test.)

use std::path::Path;
use std::process::Command;

use tether_testkit::cluster::{LocalCluster, reader_path};
use tether_testkit::remote::Remote;

/// The command lines of the shell blocks of the page's `## {title}` sections, in
/// order, without their comments.
fn section_commands(page: &str, titles: &[&str]) -> Vec<String> {
    let mut commands = Vec::new();
    for title in titles {
        let start = page
            .find(&format!("\n## {title}\n"))
            .unwrap_or_else(|| panic!("the page has a section {title:?}"));
        let section = &page[start + 1..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
        let mut in_shell = false;
        for line in section.lines() {
            match line.trim() {
                "```sh" => in_shell = true,
                "```" => in_shell = false,
                command if in_shell && !command.is_empty() => {
                    let command = command.split(" #").next().unwrap_or_default().trim();
                    commands.push(command.to_string());
                }
                _ => {}
            }
        }
    }
    commands
}

#[test]
fn the_install_page_runs_as_written_on_an_empty_cluster() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = tether_testkit::book::page(root, "operations/install.md");
    let commands = section_commands(&page, &["Install the daemon", "Next"]);
    let run: Vec<&String> = commands
        .iter()
        .filter(|c| c.starts_with("tether ") || c.starts_with("kubectl "))
        .collect();
    assert!(
        run.iter().any(|c| c.as_str() == "tether install"),
        "the Install page installs: {commands:?}"
    );

    let cluster = LocalCluster::start(1);
    let work = tempfile::tempdir().unwrap();
    let path = reader_path(Path::new(env!("CARGO_BIN_EXE_tether")));
    // What the reader brings: a namespace and the Source the section applies.
    let remote = Remote::new(&[(
        "web.yaml",
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: team-a\n",
    )]);
    std::fs::write(
        work.path().join("source.yaml"),
        format!(
            "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata: {{name: web, namespace: team-a}}\nspec:\n  url: {}\n  path: models\n",
            remote.url
        ),
    )
    .unwrap();
    let shell = |command: &str| {
        Command::new("sh")
            .args(["-c", command])
            .current_dir(work.path())
            .env("PATH", &path)
            .env("KUBECONFIG", cluster.kubeconfig())
            .output()
            .unwrap()
    };
    let made = shell("kubectl create namespace team-a");
    assert!(made.status.success());
    for command in run {
        // The daemon's pods are ready once the simulated node has started them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let out = loop {
            let out = shell(command);
            if out.status.success()
                || std::time::Instant::now() > deadline
                || command != "tether check"
            {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        assert!(
            out.status.success(),
            "the Install page's `{command}` failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
