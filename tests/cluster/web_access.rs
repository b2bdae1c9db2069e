//! Who may see and do what on the web page and API, asked of the API server as the
//! daemon asks it (`tether_daemon::web::auth`): ServiceAccount tokens from the
//! TokenRequest API, checked by TokenReview; rights from the ClusterRoles `tether
//! install` ships (applied from its generated manifests), bound per namespace, checked
//! by SubjectAccessReview. The daemon's side runs as a ServiceAccount bound to the
//! daemon's generated ClusterRole, so the test also proves that role may ask.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tether_admin::install::manifests::{NAME, PEOPLE_ROLES};
use tether_admin::install::{InstallOptions, manifests};
use tether_daemon::web::auth::{Access, Check, Denied, Viewer};

use crate::daemon::{audit_entries_since, audit_offset, kubectl_apply_text};
use crate::harness::{cluster, eventually, fresh_namespace};

/// Two teams' namespaces: A, where each person has their role, and B, where nobody
/// of the test has any.
struct Teams {
    admin: Client,
    a: String,
    b: String,
    /// The daemon's side: a client acting as the ServiceAccount `tether-daemon` of A,
    /// bound to the daemon's ClusterRole.
    daemon: Client,
    daemon_user: String,
}

/// Applies what `tether install` generates for the daemon's and the people's
/// ClusterRoles (as `kubectl apply -k deploy/` does) and makes the two namespaces.
async fn teams(test: &str) -> Teams {
    let admin = cluster().client().await;
    let a = fresh_namespace(&admin, &format!("{test}-a")).await;
    let b = fresh_namespace(&admin, &format!("{test}-b")).await;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let shipped = manifests(&InstallOptions::new());
    for role in shipped.iter().filter(|o| o["kind"] == "ClusterRole") {
        let name = role["metadata"]["name"].as_str().unwrap();
        assert!(name == NAME || PEOPLE_ROLES.contains(&name), "{name}");
        roles
            .patch(
                name,
                &PatchParams::apply("tether-tests-web-access").force(),
                &Patch::Apply(role),
            )
            .await
            .unwrap_or_else(|e| panic!("apply the ClusterRole {name}: {e}"));
    }
    let daemon_user = account_user(&a, "tether-daemon");
    kubectl_apply_text(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: tether-daemon\n  namespace: {a}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {a}-daemon\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {NAME}}}\n\
         subjects: [{{kind: ServiceAccount, name: tether-daemon, namespace: {a}}}]\n"
    ));
    wait_until_allowed(
        &admin,
        &daemon_user,
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        None,
    )
    .await;
    wait_until_allowed(
        &admin,
        &daemon_user,
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        None,
    )
    .await;
    let daemon = client_as(&daemon_user).await;
    Teams {
        admin,
        a,
        b,
        daemon,
        daemon_user,
    }
}

impl Teams {
    fn access(&self, anonymous_read_only: bool) -> Access {
        Access::Kubernetes {
            client: self.daemon.clone(),
            anonymous_read_only,
        }
    }

    /// A ServiceAccount `name` of A bound there to the ClusterRole `role` (none: no
    /// binding), and a token for it from the TokenRequest API. Waits until RBAC
    /// answers for the binding, so that no test sees it late.
    async fn person(&self, name: &str, role: Option<&str>) -> String {
        let a = &self.a;
        kubectl_apply_text(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {a}\n"
        ));
        if let Some(role) = role {
            kubectl_apply_text(&format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n  namespace: {a}\n\
                 roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n\
                 subjects: [{{kind: ServiceAccount, name: {name}, namespace: {a}}}]\n"
            ));
            wait_until_allowed(
                &self.admin,
                &account_user(a, name),
                "get",
                "tether.dev",
                "sources",
                Some(a),
            )
            .await;
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        Api::<ServiceAccount>::namespaced(self.admin.clone(), a)
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("a token for {name}: {e}"))
            .status
            .expect("the TokenRequest's status")
            .token
    }
}

