//! The few calls of the OCI distribution API an artifact needs: resolve a tag (HEAD
//! of the manifest), get a manifest and a blob (each checked against its digest),
//! and push blobs (monolithic upload) and a manifest. A registry that answers 401
//! is asked again with basic auth, or with the bearer token its challenge's realm
//! gives (anonymously, or for the credentials): ghcr.io, Docker Hub and the rest.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use sha2::{Digest as _, Sha256};

use super::artifact_manifest::{Descriptor, Manifest, OCI_MANIFEST, sha256_digest};
use super::oci_error::OciError;
use super::reference::{Reference, Target};
use super::registry_access::{Access, Credentials};

/// A manifest larger than this is refused (distribution's own limit is 4 MiB).
const MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
/// A layer larger than this is refused before it is downloaded: the unpacked
/// directory is bounded too ([`super::archive`]), and gzip of YAML is rarely worse
/// than 1:1.
pub(crate) const LAYER_BYTES: u64 = super::archive::UNPACKED_BYTES;
/// How long one request may take.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The manifest types asked for: an OCI manifest, or Docker's (some registries
/// convert).
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
/// What an image's tag may name: a manifest, or an index of one per platform (a
/// multi-platform image); asked for when a tag's digest or its image's config matters.
const ANY_MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json";
/// An image index: what the referrers API answers.
const INDEX_ACCEPT: &str = "application/vnd.oci.image.index.v1+json";
/// A page of a tag list larger than this is refused: 8 MiB is about 300,000 tags of
/// twenty characters, far past any page a registry sends.
pub const TAG_PAGE_BYTES: u64 = 8 * 1024 * 1024;

/// One page of a repository's tag list.
#[derive(Debug)]
pub struct TagsPage {
    pub tags: Vec<String>,
    /// The next page's address (its `Link` header), when there is one.
    pub next: Option<String>,
}

/// One repository on one registry, with the authorization it was granted.
#[derive(Debug)]
pub struct Registry {
    http: reqwest::Client,
    /// `https://host` (or `http://` when insecure).
    base: String,
    reference: Reference,
    /// How errors name what was asked: the artifact's reference, or `host/repository`
    /// for an image repository.
    shown: String,
    credentials: Option<Credentials>,
    /// The `Authorization` header that the last challenge earned.
    authorization: Mutex<Option<String>>,
}

