//! Image automation end to end, without a cluster: `tether images` against a real
//! registry (Debian's docker-registry, images pushed and removed by skopeo, a second
//! client) and a `git daemon` remote, read back with the `git` CLI. What a user checks:
//! the commit made (one, changing only the tag, saying why), none when nothing is
//! newer, never a lower tag (a tag removed, a kill -9 at any moment), and a clear
//! error with nothing committed when the registry is down, refuses the credentials or
//! lists more tags than the policy allows.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use chrono::Utc;
use tether_testkit::git::git;
use tether_testkit::registry::Registry;
use tether_testkit::remote::Remote;

use crate::cli::{tether, text};

/// The models: an Image of `host/shop/app` at `tag`, a Slice running it by
/// reference, a plain manifest whose image line carries a marker, and `policy`.
fn models(host: &str, tag: &str, policy: &str) -> Vec<(String, String)> {
    vec![
        (
            "app.yaml".into(),
            format!(
                "# The shop's application.\nkind: Image\nname: {host}/shop/app\ntag: {tag}   # chosen by the policy app\n---\nkind: TrustDomain\nname: shop\n---\nkind: Slice\nname: app\ntrust_domain: shop\ncontroller_kind: Deployment\ncontroller_replica_count: 1\ndefault_image: {host}/shop/app:{tag}\n"
            ),
        ),
        (
            "policy.yaml".into(),
            format!(
                "kind: ImagePolicy\nname: app\nimage: {host}/shop/app\n{policy}insecure: true\n"
            ),
        ),
        (
            "plain/job.yaml".into(),
            format!(
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  namespace: shop\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: migrate\n          image: {host}/shop/app:{tag} # tether:image-policy app\n          args: [\"migrate\"]\n"
            ),
        ),
    ]
}

fn remote_of(files: &[(String, String)]) -> Remote {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    Remote::new(&files)
}

/// `tether images` on the remote's models, with its own cache; `extra` flags after.
fn images(remote: &Remote, cache: &std::path::Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "images",
        "--repo",
        &remote.url,
        "--path",
        "models",
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    tether(&args)
}

/// The file `path` of the models on the remote's `main`.
fn file_on_main(remote: &Remote, path: &str) -> String {
    git(&remote.bare(), &["show", &format!("main:models/{path}")])
}

fn commits_on_main(remote: &Remote) -> usize {
    git(&remote.bare(), &["rev-list", "--count", "main"])
        .trim()
        .parse()
        .unwrap()
}

fn push_tags(registry: &Registry, tags: &[&str]) {
    for tag in tags {
        registry.push_image("shop/app", tag, Utc::now() - chrono::Duration::days(1));
    }
}

