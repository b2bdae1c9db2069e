//! Who may see and do what on the web page and the API: Kubernetes decides. A request
//! carries a bearer token (the `Authorization` header, or the session cookie the login
//! form sets); the daemon checks it with a TokenReview and asks a SubjectAccessReview
//! for each thing the request touches. No user store of tether's own.
//!
//! A page makes several requests, each asking the same questions: accepted tokens and
//! the daemon's decisions are remembered for [`REMEMBERED_FOR`] (what kube-apiserver's own webhook
//! authenticator and authorizer do), in bounded process-wide caches keyed by what
//! decides the answer (a token's SHA-256, never the token; the user and the check).
//! Tokens are never logged nor put in a message.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use k8s_openapi::api::authentication::v1::{
    SelfSubjectReview, TokenReview, TokenReviewSpec, UserInfo,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The cookie the login form sets: the bearer token itself, HttpOnly and SameSite=Strict.
pub const SESSION_COOKIE: &str = "tether_session";

/// How long an accepted token and a decision are remembered.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(10);

/// How many tokens and decisions each cache holds at most.
const CACHE_CAPACITY: usize = 1_000;

/// The longest token the login accepts (OIDC tokens with many groups run to a few KB).
const MAX_TOKEN_LENGTH: usize = 16 * 1024;

/// The user Kubernetes calls a request without credentials, and its group.
const ANONYMOUS_USER: &str = "system:anonymous";
const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// What `tether ui` calls its user when the server cannot say (SelfSubjectReview is
/// served from Kubernetes 1.28).
const LOCAL_USER: &str = "you (your kubeconfig's identity)";

/// The API group of the Source resource, whose verbs the page's actions are.
pub const SOURCES_GROUP: &str = "tether.dev";

/// How requests are authenticated and authorized.
#[derive(Clone)]
pub enum Access {
    /// In the cluster (`tether run`): bearer tokens checked by TokenReview, rights by
    /// SubjectAccessReview, both asked with the daemon's client.
    Kubernetes {
        client: Client,
        /// Requests without a token may view (never act); off by default.
        anonymous_read_only: bool,
    },
    /// `tether ui`: the person at the keyboard, as their kubeconfig says; rights by
    /// SelfSubjectAccessReview with their own client. Served on loopback only.
    Local { client: Client },
}

/// The person (or robot) behind a request.
#[derive(Clone, PartialEq, Eq)]
pub struct Viewer {
    /// The username Kubernetes gave (`system:serviceaccount:team:alice`, an OIDC email).
    pub user: String,
    pub groups: Vec<String>,
    /// No token: may only view, and only when anonymous viewing is on.
    pub anonymous: bool,
    /// What the TokenReview said besides: passed on to each SubjectAccessReview, as
    /// the API server does for the user's own requests.
    uid: Option<String>,
    extra: BTreeMap<String, Vec<String>>,
    /// The token the request carried (for the CSRF token's key); none for `Local` and
    /// anonymous requests.
    token: Option<String>,
}

/// Without the token: a viewer may be logged.
impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer")
            .field("user", &self.user)
            .field("groups", &self.groups)
            .field("anonymous", &self.anonymous)
            .field("uid", &self.uid)
            .field("extra", &self.extra)
            .finish_non_exhaustive()
    }
}

impl Viewer {
    fn anonymous() -> Self {
        Viewer {
            user: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
            anonymous: true,
            uid: None,
            extra: BTreeMap::new(),
            token: None,
        }
    }

    fn of(user: UserInfo, token: Option<String>) -> Self {
        Viewer {
            user: user.username.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            anonymous: false,
            uid: user.uid,
            extra: user.extra.unwrap_or_default(),
            token,
        }
    }
}

/// What a request wants to do, as a SubjectAccessReview asks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Check {
    /// `get`, or an action's verb (`scale`, `restart`, `rollback`, `label`, `lock`,
    /// `reconcile` on `sources`; `delete` on `pods`, `create` on `pods/exec`).
    pub verb: &'static str,
    /// API group: `tether.dev` for sources, `` for pods.
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub namespace: String,
    pub name: Option<String>,
}

