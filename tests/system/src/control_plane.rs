//! A real control plane for end-to-end tests: etcd and kube-apiserver, built from their Go modules
//! by tests/control-plane/build.sh, started on free loopback ports with generated certificates and
//! an admin kubeconfig. One per test binary, shared by its tests (each in its own namespaces).
//!
//! On request, more programs join it: kube-controller-manager with the namespace, garbage
//! collector and EndpointSlice controllers ([`ControlPlane::start_controller_manager`]), or any other
//! ([`ControlPlane::start_once`], as `crate::cert_manager` does for cert-manager).
//!
//! Every process runs under a watchdog shell that kills it once the test process is gone, so
//! nothing outlives a test run, even one that panicked or was killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct ControlPlane {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
    /// etcd, kube-apiserver and whatever joined later.
    processes: std::sync::Mutex<Vec<Managed>>,
    /// Held while a program is prepared and started by [`ControlPlane::start_once`].
    starting: std::sync::Mutex<()>,
}

/// A program run by the control plane under its watchdog.
struct Managed {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    watchdog: Child,
    /// The API server whose `/readyz` says it is back after a restart: its own for a project's
    /// server, the control plane's for the rest.
    ready_at: String,
}

/// A kube-apiserver of project `name`'s own on the control plane's etcd
/// ([`ControlPlane::start_project_server`]).
pub struct ProjectServer {
    /// The process's name, for [`ControlPlane::restart`], [`ControlPlane::pause`] and the rest.
    pub name: String,
    pub server: String,
    /// An admin kubeconfig for it (the control plane's admin certificate).
    pub kubeconfig: PathBuf,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let processes = self.processes.get_mut().map(std::mem::take).unwrap_or_default();
        for mut p in processes.into_iter().rev() {
            stop(&mut p.watchdog);
        }
    }
}

/// Stop a watchdog and its program (TERM, then KILL after three seconds) and wait for it.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let _ = child.wait();
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();

/// The group of edgegate's ServiceAccounts (deploy/ puts them in edgegate-system).
pub const EDGEGATE_ACCOUNTS: &str = "system:serviceaccounts:edgegate-system";

/// Log lines of kube-controller-manager that together say its namespace controller runs and its
/// garbage collector has synced its monitors (kube-controller-manager serves no health port here).
const KCM_READY: [&str; 2] = ["\"Starting namespace controller\"", "\"Proceeding to collect garbage\""];

/// The static token of user `edgegate-producer` on every API server here (`--token-auth-file`).
pub const MILO_USER_TOKEN: &str = "edgegate-producer-test-token";
/// A second token of the same user: what a rotation hands over.
pub const MILO_USER_NEXT_TOKEN: &str = "edgegate-producer-test-token-next";

/// The test binary's control plane, started on first use.
pub fn shared() -> &'static ControlPlane {
    SHARED.get_or_init(|| ControlPlane::start(false))
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").args(args).current_dir(dir));
}

/// Start `program` under a watchdog that ends it when this test process ends.
pub fn spawn_guarded(program: &Path, args: &[String], log: &Path) -> Child {
    // TERM the program, give it three seconds, then KILL it: on the test's request (SIGTERM to
    // the watchdog), or once the test process is gone.
    let script = r#"prog="$1"; shift; "$prog" "$@" & child=$!
stop() { kill $child 2>/dev/null; for _ in 1 2 3 4 5 6; do kill -0 $child 2>/dev/null || exit 0; sleep 0.5; done; kill -9 $child 2>/dev/null; exit 0; }
trap stop TERM INT
while kill -0 "$WATCHED" 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 0.3; done
stop"#;
    // Appended to: a program started again (a restart, or a port used again) keeps the earlier
    // run's lines, which are what explains a fault afterwards.
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("watchdog")
        .arg(program)
        .args(args)
        .env("WATCHED", std::process::id().to_string())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()))
}

impl ControlPlane {
    /// A control plane of the caller's own, stopped when dropped (for tests that restart parts).
    pub fn own() -> ControlPlane {
        ControlPlane::start(false)
    }

    /// [`ControlPlane::own`] with an audit log of every write, at `dir/audit.log` (JSON lines):
    /// who wrote what, when, and for the project's kinds and the records what they wrote.
    pub fn own_audited() -> ControlPlane {
        ControlPlane::start(true)
    }

