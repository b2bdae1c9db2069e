//! `tether man`: the manual pages, one per command (tether.1, tether-apply.1,
//! tether-node-label-assign.1, …), each with the command's exit status.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use miette::{IntoDiagnostic, WrapErr, miette};

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write tether.1 and one page per command (tether-apply.1, …) into this
    /// directory instead of printing tether.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The day-2 commands' exit status: each commits, then applies.
const COMMITTED: &[(u8, &str)] = &[
    (0, "Committed, and applied unless --propose or --no-apply."),
    (
        2,
        "Refused (nothing committed), the apply failed, an error, or a usage error.",
    ),
];

/// A command that only groups others (`tether node`): its subcommands' pages say more.
const GROUP: &[(u8, &str)] = &[(0, "Success."), (2, "An error, or a usage error.")];

/// What an exit code means for one command: its name (the words after `tether`,
/// "" for tether itself) and each code it exits with. Each was read from the
/// command's code path; every command ends 2 on a usage error, as clap does.
const EXIT_STATUS: &[(&str, &[(u8, &str)])] = &[
    (
        "",
        &[
            (0, "Success."),
            (
                1,
                "Invalid models (validate, render, graph), or differences found (diff).",
            ),
            (
                2,
                "An error, or a usage error. Each command's page says more.",
            ),
        ],
    ),
    (
        "validate",
        &[
            (0, "The models are valid (warnings allowed)."),
            (1, "The models are invalid."),
            (2, "The models cannot be read, or a usage error."),
        ],
    ),
    (
        "render",
        &[
            (0, "The objects were printed."),
            (1, "The models are invalid: nothing was printed."),
            (2, "An error, or a usage error."),
        ],
    ),
    (
        "verify",
        &[
            (
                0,
                "The attestation is a trusted key's, and the cluster holds what it attests.",
            ),
            (1, "The cluster drifted since: each change is named."),
            (
                2,
                "The attestation is not verified (another key, changed under its signature) or cannot be read, an error, or a usage error.",
            ),
        ],
    ),
    (
        "diff",
        &[
            (0, "The cluster matches the models."),
            (1, "The cluster differs from the models."),
            (
                2,
                "An object was refused by the server, the models are invalid, an error, or a usage error.",
            ),
        ],
    ),
    (
        "apply",
        &[
            (0, "Everything was applied."),
            (
                2,
                "Anything failed, a wave was blocked, the models are invalid, an error, or a usage error.",
            ),
        ],
    ),
    (
        "images",
        &[
            (
                0,
                "Every policy was decided (and, with --commit, its choice committed).",
            ),
            (
                2,
                "A policy could not be decided (its registry, credentials or targets), an error, or a usage error.",
            ),
        ],
    ),
    (
        "run",
        &[
            (0, "Stopped by SIGTERM or Ctrl-C."),
            (2, "It could not start (an error), or a usage error."),
        ],
    ),
    (
        "ui",
        &[
            (0, "Stopped by SIGTERM or Ctrl-C."),
            (
                2,
                "It could not start (an address other than loopback, an error), or a usage error.",
            ),
        ],
    ),
    (
        "reconcile",
        &[
            (0, "The Source is Ready after the daemon's pass."),
            (
                2,
                "The Source is not Ready, the daemon did not answer in time, an error, or a usage error.",
            ),
        ],
    ),
    (
        "approve",
        &[
            (
                0,
                "The deletions were approved and the Source is Ready after the daemon's pass.",
            ),
            (
                2,
                "The Source is not Ready (still PruneHeld: the digest named other deletions), the daemon did not answer in time, the digest is not one, an error, or a usage error.",
            ),
        ],
    ),
    (
        "install",
        &[
            (
                0,
                "Installed (or, with --export, printed); each object's line says whether it changed.",
            ),
            (
                2,
                "Not installed: the server's version is unsupported, a request was refused, an error, or a usage error.",
            ),
        ],
    ),
    (
        "uninstall",
        &[
            (
                0,
                "Nothing of tether is left (the namespace may be kept; the output says why).",
            ),
            (2, "An error, or a usage error."),
        ],
    ),
    (
        "check",
        &[
            (0, "Every check passed (warnings allowed)."),
            (
                1,
                "A check failed; its line says what and hints how to mend it.",
            ),
            (2, "The cluster could not be asked, or a usage error."),
        ],
    ),
    (
        "version",
        &[
            (0, "The versions were printed."),
            (2, "The cluster could not be asked, or a usage error."),
        ],
    ),
    (
        "suspend",
        &[
            (0, "The Source is suspended."),
            (2, "No such Source, an error, or a usage error."),
        ],
    ),
    (
        "resume",
        &[
            (0, "The Source is resumed."),
            (2, "No such Source, an error, or a usage error."),
        ],
    ),
    (
        "tree",
        &[
            (0, "The inventory was printed."),
            (
                2,
                "No such Source, an unreadable inventory, an error, or a usage error.",
            ),
        ],
    ),
    (
        "handover",
        &[
            (
                0,
                "The objects were handed over (those another inventory took are listed and left).",
            ),
            (
                2,
                "No such Source, a request was refused, an error, or a usage error.",
            ),
        ],
    ),
    (
        "graph",
        &[
            (0, "The graph was printed."),
            (1, "The models are invalid."),
            (2, "An error, or a usage error."),
        ],
    ),
    ("crd", &[(0, "Printed."), (2, "A usage error.")]),
    ("fleet", GROUP),
    (
        "fleet join",
        &[
            (
                0,
                "Joined: the cluster's kubeconfig was printed or written.",
            ),
            (
                2,
                "An error (the hub unreachable or refusing, no token issued), or a usage error.",
            ),
        ],
    ),
    (
        "fleet revoke",
        &[
            (0, "Revoked: the cluster's token is refused from now on."),
            (2, "An error, or a usage error."),
        ],
    ),
    (
        "fleet status",
        &[
            (0, "Every cluster reports and no Source needs attention."),
            (
                1,
                "A cluster is not reporting, or a Source needs attention.",
            ),
            (
                2,
                "An error (the hub unreachable or refusing), or a usage error.",
            ),
        ],
    ),
    (
        "discover",
        &[
            (
                0,
                "Discovered (and committed, unless nothing changed); with --watch, stopped by SIGTERM or Ctrl-C.",
            ),
            (2, "An error, or a usage error."),
        ],
    ),
    ("scale", COMMITTED),
    ("restart", COMMITTED),
    ("rollback", COMMITTED),
    ("rollout", GROUP),
    (
        "rollout status",
        &[
            (0, "Rolled out."),
            (
                2,
                "The rollout failed, is paused, or the timeout ran out; an error, or a usage error.",
            ),
        ],
    ),
    (
        "recreate",
        &[
            (0, "The pod was deleted and made again."),
            (2, "Refused, failed, an error, or a usage error."),
        ],
    ),
    (
        "restart-containers",
        &[
            (0, "The containers were restarted."),
            (2, "Refused, failed, an error, or a usage error."),
        ],
    ),
    ("node", GROUP),
    ("node label", GROUP),
    ("node label assign", COMMITTED),
    (
        "node label list",
        &[
            (0, "The labels were listed."),
            (2, "An error, or a usage error."),
        ],
    ),
    ("node label remove", COMMITTED),
    ("node lock", COMMITTED),
    ("node unlock", COMMITTED),
    ("secret", GROUP),
    (
        "secret encrypt",
        &[
            (0, "Encrypted."),
            (
                2,
                "The file does not encrypt (no recipient, not YAML), an error, or a usage error.",
            ),
        ],
    ),
    (
        "secret decrypt",
        &[
            (0, "Decrypted."),
            (
                2,
                "The file does not decrypt (no key opens it, tampered), an error, or a usage error.",
            ),
        ],
    ),
    (
        "secret edit",
        &[
            (0, "Saved and encrypted again, or left unchanged."),
            (
                2,
                "The file does not decrypt, the editor failed, an error, or a usage error.",
            ),
        ],
    ),
    (
        "secret keygen",
        &[(0, "Written."), (2, "An error, or a usage error.")],
    ),
    ("push", GROUP),
    (
        "push artifact",
        &[
            (0, "Pushed; the digest was printed."),
            (
                2,
                "The directory cannot be packed, the registry refused or could not be reached, an error, or a usage error.",
            ),
        ],
    ),
    (
        "events",
        &[
            (0, "Stopped by SIGTERM or Ctrl-C."),
            (
                2,
                "No sink given, the outbox cannot be opened, an error, or a usage error.",
            ),
        ],
    ),
    ("completions", &[(0, "Printed."), (2, "A usage error.")]),
    ("schema", &[(0, "Printed."), (2, "A usage error.")]),
    (
        "man",
        &[
            (0, "Printed or written."),
            (2, "An error, or a usage error."),
        ],
    ),
];

