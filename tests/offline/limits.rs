//! Files past the size limit (16 MiB) are refused on their size, known before a byte is
//! read: from the filesystem's metadata in a directory, from the object database's
//! header in Git. `tether validate` (a directory) and `tether diff --repo` (Git; invalid
//! models stop it before the cluster) run on a generated 60 MiB models file, and their
//! peak resident memory is compared with the same command on a tiny repository. Also:
//! a Git source's commit read once is not read again (its blobs deleted from the
//! cache, the same commit still loads).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tether_engine::repo::{CommitCache, Repo};
use tether_testkit::git::git;

const SITE: &str = "kind: Site\nname: s\n";

/// The size of the generated 60 MiB file: its first line, then 1 KiB lines.
const GENERATED_BYTES: usize = "generated:\n".len() + 60 * 1024 * 1024;

/// How much more than the tiny repository's run the 60 MiB repository's run may
/// hold at its peak: half the file. Reading the file whole (its bytes, then its text)
/// costs at least the file's size, and measured 171 MB before the size was checked
/// first.
const ALLOWED_GROWTH_KIB: u64 = 30 * 1024;

/// A YAML file of `mib` MiB that would parse (a list of padding lines), not committed
/// to the repository but made for the test.
fn write_generated(path: &Path, mib: usize) {
    let file = std::fs::File::create(path).unwrap();
    let mut out = std::io::BufWriter::new(file);
    out.write_all(b"generated:\n").unwrap();
    let line = format!("  - {}\n", "x".repeat(1019));
    for _ in 0..mib * 1024 {
        out.write_all(line.as_bytes()).unwrap();
    }
    out.flush().unwrap();
}

/// A models directory: a model, and with `generated`, a 60 MiB generated file.
fn models_dir(root: &Path, generated: bool) -> PathBuf {
    let models = root.join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::write(models.join("site.yaml"), SITE).unwrap();
    if generated {
        write_generated(&models.join("generated.yaml"), 60);
    }
    models
}