    /// Stop `name` (`etcd`, `kube-apiserver`, or a program started later), keep it down for
    /// `down`, start it again with the same flags and data, and wait until the API server answers
    /// again.
    pub fn restart(&self, name: &str, down: Duration) {
        self.pause(name);
        std::thread::sleep(down);
        self.resume(name);
    }

    /// Stop `name` until [`ControlPlane::resume`].
    pub fn pause(&self, name: &str) {
        let mut processes = self.processes.lock().expect("processes");
        let entry = processes.iter_mut().find(|p| p.name == name).expect("known process");
        stop(&mut entry.watchdog);
    }

    /// Start `name`, stopped by [`ControlPlane::pause`], again with the same flags and data, and
    /// wait until its API server answers again.
    pub fn resume(&self, name: &str) {
        let ready_at = {
            let mut processes = self.processes.lock().expect("processes");
            let entry = processes.iter_mut().find(|p| p.name == name).expect("known process");
            entry.watchdog = spawn_guarded(&entry.program, &entry.args, &self.dir.join(format!("{name}.log")));
            entry.ready_at.clone()
        };
        let apiserver = if name.starts_with("kube-apiserver-") { name } else { "kube-apiserver" };
        self.wait_ready(&ready_at, apiserver, Duration::from_secs(60)).unwrap_or_else(|why| panic!("{why}"));
    }

