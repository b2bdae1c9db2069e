//! The fields of an ImagePolicy document, each checked, each problem at its value: the
//! image, the rule, the tag pattern and its `extract`, the interval, the secret.

use std::time::Duration;

use regex::{Regex, RegexBuilder};

use super::image_policy::{
    DEFAULT_INTERVAL, DEFAULT_MAX_TAGS, ImagePolicy, MAX_TAG_PATTERN_CHARS, MIN_INTERVAL, Order,
    Rule, TagFilter, UpdateMode,
};
use super::image_reference::{is_valid_image_name, is_valid_tag, split_image_reference};
use super::model_set::Models;
use super::model_types::Text;
use super::read::Reader;
use super::semver_range::SemverRange;
use crate::load::Node;

/// The compiled size a tag pattern may take (the regex crate's own default is 10 MiB).
const TAG_PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A group a replacement (`$ts`, `${1}`) names, read as the regex crate reads it.
#[derive(Debug, PartialEq)]
enum GroupRef<'a> {
    Index(usize),
    Name(&'a str),
}

/// The groups `extract` names: `$name` (the longest run of letters, digits and `_`),
/// `${name}`, `$N`; `$$` is a dollar.
fn group_refs(extract: &str) -> Vec<GroupRef<'_>> {
    let mut refs = Vec::new();
    let mut rest = extract;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let (name, after) = if let Some(braced) = rest.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => ("", rest),
            }
        } else if let Some(after) = rest.strip_prefix('$') {
            ("", after)
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        rest = after;
        if name.is_empty() {
            continue;
        }
        refs.push(match name.parse::<usize>() {
            Ok(index) => GroupRef::Index(index),
            Err(_) => GroupRef::Name(name),
        });
    }
    refs
}

/// The problem with `extract` for `pattern`, if any: (message, hint).
fn extract_problem(pattern: &Regex, extract: &str) -> Option<(String, String)> {
    let names: Vec<&str> = pattern.capture_names().flatten().collect();
    let groups = || {
        let mut shown: Vec<String> = names.iter().map(|n| format!("${n}")).collect();
        shown.extend((0..pattern.captures_len()).map(|i| format!("${i}")));
        format!("tag_pattern's groups: {}", shown.join(", "))
    };
    let refs = group_refs(extract);
    if refs.is_empty() {
        return Some((
            format!("extract \"{extract}\" names no group of tag_pattern"),
            format!(
                "write the group after a $, e.g. $ts or ${{ts}}; {}",
                groups()
            ),
        ));
    }
    refs.into_iter().find_map(|group| {
        let (known, shown) = match group {
            GroupRef::Index(i) => (i < pattern.captures_len(), i.to_string()),
            GroupRef::Name(n) => (names.contains(&n), n.to_string()),
        };
        (!known).then(|| {
            (
                format!("extract names group \"{shown}\", which tag_pattern does not have"),
                groups(),
            )
        })
    })
}