/// tether under GNU time, which waits for it with `wait4` and writes the child's own
/// `ru_maxrss`: the peak resident set of that process alone, read after it ended, so
/// neither sampling nor the test binary's other children can blur it. The machine
/// images carry `time` (Debian's package).
fn run_measured(dir: &Path, args: &[&str]) -> (Output, u64) {
    let report = dir.join(format!("rss-{}", fastrand::u64(..)));
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&report)
        .arg(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        // No cluster: the commands stop at the models' problems before one is needed.
        .env("KUBECONFIG", dir.join("no-kubeconfig"))
        .output()
        .expect("/usr/bin/time (Debian's `time`) runs tether");
    let text = std::fs::read_to_string(&report).unwrap();
    let kib = text.trim().lines().last().unwrap().trim().parse().unwrap();
    (output, kib)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// `validate` exits 1 on invalid models, `diff` 2 (it could not compare).
fn assert_refused(output: &Output, code: i32, path: &str) {
    let text = stdout(output);
    assert_eq!(output.status.code(), Some(code), "{text}");
    assert!(
        text.contains(&format!(
            "{path}:1:1: error: this file is 60.0 MiB ({GENERATED_BYTES} bytes), past the limit of 16 MiB per file"
        )),
        "{text}"
    );
    assert!(text.contains("split the file"), "{text}");
}

#[test]
fn a_60_mib_models_file_in_a_directory_is_refused_unread() {
    let tiny = tempfile::tempdir().unwrap();
    models_dir(tiny.path(), false);
    let (output, baseline) = run_measured(tiny.path(), &["validate", "models"]);
    assert!(output.status.success(), "{}", stdout(&output));

    let big = tempfile::tempdir().unwrap();
    models_dir(big.path(), true);
    let (output, peak) = run_measured(big.path(), &["validate", "models"]);
    assert_refused(&output, 1, "models/generated.yaml");
    eprintln!("validate: peak {peak} KiB, tiny repository {baseline} KiB");
    assert!(
        peak < baseline + ALLOWED_GROWTH_KIB,
        "peak {peak} KiB, tiny repository {baseline} KiB"
    );
}

/// A bare remote made with the `git` CLI from `work`.
fn remote_of(root: &Path, work: &Path) -> (String, String) {
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", "models"]);
    let commit = git(work, &["rev-parse", "HEAD"]);
    let bare = root.join("remote.git");
    git(
        root,
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    (format!("file://{}", bare.display()), commit)
}

fn git_work(root: &Path, generated: bool) -> PathBuf {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    models_dir(&work, generated);
    work
}

#[test]
fn a_60_mib_models_file_in_a_commit_is_refused_unread() {
    let diff = |root: &Path, url: &str, commit: &str| {
        let cache = root.join("cache");
        let args = ["diff", "--repo", url, "--ref", commit, "--cache-dir"];
        let mut args: Vec<&str> = args.to_vec();
        args.extend([cache.to_str().unwrap(), "models"]);
        run_measured(root, &args)
    };
    let tiny = tempfile::tempdir().unwrap();
    let work = git_work(tiny.path(), false);
    let (url, commit) = remote_of(tiny.path(), &work);
    // The first run fetches; the second reads the cache, as a retry does.
    diff(tiny.path(), &url, &commit);
    let (_, baseline) = diff(tiny.path(), &url, &commit);

    let big = tempfile::tempdir().unwrap();
    let work = git_work(big.path(), true);
    let (url, commit) = remote_of(big.path(), &work);
    let (output, fetching) = diff(big.path(), &url, &commit);
    assert_refused(&output, 2, "generated.yaml");
    let (output, peak) = diff(big.path(), &url, &commit);
    assert_refused(&output, 2, "generated.yaml");
    eprintln!(
        "diff --repo: peak {peak} KiB from the cache ({fetching} KiB with the fetch), tiny repository {baseline} KiB"
    );
    assert!(
        peak < baseline + ALLOWED_GROWTH_KIB,
        "peak {peak} KiB, tiny repository {baseline} KiB"
    );
}

#[tokio::test]
async fn the_settings_file_and_data_files_past_the_limit_are_refused_in_a_directory_and_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("models/conf")).unwrap();
    git(&work, &["init", "-q"]);
    let models = work.join("models");
    std::fs::write(
        models.join("site.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: td\n---\nkind: KubernetesConfigMap\nname: web\ntrust_domain: td\nfiles: [conf/]\n",
    )
    .unwrap();
    std::fs::write(models.join("conf/small.conf"), "ok\n").unwrap();
    write_generated(&models.join("conf/huge.conf"), 17);
    write_generated(&models.join(".tether.yaml"), 17);
    let (url, commit) = remote_of(dir.path(), &work);

    let from_git = Repo::Git {
        url,
        reference: Some(commit),
        path: "models".into(),
        cache: dir.path().join("cache"),
        credentials: Default::default(),
        verify: None,
    };
    for repo in [Repo::Directory(models.clone()), from_git] {
        let loaded = repo.load().await.unwrap();
        assert_eq!(loaded.settings, None, "{}", repo.label());
        let analysis = tether_core::analyze(&loaded.files);
        let errors: Vec<String> = analysis
            .diagnostics
            .sorted(&loaded.files)
            .iter()
            .map(|d| format!("{}: {}", loaded.files.path(d.span.file), d.message))
            .collect();
        assert_eq!(errors.len(), 2, "{}: {errors:#?}", repo.label());
        assert!(
            errors[0].starts_with(".tether.yaml: this file is 17.0 MiB"),
            "{errors:#?}"
        );
        assert!(
            errors[1].starts_with("conf/huge.conf: this file is 17.0 MiB"),
            "{errors:#?}"
        );
        assert!(
            loaded.files.assets().contains_key("conf/small.conf"),
            "the other data file is read"
        );
    }
}

/// Rewrites the cache of a Git source with the commit and its trees only: every blob
/// is gone, so any read of a file's content fails.
fn drop_blobs(cache: &Path, commit: &str) {
    let bare = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "git"))
        .unwrap();
    let old = git2::Repository::open_bare(&bare).unwrap();
    let commit = git2::Oid::from_str(commit).unwrap();
    let mut objects = vec![commit];
    let mut pending = vec![old.find_commit(commit).unwrap().tree_id()];
    while let Some(id) = pending.pop() {
        objects.push(id);
        let tree = old.find_tree(id).unwrap();
        pending.extend(
            tree.iter()
                .filter(|e| e.kind() == Some(git2::ObjectType::Tree))
                .map(|e| e.id()),
        );
    }
    let odb = old.odb().unwrap();
    let raw: Vec<_> = objects
        .iter()
        .map(|id| {
            let object = odb.read(*id).unwrap();
            (object.kind(), object.data().to_vec())
        })
        .collect();
    drop(odb);
    drop(old);
    std::fs::remove_dir_all(&bare).unwrap();
    let new = git2::Repository::init_bare(&bare).unwrap();
    for (kind, data) in raw {
        // Raw writes: the trees name blobs this store does not have, on purpose.
        new.odb().unwrap().write(kind, &data).unwrap();
    }
}

