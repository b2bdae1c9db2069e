//! Discovery's pure stage: pods in, files under `discovered/` out, next to the
//! examples' own models. Snapshot: tests/snapshots/discover.txt (bless with
//! TETHER_BLESS=1).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use tether_core::discovery::{ClusterChoice, ControllerFacts, Outcome, PodFacts, plan};
use tether_core::k8s::Scope;
use tether_core::ownership::Inventory;
use tether_core::render::render;
use tether_core::source::{SourceFile, SourceFiles};
use tether_engine::directory::read_models_dir;
use tether_testkit::snapshot;

fn inventory() -> Inventory {
    Inventory {
        name: "tether".into(),
        namespace: "default".into(),
    }
}

fn controller(kind: &str, name: &str, replicas: Option<i64>) -> ControllerFacts {
    ControllerFacts {
        kind: kind.into(),
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        replicas,
    }
}

fn pod(namespace: &str, name: &str, image: &str, ip: Option<&str>) -> PodFacts {
    PodFacts {
        namespace: namespace.into(),
        name: name.into(),
        service_account: "default".into(),
        image: image.into(),
        ip: ip.map(str::to_string),
        // A scheduled pod (one with an IP) records its node.
        node: ip.map(|_| "worker-1".to_string()),
        labels: BTreeMap::new(),
        controller: None,
    }
}

/// Pods as Helm, kubectl and controllers leave them, plus one of each kind that
/// tether applied itself.
fn cluster() -> Vec<PodFacts> {
    let applyset = inventory().applyset_id();
    let made_by = |mut c: ControllerFacts, model: &str| {
        c.labels
            .insert("app.kubernetes.io/managed-by".into(), "tether".into());
        c.labels
            .insert("applyset.kubernetes.io/part-of".into(), applyset.clone());
        c.annotations
            .insert("tether.dev/model".into(), model.into());
        c
    };
    let ours = |c: ControllerFacts, slice: &str| made_by(c, &format!("Slice/{slice}"));
    let mut pods = vec![
        // A Deployment made with kubectl, in a namespace that has no model.
        PodFacts {
            controller: Some(controller("Deployment", "web", Some(2))),
            ..pod("team-a", "web-5d8f7-abcde", "nginx:1.27", Some("10.1.0.5"))
        },
        PodFacts {
            controller: Some(controller("Deployment", "web", Some(2))),
            ..pod("team-a", "web-5d8f7-fghij", "nginx:1.27", None)
        },
        // Same controller name in another namespace: slice names stay unique.
        PodFacts {
            controller: Some(controller("StatefulSet", "web", Some(1))),
            service_account: "db".into(),
            ..pod("team-b", "web-0", "postgres:16", Some("10.1.0.6"))
        },
        // The xos_slice_name label names the slice, as in XOS.
        PodFacts {
            controller: Some(ControllerFacts {
                labels: BTreeMap::from([("xos_slice_name".into(), "mysite_logs".into())]),
                ..controller("DaemonSet", "logs", None)
            }),
            ..pod(
                "team-b",
                "logs-x7k2p",
                "fluent/fluent-bit:2.2",
                Some("10.1.0.7"),
            )
        },
        PodFacts {
            controller: Some(controller("Job", "migrate", Some(1))),
            ..pod("team-b", "migrate-q8w9e", "registry.local:5000/tools", None)
        },
        // Bare pods, one in a namespace the user's models define.
        pod("team-b", "debug", "busybox", Some("10.1.0.8")),
        pod("shop", "scratch", "busybox:1.36", Some("10.1.0.9")),
        // A pod with the name of a user's model: that model describes it already.
        pod("shop", "toolbox", "busybox:1.36", Some("10.1.0.12")),
        // A controller tether applied: its pods are instances of the user's Slice.
        PodFacts {
            controller: Some(ours(
                controller("DaemonSet", "log-agent", None),
                "log-agent",
            )),
            ..pod(
                "shop",
                "log-agent-abcde",
                "fluent/fluent-bit:2.2",
                Some("10.1.0.10"),
            )
        },
        // Pods of a chart's and an overlay's Deployments that tether applied: they are
        // in Git already (the chart, the kustomization), so not discovered.
        PodFacts {
            controller: Some(made_by(
                controller("Deployment", "hello", Some(1)),
                "HelmChart/hello",
            )),
            ..pod(
                "shop",
                "hello-7c9d-zx81q",
                "nginx:1.16.0",
                Some("10.1.0.13"),
            )
        },
        PodFacts {
            controller: Some(made_by(
                controller("Deployment", "staging-web", Some(1)),
                "Kustomization/overlays/staging",
            )),
            ..pod(
                "staging",
                "staging-web-5f6-k2j4h",
                "nginx:1.27",
                Some("10.1.0.14"),
            )
        },
        // A bare pod tether applied: not discovered again.
        PodFacts {
            labels: BTreeMap::from([
                ("app.kubernetes.io/managed-by".into(), "tether".into()),
                ("applyset.kubernetes.io/part-of".into(), applyset.clone()),
            ]),
            ..pod(
                "demo-trust",
                "demo-pod",
                "k8s.gcr.io/pause-amd64:3.0",
                Some("10.1.0.11"),
            )
        },
    ];
    pods.reverse(); // input order must not matter
    pods
}

