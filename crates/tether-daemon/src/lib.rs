//! `tether run`: the continuous reconciler. Each source runs as its own loop
//! ([`runner::SourceLoop`] under [`tether_engine::driver::drive`], one task each, so that a
//! slow or failing source never delays another); sources come from flags or from
//! `Source` custom resources ([`controller`]), with leader election ([`leader`]) when
//! replicas run side by side. Drift is seen by watches (`drift`), pushes arrive by
//! webhook ([`webhook`]), and [`http`] serves them with `/metrics`, `/readyz` and
//! `/healthz`.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

pub mod check;
mod claim;
pub mod clock;
pub mod clusters;
pub mod controller;
pub mod crd;
mod discovery;
mod drift;
mod feedback;
pub mod fleet;
pub mod http;
pub mod identity;
mod images;
pub mod install;
mod keys;
pub mod leader;
pub mod members;
mod metrics;
pub mod peers;
mod pull_request;
pub mod refusal_log;
pub mod runner;
pub mod shard;
mod status;
pub mod web;
pub mod webhook;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use tether_engine::images::automation::pushed_to;

use self::metrics::Metrics;
use self::refusal_log::RefusalLog;

/// Why a source loop should pass now.
#[derive(Debug)]
pub enum Trigger {
    /// The source may have changed (a saved file, a webhook).
    Changed,
    /// Someone asked for a pass (the Source's annotation, or the web page, with the
    /// time of the request).
    Requested(String),
}

