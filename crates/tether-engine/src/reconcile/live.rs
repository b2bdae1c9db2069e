//! Planning against the cluster: the live objects (one list per kind, by the
//! inventory's label), and a server-side dry run for each object that is not provably
//! unchanged. The comparisons themselves are in the pure `tether_core::plan`. An
//! object no labelled list found is read on its own, unless a list of its kind's
//! names showed it absent ([`unlabelled`]).
//! A list reads what `PlanOptions::reads` says (`cluster::Reads`), per namespace when
//! the identity may not list across the cluster; a recorded object no list found is
//! read on its own before it is forgotten (`confirm_gone`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::OnceCell;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use kube::api::{Api, DynamicObject, ListParams, Patch};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tracing::instrument;

use super::cache::WatchCache;
use super::contents::{list_custom_resources, list_namespace};
use super::in_flight;
use super::nodes;
use super::options::PlanOptions;
use super::outcome::{ObjectFailure, status_text};
use super::planned::Step;
use super::unlabelled;
use crate::cluster::{ClusterError, Reads, Resources, api_error, list_each};
use crate::record::head_record;
use tether_core::directive::{self, ApplyMode, Directives, Written};
use tether_core::host::{HostRemoval, merged_taints};
use tether_core::ignore::{self, IgnoreDifferences, Pin};
use tether_core::inventory::{
    InventoryEntry, InventoryRecord, Provenance, PruneDecision, contents_of, prune_decisions,
};
use tether_core::k8s::{ObjectKey, api_group};
use tether_core::managed_fields::{self, live_value};
use tether_core::normalize::place;
use tether_core::ownership::{
    APPLYSET_ID_LABEL, Inventory, MODEL_ANNOTATION, PART_OF_LABEL, SOURCE_ANNOTATION, annotation,
    is_inventory_record, is_ownership_mark, is_record_name, other_inventory,
};
use tether_core::plan::{
    Action, Change, FieldConflict, change_diff, conflicts_of, empty_map_at, provably_unchanged,
    replace_diff, same_value_at, with_applied_hash,
};
use tether_core::render::RenderedObject;

/// The steps of a plan, with what they were planned from.
pub(super) struct Planning {
    pub steps: Vec<Step>,
    /// Recorded objects that are not tether's to touch any more.
    pub forgotten: BTreeSet<ObjectKey>,
    /// The uids of the live objects labelled for the inventory.
    pub uids: BTreeMap<ObjectKey, String>,
    /// How many live objects carry the inventory's labels.
    pub labelled: usize,
    pub resources: Resources,
}

/// Compares the rendered objects with the cluster; deletions (last, in reverse apply
/// order) are the inventory's prune candidates. Objects are first placed as the server
/// scopes their kind (see [`place_all`]). One object the server refuses is an
/// [`Action::Error`] step; only a server that does not answer fails the plan.
#[instrument(skip_all, fields(objects = objects.len(), recorded = record.entries.len()))]
pub(super) async fn plan(
    client: &Client,
    inventory: &Inventory,
    ignore_rules: &[IgnoreDifferences],
    objects: &mut [RenderedObject],
    record: InventoryRecord,
    options: PlanOptions,
    cache: Option<&WatchCache>,
) -> Result<Planning, ClusterError> {
    let kinds: BTreeSet<(String, String)> = objects
        .iter()
        .map(|o| (o.api_version.clone(), o.kind.clone()))
        .chain(record.kinds())
        .collect();
    let resources = match cache.and_then(|c| c.resources_covering(&kinds)) {
        Some(resources) => resources.clone(),
        None => Resources::discover(client, &kinds).await?,
    };
    let defined_here = place_all(&resources, objects);
    let manager = inventory.field_manager();
    let applyset = inventory.applyset_id();
    let selector = Labelled {
        applyset: &applyset,
        manager: &manager,
        cache,
        namespaces: &concerned_namespaces(objects, &record, inventory),
        reads: options.reads,
    };
    let Listed {
        mut live,
        unlistable,
    } = list_labelled(&resources, &kinds, &selector).await?;
    let lookups = unlabelled::lookups(
        objects.iter().map(|o| (o.api_version.as_str(), o.key())),
        &live,
        |api_version, kind| resources.namespaced(api_version, kind).is_some(),
    );
    let lists = lookups.len();
    let absent = unlabelled::absent(&resources, lookups).await?;
    let counts = RequestCounts::default();
    let bodies: Vec<&Value> = objects.iter().map(|o| &o.body).collect();
    let scaled = ignore::scaled(&bodies);
    let context = ObjectContext {
        ignore: (ignore_rules, &scaled),
        client,
        inventory,
        manager: &manager,
        resources: &resources,
        labelled: &live,
        absent: &absent,
        defined_here: &defined_here,
        counts: &counts,
        dry_run_new: options.dry_run_new,
        others: OnceCell::new(),
    };
    let mut steps = in_flight::try_each(objects.iter().enumerate(), in_flight::READS, |(i, o)| {
        plan_object(&context, i, o)
    })
    .await?;
    tracing::info!(
        objects = objects.len(),
        listed_kinds = kinds.len(),
        names_listed = lists,
        reads = counts.reads.load(Ordering::Relaxed),
        dry_runs = counts.dry_runs.load(Ordering::Relaxed),
        "planned"
    );
    let rendered: BTreeSet<ObjectKey> = objects.iter().map(RenderedObject::key).collect();
    if !options.partial {
        let unlisted = unlisted_entries(&record, &rendered, &live, &unlistable);
        let gone = (&resources, applyset.as_str(), manager.as_str());
        confirm_gone(gone, unlisted, &mut live).await?;
    }
    let (prunes, forgotten) = match options.partial {
        true => (Vec::new(), BTreeSet::new()),
        false => prune_steps(&record, &rendered, (&live, &unlistable), inventory, options),
    };
    steps.extend(prunes);
    describe_removals(client, &mut steps, (&record, &applyset)).await?;
    Ok(Planning {
        labelled: live.len(),
        steps,
        forgotten,
        uids: uids_of(&live),
        resources,
    })
}

