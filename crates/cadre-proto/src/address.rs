//! The `host[:port]` of a controller's address, as every client of it reads one: the port
//! after the last colon outside an IPv6 literal's brackets, a default one when none.

/// A `host[:port]` read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// The host without an IPv6 literal's brackets: what a certificate names.
    pub host: String,
    /// `host:port`, brackets kept: what to connect to.
    pub authority: String,
}

/// Reads `text` (`host`, `host:port`, `[::1]:port`), with `default_port` when it has none.
pub fn host_port(text: &str, default_port: u16) -> Result<HostPort, String> {
    let host_end = text.rfind(']').map_or(0, |i| i + 1);
    let (host, authority) = match text[host_end..].rsplit_once(':') {
        Some((_, port)) => {
            port.parse::<u16>()
                .map_err(|_| format!("`{port}` is not a port number"))?;
            (&text[..text.len() - port.len() - 1], text.to_owned())
        }
        None => (text, format!("{text}:{default_port}")),
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    Ok(HostPort {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        authority,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ports_and_ipv6_literals() {
        let hp = |t: &str| host_port(t, 443).map(|h| (h.host, h.authority));
        assert_eq!(hp("ctl:6817"), Ok(("ctl".into(), "ctl:6817".into())));
        assert_eq!(hp("ctl"), Ok(("ctl".into(), "ctl:443".into())));
        assert_eq!(hp("[::1]:7"), Ok(("::1".into(), "[::1]:7".into())));
        assert_eq!(hp("[::1]"), Ok(("::1".into(), "[::1]:443".into())));
        assert_eq!(hp("ctl:x"), Err("`x` is not a port number".into()));
        assert_eq!(hp(":80"), Err("no host".into()));
    }
}