/// Who records the daemon's Events: tether, and the replica (its pod) when known.
pub fn event_reporter() -> kube::runtime::events::Reporter {
    kube::runtime::events::Reporter {
        controller: "tether".into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

/// What the loops of one process share with its HTTP endpoints.
pub struct Shared {
    pub metrics: Metrics,
    /// What the web page shows of the source loops.
    pub views: web::views::Views,
    /// The secret webhooks must prove they know; without one they are refused.
    pub webhook_secret: Option<Vec<u8>>,
    ready: AtomicBool,
    sources: Mutex<BTreeMap<String, Registered>>,
    /// Where a webhook for a source this process does not run goes (a follower
    /// replica asks the leader through the Source's annotation).
    forward: Mutex<Option<controller::Forwarder>>,
    /// Refused webhooks, counted for the log's summary lines (see [`refusal_log`]).
    refused_webhooks: Mutex<RefusalLog>,
    /// The web page and API, when served.
    web: std::sync::OnceLock<std::sync::Arc<web::Web>>,
    /// The Sources that plan pull requests, by id: what each follows, and where a
    /// request goes.
    planners: Mutex<BTreeMap<String, Planner>>,
    /// The Sources' image automations, by id: the image repositories their policies
    /// list, and where a registry's push goes.
    images: Mutex<BTreeMap<String, ImageWatch>>,
    /// The other replicas of a sharded group, which pull-request and registry
    /// webhooks are passed on to.
    pub peers: peers::Peers,
    /// The watches of the Sources' objects, one per kind and identity on a cluster.
    pub watches: tether_engine::reconcile::Watches,
    /// Until when this replica may write (`--shard`: its own Lease, less a margin).
    pub fence: tether_engine::reconcile::Fence,
}

/// A Source's image automation, as registry webhooks see it.
struct ImageWatch {
    /// `registry/repository` of each policy's image.
    repositories: Vec<String>,
    pushes: mpsc::Sender<Vec<tether_engine::images::notification::Pushed>>,
}

/// A Source's pull-request planner, as webhooks see it.
struct Planner {
    url: String,
    reference: Option<String>,
    requests: mpsc::Sender<webhook::PullRequest>,
}

/// A source loop of this process, as webhooks and health checks see it.
struct Registered {
    url: Option<String>,
    reference: Option<String>,
    interval: Duration,
    trigger: mpsc::Sender<Trigger>,
    last_pass: Instant,
}

impl Shared {
    pub fn new(webhook_secret: Option<Vec<u8>>) -> Self {
        let watches = tether_engine::reconcile::Watches::default();
        Shared {
            metrics: Metrics::counting(watches.clone()),
            views: web::views::Views::default(),
            webhook_secret,
            ready: AtomicBool::new(false),
            sources: Mutex::new(BTreeMap::new()),
            forward: Mutex::new(None),
            refused_webhooks: Mutex::new(RefusalLog::default()),
            web: std::sync::OnceLock::new(),
            planners: Mutex::new(BTreeMap::new()),
            images: Mutex::new(BTreeMap::new()),
            peers: peers::Peers::default(),
            watches,
            fence: tether_engine::reconcile::Fence::default(),
        }
    }

    /// Serves the web page and API beside the other endpoints (set before serving).
    pub fn serve_web(&self, web: web::Web) {
        let _ = self.web.set(std::sync::Arc::new(web));
    }

    pub fn web(&self) -> Option<std::sync::Arc<web::Web>> {
        self.web.get().cloned()
    }

    /// The log of refused webhooks. A panic while it was held leaves counts at worst
    /// off by one: the log goes on.
    fn refused_webhooks(&self) -> std::sync::MutexGuard<'_, RefusalLog> {
        self.refused_webhooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The caches are synced and the loops started: `/readyz` says yes.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// A source loop started.
    pub fn register(
        &self,
        id: &str,
        url: Option<String>,
        reference: Option<String>,
        interval: Duration,
        trigger: mpsc::Sender<Trigger>,
    ) {
        let registered = Registered {
            url,
            reference,
            interval,
            trigger,
            last_pass: Instant::now(),
        };
        self.lock_sources().insert(id.to_string(), registered);
    }

    pub fn unregister(&self, id: &str) {
        self.lock_sources().remove(id);
    }

    /// A pass of `id` finished (whatever its result): the loop is alive.
    pub fn passed(&self, id: &str) {
        if let Some(source) = self.lock_sources().get_mut(id) {
            source.last_pass = Instant::now();
        }
    }

    /// The sources whose loop finished no pass for three intervals (and a minute, for
    /// a long pass): wedged.
    pub fn wedged(&self) -> Vec<String> {
        self.lock_sources()
            .iter()
            .filter(|(_, s)| s.last_pass.elapsed() > s.interval * 3 + Duration::from_secs(60))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Nudges every source of this process that `concerns` picks; returns how many.
    pub fn trigger_matching(&self, concerns: impl Fn(&str, Option<&str>) -> bool) -> usize {
        self.lock_sources()
            .values()
            .filter(|s| {
                s.url
                    .as_deref()
                    .is_some_and(|url| concerns(url, s.reference.as_deref()))
            })
            // A full channel already holds a trigger: the pass will see this push.
            .map(|s| {
                let _ = s.trigger.try_send(Trigger::Changed);
            })
            .count()
    }

    /// A Source plans the pull requests of `url` into `reference` (none: the default
    /// branch) that come through `requests`, until unregistered.
    pub fn register_planner(
        &self,
        id: &str,
        url: String,
        reference: Option<String>,
        requests: mpsc::Sender<webhook::PullRequest>,
    ) {
        let planner = Planner {
            url,
            reference,
            requests,
        };
        self.lock_planners().insert(id.to_string(), planner);
    }

    pub fn unregister_planner(&self, id: &str) {
        self.lock_planners().remove(id);
    }

    /// Hands `request` to every Source that plans requests into what it follows;
    /// returns how many.
    pub fn plan_pull_request(&self, request: &webhook::PullRequest) -> usize {
        self.lock_planners()
            .values()
            .filter(|p| request.concerns(&p.url, p.reference.as_deref()))
            // A full queue is dropped: the request's next push brings another webhook.
            .filter(|p| p.requests.try_send(request.clone()).is_ok())
            .count()
    }

    /// A Source's image automation lists `repositories` (`registry/repository`) and
    /// takes their pushes through `pushes`, until unregistered.
    pub(crate) fn register_images(
        &self,
        id: &str,
        repositories: Vec<String>,
        pushes: mpsc::Sender<Vec<tether_engine::images::notification::Pushed>>,
    ) {
        let watch = ImageWatch {
            repositories,
            pushes,
        };
        self.lock_images().insert(id.to_string(), watch);
    }

    pub(crate) fn unregister_images(&self, id: &str) {
        self.lock_images().remove(id);
    }

    /// Hands a registry's `pushes` to every image automation whose policies list one
    /// of their repositories; returns how many.
    pub fn push_images(&self, pushes: &[tether_engine::images::notification::Pushed]) -> usize {
        self.lock_images()
            .values()
            .filter_map(|watch| {
                let concerned: Vec<_> = pushes
                    .iter()
                    .filter(|push| watch.repositories.iter().any(|r| pushed_to(push, r)))
                    .cloned()
                    .collect();
                // A full queue already holds a run to come, which lists anew.
                (!concerned.is_empty()).then(|| watch.pushes.try_send(concerned))
            })
            .filter(|sent| !matches!(sent, Err(mpsc::error::TrySendError::Closed(_))))
            .count()
    }

    fn lock_images(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ImageWatch>> {
        self.images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_planners(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Planner>> {
        self.planners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn set_forwarder(&self, forwarder: controller::Forwarder) {
        if let Ok(mut forward) = self.forward.lock() {
            *forward = Some(forwarder);
        }
    }

    pub fn forwarder(&self) -> Option<controller::Forwarder> {
        self.forward.lock().ok().and_then(|f| f.clone())
    }

    fn lock_sources(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Registered>> {
        // A panic while holding the lock leaves plain data behind: go on with it.
        self.sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_that_finished_no_pass_for_three_intervals_is_wedged() {
        let shared = Shared::new(None);
        let (trigger, _triggers) = mpsc::channel(1);
        let interval = Duration::from_secs(10);
        shared.register("team/web", None, None, interval, trigger.clone());
        shared.register("team/db", None, None, interval, trigger);
        assert!(shared.wedged().is_empty());
        let long_ago = Instant::now().checked_sub(interval * 3 + Duration::from_secs(61));
        if let Some(source) = shared.lock_sources().get_mut("team/db") {
            source.last_pass = long_ago.unwrap_or_else(Instant::now);
        }
        assert_eq!(shared.wedged(), ["team/db"]);
        shared.passed("team/db");
        assert!(
            shared.wedged().is_empty(),
            "a finished pass, even a failed one, is life"
        );
    }

    #[test]
    fn webhooks_nudge_only_the_sources_of_the_pushed_repository() {
        let shared = Shared::new(None);
        let (web, mut web_triggers) = mpsc::channel(1);
        let (other, mut other_triggers) = mpsc::channel(1);
        let interval = Duration::from_secs(60);
        shared.register(
            "a/web",
            Some("https://git.example.org/web".into()),
            Some("main".into()),
            interval,
            web,
        );
        shared.register(
            "a/other",
            Some("https://git.example.org/other".into()),
            None,
            interval,
            other,
        );
        let nudged = shared.trigger_matching(|url, _| url.ends_with("/web"));
        assert_eq!(nudged, 1);
        assert!(matches!(web_triggers.try_recv(), Ok(Trigger::Changed)));
        assert!(other_triggers.try_recv().is_err());
        // A burst: the channel holds one trigger, the rest add nothing.
        for _ in 0..10 {
            shared.trigger_matching(|url, _| url.ends_with("/web"));
        }
        assert!(web_triggers.try_recv().is_ok());
        assert!(web_triggers.try_recv().is_err());
    }
}
