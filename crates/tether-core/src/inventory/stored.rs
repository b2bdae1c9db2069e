//! How a record is stored, pure: the ConfigMaps' contents, written and read back.
//!
//! A record is a **head** ConfigMap named `tether-inventory-<inventory>`
//! ([`crate::ownership::Inventory::record_name`]), holding the commit and the object
//! lines: as text up to [`INLINE_LIMIT`], gzipped up to [`SHARD_LIMIT`], and beyond
//! that in **shards**: immutable ConfigMaps of gzipped lines, each within
//! [`SHARD_LIMIT`], that the head names with the SHA-256 of their contents and their
//! number of entries. A ConfigMap holds at most 1 MiB, so one head held about 35,000
//! entries; shards have no such end (100,000 entries take four or five).
//!
//! The head is the record's only mutable part, and writing it is the commit point:
//! the shards a head names are created first (under new names, never reused), the head
//! is replaced on its resourceVersion, and only then are the shards of the head it
//! replaced deleted. A write interrupted at any point leaves a head that names shards
//! which all exist and hold what it says, so no entry is ever lost; a shard whose head
//! was never written is an orphan, removed later ([`is_orphan`]).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{InventoryRecord, parse_line};

/// The ConfigMap key of the object lines.
pub(crate) const OBJECTS_KEY: &str = "objects";
/// The binaryData key of the object lines, gzipped (in the head, or in a shard).
const OBJECTS_GZIP_KEY: &str = "objects.gz";
/// The head's key naming its shards: one line each, `name sha256 entries`.
const SHARDS_KEY: &str = "shards";
/// The ConfigMap key of the commit last applied without a failure.
const COMMIT_KEY: &str = "commit";
/// Object lines up to this size are kept as text in the head (readable with kubectl).
const INLINE_LIMIT: usize = 256 * 1024;
/// The most packed lines one ConfigMap holds, well within the API server's 1 MiB for
/// a ConfigMap's data (its metadata and the head's other keys take the rest).
pub const SHARD_LIMIT: usize = 768 * 1024;
/// How many lines' text is packed at once before a shard is split further: lines
/// compress about fivefold (uids, which compress least, included), so most shards are
/// packed once.
const SHARD_TEXT: usize = 3 * 1024 * 1024;
/// Object lines unpacked from gzip beyond this size are refused (the record is
/// tether's own, but a ConfigMap anyone may write is no reason to fill memory).
const UNPACKED_LIMIT: u64 = 64 * 1024 * 1024;
/// An orphan shard (named by no head) is removed once it is this old: a younger one
/// may belong to a head another writer is about to write.
pub const ORPHAN_AGE_SECONDS: i64 = 600;

/// A ConfigMap's data and binaryData.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub data: BTreeMap<String, String>,
    pub binary: BTreeMap<String, Vec<u8>>,
}

/// One shard's packed lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub contents: Contents,
    digest: String,
    entries: usize,
}

/// A shard as its head names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRef {
    pub name: String,
    digest: String,
    entries: usize,
}

/// What to write for a record: the head (without the names of its shards, which the
/// server gives them) and the shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub head: Contents,
    pub shards: Vec<Shard>,
}

impl Layout {
    /// The head naming `names`, the names the server gave [`Layout::shards`] in order.
    pub fn head_naming(&self, names: &[String]) -> Contents {
        let mut head = self.head.clone();
        if !self.shards.is_empty() {
            let lines: String = self
                .shards
                .iter()
                .zip(names)
                .map(|(shard, name)| format!("{name} {} {}\n", shard.digest, shard.entries))
                .collect();
            head.data.insert(SHARDS_KEY.to_string(), lines);
        }
        head
    }
}

fn pack(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into memory cannot fail.
    let _ = encoder.write_all(text.as_bytes());
    encoder.finish().unwrap_or_default()
}