fn examples() -> SourceFiles {
    read_models_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models"))
        .unwrap()
}

/// The repo after the outcome is committed.
fn apply(files: &SourceFiles, outcome: &Outcome) -> SourceFiles {
    let mut all: BTreeMap<String, String> = files
        .iter()
        .map(|(_, f)| (f.path.clone(), f.text.clone()))
        .collect();
    for path in &outcome.removes {
        all.remove(path);
    }
    all.extend(outcome.writes.clone());
    SourceFiles::from_files(
        all.into_iter()
            .map(|(p, t)| SourceFile::new(p, t))
            .collect(),
    )
}

/// The plan for a repo whose cluster needs no choosing (one KubernetesService).
fn discover(pods: &[PodFacts], files: &SourceFiles, scope: &Scope, applyset: &str) -> Outcome {
    plan(pods, files, scope, applyset, &ClusterChoice::default()).unwrap()
}

fn describe(outcome: &Outcome) -> String {
    let mut text = format!("commit message:\n{}", outcome.commit_message());
    for path in &outcome.removes {
        writeln!(text, "=== removed {path}").unwrap();
    }
    for (path, content) in &outcome.writes {
        write!(text, "=== {path}\n{content}").unwrap();
    }
    text
}

#[test]
fn discovered_files_match_the_snapshot_and_validate_with_the_users_models() {
    let files = examples();
    let applyset = inventory().applyset_id();
    let outcome = discover(&cluster(), &files, &Scope::All, &applyset);
    snapshot::check(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/discover.txt"),
        &describe(&outcome),
    );

    let after = apply(&files, &outcome);
    let analysis = tether_core::analyze(&after);
    let graph = analysis
        .graph
        .unwrap_or_else(|| panic!("{}", analysis.diagnostics.render_plain(&after)));
    // Not even a warning is added to the user's own.
    assert_eq!(
        analysis.diagnostics.render_plain(&after),
        tether_core::analyze(&files)
            .diagnostics
            .render_plain(&files)
    );
    // Discovered models render nothing: tether never applies what others run. (The
    // objects are compared without their models' positions, whose file numbers shift
    // with the discovered files.)
    let bodies = |objects: Vec<tether_core::render::RenderedObject>| -> Vec<serde_json::Value> {
        objects.into_iter().map(|o| o.body).collect()
    };
    let before = render(
        &tether_core::analyze(&files).graph.unwrap(),
        &files,
        &inventory(),
    );
    assert_eq!(bodies(render(&graph, &after, &inventory())), bodies(before));

    // Discovering the same cluster again changes nothing, byte for byte.
    let again = discover(&cluster(), &after, &Scope::All, &applyset);
    assert!(again.is_empty(), "{}", describe(&again));
}

