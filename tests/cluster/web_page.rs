//! The web page in a real browser (headless Chromium over WebDriver) against the
//! daemon, the control plane and a `git daemon` remote: what a person sees and does,
//! with JavaScript on and off, and hostile text that must stay text. The tests write
//! screenshots of the main views to `target/screenshots/`.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::Locator;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use tether_testkit::browser::Browser;

use crate::daemon::{SECRET, push_hook};
use crate::harness::eventually;
use crate::reconcile::config_map;
use crate::web::{Site, site, user};

const WAIT: Duration = Duration::from_secs(30);

fn screenshot(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/screenshots")
        .join(format!("{name}.png"))
}

/// A browser logged in as `token` on the daemon's page.
async fn logged_in(port: u16, token: &str, javascript: bool) -> Browser {
    let browser = match javascript {
        true => Browser::start().await,
        false => Browser::start_without_javascript().await,
    };
    browser
        .goto(&format!("http://127.0.0.1:{port}/login"))
        .await;
    browser.set_cookie("tether_session", token).await;
    browser.goto(&format!("http://127.0.0.1:{port}/")).await;
    browser
}

/// Fills `field` of the first form matching `form` with `value` (when given) and
/// submits it with its button.
async fn submit(browser: &Browser, form: &str, fields: &[(&str, &str)]) {
    let client = browser.client();
    let form = client.find(Locator::Css(form)).await.unwrap();
    for (name, value) in fields {
        let input = form
            .find(Locator::Css(&format!("[name=\"{name}\"]")))
            .await
            .unwrap();
        input.clear().await.unwrap();
        input.send_keys(value).await.unwrap();
    }
    form.find(Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Waits until the page's live stream is up (what changes after it, the page shows).
async fn live(browser: &Browser) {
    let script = "return document.querySelector('#live')?.dataset.state";
    eventually(WAIT, || async {
        browser.client().execute(script, vec![]).await.unwrap() == "up"
    })
    .await;
}

fn short(commit: &str) -> &str {
    &commit[..12]
}

/// Subjects and authors of the remote's main, newest first.
fn log(site: &Site) -> Vec<String> {
    crate::web::log(&site.remote, "%s|%an")
}

#[tokio::test]
async fn the_page_follows_a_push_shows_drift_and_scales_by_one_commit() {
    let site = site("web-page", false).await;
    let (ns, port) = (site.ns.clone(), site.daemon.port);
    let operator = user(&site.client, &ns, "operator", &["tether-operator"]).await;
    let browser = logged_in(port, &operator, true).await;
    let row = format!("tr[data-source=\"{ns}/web\"]");
    let head = site.remote.head_of_bare("main");
    browser.wait_for_text(&row, "Ready", WAIT).await;
    browser.wait_for_text(&row, short(&head), WAIT).await;
    let client = browser.client();
    live(&browser).await;
    browser.screenshot(&screenshot("sources")).await;

    // A push, announced by its webhook: the row takes the new commit without a reload
    // (what the page's script set before is still there).
    client
        .execute("window.tetherMarker = 42; return 0", vec![])
        .await
        .unwrap();
    let pushed = site
        .remote
        .push("main", &[("cm.yaml", &config_map("settings", &ns, "v2"))]);
    let (headers, body) = push_hook(&site.remote.url, "refs/heads/main", SECRET);
    let (status, _) = site.daemon.post("/hook/generic", &headers, &body);
    assert_eq!(status, 202);
    browser.wait_for_text(&row, short(&pushed), WAIT).await;
    let marker = client
        .execute("return window.tetherMarker", vec![])
        .await
        .unwrap();
    assert_eq!(marker, 42, "the page was not reloaded");

    // Drift made with kubectl shows with its field manager, then as corrected.
    browser
        .goto(&format!("http://127.0.0.1:{port}/sources/{ns}/web"))
        .await;
    live(&browser).await;
    crate::daemon::kubectl_ok(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        &ns,
        "-p",
        r#"{"data":{"key":"by hand"}}"#,
    ]);
    let drift = format!("li.object[data-object=\"ConfigMap/{ns}/settings\"] p.drift");
    let said = browser.wait_for_text(&drift, "kubectl-patch", WAIT).await;
    assert!(said.contains("changed by kubectl-patch"), "{said}");
    let said = browser.wait_for_text(&drift, "corrected", WAIT).await;
    assert!(said.contains("corrected at"), "{said}");
    browser.screenshot(&screenshot("source")).await;

    // Scale from the page: one commit, authored as the token's user; the Deployment
    // follows.
    let commits = log(&site).len();
    submit(&browser, "form.act-scale", &[("replicas", "2")]).await;
    let notice = browser.wait_for_text("p.notice", "scale", WAIT).await;
    assert!(notice.contains("scale: Slice/web 1 → 2"), "{notice}");
    let history = log(&site);
    assert_eq!(history.len(), commits + 1, "{history:?}");
    assert_eq!(
        history[0],
        format!("scale: Slice/web 1 → 2|system:serviceaccount:{ns}:operator")
    );
    let deployments: Api<Deployment> = Api::namespaced(site.client.clone(), &ns);
    eventually(WAIT, || async {
        deployments.get("web").await.unwrap().spec.unwrap().replicas == Some(2)
    })
    .await;
    browser.close().await;
}

#[tokio::test]
async fn without_javascript_the_page_shows_everything_and_its_forms_commit() {
    let site = site("web-nojs", false).await;
    let (ns, port) = (site.ns.clone(), site.daemon.port);
    let admin = user(
        &site.client,
        &ns,
        "admin",
        &["tether-operator", "tether-host-admin"],
    )
    .await;
    let browser = logged_in(port, &admin, false).await;
    let row = format!("tr[data-source=\"{ns}/web\"]");
    browser.wait_for_text(&row, "Ready", WAIT).await;
    browser
        .goto(&format!("http://127.0.0.1:{port}/sources/{ns}/web"))
        .await;
    for (selector, words) in [
        ("#summary", "Ready"),
        (
            &*format!("li.object[data-object=\"Deployment/{ns}/web\"]"),
            "ready",
        ),
        ("#plan", "tether diff"),
        ("#graph", "Slice/web"),
    ] {
        let text = browser.text(selector).await;
        assert!(text.contains(words), "{selector}: {text}");
    }
    assert!(
        browser
            .client()
            .find(Locator::Css("#graph svg g.model"))
            .await
            .is_ok(),
        "the graph is an SVG"
    );
    browser
        .screenshot(&screenshot("source-without-javascript"))
        .await;

    // Scale from a plain form: one commit, and the Deployment follows.
    let commits = log(&site).len();
    submit(&browser, "form.act-scale", &[("replicas", "3")]).await;
    let notice = browser.wait_for_text("p.notice", "scale", WAIT).await;
    assert!(notice.contains("scale: Slice/web 1 → 3"), "{notice}");
    assert_eq!(log(&site).len(), commits + 1);
    let deployments: Api<Deployment> = Api::namespaced(site.client.clone(), &ns);
    eventually(WAIT, || async {
        deployments.get("web").await.unwrap().spec.unwrap().replicas == Some(3)
    })
    .await;
    // A reconcile requested from the page.
    submit(&browser, "form.act-reconcile", &[]).await;
    browser
        .wait_for_text("p.notice", "a pass was requested", WAIT)
        .await;
    browser.close().await;
}

/// Names, messages and values written to break out of the page.
const HOSTILE: &str = r#"<img src=x id=pwned onerror="document.title='pwned'">"#;

#[tokio::test]
async fn hostile_names_and_values_render_as_text_and_run_nothing() {
    let site = site("web-hostile", false).await;
    let (ns, port) = (site.ns.clone(), site.daemon.port);
    let viewer = user(&site.client, &ns, "viewer", &["tether-viewer"]).await;
    // A model named with markup: the models are refused, and the message names it.
    let pushed = site.remote.push(
        "main",
        &[(
            "hostile.yaml",
            &format!(
                "kind: KubernetesConfigMap\nname: \"{}\"\ntrust_domain: {ns}\ndata:\n  key: x\n",
                HOSTILE.replace('"', "\\\"")
            ),
        )],
    );
    let (headers, body) = push_hook(&site.remote.url, "refs/heads/main", SECRET);
    site.daemon.post("/hook/generic", &headers, &body);
    let browser = logged_in(port, &viewer, true).await;
    let row = format!("tr[data-source=\"{ns}/web\"]");
    browser.wait_for_text(&row, short(&pushed), WAIT).await;
    let text = browser
        .wait_for_text(&row, "<img src=x id=pwned", WAIT)
        .await;
    assert!(text.contains("Failed"), "{text}");
    for page in ["/".to_string(), format!("/sources/{ns}/web")] {
        browser
            .goto(&format!("http://127.0.0.1:{port}{page}"))
            .await;
        let client = browser.client();
        let injected = client
            .execute(
                "return document.querySelectorAll('#pwned, img[src=x]').length",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(
            injected, 0,
            "{page}: markup from the repository became elements"
        );
        assert_ne!(browser.title().await, "pwned", "{page}");
        let body = browser.text("body").await;
        assert!(
            body.contains("<img src=x id=pwned"),
            "{page}: the text is shown as text: {body}"
        );
    }
    browser.screenshot(&screenshot("hostile")).await;
    browser.close().await;
}