impl Reader<'_> {
    pub(super) fn read_image_policy(&mut self, models: &mut Models) {
        let name = self.required_text("name");
        let image = self.policy_image();
        let rule = self.policy_rule();
        let filter = self.tag_filter();
        let min_age = self.duration("min_age");
        let interval = self.interval();
        let secret = self.secret();
        let insecure = self.boolean("insecure").map(|b| b.value);
        let max_tags = self.max_tags();
        let update = self.choice("update", &UpdateMode::ALL, UpdateMode::name);
        if let Some(Rule::Digest { .. }) = &rule {
            self.follows_one_tag(&["tag_pattern", "extract", "min_age"]);
        }
        // As for every model, a wrong optional field is reported and read as absent:
        // the repo has an error, so nothing acts on the policy, and resolve still
        // sees its name (a duplicate is reported too).
        let (Some(name), Some(image), Some(rule)) = (name, image, rule) else {
            return;
        };
        models.image_policies.push(ImagePolicy {
            origin: self.origin,
            name,
            image,
            rule,
            filter,
            min_age,
            interval: interval.unwrap_or(DEFAULT_INTERVAL),
            secret,
            insecure: insecure.unwrap_or(false),
            max_tags: max_tags.unwrap_or(DEFAULT_MAX_TAGS),
            update: update.map_or(UpdateMode::Commit, |u| u.value),
        });
    }

    /// `image`: a repository, without a tag or a digest.
    fn policy_image(&mut self) -> Option<Text> {
        let image = self.required_text("image")?;
        let (repository, tag) = split_image_reference(&image.value);
        let problem = if image.value.contains('@') {
            Some((
                format!("image \"{}\" carries a digest", image.value),
                "name the repository alone: the tag (or the digest) is what the policy chooses",
            ))
        } else if tag.is_some() {
            Some((
                format!("image \"{}\" carries a tag", image.value),
                "name the repository alone (as Image models' name): the tag is what the policy chooses",
            ))
        } else if !is_valid_image_name(repository) {
            Some((
                format!("\"{}\" is not a valid image name", image.value),
                "image names are lowercase, without spaces, e.g. registry.local:5000/shop/api",
            ))
        } else {
            None
        };
        match problem {
            Some((message, hint)) => {
                self.error(image.span, message).hint = Some(hint.into());
                None
            }
            None => Some(image),
        }
    }

    /// Exactly one of `semver`, `numerical`, `alphabetical` and `digest`.
    fn policy_rule(&mut self) -> Option<Rule> {
        let written: Vec<(&str, &Node)> = Rule::FIELDS
            .into_iter()
            .filter_map(|field| self.present(field).map(|(key, _)| (field, key)))
            .collect();
        let (field, second) = match written.as_slice() {
            [] => {
                self.error(
                    self.origin.span,
                    "an ImagePolicy needs an ordering: semver, numerical, alphabetical or digest",
                )
                .hint = Some("for example semver: \">=1.0.0\", or numerical: asc with a tag_pattern and extract".into());
                return None;
            }
            [(field, _)] => (*field, None),
            [(first, _), (second, key), ..] => (*first, Some((*second, *key))),
        };
        if let Some((second, key)) = second {
            let span = self.document.span(key);
            self.error(
                span,
                format!("\"{field}\" and \"{second}\" are two orderings; a policy has one"),
            )
            .hint = Some("keep one of semver, numerical, alphabetical and digest".into());
            return None;
        }
        match field {
            "semver" => self.semver_rule(),
            "numerical" => self
                .choice("numerical", &Order::ALL, Order::name)
                .map(|o| Rule::Numerical(o.value)),
            "alphabetical" => self
                .choice("alphabetical", &Order::ALL, Order::name)
                .map(|o| Rule::Alphabetical(o.value)),
            _ => self.digest_rule(),
        }
    }

    fn semver_rule(&mut self) -> Option<Rule> {
        let range = self.text("semver")?;
        match SemverRange::parse(&range.value) {
            Ok(parsed) => Some(Rule::Semver(parsed)),
            Err(error) => {
                self.error(
                    range.span,
                    format!("semver range \"{}\" does not parse: {error}", range.value),
                )
                .hint = Some(
                    "comparators joined by spaces or commas, alternatives by ||: \">=1.2.0 <2.0.0\", \"~1.4\", \"1.x || >=3.0.0-0\"".into(),
                );
                None
            }
        }
    }

    fn digest_rule(&mut self) -> Option<Rule> {
        let tag = self.text("digest")?;
        if !is_valid_tag(&tag.value) {
            self.error(
                tag.span,
                format!("digest \"{}\" is not a tag to follow", tag.value),
            )
            .hint = Some("name the tag whose digest is followed, e.g. digest: latest".into());
            return None;
        }
        Some(Rule::Digest { tag: tag.value })
    }

    /// A digest policy follows one tag: fields that choose among tags are errors.
    fn follows_one_tag(&mut self, fields: &[&str]) {
        for field in fields {
            if let Some((key, _)) = self.present(field) {
                let span = self.document.span(key);
                self.error(
                    span,
                    format!("\"{field}\" does not apply: a digest policy follows one tag"),
                )
                .hint = Some(format!(
                    "remove \"{field}\", or rank tags with semver, numerical or alphabetical"
                ));
            }
        }
    }

    /// `tag_pattern` with its `extract`.
    fn tag_filter(&mut self) -> Option<TagFilter> {
        let pattern = self.text("tag_pattern");
        let extract = self.text("extract");
        let Some(pattern) = pattern else {
            if let Some(extract) = extract {
                self.error(extract.span, "extract needs a tag_pattern")
                    .hint = Some("extract takes what tag_pattern's groups captured: add tag_pattern: '^main-(?P<ts>[0-9]+)-[0-9a-f]+$'".into());
            }
            return None;
        };
        let chars = pattern.value.chars().count();
        if chars > MAX_TAG_PATTERN_CHARS {
            self.error(
                pattern.span,
                format!("tag_pattern is {chars} characters long, more than the limit of {MAX_TAG_PATTERN_CHARS}"),
            )
            .hint = Some("match only what tells the tags apart: a tag is at most 128 characters".into());
            return None;
        }
        let compiled = match RegexBuilder::new(&pattern.value)
            .size_limit(TAG_PATTERN_SIZE_LIMIT)
            .build()
        {
            Ok(compiled) => compiled,
            Err(error) => {
                let why = match &error {
                    regex::Error::CompiledTooBig(limit) => {
                        format!("it compiles to more than the limit of {limit} bytes")
                    }
                    other => last_line(&other.to_string()),
                };
                self.error(
                    pattern.span,
                    format!("tag_pattern does not compile: {why}"),
                )
                .hint = Some("tag_pattern is a Rust regex (https://docs.rs/regex/#syntax), e.g. '^main-(?P<ts>[0-9]+)$'".into());
                return None;
            }
        };
        if let Some(extract) = &extract
            && let Some((message, hint)) = extract_problem(&compiled, &extract.value)
        {
            self.error(extract.span, message).hint = Some(hint);
            return None;
        }
        Some(TagFilter {
            pattern: compiled,
            extract: extract.map(|e| e.value),
        })
    }

    fn duration(&mut self, field: &str) -> Option<Duration> {
        let text = self.text(field)?;
        match humantime::parse_duration(&text.value) {
            Ok(duration) => Some(duration),
            Err(error) => {
                self.error(
                    text.span,
                    format!("{field} \"{}\" is not a duration: {error}", text.value),
                )
                .hint = Some("a number and its unit: 30s, 10m, 1h, 2d".into());
                None
            }
        }
    }

    fn interval(&mut self) -> Option<Duration> {
        let interval = self.duration("interval")?;
        if interval < MIN_INTERVAL
            && let Some((_, node)) = self.present("interval")
        {
            let span = self.document.span(node);
            self.error(
                span,
                format!(
                    "interval {} is shorter than {}",
                    humantime::format_duration(interval),
                    humantime::format_duration(MIN_INTERVAL)
                ),
            )
            .hint = Some(
                "a registry is listed at most every 10s; its webhook triggers a scan at once"
                    .into(),
            );
            return None;
        }
        Some(interval)
    }

    fn secret(&mut self) -> Option<String> {
        let secret = self.text("secret")?;
        if !crate::k8s::is_dns1123_subdomain(&secret.value) {
            self.error(
                secret.span,
                format!("\"{}\" is not a Secret name", secret.value),
            )
            .hint = Some(
                "name the Secret with the registry's credentials (a docker config), e.g. regcred"
                    .into(),
            );
            return None;
        }
        Some(secret.value)
    }

    fn max_tags(&mut self) -> Option<usize> {
        let count = self.integer("max_tags")?;
        match usize::try_from(count.value) {
            Ok(n) if n > 0 => Some(n),
            _ => {
                self.error(
                    count.span,
                    format!("max_tags {} is not a tag count", count.value),
                )
                .hint = Some(format!("1 or more; the default is {DEFAULT_MAX_TAGS}"));
                None
            }
        }
    }
}

