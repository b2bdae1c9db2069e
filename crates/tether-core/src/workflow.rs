//! The workflow of a repo, as Kolla deploys a service: which models wait for which
//! (`depends_on`), the waves they are applied in, what must be ready before each wave
//! starts, and which models a selection (`--only`) takes along. Pure: resolve builds
//! it, render stamps each object with its wave, apply waits between waves, and the
//! reports draw it.
//!
//! An object may also carry Argo CD's `argocd.argoproj.io/sync-wave`: as in Argo CD,
//! every object of a lower sync-wave is applied, and ready, before any of a higher
//! one (objects without are in sync-wave 0). The waves honour both orders; where they
//! contradict each other, resolve reports the [`SyncConflict`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::diagnostic::Span;
use crate::k8s::ObjectKey;
use crate::model::Kind;

/// A model: its kind and its position in the model vector of that kind
/// (`Models::data` for ConfigMaps and Secrets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelId {
    pub kind: Kind,
    pub index: usize,
}

/// When an object counts as ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// The kind's built-in rule (see [`crate::readiness`]); existence for other kinds.
    BuiltIn,
    /// The status condition of this type is `True`.
    Condition(String),
    /// The field at this dotted path has this value.
    Field { path: String, value: String },
    /// A Service with at least one ready endpoint.
    Endpoints,
}

/// An object to wait for, and when it is ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gate {
    pub api_version: String,
    pub key: ObjectKey,
    pub rule: Rule,
}

impl Gate {
    /// `Kind namespace/name`, and its rule when it is not the built-in one.
    pub fn describe(&self) -> String {
        match &self.rule {
            Rule::BuiltIn => self.key.to_string(),
            Rule::Condition(c) => format!("{} (condition {c})", self.key),
            Rule::Field { path, value } => format!("{} ({path} = {value})", self.key),
            Rule::Endpoints => format!("{} (with endpoints)", self.key),
        }
    }
}

/// One thing a model waits for.
#[derive(Clone, Debug, PartialEq)]
pub enum Need {
    /// Another model (a [`Workflow::members`] index): its objects, ready.
    Model { member: usize, span: Span },
    /// An object tether does not manage.
    Object { gate: Gate, span: Span },
}

/// A model that makes objects (or, with `xos_managed: false`, stands for objects
/// others made).
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub id: ModelId,
    /// `Kind/name`, as reports and graphs show it.
    pub label: String,
    /// Where the model is written.
    pub span: Span,
    /// Whether tether applies its objects.
    pub managed: bool,
    /// The first wave its objects are applied in; 0 when it waits for nothing.
    pub wave: usize,
    /// The wave of its objects of each Argo CD sync-wave (one entry, 0, for a model
    /// whose objects carry none).
    pub waves: BTreeMap<i64, usize>,
    /// The Argo CD sync-wave of each of its objects that carries one other than 0.
    pub sync_waves: BTreeMap<ObjectKey, i64>,
    /// What it waits for (`depends_on`).
    pub needs: Vec<Need>,
    /// The models it cannot exist without (its trust domain, its slice, the
    /// ConfigMaps it mounts): applied in its wave or before, and taken along by a
    /// selection, but not waited for.
    pub requires: Vec<usize>,
    /// Its objects, with when each counts as ready: what its dependents wait for.
    pub objects: Vec<Gate>,
    /// The KubernetesService whose cluster its objects go to (see
    /// [`crate::resolve`]'s placement); `None` when the repository names none.
    pub cluster: Option<String>,
}

impl Member {
    /// The Argo CD sync-wave of one of its objects.
    pub fn sync_wave_of(&self, key: &ObjectKey) -> i64 {
        self.sync_waves.get(key).copied().unwrap_or(0)
    }

    /// The sync-waves its objects are in (0 alone for a model whose objects carry
    /// none, or that makes none).
    fn sync_wave_set(&self) -> BTreeSet<i64> {
        let mut set: BTreeSet<i64> = self
            .objects
            .iter()
            .map(|gate| self.sync_wave_of(&gate.key))
            .collect();
        if set.is_empty() {
            set.insert(0);
        }
        set
    }
}