fn account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A client of the run's control plane acting as `user` (the admin impersonating).
async fn client_as(user: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(cluster().kubeconfig()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).unwrap()
}

/// RBAC's authorizer learns of new roles and bindings from a watch: waits until it
/// answers yes, asking the API server directly (the code under test remembers answers).
async fn wait_until_allowed(
    admin: &Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) {
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: namespace.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    eventually(Duration::from_secs(30), || async {
        reviews
            .create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed)
    })
    .await;
}

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

/// A browser's request after the login form: the token in the session cookie.
fn session(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::COOKIE,
        HeaderValue::from_str(&format!("theme=dark; tether_session={token}")).unwrap(),
    );
    headers
}

fn on_source(verb: &'static str, namespace: &str) -> Check {
    Check {
        verb,
        group: "tether.dev",
        resource: "sources",
        subresource: None,
        namespace: namespace.to_string(),
        name: Some("shop".into()),
    }
}

fn on_pod(verb: &'static str, subresource: Option<&'static str>, namespace: &str) -> Check {
    Check {
        verb,
        group: "",
        resource: "pods",
        subresource,
        namespace: namespace.to_string(),
        name: Some("web-0".into()),
    }
}

async fn forbidden(access: &Access, viewer: &Viewer, check: &Check) -> String {
    match access.may(viewer, check).await {
        Err(Denied::Forbidden(message)) => message,
        other => panic!(
            "{} {check:?}: expected Forbidden, got {other:?}",
            viewer.user
        ),
    }
}

#[tokio::test]
async fn a_viewer_sees_the_sources_of_their_namespace_only_and_acts_on_nothing() {
    let teams = teams("web-viewer").await;
    let (a, b) = (&teams.a, &teams.b);
    let token = teams.person("viewer", Some("tether-viewer")).await;
    let access = teams.access(false);

    let viewer = access.viewer(&bearer(&token)).await.unwrap();
    assert_eq!(viewer.user, account_user(a, "viewer"));
    assert!(!viewer.anonymous);
    for group in [
        "system:serviceaccounts",
        &format!("system:serviceaccounts:{a}"),
        "system:authenticated",
    ] {
        assert!(
            viewer.groups.iter().any(|g| g == group),
            "{group} in {:?}",
            viewer.groups
        );
    }
    // The login form's cookie names the same person.
    assert_eq!(access.viewer(&session(&token)).await.unwrap(), viewer);

    access.may(&viewer, &on_source("get", a)).await.unwrap();
    access.may(&viewer, &on_source("list", a)).await.unwrap();
    let elsewhere = forbidden(&access, &viewer, &on_source("get", b)).await;
    assert!(
        elsewhere.starts_with(&format!(
            "{} may not get sources \"shop\" in {b}",
            viewer.user
        )),
        "{elsewhere}"
    );
    for verb in ["scale", "restart", "rollback", "reconcile", "label", "lock"] {
        let message = forbidden(&access, &viewer, &on_source(verb, a)).await;
        assert!(
            message.contains(&format!("may not {verb} sources")),
            "{message}"
        );
    }
    let recreate = forbidden(&access, &viewer, &on_pod("delete", None, a)).await;
    assert!(
        recreate.contains("may not delete pods \"web-0\""),
        "{recreate}"
    );
}

