//! Browser tests of the web dashboard: a real master serving the built bundle
//! (`web/dist`, from `scripts/build-web.sh`), real sim workers, and headless
//! Chromium driven over WebDriver (chromedriver + fantoccini).
//!
//! The page is driven like a user would: files go in through the file input,
//! drag and drop (a synthetic drop event carrying a real `File`) and typing
//! into the text area; buttons are clicked. Assertions read the DOM through
//! the stable ids and `data-*` attributes the components of `web/src/app/`
//! render.
//!
//! Screenshots land in `target/screenshots/*.png` (CI keeps them as artifacts).
//!
//! Without `chromium` and `chromedriver` the tests are skipped with a message,
//! unless `CI` is set: then a missing browser is a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tunefleet_tests::{bin_dir, matmul_yaml, raw, repo_root, Master, Worker, ADMIN_TOKEN};

/// One browser at a time: the machine is small and Chromium is not.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LONG: Duration = Duration::from_secs(90);
const SHORT: Duration = Duration::from_secs(30);

fn find_in_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Chromium and chromedriver, or `None` (test skipped) outside CI.
fn browser_binaries(test: &str) -> Option<(PathBuf, PathBuf)> {
    let from_env = |var: &str| -> Option<Option<PathBuf>> {
        let path = PathBuf::from(std::env::var_os(var)?);
        Some(path.is_file().then_some(path))
    };
    let chromium = from_env("TUNEFLEET_CHROMIUM")
        .unwrap_or_else(|| find_in_path(&["chromium", "chromium-browser", "google-chrome"]));
    let driver =
        from_env("TUNEFLEET_CHROMEDRIVER").unwrap_or_else(|| find_in_path(&["chromedriver"]));
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        (c, d) => {
            let missing = [("chromium", c.is_none()), ("chromedriver", d.is_none())]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(" and ");
            let msg = format!(
                "browser test {test}: {missing} not found \
                 (apt-get install chromium chromium-driver, or set TUNEFLEET_CHROMIUM / TUNEFLEET_CHROMEDRIVER)"
            );
            if ci() {
                panic!("{msg}; CI is set, so this is a failure, not a skip");
            }
            eprintln!("SKIPPED {msg}");
            None
        }
    }
}

/// The built dashboard; a clear failure when it is not built.
fn web_dist() -> PathBuf {
    let dist = repo_root().join("web/dist");
    let manifest = dist.join("assets.json");
    fn not_built(manifest: &Path) -> ! {
        panic!(
            "{} is missing: build the dashboard with scripts/build-web.sh before the browser tests",
            manifest.display()
        )
    }
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|_| not_built(&manifest));
    let served: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    for file in [
        "index.html",
        "web.js",
        "web_bg.wasm",
        "check.js",
        "check_bg.wasm",
        "style.css",
        "boot.js",
    ] {
        let name = served.get(file).unwrap_or_else(|| not_built(&manifest));
        assert!(
            dist.join(name).is_file(),
            "{} is missing: rebuild the dashboard with scripts/build-web.sh",
            dist.join(name).display()
        );
    }
    dist
}

fn screenshot_dir() -> PathBuf {
    // bin_dir() is target/debug (or target/<profile>).
    let dir = bin_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    dir
}

/// A Chrome DevTools Protocol command through chromedriver's
/// `goog/cdp/execute` endpoint (media emulation, download directory).
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"cmd": self.cmd, "params": self.params}).to_string()),
        )
    }
}

/// chromedriver + a headless Chromium session at 1366x768.
struct Browser {
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
    downloads: PathBuf,
    shots: PathBuf,
    prefix: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

impl Browser {
    async fn start(test: &str, prefix: &str) -> Option<Browser> {
        let (chromium, chromedriver) = browser_binaries(test)?;
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().expect("profile dir");
        let downloads = profile.path().join("downloads");
        std::fs::create_dir_all(&downloads).expect("downloads dir");
        let mut browser = Browser {
            client: None,
            driver,
            downloads,
            shots: screenshot_dir(),
            prefix: prefix.to_string(),
            _profile: profile,
        };
        let deadline = Instant::now() + SHORT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let user_data = browser._profile.path().join("chrome");
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-extensions",
                    "--window-size=1366,768",
                    format!("--user-data-dir={}", user_data.display()),
                ],
                "prefs": {
                    "download.default_directory": browser.downloads,
                    "download.prompt_for_download": false,
                    "profile.default_content_setting_values.automatic_downloads": 1,
                },
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("WebDriver session with headless Chromium");
        client
            .issue_cmd(Cdp {
                cmd: "Browser.setDownloadBehavior",
                params: json!({"behavior": "allow", "downloadPath": browser.downloads}),
            })
            .await
            .expect("allow downloads");
        browser.client = Some(client);
        Some(browser)
    }

    fn c(&self) -> &Client {
        self.client.as_ref().expect("session open")
    }

    async fn goto(&self, url: &str) {
        self.c().goto(url).await.expect("navigate");
    }