fn unpack(packed: &[u8]) -> Result<String, String> {
    use std::io::Read as _;
    let mut text = String::new();
    flate2::read::GzDecoder::new(packed)
        .take(UNPACKED_LIMIT)
        .read_to_string(&mut text)
        .map_err(|e| format!("the packed object lines are unreadable: {e}"))?;
    if text.len() as u64 >= UNPACKED_LIMIT {
        return Err(format!(
            "the packed object lines unpack past {} MiB",
            UNPACKED_LIMIT / (1024 * 1024)
        ));
    }
    Ok(text)
}

fn digest(packed: &[u8]) -> String {
    format!("{:x}", Sha256::digest(packed))
}

/// Packs `lines` into shards of at most [`SHARD_LIMIT`], halving a part until it fits.
fn shards(lines: &[&str], out: &mut Vec<Shard>) {
    let packed = pack(&lines.concat());
    if packed.len() > SHARD_LIMIT && lines.len() > 1 {
        let (first, second) = lines.split_at(lines.len() / 2);
        shards(first, out);
        shards(second, out);
        return;
    }
    out.push(Shard {
        digest: digest(&packed),
        entries: lines.len(),
        contents: Contents {
            data: BTreeMap::new(),
            binary: BTreeMap::from([(OBJECTS_GZIP_KEY.to_string(), packed)]),
        },
    });
}

impl InventoryRecord {
    /// How the record is stored: its lines as text in the head, gzipped in the head,
    /// or in shards, by their size.
    pub fn layout(&self) -> Layout {
        let lines = self.lines();
        let mut head = Contents::default();
        if let Some(commit) = &self.commit {
            head.data.insert(COMMIT_KEY.to_string(), commit.clone());
        }
        if lines.len() <= INLINE_LIMIT {
            head.data.insert(OBJECTS_KEY.to_string(), lines);
            return Layout {
                head,
                shards: Vec::new(),
            };
        }
        let packed = pack(&lines);
        if packed.len() <= SHARD_LIMIT {
            head.binary.insert(OBJECTS_GZIP_KEY.to_string(), packed);
            return Layout {
                head,
                shards: Vec::new(),
            };
        }
        let mut parts = Vec::new();
        let mut part: Vec<&str> = Vec::new();
        let mut size = 0;
        for line in lines.split_inclusive('\n') {
            if size + line.len() > SHARD_TEXT && !part.is_empty() {
                shards(&part, &mut parts);
                part.clear();
                size = 0;
            }
            size += line.len();
            part.push(line);
        }
        shards(&part, &mut parts);
        Layout {
            head,
            shards: parts,
        }
    }

    /// The shards a head names, in order; the error says what is unreadable.
    pub fn shards_of(head: &Contents) -> Result<Vec<ShardRef>, String> {
        let Some(lines) = head.data.get(SHARDS_KEY) else {
            return Ok(Vec::new());
        };
        lines
            .lines()
            .filter(|l| !l.is_empty())
            .map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                match words[..] {
                    [name, digest, entries] if digest.len() == 64 => Ok(ShardRef {
                        name: name.to_string(),
                        digest: digest.to_string(),
                        entries: entries
                            .parse()
                            .map_err(|_| format!("unreadable shard line {line:?}"))?,
                    }),
                    _ => Err(format!("unreadable shard line {line:?}")),
                }
            })
            .collect()
    }

    /// Reads a head and the shards it names (`shards`: their contents, in the head's
    /// order). A shard whose contents are not what the head says (its digest, its
    /// number of entries) is an error, as is the first line that is not an entry.
    pub fn from_stored(head: &Contents, shards: &[Contents]) -> Result<Self, String> {
        let named = Self::shards_of(head)?;
        if named.len() != shards.len() {
            return Err(format!(
                "the record names {} shards, {} were read",
                named.len(),
                shards.len()
            ));
        }
        let mut record = Self::from_config(&head.data, &head.binary)?;
        for (shard, contents) in named.iter().zip(shards) {
            let packed = contents
                .binary
                .get(OBJECTS_GZIP_KEY)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if digest(packed) != shard.digest {
                return Err(format!(
                    "the shard {} does not hold what the record says (its SHA-256 differs)",
                    shard.name
                ));
            }
            let part = Self::from_config(&BTreeMap::new(), &contents.binary)?;
            if part.entries.len() != shard.entries {
                return Err(format!(
                    "the shard {} holds {} entries, the record says {}",
                    shard.name,
                    part.entries.len(),
                    shard.entries
                ));
            }
            record.entries.extend(part.entries);
        }
        Ok(record)
    }

    /// Reads a ConfigMap's data and binaryData holding lines itself: a head, a shard,
    /// or the record of a tether before shards (`<inventory>`, lines as text or
    /// gzipped); the error says what is unreadable: the first line that is not an
    /// entry, or the packed lines.
    pub fn from_config(
        data: &BTreeMap<String, String>,
        binary: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, String> {
        let unpacked;
        let objects = match binary.get(OBJECTS_GZIP_KEY) {
            Some(packed) => {
                unpacked = unpack(packed)?;
                unpacked.as_str()
            }
            None => data.get(OBJECTS_KEY).map(String::as_str).unwrap_or(""),
        };
        let mut entries = BTreeMap::new();
        for line in objects.lines().filter(|l| !l.is_empty()) {
            let (entry, provenance) =
                parse_line(line).ok_or_else(|| format!("unreadable line {line:?}"))?;
            entries.insert(entry, provenance);
        }
        Ok(InventoryRecord {
            entries,
            commit: data.get(COMMIT_KEY).cloned(),
        })
    }
}

