//! Flux's "mean time to production" benchmark (fluxcd/flux-benchmark), side by side
//! with Flux on the same server and cores. N applications, each the four objects of
//! Flux's podinfo (a Deployment scaled to zero, a ServiceAccount, a Service, an
//! Ingress), in one Git repository with a directory per application, served over smart
//! HTTP; all made at once. For each size, each run on a fresh control plane:
//!
//! - the server's floor: a minimal client applying the same objects with server-side
//!   apply at the concurrency that applies as many ConfigMaps fastest (of 8, 16, 32,
//!   64);
//! - tether, a Source per application, and one Source for all of them;
//! - Flux: source-controller and kustomize-controller as local processes, a
//!   GitRepository and a Kustomization (`wait: true`) per application, as Flux's
//!   harness makes an OCIRepository and a Kustomization per application.
//!
//! Two shapes of application, each run by both tools: the objects as files (Flux's
//! Kustomization benchmark), and a chart of the same objects in a local OCI registry
//! (its HelmRelease benchmark): tether reads a HelmChart model per application and
//! renders it with `helm template`; Flux, whose helm-controller the module proxy does
//! not serve, applies with its kustomize-controller what `helm template` rendered of
//! the chart ahead (said so in the table). The floor runs once a size: both shapes
//! are the same objects.
//!
//! Each row: the time from creation until every application is Ready (the tool says
//! so for the commit, and every Deployment is observed ready), the tool's peak RSS and
//! CPU seconds (with those of the `helm` it ran), its writes and lists per application (the audit log logs those), then
//! one push changing every application (each source asked to reconcile, as a webhook
//! receiver would) until all are Ready again, then a quiet window: requests other
//! than Leases, and CPU per application.
//!
//! Run with `cargo bench --bench mttp` (`-- --sizes 100,500 --cpus 1 --runs
//! tether-each,tether-one,flux --shapes kustomize,helm`, the floor always); `cargo
//! test --bench mttp` smoke-runs it with 3 applications.

// Shared by the benchmarks; each uses part of it.
#[path = "common/floor.rs"]
mod floor;
#[allow(dead_code)]
#[path = "common/kube.rs"]
mod kube_helpers;
#[allow(dead_code)]
#[path = "common/mode.rs"]
mod mode;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use tether_testkit::audit::entries_since;
use tether_testkit::cluster::LocalCluster;
use tether_testkit::registry::Registry;
use tether_testkit::remote::{Remote, borrowed, free_port};
use tether_testkit::tools::helm_tools;

/// Where the applications' objects go (Flux's harness: the tenant's namespace).
const APPS: &str = "mttp";
const SOURCES: &str = "tether-mttp";
const FLUX: &str = "flux-system";
/// How many applications are made at once, by every run alike.
const CREATE_CONCURRENCY: usize = 16;
/// The Deployments' color as made, and as the push changes it.
const COLOR: &str = "#34577c";
const PUSHED_COLOR: &str = "#ff0000";
/// The Helm shape's chart, in the registry's `charts/`.
const CHART: &str = "podinfo-app";
const CHART_VERSION: &str = "1.0.0";

fn main() {
    let sizes: Vec<usize> =
        list_arg("--sizes").unwrap_or_else(|| mode::size(vec![100, 500, 1000], vec![3]));
    let cpus = string_arg("--cpus").unwrap_or_else(|| "1".to_string());
    let runs: Vec<Run> = match string_arg("--runs") {
        Some(names) => names.split(',').map(|n| Run::named(n.trim())).collect(),
        None => vec![Run::TetherEach, Run::TetherOne, Run::Flux],
    };
    let shapes: Vec<Shape> = match string_arg("--shapes") {
        Some(names) => names.split(',').map(|n| Shape::named(n.trim())).collect(),
        None => vec![Shape::Kustomize, Shape::Helm],
    };
    let quiet = Duration::from_secs(mode::size(20, 3));
    let flux = Flux::built();
    let chart = shapes.contains(&Shape::Helm).then(Chart::published);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut header = false;
    for size in sizes {
        // The floor always runs, once a size: both shapes are the same objects, and
        // every ratio is to it.
        let mut floor: Option<Row> = None;
        let floor_run = std::iter::once((Shape::Kustomize, Run::Floor));
        let tool_runs = shapes
            .iter()
            .flat_map(|&shape| runs.iter().map(move |&run| (shape, run)));
        for (shape, run) in floor_run.chain(tool_runs) {
            let cluster = LocalCluster::start(0);
            if !header {
                print_header(&cluster.release(), &cpus, &flux);
                header = true;
            }
            let bench = Bench {
                cluster: &cluster,
                size,
                cpus: &cpus,
                quiet,
                flux: &flux,
            };
            let files = shape.files(run, size, COLOR, chart.as_ref());
            let changed = shape.files(run, size, PUSHED_COLOR, chart.as_ref());
            let row = runtime.block_on(bench.run(run, &files, &changed));
            print_row(size, shape, &row, floor.as_ref().unwrap_or(&row), quiet);
            if run == Run::Floor {
                floor = Some(row);
            }
        }
    }
}

