//! The egress proxy at a harness's door: `CONNECT host:port` (HTTPS, any
//! TCP) and plain HTTP in absolute form, the way `HTTPS_PROXY` and
//! `HTTP_PROXY` make a CLI, git, npm, pip, cargo or curl ask.
//!
//! A destination must be one the operator allows (`cage.egress`, deny
//! wins: [`Egress::verdict`]); the proxy resolves the name itself and
//! connects to the address it checked, which must be public
//! ([`is_public`]: never loopback, private, link-local or metadata
//! addresses, whatever the name resolves to). A refusal is a 403 whose
//! words name the destination and the setting, audited against the run;
//! nothing goes through once the run the harness serves has closed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::harness::cage::{Egress, Verdict, is_public};
use crate::host::Grants;
use crate::protocol::{AgentAPIError, ErrorCode};

/// Each way's buffer in a tunnel: a large download passes in few reads.
const TUNNEL_BUFFER: usize = 256 * 1024;

/// How long a name lookup and a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One harness's proxy.
pub struct Proxy {
    egress: Egress,
    /// What the harness reaches for on its own (its spec's
    /// `own_traffic`), refused without asking, and its name for the words.
    own: (Egress, String),
    /// Who is asked about a destination no rule covers (none: refused).
    approver: Option<Arc<dyn Approver>>,
    /// The run's token: the proxy works while its run is open, and its
    /// refusals are audited against it.
    token: String,
    grants: Arc<Grants>,
    /// Ends the tunnels when the door shuts.
    stop: CancellationToken,
}

/// Who decides a destination no rule covers while its connection waits:
/// the person in the chat, through the turn the harness serves.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// `Ok` once the harness may reach `host:port`; else why not.
    async fn approve(&self, host: &str, port: u16) -> Result<(), String>;
}

/// Whether `request` asks the door to reach elsewhere (a proxy request)
/// rather than the door itself.
pub fn is_proxied<B>(request: &Request<B>) -> bool {
    request.method() == Method::CONNECT || request.uri().scheme().is_some()
}

impl Proxy {
    /// A proxy to `egress`'s destinations for the run `token` names.
    pub fn new(egress: Egress, token: &str, grants: Arc<Grants>) -> Proxy {
        Proxy {
            egress,
            own: (Egress::default(), String::new()),
            approver: None,
            token: token.to_string(),
            grants,
            stop: CancellationToken::new(),
        }
    }

    /// Ends every tunnel (the door is shut).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// The destinations `harness` (its label) reaches for on its own:
    /// refused without asking, said as its own.
    pub fn with_own_traffic(mut self, harness: &str, rules: &[String]) -> Proxy {
        self.own = (
            Egress {
                allow: rules.to_vec(),
                deny: Vec::new(),
                ..Default::default()
            },
            harness.to_string(),
        );
        self
    }

    /// A destination no rule covers is asked of `approver` (the
    /// operator's `egress.ask: on`).
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Proxy {
        self.approver = Some(approver);
        self
    }

    /// Add its destinations and whether it asks to `hash`.
    pub fn identify(&self, hash: &mut sha2::Sha256) {
        use sha2::Digest as _;
        let rules = [&self.egress.allow, &self.egress.deny, &self.own.0.allow];
        for list in rules {
            for rule in list {
                hash.update(rule.as_bytes());
                hash.update([0]);
            }
            hash.update([1]);
        }
        hash.update([u8::from(self.approver.is_some())]);
    }