/// What removing a host, a Namespace or a CustomResourceDefinition takes with it: the
/// pods bound to the host, the objects in the Namespace, the definition's custom
/// resources (which this inventory did not all create).
async fn describe_removals(
    client: &Client,
    steps: &mut [Step],
    (record, applyset): (&InventoryRecord, &str),
) -> Result<(), ClusterError> {
    for step in steps
        .iter_mut()
        .filter(|s| s.change.action == Action::RemoveHost)
    {
        let pods = nodes::bound_pods(client, &step.change.key.name).await?;
        step.change.diff = HostRemoval::of(&step.change.key.name, &pods).describe();
    }
    for step in steps
        .iter_mut()
        .filter(|s| matches!(s.change.action, Action::Delete | Action::Release))
        .filter(|s| s.change.key.kind == "Namespace" && s.change.key.group.is_empty())
    {
        let objects = list_namespace(client, &step.change.key.name).await?;
        step.change.contents = Some(contents_of(&objects, record, applyset));
    }
    for step in steps
        .iter_mut()
        .filter(|s| matches!(s.change.action, Action::Delete | Action::Release))
        .filter(|s| {
            s.change.key.kind == "CustomResourceDefinition"
                && s.change.key.group == "apiextensions.k8s.io"
        })
    {
        let objects = list_custom_resources(client, &step.change.key.name).await?;
        step.change.contents = Some(contents_of(&objects, record, applyset));
    }
    Ok(())
}

/// The uids of the live objects, by key.
fn uids_of(live: &HashMap<ObjectKey, Arc<Value>>) -> BTreeMap<ObjectKey, String> {
    live.iter()
        .filter_map(|(key, object)| {
            Some((key.clone(), object["metadata"]["uid"].as_str()?.to_string()))
        })
        .collect()
}

/// The namespaces a plan concerns: its objects', its record's and the inventory's.
fn concerned_namespaces(
    objects: &[RenderedObject],
    record: &InventoryRecord,
    inventory: &Inventory,
) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| o.namespace.clone())
        .chain(record.entries.keys().filter_map(|e| e.key().namespace))
        .chain([inventory.namespace.clone()])
        .collect()
}

/// What the record holds, no model renders, and no list found: to be forgotten, once a
/// read of each confirms it is gone ([`confirm_gone`]).
fn unlisted_entries<'r>(
    record: &'r InventoryRecord,
    rendered: &BTreeSet<ObjectKey>,
    live: &HashMap<ObjectKey, Arc<Value>>,
    unlistable: &Unlistable,
) -> Vec<&'r InventoryEntry> {
    record
        .entries
        .keys()
        .filter(|entry| unlistable.of(entry).is_none())
        .filter(|entry| {
            let key = entry.key();
            !rendered.contains(&key) && !live.contains_key(&key)
        })
        .collect()
}

/// Reads each of `entries` on its own: one that is there after all, still labelled for
/// this inventory, joins `live` (a list from a cache, the server's or a watch's, may be
/// a moment behind, and forgetting an object that is there would leave it behind for
/// good). Only what is really gone is forgotten.
async fn confirm_gone(
    (resources, applyset, manager): (&Resources, &str, &str),
    entries: Vec<&InventoryEntry>,
    live: &mut HashMap<ObjectKey, Arc<Value>>,
) -> Result<(), ClusterError> {
    for entry in entries {
        let Some(namespaced) = resources.namespaced(&entry.api_version, &entry.kind) else {
            continue; // a kind no longer served: nothing to read
        };
        let namespace = entry.namespace.as_deref().filter(|_| namespaced);
        let api = resources.api(&entry.api_version, &entry.kind, namespace)?;
        let found = api
            .get_opt(&entry.name)
            .await
            .map_err(api_error(format!("read {}", entry.key())))?;
        let Some(object) = found else {
            continue;
        };
        if object.labels().get(PART_OF_LABEL).map(String::as_str) == Some(applyset) {
            let value = live_value(object, &entry.api_version, &entry.kind, manager);
            live.insert(entry.key(), Arc::new(value));
        }
    }
    Ok(())
}

/// The deletions and releases of what no model renders any more (in reverse apply
/// order), and the entries to forget. An entry in a namespace the identity could not
/// list is neither: it may well be there, so it stays recorded, and its refusal is
/// reported.
fn prune_steps(
    record: &InventoryRecord,
    rendered: &BTreeSet<ObjectKey>,
    (live, unlistable): (&HashMap<ObjectKey, Arc<Value>>, &Unlistable),
    inventory: &Inventory,
    options: PlanOptions,
) -> (Vec<Step>, BTreeSet<ObjectKey>) {
    let applyset = inventory.applyset_id();
    let mut steps = Vec::new();
    let mut forgotten = BTreeSet::new();
    for (entry, decision) in prune_decisions(record, rendered, live, &applyset, options.allow_empty)
    {
        let key = entry.key();
        let mut directive = None;
        let action = match decision {
            // A Node is always adopted (tether never creates one), and its model gone
            // means the host is leaving.
            PruneDecision::Delete | PruneDecision::Release if nodes::is_node(&key) => {
                Action::RemoveHost
            }
            PruneDecision::Delete => Action::Delete,
            // Held with the prune until a person approves it (`Plan::prune_hold`).
            PruneDecision::Confirm(by) => {
                directive = Some(by);
                Action::Delete
            }
            PruneDecision::Release => Action::Release,
            PruneDecision::Keep(by) => {
                directive = Some(by);
                Action::Release
            }
            PruneDecision::Forget(_) if let Some(message) = unlistable.of(entry) => {
                if options.prune {
                    steps.push(refused_prune(entry, message));
                }
                continue;
            }
            PruneDecision::Forget(why) => {
                tracing::info!(object = %key, why, "dropped from the inventory");
                forgotten.insert(key);
                continue;
            }
        };
        let Some(object) = live.get(&key) else {
            continue;
        };
        // A release changes no value: the diff is only for deletions.
        let diff = match action {
            Action::Delete => change_diff(&entry.kind, Some(object), None),
            _ => String::new(),
        };
        steps.push(Step {
            change: Change {
                diff,
                model: annotation(object, MODEL_ANNOTATION),
                source: annotation(object, SOURCE_ANNOTATION),
                directive,
                with_contents: directive::directives(object)
                    .ok()
                    .and_then(|d| d.with_contents)
                    .map(|written| written.to_string()),
                ..Change::new(key, entry.api_version.clone(), action)
            },
            object: None,
            force: false,
            hand_over: None,
            clear_rolling: None,
            provenance: None,
            refusal: None,
            pins: Vec::new(),
        });
    }
    (steps, forgotten)
}