#[test]
fn a_newer_tag_is_one_commit_that_changes_only_the_tags() {
    let registry = Registry::start();
    let host = registry.host();
    push_tags(
        &registry,
        &["1.0.0", "1.1.0", "1.2.0-rc.1", "2.0.0", "latest"],
    );
    let files = models(&host, "1.0.0", "semver: \">=1.0.0 <2.0.0\"\n");
    let remote = remote_of(&files);
    let cache = tempfile::tempdir().unwrap();

    // Without --commit: what it would do, and nothing written.
    let dry = images(&remote, cache.path(), &[]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stderr));
    let said = text(&dry.stdout);
    assert!(said.contains("would update 1.0.0 → 1.1.0"), "{said}");
    assert_eq!(commits_on_main(&remote), 1);

    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(commits_on_main(&remote), 2, "{}", text(&run.stdout));
    let message = git(&remote.bare(), &["log", "-1", "--format=%B", "main"]);
    let first_line = message.lines().next().unwrap();
    assert!(
        first_line.contains("app") && first_line.contains("1.0.0 → 1.1.0"),
        "{message}"
    );
    assert!(message.contains("Tether-Image-Policy: app"), "{message}");
    // Every byte but the tags is as it was: comments, the marker, the other lines.
    for (path, text) in &files {
        let expected = text.replace(
            &format!("{host}/shop/app:1.0.0"),
            &format!("{host}/shop/app:1.1.0"),
        );
        let expected = expected.replace("tag: 1.0.0   #", "tag: 1.1.0   #");
        // (`git show` through the kit's `git` gives the text without its last newline.)
        assert_eq!(file_on_main(&remote, path), expected.trim_end(), "{path}");
    }
    // The checkout a person has sees the same with the git CLI.
    let stat = git(&remote.bare(), &["diff", "--numstat", "main~1", "main"]);
    assert_eq!(
        stat.lines().count(),
        2,
        "only app.yaml and plain/job.yaml change: {stat}"
    );

    // Nothing newer: no commit, and the reason.
    let again = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(commits_on_main(&remote), 2);
    assert!(
        text(&again.stdout).contains("kept"),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn a_removed_tag_never_brings_a_lower_one_unless_the_policy_changed() {
    let registry = Registry::start();
    let host = registry.host();
    push_tags(&registry, &["1.0.0", "1.1.0", "1.2.0"]);
    let remote = remote_of(&models(&host, "1.0.0", "semver: \"^1.0\"\n"));
    let cache = tempfile::tempdir().unwrap();
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(file_on_main(&remote, "app.yaml").contains("tag: 1.2.0"));

    // 1.2.0 is deleted from the registry: 1.1.0 is the best left, and lower.
    registry.delete_tag("shop/app", "1.2.0");
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(
        commits_on_main(&remote),
        2,
        "no downgrade: {}",
        text(&run.stdout)
    );
    assert!(file_on_main(&remote, "app.yaml").contains("tag: 1.2.0"));

    // The policy itself changes to 0.x: its best tag is chosen, and the commit says why.
    push_tags(&registry, &["0.9.0"]);
    remote.push(
        "main",
        &[(
            "policy.yaml",
            &format!("kind: ImagePolicy\nname: app\nimage: {host}/shop/app\nsemver: \"<1.0.0\"\ninsecure: true\n"),
        )],
    );
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(file_on_main(&remote, "app.yaml").contains("tag: 0.9.0"));
    let message = git(&remote.bare(), &["log", "-1", "--format=%B", "main"]);
    assert!(message.contains("1.2.0 → 0.9.0"), "{message}");
}

#[test]
fn a_branch_policy_keeps_one_proposal_replaced_in_place() {
    let registry = Registry::start();
    let host = registry.host();
    push_tags(&registry, &["1.0.0", "1.1.0"]);
    let remote = remote_of(&models(&host, "1.0.0", "semver: \"^1\"\nupdate: branch\n"));
    let cache = tempfile::tempdir().unwrap();
    let main_before = remote.head_of_bare("main");
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(
        remote.head_of_bare("main"),
        main_before,
        "main is left alone"
    );
    let branch = "tether/image/app";
    let show = |rev: &str| git(&remote.bare(), &["show", &format!("{branch}:models/{rev}")]);
    assert!(show("app.yaml").contains("tag: 1.1.0"));
    let parent = git(&remote.bare(), &["rev-parse", &format!("{branch}~1")]);
    assert_eq!(parent.trim(), main_before.trim());

    // The same decision again: the proposal is not made anew.
    let tip = git(&remote.bare(), &["rev-parse", branch]);
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(git(&remote.bare(), &["rev-parse", branch]), tip);

    // A newer tag: the proposal is replaced, still one commit on main.
    push_tags(&registry, &["1.2.0"]);
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(show("app.yaml").contains("tag: 1.2.0"));
    let ahead = git(
        &remote.bare(),
        &["rev-list", "--count", &format!("main..{branch}")],
    );
    assert_eq!(ahead.trim(), "1");
}

#[test]
fn a_registry_down_refused_credentials_or_too_many_tags_commit_nothing() {
    let cache = tempfile::tempdir().unwrap();
    // Down: a port nobody listens on.
    let down = format!("127.0.0.1:{}", tether_testkit::remote::free_port());
    let remote = remote_of(&models(&down, "1.0.0", "semver: \"^1\"\n"));
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stdout));
    assert!(
        text(&run.stdout).contains("cannot reach"),
        "{}",
        text(&run.stdout)
    );
    assert_eq!(commits_on_main(&remote), 1);

    // Wrong credentials, from a Docker config: refused, the password nowhere.
    let registry = Registry::start_for_user("ci", "right-password");
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "{{\"auths\": {{\"{}\": {{\"username\": \"ci\", \"password\": \"Wr0ngPassw0rd\"}}}}}}",
            registry.host()
        ),
    )
    .unwrap();
    let remote = remote_of(&models(&registry.host(), "1.0.0", "semver: \"^1\"\n"));
    let run = images(
        &remote,
        cache.path(),
        &[
            "--commit",
            "--registry-config",
            config.path().to_str().unwrap(),
        ],
    );
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stdout));
    let said = format!("{}{}", text(&run.stdout), text(&run.stderr));
    assert!(said.contains("refused the credentials"), "{said}");
    assert!(!said.contains("Wr0ngPassw0rd"), "{said}");
    assert_eq!(commits_on_main(&remote), 1);

    // 10,000 tags, a policy that allows 5,000: nothing chosen from a partial list.
    let registry = Registry::start();
    let host = registry.host();
    push_tags(&registry, &["1.0.0"]);
    registry.add_tags_in_storage(
        "shop/app",
        "1.0.0",
        (0..10_000).map(|i| format!("1.0.{}", i + 1)),
    );
    let remote = remote_of(&models(&host, "1.0.0", "semver: \"^1\"\nmax_tags: 5000\n"));
    let run = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stdout));
    assert!(
        text(&run.stdout).contains("more than 5000 tags"),
        "{}",
        text(&run.stdout)
    );
    assert_eq!(commits_on_main(&remote), 1);
}