    async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.c()
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    async fn shot(&self, name: &str) -> PathBuf {
        // Progress bars and colours animate for 0.3 s: picture the end state.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let png = self.c().screenshot().await.expect("screenshot");
        let path = self.shots.join(format!("{}-{name}.png", self.prefix));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// Polls `script` (a function body returning a value) until it is truthy.
    async fn wait(&self, what: &str, timeout: Duration, script: &str) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.js(script, vec![]).await;
            if truthy(&v) {
                return v;
            }
            if Instant::now() > deadline {
                let shot = self
                    .shot(&format!("FAILED-{}", what.replace(' ', "-")))
                    .await;
                let text = self
                    .js("return document.body.innerText.slice(0, 3000)", vec![])
                    .await;
                panic!(
                    "timed out after {timeout:?} waiting for {what} (last value {v}); screenshot {}\npage text:\n{}",
                    shot.display(),
                    text.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn click(&self, css: &str) {
        self.c()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
    }

    async fn type_into(&self, css: &str, text: &str) {
        self.c()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("cannot type into {css}: {e}"));
    }

    /// Picks `path` in the page's file input, as a user choosing a file.
    async fn upload(&self, path: &Path) {
        self.type_into("#upload-file", &path.display().to_string())
            .await;
    }

    async fn sign_in(&self) {
        // The wasm app renders the prompt after it loads: wait, on a busy
        // machine that takes a while.
        self.wait(
            "the token prompt",
            LONG,
            "return document.querySelector('#token') !== null",
        )
        .await;
        self.type_into("#token", ADMIN_TOKEN).await;
        self.click("form.token button[type=submit]").await;
        self.wait(
            "live admin connection",
            SHORT,
            "return document.querySelector('#conn')?.dataset.state === 'live' && document.querySelector('#conn').textContent.includes('admin')",
        )
        .await;
    }

    /// `[[name, state], ...]` of the jobs table.
    async fn jobs(&self) -> Vec<(String, String)> {
        let v = self
            .js(
                "return Array.from(document.querySelectorAll('#jobs tbody tr[data-job]')).map(r => [r.dataset.name, r.dataset.state])",
                vec![],
            )
            .await;
        serde_json::from_value(v).expect("rows")
    }

    async fn emulate_dark(&self, dark: bool) {
        self.c()
            .issue_cmd(Cdp {
                cmd: "Emulation.setEmulatedMedia",
                params: json!({"features": [{"name": "prefers-color-scheme", "value": if dark { "dark" } else { "light" }}]}),
            })
            .await
            .expect("emulate prefers-color-scheme");
        // Let the colour transitions finish before anyone takes a picture.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }

    async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.close().await;
        }
    }

    fn wait_for_download(&self, name: &str) -> String {
        let path = self.downloads.join(name);
        let deadline = Instant::now() + SHORT;
        loop {
            // Chromium writes `<name>.crdownload` first and renames when
            // done, but the final name can appear (empty) before the data is
            // flushed: wait for a non-empty text that two reads agree on.
            if path.is_file() {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    std::thread::sleep(Duration::from_millis(100));
                    let again = std::fs::read_to_string(&path).unwrap_or_default();
                    if !text.is_empty() && text == again {
                        return text;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} was not downloaded (have: {:?})",
                name,
                std::fs::read_dir(&self.downloads)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A failed test never reaches close(): end the browser chromedriver
        // started (its direct children, by pid), then chromedriver itself.
        let driver_pid = self.driver.id();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                // pid (comm) state ppid ...: comm may contain spaces, so split after ')'.
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                if ppid == Some(driver_pid) {
                    tunefleet_tests::signal(pid, "TERM");
                }
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn web_args(dist: &Path) -> Vec<String> {
    vec!["--web-dir".into(), dist.display().to_string()]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A master that serves the page to anyone, read-only (`--public-read`),
/// with `flags` besides, and `n` matmul jobs named `prefix0`… loaded at
/// start from a file under `dir`.
fn public_master_with_jobs(dir: &Path, n: usize, prefix: &str, flags: &[&str]) -> Master {
    let file = dir.join(format!("{prefix}.yaml"));
    std::fs::write(&file, matmul_yaml(n, prefix)).unwrap();
    let mut extra = web_args(&web_dist());
    extra.push("--public-read".into());
    extra.extend(flags.iter().map(|f| f.to_string()));
    extra.extend(["--workloads".into(), file.display().to_string()]);
    Master::start(dir, &args(&extra))
}

const BROKEN_YAML: &str = "target: {kind: llvm, num-cores: 2}
trials: 8
workloads:
  - name: fine
    op: matmul
    shape: {m: 32, n: 32, k: 32}
  - name: broken
    op: matmul
    shape: {m: 32, n: -3, k: 32}
";

#[tokio::test]
async fn upload_submit_watch_and_download_in_the_browser() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("upload_submit_watch_and_download", "1").await else {
        return;
    };
    let dist = web_dist();
    let dir = tempfile::tempdir().unwrap();
    let mut extra = web_args(&dist);
    extra.extend(["--max-attempts".into(), "2".into()]);
    // No --public-read: the page must ask for the token.
    let master = Master::start(dir.path(), &args(&extra));
    let _w1 = Worker::start(&master, "sim-1", 2.0, &[]);
    let _w2 = Worker::start(&master, "sim-2", 2.0, &[]);
    let base = format!("http://{}", master.addr);

    browser.goto(&format!("{base}/")).await;
    browser
        .wait(
            "the token prompt",
            SHORT,
            "return document.querySelector('#conn')?.dataset.state === 'auth' && document.querySelector('#banner')?.textContent",
        )
        .await;
    browser.shot("01-token-needed").await;
    // Every resource came from the master itself: no CDN, no external font.
    let foreign = browser
        .js(
            "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith(location.origin))",
            vec![],
        )
        .await;
    assert_eq!(foreign, json!([]), "resources from elsewhere");

    // A wrong token is refused and not kept.
    browser.type_into("#token", "not-the-token").await;
    browser.click("form.token button[type=submit]").await;
    browser
        .wait(
            "the wrong token refused",
            SHORT,
            "return document.querySelector('#conn').dataset.state === 'auth' && document.querySelector('#banner')?.innerText.includes('unauthorized') && sessionStorage.getItem('tunefleet.token') === null",
        )
        .await;
    browser.sign_in().await;
    let stored = browser
        .js("return sessionStorage.getItem('tunefleet.token')", vec![])
        .await;
    assert_eq!(stored, json!(ADMIN_TOKEN), "token kept in session storage");
    browser
        .wait(
            "both workers listed",
            SHORT,
            "return document.querySelectorAll('#workers tbody tr[data-worker]').length === 2",
        )
        .await;

    // A broken file: line-numbered error with the field, nothing to submit.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, BROKEN_YAML).unwrap();
    browser.upload(&broken).await;
    let errors = browser
        .wait(
            "the validation error",
            SHORT,
            "return document.querySelector('#upload-errors')?.innerText",
        )
        .await;
    let errors = errors.as_str().unwrap();
    assert!(errors.contains("line 9"), "{errors}");
    assert!(errors.contains("workloads[1].shape.n"), "{errors}");
    assert!(errors.contains("broken.yaml"), "{errors}");
    assert!(
        errors.contains("n: -3"),
        "the offending line is quoted: {errors}"
    );
    assert_eq!(
        browser
            .js("return document.querySelector('#submit') === null", vec![])
            .await,
        json!(true)
    );
    browser.shot("02-upload-error").await;

    // A good file through the file input: preview, submit, the master's reply.
    let good = dir.path().join("six.yaml");
    std::fs::write(&good, matmul_yaml(6, "web-mm")).unwrap();
    browser.upload(&good).await;
    browser
        .wait(
            "the preview",
            SHORT,
            "return document.querySelectorAll('#preview-table tbody tr').length === 6",
        )
        .await;
    let first = browser
        .js(
            "return Array.from(document.querySelectorAll('#preview-table tbody tr:first-child td')).map(td => td.innerText.trim())",
            vec![],
        )
        .await;
    assert_eq!(
        first,
        json!([
            "web-mm0",
            "matmul",
            "m=32 n=32 k=32",
            "float32",
            "llvm num-cores=2",
            "8"
        ])
    );
    browser.shot("03-preview").await;
    browser.click("#submit").await;
    let reply = browser
        .wait(
            "the submit reply",
            SHORT,
            "return document.querySelector('#submit-result')?.innerText",
        )
        .await;
    assert!(reply.as_str().unwrap().contains("6 new jobs"), "{reply}");

    // Live updates: some job runs, then every job is done and the bar is full.
    browser
        .wait(
            "a running job",
            LONG,
            "return document.querySelector('#jobs tr[data-state=running]')",
        )
        .await;
    browser.shot("04-running").await;
    browser
        .wait(
            "every job done",
            LONG,
            "const rows = document.querySelectorAll('#jobs tbody tr[data-job]'); return rows.length === 6 && Array.from(rows).every(r => r.dataset.state === 'done')",
        )
        .await;
    browser
        .wait(
            "the overall bar at 100%",
            SHORT,
            "return document.querySelector('#overall-bar').getAttribute('aria-valuenow') === '100'",
        )
        .await;
    let text = browser
        .js(
            "return document.querySelector('#overall-text').innerText",
            vec![],
        )
        .await;
    assert!(text.as_str().unwrap().contains("6 / 6 done"), "{text}");
    browser.shot("05-all-done").await;

    // The same file again: the preview marks the jobs as known, the master skips them.
    browser.upload(&good).await;
    browser
        .wait(
            "duplicates in the preview",
            SHORT,
            "return document.querySelectorAll('#preview-table tbody tr.known').length === 6",
        )
        .await;
    browser.click("#submit").await;
    let reply = browser
        .wait(
            "the duplicate reply",
            SHORT,
            "return document.querySelector('#submit-result')?.innerText",
        )
        .await;
    assert!(
        reply
            .as_str()
            .unwrap()
            .contains("0 new jobs, 6 duplicates skipped"),
        "{reply}"
    );

    // Drag and drop: a drop event carrying a File.
    let dropped = browser
        .js(
            "const [name, text] = arguments;
             const dt = new DataTransfer();
             dt.items.add(new File([text], name, {type: 'text/yaml'}));
             const zone = document.querySelector('.drop');
             zone.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
             zone.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
             return true;",
            vec![json!("dropped.yaml"), json!(matmul_yaml(2, "dropped"))],
        )
        .await;
    assert_eq!(dropped, json!(true));
    browser
        .wait(
            "the preview of the dropped file",
            SHORT,
            "return document.querySelectorAll('#preview-table tbody tr').length === 2 && document.querySelector('.source')?.innerText.includes('dropped.yaml')",
        )
        .await;
    browser.click(".source button").await;

    // Paste (typed) into the text area: one job that fails, one that hangs.
    browser
        .type_into(
            "#upload-text",
            "target: {kind: llvm, num-cores: 2}\ntrials: 4\nworkloads:\n- {name: sim-fail-a, op: matmul, shape: {m: 8, n: 8, k: 8}}\n- {name: sim-hang-b, op: matmul, shape: {m: 8, n: 8, k: 9}}\n",
        )
        .await;
    browser
        .wait(
            "the preview of the pasted text",
            SHORT,
            "return document.querySelectorAll('#preview-table tbody tr').length === 2",
        )
        .await;
    browser.click("#submit").await;
    browser
        .wait(
            "sim-fail-a failed and sim-hang-b in flight",
            LONG,
            "return document.querySelector('#jobs tr[data-name=sim-fail-a][data-state=failed]') && document.querySelector('#jobs tr[data-name=sim-hang-b]:is([data-state=assigned], [data-state=running])')",
        )
        .await;
    // Cancel the hanging job, retry the failed one.
    browser
        .click("#jobs tr[data-name=sim-hang-b] button[data-action=cancel]")
        .await;
    browser
        .wait(
            "sim-hang-b cancelled",
            SHORT,
            "return document.querySelector('#jobs tr[data-name=sim-hang-b][data-state=cancelled]')",
        )
        .await;
    browser
        .click("#jobs tr[data-name=sim-fail-a] button[data-action=retry]")
        .await;
    browser
        .wait(
            "sim-fail-a retried and failed again",
            LONG,
            "return document.querySelector('.notices')?.innerText.includes('sim-fail-a is queued again') && document.querySelector('#jobs tr[data-name=sim-fail-a][data-state=failed]')",
        )
        .await;
    let o = browser
        .js(
            "return document.querySelector('#overall-text').innerText",
            vec![],
        )
        .await;
    let o = o.as_str().unwrap();
    assert!(
        o.contains("6 / 8 done") && o.contains("1 failed") && o.contains("1 cancelled"),
        "{o}"
    );

    // Filter and sort.
    browser.click("button.chip[data-filter=done]").await;
    assert_eq!(browser.jobs().await.len(), 6);
    browser.click("button.chip[data-filter=failed]").await;
    assert_eq!(
        browser.jobs().await,
        vec![("sim-fail-a".to_string(), "failed".to_string())]
    );
    browser.click("button.chip[data-filter=all]").await;
    browser.click("button.sort[data-sort=Name]").await;
    browser.click("button.sort[data-sort=Name]").await;
    let names: Vec<String> = browser.jobs().await.into_iter().map(|(n, _)| n).collect();
    let mut sorted = names.clone();
    sorted.sort_by_key(|n| std::cmp::Reverse(n.to_lowercase()));
    assert_eq!(names, sorted, "descending by name");

    // Downloads: JSON and CSV; MetaSchedule needs tvm records, so it is disabled here.
    browser.click("#dl-csv").await;
    let csv = browser.wait_for_download("tunefleet-results.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 9, "{csv}");
    assert!(
        lines[0].starts_with("job_id,name,op,shape,dtype,state,"),
        "{csv}"
    );
    assert_eq!(
        csv,
        tunefleet_shared::export::to_csv(&{
            let mut client = master.client().await;
            let mut jobs = client.results(None).await.unwrap();
            jobs.sort_by_key(|j| j.created_at);
            jobs
        }),
        "the browser's CSV is the CLI's CSV"
    );
    browser.click("#dl-json").await;
    let json_text = browser.wait_for_download("tunefleet-results.json");
    let jobs: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 8);
    assert_eq!(
        browser
            .js(
                "return document.querySelector('#dl-metaschedule').disabled",
                vec![]
            )
            .await,
        json!(true)
    );

    // Job detail: facts, the tuning curve, errors, records.
    browser
        .click("#jobs tr[data-name=sim-fail-a] td.name")
        .await;
    browser
        .wait(
            "the failed job's error history, retry included",
            SHORT,
            "return document.querySelectorAll('#job-errors li').length >= 3",
        )
        .await;
    browser.shot("06-detail-failed").await;
    browser.click("#jobs tr[data-name=web-mm3] td.name").await;
    browser
        .wait(
            "the tuning curve",
            SHORT,
            "const p = document.querySelector('#job-detail[data-job] #job-chart path.curve'); return p && p.getAttribute('d').length > 10 && document.querySelectorAll('#job-records tbody tr').length > 0",
        )
        .await;
    browser.shot("07-detail-curve").await;
    browser
        .js(
            "document.querySelector('#job-records').scrollIntoView({block: 'end'}); return true",
            vec![],
        )
        .await;
    browser.shot("07b-detail-records").await;

    // Dark mode through prefers-color-scheme, and the ?theme= override.
    // Dismiss the notices (their close buttons).
    browser
        .js(
            "document.querySelectorAll('.notice button').forEach(b => b.click()); return true",
            vec![],
        )
        .await;
    browser
        .wait(
            "no notices",
            SHORT,
            "return document.querySelectorAll('.notice').length === 0",
        )
        .await;
    browser.emulate_dark(true).await;
    let bg = browser
        .js(
            "return getComputedStyle(document.body).backgroundColor",
            vec![],
        )
        .await;
    assert_eq!(bg, json!("rgb(14, 18, 23)"), "dark background");
    browser.shot("08-dark-detail").await;
    // A fresh load in dark mode (headless Chromium does not repaint fixed
    // overlays such as the notices when the emulated scheme changes at run time).
    browser.goto(&format!("{base}/")).await;
    browser
        .wait(
            "the page in dark mode",
            SHORT,
            "return document.querySelectorAll('#jobs tbody tr[data-job]').length === 8 && document.querySelector('#conn').dataset.state === 'live'",
        )
        .await;
    browser.shot("09-dark-overview").await;
    browser.goto(&format!("{base}/?theme=light")).await;
    browser
        .wait(
            "the page after reload",
            SHORT,
            "return document.querySelectorAll('#jobs tbody tr[data-job]').length === 8",
        )
        .await;
    let bg = browser
        .js(
            "return getComputedStyle(document.body).backgroundColor",
            vec![],
        )
        .await;
    assert_eq!(bg, json!("rgb(244, 246, 249)"), "?theme=light wins");
    // The token survived the reload (session storage).
    browser
        .wait(
            "admin again after reload",
            SHORT,
            "return document.querySelector('#conn').textContent.includes('admin')",
        )
        .await;
    // The theme button cycles light -> system -> dark and remembers the choice.
    browser.click("header button.icon").await;
    browser.click("header button.icon").await;
    let theme = browser
        .js(
            "return [document.documentElement.dataset.theme, localStorage.getItem('tunefleet.theme')]",
            vec![],
        )
        .await;
    assert_eq!(theme, json!(["dark", "dark"]));
    browser.goto(&format!("{base}/?theme=auto")).await;
    browser.close().await;
}

#[tokio::test]
async fn a_killed_workers_job_goes_back_to_queued_then_finishes() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("killed_worker", "2").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = public_master_with_jobs(dir.path(), 1, "victim", &[]);
    let mut slow = Worker::start(&master, "sim-slow", 60.0, &[]);

    // Read-only view: no token needed, no admin buttons.
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "victim0 running on sim-slow",
            LONG,
            "const r = document.querySelector('#jobs tr[data-name=victim0]'); return r && r.dataset.state === 'running' && r.querySelector('td.worker').innerText === 'sim-slow'",
        )
        .await;
    let conn = browser
        .js("return document.querySelector('#conn').innerText", vec![])
        .await;
    assert!(conn.as_str().unwrap().contains("read-only"), "{conn}");
    assert_eq!(
        browser
            .js(
                "return document.querySelectorAll('button[data-action]').length",
                vec![]
            )
            .await,
        json!(0)
    );
    browser.shot("01-running").await;

    slow.kill9();
    browser
        .wait(
            "victim0 back to queued and the worker gone",
            LONG,
            "return document.querySelector('#jobs tr[data-name=victim0][data-state=queued]') && !document.querySelector('#workers tr[data-name=sim-slow]')",
        )
        .await;
    browser.shot("02-requeued").await;

    let _fast = Worker::start(&master, "sim-fast", 1.0, &[]);
    browser
        .wait(
            "victim0 done on the second attempt",
            LONG,
            "const r = document.querySelector('#jobs tr[data-name=victim0]'); return r && r.dataset.state === 'done' && r.querySelector('td:nth-child(4)').innerText.trim() === '2'",
        )
        .await;
    browser
        .wait(
            "the overall bar at 100%",
            SHORT,
            "return document.querySelector('#overall-bar').getAttribute('aria-valuenow') === '100'",
        )
        .await;
    browser.shot("03-done").await;
    browser.close().await;
}

#[tokio::test]
async fn archived_jobs_leave_the_list_and_stay_in_the_counts() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("archived_jobs", "2b").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = public_master_with_jobs(dir.path(), 3, "old", &["--job-retention", "0s"]);
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "three jobs listed",
            LONG,
            "return document.querySelectorAll('#jobs tr[data-name]').length === 3",
        )
        .await;
    let _worker = Worker::start(&master, "sim-fast", 0.0, &[]);
    // Done, then archived by the master within a second: the rows go, the
    // header and the overall bar still count them.
    browser
        .wait(
            "the rows archived",
            LONG,
            "const a = document.querySelector('#archived-count'); return a && a.innerText.includes('3 archived') && document.querySelectorAll('#jobs tr[data-name]').length === 0",
        )
        .await;
    browser
        .wait(
            "the overall bar at 100%",
            SHORT,
            "return document.querySelector('#overall-bar').getAttribute('aria-valuenow') === '100'",
        )
        .await;
    let empty = browser
        .js(
            "return document.querySelector('#jobs .empty, .jobs .empty').innerText",
            vec![],
        )
        .await;
    assert!(
        empty.as_str().is_some_and(|t| t.contains("archived")),
        "{empty}"
    );
    browser.shot("01-archived").await;
    // The downloads still have them, as `tunefleet export` does.
    browser.click("#dl-csv").await;
    let csv = browser.wait_for_download("tunefleet-results.csv");
    let names: Vec<&str> = csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(1))
        .collect();
    assert_eq!(names, ["old0", "old1", "old2"], "{csv}");
    browser.close().await;
}

