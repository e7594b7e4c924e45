//! `edgegate reachability`: what edgegate-producer would record for one project namespace, and why.

/// `edgegate reachability`: list the namespace's objects once and explain the answer.
pub fn reachability(kubeconfig: &std::path::Path, context: Option<&str>, namespace: &str) -> anyhow::Result<()> {
    use edgegate::core::project::{HttpProxy, NetworkInterface, NetworkService};
    use edgegate::core::reachability::{ProjectNamespace, explain};
    use kube::Api;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = edgegate::runtime::client::kube_client(Some(kubeconfig), context).await?;
        let lp = kube::api::ListParams::default();
        let ns = ProjectNamespace {
            proxies: by_name(Api::<HttpProxy>::namespaced(client.clone(), namespace).list(&lp).await?.items),
            services: by_name(Api::<NetworkService>::namespaced(client.clone(), namespace).list(&lp).await?.items),
            interfaces: by_name(Api::<NetworkInterface>::namespaced(client.clone(), namespace).list(&lp).await?.items),
            slices: by_name(Api::<edgegate::Slice>::namespaced(client, namespace).list(&lp).await?.items),
        };
        let (answer, lines) = explain(&ns);
        for line in lines {
            println!("{line}");
        }
        println!("record for {namespace}: {} address(es)", answer.addresses.len());
        for address in &answer.addresses {
            println!("  - {address}");
        }
        anyhow::Ok(())
    })
}

/// Objects by name.
fn by_name<K: kube::Resource>(items: Vec<K>) -> std::collections::BTreeMap<String, K> {
    items.into_iter().map(|o| (kube::ResourceExt::name_any(&o), o)).collect()
}