impl Check {
    fn attributes(&self) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.into()),
            group: Some(self.group.into()),
            resource: Some(self.resource.into()),
            subresource: self.subresource.map(str::to_string),
            namespace: Some(self.namespace.clone()),
            name: self.name.clone(),
            ..ResourceAttributes::default()
        }
    }

    /// `sources "shop"`, `pods/exec "web-0"`: what the check is about, for messages.
    fn object(&self) -> String {
        let mut object = self.resource.to_string();
        if let Some(subresource) = self.subresource {
            object.push('/');
            object.push_str(subresource);
        }
        if let Some(name) = &self.name {
            object.push_str(&format!(" {name:?}"));
        }
        object
    }

    /// Reading: what anonymous viewing allows.
    fn reads(&self) -> bool {
        matches!(self.verb, "get" | "list" | "watch")
    }
}

/// Why a request was refused.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Denied {
    /// 401: no token (and anonymous viewing off), or a token Kubernetes did not accept.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: Kubernetes said no (its reason, when it gave one).
    #[error("{0}")]
    Forbidden(String),
    /// 403: an action without the CSRF token of the session.
    #[error("the request has no valid CSRF token (reload the page)")]
    Csrf,
    /// 503: the API server could not be asked.
    #[error("cannot ask the API server: {0}")]
    Unavailable(String),
}

impl Access {
    /// Who sent the request.
    pub async fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, Denied> {
        match self {
            Access::Kubernetes {
                client,
                anonymous_read_only,
            } => match presented_token(headers)? {
                Some(token) => reviewed(client, token).await,
                None if *anonymous_read_only => Ok(Viewer::anonymous()),
                None => Err(Denied::Unauthenticated(
                    "log in: send a bearer token (a ServiceAccount token or an OIDC token \
                     the API server accepts) in the Authorization header, or use the login form"
                        .into(),
                )),
            },
            Access::Local { client } => Ok(local_viewer(client).await),
        }
    }

    /// Whether `viewer` may do `check`.
    pub async fn may(&self, viewer: &Viewer, check: &Check) -> Result<(), Denied> {
        if viewer.anonymous {
            return if check.reads() {
                Ok(())
            } else {
                Err(Denied::Unauthenticated(format!(
                    "log in to {} {} in {}",
                    check.verb,
                    check.object(),
                    check.namespace
                )))
            };
        }
        let status = match self {
            Access::Kubernetes { client, .. } => {
                let key = DecisionKey {
                    user: viewer.user.clone(),
                    uid: viewer.uid.clone(),
                    groups: viewer.groups.clone(),
                    extra: viewer.extra.clone(),
                    check: check.clone(),
                };
                match DECISIONS.get(&key) {
                    Some(status) => status,
                    None => {
                        let status = subject_access_review(client, viewer, check).await?;
                        DECISIONS.put(key, status.clone());
                        status
                    }
                }
            }
            // `tether ui`'s source is the user's own flags, not a Source resource: the
            // verbs on it are theirs (their Git credentials make the commits); what
            // touches the cluster (pods) is asked.
            Access::Local { .. } if check.group == SOURCES_GROUP => return Ok(()),
            // Not remembered: the answer depends on the client's identity, which a
            // viewer of `tether ui` may not name (servers before 1.28), and one person
            // on loopback asks little.
            Access::Local { client } => self_subject_access_review(client, check).await?,
        };
        if status.allowed {
            return Ok(());
        }
        let mut message = format!(
            "{} may not {} {} in {}",
            viewer.user,
            check.verb,
            check.object(),
            check.namespace
        );
        if let Some(reason) = status.reason.filter(|r| !r.is_empty()) {
            message.push_str(&format!(" ({reason})"));
        }
        Err(Denied::Forbidden(message))
    }

    /// The CSRF token the pages put in their forms (and `/api/v1/session` returns) for
    /// `viewer`'s session: an HMAC keyed by the session's token, so that any replica
    /// can check it and a page of another site cannot make it (it cannot read the
    /// HttpOnly cookie). Without a token (`tether ui`), keyed by a random key of this
    /// process, over the user's name.
    pub fn csrf_token(&self, viewer: &Viewer) -> String {
        let mac = match &viewer.token {
            Some(token) => hmac_sha256(token.as_bytes(), b"tether-csrf"),
            None => hmac_sha256(&*PROCESS_KEY, viewer.user.as_bytes()),
        };
        mac.map(|mac| hex(&mac)).unwrap_or_default()
    }

