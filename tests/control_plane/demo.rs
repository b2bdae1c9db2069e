//! `scripts/demo` end to end, on a control plane of its own: each step's visible
//! result, and nothing left running afterwards.

use std::path::Path;
use std::process::Command;

fn without_colour(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The demo's step headings (`== 3. What apply would change`), as number and title.
fn headings(output: &str) -> Vec<(usize, &str)> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("== ")?.split_once(". "))
        .filter_map(|(number, title)| Some((number.parse().ok()?, title)))
        .collect()
}

/// The text of the step whose title starts with `title`, from its heading to the next.
/// Found by title, so that a step added in between renumbers nothing here.
fn step<'a>(output: &'a str, title: &str) -> &'a str {
    let (number, _) = headings(output)
        .into_iter()
        .find(|(_, heading)| heading.starts_with(title))
        .unwrap_or_else(|| panic!("no step {title:?} in:\n{output}"));
    let start = output
        .find(&format!("== {number}. {title}"))
        .unwrap_or_else(|| panic!("no heading of step {number}"));
    let rest = &output[start..];
    // The next step's heading: a diff's own `== wave 2 of 3` headings are not one.
    let next = format!("\n== {}. ", number + 1);
    let end = rest[4..].find(&next).map_or(rest.len(), |i| i + 4);
    &rest[..end]
}

/// The chart, the overlay and the plain file applied as one plan: each object names
/// its origin, the hook Job was complete before the chart's Deployment existed, and the
/// next diff finds nothing.
fn assert_chart_and_overlay(text: &str) {
    for (kind_and_name, model, source) in [
        (
            "Deployment   greeter",
            "HelmChart/greeter",
            "greeter/templates/deployment.yaml",
        ),
        (
            "Job          greeter-migrate",
            "HelmChart/greeter:pre-install",
            "greeter/templates/migrate.yaml",
        ),
        (
            "Deployment   cache",
            "Kustomization/overlays/demo",
            "overlays/demo/kustomization.yaml",
        ),
        (
            "ResourceQuota   platform-quota",
            "Manifest/plain/quota.yaml",
            "plain/quota.yaml",
        ),
    ] {
        let name = kind_and_name.split_whitespace().last().unwrap();
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("{name} in:\n{text}"));
        assert!(line.contains(model) && line.contains(source), "{line}");
    }
    let times = text
        .lines()
        .find_map(|l| l.strip_prefix("  Job greeter-migrate completed at "))
        .unwrap_or_else(|| panic!("the hook's times in:\n{text}"));
    let (completed, created) = times
        .split_once("; Deployment greeter created at ")
        .unwrap();
    assert!(!completed.is_empty() && completed <= created, "{times}");
    let (_, diff) = around(
        text,
        "tether diff examples/platform --inventory-name platform",
    );
    assert!(
        diff.contains("0 to create, 0 to update, 0 to delete, 0 in conflict"),
        "{diff}"
    );
}

/// A step's text before and after the command `command` was shown.
fn around<'a>(text: &'a str, command: &str) -> (&'a str, &'a str) {
    let shown = format!("$ {command}");
    let start = text
        .find(&shown)
        .unwrap_or_else(|| panic!("{shown:?} is not shown in:\n{text}"));
    (&text[..start], &text[start + shown.len()..])
}

/// The READY column of `kubectl get` for the object named `name` (a Job's
/// COMPLETIONS, which follows its STATUS; a node's STATUS).
fn ready<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let fraction = |column: &str| {
        column.split_once('/').is_some_and(|(a, b)| {
            [a, b]
                .iter()
                .all(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        })
    };
    text.lines().find_map(|line| {
        let mut columns = line.split_whitespace();
        if columns.next() != Some(name) {
            return None;
        }
        let rest: Vec<&str> = columns.collect();
        rest.iter().find(|c| fraction(c)).or(rest.first()).copied()
    })
}