fn string_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn list_arg(name: &str) -> Option<Vec<usize>> {
    string_arg(name).map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
}

/// Flux's podinfo application `index`, as its harness substitutes it (`${INDEX}` is
/// `<index>app`, no pods, 1m CPU), in the applications' namespace; `color` is what a
/// push changes (the Deployment's pod template, so a new generation rolls out).
fn app(index: usize, color: &str) -> String {
    app_named(&release(index), color)
}

/// Application `index`'s name (its release's, in the Helm shape).
fn release(index: usize) -> String {
    format!("podinfo-{index}app")
}

/// The four objects of the application `name`, `color` in its pod template: literal
/// values, or the chart's template expressions.
fn app_named(name: &str, color: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: "{name}"
  namespace: {APPS}
  labels:
    app.kubernetes.io/name: "{name}"
    app.kubernetes.io/version: "6.5.3"
---
apiVersion: v1
kind: Service
metadata:
  name: "{name}"
  namespace: {APPS}
  labels:
    app.kubernetes.io/name: "{name}"
    app.kubernetes.io/version: "6.5.3"
spec:
  type: ClusterIP
  ports:
    - port: 9898
      targetPort: http
      protocol: TCP
      name: http
    - port: 9999
      targetPort: grpc
      protocol: TCP
      name: grpc
  selector:
    app.kubernetes.io/name: "{name}"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: "{name}"
  namespace: {APPS}
  labels:
    app.kubernetes.io/name: "{name}"
    app.kubernetes.io/version: "6.5.3"
spec:
  replicas: 0
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: "{name}"
  template:
    metadata:
      labels:
        app.kubernetes.io/name: "{name}"
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "9898"
    spec:
      terminationGracePeriodSeconds: 30
      serviceAccountName: "{name}"
      containers:
        - name: podinfo
          image: "ghcr.io/stefanprodan/podinfo:6.5.3"
          imagePullPolicy: IfNotPresent
          command:
            - ./podinfo
            - --port=9898
            - --cert-path=/data/cert
            - --port-metrics=9797
            - --grpc-port=9999
            - --grpc-service-name=podinfo
            - --level=info
            - --random-delay=false
            - --random-error=false
          env:
            - name: PODINFO_UI_COLOR
              value: "{color}"
          ports:
            - name: http
              containerPort: 9898
              protocol: TCP
            - name: http-metrics
              containerPort: 9797
              protocol: TCP
            - name: grpc
              containerPort: 9999
              protocol: TCP
          livenessProbe:
            exec:
              command: [podcli, check, http, "localhost:9898/healthz"]
            initialDelaySeconds: 1
            timeoutSeconds: 5
            failureThreshold: 3
            successThreshold: 1
            periodSeconds: 10
          readinessProbe:
            exec:
              command: [podcli, check, http, "localhost:9898/readyz"]
            initialDelaySeconds: 1
            timeoutSeconds: 5
            failureThreshold: 3
            successThreshold: 1
            periodSeconds: 10
          volumeMounts:
            - name: data
              mountPath: /data
          resources:
            requests:
              cpu: "1m"
              memory: 16Mi
      volumes:
        - name: data
          emptyDir: {{}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: "{name}"
  namespace: {APPS}
  labels:
    app.kubernetes.io/name: "{name}"
    app.kubernetes.io/version: "6.5.3"
spec:
  ingressClassName: "nginx"
  rules:
    - host: "{name}.local"
      http:
        paths:
          - path: /
            pathType: ImplementationSpecific
            backend:
              service:
                name: "{name}"
                port:
                  number: 9898
"#
    )
}