    /// Answer one proxy request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let target = match target(&request) {
            Ok(target) => target,
            Err(why) => return said(StatusCode::BAD_REQUEST, why),
        };
        let address = match self.decide(&target.0, target.1).await {
            Ok(address) => address,
            Err(why) => {
                self.audit(&target, &why).await;
                return said(StatusCode::FORBIDDEN, why);
            }
        };
        let upstream =
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    return said(
                        StatusCode::BAD_GATEWAY,
                        format!("cannot reach {address}: {e}"),
                    );
                }
                Err(_) => {
                    return said(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!("{address} did not answer"),
                    );
                }
            };
        if request.method() == Method::CONNECT {
            self.tunnel(request, upstream);
            return Response::new(Body::empty());
        }
        forward(request, upstream).await
    }

    /// The destination's address, if the operator's rules and the address
    /// check let the harness reach it; else why not.
    async fn decide(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        if self.grants.authorize(&self.token).await.is_err() {
            return Err(
                "the turn this harness served has ended: nothing goes out between turns".into(),
            );
        }
        match self.egress.verdict(host, port) {
            Verdict::Allowed => {}
            Verdict::Denied(rule) => {
                return Err(format!(
                    "{host}:{port} is refused by the operator's rule `{rule}` (cage.egress.deny)"
                ));
            }
            Verdict::Unlisted if self.own.0.verdict(host, port) == Verdict::Allowed => {
                return Err(format!(
                    "{host}:{port} is what {} reaches for on its own (its spec's own_traffic), refused without asking anyone; the operator may add it to cage.egress.allow",
                    self.own.1
                ));
            }
            Verdict::Unlisted => match &self.approver {
                Some(approver) => approver.approve(host, port).await?,
                None => {
                    return Err(format!(
                        "{host}:{port} is not among the destinations this harness may reach; the operator may add it to cage.egress.allow"
                    ));
                }
            },
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addresses: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port)))
                    .await
                {
                    Ok(Ok(found)) => found.collect(),
                    Ok(Err(e)) => return Err(format!("{host} cannot be resolved: {e}")),
                    Err(_) => return Err(format!("{host} cannot be resolved in time")),
                }
            }
        };
        // Every address it names must be public: the one connected to is
        // one of those checked, never a second lookup's.
        if let Some(private) = addresses.iter().find(|a| !is_public(a.ip())) {
            return Err(format!(
                "{host} resolves to {}, an address of this machine or a private network, which a harness is never connected to",
                private.ip()
            ));
        }
        addresses
            .first()
            .copied()
            .ok_or_else(|| format!("{host} resolves to no address"))
    }

    /// Once the harness has the 200, the bytes both ways until one side
    /// ends or the door shuts.
    fn tunnel(&self, request: Request<Incoming>, mut upstream: TcpStream) {
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let Ok(upgraded) = hyper::upgrade::on(request).await else {
                return;
            };
            // The harness's own socket when hyper hands it back (what it
            // read past the request first): the bytes then pass between
            // the two sockets inside the kernel; else copied, in large
            // pieces.
            let copied = match upgraded.downcast::<TokioIo<TcpStream>>() {
                Ok(parts) => {
                    let harness = parts.io.into_inner();
                    if upstream.write_all(&parts.read_buf).await.is_err() {
                        return;
                    }
                    tokio::select! {
                        _ = super::splice::both_ways(&harness, &upstream) => {}
                        () = stop.cancelled() => {}
                    }
                    return;
                }
                Err(upgraded) => upgraded,
            };
            let mut harness = TokioIo::new(copied);
            tokio::select! {
                _ = tokio::io::copy_bidirectional_with_sizes(&mut harness, &mut upstream, TUNNEL_BUFFER, TUNNEL_BUFFER) => {}
                () = stop.cancelled() => {}
            }
        });
    }

    async fn audit(&self, (host, port): &(String, u16), why: &str) {
        tracing::warn!(destination = %format!("{host}:{port}"), "egress refused: {why}");
        if let Ok(granted) = self.grants.authorize(&self.token).await {
            let refusal = AgentAPIError::new(ErrorCode::Unauthorized, why.to_string());
            granted
                .refused("egress", &format!("{host}:{port}"), &refusal)
                .await;
        }
    }
}

/// The host and port a proxy request names.
fn target<B>(request: &Request<B>) -> Result<(String, u16), String> {
    let uri = request.uri();
    let authority = uri
        .authority()
        .ok_or("a proxy request names its destination (CONNECT host:port, or an http:// URL)")?;
    let default = if request.method() == Method::CONNECT {
        443
    } else if uri.scheme_str() == Some("http") {
        80
    } else {
        return Err(format!(
            "only http:// URLs are fetched through the proxy; {} goes through CONNECT (HTTPS_PROXY)",
            uri.scheme_str().unwrap_or("this scheme")
        ));
    };
    Ok((
        authority.host().to_string(),
        authority.port_u16().unwrap_or(default),
    ))
}

/// A plain HTTP request sent on `upstream` in origin form, its answer
/// streamed back.
async fn forward(request: Request<Incoming>, upstream: TcpStream) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let host = parts.uri.authority().map(|a| a.as_str().to_string());
    parts.uri = match parts.uri.path_and_query() {
        Some(path) => match path.as_str().parse() {
            Ok(uri) => uri,
            Err(_) => {
                return said(
                    StatusCode::BAD_REQUEST,
                    "the URL's path cannot be read".into(),
                );
            }
        },
        None => http::Uri::from_static("/"),
    };
    for name in ["proxy-authorization", "proxy-connection"] {
        parts.headers.remove(name);
    }
    if let (Some(host), false) = (host, parts.headers.contains_key(header::HOST))
        && let Ok(value) = host.parse()
    {
        parts.headers.insert(header::HOST, value);
    }
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return said(StatusCode::BAD_GATEWAY, format!("the destination: {e}")),
        };
    tokio::spawn(connection);
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(answer) => answer.map(Body::new),
        Err(e) => said(StatusCode::BAD_GATEWAY, format!("the destination: {e}")),
    }
}

/// A refusal in words, for the tool that asked (curl, git and npm show
/// them).
fn said(status: StatusCode, why: String) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("harness-bridge: {why}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