#[tokio::test]
async fn operators_act_on_workloads_and_host_admins_on_hosts() {
    let teams = teams("web-roles").await;
    let (a, b) = (&teams.a, &teams.b);
    let operator_token = teams.person("operator", Some("tether-operator")).await;
    let host_admin_token = teams.person("hosts", Some("tether-host-admin")).await;
    let access = teams.access(false);
    let operator = access.viewer(&bearer(&operator_token)).await.unwrap();
    let host_admin = access.viewer(&bearer(&host_admin_token)).await.unwrap();

    for verb in ["get", "scale", "restart", "rollback", "reconcile"] {
        access.may(&operator, &on_source(verb, a)).await.unwrap();
    }
    access
        .may(&operator, &on_pod("delete", None, a))
        .await
        .unwrap();
    access
        .may(&operator, &on_pod("create", Some("exec"), a))
        .await
        .unwrap();
    for verb in ["label", "lock"] {
        forbidden(&access, &operator, &on_source(verb, a)).await;
    }
    // The role is bound in A only.
    forbidden(&access, &operator, &on_source("scale", b)).await;
    forbidden(&access, &operator, &on_pod("delete", None, b)).await;

    for verb in ["get", "label", "lock"] {
        access.may(&host_admin, &on_source(verb, a)).await.unwrap();
    }
    for verb in ["scale", "restart", "rollback", "reconcile"] {
        forbidden(&access, &host_admin, &on_source(verb, a)).await;
    }
    forbidden(&access, &host_admin, &on_pod("create", Some("exec"), a)).await;
}

#[tokio::test]
async fn no_token_or_a_bad_one_is_unauthenticated_and_anonymous_viewing_never_acts() {
    let teams = teams("web-anonymous").await;
    let a = &teams.a;
    let closed = teams.access(false);

    let garbage = "not-a-token-but-cookie-safe.42";
    match closed.viewer(&bearer(garbage)).await {
        Err(Denied::Unauthenticated(message)) => {
            assert!(message.contains("did not accept the token"), "{message}");
            assert!(
                !message.contains(garbage),
                "the token is never echoed: {message}"
            );
        }
        other => panic!("a garbage token: {other:?}"),
    }
    assert!(matches!(
        closed.viewer(&session(garbage)).await,
        Err(Denied::Unauthenticated(_))
    ));
    match closed.viewer(&HeaderMap::new()).await {
        Err(Denied::Unauthenticated(message)) => {
            assert!(message.starts_with("log in"), "{message}")
        }
        other => panic!("no token: {other:?}"),
    }
    // A ServiceAccount without any binding is someone, and may see nothing.
    let nobody_token = teams.person("nobody", None).await;
    let nobody = closed.viewer(&bearer(&nobody_token)).await.unwrap();
    forbidden(&closed, &nobody, &on_source("get", a)).await;

    // Anonymous viewing, when the operator turned it on: reads only, in any namespace.
    let open = teams.access(true);
    let anonymous = open.viewer(&HeaderMap::new()).await.unwrap();
    assert!(anonymous.anonymous);
    assert_eq!(anonymous.user, "system:anonymous");
    assert_eq!(anonymous.groups, ["system:unauthenticated"]);
    open.may(&anonymous, &on_source("get", a)).await.unwrap();
    open.may(&anonymous, &on_source("watch", &teams.b))
        .await
        .unwrap();
    for check in [
        on_source("scale", a),
        on_source("label", a),
        on_pod("delete", None, a),
    ] {
        assert!(
            matches!(
                open.may(&anonymous, &check).await,
                Err(Denied::Unauthenticated(_))
            ),
            "{check:?}"
        );
    }
    // A bad token is not taken for anonymous.
    assert!(matches!(
        open.viewer(&bearer(garbage)).await,
        Err(Denied::Unauthenticated(_))
    ));
}