/// The page re-renders whenever frames arrive: a field being typed in keeps
/// its focus, text and caret through those renders, and the rows and the
/// job drawer answer the keyboard (Enter opens, Escape closes).
#[tokio::test]
async fn typing_survives_renders_and_the_keyboard_opens_and_closes_a_job() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("typing_and_keyboard", "2c").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = public_master_with_jobs(dir.path(), 4, "kb", &[]);
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "four jobs listed",
            LONG,
            "return document.querySelectorAll('#jobs tbody tr[data-job]').length === 4",
        )
        .await;
    browser.type_into("#job-search", "kb").await;
    browser
        .js(
            "const i = document.querySelector('#job-search'); i.setSelectionRange(1, 1); return true",
            vec![],
        )
        .await;
    // One job at a time, a second each: progress and state changes re-render
    // the page many times while the caret sits between the two letters.
    let _worker = Worker::start(&master, "sim-kb", 1.0, &[]);
    browser
        .wait(
            "two jobs done",
            LONG,
            "return document.querySelectorAll('#jobs tbody tr[data-state=done]').length >= 2",
        )
        .await;
    let field = browser
        .js(
            "const i = document.querySelector('#job-search'); return [document.activeElement === i, i.value, i.selectionStart, document.querySelectorAll('#jobs tbody tr[data-job]').length]",
            vec![],
        )
        .await;
    assert_eq!(field, serde_json::json!([true, "kb", 1, 4]), "{field}");

    // Enter on a focused row opens its drawer; Escape in the drawer closes it.
    let key = |target: &str, key: &str| {
        format!(
            "const t = document.querySelector('{target}'); t.focus(); t.dispatchEvent(new KeyboardEvent('keydown', {{key: '{key}', bubbles: true}})); return true"
        )
    };
    browser
        .js(&key("#jobs tr[data-name=kb2]", "Enter"), vec![])
        .await;
    browser
        .wait(
            "the drawer of kb2",
            SHORT,
            "const d = document.querySelector('#job-detail'); return d && d.querySelector('h2').innerText === 'kb2'",
        )
        .await;
    browser.js(&key("#job-detail", "Escape"), vec![]).await;
    browser
        .wait(
            "the drawer closed",
            SHORT,
            "return !document.querySelector('#job-detail')",
        )
        .await;
    // The drawer's close button does the same.
    browser.click("#jobs tr[data-name=kb1] td.name").await;
    browser.click("#job-detail button[aria-label=close]").await;
    browser
        .wait(
            "the drawer closed by its button",
            SHORT,
            "return !document.querySelector('#job-detail')",
        )
        .await;
    browser.close().await;
}

