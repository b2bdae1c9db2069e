//! A fake GitHub or GitLab API for contract tests (feature `githost`): an HTTPS server
//! on loopback that keeps the few things tether writes (commit statuses, pull-request
//! comments), records every request, and checks each one against the host's official
//! description — GitHub's OpenAPI document (npm `@octokit/openapi`), GitLab's
//! endpoints as its documentation states them (`tests/contracts/gitlab.json`). A
//! request the description does not allow is a violation; a test asserts there are
//! none, so a green test means the real host would have taken the same requests.
//!
//! Webhook payloads are checked the same way against `@octokit/openapi-webhooks`
//! ([`validate_webhook`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use jsonschema::{Draft, Validator};
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Which host the server plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitHost {
    GitHub,
    GitLab,
}

impl GitHost {
    /// The API's path prefix: GitHub Enterprise's `/api/v3`, GitLab's `/api/v4`.
    fn prefix(self) -> &'static str {
        match self {
            GitHost::GitHub => "/api/v3",
            GitHost::GitLab => "/api/v4",
        }
    }

    fn description(self) -> &'static Description {
        match self {
            GitHost::GitHub => Description::github(),
            GitHost::GitLab => Description::gitlab(),
        }
    }
}

/// One request as the server saw it, and what it answered.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// The path as sent (percent-encoding kept), with the API prefix.
    pub path: String,
    /// The query's pairs, decoded, in order.
    pub query: Vec<(String, String)>,
    /// Header names lower-case.
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
    pub status: u16,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A commit status the host keeps. GitLab's `name` is the context, its `failed` the
/// state as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStatus {
    pub state: String,
    pub context: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
}

/// Whether the host takes requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    Up,
    /// Each request is answered 503 (and recorded).
    Unavailable,
    /// Each new connection is closed before TLS, each open one at its next request:
    /// nothing is answered or recorded; counted in
    /// [`GitHostServer::refused_connections`].
    Refusing,
}

#[derive(Default)]
struct HostState {
    availability: Option<Availability>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
    refused_connections: usize,
    statuses: BTreeMap<String, Vec<HostStatus>>,
    /// By pull-request number: (id, body), oldest first.
    comments: BTreeMap<u64, Vec<(u64, String)>>,
    last_id: u64,
}

impl HostState {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }
}

/// The fake host. Dropping it stops the server.
pub struct GitHostServer {
    host: GitHost,
    address: SocketAddr,
    ca_pem: String,
    state: Arc<Mutex<HostState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GitHostServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GitHostServer {
    /// Starts serving on 127.0.0.1 (a free port) with a certificate made now, signed by
    /// a CA of its own ([`Self::ca_pem`]); requests must carry `token`. The host's
    /// description is loaded first, so a missing one fails here, loudly.
    pub async fn start(host: GitHost, token: &str) -> GitHostServer {
        host.description();
        let (ca_pem, acceptor) = tls_acceptor();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("the listener's address");
        let state = Arc::new(Mutex::new(HostState::default()));
        let context = Arc::new(Context {
            host,
            token: token.to_string(),
            origin: format!("https://{address}"),
            state: state.clone(),
        });
        let task = tokio::spawn(accept_loop(listener, acceptor, context));
        GitHostServer {
            host,
            address,
            ca_pem,
            state,
            task,
        }
    }

    /// `https://127.0.0.1:PORT/api/v3` (GitHub) or `…/api/v4` (GitLab).
    pub fn api_url(&self) -> String {
        format!("https://{}{}", self.address, self.host.prefix())
    }

    /// The CA that signed the server's certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Every request (or answer) the description does not allow.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    pub fn set_availability(&self, availability: Availability) {
        self.lock().availability = Some(availability);
    }

    /// Connections (and requests on open ones) closed unanswered while
    /// [`Availability::Refusing`].
    pub fn refused_connections(&self) -> usize {
        self.lock().refused_connections
    }

    /// The statuses of `commit`, oldest first.
    pub fn statuses(&self, commit: &str) -> Vec<HostStatus> {
        self.lock()
            .statuses
            .get(commit)
            .cloned()
            .unwrap_or_default()
    }

