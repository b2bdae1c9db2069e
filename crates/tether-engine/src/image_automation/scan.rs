//! An image repository as image policies read it: its tags, page by page and handed
//! on as they come (nothing is kept here), and, only for the policies that ask, a
//! tag's digest (one HEAD request) or the time its image was created (its manifest
//! and config).

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::oci::{Descriptor, OciError, Registry};

/// How many tags one page asks for. A registry may send fewer (many cap a page at
/// 100 or 1,000) and say where the rest is; one that ignores `n` sends all at once.
pub const PAGE_SIZE: usize = 1000;

/// What one listing of a repository's tags saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The tags handed on.
    pub listed: usize,
    /// The repository has more tags than the cap: the caller chooses nothing and warns.
    pub truncated: bool,
    /// The requests made (the pages of the one list).
    pub calls: u32,
}

/// Lists `repository`'s tags page by page ([`PAGE_SIZE`] a page), handing each to
/// `each`, and stops after `max_tags` (then `truncated`).
pub async fn list_tags(
    registry: &Registry,
    max_tags: usize,
    each: impl FnMut(&str),
) -> Result<Listing, OciError> {
    list_tags_in_pages(registry, PAGE_SIZE, max_tags, each).await
}

/// [`list_tags`] with pages of `page_size` tags.
pub async fn list_tags_in_pages(
    registry: &Registry,
    page_size: usize,
    max_tags: usize,
    mut each: impl FnMut(&str),
) -> Result<Listing, OciError> {
    let mut listing = Listing {
        listed: 0,
        truncated: false,
        calls: 0,
    };
    let mut next: Option<String> = None;
    loop {
        // One tag past the cap is asked for, so that a list of exactly `max_tags`
        // is not taken for a longer one.
        let wanted = page_size
            .min((max_tags - listing.listed).saturating_add(1))
            .max(1);
        let page = registry.tags_page(next.as_deref(), wanted).await?;
        listing.calls += 1;
        for tag in &page.tags {
            if listing.listed == max_tags {
                listing.truncated = true;
                return Ok(listing);
            }
            each(tag);
            listing.listed += 1;
        }
        match page.next {
            // An empty page that points further would be followed forever.
            Some(link) if !page.tags.is_empty() => next = Some(link),
            _ => return Ok(listing),
        }
    }
}

/// The digest `tag` points at now: one HEAD request, no manifest fetched.
pub async fn digest_of(registry: &Registry, tag: &str) -> Result<String, OciError> {
    registry.resolve_tag(tag).await
}

/// When `tag`'s image was created: its config's `created`, read through its manifest
/// (of a multi-platform image, the first platform's). `None` when the config does not
/// say.
pub async fn created_at(registry: &Registry, tag: &str) -> Result<Option<DateTime<Utc>>, OciError> {
    let mut manifest: ImageManifest = parse(
        registry,
        "the manifest",
        &registry.manifest_of_tag(tag).await?,
    )?;
    if let Some(first) = manifest.manifests.first() {
        let bytes = registry.manifest_bytes(&first.digest).await?;
        manifest = parse(registry, "the first platform's manifest", &bytes)?;
    }
    let config = manifest.config.ok_or_else(|| OciError::Malformed {
        reference: format!("{}:{tag}", registry.name()),
        what: "the manifest".into(),
        why: "it names neither a config nor platform manifests".into(),
    })?;
    let config: ImageConfig = parse(
        registry,
        "the image's config",
        &registry.small_blob(&config).await?,
    )?;
    config
        .created
        .map(|created| {
            DateTime::parse_from_rfc3339(&created)
                .map(|time| time.with_timezone(&Utc))
                .map_err(|e| OciError::Malformed {
                    reference: format!("{}:{tag}", registry.name()),
                    what: "the image's config".into(),
                    why: format!("its created time {created:?} is not RFC 3339: {e}"),
                })
        })
        .transpose()
}

/// An image manifest or an image index, as much as [`created_at`] reads.
#[derive(Deserialize)]
struct ImageManifest {
    config: Option<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct ImageConfig {
    created: Option<String>,
}

fn parse<'a, T: Deserialize<'a>>(
    registry: &Registry,
    what: &str,
    bytes: &'a [u8],
) -> Result<T, OciError> {
    serde_json::from_slice(bytes).map_err(|e| OciError::Malformed {
        reference: registry.name().to_string(),
        what: what.to_string(),
        why: format!("not the JSON expected: {e}"),
    })
}
