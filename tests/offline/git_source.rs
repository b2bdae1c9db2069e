//! Models read from Git with git2, from repositories made with the `git` CLI: the
//! exact commit a branch, tag or commit id names, and a local checkout's commit.

use std::path::Path;

use tether_engine::git::{Credentials, fetch_models, local_revision};
use tether_testkit::git::git;

fn paths(files: &tether_core::source::SourceFiles) -> Vec<String> {
    files.iter().map(|(_, f)| f.path.clone()).collect()
}

/// A bare repository with: on main, v1 (tagged) then v2; a branch `next` with v3.
fn remote() -> (tempfile::TempDir, String, [String; 3]) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("models/.hidden")).unwrap();
    git(dir.path(), &["init", "-q", "work"]);
    std::fs::write(work.join("README.md"), "not a model").unwrap();
    std::fs::write(work.join("models/site.yaml"), "kind: Site\nname: v1\n").unwrap();
    std::fs::write(
        work.join("models/.hidden/x.yaml"),
        "kind: Site\nname: hidden\n",
    )
    .unwrap();
    std::fs::write(work.join("models/.tether.yaml"), "settings: {}\n").unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "v1"]);
    git(&work, &["tag", "v1"]);
    let v1 = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("models/site.yaml"), "kind: Site\nname: v2\n").unwrap();
    git(&work, &["commit", "-q", "-am", "v2"]);
    let v2 = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["checkout", "-q", "-b", "next"]);
    std::fs::write(work.join("models/extra.yml"), "kind: Site\nname: v3\n").unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "v3"]);
    let v3 = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["checkout", "-q", "main"]);
    git(dir.path(), &["clone", "-q", "--bare", "work", "remote.git"]);
    let url = format!("file://{}", dir.path().join("remote.git").display());
    (dir, url, [v1, v2, v3])
}

#[test]
fn fetches_the_exact_commit_a_reference_names() {
    let (dir, url, [v1, v2, v3]) = remote();
    let cache = dir.path().join("cache");
    let models = Path::new("models");
    let none = Credentials::default();

    let (files, revision) = fetch_models(&url, None, Some(models), &cache, &none).unwrap();
    assert_eq!(revision.commit, v2, "the default branch");
    assert_eq!(
        paths(&files),
        ["site.yaml"],
        "no dot-dirs, no dot-files, no other files"
    );
    assert_eq!(
        files.iter().next().unwrap().1.text,
        "kind: Site\nname: v2\n"
    );

    let (_, revision) = fetch_models(&url, Some("v1"), Some(models), &cache, &none).unwrap();
    assert_eq!(revision.commit, v1, "a tag");
    let (files, revision) = fetch_models(&url, Some("next"), Some(models), &cache, &none).unwrap();
    assert_eq!(revision.commit, v3, "a branch");
    assert_eq!(paths(&files), ["extra.yml", "site.yaml"]);
    let (_, revision) = fetch_models(&url, Some(&v1), Some(models), &cache, &none).unwrap();
    assert_eq!(revision.commit, v1, "a full commit id");
    // An abbreviation or a revision expression could name another commit tomorrow.
    for vague in [&v1[..12], "main~1", "next^", "HEAD@{1}"] {
        let refused = fetch_models(&url, Some(vague), Some(models), &cache, &none);
        assert!(refused.is_err(), "{vague} is refused");
    }
    let (files, _) = fetch_models(&url, Some("main"), None, &cache, &none).unwrap();
    assert_eq!(paths(&files), ["models/site.yaml"], "the whole repository");

    let missing =
        fetch_models(&url, Some("no-such-branch"), Some(models), &cache, &none).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("no branch, tag or commit \"no-such-branch\""),
        "{missing}"
    );
    let unreachable =
        fetch_models("file:///no/such/repo.git", None, None, &cache, &none).unwrap_err();
    assert!(
        unreachable
            .to_string()
            .contains("cannot fetch file:///no/such/repo.git"),
        "{unreachable}"
    );

    // A new commit on the remote is seen by the next fetch (the cache is updated).
    let work = dir.path().join("work");
    std::fs::write(work.join("models/site.yaml"), "kind: Site\nname: v4\n").unwrap();
    git(&work, &["commit", "-q", "-am", "v4"]);
    git(&work, &["push", "-q", &url, "main"]);
    let v4 = git(&work, &["rev-parse", "HEAD"]);
    let (_, revision) = fetch_models(&url, Some("main"), Some(models), &cache, &none).unwrap();
    assert_eq!(revision.commit, v4);
}

