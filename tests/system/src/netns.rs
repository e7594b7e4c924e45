//! The test's own hosts, for what needs an address that is neither loopback nor link-local: a
//! network namespace joined to this one by a veth pair (root only), and a relay that lets the
//! API server on loopback be reached through it.

/// The test's own hosts: a network namespace joined to this one by a veth pair, in the RFC 2544
/// benchmarking range so they can meet nothing real. Torn down when dropped.
pub struct NetNs {
    pub name: String,
    host_link: String,
    /// Held while the namespace exists (released after the teardown in `drop`): the addresses
    /// are fixed, so tests that need one take turns, in this process and across processes.
    _turn: std::fs::File,
}

pub const NETNS_HOST_ADDRESS: &str = "198.18.77.1";
pub const NETNS_ADDRESS: &str = "198.18.77.2";

fn ip(args: &[&str]) {
    let status = std::process::Command::new("ip").args(args).status().expect("ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl NetNs {
    /// Needs root (`ip netns`). One at a time per machine (the addresses are fixed): waits for
    /// the one in use to be dropped.
    pub fn create() -> NetNs {
        let turn = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::env::temp_dir().join("edgegate-netns.lock"))
            .expect("netns lock file");
        let waited = std::time::Instant::now();
        turn.lock().expect("netns lock");
        if waited.elapsed() > std::time::Duration::from_secs(1) {
            eprintln!("network namespace: waited {:?} for the one in use", waited.elapsed());
        }
        let id = std::process::id() % 100_000;
        let (name, host_link, ns_link) = (format!("edgegate-{id}"), format!("eg{id}h"), format!("eg{id}n"));
        // Whatever a process killed before its drop ran left behind: with the turn held, no
        // other namespace of ours is in use, and a stale one would still route the addresses.
        remove_leftovers();
        ip(&["netns", "add", &name]);
        let netns = NetNs { name, host_link, _turn: turn };
        ip(&["link", "add", &netns.host_link, "type", "veth", "peer", "name", &ns_link]);
        ip(&["link", "set", &ns_link, "netns", &netns.name]);
        ip(&["addr", "add", &format!("{NETNS_HOST_ADDRESS}/30"), "dev", &netns.host_link]);
        ip(&["link", "set", &netns.host_link, "up"]);
        let inside = |args: &[&str]| ip(&[&["netns", "exec", &netns.name, "ip"], args].concat());
        inside(&["addr", "add", &format!("{NETNS_ADDRESS}/30"), "dev", &ns_link]);
        inside(&["link", "set", &ns_link, "up"]);
        inside(&["link", "set", "lo", "up"]);
        netns
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

/// Every namespace and host link of ours that exists (names `edgegate-<id>`, `eg<id>h`).
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
        if name.len() > 3
            && name.starts_with("eg")
            && name.ends_with('h')
            && name[2..name.len() - 1].bytes().all(|b| b.is_ascii_digit())
        {
            let _ = std::process::Command::new("ip").args(["link", "del", name]).status();
        }
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

/// The API server's admin kubeconfig, pointed at a relay on the link's host side: how a process in
/// the namespace reaches it (its serving certificate names that address too).
pub async fn kubeconfig_through_link(cp: &crate::control_plane::ControlPlane, file: &str) -> std::path::PathBuf {
    relayed_kubeconfig(cp, &cp.kubeconfig, file).await
}

/// [`kubeconfig_through_link`] of another kubeconfig of `cp`'s (a ServiceAccount's).
pub async fn relayed_kubeconfig(
    cp: &crate::control_plane::ControlPlane,
    from: &std::path::Path,
    file: &str,
) -> std::path::PathBuf {
    let listener = tokio::net::TcpListener::bind((NETNS_HOST_ADDRESS, 0)).await.expect("bind on the link");
    let through = listener.local_addr().expect("addr");
    let api_server: std::net::SocketAddr =
        cp.server.trim_start_matches("https://").parse().expect("API server address");
    tokio::spawn(forward(listener, api_server));
    let kubeconfig = cp.dir.join(file);
    let from = std::fs::read_to_string(from).expect("kubeconfig");
    std::fs::write(&kubeconfig, from.replace(&cp.server, &format!("https://{through}"))).expect("kubeconfig");
    kubeconfig
}