/// Requests a plan made beyond the lists: single reads and server-side dry runs. A
/// steady-state plan makes none.
#[derive(Default)]
struct RequestCounts {
    reads: AtomicUsize,
    dry_runs: AtomicUsize,
}

/// What planning one object reads.
struct ObjectContext<'p> {
    client: &'p Client,
    inventory: &'p Inventory,
    /// The inventory's field manager.
    manager: &'p str,
    resources: &'p Resources,
    labelled: &'p HashMap<ObjectKey, Arc<Value>>,
    /// Objects not labelled for the inventory that a list of names showed absent
    /// (see [`unlabelled`]): new, without a read.
    absent: &'p HashSet<ObjectKey>,
    /// Kinds that CustomResourceDefinitions of this apply define: namespaced or not.
    defined_here: &'p HashMap<(String, String), bool>,
    counts: &'p RequestCounts,
    /// Dry-run new objects too.
    dry_run_new: bool,
    /// The other tether inventories of the cluster: read when first needed.
    others: OnceCell<OtherInventories>,
    /// The repository's ignore rules, and the workloads an autoscaler here scales
    /// (see [`tether_core::ignore`]).
    ignore: (&'p [IgnoreDifferences], &'p BTreeSet<ObjectKey>),
}

/// Places every object as the server scopes its kind (or as a CustomResourceDefinition
/// of this apply scopes it): a namespaced object without a namespace goes to
/// `default`, as kubectl puts it; a cluster-scoped one loses a written namespace.
/// Returns the kinds defined here, by (group, kind).
fn place_all(
    resources: &Resources,
    objects: &mut [RenderedObject],
) -> HashMap<(String, String), bool> {
    let defined_here: HashMap<(String, String), bool> = objects
        .iter()
        .filter(|o| o.kind == "CustomResourceDefinition")
        .filter_map(|o| {
            let spec = &o.body["spec"];
            Some((
                (
                    spec["group"].as_str()?.to_string(),
                    spec["names"]["kind"].as_str()?.to_string(),
                ),
                spec["scope"].as_str() != Some("Cluster"),
            ))
        })
        .collect();
    for object in objects.iter_mut() {
        let namespaced = resources
            .namespaced(&object.api_version, &object.kind)
            .or_else(|| {
                let group = api_group(&object.api_version).to_string();
                defined_here.get(&(group, object.kind.clone())).copied()
            });
        if let Some(namespaced) = namespaced {
            object.namespace = place(&mut object.body, namespaced);
        }
    }
    defined_here
}

/// A recorded object whose namespace the identity may not list: not pruned, and
/// the refusal said.
fn refused_prune(entry: &InventoryEntry, message: &str) -> Step {
    let mut change = Change::new(entry.key(), entry.api_version.clone(), Action::Error);
    change.error = Some(message.to_string());
    Step {
        change,
        object: None,
        force: false,
        hand_over: None,
        clear_rolling: None,
        provenance: None,
        refusal: Some(ObjectFailure::Forbidden {
            verb: "prune",
            identity: None,
            message: message.to_string(),
        }),
        pins: Vec::new(),
    }
}

/// What the labelled lists found.
struct Listed {
    live: HashMap<ObjectKey, Arc<Value>>,
    unlistable: Unlistable,
}

/// The namespaces where the identity may not list a kind: the server's refusal, by
/// (apiVersion, kind, namespace).
#[derive(Default)]
struct Unlistable(BTreeMap<(String, String, String), String>);

impl Unlistable {
    /// Why `entry`'s namespace could not be listed for its kind, if it could not.
    fn of(&self, entry: &InventoryEntry) -> Option<&str> {
        let namespace = entry.namespace.clone()?;
        let id = (entry.api_version.clone(), entry.kind.clone(), namespace);
        self.0.get(&id).map(String::as_str)
    }
}

/// What is labelled for an inventory, and where its kinds may be cached.
struct Labelled<'l> {
    applyset: &'l str,
    manager: &'l str,
    cache: Option<&'l WatchCache>,
    /// The namespaces the plan concerns (its objects', its record's, the
    /// inventory's): listed one by one when the identity may not list a kind across
    /// the cluster.
    namespaces: &'l BTreeSet<String>,
    /// What the lists read.
    reads: Reads,
}

