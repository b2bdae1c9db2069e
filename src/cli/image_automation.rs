//! `tether images`: what each image policy of the models chooses from its registry
//! now, and with `--commit` the commits that write it (the daemon does the same for
//! each Source, on the policies' intervals and at a registry's webhook).

use std::path::PathBuf;
use std::process::ExitCode;

use miette::{IntoDiagnostic, miette};
use tether_engine::image_automation::automation::{
    Automation, NoSecrets, PolicyOutcome, PolicyResult, RunReport,
};
use tether_engine::writeback::Author;

use super::args::{EXIT_ERROR, GlobalArgs};
use super::operate::ModelsArgs;

#[derive(Debug, clap::Args)]
pub struct ImagesArgs {
    #[command(flatten)]
    pub models: ModelsArgs,
    /// Commit what the policies choose (and push, with --repo); without it nothing is
    /// written.
    #[arg(long)]
    pub commit: bool,
    /// One commit for every policy that updates, instead of one commit each.
    #[arg(long, requires = "commit")]
    pub batch: bool,
    /// The commits' author, "Name <email>".
    #[arg(
        long,
        env = "TETHER_AUTHOR",
        default_value = "tether <tether@localhost>"
    )]
    pub author: String,
    /// A Docker config with registry credentials (default: $DOCKER_CONFIG/config.json,
    /// else ~/.docker/config.json, when present).
    #[arg(long, env = "TETHER_REGISTRY_CONFIG", value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn images(_global: &GlobalArgs, args: &ImagesArgs) -> miette::Result<ExitCode> {
    let author: Author = args.author.parse().into_diagnostic()?;
    let automation = Automation {
        destination: args.models.destination()?,
        branch: args.models.branch.clone(),
        author,
        push: args.models.repo.is_some(),
        batch: args.batch,
        commit: args.commit,
        docker_config: docker_config(args.registry_config.as_deref())?,
    };
    let report = automation
        .run(&NoSecrets, None, chrono::Utc::now())
        .await
        .map_err(|e| miette!("{}", tether_core::error_chain(&e)))?;
    if args.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", table(&report, args.commit));
    }
    let failed = report
        .policies
        .iter()
        .any(|p| matches!(p.result, PolicyResult::Failed { .. }));
    Ok(if failed {
        ExitCode::from(EXIT_ERROR)
    } else {
        ExitCode::SUCCESS
    })
}

/// The Docker config's bytes: the one named, else Docker's own when it exists.
fn docker_config(named: Option<&std::path::Path>) -> miette::Result<Option<Vec<u8>>> {
    if let Some(path) = named {
        return std::fs::read(path)
            .map(Some)
            .map_err(|e| miette!("cannot read the registry config {}: {e}", path.display()));
    }
    let default = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker")))
        .map(|dir| dir.join("config.json"));
    Ok(default.and_then(|path| std::fs::read(path).ok()))
}

/// One line per policy: its image, the tags listed, the best candidate, and what was
/// (or, without --commit, would be) done.
fn table(report: &RunReport, committed: bool) -> String {
    let mut rows = vec![[
        "POLICY".to_string(),
        "IMAGE".to_string(),
        "TAGS".to_string(),
        "CANDIDATE".to_string(),
        "RESULT".to_string(),
    ]];
    rows.extend(report.policies.iter().map(|p| row(p, committed)));
    let widths: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (cell, width) in row.iter().zip(&widths) {
            out.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(&row[4]);
        out.push('\n');
    }
    if report.policies.is_empty() {
        out.push_str("no ImagePolicy in the models\n");
    }
    for commit in &report.commits {
        out.push_str(&format!("committed {commit}\n"));
    }
    out
}

fn row(policy: &PolicyOutcome, committed: bool) -> [String; 5] {
    let result = match &policy.result {
        PolicyResult::Updated {
            from, to, branch, ..
        } if committed => {
            format!("updated {from} → {to} on {branch}")
        }
        PolicyResult::Updated {
            from, to, branch, ..
        } => {
            format!("would update {from} → {to} on {branch} (--commit to write it)")
        }
        PolicyResult::Kept { reason } => format!("kept: {reason}"),
        PolicyResult::Failed { error } => format!("error: {error}"),
    };
    [
        policy.policy.clone(),
        policy.image.clone(),
        policy.listed.map_or("-".into(), |n| n.to_string()),
        policy.candidate.clone().unwrap_or_else(|| "-".into()),
        result,
    ]
}

fn to_json(report: &RunReport) -> String {
    let policies: Vec<serde_json::Value> = report
        .policies
        .iter()
        .map(|p| {
            let (result, detail) = match &p.result {
                PolicyResult::Updated {
                    from,
                    to,
                    commit,
                    branch,
                } => (
                    "updated",
                    serde_json::json!({"from": from, "to": to, "commit": commit, "branch": branch}),
                ),
                PolicyResult::Kept { reason } => ("kept", serde_json::json!({"reason": reason})),
                PolicyResult::Failed { error } => ("failed", serde_json::json!({"error": error})),
            };
            serde_json::json!({
                "policy": p.policy, "image": p.image, "tags": p.listed,
                "candidate": p.candidate, "result": result, "detail": detail,
            })
        })
        .collect();
    serde_json::json!({"policies": policies, "commits": report.commits}).to_string()
}
