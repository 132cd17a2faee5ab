//! `collector serve`: the viewer the report bakes, served over HTTP, with its traces streamed to
//! the page as their runs write them, so a browser (beside the run, or through an ssh tunnel)
//! shows the charts and the verdict of a run still going.
//!
//! Why it is built this way:
//! - **The recorder never waits for a viewer**: the server reads the trace *file* (crash-safe,
//!   flushed at least once a second), never a socket to the recorder; any number of pages cost
//!   the run nothing but a file read each.
//! - **Plain fetches, not a held stream**: the page asks for `/trace/N?from=OFFSET` and gets the
//!   bytes from that offset on; when there are none yet the request waits up to
//!   [`LONG_POLL`] for some (a long poll), then answers empty. Each request ends, so a page that
//!   goes away leaves nothing running, and proxies or tunnels that buffer streams do not delay it.
//! - **Read-only and closed**: two addresses exist (`/` and `/trace/N`); no request writes; no
//!   path names a file (traces are numbered, given on the command line); other methods, paths,
//!   offsets past the end and other origins get a 4xx and nothing else. The page keeps the
//!   report's Content-Security-Policy, with `connect-src 'self'` added so it may fetch its traces.
//! - **Loopback by default**: bound to 127.0.0.1, and answering only requests that name a
//!   loopback host (a DNS-rebinding page names its own); `--host` binds elsewhere and then every
//!   request must carry a random token, printed once at start.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use oomscope_report::page::{LIVE_ATTRIBUTE, trace_element_id};

use crate::report::{Network, Viewer, page};

/// How long a request for bytes not yet written waits for them before answering empty.
pub const LONG_POLL: Duration = Duration::from_secs(2);

/// How often a waiting request looks at the file's size.
const POLL: Duration = Duration::from_millis(50);

/// Most bytes one answer carries (the page asks again from where it got to).
pub const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// A trace the server follows.
#[derive(Debug, Clone)]
pub struct Served {
    /// What the page calls it.
    pub name: String,
    /// Its file (which may not exist yet).
    pub path: PathBuf,
}

/// What a request gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The page.
    Page,
    /// A trace's bytes from the asked offset (empty: none were written within [`LONG_POLL`]);
    /// `waiting`: the file does not exist yet.
    Bytes {
        /// The bytes.
        bytes: Vec<u8>,
        /// The trace's file does not exist yet.
        waiting: bool,
    },
    /// Refused: the status and a one-line reason (the body, as plain text).
    Refused(u16, &'static str),
}

/// The server's state: the page, the traces, and who may ask.
#[derive(Debug)]
pub struct Site {
    traces: Vec<Served>,
    token: Option<String>,
    /// A host name requests may name besides loopback's (`--host`).
    host: Option<String>,
    page: String,
    csp: String,
}

impl Site {
    /// The site serving `traces` with `viewer`; with a `token`, every request must carry it
    /// (`?token=…`); `host`: the name or address given to `--host`.
    pub fn new(
        viewer: &Viewer,
        traces: Vec<Served>,
        token: Option<String>,
        host: Option<String>,
    ) -> Result<Site> {
        let mut elements = String::new();
        for (i, t) in traces.iter().enumerate() {
            let mut address = format!("/trace/{i}?");
            if let Some(token) = &token {
                address.push_str(&format!("token={token}&"));
            }
            elements.push_str(&format!(
                "<script id=\"{}\" type=\"application/octet-stream\" data-name=\"{}\" \
                 {LIVE_ATTRIBUTE}=\"{}\"></script>\n",
                trace_element_id(i),
                STANDARD.encode(t.name.as_bytes()),
                STANDARD.encode(address.as_bytes()),
            ));
        }
        let page = page(viewer, &elements, Network::SameOrigin)?;
        Ok(Site {
            traces,
            token,
            host,
            page: page.html,
            csp: page.csp,
        })
    }

    /// The page's HTML.
    pub fn page(&self) -> &str {
        &self.page
    }

    /// The page's Content-Security-Policy, sent as a header too (with `frame-ancestors`, which
    /// only a header can say).
    pub fn csp(&self) -> &str {
        &self.csp
    }