#[test]
fn a_vanished_pod_takes_the_models_only_it_needed_along() {
    let files = examples();
    let applyset = inventory().applyset_id();
    let after = apply(
        &files,
        &discover(&cluster(), &files, &Scope::All, &applyset),
    );

    let remaining: Vec<PodFacts> = cluster()
        .into_iter()
        .filter(|p| p.namespace != "team-a" && p.name != "migrate-q8w9e")
        .collect();
    let outcome = discover(&remaining, &after, &Scope::All, &applyset);
    assert_eq!(
        outcome.removes,
        BTreeSet::from([
            "discovered/team-a/namespace.yaml".to_string(),
            "discovered/team-a/pods/web-5d8f7-abcde.yaml".to_string(),
            "discovered/team-a/pods/web-5d8f7-fghij.yaml".to_string(),
            "discovered/team-b/pods/migrate-q8w9e.yaml".to_string(),
        ])
    );
    let images = &outcome.writes["discovered/images.yaml"];
    assert!(!images.contains("nginx") && !images.contains("registry.local:5000/tools"));
    let team_b = &outcome.writes["discovered/team-b/namespace.yaml"];
    assert!(!team_b.contains("migrate"), "{team_b}");
    assert_eq!(
        outcome.commit_message().lines().next().unwrap(),
        "discover: -2 pods in team-a, -1 pods in team-b"
    );
    let analysis = tether_core::analyze(&apply(&after, &outcome));
    assert!(analysis.graph.is_some());
}

#[test]
fn a_namespace_scope_leaves_other_namespaces_and_their_images_alone() {
    let files = examples();
    let applyset = inventory().applyset_id();
    let after = apply(
        &files,
        &discover(&cluster(), &files, &Scope::All, &applyset),
    );

    // team-a's discovery sees its Deployment gone; team-b's files and the images they
    // use stay as they are.
    let scope = Scope::Namespaces(BTreeSet::from(["team-a".to_string()]));
    let outcome = discover(&[], &after, &scope, &applyset);
    assert!(
        outcome
            .removes
            .iter()
            .all(|p| p.starts_with("discovered/team-a/"))
    );
    assert_eq!(outcome.removes.len(), 3);
    let images = &outcome.writes["discovered/images.yaml"];
    assert!(
        images.contains("postgres") && !images.contains("nginx"),
        "{images}"
    );
    assert!(
        tether_core::analyze(&apply(&after, &outcome))
            .graph
            .is_some()
    );
}

#[test]
fn a_discovered_trust_domain_stays_while_a_users_model_needs_it() {
    let files = examples();
    let applyset = inventory().applyset_id();
    let after = apply(
        &files,
        &discover(&cluster(), &files, &Scope::All, &applyset),
    );
    // The user adds a ConfigMap to team-a, a namespace only discovery described.
    let mut with_user_model: Vec<SourceFile> = after.iter().map(|(_, f)| f.clone()).collect();
    with_user_model.push(SourceFile::new(
        "team-a.yaml",
        "kind: KubernetesConfigMap\nname: settings\ntrust_domain: team-a\ndata:\n  mode: fast\n",
    ));
    let with_user_model = SourceFiles::from_files(with_user_model);
    let remaining: Vec<PodFacts> = cluster()
        .into_iter()
        .filter(|p| p.namespace != "team-a")
        .collect();
    let outcome = discover(&remaining, &with_user_model, &Scope::All, &applyset);
    assert_eq!(
        outcome.writes["discovered/team-a/namespace.yaml"],
        "# Discovered by tether from the cluster (xos_managed: false): tether rewrites this file.\n\
         kind: TrustDomain\nname: team-a\nowner: kubernetes\nxos_managed: false\n"
    );
    let final_files = apply(&with_user_model, &outcome);
    let analysis = tether_core::analyze(&final_files);
    assert!(
        analysis.graph.is_some(),
        "{}",
        analysis.diagnostics.render_plain(&final_files)
    );
}

/// One discovery pass of a multi-cluster case: the cluster it watches, and its pods.
struct Pass {
    named: Option<&'static str>,
    context: Option<&'static str>,
    pods: Vec<PodFacts>,
}

/// A repo, the passes discovery makes over it, and the files under `discovered/` then.
struct ClusterCase {
    name: &'static str,
    repo: &'static [(&'static str, &'static str)],
    passes: Vec<Pass>,
    files: &'static [&'static str],
}

fn pod_in(namespace: &str, name: &str) -> PodFacts {
    pod(namespace, name, "busybox:1.36", Some("10.1.0.8"))
}