#[tokio::test]
async fn the_page_reconnects_and_resyncs_after_a_master_restart() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("master_restart", "3").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut master = public_master_with_jobs(dir.path(), 4, "rs", &[]);
    let _worker = Worker::start(&master, "sim-r", 3.0, &[]);

    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "four jobs, one running",
            LONG,
            "return document.querySelectorAll('#jobs tbody tr[data-job]').length === 4 && document.querySelector('#jobs tr[data-state=running]')",
        )
        .await;

    master.kill9();
    browser
        .wait(
            "the disconnected banner",
            SHORT,
            "return document.querySelector('#banner')?.innerText.includes('lost') && document.querySelector('#conn').dataset.state !== 'live'",
        )
        .await;
    // The last known state stays on screen.
    assert_eq!(browser.jobs().await.len(), 4);
    browser.shot("01-disconnected").await;

    master.restart();
    browser
        .wait(
            "live again",
            LONG,
            "return document.querySelector('#conn').dataset.state === 'live' && !document.querySelector('#banner')",
        )
        .await;
    // Resynced from the new snapshot: the same four rows, no duplicates.
    let rows = browser.jobs().await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    let mut names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    assert_eq!(names.len(), 4, "{rows:?}");
    browser
        .wait(
            "every job done after the restart",
            LONG,
            "const rows = document.querySelectorAll('#jobs tbody tr[data-job]'); return rows.length === 4 && Array.from(rows).every(r => r.dataset.state === 'done') && document.querySelector('#overall-bar').getAttribute('aria-valuenow') === '100'",
        )
        .await;
    browser.shot("02-resynced-done").await;
    browser.close().await;
}