    /// The answer to `method url`, with `header` giving a request header's value by its
    /// (lower-case) name. Waits up to [`LONG_POLL`] for bytes not yet written.
    pub fn answer(
        &self,
        method: &str,
        url: &str,
        header: impl Fn(&str) -> Option<String>,
    ) -> Answer {
        if method != "GET" && method != "HEAD" {
            return Answer::Refused(405, "read-only: only GET");
        }
        let Some(host) = header("host") else {
            return Answer::Refused(400, "no Host header");
        };
        if !self.host_allowed(&host) {
            return Answer::Refused(403, "this server answers only the host it was started for");
        }
        // A fetch from another site's page carries its origin: never answered.
        if let Some(origin) = header("origin")
            && origin != format!("http://{host}")
        {
            return Answer::Refused(403, "requests from another origin are refused");
        }
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let param = |name: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        };
        if let Some(token) = &self.token
            && !param("token").is_some_and(|t| same(t.as_bytes(), token.as_bytes()))
        {
            return Answer::Refused(403, "this server needs the token it printed at start");
        }
        if path == "/" {
            return Answer::Page;
        }
        let Some(index) = path.strip_prefix("/trace/") else {
            return Answer::Refused(404, "not found");
        };
        let Some(trace) = index
            .parse::<usize>()
            .ok()
            .filter(|_| index.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|i| self.traces.get(i))
        else {
            return Answer::Refused(404, "not found");
        };
        let Some(from) = param("from").and_then(|f| f.parse::<u64>().ok()) else {
            return Answer::Refused(400, "from=OFFSET (bytes) is needed");
        };
        match bytes_from(&trace.path, from, LONG_POLL) {
            Ok(Some(bytes)) => Answer::Bytes {
                bytes,
                waiting: false,
            },
            Ok(None) if from == 0 => Answer::Bytes {
                bytes: Vec::new(),
                waiting: true,
            },
            Ok(None) | Err(BeyondEnd) => Answer::Refused(416, "past the trace's end"),
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        // `name:port`, `[v6]:port` or a bare name.
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let name = name.to_ascii_lowercase();
        ["127.0.0.1", "localhost", "[::1]"].contains(&name.as_str())
            || self
                .host
                .as_ref()
                .is_some_and(|h| h.eq_ignore_ascii_case(&name) || *h == "0.0.0.0" || *h == "::")
    }
}

/// Compares without stopping at the first differing byte (a token is not guessed by timing).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An offset past the end of the file.
#[derive(Debug)]
struct BeyondEnd;

