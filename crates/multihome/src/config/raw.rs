//! The TOML schema exactly as written in files (serde types with spans), before
//! validation. `deny_unknown_fields` everywhere: a misspelt key is an error.

use serde::Deserialize;
use toml::Spanned;

/// `client.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    pub client: ClientSection,
    #[serde(default)]
    pub link: Vec<Spanned<LinkSection>>,
    #[serde(default)]
    pub policy: PolicySection,
    #[serde(default)]
    pub relay: Vec<Spanned<RelaySection>>,
    pub naming: Option<Spanned<ClientNamingSection>>,
    pub stream: Option<Spanned<super::stream::StreamSection>>,
}

/// `[naming]` of client.toml (`super::naming`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientNamingSection {
    #[serde(default)]
    pub resolvers: Vec<Spanned<String>>,
    #[serde(default)]
    pub trusted_servers: Vec<Spanned<String>>,
    pub lease_s: Option<Spanned<u64>>,
}

/// `[naming]` of server.toml (`super::naming`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerNamingSection {
    pub listen: Spanned<String>,
    pub store: Spanned<String>,
    pub path: Option<Spanned<String>>,
    #[serde(default)]
    pub etcd: Vec<Spanned<String>>,
    #[serde(default)]
    pub advertise: Vec<Spanned<String>>,
    pub resolver_advertise: Option<Spanned<String>>,
    pub capacity: Option<Spanned<u32>>,
    pub lease_s: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySection {
    pub name: Option<String>,
    pub address: Spanned<String>,
    pub public_key: Spanned<String>,
    pub mode: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    pub private_key_file: Spanned<String>,
    pub server_public_key: Option<Spanned<String>>,
    pub server: Option<Spanned<String>>,
    /// `"resolve"` or a list of resolver addresses (`super::naming`).
    pub servers: Option<Spanned<toml::Value>>,
    #[serde(default = "default_tun")]
    pub tun_name: Spanned<String>,
    /// One prefix, or a list of one IPv4 and one IPv6 prefix (`super::addresses`).
    pub tun_address: Spanned<toml::Value>,
    #[serde(default)]
    pub routes: Vec<Spanned<String>>,
    pub control_socket: Option<String>,
    pub metrics_listen: Option<Spanned<String>>,
    pub dashboard: Option<Spanned<String>>,
    pub detect_ms: Option<Spanned<u64>>,
    pub keepalive_ms: Option<Spanned<u64>>,
    pub failback_hold_ms: Option<u64>,
    pub mtu: Option<Spanned<u32>>,
    pub aggregate_scheduler: Option<Spanned<String>>,
    pub cipher: Option<Spanned<String>>,
    pub detours: Option<Spanned<u32>>,
    #[serde(default)]
    pub kernel_copies: bool,
    pub hold_max_mb: Option<Spanned<u64>>,
    pub hold_max_s: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSection {
    pub name: String,
    pub interface: Spanned<String>,
    pub server: Option<Spanned<String>>,
    pub cost: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    pub default: Option<Spanned<String>>,
    #[serde(default)]
    pub rule: Vec<RuleSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSection {
    pub name: String,
    pub protocol: Option<Spanned<String>>,
    pub ports: Option<Spanned<String>>,
    pub dscp: Option<Spanned<u8>>,
    pub policy: Spanned<String>,
    pub copies: Option<Spanned<u8>>,
    pub deadline_ms: Option<Spanned<u32>>,
    pub fec: Option<Spanned<bool>>,
}

/// `server.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    pub server: ServerSection,
    #[serde(default)]
    pub peer: Vec<Spanned<PeerSection>>,
    #[serde(default)]
    pub relay: Vec<Spanned<RelaySection>>,
    pub naming: Option<Spanned<ServerNamingSection>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Spanned<String>,
    pub private_key_file: Spanned<String>,
    #[serde(default = "default_tun")]
    pub tun_name: Spanned<String>,
    /// One prefix, or a list of one IPv4 and one IPv6 prefix (`super::addresses`).
    pub tun_address: Spanned<toml::Value>,
    pub uplink: Option<Spanned<String>>,
    pub control_socket: Option<String>,
    pub metrics_listen: Option<Spanned<String>>,
    pub dashboard: Option<Spanned<String>>,
    pub detect_ms: Option<Spanned<u64>>,
    pub keepalive_ms: Option<Spanned<u64>>,
    pub mtu: Option<Spanned<u32>>,
    pub default_policy: Option<Spanned<String>>,
    pub cipher: Option<Spanned<String>>,
    pub hold_max_mb: Option<Spanned<u64>>,
    pub hold_max_s: Option<Spanned<u64>>,
    #[serde(default)]
    pub kernel_copies: bool,
    pub redundant_copies: Option<Spanned<u8>>,
    #[serde(default)]
    pub stream: bool,
    pub stream_congestion_control: Option<Spanned<String>>,
    pub threads: Option<Spanned<u16>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    pub name: String,
    pub public_key: Spanned<String>,
    #[serde(default)]
    pub allowed_ips: Vec<Spanned<String>>,
}

fn default_tun() -> Spanned<String> {
    Spanned::new(0..0, "mh0".to_string())
}
