//! The offline core on a synthetic repo of 10,000 models: load (read files and parse
//! YAML), validate (models and references), render (objects and YAML), each timed and
//! with its own peak RSS. Run with `cargo bench --bench pipeline`; `-- --models N`
//! changes the size. A smoke run (`cargo test --bench pipeline`): 500 models, once.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use tether_core::ownership::Inventory;
use tether_core::render::{render, to_yaml};
use tether_engine::directory::read_models_dir;

#[path = "common/mode.rs"]
mod mode;

/// Models per trust domain in [`write_trust_domain`].
const MODELS_PER_DOMAIN: usize = 50;

fn main() {
    let models = mode::arg("--models", 10_000, 500);
    let dir = tempfile::tempdir().expect("temporary directory");
    let domains = models.div_ceil(MODELS_PER_DOMAIN);
    write_repo(dir.path(), domains);

    let runs = mode::size(5, 1);
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    // (RSS before, peak during) of each stage in the first run, in KiB: later runs
    // reuse memory the allocator already holds, so only the first shows growth.
    let mut memory = [(0u64, 0u64); 3];
    let mut summary = String::new();
    for run in 0..runs {
        let before = reset_peak_rss();
        let start = Instant::now();
        let files = read_models_dir(dir.path()).expect("read models");
        let (documents, load_diagnostics) = tether_core::load::load(&files);
        times[0].push(start.elapsed());
        if run == 0 {
            memory[0] = (before, peak_rss_kib());
        }

        let before = reset_peak_rss();
        let start = Instant::now();
        let (models, model_diagnostics) = tether_core::model::read_models(&files, &documents);
        let (graph, resolve_diagnostics) = tether_core::resolve::resolve(models, &files);
        times[1].push(start.elapsed());
        if run == 0 {
            memory[1] = (before, peak_rss_kib());
        }
        assert!(
            load_diagnostics.is_empty()
                && model_diagnostics.is_empty()
                && resolve_diagnostics.is_empty(),
            "the synthetic repo must be valid:\n{}",
            resolve_diagnostics.render_plain(&files)
        );
        let graph = graph.expect("valid graph");

        let before = reset_peak_rss();
        let start = Instant::now();
        let objects = render(&graph, &files, &Inventory::default());
        let yaml = to_yaml(&objects).expect("yaml");
        times[2].push(start.elapsed());
        if run == 0 {
            memory[2] = (before, peak_rss_kib());
        }
        if run == 0 {
            summary = format!(
                "{} models in {} files -> {} objects, {:.1} MiB of YAML",
                documents.len(),
                files.len(),
                objects.len(),
                yaml.len() as f64 / 1048576.0
            );
        }
    }
    let of_runs = match runs {
        1 => "one run".to_string(),
        n => format!("median of {n} runs"),
    };
    println!("tether offline pipeline: {summary} ({of_runs})");
    let mut table = String::new();
    let mut total = Duration::ZERO;
    for (i, stage) in ["load", "validate", "render"].iter().enumerate() {
        let median = median(&mut times[i]);
        total += median;
        let (before, peak) = memory[i];
        let _ = writeln!(
            table,
            "  {stage:<9} {:>8.1} ms   peak RSS {:>6.1} MiB (+{:.1} MiB in the stage)",
            ms(median),
            peak as f64 / 1024.0,
            peak.saturating_sub(before) as f64 / 1024.0
        );
    }
    print!("{table}");
    println!(
        "  total     {:>8.1} ms   peak RSS {:>6.1} MiB (whole process)",
        ms(total),
        peak_rss_kib() as f64 / 1024.0
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Peak resident set size of this process (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (Linux: "5" to clear_refs), so that the next
/// reading is the peak of one stage; returns the RSS it starts from, in KiB.
fn reset_peak_rss() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    peak_rss_kib()
}

fn write_repo(root: &Path, domains: usize) {
    let mut shared =
        String::from("kind: KubernetesService\nname: kubernetes\n---\nkind: Site\nname: bench\n");
    for image in ["nginx", "redis", "busybox"] {
        let _ = write!(shared, "---\nkind: Image\nname: {image}\ntag: \"1.0\"\n");
    }
    std::fs::write(root.join("shared.yaml"), shared).expect("write");
    for d in 0..domains {
        let dir = root.join(format!("td-{d:04}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        write_trust_domain(&dir, d);
    }
}

/// One trust domain of 50 models in four files: a namespace, a principal, config,
/// secrets, controller slices with services and ports, bare pods with mounts, and a
/// resource instance.
fn write_trust_domain(dir: &Path, d: usize) {
    let td = format!("td-{d:04}");
    let mut base = format!(
        "kind: TrustDomain\nname: {td}\n---\nkind: Principal\nname: robot\ntrust_domain: {td}\n"
    );
    for c in 0..4 {
        let _ = write!(
            base,
            "---\nkind: KubernetesConfigMap\nname: config-{c}\ntrust_domain: {td}\ndata:\n  app.conf: |\n    listen 80;\n    workers {c}\n  LOG_LEVEL: info\n"
        );
    }
    let _ = write!(
        base,
        "---\nkind: KubernetesSecret\nname: token\ntrust_domain: {td}\ndata:\n  token: abc{d}\n"
    );
    let _ = write!(
        base,
        "---\nkind: KubernetesResourceInstance\nname: quota-{td}\nresource_definition: |\n  apiVersion: v1\n  kind: ResourceQuota\n  metadata:\n    name: quota\n    namespace: {td}\n  spec:\n    hard:\n      pods: \"50\"\n"
    );
    std::fs::write(dir.join("base.yaml"), base).expect("write"); // 8 models

    let mut workloads = String::new();
    let kinds = ["Deployment", "StatefulSet", "DaemonSet", "Job"];
    for s in 0..6 {
        let kind = kinds[s % kinds.len()];
        let replicas = if kind == "DaemonSet" {
            ""
        } else {
            "controller_replica_count: 2\n"
        };
        let _ = write!(
            workloads,
            "---\nkind: Slice\nname: app-{d}-{s}\nsite: bench\ntrust_domain: {td}\nprincipal: robot\nservice: svc-{d}-{s}\ncontroller_kind: {kind}\n{replicas}default_image: nginx:1.0\n"
        );
        let _ = write!(
            workloads,
            "---\nkind: Service\nname: svc-{d}-{s}\n---\nkind: ServicePort\nname: http\nservice: svc-{d}-{s}\ninternal_port: 8080\n"
        );
        let _ = write!(
            workloads,
            "---\nkind: KubernetesConfigVolumeMount\nconfig: config-{}\nslice: app-{d}-{s}\nmount_path: /etc/app\n",
            s % 4
        );
    }
    std::fs::write(dir.join("workloads.yaml"), workloads).expect("write"); // 24 models

    let mut pods = format!("kind: Slice\nname: pods_{d}\ntrust_domain: {td}\n");
    for p in 0..8 {
        let _ = write!(
            pods,
            "---\nkind: KubernetesServiceInstance\nname: pod-{p}\nslice: pods_{d}\nimage: busybox\n"
        );
        let _ = write!(
            pods,
            "---\nkind: KubernetesSecretVolumeMount\nsecret: token\nservice_instance: {td}/pod-{p}\nmount_path: /run/token\n"
        );
    }
    std::fs::write(dir.join("pods.yaml"), pods).expect("write"); // 17 models
    std::fs::write(
        dir.join("extra.yaml"),
        format!("kind: Principal\nname: extra\ntrust_domain: {td}\n"),
    )
    .expect("write"); // 1 model
}