/// The bytes of `path` from `from` on (at most [`MAX_ANSWER_BYTES`]), waiting up to `wait` for
/// some when there are none yet; `None` when the file does not exist (yet).
fn bytes_from(
    path: &std::path::Path,
    from: u64,
    wait: Duration,
) -> Result<Option<Vec<u8>>, BeyondEnd> {
    let deadline = Instant::now() + wait;
    loop {
        let len = match std::fs::metadata(path) {
            Ok(m) => Some(m.len()),
            Err(_) => None,
        };
        match len {
            Some(len) if from > len => return Err(BeyondEnd),
            Some(len) if from < len => {
                let take = (len - from).min(MAX_ANSWER_BYTES);
                let mut bytes = Vec::with_capacity(take as usize);
                let read = File::open(path).and_then(|mut f| {
                    f.seek(SeekFrom::Start(from))?;
                    f.take(take).read_to_end(&mut bytes)
                });
                return Ok(read.ok().map(|_| bytes));
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Ok(len.map(|_| Vec::new()));
        }
        std::thread::sleep(POLL);
    }
}

/// A random token: 128 bits from the kernel, as hex.
pub fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom for a token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_testkit::Scratch;

    fn site(s: &Scratch, token: Option<&str>) -> Site {
        let viewer = Viewer::for_tests();
        Site::new(
            &viewer,
            vec![Served {
                name: "<b>run</b>.oomt".into(),
                path: s.path("run.oomt"),
            }],
            token.map(str::to_owned),
            None,
        )
        .unwrap()
    }

    fn get(site: &Site, url: &str, headers: &[(&str, &str)]) -> Answer {
        site.answer("GET", url, |name| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    const LOCAL: (&str, &str) = ("host", "127.0.0.1:8765");

    #[test]
    fn the_page_names_its_traces_in_base64_and_may_fetch_only_its_own_origin() {
        let s = Scratch::new("serve-page");
        let site = site(&s, None);
        assert_eq!(get(&site, "/", &[LOCAL]), Answer::Page);
        assert!(
            !site.page().contains("<b>run"),
            "no recorded text in the HTML"
        );
        assert!(site.page().contains(&STANDARD.encode("/trace/0?")));
        assert!(site.csp().contains("connect-src 'self'"));
        assert!(site.csp().contains("default-src 'none'"));
    }

    #[test]
    fn bytes_come_from_the_asked_offset_and_a_missing_file_is_waited_for() {
        let s = Scratch::new("serve-bytes");
        let site = site(&s, None);
        let started = Instant::now();
        assert_eq!(
            get(&site, "/trace/0?from=0", &[LOCAL]),
            Answer::Bytes {
                bytes: Vec::new(),
                waiting: true
            }
        );
        assert!(started.elapsed() >= LONG_POLL, "a long poll");
        s.write("run.oomt", b"0123456789");
        assert_eq!(
            get(&site, "/trace/0?from=4", &[LOCAL]),
            Answer::Bytes {
                bytes: b"456789".to_vec(),
                waiting: false
            }
        );
        // Nothing new yet: an empty answer after the wait.
        assert_eq!(
            get(&site, "/trace/0?from=10", &[LOCAL]),
            Answer::Bytes {
                bytes: Vec::new(),
                waiting: false
            }
        );
        assert_eq!(
            get(&site, "/trace/0?from=11", &[LOCAL]),
            Answer::Refused(416, "past the trace's end")
        );
        assert_eq!(
            get(&site, "/trace/0?from=99999999999999999999999", &[LOCAL]),
            Answer::Refused(400, "from=OFFSET (bytes) is needed")
        );
    }

    #[test]
    fn other_paths_methods_hosts_and_origins_are_refused() {
        let s = Scratch::new("serve-refused");
        let site = site(&s, None);
        for url in [
            "/trace/1?from=0",
            "/trace/+0?from=0",
            "/../run.oomt",
            "/trace/0/../../etc/passwd",
            "/run.oomt",
            "/index.html",
            "//",
        ] {
            assert!(
                matches!(get(&site, url, &[LOCAL]), Answer::Refused(404, _)),
                "{url}"
            );
        }
        assert!(matches!(
            site.answer("POST", "/", |_| Some("127.0.0.1:1".into())),
            Answer::Refused(405, _)
        ));
        for host in ["evil.example:8765", "example.com", "127.0.0.1.nip.io:80"] {
            assert!(
                matches!(get(&site, "/", &[("host", host)]), Answer::Refused(403, _)),
                "{host}"
            );
        }
        assert!(matches!(get(&site, "/", &[]), Answer::Refused(400, _)));
        // Through a tunnel the local port differs: still loopback.
        assert_eq!(get(&site, "/", &[("host", "localhost:9000")]), Answer::Page);
        assert!(matches!(
            get(&site, "/", &[LOCAL, ("origin", "http://evil.example")]),
            Answer::Refused(403, _)
        ));
        assert_eq!(
            get(&site, "/", &[LOCAL, ("origin", "http://127.0.0.1:8765")]),
            Answer::Page
        );
    }

    #[test]
    fn with_a_token_every_request_carries_it() {
        let s = Scratch::new("serve-token");
        let token = random_token().unwrap();
        assert_eq!(token.len(), 32);
        let site = site(&s, Some(&token));
        assert!(matches!(get(&site, "/", &[LOCAL]), Answer::Refused(403, _)));
        assert!(matches!(
            get(&site, "/?token=0000", &[LOCAL]),
            Answer::Refused(403, _)
        ));
        assert_eq!(
            get(&site, &format!("/?token={token}"), &[LOCAL]),
            Answer::Page
        );
        assert!(
            site.page()
                .contains(&STANDARD.encode(format!("/trace/0?token={token}&")))
        );
        s.write("run.oomt", b"abc");
        assert_eq!(
            get(&site, &format!("/trace/0?token={token}&from=1"), &[LOCAL]),
            Answer::Bytes {
                bytes: b"bc".to_vec(),
                waiting: false
            }
        );
    }
}