/// The semver of `image: HOST/shop/app:TAG` lines in a commit's app.yaml.
fn tag_at(remote: &Remote, commit: &str) -> semver::Version {
    let text = git(
        &remote.bare(),
        &["show", &format!("{commit}:models/app.yaml")],
    );
    let tag = text
        .lines()
        .find_map(|l| l.strip_prefix("tag: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap();
    semver::Version::parse(tag).unwrap()
}

#[test]
fn a_hundred_kills_at_random_moments_never_downgrade_nor_commit_a_tag_never_pushed() {
    let registry = Registry::start();
    let host = registry.host();
    push_tags(&registry, &["1.0.0"]);
    let remote = remote_of(&models(&host, "1.0.0", "semver: \"^1\"\n"));
    let cache = tempfile::tempdir().unwrap();
    let binary = env!("CARGO_BIN_EXE_tether");
    let mut pushed = vec![semver::Version::new(1, 0, 0)];
    let mut removed = Vec::new();
    let mut killed = 0;
    for round in 0..100u64 {
        // Tags come and go: a new patch every other round, an older one removed.
        if round % 2 == 0 {
            let version = semver::Version::new(1, 0, round / 2 + 1);
            registry.push_image(
                "shop/app",
                &version.to_string(),
                Utc::now() - chrono::Duration::hours(1),
            );
            pushed.push(version);
        } else if round % 5 == 0 && pushed.len() > 2 {
            // An older tag (never the newest), each once.
            let index = fastrand::usize(1..pushed.len() - 1);
            if !removed.contains(&index) {
                registry.delete_tag("shop/app", &pushed[index].to_string());
                removed.push(index);
            }
        }
        let mut child = Command::new(binary)
            .args([
                "images",
                "--commit",
                "--repo",
                &remote.url,
                "--path",
                "models",
            ])
            .arg("--cache-dir")
            .arg(cache.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..400)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            killed += 1;
        }
        child.wait().unwrap();
    }
    // One run to the end after all that.
    let last = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(
        last.status.code(),
        Some(0),
        "{}{}",
        text(&last.stdout),
        text(&last.stderr)
    );
    assert!(
        killed >= 20,
        "only {killed} runs were killed: the kills did not land mid-run"
    );

    let history = git(
        &remote.bare(),
        &["rev-list", "--first-parent", "--reverse", "main"],
    );
    let commits: Vec<&str> = history.lines().collect();
    let mut previous = tag_at(&remote, commits[0]);
    for commit in &commits[1..] {
        let tag = tag_at(&remote, commit);
        assert!(
            tag > previous,
            "commit {commit} went from {previous} to {tag}"
        );
        assert!(
            pushed.contains(&tag),
            "commit {commit} chose {tag}, never pushed"
        );
        let changed = git(
            &remote.bare(),
            &["diff", "--numstat", &format!("{commit}~1"), commit],
        );
        assert_eq!(
            changed.lines().count(),
            2,
            "{commit} changed more than the tags: {changed}"
        );
        previous = tag;
    }
    let newest = pushed.iter().max().unwrap();
    assert_eq!(
        &tag_at(&remote, "main"),
        newest,
        "the last run chose the newest tag; it said:\n{}{}",
        text(&last.stdout),
        text(&last.stderr)
    );
    let quiet = images(&remote, cache.path(), &["--commit"]);
    assert_eq!(quiet.status.code(), Some(0));
    assert_eq!(
        commits.len(),
        commits_on_main(&remote),
        "a quiet run commits nothing"
    );
}