    /// Whether the request's CSRF token (the `X-CSRF-Token` header or the form's
    /// `csrf` field) is the session's.
    pub fn check_csrf(&self, viewer: &Viewer, presented: Option<&str>) -> Result<(), Denied> {
        let expected = self.csrf_token(viewer);
        match presented {
            Some(presented)
                if !expected.is_empty()
                    && bool::from(presented.as_bytes().ct_eq(expected.as_bytes())) =>
            {
                Ok(())
            }
            _ => Err(Denied::Csrf),
        }
    }
}

/// The token of `Authorization: Bearer T`, else of the session cookie.
fn presented_token(headers: &HeaderMap) -> Result<Option<&str>, Denied> {
    if let Some(authorization) = headers.get(header::AUTHORIZATION) {
        let bearer = authorization
            .to_str()
            .ok()
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty());
        return match bearer {
            Some(token) => Ok(Some(token)),
            None => Err(Denied::Unauthenticated(
                "the Authorization header is not `Bearer TOKEN`".into(),
            )),
        };
    }
    Ok(cookie(headers, SESSION_COOKIE))
}

/// The value of the request's cookie `name`, when it has one that is not empty.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().split_once('='))
        .find(|(found, value)| *found == name && !value.is_empty())
        .map(|(_, value)| value)
}

/// The user of `token`, as a TokenReview says (remembered for a while when accepted).
async fn reviewed(client: &Client, token: &str) -> Result<Viewer, Denied> {
    let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    if let Some(user) = TOKENS.get(&key) {
        return Ok(Viewer::of(user, Some(token.to_string())));
    }
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let review = ask(client, &review, "TokenReview").await?;
    let status = review.status.unwrap_or_default();
    match status.user {
        Some(user) if status.authenticated == Some(true) => {
            TOKENS.put(key, user.clone());
            Ok(Viewer::of(user, Some(token.to_string())))
        }
        _ => Err(Denied::Unauthenticated(match status.error {
            Some(error) if !error.is_empty() => {
                format!("the API server did not accept the token: {error}")
            }
            _ => "the API server did not accept the token".into(),
        })),
    }
}

/// `tether ui`'s user: whom the API server says the kubeconfig is (a SelfSubjectReview,
/// from Kubernetes 1.28), else a description.
async fn local_viewer(client: &Client) -> Viewer {
    let user = match ask(client, &SelfSubjectReview::default(), "SelfSubjectReview").await {
        Ok(review) => review.status.and_then(|s| s.user_info),
        Err(_) => None,
    };
    let user = user
        .filter(|u| u.username.as_deref().is_some_and(|name| !name.is_empty()))
        .unwrap_or_else(|| UserInfo {
            username: Some(LOCAL_USER.into()),
            ..UserInfo::default()
        });
    Viewer::of(user, None)
}

async fn subject_access_review(
    client: &Client,
    viewer: &Viewer,
    check: &Check,
) -> Result<SubjectAccessReviewStatus, Denied> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(viewer.user.clone()),
            groups: Some(viewer.groups.clone()),
            uid: viewer.uid.clone(),
            extra: (!viewer.extra.is_empty()).then(|| viewer.extra.clone()),
            resource_attributes: Some(check.attributes()),
            non_resource_attributes: None,
        },
        ..SubjectAccessReview::default()
    };
    let review = ask(client, &review, "SubjectAccessReview").await?;
    Ok(review.status.unwrap_or_default())
}

async fn self_subject_access_review(
    client: &Client,
    check: &Check,
) -> Result<SubjectAccessReviewStatus, Denied> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(check.attributes()),
            non_resource_attributes: None,
        },
        ..SelfSubjectAccessReview::default()
    };
    let review = ask(client, &review, "SelfSubjectAccessReview").await?;
    Ok(review.status.unwrap_or_default())
}

/// Creates a review (the API server answers in the created object's status).
async fn ask<R>(client: &Client, review: &R, what: &str) -> Result<R, Denied>
where
    R: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    Api::<R>::all(client.clone())
        .create(&PostParams::default(), review)
        .await
        .map_err(|error| {
            Denied::Unavailable(format!("{what}: {}", tether_core::error_chain(&error)))
        })
}

/// Whether `token` can be a session cookie's value (RFC 6265's cookie-octets: no
/// space, quote, comma, semicolon or backslash) and is of a token's length. The login
/// refuses others.
pub fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= MAX_TOKEN_LENGTH
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'))
}