    /// The comments on pull request `number` as (id, body), oldest first.
    pub fn comments(&self, number: u64) -> Vec<(u64, String)> {
        self.lock()
            .comments
            .get(&number)
            .cloned()
            .unwrap_or_default()
    }

    /// Comments others wrote before the test, not recorded as requests.
    pub fn seed_comments(&self, number: u64, bodies: impl IntoIterator<Item = String>) {
        let mut state = self.lock();
        for body in bodies {
            let id = state.next_id();
            state.comments.entry(number).or_default().push((id, body));
        }
    }

    fn lock(&self) -> MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Context {
    host: GitHost,
    token: String,
    origin: String,
    state: Arc<Mutex<HostState>>,
}

impl Context {
    fn lock(&self) -> MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn tls_acceptor() -> (String, TlsAcceptor) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tether test Git host CA");
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("the CA");
    let leaf_params = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("server params");
    let leaf_key = rcgen::KeyPair::generate().expect("a server key");
    let leaf = leaf_params
        .signed_by(&leaf_key, &ca)
        .expect("the server certificate");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .expect("the server certificate and key");
    (ca.pem(), TlsAcceptor::from(Arc::new(config)))
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, context: Arc<Context>) {
    while let Ok((stream, _)) = listener.accept().await {
        if context.lock().availability == Some(Availability::Refusing) {
            context.lock().refused_connections += 1;
            drop(stream);
            continue;
        }
        let (acceptor, context) = (acceptor.clone(), context.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request| {
                let context = context.clone();
                async move {
                    // A host that went down drops the connections it had too.
                    if context.lock().availability == Some(Availability::Refusing) {
                        context.lock().refused_connections += 1;
                        return Err(std::io::Error::other("the host is down"));
                    }
                    Ok(answer(&context, request).await)
                }
            });
            // A client that goes away mid-request is not the server's concern.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// What a handler answers.
struct Reply {
    status: u16,
    body: Value,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn new(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body,
            headers: Vec::new(),
        }
    }

    fn message(status: u16, message: &str) -> Reply {
        Reply::new(status, json!({"message": message}))
    }
}

async fn answer(context: &Context, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().as_str().to_string();
    let path = request.uri().path().to_string();
    let query = parse_query(request.uri().query().unwrap_or_default());
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let bytes = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let mut violations = Vec::new();
    let body = match bytes.is_empty() {
        true => None,
        false => match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => Some(value),
            Err(e) => {
                violations.push(format!("{method} {path}: the body is not JSON: {e}"));
                None
            }
        },
    };
    let mut recorded = Recorded {
        method,
        path,
        query,
        headers,
        body,
        status: 0,
    };
    let reply = reply(context, &recorded, &mut violations);
    recorded.status = reply.status;
    let mut state = context.lock();
    state.violations.extend(violations);
    state.requests.push(recorded);
    drop(state);
    let mut response = Response::builder()
        .status(reply.status)
        .header("content-type", "application/json");
    for (name, value) in &reply.headers {
        response = response.header(name, value);
    }
    response
        .body(Full::new(Bytes::from(reply.body.to_string())))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn reply(context: &Context, request: &Recorded, violations: &mut Vec<String>) -> Reply {
    if context.lock().availability == Some(Availability::Unavailable) {
        return Reply::message(503, "Service Unavailable");
    }
    if !authorized(context, request) {
        return Reply::message(401, "Bad credentials");
    }
    let label = format!("{} {}", request.method, request.path);
    let Some(relative) = request.path.strip_prefix(context.host.prefix()) else {
        violations.push(format!("{label}: not under {}", context.host.prefix()));
        return Reply::message(404, "Not Found");
    };
    let description = context.host.description();
    let checked = description.check_request(
        &request.method,
        relative,
        &request.query,
        request.body.as_ref(),
    );
    let found = checked.violations.is_empty();
    violations.extend(
        checked
            .violations
            .into_iter()
            .map(|v| format!("{label}: {v}")),
    );
    let Some(operation) = checked.operation else {
        return Reply::message(404, "Not Found");
    };
    if !found {
        return Reply::message(422, "Validation Failed");
    }
    let reply = {
        let mut state = context.lock();
        let call = Call {
            operation: &operation,
            request,
            origin: &context.origin,
        };
        match context.host {
            GitHost::GitHub => github(&call, &mut state),
            GitHost::GitLab => gitlab(&call, &mut state),
        }
    };
    violations.extend(
        description
            .check_answer(&operation, reply.status, &reply.body)
            .into_iter()
            .map(|v| format!("{label}: the fake answered {}: {v}", reply.status)),
    );
    reply
}

fn authorized(context: &Context, request: &Recorded) -> bool {
    let bearer = request.header("authorization").and_then(|v| {
        v.strip_prefix("Bearer ").or_else(|| match context.host {
            GitHost::GitHub => v.strip_prefix("token "),
            GitHost::GitLab => None,
        })
    });
    let given = match context.host {
        GitHost::GitHub => bearer,
        GitHost::GitLab => request.header("private-token").or(bearer),
    };
    given == Some(context.token.as_str())
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// A request the description allows, as a handler sees it.
struct Call<'a> {
    operation: &'a Operation,
    request: &'a Recorded,
    origin: &'a str,
}

impl Call<'_> {
    fn param(&self, name: &str) -> &str {
        self.operation.params.get(name).map_or("", String::as_str)
    }

    fn number(&self, name: &str) -> u64 {
        self.param(name).parse().unwrap_or_default()
    }

    fn field(&self, name: &str) -> Option<String> {
        self.request
            .body
            .as_ref()
            .and_then(|b| b.get(name))
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn query(&self, name: &str) -> Option<u64> {
        self.request
            .query
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.parse().ok())
    }

    /// The page asked for (`page`, `per_page` up to 100) of `items`, with GitHub's
    /// and GitLab's `Link` header when there are more.
    fn page(&self, items: &[Value], default_per_page: u64) -> Reply {
        let per_page = self
            .query("per_page")
            .unwrap_or(default_per_page)
            .clamp(1, 100);
        let page = self.query("page").unwrap_or(1).max(1);
        let pages = (items.len() as u64).div_ceil(per_page).max(1);
        let start = usize::try_from((page - 1) * per_page).unwrap_or(usize::MAX);
        let chunk: Vec<Value> = items
            .iter()
            .skip(start)
            .take(per_page as usize)
            .cloned()
            .collect();
        let mut reply = Reply::new(200, Value::Array(chunk));
        let link = |p: u64, rel: &str| {
            format!(
                "<{}{}?per_page={per_page}&page={p}>; rel=\"{rel}\"",
                self.origin, self.request.path
            )
        };
        let mut links = Vec::new();
        if page < pages {
            links.push(link(page + 1, "next"));
            reply
                .headers
                .push(("x-next-page".into(), (page + 1).to_string()));
        }
        links.push(link(1, "first"));
        links.push(link(pages, "last"));
        reply.headers.push(("link".into(), links.join(", ")));
        reply
            .headers
            .push(("x-total".into(), items.len().to_string()));
        reply
    }
}

const TIME: &str = "2026-01-01T00:00:00Z";

fn github(call: &Call, state: &mut HostState) -> Reply {
    let repository = format!("{}/{}", call.param("owner"), call.param("repo"));
    let api = format!("{}/api/v3/repos/{repository}", call.origin);
    let html = format!("{}/{repository}", call.origin);
    let comment = |id: u64, number: u64, body: &str| {
        json!({
            "id": id, "node_id": format!("IC_{id}"),
            "url": format!("{api}/issues/comments/{id}"),
            "html_url": format!("{html}/pull/{number}#issuecomment-{id}"),
            "issue_url": format!("{api}/issues/{number}"),
            "body": body, "user": null, "author_association": "NONE",
            "created_at": TIME, "updated_at": TIME,
        })
    };
    match (
        call.request.method.as_str(),
        call.operation.template.as_str(),
    ) {
        ("POST", "/repos/{owner}/{repo}/statuses/{sha}") => {
            let (id, sha, status) = keep_status(call, state, "context");
            Reply::new(
                201,
                json!({
                    "url": format!("{api}/statuses/{sha}"), "avatar_url": null,
                    "id": id, "node_id": format!("SC_{id}"), "state": status.state,
                    "description": status.description, "target_url": status.target_url,
                    "context": status.context, "created_at": TIME, "updated_at": TIME,
                    "creator": null,
                }),
            )
        }
        ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments") => {
            list_comments(call, state, "issue_number", 30, comment)
        }
        ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments") => {
            let (id, number, body) = add_comment(call, state, "issue_number");
            Reply::new(201, comment(id, number, &body))
        }
        ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}") => {
            edit_comment(call, state, "comment_id", comment)
        }
        // As github.com answers a personal access token: check runs need a GitHub App.
        ("POST", "/repos/{owner}/{repo}/check-runs") => Reply::new(
            403,
            json!({
                "message": "Resource not accessible by personal access token",
                "documentation_url": "https://docs.github.com/rest/checks/runs#create-a-check-run",
                "status": "403",
            }),
        ),
        _ => Reply::message(501, "not kept by the fake host"),
    }
}

