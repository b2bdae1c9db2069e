//! Git's smart HTTP for the tests and benchmarks: `git http-backend` (Git's own CGI
//! program) behind a small HTTP/1.1 server, one thread a connection and one request a
//! connection. Every answer carries its length, as libgit2 requires (Python's CGI
//! server, tried first, sends none, and libgit2 reads nothing).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The repositories below a directory, served over smart HTTP (fetch and push);
/// stopped when dropped.
pub struct GitHttp {
    stop: Arc<AtomicBool>,
    port: u16,
    pub url: String,
}

impl GitHttp {
    /// Serves the repositories below `root`; `url` names `repository`.
    pub fn serve(root: &Path, repository: &str) -> GitHttp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (root, stopped) = (root.to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let root = root.clone();
                std::thread::spawn(move || {
                    let _ = serve_one(&root, stream);
                });
            }
        });
        GitHttp {
            stop,
            port,
            url: format!("http://127.0.0.1:{port}/{repository}"),
        }
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// What a client asked.
struct Request {
    method: String,
    path: String,
    query: String,
    /// Lower-case names.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn serve_one(root: &Path, stream: TcpStream) -> std::io::Result<()> {
    let request = read_request(&mut BufReader::new(stream.try_clone()?))?;
    let (status, headers, payload) = backend(root, &request)?;
    let mut response = format!("HTTP/1.1 {status}\r\n");
    for line in headers {
        response.push_str(&line);
        response.push_str("\r\n");
    }
    response.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        payload.len()
    ));
    let mut stream = stream;
    stream.write_all(response.as_bytes())?;
    stream.write_all(&payload)?;
    stream.flush()
}

/// The request line, the headers, and the body (by its length, or chunked).
fn read_request(reader: &mut impl BufRead) -> std::io::Result<Request> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("GET").to_string();
    let target = parts.next().unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut request = Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            request.headers.push((name, value.trim().to_string()));
        }
    }
    if request
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = size.trim().split(';').next().unwrap_or("0");
            let size = usize::from_str_radix(size, 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            request.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = request.header("content-length") {
        request.body.resize(length.parse().unwrap_or(0), 0);
        reader.read_exact(&mut request.body)?;
    }
    Ok(request)
}

/// Runs `git http-backend` for `request`; returns its status, its other headers and
/// its body.
fn backend(root: &Path, request: &Request) -> std::io::Result<(String, Vec<String>, Vec<u8>)> {
    let mut command = Command::new("git");
    command
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", &request.method)
        .env("PATH_INFO", &request.path)
        .env("QUERY_STRING", &request.query)
        .env("CONTENT_LENGTH", request.body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (variable, name) in [
        ("CONTENT_TYPE", "content-type"),
        ("HTTP_CONTENT_ENCODING", "content-encoding"),
        ("HTTP_GIT_PROTOCOL", "git-protocol"),
    ] {
        if let Some(value) = request.header(name) {
            command.env(variable, value);
        }
    }
    let mut child = command.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let body = request.body.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let output = child.wait_with_output()?;
    let _ = writer.join();
    let out = output.stdout;
    // CGI headers end at the first empty line.
    let (end, start) = find(&out, b"\r\n\r\n")
        .map(|at| (at, at + 4))
        .or_else(|| find(&out, b"\n\n").map(|at| (at, at + 2)))
        .unwrap_or((0, 0));
    let mut status = "200 OK".to_string();
    let mut headers = Vec::new();
    for line in String::from_utf8_lossy(&out[..end]).lines() {
        match line.split_once(':') {
            Some((name, value)) if name.eq_ignore_ascii_case("status") => {
                status = value.trim().to_string();
            }
            _ if !line.trim().is_empty() => headers.push(line.trim().to_string()),
            _ => {}
        }
    }
    Ok((status, headers, out[start..].to_vec()))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
