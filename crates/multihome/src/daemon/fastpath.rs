//! The client's kernel fast path for `redundant` copies (`[client] kernel_copies = true`):
//! the core seals a packet that needs copies once (`Transmit::kernel_copies`), the driver
//! sends it from the link's copy socket (`io::LinkBind`), and the kernel copies it onto the
//! other links by the nftables table this module keeps (`multihome_io::dup`).
//!
//! Invariants: the table describes the sockets bound now — it is installed after the
//! first binding and replaced whenever a link event may have changed a socket or an
//! address; a link without both sockets or without an IPv4 address (or with an IPv6
//! server) is left out, so nothing is copied onto it. The table is removed when the
//! [`FastPath`] is dropped (daemon exit, even on an error); a table left by a daemon that
//! was killed is replaced at the next start, or removed there if the fast path is off.

use super::io::LinkBind;
use multihome_io::dup::{self, DupLink, KernelCopies};
use std::net::{IpAddr, SocketAddr};

/// Name of the nftables table (`ip multihome_dup`).
pub const TABLE: &str = "multihome_dup";

/// The installed table and what it was built from; inert when the fast path is off.
pub struct FastPath {
    table: Option<KernelCopies>,
    installed: Vec<DupLink>,
}

impl FastPath {
    /// Installs the table for `bind`'s sockets (replacing a leftover), or with the fast
    /// path off removes a leftover.
    pub fn start(enabled: bool, bind: &LinkBind) -> anyhow::Result<FastPath> {
        if !enabled {
            if let Err(e) = dup::remove_leftover(TABLE) {
                tracing::debug!("no fast-path table to remove: {e}");
            }
            return Ok(FastPath {
                table: None,
                installed: Vec::new(),
            });
        }
        let links = links(bind);
        let table = KernelCopies::install(TABLE, &links)?;
        tracing::info!(
            table = TABLE,
            links = links.len(),
            "kernel fast path installed"
        );
        Ok(FastPath {
            table: Some(table),
            installed: links,
        })
    }

    /// Replaces the rules if the sockets or addresses changed.
    pub fn refresh(&mut self, bind: &LinkBind) {
        let Some(table) = &self.table else { return };
        let links = links(bind);
        if links == self.installed {
            return;
        }
        match table.update(&links) {
            Ok(()) => {
                tracing::info!(links = links.len(), "kernel fast path updated");
                self.installed = links;
            }
            Err(e) => tracing::warn!("kernel fast path not updated: {e}"),
        }
    }
}

/// What the table needs of each usable link.
fn links(bind: &LinkBind) -> Vec<DupLink> {
    bind.links()
        .iter()
        .filter_map(|l| {
            let (port, copy_port) = l.ports()?;
            let SocketAddr::V4(server) = l.server else {
                return None;
            };
            let local = multihome_io::netlink::interface_addresses(&l.interface)
                .ok()?
                .into_iter()
                .find_map(|a| match a.addr() {
                    IpAddr::V4(v4) => Some(v4),
                    IpAddr::V6(_) => None,
                })?;
            Some(DupLink {
                interface: l.interface.clone(),
                local,
                port,
                copy_port,
                server,
            })
        })
        .collect()
}