fn gitlab(call: &Call, state: &mut HostState) -> Reply {
    let author = json!({"id": 1, "username": "tether", "name": "tether", "state": "active"});
    let note = |id: u64, iid: u64, body: &str| {
        json!({
            "id": id, "type": null, "body": body, "attachment": null, "author": author,
            "created_at": TIME, "updated_at": TIME, "system": false,
            "noteable_id": iid, "noteable_type": "MergeRequest", "noteable_iid": iid,
            "resolvable": false, "confidential": false, "internal": false,
        })
    };
    match (
        call.request.method.as_str(),
        call.operation.template.as_str(),
    ) {
        ("POST", "/projects/{id}/statuses/{sha}") => {
            let (id, sha, status) = keep_status(call, state, "name");
            Reply::new(
                201,
                json!({
                    "id": id, "sha": sha, "ref": null, "status": status.state,
                    "name": status.context, "target_url": status.target_url,
                    "description": status.description, "created_at": TIME,
                    "started_at": null, "finished_at": null, "allow_failure": false,
                    "coverage": null, "author": author,
                }),
            )
        }
        ("GET", "/projects/{id}/merge_requests/{merge_request_iid}/notes") => {
            list_comments(call, state, "merge_request_iid", 20, note)
        }
        ("POST", "/projects/{id}/merge_requests/{merge_request_iid}/notes") => {
            let (id, iid, body) = add_comment(call, state, "merge_request_iid");
            Reply::new(201, note(id, iid, &body))
        }
        ("PUT", "/projects/{id}/merge_requests/{merge_request_iid}/notes/{note_id}") => {
            edit_comment(call, state, "note_id", note)
        }
        _ => Reply::message(501, "not kept by the fake host"),
    }
}