/// Everything labelled for this inventory: from the watch cache for the kinds it has
/// synced, else one list per kind.
#[instrument(skip_all)]
async fn list_labelled(
    resources: &Resources,
    kinds: &BTreeSet<(String, String)>,
    labelled: &Labelled<'_>,
) -> Result<Listed, ClusterError> {
    let Labelled {
        applyset,
        manager,
        cache,
        ..
    } = labelled;
    let selector = ListParams::default().labels(&format!("{PART_OF_LABEL}={applyset}"));
    let mut live = HashMap::new();
    let mut unlistable = Unlistable::default();
    for (api_version, kind) in kinds {
        if resources.namespaced(api_version, kind).is_none() {
            continue; // a kind only the inventory knows, no longer served: nothing to list
        }
        if let Some(cached) = cache.and_then(|c| c.listed(api_version, kind)) {
            live.extend(cached);
            continue;
        }
        let keep = |live: &mut HashMap<_, _>, item: DynamicObject| {
            let key = ObjectKey::new(
                api_version,
                kind,
                item.namespace().as_deref(),
                &item.name_any(),
            );
            live.insert(key, Arc::new(live_value(item, api_version, kind, manager)));
        };
        let api = resources.api_all(api_version, kind)?;
        let each = |item| keep(&mut live, item);
        match list_each(&api, &selector, labelled.reads, each).await {
            Ok(()) => {}
            // A team's identity (a Role in its namespaces only) may not list across
            // the cluster: the namespaces the plan concerns are listed one by one. The
            // cluster-wide list stays the first try, since it is one request however
            // many namespaces, and most identities may make it.
            Err(kube::Error::Api(status))
                if status.code == 403 && resources.namespaced(api_version, kind) == Some(true) =>
            {
                let refused = list_each_namespace(
                    resources,
                    (api_version, kind),
                    labelled,
                    &selector,
                    |item| keep(&mut live, item),
                );
                for (namespace, message) in refused.await? {
                    let id = (api_version.clone(), kind.clone(), namespace);
                    unlistable.0.insert(id, message);
                }
            }
            Err(e) => return Err(api_error(format!("list {kind} objects"))(e)),
        }
    }
    Ok(Listed { live, unlistable })
}

/// The labelled objects of one namespaced kind, a list per namespace the plan
/// concerns, each handed to `each` as its page arrives. A namespace the identity may
/// not list is returned with its refusal (the namespace and the server's message): it
/// may change nothing there either, each of the plan's objects in it meets its own
/// refusal when planned, and what the inventory recorded there is kept.
async fn list_each_namespace(
    resources: &Resources,
    (api_version, kind): (&str, &str),
    labelled: &Labelled<'_>,
    selector: &ListParams,
    mut each: impl FnMut(DynamicObject),
) -> Result<Vec<(String, String)>, ClusterError> {
    let mut refused = Vec::new();
    for namespace in labelled.namespaces {
        let api = resources.api(api_version, kind, Some(namespace))?;
        match list_each(&api, selector, labelled.reads, &mut each).await {
            Ok(()) => {}
            Err(kube::Error::Api(status)) if status.code == 403 => {
                refused.push((namespace.clone(), status_text(&status)));
            }
            Err(e) => {
                return Err(api_error(format!("list {kind} objects in {namespace}"))(e));
            }
        }
    }
    Ok(refused)
}

/// Plans one object: the steps it can end in, and the reads and dry runs that decide.
struct ObjectPlanner<'p> {
    context: &'p ObjectContext<'p>,
    object: &'p RenderedObject,
    /// Its place among the rendered objects, which its steps refer to.
    index: usize,
    key: ObjectKey,
    desired: Value,
    /// What its annotations (Flux's, Argo CD's) ask.
    directives: Directives,
}