/// The `Set-Cookie` value that starts a session with `token` (the login form).
pub fn session_cookie(token: &str) -> String {
    format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that ends the session.
pub fn end_session_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// None only if HMAC refused the key, which it does for no length: then no CSRF token
/// is made, and none is accepted.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Option<[u8; 32]> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(message);
    Some(mac.finalize().into_bytes().into())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The CSRF key of token-less sessions: random per process (a restarted `tether ui`
/// asks for a reload). Should the operating system's generator fail, std's hasher
/// keys (themselves drawn from it at first use, with its own fallbacks) stand in.
static PROCESS_KEY: LazyLock<[u8; 32]> = LazyLock::new(|| {
    let mut key = [0u8; 32];
    if getrandom::fill(&mut key).is_err() {
        use std::hash::{BuildHasher, Hasher};
        let keys = std::collections::hash_map::RandomState::new();
        for (index, chunk) in key.chunks_mut(8).enumerate() {
            let mut hasher = keys.build_hasher();
            hasher.write_usize(index);
            chunk.copy_from_slice(&hasher.finish().to_le_bytes());
        }
    }
    key
});

/// What decides a SubjectAccessReview's answer.
#[derive(Clone, PartialEq, Eq, Hash)]
struct DecisionKey {
    user: String,
    uid: Option<String>,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
    check: Check,
}

/// Accepted tokens (by SHA-256) and their users.
static TOKENS: LazyLock<Remembered<[u8; 32], UserInfo>> = LazyLock::new(Remembered::default);
/// Decisions, allowed or not.
static DECISIONS: LazyLock<Remembered<DecisionKey, SubjectAccessReviewStatus>> =
    LazyLock::new(Remembered::default);

/// Answers remembered for [`REMEMBERED_FOR`], at most [`CACHE_CAPACITY`] of them: when
/// full, the expired go, then the oldest.
struct Remembered<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K, V> Default for Remembered<K, V> {
    fn default() -> Self {
        Remembered {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Remembered<K, V> {
    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < REMEMBERED_FOR)
            .map(|(_, value)| value.clone())
    }

    fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_CAPACITY {
            entries.retain(|_, (at, _)| at.elapsed() < REMEMBERED_FOR);
        }
        if entries.len() >= CACHE_CAPACITY {
            let oldest = entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (Instant::now(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(name.clone(), value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_bearer_header_comes_before_the_cookie() {
        let both = headers(&[
            (header::AUTHORIZATION, "Bearer abc.def"),
            (header::COOKIE, "tether_session=cookie"),
        ]);
        assert_eq!(presented_token(&both).unwrap(), Some("abc.def"));
        let cookie = headers(&[(header::COOKIE, "theme=dark; tether_session=xyz; other=1")]);
        assert_eq!(presented_token(&cookie).unwrap(), Some("xyz"));
        let ended = headers(&[(header::COOKIE, "tether_session=")]);
        assert_eq!(presented_token(&ended).unwrap(), None);
        let basic = headers(&[(header::AUTHORIZATION, "Basic dXNlcjpwdw==")]);
        assert!(matches!(
            presented_token(&basic),
            Err(Denied::Unauthenticated(_))
        ));
    }

    #[test]
    fn tokens_outside_the_cookie_grammar_are_refused() {
        assert!(valid_token("eyJhbGciOi.eyJpc3Mi-_.sig"));
        for bad in ["", "a b", "a;b", "a,b", "a\"b", "a\\b", "é", "a\nb"] {
            assert!(!valid_token(bad), "{bad:?}");
        }
        assert!(!valid_token(&"a".repeat(MAX_TOKEN_LENGTH + 1)));
    }

    #[test]
    fn the_debug_form_of_a_viewer_holds_no_token() {
        let viewer = Viewer::of(
            UserInfo {
                username: Some("alice".into()),
                ..UserInfo::default()
            },
            Some("secret-token".into()),
        );
        let text = format!("{viewer:?}");
        assert!(
            text.contains("alice") && !text.contains("secret-token"),
            "{text}"
        );
    }

    #[test]
    fn the_cache_forgets_the_oldest_when_full() {
        let cache: Remembered<usize, usize> = Remembered::default();
        for i in 0..=CACHE_CAPACITY {
            cache.put(i, i);
        }
        assert_eq!(cache.entries.lock().unwrap().len(), CACHE_CAPACITY);
        assert_eq!(cache.get(&0), None);
        assert_eq!(cache.get(&CACHE_CAPACITY), Some(CACHE_CAPACITY));
    }
}
