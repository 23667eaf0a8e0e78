//! A real browser for the dashboard's tests: Debian's `chromium`, headless, driven by its
//! `chromedriver` over the W3C WebDriver protocol (plain HTTP and JSON, spoken here with
//! the few commands the tests need: navigate, find, click, type, read, screenshot).
//!
//! Pages redraw themselves on live updates, so an element found a moment ago may be gone:
//! the helpers that wait ([`Browser::wait_text`], [`Browser::click`]) find their element
//! again on each try.

use crate::{DEADLINE, wait_until};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The key of an element reference in WebDriver's answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where Debian puts chromium and its driver.
pub fn chromium_paths() -> Option<(PathBuf, PathBuf)> {
    let browser = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())?;
    let driver = PathBuf::from("/usr/bin/chromedriver");
    driver.exists().then_some((browser, driver))
}

/// A headless chromium with its own profile, closed (and its driver killed) when dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// A WebDriver command's failure: its error code and message.
#[derive(Debug)]
pub struct WebDriverError {
    pub error: String,
    pub message: String,
}

impl Browser {
    /// Starts chromedriver and a browser session of `browser` (`driver` its chromedriver).
    pub fn start(browser: &Path, driver: &Path) -> Browser {
        let profile = crate::private_tempdir();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::File::create(profile.path().join("chromedriver.log"))
            .expect("the driver's log");
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {}: {e}", driver.display()));
        let mut b = Browser {
            driver: child,
            port,
            session: String::new(),
            _profile: profile,
        };
        wait_until("chromedriver answers", || {
            b.request("GET", "/status", None)
                .is_ok_and(|v| v["ready"].as_bool() == Some(true))
        });
        let data_dir = b._profile.path().join("profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,900", "--no-first-run", "--no-default-browser-check",
                    "--disable-extensions", "--disable-background-networking", "--disable-sync",
                    "--disable-component-update", "--disable-default-apps",
                    format!("--user-data-dir={}", data_dir.display()),
                ],
            },
        }}});
        let v = b
            .request("POST", "/session", Some(caps))
            .unwrap_or_else(|e| panic!("no browser session: {e:?}\n{}", b.driver_log()));
        b.session = v["sessionId"].as_str().expect("a session id").to_owned();
        b
    }

    fn driver_log(&self) -> String {
        std::fs::read_to_string(self._profile.path().join("chromedriver.log")).unwrap_or_default()
    }

    /// One WebDriver command: its `value`, or its error.
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, WebDriverError> {
        let transport = |message: String| WebDriverError {
            error: "transport".into(),
            message,
        };
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| transport(e.to_string()))?;
        stream
            .set_read_timeout(Some(DEADLINE))
            .map_err(|e| transport(e.to_string()))?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream
            .write_all(req.as_bytes())
            .map_err(|e| transport(e.to_string()))?;
        let body = read_answer(&mut stream).map_err(transport)?;
        let v: Value =
            serde_json::from_str(&body).map_err(|e| transport(format!("{e}: {body}")))?;
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        match value.get("error").and_then(Value::as_str) {
            Some(error) => Err(WebDriverError {
                error: error.to_owned(),
                message: value["message"].as_str().unwrap_or("").to_owned(),
            }),
            None => Ok(value),
        }
    }

    fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Result<Value, WebDriverError> {
        self.request(method, &format!("/session/{}{what}", self.session), body)
    }

    /// Opens `url` and waits for the page's load.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })))
            .unwrap_or_else(|e| panic!("failed to open {url}: {e:?}"));
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The elements matching a CSS selector now.
    pub fn find_all(&self, css: &str) -> Vec<String> {
        self.cmd(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
        .collect()
    }

    /// How many elements match `css` now, counted in the page (one small answer, where
    /// [`Browser::find_all`] sends back a reference to each).
    pub fn count(&self, css: &str) -> usize {
        self.execute(
            "return document.querySelectorAll(arguments[0]).length;",
            json!([css]),
        )
        .as_u64()
        .unwrap_or(0) as usize
    }

    /// The first element matching `css` now.
    pub fn find(&self, css: &str) -> Option<String> {
        self.find_all(css).into_iter().next()
    }

    /// An element's rendered text.
    pub fn text_of(&self, element: &str) -> Result<String, WebDriverError> {
        self.cmd("GET", &format!("/element/{element}/text"), None)
            .map(|v| v.as_str().unwrap_or("").to_owned())
    }

    /// An element's attribute (`None` when it has none).
    pub fn attr_of(&self, element: &str, name: &str) -> Result<Option<String>, WebDriverError> {
        self.cmd("GET", &format!("/element/{element}/attribute/{name}"), None)
            .map(|v| v.as_str().map(str::to_owned))
    }

    /// An attribute of the first element matching `css` now, read in one step in the page
    /// (no element reference that a redraw could make stale).
    pub fn attr(&self, css: &str, name: &str) -> Option<String> {
        let v = self.execute(
            "const e = document.querySelector(arguments[0]); \
             return e ? e.getAttribute(arguments[1]) : null;",
            json!([css, name]),
        );
        v.as_str().map(str::to_owned)
    }

    /// The text of every element matching `css` now, read in one step in the page.
    pub fn texts(&self, css: &str) -> Vec<String> {
        let v = self.execute(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent);",
            json!([css]),
        );
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The text of the first element matching `css`, if there is one now.
    pub fn text(&self, css: &str) -> Option<String> {
        self.find(css).and_then(|e| self.text_of(&e).ok())
    }

    /// Waits until the first element matching `css` has a text that `ok` accepts; that text.
    pub fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut seen = String::new();
        self.wait(&format!("{what} (`{css}`)"), || {
            seen = self.text(css).unwrap_or_default();
            ok(&seen)
        });
        seen
    }

    /// Waits until an element matches `css`.
    pub fn wait_for(&self, css: &str, what: &str) {
        self.wait(&format!("{what} (`{css}`)"), || self.find(css).is_some());
    }

    /// Waits until `done` says yes; past [`DEADLINE`], panics with `what` and the page's
    /// text and address.
    pub fn wait(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + DEADLINE;
        while !done() {
            if std::time::Instant::now() >= deadline {
                panic!(
                    "gave up waiting: {what}\n--- page {} ---\n{}",
                    self.url(),
                    self.text("body").unwrap_or_default()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Clicks the first element matching `css`, waiting for one that takes the click.
    pub fn click(&self, css: &str) {
        self.wait(&format!("a click on `{css}`"), || {
            self.find(css).is_some_and(|e| {
                self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})))
                    .is_ok()
            })
        });
    }

    /// Types `text` into the first element matching `css`.
    pub fn type_into(&self, css: &str, text: &str) {
        self.wait(&format!("typing into `{css}`"), || {
            self.find(css).is_some_and(|e| {
                self.cmd(
                    "POST",
                    &format!("/element/{e}/value"),
                    Some(json!({ "text": text })),
                )
                .is_ok()
            })
        });
    }

    /// Runs `script` (a function body) in the page with `args`; its result.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .unwrap_or_else(|e| panic!("script failed: {e:?}"))
    }

    /// The browser's cookies for the page's site, `HttpOnly` ones included.
    pub fn cookies(&self) -> Vec<Value> {
        self.cmd("GET", "/cookie", None)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// Saves a PNG of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let v = self
            .cmd("GET", "/screenshot", None)
            .unwrap_or_else(|e| panic!("no screenshot: {e:?}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 text"))
            .expect("a base64 PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot directory");
        }
        std::fs::write(path, png)
            .unwrap_or_else(|e| panic!("failed to write {}: {e}", path.display()));
    }

    /// Resizes the window (for a screenshot of a whole page).
    pub fn resize(&self, width: u32, height: u32) {
        let _ = self.cmd(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }
}

/// Reads one HTTP/1.1 answer's body: chromedriver keeps the connection open after it,
/// whatever the request's `Connection: close` says, so the answer's own length ends it.
fn read_answer(stream: &mut TcpStream) -> Result<String, String> {
    let mut raw: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let body = &raw[end + 4..];
            let length = head.lines().find_map(|l| {
                l.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            });
            if let Some(n) = length
                && body.len() >= n
            {
                return Ok(String::from_utf8_lossy(&body[..n]).into_owned());
            }
            if head.contains("transfer-encoding: chunked") && body.ends_with(b"0\r\n\r\n") {
                return Ok(crate::dechunk(&String::from_utf8_lossy(body)));
            }
        }
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            let text = String::from_utf8_lossy(&raw).into_owned();
            return match text.split_once("\r\n\r\n") {
                Some((_, body)) => Ok(body.to_owned()),
                None => Err(format!("the connection closed mid-answer: {text:?}")),
            };
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.cmd("DELETE", "", None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
