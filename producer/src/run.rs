//! Wiring: the hub client and its watches, a client and two to five watches per engaged project,
//! the Lease, the admin listener, signals.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use edgegate::core::hold::Hold;
use edgegate::index::dirty::Dirty;
use edgegate::index::hub::HubView;
use edgegate::index::source::budget::ListBudget;
use edgegate::runtime::controller::Controller;
use edgegate::runtime::prune::gate::Gate;
use edgegate::runtime::queue::WorkQueue;
use edgegate::runtime::shard::{LEAVING_ANNOTATION, Links, READY_ANNOTATION, ShardConfig, share};
use parking_lot::Mutex;

use crate::admin::Admin;
use crate::args::Args;
use crate::engaged::Engaged;
use crate::evidence::Evidence;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::producer::Producer;
use crate::projects::Projects;
use crate::watches::start_hub_watches;
use edgegate::runtime::prune::parts::{Parts, Records};

pub async fn run(mut args: Args) -> anyhow::Result<()> {
    // Everything below reads the grace from here: none when skipped on purpose (a test build).
    args.deletion.grace = args.grace();
    // Marked by the watch handlers (through `forward`), which never wait: a set of what changed,
    // as large as the distinct changes however many events arrive.
    let triggers = Dirty::default();
    let view = Arc::new(HubView::new(args.record_name.clone()));
    let projects = Projects::default();
    let lease = args.lease.config(&args.lease_name, "edgegate-producer");
    // Sharing: the election is this replica's own member Lease, its ready buckets annotated.
    // From the first write, not a predecessor's (a Lease released while leaving still says so).
    let fresh = [(READY_ANNOTATION, ""), (LEAVING_ANNOTATION, "false")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    let (ready, annotations) = tokio::sync::watch::channel(BTreeMap::from(fresh));
    let sharing = args.shard.then(|| ShardConfig {
        namespace: lease.namespace.clone(),
        identity: lease.identity.clone(),
        duration: lease.duration,
        prefix: args.lease_name.clone(),
        unfenced: args.breaks_the_fence(),
    });
    let election = sharing.as_ref().map_or_else(|| lease.clone(), |s| s.member_lease(annotations));
    let controller = Controller::start(&args.hub, &election).await?;
    let hub = controller.hub.clone();
    let shutdown = &controller.shutdown;
    start_hub_watches(&hub, &view, &triggers, shutdown);
    let mut engaged = Engaged::new(projects, triggers.clone(), shutdown)
        .within(ListBudget::new(usize::from(args.project_lists_in_flight), args.project_lists_per_second));
    if args.prune {
        engaged = engaged.remembering(args.withdraw_after + args.deletion.grace);
    }
    let owner = sharing.map(|config| {
        let (engage, buckets) = tokio::sync::watch::channel(BTreeSet::new());
        engaged = engaged.clone().sharing(buckets);
        let warm = engaged.clone();
        let (leave, leaving) = tokio::sync::watch::channel(false);
        let links = Links { ready, engage, warm: Arc::new(move |b| warm.warm(b)), leaving };
        let owner = share(&hub, config, controller.leader.clone(), links, shutdown);
        controller.drain_with(Box::pin(hand_over(owner.clone(), leave)));
        owner
    });
    let metrics = Metrics::new().with_hub_token(&args.hub).with_milo_credential(args.milo_kubeconfig.as_deref());
    let metrics = Arc::new(if owner.is_some() { metrics.sharded() } else { metrics });
    let discovery = crate::discovery::start(&args, &engaged, &metrics, shutdown, controller.stopper()).await?;
    let recorder = controller.recorder("edgegate-producer");
    let memory = Memory::new(args.withdraw_after, args.deletion.grace);
    // The namespaces to write (and, with --prune, to pass over): one key each.
    let queue = WorkQueue::new();
    // With --prune, the pruner runs here, on this Lease and this queue, asking this process's
    // memory.
    let pruning = args.prune.then(|| {
        let whole_for = args.withdraw_after + args.deletion.grace;
        let (projects, clients) = (Arc::clone(&engaged.projects), Arc::clone(&engaged.clients));
        let evidence = Evidence::new(Arc::clone(&view), projects, clients, memory.clone(), whole_for, queue.clone());
        let evidence = Arc::new(evidence.sharing(owner.clone(), &engaged));
        let metrics = edgegate::runtime::prune::metrics::Metrics::embedded();
        let gate = Some(Arc::clone(&evidence) as Arc<dyn Gate>);
        let records = Records::View(Arc::clone(&view));
        (Parts::start(&controller, &args.deletion, records, metrics, queue.clone(), gate), evidence)
    });
    let producer = Producer {
        hub,
        view: Arc::clone(&view),
        projects: Arc::clone(&engaged.projects),
        force_ownership: args.force_ownership,
        withdrawals: Mutex::new(Hold::new(args.withdraw_after)),
        memory,
        queue,
        leader: controller.leader.clone(),
        owner,
        metrics: Arc::clone(&metrics),
        recorder,
        mismatched: Mutex::default(),
        pacer: Some(edgegate::index::pace::Pacer::per_second(args.max_writes_per_second)),
    };
    let (pruner, evidence) = pruning.unzip();
    let admin = Admin {
        view,
        discovery,
        engaged: engaged.clone(),
        metrics,
        leader: controller.leader.clone(),
        owner: producer.owner.clone(),
        queue: producer.queue.clone(),
        pruner: pruner.as_ref().map(Parts::admin),
        evidence,
    };
    controller.serve_admin(args.listen, Arc::new(admin)).await?;
    tracing::info!(withdraw_after = ?args.withdraw_after, prune = args.prune, grace = ?args.deletion.grace, "producing");
    producer.run(triggers, pruner, args.resync, args.workers, controller.shutdown.clone()).await;
    controller.stopped().await;
    Ok(())
}

/// How long a stopping replica hands its buckets over before it stops anyway (the rest go over
/// cold: their owners take them once its member Lease is released, and list them then). Within
/// the Pod's `terminationGracePeriodSeconds` (30 s in components/producer-sharded).
const HAND_OVER_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// SIGTERM, sharing: delete nothing more, say so on the member Lease, and keep writing records
/// until every bucket has been handed to its owner (each once that one has listed its projects),
/// nobody is left to take one (every replica stopping at once: an emergency off, a deletion of
/// the StatefulSet), or [`HAND_OVER_WITHIN`].
async fn hand_over(owner: edgegate::runtime::shard::Ownership, leave: tokio::sync::watch::Sender<bool>) {
    owner.stop_deleting();
    let held = owner.held().len();
    let started = edgegate::index::clock::now();
    leave.send_replace(true);
    tracing::info!(held, "stopping: handing the buckets over");
    loop {
        let left = owner.held().len();
        let took = edgegate::index::clock::since(started);
        if left == 0 || owner.successors() == 0 || took >= HAND_OVER_WITHIN {
            tracing::info!(
                handed = held.saturating_sub(left),
                cold = left,
                ?took,
                "handover ended; the rest go over cold"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