impl ObjectPlanner<'_> {
    fn step(&self, action: Action, diff: String) -> Step {
        Step {
            change: Change {
                wave: Some(self.object.wave),
                model: Some(self.object.model.clone()),
                source: Some(self.object.source.clone()),
                diff,
                ..Change::new(self.key.clone(), self.object.api_version.clone(), action)
            },
            object: Some(self.index),
            force: false,
            hand_over: None,
            clear_rolling: None,
            provenance: None,
            refusal: None,
            pins: Vec::new(),
        }
    }

    fn failed(&self, message: String) -> Step {
        let mut failed = self.step(Action::Error, String::new());
        failed.change.error = Some(message);
        failed.object = None;
        failed
    }

    fn create(&self) -> Step {
        let diff = change_diff(&self.object.kind, None, Some(&self.object.body));
        let mut create = self.step(Action::Create, diff);
        create.provenance = Some(Provenance::created());
        create
    }

    /// An object its annotation says not to apply (now): nothing to apply or record.
    fn skipped(&self, by: &Written) -> Step {
        let mut skipped = self.step(Action::Skip, String::new());
        skipped.object = None;
        skipped.change.directive = Some(by.to_string());
        skipped
    }

    /// A Node model whose node is not in the cluster: nothing to apply (tether never
    /// creates a node) and nothing to record.
    fn absent(&self) -> Step {
        let mut absent = self.step(Action::Absent, String::new());
        absent.object = None;
        absent
    }

    /// A Job whose pod template changed: Kubernetes does not let it change, so it
    /// is deleted and created again.
    /// Another inventory's Job stays its own: a conflict, refused at apply like
    /// any apply over it, and never deleted.
    fn replace(&self, live: &Value, owned_by: Option<String>) -> Step {
        let diff = replace_diff(&self.object.kind, live, &self.object.body);
        let mut replace = self.step(Action::Replace, diff);
        replace.provenance = Some(Provenance::created());
        replace.change.directive = self.directives.replace.as_ref().map(ToString::to_string);
        if let Some(owner) = owned_by {
            replace.change.action = Action::Conflict;
            replace.change.conflicts = vec![owner_conflict(&owner)];
            replace.change.owned_by = Some(owner);
        }
        replace
    }

    /// A controller whose update strategy changes to one without rolling
    /// parameters: the server's dry run cannot show the result (it refuses the
    /// parameters it defaulted itself), so the diff compares the fields tether sets.
    fn switch_strategy(&self, live: &Value, owned_by: Option<String>, patch: Value) -> Step {
        let diff = replace_diff(&self.object.kind, live, &self.object.body);
        let mut switch = self.step(Action::Update, diff);
        switch.clear_rolling = Some(patch);
        if let Some(owner) = owned_by {
            switch.change.action = Action::Conflict;
            switch.change.conflicts = vec![owner_conflict(&owner)];
            switch.change.owned_by = Some(owner);
        }
        switch
    }

    /// A server-side dry run of the apply (counted).
    async fn dry_run(
        &self,
        api: &Api<DynamicObject>,
        desired: &Value,
        force: bool,
    ) -> Result<DynamicObject, kube::Error> {
        self.context.counts.dry_runs.fetch_add(1, Ordering::Relaxed);
        let params = crate::cluster::apply_params(self.context.manager, force).dry_run();
        api.patch(&self.object.name, &params, &Patch::Apply(desired))
            .await
    }

    async fn plan(&self) -> Result<Step, ClusterError> {
        let (context, object, inventory) = (self.context, self.object, self.context.inventory);
        let group = api_group(&object.api_version).to_string();
        match context
            .resources
            .namespaced(&object.api_version, &object.kind)
        {
            Some(_) => {}
            // Defined by a CustomResourceDefinition of this apply: new by definition.
            None if context
                .defined_here
                .contains_key(&(group, object.kind.clone())) =>
            {
                return Ok(self.create());
            }
            None => {
                return Ok(self.failed(format!(
                    "the server does not serve {} {} (is its CustomResourceDefinition installed?)",
                    object.api_version, object.kind
                )));
            }
        }
        if let (ApplyMode::Ignore, Some(by)) = &self.directives.apply {
            return Ok(self.skipped(by));
        }
        if is_record_name(&object.api_version, &object.kind, &object.name) {
            return Ok(self.failed(format!(
                "the name {} is reserved for tether's inventory records (the record of the inventory {} is {}): give the ConfigMap another name",
                object.name,
                inventory.display(),
                inventory.record_name()
            )));
        }
        let api = context.resources.api(
            &object.api_version,
            &object.kind,
            object.namespace.as_deref(),
        )?;
        let live: Option<Cow<'_, Value>> = match context.labelled.get(&self.key) {
            Some(live) => Some(Cow::Borrowed(&**live)),
            None if context.absent.contains(&self.key) => None,
            // Not labelled for us: new, or someone else's object with the same name.
            None => {
                context.counts.reads.fetch_add(1, Ordering::Relaxed);
                match api.get_opt(&object.name).await {
                    Ok(found) => found.map(|o| {
                        Cow::Owned(live_value(
                            o,
                            &object.api_version,
                            &object.kind,
                            context.manager,
                        ))
                    }),
                    Err(kube::Error::Api(status)) => {
                        let mut failed =
                            self.failed(format!("cannot read it: {}", status_text(&status)));
                        // The identity may not read it, so it may not apply it either.
                        let refusal = ObjectFailure::of_request("apply", &kube::Error::Api(status));
                        failed.refusal =
                            matches!(refusal, ObjectFailure::Forbidden { .. }).then_some(refusal);
                        return Ok(failed);
                    }
                    Err(e) => return Err(api_error(format!("read {}", self.key))(e)),
                }
            }
        };
        match live {
            None if nodes::is_node(&self.key) => Ok(self.absent()),
            None => self.plan_new(&api).await,
            Some(live) if is_inventory_record(&live) => Ok(self.failed(
                "this is the record of a tether inventory: tether never applies over an inventory"
                    .into(),
            )),
            Some(_) if let (ApplyMode::IfNotPresent, Some(by)) = &self.directives.apply => {
                Ok(self.skipped(by))
            }
            Some(live) => self.plan_existing(&api, &live).await,
        }
    }

    /// A new object: for a review, the dry run checks the server would take it, so a
    /// refusal shows before the merge (an apply learns it from the apply itself). Its
    /// namespace may be one this apply makes.
    async fn plan_new(&self, api: &Api<DynamicObject>) -> Result<Step, ClusterError> {
        if !self.context.dry_run_new {
            return Ok(self.create());
        }
        Ok(match self.dry_run(api, &self.desired, false).await {
            Ok(_) => self.create(),
            Err(kube::Error::Api(status)) if awaits_its_namespace(&status) => self.create(),
            Err(kube::Error::Api(status)) => self.failed(status_text(&status)),
            Err(e) => return Err(api_error(format!("dry-run apply {}", self.key))(e)),
        })
    }

    /// The other tether inventory a live object belongs to: by its labels, or, when
    /// not labelled for this one, by another inventory's record (labels removed by
    /// hand). The other inventories are read once per plan, and only for objects
    /// that are not plainly this inventory's.
    async fn owner(&self, live: &Value) -> Result<Option<String>, ClusterError> {
        let context = self.context;
        let labelled_elsewhere = other_inventory(live, &context.inventory.applyset_id());
        if labelled_elsewhere.is_none() && context.labelled.contains_key(&self.key) {
            return Ok(None);
        }
        let others = context
            .others
            .get_or_try_init(|| other_inventories(context.client, context.inventory))
            .await?;
        Ok(match labelled_elsewhere {
            // An id whose inventory is not found is named by the id.
            Some(applyset) => Some(
                others
                    .by_applyset
                    .get(applyset)
                    .cloned()
                    .unwrap_or_else(|| applyset.to_string()),
            ),
            None => others.recorded.get(&self.key).cloned(),
        })
    }

    /// The fields of this object left to other managers, applied with their live
    /// values or not at all (see [`tether_core::ignore`]), and what it applies with
    /// them pinned when there are any.
    fn pinned(&self, live: &Value) -> (Vec<Pin>, Option<Value>) {
        let (rules, scaled) = self.context.ignore;
        let ignored = ignore::pointers(rules, &self.object.body, scaled);
        let pins = ignore::pins(&ignored, &self.desired, live, self.context.manager);
        let body = (!pins.is_empty()).then(|| {
            let mut body = self.desired.clone();
            ignore::pin(&mut body, &pins);
            body
        });
        (pins, body)
    }

    async fn plan_existing(
        &self,
        api: &Api<DynamicObject>,
        live: &Value,
    ) -> Result<Step, ClusterError> {
        let owned_by = self.owner(live).await?;
        let (pins, pinned) = self.pinned(live);
        let desired = pinned.as_ref().unwrap_or(&self.desired);
        let step = |action, diff| {
            let mut step = self.step(action, diff);
            step.change.ignored = pins.iter().map(|p| p.pointer().to_string()).collect();
            step.pins = pins.clone();
            step
        };
        // If it is not recorded yet, tether adopts this object.
        let adopted = Some(Provenance::adopted(
            live["metadata"]["uid"].as_str().map(str::to_string),
        ));
        // A node's taints are edited in place, beside the apply (see `tether_core::host`).
        let taints = match nodes::is_node(&self.key) {
            true => merged_taints(live, desired),
            false => None,
        };
        if provably_unchanged(desired, live) && owned_by.is_none() && taints.is_none() {
            let mut unchanged = step(Action::Unchanged, String::new());
            unchanged.provenance = adopted;
            return Ok(unchanged);
        }
        let attempt = match self.dry_run(api, desired, false).await {
            // Show what taking the fields would change, too.
            Err(kube::Error::Api(status)) if status.is_conflict() => self
                .dry_run(api, desired, true)
                .await
                .map(|forced| (forced, conflicts_of(&status))),
            other => other.map(|result| (result, Vec::new())),
        };
        let (result, conflicts) = match attempt {
            Ok(done) => done,
            Err(kube::Error::Api(status)) => {
                return Ok(
                    match on_refusal(&self.object.kind, desired, &status, &self.directives) {
                        Refusal::Replace => self.replace(live, owned_by),
                        Refusal::SwitchStrategy(patch) => {
                            self.switch_strategy(live, owned_by, patch)
                        }
                        Refusal::Fail(message) => self.failed(message),
                    },
                );
            }
            Err(e) => return Err(api_error(format!("dry-run apply {}", self.key))(e)),
        };
        let object = self.object;
        let mut result = live_value(
            result,
            &object.api_version,
            &object.kind,
            self.context.manager,
        );
        if let Some(taints) = taints {
            result["spec"]["taints"] = Value::Array(taints);
        }
        // Flux's `ssa: Merge` leaves fields others applied client-side to them.
        let hand_over = match self.directives.apply.0 {
            ApplyMode::Merge => None,
            _ => hand_over_patch(live, desired, self.context.manager, &object.api_version),
        };
        let ours = owned_by.is_none() && self.context.labelled.contains_key(&self.key);
        let judged = judge_update(UpdateFacts {
            kind: &object.kind,
            live,
            result: &result,
            conflicts,
            owned_by: owned_by.as_deref(),
            handed_over: hand_over.is_some(),
            ours,
        });
        let mut planned = step(judged.action, judged.diff);
        planned.change.drift = judged.drift;
        planned.change.conflicts = judged.conflicts;
        planned.force = judged.force;
        planned.hand_over = hand_over;
        planned.change.owned_by = owned_by;
        planned.provenance = adopted;
        Ok(planned)
    }
}