/// The last line of the regex crate's message (the line that says what is wrong,
/// after the pattern and its caret).
fn last_line(message: &str) -> String {
    let line = message.lines().last().unwrap_or(message).trim();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacements_name_groups_as_the_regex_crate_reads_them() {
        assert_eq!(group_refs("$ts"), [GroupRef::Name("ts")]);
        assert_eq!(group_refs("${ts}x"), [GroupRef::Name("ts")]);
        assert_eq!(group_refs("$1"), [GroupRef::Index(1)]);
        assert_eq!(group_refs("$1a"), [GroupRef::Name("1a")]);
        assert_eq!(group_refs("$$ts"), []);
        assert_eq!(
            group_refs("$a.$b"),
            [GroupRef::Name("a"), GroupRef::Name("b")]
        );
        assert_eq!(group_refs("plain"), []);
    }

    #[test]
    fn extract_must_name_the_pattern_s_groups() {
        let pattern = Regex::new("^main-(?P<ts>[0-9]+)-([0-9a-f]+)$").unwrap();
        assert_eq!(extract_problem(&pattern, "$ts"), None);
        assert_eq!(extract_problem(&pattern, "${2}"), None);
        let (message, hint) = extract_problem(&pattern, "$stamp").unwrap();
        assert_eq!(
            message,
            "extract names group \"stamp\", which tag_pattern does not have"
        );
        assert_eq!(hint, "tag_pattern's groups: $ts, $0, $1, $2");
        assert!(extract_problem(&pattern, "$3").is_some());
        assert!(extract_problem(&pattern, "ts").is_some());
    }
}
