//! TLS interception for the credentials of a sandbox's egress policy: a leaf
//! certificate per name from the sandbox's own authority, the request's placeholders
//! replaced by the credential for its host only, and the answers relayed with the
//! secrets scrubbed out.

use super::*;

/// A sandbox's credentials and what intercepting its TLS needs.
pub struct Intercept {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// One key for every leaf certificate (made once; signing a certificate per name
    /// is then cheap).
    leaf_key: rcgen::KeyPair,
    /// Server configurations by name, made on first use.
    servers: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    client: Arc<rustls::ClientConfig>,
    credentials: Vec<CredentialRule>,
    /// What no response may carry back: each credential's value and each word of it
    /// of 8 bytes or more (the token of `Bearer sk-...`).
    secrets: Vec<Vec<u8>>,
}

pub(super) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Intercept {
    pub fn new(t: &TlsIntercept) -> Result<Intercept, String> {
        let key = rcgen::KeyPair::from_pem(&t.ca_key_pem)
            .map_err(|e| format!("the sandbox's authority key: {e}"))?;
        let issuer = rcgen::Issuer::new(sandbox_ca_params(&t.ca_name), key);
        let leaf_key =
            rcgen::KeyPair::generate().map_err(|e| format!("a key for intercepted TLS: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(t.roots_pem.as_bytes()).flatten() {
            // A root rustls cannot use (an old or odd certificate) is skipped.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err("no usable trusted roots for upstream servers".into());
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS client configuration: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Intercept {
            issuer,
            leaf_key,
            servers: Mutex::new(HashMap::new()),
            client: Arc::new(client),
            credentials: t.credentials.clone(),
            secrets: secrets_of(&t.credentials),
        })
    }

    fn server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        if let Some(c) = self.servers.lock().ok().and_then(|m| m.get(name).cloned()) {
            return Ok(c);
        }
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()])
            .map_err(|e| format!("a certificate for {name}: {e}"))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let leaf = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| format!("signing a certificate for {name}: {e}"))?;
        let key = PrivateKeyDer::try_from(self.leaf_key.serialize_der())
            .map_err(|e| format!("the leaf key: {e}"))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS server configuration: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .map_err(|e| format!("TLS server configuration: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if let Ok(mut m) = self.servers.lock() {
            m.insert(name.to_string(), config.clone());
        }
        Ok(config)
    }

    /// The host of the credential whose placeholder appears in `bytes`.
    pub(super) fn placeholder_in(&self, bytes: &[u8]) -> Option<String> {
        self.credentials
            .iter()
            .find(|c| {
                bytes
                    .windows(c.placeholder.len())
                    .any(|w| w == c.placeholder.as_bytes())
            })
            .map(|c| c.host.clone())
    }

    /// Terminates the code's TLS session with a certificate for `sni` signed by the
    /// sandbox's authority, makes one to the server (verified), and relays HTTP/1.1
    /// requests one at a time: each must name `sni` as its host (no fronting), may
    /// carry a placeholder only to its own credential's host, and gets that host's
    /// credential header. `Err` is a refusal to record (already answered).
    pub(super) fn serve(
        &self,
        client: TcpStream,
        dest: SocketAddr,
        head: &[u8],
        sni: &str,
    ) -> Result<(), String> {
        let config = match self.server_config(sni) {
            Ok(c) => c,
            Err(e) => {
                tls_refuse(&client);
                return Err(e);
            }
        };
        let mut server = rustls::ServerConnection::new(config).map_err(|e| e.to_string())?;
        let mut rest = head;
        while !rest.is_empty() {
            server.read_tls(&mut rest).map_err(|e| e.to_string())?;
        }
        server
            .process_new_packets()
            .map_err(|e| format!("TLS from the sandbox: {e}"))?;
        let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
        let mut down = rustls::StreamOwned::new(server, client);
        let mut input = Input { buf: Vec::new() };
        let mut up: Option<(
            rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
            Input,
        )> = None;
        loop {
            let req = match input.request_head(&mut down) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(why) => {
                    refuse_tls_http(&mut down, up.is_none(), &why);
                    return Err(why);
                }
            };
            let host = req.host.clone().unwrap_or_default();
            let why = if req.connect || req.upgrade {
                Some(format!(
                    "{} in an intercepted TLS session (not relayed)",
                    if req.connect {
                        "CONNECT"
                    } else {
                        "a protocol upgrade"
                    }
                ))
            } else if host != sni || req.target_host.as_ref().is_some_and(|t| t != sni) {
                Some(format!(
                    "HTTP host {host:?} differs from the TLS server name {sni:?}"
                ))
            } else {
                self.credentials
                    .iter()
                    .find(|c| {
                        c.host != sni
                            && req
                                .raw
                                .windows(c.placeholder.len())
                                .any(|w| w == c.placeholder.as_bytes())
                    })
                    .map(|c| {
                        format!(
                            "the placeholder of the credential for {} sent to {sni}",
                            c.host
                        )
                    })
            };
            if let Some(why) = why {
                refuse_tls_http(&mut down, up.is_none(), &why);
                return Err(why);
            }
            let raw = self.with_credential(&req, sni);
            if up.is_none() {
                let tcp = TcpStream::connect_timeout(&dest, CONNECT_TIMEOUT)
                    .map_err(|e| format!("cannot connect upstream: {e}"));
                let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string());
                let conn = match (tcp, name) {
                    (Ok(tcp), Ok(name)) => rustls::ClientConnection::new(self.client.clone(), name)
                        .map(|c| rustls::StreamOwned::new(c, tcp))
                        .map_err(|e| e.to_string()),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
                match conn {
                    Ok(c) => up = Some((c, Input { buf: Vec::new() })),
                    Err(e) => {
                        let why = format!("upstream {sni}: {e}");
                        refuse_tls_http_status(&mut down, "502 Bad Gateway", &why);
                        return Err(why);
                    }
                }
            }
            let Some((u, uin)) = up.as_mut() else {
                return Ok(());
            };
            if req.expect_continue && req.framing != Framing::None {
                // The server never sees `Expect`: the client is told to go on here.
                let _ = down
                    .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                    .and_then(|()| down.flush());
            }
            if let Err(e) = u
                .write_all(&raw)
                .and_then(|()| input.body(&mut down, &req.framing, u))
                .and_then(|()| u.flush())
            {
                let why = format!("upstream {sni}: {e}");
                if e.kind() == io::ErrorKind::InvalidData {
                    // The server's certificate did not verify.
                    refuse_tls_http_status(&mut down, "502 Bad Gateway", &why);
                    return Err(why);
                }
                return Ok(());
            }
            let mut scrubbed = Scrub::new(&mut down, &self.secrets);
            let relayed = relay_response(uin, u, &mut scrubbed, req.head_request);
            if let Err(e) = &relayed
                && e.kind() == io::ErrorKind::PermissionDenied
            {
                // Cut where the value began: the code never reads it.
                return Err(format!(
                    "a response from {sni} carried an injected credential back (cut)"
                ));
            }
            match relayed {
                Ok(Relayed::Next) => {}
                Ok(Relayed::End | Relayed::Switched) => {
                    let _ = down.flush();
                    down.conn.send_close_notify();
                    let _ = down.flush();
                    return Ok(());
                }
                Err(e) => {
                    let why = format!("upstream {sni}: {e}");
                    if e.kind() == io::ErrorKind::InvalidData {
                        refuse_tls_http_status(&mut down, "502 Bad Gateway", &why);
                        return Err(why);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// The request head with this host's credential header set (others removed), and
    /// `Expect` dropped (the proxy relays whole bodies).
    fn with_credential(&self, req: &Request, host: &str) -> Vec<u8> {
        let cred = self.credentials.iter().find(|c| c.host == host);
        let text = String::from_utf8_lossy(&req.raw);
        let mut out = String::new();
        let mut lines = text.split("\r\n");
        if let Some(first) = lines.next() {
            out.push_str(first);
            out.push_str("\r\n");
        }
        for line in lines {
            if line.is_empty() {
                break;
            }
            let name = line.split(':').next().unwrap_or("").trim();
            // No `Accept-Encoding` to a credential's host: its answers come
            // uncompressed, so an echo of the credential is seen and cut.
            if name.eq_ignore_ascii_case("expect")
                || (cred.is_some() && name.eq_ignore_ascii_case("accept-encoding"))
                || cred.is_some_and(|c| name.eq_ignore_ascii_case(&c.header))
            {
                continue;
            }
            out.push_str(line);
            out.push_str("\r\n");
        }
        if let Some(c) = cred {
            out.push_str(&format!("{}: {}\r\n", c.header, c.value));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

/// What follows a relayed response on its connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Relayed {
    /// More HTTP: the next response.
    Next,
    /// Nothing: the connection ends with it.
    End,
    /// A `101 Switching Protocols`: what follows is no longer HTTP.
    Switched,
}

/// Relays one response (and any interim 1xx before it) from the server.
pub(super) fn relay_response(
    uin: &mut Input,
    up: &mut impl ReadWrite,
    down: &mut impl Write,
    head_request: bool,
) -> io::Result<Relayed> {
    loop {
        let (n, status, framing, close) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&uin.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = resp.code.unwrap_or(0);
                    let mut length = None;
                    let mut chunked = false;
                    let mut close = resp.version == Some(0);
                    for h in resp.headers.iter() {
                        let v = String::from_utf8_lossy(h.value);
                        match h.name.to_ascii_lowercase().as_str() {
                            "content-length" => length = v.trim().parse::<u64>().ok(),
                            "transfer-encoding" => {
                                chunked = v
                                    .rsplit(',')
                                    .next()
                                    .is_some_and(|l| l.trim().eq_ignore_ascii_case("chunked"));
                            }
                            "connection" => {
                                close = v.to_ascii_lowercase().contains("close");
                            }
                            _ => {}
                        }
                    }
                    let framing = if head_request
                        || (100..200).contains(&status)
                        || status == 204
                        || status == 304
                    {
                        Framing::None
                    } else if chunked {
                        Framing::Chunked
                    } else if let Some(l) = length {
                        Framing::Length(l)
                    } else {
                        Framing::ToEnd
                    };
                    break (n, status, framing, close);
                }
                Ok(httparse::Status::Partial) if uin.buf.len() < MAX_HEAD => {
                    if uin.fill(up)? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                _ => return Err(io::Error::other("malformed HTTP response")),
            }
        };
        let head: Vec<u8> = uin.buf.drain(..n).collect();
        down.write_all(&head)?;
        if (100..200).contains(&status) && status != 101 {
            down.flush()?;
            continue;
        }
        let to_end = framing == Framing::ToEnd;
        uin.body(up, &framing, down)?;
        down.flush()?;
        return Ok(if status == 101 {
            Relayed::Switched
        } else if close || to_end {
            Relayed::End
        } else {
            Relayed::Next
        });
    }
}

/// The byte strings of [`Intercept::secrets`].
pub(super) fn secrets_of(credentials: &[CredentialRule]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for c in credentials {
        let words = c.value.split_whitespace().filter(|w| w.len() >= 8);
        for w in std::iter::once(c.value.trim()).chain(words) {
            if !w.is_empty() && !out.iter().any(|o| o == w.as_bytes()) {
                out.push(w.as_bytes().to_vec());
            }
        }
    }
    out
}

/// A writer that passes on nothing holding one of `secrets`: it keeps back the last
/// bytes that could begin one until a later write (or a flush) shows they do not,
/// and fails with `PermissionDenied`, the secret unwritten, when one appears.
pub(super) struct Scrub<'a, W: Write> {
    inner: W,
    secrets: &'a [Vec<u8>],
    held: Vec<u8>,
}

impl<'a, W: Write> Scrub<'a, W> {
    pub(super) fn new(inner: W, secrets: &'a [Vec<u8>]) -> Self {
        Scrub {
            inner,
            secrets,
            held: Vec::new(),
        }
    }
}

impl<W: Write> Write for Scrub<'_, W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let longest = self.secrets.iter().map(Vec::len).max().unwrap_or(0);
        // Only where a secret could start: the held tail and what came now.
        let from = self.held.len().saturating_sub(longest);
        self.held.extend_from_slice(b);
        let window = &self.held[from..];
        if self
            .secrets
            .iter()
            .any(|s| window.windows(s.len()).any(|w| w == s.as_slice()))
        {
            self.held.clear();
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a response carried an injected credential",
            ));
        }
        let keep = longest.saturating_sub(1).min(self.held.len());
        let out = self.held.len() - keep;
        self.inner.write_all(&self.held[..out])?;
        self.held.drain(..out);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.write_all(&self.held)?;
        self.held.clear();
        self.inner.flush()
    }
}

/// Read and write on one value (a TLS session).
pub(super) trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