/// The repository's files: `apps/app-N/podinfo.yaml` (under the remote's `models/`).
fn apps(size: usize, color: &str) -> Vec<(String, String)> {
    (0..size).map(|i| (app_file(i), app(i, color))).collect()
}

fn app_file(index: usize) -> String {
    format!("apps/app-{index}/podinfo.yaml")
}

/// The path of application `index` in the repository.
fn app_path(index: usize) -> String {
    format!("models/apps/app-{index}")
}

/// How an application is written: its objects as files (Flux's Kustomization
/// benchmark), or a chart of the same objects in an OCI registry (its HelmRelease
/// benchmark).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Kustomize,
    Helm,
}

impl Shape {
    /// A shape by its name on the command line (`--shapes kustomize,helm`).
    fn named(name: &str) -> Shape {
        match name {
            "kustomize" => Shape::Kustomize,
            "helm" => Shape::Helm,
            other => panic!("--shapes: {other}? (kustomize, helm)"),
        }
    }

    /// The repository's files for `run`. In the Helm shape tether reads a HelmChart
    /// model per application, and Flux (without helm-controller) applies what `helm
    /// template` rendered of the chart ahead, as its kustomize-controller would.
    fn files(
        self,
        run: Run,
        size: usize,
        color: &str,
        chart: Option<&Chart>,
    ) -> Vec<(String, String)> {
        let chart = || chart.expect("the chart of the Helm shape");
        match (self, run) {
            (Shape::Kustomize, _) | (Shape::Helm, Run::Floor) => apps(size, color),
            (Shape::Helm, Run::TetherEach | Run::TetherOne) => (0..size)
                .map(|i| (app_file(i), chart().model(i, color)))
                .collect(),
            (Shape::Helm, Run::Flux) => chart().rendered(size, color),
        }
    }

    fn label(self, run: Run) -> &'static str {
        match (self, run) {
            (Shape::Kustomize, _) | (Shape::Helm, Run::Floor) => "",
            (Shape::Helm, Run::Flux) => ", chart rendered ahead",
            (Shape::Helm, _) => ", HelmChart",
        }
    }
}

/// The Helm shape's chart: the application's four objects as one template (its name
/// the release's, its color a value), packaged by `helm` and pushed to a registry of
/// its own.
struct Chart {
    registry: Registry,
    archive: PathBuf,
    _dir: tempfile::TempDir,
}

impl Chart {
    fn published() -> Chart {
        let dir = tempfile::tempdir().expect("a directory");
        let chart = dir.path().join(CHART);
        std::fs::create_dir_all(chart.join("templates")).expect("the chart's directory");
        let files = [
            (
                "Chart.yaml",
                format!(
                    "apiVersion: v2\nname: {CHART}\nversion: {CHART_VERSION}\nappVersion: 6.5.3\n"
                ),
            ),
            ("values.yaml", format!("color: \"{COLOR}\"\n")),
            (
                "templates/podinfo.yaml",
                app_named("{{ .Release.Name }}", "{{ .Values.color }}"),
            ),
        ];
        for (name, text) in files {
            std::fs::write(chart.join(name), text).expect("a chart file");
        }
        let registry = Registry::start();
        Chart::helm(dir.path(), &["package", CHART]);
        let archive = dir.path().join(format!("{CHART}-{CHART_VERSION}.tgz"));
        let repository = format!("oci://{}/charts", registry.host());
        let pushed = archive.display().to_string();
        Chart::helm(dir.path(), &["push", &pushed, &repository, "--plain-http"]);
        Chart {
            registry,
            archive,
            _dir: dir,
        }
    }