fn pass(named: Option<&'static str>, context: Option<&'static str>, pods: Vec<PodFacts>) -> Pass {
    Pass {
        named,
        context,
        pods,
    }
}

const TWO_CLUSTERS: &[(&str, &str)] = &[(
    "clusters.yaml",
    "kind: KubernetesService\nname: east\n---\nkind: KubernetesService\nname: west\n",
)];

fn cluster_cases() -> Vec<ClusterCase> {
    let web = |namespace, name| PodFacts {
        controller: Some(controller("Deployment", "web", Some(1))),
        ..pod(namespace, name, "nginx:1.27", Some("10.1.0.5"))
    };
    vec![
        ClusterCase {
            name: "the same namespace on two clusters: a directory per cluster",
            repo: TWO_CLUSTERS,
            passes: vec![
                pass(None, Some("east"), vec![web("shop", "web-a")]),
                pass(None, Some("west"), vec![web("shop", "web-b")]),
            ],
            files: &[
                "discovered/east/shop/namespace.yaml",
                "discovered/east/shop/pods/web-a.yaml",
                "discovered/images.yaml",
                "discovered/west/shop/namespace.yaml",
                "discovered/west/shop/pods/web-b.yaml",
            ],
        },
        ClusterCase {
            name: "one cluster's pods gone: the other's stay",
            repo: TWO_CLUSTERS,
            passes: vec![
                pass(Some("east"), None, vec![web("shop", "web-a")]),
                pass(Some("west"), None, vec![web("shop", "web-b")]),
                pass(Some("east"), None, vec![]),
            ],
            files: &[
                "discovered/images.yaml",
                "discovered/west/shop/namespace.yaml",
                "discovered/west/shop/pods/web-b.yaml",
            ],
        },
        ClusterCase {
            name: "one KubernetesService: today's layout",
            repo: &[("cluster.yaml", "kind: KubernetesService\nname: east\n")],
            passes: vec![pass(None, Some("kind-dev"), vec![web("shop", "web-a")])],
            files: &[
                "discovered/images.yaml",
                "discovered/shop/namespace.yaml",
                "discovered/shop/pods/web-a.yaml",
            ],
        },
        ClusterCase {
            name: "a named KubernetesService the repo lacks is written",
            repo: &[],
            passes: vec![pass(Some("east"), None, vec![web("shop", "web-a")])],
            files: &[
                "discovered/images.yaml",
                "discovered/kubernetes-services.yaml",
                "discovered/shop/namespace.yaml",
                "discovered/shop/pods/web-a.yaml",
            ],
        },
        ClusterCase {
            name: "a second KubernetesService named: both clusters get a directory, the first's files move",
            repo: &[("cluster.yaml", "kind: KubernetesService\nname: east\n")],
            passes: vec![
                pass(None, None, vec![web("shop", "web-a")]),
                pass(Some("west"), None, vec![web("shop", "web-b")]),
                pass(Some("east"), None, vec![web("shop", "web-a")]),
            ],
            files: &[
                "discovered/east/shop/namespace.yaml",
                "discovered/east/shop/pods/web-a.yaml",
                "discovered/images.yaml",
                "discovered/kubernetes-services.yaml",
                "discovered/west/shop/namespace.yaml",
                "discovered/west/shop/pods/web-b.yaml",
            ],
        },
    ]
}

fn repo_of(files: &[(&str, &str)]) -> SourceFiles {
    SourceFiles::from_files(files.iter().map(|(p, t)| SourceFile::new(*p, *t)).collect())
}

#[test]
fn each_clusters_pods_land_under_its_kubernetes_service() {
    let applyset = inventory().applyset_id();
    for case in cluster_cases() {
        let mut files = repo_of(case.repo);
        for pass in &case.passes {
            let choice = ClusterChoice {
                named: pass.named.map(str::to_string),
                context: pass.context.map(str::to_string),
            };
            let outcome = plan(&pass.pods, &files, &Scope::All, &applyset, &choice)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            files = apply(&files, &outcome);
            // The next pass of the same cluster changes nothing.
            let again = plan(&pass.pods, &files, &Scope::All, &applyset, &choice).unwrap();
            assert!(again.is_empty(), "{}: {}", case.name, describe(&again));
        }
        let discovered: Vec<&str> = files
            .iter()
            .map(|(_, f)| f.path.as_str())
            .filter(|p| p.starts_with("discovered/"))
            .collect();
        assert_eq!(discovered, case.files, "{}", case.name);
        // The clusters' models validate together, the user's with them.
        let analysis = tether_core::analyze(&files);
        assert!(
            analysis.graph.is_some(),
            "{}: {}",
            case.name,
            analysis.diagnostics.render_plain(&files)
        );
    }
}

