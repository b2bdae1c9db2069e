//! Normalization of hand-written Kubernetes objects (the content of a
//! KubernetesResourceInstance) into the form the API server stores, so that what
//! tether applies, compares and records is what the server would give back:
//!
//! - explicit nulls dropped (an unset field, as `kubectl apply` reads them);
//! - `status` dropped: the server owns it, and applying it conflicts with the server;
//! - `protocol: TCP` filled in where Kubernetes defaults it, which server-side apply
//!   needs in the lists keyed by (port, protocol);
//! - resource quantities as the server's canonical strings (`cpu: 2` and `2000m` are
//!   `"2"`, `0.5` is `"500m"`, `1024Mi` is `"1Gi"`), for built-in kinds only, whose
//!   schema is known;
//! - a Secret's write-only `stringData` folded into `data`.
//!
//! Placement (a namespace for namespaced kinds, none for cluster-scoped ones) needs the
//! server's discovery for custom kinds: [`place`] takes the answer. Pure.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::k8s::DEFAULT_NAMESPACE;

/// Normalizes one object in place.
pub fn normalize(object: &mut Value) {
    drop_nulls(object);
    let Some(map) = object.as_object_mut() else {
        return;
    };
    map.remove("status");
    let text = |field: &str| map.get(field).and_then(Value::as_str).map(str::to_string);
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return;
    };
    if !is_builtin(&api_version) {
        return;
    }
    match kind.as_str() {
        "Secret" => fold_string_data(map),
        "Service" => default_protocols(object.pointer_mut("/spec/ports")),
        "Endpoints" => {
            for subset in items(object.get_mut("subsets")) {
                default_protocols(subset.get_mut("ports"));
            }
        }
        "NetworkPolicy" => {
            for direction in ["ingress", "egress"] {
                for rule in items(object.pointer_mut(&format!("/spec/{direction}"))) {
                    default_protocols(rule.get_mut("ports"));
                }
            }
        }
        "PersistentVolumeClaim" => canonical_resources(object.pointer_mut("/spec/resources")),
        "PersistentVolume" => canonical_quantities(object.pointer_mut("/spec/capacity")),
        "ResourceQuota" => canonical_quantities(object.pointer_mut("/spec/hard")),
        "LimitRange" => {
            for limit in items(object.pointer_mut("/spec/limits")) {
                for field in [
                    "max",
                    "min",
                    "default",
                    "defaultRequest",
                    "maxLimitRequestRatio",
                ] {
                    canonical_quantities(limit.get_mut(field));
                }
            }
        }
        kind => {
            if let Some(spec) = pod_spec_path(kind).and_then(|p| object.pointer_mut(p)) {
                normalize_pod_spec(spec);
            }
            if kind == "StatefulSet" {
                for claim in items(object.pointer_mut("/spec/volumeClaimTemplates")) {
                    canonical_resources(claim.pointer_mut("/spec/resources"));
                }
            }
        }
    }
}

/// Where a namespaced object without a namespace goes, and a cluster-scoped object
/// loses the namespace written on it (the server ignores it, and it would make the
/// object's identity differ from the server's). `namespaced` is the server's answer
/// for the kind. Returns the object's namespace.
pub fn place(object: &mut Value, namespaced: bool) -> Option<String> {
    let metadata = object.get_mut("metadata")?.as_object_mut()?;
    if !namespaced {
        metadata.remove("namespace");
        return None;
    }
    let written = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let namespace = written.unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    metadata.insert("namespace".into(), Value::String(namespace.clone()));
    Some(namespace)
}

/// Kinds of the core API and of the groups Kubernetes itself serves (`apps`,
/// `batch`, `networking.k8s.io`, …): their schema, hence their quantities and
/// defaults, are known. Custom resources are left as written.
fn is_builtin(api_version: &str) -> bool {
    match api_version.split_once('/') {
        None => true,
        Some((group, _)) => !group.contains('.') || group.ends_with(".k8s.io"),
    }
}

fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn items(list: Option<&mut Value>) -> impl Iterator<Item = &mut Value> {
    list.and_then(Value::as_array_mut)
        .into_iter()
        .flat_map(|items| items.iter_mut())
}

/// `protocol: TCP` on every item of a port list that does not name one.
fn default_protocols(ports: Option<&mut Value>) {
    for port in items(ports) {
        if let Some(port) = port.as_object_mut() {
            port.entry("protocol")
                .or_insert_with(|| Value::String("TCP".into()));
        }
    }
}

