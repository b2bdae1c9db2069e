//! A semver range as Flux and Masterminds spell it: comparators ANDed by spaces or
//! commas, alternatives ORed by `||`, `x`/`*` wildcards, `~`, `^`, hyphen ranges
//! (`1.2 - 1.4`), `!=`, and a `v` before a version. A bare version means exactly
//! that version (Masterminds' reading, not Cargo's caret).
//!
//! Pre-releases are admitted only by an alternative that names one (`>=1.0.0-0`), as
//! in Flux; such an alternative then compares them in semver order, so `<2.0.0`
//! admits `2.0.0-rc.1` there (write `<2.0.0-0` to keep them out).

use std::fmt;

use semver::{BuildMetadata, Comparator, Op, Prerelease, Version};

#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    #[error("the range is empty")]
    Empty,
    #[error("\"{token}\" is not a version comparator: {source}")]
    Comparator {
        token: String,
        source: semver::Error,
    },
    #[error("a hyphen range needs one version on each side of \" - \"")]
    Hyphen,
    #[error("an operator needs a version after it")]
    DanglingOperator,
}

/// A parsed range: any of its alternatives admits a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemverRange {
    text: String,
    alternatives: Vec<Alternative>,
}

/// Comparators that must all hold.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Alternative {
    bounds: Vec<Bound>,
    /// A comparator names a pre-release: pre-releases are admitted and compared.
    prerelease: bool,
}

/// One comparator as an interval of versions (`negated` for `!=`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bound {
    lower: Option<(Version, Inclusive)>,
    upper: Option<(Version, Inclusive)>,
    negated: bool,
}

type Inclusive = bool;

/// Operators written alone before their version (`>= 1.2.3`), longest first.
const OPERATORS: [&str; 10] = ["!=", ">=", "<=", "==", "~>", "=", ">", "<", "~", "^"];

impl SemverRange {
    pub fn parse(text: &str) -> Result<SemverRange, RangeError> {
        let alternatives = text
            .split("||")
            .map(alternative)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SemverRange {
            text: text.trim().to_string(),
            alternatives,
        })
    }

    /// The range as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn admits(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|alternative| {
            (version.pre.is_empty() || alternative.prerelease)
                && alternative.bounds.iter().all(|b| b.holds(version))
        })
    }
}

impl fmt::Display for SemverRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn alternative(text: &str) -> Result<Alternative, RangeError> {
    let words = comparator_words(text)?;
    if words.is_empty() {
        return Err(RangeError::Empty);
    }
    let mut bounds = Vec::new();
    let mut prerelease = false;
    let mut i = 0;
    while i < words.len() {
        if words.get(i + 1).is_some_and(|w| w == "-") {
            let (Some(low), Some(high)) = (words.get(i), words.get(i + 2)) else {
                return Err(RangeError::Hyphen);
            };
            for (op, word) in [(">=", low), ("<=", high)] {
                let (bound, pre) = comparator(op, word)?;
                prerelease |= pre;
                bounds.push(bound);
            }
            i += 3;
            continue;
        }
        if words[i] == "-" {
            return Err(RangeError::Hyphen);
        }
        let (op, version) = split_operator(&words[i]);
        let (bound, pre) = comparator(op, version)?;
        prerelease |= pre;
        bounds.push(bound);
        i += 1;
    }
    Ok(Alternative { bounds, prerelease })
}

/// The comparators of one alternative, an operator written apart joined to its version.
fn comparator_words(text: &str) -> Result<Vec<String>, RangeError> {
    let mut words: Vec<String> = Vec::new();
    let mut pending: Option<&str> = None;
    for word in text.split([' ', ',', '\t']).filter(|w| !w.is_empty()) {
        match pending.take() {
            Some(op) => words.push(format!("{op}{word}")),
            None if OPERATORS.contains(&word) => pending = Some(word),
            None => words.push(word.to_string()),
        }
    }
    match pending {
        Some(_) => Err(RangeError::DanglingOperator),
        None => Ok(words),
    }
}