/// What a dry run the server refused means for the object.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// A change a Job cannot take in place: the Job is made again.
    Replace,
    /// A Deployment moving to `Recreate` while its live object still has rolling
    /// update parameters: this merge patch clears them first.
    SwitchStrategy(Value),
    /// The object fails, with the server's words.
    Fail(String),
}

/// Decides what a refused dry run of `kind` means, from the server's answer.
fn on_refusal(
    kind: &str,
    desired: &Value,
    status: &kube::core::Status,
    directives: &Directives,
) -> Refusal {
    if is_immutable_change(status) && (kind == "Job" || directives.replace.is_some()) {
        return Refusal::Replace;
    }
    if status.code == 422
        && status.message.contains("rollingUpdate")
        && let Some(patch) = strategy_switch(desired)
    {
        return Refusal::SwitchStrategy(patch);
    }
    Refusal::Fail(status_text(status))
}

/// What a dry-run apply of an existing object came to, beside the live object.
struct UpdateFacts<'a> {
    kind: &'a str,
    live: &'a Value,
    /// The object as the dry run would leave it.
    result: &'a Value,
    /// The fields other managers own that the apply would take.
    conflicts: Vec<FieldConflict>,
    /// The other tether inventory the object belongs to, if any.
    owned_by: Option<&'a str>,
    /// Fields applied client-side by kubectl, or by tether's former shared manager or
    /// its install, are handed over to this inventory first.
    handed_over: bool,
    /// The object is labelled as this inventory's.
    ours: bool,
}

/// The planned change of an existing object.
#[derive(Debug, PartialEq)]
struct Judged {
    action: Action,
    diff: String,
    conflicts: Vec<FieldConflict>,
    /// Another manager wrote fields in place on an object of this inventory.
    drift: bool,
    /// The apply takes fields quietly (it forces).
    force: bool,
}

/// Decides the change of an existing object from its dry run. A field another
/// manager owns, set to the value it already has (spelled differently, or defaulted
/// by the server), is taken quietly: no conflict. So are tether's own labels and
/// annotations (the diff shows their change), and fields handed over to this
/// inventory before the apply. Taking fields changes no value, so a plan with
/// nothing else is unchanged; the apply still makes that write.
fn judge_update(facts: UpdateFacts<'_>) -> Judged {
    let UpdateFacts {
        kind,
        live,
        result,
        conflicts,
        owned_by,
        handed_over,
        ours,
    } = facts;
    let (taken_quietly, mut conflicts): (Vec<FieldConflict>, Vec<FieldConflict>) =
        conflicts.into_iter().partition(|c| {
            is_ownership_mark(&c.field)
                || (handed_over && managed_fields::gives_way(&c.manager))
                || same_value_at(live, result, &c.field)
                || empty_map_at(live, &c.field)
        });
    if let Some(owner) = owned_by {
        conflicts.insert(0, owner_conflict(owner));
    }
    let diff = change_diff(kind, Some(live), Some(result));
    let action = match (conflicts.is_empty(), diff.is_empty()) {
        (false, _) => Action::Conflict,
        (true, true) => Action::Unchanged,
        (true, false) => Action::Update,
    };
    let drift = ours
        && !conflicts.is_empty()
        && conflicts.iter().all(|c| written_in_place(live, &c.manager));
    Judged {
        action,
        diff,
        conflicts,
        drift,
        force: !taken_quietly.is_empty(),
    }
}