#[test]
fn a_local_checkout_reports_its_commit_and_uncommitted_models() {
    let (dir, _, [_, v2, _]) = remote();
    let work = dir.path().join("work");
    let revision = local_revision(&work.join("models")).unwrap();
    assert_eq!(
        (revision.commit.as_str(), revision.dirty),
        (v2.as_str(), false)
    );
    std::fs::write(work.join("README.md"), "edited, but not a model").unwrap();
    assert!(!local_revision(&work.join("models")).unwrap().dirty);
    std::fs::write(work.join("models/site.yaml"), "kind: Site\nname: edited\n").unwrap();
    assert!(local_revision(&work.join("models")).unwrap().dirty);
    assert!(local_revision(Path::new("/")).is_none(), "not a repository");
}

/// When FETCH_HEAD of the one cached repository was last written (each fetch writes it).
fn last_fetch(cache: &Path) -> std::time::SystemTime {
    let repo = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "git"))
        .unwrap();
    std::fs::metadata(repo.join("FETCH_HEAD"))
        .unwrap()
        .modified()
        .unwrap()
}

#[test]
fn a_reference_that_did_not_move_is_not_fetched_again() {
    let (dir, url, [_, v2, _]) = remote();
    let cache = dir.path().join("cache");
    let none = Credentials::default();
    let (_, revision) = fetch_models(&url, Some("main"), None, &cache, &none).unwrap();
    assert_eq!(revision.commit, v2);
    let fetched = last_fetch(&cache);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (_, revision) = fetch_models(&url, Some("main"), None, &cache, &none).unwrap();
    assert_eq!(revision.commit, v2);
    assert_eq!(last_fetch(&cache), fetched, "main did not move: no fetch");

    // A push moves it: fetched, and the new commit read.
    let work = dir.path().join("work");
    std::fs::write(work.join("models/site.yaml"), "kind: Site\nname: v4\n").unwrap();
    git(&work, &["commit", "-q", "-am", "v4"]);
    let v4 = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["push", "-q", "../remote.git", "main"]);
    let (_, revision) = fetch_models(&url, Some("main"), None, &cache, &none).unwrap();
    assert_eq!(revision.commit, v4);
    assert_ne!(last_fetch(&cache), fetched);
}

#[test]
fn loads_of_one_repository_at_once_share_their_look_at_the_remote() {
    // Thirty Sources of one repository in one process, woken by the same push.
    const LOADS: usize = 30;
    let remote = tether_testkit::remote::Remote::new(&[("site.yaml", "kind: Site\nname: v1\n")]);
    let cache = tempfile::tempdir().unwrap();
    let none = Credentials::default();
    fetch_models(&remote.url, Some("main"), None, cache.path(), &none).unwrap();
    let pushed = remote.push("main", &[("site.yaml", "kind: Site\nname: v2\n")]);
    let before = remote.connections();
    let start = std::sync::Barrier::new(LOADS);
    let commits: Vec<String> = std::thread::scope(|scope| {
        let loads: Vec<_> = (0..LOADS)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    fetch_models(&remote.url, Some("main"), None, cache.path(), &none)
                        .map(|(_, revision)| revision.commit)
                        .map_err(|e| format!("{e:?}"))
                })
            })
            .collect();
        loads
            .into_iter()
            .map(|load| load.join().unwrap().unwrap())
            .collect()
    });
    assert!(
        commits.iter().all(|c| *c == pushed),
        "every load reads the pushed commit {pushed}: {commits:?}"
    );
    // Each load on its own lists the remote's refs, then fetches: two connections.
    let connections = remote.connections() - before;
    assert!(
        connections < LOADS,
        "{LOADS} loads at once made {connections} connections"
    );
}

/// A process killed in the middle of a fetch leaves libgit2's lock files in the cache
/// (the references it was updating, `packed-refs`, `shallow`). The next load finds
/// them stale, since no other process writes the cache, removes them and fetches;
/// before, every fetch after the kill failed on them.
#[test]
fn lock_files_a_killed_fetch_left_in_the_cache_do_not_stop_the_next() {
    let remote = tether_testkit::remote::Remote::new(&[("site.yaml", "kind: Site\nname: v1\n")]);
    let cache = tempfile::tempdir().unwrap();
    let none = Credentials::default();
    fetch_models(&remote.url, Some("main"), None, cache.path(), &none).unwrap();
    let repository = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "git"))
        .expect("the cache's repository");
    let left = [
        repository.join("refs/remotes/origin/main.lock"),
        repository.join("packed-refs.lock"),
        repository.join("shallow.lock"),
    ];
    for file in &left {
        std::fs::write(file, "").unwrap();
    }
    let pushed = remote.push("main", &[("site.yaml", "kind: Site\nname: v2\n")]);
    let (_, revision) = fetch_models(&remote.url, Some("main"), None, cache.path(), &none)
        .expect("the load after the kill fetches");
    assert_eq!(revision.commit, pushed);
    for file in &left {
        assert!(!file.exists(), "{} is left", file.display());
    }
}
