//! What a kubeconfig authenticates with: whether this process can use it (said at start, not by
//! every request failing later), when it expires, and which files hold it.

use std::path::{Path, PathBuf};

use kube::config::{AuthInfo, Kubeconfig};
use secrecy::ExposeSecret;

use super::flags::HubArgs;

/// What a kubeconfig may authenticate with here. An exec plugin only where its command can be
/// found: the release image carries none (no shell, no cloud CLI).
const SUPPORTED: &str = "a client certificate, a token, or a tokenFile (re-read as it is rotated)";

/// `Err(why)` when the user of `kubeconfig`'s context (or current context) authenticates in a way
/// this process cannot: an exec plugin whose command is not found, or an auth-provider.
pub fn supported(kubeconfig: &Kubeconfig, context: Option<&str>) -> anyhow::Result<()> {
    let Some((user, auth)) = user(kubeconfig, context) else { return Ok(()) };
    if let Some(provider) = &auth.auth_provider {
        anyhow::bail!(
            "user {user} authenticates with the auth-provider {:?}, which edgegate does not support; use {SUPPORTED}",
            provider.name
        );
    }
    if let Some(command) = auth.exec.as_ref().and_then(|e| e.command.as_deref())
        && !found(command)
    {
        anyhow::bail!(
            "user {user} authenticates with the exec plugin {command:?}, which is not found here (the release image carries none); use {SUPPORTED}"
        );
    }
    Ok(())
}

/// The user of `context` (or the current context) and how it authenticates.
fn user<'k>(kubeconfig: &'k Kubeconfig, context: Option<&str>) -> Option<(&'k str, &'k AuthInfo)> {
    let name = context.or(kubeconfig.current_context.as_deref())?;
    let context = kubeconfig.contexts.iter().find(|c| c.name == name)?.context.as_ref()?;
    let user = context.user.as_deref()?;
    let auth = kubeconfig.auth_infos.iter().find(|a| a.name == user)?.auth_info.as_ref()?;
    Some((user, auth))
}

/// Whether `command` names a file, directly (with a slash) or on `PATH`, as an exec plugin is run.
fn found(command: &str) -> bool {
    if command.contains('/') {
        return Path::new(command).is_file();
    }
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(command).is_file()))
}

/// When the bearer token of the hub's `--kubeconfig` expires (its JWT `exp`, seconds since the
/// Unix epoch), for a kubeconfig made from a ServiceAccount token (a Karmada hub's): nothing
/// renews such a token, and the day it expires every call is refused. None without a kubeconfig
/// (in a Pod the kubelet renews the projected token) or when the token is no JWT with an `exp`.
pub fn hub_token_expiry(hub: &HubArgs) -> Option<i64> {
    let kubeconfig = Kubeconfig::read_from(hub.kubeconfig.as_deref()?).ok()?;
    token_expiry(user(&kubeconfig, hub.context.as_deref())?.1)
}

/// When the credential of `path`'s current context expires (seconds since the Unix epoch): the
/// earlier of its token's JWT `exp` (a `tokenFile` as it reads now) and its client certificate's
/// `notAfter`. None when neither says.
pub fn expiry(path: &Path) -> Option<i64> {
    let kubeconfig = Kubeconfig::read_from(path).ok()?;
    let (_, auth) = user(&kubeconfig, None)?;
    let certificate = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(data), _) => base64_decode(data).and_then(|pem| certificate_expiry(&pem)),
        (None, Some(file)) => std::fs::read(relative_to(path, file)).ok().and_then(|pem| certificate_expiry(&pem)),
        (None, None) => None,
    };
    [token_expiry(auth), certificate].into_iter().flatten().min()
}

/// The files `path`'s current context reads its server's CA and its client certificate from,
/// with `path` itself: what a restart must follow to use a rotated credential. Not a
/// `tokenFile`: the client re-reads it on its own.
pub fn files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_owned()];
    let Ok(kubeconfig) = Kubeconfig::read_from(path) else { return files };
    if let Some((_, auth)) = user(&kubeconfig, None) {
        files.extend([&auth.client_certificate, &auth.client_key].into_iter().flatten().map(|f| relative_to(path, f)));
    }
    let cluster = kubeconfig
        .current_context
        .as_ref()
        .and_then(|name| kubeconfig.contexts.iter().find(|c| &c.name == name)?.context.as_ref())
        .and_then(|context| kubeconfig.clusters.iter().find(|c| c.name == context.cluster)?.cluster.as_ref());
    files.extend(cluster.and_then(|c| c.certificate_authority.as_ref()).map(|f| relative_to(path, f)));
    files
}

