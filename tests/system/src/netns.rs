//! The test's own hosts, for what needs an address that is neither loopback nor link-local: a
//! network namespace joined to this one by a veth pair (root only), and a relay that lets the
//! API server on loopback be reached through it.

/// The test's own hosts: a network namespace joined to this one by a veth pair, in the RFC 2544
/// benchmarking range so they can meet nothing real. Torn down when dropped.
pub struct NetNs {
    pub name: String,
    /// The address inside (a Pod's address, when a Pod runs there).
    pub address: String,
    /// The link's host end: where a process inside reaches this network namespace's relays.
    pub host_address: String,
    host_link: String,
    /// Held while the namespace exists (released after the teardown in `drop`, by the last of
    /// the namespaces [`NetNs::create_many`] made together): the addresses are fixed, so tests
    /// that need them take turns, in this process and across processes.
    _turn: std::sync::Arc<std::fs::File>,
}

/// How many namespaces one test may have at once ([`NetNs::create_many`]); the test API server's
/// serving certificate names each one's host address ([`host_addresses`]).
pub const SLOTS: usize = 8;

/// Slot `k`'s host address and address: 198.18.77.{4k+1} and 198.18.77.{4k+2}, a /30 each.
fn slot_addresses(k: usize) -> (String, String) {
    (format!("198.18.77.{}", 4 * k + 1), format!("198.18.77.{}", 4 * k + 2))
}

/// The host address of every slot: what a relay for a process in a namespace binds on.
pub fn host_addresses() -> Vec<String> {
    (0..SLOTS).map(|k| slot_addresses(k).0).collect()
}

