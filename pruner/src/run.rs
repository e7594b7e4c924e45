//! Wiring: the library's pruning on this process's hub and Lease, inside the life every
//! controller shares.

use std::sync::Arc;

use edgegate::runtime::controller::Controller;
use edgegate::runtime::prune::metrics::Metrics;
use edgegate::runtime::prune::parts::{Parts, Records};
use edgegate::runtime::queue::WorkQueue;

use crate::args::Args;

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.producer_lease.is_none(),
        "--producer-lease (EDGEGATE_PRODUCER_LEASE) was removed: the producer prunes itself \
         (edgegate-producer --prune, set by deploy/components/producer), each copy on its own project's \
         evidence; delete this Deployment (docs/upgrading.md)"
    );
    let controller = Controller::start(&args.hub, &args.lease.config(&args.lease_name, "edgegate-pruner")).await?;
    let metrics = Metrics::new().with_hub_token(&args.hub);
    let queue = WorkQueue::new();
    let records = Records::Watch(args.record_name.clone());
    let parts = Parts::start(&controller, &args.deletion, records, metrics, queue, None);
    controller.serve_admin(args.listen, Arc::new(parts.admin())).await?;
    tracing::info!(
        grace = ?args.deletion.grace,
        max_deletes_per_second = args.deletion.max_deletes_per_second,
        dry_run = args.deletion.dry_run,
        exact_spelling = args.deletion.exact_spelling,
        selector = %parts.pruner.selector,
        "pruning"
    );
    parts.pruner.run(parts.changes, args.resync, args.workers, controller.shutdown.clone()).await;
    controller.stopped().await;
    Ok(())
}
