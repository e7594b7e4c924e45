//! `edgegate reachability`: what edgegate-producer would record for one project namespace, and why.

/// `edgegate reachability`: list the namespace's objects once and explain the answer.
/// Where the project is read.
pub enum Source {
    /// Its own control plane's kubeconfig.
    Project(std::path::PathBuf),
    /// Milo's kubeconfig, and the project's name there.
    Milo(std::path::PathBuf, String),
}

pub fn reachability(source: &Source, context: Option<&str>, namespace: &str) -> anyhow::Result<()> {
    use edgegate::core::project::{HttpProxy, NetworkInterface, NetworkService};
    use edgegate::core::reachability::{ProjectNamespace, explain};
    use kube::Api;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = match source {
            Source::Project(kubeconfig) => edgegate::runtime::client::kube_client(Some(kubeconfig), context).await?,
            Source::Milo(kubeconfig, project) => milo_project(kubeconfig, context, project).await?,
        };
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

/// A client for `project` under its path on Milo, after saying what the producer does with the
/// project in its state now (a project it leaves is read all the same: what it would serve).
async fn milo_project(
    kubeconfig: &std::path::Path,
    context: Option<&str>,
    project: &str,
) -> anyhow::Result<kube::Client> {
    use anyhow::Context;
    use edgegate::core::milo::{Engagement, Project, control_plane_path, engagement};
    let clients = edgegate::runtime::client::PathClients::new(Some(kubeconfig), context).await?;
    let projects: kube::Api<Project> = kube::Api::all(clients.at("")?);
    // A list by name: the producer's grant on Milo (deploy/milo) is list and watch, not get.
    let by_name = kube::api::ListParams::default().fields(&format!("metadata.name={project}"));
    let listed = projects.list(&by_name).await.with_context(|| format!("listing Project {project} at Milo's root"))?;
    match listed.items.into_iter().next() {
        Some(found) => match engagement(&found) {
            Engagement::Engage => println!("project {project}: engaged by the producer"),
            Engagement::Leave(why) => println!("project {project}: left by the producer ({why}); what it would serve:"),
        },
        // Milo serves any name by path: say so rather than print an empty project as if it were one.
        None => anyhow::bail!("no Project {project} at Milo's root"),
    }
    clients.at(&control_plane_path(project))
}
