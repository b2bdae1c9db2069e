//! The ImagePolicy model (tether's own kind): which tags of one image repository may
//! replace the tags written in the repo, and how they are ranked. Its fields are read
//! and checked in `image_policy_fields`; what a policy says of a tag is
//! [`crate::image_automation::policy`].

use std::time::Duration;

use regex::Regex;

use super::model_types::{Origin, Text};
use super::semver_range::SemverRange;

/// A tag pattern longer than this is refused: tags are at most 128 characters, and
/// a pattern is read on every tag of every listing.
pub const MAX_TAG_PATTERN_CHARS: usize = 1000;
/// How often the registry is listed when `interval` is not written.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// The shortest `interval`: a registry is not listed more often than this.
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);
/// How many tags a repository may list before nothing is chosen from it.
pub const DEFAULT_MAX_TAGS: usize = 5000;

/// An image policy, as written in the repo and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ImagePolicy {
    pub origin: Origin,
    pub name: Text,
    /// The image repository, spelled as Image models' `name` (no tag, no digest).
    pub image: Text,
    pub rule: Rule,
    pub filter: Option<TagFilter>,
    /// A tag younger than this is not chosen.
    pub min_age: Option<Duration>,
    /// How often the registry is listed.
    pub interval: Duration,
    /// The Secret with the registry's credentials.
    pub secret: Option<String>,
    /// The registry speaks plain HTTP.
    pub insecure: bool,
    /// More tags than this in the repository: nothing is chosen, with a warning.
    pub max_tags: usize,
    pub update: UpdateMode,
}

/// How a policy ranks the tags it admits.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// The highest version in the range (`v1.2.3` counts as 1.2.3).
    Semver(SemverRange),
    /// Tags (or what `extract` takes of them) as numbers.
    Numerical(Order),
    /// Tags (or what `extract` takes of them) in byte order.
    Alphabetical(Order),
    /// The digest one tag points at.
    Digest { tag: String },
}

impl Rule {
    /// The field that writes the rule.
    pub const FIELDS: [&str; 4] = ["semver", "numerical", "alphabetical", "digest"];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The highest (the last in order) wins.
    Asc,
    /// The lowest (the first in order) wins.
    Desc,
}

impl Order {
    pub const ALL: [Order; 2] = [Order::Asc, Order::Desc];

    pub fn name(self) -> &'static str {
        match self {
            Order::Asc => "asc",
            Order::Desc => "desc",
        }
    }
}

/// Where an update goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateMode {
    /// A commit on the Source's branch.
    Commit,
    /// A branch per policy (`tether/image/<name>`), updated in place.
    Branch,
}

impl UpdateMode {
    pub const ALL: [UpdateMode; 2] = [UpdateMode::Commit, UpdateMode::Branch];

    pub fn name(self) -> &'static str {
        match self {
            UpdateMode::Commit => "commit",
            UpdateMode::Branch => "branch",
        }
    }
}

/// `tag_pattern` and `extract`: only matching tags are admitted, and what is ranked
/// is `extract` expanded with the match's groups (the whole tag without it).
#[derive(Clone, Debug)]
pub struct TagFilter {
    pub pattern: Regex,
    pub extract: Option<String>,
}

impl PartialEq for TagFilter {
    fn eq(&self, other: &TagFilter) -> bool {
        self.pattern.as_str() == other.pattern.as_str() && self.extract == other.extract
    }
}