    /// A kube-apiserver for project `project` alone, on this control plane's etcd with its keys
    /// under `/projects/<project>` (Milo's layout: a storage of its own, one etcd for all), its
    /// flags the control plane's but for its port. It trusts the control plane for who a token
    /// is (a TokenReview to it, as a project behind Milo is reached with Milo's credentials);
    /// what a caller may do is its own RBAC's word. Logs and audits to `dir/<name>.log` and
    /// `dir/audit-<name>.log` (read by [`ControlPlane::refused`] too); stopped with the control
    /// plane.
    pub fn start_project_server(&self, project: &str) -> ProjectServer {
        let name = format!("kube-apiserver-{project}");
        let d = |f: &str| self.dir.join(f).display().to_string();
        let webhook = self.dir.join("token-review.kubeconfig");
        std::fs::write(
            &webhook,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: root\n  cluster:\n    server: {}/apis/authentication.k8s.io/v1/tokenreviews\n    certificate-authority: {}\n\
                 users:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\n\
                 contexts:\n- name: root\n  context: {{cluster: root, user: admin}}\ncurrent-context: root\n",
                self.server,
                d("ca.crt"),
                d("admin.crt"),
                d("admin.key")
            ),
        )
        .expect("token review kubeconfig");
        let (program, mut args) = {
            let processes = self.processes.lock().expect("processes");
            let main = processes.iter().find(|p| p.name == "kube-apiserver").expect("kube-apiserver");
            (main.program.clone(), main.args.clone())
        };
        let port = crate::helpers::free_port();
        args.retain(|a| !["--secure-port=", "--cert-dir=", "--audit-log-path="].iter().any(|f| a.starts_with(f)));
        args.extend([
            format!("--secure-port={port}"),
            format!("--cert-dir={}", d(&format!("{name}-certs"))),
            format!("--audit-log-path={}", d(&format!("audit-{name}.log"))),
            format!("--etcd-prefix=/projects/{project}"),
            format!("--authentication-token-webhook-config-file={}", webhook.display()),
            "--authentication-token-webhook-version=v1".into(),
        ]);
        let server = format!("https://127.0.0.1:{port}");
        let watchdog = spawn_guarded(&program, &args, &self.dir.join(format!("{name}.log")));
        let managed = Managed { name: name.clone(), program, args, watchdog, ready_at: server.clone() };
        self.processes.lock().expect("processes").push(managed);
        self.wait_ready(&server, &name, Duration::from_secs(90)).unwrap_or_else(|why| panic!("{why}"));
        let kubeconfig = self.dir.join(format!("{name}.kubeconfig"));
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        std::fs::write(&kubeconfig, admin.replace(&self.server, &server)).expect("kubeconfig");
        ProjectServer { name, server, kubeconfig }
    }

    /// Start the program `name` with this control plane, once: the first caller runs `prepare`
    /// (build it, install what it needs...), which returns the program and its arguments; it then
    /// runs under the watchdog, logs to `dir/<name>.log`, and is stopped with the control plane
    /// (`restart`, `pid` and `log_tail("<name>.log")` know it too). Returns true for the caller
    /// that started it; later and concurrent callers wait for that one and get false.
    pub fn start_once(
        &self,
        name: &'static str,
        prepare: impl FnOnce(&ControlPlane) -> (PathBuf, Vec<String>),
    ) -> bool {
        // A panicking `prepare` poisons the lock: the next caller tries again.
        let _starting = self.starting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.processes.lock().expect("processes").iter().any(|p| p.name == name) {
            return false;
        }
        let (program, args) = prepare(self);
        let watchdog = spawn_guarded(&program, &args, &self.dir.join(format!("{name}.log")));
        let managed = Managed { name: name.to_owned(), program, args, watchdog, ready_at: self.server.clone() };
        self.processes.lock().expect("processes").push(managed);
        true
    }

    /// Whether `name` (started by this control plane) is still running.
    pub fn is_running(&self, name: &str) -> bool {
        let mut processes = self.processes.lock().expect("processes");
        processes.iter_mut().find(|p| p.name == name).is_some_and(|p| matches!(p.watchdog.try_wait(), Ok(None)))
    }

    /// Start kube-controller-manager (built by tests/control-plane/build.sh beside kube-apiserver)
    /// with only the namespace, garbage-collector and EndpointSlice controllers, as the admin, without leader
    /// election or a serving port; once per control plane (later calls return at once). Returns
    /// when the namespace controller runs and the garbage collector has synced, so from then on
    /// deleted namespaces empty and go, and dependents of deleted owners are collected. Builds
    /// kube-controller-manager first if the cache lacks it (cold: ~16 CPU-minutes of Go build).
    pub fn start_controller_manager(&self) {
        let fresh = self.start_once("kube-controller-manager", |cp| {
            let out = Command::new(repo().join("tests/control-plane/build.sh"))
                .arg("kube-controller-manager")
                .stderr(Stdio::inherit())
                .output()
                .expect("build.sh runs");
            assert!(out.status.success(), "building kube-controller-manager failed");
            let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_owned());
            let args = vec![
                format!("--kubeconfig={}", cp.kubeconfig.display()),
                // The EndpointSlice controller too: a Service's endpoints from its Pods (the pod runner
                // reports Pods in a network namespace Running and Ready).
                "--controllers=namespace,garbagecollector,endpointslice".into(),
                "--leader-elect=false".into(),
                "--use-service-account-credentials=false".into(),
                "--bind-address=127.0.0.1".into(),
                "--secure-port=0".into(),
                "--v=2".into(),
            ];
            (bin.join("kube-controller-manager"), args)
        });
        if !fresh {
            return;
        }
        let (started, limit) = (Instant::now(), Duration::from_secs(90));
        loop {
            let log = std::fs::read_to_string(self.dir.join("kube-controller-manager.log")).unwrap_or_default();
            if KCM_READY.iter().all(|line| log.contains(line)) {
                break;
            }
            assert!(
                self.is_running("kube-controller-manager"),
                "kube-controller-manager exited; log tail:\n{}",
                self.log_tail("kube-controller-manager.log")
            );
            assert!(
                started.elapsed() < limit,
                "kube-controller-manager not ready within {limit:?}; log tail:\n{}",
                self.log_tail("kube-controller-manager.log")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("kube-controller-manager ready {:?} after it started", started.elapsed());
    }

    fn start(audited: bool) -> ControlPlane {
        let started = Instant::now();
        let out = Command::new(repo().join("tests/control-plane/build.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("build.sh runs");
        assert!(out.status.success(), "building the control plane failed");
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        // Ports are picked free and handed over, so another process (a client's ephemeral port,
        // a control plane starting beside this one) may take one first: start again on new ports.
        for attempt in 1.. {
            let plane = Self::launch(&bin, audited);
            match plane.wait_ready(&plane.server, "kube-apiserver", Duration::from_secs(90)) {
                Ok(()) => {
                    eprintln!("control plane ready in {:?} at {}", started.elapsed(), plane.server);
                    return plane;
                }
                Err(why) if attempt < 3 && why.contains("address already in use") => {
                    eprintln!("control plane: a port was taken meanwhile, starting again:\n{why}");
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// etcd and kube-apiserver on free ports, in a directory of their own.
    fn launch(bin: &Path, audited: bool) -> ControlPlane {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("edgegate-cp-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etcd")).expect("mkdir");
        Self::make_certs(&dir);

        let (peer, client, secure) =
            (crate::helpers::free_port(), crate::helpers::free_port(), crate::helpers::free_port());
        let etcd_args: Vec<String> = vec![
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
            format!("--listen-client-urls=http://127.0.0.1:{client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{client}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ];
        let etcd = spawn_guarded(&bin.join("etcd"), &etcd_args, &dir.join("etcd.log"));
        let d = |f: &str| dir.join(f).display().to_string();
        let tokens = format!(
            "{MILO_USER_TOKEN},edgegate-producer,edgegate-producer\n{MILO_USER_NEXT_TOKEN},edgegate-producer,edgegate-producer\n"
        );
        std::fs::write(dir.join("tokens.csv"), tokens).expect("tokens.csv");
        let mut apiserver_args: Vec<String> = vec![
            format!("--etcd-servers=http://127.0.0.1:{client}"),
            format!("--secure-port={secure}"),
            "--bind-address=127.0.0.1".into(),
            format!("--cert-dir={}", d("apiserver-certs")),
            format!("--tls-cert-file={}", d("apiserver.crt")),
            format!("--tls-private-key-file={}", d("apiserver.key")),
            format!("--client-ca-file={}", d("ca.crt")),
            // User `edgegate-producer` by a static token, as a Milo binds a user at its root
            // (deploy/milo): the producer's identity on the Milo stand-in.
            format!("--token-auth-file={}", d("tokens.csv")),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            // A webhook registered by Service is reached through its EndpointSlices, never its
            // ClusterIP: nothing here routes the service range, and no test may dial out of the
            // machine (with no ready endpoint, the call fails at once).
            "--enable-aggregator-routing=true".into(),
            "--allow-privileged=true".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer=https://127.0.0.1:{secure}/"),
            format!("--service-account-key-file={}", d("sa.pub")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            // The Milo stand-in carries every project's requests as streams of one HTTP/2
            // connection (tests/system/src/milo.rs), thousands of watches at a time.
            "--http2-max-streams-per-connection=100000".into(),
            "--v=1".into(),
        ];
        // Every request by one of edgegate's ServiceAccounts (or its user on Milo), reads included, with its answer's
        // code: a refused one ([`ControlPlane::refused`]) is what no test may let pass unnoticed.
        // Audited planes also log every write, and the project's objects and the records with
        // their bodies (what was written, to replay who saw what when).
        let mut rules = String::new();
        if audited {
            // The records' and Leases' writes with their answers too: the resourceVersion each
            // write made orders it against the fences' (crate::fence_audit). A copy's DELETE with
            // its options: the uid its preconditions name tells which copy of a name it was.
            rules.push_str(
                "- level: RequestResponse\n  verbs: [create, update, patch, delete]\n  resources: [{group: networking.datumapis.com}, {group: coordination.k8s.io, resources: [leases]}]\n\
                 - level: Request\n  verbs: [delete]\n  resources: [{group: discovery.k8s.io, resources: [endpointslices]}]\n\
                 - level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n",
            );
        }
        rules.push_str(&format!(
            "- level: Metadata\n  userGroups: [\"{EDGEGATE_ACCOUNTS}\"]\n- level: Metadata\n  users: [edgegate-producer]\n- level: None\n"
        ));
        let policy =
            format!("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n{rules}");
        std::fs::write(dir.join("audit-policy.yaml"), policy).expect("audit policy");
        apiserver_args.push(format!("--audit-policy-file={}", d("audit-policy.yaml")));
        apiserver_args.push(format!("--audit-log-path={}", d("audit.log")));
        // One file, never rotated (the default rotates at 100 MB, which a 30-minute soak passes):
        // the fence auditor and the write-rate checks read audit.log whole.
        apiserver_args.push("--audit-log-maxsize=100000".to_owned());
        let apiserver = spawn_guarded(&bin.join("kube-apiserver"), &apiserver_args, &dir.join("kube-apiserver.log"));
        let server = format!("https://127.0.0.1:{secure}");
        let kubeconfig = dir.join("admin.kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: cp\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
                 users:\n- name: admin\n  user:\n    client-certificate: {crt}\n    client-key: {key}\n\
                 contexts:\n- name: admin\n  context: {{cluster: cp, user: admin}}\ncurrent-context: admin\n",
                ca = d("ca.crt"),
                crt = d("admin.crt"),
                key = d("admin.key"),
            ),
        )
        .expect("kubeconfig");
        let processes = vec![
            Managed {
                name: "etcd".into(),
                program: bin.join("etcd"),
                args: etcd_args,
                watchdog: etcd,
                ready_at: server.clone(),
            },
            Managed {
                name: "kube-apiserver".into(),
                program: bin.join("kube-apiserver"),
                args: apiserver_args,
                watchdog: apiserver,
                ready_at: server.clone(),
            },
        ];
        ControlPlane {
            dir,
            kubeconfig,
            server,
            processes: std::sync::Mutex::new(processes),
            starting: std::sync::Mutex::new(()),
        }
    }

    fn make_certs(dir: &Path) {
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-sha256"];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend(["-days", "2", "-subj", "/CN=edgegate-test-ca", "-keyout", "ca.key", "-out", "ca.crt"]);
        openssl(dir, &ca);
        // Every network namespace's host address too: a Pod in one reaches the API server through a
        // relay there (crate::netns::relayed_kubeconfig).
        let links: String = crate::netns::host_addresses().iter().map(|a| format!(",IP:{a}")).collect();
        let apiserver_ext = format!("subjectAltName=IP:127.0.0.1{links},DNS:localhost\nextendedKeyUsage=serverAuth\n");
        for (name, subject, ext) in [
            ("apiserver", "/CN=kube-apiserver", apiserver_ext.as_str()),
            ("admin", "/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth\n"),
            // The producer's identity on Milo by client certificate (the user deploy/milo binds).
            ("milo-producer", "/CN=edgegate-producer", "extendedKeyUsage=clientAuth\n"),
        ] {
            let mut req = vec!["req"];
            req.extend(ec);
            let (key, csr, crt, extfile) =
                (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
            req.extend(["-subj", subject, "-keyout", &key, "-out", &csr]);
            openssl(dir, &req);
            std::fs::write(dir.join(&extfile), ext).expect("ext");
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &extfile,
                    "-out",
                    &crt,
                ],
            );
        }
        openssl(dir, &["genrsa", "-out", "sa.key", "2048"]);
        openssl(dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
    }

    /// Wait for `/readyz`; the reason and the logs' tails if it does not come within `limit`,
    /// or if etcd or kube-apiserver exits first.
    fn wait_ready(&self, server: &str, apiserver: &str, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let out = Command::new("curl")
                .args(["-sf", "--max-time", "2", "--cacert"])
                .arg(self.dir.join("ca.crt"))
                .arg("--cert")
                .arg(self.dir.join("admin.crt"))
                .arg("--key")
                .arg(self.dir.join("admin.key"))
                .arg(format!("{server}/readyz"))
                .output()
                .expect("curl");
            if out.status.success() {
                return Ok(());
            }
            let exited = ["etcd", apiserver].into_iter().find(|name| !self.is_running(name));
            if exited.is_some() || start.elapsed() >= limit {
                return Err(format!(
                    "{apiserver} not ready within {limit:?}{}; log tails:\n{}\n{}",
                    exited.map(|name| format!(" ({name} exited)")).unwrap_or_default(),
                    self.log_tail("etcd.log"),
                    self.log_tail(&format!("{apiserver}.log"))
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn log_tail(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// The pid of `name` (etcd, kube-apiserver, or a program started later) itself, under its
    /// watchdog shell.
    pub fn pid(&self, name: &str) -> u32 {
        let processes = self.processes.lock().expect("processes");
        let shell = processes.iter().find(|p| p.name == name).expect("known process").watchdog.id();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
        children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("the watched process")
    }

    /// The binary `name` (etcd, kube-apiserver, or a program started later) runs: what a profile
    /// of it is symbolised against.
    pub fn program(&self, name: &str) -> PathBuf {
        let processes = self.processes.lock().expect("processes");
        processes.iter().find(|p| p.name == name).expect("known process").program.clone()
    }

    /// The requests by edgegate's ServiceAccounts this API server's authorizer refused (403, the
    /// audit's `authorization.k8s.io/decision: forbid`; not an admission's 403, such as a write
    /// into a terminating namespace), from its audit log: `user verb uri`, each once.
    pub fn refused(&self) -> Vec<String> {
        self.refused_outside(&[]).0
    }

    /// [`ControlPlane::refused`], each with when it was received.
    pub fn refused_at(&self) -> Vec<(std::time::SystemTime, String)> {
        // The control plane's audit log and its project servers' (audit-<name>.log).
        let mut log = String::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with("audit") && file.ends_with(".log") {
                log.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
                log.push('\n'); // a last line half written ends here, not in the next file's first
            }
        }
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            // Refused by the authorizer (403, decision forbid), or a credential not accepted (401).
            .filter(|e| {
                let code = &e["responseStatus"]["code"];
                code == 401 || (code == 403 && e["annotations"]["authorization.k8s.io/decision"] == "forbid")
            })
            .filter(|e| e["user"]["groups"].as_array().is_some_and(|g| g.iter().any(|g| g == EDGEGATE_ACCOUNTS)))
            .map(|e| {
                let at = e["requestReceivedTimestamp"].as_str().and_then(|t| humantime::parse_rfc3339(t).ok());
                (
                    at.unwrap_or(std::time::UNIX_EPOCH),
                    format!("{} {} {}", e["user"]["username"], e["verb"], e["requestURI"]),
                )
            })
            .collect()
    }

    /// [`ControlPlane::refused`], but for refusals within 10 s after one of `restarts` (when the
    /// API server went down, when it answered again): a kube-apiserver just started refuses what
    /// its RBAC informers have not synced yet, and the binaries retry. Returns the refusals left
    /// (each once) and how many were excused.
    pub fn refused_outside(&self, restarts: &[(std::time::SystemTime, std::time::SystemTime)]) -> (Vec<String>, usize) {
        let (mut left, mut excused) = (std::collections::BTreeSet::new(), 0);
        for (at, what) in self.refused_at() {
            if restarts.iter().any(|(down, back)| *down <= at && at <= *back + Duration::from_secs(10)) {
                excused += 1;
            } else {
                left.insert(what);
            }
        }
        (left.into_iter().collect(), excused)
    }

    /// No request by edgegate's ServiceAccounts was refused.
    pub fn assert_nothing_refused(&self) {
        let refused = self.refused();
        assert!(refused.is_empty(), "the API server refused edgegate's requests: {refused:#?}");
    }

    /// An admin client.
    /// `kubectl` against this API server as the admin: its output, whatever its exit status.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs (on PATH; or PATH=\"$(tests/control-plane/build.sh kubectl):$PATH\")")
    }

    /// [`ControlPlane::kubectl`] that must succeed: its standard output.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub async fn client(&self) -> kube::Client {
        edgegate::runtime::client::kube_client(Some(&self.kubeconfig), None).await.expect("admin client")
    }

    /// A kubeconfig with a bound token of ServiceAccount `name` in `ns` (created if missing, and
    /// bound to ClusterRole `role` if given), valid for `seconds`: what a Karmada hub's binaries
    /// run with (docs/deploy.md).
    pub async fn service_account_kubeconfig(&self, ns: &str, name: &str, role: Option<&str>, seconds: i64) -> PathBuf {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        use kube::api::{Patch, PatchParams, PostParams};
        let client = self.client().await;
        let apply = PatchParams::apply("edgegate-tests").force();
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), ns);
        let account = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
        accounts.patch(name, &apply, &Patch::Apply(&account)).await.expect("service account");
        if let Some(role) = role {
            let binding = serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("{ns}-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
            });
            let bindings: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
                client,
                &kube::api::ApiResource::from_gvk_with_plural(
                    &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
                    "clusterrolebindings",
                ),
            );
            bindings.patch(&format!("{ns}-{name}"), &apply, &Patch::Apply(&binding)).await.expect("binding");
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec { expiration_seconds: Some(seconds), ..Default::default() }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .expect("token request")
            .status
            .and_then(|s| s.token)
            .expect("token");
        self.kubeconfig_with_token(&format!("{ns}-{name}"), &token)
    }

    /// A kubeconfig `dir/NAME.kubeconfig` for this API server (its CA) with `token` as the only
    /// credential.
    pub fn kubeconfig_with_token(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let (head, _) = admin.split_once("users:").expect("users");
        std::fs::write(
            &path,
            format!(
                "{head}users:\n- name: admin\n  user:\n    token: {token}\n\
                 contexts:\n- name: admin\n  context: {{cluster: cp, user: admin}}\ncurrent-context: admin\n"
            ),
        )
        .expect("kubeconfig");
        path
    }

    /// A kubeconfig that impersonates `user` (in `groups`) through the admin credentials.
    pub fn impersonating(&self, user: &str, groups: &[&str]) -> PathBuf {
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let groups = groups.iter().map(|g| format!("\"{g}\"")).collect::<Vec<_>>().join(", ");
        let text = admin.replace("  user:\n", &format!("  user:\n    as: \"{user}\"\n    as-groups: [{groups}]\n"));
        let path = self.dir.join(format!("{}.kubeconfig", user.replace(':', "-")));
        std::fs::write(&path, text).expect("kubeconfig");
        path
    }
}
