//! The whole system under churn and faults, with an invariant checker: the soak
//! (tests/system/tests/soak.rs runs a short one in CI; scripts/soak-system.sh a long one).

pub mod cell;
pub mod checker;
pub mod churn;
pub mod faults;
pub mod project;
pub mod world;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio_util::sync::CancellationToken;

use crate::helpers::{COPY_LABEL, eventually, percentile};

/// One run's shape.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    /// How long churn runs (faults included); the settling after it comes on top.
    pub duration: Duration,
    /// Project changes per second.
    pub rate: f64,
    /// Project namespaces at the start (churn adds and deletes some).
    pub namespaces: usize,
    pub withdraw_after: Duration,
    pub grace: Duration,
    pub deletes_per_second: usize,
    /// Inject the faults (off: churn only).
    pub faults: bool,
    /// Every producer replica prunes with no grace (`--test-only-skip-the-grace`): the checker
    /// must catch it.
    pub skip_grace: bool,
}

impl Config {
    /// From `SOAK_SEED`, `SOAK_DURATION` (seconds), `SOAK_RATE`, `SOAK_NAMESPACES`, over `base`.
    pub fn from_env(base: Config) -> Config {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
        Config {
            seed: var("SOAK_SEED").map_or(base.seed, |v| v as u64),
            duration: var("SOAK_DURATION").map_or(base.duration, Duration::from_secs_f64),
            rate: var("SOAK_RATE").unwrap_or(base.rate),
            namespaces: var("SOAK_NAMESPACES").map_or(base.namespaces, |v| v as usize),
            ..base
        }
    }
}

