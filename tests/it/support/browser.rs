//! A real browser for the console's tests: Debian's Chromium, headless, driven over WebDriver by
//! its chromedriver (both installed by `scripts/install-browser`) through the `fantoccini`
//! client. Only what the tests use: open a page, find elements by CSS selector, click and type
//! as a user does, read the page with a script, take screenshots and read the browser's console
//! log (chromedriver's `/se/log`, which fantoccini has no call for: a command of its own here).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::wd::{Capabilities, WebDriverCompatibleCommand};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};

/// How long a wait for the page lasts before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// The flags Chromium runs with: headless, no sandbox (the tests run as root), and none of its
/// own traffic (updates, sync, QUIC) beside the page's.
const CHROMIUM_FLAGS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
];

/// A headless Chromium session on a new empty profile, closed (and its driver killed) on drop.
pub struct Browser {
    client: Client,
    /// `http://127.0.0.1:<port>/session/<id>`, for ending the session on drop.
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile.
    pub async fn start() -> Browser {
        let port = devtools::free_port().expect("a free port");
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run chromedriver ({e}): install Chromium and its driver with \
                     scripts/install-browser"
                )
            });
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < PATIENCE,
                "chromedriver did not listen on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let base = format!("http://127.0.0.1:{port}");
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(Capabilities::from_iter(capabilities))
            .connect(&base)
            .await
            .unwrap_or_else(|e| panic!("chromedriver at {base} started no Chromium: {e}"));
        let id = client
            .session_id()
            .await
            .expect("the session")
            .expect("a session id");
        Browser {
            client,
            session: format!("{base}/session/{id}"),
            driver,
            _profile: profile,
        }
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Runs `script` in the page (`arguments[i]` are `args`); what it returns.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        let Value::Array(args) = args else {
            panic!("a script's arguments are an array: {args}")
        };
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script {script}: {e}"))
    }

    /// The first element matching `css` now, if any.
    pub async fn find(&self, css: &str) -> Option<Element> {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => Some(element),
            Err(e) if e.is_no_such_element() => None,
            Err(e) => panic!("find {css}: {e}"),
        }
    }

    /// The text of the first element matching `css` now, if any.
    pub async fn text(&self, css: &str) -> Option<String> {
        let text = self
            .script(
                "const e = document.querySelector(arguments[0]); \
                 return e && !e.closest('[hidden]') ? e.textContent : null;",
                json!([css]),
            )
            .await;
        text.as_str()
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    /// Waits until the first visible element matching `css` has a text `ok` accepts; that
    /// text. The page refreshes itself, so this is how a test watches it change.
    pub async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let text = self.text(css).await;
            if let Some(text) = text.as_deref().filter(|t| ok(t)) {
                return text.to_string();
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{what}: {css} shows {text:?} after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until an element matches `css` and is shown; it.
    pub async fn wait_for(&self, css: &str, what: &str) -> Element {
        self.wait_text(css, what, |_| true).await;
        self.find(css).await.expect("the element just seen")
    }

    /// Waits until nothing matches `css`.
    pub async fn wait_gone(&self, css: &str, what: &str) {
        let started = Instant::now();
        while self.find(css).await.is_some() {
            assert!(started.elapsed() < PATIENCE, "{what}: {css} still there");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks `element` as a user does (WebDriver's click: scrolled into view, real events).
    pub async fn click(&self, element: &Element) {
        element.click().await.expect("click");
    }

    /// Clears `element` and types `text` into it, key by key.
    pub async fn type_into(&self, element: &Element, text: &str) {
        element.clear().await.expect("clear");
        element.send_keys(text).await.expect("type");
    }

    /// Saves a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// The browser console's messages since the last call.
    pub async fn console_log(&self) -> Vec<String> {
        let entries = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("the browser's log");
        entries
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| format!("{} {}", e["level"], e["message"]))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// chromedriver's `POST /session/{id}/se/log` for the `browser` log (the page's console,
/// Content-Security-Policy violations among it): the entries since it was last read.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({"type": "browser"}).to_string();
        (http::Method::POST, Some(body))
    }
}

impl Drop for Browser {
    // The session is ended before its driver is killed, so no Chromium outlives the test (a
    // failing one included): fantoccini ends it from a task of the test's runtime, which may be
    // gone by then, so one plain HTTP request, by hand (Drop cannot await).
    fn drop(&mut self) {
        use std::io::{Read, Write};
        if let Some((host, path)) = self
            .session
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once('/'))
        {
            if let Ok(mut stream) = std::net::TcpStream::connect(host) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = write!(
                    stream,
                    "DELETE /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.read_to_end(&mut Vec::new());
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
