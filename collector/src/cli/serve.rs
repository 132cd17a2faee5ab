//! `collector serve TRACE… [--port N] [--host ADDR]`: the viewer over HTTP with the traces
//! streamed to it as they are written (the rules are in [`crate::serve`]); this module listens
//! and answers, one thread per request (a request may wait [`crate::serve::LONG_POLL`]).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow};
use oomscope_report::page::WAITING_HEADER;

use crate::report::{Named, Viewer};
use crate::serve::{Answer, Served, Site, random_token};
use crate::ui::{info, write_stdout};

/// `collector serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The traces to show, as `collector run -o` names them (a job's: one per rank or node); one
    /// that does not exist yet is waited for.
    #[arg(required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// The port to listen on (0: any free one; the address is printed).
    #[arg(long, default_value_t = 8765)]
    pub port: u16,
    /// Listen on this address instead of 127.0.0.1 (e.g. 0.0.0.0 to be reached from other
    /// hosts); every request must then carry the random token printed at start.
    #[arg(long, value_name = "ADDR")]
    pub host: Option<IpAddr>,
}

/// Requests answered at once; more get 503 (each long poll holds a thread up to 2 s).
const MAX_REQUESTS: usize = 64;

pub fn serve(args: &ServeArgs) -> Result<i32> {
    let viewer = Viewer::find()?;
    // A directory names its traces by their path inside it, as a report does.
    let root = match args.traces.as_slice() {
        [dir] if dir.is_dir() => Some(dir.as_path()),
        _ => None,
    };
    let paths = match root {
        Some(_) => super::summary::trace_files(&args.traces)?,
        None => args.traces.clone(),
    };
    for p in &paths {
        if p.is_dir() {
            anyhow::bail!(
                "{} is a directory: name one directory alone, or trace files",
                p.display()
            );
        }
    }
    let traces: Vec<Served> = paths
        .into_iter()
        .map(|p| {
            let named = Named::new(p, root);
            Served {
                name: named.name,
                path: named.path,
            }
        })
        .collect();
    let token = args.host.map(|_| random_token()).transpose()?;
    let ip = args.host.unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let site = Arc::new(Site::new(
        &viewer,
        traces.clone(),
        token.clone(),
        args.host.map(|h| h.to_string()),
    )?);
    let server = tiny_http::Server::http(SocketAddr::new(ip, args.port)).map_err(|e| {
        anyhow!(
            "cannot listen on {ip}:{}: {e} (pass another --port)",
            args.port
        )
    })?;
    let port = server.server_addr().to_ip().map_or(args.port, |a| a.port());
    let shown_host = match ip {
        IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    let url = match &token {
        Some(t) => format!("http://{shown_host}:{port}/?token={t}"),
        None => format!("http://{shown_host}:{port}/"),
    };
    for t in &traces {
        if !t.path.exists() {
            info(&format!("waiting for {} to appear", t.path.display()));
        }
    }
    info(&format!(
        "serving {} live at {url} (read-only; Ctrl-C stops){}",
        match traces.len() {
            1 => traces[0].path.display().to_string(),
            n => format!("{n} traces"),
        },
        if token.is_some() {
            ": anyone with this address can read the traces"
        } else {
            ""
        }
    ));
    write_stdout(format!("{url}\n").as_bytes())?;
    let busy = Arc::new(AtomicUsize::new(0));
    for request in server.incoming_requests() {
        if busy.load(Ordering::Relaxed) >= MAX_REQUESTS {
            let _ = request.respond(text(503, "busy: too many requests at once"));
            continue;
        }
        busy.fetch_add(1, Ordering::Relaxed);
        let (site, busy) = (Arc::clone(&site), Arc::clone(&busy));
        let spawned = std::thread::Builder::new()
            .name("serve".into())
            .spawn(move || {
                answer(&site, request);
                busy.fetch_sub(1, Ordering::Relaxed);
            });
        spawned.context("cannot start a thread to answer a request")?;
    }
    Ok(0)
}

/// Answers one request (a client that went away is no error of ours).
fn answer(site: &Site, request: tiny_http::Request) {
    let header = |name: &str| {
        request
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str().to_owned())
    };
    let answer = site.answer(request.method().as_str(), request.url(), header);
    let response = match answer {
        Answer::Page => with_headers(
            tiny_http::Response::from_data(site.page().as_bytes().to_vec()),
            "text/html; charset=utf-8",
        )
        .with_header(header_line(
            "Content-Security-Policy",
            &format!("{}; frame-ancestors 'none'", site.csp()),
        )),
        Answer::Bytes { bytes, waiting } => {
            let r = with_headers(
                tiny_http::Response::from_data(bytes),
                "application/octet-stream",
            );
            if waiting {
                r.with_header(header_line(WAITING_HEADER, "1"))
            } else {
                r
            }
        }
        Answer::Refused(status, why) => text(status, why),
    };
    let _ = request.respond(response);
}

fn text(status: u16, body: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    with_headers(
        tiny_http::Response::from_data(format!("{body}\n").into_bytes()),
        "text/plain; charset=utf-8",
    )
    .with_status_code(status)
}

/// What every answer says: its type, never to be guessed or cached, and no referrer (a page's
/// address may hold the token).
fn with_headers(
    r: tiny_http::Response<std::io::Cursor<Vec<u8>>>,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    r.with_header(header_line("Content-Type", content_type))
        .with_header(header_line("X-Content-Type-Options", "nosniff"))
        .with_header(header_line("Cache-Control", "no-store"))
        .with_header(header_line("Referrer-Policy", "no-referrer"))
}

fn header_line(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
        .expect("header names and values are ASCII")
}
