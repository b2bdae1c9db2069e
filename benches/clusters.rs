//! One repository over three clusters: tether plans and applies each cluster's part at
//! once, beside three runs of tether on one cluster each (what a user did before a
//! repository could name several KubernetesServices), on the same objects. Three local
//! control planes this benchmark starts (scripts/local-cluster), 2,000 objects in all.
//! Run with `cargo bench --bench clusters` (`-- --objects 2000` to pick the size); a
//! smoke run (`cargo test --bench clusters`) takes 30 objects, the three control
//! planes still, and one run of each diff.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

#[path = "common/compare.rs"]
mod compare;
use compare::{check, median, timed};

#[path = "common/mode.rs"]
mod mode;

use tether_testkit::cluster::{LocalCluster, kubeconfig_of};

const CLUSTERS: [&str; 3] = ["east", "west", "north"];

fn main() {
    let objects = mode::arg("--objects", 2000, 30);
    // No simulated nodes: the benchmark measures tether, not pods starting.
    let planes: Vec<LocalCluster> = CLUSTERS.iter().map(|_| LocalCluster::start(0)).collect();
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let named: Vec<(&str, &LocalCluster)> = CLUSTERS.iter().copied().zip(&planes).collect();
    kubeconfig_of(&named, &kubeconfig);
    let bench = Bench {
        kubeconfig,
        tether: PathBuf::from(env!("CARGO_BIN_EXE_tether")),
    };
    let per_cluster = objects / CLUSTERS.len();
    println!(
        "{objects} objects over {} local kube-apiservers {} on one machine (2 cores); {} for diffs",
        CLUSTERS.len(),
        planes[0].release(),
        compare::median_of()
    );
    println!(
        "{:<16} {:>16} {:>22} {:>16}",
        "operation", "one repository", "three runs, one each", "slowest of three"
    );
    let together = dir.path().join("together");
    write_models(&together, "all", &CLUSTERS, per_cluster, None);
    let apart: Vec<PathBuf> = CLUSTERS
        .iter()
        .map(|cluster| {
            let path = dir.path().join(format!("apart-{cluster}"));
            write_models(&path, "one", &[cluster], per_cluster, None);
            path
        })
        .collect();

    let (all, each) = bench.both(&together, &apart, &["apply"], 0);
    row("first apply", all, &each);
    let (all, each) = bench.both_median(&together, &apart, &["diff"], 0);
    row("no-change diff", all, &each);
    write_models(
        &together,
        "all",
        &CLUSTERS,
        per_cluster,
        Some(per_cluster / 2),
    );
    for (cluster, path) in CLUSTERS.iter().zip(&apart) {
        write_models(path, "one", &[cluster], per_cluster, Some(per_cluster / 2));
    }
    let (all, each) = bench.both_median(&together, &apart, &["diff"], 1);
    row("one-change diff", all, &each);
    let (all, each) = bench.both(&together, &apart, &["apply"], 0);
    row("one-change apply", all, &each);
}

struct Bench {
    kubeconfig: PathBuf,
    tether: PathBuf,
}

/// Models of `clusters` (a KubernetesService each, with one trust domain and
/// `per_cluster - 1` ConfigMaps), `changed` giving one ConfigMap of each another value;
/// `prefix` keeps the two ways apart in the clusters (namespaces and inventories).
fn write_models(
    dir: &Path,
    prefix: &str,
    clusters: &[&str],
    per_cluster: usize,
    changed: Option<usize>,
) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for cluster in clusters {
        let namespace = format!("{prefix}-{cluster}");
        let mut text = format!(
            "kind: KubernetesService\nname: {cluster}\n---\nkind: TrustDomain\nname: {namespace}\nowner: {cluster}\n"
        );
        for i in 0..per_cluster - 1 {
            let value = match Some(i) == changed {
                true => "changed",
                false => "original",
            };
            text.push_str(&format!(
                "---\nkind: KubernetesConfigMap\nname: cm-{i}\ntrust_domain: {namespace}\ndata:\n  index: \"{i}\"\n  value: {value}\n"
            ));
        }
        std::fs::write(dir.join(format!("{cluster}.yaml")), text).expect("write");
    }
}

impl Bench {
    fn tether(&self, args: &[&str], context: Option<&str>, inventory: &str) -> Output {
        let mut command = Command::new(&self.tether);
        command
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--inventory-name", inventory]);
        if let Some(context) = context {
            command.args(["--context", context]);
        }
        command.output().expect("tether")
    }

    /// `args` on the repository of all clusters; its exit code must be `expect`.
    fn all(&self, together: &Path, args: &[&str], expect: i32) -> Duration {
        let mut command: Vec<&str> = args.to_vec();
        command.push(together.to_str().expect("utf-8"));
        timed(|| {
            check(
                &self.tether(&command, None, "all"),
                &[expect],
                "tether (all clusters)",
            )
        })
    }

    /// `args` on one cluster's repository alone, with its context.
    fn one(&self, cluster: &str, dir: &Path, args: &[&str], expect: i32) -> Duration {
        let mut command: Vec<&str> = args.to_vec();
        command.push(dir.to_str().expect("utf-8"));
        timed(|| {
            check(
                &self.tether(&command, Some(cluster), "one"),
                &[expect],
                "tether (one cluster)",
            )
        })
    }

    /// `args` on each cluster's repository alone, one after the other.
    fn each(&self, apart: &[PathBuf], args: &[&str], expect: i32) -> Vec<Duration> {
        CLUSTERS
            .iter()
            .zip(apart)
            .map(|(cluster, dir)| self.one(cluster, dir, args, expect))
            .collect()
    }

    /// Both ways, once.
    fn both(
        &self,
        together: &Path,
        apart: &[PathBuf],
        args: &[&str],
        expect: i32,
    ) -> (Duration, Vec<Duration>) {
        (
            self.all(together, args, expect),
            self.each(apart, args, expect),
        )
    }

    /// Both ways, the median of three runs of each (one in a smoke run).
    fn both_median(
        &self,
        together: &Path,
        apart: &[PathBuf],
        args: &[&str],
        expect: i32,
    ) -> (Duration, Vec<Duration>) {
        let all = median(|| self.all(together, args, expect));
        let each = CLUSTERS
            .iter()
            .zip(apart)
            .map(|(cluster, dir)| median(|| self.one(cluster, dir, args, expect)))
            .collect();
        (all, each)
    }
}

fn row(operation: &str, all: Duration, each: &[Duration]) {
    let sum: Duration = each.iter().sum();
    let slowest = each.iter().max().copied().unwrap_or_default();
    println!(
        "{operation:<16} {:>15.2}s {:>21.2}s {:>15.2}s",
        all.as_secs_f64(),
        sum.as_secs_f64(),
        slowest.as_secs_f64()
    );
}