#[tokio::test]
async fn the_csrf_token_of_one_session_is_refused_for_another() {
    let teams = teams("web-csrf").await;
    let alice_token = teams.person("alice", Some("tether-operator")).await;
    let bob_token = teams.person("bob", Some("tether-operator")).await;
    let access = teams.access(false);
    let alice = access.viewer(&bearer(&alice_token)).await.unwrap();
    let bob = access.viewer(&bearer(&bob_token)).await.unwrap();

    let alices = access.csrf_token(&alice);
    assert_eq!(alices.len(), 64, "hex of HMAC-SHA256: {alices}");
    access.check_csrf(&alice, Some(&alices)).unwrap();
    assert!(matches!(
        access.check_csrf(&bob, Some(&alices)),
        Err(Denied::Csrf)
    ));
    assert!(matches!(access.check_csrf(&alice, None), Err(Denied::Csrf)));
    assert!(matches!(
        access.check_csrf(&alice, Some("")),
        Err(Denied::Csrf)
    ));
    let mut tampered = alices.clone();
    tampered.replace_range(..1, if alices.starts_with('0') { "1" } else { "0" });
    assert!(matches!(
        access.check_csrf(&alice, Some(&tampered)),
        Err(Denied::Csrf)
    ));

    // Another replica (its own Access, the same session cookie) takes the same token.
    let replica = teams.access(false);
    let alice_there = replica.viewer(&session(&alice_token)).await.unwrap();
    replica.check_csrf(&alice_there, Some(&alices)).unwrap();
}

#[tokio::test]
async fn tether_ui_asks_as_its_users_own_identity() {
    let teams = teams("web-local").await;
    let (a, b) = (&teams.a, &teams.b);
    teams.person("me", Some("tether-operator")).await;
    let access = Access::Local {
        client: client_as(&account_user(a, "me")).await,
    };
    // Headers do not matter: the person at the keyboard is the kubeconfig's identity.
    let me = access.viewer(&bearer("whatever")).await.unwrap();
    assert!(!me.anonymous);
    access.may(&me, &on_source("scale", a)).await.unwrap();
    access
        .may(&me, &on_pod("create", Some("exec"), a))
        .await
        .unwrap();
    // The source of `tether ui` is the user's own flags, not a Source resource: its
    // verbs are theirs; what touches the cluster is asked of Kubernetes.
    access.may(&me, &on_source("label", b)).await.unwrap();
    forbidden(&access, &me, &on_pod("delete", None, b)).await;

    let csrf = access.csrf_token(&me);
    access.check_csrf(&me, Some(&csrf)).unwrap();
    assert!(matches!(
        access.check_csrf(&me, Some("0".repeat(64).as_str())),
        Err(Denied::Csrf)
    ));
}

/// The reviews of `resource` the daemon's side created since `offset`, as the API
/// server's audit log has them.
fn reviews_since(offset: u64, daemon_user: &str, resource: &str) -> usize {
    audit_entries_since(offset)
        .iter()
        .filter(|e| {
            e["impersonatedUser"]["username"] == daemon_user
                && e["objectRef"]["resource"] == resource
                && e["stage"] == "ResponseComplete"
        })
        .count()
}

#[tokio::test]
async fn a_pages_several_requests_ask_the_api_server_once() {
    let teams = teams("web-remembered").await;
    let (a, b) = (&teams.a, &teams.b);
    let token = teams.person("operator", Some("tether-operator")).await;
    let access = teams.access(false);
    let offset = audit_offset();

    // A page and its API calls: the same token and the same questions, three times.
    for _ in 0..3 {
        let viewer = access.viewer(&session(&token)).await.unwrap();
        access.may(&viewer, &on_source("scale", a)).await.unwrap();
        forbidden(&access, &viewer, &on_source("get", b)).await;
    }
    let asked = || {
        (
            reviews_since(offset, &teams.daemon_user, "tokenreviews"),
            reviews_since(offset, &teams.daemon_user, "subjectaccessreviews"),
        )
    };
    eventually(Duration::from_secs(10), || async {
        let (tokens, accesses) = asked();
        tokens >= 1 && accesses >= 2
    })
    .await;
    // One TokenReview; one SubjectAccessReview per question, the refusal included.
    assert_eq!(asked(), (1, 2));
    // A token that was not accepted is asked about again (nothing remembered for it).
    let garbage = "not-a-token.remembered";
    for _ in 0..2 {
        assert!(access.viewer(&bearer(garbage)).await.is_err());
    }
    eventually(Duration::from_secs(10), || async { asked().0 >= 3 }).await;
    assert_eq!(asked(), (3, 2));
}