/// `tether man`: tether.1 on standard output, or every page into --dir, from
/// `tether`, the command line's definition.
pub fn run(args: &ManArgs, tether: clap::Command) -> miette::Result<ExitCode> {
    let mut tether = tether.disable_help_subcommand(true);
    tether.build();
    match &args.dir {
        None => {
            let mut page = Vec::new();
            write_page(&tether, &[], &mut page)?;
            std::io::stdout().write_all(&page).into_diagnostic()?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .into_diagnostic()
                .wrap_err_with(|| format!("cannot make {}", dir.display()))?;
            let written = write_pages(&tether, &[], dir)?;
            println!("wrote {written} manual pages to {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the page of `command` (named by `words` after tether) and its
/// subcommands' pages into `dir`; how many were written.
fn write_pages(command: &clap::Command, words: &[&str], dir: &Path) -> miette::Result<usize> {
    let mut page = Vec::new();
    write_page(command, words, &mut page)?;
    let file = dir.join(format!("{}.1", page_name(words)));
    std::fs::write(&file, page)
        .into_diagnostic()
        .wrap_err_with(|| format!("cannot write {}", file.display()))?;
    let mut written = 1;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let words: Vec<&str> = words.iter().copied().chain([sub.get_name()]).collect();
        written += write_pages(sub, &words, dir)?;
    }
    Ok(written)
}

/// The page's name as clap_mangen names subcommands' pages: tether-node-label-assign.
fn page_name(words: &[&str]) -> String {
    std::iter::once("tether")
        .chain(words.iter().copied())
        .collect::<Vec<_>>()
        .join("-")
}

/// The page of `command`, named by `words` after tether.
fn write_page(command: &clap::Command, words: &[&str], out: &mut Vec<u8>) -> miette::Result<()> {
    let codes = exit_status(&words.join(" "))?;
    render(command, words, codes, out).into_diagnostic()
}

/// The exit status of the command `name` (the words after `tether`, "" for tether
/// itself): each code and what it means. The manual pages and the book's reference
/// both print it.
pub fn exit_status(name: &str) -> miette::Result<&'static [(u8, &'static str)]> {
    EXIT_STATUS
        .iter()
        .find(|(command, _)| *command == name)
        .map(|(_, codes)| *codes)
        .ok_or_else(|| miette!("no exit status is written down for `tether {name}`"))
}

/// clap_mangen's sections, then EXIT STATUS and SEE ALSO (the parent's page), then
/// the version.
fn render(
    command: &clap::Command,
    words: &[&str],
    codes: &[(u8, &str)],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(command.clone())
        .title(page_name(words))
        .source(concat!("tether ", env!("CARGO_PKG_VERSION")));
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if command.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if command.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(out)?;
    }
    if command.get_after_help().is_some() || command.get_after_long_help().is_some() {
        man.render_extra_section(out)?;
    }
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in codes {
        writeln!(out, ".TP\n{code}\n{}", roff_text(meaning))?;
    }
    if let Some((_, parent)) = words.split_last() {
        writeln!(
            out,
            ".SH \"SEE ALSO\"\n{}(1)",
            roff_text(&page_name(parent))
        )?;
    }
    man.render_version_section(out)
}

/// Text as roff prints it: backslashes and hyphens escaped, and a line starting with
/// a control character kept as text.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.starts_with(['.', '\'']) {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
}