fn split_operator(word: &str) -> (&str, &str) {
    OPERATORS
        .iter()
        .find_map(|op| word.strip_prefix(op).map(|rest| (*op, rest)))
        .unwrap_or(("", word))
}

/// One comparator as a bound, and whether it names a pre-release.
fn comparator(op: &str, version: &str) -> Result<(Bound, bool), RangeError> {
    let version = version.trim_start_matches(['v', 'V']);
    if matches!(version, "*" | "x" | "X") {
        let any = Bound {
            lower: None,
            upper: None,
            negated: op == "!=",
        };
        return Ok((any, false));
    }
    let (semver_op, negated) = match op {
        "" | "!=" | "==" => ("=", op == "!="),
        "~>" => ("~", false),
        other => (other, false),
    };
    let token = format!("{semver_op}{version}");
    let parsed: Comparator = token.parse().map_err(|source| RangeError::Comparator {
        token: format!("{op}{version}"),
        source,
    })?;
    let prerelease = !parsed.pre.is_empty();
    let mut bound = bound(&parsed);
    bound.negated = negated;
    Ok((bound, prerelease))
}

/// The interval a comparator admits. A partial version (`1.2`) stands for the set
/// `1.2.x` with its pre-releases: from `1.2.0-0` up to, not including, `1.3.0-0`.
fn bound(c: &Comparator) -> Bound {
    let full = c.minor.is_some() && c.patch.is_some();
    let start = Version {
        major: c.major,
        minor: c.minor.unwrap_or(0),
        patch: c.patch.unwrap_or(0),
        pre: if full { c.pre.clone() } else { lowest_pre() },
        build: BuildMetadata::EMPTY,
    };
    // The first version past the set the comparator's version names.
    let end = match (c.minor, c.patch) {
        (Some(minor), Some(patch)) => floor(c.major, minor, patch.saturating_add(1)),
        (Some(minor), None) => floor(c.major, minor.saturating_add(1), 0),
        (None, _) => floor(c.major.saturating_add(1), 0, 0),
    };
    let at_least = |v: &Version| Some((v.clone(), true));
    let below = |v: Version| Some((v, false));
    let (lower, upper) = match c.op {
        Op::Exact | Op::Wildcard if full => (at_least(&start), Some((start.clone(), true))),
        Op::Greater if full => (Some((start.clone(), false)), None),
        Op::LessEq if full => (None, Some((start.clone(), true))),
        Op::Exact | Op::Wildcard => (at_least(&start), below(end)),
        Op::Greater => (below(end).map(|(v, _)| (v, true)), None),
        Op::GreaterEq => (at_least(&start), None),
        Op::Less => (None, below(start.clone())),
        Op::LessEq => (None, below(end)),
        Op::Tilde => {
            let next = match c.minor {
                Some(minor) => floor(c.major, minor.saturating_add(1), 0),
                None => floor(c.major.saturating_add(1), 0, 0),
            };
            (at_least(&start), below(next))
        }
        Op::Caret => (at_least(&start), below(caret_end(c))),
        _ => (None, None),
    };
    Bound {
        lower,
        upper,
        negated: false,
    }
}

/// `^`'s upper end: the next version that changes the leftmost non-zero part.
fn caret_end(c: &Comparator) -> Version {
    match (c.major, c.minor, c.patch) {
        (0, Some(0), Some(patch)) => floor(0, 0, patch.saturating_add(1)),
        (0, Some(minor), _) => floor(0, minor.saturating_add(1), 0),
        (major, _, _) => floor(major.saturating_add(1), 0, 0),
    }
}

/// The lowest version of `major.minor.patch`: its first possible pre-release.
fn floor(major: u64, minor: u64, patch: u64) -> Version {
    Version {
        major,
        minor,
        patch,
        pre: lowest_pre(),
        build: BuildMetadata::EMPTY,
    }
}