/// Keeps the status a request sets (GitLab names the context `name`): its id, commit
/// and what it said.
fn keep_status(
    call: &Call,
    state: &mut HostState,
    context_field: &str,
) -> (u64, String, HostStatus) {
    let status = HostStatus {
        state: call.field("state").unwrap_or_default(),
        context: call
            .field(context_field)
            .unwrap_or_else(|| "default".into()),
        description: call.field("description"),
        target_url: call.field("target_url"),
    };
    let id = state.next_id();
    let sha = call.param("sha").to_string();
    state
        .statuses
        .entry(sha.clone())
        .or_default()
        .push(status.clone());
    (id, sha, status)
}

/// Adds the comment a request posts on the pull request its `number_param` names:
/// (id, number, body).
fn add_comment(call: &Call, state: &mut HostState, number_param: &str) -> (u64, u64, String) {
    let number = call.number(number_param);
    let body = call.field("body").unwrap_or_default();
    let id = state.next_id();
    state
        .comments
        .entry(number)
        .or_default()
        .push((id, body.clone()));
    (id, number, body)
}

/// The page asked for of the comments on the pull request `number_param` names, each
/// as the host shows it (`render(id, number, body)`).
fn list_comments(
    call: &Call,
    state: &HostState,
    number_param: &str,
    default_per_page: u64,
    render: impl Fn(u64, u64, &str) -> Value,
) -> Reply {
    let number = call.number(number_param);
    let all: Vec<Value> = state
        .comments
        .get(&number)
        .into_iter()
        .flatten()
        .map(|(id, body)| render(*id, number, body))
        .collect();
    call.page(&all, default_per_page)
}

