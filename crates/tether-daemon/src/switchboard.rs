//! The switchboard: where what arrives at the daemon's endpoints goes among the
//! loops of this process. A push goes to the loops of the repository and ref it
//! names, a pull request to the Sources that plan requests into what it targets, a
//! registry's push to the image automations whose policies list its repository.
//! Each loop is registered while it runs; a loop that finished no pass for three
//! intervals is wedged (`/healthz`).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tether_api::webhook::PullRequest;
use tether_engine::image_automation::automation::pushed_to;
use tether_engine::image_automation::notification::Pushed;
use tokio::sync::mpsc;

/// Why a source loop should pass now.
#[derive(Debug)]
pub(crate) enum Trigger {
    /// The source may have changed (a saved file, a webhook).
    Changed,
    /// Someone asked for a pass (the Source's annotation, or the web page, with the
    /// time of the request).
    Requested(String),
}

/// The loops of this process, by what each follows.
#[derive(Default)]
pub(crate) struct Switchboard {
    sources: Mutex<BTreeMap<String, Registered>>,
    /// The Sources that plan pull requests, by id: what each follows, and where a
    /// request goes.
    planners: Mutex<BTreeMap<String, Planner>>,
    /// The Sources' image automations, by id: the image repositories their policies
    /// list, and where a registry's push goes.
    images: Mutex<BTreeMap<String, ImageWatch>>,
}

/// A source loop of this process, as webhooks and health checks see it.
struct Registered {
    url: Option<String>,
    reference: Option<String>,
    interval: Duration,
    trigger: mpsc::Sender<Trigger>,
    last_pass: Instant,
}

/// A Source's pull-request planner, as webhooks see it.
struct Planner {
    url: String,
    reference: Option<String>,
    requests: mpsc::Sender<PullRequest>,
}

/// A Source's image automation, as registry webhooks see it.
struct ImageWatch {
    /// `registry/repository` of each policy's image.
    repositories: Vec<String>,
    pushes: mpsc::Sender<Vec<Pushed>>,
}

/// The guard of a table; a panic while it was held leaves plain data behind: go on
/// with it.
fn locked<T>(table: &Mutex<T>) -> MutexGuard<'_, T> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Switchboard {
    /// A source loop started.
    pub(crate) fn register(
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
        locked(&self.sources).insert(id.to_string(), registered);
    }

    pub(crate) fn unregister(&self, id: &str) {
        locked(&self.sources).remove(id);
    }

    /// A pass of `id` finished (whatever its result): the loop is alive.
    pub(crate) fn passed(&self, id: &str) {
        if let Some(source) = locked(&self.sources).get_mut(id) {
            source.last_pass = Instant::now();
        }
    }

    /// The sources whose loop finished no pass for three intervals (and a minute, for
    /// a long pass): wedged.
    pub(crate) fn wedged(&self) -> Vec<String> {
        locked(&self.sources)
            .iter()
            .filter(|(_, s)| s.last_pass.elapsed() > s.interval * 3 + Duration::from_secs(60))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Nudges every source of this process that `concerns` picks; returns how many.
    pub(crate) fn trigger_matching(&self, concerns: impl Fn(&str, Option<&str>) -> bool) -> usize {
        locked(&self.sources)
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
    pub(crate) fn register_planner(
        &self,
        id: &str,
        url: String,
        reference: Option<String>,
        requests: mpsc::Sender<PullRequest>,
    ) {
        let planner = Planner {
            url,
            reference,
            requests,
        };
        locked(&self.planners).insert(id.to_string(), planner);
    }

    pub(crate) fn unregister_planner(&self, id: &str) {
        locked(&self.planners).remove(id);
    }

    /// Hands `request` to every Source that plans requests into what it follows;
    /// returns how many.
    pub(crate) fn plan_pull_request(&self, request: &PullRequest) -> usize {
        locked(&self.planners)
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
        pushes: mpsc::Sender<Vec<Pushed>>,
    ) {
        let watch = ImageWatch {
            repositories,
            pushes,
        };
        locked(&self.images).insert(id.to_string(), watch);
    }

    pub(crate) fn unregister_images(&self, id: &str) {
        locked(&self.images).remove(id);
    }

    /// Hands a registry's `pushes` to every image automation whose policies list one
    /// of their repositories; returns how many.
    pub(crate) fn push_images(&self, pushes: &[Pushed]) -> usize {
        locked(&self.images)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_that_finished_no_pass_for_three_intervals_is_wedged() {
        let switchboard = Switchboard::default();
        let (trigger, _triggers) = mpsc::channel(1);
        let interval = Duration::from_secs(10);
        switchboard.register("team/web", None, None, interval, trigger.clone());
        switchboard.register("team/db", None, None, interval, trigger);
        assert!(switchboard.wedged().is_empty());
        let long_ago = Instant::now().checked_sub(interval * 3 + Duration::from_secs(61));
        if let Some(source) = locked(&switchboard.sources).get_mut("team/db") {
            source.last_pass = long_ago.unwrap_or_else(Instant::now);
        }
        assert_eq!(switchboard.wedged(), ["team/db"]);
        switchboard.passed("team/db");
        assert!(
            switchboard.wedged().is_empty(),
            "a finished pass, even a failed one, is life"
        );
    }

    #[test]
    fn webhooks_nudge_only_the_sources_of_the_pushed_repository() {
        let switchboard = Switchboard::default();
        let (web, mut web_triggers) = mpsc::channel(1);
        let (other, mut other_triggers) = mpsc::channel(1);
        let interval = Duration::from_secs(60);
        switchboard.register(
            "a/web",
            Some("https://git.example.org/web".into()),
            Some("main".into()),
            interval,
            web,
        );
        switchboard.register(
            "a/other",
            Some("https://git.example.org/other".into()),
            None,
            interval,
            other,
        );
        let nudged = switchboard.trigger_matching(|url, _| url.ends_with("/web"));
        assert_eq!(nudged, 1);
        assert!(matches!(web_triggers.try_recv(), Ok(Trigger::Changed)));
        assert!(other_triggers.try_recv().is_err());
        // A burst: the channel holds one trigger, the rest add nothing.
        for _ in 0..10 {
            switchboard.trigger_matching(|url, _| url.ends_with("/web"));
        }
        assert!(web_triggers.try_recv().is_ok());
        assert!(web_triggers.try_recv().is_err());
    }
}