/// The sign-in link `tunefleet serve` prints on its standard error once it
/// listens (`http://HOST:PORT/#token=…`, as Jupyter's), read from its log.
fn printed_sign_in_link(master: &Master) -> String {
    let prefix = format!("http://{}/#token=", master.addr);
    let deadline = Instant::now() + SHORT;
    loop {
        let log = master.log();
        if let Some(at) = log.find(&prefix) {
            let link = log[at..].split_whitespace().next().unwrap_or_default();
            return link.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no line with {prefix} on the master's stderr:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The link the master prints signs the page in: admin controls without a
/// token typed, the token kept as a typed one is, and gone from the address.
#[tokio::test]
async fn the_printed_sign_in_link_opens_the_dashboard_signed_in() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("sign_in_link", "2d").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("link.yaml");
    std::fs::write(&file, matmul_yaml(1, "link")).unwrap();
    // No --public-read: without the token the page shows nothing.
    let mut extra = web_args(&web_dist());
    extra.extend(["--workloads".into(), file.display().to_string()]);
    let master = Master::start(dir.path(), &args(&extra));
    let link = printed_sign_in_link(&master);
    assert_eq!(
        link,
        format!("http://{}/#token={ADMIN_TOKEN}", master.addr),
        "the printed link"
    );

    browser.goto(&link).await;
    browser
        .wait(
            "live as admin without typing the token",
            LONG,
            "return document.querySelector('#conn')?.dataset.state === 'live' && document.querySelector('#conn').textContent.includes('admin')",
        )
        .await;
    browser
        .wait(
            "the admin controls",
            SHORT,
            "return document.querySelector('#jobs tr[data-name=link0] button[data-action=cancel]') && document.querySelector('#sign-out') && !document.querySelector('#token')",
        )
        .await;
    let state = browser
        .js(
            "return [sessionStorage.getItem('tunefleet.token'), location.hash, location.href.includes('token')]",
            vec![],
        )
        .await;
    assert_eq!(
        state,
        json!([ADMIN_TOKEN, "", false]),
        "the token is stored and gone from the address bar"
    );
    browser.shot("01-signed-in-by-link").await;

    // A reload keeps the session (the token is in session storage now).
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "admin again after a reload without the fragment",
            LONG,
            "return document.querySelector('#conn')?.dataset.state === 'live' && document.querySelector('#conn').textContent.includes('admin')",
        )
        .await;
    browser.close().await;
}

/// Text that comes with the data (a job's name, a file's line) is shown as
/// text, whatever it looks like: never parsed as markup, never run.
#[tokio::test]
async fn markup_in_the_data_is_shown_as_text() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("markup_as_text", "2e").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let name = r#"<img src=x onerror="window.pwned=1"><b>bold</b>&amp;"#;
    let file = dir.path().join("markup.yaml");
    std::fs::write(
        &file,
        format!(
            "target: {{kind: llvm, num-cores: 2}}\ntrials: 8\nworkloads:\n  - name: '{name}'\n    op: matmul\n    shape: {{m: 8, n: 8, k: 8}}\n"
        ),
    )
    .unwrap();
    let mut extra = web_args(&web_dist());
    extra.extend([
        "--public-read".into(),
        "--workloads".into(),
        file.display().to_string(),
    ]);
    let master = Master::start(dir.path(), &args(&extra));
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "the job listed",
            LONG,
            "return document.querySelectorAll('#jobs tbody tr[data-job]').length === 1",
        )
        .await;
    let shown = browser
        .js(
            "const r = document.querySelector('#jobs tbody tr[data-job]');
             return [r.dataset.name, r.querySelector('td.name div').textContent,
                     document.querySelectorAll('#jobs img, #jobs tbody b').length,
                     window.pwned ?? null]",
            vec![],
        )
        .await;
    assert_eq!(
        shown,
        json!([name, name, 0, null]),
        "the name is text, not markup"
    );
    // Its drawer too.
    browser.click("#jobs tbody tr[data-job] td.name").await;
    let title = browser
        .wait(
            "the drawer",
            SHORT,
            "return document.querySelector('#job-detail h2')?.textContent",
        )
        .await;
    assert_eq!(title, json!(name));

    // A line of a pasted file, quoted in its error, is text as well.
    browser
        .type_into(
            "#upload-text",
            "target: {kind: llvm}\nworkloads:\n  - {name: '<i>x</i>', op: matmul, shape: {m: 8, n: -1, k: 8}}\n",
        )
        .await;
    let quoted = browser
        .wait(
            "the error quoting the line",
            LONG,
            "return document.querySelector('#upload-errors pre.src')?.textContent",
        )
        .await;
    assert!(quoted.as_str().unwrap().contains("<i>x</i>"), "{quoted}");
    assert_eq!(
        browser
            .js(
                "return [document.querySelectorAll('#upload-errors i').length, window.pwned ?? null]",
                vec![]
            )
            .await,
        json!([0, null])
    );
    browser.shot("01-markup-as-text").await;
    browser.close().await;
}

/// Registers a scripted worker that says it has the tvm backend; returns its token.
async fn register_fake_tvm(ws: &mut raw::Ws, worker_id: &str) -> String {
    raw::send(
        ws,
        json!({
            "type": "register", "protocol": 1, "worker_id": worker_id, "name": "fake-tvm",
            "target": {"kind": "llvm", "num-cores": 2}, "backend": "tvm", "tvm_version": "0.27.0"
        }),
    )
    .await;
    let registered = raw::next_of_type(ws, "registered").await;
    registered["token"].as_str().expect("token").to_string()
}