fn lowest_pre() -> Prerelease {
    Prerelease::new("0").unwrap_or(Prerelease::EMPTY)
}

impl Bound {
    fn holds(&self, version: &Version) -> bool {
        let above = self.lower.as_ref().is_none_or(|(low, inclusive)| {
            if *inclusive {
                version >= low
            } else {
                version > low
            }
        });
        let under = self.upper.as_ref().is_none_or(|(high, inclusive)| {
            if *inclusive {
                version <= high
            } else {
                version < high
            }
        });
        (above && under) != self.negated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admits(range: &str, version: &str) -> bool {
        let range = SemverRange::parse(range).unwrap();
        range.admits(&Version::parse(version).unwrap())
    }

    #[test]
    fn flux_spellings_admit_what_flux_admits() {
        let rows: &[(&str, &str, bool)] = &[
            (">=2.0.0 <3.0.0", "2.5.1", true),
            (">=2.0.0 <3.0.0", "3.0.0", false),
            (">=2.0.0, <3.0.0", "1.9.9", false),
            (">= 2.0.0, < 3.0.0", "2.0.0", true),
            ("1.2.x", "1.2.9", true),
            ("1.2.x", "1.3.0", false),
            ("1.x", "1.9.0", true),
            ("*", "7.0.0", true),
            ("~1.2", "1.2.7", true),
            ("~1.2", "1.3.0", false),
            ("~1.2.3", "1.2.2", false),
            ("^1.2", "1.9.0", true),
            ("^1.2", "2.0.0", false),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            ("1.2.3", "1.2.3", true),
            ("1.2.3", "1.2.4", false),
            ("v1.2.3", "1.2.3", true),
            (">=v1.0", "1.0.0", true),
            ("1.2 - 1.4", "1.4.9", true),
            ("1.2 - 1.4", "1.5.0", false),
            ("<1.0.0 || >=2.0.0", "0.9.0", true),
            ("<1.0.0 || >=2.0.0", "1.5.0", false),
            ("!=1.2.3", "1.2.3", false),
            ("!=1.2.3", "1.2.4", true),
            (">1.2", "1.2.9", false),
            (">1.2", "1.3.0", true),
            ("<=1.2", "1.2.9", true),
            ("<=1.2", "1.3.0", false),
        ];
        for (range, version, expected) in rows {
            assert_eq!(
                admits(range, version),
                *expected,
                "{range} admits {version}"
            );
        }
    }

    #[test]
    fn pre_releases_only_when_the_range_names_one() {
        assert!(!admits(">=1.0.0", "1.5.0-rc.1"));
        assert!(admits(">=1.0.0-0", "1.5.0-rc.1"));
        assert!(admits(">=1.0.0-0 <2.0.0", "1.5.0-rc.1"));
        assert!(!admits(">=1.0.0-0 <2.0.0-0", "2.0.0-rc.1"));
        assert!(!admits(">=1.0.0-rc.2", "1.0.0-rc.1"));
        // The alternative that names none keeps them out; the other lets them in.
        assert!(admits("<1.0.0 || >=2.0.0-0", "2.1.0-beta"));
        assert!(!admits("<1.0.0-0 || >=2.0.0", "2.1.0-beta"));
    }

    #[test]
    fn bad_ranges_say_what_is_wrong() {
        for (range, message) in [
            ("", "the range is empty"),
            ("  ||>=1.0.0", "the range is empty"),
            (">=", "an operator needs a version after it"),
            (
                "1.0 -",
                "a hyphen range needs one version on each side of \" - \"",
            ),
            ("banana", "\"banana\" is not a version comparator"),
            (">=1.0.0 <two", "\"<two\" is not a version comparator"),
        ] {
            let error = SemverRange::parse(range).unwrap_err().to_string();
            assert!(error.starts_with(message), "{range}: {error}");
        }
    }
}
