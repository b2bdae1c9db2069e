//! What a policy says of one tag: whether it admits it, and its rank among the tags
//! it admits. The policy itself is the ImagePolicy model ([`crate::model`]), read and
//! checked there; its types are re-exported here for image automation's users.

use std::cmp::{Ordering, Reverse};
use std::fmt::Write as _;

use semver::{BuildMetadata, Version};

pub use crate::model::{ImagePolicy, Order, Rule, SemverRange, TagFilter, UpdateMode};

/// Where a tag stands under one policy: a higher rank is a better tag. Ranks of one
/// policy compare with each other only.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank(Ranked);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ranked {
    Ascending(Key),
    Descending(Reverse<Key>),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// Without build metadata, which semver precedence ignores.
    Version(Version),
    Number(Number),
    Text(String),
}

impl ImagePolicy {
    /// The rank of `tag` under this policy, or None when the policy does not admit it
    /// (filter, range, not a number…).
    pub fn rank(&self, tag: &str) -> Option<Rank> {
        let value = match &self.filter {
            Some(filter) => filter.ranked_value(tag)?,
            None => tag.to_string(),
        };
        let (key, order) = match &self.rule {
            Rule::Semver(range) => {
                let version = tag_version(&value).filter(|v| range.admits(v))?;
                (Key::Version(version), Order::Asc)
            }
            Rule::Numerical(order) => (Key::Number(Number::parse(&value)?), *order),
            Rule::Alphabetical(order) => (Key::Text(value), *order),
            Rule::Digest { tag: followed } => {
                if tag != followed {
                    return None;
                }
                (Key::Text(value), Order::Asc)
            }
        };
        Some(Rank(match order {
            Order::Asc => Ranked::Ascending(key),
            Order::Desc => Ranked::Descending(Reverse(key)),
        }))
    }

    /// A fingerprint of what the policy says (rule, filter, min_age), for the commit
    /// message and the status: `semver >=2.0.0 <3.0.0, tags matching ^v…`.
    pub fn describe(&self) -> String {
        let mut text = match &self.rule {
            Rule::Semver(range) => format!("semver {range}"),
            Rule::Numerical(order) => format!("numerical {}", order.name()),
            Rule::Alphabetical(order) => format!("alphabetical {}", order.name()),
            Rule::Digest { tag } => format!("the digest of tag {tag}"),
        };
        if let Some(filter) = &self.filter {
            let _ = write!(text, ", tags matching {}", filter.pattern.as_str());
            if let Some(extract) = &filter.extract {
                let _ = write!(text, " ranked by {extract}");
            }
        }
        if let Some(age) = self.min_age {
            let _ = write!(text, ", at least {} old", humantime::format_duration(age));
        }
        text
    }
}

impl TagFilter {
    /// What is ranked of `tag`: `extract` expanded with the match's groups, or the
    /// whole tag; None when the tag does not match or the expansion is empty.
    pub fn ranked_value(&self, tag: &str) -> Option<String> {
        let captures = self.pattern.captures(tag)?;
        let Some(extract) = &self.extract else {
            return Some(tag.to_string());
        };
        let mut value = String::new();
        captures.expand(extract, &mut value);
        (!value.is_empty()).then_some(value)
    }
}

/// A tag as a version: `1.2.3`, `v1.2.3`, and the short `1.2` and `1` (as 1.2.0 and
/// 1.0.0, as Flux reads them), with pre-release and build; the build is dropped.
fn tag_version(tag: &str) -> Option<Version> {
    let text = tag.strip_prefix(['v', 'V']).unwrap_or(tag);
    let core_end = text.find(['-', '+']).unwrap_or(text.len());
    let (core, rest) = text.split_at(core_end);
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() > 3 {
        return None;
    }
    let padded = match parts.len() {
        1 => format!("{core}.0.0{rest}"),
        2 => format!("{core}.0{rest}"),
        _ => format!("{core}{rest}"),
    };
    let mut version = Version::parse(&padded).ok()?;
    version.build = BuildMetadata::EMPTY;
    Some(version)
}

/// A decimal number compared exactly, however long (a timestamp tag may not fit a
/// float): `-12.50` is negative, integer `12`, fraction `5`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Number {
    negative: bool,
    /// Without leading zeros.
    integer: String,
    /// Without trailing zeros.
    fraction: String,
}

