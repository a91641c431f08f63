//! Where a receiver's push stream may send: not into idem's own network. An address is inside
//! when it is loopback, private, shared (carrier-grade NAT), link-local, unspecified, multicast,
//! reserved or for documentation, IPv4 or IPv6, an IPv6 address carrying an IPv4 one judged by
//! that; a host is inside when it is such an address or `localhost`. Stream management refuses
//! such a destination unless the receiver's `endpoints` name it, and every push resolves its
//! host again through [`Outside`], which hands out only addresses outside, so a name that later
//! resolves inside is refused before any connection is made. Plain functions, no I/O, but for
//! the resolver.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Whether `ip` is inside idem's own network (see the module's doc).
pub fn inside(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => inside_v4(v4),
        IpAddr::V6(v6) => inside_v6(v6),
    }
}

fn inside_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0                                      // "this network", 0.0.0.0
        || a == 10                              // private
        || a == 127                             // loopback
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)               // link-local (cloud metadata)
        || (a == 172 && (16..32).contains(&b))  // private
        || (a == 192 && b == 168)               // private
        || (a == 192 && b == 0 && c == 0)       // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)       // documentation
        || (a == 198 && (b == 18 || b == 19))   // benchmarking
        || (a == 198 && b == 51 && c == 100)    // documentation
        || (a == 203 && b == 0 && c == 113)     // documentation
        || a >= 224 // multicast, reserved, broadcast
}

fn inside_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = carried_v4(ip) {
        return inside_v4(v4);
    }
    ip.is_unspecified()
        || ip.is_loopback()
        || (s[0] & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only, 100::/64
}

/// The IPv4 address an IPv6 one carries: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`).
fn carried_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low()),
        // `::` and `::1` are IPv6's own, judged as such.
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low()),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low()),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// The address a URL's host (as `Url::host_str` gives it: IPv6 in brackets) is, if it is one.
pub fn literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// Whether a URL's host is inside idem's own network as written: an address inside, or
/// `localhost` or a name under it. (Any other name is judged by what it resolves to, when
/// it is sent to.)
pub fn host_inside(host: &str) -> bool {
    if let Some(ip) = literal(host) {
        return inside(ip);
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// A name that resolves only to addresses inside idem's network: refused before connecting.
#[derive(Debug)]
pub struct ResolvesInside(pub String);

impl fmt::Display for ResolvesInside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resolves only to addresses inside idem's own network (loopback, private or \
             link-local): not sent",
            self.0
        )
    }
}

impl Error for ResolvesInside {}

/// The resolver of pushes to receivers: the system's, keeping only the addresses outside idem's
/// network, and refusing a name that has none.
pub struct Outside;

impl reqwest::dns::Resolve for Outside {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let outside: Vec<SocketAddr> = found.filter(|a| !inside(a.ip())).collect();
            if outside.is_empty() {
                return Err(Box::new(ResolvesInside(host)) as Box<dyn Error + Send + Sync>);
            }
            Ok(Box::new(outside.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether `e` (a failed request's error) is a refusal of [`Outside`]'s, and its reason.
pub fn refused_inside(e: &(dyn Error + 'static)) -> Option<String> {
    let mut source = Some(e);
    while let Some(e) = source {
        if let Some(inside) = e.downcast_ref::<ResolvesInside>() {
            return Some(inside.to_string());
        }
        source = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_inside_idems_network_are_told_from_those_outside() {
        for host in [
            "169.254.169.254",
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "[::1]",
            "[::]",
            "[fc00::1]",
            "[fd12:3456::1]",
            "[fe80::1]",
            "[febf::1]",
            "[::ffff:127.0.0.1]",
            "[::ffff:169.254.169.254]",
            "[::127.0.0.1]",
            "[64:ff9b::10.0.0.1]",
            "[2002:a00:1::]",
            "[ff02::1]",
            "localhost",
            "LOCALHOST.",
            "idem.localhost",
        ] {
            assert!(host_inside(host), "{host} is inside");
        }
        for host in [
            "93.184.216.34",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "[2606:4700::1111]",
            "[::ffff:8.8.8.8]",
            "[64:ff9b::808:808]",
            "okta.example.com",
            "localhost.example.com",
        ] {
            assert!(!host_inside(host), "{host} is outside");
        }
    }
}
