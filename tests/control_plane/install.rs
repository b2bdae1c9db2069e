//! `tether install`, `check`, `uninstall` and `kubectl apply -k deploy/` from an empty
//! cluster, on a control plane of its own (uninstall removes the Source CRD, which
//! the shared control plane's tests use).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tether_admin::install::{NEWEST_SUPPORTED, OLDEST_SUPPORTED};

use crate::cli::{Cli, text};
use tether_testkit::cluster::LocalCluster;
use tether_testkit::remote::{Remote, free_port};

const NS: &str = "tether-system";
const ACCOUNT: &str = "system:serviceaccount:tether-system:tether";

/// Every object install made, by `kind/namespace/name`, with the time of install's
/// last write to it (its field manager's entry; a controller's status update moves
/// the resourceVersion, not that).
fn installed_objects(cli: &Cli) -> BTreeMap<String, String> {
    let kinds = "namespaces,customresourcedefinitions,serviceaccounts,clusterroles,clusterrolebindings,roles,rolebindings,services,statefulsets,poddisruptionbudgets";
    let text = cli.kubectl_ok(&[
        "get",
        kinds,
        "-A",
        "-l",
        "app.kubernetes.io/part-of=tether",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (
                format!(
                    "{}/{}/{}",
                    o["kind"].as_str().unwrap(),
                    m["namespace"].as_str().unwrap_or("-"),
                    m["name"].as_str().unwrap()
                ),
                m["managedFields"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["manager"] == "tether-install")
                    .map(|e| e["time"].to_string())
                    .collect::<String>(),
            )
        })
        .collect()
}

/// The daemon as a process impersonating the installed ServiceAccount (the local
/// control plane runs no container), killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn daemon(kubeconfig: &Path, state: &Path) -> Daemon {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "run",
            "--sources",
            "--leader-elect",
            "--lease-namespace",
            NS,
        ])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .args(["--as", ACCOUNT, "--cache-dir"])
        .arg(state.join("cache"))
        .arg("--state-dir")
        .arg(state.join("state"))
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Daemon(child)
}