fn ip(args: &[&str]) {
    let status = std::process::Command::new("ip").args(args).status().expect("ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl NetNs {
    /// Needs root (`ip netns`). One test at a time per machine (the addresses are fixed): waits
    /// for the namespaces in use to be dropped.
    pub fn create() -> NetNs {
        NetNs::create_many(1).pop().expect("one namespace")
    }

    /// `n` namespaces (at most [`SLOTS`]) under one turn, each with its own link and addresses
    /// (slot 0's are 198.18.77.1 and .2): several Pods, each at an address of its own.
    pub fn create_many(n: usize) -> Vec<NetNs> {
        assert!((1..=SLOTS).contains(&n), "1 to {SLOTS} network namespaces, not {n}");
        let turn = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::env::temp_dir().join("edgegate-netns.lock"))
            .expect("netns lock file");
        let waited = std::time::Instant::now();
        turn.lock().expect("netns lock");
        if waited.elapsed() > std::time::Duration::from_secs(1) {
            eprintln!("network namespace: waited {:?} for the ones in use", waited.elapsed());
        }
        let turn = std::sync::Arc::new(turn);
        // Whatever a process killed before its drop ran left behind: with the turn held, no
        // other namespace of ours is in use, and a stale one would still route the addresses.
        remove_leftovers();
        let id = std::process::id() % 100_000;
        (0..n)
            .map(|k| {
                // Link names stay within the kernel's 15 characters: eg99999-7h.
                let (name, host_link, ns_link) =
                    (format!("edgegate-{id}-{k}"), format!("eg{id}-{k}h"), format!("eg{id}-{k}n"));
                let (host_address, address) = slot_addresses(k);
                ip(&["netns", "add", &name]);
                let netns = NetNs { name, address, host_address, host_link, _turn: std::sync::Arc::clone(&turn) };
                ip(&["link", "add", &netns.host_link, "type", "veth", "peer", "name", &ns_link]);
                ip(&["link", "set", &ns_link, "netns", &netns.name]);
                ip(&["addr", "add", &format!("{}/30", netns.host_address), "dev", &netns.host_link]);
                ip(&["link", "set", &netns.host_link, "up"]);
                let inside = |args: &[&str]| ip(&[&["netns", "exec", &netns.name, "ip"], args].concat());
                inside(&["addr", "add", &format!("{}/30", netns.address), "dev", &ns_link]);
                inside(&["link", "set", &ns_link, "up"]);
                inside(&["link", "set", "lo", "up"]);
                netns
            })
            .collect()
    }

    /// Drop the link (no reset reaches either side: packets just stop) or bring it back.
    pub fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_link, if up { "up" } else { "down" }]);
    }

    /// An HTTP status from inside the namespace.
    pub fn http_status(&self, url: &str) -> u16 {
        let out = self.curl(&["-o", "/dev/null", "-w", "%{http_code}", url]);
        out.trim().parse().unwrap_or(0)
    }

    pub fn curl(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, "curl", "-s", "--max-time", "2"])
            .args(args)
            .output()
            .expect("curl in the namespace");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Every namespace and host link of ours that exists (names `edgegate-<id>[-<slot>]`,
/// `eg<id>[-<slot>]h`).
fn remove_leftovers() {
    let list = |args: &[&str]| {
        let out = std::process::Command::new("ip").args(args).output().map(|o| o.stdout).unwrap_or_default();
        String::from_utf8_lossy(&out).into_owned()
    };
    for name in list(&["netns", "list"]).lines().filter_map(|l| l.split_whitespace().next()) {
        if name.starts_with("edgegate-") {
            let _ = std::process::Command::new("ip").args(["netns", "del", name]).status();
        }
    }
    for line in list(&["-o", "link", "show"]).lines() {
        let name = line.split(':').nth(1).map(str::trim).and_then(|n| n.split('@').next()).unwrap_or_default();
        if is_host_link(name) {
            let _ = std::process::Command::new("ip").args(["link", "del", name]).status();
        }
    }
}

/// `eg<digits>h` or `eg<digits>-<digits>h`: a host link of ours.
fn is_host_link(name: &str) -> bool {
    let Some(middle) = name.strip_prefix("eg").and_then(|n| n.strip_suffix('h')) else { return false };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match middle.split_once('-') {
        Some((id, slot)) => digits(id) && digits(slot),
        None => digits(middle),
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["link", "del", &self.host_link]).status();
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// Plain TCP from `listener` to `to`, so that the API server on loopback is reachable from the
/// namespace only through the veth link.
pub async fn forward(listener: tokio::net::TcpListener, to: std::net::SocketAddr) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// Kubeconfig `from` of `cp`'s (a Pod's token) pointed at a relay on `netns`'s host address: how a
/// process in the namespace reaches the API server (its serving certificate names every slot's
/// host address, [`host_addresses`]).
pub async fn relayed_kubeconfig(
    cp: &crate::control_plane::ControlPlane,
    netns: &NetNs,
    from: &std::path::Path,
    file: &str,
) -> std::path::PathBuf {
    let listener = tokio::net::TcpListener::bind((netns.host_address.as_str(), 0)).await.expect("bind on the link");
    let through = listener.local_addr().expect("addr");
    let api_server: std::net::SocketAddr =
        cp.server.trim_start_matches("https://").parse().expect("API server address");
    tokio::spawn(forward(listener, api_server));
    let kubeconfig = cp.dir.join(file);
    let from = std::fs::read_to_string(from).expect("kubeconfig");
    std::fs::write(&kubeconfig, from.replace(&cp.server, &format!("https://{through}"))).expect("kubeconfig");
    kubeconfig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_links_of_ours_and_only_ours() {
        for ours in ["eg1234h", "eg1234-0h", "eg99999-7h"] {
            assert!(is_host_link(ours), "{ours}");
        }
        for other in ["eg1234n", "eg1234-0n", "egh", "eg-1h", "eg12-h", "eg1-2-3h", "eth0", "eg12ah"] {
            assert!(!is_host_link(other), "{other}");
        }
        assert!(host_addresses().iter().all(|a| a.len() <= "198.18.77.253".len()));
        assert_eq!(slot_addresses(0), ("198.18.77.1".to_owned(), "198.18.77.2".to_owned()));
        assert_eq!(slot_addresses(SLOTS - 1).1, format!("198.18.77.{}", 4 * (SLOTS - 1) + 2));
    }
}