/// The conflict that an object of another tether inventory is.
fn owner_conflict(owner: &str) -> FieldConflict {
    FieldConflict {
        manager: format!("the tether inventory {owner}"),
        field: format!(".metadata.labels.{PART_OF_LABEL}"),
    }
}

/// Did the server refuse a change of immutable fields (a Job's pod template, a
/// Deployment's selector, a Service's clusterIP)?
fn is_immutable_change(status: &kube::core::Status) -> bool {
    status.code == 422 && status.message.contains("field is immutable")
}

/// A controller switched to an update strategy without rolling parameters
/// (Deployment `Recreate`, StatefulSet or DaemonSet `OnDelete`) keeps those the server
/// defaulted while it rolled: they belong to no field manager, so an apply cannot
/// remove them, and validation refuses them beside the new type. This merge patch
/// sets the type and drops them in one step.
fn strategy_switch(desired: &Value) -> Option<Value> {
    let (field, without_rolling) = match desired["kind"].as_str()? {
        "Deployment" => ("strategy", "Recreate"),
        "StatefulSet" | "DaemonSet" => ("updateStrategy", "OnDelete"),
        _ => return None,
    };
    (desired["spec"][field]["type"].as_str() == Some(without_rolling)).then(
        || serde_json::json!({"spec": {field: {"type": without_rolling, "rollingUpdate": null}}}),
    )
}

/// Did `manager` write the object only in place (Update operations), never by apply?
fn written_in_place(live: &Value, manager: &str) -> bool {
    let entries: Vec<&Value> = live["metadata"]["managedFields"]
        .as_array()
        .map(|entries| entries.iter().filter(|e| e["manager"] == manager).collect())
        .unwrap_or_default();
    !entries.is_empty() && entries.iter().all(|e| e["operation"] == "Update")
}

async fn plan_object(
    context: &ObjectContext<'_>,
    index: usize,
    object: &RenderedObject,
) -> Result<Step, ClusterError> {
    let mut planner = ObjectPlanner {
        context,
        object,
        index,
        key: object.key(),
        desired: with_applied_hash(&object.body),
        directives: Directives::default(),
    };
    match directive::directives(&object.body) {
        Ok(directives) => planner.directives = directives,
        Err(problem) => return Ok(planner.failed(problem)),
    }
    planner.plan().await
}

/// The refusal of an object whose namespace does not exist yet.
fn awaits_its_namespace(status: &kube::core::Status) -> bool {
    status.is_not_found() && status.message.starts_with("namespaces ")
}

/// A merge patch of an object's managed fields that hands its client-side-applied
/// fields that tether sets over to tether (conditional on the object's
/// resourceVersion); `None` when there are none.
fn hand_over_patch(
    live: &Value,
    desired: &Value,
    manager: &str,
    api_version: &str,
) -> Option<Value> {
    let entries: Vec<ManagedFieldsEntry> =
        serde_json::from_value(live["metadata"]["managedFields"].clone()).ok()?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let handed = managed_fields::hand_over(&entries, desired, manager, api_version, now)?;
    Some(serde_json::json!({"metadata": {
        "resourceVersion": live["metadata"]["resourceVersion"],
        "managedFields": handed,
    }}))
}

/// The other tether inventories of the cluster, each named `namespace/name`.
#[derive(Default)]
struct OtherInventories {
    /// By ApplySet id.
    by_applyset: HashMap<String, String>,
    /// The objects they record.
    recorded: HashMap<ObjectKey, String>,
}