/// A dependency cycle: members, each waiting for the next, the last for the first.
#[derive(Clone, Debug, PartialEq)]
pub struct Cycle {
    pub members: Vec<usize>,
    /// Where each member's link to the next is written (`None` for a link it does
    /// not write, as a pod's to its slice).
    pub links: Vec<Option<Span>>,
}

/// A model that waits for another whose objects Argo CD's sync-wave puts after its
/// own: no order honours both.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncConflict {
    /// The member that waits, and its lowest sync-wave.
    pub member: usize,
    pub sync_wave: i64,
    /// The member it waits for, its highest sync-wave, and where the wait is written.
    pub needed: usize,
    pub needed_sync_wave: i64,
    pub span: Span,
}

/// The dependency graph of a repo's models.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workflow {
    pub members: Vec<Member>,
    index: HashMap<ModelId, usize>,
}

/// What a wave waits for before it starts: an object, its rule, and the models that
/// need it.
#[derive(Clone, Debug, PartialEq)]
pub struct WaveGate {
    pub gate: Gate,
    /// Not made by a model of the repo.
    pub external: bool,
    pub needed_by: Vec<String>,
}

impl Workflow {
    /// A workflow of `members` whose `needs` and `requires` are set; waves are
    /// computed by [`Workflow::plan_waves`] once the graph has no cycle.
    pub fn new(members: Vec<Member>) -> Self {
        let index = members.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        Workflow { members, index }
    }