/// The pod spec of a workload kind.
fn pod_spec_path(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Pod" => "/spec",
        "PodTemplate" => "/template/spec",
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => "/spec/template/spec",
        "CronJob" => "/spec/jobTemplate/spec/template/spec",
        _ => return None,
    })
}

fn normalize_pod_spec(spec: &mut Value) {
    for group in ["containers", "initContainers", "ephemeralContainers"] {
        for container in items(spec.get_mut(group)) {
            default_protocols(container.get_mut("ports"));
            canonical_resources(container.get_mut("resources"));
        }
    }
    canonical_quantities(spec.get_mut("overhead"));
    for volume in items(spec.get_mut("volumes")) {
        if let Some(limit) = volume.pointer_mut("/emptyDir/sizeLimit") {
            canonical_quantity_value(limit, NANO);
        }
        if let Some(claim) = volume.pointer_mut("/ephemeral/volumeClaimTemplate/spec/resources") {
            canonical_resources(Some(claim));
        }
    }
}

/// `limits` and `requests` of a ResourceRequirements.
fn canonical_resources(resources: Option<&mut Value>) {
    let Some(resources) = resources else {
        return;
    };
    for field in ["limits", "requests"] {
        canonical_quantities(resources.get_mut(field));
    }
}

/// Every value of a map of quantities.
fn canonical_quantities(map: Option<&mut Value>) {
    if let Some(map) = map.and_then(Value::as_object_mut) {
        for value in map.values_mut() {
            canonical_quantity_value(value, MILLI);
        }
    }
}

fn canonical_quantity_value(value: &mut Value, round_to: i32) {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return,
    };
    // What the server cannot parse stays as written: it refuses it with its own message.
    *value = Value::String(canonical_quantity_rounded(&text, round_to).unwrap_or(text));
}

fn fold_string_data(secret: &mut Map<String, Value>) {
    let Some(Value::Object(string_data)) = secret.remove("stringData") else {
        return;
    };
    let data = secret
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(data) = data.as_object_mut() else {
        return;
    };
    for (key, value) in string_data {
        let text = match value {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        data.insert(key, Value::String(encoded));
    }
}

/// How a quantity was written, which decides how the server prints it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `Ki`, `Mi`, … (powers of 1024).
    BinarySi,
    /// No suffix, or `n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`.
    DecimalSi,
    /// `e3`, `E-6`.
    DecimalExponent,
}

const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

/// A resource quantity of a `ResourceList` (limits, requests, a quota's `hard`, …) as
/// the server stores it: see [`canonical_quantity_rounded`], rounded up to milli-units
/// (the server's defaulting of resource lists does that).
pub fn canonical_quantity(text: &str) -> Option<String> {
    canonical_quantity_rounded(text, MILLI)
}

const MILLI: i32 = -3;
const NANO: i32 = -9;

/// A Kubernetes resource quantity as the server prints it back
/// (`resource.Quantity`): a spelling that is already canonical is kept as written
/// (`1E3`, `+3`, `123Mi`); any other is rounded up to a multiple of 10^`round_to` and
/// spelled with the largest suffix of its format that keeps the number whole
/// (`2000m` → `2`, `0.5` → `500m`, `1024Mi` → `1Gi`). `None` when it is not a quantity,
/// or too large to settle here (the server then decides).
pub fn canonical_quantity_rounded(text: &str, round_to: i32) -> Option<String> {
    let parsed = ParsedQuantity::parse(text)?;
    if parsed.keeps_spelling() && parsed.scale >= round_to {
        return Some(text.to_string());
    }
    let mut mantissa: i128 = parsed.digits.parse().ok()?;
    let mut scale = parsed.scale;
    if parsed.binary_power > 0 {
        mantissa = mantissa.checked_mul(1i128.checked_shl(parsed.binary_power)?)?;
    }
    if mantissa == 0 {
        return Some("0".into());
    }
    // Round up (away from zero), as the server does for positive amounts.
    let round_to = round_to.max(NANO);
    if scale < round_to {
        let divisor = 10i128.checked_pow(u32::try_from(round_to - scale).ok()?)?;
        mantissa = mantissa / divisor + i128::from(mantissa % divisor != 0);
        scale = round_to;
    }
    if parsed.negative {
        mantissa = -mantissa;
    }
    // Quantities beyond what int64 holds take the server's other code path.
    if i64::try_from(mantissa).is_err() || scale > 18 {
        return None;
    }
    let power_of_ten = 10i128.checked_pow(scale.unsigned_abs())?;
    let whole_value = match scale >= 0 {
        true => mantissa.checked_mul(power_of_ten),
        false => (mantissa % power_of_ten == 0).then(|| mantissa / power_of_ten),
    };
    let format = match (parsed.format, whole_value) {
        (Format::BinarySi, Some(v)) if v.abs() >= 1024 => Format::BinarySi,
        (Format::BinarySi, _) => Format::DecimalSi,
        (other, _) => other,
    };
    Some(match (format, whole_value) {
        (Format::BinarySi, Some(value)) => binary_spelling(value),
        _ => decimal_spelling(mantissa, scale, format),
    })
}

