//! The container image built without a container engine (scripts/image.sh): built twice from the
//! same binaries it has the same digest; its layers, unpacked in order, make a root filesystem in
//! which every binary runs as the image's user (chroot, uid 65532); the webhook from it answers a
//! review and the pruner from it lists the test API server; and it agrees with the Dockerfile.

use std::process::Command;

use edgegate_system_tests::helpers::*;

const BINARIES: [&str; 4] = ["edgegate-webhook", "edgegate-pruner", "edgegate-producer", "edgegate"];
const USER: &str = "65532:65532";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_is_reproducible_and_its_binaries_run_from_it() {
    // The test profile's binaries (beside binary("edgegate-webhook")), taken as they are now: hard
    // links (copies across file systems), so that cargo relinking them meanwhile cannot make the
    // two builds differ.
    let tmp = tempfile::tempdir().expect("tempdir");
    let bins = tmp.path().join("bin");
    std::fs::create_dir(&bins).expect("mkdir");
    for b in BINARIES {
        let (from, to) = (binary(b), bins.join(b));
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).expect("copy the binary");
        }
    }

    // Reproducible: two builds from the same inputs, one digest and the same bytes.
    let first = tmp.path().join("first.tar");
    let second = tmp.path().join("second.tar");
    let (digest, took) = build_image(&bins, &first);
    eprintln!("image {digest} built in {took:?}");
    let (again, took) = build_image(&bins, &second);
    eprintln!("rebuilt in {took:?}");
    assert_eq!(digest, again, "two builds from the same inputs differ");
    assert!(run_bounded(Command::new("cmp").arg(&first).arg(&second), 60).status.success(), "the archives differ");
    std::fs::remove_file(&second).expect("rm");

    // The archive: manifest.json names the config and the layers, in order.
    let unpacked = tmp.path().join("archive");
    std::fs::create_dir(&unpacked).expect("mkdir");
    untar(&first, &unpacked, false);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(unpacked.join("manifest.json")).expect("manifest.json")).expect("json");
    let manifest = &manifest[0];
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(unpacked.join(manifest["Config"].as_str().expect("Config"))).expect("config"),
    )
    .expect("config json");
    let image = &config["config"];
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(image["User"], USER);
    assert_eq!(image["Entrypoint"], json!(["/usr/local/bin/edgegate-webhook"]));
    assert_eq!(image["WorkingDir"], "/");
    for label in ["source", "revision", "version"] {
        let value = image["Labels"][format!("org.opencontainers.image.{label}")].as_str().unwrap_or_default();
        assert!(!value.is_empty(), "label {label} missing: {image}");
    }
    assert_eq!(image["Labels"]["org.opencontainers.image.version"], env!("CARGO_PKG_VERSION"));
    dockerfile_agrees(image);

    if !runs_as_root("chroot into the image") {
        return;
    }

    // The root filesystem: the layers in order; / and /tmp as a container runtime makes them.
    let rootfs = tmp.path().join("rootfs");
    std::fs::create_dir(&rootfs).expect("mkdir");
    let layers = manifest["Layers"].as_array().expect("Layers");
    assert_eq!(layers.len(), 2, "{manifest}");
    for layer in layers {
        untar(&unpacked.join(layer.as_str().expect("layer")), &rootfs, true);
    }
    std::fs::remove_dir_all(&unpacked).expect("rm");
    chmod(&rootfs, 0o755);
    std::fs::create_dir_all(rootfs.join("tmp/records")).expect("mkdir");
    chmod(&rootfs.join("tmp"), 0o1777);
    let path_env = image["Env"]
        .as_array()
        .and_then(|e| e.iter().find_map(|v| v.as_str()?.strip_prefix("PATH=")))
        .expect("PATH in the image's Env")
        .to_owned();

    // Each binary, as the image's user, prints the version the host's copy prints.
    for b in BINARIES {
        let (program, args) = in_image(&rootfs, &path_env, b);
        let inside = run_bounded(Command::new(program).args(args).arg("--version"), 30);
        assert!(inside.status.success(), "{b} --version in the image: {}", String::from_utf8_lossy(&inside.stderr));
        let host = run_bounded(Command::new(bins.join(b)).arg("--version"), 30);
        assert_eq!(String::from_utf8_lossy(&inside.stdout), String::from_utf8_lossy(&host.stdout), "{b}");
        eprintln!("in the image: {}", String::from_utf8_lossy(&inside.stdout).trim());
    }

    // The webhook: a self-signed certificate and records under /tmp, a review answered.
    let cp = shared();
    let port = free_port();
    let log = cp.dir.join(format!("image-webhook-{port}.log"));
    let webhook = start_in_image(
        &rootfs,
        &path_env,
        "edgegate-webhook",
        &[
            format!("--listen=127.0.0.1:{port}"),
            "--self-signed=/tmp/tls".into(),
            "--records-dir=/tmp/records".into(),
            "--shutdown-grace=1s".into(),
        ],
        port,
        log,
    );
    let ca = rootfs.join("tmp/tls/ca.crt");
    eventually(Duration::from_secs(30), "webhook from the image ready", async || {
        ca.exists() && http_status(&format!("https://127.0.0.1:{port}/readyz"), Some(&ca)) == 200
    })
    .await;
    assert_eq!(uid_of(&webhook), 65532, "the webhook's uid");
    let out = run_bounded(
        Command::new("curl")
            .args(["-s", "--max-time", "10", "-w", "\n%{http_code}", "-H", "Content-Type: application/json"])
            .arg("--cacert")
            .arg(&ca)
            .arg("--data-binary")
            .arg(format!("@{}", repo().join("tests/fixtures/copy-create.json").display()))
            .arg(format!("https://127.0.0.1:{port}/validate")),
        20,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, status) = text.rsplit_once('\n').expect("body and status");
    assert_eq!(status, "200", "{body}\n{}", webhook.log());
    assert!(body.replace(' ', "").contains("\"allowed\":true"), "{body}");
    drop(webhook);

    // The pruner, with a kubeconfig of its own ServiceAccount's token (deploy/'s RBAC applied)
    // copied into the image. Its flags are the test's: what is checked here is the image.
    deploy_dev_certs();
    let render = edgegate_system_tests::pod::Render::of(&edgegate_system_tests::pod::kustomization_with(
        "image",
        &["overlays/dev"],
        &[],
        "",
    ));
    render.apply_but_admission(cp);
    let token = cp.service_account_kubeconfig("edgegate-system", "edgegate-pruner", None, 3600).await;
    let kube = rootfs.join("tmp/kube");
    std::fs::create_dir(&kube).expect("mkdir");
    std::fs::copy(cp.dir.join("ca.crt"), kube.join("ca.crt")).expect("copy the CA");
    let kubeconfig = std::fs::read_to_string(&token).expect("kubeconfig");
    std::fs::write(kube.join("kubeconfig"), kubeconfig.replace(&cp.dir.display().to_string(), "/tmp/kube"))
        .expect("kubeconfig");
    for f in ["", "ca.crt", "kubeconfig"] {
        std::os::unix::fs::chown(kube.join(f), Some(65532), Some(65532)).expect("chown");
    }
    let port = free_port();
    let log = cp.dir.join(format!("image-pruner-{port}.log"));
    let pruner = start_in_image(
        &rootfs,
        &path_env,
        "edgegate-pruner",
        &[
            "--kubeconfig=/tmp/kube/kubeconfig".into(),
            format!("--listen=127.0.0.1:{port}"),
            format!("--copy-selector={COPY_LABEL}=true,edgegate-e2e=image"),
            "--grace=0".into(),
            "--no-leader-election".into(),
        ],
        port,
        log,
    );
    eventually(Duration::from_secs(60), "pruner from the image ready (listed the API server)", async || {
        let ready = http_status(&format!("http://127.0.0.1:{port}/readyz"), None) == 200;
        assert!(pruner_alive(&pruner), "the pruner from the image stopped:\n{}", pruner.log());
        ready
    })
    .await;
    assert_eq!(uid_of(&pruner), 65532, "the pruner's uid");
    cp.assert_nothing_refused();
}

