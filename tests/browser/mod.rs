//! A real browser for the console's tests: Debian's Chromium, headless, driven over the W3C
//! WebDriver protocol by its chromedriver (both installed by `scripts/install-browser`). Only
//! what the tests use: open a page, find elements by CSS selector, click and type as a user
//! does, read the page with a script, take screenshots and read the browser's console log.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long a wait for the page lasts before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session, closed (and its driver killed) on drop.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// An element of the page.
pub struct Element(Value);

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile.
    pub async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
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
        let profile = tempfile::tempdir().expect("profile dir");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(
                started.elapsed() < PATIENCE,
                "chromedriver did not listen on {base}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--window-size=1280,900", "--no-first-run",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let mut browser = Browser {
            http,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let created = browser
            .call("POST", &format!("{base}/session"), capabilities)
            .await;
        browser.session = format!(
            "{base}/session/{}",
            created["sessionId"].as_str().expect("a session id")
        );
        browser
    }

    async fn call(&self, method: &str, url: &str, body: Value) -> Value {
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self
                .http
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string()),
        };
        let response = request.send().await.expect("chromedriver answers");
        let status = response.status();
        let bytes = response.bytes().await.expect("chromedriver's answer");
        let answer: Value = serde_json::from_slice(&bytes).expect("WebDriver JSON");
        assert!(status.is_success(), "WebDriver {method} {url}: {answer}");
        answer["value"].clone()
    }

    async fn session_call(&self, method: &str, path: &str, body: Value) -> Value {
        self.call(method, &format!("{}{path}", self.session), body)
            .await
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.session_call("POST", "/url", json!({ "url": url }))
            .await;
    }

    /// Runs `script` in the page (`arguments[i]` are `args`); what it returns.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// The first element matching `css` now, if any.
    pub async fn find(&self, css: &str) -> Option<Element> {
        let found = self
            .script("return document.querySelector(arguments[0]);", json!([css]))
            .await;
        (!found.is_null()).then_some(Element(found))
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
        let id = element.id();
        self.session_call("POST", &format!("/element/{id}/click"), json!({}))
            .await;
    }

    /// Clears `element` and types `text` into it, key by key.
    pub async fn type_into(&self, element: &Element, text: &str) {
        let id = element.id();
        self.session_call("POST", &format!("/element/{id}/clear"), json!({}))
            .await;
        self.session_call(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    /// Saves a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let png = self.session_call("GET", "/screenshot", json!(null)).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64 PNG"))
            .expect("PNG bytes");
        std::fs::write(path, bytes).expect("write screenshot");
    }

    /// The browser console's messages since the last call.
    pub async fn console_log(&self) -> Vec<String> {
        let entries = self
            .session_call("POST", "/se/log", json!({"type": "browser"}))
            .await;
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

impl Element {
    fn id(&self) -> &str {
        self.0[ELEMENT].as_str().expect("an element reference")
    }
}

impl Drop for Browser {
    // The session is ended before its driver is killed, so no Chromium outlives the test (a
    // failing one included). Drop cannot await: one plain HTTP request, by hand.
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