/// What a run did and found.
pub struct Report {
    pub violations: Vec<checker::Violation>,
    pub panics: usize,
    pub readiness: Vec<(&'static str, Duration)>,
    /// How many of each kind of fault were injected (each asserted to have reached its target).
    pub faults: Vec<(&'static str, usize)>,
}

/// From the hub's audit log: for each (identity, verb, resource) written, the most writes that
/// identity's requests made within one second.
fn peak_writes_per_second(audit_log: &std::path::Path) -> std::collections::BTreeMap<(String, String, String), usize> {
    let mut per_second: std::collections::HashMap<(String, String, String, String), usize> = Default::default();
    for line in std::fs::read_to_string(audit_log).unwrap_or_default().lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        // A Pod's bound token names its Pod: each replica is its own writer.
        let who = event["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
            .as_str()
            .or(event["impersonatedUser"]["username"].as_str())
            .or(event["user"]["username"].as_str());
        let second = event["requestReceivedTimestamp"].as_str().map(|t| t.chars().take(19).collect::<String>());
        let (Some(who), Some(second)) = (who, second) else { continue };
        let (verb, resource) =
            (event["verb"].as_str().unwrap_or_default(), event["objectRef"]["resource"].as_str().unwrap_or_default());
        *per_second.entry((who.to_owned(), verb.to_owned(), resource.to_owned(), second)).or_default() += 1;
    }
    let mut peaks = std::collections::BTreeMap::new();
    for ((who, verb, resource, _), n) in per_second {
        let peak = peaks.entry((who, verb, resource)).or_insert(0);
        *peak = n.max(*peak);
    }
    peaks
}

pub async fn run(config: Config) -> Report {
    let started = Instant::now();
    eprintln!("soak: {config:?}");
    let mut world = world::World::start(config.clone()).await;
    let view = project::ProjectView::start(&world.project);
    let selector = format!("{COPY_LABEL}=true,edgegate-e2e={}", world::SCOPE);
    let (copies, writer) = kube::runtime::reflector::store::<EndpointSlice>();
    {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, reflector, watcher};
        let api: Api<EndpointSlice> = Api::all(world.hub.clone());
        let stream = reflector(writer, watcher(api, watcher::Config::default().labels(&selector)).default_backoff());
        tokio::spawn(stream.touched_objects().for_each(|_| async {}));
    }
    let mut churn = churn::Churn::new(world.project.clone(), world.hub.clone(), config.seed);
    for _ in 0..config.namespaces {
        churn.add_namespace(6).await;
    }
    let deleted_namespaces = Arc::clone(&churn.deleted_hub_namespaces);
    let hub_projects = Arc::clone(&churn.hub_projects);
    let deletions = crate::fences::watch_deletions(&world.hub);
    let churn = Arc::new(tokio::sync::Mutex::new(churn));
    view.synced().await;
    let _ = copies.wait_until_ready().await;
    eventually(Duration::from_secs(60), "every binary ready", async || world.all_ready()).await;
    eprintln!("soak: world ready {:?} after start", started.elapsed());

    let ledger = cell::SharedLedger::default();
    let timeline = faults::Timeline::default();
    let hold = config.withdraw_after + config.grace;
    // A deletion exactly `hold` after the address last served is the design (served until the
    // change that ended it was sent); less the checker's sampling period and timer slack.
    let checker = Arc::new(checker::new(
        hold - checker::LAG,
        hold + Duration::from_secs(20),
        timeline.clone(),
        Arc::clone(&ledger),
        deleted_namespaces,
        Arc::clone(&hub_projects),
        config.deletes_per_second,
    ));
    let stop = CancellationToken::new();
    let mut tasks = vec![
        tokio::spawn(cell::run(world.hub.clone(), view.clone(), copies.clone(), Arc::clone(&ledger), stop.clone())),
        tokio::spawn(Arc::clone(&checker).follow_copies(world.hub.clone(), selector)),
        tokio::spawn(Arc::clone(&checker).follow_records(world.hub.clone())),
    ];
    let sampling = {
        let (checker, view, copies, stop) = (Arc::clone(&checker), view.clone(), copies.clone(), stop.clone());
        tokio::spawn(async move {
            let mut refusals = 0;
            while !stop.is_cancelled() {
                checker.sample(&view, &copies.state());
                refusals = checker.judge_refusals(refusals);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let churn_stop = CancellationToken::new();
    let churning = {
        let (churn, churn_stop, rate) = (Arc::clone(&churn), churn_stop.clone(), config.rate);
        tokio::spawn(async move {
            let period = Duration::from_secs_f64(1.0 / rate.max(0.01));
            while !churn_stop.is_cancelled() {
                let next = Instant::now() + period;
                churn.lock().await.step().await;
                tokio::time::sleep_until(next.into()).await;
            }
        })
    };

    // Faults, one after another, each once per cycle, until the duration is over.
    let mut readiness = Vec::new();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let run_started = Instant::now();
    let mut cycle = 0;
    if !config.faults {
        tokio::time::sleep(config.duration).await;
    }
    while config.faults && run_started.elapsed() < config.duration {
        for kind in faults::schedule(config.seed + cycle) {
            faults::inject(kind, &mut world, &churn, &timeline).await;
            let took =
                eventually(Duration::from_secs(90), "every binary ready again", async || world.all_ready()).await;
            eprintln!("soak: {kind}: every binary ready {took:.1?} after it ended");
            readiness.push((kind, took));
            tokio::time::sleep(Duration::from_secs(3)).await;
            if cycle > 0 && run_started.elapsed() >= config.duration {
                break;
            }
        }
        cycle += 1;
    }
    churn_stop.cancel();
    let _ = churning.await;
    // Settle: past the last fault's recovery and a withdrawal's hold, with a pass and its pacing
    // to spare; then nothing unserved may remain.
    eventually(Duration::from_secs(90), "every binary ready before the settle", async || world.all_ready()).await;
    // As long as invariant 2 allows after a fault (if any), and a pass's pacing more.
    let recovery = if config.faults { faults::RECOVERY } else { Duration::ZERO };
    let settle = recovery + checker.collect_within + Duration::from_secs(5);
    tokio::time::sleep(settle).await;
    let swept = checker.sweep(&view, &copies.state());
    eprintln!("soak: settled {settle:?}; swept {swept} copies");
    stop.cancel();
    let _ = sampling.await;
    for task in tasks.drain(..) {
        task.abort();
    }

    let panics = world.logs().matches("panicked at").count();
    let churn = churn.lock().await;
    let findings = checker.findings.lock().expect("findings");
    let ledger = ledger.lock().expect("ledger");
    eprintln!(
        "soak: ---- report (seed {}, {:.0?} of churn at {}/s, run {:.0?}) ----",
        config.seed,
        config.duration,
        config.rate,
        started.elapsed()
    );
    eprintln!(
        "soak: project changes applied {}, failed {} (the project API server frozen)",
        churn.applied, churn.failed
    );
    eprintln!("soak: faults injected: {:?}", timeline.count());
    eprintln!(
        "soak: copies written {}, refused {}, writes failed (fail closed, hub down) {}; deleted by the producer (pruning) {}, by the cell {}, with their namespace {}",
        ledger.written,
        ledger.refusals.len(),
        ledger.failed,
        findings.deleted_by_pruner,
        findings.deleted_by_cell,
        findings.deleted_with_namespace
    );
    eprintln!(
        "soak: collection latency (unserved → copy gone) over {}: median {:.1?}, p99 {:.1?}, max {:.1?}",
        findings.collection.len(),
        percentile(&findings.collection, 0.5),
        percentile(&findings.collection, 0.99),
        percentile(&findings.collection, 1.0)
    );
    eprintln!(
        "soak: served (again) → copy published over {}: median {:.1?}, p99 {:.1?} (cell backoff cap {:?})",
        findings.published.len(),
        percentile(&findings.published, 0.5),
        percentile(&findings.published, 0.99),
        cell::BACKOFF_CAP
    );
    eprintln!(
        "soak: producer deletions peak {}/s (pacing {}/s); record writes seen {}; addresses withdrawn during the project cut, decided before it: {}",
        findings.peak_deletions_per_second,
        config.deletes_per_second,
        findings.record_writes,
        findings.withdrawn_during_cut
    );
    eprintln!(
        "soak: deletions seen only at a relist of the checker's watch, the address not served throughout the gap (not judged): {}",
        findings.relisted
    );
    eprintln!(
        "soak: deletions racing an address served again (< {:?} after, following a break longer than the window, the record not naming it yet): {}",
        checker::PROPAGATION,
        findings.raced
    );
    eprintln!("soak: readiness after each fault: {readiness:.1?}");
    let lag = view.lag.lock().expect("lag");
    eprintln!(
        "soak: the checker's view of the project (each change dated by its write's sending): {} changes received, median {:.1?}, p99 {:.1?}, max {:.1?} after they were sent; more than {:?} late: {}",
        lag.delays.len(),
        percentile(&lag.delays, 0.5),
        percentile(&lag.delays, 0.99),
        percentile(&lag.delays, 1.0),
        project::LATE,
        lag.late.len()
    );
    for (at, by) in lag.late.iter().take(30) {
        eprintln!("soak:   at {:.1?}: {by:.1?} late", at.saturating_duration_since(checker.started));
    }
    drop(lag);
    let peaks = peak_writes_per_second(&world.hub_cp.dir.join("audit.log"));
    for ((who, verb, resource), peak) in peaks.iter().filter(|((who, _, _), _)| who.starts_with("edgegate-")) {
        eprintln!("soak: audit log: {who} {verb} {resource}: at most {peak} in one second");
    }
    let mut violations = findings.violations.clone();
    // Invariant 6, from the hub's audit log: every record write and copy DELETE by the replica
    // whose fence held the project's bucket, inside its own member Lease's deadline.
    let audit = crate::fence_audit::audit(
        &std::fs::read_to_string(world.hub_cp.dir.join("audit.log")).unwrap_or_default(),
        &hub_projects.lock().expect("projects"),
        &deletions.lock().expect("deletions"),
    );
    eprintln!(
        "soak: fences: {} record writes and {} copy DELETEs against {} fence changes, {} outside the writer's fence or deadline; {} DELETEs not matched to their deletion",
        audit.writes,
        audit.deletes,
        audit.fence_changes,
        audit.overlaps.len(),
        audit.unmatched
    );
    for overlap in &audit.overlaps {
        violations.push(checker::Violation { invariant: 6, at: started.elapsed(), what: format!("{overlap:?}") });
    }
    if audit.deletes == 0 && findings.deleted_by_pruner > 0 {
        violations.push(checker::Violation {
            invariant: 6,
            at: started.elapsed(),
            what: format!(
                "the producers deleted {} copies, the fence auditor checked none",
                findings.deleted_by_pruner
            ),
        });
    }
    if audit.writes == 0 {
        violations.push(checker::Violation {
            invariant: 6,
            at: started.elapsed(),
            what: "the fence auditor saw no record write".into(),
        });
    }
    if swept == 0 {
        violations.push(checker::Violation {
            invariant: 2,
            at: started.elapsed(),
            what: "the sweep saw no copy".into(),
        });
    }
    // Invariant 4, from the hub's own record of each producer Pod's DELETEs (the producer prunes):
    // within its pacing (a token bucket of one: at most one more in a calendar second). The audit
    // log must show them.
    let audited = peaks.keys().any(|(who, verb, resource)| {
        who.starts_with("edgegate-producer") && verb == "delete" && resource == "endpointslices"
    });
    if findings.deleted_by_pruner > 0 && !audited {
        violations.push(checker::Violation {
            invariant: 4,
            at: started.elapsed(),
            what: "the producer deleted copies, but the audit log names no producer Pod deleting".into(),
        });
    }
    for ((who, _, _), peak) in peaks.iter().filter(|((who, verb, resource), _)| {
        who.starts_with("edgegate-producer") && verb == "delete" && resource == "endpointslices"
    }) {
        if *peak > config.deletes_per_second + 1 {
            violations.push(checker::Violation {
                invariant: 4,
                at: started.elapsed(),
                what: format!("{who}: {peak} deletions within a second, pacing {}/s", config.deletes_per_second),
            });
        }
    }
    // No request of edgegate's refused: every binary runs on deploy/'s RBAC. But for one case: a
    // kube-apiserver just started refuses what its RBAC informers have not synced yet (within
    // seconds of a hub restart), which the binaries retry.
    let mut after_restart = 0;
    for (cp, which, restarts) in
        [(&world.hub_cp, "hub", &world.hub_restarts[..]), (&world.project_cp, "project", &[][..])]
    {
        let (refused, excused) = cp.refused_outside(restarts);
        after_restart += excused;
        for refused in refused {
            violations.push(checker::Violation {
                invariant: 5,
                at: started.elapsed(),
                what: format!("{which}: refused {refused}"),
            });
        }
    }
    eprintln!(
        "soak: requests of edgegate's refused while the hub's API server restarted (RBAC not synced yet): {after_restart}"
    );
    // Each one on a line of its own, as the checker prints those it finds as they happen (the
    // scripts keep only "soak:" lines): the ones found here, from the logs, too.
    for v in &violations[findings.violations.len()..] {
        eprintln!("soak: VIOLATION of invariant {} at the end: {}", v.invariant, v.what);
    }
    eprintln!("soak: panics {panics}; invariant violations {}", violations.len());
    Report { violations, panics, readiness, faults: timeline.count() }
}