/// scripts/image.sh --bin-dir `bins` --out `out`: the digest it printed, and how long it took.
fn build_image(bins: &Path, out: &Path) -> (String, Duration) {
    let started = Instant::now();
    let output = run_bounded(
        // The test's own binaries: their producer has the test-only flags.
        Command::new(repo().join("scripts/image.sh"))
            .arg("--bin-dir")
            .arg(bins)
            .arg("--out")
            .arg(out)
            .arg("--test-build"),
        // Cold: the builder is compiled and the packages are fetched first.
        1200,
    );
    assert!(output.status.success(), "image.sh failed:\n{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let digest = lines.next().unwrap_or_default().to_owned();
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "not a digest: {stdout}");
    assert_eq!(lines.next().map(Path::new), Some(out), "the archive's path: {stdout}");
    assert!(out.exists());
    (digest, started.elapsed())
}

fn untar(archive: &Path, into: &Path, numeric_owner: bool) {
    let mut cmd = Command::new("tar");
    cmd.arg("-xf").arg(archive).arg("-C").arg(into);
    if numeric_owner {
        cmd.args(["--numeric-owner", "--same-owner", "--same-permissions"]);
    }
    let out = run_bounded(&mut cmd, 300);
    assert!(out.status.success(), "untar {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// `env -i PATH=<the image's> chroot --userspec=65532:65532 <rootfs> /usr/local/bin/<bin>`:
/// the program and its arguments.
fn in_image(rootfs: &Path, path_env: &str, bin: &str) -> (PathBuf, Vec<String>) {
    let args = vec![
        "-i".to_owned(),
        format!("PATH={path_env}"),
        "chroot".into(),
        format!("--userspec={USER}"),
        rootfs.display().to_string(),
        format!("/usr/local/bin/{bin}"),
    ];
    (PathBuf::from("/usr/bin/env"), args)
}

/// A binary of the image, started in it under the test's watchdog.
fn start_in_image(rootfs: &Path, path_env: &str, bin: &str, args: &[String], port: u16, log: PathBuf) -> Process {
    let (program, mut full) = in_image(rootfs, path_env, bin);
    full.extend(args.iter().cloned());
    // env and chroot exec the binary: the watchdog's child is the binary itself.
    let child = spawn_guarded(&program, &full, &log);
    Process { child, port, log }
}

fn pruner_alive(p: &Process) -> bool {
    let shell = p.child.id();
    std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).is_ok_and(|c| !c.trim().is_empty())
}

/// The effective uid of the binary under a watchdog, once it has exec'd past env and chroot.
fn uid_of(p: &Process) -> u32 {
    let pid = pid_of(p);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .expect("Uid")
}

/// The Dockerfile's final image: the binaries it puts in /usr/local/bin, its USER and ENTRYPOINT,
/// the same as this image's.
fn dockerfile_agrees(image: &serde_json::Value) {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let last_stage = text.rsplit_once("\nFROM ").map(|(_, s)| s).expect("a final FROM");
    let line = |instruction: &str| {
        last_stage
            .lines()
            .find_map(|l| l.strip_prefix(instruction).map(str::trim))
            .unwrap_or_else(|| panic!("no {instruction}in the Dockerfile's final stage"))
    };
    assert_eq!(line("USER "), image["User"], "USER");
    let entrypoint: serde_json::Value = serde_json::from_str(line("ENTRYPOINT ")).expect("ENTRYPOINT in exec form");
    assert_eq!(entrypoint, image["Entrypoint"], "ENTRYPOINT");
    // Named in /usr/local/bin directly, or installed into /out/ which is copied there.
    let copies_out = last_stage.lines().any(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.first() == Some(&"COPY") && words.ends_with(&["/out/", "/usr/local/bin/"])
    });
    let mut named: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '[' || c == ']')
        .filter_map(|w| {
            w.strip_prefix("/usr/local/bin/").or_else(|| if copies_out { w.strip_prefix("/out/") } else { None })
        })
        .filter(|b| !b.is_empty())
        .collect();
    named.sort_unstable();
    named.dedup();
    let mut expected: Vec<&str> = BINARIES.to_vec();
    expected.sort_unstable();
    assert_eq!(named, expected, "the binaries the Dockerfile puts in /usr/local/bin");
}