#[test]
fn the_same_namespace_in_a_second_cluster_has_a_trust_domain_of_its_own() {
    let applyset = inventory().applyset_id();
    let mut files = repo_of(TWO_CLUSTERS);
    for (service, pod) in [("east", "web-a"), ("west", "web-b")] {
        let choice = ClusterChoice {
            named: Some(service.into()),
            context: None,
        };
        let pods = [pod_in("shop", pod)];
        files = apply(
            &files,
            &plan(&pods, &files, &Scope::All, &applyset, &choice).unwrap(),
        );
    }
    let text = |path: &str| {
        files
            .iter()
            .find(|(_, f)| f.path == path)
            .map(|(_, f)| f.text.clone())
            .unwrap_or_else(|| panic!("no {path}"))
    };
    // The first keeps the namespace's name; the second's is qualified by its cluster.
    assert!(
        text("discovered/east/shop/namespace.yaml")
            .contains("kind: TrustDomain\nname: shop\nowner: east\n")
    );
    let west = text("discovered/west/shop/namespace.yaml");
    assert!(
        west.contains("kind: TrustDomain\nname: west-shop\nowner: west\n"),
        "{west}"
    );
    assert!(west.contains("trust_domain: west-shop\n"), "{west}");
    assert!(
        west.contains("description: pods without a controller in shop\n"),
        "{west}"
    );
}

#[test]
fn discovered_trust_domains_and_pods_name_their_kubernetes_service() {
    let applyset = inventory().applyset_id();
    let files = repo_of(TWO_CLUSTERS);
    let choice = |context: &str| ClusterChoice {
        named: None,
        context: Some(context.into()),
    };
    let pods = [pod("shop", "debug", "busybox:1.36", Some("10.1.0.8"))];
    let outcome = plan(&pods, &files, &Scope::All, &applyset, &choice("west")).unwrap();
    assert_eq!(
        outcome.writes["discovered/west/shop/pods/debug.yaml"],
        "# Discovered by tether from the cluster (xos_managed: false): tether rewrites this file.\n\
         # Pod shop/debug.\n\
         kind: KubernetesServiceInstance\nname: debug\nslice: shop\nimage: busybox:1.36\n\
         owner: west\nxos_managed: false\npod_ip: \"10.1.0.8\"\nnode: worker-1\n"
    );
    assert!(
        outcome.writes["discovered/west/shop/namespace.yaml"]
            .contains("kind: TrustDomain\nname: shop\nowner: west\nxos_managed: false\n")
    );
    assert_eq!(
        outcome.commit_message().lines().next().unwrap(),
        "discover: +1 pods in west/shop"
    );
    // Discovered on different namespaces, both clusters' models validate together.
    let after = apply(&files, &outcome);
    let others = [pod("team-a", "debug", "busybox:1.36", None)];
    let after = apply(
        &after,
        &plan(&others, &after, &Scope::All, &applyset, &choice("east")).unwrap(),
    );
    let analysis = tether_core::analyze(&after);
    assert!(
        analysis.graph.is_some(),
        "{}",
        analysis.diagnostics.render_plain(&after)
    );
}

#[test]
fn with_several_kubernetes_services_and_no_way_to_tell_discovery_changes_nothing() {
    let applyset = inventory().applyset_id();
    let files = repo_of(TWO_CLUSTERS);
    let pods = [pod("shop", "debug", "busybox:1.36", None)];
    let choice = ClusterChoice {
        named: None,
        context: Some("kind-dev".into()),
    };
    let error = plan(&pods, &files, &Scope::All, &applyset, &choice).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the repo has several KubernetesServices (east, west) and none is named like the kubeconfig context \"kind-dev\": cannot tell which one the watched cluster is"
    );
}