#[tokio::test]
async fn a_commit_read_once_is_not_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let work = git_work(dir.path(), false);
    std::fs::write(work.join("models/.tether.yaml"), "kubernetes: {}\n").unwrap();
    let (url, commit) = remote_of(dir.path(), &work);
    let cache = dir.path().join("cache");
    let repo = Repo::Git {
        url,
        reference: Some(commit.clone()),
        path: "models".into(),
        cache: cache.clone(),
        credentials: Default::default(),
        verify: None,
    };
    let commits = CommitCache::default();
    let first = repo.load_cached(&commits).await.unwrap();

    drop_blobs(&cache, &commit);
    let error = repo.load().await.unwrap_err();
    assert!(
        tether_core::error_chain(&error).contains("object not found"),
        "without the cache, the blobs are needed: {}",
        tether_core::error_chain(&error)
    );
    let again = repo.load_cached(&commits).await.unwrap();
    assert_eq!(again.revision, first.revision);
    assert_eq!(again.settings.as_deref(), Some("kubernetes: {}\n"));
    let texts = |files: &tether_core::source::SourceFiles| {
        files
            .iter()
            .map(|(_, f)| (f.path.clone(), f.text.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(texts(&again.files), texts(&first.files));
    assert_eq!(
        texts(&again.files),
        [("site.yaml".to_string(), SITE.to_string())]
    );
}

#[test]
fn a_branch_holding_a_file_past_the_limit_gets_no_commit() {
    // A day-2 operation plans its commit on the branch's files: one it could not read
    // might be overwritten, so nothing is committed.
    let root = tempfile::tempdir().unwrap();
    let work = git_work(root.path(), false);
    let models = work.join("models");
    std::fs::write(
        models.join("slice.yaml"),
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\nkind: Slice\nname: web\ntrust_domain: shop\ncontroller_replica_count: 1\ndefault_image: nginx\n",
    )
    .unwrap();
    write_generated(&models.join("generated.yaml"), 17);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "models"]);
    let before = git(&work, &["rev-parse", "HEAD"]);
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "scale",
            "web",
            "3",
            "--no-apply",
            "--author",
            "T <t@example.org>",
            "-C",
        ])
        .arg(&models)
        .env("TETHER_COLOR", "never")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("generated.yaml is 17.0 MiB") && stderr.contains("nothing is"),
        "{stderr}"
    );
    assert_eq!(
        git(&work, &["rev-parse", "HEAD"]),
        before,
        "a commit was made"
    );
}
