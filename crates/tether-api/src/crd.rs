//! The CustomResourceDefinitions as the API server is given them. schemars writes the
//! integer formats of Rust's types (`uint32`, `uint64`, …), which OpenAPI does not
//! define: the API server answers every apply of such a CRD with `Warning:
//! unrecognized format "uint32"`, which `tether crd | kubectl apply -f -` shows a
//! newcomer. They are left out; the `minimum: 0` schemars writes beside them keeps
//! what they meant.

use serde_json::Value;

/// The formats schemars writes that Kubernetes does not know.
const RUST_ONLY_FORMATS: [&str; 7] = [
    "uint", "uint8", "uint16", "uint32", "uint64", "int8", "int16",
];

/// Removes, at every depth of `crd`, a `format` that only Rust knows.
pub fn without_rust_formats(crd: &mut Value) {
    match crd {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| RUST_ONLY_FORMATS.contains(&f))
            {
                map.shift_remove("format");
            }
            map.values_mut().for_each(without_rust_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(without_rust_formats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_formats_kubernetes_does_not_know_go() {
        let mut schema = serde_json::json!({"properties": {
            "a": {"type": "integer", "format": "uint32", "minimum": 0.0},
            "b": {"type": "integer", "format": "int64"},
            "c": {"type": "string", "format": "date-time"},
            "d": {"type": "array", "items": {"type": "integer", "format": "uint64", "minimum": 0.0}},
            "format": {"type": "string"}
        }});
        without_rust_formats(&mut schema);
        assert_eq!(
            schema,
            serde_json::json!({"properties": {
                "a": {"type": "integer", "minimum": 0.0},
                "b": {"type": "integer", "format": "int64"},
                "c": {"type": "string", "format": "date-time"},
                "d": {"type": "array", "items": {"type": "integer", "minimum": 0.0}},
                "format": {"type": "string"}
            }})
        );
    }
}