impl Number {
    fn parse(text: &str) -> Option<Number> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if integer.is_empty() || !digits(integer) || !digits(fraction) {
            return None;
        }
        if unsigned.ends_with('.') {
            return None;
        }
        let integer = integer.trim_start_matches('0').to_string();
        let fraction = fraction.trim_end_matches('0').to_string();
        // -0 is 0.
        let negative = negative && !(integer.is_empty() && fraction.is_empty());
        Some(Number {
            negative,
            integer,
            fraction,
        })
    }

    fn magnitude_cmp(&self, other: &Number) -> Ordering {
        self.integer
            .len()
            .cmp(&other.integer.len())
            .then_with(|| self.integer.cmp(&other.integer))
            .then_with(|| self.fraction.cmp(&other.fraction))
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Number) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.magnitude_cmp(other),
            (true, true) => other.magnitude_cmp(self),
        }
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Number) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::read_models;
    use crate::source::{SourceFile, SourceFiles};

    /// The ImagePolicy of repository `r/app` with `fields`, read as a user writes it.
    pub(crate) fn policy(fields: &str) -> ImagePolicy {
        let text = format!("kind: ImagePolicy\nname: p\nimage: r/app\n{fields}");
        let files = SourceFiles::from_files(vec![SourceFile::new("policy.yaml", text)]);
        let (documents, load_diagnostics) = crate::load::load(&files);
        let (models, diagnostics) = read_models(&files, &documents);
        assert!(
            !load_diagnostics.has_errors() && !diagnostics.has_errors(),
            "{}",
            diagnostics.render_plain(&files)
        );
        models.image_policies.into_iter().next().unwrap()
    }

    #[test]
    fn semver_ranks_versions_and_a_v_prefix_ties() {
        let p = policy("semver: '>=1.0.0'\n");
        assert!(p.rank("1.10.0") > p.rank("1.9.0"));
        assert_eq!(p.rank("v1.2.3"), p.rank("1.2.3"));
        assert_eq!(p.rank("1.2.3+build.7"), p.rank("1.2.3"));
        assert_eq!(p.rank("1.2"), p.rank("1.2.0"));
        assert_eq!(p.rank("0.9.0"), None);
        assert_eq!(p.rank("latest"), None);
        assert_eq!(p.rank("1.2.3.4"), None);
        assert_eq!(p.rank("1.3.0-rc.1"), None, "no pre-release unless named");
    }

    #[test]
    fn numbers_compare_exactly_in_either_order() {
        let asc = policy("numerical: asc\n");
        assert!(asc.rank("10") > asc.rank("9"));
        assert!(asc.rank("1.5") > asc.rank("1.25"));
        assert!(asc.rank("-3") < asc.rank("-2"));
        assert_eq!(asc.rank("007"), asc.rank("7.0"));
        assert_eq!(asc.rank("-0"), asc.rank("0"));
        assert!(asc.rank("20240101123045123456789") > asc.rank("20240101123045123456788"));
        for junk in ["", "1.", ".5", "1e5", "abc", "1-2"] {
            assert_eq!(asc.rank(junk), None, "{junk:?}");
        }
        let desc = policy("numerical: desc\n");
        assert!(desc.rank("9") > desc.rank("10"));
    }

    #[test]
    fn a_filter_admits_matching_tags_and_ranks_what_extract_takes() {
        let p = policy(
            "numerical: asc\ntag_pattern: '^main-(?P<ts>[0-9]+)-[0-9a-f]+$'\nextract: '$ts'\n",
        );
        assert!(p.rank("main-200-abc") > p.rank("main-100-fff"));
        assert_eq!(p.rank("feature-300-abc"), None);
        assert_eq!(p.rank("main-300"), None);
        let whole = policy("alphabetical: desc\ntag_pattern: '^rc-'\n");
        assert!(whole.rank("rc-a") > whole.rank("rc-b"));
        assert_eq!(whole.rank("a"), None);
    }

    #[test]
    fn describe_says_rule_filter_and_age() {
        let p = policy(
            "semver: '>=2.0.0 <3.0.0'\ntag_pattern: '^v(?P<v>.*)$'\nextract: '$v'\nmin_age: 10m\n",
        );
        assert_eq!(
            p.describe(),
            "semver >=2.0.0 <3.0.0, tags matching ^v(?P<v>.*)$ ranked by $v, at least 10m old"
        );
        assert_eq!(
            policy("digest: latest\n").describe(),
            "the digest of tag latest"
        );
    }
}