/// A scripted worker that "tunes" one job the way the tvm backend reports it:
/// records in MetaSchedule's JSON form and the workload in database form.
async fn fake_tvm_worker_finishes_one_job(master: &Master) {
    let mut ws = raw::connect(&format!("{}/ws/worker", master.url())).await;
    let token = register_fake_tvm(&mut ws, "fake-tvm").await;
    raw::send(&mut ws, json!({"type": "request_job", "token": token})).await;
    let assign = raw::next_of_type(&mut ws, "assign").await;
    let record = |l: f64| json!([{"insts": [], "decisions": []}, [l], {"kind": "llvm"}, []]);
    raw::send(&mut ws, json!({
        "type": "result", "token": token, "job_id": assign["job_id"], "lease": assign["lease"],
        "result": {
            "best_latency_s": 1e-5, "gflops": 6.5, "trials": 8, "wall_time_s": 0.5,
            "backend": "tvm", "tvm_version": "0.27.0",
            "records": [{"latency_s": 1e-5, "record": record(1e-5)}, {"latency_s": 2e-5, "record": record(2e-5)}],
            "extra": {"workload": ["1234567890", "eyJmYWtlIjp0cnVlfQ=="]}
        }
    })).await;
    let ack = raw::next_of_type(&mut ws, "ack").await;
    assert_eq!(ack["accepted"], json!(true), "{ack}");
    let _ = ws.close(None).await;
}

#[tokio::test]
async fn metaschedule_database_download() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("metaschedule_download", "4").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = public_master_with_jobs(dir.path(), 1, "ms", &[]);
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser
        .wait(
            "the job, MetaSchedule download disabled",
            SHORT,
            "return document.querySelector('#jobs tr[data-name=ms0][data-state=queued]') && document.querySelector('#dl-metaschedule').disabled",
        )
        .await;
    fake_tvm_worker_finishes_one_job(&master).await;
    browser
        .wait(
            "the MetaSchedule download enabled",
            SHORT,
            "return document.querySelector('#jobs tr[data-name=ms0][data-state=done]') && !document.querySelector('#dl-metaschedule').disabled",
        )
        .await;
    browser.click("#dl-metaschedule").await;
    let workloads = browser.wait_for_download("database_workload.json");
    let records = browser.wait_for_download("database_tuning_record.json");
    let jobs = master.client().await.results(None).await.unwrap();
    let db = tunefleet_shared::export::metaschedule_database(&jobs).unwrap();
    assert_eq!(workloads, db.workloads);
    assert_eq!(records, db.records);
    assert_eq!(workloads, "[\"1234567890\",\"eyJmYWtlIjp0cnVlfQ==\"]\n");
    assert_eq!(records.lines().count(), 2);
    browser.shot("01-metaschedule").await;
    browser.close().await;
}

/// The venv's `onnx/backend/test/data/light` directory (models shipped inside
/// the `onnx` wheel), if the venv has onnx.
fn light_models() -> Option<PathBuf> {
    let lib = repo_root().join(".venv/lib");
    std::fs::read_dir(lib).ok()?.flatten().find_map(|entry| {
        let dir = entry
            .path()
            .join("site-packages/onnx/backend/test/data/light");
        dir.is_dir().then_some(dir)
    })
}

/// Sets an input's value as typing would: the old text goes, `input` fires.
async fn retype(browser: &Browser, css: &str, text: &str) {
    browser
        .js(
            "const i = document.querySelector(arguments[0]); i.value = ''; i.dispatchEvent(new Event('input', {bubbles: true})); return true",
            vec![json!(css)],
        )
        .await;
    browser.type_into(css, text).await;
}