/// What [`files`] of `path` hold now (`None`: not there).
pub fn read(path: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    files(path)
        .into_iter()
        .map(|f| {
            let content = std::fs::read(&f).ok();
            (f, content)
        })
        .collect()
}

/// Until a file of [`files`] of `path` differs from `first` (changed, come or gone); which one.
/// Looked at every [`LOOK_EVERY`]: a Secret volume is updated by swapping a link, which a poll
/// sees whatever the file system tells.
pub async fn changed(path: &Path, first: Vec<(PathBuf, Option<Vec<u8>>)>) -> PathBuf {
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let now = read(path);
        if let Some((file, _)) = now.iter().find(|entry| !first.contains(entry)) {
            return file.clone();
        }
        if let Some((file, _)) = first.iter().find(|(file, _)| !now.iter().any(|(f, _)| f == file)) {
            return file.clone();
        }
    }
}

/// How often [`changed`] looks: a kubelet updates a Secret volume within about a minute anyway.
pub const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A file a kubeconfig names, relative to the kubeconfig's own directory, as kubectl reads it.
fn relative_to(kubeconfig: &Path, file: &str) -> PathBuf {
    kubeconfig.parent().map_or_else(|| PathBuf::from(file), |dir| dir.join(file))
}

fn token_expiry(auth: &AuthInfo) -> Option<i64> {
    let token = match (&auth.token, &auth.token_file) {
        (Some(token), _) => token.expose_secret().to_owned(),
        (None, Some(file)) => std::fs::read_to_string(file).ok()?,
        (None, None) => return None,
    };
    jwt_expiry(token.trim())
}

/// The `exp` claim of a JWT, read without verifying it (the API server does that).
pub fn jwt_expiry(token: &str) -> Option<i64> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes).ok()?.get("exp")?.as_i64()
}

fn base64_decode(data: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(data.trim()).ok()
}