#[test]
fn install_check_tree_suspend_uninstall_and_kustomize_from_an_empty_cluster() {
    let cluster = LocalCluster::start(1);
    let cli = Cli {
        kubeconfig: cluster.kubeconfig(),
    };

    // Before installing: the server is in the supported range, and we may install.
    let pre_text = cli.tether_ok(&["check", "--pre"]);
    let version: serde_json::Value =
        serde_json::from_str(&cli.kubectl_ok(&["get", "--raw", "/version"])).unwrap();
    let server = format!(
        "{}.{}",
        version["major"].as_str().unwrap(),
        version["minor"].as_str().unwrap()
    );
    assert!(
        pre_text.contains(&format!(
            "✔ Kubernetes {server} (supported: {OLDEST_SUPPORTED} to {NEWEST_SUPPORTED})"
        )),
        "{pre_text}"
    );
    assert!(pre_text.contains("✔ you may install tether"), "{pre_text}");

    // Install: every object created, the CRD established.
    let first_text = cli.tether_ok(&["install"]);
    for object in [
        "Namespace/tether-system created",
        "CustomResourceDefinition/sources.tether.dev created",
        "CustomResourceDefinition/clusters.tether.dev created",
        "StatefulSet/tether-system/tether created",
        "PodDisruptionBudget/tether-system/tether created",
        "Secret/tether-system/tether-webhook created",
    ] {
        assert!(first_text.contains(object), "{first_text}");
    }
    let installed = installed_objects(&cli);
    // The daemon's 11 objects and the 3 ready-made roles of people on the web page.
    assert_eq!(installed.len(), 14, "{installed:#?}");
    for role in ["tether-viewer", "tether-operator", "tether-host-admin"] {
        assert!(installed.contains_key(&format!("ClusterRole/-/{role}")));
    }
    assert!(installed.contains_key("PodDisruptionBudget/tether-system/tether"));
    let established = cli.kubectl_ok(&[
        "get",
        "crd",
        "sources.tether.dev",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
    ]);
    assert_eq!(established, "True");
    // The webhook secret is random, not a placeholder.
    let webhook_secret = || {
        cli.kubectl_ok(&[
            "get",
            "secret",
            "tether-webhook",
            "-n",
            NS,
            "-o",
            "jsonpath={.data.secret}",
        ])
    };
    let secret = webhook_secret();
    assert_eq!(secret.len(), 88, "64 hex digits, base64-encoded: {secret}");

    // A second install changes nothing, and keeps the webhook secret.
    let second_text = cli.tether_ok(&["install"]);
    assert!(
        second_text.contains("0 of 15 objects changed"),
        "{second_text}"
    );
    assert!(
        !second_text.contains(" created\n") && !second_text.contains(" configured\n"),
        "{second_text}"
    );
    assert_eq!(installed_objects(&cli), installed, "a second install wrote");
    let again = webhook_secret();
    assert_eq!(again, secret);

    // The RBAC grants no wildcard, nor anything over the cluster's own RBAC.
    let rules = cli.kubectl_ok(&["auth", "can-i", "--list", "--as", ACCOUNT]);
    for line in rules.lines().skip(1) {
        let resource = line.split_whitespace().next().unwrap_or_default();
        if resource.starts_with("[/") || resource.is_empty() {
            continue; // non-resource URLs every authenticated user has
        }
        assert!(!line.contains('*'), "a wildcard grant: {line}");
    }
    for (verb, resource, allowed) in [
        ("create", "clusterroles", false),
        ("patch", "nodes", true),
        ("create", "pods --subresource=eviction", true),
        ("create", "networkpolicies.networking.k8s.io", true),
        ("create", "resourcequotas", true),
        ("create", "limitranges", true),
    ] {
        let mut args = vec!["auth", "can-i", verb];
        args.extend(resource.split(' '));
        args.extend(["--as", ACCOUNT]);
        let can = cli.kubectl(&args);
        assert_eq!(can.status.success(), allowed, "{verb} {resource}");
    }

    // The pod template follows the restricted Pod Security profile, and each replica
    // has a volume of its own for its outboxes.
    let set: serde_json::Value = serde_json::from_str(&cli.kubectl_ok(&[
        "get",
        "statefulset",
        "tether",
        "-n",
        NS,
        "-o",
        "json",
    ]))
    .unwrap();
    let pod = &set["spec"]["template"]["spec"];
    assert_eq!(set["spec"]["replicas"], 2);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert_eq!(
        container["image"],
        format!("ghcr.io/tether-dev/tether:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "state"
    );
    assert!(container["env"].to_string().contains("TETHER_STATE_DIR"));

    // The daemon, as the installed ServiceAccount, applies a Source's repository.
    let state = tempfile::tempdir().unwrap();
    let _daemon = daemon(cli.kubeconfig, state.path());
    let remote = Remote::new(&[(
        "shop.yaml",
        "kind: KubernetesService\nname: kubernetes\n---\nkind: TrustDomain\nname: shop\n---\nkind: KubernetesConfigMap\nname: settings\ntrust_domain: shop\ndata:\n  key: v1\n",
    )]);
    let source = format!(
        "apiVersion: tether.dev/v1alpha1\nkind: Source\nmetadata:\n  name: shop\n  namespace: {NS}\nspec:\n  url: {}\n  ref: main\n  path: models\n  interval: 1h\n  prune: true\n",
        remote.url
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), source).unwrap();
    cli.kubectl_ok(&["apply", "-f", file.path().to_str().unwrap()]);
    cli.eventually("the Source applied", Duration::from_secs(60), || {
        cli.kubectl(&["get", "configmap", "settings", "-n", "shop"])
            .status
            .success()
    });

    // check passes: the daemon's pods ready (the simulated node runs them), the
    // webhook's endpoints, the Source's identity may do what its inventory needs.
    cli.eventually(
        "the daemon's replicas ready",
        Duration::from_secs(60),
        || cli.tether(&["check"]).status.success(),
    );
    let check = cli.tether(&["check"]);
    let check_text = text(&check.stdout);
    for line in [
        "✔ CustomResourceDefinition sources.tether.dev established",
        &format!(
            "✔ daemon {}: 2 of 2 replicas ready",
            env!("CARGO_PKG_VERSION")
        ),
        "✔ webhook secret set",
        "✔ Source tether-system/shop: system:serviceaccount:tether-system:tether may apply its",
        "all checks passed",
    ] {
        assert!(check_text.contains(line), "{check_text}");
    }
    let version = text(&cli.tether(&["version"]).stdout);
    assert!(
        version.contains(&format!(
            "daemon: {} (ghcr.io/tether-dev/tether:",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );

    // tree: what the Source's inventory holds.
    let tree = text(&cli.tether(&["tree", "shop", "-n", NS]).stdout);
    assert!(
        tree.starts_with("Source/tether-system/shop (main@sha1:"),
        "{tree}"
    );
    assert!(
        tree.contains("│   └── Namespace/shop (v1)") || tree.contains("├── Namespace/shop (v1)"),
        "{tree}"
    );
    assert!(tree.contains("└── ConfigMap/settings (v1)"), "{tree}");

    let source_field =
        |jsonpath: &str| cli.kubectl_ok(&["get", "source", "shop", "-n", NS, "-o", jsonpath]);
    // suspend and resume set spec.suspend; the daemon says so in the status.
    let suspend = cli.tether(&["suspend", "shop", "-n", NS]);
    assert_eq!(
        text(&suspend.stdout),
        "Source tether-system/shop suspended\n"
    );
    cli.eventually("the status says suspended", Duration::from_secs(30), || {
        cli.kubectl_ok(&[
            "get",
            "source",
            "shop",
            "-n",
            NS,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
        ]) == "Suspended"
    });
    assert_eq!(source_field("jsonpath={.spec.suspend}"), "true");
    let resume = cli.tether(&["resume", "shop", "-n", NS]);
    assert_eq!(text(&resume.stdout), "Source tether-system/shop resumed\n");
    assert_eq!(source_field("jsonpath={.spec.suspend}"), "false");
    let missing = cli.tether(&["suspend", "nothing", "-n", NS]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("cannot update the Source tether-system/nothing"),
        "{}",
        text(&missing.stderr)
    );
    drop(_daemon);

    // Uninstall removes the daemon and the CRD; the applied workload stays.
    let uninstall_text = cli.tether_ok(&["uninstall"]);
    assert!(
        uninstall_text.contains("CustomResourceDefinition/sources.tether.dev deleted"),
        "{uninstall_text}"
    );
    // The namespace stays: it holds the Source's inventory, the record of what it
    // applied (a Source installed later in its place takes the objects up again).
    assert!(
        uninstall_text.contains(
            "Namespace/tether-system kept: it holds 1 tether did not install (ConfigMap/tether-inventory-shop)"
        ),
        "{uninstall_text}"
    );
    // The CRDs go last: the API server deletes their Sources first, and checks every
    // 5 s for up to a minute that none is left before it tries again.
    cli.eventually_eq(
        "everything else installed gone",
        Duration::from_secs(150),
        &vec!["Namespace/-/tether-system".to_string()],
        || installed_objects(&cli).into_keys().collect::<Vec<_>>(),
    );
    assert!(
        cli.kubectl(&["get", "configmap", "tether-inventory-shop", "-n", NS])
            .status
            .success()
    );
    assert!(
        cli.kubectl(&["get", "configmap", "settings", "-n", "shop"])
            .status
            .success()
    );
    let nothing = cli.tether(&["uninstall"]);
    assert_eq!(nothing.status.code(), Some(0));
    assert!(text(&nothing.stdout).contains("nothing of tether was found in tether-system"));

    // kubectl apply -k installs the same set.
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    cli.kubectl_ok(&["apply", "-k", &deploy.display().to_string()]);
    cli.eventually(
        "the kustomization's CRD established",
        Duration::from_secs(30),
        || {
            cli.kubectl(&["get", "crd", "sources.tether.dev"])
                .status
                .success()
        },
    );
    let kustomized: Vec<String> = installed_objects(&cli).into_keys().collect();
    let installed: Vec<String> = installed.into_keys().collect();
    assert_eq!(kustomized, installed);

    // A webhook Secret holding the old template's placeholder fails the check.
    cli.kubectl_ok(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "tether-webhook",
        "--from-literal=secret=REPLACE-WITH-openssl-rand-hex-32",
    ]);
    let weak = cli.tether(&["check"]);
    let weak_text = text(&weak.stdout);
    assert_eq!(weak.status.code(), Some(1), "{weak_text}");
    assert!(
        weak_text.contains("✗ the webhook secret is a template's placeholder"),
        "{weak_text}"
    );
    assert!(!weak_text.contains("all checks passed"));

    // Two installs at once (two terminals, a CI job beside a person): both succeed,
    // and one random secret replaces the deleted placeholder.
    cli.kubectl_ok(&["-n", NS, "delete", "secret", "tether-webhook"]);
    let racing: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_tether"))
                .arg("install")
                .env("KUBECONFIG", cli.kubeconfig)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in racing {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    assert_eq!(webhook_secret().len(), 88);
    cli.tether_ok(&["check"]);

    // Git credentials made with kubectl, as the book's Sources guide says, keep the namespace too.
    cli.kubectl_ok(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "git-credentials",
        "--from-literal=username=x-access-token",
        "--from-literal=token=t0k3n",
    ]);
    let again = cli.tether_ok(&["uninstall"]);
    assert!(
        again.contains("(ConfigMap/tether-inventory-shop, Secret/git-credentials)"),
        "{again}"
    );
    assert!(!again.contains("t0k3n"), "{again}");
    assert!(
        cli.kubectl(&["get", "secret", "git-credentials", "-n", NS])
            .status
            .success()
    );
}

/// The book's bootstrap guide (`docs/book/src/guides/bootstrap.md`): after `tether
/// install`, a Source applies the install exported into Git (with the page's
/// `bootstrap.yaml`, as written but for the repository's URL) as the installed
/// ServiceAccount; it adopts tether's own objects without a conflict, a commit that
/// changes the replicas install wrote is applied, and the export removed from Git
/// releases tether's objects, never deletes them.
#[test]
fn a_source_takes_over_tether_s_own_install_and_upgrades_it_by_commit() {
    let cluster = LocalCluster::start(1);
    let cli = Cli {
        kubeconfig: cluster.kubeconfig(),
    };
    cli.tether_ok(&["install"]);
    let page =
        tether_testkit::book::page(Path::new(env!("CARGO_MANIFEST_DIR")), "guides/bootstrap.md");
    let start = "```yaml\n# clusters/dev/tether-system/bootstrap.yaml\n";
    let block = &page[page.find(start).expect("the page's bootstrap.yaml") + 8..];
    let bootstrap_yaml = &block[..block.find("```").unwrap()];
    assert!(bootstrap_yaml.contains("https://github.com/you/fleet"));

    // The fleet repository, made with the git CLI; the daemon runs here and reads it
    // at its file:// URL.
    let fleet = tempfile::tempdir().unwrap();
    let dir = fleet.path().join("clusters/dev/tether-system");
    std::fs::create_dir_all(&dir).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=you", "-c", "user.email=you@example.com"])
            .args(args)
            .current_dir(fleet.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    let url = format!("file://{}", fleet.path().display());
    let bootstrap_yaml = bootstrap_yaml.replace("https://github.com/you/fleet", &url);
    std::fs::write(
        dir.join("tether.yaml"),
        cli.tether_ok(&["install", "--export"]),
    )
    .unwrap();
    std::fs::write(dir.join("bootstrap.yaml"), &bootstrap_yaml).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "tether manages itself"]);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bootstrap_yaml).unwrap();
    cli.kubectl_ok(&["apply", "-f", file.path().to_str().unwrap()]);
    let state = tempfile::tempdir().unwrap();
    let _daemon = daemon(cluster.kubeconfig(), state.path());
    cli.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "source/fleet",
        "-n",
        NS,
        "--timeout=120s",
    ]);
    let tree = cli.tether_ok(&["tree", "fleet", "-n", NS]);
    for object in [
        "StatefulSet/tether (apps/v1) [adopted]",
        "CustomResourceDefinition/sources.tether.dev (apiextensions.k8s.io/v1) [adopted]",
        "ClusterRoleBinding/tether-bootstrap (rbac.authorization.k8s.io/v1) [adopted]",
        "Source/fleet (tether.dev/v1alpha1) [adopted]",
    ] {
        assert!(tree.contains(object), "{tree}");
    }

    // An upgrade by commit: install's own value of the replicas, changed in Git.
    let three = cli.tether_ok(&["install", "--export", "--replicas", "3"]);
    std::fs::write(dir.join("tether.yaml"), three).unwrap();
    git(&["commit", "-qam", "tether: three replicas"]);
    cli.tether_ok(&["reconcile", "fleet", "-n", NS]);
    let statefulset = cli.json(&[
        "get",
        "statefulset",
        "tether",
        "-n",
        NS,
        "--show-managed-fields",
    ]);
    assert_eq!(statefulset["spec"]["replicas"], 3, "{statefulset}");
    let managers: Vec<&str> = statefulset["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["fieldsV1"]["f:spec"]["f:replicas"].is_object())
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["tether:tether-system/fleet"], "{statefulset}");

    // The export removed from Git: tether's objects are released, not deleted.
    git(&["rm", "-q", "clusters/dev/tether-system/tether.yaml"]);
    git(&["commit", "-qm", "tether's objects out of Git"]);
    cli.tether_ok(&["reconcile", "fleet", "-n", NS]);
    let statefulset = cli.json(&["get", "statefulset", "tether", "-n", NS]);
    assert!(
        statefulset["metadata"]["deletionTimestamp"].is_null(),
        "{statefulset}"
    );
    let labels = &statefulset["metadata"]["labels"];
    assert!(
        labels["applyset.kubernetes.io/part-of"].is_null(),
        "released: {labels}"
    );
    cli.kubectl_ok(&["get", "crd", "sources.tether.dev"]);
    cli.kubectl_ok(&["get", "clusterrole", "tether"]);
}
