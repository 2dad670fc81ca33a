//! Where a harness in a network of its own may connect through its
//! door's proxy (`cage.egress`): the operator's list of destinations, and
//! the addresses no name may lead to.
//!
//! A rule is a host name with an optional port: `example.org` (that name
//! alone), `*.example.org` (the names below it, not the name itself), `*`
//! (any name), each on ports 80 and 443 unless the rule names one
//! (`example.org:8443`). A destination is allowed when an `allow` rule
//! covers it and no `deny` rule does (deny wins). Whatever the rules
//! say, the proxy connects only to public addresses: never loopback,
//! private, shared (CGNAT), link-local (cloud metadata is there),
//! multicast or unspecified ones, whatever a name resolves to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// The operator's destinations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Egress {
    /// What may be reached.
    pub allow: Vec<String>,
    /// What may not, whatever `allow` says.
    pub deny: Vec<String>,
    /// Whether a destination no rule covers is asked of the person in the
    /// chat while its connection waits (`on`), or refused at once.
    pub ask: Ask,
}

/// Whether the person in the chat is asked about a new destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ask {
    /// Asked: a card, answered by the asker (or an approver).
    #[default]
    On,
    /// Refused at once.
    Off,
}

/// A rule that cannot be read, named with why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRule(pub String);

/// What the rules say of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An allow rule covers it and no deny rule does.
    Allowed,
    /// This deny rule covers it.
    Denied(String),
    /// No allow rule covers it.
    Unlisted,
}

/// One rule, parsed.
#[derive(Debug, PartialEq, Eq)]
struct Rule {
    host: Host,
    port: Port,
}

/// The ports a rule covers.
#[derive(Debug, PartialEq, Eq)]
enum Port {
    /// No port given: the web's ([`WEB_PORTS`]).
    Web,
    /// `:443`.
    One(u16),
    /// `:*`.
    Any,
}

#[derive(Debug, PartialEq, Eq)]
enum Host {
    Any,
    Exactly(String),
    Below(String),
}

/// The ports a rule without one covers.
const WEB_PORTS: [u16; 2] = [80, 443];

impl Egress {
    /// Why a rule cannot be read, naming it; `Ok` when all can.
    pub fn check_rules(&self) -> Result<(), BadRule> {
        for (list, rules) in [("allow", &self.allow), ("deny", &self.deny)] {
            for rule in rules {
                parse(rule)
                    .map_err(|why| BadRule(format!("cage.egress.{list}: `{rule}`: {why}")))?;
            }
        }
        Ok(())
    }

    /// What the rules say of `host` (a name or an address) on `port`.
    pub fn verdict(&self, host: &str, port: u16) -> Verdict {
        let host = normal(host);
        let covers = |rule: &String| parse(rule).is_ok_and(|rule| rule.covers(&host, port));
        if let Some(rule) = self.deny.iter().find(|rule| covers(rule)) {
            return Verdict::Denied(rule.clone());
        }
        if self.allow.iter().any(covers) {
            Verdict::Allowed
        } else {
            Verdict::Unlisted
        }
    }
}

impl Rule {
    fn covers(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Port::One(p) => p == port,
            Port::Web => WEB_PORTS.contains(&port),
            Port::Any => true,
        };
        let host_ok = match &self.host {
            Host::Any => true,
            Host::Exactly(name) => name == host,
            Host::Below(name) => host
                .strip_suffix(name.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
        };
        port_ok && host_ok
    }
}

/// A name as compared: lowercase, without a trailing dot or IPv6
/// brackets.
fn normal(host: &str) -> String {
    host.trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

fn parse(rule: &str) -> Result<Rule, String> {
    let rule = rule.trim();
    let (host, port) = match rule.rsplit_once(':') {
        Some((host, "*")) if !host.contains(':') || host.ends_with(']') => (host, Port::Any),
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or("the port is a number from 1 to 65535, or `*` for any")?;
            (host, Port::One(port))
        }
        _ => (rule, Port::Web),
    };
    let host = normal(host);
    let name = |name: &str| {
        let ok = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':' | b'_'));
        if ok {
            Ok(name.to_string())
        } else {
            Err("a host is a name (letters, digits, `-`, `.`), an address, `*.name` or `*`")
        }
    };
    let host = match host.as_str() {
        "*" => Host::Any,
        _ => match host.strip_prefix("*.") {
            Some(below) => Host::Below(name(below)?),
            None => Host::Exactly(name(&host)?),
        },
    };
    Ok(Rule { host, port })
}

/// Whether the proxy may connect to `ip`: a public address, never one of
/// this machine's, a private network's or the cloud's metadata service.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => public_v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(ip),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let shared = a == 100 && (64..128).contains(&b);
    let reserved = a >= 240;
    let this_network = a == 0;
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_unspecified()
        || shared
        || reserved
        || this_network)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = first & 0xfe00 == 0xfc00;
    let link_local = first & 0xffc0 == 0xfe80;
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address
    // that may be a private one.
    let embeds_v4 = (ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0]) || first == 0x2002;
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || unique_local
        || link_local
        || embeds_v4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(allow: &[&str], deny: &[&str]) -> Egress {
        Egress {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn deny_wins_and_a_rule_without_a_port_means_the_web() {
        let rules = egress(
            &["example.org", "*.pkg.example", "git.example:9418"],
            &["evil.pkg.example"],
        );
        assert_eq!(rules.verdict("example.org", 443), Verdict::Allowed);
        assert_eq!(rules.verdict("EXAMPLE.org.", 80), Verdict::Allowed);
        assert_eq!(rules.verdict("example.org", 22), Verdict::Unlisted);
        assert_eq!(rules.verdict("www.example.org", 443), Verdict::Unlisted);
        assert_eq!(rules.verdict("a.pkg.example", 443), Verdict::Allowed);
        assert_eq!(rules.verdict("pkg.example", 443), Verdict::Unlisted);
        assert_eq!(rules.verdict("xpkg.example", 443), Verdict::Unlisted);
        assert_eq!(
            rules.verdict("evil.pkg.example", 443),
            Verdict::Denied("evil.pkg.example".into())
        );
        assert_eq!(rules.verdict("git.example", 9418), Verdict::Allowed);
        assert_eq!(rules.verdict("git.example", 443), Verdict::Unlisted);
        assert_eq!(
            egress(&["*"], &[]).verdict("any.where", 443),
            Verdict::Allowed
        );
        assert_eq!(
            egress(&[], &[]).verdict("example.org", 443),
            Verdict::Unlisted
        );
        let any_port = egress(&["*:*"], &["*:25"]);
        assert_eq!(any_port.verdict("any.where", 5432), Verdict::Allowed);
        assert_eq!(
            any_port.verdict("mail.example", 25),
            Verdict::Denied("*:25".into())
        );
    }

    #[test]
    fn a_rule_that_cannot_be_read_is_named() {
        assert!(
            egress(&["example.org", "*.a.b:8080", "[::1]:443"], &[])
                .check_rules()
                .is_ok()
        );
        let bad = egress(&["example.org:http"], &[])
            .check_rules()
            .unwrap_err()
            .0;
        assert!(
            bad.contains("cage.egress.allow") && bad.contains("example.org:http"),
            "{bad}"
        );
        assert!(egress(&[], &["exa mple.org"]).check_rules().is_err());
        assert!(egress(&["*.*"], &[]).check_rules().is_err());
        assert!(egress(&["host:0"], &[]).check_rules().is_err());
    }

    #[test]
    fn only_public_addresses_are_reached() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