/// Replaces the body of the comment the request's `id_param` names; answers it as
/// the host shows it (`render(id, number, body)`), or 404.
fn edit_comment(
    call: &Call,
    state: &mut HostState,
    id_param: &str,
    render: impl Fn(u64, u64, &str) -> Value,
) -> Reply {
    let id = call.number(id_param);
    let body = call.field("body").unwrap_or_default();
    let number = state.comments.iter_mut().find_map(|(number, comments)| {
        let comment = comments.iter_mut().find(|(c, _)| *c == id)?;
        comment.1.clone_from(&body);
        Some(*number)
    });
    match number {
        Some(number) => Reply::new(200, render(id, number, &body)),
        None => Reply::message(404, "Not Found"),
    }
}

/// An operation of a description a request matched.
#[derive(Clone, Debug)]
struct Operation {
    /// The path template, as the description spells it.
    template: String,
    method: String,
    /// Path parameters, decoded.
    params: BTreeMap<String, String>,
}

struct Checked {
    operation: Option<Operation>,
    violations: Vec<String>,
}

/// An API description (OpenAPI 3.0 or 3.1) and the validators made from it.
struct Description {
    document: Value,
    draft: Draft,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

impl Description {
    /// GitHub's REST API (npm `@octokit/openapi`), loaded once per process.
    fn github() -> &'static Description {
        static GITHUB: OnceLock<Description> = OnceLock::new();
        GITHUB.get_or_init(|| {
            Description::load(&octokit_dir().join("openapi/generated/api.github.com.json"))
        })
    }