/// May a shard be removed? Only one its inventory's head does not name, and, unless the
/// head it belonged to was just replaced (`replaced`), one older than
/// [`ORPHAN_AGE_SECONDS`]: a younger one may be another writer's, about to be named.
pub fn is_orphan(name: &str, named: &[ShardRef], replaced: &[ShardRef], age_seconds: i64) -> bool {
    !named.iter().any(|s| s.name == name)
        && (replaced.iter().any(|s| s.name == name) || age_seconds >= ORPHAN_AGE_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{InventoryEntry, Provenance};

    fn record(count: usize) -> InventoryRecord {
        InventoryRecord {
            entries: (0..count)
                .map(|i| {
                    let entry = InventoryEntry::parse(&format!(
                        "apps/v1 Deployment team-{} web-{i}",
                        i % 50
                    ))
                    .unwrap();
                    // Uids as the API server makes them: random, so they pack poorly.
                    let uid = format!("{:x}", Sha256::digest(i.to_le_bytes()));
                    let uid = format!(
                        "{}-{}-{}-{}-{}",
                        &uid[..8],
                        &uid[8..12],
                        &uid[12..16],
                        &uid[16..20],
                        &uid[20..32]
                    );
                    (entry, Provenance::adopted(Some(uid)))
                })
                .collect(),
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
        }
    }

    fn size(contents: &Contents) -> usize {
        contents.data.values().map(String::len).sum::<usize>()
            + contents.binary.values().map(Vec::len).sum::<usize>()
    }

    /// Stores a layout as the server would, naming shard `i` `shard-i`.
    fn stored(layout: &Layout) -> (Contents, Vec<Contents>) {
        let names: Vec<String> = (0..layout.shards.len())
            .map(|i| format!("shard-{i}"))
            .collect();
        let shards = layout.shards.iter().map(|s| s.contents.clone()).collect();
        (layout.head_naming(&names), shards)
    }

    #[test]
    fn a_small_record_is_text_in_the_head() {
        let record = record(3);
        let layout = record.layout();
        assert!(layout.shards.is_empty());
        assert!(layout.head.data[OBJECTS_KEY].contains("web-2 adopted"));
        let (head, shards) = stored(&layout);
        assert_eq!(InventoryRecord::from_stored(&head, &shards), Ok(record));
    }

    #[test]
    fn twenty_thousand_entries_are_packed_in_the_head() {
        let record = record(20_000);
        let layout = record.layout();
        assert!(layout.shards.is_empty());
        assert!(
            record.lines().len() > 1024 * 1024,
            "more than a ConfigMap holds as text"
        );
        assert!(size(&layout.head) <= SHARD_LIMIT);
        let (head, shards) = stored(&layout);
        assert_eq!(InventoryRecord::from_stored(&head, &shards), Ok(record));
    }

    #[test]
    fn a_hundred_thousand_entries_are_sharded_each_within_a_config_map() {
        let record = record(100_000);
        let layout = record.layout();
        assert!(layout.shards.len() >= 2, "{} shards", layout.shards.len());
        for shard in &layout.shards {
            assert!(
                size(&shard.contents) <= SHARD_LIMIT,
                "{}",
                size(&shard.contents)
            );
        }
        let (head, shards) = stored(&layout);
        assert!(size(&head) < 4096, "the head only names its shards");
        assert_eq!(
            InventoryRecord::shards_of(&head).unwrap().len(),
            shards.len()
        );
        let read = InventoryRecord::from_stored(&head, &shards).unwrap();
        assert_eq!(read.entries.len(), 100_000);
        assert_eq!(read, record);
        // The same record is laid out the same way.
        assert_eq!(record.layout(), layout);
    }

    #[test]
    fn a_shard_that_is_not_what_its_head_says_is_an_error_not_a_smaller_record() {
        let layout = record(100_000).layout();
        let (head, mut shards) = stored(&layout);
        // Another shard's contents under this name: the digest differs.
        shards[0] = shards[1].clone();
        let error = InventoryRecord::from_stored(&head, &shards).unwrap_err();
        assert!(
            error.contains("shard-0 does not hold what the record says"),
            "{error}"
        );
        // A shard missing from what was read.
        let (head, mut shards) = stored(&layout);
        shards.pop();
        assert!(InventoryRecord::from_stored(&head, &shards).is_err());
        // A head whose shard line is damaged.
        let mut damaged = head.clone();
        damaged
            .data
            .insert(SHARDS_KEY.into(), "shard-0 abc 12\n".into());
        assert!(InventoryRecord::shards_of(&damaged).is_err());
    }

    #[test]
    fn lines_round_trip_and_a_bad_line_is_named() {
        let entry = |line| InventoryEntry::parse(line).unwrap();
        let record = InventoryRecord {
            entries: [
                (entry("v1 ConfigMap shop a"), Provenance::created()),
                (
                    entry("v1 ConfigMap shop b"),
                    Provenance::adopted(Some("1b4e-77".into())),
                ),
                (entry("v1 ConfigMap shop c"), Provenance::UNKNOWN),
            ]
            .into(),
            commit: Some("abc".into()),
        };
        let layout = record.layout();
        assert_eq!(
            layout.head.data[OBJECTS_KEY],
            "v1 ConfigMap shop a created\nv1 ConfigMap shop b adopted 1b4e-77\nv1 ConfigMap shop c\n"
        );
        assert_eq!(InventoryRecord::from_stored(&layout.head, &[]), Ok(record));
        let bad = BTreeMap::from([(OBJECTS_KEY.to_string(), "v1 ConfigMap\n".to_string())]);
        assert_eq!(
            InventoryRecord::from_config(&bad, &BTreeMap::new()),
            Err("unreadable line \"v1 ConfigMap\"".to_string())
        );
        let garbage = BTreeMap::from([(OBJECTS_GZIP_KEY.to_string(), vec![1, 2, 3])]);
        assert!(InventoryRecord::from_config(&BTreeMap::new(), &garbage).is_err());
    }

    #[test]
    fn only_shards_no_head_names_are_orphans_and_young_ones_are_left_to_their_writer() {
        let layout = record(100_000).layout();
        let (head, _) = stored(&layout);
        let named = InventoryRecord::shards_of(&head).unwrap();
        let replaced = vec![ShardRef {
            name: "old-0".into(),
            digest: "0".repeat(64),
            entries: 1,
        }];
        assert!(!is_orphan("shard-0", &named, &replaced, 100_000));
        assert!(is_orphan("old-0", &named, &replaced, 0));
        assert!(!is_orphan("someone-writing", &named, &replaced, 30));
        assert!(is_orphan(
            "someone-writing",
            &named,
            &replaced,
            ORPHAN_AGE_SECONDS
        ));
    }
}