/// The `notAfter` of the first certificate in `pem`.
fn certificate_expiry(pem: &[u8]) -> Option<i64> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let der = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    let (_, certificate) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(certificate.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn jwt(claims: &str) -> String {
        let encode = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.c2lnbmF0dXJl", encode(r#"{"alg":"RS256"}"#), encode(claims))
    }

    #[test]
    fn reads_the_expiry_of_a_kubeconfig_token() {
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp":1798761600,"sub":"system:serviceaccount:edgegate-system:edgegate-pruner"}"#)),
            Some(1798761600)
        );
        assert_eq!(jwt_expiry(&jwt(r#"{"sub":"no expiry"}"#)), None);
        assert_eq!(jwt_expiry("not-a-jwt"), None);
        assert_eq!(jwt_expiry("a.!!!.c"), None);

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        let token = jwt(r#"{"exp":1798761600}"#);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: hub\nclusters: [{{name: hub, cluster: {{server: https://127.0.0.1:5443}}}}]\n\
                 users: [{{name: pruner, user: {{token: {token}}}}}, {{name: static, user: {{token: opaque}}}}]\n\
                 contexts: [{{name: hub, context: {{cluster: hub, user: pruner}}}}, {{name: other, context: {{cluster: hub, user: static}}}}]\n"
            ),
        )
        .expect("write");
        let hub =
            |context: Option<&str>| HubArgs { kubeconfig: Some(path.clone()), context: context.map(str::to_owned) };
        assert_eq!(hub_token_expiry(&hub(None)), Some(1798761600));
        assert_eq!(hub_token_expiry(&hub(Some("other"))), None, "a token that is no JWT");
        assert_eq!(hub_token_expiry(&hub(Some("missing"))), None);
        assert_eq!(hub_token_expiry(&HubArgs::default()), None, "in a Pod the kubelet renews it");
    }

    /// A certificate file rotated beside an unchanged kubeconfig is seen; nothing changing is not.
    #[tokio::test(start_paused = true)]
    async fn a_rotated_certificate_file_is_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, kubeconfig("{client-certificate: tls.crt, client-key: tls.key}")).expect("write");
        std::fs::write(dir.path().join("tls.crt"), "first").expect("write");
        let quiet = tokio::time::timeout(LOOK_EVERY * 5, changed(&path, read(&path))).await;
        assert!(quiet.is_err(), "nothing changed: {quiet:?}");
        let first = read(&path);
        std::fs::write(dir.path().join("tls.crt"), "renewed").expect("write");
        let seen = tokio::time::timeout(LOOK_EVERY * 2, changed(&path, first)).await;
        assert_eq!(seen.ok(), Some(dir.path().join("tls.crt")));
    }

    fn kubeconfig(user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: milo\n\
             clusters: [{{name: milo, cluster: {{server: 'https://127.0.0.1:6443', certificate-authority: ca.crt}}}}]\n\
             contexts: [{{name: milo, context: {{cluster: milo, user: u}}}}]\nusers: [{{name: u, user: {user}}}]\n"
        )
    }

    /// An exec plugin that cannot run, or an auth-provider, is refused with what is supported; a
    /// token, a token file, a certificate or a plugin that is there are not.
    #[test]
    fn refuses_credentials_it_cannot_use() {
        let refused = |user: &str| {
            let kubeconfig = Kubeconfig::from_yaml(&kubeconfig(user)).expect("kubeconfig");
            supported(&kubeconfig, None).err().map(|e| e.to_string())
        };
        let plugin = refused(
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: datumctl, args: [auth, get-token]}}",
        );
        let plugin = plugin.expect("an exec plugin not found");
        assert!(plugin.contains("\"datumctl\"") && plugin.contains("tokenFile"), "{plugin}");
        let provider = refused("{auth-provider: {name: oidc}}").expect("an auth-provider");
        assert!(provider.contains("\"oidc\"") && provider.contains("client certificate"), "{provider}");
        for fine in [
            "{token: opaque}",
            "{tokenFile: /var/run/secrets/token}",
            "{client-certificate: /tls.crt, client-key: /tls.key}",
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}",
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: sh}}",
        ] {
            assert_eq!(refused(fine), None, "{fine}");
        }
        let other = Kubeconfig::from_yaml(&kubeconfig("{auth-provider: {name: oidc}}")).expect("kubeconfig");
        assert!(supported(&other, Some("other")).is_ok(), "another context");
    }

    /// A client certificate's notAfter, from a file beside the kubeconfig or inline; a token's
    /// exp; the earlier of both; and the files a restart follows.
    #[test]
    fn reads_a_certificates_expiry_and_its_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut params = rcgen::CertificateParams::new(vec!["edgegate-producer".to_owned()]).expect("params");
        params.not_after = rcgen::date_time_ymd(2031, 1, 2);
        let key = rcgen::KeyPair::generate().expect("key");
        let pem = params.self_signed(&key).expect("certificate").pem();
        std::fs::write(dir.path().join("tls.crt"), &pem).expect("write");
        let path = dir.path().join("kubeconfig");
        let not_after = 1_925_078_400; // 2031-01-02
        std::fs::write(&path, kubeconfig("{client-certificate: tls.crt, client-key: tls.key}")).expect("write");
        assert_eq!(expiry(&path), Some(not_after));
        let names: Vec<PathBuf> =
            ["kubeconfig", "tls.crt", "tls.key", "ca.crt"].iter().map(|f| dir.path().join(f)).collect();
        assert_eq!(files(&path), names);

        let inline = base64::engine::general_purpose::STANDARD.encode(&pem);
        let token = jwt(&format!("{{\"exp\":{}}}", not_after - 10));
        std::fs::write(&path, kubeconfig(&format!("{{client-certificate-data: {inline}, token: {token}}}")))
            .expect("write");
        assert_eq!(expiry(&path), Some(not_after - 10), "the earlier of the two");
        std::fs::write(&path, kubeconfig("{token: opaque}")).expect("write");
        assert_eq!(expiry(&path), None);
        assert_eq!(files(&path), vec![path.clone(), dir.path().join("ca.crt")]);
    }
}