#[test]
fn the_demo_shows_every_step_and_stops_what_it_started() {
    // The demo runs as root with the machine's real node.
    let _node = tether_testkit::cluster::real_node();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let state = tempfile::tempdir().unwrap();
    let demo_dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tether")).parent().unwrap();
    let output = Command::new(root.join("scripts/demo"))
        .env("TETHER_CLUSTER_STATE", state.path())
        .env("TETHER_DEMO_DIR", demo_dir.path())
        .env("TETHER_BIN_DIR", bin_dir)
        .output()
        .unwrap();
    let text = without_colour(&format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ));
    assert!(output.status.success(), "{text}");

    let nodes = step(&text, "A local control plane, with a real node");
    assert!(nodes.contains("tether-sim-1   Ready"), "{nodes}");
    assert!(nodes.contains("tether-sim-2   Ready"), "{nodes}");
    let real = nodes
        .lines()
        .find(|l| l.starts_with("tether-node ") && l.contains(" Ready "))
        .unwrap_or_else(|| panic!("{nodes}"));
    assert!(
        real.contains("10.245.0.1") && real.contains("containerd://"),
        "{real}"
    );

    let containers = step(&text, "A real node: a container that answers");
    let (before, after) = around(containers, "tether apply /");
    assert!(before.contains("workload 1.0.0"), "{containers}");
    assert!(after.contains("workload 2.0.0"), "{containers}");
    assert!(
        before
            .lines()
            .filter(|l| l.starts_with("web-")
                && l.contains(" Running ")
                && l.contains(" 10.245.0.")
                && l.contains(" tether-node "))
            .count()
            == 2,
        "two real pods with the node's IPs: {containers}"
    );
    let (_, restarted) = around(containers, "tether restart-containers");
    assert!(
        restarted
            .lines()
            .any(|l| l.starts_with("web-") && l.contains(" 1/1 ") && l.contains(" 1 (")),
        "the restart counted by the kubelet: {containers}"
    );
    // Numbered one after the other, install last.
    let steps = headings(&text);
    let numbers: Vec<usize> = steps.iter().map(|(number, _)| *number).collect();
    assert_eq!(numbers, (1..=steps.len()).collect::<Vec<_>>(), "{steps:?}");
    // The book's page lists the same steps, numbered as the demo numbers them.
    let page = tether_testkit::book::page(root, "getting-started/demo.md");
    let documented: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(str::to_string)
        .collect();
    let shown: Vec<String> = steps
        .iter()
        .map(|(number, title)| format!("{number}. {title}"))
        .collect();
    assert_eq!(
        documented, shown,
        "docs/book/src/getting-started/demo.md's steps"
    );
    assert!(
        steps
            .last()
            .is_some_and(|(_, title)| title.starts_with("Install the daemon")),
        "{steps:?}"
    );

    let validate = step(&text, "Validate the models");
    assert!(
        validate.contains("examples/models: 35 models in 8 files: valid"),
        "{validate}"
    );
    assert!(
        validate.contains("no TrustDomain named \"shpo\""),
        "{validate}"
    );
    assert!(
        validate.contains("help: did you mean \"shop\"?"),
        "{validate}"
    );
    assert!(validate.contains("2 errors"), "{validate}");

    let diff = step(&text, "What apply would change");
    assert!(diff.contains("create Deployment shop/web"), "{diff}");
    // The diff is shown in full: the last object to create is there too.
    assert!(diff.contains("create Service shop/web"), "{diff}");
    let report = std::fs::read_to_string(demo_dir.path().join("diff.md")).unwrap();
    assert!(report.starts_with("### "), "{report}");
    assert!(diff.contains(&demo_dir.path().join("diff.md").display().to_string()));

    let apply = step(&text, "Apply, and wait");
    assert!(apply.contains("19 created"), "{apply}");
    assert!(apply.contains("all workloads are ready"), "{apply}");

    let pods = step(&text, "Pods running");
    let running: Vec<&str> = pods
        .lines()
        .filter(|l| l.contains(" Running ") && l.contains(" 10.244.") && l.contains(" tether-sim-"))
        .collect();
    // Three of web, two of api, cache-0, toolbox, and log-agent's on each node.
    assert_eq!(running.len(), 9, "{pods}");
    assert!(
        pods.lines()
            .any(|l| l.starts_with("db-migrate-") && l.contains("Completed")),
        "{pods}"
    );

    let discover = step(&text, "tether discover");
    assert!(
        discover.contains("discover: +11 pods in shop"),
        "{discover}"
    );
    assert!(
        discover.contains("discovered/shop/pods/reports-"),
        "{discover}"
    );
    assert!(
        discover.contains("name: reports") && discover.contains("xos_managed: false"),
        "{discover}"
    );
    let subjects = git_subjects(&demo_dir.path().join("repo"));
    assert!(
        subjects.iter().any(|s| s == "discover: +11 pods in shop"),
        "{subjects:?}"
    );

    let events = step(&text, "tether events");
    let json: Vec<serde_json::Value> = events
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let statuses: Vec<&str> = json.iter().filter_map(|e| e["status"].as_str()).collect();
    assert!(statuses.contains(&"restarted"), "{events}");
    assert!(statuses.contains(&"deleted"), "{events}");

    let prune = step(&text, "Prune");
    assert!(
        prune.contains("delete (with --prune) ResourceQuota shop/shop-quota"),
        "{prune}"
    );
    assert!(prune.contains("3 pruned"), "{prune}");

    assert!(
        step(&text, "The daemon").contains("message: hello from git"),
        "{text}"
    );
    assert!(
        step(&text, "A push, announced").contains("ms after the webhook"),
        "{text}"
    );
    let rewrite = step(&text, "History rewritten");
    assert!(
        rewrite.contains(r#""from":"main@sha1:"#) && rewrite.contains("HistoryRewritten"),
        "{rewrite}"
    );
    let bulk = step(&text, "A bad push to a Source is held too");
    let (before, after) = around(bulk, "tether approve bulk sha256:");
    assert!(
        before.contains("ConfigMaps left: 12\nA bad merge")
            && before.contains(
                "default/bulk is not ready (PruneHeld): prune held: 11 of 13 recorded objects would be deleted"
            )
            && before.ends_with("ConfigMaps left: 12\nA person reviews the eleven deletions, and approves exactly them:\n"),
        "{bulk}"
    );
    assert!(
        after.contains("default/bulk is ready at main@sha1:")
            && after.contains("ConfigMaps left: 1\n")
            && after.contains("PruneApproved   pruned 11 of 13 recorded objects"),
        "{bulk}"
    );
    let signed = step(&text, "Signed commits only");
    assert!(
        signed.contains("Good \"git\" signature for dev@example.org")
            && signed.contains("is not verified: it is not signed")
            && signed.contains("still applied: hello, signed"),
        "{signed}"
    );
    let attested = step(&text, "What was deployed, signed");
    assert!(
        attested.contains("tether-attestation-demo-")
            && attested.contains("the cluster holds what it attests")
            && attested.contains("kubectl-label set metadata.labels.hotfix since")
            && attested.contains("(exit 1: drifted since the attestation)"),
        "{attested}"
    );
    assert_waves(step(&text, "Waves"));
    assert_scale_and_rollback(step(&text, "Day-2 operations as commits"));
    assert_host_label_and_lock(step(&text, "Hosts: a label and a lock"));
    assert_secret_never_shown(&text, step(&text, "Secrets in Git"));
    assert_chart_and_overlay(step(&text, "A repository as teams have it"));

    // The step's three applies: the twelve, the held prune, the approved one.
    let guarded = step(&text, "What a deletion takes with it");
    let applies: Vec<&str> = guarded.split("$ tether apply").skip(1).collect();
    assert_eq!(applies.len(), 3, "{guarded}");
    // The diff, shown after the first apply, names what each deletion would take.
    assert!(
        applies[0].contains("kept: a PersistentVolumeClaim's volume, and its data, usually go with it")
            && applies[0].contains(
                "it holds 1 ConfigMap, 1 PersistentVolumeClaim; 1 created by this inventory; of no inventory: ConfigMap demo-guarded/notes. It is kept unless it carries the annotation tether.dev/prune: with-contents"
            ),
        "{guarded}"
    );
    assert!(
        applies[1].contains("kept: it holds 1 objects this inventory did not create")
            && applies[1].contains("lets prune delete it"),
        "{guarded}"
    );
    assert!(
        applies[2].contains("2 pruned")
            && (applies[2].contains("Namespace demo-guarded: Terminating")
                || applies[2].contains("Namespace demo-guarded: gone")),
        "{guarded}"
    );
    let bad_commit = step(&text, "A bad commit");
    let applies: Vec<&str> = bad_commit.split("$ tether apply").skip(1).collect();
    assert_eq!(applies.len(), 3, "{bad_commit}");
    assert!(applies[0].contains("12 created"), "{bad_commit}");
    assert!(
        applies[1].contains("0 pruned, 11 held, 0 failed")
            && applies[1].contains("prune held: 11 of 12 recorded objects would be deleted")
            && applies[1].contains("ConfigMaps left: 12\n"),
        "{bad_commit}"
    );
    assert!(
        applies[2].contains("11 pruned") && applies[2].contains("ConfigMaps left: 1\n"),
        "{bad_commit}"
    );

    let migrated = step(&text, "Migrating without rewriting");
    let (_, diff) = around(migrated, "tether diff");
    for expected in [
        "release (with --prune) ConfigMap migrated/settings",
        "(kustomize.toolkit.fluxcd.io/prune: disabled)",
        "(argocd.argoproj.io/sync-options: ServerSideApply=true,Prune=false)",
        "delete (with --prune) ConfigMap migrated/banner",
        "skip ConfigMap migrated/seed",
    ] {
        assert!(diff.contains(expected), "{expected:?} in {migrated}");
    }
    let (_, left) = around(migrated, "kubectl get configmaps -n migrated");
    let names: Vec<&str> = left
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for kept in ["settings", "legacy", "seed"] {
        assert!(names.contains(&kept), "{kept} in {migrated}");
    }
    assert!(!names.contains(&"banner"), "{migrated}");
    let line_of = |name: &str| left.lines().find(|l| l.starts_with(&format!("{name} ")));
    assert!(
        line_of("settings").is_some_and(|l| !l.contains("applyset-")),
        "released: {migrated}"
    );
    assert!(
        line_of("seed").is_some_and(|l| l.contains("applyset-")),
        "still tether's: {migrated}"
    );
    assert!(left.contains("counter: 7"), "{migrated}");
    let argo = step(&text, "Argo CD's sync-waves and hooks");
    let (_, diff) = around(argo, "tether diff examples/argo-sync");
    assert!(
        diff.contains("PreSync Job argo-sync/db-migrate-*")
            && diff.contains("PostSync Job argo-sync/smoke")
            && !diff.contains("create Job"),
        "{argo}"
    );
    let (_, applied) = around(
        argo,
        "tether apply examples/argo-sync --inventory-name argo-sync --prune",
    );
    let applied = applied.split("$ kubectl").next().unwrap();
    assert!(
        applied.contains("hook PreSync Job argo-sync/db-migrate-")
            && applied.contains("hook PostSync Job argo-sync/smoke: succeeded, deleted"),
        "{argo}"
    );
    let (_, listed) = around(argo, "kubectl get jobs,configmaps -n argo-sync");
    assert!(
        listed.contains("job.batch/db-migrate-")
            && !listed.contains("job.batch/smoke")
            && listed.contains("configmap/frontend"),
        "{argo}"
    );
    let (_, again) = around(
        listed,
        "tether apply examples/argo-sync --inventory-name argo-sync --prune",
    );
    assert!(!again.contains("hook "), "no hook runs again: {argo}");
    let health = step(&text, "Health checks for any kind");
    let (_, waiting) = around(health, "kubectl get gadgets,configmaps -n health");
    let waiting = waiting.split("$ kubectl patch").next().unwrap();
    assert!(waiting.contains("flux-capacitor"), "{health}");
    assert!(
        !waiting.lines().any(|l| l.starts_with("configmap/after")),
        "the next wave waited for the Gadget: {health}"
    );
    assert!(
        health.contains("after: after the Gadget was healthy"),
        "{health}"
    );
    let autoscaled = step(&text, "Fields other controllers own");
    let (_, diff) = around(autoscaled, "tether diff examples/autoscaled");
    assert!(
        diff.contains("unchanged Deployment autoscaled/web")
            && diff.contains("ignored: 1 field (/spec/replicas)")
            && diff.contains("0 to update"),
        "{autoscaled}"
    );
    assert!(autoscaled.contains("replicas: 2\n"), "{autoscaled}");
    let charts = step(&text, "Signed charts");
    assert!(
        charts.contains("Successfully packaged chart")
            && charts.contains("kind: Deployment")
            && charts.contains("the chart hello-1.0.0.tgz is not verified: the archive is not the hello-1.0.0.tgz its provenance file signed by")
            && charts.contains("(exit 1: nothing rendered)")
            && charts.trim_end().ends_with("helm.sh/chart: hello-1.0.0"),
        "{charts}"
    );
    let artifacts = step(&text, "Signed artifacts");
    // The refusal is miette's report, wrapped at any space inside its frame.
    let unwrapped: String = artifacts
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '│')
        .collect();
    assert!(
        artifacts.contains("19 objects rendered from the verified artifact")
            && unwrapped.contains("itsidentityisnoneofthetrustedones")
            && artifacts.contains("(exit 2: nothing rendered)"),
        "{artifacts}"
    );
    // The demo repository's latest commits, newest first: each operation is one.
    let expected = [
        "unlock: Node/tether-sim-2",
        "lock: Node/tether-sim-2",
        "label: Node/tether-sim-2 openstack-compute-node=enabled",
        "the lab's hosts",
        "rollback: Slice/web to ",
        "scale: Slice/web 3 → 4",
    ];
    assert!(
        subjects.len() > expected.len()
            && subjects
                .iter()
                .zip(expected)
                .all(|(subject, start)| subject.starts_with(start)),
        "{subjects:?}"
    );

    let clusters = step(&text, "Several clusters");
    for line in [
        " → cluster core\n",
        " → cluster edge\n",
        "cluster core (context core): 2 created",
        "cluster edge (context edge): 3 created",
        "cluster core (context core): not applied",
        "cluster edge (context edge): 0 created, 0 configured, 3 unchanged",
    ] {
        assert!(clusters.contains(line), "{line}:\n{clusters}");
    }
    let teams = step(&text, "Teams:");
    assert!(
        teams.contains(
            "ConfigMap team-b/intruder: apply refused for system:serviceaccount:team-a:deployer"
        ),
        "{teams}"
    );
    assert!(teams.contains("Forbidden"), "{teams}");
    assert!(
        teams.contains("team-b has no intruder: Error from server (NotFound)"),
        "{teams}"
    );

    let web = step(&text, "The web page and its API");
    assert!(web.contains("team-a/shop: failed at "), "{web}");
    assert!(
        !web.contains("team-b/shop:"),
        "the viewer sees team-a only: {web}"
    );
    assert!(web.contains("the viewer asks to scale: HTTP 403"), "{web}");
    assert!(web.contains("no token at all: HTTP 401"), "{web}");
    for view in ["sources", "source"] {
        let shot = demo_dir.path().join(format!("web-{view}.png"));
        let size = std::fs::metadata(&shot).map_or(0, |m| m.len());
        assert!(size > 10_000, "{} is {size} bytes: {web}", shot.display());
    }
    assert!(!web.contains("eyJ"), "no token is printed: {web}");

    let feedback = step(&text, "Feedback: each commit's status");
    let statuses: Vec<&str> = feedback
        .lines()
        .filter(|l| l.starts_with("commit status"))
        .collect();
    // Two commits, each pending then success, under the Source's context on the
    // teams daemon's cluster.
    assert_eq!(statuses.len(), 4, "{feedback}");
    for (line, state) in statuses
        .iter()
        .zip(["pending", "success", "pending", "success"])
    {
        assert!(
            line.contains(state) && line.contains("tether/edge/demo-feedback/site"),
            "{line}"
        );
    }
    assert!(
        feedback.contains("notification   dev.tether.source.applied"),
        "{feedback}"
    );

    let images = step(&text, "Image automation: a new tag");
    for line in [
        "ms after the push:",
        "1.0.0 → 1.0.1",
        "deployment \"web\" successfully rolled out",
    ] {
        assert!(images.contains(line), "{line} not in: {images}");
    }
    // 2.0.0 is outside the policy's range: `tether images` keeps 1.0.1.
    let (_, listed) = around(images, "tether images");
    assert!(listed.contains("kept"), "{images}");

    let reverted = step(&text, "A failed rollout is reverted in Git");
    for line in [
        "s after the push (the Source's timeout is 20 s):",
        "tether: Revert \"web: a probe that never answers\"",
        "- Deployment demo-revert/web: ",
        "Tether-Revert: ",
        "deployment \"web\" successfully rolled out",
        ": reverted in ",
    ] {
        assert!(reverted.contains(line), "{line} not in: {reverted}");
    }

    let shard = step(&text, "Scale-out: replicas share the Sources");
    assert!(shard.contains("OWNER"), "{shard}");
    assert!(shard.contains("replica-a"), "{shard}");
    assert!(shard.contains("all six owned by replica-b"), "{shard}");
    // The fleet hub's view, written by the cluster's own daemon.
    let fleet = step(&text, "A fleet view");
    assert!(
        fleet.contains(
            "0 of 1 cluster(s) need attention (0 not reporting); 0 of 6 Source(s) need attention"
        ),
        "{fleet}"
    );

    let install = step(&text, "Install the daemon");
    for line in [
        "✔ you may install tether",
        "StatefulSet/tether-system/tether created",
        &format!(
            "✔ daemon {}: 2 of 2 replicas ready",
            env!("CARGO_PKG_VERSION")
        ),
        "all checks passed",
        "└── ConfigMap/greeting (v1)",
    ] {
        assert!(install.contains(line), "{install}");
    }
    assert!(step(&text, "Drift").contains("DriftCorrected"), "{text}");

    // Nothing is left running: the demo stopped the control plane it started.
    let status = tether_testkit::cluster::script()
        .arg("status")
        .env("TETHER_CLUSTER_STATE", state.path())
        .output()
        .unwrap();
    assert_eq!(
        status.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
}