    /// GitLab's endpoints tether calls, from GitLab's documentation.
    fn gitlab() -> &'static Description {
        static GITLAB: OnceLock<Description> = OnceLock::new();
        GITLAB.get_or_init(|| {
            Description::load(&crate::workspace_root().join("tests/contracts/gitlab.json"))
        })
    }

    fn webhooks() -> &'static Description {
        static WEBHOOKS: OnceLock<Description> = OnceLock::new();
        WEBHOOKS.get_or_init(|| {
            Description::load(&octokit_dir().join("openapi-webhooks/generated/api.github.com.json"))
        })
    }

    fn load(path: &Path) -> Description {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/test-tools)", path.display()));
        let mut document: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        let version = document["openapi"].as_str().unwrap_or_default().to_string();
        let draft = match version.as_str() {
            v if v.starts_with("3.0") => {
                nullable_as_type_union(&mut document);
                Draft::Draft4
            }
            v if v.starts_with("3.1") => Draft::Draft202012,
            _ => panic!("{}: not an OpenAPI 3.0 or 3.1 document", path.display()),
        };
        Description {
            document,
            draft,
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `instance` fits the schema at `pointer` (a JSON pointer into the
    /// document); its `#/components/...` references resolve against the document.
    fn schema_errors(&self, pointer: &str, instance: &Value) -> Vec<String> {
        let validator = self.validator(pointer);
        validator
            .iter_errors(instance)
            .map(|e| match e.instance_path().to_string() {
                at if at.is_empty() => e.to_string(),
                at => format!("{e} at {at}"),
            })
            .collect()
    }

    fn validator(&self, pointer: &str) -> Arc<Validator> {
        let mut validators = self.validators.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(validator) = validators.get(pointer) {
            return validator.clone();
        }
        let mut schema = self
            .document
            .pointer(pointer)
            .unwrap_or_else(|| panic!("the description has no {pointer}"))
            .clone();
        // The schema stands at the root, its references' targets beside it.
        if let (Some(object), Some(components)) =
            (schema.as_object_mut(), self.document.get("components"))
        {
            object.insert("components".into(), components.clone());
        }
        let validator = jsonschema::options()
            .with_draft(self.draft)
            .should_validate_formats(true)
            .build(&schema)
            .unwrap_or_else(|e| panic!("the description's schema at {pointer}: {e}"));
        let validator = Arc::new(validator);
        validators.insert(pointer.to_string(), validator.clone());
        validator
    }

    /// The operation `method path` (relative to the API's prefix) is, and what in the
    /// request the description does not allow.
    fn check_request(
        &self,
        method: &str,
        path: &str,
        query: &[(String, String)],
        body: Option<&Value>,
    ) -> Checked {
        let method = method.to_ascii_lowercase();
        let Some((template, params)) = self.match_path(path) else {
            return Checked {
                operation: None,
                violations: vec!["no such path in the description".into()],
            };
        };
        let operation_pointer = format!("/paths/{}/{method}", escape(&template));
        let Some(operation) = self.document.pointer(&operation_pointer) else {
            return Checked {
                operation: None,
                violations: vec![format!("{template} has no {method} operation")],
            };
        };
        let mut violations = self.check_parameters(operation, &params, query);
        let schema_pointer =
            format!("{operation_pointer}/requestBody/content/application~1json/schema");
        let required = operation
            .pointer("/requestBody/required")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        match (self.document.pointer(&schema_pointer).is_some(), body) {
            (true, Some(body)) => violations.extend(self.schema_errors(&schema_pointer, body)),
            (true, None) if required => violations.push("the body is missing".into()),
            (false, Some(_)) => violations.push("a body where the description takes none".into()),
            _ => {}
        }
        Checked {
            operation: Some(Operation {
                template,
                method,
                params,
            }),
            violations,
        }
    }

    /// Whether an answer fits the operation's response schema for its status (when
    /// the description has one): the fake's answers look like the host's.
    fn check_answer(&self, operation: &Operation, status: u16, body: &Value) -> Vec<String> {
        let pointer = format!(
            "/paths/{}/{}/responses/{status}/content/application~1json/schema",
            escape(&operation.template),
            operation.method
        );
        match self.document.pointer(&pointer) {
            Some(_) => self.schema_errors(&pointer, body),
            None => Vec::new(),
        }
    }

    /// The template `path` matches (the one with most literal segments), and its
    /// parameters decoded. Segments are split before decoding: GitLab's `:id` is a
    /// project path with its slashes encoded.
    fn match_path(&self, path: &str) -> Option<(String, BTreeMap<String, String>)> {
        let segments: Vec<&str> = path.split('/').collect();
        let paths = self.document.get("paths")?.as_object()?;
        paths
            .keys()
            .filter_map(|template| {
                let parts: Vec<&str> = template.split('/').collect();
                if parts.len() != segments.len() {
                    return None;
                }
                let mut params = BTreeMap::new();
                let mut literals = 0;
                for (part, segment) in parts.iter().zip(&segments) {
                    match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                        Some(name) if !segment.is_empty() => {
                            let value = percent_decode_str(segment).decode_utf8_lossy();
                            params.insert(name.to_string(), value.into_owned());
                        }
                        Some(_) => return None,
                        None if part == segment => literals += 1,
                        None => return None,
                    }
                }
                Some((literals, template.clone(), params))
            })
            .max_by_key(|(literals, _, _)| *literals)
            .map(|(_, template, params)| (template, params))
    }

    fn check_parameters(
        &self,
        operation: &Value,
        params: &BTreeMap<String, String>,
        query: &[(String, String)],
    ) -> Vec<String> {
        let declared: Vec<&Value> = operation
            .get("parameters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| self.resolve(p))
            .collect();
        let mut violations = Vec::new();
        for parameter in &declared {
            let name = parameter["name"].as_str().unwrap_or_default();
            let given = match parameter["in"].as_str() {
                Some("path") => params.get(name).map(String::as_str),
                Some("query") => query
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.as_str()),
                _ => continue,
            };
            match given {
                Some(text) => {
                    if let Err(why) = parameter_fits(self.draft, &parameter["schema"], text) {
                        violations.push(format!("parameter {name}={text:?}: {why}"));
                    }
                }
                None if parameter["required"] == true => {
                    violations.push(format!("the required parameter {name} is missing"));
                }
                None => {}
            }
        }
        for (name, _) in query {
            let known = declared
                .iter()
                .any(|p| p["in"] == "query" && p["name"] == name.as_str());
            if !known {
                violations.push(format!(
                    "the query parameter {name} is not in the description"
                ));
            }
        }
        violations
    }

    /// A parameter itself, or what its `$ref` names.
    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        value
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| self.document.pointer(pointer))
            .unwrap_or(value)
    }
}