/// Reads the other tether inventories of the cluster. One this client may not read,
/// or cannot read, is left out: the labels remain the first sign of ownership.
async fn other_inventories(
    client: &Client,
    ours: &Inventory,
) -> Result<OtherInventories, ClusterError> {
    let parents: kube::Api<ConfigMap> = kube::Api::all(client.clone());
    let list = match parents
        .list(&ListParams::default().labels(APPLYSET_ID_LABEL))
        .await
    {
        Ok(list) => list,
        Err(kube::Error::Api(status)) => {
            tracing::debug!(reason = %status.message, "the other inventories are not readable");
            return Ok(OtherInventories::default());
        }
        Err(e) => return Err(api_error("read the other inventories".into())(e)),
    };
    let mut others = OtherInventories::default();
    let ours = ours.applyset_id();
    for parent in list.items {
        let Some(id) = parent.labels().get(APPLYSET_ID_LABEL).cloned() else {
            continue;
        };
        // Ours (its head, or its record before heads not yet moved).
        if id == ours {
            continue;
        }
        // A sharded record's entries are not read: its labels name its objects.
        let Some((name, record)) = head_record(&parent) else {
            continue;
        };
        let display = format!("{}/{name}", parent.namespace().unwrap_or_default());
        others.by_applyset.insert(id, display.clone());
        for entry in record.entries.keys() {
            others.recorded.insert(entry.key(), display.clone());
        }
    }
    Ok(others)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(code: u16, message: &str) -> kube::core::Status {
        kube::core::Status {
            code,
            message: message.into(),
            ..kube::core::Status::default()
        }
    }

    #[test]
    fn a_refused_dry_run_replaces_a_job_switches_a_strategy_or_fails() {
        let plain = Directives::default();
        let on_refusal = |kind: &str, desired: &Value, status: &kube::core::Status| {
            on_refusal(kind, desired, status, &plain)
        };
        let job = json!({"kind": "Job"});
        let immutable = refused(422, "spec.template: Invalid value: field is immutable");
        assert_eq!(on_refusal("Job", &job, &immutable), Refusal::Replace);
        let recreate = json!({"kind": "Deployment", "spec": {"strategy": {"type": "Recreate"}}});
        let rolling = refused(422, "spec.strategy.rollingUpdate: Forbidden");
        assert_eq!(
            on_refusal("Deployment", &recreate, &rolling),
            Refusal::SwitchStrategy(
                json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}})
            )
        );
        let rolling_wanted = json!({"kind": "Deployment", "spec": {}});
        assert!(matches!(
            on_refusal("Deployment", &rolling_wanted, &rolling),
            Refusal::Fail(_)
        ));
        assert!(matches!(
            on_refusal("Job", &job, &refused(403, "forbidden")),
            Refusal::Fail(_)
        ));
    }

    #[test]
    fn an_immutable_change_replaces_any_kind_whose_annotation_asks_for_it() {
        let service = json!({"kind": "Service"});
        let immutable = refused(422, "spec.clusterIP: Invalid value: field is immutable");
        assert!(matches!(
            on_refusal("Service", &service, &immutable, &Directives::default()),
            Refusal::Fail(_)
        ));
        for annotations in [
            json!({directive::FLUX_FORCE: "enabled"}),
            json!({directive::ARGO_SYNC_OPTIONS: "Replace=true"}),
        ] {
            let directives =
                directive::directives(&json!({"metadata": {"annotations": annotations}}))
                    .expect("directives");
            assert_eq!(
                on_refusal("Service", &service, &immutable, &directives),
                Refusal::Replace
            );
            assert!(matches!(
                on_refusal(
                    "Service",
                    &service,
                    &refused(422, "spec.ports: Required value"),
                    &directives
                ),
                Refusal::Fail(_)
            ));
        }
    }

    fn deployment(replicas: u32, editor: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "managedFields": [{"manager": editor, "operation": "Update"}]
            },
            "spec": {"replicas": replicas}
        })
    }

    fn facts<'a>(
        live: &'a Value,
        result: &'a Value,
        conflicts: Vec<FieldConflict>,
    ) -> UpdateFacts<'a> {
        UpdateFacts {
            kind: "Deployment",
            live,
            result,
            conflicts,
            owned_by: None,
            handed_over: false,
            ours: true,
        }
    }

    fn conflict(manager: &str, field: &str) -> FieldConflict {
        FieldConflict {
            manager: manager.into(),
            field: field.into(),
        }
    }

    #[test]
    fn a_field_taken_at_the_value_it_has_is_no_conflict_and_no_change() {
        let live = deployment(2, "kubectl-edit");
        let judged = judge_update(facts(
            &live,
            &live,
            vec![conflict("kubectl-edit", ".spec.replicas")],
        ));
        assert_eq!(judged.action, Action::Unchanged);
        assert!(judged.conflicts.is_empty() && judged.force && !judged.drift);
    }

    #[test]
    fn an_empty_map_another_manager_applied_is_filled_without_a_conflict() {
        // kubectl apply --server-side of `labels:`, `annotations: {}` and
        // `binaryData: {}`: the server stores nothing and records kubectl as the
        // owner of each map as a value.
        let live = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "annotations": {}},
            "data": {"level": "debug"}
        });
        let mut result = live.clone();
        result["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "tether"});
        result["metadata"]["annotations"] = json!({"tether.dev/model": "Manifest/cm.yaml"});
        let judged = judge_update(UpdateFacts {
            kind: "ConfigMap",
            ..facts(
                &live,
                &result,
                vec![
                    conflict("kubectl", ".metadata.labels"),
                    conflict("kubectl", ".metadata.annotations"),
                    conflict("kubectl", ".binaryData"),
                ],
            )
        });
        assert_eq!(judged.action, Action::Update);
        assert!(judged.conflicts.is_empty() && judged.force);
        // A map that holds another's values stays theirs: a conflict.
        let mut theirs = live.clone();
        theirs["metadata"]["labels"] = json!({"team": "a"});
        let judged = judge_update(UpdateFacts {
            kind: "ConfigMap",
            ..facts(
                &theirs,
                &result,
                vec![conflict("kubectl", ".metadata.labels")],
            )
        });
        assert_eq!(judged.action, Action::Conflict);
        // So does an empty list, which is not a map.
        let mut args = live.clone();
        args["spec"] = json!({"args": []});
        let mut filled = result.clone();
        filled["spec"] = json!({"args": ["--verbose"]});
        let judged = judge_update(UpdateFacts {
            kind: "ConfigMap",
            ..facts(&args, &filled, vec![conflict("kubectl", ".spec.args")])
        });
        assert_eq!(judged.action, Action::Conflict);
    }

    #[test]
    fn a_field_another_changed_in_place_on_our_object_is_drift() {
        let live = deployment(5, "kubectl-edit");
        let result = deployment(2, "kubectl-edit");
        let judged = judge_update(facts(
            &live,
            &result,
            vec![conflict("kubectl-edit", ".spec.replicas")],
        ));
        assert_eq!(judged.action, Action::Conflict);
        assert!(judged.drift && !judged.force);
        assert!(judged.diff.contains("replicas"), "{}", judged.diff);
    }

    /// Bootstrap: a commit changes the replicas `tether install` applied; its fields
    /// are handed over first, so this is an update, not a conflict. kubectl's are not.
    #[test]
    fn a_field_of_tether_s_own_install_is_taken_after_its_hand_over() {
        let live = deployment(2, "tether-install");
        let result = deployment(3, "tether-install");
        for (manager, action) in [
            ("tether-install", Action::Update),
            ("kubectl-client-side-apply", Action::Conflict),
        ] {
            let judged = judge_update(UpdateFacts {
                handed_over: true,
                ours: false,
                ..facts(&live, &result, vec![conflict(manager, ".spec.replicas")])
            });
            assert_eq!(judged.action, action, "{manager}");
        }
    }

    #[test]
    fn another_inventorys_object_is_a_conflict_naming_it_first() {
        let live = deployment(2, "kubectl-edit");
        let judged = judge_update(UpdateFacts {
            owned_by: Some("team-b/tether"),
            ours: false,
            ..facts(&live, &live, Vec::new())
        });
        assert_eq!(judged.action, Action::Conflict);
        assert_eq!(
            judged.conflicts[0].manager,
            "the tether inventory team-b/tether"
        );
        assert!(!judged.drift);
    }
}