/// The subjects of a Git repository's commits, newest first.
fn git_subjects(repo: &Path) -> Vec<String> {
    let log = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(log.status.success(), "git log in {}", repo.display());
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// examples/openstack: the graph puts each slice in its wave, and apply starts each
/// wave once the one before is ready; the Jobs completed and Keystone runs.
fn assert_waves(waves: &str) {
    let graph = around(waves, "tether graph examples/openstack").1;
    let mut rest = graph;
    for wanted in [
        "\"wave 1\"",
        "\"Slice/mariadb\"",
        "\"wave 2\"",
        "\"Slice/keystone-db-init\"",
        "\"wave 3\"",
        "\"Slice/keystone-users\"",
        "\"wave 4\"",
        "\"Slice/keystone\"",
    ] {
        let at = rest
            .find(wanted)
            .unwrap_or_else(|| panic!("{wanted} is not next in the graph:\n{graph}"));
        rest = &rest[at + wanted.len()..];
    }
    let applied = around(
        waves,
        "tether apply examples/openstack --inventory-name openstack --wait --timeout 2m",
    )
    .1;
    // A wave that waits says so, in order. A Job runs for a while, so the waves after
    // the Jobs always wait; MariaDB's pod may be ready by the first look (no line).
    let mut rest = applied;
    for line in [
        "wave 3 of 4 waits for Job openstack/keystone-db-init",
        "wave 4 of 4 waits for Job openstack/keystone-users",
        "all workloads are ready",
    ] {
        let at = rest
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} is not next in:\n{waves}"));
        if line.starts_with("wave 3") {
            let before = &rest[..at];
            assert!(
                before.trim().is_empty()
                    || before
                        .trim()
                        .starts_with("wave 2 of 4 waits for StatefulSet openstack/mariadb"),
                "{waves}"
            );
        }
        rest = &rest[at + line.len()..];
    }
    assert_eq!(
        ready(applied, "statefulset.apps/mariadb"),
        Some("1/1"),
        "{waves}"
    );
    assert_eq!(
        ready(applied, "job.batch/keystone-db-init"),
        Some("1/1"),
        "{waves}"
    );
    assert_eq!(
        ready(applied, "job.batch/keystone-users"),
        Some("1/1"),
        "{waves}"
    );
    assert_eq!(
        ready(applied, "deployment.apps/keystone"),
        Some("2/2"),
        "{waves}"
    );
}

