//! A real browser for the web page's tests: Debian's headless Chromium driven over
//! WebDriver (`chromedriver` on a free loopback port, the `fantoccini` client), with
//! a fresh profile per browser. Installed by `scripts/test-tools install`.
//!
//! ```no_run
//! # async fn example() {
//! use std::time::Duration;
//! use tether_testkit::browser::Browser;
//!
//! let browser = Browser::start().await;
//! browser.goto("http://127.0.0.1:8080/login").await;
//! browser.set_cookie("tether_session", "TOKEN").await;
//! browser.goto("http://127.0.0.1:8080/").await;
//! browser.wait_for_text("main h1", "Sources", Duration::from_secs(5)).await;
//! browser.screenshot(std::path::Path::new("target/demo/sources.png")).await;
//! # }
//! ```

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::cookies::Cookie;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::remote::free_port;

/// Debian's Chromium (`chromium`) and its WebDriver server (`chromium-driver`).
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "chromedriver";

/// How long chromedriver may take to listen.
const DRIVER_START: Duration = Duration::from_secs(20);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(100);

/// A headless Chromium session; the browser and its driver stop when dropped.
pub struct Browser {
    client: Client,
    _driver: Driver,
    _profile: tempfile::TempDir,
}

/// chromedriver in a process group of its own, with the Chromium it starts: killed
/// together when dropped, also when a test fails before closing its session.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

impl Browser {
    /// A browser that runs the pages' scripts.
    pub async fn start() -> Browser {
        Browser::start_with(true).await
    }

    /// A browser that runs no script at all (the page must work without).
    pub async fn start_without_javascript() -> Browser {
        Browser::start_with(false).await
    }

    async fn start_with(javascript: bool) -> Browser {
        let port = free_port();
        let driver = Driver(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver is installed (scripts/test-tools install)"),
        );
        // Listening is enough: chromedriver answers requests but keeps the connection
        // open whatever `Connection: close` says.
        let deadline = tokio::time::Instant::now() + DRIVER_START;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not listen on port {port} within {DRIVER_START:?}"
            );
            tokio::time::sleep(POLL).await;
        }
        let profile = tempfile::tempdir().expect("a temporary directory for the profile");
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities(profile.path(), javascript))
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session with headless Chromium");
        Browser {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    /// The WebDriver client, for what the helpers do not cover (forms, clicks).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Loads `url` and waits until it has loaded.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("load {url}: {e}"));
    }

    /// The page's current address (after redirects).
    pub async fn url(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("the current URL")
            .to_string()
    }

    /// The page's title.
    pub async fn title(&self) -> String {
        self.client.title().await.expect("the page's title")
    }

    /// The rendered text of the first element `selector` (CSS) matches.
    pub async fn text(&self, selector: &str) -> String {
        self.try_text(selector)
            .await
            .unwrap_or_else(|e| panic!("the text of {selector:?}: {e}"))
    }

    async fn try_text(&self, selector: &str) -> Result<String, fantoccini::error::CmdError> {
        self.client.find(Locator::Css(selector)).await?.text().await
    }

    /// Waits until an element `selector` matches holds `wanted` in its text (live
    /// updates, no reload); returns the text. Panics after `timeout` with the last
    /// text seen.
    pub async fn wait_for_text(&self, selector: &str, wanted: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let seen = self.try_text(selector).await;
            match &seen {
                Ok(text) if text.contains(wanted) => return text.clone(),
                _ if tokio::time::Instant::now() >= deadline => {
                    panic!("{selector:?} did not show {wanted:?} within {timeout:?}: {seen:?}")
                }
                _ => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// A PNG of the window, written to `path` (its directory made).
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("a screenshot");
        if let Some(directory) = path.parent() {
            std::fs::create_dir_all(directory).expect("the screenshot's directory");
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Sets a cookie for the current page's site, as its server would (HttpOnly,
    /// SameSite=Strict, Path=/): load a page of the site first.
    pub async fn set_cookie(&self, name: &str, value: &str) {
        // WebDriver wants the domain named: the current page's host.
        let url = self.client.current_url().await.expect("the current URL");
        let host = url.host_str().unwrap_or("localhost");
        let cookie = Cookie::parse(format!(
            "{name}={value}; Domain={host}; Path=/; HttpOnly; SameSite=Strict"
        ))
        .unwrap_or_else(|e| panic!("the cookie {name}: {e}"));
        self.client
            .add_cookie(cookie)
            .await
            .unwrap_or_else(|e| panic!("set the cookie {name}: {e}"));
    }

    /// Ends the session (Chromium quits); dropping the browser kills what is left.
    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// Headless Chromium as root on a build machine (no sandbox, no GPU), quiet (no
/// network of its own, no first-run page), with its own profile; JavaScript off
/// through the managed content setting when asked.
fn capabilities(profile: &Path, javascript: bool) -> fantoccini::wd::Capabilities {
    let mut options = json!({
        "binary": CHROMIUM,
        "args": [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
            format!("--user-data-dir={}", profile.display()),
        ],
    });
    if !javascript {
        options["prefs"] = json!({ "profile.managed_default_content_settings.javascript": 2 });
    }
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("browserName".into(), Value::from("chrome"));
    capabilities.insert("goog:chromeOptions".into(), options);
    capabilities
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Serves `page` to every request on a free port; returns the port.
    async fn serve(page: &'static str) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        port
    }

    const PAGE: &str = "<!doctype html><title>kit</title><p id=static>served</p>\
        <p id=scripted>no script ran</p>\
        <script>document.getElementById('scripted').textContent = 'a script ran';</script>";

    #[tokio::test(flavor = "multi_thread")]
    async fn the_browser_reads_a_served_page_with_and_without_javascript() {
        let port = serve(PAGE).await;
        let url = format!("http://127.0.0.1:{port}/");

        let browser = Browser::start().await;
        browser.goto(&url).await;
        assert_eq!(browser.title().await, "kit");
        assert_eq!(browser.text("#static").await, "served");
        browser
            .wait_for_text("#scripted", "a script ran", Duration::from_secs(5))
            .await;
        browser.set_cookie("tether_session", "abc").await;
        let cookie = browser.client().get_named_cookie("tether_session").await;
        assert_eq!(cookie.unwrap().value(), "abc");
        assert_eq!(browser.url().await, url);
        let shot = tempfile::tempdir().unwrap();
        let path = shot.path().join("page/shot.png");
        browser.screenshot(&path).await;
        assert!(std::fs::read(&path).unwrap().starts_with(b"\x89PNG"));
        browser.close().await;

        let without = Browser::start_without_javascript().await;
        without.goto(&url).await;
        assert_eq!(without.text("#scripted").await, "no script ran");
        without.close().await;
    }
}