#[tokio::test]
async fn an_onnx_model_is_checked_in_the_browser_submitted_and_listed() {
    let _serial = SERIAL.lock().await;
    let Some(light) = light_models() else {
        let msg = "browser test onnx_model_upload: no .venv/lib/*/site-packages/onnx/backend/test/data/light \
                   (the venv's onnx wheel ships light_squeezenet.onnx; scripts/setup-tvm.sh installs it)";
        if ci() {
            panic!("{msg}; CI is set, so this is a failure, not a skip");
        }
        eprintln!("SKIPPED {msg}");
        return;
    };
    // chromedriver takes only canonical paths for file inputs.
    let model = light
        .join("light_squeezenet.onnx")
        .canonicalize()
        .expect("light_squeezenet.onnx in the venv's onnx wheel");
    let Some(browser) = Browser::start("onnx_model_upload", "5").await else {
        return;
    };
    let dist = web_dist();
    let dir = tempfile::tempdir().unwrap();
    // No worker: the extract job stays queued, the run stays `extracting`.
    let master = Master::start(dir.path(), &args(&web_args(&dist)));
    browser.goto(&format!("http://{}/", master.addr)).await;
    browser.sign_in().await;

    // A file named .onnx that is not a model: a clear error, nothing sent.
    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, "target: {kind: llvm}\nworkloads: []\n").unwrap();
    browser.upload(&bad).await;
    let errors = browser
        .wait(
            "the not-a-model error",
            SHORT,
            "return document.querySelector('#upload-errors')?.innerText",
        )
        .await;
    let errors = errors.as_str().unwrap();
    assert!(errors.contains("bad.onnx"), "{errors}");
    assert!(errors.contains("not an ONNX model"), "{errors}");
    assert!(errors.contains("nothing was sent"), "{errors}");
    assert_eq!(
        browser
            .js(
                "return [document.querySelector('#model-preview'), document.querySelector('#submit-model'), document.querySelector('#models')]",
                vec![]
            )
            .await,
        json!([null, null, null]),
        "no preview, no submit button, no model run"
    );
    browser.shot("01-not-onnx").await;

    // The model: its preview, checked and stripped in the page.
    browser.upload(&model).await;
    let inputs = browser
        .wait(
            "the model preview",
            SHORT,
            "return document.querySelector('#model-inputs tbody tr[data-input=data_0]')?.innerText",
        )
        .await;
    let inputs = inputs.as_str().unwrap();
    assert!(inputs.contains("float32"), "{inputs}");
    assert!(inputs.contains("1×3×224×224"), "{inputs}");
    let preview = browser
        .js(
            "return document.querySelector('#model-preview').innerText",
            vec![],
        )
        .await;
    let preview = preview.as_str().unwrap();
    for expected in [
        "ONNX model",
        "nodes",
        "op types",
        "Conv",
        "not uploaded",
        "random weights",
    ] {
        assert!(preview.contains(expected), "`{expected}` in:\n{preview}");
    }
    assert!(
        browser
            .js("return document.querySelector('.source').innerText", vec![])
            .await
            .as_str()
            .unwrap()
            .contains("light_squeezenet.onnx"),
        "the file name is shown"
    );
    let defaults = browser
        .js(
            "return [document.querySelector('#model-name').value, document.querySelector('#model-trials').value, document.querySelectorAll('.model-shape').length]",
            vec![],
        )
        .await;
    assert_eq!(defaults, json!(["light_squeezenet", "2000", 0]));

    // A bad run name is caught before anything is sent.
    retype(&browser, "#model-name", "web squeeze").await;
    let problem = browser
        .wait(
            "the name problem",
            SHORT,
            "return document.querySelector('#model-problems')?.innerText",
        )
        .await;
    assert!(
        problem.as_str().unwrap().contains("may only hold"),
        "{problem}"
    );
    assert_eq!(
        browser
            .js(
                "return document.querySelector('#submit-model').disabled",
                vec![]
            )
            .await,
        json!(true)
    );
    retype(&browser, "#model-name", "web-squeeze").await;
    retype(&browser, "#model-trials", "32").await;
    browser
        .wait(
            "a clean form",
            SHORT,
            "return !document.querySelector('#model-problems') && !document.querySelector('#submit-model').disabled",
        )
        .await;
    browser
        .js(
            "document.querySelector('#model-preview').scrollIntoView({block: 'center'}); return true",
            vec![],
        )
        .await;
    browser.shot("02-model-preview").await;

    browser.click("#submit-model").await;
    let reply = browser
        .wait(
            "the submit reply",
            SHORT,
            "return document.querySelector('#submit-result')?.innerText",
        )
        .await;
    assert!(
        reply
            .as_str()
            .unwrap()
            .contains("model run `web-squeeze` accepted: extracting tasks"),
        "{reply}"
    );

    // The run in the Models card, extracting (no TVM worker to extract it).
    let row = "#models tr.model-row[data-model=web-squeeze]";
    browser
        .wait(
            "the run in the Models card",
            SHORT,
            &format!(
                "const r = document.querySelector('{row}'); return r && r.dataset.state === 'extracting' && r.querySelector('.model-state').innerText.trim() === 'extracting'"
            ),
        )
        .await;
    let trials = browser
        .js(
            &format!("return document.querySelector('{row} .model-trials').innerText"),
            vec![],
        )
        .await;
    assert_eq!(trials, json!("0/32"));
    browser.click(&format!("{row} td.name")).await;
    let detail = browser
        .wait(
            "the run's detail",
            SHORT,
            "return document.querySelector('#model-detail[data-model=web-squeeze]')?.innerText",
        )
        .await;
    let detail = detail.as_str().unwrap();
    assert!(detail.contains("Not extracted yet"), "{detail}");
    assert!(detail.contains("0 / 32"), "{detail}");
    browser
        .js("window.scrollTo(0, 0); return true", vec![])
        .await;
    browser.shot("03-models-card").await;

    // The master has the run, as the CLI sees it.
    let out = master.cli(&["results", "--model", "web-squeeze", "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view: Value = serde_json::from_slice(&out.stdout).expect("results --model json");
    assert_eq!(view["name"], json!("web-squeeze"));
    assert_eq!(view["state"], json!("extracting"));
    assert_eq!(view["trials_total"], json!(32));

    // The same name again is caught in the page.
    browser.upload(&model).await;
    browser
        .wait(
            "the model preview again",
            SHORT,
            "return document.querySelector('#model-name')?.value === 'light_squeezenet'",
        )
        .await;
    retype(&browser, "#model-name", "web-squeeze").await;
    let problem = browser
        .wait(
            "the taken name",
            SHORT,
            "return document.querySelector('#model-problems')?.innerText",
        )
        .await;
    assert!(
        problem
            .as_str()
            .unwrap()
            .contains("already has a model run named `web-squeeze`"),
        "{problem}"
    );
    browser.close().await;
}

/// A scripted worker with the tvm backend that runs a whole model run the way
/// a real one reports it: the extract job returns three tasks (one trivial),
/// each round returns records that get faster round by round, and the
/// compile job returns verified latencies. Returns once the compile result is
/// acknowledged.
async fn fake_tvm_worker_runs_a_model(master: &Master) {
    let mut ws = raw::connect(&format!("{}/ws/worker", master.url())).await;
    let token = register_fake_tvm(&mut ws, "fake-tvm-model").await;
    let record = |l: f64| json!([{"insts": [], "decisions": []}, [l], {"kind": "llvm"}, []]);
    let mut rounds = 0u32;
    loop {
        raw::send(&mut ws, json!({"type": "request_job", "token": token})).await;
        let assign = raw::next_of_type(&mut ws, "assign").await;
        let workload = &assign["workload"];
        let stage = workload["model"]["stage"].as_str().unwrap_or_default();
        let (best, trials, records, extra) = match (workload["op"].as_str(), stage) {
            (Some("model"), "extract") => (
                0.0,
                0,
                json!([]),
                json!({
                    "tasks": [
                        {"name": "fused_conv2d_add_relu", "weight": 8, "tvmscript": "# conv\n", "flops": 2.0e8},
                        {"name": "fused_conv2d_add_relu_concatenate", "weight": 4, "tvmscript": "# fire\n", "flops": 1.0e8},
                        {"name": "softmax", "weight": 1, "tvmscript": "# softmax\n", "trivial": true}
                    ],
                    "inputs": [{"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}],
                    "params": [], "outputs": []
                }),
            ),
            (Some("model"), "compile") => (
                0.0,
                0,
                json!([]),
                json!({
                    "latency_s": {"untuned": 4.2e-3, "tuned": 1.05e-3, "onnxruntime": 1.4e-3},
                    "verified": true, "applied": 2, "tuned_functions": 2,
                    "max_abs_err": 1e-6, "tolerance": 1e-4
                }),
            ),
            (Some("tvmscript"), _) => {
                rounds += 1;
                let trials = workload["trials"].as_u64().unwrap_or(16) as u32;
                // Each round is faster than the last.
                let l = 1e-4 / f64::from(rounds);
                (
                    l,
                    trials,
                    json!([{"latency_s": l, "record": record(l)}, {"latency_s": 2.0 * l, "record": record(2.0 * l)}]),
                    json!({"workload": [format!("{:x}", 4096 + rounds), "eyJmYWtlIjp0cnVlfQ=="]}),
                )
            }
            _ => panic!("the fake worker does not know this job: {assign}"),
        };
        raw::send(&mut ws, json!({
            "type": "result", "token": token, "job_id": assign["job_id"], "lease": assign["lease"],
            "result": {
                "best_latency_s": best, "trials": trials, "wall_time_s": 0.5,
                "backend": "tvm", "tvm_version": "0.27.0", "records": records, "extra": extra
            }
        })).await;
        let ack = raw::next_of_type(&mut ws, "ack").await;
        assert_eq!(ack["accepted"], json!(true), "{ack}");
        if stage == "compile" {
            break;
        }
    }
    let _ = ws.close(None).await;
}

#[tokio::test]
async fn a_finished_model_run_shows_latencies_curve_and_tasks() {
    let _serial = SERIAL.lock().await;
    let Some(light) = light_models() else {
        let msg = "browser test model_run_detail: no .venv/lib/*/site-packages/onnx/backend/test/data/light";
        if ci() {
            panic!("{msg}; CI is set, so this is a failure, not a skip");
        }
        eprintln!("SKIPPED {msg}");
        return;
    };
    let Some(browser) = Browser::start("model_run_detail", "6").await else {
        return;
    };
    let dist = web_dist();
    let dir = tempfile::tempdir().unwrap();
    let mut extra = web_args(&dist);
    extra.push("--public-read".into());
    let master = Master::start(dir.path(), &args(&extra));
    let model = light.join("light_squeezenet.onnx");
    let out = Command::new(tunefleet_tests::bin("tunefleet"))
        .arg("submit")
        .arg(&model)
        .args(["--name", "sq", "--trials", "64", "--server", &master.url()])
        .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run tunefleet submit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    browser.goto(&format!("http://{}/", master.addr)).await;
    let row = "#models tr.model-row[data-model=sq]";
    browser
        .wait(
            "the run, extracting",
            SHORT,
            &format!("return document.querySelector('{row}[data-state=extracting]')"),
        )
        .await;
    tokio::time::timeout(LONG, fake_tvm_worker_runs_a_model(&master))
        .await
        .expect("the fake worker ran the whole model");
    browser
        .wait(
            "the run done",
            SHORT,
            &format!("return document.querySelector('{row}[data-state=done]')"),
        )
        .await;
    let cells = browser
        .js(
            &format!("return Array.from(document.querySelectorAll('{row} td')).map(td => td.innerText.trim())"),
            vec![],
        )
        .await;
    let cells: Vec<String> = serde_json::from_value(cells).unwrap();
    assert_eq!(cells[1], "done", "{cells:?}");
    assert_eq!(cells[2], "64/64", "{cells:?}");
    assert_eq!(cells[4], "4.200 ms", "{cells:?}");
    assert!(cells[5].contains("1.050 ms"), "{cells:?}");
    assert!(cells[5].contains("4.0× faster than untuned"), "{cells:?}");
    assert!(cells[6].contains("1.400 ms"), "{cells:?}");
    assert!(cells[6].contains("0.75× onnxruntime's time"), "{cells:?}");
    assert_eq!(cells[7], "yes", "{cells:?}");
    assert_eq!(cells[8], "2/2", "{cells:?}");

    browser.shot("01-model-done").await;
    browser.click(&format!("{row} td.name")).await;
    browser
        .wait(
            "the estimate curve and the task table",
            SHORT,
            "const p = document.querySelector('#model-detail[data-model=sq] #model-chart path.curve'); return p && p.getAttribute('d').length > 10 && document.querySelectorAll('#model-tasks tbody tr').length === 3",
        )
        .await;
    let tasks = browser
        .js(
            "return Array.from(document.querySelectorAll('#model-tasks tbody tr')).map(r => Array.from(r.querySelectorAll('td')).map(td => td.innerText.trim()))",
            vec![],
        )
        .await;
    let tasks: Vec<Vec<String>> = serde_json::from_value(tasks).unwrap();
    let softmax = tasks.iter().find(|t| t[0] == "softmax").expect("softmax");
    assert_eq!(softmax[5], "trivial: default schedule", "{tasks:?}");
    let conv = tasks
        .iter()
        .find(|t| t[0] == "fused_conv2d_add_relu")
        .expect("conv");
    assert_eq!(conv[1], "8", "{tasks:?}");
    assert!(conv[4].ends_with('%'), "{tasks:?}");
    // A fresh fleet: every round full size, nothing said of first rounds.
    let facts = browser
        .js(
            "return document.querySelector('#model-detail .facts').innerText",
            vec![],
        )
        .await;
    let facts = facts.as_str().unwrap_or_default();
    assert!(facts.contains("64 / 64 (16 per round)"), "{facts}");
    browser
        .js(
            "document.querySelector('#model-detail').scrollIntoView({block: 'start'}); window.scrollBy(0, -60); return true",
            vec![],
        )
        .await;
    browser.shot("02-model-done-detail").await;
    browser.close().await;
}

/// What the browser fetched, from the Resource Timing API: the page itself
/// and every resource, with the bytes on the wire (headers included) and
/// the decoded body sizes.
async fn transfers(browser: &Browser) -> Vec<(String, u64, u64, u64)> {
    let v = browser
        .js(
            "const all = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
             return all.map(e => [new URL(e.name).pathname, e.transferSize, e.encodedBodySize, e.decodedBodySize]);",
            vec![],
        )
        .await;
    serde_json::from_value(v).expect("resource timings")
}

#[tokio::test]
async fn the_first_load_is_small_and_the_checker_comes_when_needed() {
    let _serial = SERIAL.lock().await;
    let Some(browser) = Browser::start("first_load", "7").await else {
        return;
    };
    let dist = web_dist();
    let dir = tempfile::tempdir().unwrap();
    let mut extra = web_args(&dist);
    extra.push("--public-read".into());
    let master = Master::start(dir.path(), &args(&extra));
    let base = format!("http://{}/", master.addr);

    browser.goto(&base).await;
    browser
        .wait(
            "the live fleet",
            LONG,
            "return document.querySelector('#conn')?.dataset.state === 'live'",
        )
        .await;
    let first = transfers(&browser).await;
    let on_wire: u64 = first.iter().map(|t| t.1).sum();
    let decoded: u64 = first.iter().map(|t| t.3).sum();
    let first_render = browser
        .js(
            "return performance.getEntriesByName('tunefleet-first-render')[0]?.startTime ?? null",
            vec![],
        )
        .await;
    eprintln!(
        "FIGURE first load: {on_wire} bytes transferred for {decoded} bytes of files; first render at {first_render} ms after navigation start; {first:?}"
    );
    assert!(
        first_render.as_f64().is_some(),
        "the app marks its first render"
    );
    // The byte budget (issue 32): the goal is under 150 KB, the hard limit
    // 200 KB. The goal is reported, the limit enforced.
    eprintln!(
        "FIGURE first load against the budget: {on_wire} bytes; goal 150,000 {}; hard limit 200,000",
        if on_wire < 150_000 { "met" } else { "NOT met" }
    );
    assert!(
        on_wire < 200_000,
        "first load {on_wire} bytes: over the hard limit of 200,000"
    );
    // Only the page's own module: the checker waits for the upload box.
    assert!(
        first.iter().any(|t| t.0.starts_with("/web_bg-")),
        "{first:?}"
    );
    assert!(
        !first.iter().any(|t| t.0.starts_with("/check")),
        "the checker was fetched on first load: {first:?}"
    );
    // Compressed on the wire: the wasm is far smaller than what it decodes to.
    for (path, _, encoded, size) in first.iter().filter(|t| t.0.ends_with(".wasm")) {
        assert!(
            encoded * 2 < *size,
            "{path}: {encoded} bytes on the wire for {size} bytes: not compressed"
        );
    }

    // The upload box fetches the checker, and the preview follows.
    browser
        .type_into(
            "#upload-text",
            "target: {kind: llvm}\nworkloads:\n  - {name: lazy, op: matmul, shape: {m: 8, n: 8, k: 8}}\n",
        )
        .await;
    browser
        .wait(
            "the preview from the checker",
            LONG,
            "return document.querySelector('#preview-table tbody tr td.name')?.textContent.includes('lazy')",
        )
        .await;
    let later = transfers(&browser).await;
    let checker: Vec<_> = later.iter().filter(|t| t.0.starts_with("/check")).collect();
    assert_eq!(checker.len(), 2, "check.js and check_bg.wasm: {later:?}");
    eprintln!(
        "FIGURE checker: {} bytes transferred when the upload box is first used",
        checker.iter().map(|t| t.1).sum::<u64>()
    );
    browser.shot("01-checked-by-the-lazy-module").await;

    // A second visit takes the hashed assets from the cache: nothing on the
    // wire for them, only the page itself is revalidated.
    browser.goto(&base).await;
    browser
        .wait(
            "the live fleet again",
            LONG,
            "return document.querySelector('#conn')?.dataset.state === 'live'",
        )
        .await;
    let again = transfers(&browser).await;
    for (path, wire, _, _) in again.iter().filter(|t| t.0.contains('-')) {
        assert_eq!(*wire, 0, "{path} was fetched again: {again:?}");
    }
    eprintln!(
        "FIGURE second visit: {} bytes transferred",
        again.iter().map(|t| t.1).sum::<u64>()
    );
    browser.close().await;
}
