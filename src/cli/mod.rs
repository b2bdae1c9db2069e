//! Commands: parse flags, run the library, print, and pick the exit code.

mod report;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use miette::{IntoDiagnostic, WrapErr};
use tether::render::Inventory;
use tether::source::read_models_dir;

/// Exit code for invalid models or differences found.
pub const EXIT_INVALID: u8 = 1;
/// Exit code for usage, I/O and cluster errors (clap uses 2 for usage errors too).
pub const EXIT_ERROR: u8 = 2;

/// tether: Kubernetes services described as models in Git, reconciled to the cluster.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, propagate_version = true)]
pub struct Args {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, global = true, env = "TETHER_LOG_LEVEL", default_value = "warn")]
    log_level: String,
    /// Log format on standard error.
    #[arg(long, global = true, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Colour and graphics in reports: auto (when the output is a terminal), always, never.
    #[arg(long, global = true, env = "TETHER_COLOR", value_enum, default_value_t = Color::Auto)]
    color: Color,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check every model and reference; report all problems with file:line:column.
    ///
    /// Exits 0 when the models are valid (warnings allowed), 1 when they are not,
    /// 2 when they cannot be read.
    #[command(after_help = "Example:\n  tether validate examples/models/xos-demo")]
    Validate {
        /// Models root (a directory searched for *.yaml and *.yml, or one file).
        #[arg(default_value = ".", env = "TETHER_PATH")]
        path: PathBuf,
    },
    /// Print the Kubernetes objects the models describe, in apply order.
    ///
    /// Nothing is printed from invalid models (exit 1). Secret values are printed
    /// base64-encoded, as Kubernetes stores them: treat the output as secret.
    #[command(
        after_help = "Examples:\n  tether render examples/models/xos-demo\n  tether render examples/models/ -o json | jq '.items[].metadata.name'\n  tether render examples/models | kubectl apply --server-side -f -"
    )]
    Render {
        #[arg(default_value = ".", env = "TETHER_PATH")]
        path: PathBuf,
        /// Output format: multi-document YAML, or a JSON `v1` List.
        #[arg(short, long, env = "TETHER_OUTPUT", value_enum, default_value_t = OutputFormat::Yaml)]
        output: OutputFormat,
        /// Name of the inventory (ApplySet parent) that the objects are labelled with.
        #[arg(long, env = "TETHER_INVENTORY_NAME", default_value = "tether")]
        inventory_name: String,
        /// Namespace of the inventory.
        #[arg(long, env = "TETHER_INVENTORY_NAMESPACE", default_value = "default")]
        inventory_namespace: String,
    },
    /// Print a shell completion script.
    #[command(after_help = "Example:\n  tether completions bash > /etc/bash_completion.d/tether")]
    Completions { shell: clap_complete::Shell },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    Yaml,
    Json,
}

pub fn init_logging(global: &GlobalArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&global.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match global.log_format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let color = args.global.color;
    match args.command {
        Command::Validate { path } => validate(&path, color),
        Command::Render {
            path,
            output,
            inventory_name,
            inventory_namespace,
        } => {
            let inventory = Inventory {
                name: inventory_name,
                namespace: inventory_namespace,
            };
            render(&path, output, &inventory, color)
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Args::command(),
                "tether",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn read(path: &std::path::Path) -> miette::Result<tether::source::SourceFiles> {
    read_models_dir(path)
        .into_diagnostic()
        .wrap_err("cannot read the models")
}

fn validate(path: &std::path::Path, color: Color) -> miette::Result<ExitCode> {
    let files = read(path)?;
    let analysis = tether::analyze(&files);
    let mut out = std::io::stdout().lock();
    let styled = report::use_graphics(color, std::io::stdout().is_terminal());
    let text = report::diagnostics(&analysis.diagnostics, &files, styled);
    let summary = report::summary(&analysis, &files, path);
    write!(out, "{text}{summary}").into_diagnostic()?;
    Ok(if analysis.graph.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID)
    })
}

fn render(
    path: &std::path::Path,
    output: OutputFormat,
    inventory: &Inventory,
    color: Color,
) -> miette::Result<ExitCode> {
    let files = read(path)?;
    let analysis = tether::analyze(&files);
    let styled = report::use_graphics(color, std::io::stderr().is_terminal());
    eprint!(
        "{}",
        report::diagnostics(&analysis.diagnostics, &files, styled)
    );
    let Some(graph) = &analysis.graph else {
        eprint!("{}", report::summary(&analysis, &files, path));
        return Ok(ExitCode::from(EXIT_INVALID));
    };
    let objects = tether::render::render(graph, &files, inventory);
    tracing::info!(objects = objects.len(), "rendered");
    let text = match output {
        OutputFormat::Yaml => tether::render::to_yaml(&objects).into_diagnostic()?,
        OutputFormat::Json => tether::render::to_json_list(&objects),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .into_diagnostic()?;
    Ok(ExitCode::SUCCESS)
}