/// Are two spellings the same quantity (`1e+09` and `1G`, `0.5` and `500m`)?
pub fn same_quantity(a: &str, b: &str) -> bool {
    let value = |text: &str| {
        let parsed = ParsedQuantity::parse(text)?;
        let mut mantissa: i128 = parsed.digits.parse().ok()?;
        mantissa = mantissa.checked_mul(1i128.checked_shl(parsed.binary_power)?)?;
        let mut scale = parsed.scale;
        while mantissa != 0 && mantissa % 10 == 0 {
            mantissa /= 10;
            scale += 1;
        }
        match mantissa {
            0 => Some((0, 0)),
            m if parsed.negative => Some((-m, scale)),
            m => Some((m, scale)),
        }
    };
    value(a).is_some_and(|v| Some(v) == value(b))
}

/// A quantity read the way `resource.ParseQuantity` reads it:
/// value = `digits` × 10^`scale` × 2^`binary_power`.
struct ParsedQuantity {
    negative: bool,
    /// The whole part without leading zeros (at least `0`).
    whole: String,
    fraction: String,
    digits: String,
    scale: i32,
    binary_power: u32,
    format: Format,
}

impl ParsedQuantity {
    fn parse(text: &str) -> Option<Self> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return None;
        }
        let whole = match whole.trim_start_matches('0') {
            "" => "0",
            stripped => stripped,
        };
        let fraction_digits = i32::try_from(fraction.len()).ok()?;
        let (format, exponent, binary_power) =
            if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
                (Format::DecimalSi, *e, 0)
            } else if let Some((_, p)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
                (Format::BinarySi, 0, *p)
            } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
                (Format::DecimalExponent, e.parse::<i32>().ok()?, 0)
            } else {
                return None;
            };
        Some(ParsedQuantity {
            negative,
            whole: whole.to_string(),
            fraction: fraction.to_string(),
            digits: format!("{whole}{fraction}"),
            scale: exponent - fraction_digits,
            binary_power,
            format,
        })
    }

    /// Does the server keep this spelling as written? (Its parser's fast path keeps a
    /// string that is "in canonical form already".)
    fn keeps_spelling(&self) -> bool {
        let digit_count = self.whole.len() + self.fraction.len();
        match self.format {
            Format::BinarySi => {
                let precision = 15 - digit_count as i64 - (self.binary_power as i64 * 3 / 10) - 1;
                let value: Option<i64> = self.whole.parse().ok();
                self.fraction.is_empty()
                    && precision >= 0
                    && self.binary_power.is_multiple_of(10)
                    && value.is_some_and(|v| v & 0x07 != 0)
            }
            Format::DecimalSi | Format::DecimalExponent => {
                digit_count <= 18
                    && self.scale >= NANO
                    && self.scale % 3 == 0
                    && !self.digits.ends_with("000")
                    && !self.digits.starts_with('0')
            }
        }
    }
}

fn binary_spelling(mut value: i128) -> String {
    let mut power = 0;
    while value % 1024 == 0 && power < BINARY_SUFFIXES.len() {
        value /= 1024;
        power += 1;
    }
    let suffix = match power {
        0 => "",
        p => BINARY_SUFFIXES[p - 1].0,
    };
    format!("{value}{suffix}")
}

fn decimal_spelling(mut mantissa: i128, mut exponent: i32, format: Format) -> String {
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    // Down to a multiple of three, as Go's truncated remainder leaves it.
    match exponent % 3 {
        1 | -2 => {
            mantissa *= 10;
            exponent -= 1;
        }
        2 | -1 => {
            mantissa *= 100;
            exponent -= 2;
        }
        _ => {}
    }
    let suffix = match format {
        Format::DecimalExponent if exponent == 0 => String::new(),
        Format::DecimalExponent => format!("e{exponent}"),
        _ => match DECIMAL_SUFFIXES.iter().find(|(_, e)| *e == exponent) {
            Some((suffix, _)) => (*suffix).to_string(),
            None => format!("e{exponent}"),
        },
    };
    format!("{mantissa}{suffix}")
}