    /// Runs the pinned `helm` in `dir` with its settings there; its output.
    fn helm(dir: &Path, args: &[&str]) -> String {
        let output = Command::new(&helm_tools().helm)
            .args(args)
            .current_dir(dir)
            .env("HELM_CONFIG_HOME", dir.join("helm-config"))
            .env("HELM_CACHE_HOME", dir.join("helm-cache"))
            .output()
            .expect("helm");
        assert!(
            output.status.success(),
            "helm {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Application `index` as tether's HelmChart model: the chart from the registry,
    /// `color` a value.
    fn model(&self, index: usize, color: &str) -> String {
        format!(
            "kind: HelmChart\nname: {}\nchart: {CHART}\nrepository: oci://{}/charts\n\
             version: \"{CHART_VERSION}\"\ntrust_domain: {APPS}\nvalues:\n  color: \"{color}\"\n",
            release(index),
            self.registry.host()
        )
    }

    /// Every application's objects as `helm template` renders the chart for it, as
    /// many at once as the machine has cores.
    fn rendered(&self, size: usize, color: &str) -> Vec<(String, String)> {
        let dir = self.archive.parent().expect("the chart's directory");
        let archive = self.archive.display().to_string();
        let value = format!("color={color}");
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let indexes: Vec<usize> = (0..size).collect();
        std::thread::scope(|scope| {
            let rendering: Vec<_> = indexes
                .chunks(size.div_ceil(threads).max(1))
                .map(|chunk| {
                    let (archive, value) = (&archive, &value);
                    scope.spawn(move || {
                        chunk
                            .iter()
                            .map(|&i| {
                                let name = release(i);
                                let args = ["template", &name, archive, "--namespace", APPS];
                                let args = [&args[..], &["--set-string", value]].concat();
                                (app_file(i), Chart::helm(dir, &args))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            rendering
                .into_iter()
                .flat_map(|r| r.join().expect("helm template"))
                .collect()
        })
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Run {
    Floor,
    TetherEach,
    TetherOne,
    Flux,
}

impl Run {
    /// A run by its name on the command line (`--runs tether-each,tether-one,flux`).
    fn named(name: &str) -> Run {
        match name {
            "tether-each" => Run::TetherEach,
            "tether-one" => Run::TetherOne,
            "flux" => Run::Flux,
            other => panic!("--runs: {other}? (tether-each, tether-one, flux)"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Run::Floor => "server floor (SSA)",
            Run::TetherEach => "tether, a Source per app",
            Run::TetherOne => "tether, one Source",
            Run::Flux => "Flux, per app",
        }
    }
}

/// What one run measured.
struct Row {
    run: Run,
    /// The floor's concurrency, for its label.
    note: String,
    /// Until the tool said every app applied at the commit (Flux's `wait` makes that
    /// its health checks too); the floor: until its last apply was answered.
    applied: Duration,
    ready: Duration,
    push: Duration,
    peak_mib: f64,
    cpu: Duration,
    /// Writes and lists per application until all were Ready (the floor's client
    /// shares its user agent with the benchmark's own polling: not counted).
    requests_per_app: Option<f64>,
    /// A line under the row: the tool's requests per app by verb and resource, or the
    /// floor's trials.
    detail: String,
    /// Requests other than Leases in the quiet window.
    quiet_requests: usize,
    /// CPU per application in the quiet window, microseconds a second.
    quiet_cpu_per_app: f64,
}

/// A process the benchmark started (pinned to the run's CPUs), killed when dropped.
struct Process {
    child: Child,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// `program args…` under `taskset -c cpus`, its output in `log`.
    fn start(
        cpus: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Process {
        let log = std::fs::File::create(log).expect("a log file");
        let child = Command::new("taskset")
            .args(["-c", cpus])
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .expect("taskset");
        Process { child }
    }

    fn peak_mib(&self) -> f64 {
        kube_helpers::process_memory(self.child.id(), "VmHWM:")
    }

    fn cpu(&self) -> Duration {
        kube_helpers::process_cpu(self.child.id())
    }
}

/// Flux's controllers, built from tools/go/flux-2.9 (scripts/flux-peer), and their CRDs.
struct Flux {
    dir: PathBuf,
    versions: String,
}

impl Flux {
    fn built() -> Flux {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = Command::new(root.join("scripts/flux-peer"))
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/flux-peer");
        assert!(output.status.success(), "scripts/flux-peer failed");
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        let versions = std::fs::read_to_string(dir.join("versions"))
            .expect("the versions scripts/flux-peer wrote")
            .trim()
            .to_string();
        Flux { dir, versions }
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.join("crds"))
            .expect("Flux's CRDs")
            .map(|e| e.expect("a CRD file").path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(f).expect("a CRD file");
                serde_saphyr::from_str(&text).expect("a CRD")
            })
            .collect()
    }
}

struct Bench<'a> {
    cluster: &'a LocalCluster,
    size: usize,
    cpus: &'a str,
    quiet: Duration,
    flux: &'a Flux,
}

/// A resource of the tools', by group, version and kind.
fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn condition_true(object: &Value, kind: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// Whether the controller saw `deployment` at its generation, with `color` in its
/// template, and (scaled to zero here) nothing left to roll out.
fn deployment_ready(deployment: &Deployment, color: &str) -> bool {
    let Some(status) = &deployment.status else {
        return false;
    };
    let observed = status.observed_generation >= deployment.metadata.generation;
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let rolled = status.updated_replicas.unwrap_or(0) >= wanted
        && status.available_replicas.unwrap_or(0) >= wanted
        && status.replicas.unwrap_or(0) == wanted;
    let has_color = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .is_some_and(|env| env.iter().any(|e| e.value.as_deref() == Some(color)));
    observed && rolled && has_color
}

impl Bench<'_> {
    async fn run(&self, run: Run, files: &[(String, String)], changed: &[(String, String)]) -> Row {
        let client = self.cluster.client().await;
        kube_helpers::namespace(&client, APPS).await;
        match run {
            Run::Floor => self.floor(&client, files, changed).await,
            Run::TetherEach | Run::TetherOne | Run::Flux => {
                self.tool(&client, run, files, changed).await
            }
        }
    }

    fn audit(&self) -> PathBuf {
        self.cluster.state_dir().join("logs/audit.log")
    }

    /// Waits until `ready` counts every application; panics after an hour.
    async fn until(&self, what: &str, mut ready: impl AsyncFnMut() -> usize) {
        let deadline = Instant::now() + Duration::from_secs(3600);
        loop {
            let count = ready().await;
            if count >= self.size {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {count} of {} after an hour",
                self.size
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// How many Deployments are ready with `color`.
    async fn deployments_ready(client: &Client, namespace: &str, color: &str) -> usize {
        let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        api.list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|d| deployment_ready(d, color))
                    .count()
            })
            .unwrap_or(0)
    }

    /// The floor: every object applied with server-side apply by a minimal client, at
    /// each concurrency in a namespace of its own; the fastest is kept.
    async fn floor(
        &self,
        client: &Client,
        files: &[(String, String)],
        changed: &[(String, String)],
    ) -> Row {
        let objects = |files: &[(String, String)], namespace: &str| -> Vec<Value> {
            files
                .iter()
                .flat_map(|(_, text)| {
                    serde_saphyr::from_multiple::<Value>(text).expect("the app's YAML")
                })
                .map(|mut object| {
                    object["metadata"]["namespace"] = json!(namespace);
                    object
                })
                .collect()
        };
        let (concurrency, trials) =
            floor::best_concurrency(client, 4 * self.size, &format!("{APPS}-trial")).await;
        let started = Instant::now();
        floor::apply_all(client, objects(files, APPS), concurrency).await;
        let applied = started.elapsed();
        self.until("floor", async || {
            Self::deployments_ready(client, APPS, COLOR).await
        })
        .await;
        let ready = started.elapsed();
        let started = Instant::now();
        floor::apply_all(client, objects(changed, APPS), concurrency).await;
        self.until("floor push", async || {
            Self::deployments_ready(client, APPS, PUSHED_COLOR).await
        })
        .await;
        Row {
            run: Run::Floor,
            note: format!(", {concurrency} in flight"),
            applied,
            ready,
            push: started.elapsed(),
            peak_mib: 0.0,
            cpu: Duration::ZERO,
            requests_per_app: None,
            detail: trials,
            quiet_requests: 0,
            quiet_cpu_per_app: 0.0,
        }
    }

    /// tether or Flux: the tool started, its objects made, all Ready; a push; quiet.
    async fn tool(
        &self,
        client: &Client,
        run: Run,
        files: &[(String, String)],
        changed: &[(String, String)],
    ) -> Row {
        let remote = Remote::new(&borrowed(files));
        let http = remote.serve_http();
        let work = tempfile::tempdir().expect("a directory");
        let processes = match run {
            Run::Flux => self.start_flux(client, work.path()).await,
            _ => self.start_tether(client, work.path()).await,
        };
        let agents: &[&str] = match run {
            Run::Flux => &["source-controller/", "kustomize-controller/"],
            _ => &["tether/"],
        };
        let offset = std::fs::metadata(self.audit())
            .map(|m| m.len())
            .unwrap_or(0);
        let head = format!("main@sha1:{}", remote.head_of_bare("main"));
        let started = Instant::now();
        let sources = self.create(client, run, &http.url).await;
        let applied = self
            .until_ready(client, run, sources, &head, COLOR, started)
            .await;
        let ready = started.elapsed();
        let by_kind = requests(&self.audit(), offset, agents, false);

        // One push changing every application; each source asked to reconcile.
        remote.push("main", &borrowed(changed));
        let head = format!("main@sha1:{}", remote.head_of_bare("main"));
        let pushed = Instant::now();
        self.request_reconcile(client, run, sources).await;
        self.until_ready(client, run, sources, &head, PUSHED_COLOR, pushed)
            .await;
        let push = pushed.elapsed();
        let peak_mib = processes.iter().map(Process::peak_mib).sum();
        let cpu = processes.iter().map(Process::cpu).sum();

        // Quiet: nothing changes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let offset = std::fs::metadata(self.audit())
            .map(|m| m.len())
            .unwrap_or(0);
        let cpu_before: Duration = processes.iter().map(Process::cpu).sum();
        tokio::time::sleep(self.quiet).await;
        let quiet_cpu: Duration = processes.iter().map(Process::cpu).sum::<Duration>() - cpu_before;
        let quiet_requests = requests(&self.audit(), offset, agents, true).values().sum();
        Row {
            run,
            note: String::new(),
            applied,
            ready,
            push,
            peak_mib,
            cpu,
            requests_per_app: Some(by_kind.values().sum::<usize>() as f64 / self.size as f64),
            detail: per_app(&by_kind, self.size),
            quiet_requests,
            quiet_cpu_per_app: quiet_cpu.as_secs_f64() * 1e6
                / self.quiet.as_secs_f64()
                / self.size as f64,
        }
    }

    async fn start_tether(&self, client: &Client, work: &Path) -> Vec<Process> {
        kube_helpers::install_source_crd(client).await;
        kube_helpers::namespace(client, SOURCES).await;
        let tether = Path::new(env!("CARGO_BIN_EXE_tether"));
        let args: Vec<String> = vec![
            "run".into(),
            "--sources".into(),
            "--sources-namespace".into(),
            SOURCES.into(),
            format!("--listen=127.0.0.1:{}", free_port()),
            "--cache-dir".into(),
            work.join("cache").display().to_string(),
            "--kubeconfig".into(),
            self.cluster.kubeconfig().display().to_string(),
        ];
        // Charts are rendered by the pinned `helm`, pulled into the run's own cache.
        let helm = helm_tools().helm.display().to_string();
        let charts = work.join("charts").display().to_string();
        let env = [
            ("TETHER_HELM", helm.as_str()),
            ("TETHER_CHART_CACHE", charts.as_str()),
        ];
        vec![Process::start(
            self.cpus,
            tether,
            &args,
            &env,
            &work.join("tether.log"),
        )]
    }

    async fn start_flux(&self, client: &Client, work: &Path) -> Vec<Process> {
        for crd in self.flux.crds() {
            kube_helpers::install_crd(client, crd).await;
        }
        kube_helpers::namespace(client, FLUX).await;
        let storage = free_port();
        std::fs::create_dir_all(work.join("storage")).expect("the artifact storage");
        let kubeconfig = self.cluster.kubeconfig().display().to_string();
        // As Flux's benchmark installs them: all namespaces, no leader election here
        // (one replica each, as tether), source-controller at 10 reconciles at once,
        // kustomize-controller at 20 with its build directory on tmpfs.
        let tmpfs = tempfile::tempdir_in("/dev/shm")
            .expect("a tmpfs directory")
            .keep();
        let env = [
            ("KUBECONFIG", kubeconfig.as_str()),
            ("RUNTIME_NAMESPACE", FLUX),
        ];
        let source = Process::start(
            self.cpus,
            &self.flux.dir.join("source-controller"),
            &[
                "--watch-all-namespaces=true".into(),
                "--concurrent=10".into(),
                format!("--storage-path={}", work.join("storage").display()),
                format!("--storage-addr=127.0.0.1:{storage}"),
                format!("--storage-adv-addr=127.0.0.1:{storage}"),
                format!("--metrics-addr=127.0.0.1:{}", free_port()),
                format!("--health-addr=127.0.0.1:{}", free_port()),
            ],
            &env,
            &work.join("source-controller.log"),
        );
        let tmpdir = tmpfs.display().to_string();
        let kustomize = Process::start(
            self.cpus,
            &self.flux.dir.join("kustomize-controller"),
            &[
                "--watch-all-namespaces=true".into(),
                "--concurrent=20".into(),
                "--no-remote-bases=true".into(),
                format!("--metrics-addr=127.0.0.1:{}", free_port()),
                format!("--health-addr=127.0.0.1:{}", free_port()),
            ],
            &[env[0], env[1], ("TMPDIR", tmpdir.as_str())],
            &work.join("kustomize-controller.log"),
        );
        vec![source, kustomize]
    }

    /// Makes the run's objects, `CREATE_CONCURRENCY` at once; returns how many
    /// sources it made.
    async fn create(&self, client: &Client, run: Run, url: &str) -> usize {
        let objects: Vec<(ApiResource, Value)> = match run {
            Run::TetherOne => vec![(tether_source(), source_object("apps", url, "models/apps"))],
            Run::TetherEach => (0..self.size)
                .map(|i| {
                    (
                        tether_source(),
                        source_object(&format!("app-{i}"), url, &app_path(i)),
                    )
                })
                .collect(),
            Run::Flux => (0..self.size).flat_map(|i| flux_objects(i, url)).collect(),
            Run::Floor => Vec::new(),
        };
        let sources = match run {
            Run::TetherOne => 1,
            _ => self.size,
        };
        stream::iter(objects)
            .for_each_concurrent(CREATE_CONCURRENCY, |(resource, object)| async move {
                let namespace = object["metadata"]["namespace"]
                    .as_str()
                    .expect("a namespace");
                let name = object["metadata"]["name"].as_str().expect("a name");
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), namespace, &resource);
                api.patch(name, &PatchParams::apply("mttp"), &Patch::Apply(&object))
                    .await
                    .expect("create");
            })
            .await;
        sources
    }

    /// Until every source says Ready for `head` and every Deployment is ready with
    /// `color`; returns when (after `since`) the sources all said so.
    async fn until_ready(
        &self,
        client: &Client,
        run: Run,
        sources: usize,
        head: &str,
        color: &str,
        since: Instant,
    ) -> Duration {
        let (resource, namespace) = match run {
            Run::Flux => (
                resource("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
                FLUX,
            ),
            _ => (tether_source(), SOURCES),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut all_applied = None;
        loop {
            let list = api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let applied = list
                .iter()
                .map(|o| serde_json::to_value(o).expect("JSON"))
                .filter(|o| {
                    o["status"]["lastAppliedRevision"] == head && condition_true(o, "Ready")
                })
                .count();
            if applied >= sources {
                let at = *all_applied.get_or_insert_with(|| since.elapsed());
                if Self::deployments_ready(client, APPS, color).await >= self.size {
                    return at;
                }
            }
            if let Some(stalled) = list
                .iter()
                .find(|o| condition_true(&serde_json::to_value(o).expect("JSON"), "Stalled"))
            {
                panic!(
                    "{} stalled: {:?}",
                    stalled.name_any(),
                    stalled.data["status"]
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: {applied} of {sources} applied after an hour",
                run.label()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Asks each source to reconcile now, as a webhook receiver does.
    async fn request_reconcile(&self, client: &Client, run: Run, sources: usize) {
        let now = chrono::Utc::now().to_rfc3339();
        let (resource, namespace, annotation) = match run {
            Run::Flux => (
                resource("source.toolkit.fluxcd.io", "v1", "GitRepository"),
                FLUX,
                "reconcile.fluxcd.io/requestedAt",
            ),
            _ => (
                tether_source(),
                SOURCES,
                tether_api::source_spec::RECONCILE_REQUESTED_ANNOTATION,
            ),
        };
        let names: Vec<String> = match run {
            Run::TetherOne => vec!["apps".to_string()],
            _ => (0..sources).map(|i| format!("app-{i}")).collect(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let patch = json!({"metadata": {"annotations": {annotation: now}}});
        stream::iter(names)
            .for_each_concurrent(CREATE_CONCURRENCY, |name| {
                let (api, patch) = (api.clone(), patch.clone());
                async move {
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .expect("annotate");
                }
            })
            .await;
    }
}

fn tether_source() -> ApiResource {
    resource("tether.dev", "v1alpha1", "Source")
}

fn source_object(name: &str, url: &str, path: &str) -> Value {
    json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "Source",
        "metadata": {"name": name, "namespace": SOURCES},
        "spec": {"url": url, "ref": "main", "path": path, "interval": "60m", "prune": true},
    })
}

/// Application `index`'s GitRepository and Kustomization, as Flux's harness makes its
/// OCIRepository and Kustomization (`wait`, `prune`, a 1 m timeout, hourly).
fn flux_objects(index: usize, url: &str) -> Vec<(ApiResource, Value)> {
    let name = format!("app-{index}");
    vec![
        (
            resource("source.toolkit.fluxcd.io", "v1", "GitRepository"),
            json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": name, "namespace": FLUX},
                "spec": {"interval": "60m", "url": url, "ref": {"branch": "main"}},
            }),
        ),
        (
            resource("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
            json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": name, "namespace": FLUX},
                "spec": {
                    "interval": "60m", "retryInterval": "2m", "timeout": "1m",
                    "path": format!("./{}", app_path(index)), "prune": true, "wait": true,
                    "sourceRef": {"kind": "GitRepository", "name": name},
                },
            }),
        ),
    ]
}

/// Writes and lists by the tool's user agents from `offset` on (the audit policy logs
/// those), by verb and resource (`patch deployments`, a dry run as `dry-run patch …`);
/// with `quiet`, Leases left out.
fn requests(audit: &Path, offset: u64, agents: &[&str], quiet: bool) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for entry in entries_since(audit, offset) {
        let ours = entry.0["userAgent"]
            .as_str()
            .is_some_and(|a| agents.iter().any(|p| a.starts_with(p)));
        let (resource, _, _, subresource) = entry.object();
        if entry.0["stage"] != "ResponseComplete" || !ours || (quiet && resource == "leases") {
            continue;
        }
        let dry = if entry.is_dry_run() { "dry-run " } else { "" };
        let resource = match subresource {
            "" => resource.to_string(),
            sub => format!("{resource}/{sub}"),
        };
        *counts
            .entry(format!("{dry}{} {resource}", entry.verb()))
            .or_default() += 1;
    }
    counts
}

fn print_header(release: &str, cpus: &str, flux: &Flux) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "Flux's MTTP benchmark (4 objects an app) on a local kube-apiserver {release}, {cores} \
         cores; tether and Flux pinned with `taskset -c {cpus}`, the control plane and the \
         floor's client not; Deployments become ready at kube-controller-manager's pace (its \
         default 20 requests a second, as in kind)"
    );
    let peer = &flux.versions;
    println!(
        "Flux: {peer} (no helm-controller: the module proxy does not serve it; in the Helm \
         shape Flux applies the chart rendered ahead by `helm template`)"
    );
    let columns = [
        "applied",
        "×floor",
        "all Ready",
        "×floor",
        "push",
        "×floor",
        "peak RSS",
        "CPU",
        "req/app",
        "quiet req",
        "quiet CPU",
    ];
    println!(
        "{:>5}  {:<36} {}",
        "apps",
        "run",
        cells(&columns.map(String::from))
    );
}

fn print_row(size: usize, shape: Shape, row: &Row, floor: &Row, quiet: Duration) {
    let tool = row.run != Run::Floor;
    let only_tool = |text: String| if tool { text } else { "-".to_string() };
    let secs = |d: Duration| format!("{:.1}s", d.as_secs_f64());
    let ratio = |d: Duration, f: Duration| format!("{:.2}", d.as_secs_f64() / f.as_secs_f64());
    let values = [
        secs(row.applied),
        ratio(row.applied, floor.applied),
        secs(row.ready),
        ratio(row.ready, floor.ready),
        secs(row.push),
        ratio(row.push, floor.push),
        only_tool(format!("{:.0} MiB", row.peak_mib)),
        only_tool(secs(row.cpu)),
        row.requests_per_app
            .map_or("-".into(), |r| format!("{r:.1}")),
        only_tool(format!("{} in {}s", row.quiet_requests, quiet.as_secs())),
        only_tool(format!("{:.0}µs/s/app", row.quiet_cpu_per_app)),
    ];
    let run = format!("{}{}{}", row.run.label(), shape.label(row.run), row.note);
    println!("{size:>5}  {run:<36} {}", cells(&values));
    println!("{:>7}{}", "", row.detail);
}

/// Requests by verb and resource, per app, the most frequent first.
fn per_app(by_kind: &BTreeMap<String, usize>, size: usize) -> String {
    let mut kinds: Vec<(&String, &usize)> = by_kind.iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1));
    let kinds: Vec<String> = kinds
        .iter()
        .map(|(what, n)| format!("{:.1} {what}", **n as f64 / size as f64))
        .collect();
    format!("requests per app: {}", kinds.join(", "))
}

fn cells(values: &[String]) -> String {
    values
        .iter()
        .map(|v| format!("{v:>10}"))
        .collect::<Vec<_>>()
        .join(" ")
}