/// `tether scale` and `tether rollback`: each a commit by the operator, shown with its
/// change, and the Deployment follows both.
fn assert_scale_and_rollback(operations: &str) {
    let (scaled, rolled_back) = around(operations, "tether rollback web");
    for line in [
        "scale: Slice/web 3 → 4",
        "Author: Ada Operator <ada@example.org>",
        "-controller_replica_count: 3",
        "+controller_replica_count: 4",
        "Deployment shop/web is rolled out",
    ] {
        assert!(scaled.contains(line), "{operations}");
    }
    assert_eq!(ready(scaled, "web"), Some("4/4"), "{operations}");
    for line in [
        "rollback: Slice/web to ",
        " shop/slices.yaml | 2 +-",
        "Deployment shop/web is rolled out",
    ] {
        assert!(rolled_back.contains(line), "{operations}");
    }
    assert_eq!(ready(rolled_back, "web"), Some("3/3"), "{operations}");
}

/// A label assigned as a commit and live on the node; the lock cordons and taints the
/// host and its pods leave; the unlock gives it back.
fn assert_host_label_and_lock(hosts: &str) {
    assert!(
        hosts.contains("+  openstack-compute-node: enabled"),
        "{hosts}"
    );
    let listed = around(hosts, "tether node label list").1;
    assert!(
        listed
            .lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>()
                == ["tether-sim-2", "openstack-compute-node", "enabled", "yes"]),
        "{hosts}"
    );
    let (locked, unlocked) = around(hosts, "tether node unlock tether-sim-2");
    let locked = around(locked, "tether node lock tether-sim-2").1;
    assert_eq!(
        ready(locked, "tether-sim-2"),
        Some("Ready,SchedulingDisabled"),
        "{hosts}"
    );
    assert!(
        locked.contains(r#"taints: [{"effect":"NoExecute","key":"tether.dev/locked"}]"#),
        "{hosts}"
    );
    let running: Vec<&str> = locked
        .lines()
        .filter(|line| line.contains(" Running "))
        .collect();
    assert!(
        running.iter().all(|line| line.contains(" tether-sim-1 ")),
        "{hosts}"
    );
    for (name, replicas) in [("web-", 3), ("api-", 2), ("reports-", 2), ("cache-", 1)] {
        assert_eq!(
            running.iter().filter(|line| line.starts_with(name)).count(),
            replicas,
            "{hosts}"
        );
    }
    assert_eq!(ready(unlocked, "tether-sim-2"), Some("Ready"), "{hosts}");
}

