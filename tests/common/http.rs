//! A small HTTP/1.1 keep-alive client over rustls, enough to talk to the
//! webhook the way kube-apiserver does and to drive load in benchmarks.
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// A parsed HTTP response.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// TLS client settings trusting only `ca_pem`, offering `alpn`.
pub fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    client_config_versions(
        ca_pem,
        alpn,
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    )
}

pub fn client_config_versions(
    ca_pem: &str,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// One keep-alive HTTPS connection.
pub struct Client {
    stream: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl Client {
    pub async fn connect(
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
        server_name: &str,
    ) -> std::io::Result<Client> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let stream = TlsConnector::from(config).connect(name, tcp).await?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    /// The leaf certificate the server presented.
    pub fn peer_certificate(&self) -> Vec<u8> {
        self.stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default()
    }

    pub fn alpn_protocol(&self) -> Option<Vec<u8>> {
        self.stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
    }

    pub fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        self.stream.get_ref().1.protocol_version()
    }

    /// Writes raw bytes (for malformed or partial requests).
    pub async fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        self.write_raw(&request_bytes(method, path, body)).await?;
        self.read_response().await
    }

    /// Sends prepared request bytes (see [`request_bytes`]).
    pub async fn send(&mut self, request: &[u8]) -> std::io::Result<HttpResponse> {
        self.write_raw(request).await?;
        self.read_response().await
    }

    /// Reads until the server closes the connection; errors if it sends
    /// anything first.
    pub async fn read_eof(&mut self) -> std::io::Result<usize> {
        let mut total = 0;
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk).await {
                Ok(0) => return Ok(total),
                Ok(n) => total += n,
                Err(e) => return Err(e),
            }
        }
    }

    pub async fn read_response(&mut self) -> std::io::Result<HttpResponse> {
        let head_end = loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                break pos;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let mut response = HttpResponse {
            status,
            headers,
            body: Vec::new(),
        };
        if (100..200).contains(&response.status) {
            // An interim answer (`100 Continue`) has no body.
            return Ok(response);
        }
        if let Some(len) = response.header("content-length") {
            let len: usize = len.parse().map_err(|_| invalid("bad content-length"))?;
            while self.buf.len() < len {
                self.fill().await?;
            }
            response.body = self.buf.drain(..len).collect();
        } else if response
            .header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            response.body = self.read_chunked().await?;
        } else {
            while self.fill().await.is_ok() {}
            response.body = std::mem::take(&mut self.buf);
        }
        Ok(response)
    }

    async fn read_chunked(&mut self) -> std::io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(pos) = find(&self.buf, b"\r\n") {
                    break pos;
                }
                self.fill().await?;
            };
            let size_text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| invalid("bad chunk size"))?;
            self.buf.drain(..line_end + 2);
            while self.buf.len() < size + 2 {
                self.fill().await?;
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
            if size == 0 {
                return Ok(body);
            }
        }
    }

    /// Reads what the stream has into the buffer's spare room (kept from
    /// read to read: nothing is zeroed or copied on the way in).
    async fn fill(&mut self) -> std::io::Result<()> {
        self.buf.reserve(16 * 1024);
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        Ok(())
    }
}

/// The bytes of an HTTP/1.1 request with a JSON body.
pub fn request_bytes(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn invalid(message: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.into())
}