impl Registry {
    pub fn new(reference: &Reference, access: &Access) -> Result<Registry, OciError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| OciError::Unreachable {
                reference: reference.to_string(),
                source,
            })?;
        let scheme = if access.insecure { "http" } else { "https" };
        Ok(Registry {
            http,
            base: format!("{scheme}://{}", reference.registry),
            reference: reference.clone(),
            shown: reference.to_string(),
            credentials: access.credentials.clone(),
            authorization: Mutex::new(None),
        })
    }

    /// An image repository (`registry` is `host[:port]`), not one tag of it: for
    /// listing its tags and asking about any of them.
    pub fn for_repository(
        registry: &str,
        repository: &str,
        access: &Access,
    ) -> Result<Registry, OciError> {
        let reference = Reference::parse(&format!(
            "{}{registry}/{repository}",
            super::reference::SCHEME
        ))?;
        let mut client = Registry::new(&reference, access)?;
        client.shown = reference.name();
        Ok(client)
    }

    /// How errors name this repository (or artifact).
    pub fn name(&self) -> &str {
        &self.shown
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.base, self.reference.repository)
    }

    /// The manifest's digest that the reference names: a pinned digest as it is, a
    /// tag by [`Registry::resolve_tag`].
    pub async fn resolve(&self) -> Result<String, OciError> {
        match &self.reference.target {
            Target::Digest(digest) => Ok(digest.clone()),
            Target::Tag(tag) => self.resolve_tag(tag).await,
        }
    }

    /// The digest of the manifest `tag` points at now: one HEAD request (a GET,
    /// hashed, when the registry sends no `Docker-Content-Digest`). An image index
    /// is named by its own digest.
    pub async fn resolve_tag(&self, tag: &str) -> Result<String, OciError> {
        self.check_tag(tag)?;
        let url = self.url(&format!("manifests/{tag}"));
        let missing_tag = |error| self.tag_not_found(error, tag);
        let response = self
            .manifest_request(Method::HEAD, &url, ANY_MANIFEST_ACCEPT)
            .await
            .map_err(missing_tag)?;
        if let Some(digest) = header_digest(response.headers()) {
            return Ok(digest);
        }
        let response = self
            .manifest_request(Method::GET, &url, ANY_MANIFEST_ACCEPT)
            .await
            .map_err(missing_tag)?;
        let bytes = self
            .read_bounded(response, "the manifest", MANIFEST_BYTES)
            .await?;
        Ok(sha256_digest(&bytes))
    }

    /// The manifest `tag` points at, or an image index, as bytes checked against the
    /// digest the registry names it by (when it names one).
    pub async fn manifest_of_tag(&self, tag: &str) -> Result<Vec<u8>, OciError> {
        self.check_tag(tag)?;
        let url = self.url(&format!("manifests/{tag}"));
        let response = self
            .manifest_request(Method::GET, &url, ANY_MANIFEST_ACCEPT)
            .await
            .map_err(|error| self.tag_not_found(error, tag))?;
        let named = header_digest(response.headers());
        let bytes = self
            .read_bounded(response, "the manifest", MANIFEST_BYTES)
            .await?;
        if let Some(named) = named {
            self.check_digest("the manifest", &named, &sha256_digest(&bytes))?;
        }
        Ok(bytes)
    }

    /// The manifest of `digest` (an image's, or an index's), as bytes checked against it.
    pub async fn manifest_bytes(&self, digest: &str) -> Result<Vec<u8>, OciError> {
        let url = self.url(&format!("manifests/{digest}"));
        let response = self
            .manifest_request(Method::GET, &url, ANY_MANIFEST_ACCEPT)
            .await?;
        let bytes = self
            .read_bounded(response, "the manifest", MANIFEST_BYTES)
            .await?;
        self.check_digest("the manifest", digest, &sha256_digest(&bytes))?;
        Ok(bytes)
    }

    /// The manifests that refer to `digest` (OCI 1.1's referrers: signatures,
    /// attestations), as an image index's JSON: the referrers API, or on a registry
    /// without it (a 404) the tag `sha256-<hex>` that clients keep in its place; an
    /// empty index when there is neither.
    pub async fn referrers(&self, digest: &str) -> Result<Vec<u8>, OciError> {
        let url = self.url(&format!("referrers/{digest}"));
        match self.manifest_request(Method::GET, &url, INDEX_ACCEPT).await {
            Ok(response) => {
                self.read_bounded(response, "the referrers", MANIFEST_BYTES)
                    .await
            }
            Err(OciError::NotFound { .. }) => {
                match self.manifest_of_tag(&digest.replacen(':', "-", 1)).await {
                    Err(OciError::NotFound { .. }) => Ok(br#"{"manifests": []}"#.to_vec()),
                    found => found,
                }
            }
            Err(error) => Err(error),
        }
    }

    /// A small blob (an image's config), checked against its digest; refused past
    /// the size of a manifest.
    pub async fn small_blob(&self, descriptor: &Descriptor) -> Result<Vec<u8>, OciError> {
        let what = format!("the blob {}", descriptor.digest);
        if descriptor.size > MANIFEST_BYTES {
            return Err(self.too_large(&what, MANIFEST_BYTES));
        }
        let url = self.url(&format!("blobs/{}", descriptor.digest));
        let response = self.send("a blob", |http| http.get(&url)).await?;
        let bytes = self.read_bounded(response, &what, MANIFEST_BYTES).await?;
        self.check_digest(&what, &descriptor.digest, &sha256_digest(&bytes))?;
        Ok(bytes)
    }

    /// One page of the repository's tags (`GET /v2/<repository>/tags/list?n=<n>`),
    /// or the page `next` (a previous page's `Link: <…>; rel="next"`) asked for `n`
    /// tags. The body is bounded by [`TAG_PAGE_BYTES`].
    pub async fn tags_page(&self, next: Option<&str>, n: usize) -> Result<TagsPage, OciError> {
        let mut url = match next {
            None => reqwest::Url::parse(&self.url("tags/list")),
            Some(link) => reqwest::Url::parse(&self.base).and_then(|base| base.join(link)),
        }
        .map_err(|e| self.malformed("the tag list's next page", e.to_string()))?;
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(key, _)| key != "n")
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("n", &n.to_string());
        let response = self
            .send("the tag list", |http| http.get(url.clone()))
            .await?;
        let next = next_link(response.headers());
        let bytes = self
            .read_bounded(response, "the tag list", TAG_PAGE_BYTES)
            .await?;
        #[derive(serde::Deserialize)]
        struct TagList {
            tags: Option<Vec<String>>,
        }
        let list: TagList = serde_json::from_slice(&bytes)
            .map_err(|e| self.malformed("the tag list", e.to_string()))?;
        Ok(TagsPage {
            tags: list.tags.unwrap_or_default(),
            next,
        })
    }

    /// A tag goes into a URL's path: only what the distribution spec allows.
    fn check_tag(&self, tag: &str) -> Result<(), OciError> {
        if super::reference::is_tag(tag) {
            return Ok(());
        }
        Err(self.malformed(
            &format!("the tag {tag:?}"),
            "a tag is 1 to 128 letters, digits, '_', '.' or '-' (not first)".into(),
        ))
    }

    /// A 404 for a tag names the tag: the repository may well exist.
    fn tag_not_found(&self, error: OciError, tag: &str) -> OciError {
        match error {
            // An artifact's reference names its tag already.
            OciError::NotFound { reference } if reference == self.reference.to_string() => {
                OciError::NotFound { reference }
            }
            OciError::NotFound { .. } => OciError::NotFound {
                reference: format!("{}:{tag}", self.shown),
            },
            other => other,
        }
    }

    async fn manifest_request(
        &self,
        method: Method,
        url: &str,
        accept: &'static str,
    ) -> Result<Response, OciError> {
        self.send("the manifest", |http| {
            http.request(method.clone(), url).header(ACCEPT, accept)
        })
        .await
    }

    /// The manifest of `digest`, checked against it.
    pub async fn manifest(&self, digest: &str) -> Result<Manifest, OciError> {
        let url = self.url(&format!("manifests/{digest}"));
        let response = self
            .manifest_request(Method::GET, &url, MANIFEST_ACCEPT)
            .await?;
        let bytes = self
            .read_bounded(response, "the manifest", MANIFEST_BYTES)
            .await?;
        self.check_digest("the manifest", digest, &sha256_digest(&bytes))?;
        serde_json::from_slice(&bytes).map_err(|e| OciError::NotFluxArtifact {
            reference: self.shown.clone(),
            why: format!("its manifest is not an OCI image manifest: {e}"),
        })
    }

    /// Downloads the blob `layer` names into a temporary file in `dir`, hashing it on
    /// the way; refused when it is larger than it says or than [`LAYER_BYTES`], or
    /// its digest differs.
    pub async fn blob_to_file(
        &self,
        layer: &Descriptor,
        dir: &Path,
    ) -> Result<tempfile::NamedTempFile, OciError> {
        let what = format!("the layer {}", layer.digest);
        if layer.size > LAYER_BYTES {
            return Err(self.too_large(&what, LAYER_BYTES));
        }
        let url = self.url(&format!("blobs/{}", layer.digest));
        let mut response = self.send("a layer", |http| http.get(&url)).await?;
        let cache_error = |source| OciError::Cache {
            path: dir.to_path_buf(),
            source,
        };
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(cache_error)?;
        let mut hasher = Sha256::new();
        let mut written = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(|e| self.unreachable(e))? {
            written += chunk.len() as u64;
            if written > layer.size {
                return Err(self.too_large(&what, layer.size));
            }
            hasher.update(&chunk);
            file.write_all(&chunk).map_err(cache_error)?;
        }
        let actual = format!("sha256:{:x}", hasher.finalize());
        self.check_digest(&what, &layer.digest, &actual)?;
        Ok(file)
    }

    /// Uploads `bytes` as the blob `descriptor` names, unless the registry has it.
    pub async fn push_blob(&self, descriptor: &Descriptor, bytes: Vec<u8>) -> Result<(), OciError> {
        let exists_url = self.url(&format!("blobs/{}", descriptor.digest));
        match self.send("a blob", |http| http.head(&exists_url)).await {
            Ok(_) => return Ok(()),
            Err(OciError::NotFound { .. }) => {}
            Err(other) => return Err(other),
        }
        let start_url = self.url("blobs/uploads/");
        let started = self
            .send("an upload", |http| {
                http.post(&start_url)
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .body(Vec::new())
            })
            .await?;
        let location = started
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| {
                self.status_error("an upload", started.status(), "no Location".into())
            })?;
        let mut upload = reqwest::Url::parse(&self.base)
            .and_then(|base| base.join(location))
            .map_err(|e| self.status_error("an upload", started.status(), e.to_string()))?;
        upload
            .query_pairs_mut()
            .append_pair("digest", &descriptor.digest);
        let body = bytes;
        self.send("a blob", |http| {
            http.request(Method::PUT, upload.clone())
                .header(CONTENT_TYPE, "application/octet-stream")
                .body(body.clone())
        })
        .await?;
        Ok(())
    }

    /// Puts `manifest` under the reference's tag; returns its digest.
    pub async fn push_manifest(&self, manifest: &Manifest) -> Result<String, OciError> {
        self.push_manifest_as(manifest, self.reference.target_text())
            .await
    }

    /// Puts `manifest` under `tag` of the repository; returns its digest.
    pub async fn push_manifest_as(
        &self,
        manifest: &Manifest,
        tag: &str,
    ) -> Result<String, OciError> {
        let body = serde_json::to_vec(manifest).map_err(|e| {
            self.status_error("the manifest", StatusCode::BAD_REQUEST, e.to_string())
        })?;
        let digest = sha256_digest(&body);
        let url = self.url(&format!("manifests/{tag}"));
        self.send("the manifest", |http| {
            http.put(&url)
                .header(CONTENT_TYPE, OCI_MANIFEST)
                .body(body.clone())
        })
        .await?;
        Ok(digest)
    }

    /// Deletes the manifest `digest` (and so every tag of it).
    pub async fn delete_manifest(&self, digest: &str) -> Result<(), OciError> {
        let url = self.url(&format!("manifests/{digest}"));
        self.send("the manifest", |http| http.delete(&url)).await?;
        Ok(())
    }

    /// Sends a request built by `build`; on 401, earns authorization from the
    /// challenge and sends it once more. A 404 is [`OciError::NotFound`], any other
    /// failure status [`OciError::Status`].
    async fn send(
        &self,
        what: &'static str,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response, OciError> {
        let mut response = self.send_once(&build).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            self.authorize(response.headers()).await?;
            response = self.send_once(&build).await?;
            if response.status() == StatusCode::UNAUTHORIZED {
                return Err(OciError::Unauthorized {
                    reference: self.shown.clone(),
                    status: response.status().as_u16(),
                });
            }
        }
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(OciError::NotFound {
                reference: self.shown.clone(),
            });
        }
        if status == StatusCode::FORBIDDEN {
            return Err(OciError::Unauthorized {
                reference: self.shown.clone(),
                status: status.as_u16(),
            });
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(self.status_error(what, status, body.chars().take(300).collect()));
        }
        Ok(response)
    }

    async fn send_once(
        &self,
        build: &impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response, OciError> {
        let mut request = build(&self.http);
        let authorization = self
            .authorization
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        request.send().await.map_err(|e| self.unreachable(e))
    }

    /// Answers a 401's challenge: basic auth with the credentials, or a bearer token
    /// from the challenge's realm (asked with the credentials, if any).
    async fn authorize(&self, headers: &HeaderMap) -> Result<(), OciError> {
        let challenge = headers
            .get(WWW_AUTHENTICATE)
            .and_then(|c| c.to_str().ok())
            .unwrap_or_default();
        let authorization = if let Some(params) = strip_scheme(challenge, "Bearer") {
            self.bearer_token(&challenge_params(params)).await?
        } else {
            let credentials =
                self.credentials
                    .as_ref()
                    .ok_or_else(|| OciError::CredentialsNeeded {
                        reference: self.shown.clone(),
                    })?;
            basic(credentials)
        };
        *self
            .authorization
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(authorization);
        Ok(())
    }

    async fn bearer_token(&self, params: &[(String, String)]) -> Result<String, OciError> {
        let param = |name: &str| {
            params
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        };
        let realm = param("realm").ok_or_else(|| {
            self.status_error(
                "a token",
                StatusCode::UNAUTHORIZED,
                "a challenge without realm".into(),
            )
        })?;
        let scope = param("scope").map_or_else(
            || format!("repository:{}:pull,push", self.reference.repository),
            str::to_string,
        );
        let mut query = vec![("scope", scope)];
        if let Some(service) = param("service") {
            query.push(("service", service.to_string()));
        }
        let mut request = self.http.get(realm).query(&query);
        if let Some(credentials) = &self.credentials {
            request = request.basic_auth(&credentials.username, Some(&credentials.password));
        }
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        if !response.status().is_success() {
            return Err(OciError::Unauthorized {
                reference: self.shown.clone(),
                status: response.status().as_u16(),
            });
        }
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: TokenAnswer = response.json().await.map_err(|e| self.unreachable(e))?;
        let token = answer.token.or(answer.access_token).ok_or_else(|| {
            self.status_error(
                "a token",
                StatusCode::UNAUTHORIZED,
                "an answer without token".into(),
            )
        })?;
        Ok(format!("Bearer {token}"))
    }

    async fn read_bounded(
        &self,
        mut response: Response,
        what: &str,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.unreachable(e))? {
            if (bytes.len() + chunk.len()) as u64 > limit {
                return Err(self.too_large(what, limit));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    fn check_digest(&self, what: &str, expected: &str, actual: &str) -> Result<(), OciError> {
        if expected == actual {
            return Ok(());
        }
        Err(OciError::WrongDigest {
            reference: self.shown.clone(),
            what: what.to_string(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        })
    }

    fn unreachable(&self, source: reqwest::Error) -> OciError {
        OciError::Unreachable {
            reference: self.shown.clone(),
            source,
        }
    }

    fn too_large(&self, what: &str, limit: u64) -> OciError {
        OciError::TooLarge {
            reference: self.shown.clone(),
            what: what.to_string(),
            limit,
        }
    }

    fn malformed(&self, what: &str, why: String) -> OciError {
        OciError::Malformed {
            reference: self.shown.clone(),
            what: what.to_string(),
            why,
        }
    }

    fn status_error(&self, what: &'static str, status: StatusCode, body: String) -> OciError {
        OciError::Status {
            reference: self.shown.clone(),
            what,
            status: status.as_u16(),
            body,
        }
    }
}

/// The `Docker-Content-Digest` a registry answers a manifest request with.
fn header_digest(headers: &HeaderMap) -> Option<String> {
    headers
        .get("docker-content-digest")
        .and_then(|d| d.to_str().ok())
        .filter(|d| super::reference::is_sha256_digest(d))
        .map(str::to_string)
}

/// The target of a `Link: <…>; rel="next"` header (distribution's pagination).
fn next_link(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|link| {
            let (target, params) = link.trim().split_once(';')?;
            let is_next = params.split(';').any(|param| {
                let param = param.replace(' ', "").to_ascii_lowercase();
                param == "rel=\"next\"" || param == "rel=next"
            });
            let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
            is_next.then(|| target.to_string())
        })
}

fn basic(credentials: &Credentials) -> String {
    use base64::Engine as _;
    let pair = format!("{}:{}", credentials.username, credentials.password);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// The parameters after `scheme` in a `WWW-Authenticate` challenge.
fn strip_scheme<'c>(challenge: &'c str, scheme: &str) -> Option<&'c str> {
    let (named, params) = challenge.trim().split_once(' ')?;
    named.eq_ignore_ascii_case(scheme).then_some(params)
}

/// `realm="…",service="…",scope="…"` as pairs (a quoted value may hold commas).
fn challenge_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.split_once('"') {
                Some((value, remaining)) => (value.to_string(), remaining),
                None => (quoted.to_string(), ""),
            },
            None => match after.split_once(',') {
                Some((value, remaining)) => (value.trim().to_string(), remaining),
                None => (after.trim().to_string(), ""),
            },
        };
        params.push((key, value));
        rest = remaining.trim_start_matches(',').trim();
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_gives_its_realm_service_and_scope() {
        let challenge = r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:org/app:pull,push""#;
        let params = challenge_params(strip_scheme(challenge, "Bearer").unwrap());
        assert_eq!(
            params,
            vec![
                ("realm".into(), "https://ghcr.io/token".into()),
                ("service".into(), "ghcr.io".into()),
                ("scope".into(), "repository:org/app:pull,push".into()),
            ]
        );
        assert_eq!(strip_scheme(r#"Basic realm="x""#, "Bearer"), None);
    }

    #[test]
    fn the_next_page_is_the_link_whose_rel_is_next() {
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::LINK,
            r#"</v2/shop/app/tags/list?n=2&last=b>; rel="next""#
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("/v2/shop/app/tags/list?n=2&last=b")
        );
        headers.insert(
            reqwest::header::LINK,
            r#"<https://x/first>; rel="prev", <https://x/second>; rel=next"#
                .parse()
                .unwrap(),
        );
        assert_eq!(next_link(&headers).as_deref(), Some("https://x/second"));
        headers.insert(
            reqwest::header::LINK,
            "<https://x/a>; rel=\"prev\"".parse().unwrap(),
        );
        assert_eq!(next_link(&headers), None);
    }
}
