//! Property tests: no input panics the loader, the model reader or the resolver, and
//! whatever validates also renders. Case counts are printed (`--nocapture`) and can be
//! raised with PROPTEST_CASES.

use proptest::prelude::*;
use tether_core::ownership::Inventory;
use tether_core::render::render;
use tether_core::source::{SourceFile, SourceFiles};

fn run(texts: &[String]) {
    let files = SourceFiles::from_files(
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| SourceFile::new(format!("f{i}.yaml"), t.clone()))
            .collect(),
    );
    let analysis = tether_core::analyze(&files);
    // Every diagnostic points inside its file.
    let plain = analysis.diagnostics.render_plain(&files);
    for line in plain.lines().filter(|l| !l.starts_with(' ')) {
        let mut parts = line.splitn(4, ':');
        let file = parts.next().unwrap();
        let line_no: usize = parts.next().unwrap().parse().unwrap();
        assert!(file.starts_with('f'), "{line}");
        let text = &texts[file[1..file.find('.').unwrap()].parse::<usize>().unwrap()];
        assert!(
            line_no >= 1 && line_no <= text.lines().count().max(1) + 1,
            "{line}"
        );
    }
    if let Some(graph) = &analysis.graph {
        let objects = render(graph, &files, &Inventory::default());
        assert!(
            objects
                .iter()
                .all(|o| !o.name.is_empty() && !o.kind.is_empty())
        );
    }
}

/// Lines built from the words models are made of, so that generated documents often
/// get past the parser and into the model reader and resolver.
fn model_like() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "kind",
        "name",
        "slice",
        "image",
        "trust_domain",
        "owner",
        "tag",
        "data",
        "service",
        "internal_port",
        "external_port",
        "controller_kind",
        "xos_managed",
        "enabled",
        "resource_definition",
        "config",
        "secret",
        "mount_path",
        "service_instance",
        "principal",
        "default_image",
        "protocol",
        "pod_ip",
        "apiVersion",
        "- name",
        "on",
        "0755",
    ]);
    let value = prop::sample::select(vec![
        "Slice",
        "TrustDomain",
        "KubernetesServiceInstance",
        "Image",
        "KubernetesService",
        "KubernetesConfigMap",
        "KubernetesSecret",
        "Service",
        "ServicePort",
        "Principal",
        "KubernetesResourceInstance",
        "KubernetesConfigVolumeMount",
        "demo",
        "kubernetes",
        "nginx",
        "nginx:1.25",
        "demo/x",
        "yes",
        "on",
        "0755",
        "3.10",
        "80",
        "30080",
        "70000",
        "true",
        "false",
        "~",
        "''",
        "\"",
        "[",
        "{",
        "|",
        ">",
        "'{\"a\": 1}'",
        "'{bad'",
        "Deployment",
        "Job",
        "none",
        "/etc/x",
        "..",
        "10.0.0.1",
        "*anchor",
        "&anchor x",
        "!!str 5",
        "\t",
        "é",
        "",
    ]);
    let line = (0usize..6, key, value)
        .prop_map(|(indent, k, v)| format!("{}{k}: {v}", "  ".repeat(indent)));
    let separator = Just("---".to_string());
    prop::collection::vec(prop_oneof![8 => line, 1 => separator], 0..40)
        .prop_map(|lines| lines.join("\n"))
}

fn case_count() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: case_count(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        run(&[text]);
    }

    #[test]
    fn model_like_repos_never_panic(texts in prop::collection::vec(model_like(), 1..4)) {
        run(&texts);
    }

    #[test]
    fn mutated_examples_never_panic(
        file in 0usize..7,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>(), any::<bool>()), 1..8),
    ) {
        let files = tether_engine::directory::read_models_dir(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models"),
        ).unwrap();
        let mut texts: Vec<String> = files.iter().map(|(_, f)| f.text.clone()).collect();
        let text = &mut texts[file % files.len()];
        for (at, c, insert) in edits {
            let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
            let i = boundaries[at.index(boundaries.len())];
            if insert || i == text.len() {
                text.insert(i, c);
            } else {
                text.remove(i);
            }
        }
        run(&texts);
    }
}

#[test]
fn report_case_counts() {
    println!("loader properties: 3 properties x {} cases", case_count());
}