    pub fn member(&self, id: ModelId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// The member that makes the object `key`, if one does.
    pub fn maker_of(&self, key: &ObjectKey) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.objects.iter().any(|gate| gate.key == *key))
    }

    /// The wave of a model's objects of an Argo CD sync-wave (0 for a model that
    /// takes no part).
    pub fn wave_of(&self, id: ModelId, sync_wave: i64) -> usize {
        self.member(id).map_or(0, |i| {
            let member = &self.members[i];
            member.waves.get(&sync_wave).copied().unwrap_or(member.wave)
        })
    }

    /// How many waves there are (at least one).
    pub fn wave_count(&self) -> usize {
        let last = self.members.iter().flat_map(|m| m.waves.values()).max();
        last.map_or(1, |w| w + 1)
    }

    /// Whether any model waits for anything, or objects come in several sync-waves:
    /// without, there is one wave and nothing to draw.
    pub fn has_dependencies(&self) -> bool {
        self.wave_count() > 1 || self.members.iter().any(|m| !m.needs.is_empty())
    }

    /// The links of a member, explicit (`depends_on`) and implicit (`requires`),
    /// each with where it is written.
    fn links(&self, member: usize) -> impl Iterator<Item = (usize, Option<Span>)> + '_ {
        let m = &self.members[member];
        let needs = m.needs.iter().filter_map(|n| match n {
            Need::Model { member, span } => Some((*member, Some(*span))),
            Need::Object { .. } => None,
        });
        needs.chain(m.requires.iter().map(|r| (*r, None)))
    }

    /// Every dependency cycle, one per set of members, each starting at its member
    /// written first.
    pub fn cycles(&self) -> Vec<Cycle> {
        #[derive(Clone, Copy, PartialEq)]
        enum Color {
            White,
            Gray,
            Black,
        }
        let n = self.members.len();
        let mut color = vec![Color::White; n];
        let mut found: BTreeMap<BTreeSet<usize>, Cycle> = BTreeMap::new();
        for start in 0..n {
            if color[start] != Color::White {
                continue;
            }
            // Iterative DFS: the path, and for each member on it the links not yet
            // followed.
            let mut path: Vec<(usize, Option<Span>)> = vec![(start, None)];
            let mut pending: Vec<Vec<(usize, Option<Span>)>> = vec![self.links(start).collect()];
            color[start] = Color::Gray;
            while let Some(next) = pending.last_mut() {
                let Some((to, span)) = next.pop() else {
                    let (done, _) = path.pop().unwrap_or((start, None));
                    color[done] = Color::Black;
                    pending.pop();
                    continue;
                };
                match color[to] {
                    Color::White => {
                        color[to] = Color::Gray;
                        path.push((to, span));
                        pending.push(self.links(to).collect());
                    }
                    Color::Gray => {
                        let from = path.iter().position(|(m, _)| *m == to).unwrap_or(0);
                        let mut members: Vec<usize> = path[from..].iter().map(|p| p.0).collect();
                        // The link out of each member; the last is the back edge.
                        let mut links: Vec<Option<Span>> =
                            path[from + 1..].iter().map(|p| p.1).collect();
                        links.push(span);
                        let set: BTreeSet<usize> = members.iter().copied().collect();
                        found.entry(set).or_insert_with(|| {
                            let first = (0..members.len())
                                .min_by_key(|i| span_order(&self.members[members[*i]].span))
                                .unwrap_or(0);
                            members.rotate_left(first);
                            links.rotate_left(first);
                            Cycle { members, links }
                        });
                    }
                    Color::Black => {}
                }
            }
        }
        let mut cycles: Vec<Cycle> = found.into_values().collect();
        cycles.sort_by_key(|c| span_order(&self.members[c.members[0]].span));
        cycles
    }

    /// Sets each member's waves: one past the waves of what it waits for, no earlier
    /// than what it requires, and one past every object of a lower Argo CD
    /// sync-wave. The graph must have no cycle; a wait that contradicts the
    /// sync-waves is returned, and the waves are then only bounded.
    pub fn plan_waves(&mut self) -> Option<SyncConflict> {
        // A group: the objects of one member in one sync-wave.
        let mut groups: Vec<(usize, i64)> = Vec::new();
        let mut of_member: Vec<Vec<usize>> = vec![Vec::new(); self.members.len()];
        for (i, member) in self.members.iter().enumerate() {
            for sync_wave in member.sync_wave_set() {
                of_member[i].push(groups.len());
                groups.push((i, sync_wave));
            }
        }
        let mut wave = vec![0usize; groups.len()];
        let mut settled = false;
        // Longest paths: a graph without cycles settles within one round per group.
        for _ in 0..=groups.len() {
            let mut below: BTreeMap<i64, usize> = BTreeMap::new();
            let mut running = 0;
            let mut by_sync: Vec<usize> = (0..groups.len()).collect();
            by_sync.sort_by_key(|g| groups[*g].1);
            for chunk in by_sync.chunk_by(|a, b| groups[*a].1 == groups[*b].1) {
                below.insert(groups[chunk[0]].1, running);
                running = chunk.iter().map(|g| wave[*g] + 1).fold(running, usize::max);
            }
            let mut changed = false;
            for (g, (member, sync_wave)) in groups.iter().enumerate() {
                let m = &self.members[*member];
                let after_needs = m.needs.iter().flat_map(|need| match need {
                    Need::Model { member, .. } => of_member[*member].as_slice(),
                    Need::Object { .. } => &[],
                });
                let after_needs = after_needs.map(|h| wave[*h] + 1);
                let with_requires = m.requires.iter().flat_map(|r| &of_member[*r]);
                let planned = after_needs
                    .chain(with_requires.map(|h| wave[*h]))
                    .chain(below.get(sync_wave).copied())
                    .max()
                    .unwrap_or(0);
                if planned > wave[g] {
                    wave[g] = planned;
                    changed = true;
                }
            }
            if !changed {
                settled = true;
                break;
            }
        }
        for member in &mut self.members {
            member.waves.clear();
        }
        for ((member, sync_wave), w) in groups.into_iter().zip(wave) {
            self.members[member].waves.insert(sync_wave, w);
        }
        for member in &mut self.members {
            member.wave = member.waves.values().copied().min().unwrap_or(0);
        }
        if settled { None } else { self.sync_conflict() }
    }

    /// The first wait for a member whose objects come in a later sync-wave.
    fn sync_conflict(&self) -> Option<SyncConflict> {
        self.members.iter().enumerate().find_map(|(i, member)| {
            let sync_wave = member.sync_wave_set().into_iter().min()?;
            member.needs.iter().find_map(|need| {
                let Need::Model {
                    member: needed,
                    span,
                } = need
                else {
                    return None;
                };
                let needed_sync_wave = self.members[*needed].sync_wave_set().into_iter().max()?;
                (needed_sync_wave > sync_wave).then_some(SyncConflict {
                    member: i,
                    sync_wave,
                    needed: *needed,
                    needed_sync_wave,
                    span: *span,
                })
            })
        })
    }

    /// What must be ready before `wave` starts: the objects of the models its members
    /// wait for, and the objects outside tether they name. With `only`, just for
    /// those members.
    pub fn gates(&self, wave: usize, only: Option<&BTreeSet<usize>>) -> Vec<WaveGate> {
        let mut gates: BTreeMap<Gate, WaveGate> = BTreeMap::new();
        let taken = |(i, m): &(usize, &Member)| m.managed && only.is_none_or(|o| o.contains(i));
        let starting = self
            .members
            .iter()
            .enumerate()
            .filter(taken)
            .filter_map(|(_, m)| {
                let sync_waves: Vec<i64> = m
                    .waves
                    .iter()
                    .filter(|(_, w)| **w == wave)
                    .map(|(s, _)| *s)
                    .collect();
                (!sync_waves.is_empty()).then_some((m, sync_waves))
            });
        for (member, sync_waves) in starting {
            // As in Argo CD, every object of a lower sync-wave is ready first.
            let sync_wave = sync_waves.iter().copied().max().unwrap_or(0);
            let earlier = self
                .members
                .iter()
                .enumerate()
                .filter(taken)
                .flat_map(|(_, m)| {
                    m.objects
                        .iter()
                        .filter(|gate| m.sync_wave_of(&gate.key) < sync_wave)
                });
            for gate in earlier {
                let entry = gates.entry(gate.clone()).or_insert_with(|| WaveGate {
                    gate: gate.clone(),
                    external: false,
                    needed_by: Vec::new(),
                });
                let label = format!("{} (sync-wave {sync_wave})", member.label);
                if !entry.needed_by.contains(&label) {
                    entry.needed_by.push(label);
                }
            }
            for need in &member.needs {
                let (objects, external): (Vec<&Gate>, bool) = match need {
                    Need::Model { member, .. } => {
                        let target = &self.members[*member];
                        (target.objects.iter().collect(), !target.managed)
                    }
                    Need::Object { gate, .. } => (vec![gate], true),
                };
                for gate in objects {
                    let entry = gates.entry(gate.clone()).or_insert_with(|| WaveGate {
                        gate: gate.clone(),
                        external,
                        needed_by: Vec::new(),
                    });
                    if !entry.needed_by.contains(&member.label) {
                        entry.needed_by.push(member.label.clone());
                    }
                }
            }
        }
        gates.into_values().collect()
    }

    /// Every object the (`only`) managed members make, each to be ready by its
    /// built-in rule: what a rollout of the whole plan waits for before it is done.
    pub fn rollout(&self, only: Option<&BTreeSet<usize>>) -> Vec<WaveGate> {
        let mut gates: BTreeMap<Gate, WaveGate> = BTreeMap::new();
        let members = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, m)| m.managed && only.is_none_or(|o| o.contains(i)));
        for (_, member) in members {
            for gate in &member.objects {
                let entry = gates.entry(gate.clone()).or_insert_with(|| WaveGate {
                    gate: gate.clone(),
                    external: false,
                    needed_by: Vec::new(),
                });
                entry.needed_by.push(member.label.clone());
            }
        }
        gates.into_values().collect()
    }

    /// The members `selected` and everything they wait for and require, transitively;
    /// with `skip_dependencies`, the selected members alone.
    pub fn closure(&self, selected: &[usize], skip_dependencies: bool) -> BTreeSet<usize> {
        let mut taken: BTreeSet<usize> = selected.iter().copied().collect();
        if skip_dependencies {
            return taken;
        }
        let mut stack: Vec<usize> = selected.to_vec();
        while let Some(member) = stack.pop() {
            for (to, _) in self.links(member) {
                if taken.insert(to) {
                    stack.push(to);
                }
            }
        }
        taken
    }

    /// The member a selection names: `Kind/name`, or `name` when one model has it.
    pub fn find(&self, selector: &str) -> Result<usize, String> {
        let matching: Vec<usize> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m.label == selector
                    || m.label
                        .split_once('/')
                        .is_some_and(|(_, name)| name == selector)
            })
            .map(|(i, _)| i)
            .collect();
        match matching.as_slice() {
            [only] => Ok(*only),
            [] => {
                let labels = self.members.iter().map(|m| m.label.as_str());
                let hint = crate::diagnostic::suggestion(selector, labels)
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default();
                Err(format!("no model \"{selector}\" makes an object{hint}"))
            }
            several => {
                let labels: Vec<&str> = several
                    .iter()
                    .map(|i| self.members[*i].label.as_str())
                    .collect();
                Err(format!(
                    "\"{selector}\" names several models: write one of {}",
                    labels.join(", ")
                ))
            }
        }
    }

    /// The members that take part in a dependency (wait for something, or are waited
    /// for), and every chart and kustomization: what a graph shows.
    fn in_graph(&self) -> BTreeSet<usize> {
        let mut shown = BTreeSet::new();
        for (i, m) in self.members.iter().enumerate() {
            // A chart or a kustomization is a unit a reader looks for, waits or not.
            // So is a model whose objects carry a sync-wave, or come after one only
            // for a sync-wave's sake.
            let after_sync_waves = m.wave > 0 && m.needs.is_empty() && m.requires.is_empty();
            let ordered = !m.objects.is_empty() && (!m.sync_waves.is_empty() || after_sync_waves);
            if matches!(m.id.kind, Kind::HelmChart | Kind::Kustomization) || ordered {
                shown.insert(i);
            }
            for need in &m.needs {
                shown.insert(i);
                if let Need::Model { member, .. } = need {
                    shown.insert(*member);
                }
            }
        }
        shown
    }

    /// The members a graph shows, by wave (waves without any left out).
    fn shown_by_wave(&self) -> Vec<(usize, Vec<usize>)> {
        let mut waves: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in self.in_graph() {
            waves.entry(self.members[i].wave).or_default().push(i);
        }
        waves.into_iter().collect()
    }

    /// The dependency graph as a Mermaid flowchart (GitHub draws it in Markdown):
    /// one box per wave, an arrow from each model to what it waits for.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart BT\n");
        let node = |i: usize| format!("m{i}");
        for (wave, in_wave) in self.shown_by_wave() {
            out.push_str(&format!("  subgraph wave{wave}[\"wave {}\"]\n", wave + 1));
            for i in in_wave {
                let m = &self.members[i];
                let suffix = if m.managed { "" } else { " (not managed)" };
                out.push_str(&format!(
                    "    {}[\"{}{suffix}\"]\n",
                    node(i),
                    mermaid_text(&m.label)
                ));
            }
            out.push_str("  end\n");
        }
        let mut externals: Vec<&Gate> = Vec::new();
        for need in self.members.iter().flat_map(|m| &m.needs) {
            if let Need::Object { gate, .. } = need
                && !externals.contains(&gate)
            {
                externals.push(gate);
            }
        }
        for (j, gate) in externals.iter().enumerate() {
            let text = mermaid_text(&gate.key.to_string());
            out.push_str(&format!("  x{j}[(\"{text} (in the cluster)\")]\n"));
        }
        for (i, m) in self.members.iter().enumerate() {
            for need in &m.needs {
                let to = match need {
                    Need::Model { member, .. } => node(*member),
                    Need::Object { gate, .. } => {
                        let j = externals.iter().position(|g| *g == gate).unwrap_or(0);
                        format!("x{j}")
                    }
                };
                out.push_str(&format!("  {} --> {to}\n", node(i)));
            }
        }
        out
    }

    /// The dependency graph in Graphviz DOT.
    pub fn dot(&self) -> String {
        let mut out = String::from("digraph tether {\n  rankdir=BT;\n  node [shape=box];\n");
        for (wave, in_wave) in self.shown_by_wave() {
            out.push_str(&format!(
                "  subgraph cluster_wave{wave} {{\n    label=\"wave {}\";\n",
                wave + 1
            ));
            for i in in_wave {
                out.push_str(&format!("    {:?};\n", self.members[i].label));
            }
            out.push_str("  }\n");
        }
        for m in &self.members {
            for need in &m.needs {
                let to = match need {
                    Need::Model { member, .. } => self.members[*member].label.clone(),
                    Need::Object { gate, .. } => format!("{} (in the cluster)", gate.key),
                };
                out.push_str(&format!("  {:?} -> {to:?};\n", m.label));
            }
        }
        out.push_str("}\n");
        out
    }
}

/// A label Mermaid reads as text whatever it holds.
fn mermaid_text(text: &str) -> String {
    text.replace('"', "#quot;")
}

fn span_order(span: &Span) -> (u32, u32) {
    (span.file.0, span.offset)
}