/// Whether a parameter's text is a value of its schema (typed as the schema says).
fn parameter_fits(draft: Draft, schema: &Value, text: &str) -> Result<(), String> {
    let value = match schema["type"].as_str() {
        Some("integer") => text
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| "not an integer".to_string())?,
        Some("number") => text
            .parse::<f64>()
            .map(Value::from)
            .map_err(|_| "not a number".to_string())?,
        Some("boolean") => text
            .parse::<bool>()
            .map(Value::from)
            .map_err(|_| "not a boolean".to_string())?,
        _ => Value::from(text),
    };
    let validator = jsonschema::options()
        .with_draft(draft)
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("the description's schema: {e}"))?;
    match validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
    {
        errors if errors.is_empty() => Ok(()),
        errors => Err(errors.join("; ")),
    }
}

/// OpenAPI 3.0's `nullable: true` as JSON Schema says it: `null` among the types (and
/// the enum), or beside a schema without a type (a `$ref`, an `allOf`).
fn nullable_as_type_union(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.get("nullable") == Some(&Value::Bool(true)) {
                object.remove("nullable");
                match object.get("type").cloned() {
                    Some(Value::String(kind)) => {
                        object.insert("type".into(), json!([kind, "null"]));
                        if let Some(Value::Array(values)) = object.get_mut("enum")
                            && !values.contains(&Value::Null)
                        {
                            values.push(Value::Null);
                        }
                    }
                    _ => {
                        let inner = Value::Object(std::mem::take(object));
                        object.insert("anyOf".into(), json!([inner, {"type": "null"}]));
                    }
                }
            }
            object.values_mut().for_each(nullable_as_type_union);
        }
        Value::Array(items) => items.iter_mut().for_each(nullable_as_type_union),
        _ => {}
    }
}

/// A path template as one JSON-pointer token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Where `scripts/test-tools octokit` installed `@octokit/openapi` and
/// `@octokit/openapi-webhooks` (it installs them if missing; a failure panics).
fn octokit_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = crate::workspace_root().join("scripts/test-tools");
        let output = std::process::Command::new(&script)
            .arg("octokit")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "scripts/test-tools octokit: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        text.lines()
            .find_map(|l| l.strip_prefix("octokit="))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("scripts/test-tools octokit printed no octokit=: {text}"))
    })
}

/// What in `payload` GitHub's description of the webhook `name` (`push`,
/// `pull-request-opened`, `pull-request-synchronize` …) does not allow; empty when
/// it fits.
pub fn validate_webhook(name: &str, payload: &Value) -> Vec<String> {
    let description = Description::webhooks();
    let pointer = format!(
        "/webhooks/{}/post/requestBody/content/application~1json/schema",
        escape(name)
    );
    if description.document.pointer(&pointer).is_none() {
        return vec![format!("GitHub describes no webhook {name:?}")];
    }
    description.schema_errors(&pointer, payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openapi_nullable_becomes_a_json_schema_union() {
        let mut schema = json!({
            "properties": {
                "state": {"type": "string", "enum": ["a"], "nullable": true},
                "creator": {"allOf": [{"$ref": "#/components/schemas/user"}], "nullable": true},
                "nullable": {"type": "boolean"}
            }
        });
        nullable_as_type_union(&mut schema);
        assert_eq!(
            schema,
            json!({
                "properties": {
                    "state": {"type": ["string", "null"], "enum": ["a", null]},
                    "creator": {"anyOf": [
                        {"allOf": [{"$ref": "#/components/schemas/user"}]},
                        {"type": "null"}
                    ]},
                    "nullable": {"type": "boolean"}
                }
            })
        );
    }

    #[test]
    fn parameters_are_typed_as_their_schema_says() {
        let integer = json!({"type": "integer", "minimum": 1});
        assert_eq!(parameter_fits(Draft::Draft4, &integer, "2"), Ok(()));
        assert!(parameter_fits(Draft::Draft4, &integer, "two").is_err());
        assert!(parameter_fits(Draft::Draft4, &integer, "0").is_err());
        let order = json!({"type": "string", "enum": ["asc", "desc"]});
        assert!(parameter_fits(Draft::Draft4, &order, "up").is_err());
    }
}
