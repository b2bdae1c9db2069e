//! `tether push artifact`: a models directory published from CI as an OCI artifact
//! in Flux's format, which a Source (or `--repo oci://…`) then follows.

use std::path::PathBuf;
use std::process::ExitCode;

use tether_engine::oci::{PushMetadata, Reference};

use super::flags::RegistryFlags;
use super::terminal;

#[derive(Debug, clap::Subcommand)]
pub enum PushCommand {
    /// Pack a models directory (a deterministic gzipped tar: the same files give the
    /// same digest) and push it as a Flux artifact to a tag; prints
    /// `HOST/REPOSITORY@sha256:…`.
    #[command(
        after_help = "Example:\n  tether push artifact oci://ghcr.io/team/models:$(git rev-parse --short HEAD) --path models \\\n    --source \"$(git config --get remote.origin.url)\" --revision \"$(git branch --show-current)@sha1:$(git rev-parse HEAD)\""
    )]
    Artifact(PushArtifactArgs),
}

#[derive(Debug, clap::Args)]
pub struct PushArtifactArgs {
    /// Where to push: oci://HOST/REPOSITORY:TAG.
    #[arg(value_name = "REPO")]
    pub reference: String,
    /// The models directory to publish.
    #[arg(long, default_value = ".")]
    pub path: PathBuf,
    /// Where the directory comes from, e.g. its Git URL (the annotation
    /// org.opencontainers.image.source).
    #[arg(long, value_name = "URL")]
    pub source: Option<String>,
    /// Its revision there, e.g. main@sha1:<commit> (org.opencontainers.image.revision).
    #[arg(long)]
    pub revision: Option<String>,
    #[command(flatten)]
    pub registry: RegistryFlags,
}

pub async fn run(command: &PushCommand) -> miette::Result<ExitCode> {
    let PushCommand::Artifact(args) = command;
    let reference = Reference::parse(&args.reference).map_err(terminal::error)?;
    if !matches!(reference.target, tether_engine::oci::Target::Tag(_)) {
        miette::bail!(
            "{}: push to a tag (oci://HOST/REPOSITORY:TAG); the digest is what the registry answers",
            args.reference
        );
    }
    if !args.path.is_dir() {
        miette::bail!("--path {}: not a directory", args.path.display());
    }
    let metadata = PushMetadata {
        source: args.source.clone(),
        revision: args.revision.clone(),
    };
    let digest =
        tether_engine::oci::push(&reference, &args.registry.access()?, &args.path, &metadata)
            .await
            .map_err(terminal::error)?;
    println!("{}@{digest}", reference.name());
    Ok(ExitCode::SUCCESS)
}