/// The encrypted Secret: stored encrypted, masked in the diff, applied, and its value
/// in the cluster the one Git holds (by its SHA-256), never printed anywhere.
fn assert_secret_never_shown(whole_output: &str, secret: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let decrypted = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["secret", "decrypt", "examples/encrypted/credentials.yaml"])
        .env(
            "TETHER_AGE_KEY_FILE",
            "examples/encrypted/TEST-ONLY-age-key.txt",
        )
        .current_dir(root)
        .output()
        .unwrap();
    assert!(decrypted.status.success(), "{decrypted:?}");
    let plain = String::from_utf8(decrypted.stdout).unwrap();
    let password = plain
        .lines()
        .find_map(|line| line.trim().strip_prefix("password: "))
        .unwrap_or_else(|| panic!("no password in {plain}"));
    assert!(!whole_output.contains(password), "the password is printed");
    let digest = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut sha256sum| {
            use std::io::Write;
            sha256sum
                .stdin
                .take()
                .unwrap()
                .write_all(password.as_bytes())?;
            sha256sum.wait_with_output()
        })
        .unwrap();
    let digest = String::from_utf8(digest.stdout).unwrap();
    let digest = digest.split_whitespace().next().unwrap();
    for line in [
        "password: ENC[AES256_GCM,",
        "create Secret vault-demo/db-credentials",
        "password: \"*** (after)\"",
        "3 created",
        "all workloads are ready",
        &format!("password: sha256 {digest}"),
    ] {
        assert!(secret.contains(line), "{line:?} in:\n{secret}");
    }
}
