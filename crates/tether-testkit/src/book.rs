//! The book's pages as a reader follows them: the `sh` blocks of a page, in order, as
//! one shell script, so that a test runs exactly what the page says.
//!
//! Two conventions of the pages are kept here: a command whose comment says
//! `# exits N` must end with N (a reader sees the exit code the page promised, e.g.
//! `tether diff` finding differences), and the lines a test provides otherwise (the
//! prerequisites: `git clone`, `cargo install`, `kind create cluster`) are named by
//! the caller and left out, each replaced by a line that says so.

use std::path::Path;

/// The body of each fenced block of `markdown` whose language is `sh`, in order.
pub fn shell_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The page's `sh` blocks as one bash script that stops at the first command that
/// fails, or that ends otherwise than its `# exits N` comment says. Lines starting
/// with one of `skip` are left out; heredocs pass through untouched.
pub fn script(markdown: &str, skip: &[&str]) -> String {
    let mut script = String::from("set -eu\nset -x\n");
    let mut heredoc_end: Option<String> = None;
    for line in shell_blocks(markdown).iter().flat_map(|b| b.lines()) {
        if let Some(end) = &heredoc_end {
            if line == end {
                heredoc_end = None;
            }
            script.push_str(line);
            script.push('\n');
            continue;
        }
        heredoc_end = heredoc_delimiter(line);
        let command = line.split(" #").next().unwrap_or_default().trim_end();
        if skip
            .iter()
            .any(|prefix| line.trim_start().starts_with(prefix))
        {
            script.push_str(&format!(": provided by the test: {}\n", quote(line)));
        } else if let Some(code) = expected_exit(line) {
            script.push_str(&format!(
                "{{ {command}; }} && rc=0 || rc=$?\n[ \"$rc\" = {code} ] || {{ echo \"expected exit {code}, got $rc: \"{} >&2; exit 1; }}\n",
                quote(command)
            ));
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    script
}

/// The code in a `# exits N` comment of `line`.
fn expected_exit(line: &str) -> Option<u8> {
    let (_, comment) = line.split_once(" # ")?;
    comment
        .trim_start()
        .strip_prefix("exits ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The word that ends a heredoc begun on `line` (`<<'EOF'`, `<<EOF`, `<<-EOF`).
fn heredoc_delimiter(line: &str) -> Option<String> {
    let (_, after) = line.split_once("<<")?;
    let word = after.trim_start_matches('-').trim_start();
    let word: String = word
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A page of the book, by its path under `docs/book/src`.
pub fn page(root: &Path, page: &str) -> String {
    let path = root.join("docs/book/src").join(page);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_becomes_a_script_that_checks_promised_exit_codes() {
        let page = "text\n```sh\ngit clone x && cd x\ntether diff . # exits 1: new\ncat >f <<'EOF'\na # exits 3\nEOF\n```\n```yaml\nnot: run\n```\n```sh\necho done\n```\n";
        let script = script(page, &["git clone"]);
        assert_eq!(
            script,
            "set -eu\nset -x\n: provided by the test: 'git clone x && cd x'\n{ tether diff .; } && rc=0 || rc=$?\n[ \"$rc\" = 1 ] || { echo \"expected exit 1, got $rc: \"'tether diff .' >&2; exit 1; }\ncat >f <<'EOF'\na # exits 3\nEOF\necho done\n"
        );
    }
}
